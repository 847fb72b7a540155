package toolcheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory"
)

// The protocol between the test and the children it starts: the test binary
// re-executes itself with childEnv set to a JSON childSpec; TestMain then
// runs that one tool instead of the tests. The child prints readyLine,
// waits for "go" on its standard input, runs the tool, and prints one
// resultPrefix line with a JSON childResult. Its exit code is 0 when the
// tool succeeded, 1 when it returned an error (also written to stderr),
// 2 when the child itself could not run.
const (
	childEnv     = "TOOLCHECK_CHILD"
	readyLine    = "TOOLCHECK-READY"
	resultPrefix = "TOOLCHECK-RESULT "
)

// childSpec tells a child what to run.
type childSpec struct {
	Tool    string        `json:"tool"`
	Driver  string        `json:"driver"` // viaPgadvisory or viaPlainPgx
	DSN     string        `json:"dsn"`
	Index   int           `json:"index"`
	Timeout time.Duration `json:"timeout"` // the child's own deadline, for the tool's context
}

// childResult is what a child reports.
type childResult struct {
	Index   int `json:"index"`
	Applied int `json:"applied"` // migrations this process applied
	// Err is the tool's error, "" on success.
	Err string `json:"err,omitempty"`
	// SessionLock says how the error matched pgadvisory.ErrSessionLock in
	// the child: "errors.Is" (database/sql's typed error), "Refusal" (pgx's
	// *pgconn.PgError with SQLSTATE PA001, through pgadvisory.Refusal), or
	// "" (no match, for example where the tool's error type keeps the
	// cause without Unwrap).
	SessionLock string `json:"session_lock,omitempty"`
	ElapsedMS   int64  `json:"elapsed_ms"`
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(childMain(raw))
	}
	os.Exit(m.Run())
}

func childMain(raw string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "toolcheck child: bad %s: %v\n", childEnv, err)
		return 2
	}
	tl, ok := tools[spec.Tool]
	if !ok {
		fmt.Fprintf(os.Stderr, "toolcheck child: unknown tool %q\n", spec.Tool)
		return 2
	}
	if spec.Timeout <= 0 {
		spec.Timeout = 2 * time.Minute
	}
	fmt.Println(readyLine)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "go" {
		fmt.Fprintf(os.Stderr, "toolcheck child %d: not released by the parent (%q, %v)\n", spec.Index, line, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), spec.Timeout)
	defer cancel()
	start := time.Now()
	applied, err := tl.run(ctx, spec.Driver, spec.DSN)
	res := childResult{Index: spec.Index, Applied: applied, ElapsedMS: time.Since(start).Milliseconds()}
	if err != nil {
		res.Err = err.Error()
		switch {
		case errors.Is(err, pgadvisory.ErrSessionLock):
			res.SessionLock = "errors.Is"
		case errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrSessionLock):
			res.SessionLock = "Refusal"
		}
	}
	b, _ := json.Marshal(res)
	fmt.Println(resultPrefix + string(b))
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolcheck child %d (%s via %s): %v\n", spec.Index, spec.Tool, spec.Driver, err)
		return 1
	}
	return 0
}

// TestChildProtocol keeps the re-exec path honest without a server: a child
// with an unknown tool exits 2 and says why on stderr.
func TestChildProtocol(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(childSpec{Tool: "no-such-tool"})
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "unknown tool") {
		t.Fatalf("child with an unknown tool: err %v, stderr %q; want exit 2 and \"unknown tool\"", err, stderr.String())
	}
}

// child is one started process, seen from the parent.
type child struct {
	index  int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{} // closed at readyLine
	done   chan struct{} // closed after Wait
	stderr bytes.Buffer

	// Written by the reader goroutine before done is closed.
	stdout  strings.Builder
	result  *childResult
	waitErr error
}

// childOutcome is how a child ended.
type childOutcome struct {
	Index    int
	PID      int
	ExitCode int  // -1 when killed by a signal
	Killed   bool // the parent killed it at the hard timeout
	Result   *childResult
	Stdout   string
	Stderr   string
}

