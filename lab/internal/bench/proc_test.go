package bench

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (pg (bouncer) x) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 75 30 12 20 0 1 0 100 0 0\n"
	st, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if st != (procStat{ppid: 17, utime: 250, stime: 75, cutime: 30, cstime: 12}) {
		t.Errorf("parseStat = %+v", st)
	}
	for _, bad := range []string{"", "1 (x S 1 2", "1 (x) S 1 2 3", "1 (x) S a 1 1 0 -1 0 0 0 0 0 z 1 1 1 20"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

// fakeProc builds a /proc with one listener and a forking server: 100 is
// the parent holding socket 555, 101 its child sharing it, 102 unrelated.
func fakeProc(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(name, content string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("net/tcp", "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"+
		"   0: 0100007F:1A0B 00000000:0000 0A 00000000:00000000 00:00000000 00000000   108        0 555 1 0 100 0 0 10 0\n"+
		"   1: 0100007F:1A0B 0100007F:9999 01 00000000:00000000 00:00000000 00000000   108        0 556 1 0 100 0 0 10 0\n")
	stat := func(pid, ppid string, u, s, cu, cs string) string {
		return pid + " (srv) S " + ppid + " 1 1 0 -1 0 0 0 0 0 " + u + " " + s + " " + cu + " " + cs + " 20 0 1 0 1 0 0\n"
	}
	write("100/stat", stat("100", "1", "100", "50", "300", "100"))
	write("101/stat", stat("101", "100", "10", "5", "0", "0"))
	write("102/stat", stat("102", "1", "999", "999", "0", "0"))
	for _, pid := range []string{"100", "101", "102"} {
		if err := os.MkdirAll(filepath.Join(root, pid, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for pid, target := range map[string]string{"100": "socket:[555]", "101": "socket:[555]", "102": "socket:[556]"} {
		if err := os.Symlink(target, filepath.Join(root, pid, "fd", "3")); err != nil {
			t.Fatal(err)
		}
	}
	write("loadavg", "0.42 0.30 0.10 1/100 1234\n")
	write("cpuinfo", "processor\t: 0\nmodel name\t: Test CPU @ 1GHz\n")
	return root
}

func withProc(t *testing.T, root string) {
	old := procRoot
	procRoot = root
	t.Cleanup(func() { procRoot = old })
}

func TestProcFake(t *testing.T) {
	withProc(t, fakeProc(t))
	pid, err := ListenerPID(0x1A0B)
	if err != nil || pid != 100 {
		t.Fatalf("ListenerPID = %d, %v; want the parent 100", pid, err)
	}
	if _, err := ListenerPID(0x1A0C); err == nil {
		t.Error("ListenerPID found a listener on an unused port")
	}
	if _, err := ListenerPID(70000); err == nil {
		t.Error("ListenerPID accepted port 70000")
	}
	// Tree: own 100+50, reaped children 300+100, live child 10+5 = 565 ticks.
	if d, err := TreeCPU(100)(); err != nil || d != 565*clockTick {
		t.Errorf("TreeCPU = %v, %v; want %v", d, err, 565*clockTick)
	}
	if d, err := ProcessCPU(100, 101)(); err != nil || d != 165*clockTick {
		t.Errorf("ProcessCPU = %v, %v; want %v", d, err, 165*clockTick)
	}
	if _, err := ProcessCPU(999)(); err == nil {
		t.Error("ProcessCPU of a missing pid succeeded")
	}
	if l, err := LoadAverage(); err != nil || l != 0.42 {
		t.Errorf("LoadAverage = %v, %v", l, err)
	}
	if m := CPUModel(); m != "Test CPU @ 1GHz" {
		t.Errorf("CPUModel = %q", m)
	}
}

func TestProcReal(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp (not Linux)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := ListenerPID(ln.Addr().(*net.TCPAddr).Port)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("ListenerPID of our own listener = %d, %v; want %d", pid, err, os.Getpid())
	}
	if _, err := TreeCPU(pid)(); err != nil {
		t.Error(err)
	}
	if _, err := SelfCPU(); err != nil {
		t.Error(err)
	}
}

func TestParseMachineStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := parseMachineStat("cpu  100 5 40 9000 7 3 2 1 0 0\ncpu0 50 2 20 4500 3 1 1 0 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := ticks(100 + 5 + 40 + 3 + 2 + 1); got != want {
		t.Fatalf("busy = %v, want %v (idle and iowait left out)", got, want)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, err := parseMachineStat(bad); err == nil {
			t.Errorf("parseMachineStat(%q) accepted", bad)
		}
	}
}

func TestMachineCPUReadsProc(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat on this system")
	}
	a, err := MachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	b, err := MachineCPU()
	if err != nil || b < a {
		t.Fatalf("second reading %v (%v) below the first %v", b, err, a)
	}
}
