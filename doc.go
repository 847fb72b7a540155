// Package pgadvisory keeps PostgreSQL advisory locks from leaking through
// connection poolers, for every pgx API: a guard on the PostgreSQL protocol
// stream of each pgx connection, and a database/sql driver, registered as
// "pgadvisory", that is pgx's stdlib over that guard.
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
// With pgx, configure the guard on the config:
//
//	cfg, err := pgadvisory.ParsePoolConfig("postgres://app@pgbouncer:6432/app")
//	pool, err := pgxpool.NewWithConfig(ctx, cfg)
//
// (ParseConfig and ConfigureConn for pgx.ConnectConfig and stdlib.OpenDB,
// ConfigurePool for a pgxpool.Config you built). With database/sql, change
// the driver name:
//
//	db, err := sql.Open("pgadvisory", "postgres://app@pgbouncer:6432/app")
//
// or build a connector with options:
//
//	c, err := pgadvisory.NewConnector(dsn, pgadvisory.WithPolicy(pgadvisory.PolicyRewrite))
//	db := sql.OpenDB(c)
//
// Wrap puts the checks, on the SQL text, in front of any other database/sql
// connector (for example go-sqlmock in tests).
//
// # The guard
//
// ConfigureConn installs pgconn's AfterNetConnect: every new network
// connection, after TLS, is wrapped, so every message of every pgx API goes
// through one place in plaintext. The guard frames frontend and backend
// messages in place and looks at the text of each Query and Parse. A text
// that cannot name an advisory-lock function (lockscan.MayContainCall,
// about the cost of a substring search) goes out in pgx's own buffer with no
// allocation. Otherwise the policy for the connection's pool mode applies:
//
//   - Direct and session mode: lock calls pass. The connection remembers
//     that a session-level lock function ran; when pgxpool hands it out
//     again (PrepareConn with ConfigurePool), pg_locks is asked whether the
//     backend still holds advisory locks, which are reported (WithErrorHook,
//     slog) and released, or the connection discarded (WithLeakAction).
//     database/sql keeps them with the connection, as a session does, and
//     warns once (LeakDiscard still discards it).
//   - Transaction and statement mode, session-level call (lock, try-lock,
//     unlock, unlock_all, or the function named outside a call): policy
//     reject (default) refuses it. The refused message is replaced by a text
//     the server rejects at parse time, so nothing of its unit runs (an
//     implicit transaction is rolled back, an explicit one is left aborted),
//     and the server's error is replaced by pgadvisory's: SQLSTATE PA001 with
//     the *SessionLockError's text. pgx returns it as *pgconn.PgError;
//     Refusal(err) gives back the typed error for errors.Is and errors.As.
//     Policy rewrite, inside a transaction, edits pg_advisory_lock into
//     pg_advisory_xact_lock (and the try/shared variants); an unlock of a key
//     the transaction took that way returns true (the lock ends at COMMIT or
//     ROLLBACK), of any other key false; pg_advisory_unlock_all() does
//     nothing. Outside a transaction rewrite holds a lone lock call as hold
//     does and refuses the rest; inside a function body or DO block it
//     refuses. Policy hold keeps session locks for the connection (below).
//     Policy warn logs and sends; allow sends.
//   - Statement mode: transactions and transaction-level lock calls are
//     refused (PA002, *StatementPoolingError) under reject, rewrite and
//     hold, and session-level ones as under reject.
//   - Dynamic SQL the scanner cannot see into (EXECUTE in PL/pgSQL, dblink,
//     query_to_xml, ts_rewrite, other languages) behind transaction or
//     statement pooling follows the dynamic policy: warn (default), reject
//     (PA003), allow.
//   - A statement that may name a lock function but that the scanner cannot
//     read (nested deeper than lockscan.MaxNesting, not valid SQL, or read
//     under a client_encoding such as SJIS) is refused (PA004,
//     *UnscannableError) under reject and rewrite.
//
// The scanner reads each text as the server will: the guard follows
// standard_conforming_strings and client_encoding from ParameterStatus, and
// a statement that may change them makes the rest of its unit unreadable
// until the server has answered.
//
// # Policy hold
//
// Under PolicyHold (pgadvisory_policy=hold), behind transaction pooling, a
// statement that is one session-level lock call and nothing else, alone in
// its round trip (SELECT pg_advisory_lock($1), the try, shared, two-key and
// unlock forms, pg_advisory_unlock_all(); integer literals, NULL or bound
// parameters), is held for the client connection: a holder, a server
// connection of the guard's own through the same pooler, takes the
// session-level lock (pg_try_advisory_lock[_shared]) inside a transaction
// it keeps open, one holder per key; the unlock of one mode is
// pg_advisory_unlock[_shared] there, and the last one ends the holder with
// pg_advisory_unlock_all() and ROLLBACK. The lock is taken before the
// client's statement is answered: by the guard itself, with the messages
// PostgreSQL would send, when nothing is unanswered and the call's key and
// parameter types are known; otherwise by the server, to which a stand-in
// of the same shape goes that returns the answer (bad keys fail there as on
// PostgreSQL: 22003, 42883; a NULL key gives NULL; nothing is held). So a
// lock + unlock cycle costs the holder's two round trips. A lock that must wait
// polls in a new transaction each time, so waiters pin no server
// connection; the wait ends with the caller's deadline, Close,
// lock_timeout (55P03) or statement_timeout (57014) — followed from SET
// [LOCAL], RESET and set_config(…), and otherwise read from the holder's
// pg_settings reset_val when the wait starts.
//
// What cannot be sequenced with the server is refused whole with nothing
// taken (PA009, ErrHoldFailed): a lock call that shares its round trip with
// other statements, or inside a transaction its statement
// (*HoldUnitError); a transaction-level lock of a held key, or a held lock
// of a key the connection's own transaction locked (*HoldSelfLockError); a
// holder PgBouncer has no server connection for (*HoldPoolError, naming
// pool_size and the keys held). WithHoldLimits caps the keys held
// (*HoldLimitError, PA008). If a holder ends, every later statement of the
// connection fails with *LockLostError (PA007): database/sql (IsValid) and
// pgxpool (on Release) discard it. A database/sql pool keeps held locks
// with the driver connection, as a session's (logged once); a pgxpool
// releases them when the connection is released (a pgxpool.ReleaseTracer
// the guard adds to ConnConfig.Tracer, run on the releasing goroutine), and
// a pool whose ConnConfig.Tracer or PrepareConn was set after
// ConfigurePool fails its connections with *PoolHooksError.
//
// # Pool mode
//
// The mode is declared (WithPoolMode, pgadvisory_pool_mode) or detected on
// every new physical connection (pgconn's AfterConnect, package poolmode/pgdetect):
// a ParameterStatus announcing it; else the BackendKeyData PID compared with
// SELECT pg_backend_pid() — one round trip, equal means direct, and none
// when the PID is one no backend can have (0, 1, above 2^22: PgBouncer's
// are random 32-bit numbers), which only a pooler sends; else
// PgBouncer's admin console (SHOW POOLS) when credentials are given, one
// probe shared by concurrent connections; else transaction mode (fail
// safe), and errors and one log line say "pool mode unknown, assumed
// transaction pooling" and how to declare it. A connection declared direct
// that a pooler answers is an error. ConnPoolMode(conn) and PoolMode(ctx, db)
// report it.
//
// # Prepared statements behind poolers
//
// pgx's default exec mode (cache_statement) leaves named prepared statements
// on pooled backends: through PgBouncer transaction pooling every query
// fails, and describe_exec silently returns other clients' rows. Unless the
// mode is declared direct or session, the guard sets DefaultSafeExecMode
// (cache_describe) when the connection string does not choose a mode; an
// unsafe mode it chose fails at connect behind a pooler (ErrUnsafeExecMode);
// on the wire a named prepared statement, or a reuse of the unnamed one
// from an earlier round trip, is refused (PA005) behind transaction and
// statement pooling — unless pgadvisory_prepared_statements=true declares
// that the pooler handles prepared statements (PgBouncer >= 1.21 with
// max_prepared_statements). database/sql prepared statements are not
// prepared on the server in those modes: each execution sends the text.
//
// # Deferred BEGIN
//
// A BEGIN sent alone (as pgx's Begin and BeginTx send it) is answered by the
// guard and goes to the server in front of the transaction's first
// statement, in the same network write, as Parse/Bind/Execute without a
// Sync: a lock cycle (BEGIN + lock, then COMMIT) costs two round trips
// instead of three, and a transaction that runs no statement sends nothing.
// If the BEGIN fails, the server skips the first statement: it returns the
// BEGIN's error, later statements fail with 25P02 and COMMIT ends in
// ROLLBACK, as in any failed transaction — nothing runs outside a
// transaction. Where pgx keeps its own statements on the server
// (cache_statement, directly or behind session pooling), the BEGIN is a
// prepared statement of the session's, "pgadvisory_begin": parsed in the
// first transaction and only bound after that, which spares the server a
// parse per transaction. A DEALLOCATE or DISCARD anywhere in a query the
// client sends (a DO block's included), or a Close of that name, makes the
// guard parse it again; one that a function written earlier runs fails
// the next transaction's first statement with 26000, as it fails pgx's own
// cached statements. A statement of that name the client prepares (pgx's
// Prepare, or PREPARE in SQL) is the client's: the guard's BEGIN goes
// unnamed on that connection from then on.
// WithPipelineBegin or pgadvisory_pipeline_begin=false turns the deferred
// BEGIN off.
//
// # DSN parameters
//
// Removed before pgx and the server see the DSN (URL and keyword/value forms):
//
//	pgadvisory_pool_mode            auto | direct | session | transaction | statement
//	pgadvisory_policy               reject | rewrite | warn | allow | hold
//	pgadvisory_hold_max_per_conn    keys one connection may hold (hold; default 8)
//	pgadvisory_hold_max             keys all connections may hold (hold; default 64)
//	pgadvisory_dynamic              warn | reject | allow
//	pgadvisory_leak_action          release | discard | keep
//	pgadvisory_prepared_statements  true | false
//	pgadvisory_pipeline_begin       true | false (default true)
//	pgadvisory_admin_user, pgadvisory_admin_password, pgadvisory_admin_host,
//	pgadvisory_admin_port, pgadvisory_admin_database, or pgadvisory_admin_dsn
//
// An invalid value is an error naming the parameter and the accepted values;
// passwords never appear in errors or logs.
//
// # Limits
//
// Only pgx connections go through the guard (not lib/pq, psql or other
// languages' drivers). SCRAM channel binding cannot be required through it
// (pgconn reads the binding data only from a *tls.Conn). A lock taken inside
// a function already defined in the database cannot be seen by a SQL
// scanner. Under policy hold: if the server fails a stand-in (a
// transaction's first statement) after the hold acted (a statement_timeout of about a
// millisecond) nothing undoes the hold; ALTER ROLE/DATABASE
// defaults reach only server connections the pooler opened after the ALTER.
package pgadvisory
