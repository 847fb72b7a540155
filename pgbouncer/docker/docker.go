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
	"strings"
	"sync"
	"time"

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

// Available reports whether a Docker engine answers within five seconds.
func (Runtime) Available(ctx context.Context) (err error) {
	defer func() {
		// testcontainers-go has panicked on broken Docker set-ups.
		if r := recover(); r != nil {
			err = fmt.Errorf("docker provider panicked: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.Health(hctx)
}

// Run starts spec's containers. It waits for PostgreSQL's second "ready"
// line (the postgres image restarts the server once after running its
// initialisation scripts) and for every PgBouncer's listening port.
func (Runtime) Run(ctx context.Context, spec pgbouncer.ContainerSpec) (_ pgbouncer.RunningContainers, err error) {
	rc := &containers{bouncers: map[pgbouncer.Mode]*testcontainers.DockerContainer{}, spec: spec}
	defer func() {
		if err != nil {
			_ = rc.Close()
		}
	}()
	if rc.net, err = network.New(ctx); err != nil {
		return nil, fmt.Errorf("docker network: %w", err)
	}
	rc.postgres, err = testcontainers.Run(ctx, spec.PostgresImage,
		network.WithNetwork([]string{spec.PostgresAlias}, rc.net),
		testcontainers.WithEnv(spec.PostgresEnv),
		testcontainers.WithCmd(spec.PostgresCommand...),
		testcontainers.WithExposedPorts(fmt.Sprintf("%d/tcp", spec.PostgresPort)),
		testcontainers.WithFiles(containerFiles(spec.PostgresFiles)...),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(time.Minute)),
	)
	if err != nil {
		return nil, fmt.Errorf("start postgres container: %w", err)
	}
	for _, m := range pgbouncer.AllModes {
		files, ok := spec.BouncerFiles[m]
		if !ok {
			continue
		}
		c, err := testcontainers.Run(ctx, spec.BouncerImage,
			network.WithNetwork([]string{"pgbouncer-" + string(m)}, rc.net),
			testcontainers.WithExposedPorts(fmt.Sprintf("%d/tcp", spec.BouncerPort)),
			testcontainers.WithFiles(containerFiles(files)...),
			testcontainers.WithWaitStrategy(wait.ForListeningPort(fmt.Sprintf("%d/tcp", spec.BouncerPort))),
		)
		if err != nil {
			return nil, fmt.Errorf("start pgbouncer container (%s): %w", m, err)
		}
		rc.bouncers[m] = c
	}
	if err := rc.refreshPorts(ctx); err != nil {
		return nil, err
	}
	return rc, nil
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
		r, err := c.Logs(ctx)
		if err != nil {
			return
		}
		defer r.Close()
		var sb strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		logs = append(logs, pgbouncer.ContainerLog{Name: name, Text: sb.String()})
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
