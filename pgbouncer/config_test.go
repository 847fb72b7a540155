package pgbouncer

import (
	"errors"
	"strings"
	"testing"
)

func TestRenderIniLocal(t *testing.T) {
	ini, err := renderIni(bouncerConfig{
		mode: Transaction, serverHost: "127.0.0.1", serverPort: 5433,
		listenAddr: "127.0.0.1", listenPort: 6433,
		authFile: "/tmp/x/userlist.txt", socketDir: "/tmp/x", widePool: WidePoolSize, creds: defaultCredentials,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"app = host=127.0.0.1 port=5433 dbname=app pool_size=1\n",
		"app_wide = host=127.0.0.1 port=5433 dbname=app pool_size=4\n",
		"pool_mode = transaction\n",
		"listen_addr = 127.0.0.1\n",
		"listen_port = 6433\n",
		"unix_socket_dir = /tmp/x\n",
		"auth_type = md5\n",
		"auth_file = /tmp/x/userlist.txt\n",
		"admin_users = pgbadmin\n",
		"default_pool_size = 1\n",
	} {
		if !strings.Contains(ini, want) {
			t.Errorf("ini lacks %q:\n%s", want, ini)
		}
	}
	// FACTS.md: a trailing "; comment" after a value breaks PgBouncer's
	// parser, so no generated line may carry one.
	for _, line := range strings.Split(ini, "\n") {
		if i := strings.IndexAny(line, ";#"); i > 0 {
			t.Errorf("line with a trailing comment: %q", line)
		}
	}
}

func TestRenderIniRejects(t *testing.T) {
	base := bouncerConfig{mode: Session, serverHost: "h", serverPort: 1, listenAddr: "a", listenPort: 2, authFile: "f", widePool: 4, creds: defaultCredentials}
	cases := map[string]func(*bouncerConfig){
		"unknown mode":     func(c *bouncerConfig) { c.mode = "batch" },
		"comment in value": func(c *bouncerConfig) { c.authFile = "/tmp/a;b" },
		"newline in value": func(c *bouncerConfig) { c.serverHost = "h\nadmin_users = x" },
		"zero port":        func(c *bouncerConfig) { c.listenPort = 0 },
		"no wide pool":     func(c *bouncerConfig) { c.widePool = 0 },
		"huge wide pool":   func(c *bouncerConfig) { c.widePool = MaxWidePoolSize + 1 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := base
			mutate(&cfg)
			if _, err := renderIni(cfg); err == nil || !strings.HasPrefix(err.Error(), "pgbouncer: ") {
				t.Fatalf("renderIni = %v, want a pgbouncer: error", err)
			}
		})
	}
}

func TestRenderUserlist(t *testing.T) {
	got, err := renderUserlist(defaultCredentials)
	if err != nil {
		t.Fatal(err)
	}
	want := "\"app\" \"app-secret\"\n\"pgbadmin\" \"admin-secret\"\n"
	if got != want {
		t.Fatalf("userlist = %q, want %q", got, want)
	}
	bad := defaultCredentials
	bad.appPassword = `a"b`
	if _, err := renderUserlist(bad); err == nil {
		t.Fatal("a quote in a password must be refused")
	}
}

func TestDockerFiles(t *testing.T) {
	f, err := renderDockerFiles([]Mode{Transaction, Statement}, WidePoolSize, defaultCredentials)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.ini) != 2 {
		t.Fatalf("got %d ini files, want 2", len(f.ini))
	}
	ini := f.ini[Statement]
	for _, want := range []string{
		"app = host=postgres port=5432 dbname=app pool_size=1\n",
		"pool_mode = statement\n",
		"listen_addr = 0.0.0.0\n",
		"listen_port = 6432\n",
		"auth_file = /etc/pgbouncer/userlist.txt\n",
	} {
		if !strings.Contains(ini, want) {
			t.Errorf("docker ini lacks %q:\n%s", want, ini)
		}
	}
	if strings.Contains(ini, "unix_socket_dir = /") || strings.Contains(ini, "logfile") {
		t.Errorf("docker ini must log to stderr and use no host socket dir:\n%s", ini)
	}
	if !strings.Contains(f.initSQL, `CREATE ROLE "app" LOGIN PASSWORD 'app-secret';`) ||
		!strings.Contains(f.initSQL, `CREATE DATABASE "app" OWNER "app";`) {
		t.Errorf("init SQL = %q", f.initSQL)
	}
	if !strings.Contains(f.hba, "host all all 0.0.0.0/0 scram-sha-256") {
		t.Errorf("hba = %q", f.hba)
	}
	cmd := strings.Join(postgresCommand(), " ")
	if !strings.Contains(cmd, "hba_file=/etc/pgadvisory/pg_hba.conf") || !strings.Contains(cmd, "fsync=off") {
		t.Errorf("postgres command = %q", cmd)
	}
}

