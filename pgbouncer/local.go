package pgbouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/internal/spawn"
)

// process is one server program the local back end started.
type process struct {
	name     string
	cmd      *exec.Cmd
	logPath  string
	logStart int64         // size of the log when this process started: its own lines follow
	done     chan struct{} // closed when the process has exited
	err      error         // Wait's result, valid after done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop signals the process and waits up to grace for it to exit, then kills
// it.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

type localCluster struct {
	opts  *options
	bins  binaries
	creds credentials
	dir   string              // the temporary directory holding everything
	cred  *syscall.Credential // nil: run as ourselves
	tls   *bouncerTLS         // nil: no TLS (the default)
	uid   int
	gid   int

	mu       sync.Mutex
	pgPort   int
	postgres *process
	bouncers map[Mode]*process
	ports    map[Mode]int
}

// maxPortTries bounds how often a server is restarted on another port when
// the one chosen was taken in the meantime.
const maxPortTries = 5

func startLocal(ctx context.Context, o *options, creds credentials) (_ *localCluster, err error) {
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	lc := &localCluster{opts: o, bins: bins, creds: creds, bouncers: map[Mode]*process{}, ports: map[Mode]int{}, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(o.osUser)
		if err != nil {
			return nil, fmt.Errorf("pgbouncer: running as root, PostgreSQL and PgBouncer need an unprivileged OS user (initdb refuses root): %w; create it (useradd %s) or choose another with WithOSUser", err, o.osUser)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		lc.uid, lc.gid = uid, gid
		lc.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	lc.dir, err = os.MkdirTemp("", "pgadvisory-cluster-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	defer func() {
		if err != nil {
			_ = lc.close()
		}
	}()
	if err := lc.chown(lc.dir); err != nil {
		return nil, err
	}
	start := time.Now()
	if o.tls != tlsOff {
		if lc.tls, err = lc.writeTLS(); err != nil {
			return nil, err
		}
	}
	if err := lc.initdb(ctx); err != nil {
		return nil, err
	}
	o.logf("pgbouncer: initdb done in %v", time.Since(start).Round(time.Millisecond))
	if err := lc.startPostgres(ctx, 0); err != nil {
		return nil, err
	}
	if err := lc.setupDatabase(ctx); err != nil {
		return nil, err
	}
	if err := lc.writeFile("userlist.txt", mustRender(renderUserlist(creds))); err != nil {
		return nil, err
	}
	for _, m := range o.modes {
		if err := lc.startBouncerOn(ctx, m, 0); err != nil {
			return nil, err
		}
	}
	o.logf("pgbouncer: PostgreSQL on 127.0.0.1:%d and PgBouncer %v ready in %v", lc.pgPort, o.modes, time.Since(start).Round(time.Millisecond))
	return lc, nil
}

func mustRender(s string, err error) string {
	if err != nil {
		// The inputs are the harness's own constants; a failure here is
		// a bug in the harness.
		panic(err)
	}
	return s
}

func (lc *localCluster) chown(path string) error {
	if lc.cred == nil {
		return nil
	}
	if err := os.Chown(path, lc.uid, lc.gid); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	return nil
}

func (lc *localCluster) writeFile(name, content string) error {
	p := filepath.Join(lc.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	return lc.chown(p)
}

func (lc *localCluster) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = lc.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: lc.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (lc *localCluster) initdb(ctx context.Context) error {
	cmd := lc.command(lc.bins.initdb, "-D", filepath.Join(lc.dir, "data"), "-U", lc.creds.superuser,
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runWithContext(ctx, cmd); err != nil {
		return fmt.Errorf("pgbouncer: initdb: %w\n%s", err, cli.Tail(out.String(), 20))
	}
	hba := filepath.Join("data", "pg_hba.conf")
	if lc.opts.tls == tlsRequired {
		return lc.writeFile(hba, renderHBASSL(lc.creds, "127.0.0.1/32", "127.0.0.1/32"))
	}
	return lc.writeFile(hba, renderHBA(lc.creds, "127.0.0.1/32", "127.0.0.1/32"))
}

func runWithContext(ctx context.Context, cmd *exec.Cmd) error {
	if err := spawn.Start(cmd); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return ctx.Err()
	}
}

// spawn starts a long-running server whose output goes to logName.
func (lc *localCluster) spawn(name, logName, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(lc.dir, logName)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	defer f.Close()
	var logStart int64
	if fi, err := f.Stat(); err == nil {
		logStart = fi.Size()
	}
	cmd := lc.command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := spawn.Start(cmd); err != nil {
		return nil, fmt.Errorf("pgbouncer: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logStart: logStart, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// freePort asks the kernel for a free port on the loopback. Another process
// may take it before the server binds it; callers retry on a bind error.
// A variable so that tests can hand out a taken port.
var freePort = kernelFreePort

func kernelFreePort() (int, error) {
	port, err := spawn.FreePort()
	if err != nil {
		return 0, fmt.Errorf("pgbouncer: %w", err)
	}
	return port, nil
}

// errPortTaken marks a server that exited because its port was in use.
var errPortTaken = errors.New("port already in use")

func portTaken(logText string) bool {
	return strings.Contains(logText, "could not bind") || strings.Contains(logText, "Address already in use")
}

// ownLog returns what p has written to its log since it started.
func (p *process) ownLog() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(p.logStart, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b)
}

// startPostgres starts the server on port, or on a free port when port is 0
// (retrying on a clash), and waits until it answers.
func (lc *localCluster) startPostgres(ctx context.Context, port int) error {
	fixed := port != 0
	for try := 0; ; try++ {
		if !fixed {
			var err error
			if port, err = freePort(); err != nil {
				return err
			}
		}
		args := []string{"-D", filepath.Join(lc.dir, "data"), "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + lc.dir}
		for _, s := range serverSettings {
			args = append(args, "-c", s)
		}
		for _, s := range postgresTLSSettings(lc.tls) {
			args = append(args, "-c", s)
		}
		p, err := lc.spawn("postgres", "postgres.log", lc.bins.postgres, args...)
		if err != nil {
			return err
		}
		lc.mu.Lock()
		lc.postgres, lc.pgPort = p, port
		lc.mu.Unlock()
		err = waitReady(ctx, p, lc.pingDSN(dsn(lc.creds.superuser, "", "127.0.0.1", port, "postgres")))
		if errors.Is(err, errPortTaken) && !fixed && try < maxPortTries {
			lc.opts.logf("pgbouncer: port %d taken, trying another", port)
			continue
		}
		if err != nil {
			return fmt.Errorf("pgbouncer: PostgreSQL did not start: %w\n%s", err, lc.logTail())
		}
		return nil
	}
}

// waitReady polls until a query through connString succeeds, the process
// exits, or ctx ends.
func waitReady(ctx context.Context, p *process, connString string) error {
	var lastErr error
	for {
		if p.exited() {
			if portTaken(p.ownLog()) {
				return errPortTaken
			}
			return fmt.Errorf("%s exited: %v", p.name, p.err)
		}
		// PgBouncer does not exit when its TCP port is taken: it warns
		// "cannot listen on ...: Address already in use" and serves the
		// unix socket alone, while the port answers for someone else.
		if portTaken(p.ownLog()) {
			p.stop(syscall.SIGKILL, 10*time.Second)
			return errPortTaken
		}
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		lastErr = ping(attempt, connString)
		cancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last error: %v)", p.name, ctx.Err(), lastErr)
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ping connects and runs one query with the simple protocol, which every
// server (and PgBouncer in every mode) accepts and which leaves no prepared
// statement behind.
func ping(ctx context.Context, connString string) error {
	conn, err := pgconn.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
	return err
}

func (lc *localCluster) setupDatabase(ctx context.Context) error {
	conn, err := pgconn.Connect(ctx, dsn(lc.creds.superuser, "", "127.0.0.1", lc.pgPort, "postgres"))
	if err != nil {
		return fmt.Errorf("pgbouncer: connect to set up: %w", err)
	}
	defer conn.Close(context.Background())
	for _, stmt := range setupSQL(lc.creds) {
		if _, err := conn.Exec(ctx, stmt).ReadAll(); err != nil {
			return fmt.Errorf("pgbouncer: set up database: %w", err)
		}
	}
	return nil
}

func (lc *localCluster) startBouncerOn(ctx context.Context, m Mode, port int) error {
	fixed := port != 0
	for try := 0; ; try++ {
		if !fixed {
			var err error
			if port, err = freePort(); err != nil {
				return err
			}
		}
		ini, err := renderIni(bouncerConfig{
			mode: m, serverHost: "127.0.0.1", serverPort: lc.pgPort,
			listenAddr: "127.0.0.1", listenPort: port,
			authFile: filepath.Join(lc.dir, "userlist.txt"), socketDir: lc.dir,
			widePool: lc.opts.widePool, creds: lc.creds, tls: lc.tls,
		})
		if err != nil {
			return err
		}
		iniName := "pgbouncer-" + string(m) + ".ini"
		if err := lc.writeFile(iniName, ini); err != nil {
			return err
		}
		p, err := lc.spawn("pgbouncer ("+string(m)+")", "pgbouncer-"+string(m)+".log", lc.bins.pgbouncer, filepath.Join(lc.dir, iniName))
		if err != nil {
			return err
		}
		lc.mu.Lock()
		lc.bouncers[m], lc.ports[m] = p, port
		lc.mu.Unlock()
		err = waitReady(ctx, p, lc.pingDSN(dsn(lc.creds.appUser, lc.creds.appPassword, "127.0.0.1", port, NarrowDatabase)))
		if errors.Is(err, errPortTaken) && !fixed && try < maxPortTries {
			lc.opts.logf("pgbouncer: port %d taken, trying another", port)
			continue
		}
		if err != nil {
			return fmt.Errorf("pgbouncer: PgBouncer (%s) did not start: %w\n%s", m, err, lc.logTail())
		}
		return nil
	}
}

// pingDSN is the DSN that readiness checks use: with TLS on it requires TLS,
// so that a server whose TLS set-up is broken does not count as ready.
func (lc *localCluster) pingDSN(d string) string {
	if lc.tls == nil {
		return d
	}
	return withSSLMode(d, "require")
}

func (lc *localCluster) postgresAddr() (string, int) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return "127.0.0.1", lc.pgPort
}

func (lc *localCluster) bouncerAddr(m Mode) (string, int, bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	p, ok := lc.ports[m]
	return "127.0.0.1", p, ok
}

func (lc *localCluster) stopBouncer(_ context.Context, m Mode, kill bool) error {
	lc.mu.Lock()
	p := lc.bouncers[m]
	lc.mu.Unlock()
	sig := syscall.SIGTERM // PgBouncer: immediate shutdown
	if kill {
		sig = syscall.SIGKILL
	}
	p.stop(sig, 10*time.Second)
	return nil
}

func (lc *localCluster) startBouncer(ctx context.Context, m Mode) error {
	lc.mu.Lock()
	p, port := lc.bouncers[m], lc.ports[m]
	lc.mu.Unlock()
	if p != nil && !p.exited() {
		return fmt.Errorf("pgbouncer: PgBouncer (%s) is already running", m)
	}
	return lc.startBouncerOn(ctx, m, port)
}

func (lc *localCluster) restartPostgres(ctx context.Context) error {
	lc.mu.Lock()
	p, port := lc.postgres, lc.pgPort
	lc.mu.Unlock()
	p.stop(syscall.SIGINT, 30*time.Second) // SIGINT: fast shutdown
	return lc.startPostgres(ctx, port)
}

func (lc *localCluster) logTail() string {
	lc.mu.Lock()
	procs := []*process{lc.postgres}
	for _, m := range AllModes {
		if p := lc.bouncers[m]; p != nil {
			procs = append(procs, p)
		}
	}
	lc.mu.Unlock()
	var b strings.Builder
	for _, p := range procs {
		if p == nil {
			continue
		}
		text, err := os.ReadFile(p.logPath)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- last lines of %s (%s) ---\n%s\n", p.name, p.logPath, cli.Tail(string(text), 15))
	}
	return b.String()
}

func (lc *localCluster) close() error {
	lc.mu.Lock()
	bouncers := make([]*process, 0, len(lc.bouncers))
	for _, p := range lc.bouncers {
		bouncers = append(bouncers, p)
	}
	pg := lc.postgres
	lc.mu.Unlock()
	for _, p := range bouncers {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
	pg.stop(syscall.SIGINT, 30*time.Second)
	if lc.dir == "" {
		return nil
	}
	if err := os.RemoveAll(lc.dir); err != nil {
		return fmt.Errorf("pgbouncer: remove %s: %w", lc.dir, err)
	}
	return nil
}
