package lockscan

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the RewriteXact golden file")

var corpusDir = filepath.Join("..", "testdata", "lockscan")

type corpusCase struct {
	name    string
	line    int
	sql     string
	calls   []expCall
	dyn     []expCall // func holds the kind
	wantErr bool
}

type expCall struct {
	fn, text string
	kind     Kind // calls only
}

func loadCorpus(t testing.TB) []corpusCase {
	t.Helper()
	f, err := os.Open(filepath.Join(corpusDir, "corpus.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		cases []corpusCase
		cur   *corpusCase
		inSQL bool
		sql   []string
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "=== "):
			cases = append(cases, corpusCase{name: strings.TrimSpace(line[4:]), line: n})
			cur = &cases[len(cases)-1]
			inSQL, sql = true, nil
		case cur == nil:
			continue
		case inSQL && line == "---":
			cur.sql = strings.Join(sql, "\n")
			inSQL = false
		case inSQL:
			sql = append(sql, line)
		case strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "#"): // a comment between cases
		case line == "error":
			cur.wantErr = true
		default:
			fields := strings.SplitN(line, " ", 3)
			if fields[0] == "dynamic" && len(fields) == 3 {
				txt, err := strconv.Unquote(fields[2])
				if err != nil {
					t.Fatalf("corpus line %d: %v", n, err)
				}
				cur.dyn = append(cur.dyn, expCall{fields[1], txt, 0})
				continue
			}
			kind := KindCall
			for _, kk := range []Kind{KindAttribute, KindReference} {
				if p := kk.String() + " "; strings.HasPrefix(line, p) {
					kind, line = kk, line[len(p):]
				}
			}
			fields = strings.SplitN(line, " ", 2)
			if len(fields) != 2 {
				t.Fatalf("corpus line %d: bad expectation %q", n, line)
			}
			txt, err := strconv.Unquote(fields[1])
			if err != nil {
				t.Fatalf("corpus line %d: %v", n, err)
			}
			if _, ok := advisoryFuncs[fields[0]]; !ok {
				t.Fatalf("corpus line %d: unknown function %q", n, fields[0])
			}
			cur.calls = append(cur.calls, expCall{fields[0], txt, kind})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("duplicate corpus case %q", c.name)
		}
		seen[c.name] = true
		if c.sql == "" {
			t.Fatalf("corpus case %q (line %d) has no SQL or no --- line", c.name, c.line)
		}
	}
	return cases
}

func TestCorpus(t *testing.T) {
	cases := loadCorpus(t)
	if len(cases) < 150 {
		t.Errorf("corpus has %d cases, want at least 150", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScanner(-1) // no cache: every case parses fresh
			r, err := s.Scan(tc.sql)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Scan(%q) = %+v, want an error", tc.sql, r)
				}
				if !strings.HasPrefix(err.Error(), "lockscan: ") {
					t.Errorf("error %q lacks the package prefix", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Scan(%q): %v", tc.sql, err)
			}
			var got []expCall
			prev := -1
			for _, c := range r.Calls {
				if c.Start < 0 || c.End > len(tc.sql) || c.Start >= c.End {
					t.Fatalf("call %+v: span out of range", c)
				}
				if c.Start < prev {
					t.Errorf("calls not in textual order: %+v", r.Calls)
				}
				prev = c.Start
				info := advisoryFuncs[c.Func]
				if c.Scope != info.scope || c.Op != info.op || c.Shared != info.shared {
					t.Errorf("call %+v: classification differs from %+v", c, info)
				}
				got = append(got, expCall{c.Func, tc.sql[c.Start:c.End], c.Kind})
			}
			if !equalExp(got, tc.calls) {
				t.Errorf("calls\n got %v\nwant %v", got, tc.calls)
			}
			var gotDyn []expCall
			for _, d := range r.Dynamic {
				if d.Start < 0 || d.End > len(tc.sql) || d.Start > d.End {
					t.Fatalf("dynamic %+v: span out of range", d)
				}
				gotDyn = append(gotDyn, expCall{d.Kind, tc.sql[d.Start:d.End], 0})
			}
			if !equalExp(gotDyn, tc.dyn) {
				t.Errorf("dynamic\n got %v\nwant %v", gotDyn, tc.dyn)
			}
			if (len(r.Calls) > 0 || len(r.Dynamic) > 0) && !MayContainCall(tc.sql) {
				t.Errorf("pre-filter would have skipped a query with findings")
			}
			if len(r.Calls) == 0 && len(r.Dynamic) == 0 && s.Stats().Prefiltered == 1 {
				t.Logf("pre-filtered")
			}
		})
	}
}

