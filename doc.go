// Package pgadvisory is a database/sql driver, registered as "pgadvisory",
// that wraps pgx's stdlib driver and keeps PostgreSQL advisory locks from
// leaking through connection poolers.
//
// # The problem
//
// A session-level advisory lock (pg_advisory_lock) belongs to the server
// backend that took it. Behind PgBouncer in transaction or statement
// pooling, that backend goes to another client after every transaction: the
// lock leaks to a stranger, your unlock lands on another backend and returns
// false, and the lock lives until the pooler recycles the backend.
// Transaction-level locks (pg_advisory_xact_lock) are released by COMMIT and
// ROLLBACK and are safe under every pool mode but statement pooling.
//
// # Use
//
// Change the driver name; everything else stays as with pgx's stdlib:
//
//	db, err := sql.Open("pgadvisory", "postgres://app@pgbouncer:6432/app")
//
// or build a connector with options:
//
//	c, err := pgadvisory.NewConnector(dsn, pgadvisory.WithPolicy(pgadvisory.PolicyRewrite))
//	db := sql.OpenDB(c)
//
// Wrap puts the checks in front of any other database/sql connector (for
// example go-sqlmock in tests).
//
// # What happens to a statement
//
// Every statement text (Exec, Query, Prepare, and executions of prepared
// statements) goes through package lockscan. A text that cannot contain an
// advisory-lock call (lockscan.MayContainCall, about the cost of a substring
// search) goes straight to pgx with no extra allocation. Otherwise the
// policy for the connection's pool mode applies:
//
//   - Direct and session mode: lock calls pass. The connection remembers
//     that a session-level lock function ran; when database/sql reuses it
//     (ResetSession), the driver asks pg_locks whether the backend still
//     holds advisory locks, reports it (WithErrorHook, slog) and releases
//     them or discards the connection (WithLeakAction). Connections that never
//     took a session lock pay nothing.
//   - Transaction and statement mode, session-level call (lock, try-lock,
//     unlock, unlock_all): policy reject (default) returns a
//     *SessionLockError (errors.Is(err, ErrSessionLock)) and sends nothing.
//     Policy rewrite, inside a transaction begun with BeginTx, rewrites
//     pg_advisory_lock → pg_advisory_xact_lock (and the try/shared variants);
//     an unlock after such a rewrite becomes pg_try_advisory_xact_lock on the
//     same arguments, which returns true because the transaction already holds
//     the lock (the lock is really released at COMMIT or ROLLBACK);
//     pg_advisory_unlock_all() becomes pg_sleep(0). Outside a transaction
//     rewrite rejects, because an xact lock in autocommit ends with its
//     statement. Policy warn logs and sends; allow sends.
//   - Statement mode: BeginTx and transaction-level lock calls are refused
//     with a *StatementPoolingError (policies reject and rewrite).
//   - Dynamic SQL the scanner cannot see into (EXECUTE in PL/pgSQL, dblink,
//     other languages) behind transaction or statement pooling follows the
//     dynamic policy: warn (default), reject, allow.
//
// # Pool mode
//
// The mode is declared (WithPoolMode, pgadvisory_pool_mode) or detected on
// the connector's first physical connection (package poolmode): a
// ParameterStatus announcing it; else the BackendKeyData PID compared with
// SELECT pg_backend_pid() — one round trip, equal means direct; else
// PgBouncer's admin console (SHOW POOLS) when credentials are given; else
// transaction mode (fail safe), with one log line saying how to declare it.
// The conclusion is cached in the connector (one per *sql.DB); a failed
// detection is retried on the next connection. PoolMode(ctx, db) reports it.
//
// # Prepared statements behind poolers
//
// pgx's default exec mode (cache_statement) leaves named prepared statements
// on pooled backends: through PgBouncer transaction pooling every query
// fails, and describe_exec silently returns other clients' rows. Behind
// transaction and statement pooling the driver therefore uses
// DefaultSafeExecMode (cache_describe) unless the DSN sets
// default_query_exec_mode; an unsafe mode set there is refused with
// ErrUnsafeExecMode unless pgadvisory_prepared_statements=true declares that
// the pooler handles prepared statements (PgBouncer >= 1.21 with
// max_prepared_statements). Connections opened once the mode is known get
// the safe mode in their pgx config; the first, auto-detected connection
// passes it with every query instead. database/sql prepared statements are
// not prepared on the server in those modes: each execution sends the text.
//
// # Pipelined BEGIN
//
// BeginTx sends nothing: BEGIN, with the isolation level and read-only mode,
// travels with the transaction's first statement in one network write, so a
// lock cycle (BEGIN + lock, then COMMIT) costs two round trips instead of
// three. A transaction that runs no statement sends nothing at all; if BEGIN
// itself fails, the first statement returns "pgadvisory: begin (pipelined with
// the first statement): ..." wrapping the server's error. The first
// statement's rows are decoded by the driver to the same values pgx stdlib
// gives; later statements go through pgx stdlib untouched. Where named
// prepared statements are safe (exec mode cache_statement, not behind a
// transaction pooler), BEGIN and the first statement are prepared once per
// connection, so the server parses neither in later transactions.
// WithPipelineBegin or pgadvisory_pipeline_begin=false turns it off.
//
// # Statements the scanner cannot read
//
// Behind transaction or statement pooling, a statement that may call an
// advisory-lock function but that the scanner cannot read (nested deeper
// than lockscan.MaxNesting, or not valid SQL) is refused with an
// *UnscannableError under the reject and rewrite policies: it could take a
// session lock unseen. Direct and in session pooling it is sent, and the
// connection is checked for leftover locks when it returns to the pool.
//
// # DSN parameters
//
// Removed before pgx and the server see the DSN (URL and keyword/value forms):
//
//	pgadvisory_pool_mode            auto | direct | session | transaction | statement
//	pgadvisory_policy               reject | rewrite | warn | allow
//	pgadvisory_dynamic              warn | reject | allow
//	pgadvisory_leak_action          release | discard
//	pgadvisory_prepared_statements  true | false
//	pgadvisory_pipeline_begin       true | false (default true)
//	pgadvisory_admin_user, pgadvisory_admin_password, pgadvisory_admin_host,
//	pgadvisory_admin_port, pgadvisory_admin_database, or pgadvisory_admin_dsn
//
// An invalid value is an error naming the parameter and the accepted values;
// passwords never appear in errors or logs.
//
// # Reaching pgx
//
// (*sql.Conn).Raw hands out the *Conn; PgxConn returns the *pgx.Conn and Raw
// the inner driver connection. Statements sent on them bypass the policy.
package pgadvisory
