package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/lab/internal/bench"
)

func init() {
	commands.Register(cli.Command{Name: "instructions", Summary: "count the client's instructions per lock cycle under valgrind (cachegrind), cell by cell", Run: runInstructions})
}

// instrCell is a lock cycle whose instructions the command counts: a Go
// benchmark of the library's test suites, run by name.
type instrCell struct {
	id, name string
	pkg      string // the package's directory under the repository root
	bench    string // its -test.bench pattern, matching one benchmark
}

// instrCells are the lab bench's cells that Go benchmarks run one cycle at
// a time, directly on PostgreSQL, under the same letters.
var instrCells = []instrCell{
	{"e", "raw pgx Batch: BEGIN+lock pipelined, COMMIT (ceiling), plain pgxpool", "advisory/pgxadvisory",
		"XactLockCycle$/target=direct/path=ceiling-batch$"},
	{"l", "pgx transaction by hand (Begin, lock, Commit), guarded pgxpool", "advisory/pgxadvisory",
		"XactLockCycle$/target=direct/path=pgx-tx-guarded$"},
	{"g", "pgxadvisory.WithXactLock, guarded pgxpool", "advisory/pgxadvisory",
		"XactLockCycle$/target=direct/path=pgxadvisory-guarded$"},
	{"b", "advisory.WithXactLock, database/sql over pgx stdlib", ".",
		"LockCycle$/target=direct-cache_statement/driver=pgx-stdlib$"},
	{"c", "advisory.WithXactLock, database/sql over the pgadvisory driver", ".",
		"LockCycle$/target=direct-cache_statement/driver=pgadvisory-pipelined$"},
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
		cellsFlag  = fs.String("cells", "e,l,g,b,c", "the cells to count, by letter: "+cellIDs())
		cyclesFlag = fs.String("cycles", "1000,5000", "the two iteration counts whose difference is counted")
		top        = fs.Int("top", 15, "functions listed per cell: those whose instructions grow most over the first cell's")
		root       = fs.String("root", ".", "the repository's root (its go.mod is the library's)")
		keep       = fs.String("keep", "", "keep the test binaries and cachegrind files in this directory (default: a temporary one, removed)")
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("instructions takes no arguments, got %q", fs.Args())}
	}
	cells, err := pickCells(*cellsFlag)
	if err != nil {
		return err
	}
	shortN, longN, err := parseCycles(*cyclesFlag)
	if err != nil {
		return err
	}
	if *top < 0 {
		return usageError{fmt.Sprintf("-top %d: must be 0 or more", *top)}
	}
	if err := checkRoot(*root); err != nil {
		return err
	}
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		return fmt.Errorf("instructions: valgrind not found (apt-get install valgrind): %w", err)
	}
	dir := *keep
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pgadvisory-instructions-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	binaries := map[string]string{} // package directory → test binary
	for _, c := range cells {
		if _, ok := binaries[c.pkg]; ok {
			continue
		}
		bin, err := filepath.Abs(filepath.Join(dir, strings.NewReplacer("/", "_", ".", "root").Replace(c.pkg)+".test"))
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "== building the tests of ./%s\n", strings.TrimPrefix(c.pkg, "."))
		build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./"+strings.TrimPrefix(c.pkg, "."))
		build.Dir, build.Stdout, build.Stderr = *root, stderr, stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("instructions: building the tests of %s: %w", c.pkg, err)
		}
		binaries[c.pkg] = bin
	}

	perCell := make([]map[string]float64, len(cells))
	for i, c := range cells {
		var counts [2]map[string]int64
		for j, n := range []int{shortN, longN} {
			fmt.Fprintf(stderr, "== (%s) %d cycles under cachegrind\n", c.id, n)
			out := filepath.Join(dir, fmt.Sprintf("cachegrind.%s.%d", c.id, n))
			if counts[j], err = countCell(ctx, valgrind, binaries[c.pkg], filepath.Join(*root, c.pkg), c.bench, n, out); err != nil {
				return fmt.Errorf("instructions: (%s): %w", c.id, err)
			}
		}
		if perCell[i], err = bench.InstructionsPerCycle(counts[0], counts[1], shortN, longN); err != nil {
			return err
		}
	}
	writeInstructions(stdout, cells, perCell, shortN, longN, *top)
	return nil
}

func cellIDs() string {
	var ids []string
	for _, c := range instrCells {
		ids = append(ids, c.id)
	}
	return strings.Join(ids, ",")
}

// pickCells returns the cells named by a comma-separated list of letters,
// in the list's order.
func pickCells(list string) ([]instrCell, error) {
	var cells []instrCell
	for _, id := range strings.Split(list, ",") {
		id = strings.TrimSpace(id)
		i := slices.IndexFunc(instrCells, func(c instrCell) bool { return c.id == id })
		if i < 0 {
			return nil, usageError{fmt.Sprintf("-cells: unknown cell %q (cells: %s)", id, cellIDs())}
		}
		if slices.ContainsFunc(cells, func(c instrCell) bool { return c.id == id }) {
			return nil, usageError{fmt.Sprintf("-cells: %q given twice", id)}
		}
		cells = append(cells, instrCells[i])
	}
	return cells, nil
}

// parseCycles reads "short,long": two iteration counts, the second larger.
func parseCycles(s string) (short, long int, err error) {
	a, b, ok := strings.Cut(s, ",")
	if ok {
		short, err = strconv.Atoi(strings.TrimSpace(a))
		if err == nil {
			long, err = strconv.Atoi(strings.TrimSpace(b))
		}
	}
	if !ok || err != nil || short < 1 || long <= short {
		return 0, 0, usageError{fmt.Sprintf("-cycles %q: want two iteration counts, the second larger, as 1000,5000", s)}
	}
	return short, long, nil
}

// checkRoot makes sure root is the library's module, whose test suites
// hold the benchmarks.
func checkRoot(root string) error {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return fmt.Errorf("instructions: -root %s: %w (run from the repository's root, or give -root)", root, err)
	}
	if !bytes.HasPrefix(b, []byte("module github.com/pgadvisory/pgadvisory\n")) {
		return fmt.Errorf("instructions: -root %s: its go.mod is not the library's (github.com/pgadvisory/pgadvisory)", root)
	}
	return nil
}

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
	runErr := cmd.Run()
	ran := 0
	for line := range strings.Lines(output.String()) {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[0], "Benchmark") && f[1] == strconv.Itoa(n) {
			ran++
		}
	}
	if runErr != nil || ran != 1 {
		return nil, fmt.Errorf("the benchmark %q did not run once for %d iterations (%v); its output ends:\n%s", pattern, n, runErr, cli.Tail(output.String(), 20))
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
func writeInstructions(w io.Writer, cells []instrCell, perCell []map[string]float64, shortN, longN, top int) {
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