func equalExp(a, b []expCall) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRewriteGolden rewrites every corpus case and compares with
// testdata/lockscan/rewrite.golden (go test -run TestRewriteGolden -update
// regenerates it). Cases without a session lock are skipped.
func TestRewriteGolden(t *testing.T) {
	cases := loadCorpus(t)
	var b strings.Builder
	b.WriteString("# RewriteXact output for every corpus case with a session-level lock or try-lock.\n")
	b.WriteString("# Generated by: go test ./lockscan -run TestRewriteGolden -update\n")
	for _, tc := range cases {
		r, err := NewScanner(-1).Scan(tc.sql)
		if err != nil || !r.HasSessionLock() {
			continue
		}
		out, err := RewriteXact(tc.sql)
		fmt.Fprintf(&b, "\n=== %s\n", tc.name)
		if err != nil {
			fmt.Fprintf(&b, "ERROR: %v\n", err)
			continue
		}
		b.WriteString(out + "\n")
		checkRewrite(t, tc.sql, out)
	}
	path := filepath.Join(corpusDir, "rewrite.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != b.String() {
		t.Errorf("RewriteXact output differs from %s; diff the files after go test -update:\n%s", path, firstDiff(string(want), b.String()))
	}
}

// TestRewriteCallsCorpus rewrites every corpus case with a session unlock
// as the driver does (UnlocksRewrite).
func TestRewriteCallsCorpus(t *testing.T) {
	n := 0
	for _, tc := range loadCorpus(t) {
		if r, err := NewScanner(-1).Scan(tc.sql); err == nil && checkUnlockRewrite(t, tc.sql, r.Calls) {
			n++
		}
	}
	if n < 5 {
		t.Errorf("%d corpus cases rewritten with their unlocks, want at least 5", n)
	}
}

// checkUnlockRewrite rewrites a query with a session unlock under
// UnlocksRewrite: it fails with a prefixed error, or leaves no
// session-level function (RewriteCalls has checked the rest by scanning its
// output). It reports whether it rewrote.
func checkUnlockRewrite(t *testing.T, q string, calls []Call) bool {
	t.Helper()
	if !hasSessionUnlock(calls) {
		return false
	}
	out, err := RewriteCalls(q, calls, RewriteOptions{Unlocks: UnlocksRewrite})
	if err != nil {
		if !strings.HasPrefix(err.Error(), "lockscan: ") {
			t.Fatalf("rewrite error without prefix: %v", err)
		}
		return false
	}
	r, err := NewScanner(-1).Scan(out)
	if err != nil {
		t.Fatalf("rewritten %q does not scan: %v", out, err)
	}
	for _, c := range r.Calls {
		if c.Scope == ScopeSession {
			t.Fatalf("rewrite of %q left %s in %q", q, c.Func, out)
		}
	}
	return true
}

// checkRewrite verifies the invariants of a successful rewrite: the output
// scans without error, has the same number of calls, no session lock or
// try-lock, and only the name spans changed.
func checkRewrite(t *testing.T, in, out string) {
	t.Helper()
	r1, err := NewScanner(-1).Scan(in)
	if err != nil {
		t.Fatalf("scan input: %v", err)
	}
	r2, err := NewScanner(-1).Scan(out)
	if err != nil {
		t.Fatalf("rewritten query %q does not scan: %v", out, err)
	}
	if len(r1.Calls) != len(r2.Calls) || r2.HasSessionLock() {
		t.Fatalf("rewrite of %q gave %q: calls %+v", in, out, r2.Calls)
	}
	// Outside the spans the bytes are identical.
	last1, last2 := 0, 0
	for i, c := range r1.Calls {
		d := r2.Calls[i]
		if in[last1:c.Start] != out[last2:d.Start] {
			t.Fatalf("bytes between calls changed: %q vs %q", in[last1:c.Start], out[last2:d.Start])
		}
		if c.XactTwin() == "" && in[c.Start:c.End] != out[d.Start:d.End] {
			t.Fatalf("non-lock call %s changed", c.Func)
		}
		if tw := c.XactTwin(); tw != "" && d.Func != tw {
			t.Fatalf("call %s became %s, want %s", c.Func, d.Func, tw)
		}
		last1, last2 = c.End, d.End
	}
	if in[last1:] != out[last2:] {
		t.Fatalf("tail changed: %q vs %q", in[last1:], out[last2:])
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n golden: %q\n    got: %q", i+1, x, y)
		}
	}
	return ""
}

// String prints an expectation as the corpus writes it.
func (e expCall) String() string {
	if e.kind != KindCall {
		return e.kind.String() + " " + e.fn + " " + strconv.Quote(e.text)
	}
	return e.fn + " " + strconv.Quote(e.text)
}
