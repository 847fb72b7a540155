package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

func ExampleKeyFromString() {
	fmt.Println(advisory.KeyFromString("leader"))
	fmt.Println(advisory.NamespacedKey("billing", "invoice-42"))
	fmt.Println(advisory.PairKey(7, 42))
	// Output:
	// 5574161153772379146
	// -2679328347133616878
	// (7,42)
}

// Settle an invoice once, even with many replicas racing for it, behind any
// pooler. The wait is bounded by the server; the error says why it failed.
func ExampleWithXactLock() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := advisory.NamespacedKey("billing", "invoice-42")
	err = advisory.WithXactLock(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE invoices SET settled = true WHERE id = $1 AND NOT settled", 42)
		return err
	}, advisory.WithTimeout(2*time.Second))
	switch {
	case errors.Is(err, advisory.ErrLockTimeout):
		fmt.Println("another replica is settling it")
	case errors.Is(err, advisory.ErrDeadlock):
		fmt.Println("deadlock victim: retry")
	case err != nil:
		log.Fatal(err)
	}
}

// A request handler whose context already bounds the whole call: the lock's
// own wait is bounded by the server alone (lock_timeout, no timer on the
// client). A key still held after 500 ms is someone else's work.
func ExampleWithLockTimeout() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the request's deadline
	defer cancel()
	key := advisory.NamespacedKey("billing", "subscription-7")
	err = advisory.WithXactLock(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE subscriptions SET billed_at = now() WHERE id = $1", 7)
		return err
	}, advisory.WithLockTimeout(500*time.Millisecond))
	if errors.Is(err, advisory.ErrLockTimeout) {
		fmt.Println("another replica is billing it")
	} else if err != nil {
		log.Fatal(err)
	}
}

// Inside a transaction you manage: a *sql.Tx, or sqlx's *sqlx.Tx (see
// package github.com/pgadvisory/pgadvisory/sqlxbind for sqlx over the
// pgadvisory driver).
func ExampleXactLock() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := advisory.XactLock(ctx, tx, advisory.PairKey(1, 42), advisory.WithTimeout(time.Second)); err != nil {
		log.Fatal(err)
	}
	// ... work under the lock ...
	if err := tx.Commit(); err != nil { // releases the lock
		log.Fatal(err)
	}
}

// A fencing token guards a write against a holder that paused past its
// lease: the storage refuses tokens older than the newest it has seen.
func ExampleCheckToken() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := advisory.CreateFencingSchema(ctx, db); err != nil {
		log.Fatal(err)
	}
	var token advisory.Token
	err = advisory.WithXactLock(ctx, db, advisory.KeyFromString("report"), func(ctx context.Context, tx *sql.Tx) error {
		// Long work here; the lease may run out while we are paused.
		if err := advisory.CheckToken(ctx, tx, "report/2026-01", token); err != nil {
			return err // errors.Is(err, advisory.ErrStaleToken): a newer holder wrote
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO reports (month, body) VALUES ($1, $2)", "2026-01", "...")
		return err
	}, advisory.WithFencing(&token), advisory.WithLease(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// Leader election on a direct connection (no transaction pooler).
func ExampleHoldSession() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for {
		lead, err := advisory.HoldSession(ctx, db, advisory.KeyFromString("scheduler-leader"),
			advisory.WithPoolMode(poolmode.Direct), advisory.WithHealthInterval(2*time.Second))
		if err != nil {
			log.Fatal(err)
		}
		runScheduler(lead.Context()) // returns when the lock may be lost
		if err := lead.Release(ctx); err != nil {
			log.Printf("leadership ended: %v", err)
		}
	}
}

func runScheduler(ctx context.Context) { <-ctx.Done() }

// Who holds and who waits, for a stuck deployment.
func ExampleLocks() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	locks, err := advisory.Locks(context.Background(), db)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range locks {
		if l.Granted {
			fmt.Printf("key %v held by pid %d (%s)\n", l.Key, l.PID, l.ApplicationName)
		} else {
			fmt.Printf("key %v awaited by pid %d since %v, blocked by %v\n", l.Key, l.PID, l.WaitingSince, l.BlockedBy)
		}
	}
}
