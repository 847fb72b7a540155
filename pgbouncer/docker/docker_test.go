package docker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/pgbouncer/docker"
)

// childEnv runs this test binary as a child that only calls Start on the
// Docker back end and prints its error: testcontainers-go reads DOCKER_HOST
// once per process, so a test of another engine address needs a process of
// its own.
const childEnv = "PGADVISORY_DOCKER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func child() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgbouncer.Start(ctx, pgbouncer.WithBackend(pgbouncer.BackendDocker), pgbouncer.WithModes(pgbouncer.Transaction))
	if err == nil {
		_ = c.Close()
		fmt.Println("started")
		return 0
	}
	fmt.Println(err)
	return 2
}

func ping(ctx context.Context, dsn string) error {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Exec(ctx, "SELECT 1").Close()
}

// needEngine runs the test only when the Docker back end is asked for
// (PGADVISORY_TEST_BACKEND=docker, as make test-docker sets it, with the
// images it built): elsewhere an engine may answer with no registry behind
// it. It fails the test where no engine answers under
// PGADVISORY_REQUIRE_INTEGRATION=1, else skips it; it also needs the docker
// command, whose listings are the evidence of what is left behind.
func needEngine(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	if b := os.Getenv(pgbouncer.BackendEnv); b != string(pgbouncer.BackendDocker) {
		t.Skipf("%s=%q: the Docker back end's tests run with %s=docker (make test-docker)", pgbouncer.BackendEnv, b, pgbouncer.BackendEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := docker.Runtime{}.Available(ctx)
	if err == nil {
		_, err = exec.LookPath("docker")
	}
	if err != nil {
		if pgbouncer.Required() {
			t.Fatalf("Docker back end required (%s=1) but unavailable: %v", pgbouncer.RequireEnv, err)
		}
		t.Skipf("no Docker engine: %v", err)
	}
}

// listing is the docker command's output of args, one ID or name a line.
func listing(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Fields(string(out))
}

// labelled lists the containers and networks that carry filter (a
// ContainerLabel=value) and the volumes the containers mount.
type labelled struct{ containers, networks, volumes []string }

func list(t *testing.T, filter string) labelled {
	t.Helper()
	l := labelled{
		containers: listing(t, "ps", "-aq", "--filter", "label="+filter),
		networks:   listing(t, "network", "ls", "-q", "--filter", "label="+filter),
		volumes:    listing(t, "volume", "ls", "-q", "--filter", "label="+filter),
	}
	for _, id := range l.containers {
		l.volumes = append(l.volumes, listing(t, "inspect", "--format", `{{range .Mounts}}{{if .Name}}{{.Name}} {{end}}{{end}}`, id)...)
	}
	return l
}

// checkRemoved fails the test when anything of before is still listed by
// the engine.
func checkRemoved(t *testing.T, filter string, before labelled) {
	t.Helper()
	after := list(t, filter)
	if len(after.containers) > 0 || len(after.networks) > 0 {
		t.Errorf("left behind (%s): containers %q, networks %q", filter, after.containers, after.networks)
	}
	existing := listing(t, "volume", "ls", "-q")
	for _, v := range before.volumes {
		for _, e := range existing {
			if e == v {
				t.Errorf("volume %s of the cluster is left behind", v)
			}
		}
	}
}

// A cluster on the Docker back end serves through its PgBouncer, restarts
// its servers, and Close removes its containers and network (and any volume
// they mounted), as the engine's own listing shows.
func TestDockerBackend(t *testing.T) {
	needEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := pgbouncer.Start(ctx, pgbouncer.WithBackend(pgbouncer.BackendDocker), pgbouncer.WithModes(pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
		}
	}()
	filter := c.ContainerLabel()
	if c.Backend() != pgbouncer.BackendDocker || !strings.HasPrefix(filter, pgbouncer.ContainerLabel+"=") {
		t.Fatalf("Backend = %q, ContainerLabel = %q", c.Backend(), filter)
	}
	running := list(t, filter)
	if len(running.containers) != 2 || len(running.networks) != 1 {
		t.Fatalf("engine lists %d containers and %d networks with %s, want 2 (postgres, one pgbouncer) and 1", len(running.containers), len(running.networks), filter)
	}
	if err := ping(ctx, c.DSN(pgbouncer.Transaction)); err != nil {
		t.Fatalf("through the PgBouncer container: %v\n%s", err, c.Logs())
	}
	// Published on the loopback only: the superuser is trusted.
	for _, d := range []string{c.DSN(pgbouncer.Transaction), c.SuperuserDSN()} {
		cfg, err := pgconn.ParseConfig(d)
		if err != nil || !net.ParseIP(cfg.Host).IsLoopback() {
			t.Errorf("DSN %s: host %q, %v; want the loopback", d, cfg.Host, err)
		}
	}
	if err := c.RestartPostgres(ctx); err != nil {
		t.Fatalf("RestartPostgres: %v\n%s", err, c.Logs())
	}
	if err := c.RestartBouncer(ctx, pgbouncer.Transaction); err != nil {
		t.Fatalf("RestartBouncer: %v\n%s", err, c.Logs())
	}
	if err := ping(ctx, c.DSN(pgbouncer.Transaction)); err != nil {
		t.Fatalf("through PgBouncer after the restarts: %v\n%s", err, c.Logs())
	}
	closed = true
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkRemoved(t, filter, running)
}

// failingRuntime is the Docker runtime with the PgBouncer image replaced by
// one that does not exist, so Run fails after PostgreSQL's container and the
// network were created. It records the labels of the spec.
type failingRuntime struct {
	docker.Runtime
	labels map[string]string
}

func (f *failingRuntime) Run(ctx context.Context, spec pgbouncer.ContainerSpec) (pgbouncer.RunningContainers, error) {
	f.labels = spec.Labels
	spec.BouncerImage = "pgadvisory-no-such-image.invalid/pgbouncer:none"
	return f.Runtime.Run(ctx, spec)
}

// A Start that fails half-way removes what it had started.
func TestDockerFailedStartRemovesEverything(t *testing.T) {
	needEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := &failingRuntime{}
	c, err := pgbouncer.Start(ctx, pgbouncer.WithBackend(pgbouncer.BackendDocker), pgbouncer.WithContainerRuntime(f), pgbouncer.WithModes(pgbouncer.Session))
	if err == nil {
		_ = c.Close()
		t.Fatal("Start with a missing PgBouncer image succeeded")
	}
	if !strings.Contains(err.Error(), "start pgbouncer container (session)") {
		t.Errorf("Start = %v, want the PgBouncer container's failure", err)
	}
	id := f.labels[pgbouncer.ContainerLabel]
	if id == "" {
		t.Fatalf("the runtime got no %s label: %v", pgbouncer.ContainerLabel, f.labels)
	}
	checkRemoved(t, pgbouncer.ContainerLabel+"="+id, labelled{})
}

// Where no engine answers (DOCKER_HOST at a socket nobody serves, or a TCP
// port nobody listens on), Start fails well before its deadline with an
// error that names the address it tried and what to do.
func TestDockerNoEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().String()
	l.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{
		"unix://" + filepath.Join(t.TempDir(), "nobody.sock"),
		"tcp://" + closedPort,
	} {
		t.Run(strings.SplitN(host, ":", 2)[0], func(t *testing.T) {
			// The child's Start has a minute; an engine that never
			// answers must not use it up (Available gives up after 5 s).
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe)
			cmd.Env = append(os.Environ(), childEnv+"=1", "DOCKER_HOST="+host, "TESTCONTAINERS_RYUK_DISABLED=true")
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("Start did not return within 40 s:\n%s", out)
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("child = %v, want exit status 2 (Start failed):\n%s", err, out)
			}
			msg := string(out)
			for _, want := range []string{"pgbouncer: docker engine: no Docker engine answers at " + host + " (DOCKER_HOST)", "start dockerd"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error lacks %q:\n%s", want, msg)
				}
			}
			if strings.Contains(msg, "context deadline exceeded") && !strings.Contains(msg, "connect") {
				t.Errorf("error is a bare timeout, not the reason:\n%s", msg)
			}
		})
	}
}
