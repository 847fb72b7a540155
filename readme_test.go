package pgadvisory_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADME builds every Go code block of README.md against this checkout,
// so that the code the README shows compiles as written.
//
// Which blocks: every fenced code block (``` or ~~~) whose info string's
// first word is "go". Blocks in other languages, or with none, are not
// checked.
//
// How a block becomes a Go file (the rule a README author writes to):
//
//   - A block that begins with a package clause (after blank lines and
//     comments) is a whole file and is compiled unchanged.
//   - Any other block is a fragment, placed in "package snippet". Its leading
//     import declarations stay at file level. If the code after them parses
//     as top-level declarations (func, type, var, const), it stays at file
//     level too; otherwise it becomes the body of "func _() { ... }".
//     Nothing else is added: no imports, no variables, no helpers. A fragment
//     must import or declare every name it uses and use every variable and
//     import it declares, exactly as a real program must.
//   - A block that imports "testing" is test code (a TestMain, a Test
//     function) and is written as snippet_test.go; any other as snippet.go.
//
// Each block gets a directory of its own in one temporary module that
// requires this repository's modules, each replaced by its directory in the
// working tree (so the snippets build against the checkout, not a release),
// with the root module's go.sum. Then
// "go build ./..." and "go vet ./..." (which also type-checks the _test.go
// files) must pass. //line directives make every error point at README.md's
// own line numbers.
//
// It runs the go tool (seconds with a warm build cache), so -short skips it.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go tool to build README.md's Go blocks; not in -short mode")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build README.md's Go blocks: %v", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join(root, "README.md")
	md, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(md)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block: the extraction is broken, or the README lost its examples")
	}

	mod := t.TempDir()
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	var gm strings.Builder
	fmt.Fprintf(&gm, "module example.com/readme\n\ngo %s\n", goDirective(t, goMod))
	for _, m := range repoModules(t, root) {
		fmt.Fprintf(&gm, "\nrequire %s v0.0.0\n\nreplace %s => %s\n", m.path, m.path, m.dir)
	}
	writeFile(t, filepath.Join(mod, "go.mod"), gm.String())
	writeFile(t, filepath.Join(mod, "go.sum"), string(goSum))

	for i, b := range blocks {
		src, err := snippetFile(readme, b)
		if err != nil {
			t.Errorf("README.md:%d: %v", b.line, err)
			continue
		}
		name := "snippet.go"
		if importsTesting(src) {
			name = "snippet_test.go"
		}
		dir := filepath.Join(mod, fmt.Sprintf("block%02d", i+1))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name), src)
		t.Logf("README.md:%d: ```go block %d -> %s/%s", b.line, i+1, filepath.Base(dir), name)
	}
	if t.Failed() {
		return
	}

	env := append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.CommandContext(t.Context(), goTool, args...)
		cmd.Dir = mod
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("README.md's Go blocks do not pass go %s (rule: see TestREADME's comment):\n%s%v",
				strings.Join(args, " "), out, err)
		}
	}
}

// codeBlock is the text of one fenced block; line is the README line of its
// first content line (1-based). file is the path named by an HTML comment
// "<!-- path -->" on the line right before the opening fence, or "".
type codeBlock struct {
	line int
	text string
	file string
}

// TestREADMEShowsExamplesVerbatim: a ```go block marked with the path of a
// file ("<!-- examples/databasesql/main.go -->" on the line before its
// fence) is that file, byte for byte. The quickstart's programs are marked
// so: the examples module's test builds and runs those files against
// PgBouncer, so the README shows code that runs as written.
func TestREADMEShowsExamplesVerbatim(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, b := range goBlocks(md) {
		if b.file == "" {
			continue
		}
		marked++
		want, err := os.ReadFile(filepath.FromSlash(b.file))
		if err != nil {
			t.Errorf("README.md:%d: the block names %s: %v", b.line, b.file, err)
			continue
		}
		if b.text != string(want) {
			t.Errorf("README.md:%d: the block differs from %s: copy the file into the README again", b.line, b.file)
		}
	}
	if marked == 0 {
		t.Error("README.md marks no ```go block as a file of examples/: the quickstart lost its programs, or the marker changed")
	}
}

