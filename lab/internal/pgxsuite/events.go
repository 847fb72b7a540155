package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Outcome is how one test ended.
type Outcome string

// The outcomes. NotRun marks a test that one run has and the other has not
// (its binary died first, or it failed to build); Incomplete one that
// started and never ended (a panic or a timeout in it or in a parallel test).
const (
	Pass       Outcome = "pass"
	Fail       Outcome = "fail"
	Skip       Outcome = "skip"
	Incomplete Outcome = "incomplete"
	NotRun     Outcome = "not run"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	FailedBuild string
}

// TestResult is one test (or subtest) of a run.
type TestResult struct {
	Outcome Outcome
	// Output is what the test printed, up to maxOutput bytes.
	Output string
}

// PackageResult is one package of a run.
type PackageResult struct {
	Tests map[string]*TestResult // by full name, "TestX/sub"
	// Failed: the package as a whole failed (a test failed, the binary
	// died or did not build).
	Failed bool
	// BuildFailed holds the build's output when the test binary did not
	// build.
	BuildFailed string
	// Output is the package-level output (outside any test): a panic's
	// trace lands here, up to maxOutput bytes.
	Output string
}

// Run is the result of one `go test -json` invocation, by import path.
type Run map[string]*PackageResult

const maxOutput = 16 << 10

func appendCapped(s, more string) string {
	if len(s) >= maxOutput {
		return s
	}
	s += more
	if len(s) > maxOutput {
		s = s[:maxOutput]
	}
	return s
}

// ParseEvents reads `go test -json` output. Lines that are not JSON (go
// command diagnostics written to the same stream) are ignored.
func ParseEvents(r io.Reader) (Run, error) {
	run := Run{}
	pkg := func(path string) *PackageResult {
		p := run[path]
		if p == nil {
			p = &PackageResult{Tests: map[string]*TestResult{}}
			run[path] = p
		}
		return p
	}
	// Build output is reported under the import path of the package
	// being built, which for a test binary is not always the package
	// name; collect it by ImportPath and attach it on failure.
	buildOut := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var e struct {
			event
			ImportPath string
		}
		if err := json.Unmarshal(line, &e); err != nil {
			continue
		}
		if e.Action == "build-output" {
			buildOut[e.ImportPath] = appendCapped(buildOut[e.ImportPath], e.Output)
			continue
		}
		if e.Action == "build-fail" || e.Package == "" {
			continue
		}
		p := pkg(e.Package)
		e.Test = stableName(e.Test)
		if e.Test == "" {
			switch e.Action {
			case "output":
				p.Output = appendCapped(p.Output, e.Output)
			case "fail":
				p.Failed = true
				if e.FailedBuild != "" {
					p.BuildFailed = buildOut[e.FailedBuild]
					if p.BuildFailed == "" {
						p.BuildFailed = "build failed: " + e.FailedBuild
					}
				}
			}
			continue
		}
		t := p.Tests[e.Test]
		if t == nil {
			t = &TestResult{Outcome: Incomplete}
			p.Tests[e.Test] = t
		}
		switch e.Action {
		case "output":
			t.Output = appendCapped(t.Output, e.Output)
		case "pass":
			t.Outcome = Pass
		case "fail":
			t.Outcome = Fail
		case "skip":
			t.Outcome = Skip
		}
	}
	if err := sc.Err(); err != nil {
		return run, fmt.Errorf("reading go test -json output: %w", err)
	}
	return run, nil
}

// tempDirName matches the directory t.TempDir makes: under the temporary
// directory, the test's name and random digits, then a sequence number.
var tempDirName = regexp.MustCompile(regexp.QuoteMeta(filepath.ToSlash(os.TempDir())) + `/([A-Za-z0-9_]*?)[0-9]+/([0-9]{3})`)

// stableName replaces in a test's name the random part of a t.TempDir path
// (a subtest named after a file in it, as pgconn's service-file tests are),
// so that the same subtest has the same name in the plain and guarded runs.
func stableName(test string) string {
	if !strings.Contains(test, "/") {
		return test
	}
	return tempDirName.ReplaceAllString(test, filepath.ToSlash(os.TempDir())+"/${1}N/${2}")
}

// ListedTests returns the test names in `go test -list` output.
func ListedTests(output string) []string {
	var names []string
	for _, l := range strings.Split(output, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.ContainsAny(l, " \t") {
			continue
		}
		for _, prefix := range []string{"Test", "Example", "Fuzz"} {
			if strings.HasPrefix(l, prefix) {
				names = append(names, l)
				break
			}
		}
	}
	return names
}

