// Command pgxsuite runs pgx v5's own stdlib and pgxpool test suites as a
// compatibility oracle for pgadvisory: plain, and adapted to open every
// connection through pgadvisory, directly against PostgreSQL and through
// PgBouncer in session pooling, in one run. Every test that passes plain
// must pass guarded; the tests that do not are printed, and the exit status
// is 1 when there is any.
//
// The suites come from the module cache at run time (the pgx version of the
// repository's go.mod) and are copied to a temporary directory; the copy is
// adapted mechanically (AdaptSource) and pgx's code is never part of this
// repository. The servers come from the repository's harness (package
// pgbouncer). `make pgx-suites` runs it.
//
// Usage, from the repository root:
//
//	go run ./lab/internal/pgxsuite [-run regexp] [-timeout 10m] [-out dir] [-keep]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/internal/spawn"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	_ "github.com/pgadvisory/pgadvisory/pgbouncer/docker" // the Docker back end, where no local servers are installed
)

// target is a server the suites run against.
type target struct {
	name     string // as printed
	dsn      string // PGX_TEST_DATABASE
	poolMode string // declared to pgadvisory in the guarded run
	admin    string // "user:password" of the admin console, for detection
}

type flags struct {
	run        string
	timeout    time.Duration
	out        string
	keep       bool
	verbose    bool
	undeclared bool
	module     string
	rev        string
}

func main() {
	var f flags
	flag.StringVar(&f.run, "run", "", "only the tests matching this regexp (go test -run)")
	flag.DurationVar(&f.timeout, "timeout", 3*time.Minute, "go test -timeout of one run (the plain suites take about 20s)")
	flag.StringVar(&f.out, "out", "", "directory to keep the go test -json output of every run in")
	flag.BoolVar(&f.keep, "keep", false, "keep the temporary copies of pgx (their path is printed)")
	flag.BoolVar(&f.verbose, "v", false, "print the whole output of every regressed test")
	flag.BoolVar(&f.undeclared, "detect", false, "do not declare the pool mode to pgadvisory; leave it to detection")
	flag.StringVar(&f.module, "module", "", "directory of the pgadvisory module under test (default: the repository root)")
	flag.StringVar(&f.rev, "rev", "", "test this git revision of the repository (exported with git archive) instead of the working tree")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, f, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK         = 0
	exitRegression = 1 // a regression, or a guarded run that could not run
	exitSetup      = 2 // the oracle itself could not run
)