// goBlocks returns README's ```go blocks in order.
func goBlocks(md []byte) []codeBlock {
	var (
		blocks []codeBlock
		in     bool   // inside a fenced block
		isGo   bool   // the open block is Go
		fence  string // the opening fence's run of ` or ~
		indent string // the opening fence's indentation, removed from its lines
		cur    codeBlock
		body   strings.Builder
		prev   string // the line before, outside blocks
	)
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		if !in {
			f := fenceRun(trimmed)
			if f == "" {
				prev = trimmed
				continue
			}
			in, fence, indent = true, f, line[:len(line)-len(trimmed)]
			info := strings.Fields(trimmed[len(f):])
			isGo = len(info) > 0 && info[0] == "go"
			cur = codeBlock{line: n + 1}
			if c, ok := strings.CutPrefix(prev, "<!--"); ok {
				if c, ok := strings.CutSuffix(c, "-->"); ok {
					cur.file = strings.TrimSpace(c)
				}
			}
			body.Reset()
			continue
		}
		if f := fenceRun(trimmed); f != "" && f[0] == fence[0] && len(f) >= len(fence) && strings.TrimSpace(trimmed[len(f):]) == "" {
			in, prev = false, ""
			if isGo {
				cur.text = body.String()
				blocks = append(blocks, cur)
			}
			continue
		}
		body.WriteString(strings.TrimPrefix(line, indent))
		body.WriteByte('\n')
	}
	return blocks
}

// fenceRun returns the leading run of three or more ` or ~ of s, or "".
func fenceRun(s string) string {
	if len(s) < 3 || (s[0] != '`' && s[0] != '~') {
		return ""
	}
	n := 0
	for n < len(s) && s[n] == s[0] {
		n++
	}
	if n < 3 {
		return ""
	}
	return s[:n]
}

// snippetFile turns a block into a Go file by the rule in TestREADME's
// comment, with //line directives that map it back to readme.
func snippetFile(readme string, b codeBlock) (string, error) {
	lineDir := func(n int) string { return fmt.Sprintf("//line %s:%d\n", readme, n) }
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", b.text, parser.PackageClauseOnly); err == nil {
		return lineDir(b.line) + b.text, nil // a whole file
	}

	// A fragment: "package snippet\n" is one line, so offsets in the
	// fragment are offsets in head+text minus len(head).
	const head = "package snippet\n"
	if _, err := parser.ParseFile(fset, "", head+b.text, parser.SkipObjectResolution); err == nil {
		return head + lineDir(b.line) + b.text, nil // top-level declarations
	}
	f, err := parser.ParseFile(fset, "", head+b.text, parser.ImportsOnly)
	if err != nil {
		return "", fmt.Errorf("a fragment whose imports do not parse: %v", err)
	}
	cut := 0 // where the imports end: the start of the line after the last one
	if len(f.Decls) > 0 {
		end := fset.Position(f.Decls[len(f.Decls)-1].End()).Offset - len(head)
		if nl := strings.IndexByte(b.text[end:], '\n'); nl >= 0 {
			cut = end + nl + 1
		} else {
			cut = len(b.text)
		}
	}
	imports, stmts := b.text[:cut], b.text[cut:]
	bodyLine := b.line + strings.Count(imports, "\n")
	return head + lineDir(b.line) + imports + "func _() {\n" + lineDir(bodyLine) + stmts + "}\n", nil
}

// importsTesting reports whether the Go source imports package testing.
func importsTesting(src string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly)
	if err != nil {
		return false
	}
	for _, imp := range f.Imports {
		if imp.Path.Value == `"testing"` {
			return true
		}
	}
	return false
}

// repoModules returns every module of the repository (the root's and any
// nested go.mod outside testdata, vendor and dot or underscore
// directories), so that snippets importing a package that lives in a
// nested module build against the working tree too.
func repoModules(t *testing.T, root string) []struct{ path, dir string } {
	t.Helper()
	var mods []struct{ path, dir string }
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
				mods = append(mods, struct{ path, dir string }{strings.Trim(strings.TrimSpace(v), `"`), filepath.Dir(p)})
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) == 0 {
		t.Fatal("no go.mod with a module line under " + root)
	}
	return mods
}

// goDirective returns the version of go.mod's go directive.
func goDirective(t *testing.T, goMod []byte) string {
	t.Helper()
	for _, l := range strings.Split(string(goMod), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod has no go directive")
	return ""
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
