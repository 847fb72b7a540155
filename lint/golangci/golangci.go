// Package golangci registers the pgadvisory analyzer as a golangci-lint
// module plugin named "pgadvisory". It lives apart from package lint so
// that importing the analyzer does not pull in the plugin registry.
//
// Build a custom golangci-lint (v2; v2.15.0 is tested) with this module
// listed in .custom-gcl.yml, then run `golangci-lint custom` with cgo
// enabled: the analyzer parses SQL with pg_query_go, a cgo package.
//
//	version: v2.15.0
//	plugins:
//	  - module: github.com/pgadvisory/pgadvisory/lint/golangci
//	    import: github.com/pgadvisory/pgadvisory/lint/golangci
//	    version: latest
//
// and enable the linter in .golangci.yml. Settings are a lint.Config;
// an unknown key or category stops golangci-lint with an error:
//
//	version: "2"
//	linters:
//	  enable: [pgadvisory]
//	  settings:
//	    custom:
//	      pgadvisory:
//	        type: module
//	        description: session-level advisory locks in SQL
//	        settings:
//	          skip: [conn]
//
// Findings read "file:line:col: category: message (pgadvisory)", the same
// positions and messages as pgadvisoryvet; golangci-lint's //nolint:pgadvisory
// and the analyzer's //pgadvisory:ignore both silence a line, and
// `golangci-lint run --fix` applies the tx fix (session lock to xact lock).
// e2e.sh in this directory builds such a binary and checks all of this; it
// is manual (it downloads golangci-lint through the module proxy and builds
// it for minutes), not part of make test.
package golangci

import (
	"fmt"

	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

	"github.com/pgadvisory/pgadvisory/lint"
)

// Name is the plugin's name in the registry and in .golangci.yml.
const Name = "pgadvisory"

func init() { register.Plugin(Name, New) }

// Plugin is the golangci-lint module plugin.
type Plugin struct {
	analyzer *analysis.Analyzer
}

var _ register.LinterPlugin = (*Plugin)(nil)

// New builds the plugin from its .golangci.yml settings (a lint.Config:
// {"skip": ["conn", ...]}). Unknown settings and categories are errors.
func New(settings any) (register.LinterPlugin, error) {
	cfg, err := register.DecodeSettings[lint.Config](settings)
	if err != nil {
		return nil, fmt.Errorf("pgadvisory: golangci-lint settings: %w", err)
	}
	a, err := lint.NewAnalyzer(cfg)
	if err != nil {
		return nil, err
	}
	return &Plugin{analyzer: a}, nil
}

// BuildAnalyzers returns the configured analyzer.
func (p *Plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	return []*analysis.Analyzer{p.analyzer}, nil
}

// GetLoadMode tells golangci-lint that the analyzer needs type information.
func (p *Plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
