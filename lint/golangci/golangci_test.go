package golangci_test

import (
	"strings"
	"testing"

	"github.com/golangci/plugin-module-register/register"

	"github.com/pgadvisory/pgadvisory/lint/golangci"
)

func TestRegistered(t *testing.T) {
	newPlugin, err := register.GetPlugin(golangci.Name)
	if err != nil {
		t.Fatal(err)
	}
	// golangci-lint hands settings over as decoded YAML.
	p, err := newPlugin(map[string]any{"skip": []any{"conn"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.GetLoadMode(); got != register.LoadModeTypesInfo {
		t.Errorf("GetLoadMode() = %q, want %q", got, register.LoadModeTypesInfo)
	}
	as, err := p.BuildAnalyzers()
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Name != "pgadvisory" {
		t.Fatalf("BuildAnalyzers() = %v, want the pgadvisory analyzer", as)
	}
	if got := as[0].Flags.Lookup("skip").Value.String(); got != "conn" {
		t.Errorf("skip = %q, want conn from the settings", got)
	}
}

func TestNilSettings(t *testing.T) {
	newPlugin, err := register.GetPlugin(golangci.Name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlugin(nil)
	if err != nil {
		t.Fatalf("no settings: %v", err)
	}
	as, _ := p.BuildAnalyzers()
	if got := as[0].Flags.Lookup("skip").Value.String(); got != "" {
		t.Errorf("skip = %q, want empty", got)
	}
}

func TestBadSettings(t *testing.T) {
	newPlugin, err := register.GetPlugin(golangci.Name)
	if err != nil {
		t.Fatal(err)
	}
	for name, settings := range map[string]any{
		"unknown key":      map[string]any{"skp": []any{"conn"}},
		"unknown category": map[string]any{"skip": []any{"pinned"}},
	} {
		if _, err := newPlugin(settings); err == nil || !strings.HasPrefix(err.Error(), "pgadvisory:") {
			t.Errorf("%s: error = %v, want a pgadvisory: error", name, err)
		}
	}
}
