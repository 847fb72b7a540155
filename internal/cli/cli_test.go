package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

type usage string

func (u usage) Error() string { return string(u) }
func (usage) UsageError()     {}

func TestRunExitStatus(t *testing.T) {
	s := NewSet("prog", "a test program")
	ret := func(err error) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(context.Context, []string, io.Writer, io.Writer) error { return err }
	}
	s.Register(Command{Name: "ok", Summary: "succeeds", Run: ret(nil)})
	s.Register(Command{Name: "usage", Summary: "misused", Run: ret(usage("want one DSN"))})
	s.Register(Command{Name: "fails", Summary: "fails", Run: ret(errors.New("connection refused"))})
	s.Register(Command{Name: "exit3", Summary: "exits 3", Run: ret(ExitCode(3))})
	s.Register(Command{Name: "flaghelp", Summary: "asked for -h", Run: ret(flag.ErrHelp)})
	s.Register(Command{Name: "plumbing", Summary: "internal", Run: ret(nil), Hidden: true})
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"ok"}, code: 0},
		{args: []string{"usage"}, code: 2, stderr: "prog usage: want one DSN\n"},
		{args: []string{"fails"}, code: 1, stderr: "prog fails: connection refused\n"},
		{args: []string{"exit3"}, code: 3},
		{args: []string{"flaghelp"}, code: 0},
		{args: []string{"plumbing"}, code: 0},
		{args: []string{"nosuch"}, code: 2, stderr: "prog: unknown command \"nosuch\"\n"},
		{args: nil, code: 2, stdout: "prog: a test program\n"},
		{args: []string{"help"}, code: 0, stdout: "prog: a test program\n"},
	} {
		var out, errOut bytes.Buffer
		code := s.Run(t.Context(), tc.args, &out, &errOut)
		if code != tc.code || !strings.HasPrefix(out.String(), tc.stdout) || !strings.HasPrefix(errOut.String(), tc.stderr) {
			t.Errorf("Run(%q) = %d, stdout %q, stderr %q; want %d, stdout starting %q, stderr starting %q",
				tc.args, code, out.String(), errOut.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
	var out bytes.Buffer
	s.Run(t.Context(), []string{"help"}, &out, io.Discard)
	if !strings.Contains(out.String(), "  exit3    exits 3\n") || strings.Contains(out.String(), "plumbing") {
		t.Errorf("help lists the hidden command or lacks a visible one:\n%s", out.String())
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	s := NewSet("prog", "")
	c := Command{Name: "x", Run: func(context.Context, []string, io.Writer, io.Writer) error { return nil }}
	s.Register(c)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "registered twice: x") {
			t.Errorf("second Register: recover() = %v, want a panic naming x", r)
		}
	}()
	s.Register(c)
}

func TestTail(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 5, "a\nb\nc"},
		{"", 3, ""},
		{"only\n\n\n", 1, "only"},
	} {
		if got := Tail(c.s, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	newFlags := func() *flag.FlagSet {
		fs := flag.NewFlagSet("count", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Int("n", 1, "how many")
		return fs
	}
	if err := ParseFlags(newFlags(), []string{"-n", "3"}); err != nil {
		t.Errorf("good flags: %v", err)
	}
	if err := ParseFlags(newFlags(), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	for _, args := range [][]string{{"-m", "1"}, {"-n", "x"}, {"-n", "2", "extra"}} {
		var ue UsageError
		if err := ParseFlags(newFlags(), args); !errors.As(err, &ue) {
			t.Errorf("%q: %v, want a UsageError", args, err)
		}
	}
	err := ParseFlags(newFlags(), []string{"extra"})
	if err == nil || err.Error() != `count takes no arguments, got ["extra"]` {
		t.Errorf("an argument: %v", err)
	}
}
