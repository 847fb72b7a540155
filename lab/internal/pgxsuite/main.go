// Command pgxsuite runs pgx v5's own test suites — stdlib, pgxpool, the root
// package pgx and pgconn — as a compatibility oracle for pgadvisory: plain,
// and adapted to open every connection through pgadvisory, directly against
// PostgreSQL and through PgBouncer in session pooling, in one run. Every test
// that passes plain must pass guarded, except those named in
// expectedDifferences, each with its reason (tests of the hooks the guard
// occupies, of a setting it refuses, and of scripted servers that do not
// answer its detection); the tests that do not are printed, and the exit
// status is 1 when there is any. Such a test is first run again, -reruns
// times on each side (recheck.go): it counts only when it fails guarded more
// often than plain by more than chance explains, as some of pgx's tests pass
// or fail by chance on both.
//
// The guarded stdlib and pgxpool suites declare the pool mode (direct,
// session) unless -detect is given; the guarded pgx and pgconn suites never
// do: the guard finds out itself, through PgBouncer with the admin console's
// credentials.
//
// The suites come from the module cache at run time (the pgx version of the
// repository's go.mod) and are copied to a temporary directory; the copy is
// adapted mechanically (AdaptSource) and pgx's code is never part of this
// repository. The servers come from the repository's harness (package
// pgbouncer). `make pgx-suites` runs it.
//
// Usage, from the repository root:
//
//	go run ./lab/internal/pgxsuite [-suites pgx,pgconn] [-run regexp] [-reruns 10] [-timeout 10m] [-out dir] [-keep]
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
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/internal/spawn"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	_ "github.com/pgadvisory/pgadvisory/pgbouncer/docker" // the Docker back end, where no local servers are installed
)

// target is a server the suites run against.
type target struct {
	name     string // as printed
	bouncer  bool   // PgBouncer (of the cluster's session mode), which a run may need to restart
	dsn      string // PGX_TEST_DATABASE
	poolMode string // declared to pgadvisory in a guarded run that declares it
	admin    string // "user:password" of the admin console, for detection
	addr     string // host:port of the PgBouncer admin is for
}

// env is the environment of a run of the plain or the guarded copy on tg.
func (tg target) env(base []string, guarded, undeclared bool) []string {
	env := append(append([]string(nil), base...), "PGX_TEST_DATABASE="+tg.dsn)
	if guarded {
		env = append(env, tg.guardedEnv(undeclared)...)
	}
	return env
}

// guardedEnv is what the helper files read in a guarded run on tg: the pool
// mode to declare, or (undeclared) the admin credentials for detection.
func (tg target) guardedEnv(undeclared bool) []string {
	switch {
	case !undeclared:
		return []string{PoolModeEnv + "=" + tg.poolMode}
	case tg.admin != "":
		return []string{AdminEnv + "=" + tg.admin, AdminAddrEnv + "=" + tg.addr}
	}
	return nil
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
	suites     string
	reruns     int
}