func (o childOutcome) String() string {
	s := fmt.Sprintf("child %d (pid %d): exit %d", o.Index, o.PID, o.ExitCode)
	if o.Killed {
		s += " (killed at the hard timeout)"
	}
	if o.Result != nil {
		s += fmt.Sprintf(", applied %d, %d ms", o.Result.Applied, o.Result.ElapsedMS)
		if o.Result.Err != "" {
			s += fmt.Sprintf(", error: %s", o.Result.Err)
		}
	} else {
		s += ", no result line"
	}
	if o.Stderr != "" {
		s += fmt.Sprintf("\n    stderr: %s", strings.TrimSpace(o.Stderr))
	}
	return s
}

// readyTimeout bounds the start of the children (a process start and Go
// runtime init, no database work).
const readyTimeout = 30 * time.Second

// runChildren starts n children running spec at once and waits for them.
// Any child still running after hardTimeout is killed by its PID, after
// onTimeout (may be nil) had a chance to log the server's state; so is
// any child still running when the test ends.
func runChildren(t *testing.T, spec childSpec, n int, hardTimeout time.Duration, onTimeout func()) []childOutcome {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	children := make([]*child, 0, n)
	t.Cleanup(func() {
		for _, c := range children {
			select {
			case <-c.done:
			default:
				_ = c.cmd.Process.Kill() // this PID only: a child this test started
				<-c.done
			}
		}
	})
	for i := range n {
		s := spec
		s.Index = i + 1
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		c := &child{index: s.Index, ready: make(chan struct{}), done: make(chan struct{})}
		// -test.run=^$: were the environment variable lost, the binary
		// would run no test rather than all of them again.
		c.cmd = exec.Command(exe, "-test.run=^$")
		c.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
		c.cmd.Stderr = &c.stderr
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start child %d: %v", s.Index, err)
		}
		children = append(children, c)
		go c.read(stdout)
	}

	// Release them together once all are ready.
	readyBy := time.After(readyTimeout)
	for _, c := range children {
		select {
		case <-c.ready:
		case <-c.done:
			t.Fatalf("child %d ended before it was ready: %v\nstdout: %s\nstderr: %s", c.index, c.waitErr, c.stdout.String(), c.stderr.String())
		case <-readyBy:
			t.Fatalf("child %d not ready within %v", c.index, readyTimeout)
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatalf("release child %d: %v", c.index, err)
		}
		_ = c.stdin.Close()
	}

	allDone := make(chan struct{})
	go func() {
		for _, c := range children {
			<-c.done
		}
		close(allDone)
	}()
	killed := map[int]bool{}
	select {
	case <-allDone:
	case <-time.After(hardTimeout):
		if onTimeout != nil {
			onTimeout()
		}
		for _, c := range children {
			select {
			case <-c.done:
			default:
				killed[c.index] = true
				t.Logf("child %d (pid %d) still running after %v: killing it", c.index, c.cmd.Process.Pid, hardTimeout)
				_ = c.cmd.Process.Kill()
			}
		}
		<-allDone
	}

	outs := make([]childOutcome, 0, n)
	for _, c := range children {
		outs = append(outs, childOutcome{
			Index:    c.index,
			PID:      c.cmd.Process.Pid,
			ExitCode: c.cmd.ProcessState.ExitCode(),
			Killed:   killed[c.index],
			Result:   c.result,
			Stdout:   c.stdout.String(),
			Stderr:   c.stderr.String(),
		})
	}
	return outs
}

// read consumes the child's stdout until it closes, then waits for the
// process.
func (c *child) read(r io.Reader) {
	var once sync.Once
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == readyLine:
			once.Do(func() { close(c.ready) })
		case strings.HasPrefix(line, resultPrefix):
			var res childResult
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, resultPrefix)), &res); err == nil {
				c.result = &res
			} else {
				fmt.Fprintf(&c.stdout, "(unreadable result line: %v)\n", err)
			}
		default:
			c.stdout.WriteString(line + "\n")
		}
	}
	_, _ = io.Copy(io.Discard, r)
	c.waitErr = c.cmd.Wait()
	close(c.done)
}
