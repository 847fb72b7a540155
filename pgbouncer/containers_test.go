package pgbouncer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeRuntime is a ContainerRuntime without containers: Run records the
// spec and hands out the addresses of a local cluster (nil: fails).
type fakeRuntime struct {
	unavailable error
	local       *Cluster
	specs       []ContainerSpec
	closed      int
}

func (f *fakeRuntime) Available(context.Context) error { return f.unavailable }

func (f *fakeRuntime) Run(_ context.Context, spec ContainerSpec) (RunningContainers, error) {
	f.specs = append(f.specs, spec)
	if f.local == nil {
		return nil, errors.New("fake: no containers here")
	}
	return &fakeContainers{f: f}, nil
}

// fakeContainers are a local cluster's servers posing as containers.
type fakeContainers struct{ f *fakeRuntime }

func (c *fakeContainers) PostgresAddr() (string, int) { return c.f.local.impl.postgresAddr() }
func (c *fakeContainers) BouncerAddr(m Mode) (string, int, bool) {
	return c.f.local.impl.bouncerAddr(m)
}
func (c *fakeContainers) StopBouncer(ctx context.Context, m Mode, kill bool) error {
	return c.f.local.impl.stopBouncer(ctx, m, kill)
}
func (c *fakeContainers) StartBouncer(ctx context.Context, m Mode) error {
	return c.f.local.StartBouncer(ctx, m)
}
func (c *fakeContainers) RestartPostgres(ctx context.Context) error {
	return c.f.local.RestartPostgres(ctx)
}
func (c *fakeContainers) Logs(context.Context) []ContainerLog {
	return []ContainerLog{{Name: "local cluster", Text: c.f.local.Logs()}}
}
func (c *fakeContainers) Close() error { c.f.closed++; return nil }

// withRegistered registers r for the test.
func withRegistered(t *testing.T, r ContainerRuntime) {
	old := registeredRuntime()
	RegisterContainerRuntime(r)
	t.Cleanup(func() { RegisterContainerRuntime(old) })
}

// Without pgbouncer/docker linked, asking for Docker names the import, and
// auto without local binaries says so next to the missing package.
func TestDockerNotLinked(t *testing.T) {
	withRegistered(t, nil)
	_, err := Start(context.Background(), WithBackend(BackendDocker))
	if !errors.Is(err, errNoRuntime) || !strings.Contains(err.Error(), `import _ "github.com/pgadvisory/pgadvisory/pgbouncer/docker"`) {
		t.Fatalf("Start(docker) without a runtime = %v, want the not-linked error naming the import", err)
	}
	if err := WithContainerRuntime(nil)(&options{}); err == nil {
		t.Error("WithContainerRuntime(nil) accepted")
	}

	oldLook, oldGlob, oldDirs := lookPath, postgresBinGlob, pgbouncerDirs
	t.Cleanup(func() { lookPath, postgresBinGlob, pgbouncerDirs = oldLook, oldGlob, oldDirs })
	pgbouncerDirs = []string{t.TempDir()}
	lookPath = func(string) (string, error) { return "", errors.New("not found") }
	postgresBinGlob = t.TempDir() + "/none/*/bin"
	_, err = chooseBackend(context.Background(), nil)
	var mb *MissingBinaryError
	if !errors.As(err, &mb) || !errors.Is(err, errNoRuntime) {
		t.Fatalf("chooseBackend without binaries or runtime = %v, want both reasons", err)
	}
	f := &fakeRuntime{unavailable: errors.New("fake: no engine")}
	if _, err := chooseBackend(context.Background(), f); err == nil || !strings.Contains(err.Error(), "fake: no engine") {
		t.Fatalf("chooseBackend with an unavailable engine = %v", err)
	}
	f.unavailable = nil
	if b, err := chooseBackend(context.Background(), f); b != BackendDocker || err != nil {
		t.Fatalf("chooseBackend with an engine = %q, %v, want docker", b, err)
	}
}

