package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	goredislib "github.com/redis/go-redis/v9"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
)

// DefaultLockTimeout is the lock_timeout every PostgreSQL variant sets for
// its lock (the naive pattern's SET LOCAL, WithXactLock's WithLockTimeout,
// or WithTimeout where a variant says so).
const DefaultLockTimeout = 5 * time.Second

// PgxDriver is the database/sql driver name of pgx's stdlib package.
const PgxDriver = "pgx"

// Naive is variant (a): the widely copied four-round-trip cycle over
// pgxpool — BEGIN; SET LOCAL lock_timeout; SELECT pg_advisory_xact_lock;
// COMMIT.
func Naive(id, dsn string, path Path, lockTimeout time.Duration) Variant {
	setTimeout := "SET LOCAL lock_timeout = '" + strconv.FormatInt(lockTimeout.Milliseconds(), 10) + "ms'"
	return Variant{
		ID: id, Name: "naive BEGIN; SET LOCAL; lock; COMMIT (pgxpool)", Path: path,
		Open: func(ctx context.Context, conns int) (Target, error) {
			pool, err := openPgxpool(ctx, dsn, conns)
			if err != nil {
				return nil, fmt.Errorf("bench: naive: %w", err)
			}
			return &naiveTarget{pool: pool, setTimeout: setTimeout}, nil
		},
	}
}

type naiveTarget struct {
	pool       *pgxpool.Pool
	setTimeout string
}

func (n *naiveTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	tx, err := n.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, n.setTimeout); err != nil {
		_ = tx.Rollback(ctx)
		return 0, err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
		_ = tx.Rollback(ctx)
		return 0, err
	}
	acq := time.Since(start)
	return acq, tx.Commit(ctx)
}

func (n *naiveTarget) Close() error { n.pool.Close(); return nil }

// PgxBatch is variant (e), the ceiling: the same two-round-trip cycle as
// (c) — BEGIN pipelined with SELECT set_config('lock_timeout', ...),
// pg_advisory_xact_lock(...), then COMMIT — written directly against
// pgxpool with a pgx.Batch, without database/sql or a driver in between. It
// is what the protocol alone allows on this machine.
func PgxBatch(id, dsn string, path Path, lockTimeout time.Duration) Variant {
	timeout := strconv.FormatInt(lockTimeout.Milliseconds(), 10) + "ms"
	return Variant{
		ID: id, Name: "raw pgx Batch: BEGIN+lock pipelined, COMMIT (ceiling)", Path: path,
		Open: func(ctx context.Context, conns int) (Target, error) {
			rt := &roundTrips{}
			pool, err := openCountedPgxpool(ctx, dsn, conns, rt, false)
			if err != nil {
				return nil, fmt.Errorf("bench: pgx batch: %w", err)
			}
			return &batchTarget{pgxPoolTarget: pgxPoolTarget{pool: pool, rt: rt}, timeout: timeout}, nil
		},
	}
}

type batchTarget struct {
	pgxPoolTarget
	timeout string
}

func (b *batchTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	return batchCycle(ctx, conn, start, b.timeout, key)
}

// batchConn is what batchCycle runs on: a *pgx.Conn or a *pgxpool.Conn.
type batchConn interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// batchCycle is the ceiling's cycle on conn: BEGIN pipelined with the
// lock in one pgx.Batch, then COMMIT. It returns the time from start until
// the lock was held.
func batchCycle(ctx context.Context, conn batchConn, start time.Time, timeout string, key int64) (time.Duration, error) {
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(lockStatement, timeout, key)
	br := conn.SendBatch(ctx, batch)
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return 0, err
	}
	acq := time.Since(start)
	_, err = conn.Exec(ctx, "COMMIT")
	return acq, err
}

// SQLBatch is variant (j), the ceiling for database/sql: (e)'s cycle — a
// pgx.Batch of BEGIN and the lock, then COMMIT — on a connection taken from
// a database/sql pool of pgx stdlib connections (sql.Conn.Raw). Beside (b)
// and (c), which run advisory.WithXactLock over the same kind of pool, it
// leaves database/sql's own cost (taking and returning a connection) out
// of their comparison with the protocol.
func SQLBatch(id, dsn string, path Path, lockTimeout time.Duration) Variant {
	timeout := strconv.FormatInt(lockTimeout.Milliseconds(), 10) + "ms"
	return sqlVariant(id, "raw pgx Batch on a database/sql connection (ceiling for database/sql)", PgxDriver, dsn, path,
		func(db *sql.DB) Target { return &sqlBatchTarget{db: db, timeout: timeout} })
}

