package pgbouncer

import (
	"fmt"
	"slices"
	"strings"
)

// Mode is a PgBouncer pool_mode.
type Mode string

// The three pool modes PgBouncer offers.
const (
	// Session gives a client one server connection until it disconnects.
	Session Mode = "session"
	// Transaction gives a client a server connection for one transaction.
	Transaction Mode = "transaction"
	// Statement gives a client a server connection for one statement and
	// refuses multi-statement transactions.
	Statement Mode = "statement"
)

// AllModes lists every pool mode, in the order the harness starts them.
var AllModes = []Mode{Transaction, Session, Statement}

func (m Mode) valid() bool { return slices.Contains(AllModes, m) }

// Names and pool sizes of the databases each PgBouncer serves. Both point at
// the same PostgreSQL database.
const (
	// NarrowDatabase is served with default_pool_size=1, so every client of
	// a PgBouncer shares one server backend: the leak is certain, not likely.
	NarrowDatabase = "app"
	// WideDatabase is served with pool_size=WidePoolSize (or the size given
	// WithWidePoolSize), for tests that need throughput or that show an
	// unlock landing on another backend.
	WideDatabase = "app_wide"
	// NarrowPoolSize is the pool size of NarrowDatabase.
	NarrowPoolSize = 1
	// WidePoolSize is the default pool size of WideDatabase.
	WidePoolSize = 4
	// MaxWidePoolSize is the largest pool WithWidePoolSize accepts: every
	// PgBouncer may open that many backends, and PostgreSQL is started with
	// max_connections=200 for up to three PgBouncers and the direct clients.
	MaxWidePoolSize = 32
)

// credentials are the fixed logins of a throwaway cluster. They protect
// nothing (the servers listen on 127.0.0.1 only and live for one test run) but
// make PgBouncer and PostgreSQL authenticate for real, as in production.
type credentials struct {
	appUser, appPassword     string
	adminUser, adminPassword string
	superuser                string
}

var defaultCredentials = credentials{
	appUser:       "app",
	appPassword:   "app-secret",
	adminUser:     "pgbadmin",
	adminPassword: "admin-secret",
	superuser:     "postgres",
}

// bouncerConfig is everything that differs between one pgbouncer.ini and
// another. The local and Docker back ends fill it differently (loopback
// ports versus a container network alias) and render it with the same code.
type bouncerConfig struct {
	mode       Mode
	serverHost string // where PgBouncer reaches PostgreSQL
	serverPort int
	listenAddr string
	listenPort int
	authFile   string // path of userlist.txt as PgBouncer sees it
	socketDir  string // "" disables the unix socket
	logFile    string // "" logs to stderr
	pidFile    string
	widePool   int // pool_size of WideDatabase
	creds      credentials
	tls        *bouncerTLS // nil: no TLS settings at all (the default)
}

// bouncerTLS are PgBouncer's TLS settings (WithTLS): towards its clients
// with the server certificate, towards PostgreSQL verifying it with the CA.
type bouncerTLS struct {
	clientMode                string // client_tls_sslmode: allow or require
	certFile, keyFile, caFile string // as PgBouncer (and PostgreSQL) see them
	serverMode                string // server_tls_sslmode
}

// checkWidePool accepts a pool size of WideDatabase: 1..MaxWidePoolSize.
func checkWidePool(n int) error {
	if n < 1 || n > MaxWidePoolSize {
		return fmt.Errorf("pgbouncer: pool size %d of %s out of range (accepted: 1..%d)", n, WideDatabase, MaxWidePoolSize)
	}
	return nil
}

// iniValue rejects values that pgbouncer.ini cannot hold: the format has no
// quoting, and a ';' or '#' would start a comment (FACTS.md: a trailing
// comment after a value breaks parsing).
func iniValue(name, v string) (string, error) {
	if strings.ContainsAny(v, ";#\n\r") {
		return "", fmt.Errorf("pgbouncer: %s %q cannot be written to pgbouncer.ini (contains ';', '#' or a newline)", name, v)
	}
	return v, nil
}