func main() {
	var f flags
	flag.StringVar(&f.run, "run", "", "only the tests matching this regexp (go test -run)")
	flag.DurationVar(&f.timeout, "timeout", 10*time.Minute, "go test -timeout of one run")
	flag.StringVar(&f.out, "out", "", "directory to keep the go test -json output of every run in")
	flag.BoolVar(&f.keep, "keep", false, "keep the temporary copies of pgx (their path is printed)")
	flag.BoolVar(&f.verbose, "v", false, "print the whole output of every regressed test")
	flag.BoolVar(&f.undeclared, "detect", false, "do not declare the pool mode to pgadvisory in the stdlib and pgxpool suites either; leave it to detection")
	flag.StringVar(&f.suites, "suites", "", "comma-separated suites to run (default all: "+strings.Join(suiteNames(suites), ",")+")")
	flag.StringVar(&f.module, "module", "", "directory of the pgadvisory module under test (default: the repository root)")
	flag.IntVar(&f.reruns, "reruns", 10, "run each test that passes plain and not guarded this many times more on each side; it counts only if it fails guarded more often than chance explains (p ≤ 0.01), and runs 4 times as often again when fewer failures leave that undecided (0: every difference counts)")
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

	suites, err := selectSuites(f.suites)
	if err != nil {
		return fail(err)
	}
	api, err := DetectAPI(module)
	if err != nil {
		return fail(fmt.Errorf("reading the pgadvisory package: %w", err))
	}
	logf("pgx %s from %s; pgadvisory in %s: ConfigureConn=%v ConfigurePool=%v ConfigurePgconn=%v", pgxVersion, pgxDir, module, api.ConfigureConn, api.ConfigurePool, api.ConfigurePgconn)

	plain, err := prepareTree(ctx, "plain", pgxDir, filepath.Join(tmp, "plain"), module, goVersion, copyEnv, false, api, suites)
	if err != nil {
		return fail(err)
	}
	guarded, err := prepareTree(ctx, "guarded", pgxDir, filepath.Join(tmp, "guarded"), module, goVersion, copyEnv, true, api, suites)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "adaptation of pgx %s's test files (guarded copy):\n", pgxVersion)
	guarded.summary(stdout)

	// Which suites can run guarded at all.
	var guardedSuites []suite
	unavailable := map[string]string{}
	for _, s := range suites {
		if s.available(api) {
			guardedSuites = append(guardedSuites, s)
		} else {
			unavailable[s.name] = "pgadvisory." + s.needs + " is not in the root package yet"
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
		var ok []suite
		for _, s := range guardedSuites {
			if p := res[s.pkgPath()]; p != nil && p.BuildFailed != "" {
				buildFailed[s.name] = p.BuildFailed
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
		{name: "pgbouncer-session", dsn: cluster.WideDSN(pgbouncer.Session), poolMode: "session", bouncer: true},
	}
	// Detection proves session pooling through the admin console.
	targets[1].admin = cluster.AdminUser() + ":" + cluster.AdminPassword()
	bouncerCfg, err := pgconn.ParseConfig(targets[1].dsn)
	if err != nil {
		return fail(err)
	}
	targets[1].addr = fmt.Sprintf("%s:%d", bouncerCfg.Host, bouncerCfg.Port)
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
		suites []suite
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

	// The runs: per target, the plain suites in one go test, and the
	// guarded ones in one per pool-mode choice (declared, undeclared).
	type group struct {
		tree       *tree
		suites     []suite
		undeclared bool
	}
	groups := []group{{tree: plain, suites: suites}}
	for _, undeclared := range []bool{false, true} {
		var ss []suite
		for _, s := range guardedSuites {
			if (s.undeclared || f.undeclared) == undeclared {
				ss = append(ss, s)
			}
		}
		if len(ss) > 0 {
			groups = append(groups, group{guarded, ss, undeclared})
		}
	}
	results := map[string]map[string]Run{} // target → "plain"/"guarded" → run
	var notes []string
	for _, tg := range targets {
		results[tg.name] = map[string]Run{plain.name: {}, guarded.name: {}}
		for _, g := range groups {
			if note, err := ensureUp(ctx, cluster, tg, logf); err != nil {
				return fail(err)
			} else if note != "" {
				notes = append(notes, tg.name+": "+note)
			}
			if err := resetDatabase(ctx, cluster, tg.dsn); err != nil {
				return fail(err)
			}
			env := tg.env(copyEnv, g.tree == guarded, g.undeclared)
			label := g.tree.name
			if g.tree == guarded {
				label += map[bool]string{false: " (pool mode declared)", true: " (pool mode undeclared)"}[g.undeclared]
			}
			var raw io.Writer = io.Discard
			if f.out != "" {
				name := tg.name + "-" + g.tree.name
				if g.tree == guarded && g.undeclared {
					name += "-undeclared"
				}
				file, err := os.Create(filepath.Join(f.out, name+".jsonl"))
				if err != nil {
					return fail(err)
				}
				defer file.Close()
				raw = file
			}
			t0 := time.Now()
			res, err := testTree(ctx, g.tree, g.suites, env, f, raw)
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			if res == nil {
				return fail(err)
			}
			logf("%s %s %s: done in %v%s", tg.name, label, strings.Join(suiteNames(g.suites), ","), time.Since(t0).Round(time.Second), errSuffix(err))
			for _, s := range g.suites {
				names := isolatedNames(s, f.run)
				if len(names) == 0 {
					continue
				}
				if note, err := ensureUp(ctx, cluster, tg, logf); err != nil {
					return fail(err)
				} else if note != "" {
					notes = append(notes, fmt.Sprintf("%s, %s, %s: before %s: %s", tg.name, label, s.name, strings.Join(names, ", "), note))
				}
				args := []string{"-count=1", "-timeout", f.timeout.String(), "-run", RunPattern(names)}
				alone, err := goTest(ctx, g.tree, []suite{s}, env, raw, args...)
				if ctx.Err() != nil {
					return fail(ctx.Err())
				}
				logf("%s %s %s: %s alone%s", tg.name, label, s.name, strings.Join(names, ", "), errSuffix(err))
				if q := alone[s.pkgPath()]; q != nil && res[s.pkgPath()] != nil {
					res[s.pkgPath()].Merge(q)
				}
				if note, err := ensureUp(ctx, cluster, tg, logf); err != nil {
					return fail(err)
				} else if note != "" {
					notes = append(notes, fmt.Sprintf("%s, %s, %s: after %s: %s", tg.name, label, s.name, strings.Join(names, ", "), note))
				}
			}
			for _, note := range completeRun(ctx, res, g.tree, g.suites, listed[g.tree.name], env, f, raw, logf) {
				notes = append(notes, fmt.Sprintf("%s, %s, %s: %s", tg.name, label, note.suite, note.text))
			}
			for path, p := range res {
				results[tg.name][g.tree.name][path] = p
			}
		}
	}

	rc, rerunNotes, err := recheckRegressions(ctx, cluster, targets, plain, guarded, guardedSuites, results, copyEnv, f, logf)
	if err != nil {
		return fail(err)
	}
	notes = append(notes, rerunNotes...)
	if len(notes) > 0 {
		fmt.Fprintln(stdout, "\nnotes on the runs:")
		for _, n := range notes {
			fmt.Fprintln(stdout, "  "+n)
		}
	}
	regressed := report(stdout, pgxVersion, suites, targets, results, unavailable, buildFailed, rc, f)
	fmt.Fprintf(stdout, "\nelapsed: %v (%d targets × plain and guarded, go test -p %d)\n", time.Since(start).Round(time.Second), len(targets), parallelPackages)
	switch {
	case len(unavailable) > 0 || len(buildFailed) > 0:
		for _, s := range suites {
			if why, ok := unavailable[s.name]; ok {
				fmt.Fprintf(stdout, "FAIL: the guarded %s suite did not run: %s\n", s.name, why)
			}
			if _, ok := buildFailed[s.name]; ok {
				fmt.Fprintf(stdout, "FAIL: the guarded %s suite does not build (output above)\n", s.name)
			}
		}
		return exitRegression
	case len(regressed) > 0:
		fmt.Fprintf(stdout, "FAIL: %d tests pass with plain pgx and not through pgadvisory (the allow-list apart): %s\n", len(regressed), strings.Join(regressed, "; "))
		return exitRegression
	}
	fmt.Fprintln(stdout, "ok: every test that passes with plain pgx passes through pgadvisory, the allow-list's expected differences apart")
	return exitOK
}

// recheckRegressions runs again the tests of each target and suite that
// passed plain and not guarded (the allow-list apart), f.reruns times on
// each side, and returns the tallies with notes on PgBouncer restarts.
func recheckRegressions(ctx context.Context, cluster *pgbouncer.Cluster, targets []target, plain, guarded *tree, suites []suite,
	results map[string]map[string]Run, copyEnv []string, f flags, logf func(string, ...any)) (Rechecks, []string, error) {
	rc := Rechecks{}
	var notes []string
	if f.reruns <= 0 {
		return rc, nil, nil
	}
	for _, tg := range targets {
		for _, s := range suites {
			names := unexpectedTests(s.name, tg.name, results[tg.name][plain.name][s.pkgPath()], results[tg.name][guarded.name][s.pkgPath()])
			if len(names) == 0 {
				continue
			}
			logf("%s %s: %s passed plain and not guarded; running them %d times more on each side", tg.name, s.name, strings.Join(names, ", "), f.reruns)
			if err := resetDatabase(ctx, cluster, tg.dsn); err != nil {
				return nil, nil, err
			}
			side := func(t *tree, env []string) sideRun {
				return func(ctx context.Context, s suite, names []string) (map[string]bool, error) {
					if note, err := ensureUp(ctx, cluster, tg, logf); err != nil {
						return nil, err
					} else if note != "" {
						notes = append(notes, fmt.Sprintf("%s, %s, %s: rerunning %s: %s", tg.name, t.name, s.name, strings.Join(names, ", "), note))
					}
					res, err := goTest(ctx, t, []suite{s}, env, io.Discard, "-count=1", "-timeout", f.timeout.String(), "-run", RunPattern(names))
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					if res == nil {
						return nil, err
					}
					return failedOf(res[s.pkgPath()], names), nil
				}
			}
			undeclared := s.undeclared || f.undeclared
			got, err := recheckSuite(ctx, s, names, f.reruns,
				side(plain, tg.env(copyEnv, false, undeclared)), side(guarded, tg.env(copyEnv, true, undeclared)))
			if err != nil {
				return nil, nil, err
			}
			for name, r := range got {
				rc[recheckKey{tg.name, s.name, name}] = r
				logf("%s %s %s: %s", tg.name, s.name, name, r)
			}
		}
	}
	return rc, notes, nil
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

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
		case k == "GOWORK" || k == "GOTOOLCHAIN" || k == "PGX_TEST_DATABASE" || k == PoolModeEnv || k == AdminEnv || k == AdminAddrEnv:
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
func goTest(ctx context.Context, t *tree, suites []suite, env []string, raw io.Writer, args ...string) (Run, error) {
	full := append([]string{"test", "-json"}, args...)
	for _, s := range suites {
		full = append(full, "./"+s.dir)
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
				return res, fmt.Errorf("go test: %v: %s", werr, cli.Tail(s, 5))
			}
			return res, fmt.Errorf("go test: %v", werr)
		}
		return nil, fmt.Errorf("go test in %s: %v\n%s", t.dir, werr, stderr.String())
	}
	return res, nil
}

func buildTree(ctx context.Context, t *tree, suites []suite, env []string) (Run, error) {
	res, err := goTest(ctx, t, suites, env, io.Discard, "-count=1", "-run", "^$")
	if res == nil {
		return nil, err
	}
	var msgs []string
	for _, s := range suites {
		if p := res[s.pkgPath()]; p != nil && p.BuildFailed != "" {
			msgs = append(msgs, fmt.Sprintf("%s (%s copy):\n%s", s.name, t.name, p.BuildFailed))
		}
	}
	if len(msgs) > 0 {
		return res, errors.New(strings.Join(msgs, "\n"))
	}
	return res, nil
}

// parallelPackages is go test -p of the timed runs: 1, one suite at a time
// on the shared database and server connections, alike in the plain and the
// guarded runs.
const parallelPackages = 1

// testTree runs suites in t, the isolated tests left out (they run alone
// after it).
func testTree(ctx context.Context, t *tree, suites []suite, env []string, f flags, raw io.Writer) (Run, error) {
	args := []string{"-count=1", "-p", fmt.Sprint(parallelPackages), "-timeout", f.timeout.String()}
	if f.run != "" {
		args = append(args, "-run", f.run)
	}
	var skip []string
	for _, s := range suites {
		skip = append(skip, isolatedNames(s, "")...)
	}
	if len(skip) > 0 {
		args = append(args, "-skip", RunPattern(skip))
	}
	return goTest(ctx, t, suites, env, raw, args...)
}

// isolatedTest is a test that runs alone, after the rest of its suite, on
// every target and in both copies: on PgBouncer it can make the pooler exit,
// which would fail every test that runs after it.
type isolatedTest struct{ suite, test, reason string }

var isolatedTests = []isolatedTest{
	{"pgconn", "TestCancelRequestContextWatcherHandler", "PgBouncer 1.18 exits during it (FATAL in disconnect_client(): bad client state: 0, pgbouncer/pgbouncer#801: a cancel-request client disconnects before PgBouncer has forwarded the cancel)"},
}

// isolatedNames returns the isolated tests of s that match the -run
// pattern run ("" matches all).
func isolatedNames(s suite, run string) []string {
	var names []string
	for _, it := range isolatedTests {
		if it.suite != s.name {
			continue
		}
		if run != "" {
			if ok, err := regexp.MatchString(run, it.test); err != nil || !ok {
				continue
			}
		}
		names = append(names, it.test)
	}
	return names
}

// ensureUp checks that tg answers; a PgBouncer that does not (it exited) is
// started again, and the note says so with the last lines of its log.
func ensureUp(ctx context.Context, c *pgbouncer.Cluster, tg target, logf func(string, ...any)) (string, error) {
	attempt, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := pingDSN(attempt, tg.dsn)
	cancel()
	if err == nil || !tg.bouncer {
		return "", nil
	}
	logs := c.Logs()
	logf("%s does not answer (%v); restarting PgBouncer. Its log:\n%s", tg.name, err, logs)
	if kerr := c.KillBouncer(pgbouncer.Session); kerr != nil {
		logf("stopping the PgBouncer that does not answer: %v", kerr)
	}
	if err := c.StartBouncer(ctx, pgbouncer.Session); err != nil {
		return "", fmt.Errorf("restarting PgBouncer: %w", err)
	}
	note := "PgBouncer had exited and was restarted"
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "FATAL @") { // PgBouncer's own, with its source line
			note += "; its log: " + strings.TrimSpace(l)
		}
	}
	return note, nil
}

