package main

import (
	"archive/zip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeTree writes files (slash paths relative to the root) under a new
// temporary directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestPublishLayout(t *testing.T) {
	tree := writeTree(t, map[string]string{
		"go.mod":                          "module example.com/Root\n\ngo 1.25.0\n",
		"root.go":                         "package root\n",
		"sub/go.mod":                      "module example.com/Root/sub\n\ngo 1.25.0\n\nrequire example.com/Root v0.3.0\n",
		"sub/sub.go":                      "package sub\n",
		"sub/testdata/fixture/go.mod":     "module example.org/fixture\n",
		"sub/testdata/fixture/fixture.go": "package fixture\n",
	})
	out := t.TempDir()
	stamp := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	mods, err := publish(tree, out, "v0.3.0", stamp)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.com/Root", "example.com/Root/sub"}; !slices.Equal(mods, want) {
		t.Fatalf("published %q, want %q (the testdata module is not part of the release)", mods, want)
	}

	// Upper case is escaped as the go command asks the proxy for it.
	vdir := filepath.Join(out, "example.com", "!root", "sub", "@v")
	list, err := os.ReadFile(filepath.Join(vdir, "list"))
	if err != nil || string(list) != "v0.3.0\n" {
		t.Errorf("list = %q, %v; want \"v0.3.0\\n\"", list, err)
	}
	var info struct {
		Version string
		Time    time.Time
	}
	data, err := os.ReadFile(filepath.Join(vdir, "v0.3.0.info"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &info); err != nil || info.Version != "v0.3.0" || !info.Time.Equal(stamp) {
		t.Errorf(".info = %s (%v), want version v0.3.0 at %v", data, err, stamp)
	}
	mod, err := os.ReadFile(filepath.Join(vdir, "v0.3.0.mod"))
	if err != nil || !strings.Contains(string(mod), "require example.com/Root v0.3.0") {
		t.Errorf(".mod = %q, %v; want sub's go.mod", mod, err)
	}

	zr, err := zip.OpenReader(filepath.Join(out, "example.com", "!root", "@v", "v0.3.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if want := []string{"example.com/Root@v0.3.0/go.mod", "example.com/Root@v0.3.0/root.go"}; !slices.Equal(names, want) {
		t.Errorf("root zip holds %q, want %q (the nested module left out)", names, want)
	}
}

func TestPublishTwiceListsOnce(t *testing.T) {
	tree := writeTree(t, map[string]string{"go.mod": "module example.com/m\n", "m.go": "package m\n"})
	out := t.TempDir()
	for _, v := range []string{"v0.2.0", "v0.10.0", "v0.2.0"} {
		if _, err := publish(tree, out, v, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	list, err := os.ReadFile(filepath.Join(out, "example.com", "m", "@v", "list"))
	if err != nil || string(list) != "v0.2.0\nv0.10.0\n" {
		t.Errorf("list = %q, %v; want v0.2.0 then v0.10.0, once each", list, err)
	}
}

func TestPublishErrors(t *testing.T) {
	good := writeTree(t, map[string]string{"go.mod": "module example.com/m\n"})
	for _, tc := range []struct {
		name, tree, version, want string
	}{
		{"not canonical", good, "v1.0", "not a canonical semantic version"},
		{"not semver", good, "latest", "not a canonical semantic version"},
		{"no root go.mod", t.TempDir(), "v0.1.0", "go.mod"},
		{"no module directive", writeTree(t, map[string]string{"go.mod": "go 1.25.0\n"}), "v0.1.0", "no module directive"},
		{"declared twice", writeTree(t, map[string]string{
			"go.mod": "module example.com/m\n", "a/go.mod": "module example.com/m/x\n", "b/go.mod": "module example.com/m/x\n",
		}), "v0.1.0", "declared twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := publish(tc.tree, t.TempDir(), tc.version, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("publish: err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
