package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/lab/internal/bench"
)

func init() {
	commands.Register(cli.Command{Name: "syscalls", Summary: "count the client's system calls and context switches per lock cycle under perf, cell by cell", Run: runSyscalls})
}

// namedSyscalls are the system calls the census shows by name: those a
// lock cycle's client makes (the network's reads and writes, the Go
// scheduler's polls, sleeps and wake-ups). The rest are counted together.
var namedSyscalls = []string{"read", "write", "epoll_pwait", "futex", "nanosleep", "sched_yield"}

func runSyscalls(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("syscalls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := addCellFlags(fs, "2000,12000", "perf files")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: pgadvisory-lab syscalls [flags]

Counts the system calls and context switches of the client per lock cycle,
with perf: the kernel's side of what the instructions command counts in
userland. Each cell's Go benchmark runs under perf record for two iteration
counts; the difference, divided by the iterations between them, is one
cycle's. Only the client's threads are counted (not the servers the test
harness starts). GOMAXPROCS is left as it is: the counts are those of the
benchmark as it runs. Reads and polls move with timing from run to run (a
read that finds its reply there already needs no poll); compare cells of
one run. Needs perf (apt-get install linux-perf) and a kernel that lets it
record tracepoints; PostgreSQL and PgBouncer are started by the test
harness.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	cells, shortN, longN, perCell, err := countPerCycle(ctx, "syscalls", perfTool, flags, stderr)
	if err != nil {
		return err
	}
	writeSyscalls(stdout, cells, perCell, shortN, longN)
	return nil
}

// perfTool counts a cell's system calls and context switches.
var perfTool = countTool{program: "perf", debianPackage: "linux-perf", record: "perf", count: recordCell}

// recordCell runs the benchmark pattern for n iterations of the test binary
// bin under perf record, in the package's directory, and returns the
// client's events by name.
func recordCell(ctx context.Context, perf, bin, pkgDir, pattern string, n int, out string) (map[string]int64, error) {
	// A buffer of 8 MiB per CPU: perf drops events when the buffer
	// fills faster than it is written out.
	record := []string{"record", "--quiet", "--output", out, "--count", "1", "--mmap-pages", "2048",
		"--event", bench.EventSyscalls, "--event", bench.EventContextSwitch}
	for _, name := range namedSyscalls {
		record = append(record, "--event", bench.SyscallEvent(name))
	}
	record = append(record, "--", bin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", strconv.Itoa(n)+"x")
	cmd := exec.CommandContext(ctx, perf, record...)
	cmd.Dir = pkgDir
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := ranOnce(cmd.Run(), output.String(), pattern, n); err != nil {
		return nil, err
	}
	script := exec.CommandContext(ctx, perf, "script", "--input", out, "--fields", bench.PerfScriptFields)
	var stdout, stderr bytes.Buffer
	script.Stdout, script.Stderr = &stdout, &stderr
	if err := script.Run(); err != nil {
		return nil, fmt.Errorf("perf script: %w\n%s", err, cli.Tail(stderr.String(), 10))
	}
	// perf warns of the chunks it lost while recording ("Processed N
	// events and lost M chunks!"): the count would be short.
	if strings.Contains(stderr.String(), " lost ") {
		return nil, fmt.Errorf("perf lost events while recording %d cycles (run fewer cycles):\n%s", n, cli.Tail(stderr.String(), 10))
	}
	return bench.ParsePerfScript(&stdout, filepath.Base(bin))
}

// writeSyscalls writes the cells' system calls and context switches per
// cycle as a Markdown table.
func writeSyscalls(w io.Writer, cells []lockCell, perCell []map[string]float64, shortN, longN int) {
	fmt.Fprintf(w, "System calls and context switches of the client per lock cycle: perf, the runs of %d and %d cycles, by difference.\n\n", longN, shortN)
	fmt.Fprintf(w, "| cell | system calls | %s | other | context switches |\n", strings.Join(namedSyscalls, " | "))
	fmt.Fprintf(w, "| --- |%s\n", strings.Repeat(" ---: |", len(namedSyscalls)+3))
	for i, c := range cells {
		per := perCell[i]
		total := per[bench.EventSyscalls]
		other := total
		fmt.Fprintf(w, "| (%s) %s | %s |", c.id, c.name, hundredths(total))
		for _, name := range namedSyscalls {
			v := per[bench.SyscallEvent(name)]
			other -= v
			fmt.Fprintf(w, " %s |", hundredths(v))
		}
		fmt.Fprintf(w, " %s | %s |\n", hundredths(other), hundredths(per[bench.EventContextSwitch]))
	}
}

// hundredths renders a count per cycle to two decimals, with no minus sign
// on one that rounds to zero.
func hundredths(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	if s == "-0.00" {
		return "0.00"
	}
	return s
}
