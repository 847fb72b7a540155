package pgadvisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// hostilePassword has every character that needs quoting somewhere: URL
// delimiters, keyword/value quotes and escapes, SQL quotes, blanks.
const hostilePassword = `p@ss:w/rd?#%'"\ ;&=x`

// noLeak fails the test when it leaves goroutines behind (database/sql
// openers, pgx watchers, timers). Goroutines that ran before it — the shared
// harness — are ignored.
func noLeak(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// checkErr asserts err is a pgadvisory error that mentions every want and
// leaks none of the secrets.
func checkErr(t *testing.T, what string, err error, want []string, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "pgadvisory: ") {
		t.Errorf("%s: %q lacks the pgadvisory: prefix", what, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: %q does not mention %q", what, msg, w)
		}
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			t.Errorf("%s: error %q contains the secret %q", what, msg, s)
		}
	}
}

// qesc escapes a DSN query value the way pgx decodes it (%20, not +).
func qesc(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

// TestBadDSN: every malformed DSN is refused by NewConnector (and sql.Open's
// OpenConnector) with an error that names the problem and never contains
// the password, whatever characters it has.
func TestBadDSN(t *testing.T) {
	noLeak(t)
	// pgx decodes DSN query values with PathUnescape: "+" stays "+".
	pwURL := qesc(hostilePassword)
	pwURLUser := url.UserPassword("u", hostilePassword).String()
	pwKV := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(hostilePassword) + "'"
	base := "postgres://" + pwURLUser + "@db.example:6432/app?sslmode=disable"
	kv := "host=db.example port=6432 dbname=app user=u password=" + pwKV + " sslmode=disable"
	secrets := []string{hostilePassword, pwURL, pwKV, url.PathEscape(hostilePassword), "s3cret-admin"}

	cases := []struct {
		name, dsn string
		want      []string
	}{
		// Broken DSNs (pgconn's errors, password redacted).
		{"bad-url-escape", "postgres://u:" + pwURL + "%zz@h/db", []string{"cannot parse"}},
		{"bad-port", strings.Replace(base, ":6432", ":99999", 1), []string{"invalid port"}},
		{"bad-port-word", strings.Replace(base, ":6432", ":port", 1), []string{"invalid port"}},
		{"bad-ipv6", "postgres://" + pwURLUser + "@[::1/app", []string{"cannot parse"}},
		{"kv-unterminated", "host=h user=u password='" + hostilePassword, []string{"cannot parse"}},
		{"kv-garbage", "::::", []string{"cannot parse"}},
		// Unknown and misspelt parameters.
		{"unknown", base + "&pgadvisory_polcy=reject", []string{"unknown DSN parameter pgadvisory_polcy", "pgadvisory_policy"}},
		{"bare-prefix", base + "&pgadvisory_=1", []string{"unknown DSN parameter pgadvisory_"}},
		{"upper-case", base + "&PGADVISORY_POLICY=allow", []string{"PGADVISORY_POLICY", "lower case", "pgadvisory_policy"}},
		{"kv-unknown", kv + " pgadvisory_mode=transaction", []string{"unknown DSN parameter pgadvisory_mode"}},
		// Bad values.
		{"pool-mode", base + "&pgadvisory_pool_mode=txn", []string{"pgadvisory_pool_mode", `"txn"`}},
		{"pool-mode-unknown", base + "&pgadvisory_pool_mode=unknown", []string{"pgadvisory_pool_mode"}},
		{"policy-space", base + "&pgadvisory_policy=%20reject", []string{"pgadvisory_policy", `" reject"`}},
		{"dynamic", base + "&pgadvisory_dynamic=maybe", []string{"pgadvisory_dynamic", "warn, reject, allow"}},
		{"leak", base + "&pgadvisory_leak_action=hold", []string{"pgadvisory_leak_action", "release, discard, keep"}},
		{"prepared", base + "&pgadvisory_prepared_statements=2", []string{"pgadvisory_prepared_statements", "true, false"}},
		{"admin-port-negative", base + "&pgadvisory_admin_user=a&pgadvisory_admin_port=-1", []string{"pgadvisory_admin_port", `"-1"`}},
		{"admin-port-huge", base + "&pgadvisory_admin_user=a&pgadvisory_admin_port=65536", []string{"pgadvisory_admin_port"}},
		{"admin-password-alone", base + "&pgadvisory_admin_password=" + pwURL, []string{"pgadvisory_admin_user is required"}},
		{"admin-dsn-and-user", base + "&pgadvisory_admin_user=a&pgadvisory_admin_dsn=" + qesc("host=h user=a"), []string{"pgadvisory_admin_dsn", "pgadvisory_admin_user", "exclude"}},
		{"admin-dsn-broken", base + "&pgadvisory_admin_dsn=" + qesc("postgres://a:"+pwURL+"@h:x/pgbouncer"), []string{"pgadvisory_admin_dsn", "invalid port"}},
		{"admin-dsn-kv-broken", base + "&pgadvisory_admin_dsn=" + qesc("user=a password="+pwKV+" port=zz"), []string{"pgadvisory_admin_dsn", "invalid port"}},
		{"unsafe-exec-mode", base + "&default_query_exec_mode=describe_exec&pgadvisory_pool_mode=transaction", []string{"default_query_exec_mode", "describe_exec"}},
		// Duplicates: pgx would keep one value silently.
		{"dup-url", base + "&pgadvisory_policy=reject&pgadvisory_policy=allow", []string{"pgadvisory_policy", "more than once"}},
		{"dup-url-same", base + "&pgadvisory_pool_mode=transaction&pgadvisory_pool_mode=transaction", []string{"pgadvisory_pool_mode", "more than once"}},
		{"dup-kv", kv + " pgadvisory_policy=reject pgadvisory_policy = allow", []string{"pgadvisory_policy", "more than once"}},
		{"dup-kv-secret", kv + " pgadvisory_admin_user=a pgadvisory_admin_password='s3cret-admin' pgadvisory_admin_password=s3cret-admin", []string{"pgadvisory_admin_password", "more than once"}},
	}
	// Empty values never mean "not set".
	for _, p := range []string{pgadvisory.ParamPoolMode, pgadvisory.ParamPolicy, pgadvisory.ParamDynamic, pgadvisory.ParamLeakAction,
		pgadvisory.ParamPreparedStatements, pgadvisory.ParamAdminDSN, pgadvisory.ParamAdminUser, pgadvisory.ParamAdminPassword,
		pgadvisory.ParamAdminHost, pgadvisory.ParamAdminPort, pgadvisory.ParamAdminDatabase} {
		cases = append(cases,
			struct {
				name, dsn string
				want      []string
			}{"empty-url-" + p, base + "&" + p + "=", []string{p}},
			struct {
				name, dsn string
				want      []string
			}{"empty-kv-" + p, kv + " " + p + "=''", []string{p}},
		)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pgadvisory.NewConnector(tc.dsn)
			checkErr(t, "NewConnector", err, tc.want, secrets...)
			// database/sql reports the same error from Open (OpenConnector).
			db, err := sql.Open(pgadvisory.DriverName, tc.dsn)
			if err == nil {
				db.Close()
			}
			checkErr(t, "sql.Open", err, tc.want, secrets...)
		})
	}
	// The same hostile password in a valid DSN is accepted and kept intact.
	for _, dsn := range []string{base, kv, base + "&pgadvisory_admin_user=adm&pgadvisory_admin_password=" + pwURL} {
		c, err := pgadvisory.NewConnector(dsn)
		if err != nil {
			t.Errorf("valid DSN refused: %v", err)
			continue
		}
		c.Close()
	}
}

