// Package lint defines Analyzer, a go/analysis pass that reports
// session-level PostgreSQL advisory locks (pg_advisory_lock,
// pg_try_advisory_lock and their _shared variants) in SQL handed to
// database/sql, github.com/jmoiron/sqlx and github.com/jackc/pgx/v5.
//
// A session-level lock belongs to a server backend. On a pooled handle
// (*sql.DB, *sqlx.DB, *pgxpool.Pool) each call may run on a different
// connection, so the unlock can miss; behind PgBouncer in transaction
// pooling the lock leaks to whichever client gets the backend next. The
// transaction-level twin (pg_advisory_xact_lock) is released at COMMIT or
// ROLLBACK and is safe everywhere.
//
// # Running it
//
// Standalone, or as a vet tool:
//
//	go install github.com/pgadvisory/pgadvisory/lint/cmd/pgadvisoryvet@latest
//	pgadvisoryvet ./...
//	go vet -vettool=$(which pgadvisoryvet) ./...
//
// Standalone it exits 0 when clean, 3 with findings, 1 when a package does
// not load and 2 on a bad flag; go vet exits 0 when clean and 1 otherwise.
// `pgadvisoryvet -fix ./...` applies the suggested fixes (-fix -diff
// prints them). Projects whose tests exercise session locks on purpose
// lint with `pgadvisoryvet -test=false ./...`.
// Package lint/golangci registers the analyzer as a golangci-lint module
// plugin.
//
// # What is reported
//
// A diagnostic names its category as a message prefix and in
// Diagnostic.Category:
//
//	pooled  *sql.DB, *sqlx.DB, *pgxpool.Pool: session locks and try-locks,
//	        and session unlocks (they may land on another connection)
//	tx      *sql.Tx, *sqlx.Tx, pgx.Tx, *pgxpool.Tx: session locks and
//	        try-locks, with a suggested fix renaming them to the xact twin;
//	        pg_advisory_unlock_all, which behind transaction pooling
//	        releases other clients' session locks on the shared backend
//	conn    *sql.Conn, *sqlx.Conn, *pgx.Conn, *pgxpool.Conn,
//	        *pgconn.PgConn: session locks and try-locks — correct on a
//	        direct connection, a leak behind transaction pooling
//	handle  an interface (sqlx.Ext, a sqlc DBTX, ...) or a pgx.Batch sent
//	        through no single kind of handle: unknown, so reported
//	directive  a //pgadvisory:ignore without a reason
//
// Each message names the helper that fits the handle it saw: for pgx
// handles (*pgxpool.Pool, *pgx.Conn, pgx.Tx, ...) pgxadvisory.WithXactLock
// or pgxadvisory.XactLock, for database/sql and sqlx ones
// advisory.WithXactLock or advisory.XactLock.
//
// Use -skip=conn (or the golangci-lint setting skip: [conn]) in a service
// that deliberately holds session locks on dedicated direct connections.
//
// # Suppression
//
// A comment //pgadvisory:ignore <reason> on any line from the one above the
// statement to the last line of the call silences it. The reason is
// mandatory: a bare directive still silences the call but is itself
// reported, so that every exception carries its justification in review.
package lint

const doc = `pgadvisory: report session-level advisory locks in SQL

The pgadvisory analyzer finds SQL text handed to database/sql, sqlx and pgx
v5 (Exec, Query, QueryRow, Prepare, their Context forms, sqlx's Get,
Select, MustExec, Named*, Queryx, QueryRowx, Preparex, PrepareNamed, and
pgx's Batch.Queue) that calls a session-level advisory-lock function, for
example:

	tx, _ := db.BeginTx(ctx, nil)
	tx.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key)
	// tx: session-level pg_advisory_lock inside a transaction (*sql.Tx)
	// survives COMMIT and ROLLBACK and leaks behind transaction pooling;
	// use pg_advisory_xact_lock, released when the transaction ends

and suggests "SELECT pg_advisory_xact_lock($1)". The query may be a
literal, a constant expression (folding, concatenation, named constants
from any package), a local or unexported package variable assigned exactly
once and never address-taken, sqlx Rebind of such text, or the format of
fmt.Sprintf (verbs read as a placeholder; best effort).

Categories, by the handle the statement runs on (message prefix and
Diagnostic.Category; -skip=cat,... turns some off):
  pooled  *sql.DB, *sqlx.DB, *pgxpool.Pool: the unlock may run on another
          connection; behind transaction pooling the lock leaks
  tx      *sql.Tx, *sqlx.Tx, pgx.Tx, *pgxpool.Tx: the lock survives COMMIT;
          a fix renames it to the xact twin; pg_advisory_unlock_all there
          releases other clients' locks on a pooler's shared backend
  conn    *sql.Conn, *sqlx.Conn, *pgx.Conn, *pgxpool.Conn, *pgconn.PgConn:
          legitimate on a direct connection, fatal behind transaction pooling
  handle  an interface handle or a pgx.Batch of unknown destination
  directive  //pgadvisory:ignore without a reason

False-positive policy: only what the SQL text proves is reported. Session
locks and try-locks are reported on every handle; session unlocks only on
pooled handles (elsewhere the lock call is the finding), except
pg_advisory_unlock_all, also reported in transactions; transaction-level
calls never. Messages suggest pgxadvisory's helpers for pgx handles and
advisory's for database/sql and sqlx. Text the analyzer cannot compute (parameters, fields,
variables assigned twice, SQL rejected by PostgreSQL's parser even after
replacing ? and :name binds) is skipped silently, as are PL/pgSQL EXECUTE
and other dynamic SQL. Statements prepared with Prepare are reported at
Prepare, by the handle that prepares them.

Silence one call with //pgadvisory:ignore <reason> on the line above its
statement or on the call's lines; a directive without a reason is
reported itself.
`