func run(ctx context.Context, f flags, stdout, stderr io.Writer) int {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "pgx-suites %6.1fs: %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "pgx-suites: %v\n", err)
		return exitSetup
	}

	root, err := os.Getwd()
	if err != nil {
		return fail(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fail(fmt.Errorf("run from the repository root (no go.mod in %s)", root))
	}
	rootEnv := os.Environ()
	copyEnv := childEnv(os.Environ())
	module := root
	if f.module != "" {
		if module, err = filepath.Abs(f.module); err != nil {
			return fail(err)
		}
	}

	pgxDir, pgxVersion, err := pgxModuleDir(ctx, root, rootEnv)
	if err != nil {
		return fail(err)
	}
	goVersion, err := goDirective(ctx, root, rootEnv)
	if err != nil {
		return fail(err)
	}

	tmp, err := os.MkdirTemp("", "pgadvisory-pgxsuite-")
	if err != nil {
		return fail(err)
	}
	if f.keep {
		logf("keeping the copies in %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if f.rev != "" {
		if f.module != "" {
			return fail(errors.New("-rev and -module exclude each other"))
		}
		module = filepath.Join(tmp, "pgadvisory")
		if err := exportRev(ctx, root, f.rev, module); err != nil {
			return fail(err)
		}
		logf("testing pgadvisory at %s (exported to %s)", f.rev, module)
	}

	api, err := DetectAPI(module)
	if err != nil {
		return fail(fmt.Errorf("reading the pgadvisory package: %w", err))
	}
	logf("pgx %s from %s; pgadvisory in %s: ConfigureConn=%v ConfigurePool=%v", pgxVersion, pgxDir, module, api.ConfigureConn, api.ConfigurePool)

	plain, err := prepareTree(ctx, "plain", pgxDir, filepath.Join(tmp, "plain"), module, goVersion, copyEnv, false, api)
	if err != nil {
		return fail(err)
	}
	guarded, err := prepareTree(ctx, "guarded", pgxDir, filepath.Join(tmp, "guarded"), module, goVersion, copyEnv, true, api)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "adaptation of pgx %s's test files (guarded copy):\n", pgxVersion)
	guarded.summary(stdout)

	// Which suites can run guarded at all.
	var guardedSuites []string
	unavailable := map[string]string{}
	for _, s := range suites {
		if ok, missing := suiteNeeds(s, api); ok {
			guardedSuites = append(guardedSuites, s)
		} else {
			unavailable[s] = missing + " is not in the root package yet"
		}
	}

	// Build both copies first (in parallel within go), so that a build
	// failure is reported as such and the timed runs only link.
	logf("building the plain and guarded suites")
	if _, err := buildTree(ctx, plain, suites, copyEnv); err != nil {
		return fail(fmt.Errorf("plain pgx suites do not build: %w", err))
	}
	buildFailed := map[string]string{}
	if len(guardedSuites) > 0 {
		res, err := buildTree(ctx, guarded, guardedSuites, copyEnv)
		if err != nil && res == nil {
			return fail(err)
		}
		var ok []string
		for _, s := range guardedSuites {
			if p := res[pkgPath(s)]; p != nil && p.BuildFailed != "" {
				buildFailed[s] = p.BuildFailed
			} else {
				ok = append(ok, s)
			}
		}
		guardedSuites = ok
	}

	logf("starting PostgreSQL and PgBouncer (session pooling)")
	cluster, err := pgbouncer.Start(ctx,
		pgbouncer.WithModes(pgbouncer.Session),
		pgbouncer.WithWidePoolSize(pgbouncer.MaxWidePoolSize),
		pgbouncer.WithLogf(logf))
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err := cluster.Close(); err != nil {
			logf("stopping the cluster: %v", err)
		}
	}()
	targets := []target{
		{name: "postgres", dsn: cluster.DirectDSN(), poolMode: "direct"},
		// The wide database: pgx's tests open several connections at
		// once, which a pool of 1 in session mode would serialise.
		{name: "pgbouncer-session", dsn: cluster.WideDSN(pgbouncer.Session), poolMode: "session"},
	}
	if f.undeclared {
		for i := range targets {
			targets[i].poolMode = ""
		}
		// Detection proves session pooling through the admin console.
		targets[1].admin = cluster.AdminUser() + ":" + cluster.AdminPassword()
	}
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return fail(err)
		}
	}

	// The tests each copy has, to tell a test that did not run from one
	// that does not exist.
	listed := map[string]map[string][]string{}
	for _, side := range []struct {
		tree   *tree
		suites []string
	}{{plain, suites}, {guarded, guardedSuites}} {
		if len(side.suites) == 0 {
			continue
		}
		l, err := listTests(ctx, side.tree, side.suites, copyEnv, f.run)
		if err != nil {
			return fail(err)
		}
		listed[side.tree.name] = l
	}

	results := map[string]map[string]Run{} // target → "plain"/"guarded" → run
	var notes []string
	for _, tg := range targets {
		results[tg.name] = map[string]Run{}
		for _, side := range []struct {
			tree   *tree
			suites []string
		}{{plain, suites}, {guarded, guardedSuites}} {
			if len(side.suites) == 0 {
				continue
			}
			if err := resetDatabase(ctx, cluster, tg.dsn); err != nil {
				return fail(err)
			}
			env := append(append([]string(nil), copyEnv...), "PGX_TEST_DATABASE="+tg.dsn)
			if side.tree == guarded && tg.poolMode != "" {
				env = append(env, PoolModeEnv+"="+tg.poolMode)
			}
			if side.tree == guarded && tg.admin != "" {
				env = append(env, AdminEnv+"="+tg.admin)
			}
			var raw io.Writer = io.Discard
			if f.out != "" {
				file, err := os.Create(filepath.Join(f.out, tg.name+"-"+side.tree.name+".jsonl"))
				if err != nil {
					return fail(err)
				}
				defer file.Close()
				raw = file
			}
			t0 := time.Now()
			res, err := testTree(ctx, side.tree, side.suites, env, f, raw)
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			if res == nil {
				return fail(err)
			}
			logf("%s %s: done in %v%s", tg.name, side.tree.name, time.Since(t0).Round(time.Second), errSuffix(err))
			for _, note := range completeRun(ctx, res, side.tree, side.suites, listed[side.tree.name], env, f, raw, logf) {
				notes = append(notes, fmt.Sprintf("%s, %s, %s: %s", tg.name, side.tree.name, note.suite, note.text))
			}
			results[tg.name][side.tree.name] = res
		}
	}

	regs := report(stdout, pgxVersion, targets, results, unavailable, buildFailed, f.verbose)
	if len(notes) > 0 {
		fmt.Fprintln(stdout, "\nnotes:")
		for _, n := range notes {
			fmt.Fprintln(stdout, "  "+n)
		}
	}
	fmt.Fprintf(stdout, "\nelapsed: %v (2 targets × plain and guarded, go test -p 1)\n", time.Since(start).Round(time.Second))
	switch {
	case len(unavailable) > 0 || len(buildFailed) > 0:
		for _, s := range suites {
			if why, ok := unavailable[s]; ok {
				fmt.Fprintf(stdout, "FAIL: the guarded %s suite did not run: %s\n", s, why)
			}
			if _, ok := buildFailed[s]; ok {
				fmt.Fprintf(stdout, "FAIL: the guarded %s suite does not build (output above)\n", s)
			}
		}
		return exitRegression
	case regs > 0:
		fmt.Fprintf(stdout, "FAIL: %d tests pass with plain pgx and not through pgadvisory\n", regs)
		return exitRegression
	}
	fmt.Fprintln(stdout, "ok: every test that passes with plain pgx passes through pgadvisory")
	return exitOK
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func pkgPath(suite string) string { return "github.com/jackc/pgx/v5/" + suite }

