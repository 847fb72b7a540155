// Package advisory takes PostgreSQL advisory locks the safe way: scoped to a
// transaction, with a bounded wait the server enforces, typed errors,
// fencing tokens, and a view of who holds what. It is pure Go and works with
// any database/sql driver (pgx stdlib, the pgadvisory driver, lib/pq) and
// with sqlx.
//
// # Why transaction-level locks
//
// A session-level lock (pg_advisory_lock) belongs to the server backend
// that took it. Behind PgBouncer in transaction or statement pooling that
// backend serves another client after your transaction ends: the lock leaks
// to a stranger, your unlock lands on a different backend and returns false,
// and the lock lives on until the pooler recycles the backend. Even without
// a pooler, a session lock taken on a *sql.DB can land on one pooled
// connection and its unlock on another. A transaction-level lock
// (pg_advisory_xact_lock) is released by COMMIT or ROLLBACK, and by the
// server when the client dies, so it is correct in every pool mode that
// allows transactions. This package takes only those, except HoldSession,
// which pins a connection and refuses to run where session locks leak,
// unless the pgadvisory driver holds them there (see below).
//
//	err := advisory.WithXactLock(ctx, db, advisory.NamespacedKey("billing", "invoice-42"),
//		func(ctx context.Context, tx *sql.Tx) error {
//			_, err := tx.ExecContext(ctx, "UPDATE invoices SET paid = true WHERE id = $1", 42)
//			return err
//		}, advisory.WithTimeout(2*time.Second))
//	switch {
//	case errors.Is(err, advisory.ErrLockTimeout): // someone else is on it
//	case errors.Is(err, advisory.ErrConnTimeout): // no connection in time: the pool is exhausted
//	case err != nil: // ...
//	}
//
// Inside a transaction you already have, use XactLock or TryXactLock. For
// pgx-native code (*pgxpool.Pool, *pgx.Conn, pgx.Tx) package pgxadvisory
// has the same functions with the same options; this package itself does
// not import pgx.
//
// # Keys
//
// The server has one 64-bit advisory key space per database, shared by every
// application that uses it, plus a separate space of (int, int) pairs. Key
// keeps the form: IntKey(42), PairKey(7, 42). KeyFromString and
// NamespacedKey hash names into the bigint space with SHA-256 (computable in
// SQL; see KeyFromString), so independent services that pick their own
// namespace do not collide in practice.
//
// # Waiting: lock_timeout from the deadline
//
// A client that stops waiting does not stop the server from waiting on its
// behalf. Through PgBouncer, a client whose context expired while it waited
// in pg_advisory_lock was measured to leave its backend behind, which then
// took the lock with nobody attached. This package therefore sets
// lock_timeout for the transaction in the very statement that takes the
// lock, from WithTimeout or WithLockTimeout and the context deadline
// (whichever is sooner, rounded up to a whole millisecond):
//
//	SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)
//
// One round trip, all values bound as parameters. WithTimeout bounds the
// wait for a connection too, on the client (a timer and a context of its
// own); WithLockTimeout bounds the lock's wait alone, on the server, and
// costs nothing more than the statement's argument. A context that has
// already expired fails before anything is sent. RestoreLockTimeout puts the
// previous value back after the grant. When the deadline fires on the client
// first, drivers return a context error instead of the server's 55P03; both
// are reported as ErrLockTimeout (the context error also matches
// context.DeadlineExceeded). A context canceled without a deadline is not a
// timeout: the error matches context.Canceled only.
//
// # Errors
//
// Failures to lock are *LockError values that unwrap to a sentinel and to
// the cause, so errors.Is(err, ErrLockTimeout) and errors.As(err, &pgErr)
// both work. Server errors are classified by SQLSTATE through
// interface{ SQLState() string }: 55P03 is ErrLockTimeout, 40P01 is
// ErrDeadlock (PostgreSQL detects cycles of advisory-lock waits like any
// other), and PA007, the pgadvisory driver's answer after a lock it held
// was lost, is ErrLockLost. NoWait turns a lock held elsewhere into
// ErrNotAcquired.
//
// # Leases and fencing tokens
//
// A lock cannot stop its holder from pausing: a GC pause, a stopped VM or a
// network partition can outlast any timeout, and a holder that wakes up
// still believes it holds the lock. Two tools bound the damage:
//
//   - WithLease sets idle_in_transaction_session_timeout for the lock's
//     transaction. If the holder goes silent inside the transaction for
//     longer than the lease, the server ends its session, which releases the
//     lock for the next worker. The stalled holder's next statement fails.
//   - WithFencing hands out a token from a sequence, read after the lock is
//     granted, so every later holder of a key gets a larger token. The
//     storage checks it (CheckToken, in the transaction that writes): a
//     write is accepted only if its token is not lower than the highest
//     seen for that resource. A paused holder that wakes up after a newer
//     holder has written is rejected with ErrStaleToken, even if its write
//     reaches the storage late or through another path.
//
// Tokens protect against process pauses and partitions between the holder
// and PostgreSQL. They need the sequence to move forward: after an
// asynchronous-replication failover the new primary may not have seen the
// latest nextval calls, and tokens already handed out can be handed out
// again. Use synchronous replication for the database that issues tokens, or
// after a failover advance the sequence well past any value issued before
// (setval). The schema (one sequence, one table) is in FencingSchema.
//
// # Introspection
//
// Locks lists every advisory lock held or awaited in the current database
// (pg_locks joined with pg_stat_activity), with keys decoded back into their
// form, and for each waiter the PIDs it waits for (pg_blocking_pids).
// Holders and Waiters narrow that to one key. The command
// "pgadvisory locks DSN" prints the same as a table.
//
// # Session locks for leaders
//
// HoldSession pins one connection, takes a session-level lock on it and
// checks it periodically; its Done channel and Context close when the lock
// may be lost, and Release checks the boolean pg_advisory_unlock returns.
// It refuses under statement pooling, and under transaction pooling
// unless the driver holds session locks there. It learns the pool mode from
// driver connections that implement PoolModer (the pgadvisory driver does);
// with other drivers declare it: WithPoolMode(poolmode.Direct).
//
// Behind PgBouncer transaction pooling, HoldSession works with the
// pgadvisory driver under its policy hold (pgadvisory_policy=hold in the
// DSN; rewrite holds too): the driver connection reports it through
// SessionLockHolder and keeps the lock on a holder connection of its own,
// and HoldSession sends only statements that are one lock call (SELECT
// pg_advisory_lock($1), pg_try_advisory_lock($1) for NoWait,
// pg_advisory_unlock($1) at Release). The wait is bounded on the client
// (WithTimeout, the context deadline; the connection is closed and
// discarded when it ends), PID is 0, the health check is SELECT 1, which
// the driver fails with SQLSTATE PA007 once the holder has ended, and
// WithFencing works as elsewhere.
//
//	db, _ := sql.Open("pgadvisory", "postgres://app@pgbouncer:6432/app?pgadvisory_policy=hold")
//	leader, err := advisory.HoldSession(ctx, db, advisory.NamespacedKey("scheduler", "leader"))
//
// pgxadvisory.HoldSession works behind transaction pooling the same way,
// under policy hold with a pgxpool from pgadvisory.ParsePoolConfig: it asks
// the guard's net.Conn (PgConn().Conn()) for the pool mode and whether it
// holds session locks.
//
// # Poolers and pgx
//
// Through PgBouncer in transaction mode, pgx's default statement cache
// breaks (prepared statements live on a backend that changes); open the pgx
// stdlib driver with default_query_exec_mode=exec (or simple_protocol) in
// the DSN, or use the pgadvisory driver, which picks a safe mode itself.
// Remember that a session waiting for a lock keeps its pooled backend busy:
// with a small pool, waiters can starve the holder's other work.
package advisory
