// Command leader runs for leadership behind PgBouncer transaction pooling:
// advisory.HoldSession keeps a session-level lock, which the pgadvisory driver
// holds for it under pgadvisory_policy=hold. Start several; one leads at a
// time, the others wait their turn.
//
//	DATABASE_URL='postgres://...' go run . -name a -term 500ms
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
)

const schema = `CREATE TABLE IF NOT EXISTS leader_state (
	id      int PRIMARY KEY,
	leaders int NOT NULL
)`

func main() {
	name := flag.String("name", "candidate", "this candidate's name")
	term := flag.Duration("term", 500*time.Millisecond, "how long to lead before stepping down")
	wait := flag.Duration("wait", 30*time.Second, "how long to wait for leadership")
	flag.Parse()

	ctx := context.Background()
	db, err := pgadvisory.OpenDB(os.Getenv("DATABASE_URL"), pgadvisory.WithPolicy(pgadvisory.PolicyHold))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := lead(ctx, db, *name, *term, *wait); err != nil {
		log.Fatal(err)
	}
}

func lead(ctx context.Context, db *sql.DB, name string, term, wait time.Duration) error {
	// Candidates start together: create the table under a transaction-level
	// lock, as CREATE TABLE IF NOT EXISTS is not safe to run concurrently.
	err := advisory.WithXactLock(ctx, db, advisory.NamespacedKey("examples", "leader-schema"), func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO leader_state VALUES (1, 0) ON CONFLICT (id) DO NOTHING")
		return err
	})
	if err != nil {
		return err
	}
	lock, err := advisory.HoldSession(ctx, db, advisory.NamespacedKey("examples", "leader"), advisory.WithTimeout(wait))
	if errors.Is(err, advisory.ErrLockTimeout) {
		fmt.Println(name, "did not become leader within", wait)
		return nil
	}
	if err != nil {
		return err
	}
	// leaders counts the candidates that believe they lead: always 1 here.
	var leaders int
	if err := db.QueryRowContext(ctx, "UPDATE leader_state SET leaders = leaders + 1 WHERE id = 1 RETURNING leaders").Scan(&leaders); err != nil {
		return err
	}
	fmt.Printf("%s leads (leaders now %d)\n", name, leaders)

	select {
	case <-time.After(term): // the leader's work would run here
	case <-lock.Done(): // the lock may be lost: stop acting as the leader at once
		fmt.Println(name, "lost leadership:", lock.Err())
	}
	if _, err := db.ExecContext(ctx, "UPDATE leader_state SET leaders = leaders - 1 WHERE id = 1"); err != nil {
		return err
	}
	if err := lock.Release(ctx); err != nil {
		return err
	}
	fmt.Println(name, "stepped down")
	return nil
}