// childEnv is the environment of the go commands in the copies: the
// module graph may be completed there (-mod=mod), no workspace, no
// toolchain switch, and no libpq variables that would change what
// pgx.ParseConfig("") means between runs.
func childEnv(base []string) []string {
	var env []string
	goflags := ""
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "GOFLAGS":
			goflags = v
			continue
		case k == "GOWORK" || k == "GOTOOLCHAIN" || k == "PGX_TEST_DATABASE" || k == PoolModeEnv || k == AdminEnv:
			continue
		case strings.HasPrefix(k, "PG") && !strings.HasPrefix(k, "PGADVISORY_") && !strings.HasPrefix(k, "PGX_"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GOFLAGS="+strings.TrimSpace(goflags+" -mod=mod"), "GOWORK=off", "GOTOOLCHAIN=local")
}

// goTest runs `go test -json` in t's directory over suites, in its own
// process group so that an interrupt stops the test binaries too.
func goTest(ctx context.Context, t *tree, suites []string, env []string, raw io.Writer, args ...string) (Run, error) {
	full := append([]string{"test", "-json"}, args...)
	for _, s := range suites {
		full = append(full, "./"+s)
	}
	cmd := exec.Command("go", full...)
	cmd.Dir = t.dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := spawn.Start(cmd); err != nil {
		return nil, err
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// The group we started: go and its test binaries.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-stopped:
		}
	}()
	res, perr := ParseEvents(io.TeeReader(stdout, raw))
	werr := cmd.Wait()
	close(stopped)
	if perr != nil {
		return res, perr
	}
	if werr != nil {
		var exit *exec.ExitError
		if errors.As(werr, &exit) && len(res) > 0 {
			// go test exits 1 when a test fails: that is a result.
			if s := strings.TrimSpace(stderr.String()); s != "" {
				return res, fmt.Errorf("go test: %v: %s", werr, tail(s, 5))
			}
			return res, fmt.Errorf("go test: %v", werr)
		}
		return nil, fmt.Errorf("go test in %s: %v\n%s", t.dir, werr, stderr.String())
	}
	return res, nil
}

func buildTree(ctx context.Context, t *tree, suites []string, env []string) (Run, error) {
	res, err := goTest(ctx, t, suites, env, io.Discard, "-count=1", "-run", "^$")
	if res == nil {
		return nil, err
	}
	var msgs []string
	for _, s := range suites {
		if p := res[pkgPath(s)]; p != nil && p.BuildFailed != "" {
			msgs = append(msgs, fmt.Sprintf("%s (%s copy):\n%s", s, t.name, p.BuildFailed))
		}
	}
	if len(msgs) > 0 {
		return res, errors.New(strings.Join(msgs, "\n"))
	}
	return res, nil
}

