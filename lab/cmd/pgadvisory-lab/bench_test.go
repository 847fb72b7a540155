package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/lab/internal/bench"
	"github.com/pgadvisory/pgadvisory/lab/internal/redislab"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"extra"},
		{"-duration", "0s"},
		{"-warmup", "-1s"},
		{"-rounds", "0"},
		{"-workloads", "nope"},
		{"-workloads", ","},
		{"-variants", "a,z"},
		{"-paths", "sideways"},
		{"-hot-workers", "0"},
		{"-hot-keys", "0"},
		{"-redis-instances", "0"},
		{"-redis", "no-port"},
		{"-lock-timeout", "0s"},
		{"-bouncer-exec-mode", "fast"},
		{"-dsn", "postgres://x@127.0.0.1/db", "-paths", "pgbouncer"},
		{"-pool-size", "0"},
		{"-pool-size", "33"},
		{"-pgbouncer-session-dsn", "postgres://x@127.0.0.1:6433/db"},
		{"-pool-size", "8", "-dsn", "postgres://x@127.0.0.1/db", "-pgbouncer-dsn", "postgres://x@127.0.0.1:6432/db"},
		{"-paired-duration", "-1s"},
		{"-paired-blocks", "0"},
		{"-paired-wide", "all"},
		{"-readme", filepath.Join(t.TempDir(), "missing.md")},
		{"-readme", writeTemp(t, "# no summary block\n")},
	} {
		var out, errOut bytes.Buffer
		err := runBench(context.Background(), args, &out, &errOut)
		var ue cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("args %q: err = %v, want usageError", args, err)
		}
		if out.Len() != 0 {
			t.Errorf("args %q: wrote a report on bad usage", args)
		}
	}
}

func TestWithParam(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u:p@h:6432/db?sslmode=disable", "postgres://u:p@h:6432/db?default_query_exec_mode=exec&sslmode=disable"},
		{"postgres://u@h/db?default_query_exec_mode=simple_protocol", "postgres://u@h/db?default_query_exec_mode=simple_protocol"},
		{"host=h port=6432 dbname=db", "host=h port=6432 dbname=db default_query_exec_mode=exec"},
		{"host=h default_query_exec_mode=cache_describe", "host=h default_query_exec_mode=cache_describe"},
	} {
		got, err := withParam(tc.dsn, "default_query_exec_mode", "exec")
		if err != nil || got != tc.want {
			t.Errorf("withParam(%q) = %q, %v; want %q", tc.dsn, got, err, tc.want)
		}
	}
	_, err := withParam("postgres://u:secret@h:port/db", "k", "v")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad URL: err = %v, want an error without the password", err)
	}
}

func TestDefaultHotWorkers(t *testing.T) {
	if n := defaultHotWorkers(); n < 32 || n > 256 {
		t.Errorf("defaultHotWorkers() = %d, want 32..256", n)
	}
}