type sqlBatchTarget struct {
	db      *sql.DB
	timeout string
}

func (s *sqlBatchTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var acq time.Duration
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("bench: database/sql batch: the driver connection is %T, not pgx stdlib's", dc)
		}
		var err error
		acq, err = batchCycle(ctx, sc.Conn(), start, s.timeout, key)
		return err
	})
	return acq, err
}

func (s *sqlBatchTarget) Close() error { return s.db.Close() }

// lockStatement is the statement (c), (e), (g), (j) and the by-hand cells
// take the lock with: lock_timeout and the transaction-level lock in one.
const lockStatement = "SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2)"

// SQLTx is variant (k): (c)'s transaction written by hand over database/sql
// — db.BeginTx, tx.ExecContext of the lock statement, tx.Commit — with the
// given driver, without advisory.WithXactLock. Over the pgadvisory driver,
// (c)/(k) is what the helper costs over database/sql, and (k)/(j) what a
// database/sql transaction costs (its goroutine, the BEGIN answered by the
// guard) beside the raw protocol on the same pool.
func SQLTx(id, name, driverName, dsn string, path Path, lockTimeout time.Duration) Variant {
	timeout := strconv.FormatInt(lockTimeout.Milliseconds(), 10) + "ms"
	return sqlVariant(id, name, driverName, dsn, path, func(db *sql.DB) Target { return &sqlTxTarget{db: db, timeout: timeout} })
}

type sqlTxTarget struct {
	db      *sql.DB
	timeout string
}

func (s *sqlTxTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, lockStatement, s.timeout, key); err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	acq := time.Since(start)
	return acq, tx.Commit()
}

func (s *sqlTxTarget) Close() error { return s.db.Close() }

// sqlVariant is a Variant whose target, made by target, runs on a
// database/sql pool of driverName's connections over dsn.
func sqlVariant(id, name, driverName, dsn string, path Path, target func(*sql.DB) Target) Variant {
	return Variant{
		ID: id, Name: name, Path: path,
		Open: func(ctx context.Context, conns int) (Target, error) {
			db, err := openSQL(ctx, driverName, dsn, conns)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", name, err)
			}
			return target(db), nil
		},
	}
}

// openSQL opens a database/sql pool of conns connections and checks it.
func openSQL(ctx context.Context, driverName, dsn string, conns int) (*sql.DB, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if err := prefillSQL(ctx, db, conns); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// prefillSQL opens all conns connections at once and returns them to the
// idle pool, so connection set-up (and, with pgadvisory, pool-mode
// detection) is not measured.
func prefillSQL(ctx context.Context, db *sql.DB, conns int) error {
	return prefill(ctx, conns, func(ctx context.Context) (func(), error) {
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		if err := c.PingContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return func() { c.Close() }, nil
	})
}

// prefill takes n connections with acquire, all held at once (each
// checked by acquire), then gives them all back.
func prefill(ctx context.Context, n int, acquire func(context.Context) (release func(), err error)) error {
	releases := make([]func(), 0, n)
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	for range n {
		release, err := acquire(ctx)
		if err != nil {
			return err
		}
		releases = append(releases, release)
	}
	return nil
}

// openPgxpool opens a pgxpool of conns connections, all of them opened
// before it returns.
func openPgxpool(ctx context.Context, dsn string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return openPgxpoolConfig(ctx, cfg, conns)
}

// prefillPgxpool is prefillSQL for pgxpool.
func prefillPgxpool(ctx context.Context, pool *pgxpool.Pool, conns int) error {
	return prefill(ctx, conns, func(ctx context.Context) (func(), error) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		if err := c.Ping(ctx); err != nil {
			c.Release()
			return nil, err
		}
		return c.Release, nil
	})
}

// XactLock is variants (b) and (c): advisory.WithXactLock over database/sql
// with the given driver ("pgx" or "pgadvisory").
func XactLock(id, name, driverName, dsn string, path Path, lockTimeout time.Duration) Variant {
	return sqlVariant(id, name, driverName, dsn, path, func(db *sql.DB) Target {
		return &xactTarget{db: db, opt: advisory.WithLockTimeout(lockTimeout)}
	})
}

