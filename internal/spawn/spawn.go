// Package spawn starts child processes whose parent-death signal
// (SysProcAttr.Pdeathsig) means what it says.
//
// Linux delivers the parent-death signal when the *thread* that forked the
// child exits, not when the process does. Go may start a child from any of
// its threads, and a thread can exit while the process lives on (a goroutine
// that ends while locked to its thread takes the thread with it), which kills
// the child for no reason: a test server that vanishes mid-run. Start forks
// every child from one goroutine locked to its thread for the life of the
// process, so the signal fires only when the process itself dies.
package spawn

import (
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"sync"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once     sync.Once
	requests = make(chan request)
)

// Start is cmd.Start, run on the spawner thread.
func Start(cmd *exec.Cmd) error {
	once.Do(func() { go spawner() })
	r := request{cmd: cmd, done: make(chan error, 1)}
	requests <- r
	return <-r.done
}

// spawner never unlocks its thread and never returns, so the thread that
// forks every child lives exactly as long as the process.
func spawner() {
	runtime.LockOSThread()
	for r := range requests {
		r.done <- r.cmd.Start()
	}
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1 for a child
// server to listen on. Another process may take it before the child binds
// it; callers retry on a bind error.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
