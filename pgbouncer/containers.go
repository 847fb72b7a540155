package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// DockerModule is the package that provides the Docker back end. It is a
// module of its own, so that the harness (and the library module that holds
// it) needs no container library; a blank import registers it:
//
//	import _ "github.com/pgadvisory/pgadvisory/pgbouncer/docker"
const DockerModule = "github.com/pgadvisory/pgadvisory/pgbouncer/docker"

// ContainerRuntime runs the containers of the Docker back end. The harness
// renders their configuration (the same as the local back end's) and waits
// until every server answers; a runtime only starts, stops and reports
// containers. Package pgbouncer/docker (see DockerModule) provides one over
// testcontainers-go.
type ContainerRuntime interface {
	// Available reports whether a container engine answers.
	Available(ctx context.Context) error
	// Run starts the containers of spec on a private network: PostgreSQL
	// first, reachable from the PgBouncers by spec.PostgresAlias, then one
	// PgBouncer per key of spec.BouncerFiles. It returns once PostgreSQL
	// has finished its initialisation and every PgBouncer listens, with
	// the containers' ports published on the host. On an error it removes
	// what it started.
	Run(ctx context.Context, spec ContainerSpec) (RunningContainers, error)
}

// ContainerSpec is what a ContainerRuntime runs.
type ContainerSpec struct {
	// PostgresImage and BouncerImage are the images (WithImages).
	PostgresImage, BouncerImage string
	// PostgresAlias is PostgreSQL's host name on the private network.
	PostgresAlias string
	// PostgresPort and BouncerPort are the ports the servers listen on
	// inside their containers.
	PostgresPort, BouncerPort int
	// PostgresCommand is the PostgreSQL container's command line and
	// PostgresEnv its environment.
	PostgresCommand []string
	PostgresEnv     map[string]string
	// PostgresFiles are written into the PostgreSQL container before it
	// starts; BouncerFiles, per pool mode, into that mode's PgBouncer.
	PostgresFiles []ContainerFile
	BouncerFiles  map[Mode][]ContainerFile
}

// ContainerFile is a file written into a container before it starts.
type ContainerFile struct {
	Path    string // absolute path in the container
	Content string
}

// RunningContainers are the containers a ContainerRuntime started. Addresses
// are the host side of the published ports; they may change when a container
// restarts. Its methods are called by one goroutine at a time, except the
// address methods, which must be safe for concurrent use.
type RunningContainers interface {
	PostgresAddr() (host string, port int)
	BouncerAddr(m Mode) (host string, port int, ok bool)
	// StopBouncer stops the PgBouncer of mode m: at once (SIGKILL) when
	// kill is set, else gracefully.
	StopBouncer(ctx context.Context, m Mode, kill bool) error
	// StartBouncer starts the stopped PgBouncer of mode m again.
	StartBouncer(ctx context.Context, m Mode) error
	// RestartPostgres stops PostgreSQL gracefully and starts it again.
	RestartPostgres(ctx context.Context) error
	// Logs returns each container's log so far.
	Logs(ctx context.Context) []ContainerLog
	// Close removes the containers and their network.
	Close() error
}

// ContainerLog is the log of one container.
type ContainerLog struct {
	Name string // for example "postgres container"
	Text string
}

var (
	runtimeMu  sync.Mutex
	registered ContainerRuntime
)

// RegisterContainerRuntime makes r the Docker back end's runtime of every
// later Start that has no WithContainerRuntime. Package pgbouncer/docker
// calls it when imported. A nil r unregisters.
func RegisterContainerRuntime(r ContainerRuntime) {
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	registered = r
}

func registeredRuntime() ContainerRuntime {
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	return registered
}

// WithContainerRuntime runs the Docker back end of this Start on r instead of
// the registered runtime.
func WithContainerRuntime(r ContainerRuntime) Option {
	return func(o *options) error {
		if r == nil {
			return errors.New("pgbouncer: WithContainerRuntime needs a runtime")
		}
		o.runtime = r
		return nil
	}
}

// errNoRuntime is the Docker back end's error when no runtime is linked.
var errNoRuntime = errors.New("pgbouncer: the Docker back end is not linked into this program: import _ \"" + DockerModule + "\" or pass WithContainerRuntime")

// The Docker back end runs PostgreSQL and each PgBouncer in its own container
// on one private network; PgBouncer reaches PostgreSQL by the network alias
// postgresAlias. The containers' ports are published on the host's loopback.
const (
	postgresAlias      = "postgres"
	containerPGPort    = 5432
	containerBouncerPt = 6432
	containerConfigDir = "/etc/pgbouncer"
)

// dockerFiles is the configuration the Docker back end mounts into its
// containers, rendered by the same code as the local back end's.
type dockerFiles struct {
	hba      string            // pg_hba.conf for PostgreSQL
	initSQL  string            // run once by the postgres image's entrypoint
	ini      map[Mode]string   // pgbouncer.ini per pool mode
	userlist string            // PgBouncer's auth_file
	env      map[string]string // environment of the postgres container
}

