package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUMeter reports the CPU time a process (or a group of processes) has
// used so far. The engine reads every meter before and after a cell's
// measured phase and reports the difference per second of wall time, in
// cores.
type CPUMeter func() (time.Duration, error)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports (it is part of the kernel ABI).
const clockTick = 10 * time.Millisecond

// procRoot is /proc, replaceable in tests.
var procRoot = "/proc"

// procStat holds the fields of /proc/<pid>/stat the meters need.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
}

// parseStat parses the content of /proc/<pid>/stat. The command name (field
// 2) is in parentheses and may itself contain spaces and parentheses, so
// the fields are counted from the last ')'.
func parseStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("bench: malformed /proc stat: no ')'")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, so f[11].
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("bench: malformed /proc stat: %d fields after the name", len(f))
	}
	var st procStat
	var err error
	num := func(k int) int64 {
		if err != nil {
			return 0
		}
		var v int64
		v, err = strconv.ParseInt(f[k], 10, 64)
		return v
	}
	st.ppid = int(num(1))
	st.utime, st.stime, st.cutime, st.cstime = num(11), num(12), num(13), num(14)
	if err != nil {
		return procStat{}, fmt.Errorf("bench: malformed /proc stat: %w", err)
	}
	return st, nil
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

func ticks(n int64) time.Duration { return time.Duration(n) * clockTick }

// ProcessCPU returns a meter for the processes pids (user + system time).
func ProcessCPU(pids ...int) CPUMeter {
	return func() (time.Duration, error) {
		var total time.Duration
		for _, pid := range pids {
			st, err := readStat(pid)
			if err != nil {
				return 0, fmt.Errorf("bench: cpu of pid %d: %w", pid, err)
			}
			total += ticks(st.utime + st.stime)
		}
		return total, nil
	}
}

// TreeCPU returns a meter for a forking server such as PostgreSQL's
// postmaster: the process itself, its live children, and the children it
// has already reaped (cutime, cstime) — so the CPU of backends that exit
// during a cell is not lost.
func TreeCPU(pid int) CPUMeter {
	return func() (time.Duration, error) {
		root, err := readStat(pid)
		if err != nil {
			return 0, fmt.Errorf("bench: cpu of pid %d: %w", pid, err)
		}
		total := ticks(root.utime + root.stime + root.cutime + root.cstime)
		entries, err := os.ReadDir(procRoot)
		if err != nil {
			return 0, fmt.Errorf("bench: %w", err)
		}
		for _, e := range entries {
			child, err := strconv.Atoi(e.Name())
			if err != nil || child == pid {
				continue
			}
			st, err := readStat(child)
			if err != nil || st.ppid != pid {
				continue // gone meanwhile, or not ours
			}
			total += ticks(st.utime + st.stime)
		}
		return total, nil
	}
}

// SelfCPU is a meter for this process (getrusage).
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("bench: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// ListenerPID returns the process that listens on TCP port of the loopback
// (127.0.0.1, ::1 or any address), found through /proc/net/tcp{,6} and the
// processes' file descriptors. It needs permission to read those
// descriptors: the same user or root. When several processes share the
// socket (a server that forks without closing it), the one whose parent is
// not among them is returned.
func ListenerPID(port int) (int, error) {
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("bench: port %d out of range", port)
	}
	inodes := map[string]bool{}
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		f, err := os.Open(filepath.Join(procRoot, name))
		if err != nil {
			continue
		}
		for _, ino := range listenInodes(f, port) {
			inodes[ino] = true
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("bench: no local listener on port %d in %s/net/tcp", port, procRoot)
	}
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	holders := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join(procRoot, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				holders[pid] = true
				break
			}
		}
	}
	for pid := range holders {
		if st, err := readStat(pid); err == nil && !holders[st.ppid] {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("bench: no readable process holds the listener on port %d (another user's process?)", port)
}

// listenInodes returns the socket inodes of the LISTEN entries on port in a
// /proc/net/tcp-format table.
func listenInodes(f *os.File, port int) []string {
	want := fmt.Sprintf(":%04X", port)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(fs) < 10 || fs[3] != "0A" || !strings.HasSuffix(fs[1], want) {
			continue
		}
		out = append(out, fs[9])
	}
	return out
}

// LoadAverage returns the 1-minute load average from /proc/loadavg.
func LoadAverage() (float64, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "loadavg"))
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("bench: empty /proc/loadavg")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("bench: /proc/loadavg: %w", err)
	}
	return v, nil
}

// CPUModel returns the processor model name from /proc/cpuinfo, or "" when
// it cannot be read.
func CPUModel() string {
	b, err := os.ReadFile(filepath.Join(procRoot, "cpuinfo"))
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// MeterMachine is the name of the meter for the whole machine
// (MachineCPU): every process, ours and others, plus interrupt time. It is
// shown beside the per-process meters, never added to them.
const MeterMachine = "machine"

// MachineCPU is a meter for the whole machine: the busy time of all CPUs
// from the first line of /proc/stat (user, nice, system, irq, softirq,
// steal; not idle or iowait). Beside the per-process meters it tells how
// much of the machine other processes took during a cell.
func MachineCPU() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return 0, fmt.Errorf("bench: machine cpu: %w", err)
	}
	return parseMachineStat(string(b))
}

// parseMachineStat returns the busy time in the "cpu" line of /proc/stat.
func parseMachineStat(s string) (time.Duration, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice]
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("bench: malformed /proc/stat first line %q", line)
	}
	var busy int64
	for _, k := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: malformed /proc/stat: %w", err)
		}
		busy += v
	}
	return ticks(busy), nil
}
