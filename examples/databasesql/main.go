// Command databasesql settles an invoice under a transaction-level advisory
// lock through the pgadvisory database/sql driver. It is the README's
// quickstart: DATABASE_URL=postgres://... go run .
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pgadvisory/pgadvisory" // registers the "pgadvisory" driver
	"github.com/pgadvisory/pgadvisory/advisory"
)

const schema = `CREATE TABLE IF NOT EXISTS invoices (
	id   bigint PRIMARY KEY,
	paid boolean NOT NULL DEFAULT false
)`

func main() {
	ctx := context.Background()
	db, err := sql.Open("pgadvisory", os.Getenv("DATABASE_URL")) // was: sql.Open("pgx", ...)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, schema); err != nil {
		log.Fatal(err)
	}
	const invoiceID int64 = 1001
	if _, err := db.ExecContext(ctx, "INSERT INTO invoices (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", invoiceID); err != nil {
		log.Fatal(err)
	}

	// One replica at a time settles this invoice; the lock ends with the transaction.
	key := advisory.NamespacedKey("billing", fmt.Sprint(invoiceID))
	err = advisory.WithXactLock(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE invoices SET paid = true WHERE id = $1", invoiceID)
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

	// A session-level lock belongs to the server connection: take it on a
	// pinned connection. Behind transaction pooling that server connection
	// changes hands after every transaction, so the driver refuses the lock
	// before anything reaches the server.
	conn, err := db.Conn(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	//pgadvisory:ignore shown on purpose: the driver refuses it behind transaction pooling
	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock(42)")
	switch {
	case errors.Is(err, pgadvisory.ErrSessionLock):
		fmt.Println("session lock refused:", err)
	case err != nil:
		log.Fatal(err)
	default: // a direct connection or session pooling: the lock is safe there
		fmt.Println("session lock taken")
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock(42)"); err != nil {
			log.Fatal(err)
		}
	}
}
