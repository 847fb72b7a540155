// Command pgadvisory-lab is pgadvisory's laboratory: the double-settlement
// demo through a real PgBouncer, the lock benchmark with its Redlock
// comparison, and the counts of the client's instructions (under valgrind)
// and system calls (under perf) per lock cycle. It starts PostgreSQL,
// PgBouncer and Redis through the test harness, so it lives in a module of
// its own (lab/) and the user's command, pgadvisory, links none of it.
//
// Usage:
//
//	pgadvisory-lab <command> [flags] [args]
//
// Run "pgadvisory-lab help" for the list of commands.
package main

import (
	"context"
	"io"

	"github.com/pgadvisory/pgadvisory/internal/cli"
)

// commands are the lab's subcommands; each file registers its own from init.
var commands = cli.NewSet("pgadvisory-lab", "the demo and benchmarks of pgadvisory, on servers it starts")

// usageError marks a mistake in how the command was called (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
func (usageError) UsageError()     {}

// exitCode is an error that only carries a process exit status.
type exitCode = cli.ExitCode

func main() { commands.Main() }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return commands.Run(ctx, args, stdout, stderr)
}
