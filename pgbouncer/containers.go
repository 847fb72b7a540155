package pgbouncer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pgadvisory/pgadvisory/internal/cli"
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

// ContainerSpec is what a ContainerRuntime runs. The command lines do all
// of the set-up themselves (initdb, pg_hba.conf, the application role), so
// an image needs only PostgreSQL's or PgBouncer's programs and a postgres
// user, and no entrypoint; the postgres image's entrypoint execs a command
// line that does not start with "postgres" as given.
type ContainerSpec struct {
	// PostgresImage and BouncerImage are the images (WithImages).
	PostgresImage, BouncerImage string
	// PostgresAlias is PostgreSQL's host name on the private network.
	PostgresAlias string
	// PostgresPort and BouncerPort are the ports the servers listen on
	// inside their containers.
	PostgresPort, BouncerPort int
	// User runs every container's command (initdb and pgbouncer refuse
	// root).
	User string
	// PostgresCommand is the PostgreSQL container's command line and
	// PostgresEnv its environment; PostgresStopSignal stops it with a fast
	// shutdown.
	PostgresCommand    []string
	PostgresEnv        map[string]string
	PostgresStopSignal string
	// BouncerCommand is every PgBouncer container's command line.
	BouncerCommand []string
	// PostgresFiles are written into the PostgreSQL container before it
	// starts; BouncerFiles, per pool mode, into that mode's PgBouncer.
	PostgresFiles []ContainerFile
	BouncerFiles  map[Mode][]ContainerFile
	// Labels go on everything the runtime creates (containers, network),
	// so that what a cluster left behind can be listed: ContainerLabel
	// with the cluster's own value.
	Labels map[string]string
}

// ContainerLabel is the label the Docker back end puts on the containers and
// the network of a cluster; its value is unique to the cluster
// (Cluster.ContainerLabel). After Close,
//
//	docker ps -a --filter label=org.pgadvisory.cluster
//
// lists nothing that the harness started and did not remove.
const ContainerLabel = "org.pgadvisory.cluster"

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
	// containerUser runs the servers: the Debian packages and the official
	// images all create it.
	containerUser = "postgres"
	// containerSetupDir holds the PostgreSQL container's pg_hba.conf and
	// setup SQL.
	containerSetupDir = "/etc/pgadvisory"
)

// dockerFiles is the configuration the Docker back end writes into its
// containers, rendered by the same code as the local back end's.
type dockerFiles struct {
	hba      string          // pg_hba.conf for PostgreSQL
	initSQL  string          // run once, after initdb, by postgresScript
	ini      map[Mode]string // pgbouncer.ini per pool mode
	userlist string          // PgBouncer's auth_file
	tls      *tlsFiles       // WithTLS: the certificates; nil without
}

// Where the TLS files are in the containers. PostgreSQL refuses a key that
// others can read, and files written into a container belong to root:
// postgresScript copies the key to containerPGKey, readable by postgres only.
const (
	containerPGKey       = "/tmp/pgadvisory-server.key"
	containerBouncerCert = containerConfigDir + "/" + tlsCertFile
	containerBouncerKey  = containerConfigDir + "/" + tlsKeyFile
	containerBouncerCA   = containerConfigDir + "/" + tlsCAFile
)

