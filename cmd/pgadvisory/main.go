// Command pgadvisory is the operator's tool for pgadvisory: it tells what pool
// mode a DSN sits behind, lists who holds and awaits advisory locks, runs the
// double-settlement demo, and benchmarks lock cycles.
//
// Usage:
//
//	pgadvisory <command> [flags] [args]
//
// Run "pgadvisory help" for the list of commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. Each lives in its own file and registers itself
// from init, so the files can grow independently.
type command struct {
	name    string
	summary string
	// run executes the command with the arguments after its name. An error
	// of type usageError prints the command's usage and exits 2.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// hidden commands are not listed by help (internal plumbing).
	hidden bool
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("pgadvisory: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// usageError marks a mistake in how the command was called (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printHelp(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "pgadvisory: unknown command %q\n\n", args[0])
		printHelp(stderr)
		return 2
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	var ue usageError
	var ec exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return int(ec)
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "pgadvisory %s: %s\n", c.name, ue.msg)
		return 2
	default:
		fmt.Fprintf(stderr, "pgadvisory %s: %v\n", c.name, err)
		return 1
	}
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "pgadvisory: PostgreSQL advisory locks that are safe behind connection poolers")
	fmt.Fprintln(w, "\nUsage: pgadvisory <command> [flags] [args]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
}
