package settle

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/internal/spawn"
)

// WorkerEnv is the environment variable that carries a WorkerSpec (as JSON)
// to a worker process.
const WorkerEnv = "PGADVISORY_SETTLE_WORKER"

// WorkerSpec is everything a worker process needs.
type WorkerSpec struct {
	Name string
	Run  string
	// Driver is the database/sql driver name, "pgx" or "pgadvisory", or
	// DriverPgxpool for a pgx-native worker (pgxadvisory on pgxpool).
	Driver string
	// LockDSN takes the locks; StoreDSN receives the writes ("" = LockDSN).
	LockDSN, StoreDSN string
	Unsafe            bool
	Events            int
	Seed              uint64 // delivery order
	Lease             time.Duration
	LockTimeout       time.Duration
	Work              time.Duration
	// MaxLife ends the worker if the run takes longer, so that no test can
	// leave a process behind.
	MaxLife time.Duration
}

// IsWorker reports whether this process was started as a worker.
func IsWorker() bool { return os.Getenv(WorkerEnv) != "" }

// WorkerMain runs the worker described by WorkerEnv, printing progress lines
// on stdout, and returns the process exit code: 0 when every delivery was
// handled, 1 on an error, 3 when the driver refused the worker's SQL (an
// unsafe worker through pgadvisory).
func WorkerMain() int {
	var spec WorkerSpec
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "settle: bad %s: %v\n", WorkerEnv, err)
		return 1
	}
	life := spec.MaxLife
	if life <= 0 {
		life = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), life)
	defer cancel()
	err := RunWorker(ctx, spec, os.Stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, pgadvisory.ErrSessionLock):
		fmt.Fprintf(os.Stdout, "%s -1 %s\n", StepRejected, err)
		return 3
	default:
		fmt.Fprintf(os.Stderr, "settle: worker %s: %v\n", spec.Name, err)
		return 1
	}
}

// StepRejected is printed when the driver refused the worker's SQL.
const StepRejected Step = "rejected"

// DriverPgxpool in WorkerSpec.Driver runs the safe worker pgx-native:
// pgxadvisory.WithXactLock and pgxadvisory.CheckToken over two pgxpool
// pools of one connection each. Behind a transaction pooler its DSNs need
// default_query_exec_mode=exec (or simple_protocol), as for any pgx user.
const DriverPgxpool = "pgxpool"

// RunWorker opens the worker's databases and processes its deliveries.
func RunWorker(ctx context.Context, spec WorkerSpec, out io.Writer) error {
	if spec.Driver == "" {
		spec.Driver = "pgx"
	}
	if spec.Driver == DriverPgxpool {
		return runPgxWorker(ctx, spec, out)
	}
	lockDB, err := sql.Open(spec.Driver, spec.LockDSN)
	if err != nil {
		return err
	}
	defer lockDB.Close()
	// One connection: the unsafe pattern then keeps its lock and unlock on
	// one client connection, as careful naive code would, so that only the
	// pooler can break it.
	lockDB.SetMaxOpenConns(1)
	storeDB := lockDB
	if spec.StoreDSN != "" && spec.StoreDSN != spec.LockDSN {
		if storeDB, err = sql.Open(spec.Driver, spec.StoreDSN); err != nil {
			return err
		}
		defer storeDB.Close()
		storeDB.SetMaxOpenConns(1)
	} else if !spec.Unsafe {
		// The safe worker writes while its lock transaction is open.
		if storeDB, err = sql.Open(spec.Driver, spec.LockDSN); err != nil {
			return err
		}
		defer storeDB.Close()
		storeDB.SetMaxOpenConns(1)
	}
	w := &Worker{
		Name: spec.Name, Run: spec.Run, LockDB: lockDB, StoreDB: storeDB, Unsafe: spec.Unsafe,
		Lease: spec.Lease, LockTimeout: spec.LockTimeout, Work: spec.Work, Out: out,
	}
	return w.Process(ctx, Deliveries(spec.Events, spec.Seed))
}

// runPgxWorker is RunWorker for DriverPgxpool: like the database/sql
// worker, one connection takes the locks and another writes.
func runPgxWorker(ctx context.Context, spec WorkerSpec, out io.Writer) error {
	open := func(dsn string) (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = 1
		return pgxpool.NewWithConfig(ctx, cfg)
	}
	storeDSN := spec.StoreDSN
	if storeDSN == "" {
		storeDSN = spec.LockDSN
	}
	lockPool, err := open(spec.LockDSN)
	if err != nil {
		return err
	}
	defer lockPool.Close()
	storePool, err := open(storeDSN)
	if err != nil {
		return err
	}
	defer storePool.Close()
	w := &Worker{
		Name: spec.Name, Run: spec.Run, LockPool: lockPool, StorePool: storePool, Unsafe: spec.Unsafe,
		Lease: spec.Lease, LockTimeout: spec.LockTimeout, Work: spec.Work, Out: out,
	}
	return w.Process(ctx, Deliveries(spec.Events, spec.Seed))
}

// Proc is a worker process started by StartProc.
type Proc struct {
	Spec WorkerSpec
	cmd  *exec.Cmd

	mu      sync.Mutex
	lines   []Line
	changed chan struct{} // closed and replaced on every new line
	done    chan struct{}
	err     error
	stderr  *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) < 1<<20 {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// StartProc starts a worker process: argv[0] with argv[1:], with WorkerEnv
// set to spec. argv must lead to WorkerMain (a test binary whose TestMain
// checks IsWorker, or `pgadvisory settle-worker`).
func StartProc(spec WorkerSpec, argv ...string) (*Proc, error) {
	if len(argv) == 0 {
		return nil, errors.New("settle: StartProc needs a command")
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(js))
	// The worker dies with its parent, whatever happens to the parent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Proc{Spec: spec, cmd: cmd, changed: make(chan struct{}), done: make(chan struct{}), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := spawn.Start(cmd); err != nil {
		return nil, fmt.Errorf("settle: start worker %s: %w", spec.Name, err)
	}
	go func() {
		ScanLines(spec.Name, stdout, func(l Line) {
			p.mu.Lock()
			p.lines = append(p.lines, l)
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		})
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Lines returns a copy of the lines printed so far.
func (p *Proc) Lines() []Line {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Line(nil), p.lines...)
}

// Stderr returns what the worker printed on stderr.
func (p *Proc) Stderr() string { return p.stderr.String() }

// PID returns the worker's process ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the worker.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// WaitLine waits for the first line, at or after index from, that match
// accepts, and returns it with its index.
func (p *Proc) WaitLine(ctx context.Context, from int, match func(Line) bool) (Line, int, error) {
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if match(p.lines[i]) {
				l := p.lines[i]
				p.mu.Unlock()
				return l, i, nil
			}
		}
		from = len(p.lines)
		changed := p.changed
		exited := p.isDone()
		p.mu.Unlock()
		if exited {
			return Line{}, from, fmt.Errorf("settle: worker %s exited (%v) before the awaited line; stderr: %s", p.Spec.Name, p.Wait(), p.Stderr())
		}
		select {
		case <-ctx.Done():
			return Line{}, from, fmt.Errorf("settle: worker %s: awaited line: %w", p.Spec.Name, ctx.Err())
		case <-changed:
		}
	}
}

func (p *Proc) isDone() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit and returns its exit error.
func (p *Proc) Wait() error {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill ends the process (SIGKILL) and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
