package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// suite is a package of pgx's module whose tests run plain and guarded.
type suite struct {
	name string // as printed and as given to -suites
	dir  string // the package's directory in the module, "." for the root
	// needs is the entry point the suite cannot be guarded without: the
	// one that opens nearly every connection of its tests.
	needs string
	// undeclared: the guarded run leaves the pool mode to detection on
	// every target, with or without -detect.
	undeclared bool
}

// The suites. stdlib opens nearly every database with stdlib.OpenDB, pgxpool
// every pool with pgxpool.New or NewWithConfig, pgx's root package its
// connections with pgx.Connect, pgx.ConnectConfig and pgxtest (which calls
// pgx.ConnectConfig), pgconn with pgconn.Connect and ConnectConfig.
var suites = []suite{
	{name: "stdlib", dir: "stdlib", needs: "ConfigureConn"},
	{name: "pgxpool", dir: "pgxpool", needs: "ConfigurePool"},
	{name: "pgx", dir: ".", needs: "ConfigureConn", undeclared: true},
	{name: "pgconn", dir: "pgconn", needs: "ConfigurePgconn", undeclared: true},
}

// supportPackages are the packages of pgx's module that only tests import
// and that open connections themselves (pgxtest's ConnTestRunner calls
// pgx.ConnectConfig): their own files are adapted like test files in the
// guarded copy.
var supportPackages = []string{"pgxtest"}

// pkgPath is the suite's import path, as go test -json names it.
func (s suite) pkgPath() string {
	if s.dir == "." {
		return pathPgx
	}
	return pathPgx + "/" + s.dir
}

// available reports whether api has the entry point s needs.
func (s suite) available(api API) bool {
	switch s.needs {
	case "ConfigureConn":
		return api.ConfigureConn
	case "ConfigurePool":
		return api.ConfigurePool
	case "ConfigurePgconn":
		return api.ConfigurePgconn
	}
	return false
}

// selectSuites returns the suites named in the comma-separated list, all of
// them for "".
func selectSuites(list string) ([]suite, error) {
	if list == "" {
		return suites, nil
	}
	var out []suite
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, s := range suites {
			if s.name == strings.TrimSpace(name) {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-suites: no suite %q (the suites: %s)", name, strings.Join(suiteNames(suites), ", "))
		}
	}
	return out, nil
}

func suiteNames(ss []suite) []string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.name
	}
	return names
}

// goCmd runs the go command in dir with env, returning its combined output.
func goCmd(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out, nil
}

// pgxModuleDir returns where the module cache holds the pgx v5 version that
// the repository's go.mod requires.
func pgxModuleDir(ctx context.Context, root string, env []string) (dir, version string, err error) {
	out, err := goCmd(ctx, root, env, "list", "-m", "-f", "{{.Dir}} {{.Version}}", "github.com/jackc/pgx/v5")
	if err != nil {
		return "", "", err
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] == "" {
		return "", "", fmt.Errorf("go list -m github.com/jackc/pgx/v5: unexpected output %q (is the module downloaded? go mod download github.com/jackc/pgx/v5)", out)
	}
	return f[0], f[1], nil
}

// goDirective returns the go line of the module in root.
func goDirective(ctx context.Context, root string, env []string) (string, error) {
	out, err := goCmd(ctx, root, env, "mod", "edit", "-json")
	if err != nil {
		return "", err
	}
	var m struct{ Go string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod edit -json: %w", err)
	}
	return m.Go, nil
}

// copyTree copies the directory tree src to dst with writable permissions
// (the module cache is read-only).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil // the module cache holds no links; skip anything odd
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// mergeSums appends to the copy's go.sum the lines of the repository's
// go.sum it lacks, so that pgadvisory's dependencies resolve without asking
// the proxy.
func mergeSums(dst, src string) error {
	have := map[string]bool{}
	old, err := os.ReadFile(dst)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var lines []string
	for _, l := range strings.Split(string(old), "\n") {
		if l = strings.TrimSpace(l); l != "" && !have[l] {
			have[l] = true
			lines = append(lines, l)
		}
	}
	add, err := os.ReadFile(src)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(add))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !have[l] {
			have[l] = true
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	return os.WriteFile(dst, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// exportRev writes the repository's tree at rev to dir (git archive), so
// that the suites test a commit rather than a working tree that other
// changes are passing through.
func exportRev(ctx context.Context, root, rev, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", rev)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	terr := untar(out, dir)
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", rev, err, strings.TrimSpace(stderr.String()))
	}
	return terr
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("git archive: %w", err)
		}
		name := filepath.Clean(h.Name)
		if name == "." || strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			continue
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
}