// nopConn is the smallest driver.Conn, for option tests through Wrap.
type badNopConn struct{}

func (badNopConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not used") }
func (badNopConn) Close() error                        { return nil }
func (badNopConn) Begin() (driver.Tx, error)           { return nil, errors.New("not used") }

type badNopConnector struct{}

func (badNopConnector) Connect(context.Context) (driver.Conn, error) { return badNopConn{}, nil }
func (badNopConnector) Driver() driver.Driver                        { return nil }

// TestBadOptions: invalid option values are errors from NewConnector,
// NewConnectorConfig and Wrap alike.
func TestBadOptions(t *testing.T) {
	noLeak(t)
	var unset pgadvisory.Option
	cases := []struct {
		name string
		opt  pgadvisory.Option
		want []string
	}{
		{"nil", unset, []string{"option 1 of 1 is nil"}},
		{"policy-negative", pgadvisory.WithPolicy(-1), []string{"WithPolicy", "unknown policy -1"}},
		{"policy-huge", pgadvisory.WithPolicy(1 << 30), []string{"WithPolicy"}},
		{"dynamic", pgadvisory.WithDynamicPolicy(7), []string{"WithDynamicPolicy"}},
		{"leak", pgadvisory.WithLeakAction(-3), []string{"WithLeakAction"}},
		{"pool-mode", pgadvisory.WithPoolMode(poolmode.Mode(42)), []string{"WithPoolMode"}},
		{"exec-mode", pgadvisory.WithSafeExecMode(pgx.QueryExecModeCacheStatement), []string{"WithSafeExecMode", "cache_describe, exec, simple_protocol"}},
		{"exec-mode-bogus", pgadvisory.WithSafeExecMode(pgx.QueryExecMode(99)), []string{"WithSafeExecMode"}},
		{"cache-negative", pgadvisory.WithScanCacheSize(-1), []string{"WithScanCacheSize", "negative"}},
		{"admin-user-empty", pgadvisory.WithAdminCredentials("", hostilePassword), []string{"WithAdminCredentials", "empty user"}},
		{"admin-console-empty", pgadvisory.WithAdminConsole(""), []string{"WithAdminConsole", "empty"}},
		{"admin-console-blank", pgadvisory.WithAdminConsole("  "), []string{"WithAdminConsole", "empty"}},
		{"admin-console-broken", pgadvisory.WithAdminConsole("postgres://a:" + qesc(hostilePassword) + "@h:x/pgbouncer"), []string{"WithAdminConsole", "invalid port"}},
	}
	cfg, err := pgx.ParseConfig("postgres://u@h/app")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pgadvisory.NewConnector("postgres://u@h/app", tc.opt)
			checkErr(t, "NewConnector", err, tc.want, hostilePassword, qesc(hostilePassword))
			_, err = pgadvisory.NewConnectorConfig(cfg, tc.opt)
			checkErr(t, "NewConnectorConfig", err, tc.want, hostilePassword, qesc(hostilePassword))
			_, err = pgadvisory.Wrap(badNopConnector{}, tc.opt)
			checkErr(t, "Wrap", err, tc.want, hostilePassword, qesc(hostilePassword))
		})
	}
	// A nil option among valid ones is named by position.
	_, err = pgadvisory.Wrap(badNopConnector{}, pgadvisory.WithPolicy(pgadvisory.PolicyWarn), nil)
	checkErr(t, "Wrap", err, []string{"option 2 of 2 is nil"})
	// An absurd cache size is accepted without allocating it up front
	// (NewScanner pre-sized its map and never returned for 1<<30).
	if _, err := pgadvisory.Wrap(badNopConnector{}, pgadvisory.WithScanCacheSize(1<<40)); err != nil {
		t.Errorf("huge cache size: %v", err)
	}
}

