package lint_test

import (
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/pgadvisory/pgadvisory/lint"
)

func TestAnalyzer(t *testing.T) {
	dir := analysistest.TestData()
	analysistest.Run(t, dir, lint.Analyzer, "pooled", "conn", "consts", "handle", "ignore", "negative")
}

func TestSuggestedFixes(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), lint.Analyzer, "tx")
}

// TestPositionInLiteral checks that a diagnostic on a single literal spans
// exactly the function name as written, escapes included.
func TestPositionInLiteral(t *testing.T) {
	results := analysistest.Run(t, analysistest.TestData(), lint.Analyzer, "tx")
	var checked int
	for _, r := range results {
		for _, d := range r.Diagnostics {
			fset := r.Action.Package.Fset
			file := fset.File(d.Pos)
			src := mustRead(t, file.Name())
			got := string(src[file.Offset(d.Pos):file.Offset(d.End)])
			want := strings.ToLower(strings.Trim(got, `"\`))
			want = strings.ReplaceAll(want, `\x61`, "a")
			want = strings.ReplaceAll(strings.TrimPrefix(want, `u&"`), `\0061`, "a")
			if !strings.HasPrefix(want, "pg_") || !strings.Contains(want, "advisory") {
				if got != "lockQuery" {
					t.Errorf("%s: diagnostic spans %q, want a function name or the argument", fset.Position(d.Pos), got)
				}
				continue
			}
			checked++
			if !strings.Contains(d.Message, want+" ") {
				t.Errorf("%s: span %q does not name the function in %q", fset.Position(d.Pos), got, d.Message)
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked %d in-literal spans, want at least 10", checked)
	}
}

func TestNewAnalyzerSkip(t *testing.T) {
	a, err := lint.NewAnalyzer(lint.Config{Skip: []string{"conn", "pooled"}})
	if err != nil {
		t.Fatal(err)
	}
	// With conn and pooled skipped, the conn package has nothing to say:
	// Run fails the test on every unexpected diagnostic, so check with a
	// recording T.
	rec := &recorder{}
	analysistest.Run(rec, analysistest.TestData(), a, "conn", "pooled")
	if len(rec.errs) == 0 {
		t.Fatal("expected the want comments of conn and pooled to go unmatched")
	}
	for _, e := range rec.errs {
		if strings.Contains(e, "unexpected diagnostic") {
			t.Errorf("skipped category still reported: %s", e)
		}
	}

	if _, err := lint.NewAnalyzer(lint.Config{Skip: []string{"pinned"}}); err == nil || !strings.Contains(err.Error(), `unknown category "pinned"`) {
		t.Errorf("NewAnalyzer(skip pinned) error = %v, want unknown category", err)
	}
}

func TestSkipFlag(t *testing.T) {
	a, err := lint.NewAnalyzer(lint.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Flags.Set("skip", "handle,directive"); err != nil {
		t.Fatal(err)
	}
	if got := a.Flags.Lookup("skip").Value.String(); got != "directive,handle" {
		t.Errorf("skip flag = %q, want %q", got, "directive,handle")
	}
	if err := a.Flags.Set("skip", "bogus"); err == nil {
		t.Error("skip=bogus accepted")
	}
}

type recorder struct{ errs []string }

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, strings.TrimSpace(sprintf(format, args...)))
}
