// Package cli dispatches the subcommands of the project's commands
// (pgadvisory and pgadvisory-lab): a set of named commands, help listing the
// visible ones, and the mapping from a command's error to an exit status.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// Command is one subcommand.
type Command struct {
	// Name is what the user types after the program's name.
	Name string
	// Summary is help's one line about the command.
	Summary string
	// Run executes the command with the arguments after its name. A
	// UsageError prints the message and exits 2; an ExitCode exits with
	// that status and prints nothing.
	Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// Hidden commands are not listed by help (internal plumbing).
	Hidden bool
}

// UsageError is implemented by an error that marks a mistake in how the
// command was called: Run prints it after the command's name and returns 2.
type UsageError interface {
	error
	UsageError()
}

// ParseFlags parses args with fs for a command that takes flags only. -h
// and -help return flag.ErrHelp (exit status 0, the usage printed by fs);
// a flag fs does not define, a bad value or an argument after the flags is
// a UsageError.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError(err.Error())
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("%s takes no arguments, got %q", fs.Name(), fs.Args()))
	}
	return nil
}

// usageError is ParseFlags' UsageError.
type usageError string

func (e usageError) Error() string { return string(e) }
func (usageError) UsageError()     {}

// ExitCode is an error that only carries a process exit status.
type ExitCode int

func (e ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Set is a program's commands.
type Set struct {
	prog, title string
	cmds        map[string]Command
}

// NewSet returns an empty set for the program named prog; title is help's
// first line.
func NewSet(prog, title string) *Set {
	return &Set{prog: prog, title: title, cmds: map[string]Command{}}
}

// Register adds c. Registering a name twice is a programming error, reported
// by a panic at init.
func (s *Set) Register(c Command) {
	if _, dup := s.cmds[c.Name]; dup {
		panic(s.prog + ": command registered twice: " + c.Name)
	}
	s.cmds[c.Name] = c
}

// Main runs the command named by os.Args with a context canceled by SIGINT
// or SIGTERM, and exits with its status.
func (s *Set) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := s.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run executes the command args[0] with the rest of args and returns the
// process exit status: 0 on success or help, 1 on an error, 2 on a usage
// mistake, an ExitCode's own value.
func (s *Set) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		s.printHelp(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := s.cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", s.prog, args[0])
		s.printHelp(stderr)
		return 2
	}
	err := c.Run(ctx, args[1:], stdout, stderr)
	var ue UsageError
	var ec ExitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return int(ec)
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s %s: %s\n", s.prog, c.Name, ue.Error())
		return 2
	default:
		fmt.Fprintf(stderr, "%s %s: %v\n", s.prog, c.Name, err)
		return 1
	}
}

func (s *Set) printHelp(w io.Writer) {
	fmt.Fprintln(w, s.prog+": "+s.title)
	fmt.Fprintf(w, "\nUsage: %s <command> [flags] [args]\n\nCommands:\n", s.prog)
	names := make([]string, 0, len(s.cmds))
	for n, c := range s.cmds {
		if !c.Hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	width := 8
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width, n, s.cmds[n].Summary)
	}
}

// Tail returns the last n lines of s, a program's output, for an error
// message that quotes where it ended.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
