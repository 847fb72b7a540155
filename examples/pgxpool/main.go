// Command pgxpool settles an invoice under a transaction-level advisory lock
// through a pgxpool.Pool whose connections go through pgadvisory's guard.
// DATABASE_URL=postgres://... go run .
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
)

const schema = `CREATE TABLE IF NOT EXISTS invoices (
	id   bigint PRIMARY KEY,
	paid boolean NOT NULL DEFAULT false
)`

func main() {
	ctx := context.Background()
	cfg, err := pgadvisory.ParsePoolConfig(os.Getenv("DATABASE_URL")) // was: pgxpool.ParseConfig
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schema); err != nil {
		log.Fatal(err)
	}
	const invoiceID int64 = 1002
	if _, err := pool.Exec(ctx, "INSERT INTO invoices (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", invoiceID); err != nil {
		log.Fatal(err)
	}

	key := advisory.NamespacedKey("billing", fmt.Sprint(invoiceID))
	err = pgxadvisory.WithXactLock(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE invoices SET paid = true WHERE id = $1", invoiceID)
		return err
	}, advisory.WithTimeout(2*time.Second))
	switch {
	case errors.Is(err, advisory.ErrLockTimeout):
		fmt.Println("another replica is settling invoice", invoiceID)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("settled invoice", invoiceID)
	}

	// A session-level lock belongs to the server connection: take it on an
	// acquired connection. Behind transaction pooling the guard refuses it;
	// pgx returns the refusal as the server-style *pgconn.PgError (SQLSTATE
	// PA001), and pgadvisory.Refusal gives back the typed error.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Release()
	//pgadvisory:ignore shown on purpose: the guard refuses it behind transaction pooling
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock(42)")
	switch {
	case errors.Is(pgadvisory.Refusal(err), pgadvisory.ErrSessionLock):
		fmt.Println("session lock refused:", err)
	case err != nil:
		log.Fatal(err)
	default: // a direct connection or session pooling: the lock is safe there
		fmt.Println("session lock taken")
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock(42)"); err != nil {
			log.Fatal(err)
		}
	}
}