func renderDockerFiles(modes []Mode, widePool int, creds credentials, level tlsLevel) (dockerFiles, error) {
	f := dockerFiles{ini: map[Mode]string{}}
	// Only the containers' private network and Docker's port publishing
	// (on the host's loopback) reach PostgreSQL; the superuser is trusted
	// from anywhere it can come.
	if level == tlsRequired {
		f.hba = renderHBASSL(creds, "0.0.0.0/0", "0.0.0.0/0")
	} else {
		f.hba = renderHBA(creds, "0.0.0.0/0", "0.0.0.0/0")
	}
	f.initSQL = strings.Join(setupSQL(creds), ";\n") + ";\n"
	var err error
	if f.userlist, err = renderUserlist(creds); err != nil {
		return f, err
	}
	var bt *bouncerTLS
	if level != tlsOff {
		// PgBouncer verifies PostgreSQL by its network alias; clients
		// verify the published ports as 127.0.0.1.
		t, err := generateTLS(postgresAlias)
		if err != nil {
			return f, err
		}
		f.tls = &t
		bt = &bouncerTLS{
			clientMode: "allow",
			certFile:   containerBouncerCert, keyFile: containerBouncerKey, caFile: containerBouncerCA,
			serverMode: "verify-full",
		}
		if level == tlsRequired {
			bt.clientMode = "require"
		}
	}
	for _, m := range modes {
		ini, err := renderIni(bouncerConfig{
			mode: m, serverHost: postgresAlias, serverPort: containerPGPort,
			listenAddr: "0.0.0.0", listenPort: containerBouncerPt,
			authFile: containerConfigDir + "/userlist.txt",
			widePool: widePool, creds: creds, tls: bt,
		})
		if err != nil {
			return f, err
		}
		f.ini[m] = ini
	}
	return f, nil
}

// postgresScript is the PostgreSQL container's shell script, what the
// official image's entrypoint would do with our settings: on the first start
// initdb (as $PGUSER, trusting everyone until our pg_hba.conf applies), then
// the setup SQL through a server that listens on a unix socket only; on
// every start exec postgres with the script's arguments. A restarted
// container finds PG_VERSION and skips the set-up. Debian keeps the server
// programs in /usr/lib/postgresql/VERSION/bin, off PATH.
const postgresScript = `set -eu
for d in /usr/lib/postgresql/*/bin; do
	if [ -x "$d/initdb" ]; then PATH="$d:$PATH"; fi
done
export PATH
data=/tmp/pgadvisory-data
if [ ! -s "$data/PG_VERSION" ]; then
	initdb -D "$data" -U "$PGUSER" -A trust -E UTF8 --locale=C --no-sync
	pg_ctl -D "$data" -w -o "-c listen_addresses='' -c unix_socket_directories=/tmp" start
	psql -X -q -v ON_ERROR_STOP=1 -h /tmp -d postgres -f ` + containerSetupDir + `/setup.sql
	pg_ctl -D "$data" -w -m fast stop
fi
if [ -f ` + containerSetupDir + `/` + tlsKeyFile + ` ]; then
	(umask 077 && cat ` + containerSetupDir + `/` + tlsKeyFile + ` >` + containerPGKey + `)
fi
exec postgres -D "$data" "$@"
`

// postgresCommand is the postgres container's command line: postgresScript
// with our pg_hba.conf and the same speed settings as the local back end,
// and ssl=on with the copied key when withTLS.
func postgresCommand(withTLS bool) []string {
	cmd := []string{"sh", "-c", postgresScript, "pgadvisory-postgres",
		"-c", "hba_file=" + containerSetupDir + "/pg_hba.conf", "-c", "listen_addresses=*",
		"-c", "unix_socket_directories=/tmp"}
	settings := serverSettings
	if withTLS {
		settings = append(slices.Clone(settings), postgresTLSSettings(&bouncerTLS{
			certFile: containerSetupDir + "/" + tlsCertFile, keyFile: containerPGKey,
		})...)
	}
	for _, s := range settings {
		cmd = append(cmd, "-c", s)
	}
	return cmd
}

// containerSpec is the ContainerSpec of options o, labelled with cluster id,
// and the files it was rendered from.
func containerSpec(o *options, creds credentials, id string) (ContainerSpec, dockerFiles, error) {
	files, err := renderDockerFiles(o.modes, o.widePool, creds, o.tls)
	if err != nil {
		return ContainerSpec{}, files, err
	}
	spec := ContainerSpec{
		PostgresImage: o.postgresImage, BouncerImage: o.bouncerImage,
		PostgresAlias: postgresAlias,
		PostgresPort:  containerPGPort, BouncerPort: containerBouncerPt,
		User:            containerUser,
		PostgresCommand: postgresCommand(files.tls != nil),
		// psql and initdb read PGUSER; LC_ALL keeps initdb's messages
		// and the C locale independent of the image.
		PostgresEnv:        map[string]string{"PGUSER": creds.superuser, "LC_ALL": "C"},
		PostgresStopSignal: "SIGINT", // PostgreSQL's fast shutdown
		BouncerCommand:     []string{"pgbouncer", containerConfigDir + "/pgbouncer.ini"},
		PostgresFiles: []ContainerFile{
			{Path: containerSetupDir + "/pg_hba.conf", Content: files.hba},
			{Path: containerSetupDir + "/setup.sql", Content: files.initSQL},
		},
		BouncerFiles: map[Mode][]ContainerFile{},
		Labels:       map[string]string{ContainerLabel: id},
	}
	for _, m := range o.modes {
		spec.BouncerFiles[m] = []ContainerFile{
			{Path: containerConfigDir + "/pgbouncer.ini", Content: files.ini[m]},
			{Path: containerConfigDir + "/userlist.txt", Content: files.userlist},
		}
	}
	if t := files.tls; t != nil {
		spec.PostgresFiles = append(spec.PostgresFiles,
			ContainerFile{Path: containerSetupDir + "/" + tlsCertFile, Content: string(t.certPEM)},
			ContainerFile{Path: containerSetupDir + "/" + tlsKeyFile, Content: string(t.keyPEM)})
		for _, m := range o.modes {
			spec.BouncerFiles[m] = append(spec.BouncerFiles[m],
				ContainerFile{Path: containerBouncerCert, Content: string(t.certPEM)},
				ContainerFile{Path: containerBouncerKey, Content: string(t.keyPEM)},
				ContainerFile{Path: containerBouncerCA, Content: string(t.caPEM)})
		}
	}
	return spec, files, nil
}

// dockerCluster is the Docker back end: containers of a ContainerRuntime,
// checked by the same pings as the local back end's servers.
type dockerCluster struct {
	creds credentials
	modes []Mode
	label string // ContainerLabel=value of this cluster
	rc    RunningContainers
	// WithTLS: caDir is a temporary directory of the host holding
	// caFile, the CA's PEM file; both "" without TLS.
	caDir, caFile string
}

func startDocker(ctx context.Context, o *options, rt ContainerRuntime, creds credentials) (_ *dockerCluster, err error) {
	if err := rt.Available(ctx); err != nil {
		return nil, fmt.Errorf("pgbouncer: docker engine: %w", err)
	}
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	spec, files, err := containerSpec(o, creds, id)
	if err != nil {
		return nil, err
	}
	dc := &dockerCluster{creds: creds, modes: o.modes, label: ContainerLabel + "=" + id}
	if files.tls != nil {
		if dc.caDir, err = os.MkdirTemp("", "pgadvisory-docker-tls-"); err != nil {
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
		dc.caFile = filepath.Join(dc.caDir, tlsCAFile)
		if err := os.WriteFile(dc.caFile, files.tls.caPEM, 0o644); err != nil {
			_ = os.RemoveAll(dc.caDir)
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
	}
	if dc.rc, err = rt.Run(ctx, spec); err != nil {
		_ = dc.close()
		return nil, fmt.Errorf("pgbouncer: docker: %w", err)
	}
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

// randomID is a cluster's ContainerLabel value.
func randomID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pgbouncer: cluster id: %w", err)
	}
	return hex.EncodeToString(b), nil
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
	d := dsn(dc.creds.appUser, dc.creds.appPassword, h, p, NarrowDatabase)
	if dc.caFile != "" {
		// As the local back end: a PgBouncer whose TLS is broken is
		// not ready.
		d = withSSLMode(d, "require")
	}
	return pollPing(ctx, d)
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
		fmt.Fprintf(&b, "--- last lines of %s ---\n%s\n", l.Name, cli.Tail(l.Text, 15))
	}
	return b.String()
}

func (dc *dockerCluster) close() error {
	var errs []error
	if dc.rc != nil {
		if err := dc.rc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("pgbouncer: close docker cluster: %w", err))
		}
	}
	if dc.caDir != "" {
		if err := os.RemoveAll(dc.caDir); err != nil {
			errs = append(errs, fmt.Errorf("pgbouncer: remove the CA's directory: %w", err))
		}
	}
	return errors.Join(errs...)
}
