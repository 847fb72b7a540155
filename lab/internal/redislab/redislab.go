// Package redislab starts and stops independent local redis-server
// processes, the N masters a Redlock client (github.com/go-redsync/redsync)
// needs, for the pgadvisory benchmark.
//
// Each instance is a separate redis-server on its own free port of
// 127.0.0.1, with persistence off (no RDB snapshots, no AOF), in a temporary
// directory that Close removes:
//
//	lab, err := redislab.Start(ctx, 5)
//	if err != nil {
//		return err // a *MissingBinaryError names the Debian package
//	}
//	defer lab.Close()
//	for _, addr := range lab.Addrs() {
//		// redis.NewClient(&redis.Options{Addr: addr}) ...
//	}
//
// Each instance is started with the Linux parent-death signal, so the kernel
// kills it if this process dies and an interrupted benchmark leaves no
// servers behind. redis-server runs as the calling user; unlike PostgreSQL
// it does not refuse root.
package redislab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	childproc "github.com/pgadvisory/pgadvisory/internal/spawn"
)

// Package is the Debian package that provides redis-server.
const Package = "redis-server"

// DefaultBinary is where Debian's redis-server package installs the server.
const DefaultBinary = "/usr/bin/redis-server"

// DefaultStartTimeout bounds Start when the context has no deadline.
const DefaultStartTimeout = 30 * time.Second

// MaxInstances bounds how many servers one Start may launch.
const MaxInstances = 64

// maxPortTries bounds how often an instance is restarted on another port
// when the free port chosen was taken in the meantime.
const maxPortTries = 5

// MissingBinaryError reports that redis-server could not be found.
type MissingBinaryError struct {
	Searched []string // the places looked at
}

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("redislab: redis-server not found (looked on PATH and at %s); install it with: apt-get install -y %s",
		strings.Join(e.Searched, ", "), Package)
}

// Option configures Start.
type Option func(*options) error

type options struct {
	binary string
	logf   func(format string, args ...any)
}

// WithBinary uses the redis-server program at path instead of looking on
// PATH and at DefaultBinary.
func WithBinary(path string) Option {
	return func(o *options) error {
		if path == "" {
			return errors.New("redislab: WithBinary needs a path")
		}
		o.binary = path
		return nil
	}
}

// WithLogf receives progress lines.
func WithLogf(logf func(format string, args ...any)) Option {
	return func(o *options) error {
		if logf == nil {
			return errors.New("redislab: WithLogf needs a function")
		}
		o.logf = logf
		return nil
	}
}

// Lab is a set of running, independent redis-server instances. Its methods
// are safe for concurrent use.
type Lab struct {
	dir   string
	addrs []string

	mu     sync.Mutex
	procs  []*instance
	closed bool
}

type instance struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// FindBinary returns the path of redis-server: on PATH, else DefaultBinary.
func FindBinary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if st, err := os.Stat(DefaultBinary); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return DefaultBinary, nil
	}
	return "", &MissingBinaryError{Searched: []string{DefaultBinary}}
}

// Start launches n independent redis-server instances on free ports of
// 127.0.0.1 and waits until each answers PING. The caller must Close the
// Lab. When ctx has no deadline, DefaultStartTimeout applies.
func Start(ctx context.Context, n int, opts ...Option) (_ *Lab, err error) {
	if n < 1 || n > MaxInstances {
		return nil, fmt.Errorf("redislab: instance count %d out of range 1..%d", n, MaxInstances)
	}
	o := &options{logf: func(string, ...any) {}}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("redislab: nil Option")
		}
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.binary == "" {
		if o.binary, err = FindBinary(); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(o.binary); err != nil {
		return nil, &MissingBinaryError{Searched: []string{o.binary}}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	dir, err := os.MkdirTemp("", "pgadvisory-redislab-")
	if err != nil {
		return nil, fmt.Errorf("redislab: %w", err)
	}
	lab := &Lab{dir: dir}
	defer func() {
		if err != nil {
			_ = lab.Close()
		}
	}()
	start := time.Now()
	for i := range n {
		if err := lab.startOne(ctx, o.binary, i); err != nil {
			return nil, err
		}
	}
	o.logf("redislab: %d redis-server instances ready on %s in %v", n, strings.Join(lab.addrs, ", "), time.Since(start).Round(time.Millisecond))
	return lab, nil
}

func (l *Lab) startOne(ctx context.Context, bin string, i int) error {
	idir := filepath.Join(l.dir, strconv.Itoa(i))
	if err := os.Mkdir(idir, 0o700); err != nil {
		return fmt.Errorf("redislab: %w", err)
	}
	var lastErr error
	for range maxPortTries {
		port, err := childproc.FreePort()
		if err != nil {
			return fmt.Errorf("redislab: %w", err)
		}
		inst, err := spawn(bin, idir, port)
		if err != nil {
			return err
		}
		l.mu.Lock()
		l.procs = append(l.procs, inst)
		l.mu.Unlock()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := waitReady(ctx, addr, inst); err != nil {
			lastErr = err
			inst.stop()
			if ctx.Err() != nil {
				return err
			}
			continue // most likely the port was taken meanwhile: another one
		}
		l.addrs = append(l.addrs, addr)
		return nil
	}
	return fmt.Errorf("redislab: instance %d did not start after %d tries: %w", i, maxPortTries, lastErr)
}

func spawn(bin, dir string, port int) (*instance, error) {
	logPath := filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log")
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "yes",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", logPath,
	)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("redislab: start %s: %w", bin, err)
	}
	inst := &instance{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		close(inst.done)
	}()
	return inst, nil
}

// waitReady polls addr with PING until it answers +PONG, the process exits
// or ctx ends.
func waitReady(ctx context.Context, addr string, inst *instance) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		if lastErr = ping(ctx, addr); lastErr == nil {
			return nil
		}
		select {
		case <-inst.done:
			return fmt.Errorf("redislab: redis-server on %s exited: %s", addr, logTail(inst.log))
		case <-ctx.Done():
			return fmt.Errorf("redislab: redis-server on %s not ready: %w (last error: %v)", addr, ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
}

// ping sends one inline PING and expects +PONG.
func ping(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}

func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

func (inst *instance) stop() {
	select {
	case <-inst.done:
		return
	default:
	}
	_ = inst.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-inst.done:
	case <-time.After(5 * time.Second):
		_ = inst.cmd.Process.Kill()
		<-inst.done
	}
}

// Addrs returns the host:port addresses of the instances, in start order.
func (l *Lab) Addrs() []string { return append([]string(nil), l.addrs...) }

// PIDs returns the process IDs of the running instances.
func (l *Lab) PIDs() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var pids []int
	for _, p := range l.procs {
		select {
		case <-p.done:
		default:
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	return pids
}

// Close stops every instance (SIGTERM, then SIGKILL after 5 seconds) and
// removes the temporary directory. It is safe to call more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	procs := l.procs
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop()
		}()
	}
	wg.Wait()
	if err := os.RemoveAll(l.dir); err != nil {
		return fmt.Errorf("redislab: %w", err)
	}
	return nil
}
