package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/lab/internal/bench"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func TestSyscallsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"extra"},
		{"-cells", "e,z"},
		{"-cells", "l,l"},
		{"-cycles", "4000,1000"},
		{"-cycles", "x"},
	} {
		var out, errOut bytes.Buffer
		err := runSyscalls(context.Background(), args, &out, &errOut)
		var ue cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("args %q: err = %v, want usageError", args, err)
		}
	}
	var out, errOut bytes.Buffer
	if err := runSyscalls(context.Background(), []string{"-root", t.TempDir()}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "go.mod") {
		t.Errorf("-root of another directory: err = %v, want one about its go.mod", err)
	}
}

func TestWriteSyscalls(t *testing.T) {
	cells := []lockCell{lockCells[0], lockCells[1]}
	perCell := []map[string]float64{
		{bench.EventSyscalls: 9, bench.SyscallEvent("read"): 3, bench.SyscallEvent("write"): 2, bench.SyscallEvent("epoll_pwait"): 2.5,
			bench.SyscallEvent("futex"): 1.25, bench.EventContextSwitch: 3.5},
		{bench.EventSyscalls: 8, bench.SyscallEvent("read"): 4, bench.SyscallEvent("write"): 2, bench.SyscallEvent("nanosleep"): 1,
			bench.SyscallEvent("sched_yield"): -0.001, bench.EventContextSwitch: 3},
	}
	var out bytes.Buffer
	writeSyscalls(&out, cells, perCell, 1000, 4000)
	for _, want := range []string{
		"| cell | system calls | read | write | epoll_pwait | futex | nanosleep | sched_yield | other | context switches |",
		"| (e) " + lockCells[0].name + " | 9.00 | 3.00 | 2.00 | 2.50 | 1.25 | 0.00 | 0.00 | 0.25 | 3.50 |",
		"| (l) " + lockCells[1].name + " | 8.00 | 4.00 | 2.00 | 0.00 | 0.00 | 1.00 | 0.00 | 1.00 | 3.00 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestSyscallsSmoke counts two cells for a few cycles under perf: the
// client's writes show (each cycle writes its statements at least once),
// and the servers' system calls do not (the count is the client's).
func TestSyscallsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs perf and the harness")
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		if os.Getenv(pgbouncer.RequireEnv) != "" {
			t.Fatalf("%s is set and perf is missing: %v", pgbouncer.RequireEnv, err)
		}
		t.Skip("perf not installed")
	}
	// A kernel may refuse tracepoints (no tracefs, perf_event_paranoid):
	// that is the machine's limit, not the command's.
	if probe, err := exec.Command(perf, "record", "--quiet", "--output", os.DevNull, "--event", bench.EventSyscalls, "--", "true").CombinedOutput(); err != nil {
		t.Skipf("this kernel does not let perf record %s: %v\n%s", bench.EventSyscalls, err, probe)
	}
	var out, errOut bytes.Buffer
	// 400 cycles between the two runs: what the start-up makes differ from
	// run to run (connections, threads, the collector; a hundred system
	// calls or so) is then a fraction of a call per cycle. With 40 it was
	// more than all of a cycle's reads.
	if err := runSyscalls(t.Context(), []string{"-cells", "e,l", "-cycles", "100,500", "-root", "../../.."}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	rows := 0
	for line := range strings.Lines(out.String()) {
		f := strings.Split(line, "|")
		if len(f) < 11 || !strings.HasPrefix(strings.TrimSpace(f[1]), "(") {
			continue
		}
		rows++
		// Columns: cell, system calls, read, write, ...
		total, err1 := strconv.ParseFloat(strings.TrimSpace(f[2]), 64)
		write, err2 := strconv.ParseFloat(strings.TrimSpace(f[4]), 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("row %q: %v %v", line, err1, err2)
		}
		// Two statements' writes per cycle at least (BEGIN and the lock
		// together, COMMIT), and far fewer system calls than client and
		// servers make together.
		if write < 1.5 || total < write || total > 40 {
			t.Errorf("row %q: %.2f writes of %.2f system calls per cycle, want 1.5 or more of at most 40", strings.TrimSpace(line), write, total)
		}
	}
	if rows != 2 {
		t.Errorf("%d rows, want 2:\n%s", rows, out.String())
	}
}
