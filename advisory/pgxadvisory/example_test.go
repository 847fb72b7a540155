package pgxadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
)

// Settle an invoice once with a *pgxpool.Pool, even with many replicas
// racing for it, behind any pooler. WithTimeout bounds the wait for a pool
// connection and for the lock together, and the error says which one ran
// out.
func ExampleWithXactLock() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Behind PgBouncer in transaction mode add default_query_exec_mode=exec.
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	key := advisory.NamespacedKey("billing", "invoice-42")
	err = pgxadvisory.WithXactLock(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE invoices SET settled = true WHERE id = $1 AND NOT settled", 42)
		return err
	}, advisory.WithTimeout(2*time.Second))
	switch {
	case errors.Is(err, advisory.ErrLockTimeout):
		fmt.Println("another replica is settling it")
	case errors.Is(err, advisory.ErrConnTimeout):
		fmt.Println("no connection in time: the pool or PgBouncer is exhausted")
	case err != nil:
		log.Fatal(err)
	}
}

// Inside a pgx transaction you manage (a *pgx.Conn here; a *pgxpool.Tx
// works the same), with a fencing token for the write it guards.
func ExampleXactLock() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var token advisory.Token
	if err := pgxadvisory.XactLock(ctx, tx, advisory.NamespacedKey("reports", "daily"),
		advisory.WithTimeout(time.Second), advisory.WithFencing(&token)); err != nil {
		log.Fatal(err)
	}
	if err := pgxadvisory.CheckToken(ctx, tx, "reports/daily", token); err != nil {
		log.Fatal(err) // a newer holder has written: ErrStaleToken
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// Skip work another worker is already doing.
func ExampleTryXactLock() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ok, err := pgxadvisory.TryXactLock(ctx, tx, advisory.NamespacedKey("mailer", "digest"))
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		return // someone else is sending the digest
	}
	// ... send it, then commit.
}

// Leader election on a pgxpool: the session lock lives on one connection
// taken out of the pool until Release; stop leading when Done closes.
func ExampleHoldSession() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	leader, err := pgxadvisory.HoldSession(ctx, pool, advisory.NamespacedKey("scheduler", "leader"),
		advisory.NoWait(), advisory.WithFencing(new(advisory.Token)))
	if errors.Is(err, advisory.ErrNotAcquired) {
		return // another replica leads
	}
	if err != nil {
		log.Fatal(err)
	}
	defer leader.Release(ctx)
	<-leader.Done() // lead until the lock may be lost (run the work under leader.Context())
}

// A handle that pgxpool.New did not make is an error, not a panic.
func ExampleWithXactLock_badHandle() {
	var pool *pgxpool.Pool // never assigned
	err := pgxadvisory.WithXactLock(context.Background(), pool, advisory.IntKey(1),
		func(context.Context, pgx.Tx) error { return nil })
	fmt.Println(err)
	// Output:
	// advisory: pgxadvisory.WithXactLock: nil database handle
}
