package pgbouncer

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
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
	f, err := renderDockerFiles([]Mode{Transaction, Statement}, WidePoolSize, defaultCredentials, tlsOff)
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
	cmd := strings.Join(postgresCommand(false), " ")
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

// Without WithTLS the generated configuration has no TLS line at all: the
// default stays exactly as it was.
func TestRenderIniNoTLSByDefault(t *testing.T) {
	ini, err := renderIni(bouncerConfig{mode: Transaction, serverHost: "h", serverPort: 1, listenAddr: "a",
		listenPort: 2, authFile: "f", widePool: WidePoolSize, creds: defaultCredentials})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ini, "tls") {
		t.Fatalf("default ini mentions TLS:\n%s", ini)
	}
	if strings.Contains(renderHBA(defaultCredentials, "n", "n"), "hostssl") {
		t.Fatal("default pg_hba.conf must not require TLS")
	}
	o, err := buildOptions(nil)
	if err != nil || o.tls != tlsOff {
		t.Fatalf("default options: tls = %v, %v; want off", o.tls, err)
	}
}

func TestRenderIniTLS(t *testing.T) {
	for _, mode := range []string{"allow", "require"} {
		t.Run(mode, func(t *testing.T) {
			ini, err := renderIni(bouncerConfig{mode: Transaction, serverHost: "127.0.0.1", serverPort: 1, listenAddr: "127.0.0.1",
				listenPort: 2, authFile: "f", widePool: WidePoolSize, creds: defaultCredentials,
				tls: &bouncerTLS{clientMode: mode, certFile: "/d/server.crt", keyFile: "/d/server.key", caFile: "/d/ca.crt", serverMode: "verify-full"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"client_tls_sslmode = " + mode + "\n",
				"client_tls_cert_file = /d/server.crt\n",
				"client_tls_key_file = /d/server.key\n",
				"client_tls_ca_file = /d/ca.crt\n",
				"server_tls_sslmode = verify-full\n",
				"server_tls_ca_file = /d/ca.crt\n",
				"pool_mode = transaction\n",
			} {
				if !strings.Contains(ini, want) {
					t.Errorf("ini lacks %q:\n%s", want, ini)
				}
			}
		})
	}
	base := bouncerTLS{clientMode: "allow", certFile: "c", keyFile: "k", caFile: "a", serverMode: "require"}
	for name, mutate := range map[string]func(*bouncerTLS){
		"bad client mode":  func(b *bouncerTLS) { b.clientMode = "verify-full" },
		"no key":           func(b *bouncerTLS) { b.keyFile = "" },
		"comment in path":  func(b *bouncerTLS) { b.certFile = "/tmp/a;b" },
		"newline in mode":  func(b *bouncerTLS) { b.serverMode = "require\nadmin_users = x" },
		"no server mode":   func(b *bouncerTLS) { b.serverMode = "" },
		"comment in CA":    func(b *bouncerTLS) { b.caFile = "#" },
		"newline in a key": func(b *bouncerTLS) { b.keyFile = "k\n" },
	} {
		t.Run(name, func(t *testing.T) {
			tl := base
			mutate(&tl)
			_, err := renderIni(bouncerConfig{mode: Session, serverHost: "h", serverPort: 1, listenAddr: "a", listenPort: 2,
				authFile: "f", widePool: 4, creds: defaultCredentials, tls: &tl})
			if err == nil || !strings.HasPrefix(err.Error(), "pgbouncer: ") {
				t.Fatalf("renderIni = %v, want a pgbouncer: error", err)
			}
		})
	}
}

func TestRenderHBASSL(t *testing.T) {
	hba := renderHBASSL(defaultCredentials, "127.0.0.1/32", "127.0.0.1/32")
	for _, want := range []string{
		"host all postgres 127.0.0.1/32 trust\n",
		"hostssl all all 127.0.0.1/32 scram-sha-256\n",
	} {
		if !strings.Contains(hba, want) {
			t.Errorf("hba lacks %q:\n%s", want, hba)
		}
	}
	if strings.Contains(hba, "host all all") {
		t.Errorf("hba lets the application user in over plaintext:\n%s", hba)
	}
}

func TestTLSOptions(t *testing.T) {
	o, err := buildOptions([]Option{WithTLS()})
	if err != nil || o.tls != tlsAllow {
		t.Fatalf("WithTLS: %v, %v", o.tls, err)
	}
	// WithTLS after WithTLSRequired does not weaken it.
	o, err = buildOptions([]Option{WithTLSRequired(), WithTLS()})
	if err != nil || o.tls != tlsRequired {
		t.Fatalf("WithTLSRequired, WithTLS: %v, %v", o.tls, err)
	}
	if got := withSSLMode("postgres://u:p@h:1/db?sslmode=disable", "require"); got != "postgres://u:p@h:1/db?sslmode=require" {
		t.Fatalf("withSSLMode = %q", got)
	}
}

// The generated certificates chain to the CA and name the loopback.
func TestGenerateTLS(t *testing.T) {
	f, err := generateTLS()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(f.caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	block, _ := pem.Decode(f.certPEM)
	if block == nil {
		t.Fatal("server certificate PEM does not parse")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "localhost", "::1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: pool}); err == nil {
		t.Error("certificate verifies for example.com")
	}
	if _, err := tls.X509KeyPair(f.certPEM, f.keyPEM); err != nil {
		t.Fatalf("key does not match certificate: %v", err)
	}
	if _, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Fatalf("server key is %T, want ECDSA", cert.PublicKey)
	}
}

// With TLS the Docker back end's containers get the certificates: PostgreSQL
// runs with ssl=on and the key its script copies, PgBouncer verifies it by its
// network alias, and WithTLSRequired refuses plaintext in pg_hba.conf and
// PgBouncer; the CA's file is on the host for CAFile.
func TestDockerTLSSpec(t *testing.T) {
	for _, level := range []tlsLevel{tlsAllow, tlsRequired} {
		o, err := buildOptions([]Option{WithModes(Session)})
		if err != nil {
			t.Fatal(err)
		}
		o.tls = level
		spec, files, err := containerSpec(o, defaultCredentials, "id")
		if err != nil {
			t.Fatal(err)
		}
		if files.tls == nil {
			t.Fatalf("level %d: no certificates", level)
		}
		cmd := strings.Join(spec.PostgresCommand, " ")
		for _, want := range []string{"ssl=on", "ssl_cert_file=/etc/pgadvisory/server.crt", "ssl_key_file=/tmp/pgadvisory-server.key", "umask 077"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("postgres command lacks %q: %s", want, cmd)
			}
		}
		ini := files.ini[Session]
		clientMode := map[tlsLevel]string{tlsAllow: "allow", tlsRequired: "require"}[level]
		for _, want := range []string{"client_tls_sslmode = " + clientMode + "\n", "server_tls_sslmode = verify-full\n", "server_tls_ca_file = /etc/pgbouncer/ca.crt\n"} {
			if !strings.Contains(ini, want) {
				t.Errorf("ini lacks %q:\n%s", want, ini)
			}
		}
		if got := strings.Contains(files.hba, "hostssl all all 0.0.0.0/0 scram-sha-256"); got != (level == tlsRequired) {
			t.Errorf("level %d: hostssl line %v:\n%s", level, got, files.hba)
		}
		var paths []string
		for _, f := range append(spec.PostgresFiles, spec.BouncerFiles[Session]...) {
			paths = append(paths, f.Path)
		}
		for _, want := range []string{"/etc/pgadvisory/server.crt", "/etc/pgadvisory/server.key", "/etc/pgbouncer/server.crt", "/etc/pgbouncer/server.key", "/etc/pgbouncer/ca.crt"} {
			if !slices.Contains(paths, want) {
				t.Errorf("no %s among %q", want, paths)
			}
		}
		block, _ := pem.Decode(files.tls.certPEM)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := cert.VerifyHostname("postgres"); err != nil {
			t.Errorf("the certificate does not name PostgreSQL's alias: %v", err)
		}
	}
}