func renderDockerFiles(modes []Mode, widePool int, creds credentials) (dockerFiles, error) {
	f := dockerFiles{ini: map[Mode]string{}}
	// Only the containers' private network and Docker's port publishing
	// reach PostgreSQL; the superuser is trusted from anywhere it can come.
	f.hba = renderHBA(creds, "0.0.0.0/0", "0.0.0.0/0")
	f.initSQL = strings.Join(setupSQL(creds), ";\n") + ";\n"
	var err error
	if f.userlist, err = renderUserlist(creds); err != nil {
		return f, err
	}
	for _, m := range modes {
		ini, err := renderIni(bouncerConfig{
			mode: m, serverHost: postgresAlias, serverPort: containerPGPort,
			listenAddr: "0.0.0.0", listenPort: containerBouncerPt,
			authFile: containerConfigDir + "/userlist.txt",
			widePool: widePool, creds: creds,
		})
		if err != nil {
			return f, err
		}
		f.ini[m] = ini
	}
	f.env = map[string]string{
		"POSTGRES_USER":             creds.superuser,
		"POSTGRES_HOST_AUTH_METHOD": "trust", // replaced by our hba_file once initialised
		"POSTGRES_DB":               "postgres",
	}
	return f, nil
}

// postgresCommand is the postgres container's command line: our pg_hba.conf
// and the same speed settings as the local back end.
func postgresCommand() []string {
	cmd := []string{"postgres", "-c", "hba_file=/etc/pgadvisory/pg_hba.conf", "-c", "listen_addresses=*"}
	for _, s := range serverSettings {
		cmd = append(cmd, "-c", s)
	}
	return cmd
}

// containerSpec is the ContainerSpec of options o.
func containerSpec(o *options, creds credentials) (ContainerSpec, error) {
	files, err := renderDockerFiles(o.modes, o.widePool, creds)
	if err != nil {
		return ContainerSpec{}, err
	}
	spec := ContainerSpec{
		PostgresImage: o.postgresImage, BouncerImage: o.bouncerImage,
		PostgresAlias: postgresAlias,
		PostgresPort:  containerPGPort, BouncerPort: containerBouncerPt,
		PostgresCommand: postgresCommand(),
		PostgresEnv:     files.env,
		PostgresFiles: []ContainerFile{
			{Path: "/etc/pgadvisory/pg_hba.conf", Content: files.hba},
			{Path: "/docker-entrypoint-initdb.d/pgadvisory.sql", Content: files.initSQL},
		},
		BouncerFiles: map[Mode][]ContainerFile{},
	}
	for _, m := range o.modes {
		spec.BouncerFiles[m] = []ContainerFile{
			{Path: containerConfigDir + "/pgbouncer.ini", Content: files.ini[m]},
			{Path: containerConfigDir + "/userlist.txt", Content: files.userlist},
		}
	}
	return spec, nil
}

// dockerCluster is the Docker back end: containers of a ContainerRuntime,
// checked by the same pings as the local back end's servers.
type dockerCluster struct {
	creds credentials
	modes []Mode
	rc    RunningContainers
}

func startDocker(ctx context.Context, o *options, rt ContainerRuntime, creds credentials) (_ *dockerCluster, err error) {
	if err := rt.Available(ctx); err != nil {
		return nil, fmt.Errorf("pgbouncer: docker engine: %w", err)
	}
	spec, err := containerSpec(o, creds)
	if err != nil {
		return nil, err
	}
	rc, err := rt.Run(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: docker: %w", err)
	}
	dc := &dockerCluster{creds: creds, modes: o.modes, rc: rc}
	defer func() {
		if err != nil {
			_ = dc.close()
		}
	}()
	for _, m := range o.modes {
		if err := dc.pingBouncer(ctx, m); err != nil {
			return nil, fmt.Errorf("pgbouncer: PgBouncer (%s) container not ready: %w\n%s", m, err, dc.logTail())
		}
	}
	return dc, nil
}

// pollPing retries ping until it succeeds or ctx ends.
func pollPing(ctx context.Context, connString string) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ping(attempt, connString)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (dc *dockerCluster) pingBouncer(ctx context.Context, m Mode) error {
	h, p, ok := dc.rc.BouncerAddr(m)
	if !ok {
		return fmt.Errorf("pgbouncer: the container runtime started no PgBouncer in %s mode", m)
	}
	return pollPing(ctx, dsn(dc.creds.appUser, dc.creds.appPassword, h, p, NarrowDatabase))
}

func (dc *dockerCluster) postgresAddr() (string, int) { return dc.rc.PostgresAddr() }

func (dc *dockerCluster) bouncerAddr(m Mode) (string, int, bool) { return dc.rc.BouncerAddr(m) }

func (dc *dockerCluster) stopBouncer(ctx context.Context, m Mode, kill bool) error {
	if err := dc.rc.StopBouncer(ctx, m, kill); err != nil {
		return fmt.Errorf("pgbouncer: stop pgbouncer container (%s): %w", m, err)
	}
	return nil
}

func (dc *dockerCluster) startBouncer(ctx context.Context, m Mode) error {
	if err := dc.rc.StartBouncer(ctx, m); err != nil {
		return fmt.Errorf("pgbouncer: start pgbouncer container (%s): %w", m, err)
	}
	return dc.pingBouncer(ctx, m)
}

func (dc *dockerCluster) restartPostgres(ctx context.Context) error {
	if err := dc.rc.RestartPostgres(ctx); err != nil {
		return fmt.Errorf("pgbouncer: restart postgres container: %w", err)
	}
	h, p := dc.rc.PostgresAddr()
	return pollPing(ctx, dsn(dc.creds.superuser, "", h, p, "postgres"))
}

func (dc *dockerCluster) logTail() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, l := range dc.rc.Logs(ctx) {
		fmt.Fprintf(&b, "--- last lines of %s ---\n%s\n", l.Name, tail(l.Text, 15))
	}
	return b.String()
}

func (dc *dockerCluster) close() error {
	if err := dc.rc.Close(); err != nil {
		return fmt.Errorf("pgbouncer: close docker cluster: %w", err)
	}
	return nil
}
