package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
)

// openPgxpoolConfig opens a pool of conns connections from cfg, all of
// them opened before it returns.
func openPgxpoolConfig(ctx context.Context, cfg *pgxpool.Config, conns int) (*pgxpool.Pool, error) {
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := prefillPgxpool(ctx, pool, conns); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// openCountedPgxpool opens a pgxpool of conns connections over dsn, each
// of its network connections counted by rt; guarded, with the guard
// installed above the counter (pgadvisory.ConfigurePool, as
// pgadvisory.ParsePoolConfig does), so that rt also counts the holders'
// connections.
func openCountedPgxpool(ctx context.Context, dsn string, conns int, rt *roundTrips, guarded bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.AfterNetConnect = rt.hook(cfg.ConnConfig.AfterNetConnect)
	if guarded {
		if err := pgadvisory.ConfigurePool(cfg); err != nil {
			return nil, err
		}
	}
	return openPgxpoolConfig(ctx, cfg, conns)
}

// pgxPoolTarget is what the pgxpool targets below share: the pool and its
// round-trip counter.
type pgxPoolTarget struct {
	pool *pgxpool.Pool
	rt   *roundTrips
}

// RoundTrips implements RoundTripCounter.
func (p *pgxPoolTarget) RoundTrips() int64 { return p.rt.Count() }

func (p *pgxPoolTarget) Close() error { p.pool.Close(); return nil }

// poolVariant is a Variant whose target is a (guarded or plain) pgxpool
// over dsn whose cycle is cycle.
func poolVariant(id, name, dsn string, path Path, guarded bool, cycle func(*pgxPoolTarget, context.Context, int64) (time.Duration, error)) Variant {
	return Variant{
		ID: id, Name: name, Path: path,
		Open: func(ctx context.Context, conns int) (Target, error) {
			rt := &roundTrips{}
			pool, err := openCountedPgxpool(ctx, dsn, conns, rt, guarded)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", name, err)
			}
			return &poolCycleTarget{pgxPoolTarget: pgxPoolTarget{pool: pool, rt: rt}, cycle: cycle}, nil
		},
	}
}

type poolCycleTarget struct {
	pgxPoolTarget
	cycle func(*pgxPoolTarget, context.Context, int64) (time.Duration, error)
}

func (p *poolCycleTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	return p.cycle(&p.pgxPoolTarget, ctx, key)
}

// GuardedPgxXactLock is variant (g): pgxadvisory.WithXactLock over a
// guarded pgxpool (the pool pgadvisory.ParsePoolConfig makes) — the path
// recommended to pgx users, BEGIN pipelined with the lock, then COMMIT —
// under WithLockTimeout, the bound the ceiling (e) sets: lock_timeout on the
// server, nothing on the client.
func GuardedPgxXactLock(id, dsn string, path Path, lockTimeout time.Duration) Variant {
	return guardedPgxXactLock(id, "pgxadvisory.WithXactLock, guarded pgxpool", dsn, path, advisory.WithLockTimeout(lockTimeout))
}

// GuardedPgxXactLockClientBound is variant (m): (g) under WithTimeout, which
// bounds the wait for a connection and for the lock statement's answer on
// the client as well. (m)/(g) is what that bound costs.
func GuardedPgxXactLockClientBound(id, dsn string, path Path, lockTimeout time.Duration) Variant {
	return guardedPgxXactLock(id, "pgxadvisory.WithXactLock under WithTimeout, guarded pgxpool", dsn, path, advisory.WithTimeout(lockTimeout))
}

func guardedPgxXactLock(id, name, dsn string, path Path, bound advisory.LockOption) Variant {
	return poolVariant(id, name, dsn, path, true,
		func(p *pgxPoolTarget, ctx context.Context, key int64) (time.Duration, error) {
			start := time.Now()
			var acq time.Duration
			err := pgxadvisory.WithXactLock(ctx, p.pool, advisory.IntKey(key), func(context.Context, pgx.Tx) error {
				acq = time.Since(start)
				return nil
			}, bound)
			return acq, err
		})
}

