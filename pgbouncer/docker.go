package pgbouncer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

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

// dockerAvailable reports whether a Docker engine answers.
func dockerAvailable(ctx context.Context) (err error) {
	defer func() {
		// testcontainers-go has panicked on broken Docker set-ups.
		if r := recover(); r != nil {
			err = fmt.Errorf("pgbouncer: docker provider panicked: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	defer p.Close()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Health(hctx); err != nil {
		return fmt.Errorf("pgbouncer: docker engine: %w", err)
	}
	return nil
}

type dockerCluster struct {
	creds    credentials
	net      *testcontainers.DockerNetwork
	postgres *testcontainers.DockerContainer
	bouncers map[Mode]*testcontainers.DockerContainer

	mu      sync.Mutex
	pgPort  int
	bpPorts map[Mode]int
}

func startDocker(ctx context.Context, o *options, creds credentials) (_ *dockerCluster, err error) {
	if err := dockerAvailable(ctx); err != nil {
		return nil, err
	}
	files, err := renderDockerFiles(o.modes, o.widePool, creds)
	if err != nil {
		return nil, err
	}
	dc := &dockerCluster{creds: creds, bouncers: map[Mode]*testcontainers.DockerContainer{}, bpPorts: map[Mode]int{}}
	defer func() {
		if err != nil {
			_ = dc.close()
		}
	}()
	if dc.net, err = network.New(ctx); err != nil {
		return nil, fmt.Errorf("pgbouncer: docker network: %w", err)
	}
	dc.postgres, err = testcontainers.Run(ctx, o.postgresImage,
		network.WithNetwork([]string{postgresAlias}, dc.net),
		testcontainers.WithEnv(files.env),
		testcontainers.WithCmd(postgresCommand()...),
		testcontainers.WithExposedPorts(fmt.Sprintf("%d/tcp", containerPGPort)),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{Reader: strings.NewReader(files.hba), ContainerFilePath: "/etc/pgadvisory/pg_hba.conf", FileMode: 0o644},
			testcontainers.ContainerFile{Reader: strings.NewReader(files.initSQL), ContainerFilePath: "/docker-entrypoint-initdb.d/pgadvisory.sql", FileMode: 0o644},
		),
		// The image restarts the server once after initialisation: wait
		// for the second "ready" line.
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(time.Minute)),
	)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: start postgres container: %w", err)
	}
	if err := dc.refreshPorts(ctx); err != nil {
		return nil, err
	}
	for _, m := range o.modes {
		c, err := testcontainers.Run(ctx, o.bouncerImage,
			network.WithNetwork([]string{"pgbouncer-" + string(m)}, dc.net),
			testcontainers.WithExposedPorts(fmt.Sprintf("%d/tcp", containerBouncerPt)),
			testcontainers.WithFiles(
				testcontainers.ContainerFile{Reader: strings.NewReader(files.ini[m]), ContainerFilePath: containerConfigDir + "/pgbouncer.ini", FileMode: 0o644},
				testcontainers.ContainerFile{Reader: strings.NewReader(files.userlist), ContainerFilePath: containerConfigDir + "/userlist.txt", FileMode: 0o644},
			),
			testcontainers.WithWaitStrategy(wait.ForListeningPort(fmt.Sprintf("%d/tcp", containerBouncerPt))),
		)
		if err != nil {
			return nil, fmt.Errorf("pgbouncer: start pgbouncer container (%s): %w", m, err)
		}
		dc.bouncers[m] = c
	}
	if err := dc.refreshPorts(ctx); err != nil {
		return nil, err
	}
	for _, m := range o.modes {
		h, p, _ := dc.bouncerAddr(m)
		if err := pollPing(ctx, dsn(creds.appUser, creds.appPassword, h, p, NarrowDatabase)); err != nil {
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

// refreshPorts reads the host ports Docker published; they can change when a
// container restarts.
func (dc *dockerCluster) refreshPorts(ctx context.Context) error {
	port := func(c *testcontainers.DockerContainer, inner int) (int, error) {
		p, err := c.MappedPort(ctx, fmt.Sprintf("%d/tcp", inner))
		if err != nil {
			return 0, fmt.Errorf("pgbouncer: published port: %w", err)
		}
		return int(p.Num()), nil
	}
	pg, err := port(dc.postgres, containerPGPort)
	if err != nil {
		return err
	}
	ports := map[Mode]int{}
	for m, c := range dc.bouncers {
		if ports[m], err = port(c, containerBouncerPt); err != nil {
			return err
		}
	}
	dc.mu.Lock()
	dc.pgPort, dc.bpPorts = pg, ports
	dc.mu.Unlock()
	return nil
}

func (dc *dockerCluster) postgresAddr() (string, int) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	return "127.0.0.1", dc.pgPort
}

func (dc *dockerCluster) bouncerAddr(m Mode) (string, int, bool) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	p, ok := dc.bpPorts[m]
	return "127.0.0.1", p, ok
}

func (dc *dockerCluster) stopBouncer(ctx context.Context, m Mode, kill bool) error {
	timeout := 10 * time.Second
	if kill {
		timeout = 0
	}
	if err := dc.bouncers[m].Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("pgbouncer: stop pgbouncer container (%s): %w", m, err)
	}
	return nil
}

func (dc *dockerCluster) startBouncer(ctx context.Context, m Mode) error {
	if err := dc.bouncers[m].Start(ctx); err != nil {
		return fmt.Errorf("pgbouncer: start pgbouncer container (%s): %w", m, err)
	}
	if err := dc.refreshPorts(ctx); err != nil {
		return err
	}
	h, p, _ := dc.bouncerAddr(m)
	return pollPing(ctx, dsn(dc.creds.appUser, dc.creds.appPassword, h, p, NarrowDatabase))
}

func (dc *dockerCluster) restartPostgres(ctx context.Context) error {
	timeout := 30 * time.Second
	if err := dc.postgres.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("pgbouncer: stop postgres container: %w", err)
	}
	if err := dc.postgres.Start(ctx); err != nil {
		return fmt.Errorf("pgbouncer: start postgres container: %w", err)
	}
	if err := dc.refreshPorts(ctx); err != nil {
		return err
	}
	h, p := dc.postgresAddr()
	return pollPing(ctx, dsn(dc.creds.superuser, "", h, p, "postgres"))
}

func (dc *dockerCluster) logTail() string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	add := func(name string, c *testcontainers.DockerContainer) {
		if c == nil {
			return
		}
		rc, err := c.Logs(ctx)
		if err != nil {
			return
		}
		defer rc.Close()
		var sb strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := rc.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		fmt.Fprintf(&b, "--- last lines of %s ---\n%s\n", name, tail(sb.String(), 15))
	}
	add("postgres container", dc.postgres)
	for _, m := range AllModes {
		add("pgbouncer container ("+string(m)+")", dc.bouncers[m])
	}
	return b.String()
}

func (dc *dockerCluster) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []string
	for _, c := range dc.bouncers {
		if err := c.Terminate(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if dc.postgres != nil {
		if err := dc.postgres.Terminate(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if dc.net != nil {
		if err := dc.net.Remove(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("pgbouncer: close docker cluster: %s", strings.Join(errs, "; "))
	}
	return nil
}
