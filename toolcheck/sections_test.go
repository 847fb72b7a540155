package toolcheck

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// The critical sections an ORM user writes on a *sql.DB (GORM's db.Exec is
// sql.DB.ExecContext): pg_advisory_lock, the work, pg_advisory_unlock, each
// a separate statement on the pool. On PostgreSQL the pool hands the same
// session back, so the lock covers the work; the guard must keep that true
// wherever it lets the lock be taken.
const (
	sectionsTable  = "sections_witness"
	sectionsKey    = 9391
	sectionsRounds = 15
)

// sectionsTool is the child's side: sectionsRounds critical sections on
// one *sql.DB. In each, the process claims the witness row (owner '0' →
// its pid) and gives it back; a claim that finds the row taken is an overlap:
// another process ran its section at the same time. It returns the
// sections completed, and an error naming the overlaps and any unlock that
// did not return true.
var sectionsTool = &tool{name: "sqldb-sections", run: runSections}

func runSections(ctx context.Context, driver, dsn string) (int, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	me := fmt.Sprint(os.Getpid())
	var problems []string
	done := 0
	for i := range sectionsRounds {
		if _, err := db.ExecContext(ctx, "SELECT pg_advisory_lock($1)", sectionsKey); err != nil {
			return done, fmt.Errorf("section %d: lock: %w", i, err)
		}
		res, err := db.ExecContext(ctx, "UPDATE "+sectionsTable+" SET owner = $1 WHERE owner = '0'", me)
		if err != nil {
			return done, fmt.Errorf("section %d: claim: %w", i, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			problems = append(problems, fmt.Sprintf("section %d overlapped another process's", i))
		}
		time.Sleep(2 * time.Millisecond) // the work
		if _, err := db.ExecContext(ctx, "UPDATE "+sectionsTable+" SET owner = '0' WHERE owner = $1", me); err != nil {
			return done, fmt.Errorf("section %d: release: %w", i, err)
		}
		var ok bool
		if err := db.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", sectionsKey).Scan(&ok); err != nil {
			return done, fmt.Errorf("section %d: unlock: %w", i, err)
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("section %d: pg_advisory_unlock returned false", i))
		}
		done++
	}
	if len(problems) > 0 {
		return done, fmt.Errorf("%d problems: %s", len(problems), strings.Join(problems, "; "))
	}
	return done, nil
}

// TestSQLDBSectionsTwoProcesses runs the critical sections from two
// operating-system processes at once: plain pgx's stdlib driver directly on
// PostgreSQL (the reference), and pgadvisory directly, through PgBouncer
// session pooling, and under policy hold behind transaction pooling. Every
// process must complete every section with no overlap and every unlock
// true, and pg_locks must hold no advisory lock afterwards.
func TestSQLDBSectionsTwoProcesses(t *testing.T) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Session, pgbouncer.Transaction), pgbouncer.WithWidePoolSize(poolSize))
	for _, tc := range []struct{ name, driver, dsn string }{
		{"plain-pgx-direct", viaPlainPgx, c.DirectDSN()},
		{"pgadvisory-direct", viaPgadvisory, c.DirectDSN()},
		{"pgadvisory-session-pooling", viaPgadvisory, c.WideDSN(pgbouncer.Session) + "&" + pgadvisory.ParamPoolMode + "=session"},
		{"pgadvisory-hold-transaction-pooling", viaPgadvisory, c.WideDSN(pgbouncer.Transaction) + holdParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			setup := connect(t, ctx, c.DirectDSN())
			for _, q := range []string{"DROP TABLE IF EXISTS " + sectionsTable, "CREATE TABLE " + sectionsTable + " (owner text NOT NULL)",
				"INSERT INTO " + sectionsTable + " VALUES ('0')"} {
				if _, err := setup.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			outs := runChildren(t, childSpec{Tool: sectionsTool.name, Driver: tc.driver, DSN: tc.dsn, Timeout: holdTimeout}, 2, holdKill, nil)
			for _, o := range outs {
				t.Log(o)
				if o.ExitCode != 0 || o.Result == nil || o.Result.Err != "" || o.Result.Applied != sectionsRounds {
					t.Errorf("process %d: want %d sections, no overlap, every unlock true: %v", o.Index, sectionsRounds, o)
				}
			}
			var owner string
			if err := setup.QueryRow(ctx, "SELECT owner FROM "+sectionsTable).Scan(&owner); err != nil || owner != "0" {
				t.Errorf("witness owner after the run = %q, %v; want \"0\"", owner, err)
			}
			if n, locks := waitNoAdvisoryLocks(t, ctx, setup); n != 0 {
				t.Errorf("%d advisory locks left after the processes ended: %v", n, locks)
			}
		})
	}
}