func TestMissingBinaryNamesPackage(t *testing.T) {
	oldLook, oldGlob, oldDirs := lookPath, postgresBinGlob, pgbouncerDirs
	t.Cleanup(func() { lookPath, postgresBinGlob, pgbouncerDirs = oldLook, oldGlob, oldDirs })
	pgbouncerDirs = []string{t.TempDir()}
	lookPath = func(string) (string, error) { return "", errors.New("not found") }
	postgresBinGlob = t.TempDir() + "/none/*/bin"

	_, err := findBinaries()
	var mb *MissingBinaryError
	if !errors.As(err, &mb) {
		t.Fatalf("findBinaries = %v, want *MissingBinaryError", err)
	}
	if mb.Program != "initdb" || mb.Package != "postgresql" {
		t.Fatalf("got %+v", mb)
	}
	if !strings.Contains(err.Error(), "apt-get install -y postgresql") {
		t.Fatalf("message does not say what to install: %v", err)
	}

	// With PostgreSQL present but PgBouncer missing, the error names
	// pgbouncer's package.
	lookPath = func(name string) (string, error) {
		if name == "pgbouncer" {
			return "", errors.New("not found")
		}
		return "/bin/true", nil
	}
	_, err = findBinaries()
	if !errors.As(err, &mb) || mb.Program != "pgbouncer" || !strings.Contains(err.Error(), "apt-get install -y pgbouncer") {
		t.Fatalf("findBinaries = %v, want pgbouncer missing", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, opt := range map[string]Option{
		"no modes":      WithModes(),
		"bad mode":      WithModes("batch"),
		"bad backend":   WithBackend("podman"),
		"empty os user": WithOSUser(""),
		"empty image":   WithImages("", "x"),
		"zero pool":     WithWidePoolSize(0),
		"huge pool":     WithWidePoolSize(MaxWidePoolSize + 1),
		"nil option":    nil,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := buildOptions([]Option{opt}); err == nil {
				t.Fatal("want an error")
			}
		})
	}
	t.Setenv(BackendEnv, "nonsense")
	if _, err := buildOptions(nil); err == nil || !strings.Contains(err.Error(), BackendEnv) {
		t.Fatalf("bad %s: err = %v", BackendEnv, err)
	}
	t.Setenv(BackendEnv, "LOCAL")
	o, err := buildOptions([]Option{WithModes(Session, Session)})
	if err != nil || o.backend != BackendLocal || len(o.modes) != 1 || o.widePool != WidePoolSize {
		t.Fatalf("got %+v, %v", o, err)
	}
	if o, err := buildOptions([]Option{WithWidePoolSize(9)}); err != nil || o.widePool != 9 {
		t.Fatalf("WithWidePoolSize(9): got %+v, %v", o, err)
	}
}

// The wide database's pool size reaches the generated pgbouncer.ini.
func TestRenderIniWidePool(t *testing.T) {
	ini, err := renderIni(bouncerConfig{mode: Transaction, serverHost: "h", serverPort: 1, listenAddr: "a",
		listenPort: 2, authFile: "f", widePool: 9, creds: defaultCredentials})
	if err != nil {
		t.Fatal(err)
	}
	if want := "app_wide = host=h port=1 dbname=app pool_size=9\n"; !strings.Contains(ini, want) {
		t.Fatalf("ini lacks %q:\n%s", want, ini)
	}
}

func TestDSNEscapes(t *testing.T) {
	got := dsn("a b", "p@ss/word", "::1", 5432, "db")
	want := "postgres://a%20b:p%40ss%2Fword@[::1]:5432/db?sslmode=disable"
	if got != want {
		t.Fatalf("dsn = %q, want %q", got, want)
	}
}