// TestNilHandles: nil arguments are errors, not panics.
func TestNilHandles(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	_, _, err := pgadvisory.PoolMode(ctx, nil)
	checkErr(t, "PoolMode(ctx, nil)", err, []string{"PoolMode", "nil *sql.DB"})
	_, err = pgadvisory.Wrap(nil)
	checkErr(t, "Wrap(nil)", err, []string{"Wrap", "nil connector"})
	_, err = pgadvisory.NewConnectorConfig(nil)
	checkErr(t, "NewConnectorConfig(nil)", err, []string{"NewConnectorConfig", "nil config"})

	db, _ := mockWrapped(t, poolmode.Transaction)
	//lint:ignore SA1012 the nil context is the bad input under test
	_, _, err = pgadvisory.PoolMode(nil, db) //nolint:staticcheck // nil context on purpose
	checkErr(t, "PoolMode(nil, db)", err, []string{"PoolMode", "nil context"})

	// A *sql.DB of another driver is named as such.
	mdb, _, err := sqlmock.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mdb.Close()
	_, _, err = pgadvisory.PoolMode(ctx, mdb)
	checkErr(t, "PoolMode(other driver)", err, []string{"does not use the pgadvisory driver"})
}

// mockConnector is go-sqlmock's driver as a driver.Connector.
type mockConnector struct {
	drv driver.Driver
	dsn string
}