// renderIni returns the text of a pgbouncer.ini for cfg.
func renderIni(cfg bouncerConfig) (string, error) {
	if !cfg.mode.valid() {
		return "", fmt.Errorf("pgbouncer: unknown pool mode %q (accepted: transaction, session, statement)", cfg.mode)
	}
	values := map[string]string{
		"server host": cfg.serverHost, "listen address": cfg.listenAddr, "auth file": cfg.authFile,
		"socket dir": cfg.socketDir, "log file": cfg.logFile, "pid file": cfg.pidFile,
	}
	if t := cfg.tls; t != nil {
		if t.clientMode != "allow" && t.clientMode != "require" {
			return "", fmt.Errorf("pgbouncer: client_tls_sslmode %q (accepted: allow, require)", t.clientMode)
		}
		if t.certFile == "" || t.keyFile == "" || t.caFile == "" || t.serverMode == "" {
			return "", fmt.Errorf("pgbouncer: TLS needs a certificate, a key, a CA file and a server_tls_sslmode")
		}
		values["TLS certificate file"], values["TLS key file"], values["TLS CA file"] = t.certFile, t.keyFile, t.caFile
		values["server_tls_sslmode"] = t.serverMode
	}
	for name, v := range values {
		if _, err := iniValue(name, v); err != nil {
			return "", err
		}
	}
	if cfg.serverPort <= 0 || cfg.listenPort <= 0 {
		return "", fmt.Errorf("pgbouncer: ports must be positive (server %d, listen %d)", cfg.serverPort, cfg.listenPort)
	}
	if err := checkWidePool(cfg.widePool); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("; generated by github.com/pgadvisory/pgadvisory/pgbouncer\n[databases]\n")
	fmt.Fprintf(&b, "%s = host=%s port=%d dbname=%s pool_size=%d\n", NarrowDatabase, cfg.serverHost, cfg.serverPort, NarrowDatabase, NarrowPoolSize)
	fmt.Fprintf(&b, "%s = host=%s port=%d dbname=%s pool_size=%d\n", WideDatabase, cfg.serverHost, cfg.serverPort, NarrowDatabase, cfg.widePool)
	b.WriteString("\n[pgbouncer]\n")
	kv := func(k string, v any) { fmt.Fprintf(&b, "%s = %v\n", k, v) }
	kv("pool_mode", cfg.mode)
	kv("listen_addr", cfg.listenAddr)
	kv("listen_port", cfg.listenPort)
	kv("unix_socket_dir", cfg.socketDir)
	kv("auth_type", "md5")
	kv("auth_file", cfg.authFile)
	kv("admin_users", cfg.creds.adminUser)
	kv("stats_users", cfg.creds.adminUser)
	kv("default_pool_size", NarrowPoolSize)
	kv("min_pool_size", 0)
	kv("reserve_pool_size", 0)
	kv("max_client_conn", 500)
	kv("server_reset_query", "DISCARD ALL")
	// Tests restart PostgreSQL under PgBouncer; reconnect quickly.
	kv("server_login_retry", 1)
	if t := cfg.tls; t != nil {
		kv("client_tls_sslmode", t.clientMode)
		kv("client_tls_cert_file", t.certFile)
		kv("client_tls_key_file", t.keyFile)
		kv("client_tls_ca_file", t.caFile)
		kv("server_tls_sslmode", t.serverMode)
		kv("server_tls_ca_file", t.caFile)
	}
	if cfg.logFile != "" {
		kv("logfile", cfg.logFile)
	}
	if cfg.pidFile != "" {
		kv("pidfile", cfg.pidFile)
	}
	return b.String(), nil
}

// renderUserlist returns the auth_file: plaintext passwords, which PgBouncer
// accepts for md5 clients and uses itself to log in to PostgreSQL with SCRAM.
func renderUserlist(c credentials) (string, error) {
	var b strings.Builder
	for _, up := range [][2]string{{c.appUser, c.appPassword}, {c.adminUser, c.adminPassword}} {
		if strings.ContainsAny(up[0]+up[1], "\"\n\r") {
			return "", fmt.Errorf("pgbouncer: user %q: names and passwords in the auth file cannot contain '\"' or newlines", up[0])
		}
		fmt.Fprintf(&b, "%q %q\n", up[0], up[1])
	}
	return b.String(), nil
}

// renderHBA returns a pg_hba.conf: the superuser is trusted on the unix
// socket and from trustNet (setup and fault injection); everyone else must
// authenticate with SCRAM from scramNet, as PgBouncer must.
func renderHBA(c credentials, trustNet, scramNet string) string {
	return fmt.Sprintf(`# generated by github.com/pgadvisory/pgadvisory/pgbouncer
local all all trust
host all %[1]s %[2]s trust
host all all %[3]s scram-sha-256
`, c.superuser, trustNet, scramNet)
}

// renderHBASSL is renderHBA for WithTLSRequired: the superuser stays trusted
// over plaintext from trustNet, everyone else must come over TLS
// (hostssl) and authenticate with SCRAM.
func renderHBASSL(c credentials, trustNet, scramNet string) string {
	return fmt.Sprintf(`# generated by github.com/pgadvisory/pgadvisory/pgbouncer
local all all trust
host all %[1]s %[2]s trust
hostssl all all %[3]s scram-sha-256
`, c.superuser, trustNet, scramNet)
}

// serverSettings are the postgresql.conf settings of a throwaway cluster:
// durability off for speed (FACTS.md), enough connections for the tests.
var serverSettings = []string{
	"fsync=off",
	"synchronous_commit=off",
	"full_page_writes=off",
	"max_connections=200",
	"password_encryption=scram-sha-256",
	"log_min_messages=warning",
}

// setupSQL returns the statements that create the application role and
// database, run one at a time (CREATE DATABASE cannot run in a transaction).
// Passwords are bound through quote-free literals built by quoteLiteral.
func setupSQL(c credentials) []string {
	return []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD %s", quoteIdent(c.appUser), quoteLiteral(c.appPassword)),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", quoteIdent(NarrowDatabase), quoteIdent(c.appUser)),
	}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }
