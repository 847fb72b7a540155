package bench

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// System calls and context switches: cachegrind counts the client's own
// instructions and leaves out the kernel's work, which on loopback is most
// of a lock cycle's CPU (the TCP stack of both ends runs in the sender's
// system call). perf records the kernel side event by event: each system
// call a thread of the client enters (the raw_syscalls tracepoint, and the
// common calls by name) and each time one of its threads leaves a CPU
// (sched:sched_switch), which is a wake-up to come. Like instructions, the
// counts of one cycle are a difference between two runs; unlike them they
// move with timing (a read that finds its reply already there needs no
// second read and no poll), so compare cells of one run.

// Perf events the system-call census records, and perf script's -F
// argument for ParsePerfScript.
const (
	EventSyscalls      = "raw_syscalls:sys_enter"
	EventContextSwitch = "sched:sched_switch"
	syscallEventPrefix = "syscalls:sys_enter_"
	PerfScriptFields   = "comm,event"
)

// SyscallEvent is the perf event of the system call name.
func SyscallEvent(name string) string { return syscallEventPrefix + name }

// ParsePerfScript reads the output of `perf script -F comm,event` and counts
// the events of the threads whose command name is comm, by event name
// ("raw_syscalls:sys_enter"). The kernel keeps the first 15 bytes of a
// command's name; comm is cut to them. Other processes' events (the
// servers perf followed as the client's children) are left out.
func ParsePerfScript(r io.Reader, comm string) (map[string]int64, error) {
	if len(comm) > 15 {
		comm = comm[:15]
	}
	counts := map[string]int64{}
	sc := bufio.NewScanner(r)
	lines := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		lines++
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || !strings.HasSuffix(line, ":") {
			return nil, fmt.Errorf("bench: perf script line %d: %q is not \"command event:\"", lines, line)
		}
		if strings.TrimSpace(line[:i]) != comm {
			continue
		}
		counts[strings.TrimSuffix(line[i+1:], ":")]++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(counts) == 0 {
		return nil, fmt.Errorf("bench: perf script: no event of the command %q among %d", comm, lines)
	}
	return counts, nil
}
