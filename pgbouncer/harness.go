package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Backend chooses how a cluster's servers run.
type Backend string

// The back ends. BackendAuto prefers local binaries (fast, no daemon) and
// falls back to Docker when they are missing, the Docker back end is linked
// (see DockerModule) and a Docker engine answers.
const (
	BackendAuto   Backend = "auto"
	BackendLocal  Backend = "local"
	BackendDocker Backend = "docker"
)

// BackendEnv is the environment variable that chooses the back end when no
// WithBackend option is given: auto (the default), local or docker.
const BackendEnv = "PGADVISORY_TEST_BACKEND"

// DefaultStartTimeout bounds Start when the context has no deadline.
const DefaultStartTimeout = 2 * time.Minute

// Option configures Start.
type Option func(*options) error

type options struct {
	modes   []Mode
	backend Backend
	osUser  string
	logf    func(format string, args ...any)
	// widePool is the pool size of WideDatabase.
	widePool int
	// tls is set by WithTLS and WithTLSRequired.
	tls tlsLevel

	postgresImage, bouncerImage string
	// runtime runs the Docker back end's containers: WithContainerRuntime,
	// else the registered one, else nil (not linked).
	runtime ContainerRuntime
}

// WithModes chooses which PgBouncer pool modes to start (default: all three).
func WithModes(modes ...Mode) Option {
	return func(o *options) error {
		if len(modes) == 0 {
			return errors.New("pgbouncer: WithModes needs at least one mode")
		}
		for _, m := range modes {
			if !m.valid() {
				return fmt.Errorf("pgbouncer: unknown pool mode %q (accepted: transaction, session, statement)", m)
			}
		}
		o.modes = slices.Compact(slices.Clone(modes))
		return nil
	}
}

// WithBackend chooses the back end, overriding PGADVISORY_TEST_BACKEND.
func WithBackend(b Backend) Option {
	return func(o *options) error {
		switch b {
		case BackendAuto, BackendLocal, BackendDocker:
			o.backend = b
			return nil
		}
		return fmt.Errorf("pgbouncer: unknown backend %q (accepted: auto, local, docker)", b)
	}
}

// WithOSUser names the unprivileged operating-system user that runs
// PostgreSQL and PgBouncer when the caller is root (initdb and pgbouncer
// refuse to run as root). The default is "postgres", which Debian's packages
// create.
func WithOSUser(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("pgbouncer: WithOSUser needs a user name")
		}
		o.osUser = name
		return nil
	}
}

// WithLogf receives progress lines (for example t.Logf).
func WithLogf(logf func(format string, args ...any)) Option {
	return func(o *options) error {
		o.logf = logf
		return nil
	}
}

// WithWidePoolSize sets the pool size of WideDatabase (default
// WidePoolSize), for example to scale a benchmark to a bigger machine. It
// accepts 1..MaxWidePoolSize.
func WithWidePoolSize(n int) Option {
	return func(o *options) error {
		if err := checkWidePool(n); err != nil {
			return err
		}
		o.widePool = n
		return nil
	}
}

// WithImages sets the container images of the Docker back end.
func WithImages(postgres, pgbouncer string) Option {
	return func(o *options) error {
		if postgres == "" || pgbouncer == "" {
			return errors.New("pgbouncer: WithImages needs both image names")
		}
		o.postgresImage, o.bouncerImage = postgres, pgbouncer
		return nil
	}
}

// ImagesEnv is the environment variable that sets the Docker back end's
// images when no WithImages option is given, as WithImages would:
// "POSTGRES_IMAGE,PGBOUNCER_IMAGE", or one image holding both servers.
// make test-docker sets it to the image scripts/docker-images.sh builds.
const ImagesEnv = "PGADVISORY_TEST_IMAGES"

// imagesFromEnv is the WithImages of ImagesEnv's value v.
func imagesFromEnv(v string) Option {
	pg, bouncer, two := strings.Cut(v, ",")
	if !two {
		bouncer = pg
	}
	return func(o *options) error {
		if strings.Contains(bouncer, ",") {
			return fmt.Errorf("pgbouncer: %s=%q: want POSTGRES_IMAGE,PGBOUNCER_IMAGE or one image", ImagesEnv, v)
		}
		if err := WithImages(strings.TrimSpace(pg), strings.TrimSpace(bouncer))(o); err != nil {
			return fmt.Errorf("%w (from %s=%q)", err, ImagesEnv, v)
		}
		return nil
	}
}