func (m mockConnector) Connect(context.Context) (driver.Conn, error) { return m.drv.Open(m.dsn) }
func (m mockConnector) Driver() driver.Driver                        { return m.drv }

// mockWrapped returns a pgadvisory *sql.DB in front of go-sqlmock with an
// exact query matcher: whatever reaches the mock must be expected.
func mockWrapped(t *testing.T, mode poolmode.Mode, opts ...pgadvisory.Option) (*sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	mdb, mock, err := sqlmock.NewWithDSN("badinput-"+t.Name(), sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgadvisory.Wrap(mockConnector{mdb.Driver(), "badinput-" + t.Name()}, append([]pgadvisory.Option{pgadvisory.WithPoolMode(mode)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close(); mdb.Close() })
	return db, mock
}

// deepPlus is a lock call followed by a left-deep chain of n additions:
// the shape that crashed libpg_query (SIGSEGV) before lockscan's nesting
// guard, and that the guard now refuses with lockscan.ErrTooComplex.
func deepPlus(call string, n int) string {
	return "SELECT " + call + strings.Repeat("+0", n)
}

// TestBadStatementsNeverSent: behind transaction pooling, statements the
// policy refuses — however large or odd — never reach the inner driver, and
// the odd statements it lets through arrive byte for byte.
func TestBadStatementsNeverSent(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	db, mock := mockWrapped(t, poolmode.Transaction)
	mb := strings.Repeat("x", 1<<20)

	refused := map[string]string{
		"1mb-call-at-end":     "SELECT '" + mb + "', pg_advisory_lock(1)",
		"1mb-call-at-start":   "SELECT pg_advisory_lock(1), '" + mb + "'",
		"1mb-comment":         "SELECT pg_try_advisory_lock(1) /* " + mb + " */",
		"invalid-utf8":        "SELECT pg_advisory_lock(1), '\xff\xfe'",
		"invalid-utf8-ident":  "SELECT pg_advisory_lock(1) AS \"\xc3\x28\"",
		"long-identifier":     `SELECT pg_advisory_lock(1) AS "` + strings.Repeat("i", 100_000) + `"`,
		"u-escape":            `SELECT U&"pg_\0061dvisory_lock"(1)`,
		"u-escape-uescape":    `SELECT U&"pg_!0061dvisory_lock" UESCAPE '!' (1)`,
		"nested-50":           "SELECT " + strings.Repeat("abs(", 50) + "pg_advisory_lock(1)::int" + strings.Repeat(")", 50),
		"do-block-1mb":        "DO $$BEGIN PERFORM pg_advisory_lock(1); RAISE NOTICE '" + mb + "'; END$$",
		"many-statements":     strings.Repeat("SELECT 1;", 10_000) + "SELECT pg_advisory_unlock_all()",
		"unlock-hostile-text": "SELECT pg_advisory_unlock(hashtext('''; DROP TABLE x; --'))",
	}
	names := make([]string, 0, len(refused))
	for name := range refused {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		q := refused[name]
		if _, err := db.ExecContext(ctx, q); !errors.Is(err, pgadvisory.ErrSessionLock) {
			t.Errorf("%s: exec err = %.200v, want ErrSessionLock", name, err)
		}
		if _, err := db.QueryContext(ctx, q); !errors.Is(err, pgadvisory.ErrSessionLock) {
			t.Errorf("%s: query err = %.200v, want ErrSessionLock", name, err)
		}
		if _, err := db.PrepareContext(ctx, q); !errors.Is(err, pgadvisory.ErrSessionLock) {
			t.Errorf("%s: prepare err = %.200v, want ErrSessionLock", name, err)
		}
	}
	// Statements without a session lock pass unchanged, however odd; the
	// server is the judge of their syntax.
	passed := []string{
		"SELECT '" + mb + "'",
		"SELECT pg_advisory_xact_lock(1), '" + mb + "'",
		"SELECT '\xff\xfe'",
		"SELECT 1" + strings.Repeat("+1", 70_000), // never parsed: no anchor word
		"SELECT advisory FROM t WHERE (((((((((( a ))))))))))",
	}
	// Text the scanner must read but cannot is refused behind the pooler
	// (it could hide a lock): here an invalid Unicode escape, which the
	// server would reject too.
	if _, err := db.ExecContext(ctx, `SELECT U&"\zzzz"`); !errors.Is(err, pgadvisory.ErrUnscannable) {
		t.Errorf("invalid U& escape: err = %v, want ErrUnscannable", err)
	}
	for _, q := range passed {
		mock.ExpectExec(q).WillReturnResult(sqlmock.NewResult(0, 0))
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Errorf("%.60q: %v", q, err)
		}
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// TestTooComplexFailsClosed: a lock call hidden behind more nesting than
// lockscan parses (lockscan.ErrTooComplex) must not reach the server behind
// transaction pooling: PostgreSQL accepts such a statement (see
// TestIntegrationBadInput), so sending it "because the server will reject
// it anyway" lets the lock leak.
func TestTooComplexFailsClosed(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	db, mock := mockWrapped(t, poolmode.Transaction)
	q := deepPlus("pg_advisory_lock(1)", lockscan.MaxNesting+10)
	_, err := db.ExecContext(ctx, q)
	if !errors.Is(err, pgadvisory.ErrUnscannable) || !errors.Is(err, lockscan.ErrTooComplex) {
		t.Errorf("exec: err = %.200v, want ErrUnscannable wrapping lockscan.ErrTooComplex", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// TestIntegrationBadInput: the same bad input against a real PostgreSQL,
// directly and through PgBouncer in transaction mode: clear errors, no
// crash, no lock left behind, and no goroutine left after the *sql.DB is
// closed.
func TestIntegrationBadInput(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	for _, tc := range []struct {
		name string
		dsn  string
	}{
		{"direct", c.DirectDSN()},
		{"transaction", withParams(t, c.DSN(pgbouncer.Transaction), adminParams(c)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			ctx := context.Background()
			db, err := sql.Open(pgadvisory.DriverName, tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			const key = 880_401
			pooled := tc.name != "direct"

			// NUL bytes: PostgreSQL refuses them; the driver neither
			// crashes nor runs the text on either side of the NUL.
			for _, q := range []string{
				"SELECT pg_advisory_lock(880401)\x00",
				"SELECT 1\x00; SELECT pg_advisory_lock(880401)",
				"SELECT pg_advisory_xact_lock(880401), 'a\x00b'",
			} {
				_, err := db.ExecContext(ctx, q)
				if err == nil {
					t.Errorf("%q: no error", q)
				}
				t.Logf("%q: %v", q, err)
			}
			// Bind parameters with NUL and invalid UTF-8: server errors.
			if _, err := db.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "a\x00b"); err == nil {
				t.Error("NUL in a text parameter: no error")
			}
			if _, err := db.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "\xff\xfe"); err == nil {
				t.Error("invalid UTF-8 parameter: no error")
			}
			if _, err := db.ExecContext(ctx, "SELECT '\xff\xfe'"); err == nil || !strings.Contains(err.Error(), "UTF8") {
				t.Errorf("invalid UTF-8 text: err = %v, want the server's encoding error", err)
			}
			// A 1 MB statement round-trips; with a session lock it is refused
			// behind the pooler before anything is sent.
			mb := strings.Repeat("x", 1<<20)
			var n int
			if err := db.QueryRowContext(ctx, "SELECT length('"+mb+"')").Scan(&n); err != nil || n != 1<<20 {
				t.Errorf("1 MB statement: %d %v", n, err)
			}
			_, err = db.ExecContext(ctx, "SELECT '"+mb+"', pg_advisory_lock(880401)")
			if pooled != errors.Is(err, pgadvisory.ErrSessionLock) {
				t.Errorf("1 MB statement with a session lock: err = %.200v (pooled %v)", err, pooled)
			}
			if !pooled {
				if _, err := db.ExecContext(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
					t.Fatal(err)
				}
			}
			// Deep nesting: the server's own limits answer, the process
			// survives. Without a lock word the driver never parses it.
			if _, err := db.ExecContext(ctx, "SELECT 1"+strings.Repeat("+1", 70_000)); err == nil {
				t.Log("70,000 additions: accepted by the server")
			} else {
				t.Logf("70,000 additions: %v", err)
			}
			_, err = db.ExecContext(ctx, deepPlus("pg_advisory_xact_lock(880401)", 70_000))
			t.Logf("xact lock + 70,000 additions: %v", err)
			if pooled {
				// A session try-lock past lockscan.MaxNesting: the scanner
				// refuses to parse it, and PostgreSQL (max_stack_depth 2MB)
				// runs it. try_lock returns a boolean, so the chain type-checks.
				tooDeep := deepPlus("pg_try_advisory_lock(880401)::int", lockscan.MaxNesting+10)
				_, err = db.ExecContext(ctx, tooDeep)
				if !errors.Is(err, pgadvisory.ErrUnscannable) {
					t.Errorf("session try-lock past lockscan.MaxNesting: err = %.200v, want ErrUnscannable", err)
				}
				held := advisoryHolders(t, c, key)
				t.Logf("session try-lock + %d additions behind the pooler: err = %v; locks held after: %d", lockscan.MaxNesting+10, err, held)
				if held > 0 {
					releaseKey(t, c, key)
					t.Errorf("the lock leaked: %d holders", held)
				}
			}
			if got := advisoryHolders(t, c, key); !pooled && got != 0 {
				t.Errorf("%d advisory locks on %d left behind", got, key)
				releaseKey(t, c, key)
			}
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// releaseKey ends, as superuser, the backends holding advisory lock key, so
// a leaked lock cannot disturb later tests.
func releaseKey(t *testing.T, c *pgbouncer.Cluster, key int64) {
	t.Helper()
	su, err := sql.Open("pgx", c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	if _, err := su.Exec(`SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1`, key); err != nil {
		t.Error(err)
	}
}

// TestAfterNetConnectChainError: an AfterNetConnect set before the guard's
// that fails without a connection ends the connect with its error. pgconn
// closes whatever conn comes back with the error, so the guard hands it
// the network connection rather than nil (which panicked).
func TestAfterNetConnectChainError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cfg, err := pgx.ParseConfig("postgres://app@" + ln.Addr().String() + "/app?sslmode=disable&pgadvisory_pool_mode=direct")
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("the user's AfterNetConnect failed")
	cfg.AfterNetConnect = func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error) { return nil, boom }
	if err := pgadvisory.ConfigureConn(cfg); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err == nil {
		conn.Close(t.Context())
		t.Fatal("connected although AfterNetConnect failed")
	}
	if !errors.Is(err, boom) {
		t.Fatalf("connect: %v; want the AfterNetConnect's error", err)
	}
}
