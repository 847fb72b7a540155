// Command pgadvisory is the operator's tool for pgadvisory: it tells what pool
// mode a DSN sits behind and lists who holds and awaits advisory locks. It
// links the library and pgx only; the demo and the benchmarks are
// pgadvisory-lab's (module lab/).
//
// Usage:
//
//	pgadvisory <command> [flags] [args]
//
// Run "pgadvisory help" for the list of commands.
package main

import (
	"context"
	"io"

	"github.com/pgadvisory/pgadvisory/internal/cli"
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

var commands = cli.NewSet("pgadvisory", "PostgreSQL advisory locks that are safe behind connection poolers")

func register(c command) {
	commands.Register(cli.Command{Name: c.name, Summary: c.summary, Run: c.run, Hidden: c.hidden})
}

// usageError marks a mistake in how the command was called (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
func (usageError) UsageError()     {}

func main() { commands.Main() }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return commands.Run(ctx, args, stdout, stderr)
}