// TestBenchSmoke runs every variant for a moment against a real PostgreSQL,
// PgBouncer and one redis-server, through the -dsn flags.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("integration smoke run skipped in -short mode")
	}
	if _, err := redislab.FindBinary(); err != nil {
		if pgbouncer.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction, pgbouncer.Session))
	dir := t.TempDir()
	mdPath, svgPath, profPath := filepath.Join(dir, "bench.md"), filepath.Join(dir, "bench.svg"), filepath.Join(dir, "cpu.pprof")
	readme := writeTemp(t, "# Title\n\n"+summaryBegin+"\nold numbers\n"+summaryEnd+"\n\nthe rest\n")
	var out, errOut bytes.Buffer
	err := runBench(context.Background(), []string{
		"-dsn", c.DirectDSN(), "-pgbouncer-dsn", c.WideDSN(pgbouncer.Transaction),
		"-pgbouncer-session-dsn", c.WideDSN(pgbouncer.Session),
		"-workloads", "uncontended", "-duration", "100ms", "-warmup", "0s",
		"-redis-instances", "1",
		"-out", mdPath, "-svg", svgPath, "-cpuprofile", profPath, "-readme", readme,
	}, &out, &errOut)
	t.Logf("stderr:\n%s", errOut.String())
	if err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, row := range []string{
		"| direct | (a) naive", "| direct | (b) WithXactLock, pgx stdlib", "| direct | (c) WithXactLock, pgadvisory driver",
		"| pgbouncer | (a) naive", "| pgbouncer | (b) WithXactLock, pgx stdlib", "| pgbouncer | (c) WithXactLock, pgadvisory driver",
		"| direct | (e) raw pgx Batch", "| pgbouncer | (e) raw pgx Batch",
		"| direct | (f) pgxadvisory.WithXactLock, pgxpool", "| pgbouncer | (f) pgxadvisory.WithXactLock, pgxpool",
		"| direct | (g) pgxadvisory.WithXactLock, guarded pgxpool", "| pgbouncer | (g) pgxadvisory.WithXactLock, guarded pgxpool",
		"| direct | (h) seed pattern", "| pgbouncer | (h-plain) seed pattern",
		"| pgbouncer | (i) session lock + unlock, guard policy hold", "| pgbouncer-session | (i-plain) session lock + unlock, plain pgx",
		"### Ratios to reference (same run)", "| (g)/(e) ≥ 0.95, uncontended, pgbouncer |", "| (i) hold cycle in 2 round trips, uncontended |",
		"| redis | (d) Redlock", "| direct | (pgadvisory) pgadvisory", "| pgbouncer | (pgx) pgx stdlib",
		"### Goals", "- PostgreSQL: ", "pgbouncer cores",
		"; interleaved: 50ms per cell and round, in 4 block(s) per round, each on fresh connections after its own 0s warm-up",
		// Always profiled; -cpuprofile also keeps the file.
		"### Client CPU by layer (µs per lock, CPU profile of the bench process)", "The whole profile is at `" + profPath + "`",
	} {
		if !strings.Contains(md, row) {
			t.Errorf("report lacks %q", row)
		}
	}
	if strings.Contains(md, "### Errors") {
		t.Errorf("cycles failed:\n%s", md[strings.Index(md, "### Errors"):])
	}
	if strings.Contains(md, "| 0 | —") {
		t.Errorf("a variant completed no cycle:\n%s", md)
	}
	if !regexp.MustCompile(`\[ *1/\d+\]`).MatchString(errOut.String()) {
		t.Error("no progress on stderr")
	}
	file, err := os.ReadFile(mdPath)
	if err != nil || string(file) != md {
		t.Errorf("-out file differs from stdout (err %v)", err)
	}
	summary, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Title\n\n" + summaryBegin + "\nMeasured by `pgadvisory-lab bench -dsn ",
		"| locks/s (× (a)) | (a) | (b) | (c) | (g) | (e) | (j) | (d) |\n",
		"| uncontended (1 worker, 100 keys), pgbouncer | ",
		"| (g)/(e), direct | ",
		"| (g)/(e) ≥ 0.95, uncontended, pgbouncer |",
		summaryEnd + "\n\nthe rest\n",
	} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("-readme file lacks %q:\n%s", want, summary)
		}
	}
	if strings.Contains(string(summary), "old numbers") {
		t.Error("-readme kept the old summary")
	}
	for _, p := range []string{svgPath, profPath} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", p, err)
		}
	}
}

// TestInterleavedPairs: the pairs run again interleaved are cells of
// workloads of several workers on one path, each pair on its own and once:
// the goals' pairs, and with -paired-wide ratios every ratio's pair that
// runs there as well (not (i), whose reference is on another path and runs
// with one worker only).
func TestInterleavedPairs(t *testing.T) {
	o := &benchOptions{workloads: []string{workloadUncontended, workloadContended}, paths: []string{"direct", "pgbouncer"}}
	var locks []bench.Variant
	for _, p := range []bench.Path{bench.PathDirect, bench.PathPgBouncer} {
		for _, id := range []string{"c", "e", "g", "l"} {
			locks = append(locks, bench.Variant{ID: id, Path: p})
		}
	}
	locks = append(locks, bench.Variant{ID: "i", Path: bench.PathPgBouncer, MaxWorkers: 1},
		bench.Variant{ID: "i-plain", Path: bench.PathPgBouncerSession, MaxWorkers: 1})
	ws := []bench.Workload{{Name: workloadUncontended, Workers: 1}, {Name: workloadContended, Workers: 32}}
	refs := []bench.Ref{{Num: "c", Den: "e"}, {Num: "g", Den: "l"}, {Num: "l", Den: "e"}, {Num: "k", Den: "j"},
		{Num: "i", Den: "i-plain", DenPath: bench.PathPgBouncerSession}}
	goals := goalPairs(o.goals())
	for _, tc := range []struct {
		name  string
		pairs []cellPair
		want  []string
	}{
		{"goals", goals, []string{
			"contended c/e direct,direct", "contended g/e direct,direct",
			"contended c/e pgbouncer,pgbouncer", "contended g/e pgbouncer,pgbouncer",
		}},
		{"ratios", append(goals, ratioPairs(refs, o.paths)...), []string{
			"contended c/e direct,direct", "contended g/e direct,direct",
			"contended c/e pgbouncer,pgbouncer", "contended g/e pgbouncer,pgbouncer",
			"contended g/l direct,direct", "contended l/e direct,direct",
			"contended g/l pgbouncer,pgbouncer", "contended l/e pgbouncer,pgbouncer",
		}},
	} {
		var got []string
		for _, p := range interleavedPairs(locks, ws, tc.pairs) {
			got = append(got, p.workload.Name+" "+p.variants[0].ID+"/"+p.variants[1].ID+" "+string(p.variants[0].Path)+","+string(p.variants[1].Path))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: pairs %q, want %q", tc.name, got, tc.want)
		}
	}
}

// writeTemp writes content to a new file in t's temporary directory and
// returns its path.
func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSpliceSummary: the summary replaces exactly the lines between the
// markers; a file without them, with one twice or with them reversed is
// refused.
func TestSpliceSummary(t *testing.T) {
	doc := "a\n" + summaryBegin + "\nold\nolder\n  " + summaryEnd + "  \nb\n"
	got, err := spliceSummary([]byte(doc), []byte("new\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "a\n" + summaryBegin + "\nnew\n  " + summaryEnd + "  \nb\n"; string(got) != want {
		t.Errorf("spliceSummary = %q, want %q", got, want)
	}
	for _, bad := range []string{
		"a\n",
		summaryBegin + "\n",
		summaryEnd + "\n" + summaryBegin + "\n",
		summaryBegin + "\n" + summaryBegin + "\n" + summaryEnd + "\n",
		"x " + summaryBegin + "\n" + summaryEnd + "\n", // a marker must be its own line
	} {
		if _, err := spliceSummary([]byte(bad), nil); err == nil {
			t.Errorf("spliceSummary(%q) accepted it", bad)
		}
	}
}

// TestRewriteSummary: the file is rewritten in place with its permissions,
// and left untouched when it has no summary block.
func TestRewriteSummary(t *testing.T) {
	path := writeTemp(t, summaryBegin+"\n"+summaryEnd+"\n")
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rewriteSummary(path, []byte("numbers\n")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := summaryBegin + "\nnumbers\n" + summaryEnd + "\n"; string(got) != want {
		t.Errorf("file = %q, want %q", got, want)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode after rewrite: %v (err %v), want 0600", st.Mode(), err)
	}
	plain := writeTemp(t, "no block\n")
	if err := rewriteSummary(plain, []byte("numbers\n")); err == nil {
		t.Error("rewriteSummary accepted a file without a summary block")
	}
	if got, _ := os.ReadFile(plain); string(got) != "no block\n" {
		t.Errorf("a refused file changed: %q", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("temporary files left beside the file: %v", entries)
	}
}
