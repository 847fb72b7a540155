package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pkgA = "github.com/jackc/pgx/v5/stdlib"

// events builds `go test -json` lines.
func events(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func TestParseEventsCounts(t *testing.T) {
	in := events(
		`go: downloading github.com/x/y v1.0.0`, // not JSON: ignored
		`{"Action":"start","Package":"`+pkgA+`"}`,
		`{"Action":"run","Package":"`+pkgA+`","Test":"TestA"}`,
		`{"Action":"output","Package":"`+pkgA+`","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"pass","Package":"`+pkgA+`","Test":"TestA","Elapsed":0.01}`,
		`{"Action":"run","Package":"`+pkgA+`","Test":"TestB"}`,
		`{"Action":"run","Package":"`+pkgA+`","Test":"TestB/one"}`,
		`{"Action":"pass","Package":"`+pkgA+`","Test":"TestB/one"}`,
		`{"Action":"run","Package":"`+pkgA+`","Test":"TestB/two"}`,
		`{"Action":"output","Package":"`+pkgA+`","Test":"TestB/two","Output":"    x_test.go:9: boom\n"}`,
		`{"Action":"fail","Package":"`+pkgA+`","Test":"TestB/two"}`,
		`{"Action":"fail","Package":"`+pkgA+`","Test":"TestB"}`,
		`{"Action":"run","Package":"`+pkgA+`","Test":"TestC"}`,
		`{"Action":"skip","Package":"`+pkgA+`","Test":"TestC"}`,
		`{"Action":"run","Package":"`+pkgA+`","Test":"TestD"}`,
		`{"Action":"output","Package":"`+pkgA+`","Output":"panic: runtime error\n"}`,
		`{"Action":"fail","Package":"`+pkgA+`","Elapsed":1}`,
	)
	run, err := ParseEvents(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	p := run[pkgA]
	if p == nil || !p.Failed || p.BuildFailed != "" {
		t.Fatalf("package result %+v", p)
	}
	c := Count(p)
	want := Counts{Pass: 1, Fail: 1, Skip: 1, Incomplete: 1, SubPass: 2, SubFail: 2, SubSkip: 1, SubIncomplete: 1}
	if c != want {
		t.Errorf("Count = %+v, want %+v", c, want)
	}
	if !strings.Contains(p.Tests["TestB/two"].Output, "boom") || !strings.Contains(p.Output, "panic:") {
		t.Errorf("outputs: test %q package %q", p.Tests["TestB/two"].Output, p.Output)
	}
	if got := formatCounts(c); got != "1/1/1 [2/2/1] +1 unfinished" {
		t.Errorf("formatCounts = %q", got)
	}
}

func TestParseEventsBuildFailure(t *testing.T) {
	in := events(
		`{"ImportPath":"github.com/jackc/pgx/v5/stdlib_test [github.com/jackc/pgx/v5/stdlib.test]","Action":"build-output","Output":"# github.com/jackc/pgx/v5/stdlib_test\n"}`,
		`{"ImportPath":"github.com/jackc/pgx/v5/stdlib_test [github.com/jackc/pgx/v5/stdlib.test]","Action":"build-output","Output":"stdlib/sql_test.go:25:2: \"github.com/jackc/pgx/v5/pgxpool\" imported and not used\n"}`,
		`{"ImportPath":"github.com/jackc/pgx/v5/stdlib_test [github.com/jackc/pgx/v5/stdlib.test]","Action":"build-fail"}`,
		`{"Action":"start","Package":"`+pkgA+`"}`,
		`{"Action":"output","Package":"`+pkgA+`","Output":"FAIL\t`+pkgA+` [build failed]\n"}`,
		`{"Action":"fail","Package":"`+pkgA+`","Elapsed":0,"FailedBuild":"github.com/jackc/pgx/v5/stdlib_test [github.com/jackc/pgx/v5/stdlib.test]"}`,
	)
	run, err := ParseEvents(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	p := run[pkgA]
	if p == nil || !strings.Contains(p.BuildFailed, "imported and not used") {
		t.Fatalf("BuildFailed = %+v", p)
	}
}

func TestParseEventsCapsOutput(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"Action":"run","Package":"p","Test":"TestX"}` + "\n")
	line := `{"Action":"output","Package":"p","Test":"TestX","Output":"` + strings.Repeat("x", 1000) + `\n"}` + "\n"
	for range 100 {
		b.WriteString(line)
	}
	run, err := ParseEvents(&b)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(run["p"].Tests["TestX"].Output); n != maxOutput {
		t.Errorf("output kept %d bytes, want %d", n, maxOutput)
	}
}

func result(tests map[string]Outcome) *PackageResult {
	p := &PackageResult{Tests: map[string]*TestResult{}}
	for name, o := range tests {
		p.Tests[name] = &TestResult{Outcome: o, Output: "out of " + name}
	}
	return p
}

func TestRegressions(t *testing.T) {
	plain := result(map[string]Outcome{
		"TestOK": Pass, "TestBroken": Pass, "TestBroken/sub": Pass, "TestBroken/sub2": Pass,
		"TestPlainFails": Fail, "TestGone": Pass, "TestSkipped": Pass, "TestSkipBoth": Skip, "TestHung": Pass,
	})
	guarded := result(map[string]Outcome{
		"TestOK": Pass, "TestBroken": Fail, "TestBroken/sub": Fail, "TestBroken/sub2": Pass,
		"TestPlainFails": Fail, "TestSkipped": Skip, "TestSkipBoth": Skip, "TestHung": Incomplete,
		"TestOnlyGuarded": Fail,
	})
	regs := Regressions(plain, guarded)
	var got []string
	for _, r := range regs {
		got = append(got, r.Test+"="+string(r.Guarded))
	}
	want := "TestBroken=fail TestBroken/sub=fail TestGone=not run TestHung=incomplete TestSkipped=skip"
	if strings.Join(got, " ") != want {
		t.Errorf("Regressions = %v, want %s", got, want)
	}
	if regs[0].Output != "out of TestBroken" {
		t.Errorf("regression output %q", regs[0].Output)
	}
	groups := groupRegressions(regs)
	if len(groups) != 4 || len(groups[0].subs) != 1 || countTop(regs) != 4 {
		t.Errorf("groups = %+v", groups)
	}
	if Regressions(nil, guarded) != nil {
		t.Error("no plain result: regressions")
	}
	if n := len(Regressions(plain, nil)); n != 7 {
		t.Errorf("guarded did not run: %d regressions, want every plain pass (7)", n)
	}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"=== RUN   TestX\npanic: interface conversion: driver.Conn is *pgadvisory.conn, not *stdlib.Conn [recovered]\n", "panic: interface conversion: driver.Conn is *pgadvisory.conn, not *stdlib.Conn [recovered]"},
		{"=== RUN   TestX\n    sql_test.go:10: \n        \tError Trace:\tsql_test.go:10\n        \tError:      \tReceived unexpected error:\n        \t            \tboom\n        \tTest:       \tTestX\n", "Received unexpected error: boom"},
		{"=== RUN   TestX\n    x_test.go:3: plain message\n--- FAIL: TestX (0.00s)\n", "x_test.go:3: plain message"},
		{"", ""},
	} {
		if got := Reason(tc.out); got != tc.want {
			t.Errorf("Reason(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}

func TestReport(t *testing.T) {
	plain := result(map[string]Outcome{"TestA": Pass, "TestB": Pass, "TestB/x": Pass})
	guarded := result(map[string]Outcome{"TestA": Pass, "TestB": Fail, "TestB/x": Fail})
	guarded.Tests["TestB"].Output = "=== RUN   TestB\n"
	guarded.Tests["TestB/x"].Output = "    Error:  \tnot equal\n"
	// pgconn: one test of the allow-list fails guarded, another test too.
	pgconnPlain := result(map[string]Outcome{"TestConnectWithAfterNetConnect": Pass, "TestC": Pass})
	pgconnGuarded := result(map[string]Outcome{"TestConnectWithAfterNetConnect": Fail, "TestC": Fail})
	pgconnGuarded.Tests["TestConnectWithAfterNetConnect"].Output = "    Error:  \tNot equal\n"
	ss, err := selectSuites("stdlib,pgxpool,pgconn")
	if err != nil {
		t.Fatal(err)
	}
	stdlibS, poolS, pgconnS := ss[0], ss[1], ss[2]
	targets := []target{{name: "postgres"}}
	results := map[string]map[string]Run{"postgres": {
		"plain":   {stdlibS.pkgPath(): plain, poolS.pkgPath(): plain, pgconnS.pkgPath(): pgconnPlain},
		"guarded": {stdlibS.pkgPath(): guarded, pgconnS.pkgPath(): pgconnGuarded},
	}}
	var b strings.Builder
	n := report(&b, "v5.0.0", []suite{stdlibS, poolS, pgconnS}, targets, results, map[string]string{"pgxpool": "pgadvisory.ConfigurePool is missing"}, nil, nil, flags{})
	out := b.String()
	if got := strings.Join(n, "; "); got != "stdlib TestB via postgres; pgconn TestC via postgres" {
		t.Errorf("report's regressions = %q, want TestB and pgconn's TestC:\n%s", got, out)
	}
	if i, j := strings.Index(out, "expected differences"), strings.Index(out, "regressions: stdlib"); i < 0 || j < i {
		t.Errorf("the regressions are not printed last, after the allow-list:\n%s", out)
	}
	for _, want := range []string{
		"stdlib   postgres  declared    2/0/0 [3/0/0]  1/1/0 [1/2/0]  1            0",
		"pgxpool  postgres  declared    2/0/0 [3/0/0]  not run        -            -",
		"pgconn   postgres  undeclared  2/0/0 [2/0/0]  0/2/0 [0/2/0]  1            1",
		"pgxpool guarded: not run: pgadvisory.ConfigurePool is missing",
		"regressions: stdlib via postgres",
		"TestB", "x: not equal (+1 subtests)",
		"regressions: pgconn via postgres",
		"pgconn TestConnectWithAfterNetConnect — asserts",
		"postgres fail: Not equal",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "  TestConnectWithAfterNetConnect  ") || strings.Contains(out, "pgx TestConnect —") {
		t.Errorf("an allowed difference is listed as a regression, or a suite that did not run has allow-list entries:\n%s", out)
	}
}

func TestListedAndMissing(t *testing.T) {
	out := "TestA\nTestB\nExampleC\nBenchmarkD\nok  \tgithub.com/jackc/pgx/v5/stdlib\t0.01s\n"
	listed := ListedTests(out)
	if strings.Join(listed, " ") != "TestA TestB ExampleC" {
		t.Fatalf("ListedTests = %v", listed)
	}
	p := result(map[string]Outcome{"TestA": Pass, "TestB/x": Fail})
	missing := Missing(p, listed)
	if strings.Join(missing, " ") != "TestB ExampleC" {
		t.Errorf("Missing = %v", missing)
	}
	if got := RunPattern([]string{"TestB", "Test.C"}); got != `^(TestB|Test\.C)$` {
		t.Errorf("RunPattern = %s", got)
	}
}

func TestMergeAndPanicked(t *testing.T) {
	p := result(map[string]Outcome{"TestA": Pass, "TestB": Fail})
	p.Tests["TestB"].Output = "=== RUN   TestB\npanic: interface conversion [recovered]\n"
	if got := Panicked(p); got != "TestB" {
		t.Errorf("Panicked = %q", got)
	}
	q := result(map[string]Outcome{"TestB": Pass, "TestC": Pass, "TestC/x": Pass})
	if added := p.Merge(q); added != 1 {
		t.Errorf("Merge added %d top-level tests, want 1", added)
	}
	if p.Tests["TestB"].Outcome != Fail || p.Tests["TestC/x"] == nil {
		t.Errorf("Merge overwrote a result or lost a subtest: %+v", p.Tests)
	}
	if Panicked(result(map[string]Outcome{"TestA": Fail})) != "" {
		t.Error("a failure without a panic counted as one")
	}
}

func TestTimedOut(t *testing.T) {
	p := result(map[string]Outcome{"TestStmtExec": Fail})
	p.Tests["TestStmtExec"].Output = "=== RUN   TestStmtExec\npanic: test timed out after 3m0s\n\trunning tests:\n\t\tTestStmtExec (3m0s)\n\t\tTestOther/sub (2m0s)\n\ngoroutine 1 [running]:\n"
	if got := strings.Join(TimedOut(p), " "); got != "TestStmtExec TestOther/sub" {
		t.Errorf("TimedOut = %q", got)
	}
	if TimedOut(result(map[string]Outcome{"TestA": Fail})) != nil {
		t.Error("no timeout reported one")
	}
}

// TestStableName: the random part of a t.TempDir path in a subtest's name
// is the same in two runs, and nothing else in a name changes.
func TestStableName(t *testing.T) {
	tmp := filepath.ToSlash(os.TempDir())
	a := stableName("TestParseConfigSSLCertMode/servicefile='" + tmp + "/TestParseConfigSSLCertMode2235296238/001/pg_service.conf'_service=test")
	b := stableName("TestParseConfigSSLCertMode/servicefile='" + tmp + "/TestParseConfigSSLCertMode99/001/pg_service.conf'_service=test")
	if a != b {
		t.Errorf("two runs' names differ: %q, %q", a, b)
	}
	if !strings.HasSuffix(a, "/001/pg_service.conf'_service=test") || !strings.HasPrefix(a, "TestParseConfigSSLCertMode/servicefile='"+tmp+"/TestParseConfigSSLCertMode") {
		t.Errorf("stableName changed more than the random digits: %q", a)
	}
	for _, name := range []string{"TestX", "TestX/sub_2024/001", "TestQuery/cache_statement"} {
		if got := stableName(name); got != name {
			t.Errorf("stableName(%q) = %q", name, got)
		}
	}
}

// TestIsolatedNames: a suite's isolated tests, filtered by -run; none for a
// suite without any.
func TestIsolatedNames(t *testing.T) {
	ss, err := selectSuites("pgconn,stdlib")
	if err != nil {
		t.Fatal(err)
	}
	pgconn, stdlib := ss[0], ss[1]
	if got := isolatedNames(pgconn, ""); len(got) != 1 || got[0] != "TestCancelRequestContextWatcherHandler" {
		t.Errorf("pgconn: %v", got)
	}
	if got := isolatedNames(pgconn, "^TestConnect$"); len(got) != 0 {
		t.Errorf("-run ^TestConnect$: %v", got)
	}
	if got := isolatedNames(pgconn, "Cancel"); len(got) != 1 {
		t.Errorf("-run Cancel: %v", got)
	}
	if got := isolatedNames(stdlib, ""); len(got) != 0 {
		t.Errorf("stdlib: %v", got)
	}
}

// TestSelectSuites: -suites names suites in its order; an unknown name is
// an error that lists the suites.
func TestSelectSuites(t *testing.T) {
	ss, err := selectSuites("pgconn, pgx")
	if err != nil || len(ss) != 2 || ss[0].pkgPath() != "github.com/jackc/pgx/v5/pgconn" || ss[1].pkgPath() != "github.com/jackc/pgx/v5" {
		t.Errorf("selectSuites = %+v, %v", ss, err)
	}
	if _, err := selectSuites("pgx,nosuch"); err == nil || !strings.Contains(err.Error(), "stdlib, pgxpool, pgx, pgconn") {
		t.Errorf("unknown suite: %v", err)
	}
	if all, _ := selectSuites(""); len(all) != len(suites) {
		t.Errorf("default: %d suites", len(all))
	}
}

// TestReportRechecks: a regression that the reruns reproduce (more guarded
// failures than plain, by more than chance) counts, with its tallies; one
// they do not is listed apart and not counted.
func TestReportRechecks(t *testing.T) {
	plain := result(map[string]Outcome{"TestA": Pass, "TestB": Pass, "TestB/x": Pass})
	guarded := result(map[string]Outcome{"TestA": Fail, "TestB": Fail, "TestB/x": Fail})
	ss, err := selectSuites("stdlib")
	if err != nil {
		t.Fatal(err)
	}
	targets := []target{{name: "postgres"}}
	results := map[string]map[string]Run{"postgres": {
		"plain":   {ss[0].pkgPath(): plain},
		"guarded": {ss[0].pkgPath(): guarded},
	}}
	if got := strings.Join(unexpectedTests("stdlib", "postgres", plain, guarded), " "); got != "TestA TestB" {
		t.Fatalf("unexpectedTests = %q, want the top-level tests TestA TestB", got)
	}
	rc := Rechecks{
		{"postgres", "stdlib", "TestA"}: {Runs: 10, GuardedFails: 9, PlainFails: 0},
		{"postgres", "stdlib", "TestB"}: {Runs: 10, GuardedFails: 1, PlainFails: 2},
	}
	var b strings.Builder
	regressed := report(&b, "v5.0.0", ss, targets, results, nil, nil, rc, flags{})
	out := b.String()
	if got := strings.Join(regressed, "; "); got != "stdlib TestA via postgres" {
		t.Errorf("regressed = %q, want only TestA:\n%s", got, out)
	}
	for _, want := range []string{
		"stdlib  postgres  declared   2/0/0 [3/0/0]  0/2/0 [0/3/0]  1",
		"not reproduced",
		"stdlib TestB via postgres: on 10 reruns each: failed guarded 1, plain 2 (p = 0.89)",
		"[on 10 reruns each: failed guarded 9, plain 0 (p = 6e-05)]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestRecheckSuite: the reruns alternate plain and guarded, n times each,
// and tally every test's failures on each side; a test they leave undecided
// is run escalation × n times more, and all its counts decide.
func TestRecheckSuite(t *testing.T) {
	var order []string
	calls := map[bool]int{}
	side := func(guarded bool, fails func(i int) map[string]bool) sideRun {
		return func(_ context.Context, _ suite, names []string) (map[string]bool, error) {
			order = append(order, map[bool]string{false: "p", true: "g"}[guarded])
			calls[guarded]++
			return fails(calls[guarded]), nil
		}
	}
	// TestA fails guarded every time (a regression), TestB plain once,
	// TestC guarded once (chance), TestD guarded every other time (a
	// regression that shows only sometimes).
	plainSide := side(false, func(i int) map[string]bool { return map[string]bool{"TestB": i == 2} })
	guardedSide := side(true, func(i int) map[string]bool {
		return map[string]bool{"TestA": true, "TestC": i == 1, "TestD": i%2 == 0}
	})
	const n = 10
	got, err := recheckSuite(context.Background(), suite{}, []string{"TestA", "TestB", "TestC", "TestD"}, n, plainSide, guardedSide)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("pg", n+escalation*n); strings.Join(order, "") != want {
		t.Errorf("order = %v, want plain and guarded alternately, %d times each", order, n+escalation*n)
	}
	want := map[string]struct {
		r          Recheck
		reproduced bool
	}{
		"TestA": {Recheck{Runs: n, GuardedFails: n}, true},
		"TestB": {Recheck{Runs: n, PlainFails: 1}, false},
		"TestC": {Recheck{Runs: n + escalation*n, GuardedFails: 1}, false},
		"TestD": {Recheck{Runs: n + escalation*n, GuardedFails: (n + escalation*n) / 2}, true},
	}
	for name, w := range want {
		if r := got[name]; r != w.r || r.Reproduced() != w.reproduced {
			t.Errorf("%s = %+v (reproduced %v), want %+v (reproduced %v)", name, r, r.Reproduced(), w.r, w.reproduced)
		}
	}
	boom := errors.New("boom")
	if _, err := recheckSuite(context.Background(), suite{}, []string{"TestA"}, 2, plainSide,
		func(context.Context, suite, []string) (map[string]bool, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("a side's error = %v, want it returned", err)
	}
	p := result(map[string]Outcome{"TestA": Pass, "TestB": Skip})
	if f := failedOf(p, []string{"TestA", "TestB", "TestC"}); f["TestA"] || !f["TestB"] || !f["TestC"] {
		t.Errorf("failedOf = %v, want TestB (skipped) and TestC (did not run)", f)
	}
	if f := failedOf(nil, []string{"TestA"}); !f["TestA"] {
		t.Error("failedOf(nil): a test of a package that did not run passed")
	}
}