func testTree(ctx context.Context, t *tree, suites []string, env []string, f flags, raw io.Writer) (Run, error) {
	args := []string{"-count=1", "-p", "1", "-timeout", f.timeout.String()}
	if f.run != "" {
		args = append(args, "-run", f.run)
	}
	return goTest(ctx, t, suites, env, raw, args...)
}

// listTests returns the top-level tests of each suite in t matching
// pattern (go test -list).
func listTests(ctx context.Context, t *tree, suites []string, env []string, pattern string) (map[string][]string, error) {
	if pattern == "" {
		pattern = "."
	}
	res, err := goTest(ctx, t, suites, env, io.Discard, "-count=1", "-list", pattern)
	if res == nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, s := range suites {
		p := res[pkgPath(s)]
		if p == nil {
			continue
		}
		out[s] = ListedTests(p.Output)
	}
	return out, nil
}

type runNote struct{ suite, text string }

// completeRun runs again, by name, the listed tests that a run has no
// result for — because the test binary exited (a panic) before them — until
// every one has a result or a round brings none, and merges the results into
// res. It returns what it did, for the report.
func completeRun(ctx context.Context, res Run, t *tree, suites []string, listed map[string][]string, env []string, f flags, raw io.Writer, logf func(string, ...any)) []runNote {
	var notes []runNote
	for _, s := range suites {
		p := res[pkgPath(s)]
		if p == nil || p.BuildFailed != "" {
			continue
		}
		died, timedOut := Panicked(p), TimedOut(p)
		reruns := 0
		for round := 0; round < 3 && ctx.Err() == nil; round++ {
			missing := Missing(p, listed[s])
			if len(missing) == 0 {
				break
			}
			logf("%s (%s): %d tests have no result (the test binary exited); running them again", s, t.name, len(missing))
			args := []string{"-count=1", "-p", "1", "-timeout", f.timeout.String(), "-run", RunPattern(missing)}
			again, _ := goTest(ctx, t, []string{s}, env, raw, args...)
			q := again[pkgPath(s)]
			if q == nil {
				break
			}
			added := p.Merge(q)
			reruns++
			if added == 0 {
				break
			}
		}
		if reruns > 0 || died != "" || len(timedOut) > 0 {
			text := "the test binary exited"
			switch {
			case len(timedOut) > 0:
				text += fmt.Sprintf(" after -timeout %v, hung in %s", f.timeout, strings.Join(timedOut, ", "))
			case died != "":
				text += " in " + died + " (panic)"
			}
			if reruns > 0 {
				text += fmt.Sprintf("; the tests after it ran in %d more go test run(s)", reruns)
			}
			if left := len(Missing(p, listed[s])); left > 0 {
				text += fmt.Sprintf("; %d still without a result", left)
			}
			notes = append(notes, runNote{s, text})
		}
	}
	return notes
}

// resetDatabase recreates the application database between runs, so that
// what one run leaves behind (a table of a failed test) cannot fail the
// next, then waits until dsn answers again.
func resetDatabase(ctx context.Context, c *pgbouncer.Cluster, dsn string) error {
	su, err := url.Parse(c.SuperuserDSN())
	if err != nil {
		return err
	}
	app := strings.TrimPrefix(su.Path, "/")
	su.Path = "/postgres"
	conn, err := pgconn.Connect(ctx, su.String())
	if err != nil {
		return fmt.Errorf("reset database: %w", err)
	}
	defer conn.Close(context.Background())
	owner := pgconnQuoteIdent(c.AppUser())
	for _, stmt := range []string{
		"DROP DATABASE IF EXISTS " + pgconnQuoteIdent(app) + " WITH (FORCE)",
		"CREATE DATABASE " + pgconnQuoteIdent(app) + " OWNER " + owner,
	} {
		if _, err := conn.Exec(ctx, stmt).ReadAll(); err != nil {
			return fmt.Errorf("reset database: %s: %w", stmt, err)
		}
	}
	// PgBouncer notices its server connections were terminated and opens
	// new ones; wait until a client gets through.
	deadline := time.Now().Add(30 * time.Second)
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = pingDSN(attempt, dsn)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				return fmt.Errorf("reset database: %s does not answer: %w", redact(dsn), err)
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func pingDSN(ctx context.Context, dsn string) error {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
	return err
}

func pgconnQuoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(dsn)"
	}
	return u.Redacted()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