// tree is one copy of pgx's module.
type tree struct {
	name string // "plain" or "guarded"
	dir  string
	// adapted lists, per suite or support package (in order), what the
	// adaptation rewrote and skipped.
	order     []string
	rewritten map[string]map[string]int
	skipped   map[string]map[string]int
	// untouched lists test files of the package itself (not _test) that
	// cannot import pgadvisory (an import cycle) and stay as they are.
	untouched []string
}

// prepareTree copies pgx's module to dir and points its go.mod at the
// repository, plain or adapted. Both copies get the same go.mod, so that
// both runs build with the same module graph.
func prepareTree(ctx context.Context, name, pgxDir, dir, root, goVersion string, env []string, adapt bool, api API, suites []suite) (*tree, error) {
	t := &tree{name: name, dir: dir, rewritten: map[string]map[string]int{}, skipped: map[string]map[string]int{}}
	if err := copyTree(pgxDir, dir); err != nil {
		return nil, fmt.Errorf("copy %s: %w", pgxDir, err)
	}
	args := []string{"mod", "edit",
		"-require=github.com/pgadvisory/pgadvisory@v0.0.0",
		"-replace=github.com/pgadvisory/pgadvisory=" + root}
	if goVersion != "" {
		args = append(args, "-go="+goVersion)
	}
	if _, err := goCmd(ctx, dir, env, args...); err != nil {
		return nil, err
	}
	if err := mergeSums(filepath.Join(dir, "go.sum"), filepath.Join(root, "go.sum")); err != nil {
		return nil, fmt.Errorf("go.sum: %w", err)
	}
	if !adapt {
		return t, nil
	}
	for _, s := range suites {
		if err := t.adaptPackage(s.name, filepath.Join(dir, s.dir), api, false); err != nil {
			return nil, err
		}
	}
	for _, pkg := range supportPackages {
		if err := t.adaptPackage(pkg, filepath.Join(dir, pkg), api, true); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// adaptPackage adapts the Go files of the package in pkgDir and adds the
// helper file: the external test package's files of a suite, or every
// non-test file of a support package.
func (t *tree) adaptPackage(name, pkgDir string, api API, support bool) error {
	files, err := filepath.Glob(filepath.Join(pkgDir, "*.go"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	t.rewritten[name] = map[string]int{}
	t.skipped[name] = map[string]int{}
	helperPkg := ""
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") == support {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		out, ad, err := AdaptSource(filepath.Base(file), src, api)
		if err != nil {
			return err
		}
		if !support && !strings.HasSuffix(ad.Package, "_test") {
			// The package's own test files: pgadvisory imports
			// this package, so they cannot import pgadvisory.
			if ad.Total() > 0 {
				t.untouched = append(t.untouched, name+"/"+filepath.Base(file))
			}
			continue
		}
		helperPkg = ad.Package
		for k, v := range ad.Rewritten {
			t.rewritten[name][k] += v
		}
		for k, v := range ad.Skipped {
			t.skipped[name][k] += v
		}
		if ad.Total() > 0 {
			if err := os.WriteFile(file, out, 0o644); err != nil {
				return err
			}
		}
	}
	helperName := HelperFileName
	switch {
	case support:
		helperName = SupportHelperFileName
		if helperPkg == "" {
			return fmt.Errorf("%s: no Go files to adapt", name)
		}
	case helperPkg == "":
		return fmt.Errorf("%s: no external test package (package %s_test) to add the helper to", name, filepath.Base(pkgDir))
	}
	t.order = append(t.order, name)
	return os.WriteFile(filepath.Join(pkgDir, helperName), HelperFile(helperPkg, api), 0o644)
}

// summary prints what the adaptation did.
func (t *tree) summary(w io.Writer) {
	for _, suite := range t.order {
		var parts []string
		keys := make([]string, 0, len(t.rewritten[suite]))
		for k := range t.rewritten[suite] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, t.rewritten[suite][k]))
		}
		fmt.Fprintf(w, "  %-8s rewritten: %s\n", suite, orNone(strings.Join(parts, ", ")))
		parts = parts[:0]
		keys = keys[:0]
		for k := range t.skipped[suite] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, t.skipped[suite][k]))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "  %-8s NOT rewritten (API missing): %s\n", suite, strings.Join(parts, ", "))
		}
	}
	if len(t.untouched) > 0 {
		fmt.Fprintf(w, "  left plain (internal test files, cannot import pgadvisory): %s\n", strings.Join(t.untouched, ", "))
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