// listTests returns the top-level tests of each suite in t matching
// pattern (go test -list).
func listTests(ctx context.Context, t *tree, suites []suite, env []string, pattern string) (map[string][]string, error) {
	if pattern == "" {
		pattern = "."
	}
	res, err := goTest(ctx, t, suites, env, io.Discard, "-count=1", "-list", pattern)
	if res == nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, s := range suites {
		p := res[s.pkgPath()]
		if p == nil {
			continue
		}
		out[s.name] = ListedTests(p.Output)
	}
	return out, nil
}

type runNote struct{ suite, text string }

// completeRun runs again, by name, the listed tests that a run has no
// result for — because the test binary exited (a panic) before them — until
// every one has a result or a round brings none, and merges the results into
// res. It returns what it did, for the report.
func completeRun(ctx context.Context, res Run, t *tree, suites []suite, listed map[string][]string, env []string, f flags, raw io.Writer, logf func(string, ...any)) []runNote {
	var notes []runNote
	for _, s := range suites {
		p := res[s.pkgPath()]
		if p == nil || p.BuildFailed != "" {
			continue
		}
		died, timedOut := Panicked(p), TimedOut(p)
		reruns := 0
		for round := 0; round < 3 && ctx.Err() == nil; round++ {
			missing := Missing(p, listed[s.name])
			if len(missing) == 0 {
				break
			}
			logf("%s (%s): %d tests have no result (the test binary exited); running them again", s.name, t.name, len(missing))
			args := []string{"-count=1", "-p", "1", "-timeout", f.timeout.String(), "-run", RunPattern(missing)}
			again, _ := goTest(ctx, t, []suite{s}, env, raw, args...)
			q := again[s.pkgPath()]
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
			if left := len(Missing(p, listed[s.name])); left > 0 {
				text += fmt.Sprintf("; %d still without a result", left)
			}
			notes = append(notes, runNote{s.name, text})
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