// GuardedPgxTx is variant (l): (g)'s transaction written by hand over a
// guarded pgxpool — pool.Begin, tx.Exec of the lock statement, tx.Commit —
// without pgxadvisory.WithXactLock. (g)/(l) is what the helper costs over
// pgx, and (l)/(e) what pgx's transaction API costs through the guard (its
// BEGIN answered here and sent with the lock) beside a raw pgx.Batch.
func GuardedPgxTx(id, dsn string, path Path, lockTimeout time.Duration) Variant {
	timeout := strconv.FormatInt(lockTimeout.Milliseconds(), 10) + "ms"
	return poolVariant(id, "pgx transaction by hand (Begin, lock, Commit), guarded pgxpool", dsn, path, true,
		func(p *pgxPoolTarget, ctx context.Context, key int64) (time.Duration, error) {
			start := time.Now()
			tx, err := p.pool.Begin(ctx)
			if err != nil {
				return 0, err
			}
			if _, err := tx.Exec(ctx, lockStatement, timeout, key); err != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
				return 0, err
			}
			acq := time.Since(start)
			return acq, tx.Commit(ctx)
		})
}

// SeedPattern is variant (h): the widely copied try-lock pattern, as
// written — pool.Begin, SET LOCAL lock_timeout, SELECT
// pg_try_advisory_xact_lock($1), Commit — over a guarded pgxpool
// (guarded) or a plain one. A try that finds the key taken is a completed
// cycle, in both pools alike.
func SeedPattern(id, dsn string, path Path, guarded bool, lockTimeout time.Duration) Variant {
	setTimeout := "SET LOCAL lock_timeout = '" + strconv.FormatInt(lockTimeout.Milliseconds(), 10) + "ms'"
	name := "seed pattern Begin; SET LOCAL; try-lock; Commit, plain pgxpool"
	if guarded {
		name = "seed pattern Begin; SET LOCAL; try-lock; Commit, guarded pgxpool"
	}
	return poolVariant(id, name, dsn, path, guarded,
		func(p *pgxPoolTarget, ctx context.Context, key int64) (time.Duration, error) {
			start := time.Now()
			tx, err := p.pool.Begin(ctx)
			if err != nil {
				return 0, err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit: a no-op
			if _, err := tx.Exec(ctx, setTimeout); err != nil {
				return 0, err
			}
			var ok bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", key).Scan(&ok); err != nil {
				return 0, err
			}
			acq := time.Since(start)
			return acq, tx.Commit(ctx)
		})
}

// SessionLock is the hold cell: SELECT pg_advisory_lock($1), then SELECT
// pg_advisory_unlock($1), on one pooled connection. Guarded, dsn should
// reach PgBouncer in transaction mode with pgadvisory_policy=hold (the
// guard keeps the lock on a holder); plain, PgBouncer in session mode (the
// reference). It runs with at most maxWorkers workers: each worker pins a
// server connection (its session, or its holder).
func SessionLock(id, dsn string, path Path, guarded bool, maxWorkers int) Variant {
	name := "session lock + unlock, plain pgx, PgBouncer session pooling"
	if guarded {
		name = "session lock + unlock, guard policy hold, PgBouncer transaction pooling"
	}
	v := poolVariant(id, name, dsn, path, guarded,
		func(p *pgxPoolTarget, ctx context.Context, key int64) (time.Duration, error) {
			start := time.Now()
			conn, err := p.pool.Acquire(ctx)
			if err != nil {
				return 0, err
			}
			defer conn.Release()
			//pgadvisory:ignore the cell measures a session lock: held by the guard (policy hold) or on a session-pooled connection
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
				return 0, err
			}
			acq := time.Since(start)
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil {
				return acq, err
			}
			if !ok {
				return acq, fmt.Errorf("bench: pg_advisory_unlock(%d) returned false: the lock was not held", key)
			}
			return acq, nil
		})
	v.MaxWorkers = maxWorkers
	return v
}
