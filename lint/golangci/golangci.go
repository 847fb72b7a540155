// Package golangci registers the pgadvisory analyzer as a golangci-lint
// module plugin named "pgadvisory". It lives apart from package lint so
// that importing the analyzer does not pull in the plugin registry.
//
// Build a custom golangci-lint with this module listed in .custom-gcl.yml
// and enable the linter in .golangci.yml:
//
//	linters:
//	  enable: [pgadvisory]
//	  settings:
//	    custom:
//	      pgadvisory:
//	        type: module
//	        settings:
//	          skip: [conn]
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
