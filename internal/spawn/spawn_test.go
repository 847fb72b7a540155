package spawn

import (
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A child started through Start survives the exit of the thread that asked
// for it; started the plain way from such a thread, it is killed.
func TestChildSurvivesRequestingThreadExit(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip(err)
	}
	start := func(viaSpawner bool) *exec.Cmd {
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Locked and never unlocked: the thread exits with the goroutine.
			runtime.LockOSThread()
			var err error
			if viaSpawner {
				err = Start(cmd)
			} else {
				err = cmd.Start()
			}
			if err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		return cmd
	}
	alive := func(cmd *exec.Cmd) bool {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err == nil || !strings.Contains(err.Error(), "killed")
		case <-time.After(500 * time.Millisecond):
			return true
		}
	}

	safe := start(true)
	defer safe.Process.Kill()
	if !alive(safe) {
		t.Fatal("child started through Start was killed when the requesting thread exited")
	}

	plain := start(false)
	defer plain.Process.Kill()
	if alive(plain) {
		t.Log("plain cmd.Start child survived its thread's exit: the hazard did not show on this kernel/runtime")
	} else {
		t.Log("plain cmd.Start child was killed when its thread exited: the hazard Start avoids")
	}
}

func TestFreePortIsBindable(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d from FreePort: %v", port, err)
	}
	l.Close()
}