type xactTarget struct {
	db  *sql.DB
	opt advisory.LockOption
}

func (x *xactTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	var acq time.Duration
	err := advisory.WithXactLock(ctx, x.db, advisory.IntKey(key), func(context.Context, *sql.Tx) error {
		acq = time.Since(start)
		return nil
	}, x.opt)
	return acq, err
}

func (x *xactTarget) Close() error { return x.db.Close() }

// PgxXactLock is variant (f): pgxadvisory.WithXactLock over pgxpool — the
// same lock as (b) and (c) (one SELECT set_config('lock_timeout', …),
// pg_advisory_xact_lock(…) between BEGIN and COMMIT, typed errors), for
// pgx-native code, without database/sql.
func PgxXactLock(id, dsn string, path Path, lockTimeout time.Duration) Variant {
	name := "pgxadvisory.WithXactLock, pgxpool"
	return Variant{
		ID: id, Name: name, Path: path,
		Open: func(ctx context.Context, conns int) (Target, error) {
			pool, err := openPgxpool(ctx, dsn, conns)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", name, err)
			}
			return &pgxXactTarget{pool: pool, opt: advisory.WithLockTimeout(lockTimeout)}, nil
		},
	}
}

type pgxXactTarget struct {
	pool *pgxpool.Pool
	opt  advisory.LockOption
}

func (x *pgxXactTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	var acq time.Duration
	err := pgxadvisory.WithXactLock(ctx, x.pool, advisory.IntKey(key), func(context.Context, pgx.Tx) error {
		acq = time.Since(start)
		return nil
	}, x.opt)
	return acq, err
}

func (x *pgxXactTarget) Close() error { x.pool.Close(); return nil }

// Redlock is variant (d): github.com/go-redsync/redsync/v4 with go-redis v9
// clients over the independent Redis masters addrs, with redsync's
// defaults (8 s expiry, 32 tries 50–250 ms apart).
func Redlock(id string, addrs []string) Variant {
	return Variant{
		ID: id, Name: fmt.Sprintf("Redlock, redsync over %d redis-server", len(addrs)), Path: PathRedis,
		Open: func(ctx context.Context, conns int) (Target, error) {
			if len(addrs) == 0 {
				return nil, errors.New("bench: redlock: no Redis addresses")
			}
			t := &redlockTarget{}
			var pools []redsyncredis.Pool
			for _, a := range addrs {
				c := goredislib.NewClient(&goredislib.Options{Addr: a, PoolSize: conns})
				t.clients = append(t.clients, c)
				if err := c.Ping(ctx).Err(); err != nil {
					t.Close()
					return nil, fmt.Errorf("bench: redlock: ping %s: %w", a, err)
				}
				pools = append(pools, goredis.NewPool(c))
			}
			t.rs = redsync.New(pools...)
			return t, nil
		},
	}
}

type redlockTarget struct {
	clients []*goredislib.Client
	rs      *redsync.Redsync
}

func (r *redlockTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	m := r.rs.NewMutex("pgadvisory-bench:" + strconv.FormatInt(key, 10))
	if err := m.LockContext(ctx); err != nil {
		return 0, err
	}
	acq := time.Since(start)
	ok, err := m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("bench: redlock: unlock reached no quorum")
	}
	return acq, err
}

func (r *redlockTarget) Close() error {
	var errs []error
	for _, c := range r.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// SelectInt is a driver-overhead contender: one "SELECT $1::int" round trip
// over database/sql with the given driver; the answer is checked.
func SelectInt(id, name, driverName, dsn string, path Path) Variant {
	return sqlVariant(id, name, driverName, dsn, path, func(db *sql.DB) Target { return &selectTarget{db: db} })
}

type selectTarget struct{ db *sql.DB }

func (s *selectTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	start := time.Now()
	want := int32(key)
	var got int32
	if err := s.db.QueryRowContext(ctx, "SELECT $1::int", want).Scan(&got); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if got != want {
		return d, fmt.Errorf("bench: SELECT $1::int returned %d for %d", got, want)
	}
	return d, nil
}

func (s *selectTarget) Close() error { return s.db.Close() }