// Default container images of the Docker back end.
const (
	DefaultPostgresImage  = "postgres:16-alpine"
	DefaultPgBouncerImage = "edoburu/pgbouncer:v1.23.1-p3"
)

func buildOptions(opts []Option) (*options, error) {
	o := &options{
		modes:         slices.Clone(AllModes),
		osUser:        "postgres",
		logf:          func(string, ...any) {},
		widePool:      WidePoolSize,
		postgresImage: DefaultPostgresImage,
		bouncerImage:  DefaultPgBouncerImage,
		runtime:       registeredRuntime(),
	}
	if env := os.Getenv(BackendEnv); env != "" {
		if err := WithBackend(Backend(strings.ToLower(env)))(o); err != nil {
			return nil, fmt.Errorf("%w (from %s)", err, BackendEnv)
		}
	} else {
		o.backend = BackendAuto
	}
	if env := os.Getenv(ImagesEnv); env != "" {
		if err := imagesFromEnv(env)(o); err != nil {
			return nil, err
		}
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("pgbouncer: nil Option")
		}
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Cluster is a running PostgreSQL server with one PgBouncer per requested
// pool mode in front of it. Its methods are safe for concurrent use.
type Cluster struct {
	creds    credentials
	backend  Backend
	widePool int
	caFile   string // WithTLS: the CA's PEM file; "" without TLS
	impl     clusterImpl

	mu     sync.Mutex
	closed bool
}

// clusterImpl is what a back end provides.
type clusterImpl interface {
	postgresAddr() (host string, port int)
	bouncerAddr(m Mode) (host string, port int, ok bool)
	stopBouncer(ctx context.Context, m Mode, kill bool) error
	startBouncer(ctx context.Context, m Mode) error
	restartPostgres(ctx context.Context) error
	logTail() string
	close() error
}

// Start starts a throwaway PostgreSQL cluster and one PgBouncer per pool mode,
// waits until every server answers a query, and returns it. The caller must
// Close it. When ctx has no deadline, DefaultStartTimeout applies.
func Start(ctx context.Context, opts ...Option) (*Cluster, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	c := &Cluster{creds: defaultCredentials}
	backend := o.backend
	if backend == BackendAuto {
		backend, err = chooseBackend(ctx, o.runtime)
		if err != nil {
			return nil, err
		}
	}
	c.backend = backend
	c.widePool = o.widePool
	switch backend {
	case BackendLocal:
		var lc *localCluster
		lc, err = startLocal(ctx, o, c.creds)
		if err == nil {
			c.impl = lc
			if lc.tls != nil {
				c.caFile = lc.tls.caFile
			}
		}
	case BackendDocker:
		if o.runtime == nil {
			return nil, errNoRuntime
		}
		var dc *dockerCluster
		dc, err = startDocker(ctx, o, o.runtime, c.creds)
		if err == nil {
			c.impl, c.caFile = dc, dc.caFile
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// chooseBackend picks local when its binaries are installed, else Docker when
// its runtime rt is linked and an engine answers; otherwise it returns the
// local back end's error, which names the packages to install.
func chooseBackend(ctx context.Context, rt ContainerRuntime) (Backend, error) {
	_, localErr := findBinaries()
	if localErr == nil {
		return BackendLocal, nil
	}
	if rt == nil {
		return "", fmt.Errorf("%w; and %w", localErr, errNoRuntime)
	}
	if dockerErr := rt.Available(ctx); dockerErr == nil {
		return BackendDocker, nil
	} else {
		return "", fmt.Errorf("%w; and no Docker engine answered: %v", localErr, dockerErr)
	}
}

// Backend reports which back end runs the cluster.
func (c *Cluster) Backend() Backend { return c.backend }

// ContainerLabel returns the label filter (ContainerLabel=value, as
// `docker ps --filter label=...` takes it) that matches the containers and
// the network of this cluster, or "" when the cluster does not run on the
// Docker back end.
func (c *Cluster) ContainerLabel() string {
	if dc, ok := c.impl.(*dockerCluster); ok {
		return dc.label
	}
	return ""
}

// Modes lists the pool modes with a PgBouncer in this cluster.
func (c *Cluster) Modes() []Mode {
	var ms []Mode
	for _, m := range AllModes {
		if _, _, ok := c.impl.bouncerAddr(m); ok {
			ms = append(ms, m)
		}
	}
	return ms
}

func dsn(user, password, host string, port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		Host:     net.JoinHostPort(host, strconv.Itoa(port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	if password == "" {
		u.User = url.User(user)
	} else {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

// DirectDSN returns a URL DSN for the application user straight to
// PostgreSQL, bypassing every pooler.
func (c *Cluster) DirectDSN() string {
	h, p := c.impl.postgresAddr()
	return dsn(c.creds.appUser, c.creds.appPassword, h, p, NarrowDatabase)
}

// SuperuserDSN returns a URL DSN for the superuser straight to PostgreSQL
// (trusted on the loopback), for setup and fault injection such as
// pg_terminate_backend.
func (c *Cluster) SuperuserDSN() string {
	h, p := c.impl.postgresAddr()
	return dsn(c.creds.superuser, "", h, p, NarrowDatabase)
}

func (c *Cluster) bouncer(m Mode) (string, int) {
	h, p, ok := c.impl.bouncerAddr(m)
	if !ok {
		panic(fmt.Sprintf("pgbouncer: no PgBouncer in %q mode in this cluster (started: %v)", m, c.Modes()))
	}
	return h, p
}

// DSN returns a URL DSN for the application user through the PgBouncer in
// mode m, to NarrowDatabase (default_pool_size=1: all clients share one
// backend). It panics if the cluster has no PgBouncer in that mode, which is
// a mistake in the test.
func (c *Cluster) DSN(m Mode) string {
	h, p := c.bouncer(m)
	return dsn(c.creds.appUser, c.creds.appPassword, h, p, NarrowDatabase)
}

// WideDSN is DSN to WideDatabase (pool_size WidePoolSize unless set
// WithWidePoolSize), the same PostgreSQL database.
func (c *Cluster) WideDSN(m Mode) string {
	h, p := c.bouncer(m)
	return dsn(c.creds.appUser, c.creds.appPassword, h, p, WideDatabase)
}

// AdminDSN returns a URL DSN for PgBouncer's admin console of mode m. The
// console speaks only the simple query protocol: with pgx, add
// default_query_exec_mode=simple_protocol or use pgconn's Exec.
func (c *Cluster) AdminDSN(m Mode) string {
	h, p := c.bouncer(m)
	return dsn(c.creds.adminUser, c.creds.adminPassword, h, p, "pgbouncer")
}

// WidePoolSize returns the pool size of WideDatabase in this cluster's
// PgBouncers.
func (c *Cluster) WidePoolSize() int { return c.widePool }

// AppUser returns the application role's name.
func (c *Cluster) AppUser() string { return c.creds.appUser }

// AdminUser returns the PgBouncer admin console's user name.
func (c *Cluster) AdminUser() string { return c.creds.adminUser }

// AdminPassword returns the PgBouncer admin console's password.
func (c *Cluster) AdminPassword() string { return c.creds.adminPassword }

// KillBouncer stops the PgBouncer of mode m with SIGKILL, as a crash would:
// its clients' connections break at once. StartBouncer brings it back.
func (c *Cluster) KillBouncer(m Mode) error {
	if err := c.live(); err != nil {
		return err
	}
	c.bouncer(m)
	return c.impl.stopBouncer(context.Background(), m, true)
}

// StartBouncer starts the PgBouncer of mode m again, on the same address,
// after KillBouncer, and waits until it answers.
func (c *Cluster) StartBouncer(ctx context.Context, m Mode) error {
	if err := c.live(); err != nil {
		return err
	}
	c.bouncer(m)
	return c.impl.startBouncer(ctx, m)
}

// RestartBouncer kills and starts the PgBouncer of mode m.
func (c *Cluster) RestartBouncer(ctx context.Context, m Mode) error {
	if err := c.KillBouncer(m); err != nil {
		return err
	}
	return c.StartBouncer(ctx, m)
}

// RestartPostgres stops PostgreSQL with a fast shutdown (open transactions
// are rolled back, every backend ends) and starts it again on the same port.
func (c *Cluster) RestartPostgres(ctx context.Context) error {
	if err := c.live(); err != nil {
		return err
	}
	return c.impl.restartPostgres(ctx)
}

// Logs returns the last lines of the PostgreSQL and PgBouncer logs, for a
// failing test to print.
func (c *Cluster) Logs() string { return c.impl.logTail() }

func (c *Cluster) live() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgbouncer: cluster is closed")
	}
	return nil
}

// Close stops every process (or container) and removes the temporary
// directories. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	return c.impl.close()
}
