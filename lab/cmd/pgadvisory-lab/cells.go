package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/lab/internal/bench"
)

// The instructions and syscalls commands count what the client does in one
// lock cycle, each with its own tool (valgrind, perf), in the same way:
// each cell's Go benchmark runs for two iteration counts and the
// difference, divided by the iterations between them, is one cycle's
// (start-up and the test harness cancel out).

// lockCell is a lock cycle whose counts the instructions and syscalls
// commands take: a Go benchmark of the library's test suites, run by name.
type lockCell struct {
	id, name string
	pkg      string // the package's directory under the repository root
	bench    string // its -test.bench pattern, matching one benchmark
}

// lockCells are the lab bench's cells that Go benchmarks run one cycle at
// a time, directly on PostgreSQL, under the same letters.
var lockCells = []lockCell{
	{"e", "raw pgx Batch: BEGIN+lock pipelined, COMMIT (ceiling), plain pgxpool", "advisory/pgxadvisory",
		"XactLockCycle$/target=direct/path=ceiling-batch$"},
	{"l", "pgx transaction by hand (Begin, lock, Commit), guarded pgxpool", "advisory/pgxadvisory",
		"XactLockCycle$/target=direct/path=pgx-tx-guarded$"},
	{"g", "pgxadvisory.WithXactLock, guarded pgxpool", "advisory/pgxadvisory",
		"XactLockCycle$/target=direct/path=pgxadvisory-guarded$"},
	{"m", "pgxadvisory.WithXactLock under WithTimeout, guarded pgxpool", "advisory/pgxadvisory",
		"XactLockCycle$/target=direct/path=pgxadvisory-guarded-clientbound$"},
	{"b", "advisory.WithXactLock, database/sql over pgx stdlib", ".",
		"XactLockCycle$/target=direct/driver=pgx-stdlib$"},
	{"c", "advisory.WithXactLock, database/sql over the pgadvisory driver", ".",
		"XactLockCycle$/target=direct/driver=pgadvisory$"},
}

// cellFlags are the flags the counting commands share.
type cellFlags struct {
	cells, cycles, root, keep *string
}

// addCellFlags defines the shared flags on fs; cycles is the default pair
// of iteration counts, kept what -keep keeps besides the test binaries.
func addCellFlags(fs *flag.FlagSet, cycles, kept string) cellFlags {
	return cellFlags{
		cells:  fs.String("cells", "e,l,g,m,b,c", "the cells to count, by letter: "+cellIDs()),
		cycles: fs.String("cycles", cycles, "the two iteration counts whose difference is counted"),
		root:   fs.String("root", ".", "the repository's root (its go.mod is the library's)"),
		keep:   fs.String("keep", "", "keep the test binaries and "+kept+" in this directory (default: a temporary one, removed)"),
	}
}

// parse checks the shared flags of command and returns the cells and the
// two iteration counts they give.
func (f cellFlags) parse(command string) (cells []lockCell, shortN, longN int, err error) {
	if cells, err = pickCells(*f.cells); err != nil {
		return nil, 0, 0, err
	}
	if shortN, longN, err = parseCycles(*f.cycles); err != nil {
		return nil, 0, 0, err
	}
	if err := checkRoot(command, *f.root); err != nil {
		return nil, 0, 0, err
	}
	return cells, shortN, longN, nil
}

// countTool is how a counting command counts a cell: the program it runs
// the benchmark under (with the Debian package that installs it), the name
// of the records it leaves, and count, which runs a cell's benchmark
// pattern for n iterations of the test binary bin, in the package's
// directory pkgDir, under the program found at path, leaving its record in
// out, and returns the counts by name.
type countTool struct {
	program, debianPackage, record string
	count                          func(ctx context.Context, path, bin, pkgDir, pattern string, n int, out string) (map[string]int64, error)
}

