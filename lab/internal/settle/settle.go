// Package settle is the payment-settlement workload behind pgadvisory's
// reliability tests and demo.
//
// A run has M payment events over a few accounts. Every worker receives
// every event (duplicate deliveries, as from an at-least-once queue) in its
// own order. Exactly-once means: every event appears once in the ledger,
// none is missing, and every account balance equals the sum of its events.
//
// The safe worker settles an event like this:
//
//  1. advisory.WithXactLock on the event's key, with a lease (the server ends
//     a holder that goes silent) and a fencing token;
//  2. in the lock's transaction, an idempotency check: settled already? skip;
//  3. the work the lock exists for (a payment provider call, simulated);
//  4. the write, in its own transaction on the store connection: the fencing
//     check (advisory.CheckToken, which also serialises writers of the event),
//     the idempotency check again, the ledger row, the balance, the mark.
//
// The unsafe worker is the widely copied pattern: a session-level
// pg_advisory_lock in autocommit, the check, the work, the write, and
// pg_advisory_unlock. Direct, it is correct; through PgBouncer in
// transaction mode its lock is shared by every client of the backend.
//
// Workers print one line per step (see Line) so that tests can inject faults
// at exact moments, for instance SIGSTOP a worker that is "working".
package settle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/pgadvisory/pgadvisory/advisory"
)

// Schema creates the scenario's tables. Rows carry a run identifier, so runs
// can share a database without seeing each other.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS settle_event (
		run text NOT NULL, id bigint NOT NULL, account int NOT NULL, amount bigint NOT NULL,
		settled_by text, token bigint, PRIMARY KEY (run, id))`,
	// No unique constraint on (run, event): a double settlement must be
	// visible, not prevented by the schema.
	`CREATE TABLE IF NOT EXISTS settle_ledger (
		run text NOT NULL, event bigint NOT NULL, account int NOT NULL, amount bigint NOT NULL,
		worker text NOT NULL, token bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	`CREATE INDEX IF NOT EXISTS settle_ledger_run_event ON settle_ledger (run, event)`,
	`CREATE TABLE IF NOT EXISTS settle_account (
		run text NOT NULL, id int NOT NULL, balance bigint NOT NULL DEFAULT 0, PRIMARY KEY (run, id))`,
}

// Run describes one run of the scenario.
type Run struct {
	ID       string // distinguishes runs sharing a database
	Events   int    // M, the number of payment events
	Accounts int    // accounts the events are spread over
	Seed     uint64 // amounts and accounts derive from it
}

func (r Run) validate() error {
	switch {
	case r.ID == "":
		return errors.New("settle: run needs an ID")
	case r.Events <= 0 || r.Events > 1_000_000:
		return fmt.Errorf("settle: run %s: events = %d, want 1..1000000", r.ID, r.Events)
	case r.Accounts <= 0 || r.Accounts > r.Events:
		return fmt.Errorf("settle: run %s: accounts = %d, want 1..events", r.ID, r.Accounts)
	}
	return nil
}

// schemaKey serialises concurrent schema creation (CREATE TABLE IF NOT
// EXISTS races with itself in PostgreSQL).
var schemaKey = advisory.KeyFromString("pgadvisory/settle schema")

// Setup creates the schema (and the fencing schema) if needed and inserts the
// run's events and accounts. db must allow transactions (direct, session or
// transaction pooling).
func Setup(ctx context.Context, db *sql.DB, r Run) error {
	if err := r.validate(); err != nil {
		return err
	}
	err := advisory.WithXactLock(ctx, db, schemaKey, func(ctx context.Context, tx *sql.Tx) error {
		for _, s := range schema {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return advisory.CreateFencingSchema(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("settle: create schema: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	defer tx.Rollback()
	rng := rand.New(rand.NewPCG(r.Seed, 7))
	for a := 0; a < r.Accounts; a++ {
		if _, err := tx.ExecContext(ctx, "INSERT INTO settle_account (run, id) VALUES ($1, $2)", r.ID, a); err != nil {
			return fmt.Errorf("settle: insert account: %w", err)
		}
	}
	for e := 0; e < r.Events; e++ {
		if _, err := tx.ExecContext(ctx, "INSERT INTO settle_event (run, id, account, amount) VALUES ($1, $2, $3, $4)",
			r.ID, e, rng.IntN(r.Accounts), 1+rng.Int64N(100_000)); err != nil {
			return fmt.Errorf("settle: insert event: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	return nil
}

// Report is the outcome of a run, read from the database.
type Report struct {
	Events         int // events in the run
	Settled        int // events with at least one ledger row
	SettledTwice   int // events with more than one ledger row
	Lost           int // events with no ledger row
	ExtraRows      int // ledger rows beyond one per event
	WrongBalances  int // accounts whose balance is not the sum of their events
	UnmarkedEvents int // events whose settled_by is empty (a ledger row without its mark, or lost)
}

// ExactlyOnce reports whether every event was settled exactly once with
// exact balances.
func (r Report) ExactlyOnce() bool {
	return r.SettledTwice == 0 && r.Lost == 0 && r.ExtraRows == 0 && r.WrongBalances == 0 && r.UnmarkedEvents == 0
}

func (r Report) String() string {
	return fmt.Sprintf("%d events: %d settled, %d settled twice (%d extra ledger rows), %d lost, %d wrong balances",
		r.Events, r.Settled, r.SettledTwice, r.ExtraRows, r.Lost, r.WrongBalances)
}

// Verify reads the run's outcome.
func Verify(ctx context.Context, db *sql.DB, runID string) (Report, error) {
	var r Report
	err := db.QueryRowContext(ctx, `
		SELECT count(*), count(*) FILTER (WHERE n > 0), count(*) FILTER (WHERE n > 1),
			count(*) FILTER (WHERE n = 0), coalesce(sum(greatest(n - 1, 0)), 0),
			count(*) FILTER (WHERE NOT marked)
		FROM (SELECT e.id, e.settled_by IS NOT NULL AS marked,
				(SELECT count(*) FROM settle_ledger l WHERE l.run = e.run AND l.event = e.id) AS n
			FROM settle_event e WHERE e.run = $1) s`, runID).
		Scan(&r.Events, &r.Settled, &r.SettledTwice, &r.Lost, &r.ExtraRows, &r.UnmarkedEvents)
	if err != nil {
		return r, fmt.Errorf("settle: verify: %w", err)
	}
	err = db.QueryRowContext(ctx, `
		SELECT count(*) FROM settle_account a
		WHERE a.run = $1 AND a.balance <> (SELECT coalesce(sum(e.amount), 0) FROM settle_event e WHERE e.run = a.run AND e.account = a.id)`,
		runID).Scan(&r.WrongBalances)
	if err != nil {
		return r, fmt.Errorf("settle: verify balances: %w", err)
	}
	return r, nil
}

// EventKey is the advisory lock key of an event.
func EventKey(runID string, event int64) advisory.Key {
	return advisory.NamespacedKey("settle/"+runID, strconv.FormatInt(event, 10))
}

// resource is the fencing resource of an event.
func resource(runID string, event int64) string {
	return "settle/" + runID + "/" + strconv.FormatInt(event, 10)
}

// Deliveries returns the order in which one worker receives the run's events:
// all of them, shuffled by seed.
func Deliveries(events int, seed uint64) []int64 {
	order := make([]int64, events)
	for i := range order {
		order[i] = int64(i)
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}
