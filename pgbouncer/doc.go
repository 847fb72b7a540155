// Package pgbouncer starts a throwaway PostgreSQL server with a real
// PgBouncer in front of it, in each pool mode, for integration tests — this
// repository's and yours.
//
// Advisory-lock bugs behind a pooler only show with a real pooler whose
// backends are provably shared, so every PgBouncer the harness starts serves
// two databases that point at the same PostgreSQL database:
//
//   - NarrowDatabase ("app") with pool size 1: every client of one PgBouncer
//     runs on the same server backend, so a leaked session lock is certain;
//   - WideDatabase ("app_wide") with pool size 4, for concurrent workloads.
//
// Authentication is real: clients log in to PgBouncer with md5, PgBouncer to
// PostgreSQL with SCRAM, through an auth file; the admin console has its own
// login (AdminDSN).
//
// # Back ends
//
// The local back end runs initdb, postgres and pgbouncer from the machine
// (PATH, /usr/lib/postgresql/*/bin, /usr/sbin), as an unprivileged OS user
// when the caller is root, on free ports of 127.0.0.1, in a temporary
// directory that Close removes. Start-up takes about 1.5 seconds. A missing
// program is a *MissingBinaryError that names the Debian package to install.
// The Docker back end runs the same configuration in containers when a
// Docker engine answers. Its runtime, over testcontainers-go, is package
// github.com/pgadvisory/pgadvisory/pgbouncer/docker, a module of its own so
// that this package needs only the standard library and pgx's pgconn; a
// blank import of it links the back end (or pass WithContainerRuntime).
// PGADVISORY_TEST_BACKEND (auto, local, docker) or WithBackend chooses; auto
// prefers local binaries.
//
// # TLS
//
// WithTLS generates a throwaway CA and a server certificate for 127.0.0.1
// and localhost at start, runs PostgreSQL with ssl=on and every PgBouncer
// with client TLS (and TLS to PostgreSQL, verified against the CA). The
// returned DSNs keep sslmode=disable and still work; set sslmode=require, or
// verify-full with sslrootcert=Cluster.CAFile(). WithTLSRequired also refuses
// plaintext to the application user and the admin console. Both back ends
// offer TLS.
//
// # In tests
//
// Share one cluster per test package:
//
//	var cluster *pgbouncer.Cluster
//
//	func TestMain(m *testing.M) { os.Exit(pgbouncer.Main(m, &cluster)) }
//
//	func TestSomething(t *testing.T) {
//		c := pgbouncer.Need(t, cluster)
//		db, err := sql.Open("pgx", c.DSN(pgbouncer.Transaction))
//		...
//	}
//
// Need skips a test when no cluster could start — unless
// PGADVISORY_REQUIRE_INTEGRATION=1, which turns that into a failure; CI sets
// it so integration tests cannot pass by not running. StartT gives one test a
// cluster of its own, for tests that kill or restart servers (KillBouncer,
// StartBouncer, RestartBouncer, RestartPostgres).
package pgbouncer
