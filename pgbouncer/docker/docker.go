// Package docker is the Docker back end of the pgbouncer test harness: it
// runs the harness's PostgreSQL and PgBouncer containers through
// testcontainers-go. Importing it registers the back end:
//
//	import _ "github.com/pgadvisory/pgadvisory/pgbouncer/docker"
//
// after which pgbouncer.Start uses Docker when asked to
// (PGADVISORY_TEST_BACKEND=docker, pgbouncer.WithBackend), or under
// BackendAuto when the local server binaries are missing and an engine
// answers. pgbouncer.WithContainerRuntime(docker.Runtime{}) chooses it for one
// Start instead.
//
// It is a module of its own, so that the harness, and the library module that
// holds it, do not require testcontainers-go and its dependencies.
package docker

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	dockernet "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func init() { pgbouncer.RegisterContainerRuntime(Runtime{}) }

// Runtime is a pgbouncer.ContainerRuntime over testcontainers-go (which finds
// the engine as the docker command does: DOCKER_HOST, the current context, the
// default socket).
type Runtime struct{}

var _ pgbouncer.ContainerRuntime = Runtime{}

// Available reports whether a Docker engine answers within five seconds. Its
// error names the engine it tried (DOCKER_HOST, or the default socket) and
// what to do.
func (Runtime) Available(ctx context.Context) (err error) {
	defer func() {
		// testcontainers-go has panicked on broken Docker set-ups.
		if r := recover(); r != nil {
			err = fmt.Errorf("docker provider panicked: %v", r)
		}
		if err != nil {
			err = fmt.Errorf("no Docker engine answers at %s: %w (start dockerd, or point DOCKER_HOST at a running engine)", engineAddr(), err)
		}
	}()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if os.Getenv("DOCKER_HOST") != "" {
		// testcontainers-go falls back to the default socket when
		// DOCKER_HOST does not answer: a user who named an engine must
		// get that engine or an error, never another engine silently.
		if err := pingEnvHost(hctx); err != nil {
			return err
		}
	}
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Health(hctx)
}

// pingEnvHost pings the engine of DOCKER_HOST (and DOCKER_TLS_VERIFY,
// DOCKER_CERT_PATH, DOCKER_API_VERSION), as the docker command would.
func pingEnvHost(ctx context.Context) error {
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err
}

// engineAddr names the engine testcontainers-go dials, for error messages.
func engineAddr() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h + " (DOCKER_HOST)"
	}
	return "the default engine (docker context, or unix:///var/run/docker.sock)"
}

// Run starts spec's containers, labelled with spec.Labels, their ports
// published on 127.0.0.1. It waits for PostgreSQL's second "ready" line
// (the command line's set-up runs a first server on a unix socket only) and
// for every PgBouncer's "process up" line.
func (Runtime) Run(ctx context.Context, spec pgbouncer.ContainerSpec) (_ pgbouncer.RunningContainers, err error) {
	rc := &containers{bouncers: map[pgbouncer.Mode]*testcontainers.DockerContainer{}, spec: spec}
	defer func() {
		if err != nil {
			_ = rc.Close()
		}
	}()
	if rc.net, err = network.New(ctx, network.WithLabels(spec.Labels)); err != nil {
		return nil, fmt.Errorf("docker network: %w", err)
	}
	common := func(alias string, port int, stopSignal string, cmd []string, files []pgbouncer.ContainerFile) []testcontainers.ContainerCustomizer {
		p := fmt.Sprintf("%d/tcp", port)
		return []testcontainers.ContainerCustomizer{
			network.WithNetwork([]string{alias}, rc.net),
			testcontainers.WithLabels(spec.Labels),
			testcontainers.WithCmd(cmd...),
			testcontainers.WithExposedPorts(p),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = dockernet.PortMap{dockernet.MustParsePort(p): {{HostIP: loopback}}}
			}),
			testcontainers.WithConfigModifier(func(c *container.Config) {
				c.User = spec.User
				if stopSignal != "" {
					c.StopSignal = stopSignal
				}
			}),
			testcontainers.WithFiles(containerFiles(files)...),
		}
	}
	// A container whose start failed is returned with the error: it must
	// be removed too.
	rc.postgres, err = testcontainers.Run(ctx, spec.PostgresImage, append(
		common(spec.PostgresAlias, spec.PostgresPort, spec.PostgresStopSignal, spec.PostgresCommand, spec.PostgresFiles),
		testcontainers.WithEnv(spec.PostgresEnv),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(time.Minute)),
	)...)
	if err != nil {
		return nil, fmt.Errorf("start postgres container: %w%s", err, containerLog(rc.postgres))
	}
	for _, m := range pgbouncer.AllModes {
		files, ok := spec.BouncerFiles[m]
		if !ok {
			continue
		}
		c, err := testcontainers.Run(ctx, spec.BouncerImage, append(
			common("pgbouncer-"+string(m), spec.BouncerPort, "", spec.BouncerCommand, files),
			// The harness then pings through it on the published port;
			// testcontainers-go's own port check dials its idea of the
			// engine's host, which need not be the loopback we publish on.
			testcontainers.WithWaitStrategy(wait.ForLog("process up").WithStartupTimeout(time.Minute)),
		)...)
		if c != nil {
			rc.bouncers[m] = c
		}
		if err != nil {
			return nil, fmt.Errorf("start pgbouncer container (%s): %w%s", m, err, containerLog(c))
		}
	}
	if err := rc.refreshPorts(ctx); err != nil {
		return nil, err
	}
	return rc, nil
}

// loopback is where the containers' ports are published: the superuser is
// trusted without a password, so never on the host's other interfaces.
var loopback = netip.MustParseAddr("127.0.0.1")

// containerLog is the end of c's log, for the error of a container that did
// not start ("" when there is none).
func containerLog(c *testcontainers.DockerContainer) string {
	if c == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	text, err := readLog(ctx, c)
	if err != nil || text == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "\n--- last lines of the container's log ---\n" + strings.Join(lines, "\n")
}

// readLog reads c's whole log so far.
func readLog(ctx context.Context, c *testcontainers.DockerContainer) (string, error) {
	r, err := c.Logs(ctx)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

func containerFiles(files []pgbouncer.ContainerFile) []testcontainers.ContainerFile {
	out := make([]testcontainers.ContainerFile, 0, len(files))
	for _, f := range files {
		out = append(out, testcontainers.ContainerFile{Reader: strings.NewReader(f.Content), ContainerFilePath: f.Path, FileMode: 0o644})
	}
	return out
}

// containers are the running containers of one Run.
type containers struct {
	spec     pgbouncer.ContainerSpec
	net      *testcontainers.DockerNetwork
	postgres *testcontainers.DockerContainer
	bouncers map[pgbouncer.Mode]*testcontainers.DockerContainer

	mu      sync.Mutex
	pgPort  int
	bpPorts map[pgbouncer.Mode]int
}

// refreshPorts reads the host ports Docker published; they can change when a
// container restarts.
func (rc *containers) refreshPorts(ctx context.Context) error {
	port := func(c *testcontainers.DockerContainer, inner int) (int, error) {
		p, err := c.MappedPort(ctx, fmt.Sprintf("%d/tcp", inner))
		if err != nil {
			return 0, fmt.Errorf("published port: %w", err)
		}
		return int(p.Num()), nil
	}
	pg, err := port(rc.postgres, rc.spec.PostgresPort)
	if err != nil {
		return err
	}
	ports := map[pgbouncer.Mode]int{}
	for m, c := range rc.bouncers {
		if ports[m], err = port(c, rc.spec.BouncerPort); err != nil {
			return err
		}
	}
	rc.mu.Lock()
	rc.pgPort, rc.bpPorts = pg, ports
	rc.mu.Unlock()
	return nil
}

func (rc *containers) PostgresAddr() (string, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return "127.0.0.1", rc.pgPort
}

func (rc *containers) BouncerAddr(m pgbouncer.Mode) (string, int, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	p, ok := rc.bpPorts[m]
	return "127.0.0.1", p, ok
}

func (rc *containers) StopBouncer(ctx context.Context, m pgbouncer.Mode, kill bool) error {
	timeout := 10 * time.Second
	if kill {
		timeout = 0
	}
	return rc.bouncers[m].Stop(ctx, &timeout)
}

func (rc *containers) StartBouncer(ctx context.Context, m pgbouncer.Mode) error {
	if err := rc.bouncers[m].Start(ctx); err != nil {
		return err
	}
	return rc.refreshPorts(ctx)
}

func (rc *containers) RestartPostgres(ctx context.Context) error {
	timeout := 30 * time.Second
	if err := rc.postgres.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if err := rc.postgres.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return rc.refreshPorts(ctx)
}

func (rc *containers) Logs(ctx context.Context) []pgbouncer.ContainerLog {
	var logs []pgbouncer.ContainerLog
	add := func(name string, c *testcontainers.DockerContainer) {
		if c == nil {
			return
		}
		text, err := readLog(ctx, c)
		if err != nil {
			text += fmt.Sprintf("\n(reading the log: %v)", err)
		}
		logs = append(logs, pgbouncer.ContainerLog{Name: name, Text: text})
	}
	add("postgres container", rc.postgres)
	for _, m := range pgbouncer.AllModes {
		add("pgbouncer container ("+string(m)+")", rc.bouncers[m])
	}
	return logs
}

func (rc *containers) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []string
	for _, c := range rc.bouncers {
		if err := c.Terminate(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if rc.postgres != nil {
		if err := rc.postgres.Terminate(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if rc.net != nil {
		if err := rc.net.Remove(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