// Missing returns the listed top-level tests that p has no result for.
func Missing(p *PackageResult, listed []string) []string {
	var missing []string
	for _, name := range listed {
		if p == nil || p.Tests[name] == nil {
			missing = append(missing, name)
		}
	}
	return missing
}

// RunPattern is a -run pattern matching exactly the named top-level tests.
func RunPattern(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// Merge adds q's results for tests p has none for, and returns how many
// top-level tests it added.
func (p *PackageResult) Merge(q *PackageResult) int {
	added := 0
	for name, t := range q.Tests {
		if p.Tests[name] != nil {
			continue
		}
		p.Tests[name] = t
		if !strings.Contains(name, "/") {
			added++
		}
	}
	p.Failed = p.Failed || q.Failed
	p.Output = appendCapped(p.Output, q.Output)
	return added
}

// Panicked returns the top-level test during which the test binary
// panicked, or "".
func Panicked(p *PackageResult) string {
	var names []string
	for name, t := range p.Tests {
		if t.Outcome != Pass && t.Outcome != Skip && strings.Contains(t.Output, "panic: ") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	top, _, _ := strings.Cut(names[0], "/")
	return top
}

// TimedOut returns the tests that were running when the test binary hit
// its -timeout, from the "running tests:" list of the timeout panic.
func TimedOut(p *PackageResult) []string {
	text := p.Output
	for _, t := range p.Tests {
		if strings.Contains(t.Output, "panic: test timed out") {
			text += t.Output
		}
	}
	i := strings.Index(text, "panic: test timed out")
	if i < 0 {
		return nil
	}
	var names []string
	lines := strings.Split(text[i:], "\n")
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if l == "running tests:" {
			continue
		}
		name, _, ok := strings.Cut(l, " (")
		if !ok || !strings.HasPrefix(name, "Test") {
			break
		}
		names = append(names, name)
	}
	return names
}

// Counts are the outcomes of a package's top-level tests, and of all its
// tests with subtests.
type Counts struct {
	Pass, Fail, Skip, Incomplete int
	// Sub* count every test including subtests.
	SubPass, SubFail, SubSkip, SubIncomplete int
}

// Count tallies p's tests.
func Count(p *PackageResult) Counts {
	var c Counts
	if p == nil {
		return c
	}
	for name, t := range p.Tests {
		top := !strings.Contains(name, "/")
		switch t.Outcome {
		case Pass:
			c.SubPass++
			if top {
				c.Pass++
			}
		case Fail:
			c.SubFail++
			if top {
				c.Fail++
			}
		case Skip:
			c.SubSkip++
			if top {
				c.Skip++
			}
		default:
			c.SubIncomplete++
			if top {
				c.Incomplete++
			}
		}
	}
	return c
}

// Regression is a test that passed plain and did not pass guarded.
type Regression struct {
	Test    string
	Guarded Outcome // fail, skip, incomplete or not run
	Output  string  // the guarded run's output of the test
}

// Regressions compares a package's plain and guarded results: every test
// (subtests included) that passed plain and failed, was skipped, did not end
// or did not run guarded. Sorted by name, so that a test precedes its
// subtests.
func Regressions(plain, guarded *PackageResult) []Regression {
	if plain == nil {
		return nil
	}
	var regs []Regression
	for name, pt := range plain.Tests {
		if pt.Outcome != Pass {
			continue
		}
		var gt *TestResult
		if guarded != nil {
			gt = guarded.Tests[name]
		}
		switch {
		case gt == nil:
			regs = append(regs, Regression{Test: name, Guarded: NotRun})
		case gt.Outcome != Pass:
			regs = append(regs, Regression{Test: name, Guarded: gt.Outcome, Output: gt.Output})
		}
	}
	sort.Slice(regs, func(i, j int) bool { return regs[i].Test < regs[j].Test })
	return regs
}

// Reason picks the line of a failed test's output that says why: a panic,
// an "Error:" line of testify, or the first line that is not a RUN/PAUSE
// marker.
func Reason(output string) string {
	lines := strings.Split(output, "\n")
	trim := func(s string) string {
		s = strings.TrimSpace(s)
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		return s
	}
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "panic:"):
			return trim(t)
		case strings.HasPrefix(t, "Error:"):
			msg := strings.TrimSpace(strings.TrimPrefix(t, "Error:"))
			// testify puts the message on the following lines.
			for _, next := range lines[i+1:] {
				n := strings.TrimSpace(next)
				if n == "" || strings.HasPrefix(n, "Test:") || strings.HasPrefix(n, "Messages:") {
					break
				}
				msg += " " + n
			}
			return trim(msg)
		}
	}
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") || strings.HasPrefix(t, "Error Trace:") {
			continue
		}
		return trim(t)
	}
	return ""
}
