package pgadvisory

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// leakCheckTimeout bounds the leak guard's round trips when a connection
// goes back to a pgxpool (AfterRelease has no context of its own).
const leakCheckTimeout = 5 * time.Second

const heldLocksQuery = "SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_catalog.pg_backend_pid()"

// checkLeaks asks pg_locks whether pc's backend still holds advisory locks
// and, if so, releases them or asks for the connection to be discarded
// (action). It returns the leak to report (nil when none) and whether the
// connection may be kept. The simple protocol leaves no prepared
// statement behind.
func checkLeaks(ctx context.Context, pc *pgconn.PgConn, action LeakAction) (*LeakedLockError, bool) {
	n, err := heldLocks(ctx, pc)
	if err != nil {
		return &LeakedLockError{Action: LeakDiscard, Cause: err}, false
	}
	if n == 0 {
		return nil, true
	}
	le := &LeakedLockError{Locks: int(n), Action: action}
	if action == LeakRelease {
		if _, err := pc.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock_all()").ReadAll(); err != nil {
			le.Action, le.Cause = LeakDiscard, err
		}
	}
	return le, le.Action != LeakDiscard
}

// heldLocks counts the advisory locks pc's backend holds.
func heldLocks(ctx context.Context, pc *pgconn.PgConn) (int64, error) {
	res, err := pc.Exec(ctx, heldLocksQuery).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("pgadvisory: pg_locks query returned no single value")
	}
	return strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64)
}

// report logs err and hands it to the error hook.
func (g *guard) report(ctx context.Context, m poolmode.Mode, err error) {
	g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, err.Error(), slog.String("pool_mode", m.String()))
	if h := g.cfg.errorHook; h != nil {
		h(ctx, err)
	}
}