// countPerCycle checks command's shared flags, builds the cells' test
// binaries and counts each cell with tool for both iteration counts. It
// returns the cells, the counts and each cell's counts per cycle.
func countPerCycle(ctx context.Context, command string, tool countTool, f cellFlags, stderr io.Writer) (cells []lockCell, shortN, longN int, perCell []map[string]float64, err error) {
	if cells, shortN, longN, err = f.parse(command); err != nil {
		return nil, 0, 0, nil, err
	}
	path, err := exec.LookPath(tool.program)
	if err != nil {
		return nil, 0, 0, nil, fmt.Errorf("%s: %s not found (apt-get install %s): %w", command, tool.program, tool.debianPackage, err)
	}
	dir, cleanup, err := workDir(*f.keep, "pgadvisory-"+command+"-")
	if err != nil {
		return nil, 0, 0, nil, err
	}
	defer cleanup()
	binaries, err := buildCellTests(ctx, *f.root, dir, cells, stderr)
	if err != nil {
		return nil, 0, 0, nil, fmt.Errorf("%s: %w", command, err)
	}
	perCell = make([]map[string]float64, len(cells))
	for i, c := range cells {
		var counts [2]map[string]int64
		for j, n := range []int{shortN, longN} {
			fmt.Fprintf(stderr, "== (%s) %d cycles under %s\n", c.id, n, tool.record)
			out := filepath.Join(dir, fmt.Sprintf("%s.%s.%d", tool.record, c.id, n))
			if counts[j], err = tool.count(ctx, path, binaries[c.pkg], filepath.Join(*f.root, c.pkg), c.bench, n, out); err != nil {
				return nil, 0, 0, nil, fmt.Errorf("%s: (%s): %w", command, c.id, err)
			}
		}
		if perCell[i], err = bench.PerCycle(counts[0], counts[1], shortN, longN); err != nil {
			return nil, 0, 0, nil, err
		}
	}
	return cells, shortN, longN, perCell, nil
}

func cellIDs() string {
	var ids []string
	for _, c := range lockCells {
		ids = append(ids, c.id)
	}
	return strings.Join(ids, ",")
}

// pickCells returns the cells named by a comma-separated list of letters,
// in the list's order.
func pickCells(list string) ([]lockCell, error) {
	var cells []lockCell
	for _, id := range strings.Split(list, ",") {
		id = strings.TrimSpace(id)
		i := slices.IndexFunc(lockCells, func(c lockCell) bool { return c.id == id })
		if i < 0 {
			return nil, usageError{fmt.Sprintf("-cells: unknown cell %q (cells: %s)", id, cellIDs())}
		}
		if slices.ContainsFunc(cells, func(c lockCell) bool { return c.id == id }) {
			return nil, usageError{fmt.Sprintf("-cells: %q given twice", id)}
		}
		cells = append(cells, lockCells[i])
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
func checkRoot(command, root string) error {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return fmt.Errorf("%s: -root %s: %w (run from the repository's root, or give -root)", command, root, err)
	}
	if !bytes.HasPrefix(b, []byte("module github.com/pgadvisory/pgadvisory\n")) {
		return fmt.Errorf("%s: -root %s: its go.mod is not the library's (github.com/pgadvisory/pgadvisory)", command, root)
	}
	return nil
}

// workDir returns keep, made if missing, or a new temporary directory named
// from pattern, and what removes it at the end (nothing for keep).
func workDir(keep, pattern string) (dir string, cleanup func(), err error) {
	if keep == "" {
		if dir, err = os.MkdirTemp("", pattern); err != nil {
			return "", nil, err
		}
		return dir, func() { os.RemoveAll(dir) }, nil
	}
	return keep, func() {}, os.MkdirAll(keep, 0o755)
}

// buildCellTests builds the test binary of each package the cells run in,
// into dir, and returns them by package directory.
func buildCellTests(ctx context.Context, root, dir string, cells []lockCell, stderr io.Writer) (map[string]string, error) {
	binaries := map[string]string{}
	for _, c := range cells {
		if _, ok := binaries[c.pkg]; ok {
			continue
		}
		bin, err := filepath.Abs(filepath.Join(dir, strings.NewReplacer("/", "_", ".", "root").Replace(c.pkg)+".test"))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "== building the tests of ./%s\n", strings.TrimPrefix(c.pkg, "."))
		build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./"+strings.TrimPrefix(c.pkg, "."))
		build.Dir, build.Stdout, build.Stderr = root, stderr, stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("building the tests of %s: %w", c.pkg, err)
		}
		binaries[c.pkg] = bin
	}
	return binaries, nil
}

// ranOnce checks that a test binary's run, which ended with runErr and
// printed output, ran the benchmark pattern once, for n iterations.
func ranOnce(runErr error, output, pattern string, n int) error {
	ran := 0
	for line := range strings.Lines(output) {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[0], "Benchmark") && f[1] == strconv.Itoa(n) {
			ran++
		}
	}
	if runErr != nil || ran != 1 {
		return fmt.Errorf("the benchmark %q did not run once for %d iterations (%v); its output ends:\n%s", pattern, n, runErr, cli.Tail(output, 20))
	}
	return nil
}
