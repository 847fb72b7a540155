// Command publish writes every module of a source tree, at one version, into
// a directory laid out as a GOPROXY serves it (MODULE/@v/list, VERSION.info,
// VERSION.mod, VERSION.zip), so that GOPROXY=file://DIR installs the tree as
// if each module had been tagged. scripts/release-check.sh runs it on a
// `git archive` of the committed tree.
//
// Usage:
//
//	go run ./lab/internal/publish -tree DIR -out PROXYDIR [-version v0.1.0] [-time RFC3339]
//
// Modules are the directories with a go.mod whose module path is the tree's
// root module path or under it (a testdata module such as example.com/... is
// not published). The zips are made by golang.org/x/mod/zip, which leaves out
// nested modules and checks every file name and size as the go command does.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	tree := flag.String("tree", "", "the source tree (its root holds the root module's go.mod)")
	out := flag.String("out", "", "the proxy directory to write (created; existing versions are replaced)")
	version := flag.String("version", "v0.1.0", "the version every module is published at")
	stamp := flag.String("time", "", "the versions' time, RFC 3339 (default: now)")
	flag.Parse()
	if *tree == "" || *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: publish -tree DIR -out PROXYDIR [-version v0.1.0] [-time RFC3339]")
		os.Exit(2)
	}
	t := time.Now().UTC()
	if *stamp != "" {
		var err error
		if t, err = time.Parse(time.RFC3339, *stamp); err != nil {
			fmt.Fprintf(os.Stderr, "publish: -time: %v\n", err)
			os.Exit(2)
		}
	}
	mods, err := publish(*tree, *out, *version, t)
	if err != nil {
		fmt.Fprintf(os.Stderr, "publish: %v\n", err)
		os.Exit(1)
	}
	for _, m := range mods {
		fmt.Printf("%s@%s\n", m, *version)
	}
}

// publish writes every module of tree at version into the proxy directory out
// and returns their paths, sorted.
func publish(tree, out, version string, t time.Time) ([]string, error) {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return nil, fmt.Errorf("version %q is not a canonical semantic version (vX.Y.Z)", version)
	}
	root, err := modulePath(filepath.Join(tree, "go.mod"))
	if err != nil {
		return nil, err
	}
	dirs := map[string]string{} // module path -> directory
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "go.mod" {
			return err
		}
		mp, err := modulePath(p)
		if err != nil {
			return err
		}
		if mp != root && !strings.HasPrefix(mp, root+"/") {
			return nil // a test fixture's module, not part of the release
		}
		if prev, dup := dirs[mp]; dup {
			return fmt.Errorf("module %s is declared twice: %s and %s", mp, prev, filepath.Dir(p))
		}
		dirs[mp] = filepath.Dir(p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(dirs))
	for mp := range dirs {
		paths = append(paths, mp)
		if err := writeVersion(out, module.Version{Path: mp, Version: version}, dirs[mp], t); err != nil {
			return nil, fmt.Errorf("%s: %w", mp, err)
		}
	}
	sort.Strings(paths)
	return paths, nil
}

// modulePath reads the module path declared by the go.mod file at p.
func modulePath(p string) (string, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	mp := modfile.ModulePath(data)
	if mp == "" {
		return "", fmt.Errorf("%s: no module directive", p)
	}
	return mp, nil
}

// writeVersion writes m's .info, .mod and .zip from dir, and adds m's version
// to the module's list.
func writeVersion(out string, m module.Version, dir string, t time.Time) error {
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{m.Version, t.UTC()})
	if err != nil {
		return err
	}
	var zip bytes.Buffer
	if err := modzip.CreateFromDir(&zip, m, dir); err != nil {
		return fmt.Errorf("module zip: %w", err)
	}
	for ext, data := range map[string][]byte{".info": info, ".mod": gomod, ".zip": zip.Bytes()} {
		if err := os.WriteFile(filepath.Join(vdir, m.Version+ext), data, 0o644); err != nil {
			return err
		}
	}
	return addToList(filepath.Join(vdir, "list"), m.Version)
}

// addToList adds version to the list file at p, once, sorted by semver.
func addToList(p, version string) error {
	data, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	for _, v := range versions {
		if v == version {
			return nil
		}
	}
	versions = append(versions, version)
	semver.Sort(versions)
	return os.WriteFile(p, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
