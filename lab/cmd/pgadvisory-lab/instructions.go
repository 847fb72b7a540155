package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/lab/internal/bench"
)

func init() {
	commands.Register(cli.Command{Name: "instructions", Summary: "count the client's instructions per lock cycle under valgrind (cachegrind), cell by cell", Run: runInstructions})
}

// instrEnv makes a Go program countable by valgrind 3.19: no asynchronous
// preemption (its signals break valgrind's tools), no RDTSCP (valgrind
// cannot decode it where the host does not report it, and the runtime
// then dies of SIGILL), one P (no idle Ps spinning beside the work).
var instrEnv = []string{"GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off", "GOMAXPROCS=1"}

func runInstructions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("instructions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		flags = addCellFlags(fs, "1000,5000", "cachegrind files")
		top   = fs.Int("top", 15, "functions listed per cell: those whose instructions grow most over the first cell's")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: pgadvisory-lab instructions [flags]

Counts the instructions the client executes per lock cycle, function by
function, with valgrind's cachegrind: each cell's Go benchmark runs for two
iteration counts and the difference, divided by the iterations between them,
is one cycle's (start-up and the harness cancel out). Userland only: the
kernel's work in system calls is not counted. Counts repeat to within a
fraction of a percent outside the Go runtime; the runtime's share moves with
scheduling between runs. Needs valgrind (apt-get install valgrind);
PostgreSQL and PgBouncer are started by the test harness.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *top < 0 {
		return usageError{fmt.Sprintf("-top %d: must be 0 or more", *top)}
	}
	cells, shortN, longN, perCell, err := countPerCycle(ctx, "instructions", cachegrindTool, flags, stderr)
	if err != nil {
		return err
	}
	writeInstructions(stdout, cells, perCell, shortN, longN, *top)
	return nil
}

// cachegrindTool counts a cell's instructions per function.
var cachegrindTool = countTool{program: "valgrind", debianPackage: "valgrind", record: "cachegrind", count: countCell}

// countCell runs the benchmark pattern for n iterations of the test binary
// bin under cachegrind, in the package's directory, and returns the
// instructions per function.
func countCell(ctx context.Context, valgrind, bin, pkgDir, pattern string, n int, out string) (map[string]int64, error) {
	cmd := exec.CommandContext(ctx, valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file="+out,
		bin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", strconv.Itoa(n)+"x")
	cmd.Dir = pkgDir
	cmd.Env = append(os.Environ(), instrEnv...)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := ranOnce(cmd.Run(), output.String(), pattern, n); err != nil {
		return nil, err
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	counts, _, err := bench.ParseCachegrind(f)
	return counts, err
}

// instrLayers are the layers the table shows, in order.
var instrLayers = []string{bench.LayerRuntime, bench.LayerPgadvisory, bench.LayerPgx, bench.LayerSQL}

// writeInstructions writes the cells' instructions per cycle as a Markdown
// table, by layer, with each cell's count outside the Go runtime relative
// to the first cell's, then the functions that grow most over the first
// cell in each other cell.
func writeInstructions(w io.Writer, cells []lockCell, perCell []map[string]float64, shortN, longN, top int) {
	fmt.Fprintf(w, "Instructions per lock cycle: valgrind cachegrind, the client's userland only, GOMAXPROCS=1; the runs of %d and %d cycles, by difference.\n\n", longN, shortN)
	fmt.Fprintf(w, "| cell | total | %s | outside the runtime | %s | other | outside the runtime vs (%s) |\n",
		instrLayers[0], strings.Join(instrLayers[1:], " | "), cells[0].id)
	fmt.Fprintf(w, "| --- |%s\n", strings.Repeat(" ---: |", len(instrLayers)+4))
	outside := func(i int) float64 {
		var sum float64
		for l, v := range bench.InstructionsByLayer(perCell[i]) {
			if l != bench.LayerRuntime {
				sum += v
			}
		}
		return sum
	}
	for i, c := range cells {
		by := bench.InstructionsByLayer(perCell[i])
		var total float64
		for _, v := range by {
			total += v
		}
		other := total - by[bench.LayerRuntime] - by[bench.LayerPgadvisory] - by[bench.LayerPgx] - by[bench.LayerSQL]
		fmt.Fprintf(w, "| (%s) %s | %s | %s | %s |", c.id, c.name, whole(total), whole(by[bench.LayerRuntime]), whole(outside(i)))
		for _, l := range instrLayers[1:] {
			fmt.Fprintf(w, " %s |", whole(by[l]))
		}
		fmt.Fprintf(w, " %s | %.3f |\n", whole(other), outside(i)/outside(0))
	}
	if top == 0 {
		return
	}
	for i := 1; i < len(cells); i++ {
		fmt.Fprintf(w, "\nFunctions growing most from (%s) to (%s), instructions per cycle:\n\n| function | (%s) | (%s) | difference |\n| --- | ---: | ---: | ---: |\n",
			cells[0].id, cells[i].id, cells[0].id, cells[i].id)
		for _, d := range bench.LargestDeltas(perCell[0], perCell[i], top) {
			fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", d.Func, whole(d.Base), whole(d.Cell), signed(d.Cell-d.Base))
		}
	}
}

// whole renders an instruction count rounded to a whole number, with no
// minus sign on a count that rounds to zero.
func whole(v float64) string { return strconv.FormatFloat(math.Round(v)+0, 'f', 0, 64) }

// signed is whole with a plus sign on a count above zero.
func signed(v float64) string {
	if s := whole(v); s != "0" && s[0] != '-' {
		return "+" + s
	}
	return whole(v)
}