// The registered runtime (or WithContainerRuntime's) gets the rendered
// configuration; its errors come back from Start.
func TestContainerSpec(t *testing.T) {
	t.Setenv(ImagesEnv, "") // the defaults, not make test-docker's image
	reg := &fakeRuntime{}
	withRegistered(t, reg)
	_, err := Start(context.Background(), WithBackend(BackendDocker), WithModes(Statement, Transaction))
	if err == nil || !strings.Contains(err.Error(), "fake: no containers here") {
		t.Fatalf("Start = %v, want the runtime's error", err)
	}
	if len(reg.specs) != 1 {
		t.Fatalf("the registered runtime ran %d times, want 1", len(reg.specs))
	}
	explicit := &fakeRuntime{unavailable: errors.New("fake: no engine")}
	if _, err := Start(context.Background(), WithBackend(BackendDocker), WithContainerRuntime(explicit)); err == nil || !strings.Contains(err.Error(), "fake: no engine") {
		t.Fatalf("Start with an unavailable runtime = %v", err)
	}
	if len(reg.specs) != 1 || len(explicit.specs) != 0 {
		t.Fatalf("WithContainerRuntime: the registered runtime ran too, or the unavailable one ran")
	}

	spec := reg.specs[0]
	if spec.PostgresImage != DefaultPostgresImage || spec.BouncerImage != DefaultPgBouncerImage ||
		spec.PostgresAlias != "postgres" || spec.PostgresPort != 5432 || spec.BouncerPort != 6432 {
		t.Errorf("spec = %+v", spec)
	}
	if !slices.Contains(spec.PostgresCommand, "hba_file=/etc/pgadvisory/pg_hba.conf") {
		t.Errorf("postgres command = %q", spec.PostgresCommand)
	}
	if spec.PostgresEnv["PGUSER"] != defaultCredentials.superuser || spec.User != "postgres" || spec.PostgresStopSignal != "SIGINT" {
		t.Errorf("postgres env = %v, user %q, stop signal %q", spec.PostgresEnv, spec.User, spec.PostgresStopSignal)
	}
	if !slices.Equal(spec.BouncerCommand, []string{"pgbouncer", "/etc/pgbouncer/pgbouncer.ini"}) {
		t.Errorf("pgbouncer command = %q", spec.BouncerCommand)
	}
	if id := spec.Labels[ContainerLabel]; len(id) != 16 {
		t.Errorf("labels = %v, want a 16-digit cluster id under %s", spec.Labels, ContainerLabel)
	}
	paths := func(files []ContainerFile) (ps []string) {
		for _, f := range files {
			if f.Content == "" {
				t.Errorf("%s is empty", f.Path)
			}
			ps = append(ps, f.Path)
		}
		return ps
	}
	if got := paths(spec.PostgresFiles); !slices.Equal(got, []string{"/etc/pgadvisory/pg_hba.conf", "/etc/pgadvisory/setup.sql"}) {
		t.Errorf("postgres files = %q", got)
	}
	if len(spec.BouncerFiles) != 2 {
		t.Fatalf("bouncer files for %d modes, want 2", len(spec.BouncerFiles))
	}
	for _, m := range []Mode{Statement, Transaction} {
		files := spec.BouncerFiles[m]
		if got := paths(files); !slices.Equal(got, []string{"/etc/pgbouncer/pgbouncer.ini", "/etc/pgbouncer/userlist.txt"}) {
			t.Errorf("%s files = %q", m, got)
		} else if !strings.Contains(files[0].Content, "pool_mode = "+string(m)+"\n") {
			t.Errorf("%s ini:\n%s", m, files[0].Content)
		}
	}
}

// The Docker back end's cluster over a runtime whose "containers" are a
// local cluster's servers: Start pings every PgBouncer, and KillBouncer,
// StartBouncer, RestartPostgres and Close go through the runtime.
func TestDockerClusterOverRuntime(t *testing.T) {
	local := StartT(t, WithBackend(BackendLocal), WithModes(Transaction))
	f := &fakeRuntime{local: local}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, WithBackend(BackendDocker), WithContainerRuntime(f), WithModes(Transaction))
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend() != BackendDocker || !slices.Equal(c.Modes(), []Mode{Transaction}) {
		t.Fatalf("Backend %q, Modes %v", c.Backend(), c.Modes())
	}
	if want := ContainerLabel + "=" + f.specs[0].Labels[ContainerLabel]; c.ContainerLabel() != want || local.ContainerLabel() != "" {
		t.Fatalf("ContainerLabel = %q (local: %q), want %q", c.ContainerLabel(), local.ContainerLabel(), want)
	}
	if c.DSN(Transaction) != local.DSN(Transaction) || c.DirectDSN() != local.DirectDSN() {
		t.Fatalf("DSNs differ from the runtime's addresses: %s vs %s", c.DSN(Transaction), local.DSN(Transaction))
	}
	if err := c.KillBouncer(Transaction); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, c.DSN(Transaction)); err == nil {
		t.Fatal("PgBouncer answers after KillBouncer")
	}
	if err := c.StartBouncer(ctx, Transaction); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartPostgres(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, c.DSN(Transaction)); err != nil {
		t.Fatalf("through PgBouncer after the restarts: %v", err)
	}
	if logs := c.Logs(); !strings.Contains(logs, "--- last lines of local cluster ---") {
		t.Errorf("Logs = %q", logs)
	}
	if err := c.Close(); err != nil || f.closed != 1 {
		t.Fatalf("Close = %v, runtime closed %d times", err, f.closed)
	}
}

// PGADVISORY_TEST_IMAGES sets the images as WithImages would: one image
// for both servers, or two separated by a comma; WithImages overrides it.
func TestImagesEnv(t *testing.T) {
	for _, tc := range []struct{ env, pg, bouncer string }{
		{"local/both:1", "local/both:1", "local/both:1"},
		{"pg:15, bouncer:1.18", "pg:15", "bouncer:1.18"},
	} {
		t.Setenv(ImagesEnv, tc.env)
		o, err := buildOptions(nil)
		if err != nil || o.postgresImage != tc.pg || o.bouncerImage != tc.bouncer {
			t.Errorf("%s=%q: images %q, %q, %v; want %q, %q", ImagesEnv, tc.env, o.postgresImage, o.bouncerImage, err, tc.pg, tc.bouncer)
		}
	}
	if o, err := buildOptions([]Option{WithImages("a", "b")}); err != nil || o.postgresImage != "a" || o.bouncerImage != "b" {
		t.Errorf("WithImages under %s: %q, %q, %v", ImagesEnv, o.postgresImage, o.bouncerImage, err)
	}
	for _, bad := range []string{"a,b,c", "a,", ",b"} {
		t.Setenv(ImagesEnv, bad)
		if _, err := buildOptions(nil); err == nil || !strings.Contains(err.Error(), ImagesEnv) {
			t.Errorf("%s=%q accepted or error without the variable's name: %v", ImagesEnv, bad, err)
		}
	}
}
