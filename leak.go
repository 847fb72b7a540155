package pgadvisory

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// leakCheckTimeout bounds the leak guard's round trips when a pgxpool
// connection is handed out again.
const leakCheckTimeout = 5 * time.Second

const heldLocksQuery = "SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_catalog.pg_backend_pid()"

// checkLeaks asks pg_locks whether pc's backend still holds advisory locks
// and, if so, releases them or asks for the connection to be discarded
// (action). It returns the leak to report (nil when none) and whether the
// connection may be kept. The simple protocol leaves no prepared
// statement behind.
func checkLeaks(ctx context.Context, pc *pgconn.PgConn, action LeakAction) (*LeakedLockError, bool) {
	if action == LeakKeep {
		return nil, true
	}
	keys, err := heldKeys(ctx, pc)
	if err != nil {
		return &LeakedLockError{Action: LeakDiscard, Cause: err}, false
	}
	if len(keys) == 0 {
		return nil, true
	}
	le := &LeakedLockError{Locks: len(keys), Action: action, keys: keys}
	if action == LeakRelease {
		if _, err := pc.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock_all()").ReadAll(); err != nil {
			le.Action, le.Cause = LeakDiscard, err
		}
	}
	return le, le.Action != LeakDiscard
}

const heldKeysQuery = "SELECT classid, objid, objsubid, mode FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_catalog.pg_backend_pid()"

// heldKeys lists the advisory locks pc's backend holds, each in the
// canonical form of argKey: "(k)" for a bigint key, "(a,b)" for the two
// int4 form, prefixed "shared" for a shared lock.
func heldKeys(ctx context.Context, pc *pgconn.PgConn) ([]string, error) {
	res, err := pc.Exec(ctx, heldKeysQuery).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(res) != 1 {
		return nil, errors.New("pgadvisory: pg_locks query returned no result")
	}
	keys := make([]string, 0, len(res[0].Rows))
	for _, row := range res[0].Rows {
		if len(row) != 4 {
			return nil, errors.New("pgadvisory: pg_locks query returned an unexpected row")
		}
		classid, err1 := strconv.ParseUint(string(row[0]), 10, 32)
		objid, err2 := strconv.ParseUint(string(row[1]), 10, 32)
		if err1 != nil || err2 != nil {
			return nil, errors.New("pgadvisory: pg_locks query returned a key that is not a number")
		}
		k := "("
		if string(row[3]) == "ShareLock" {
			k = "shared("
		}
		if string(row[2]) == "2" {
			k += strconv.FormatInt(int64(int32(classid)), 10) + "," + strconv.FormatInt(int64(int32(objid)), 10) + ")"
		} else {
			k += strconv.FormatInt(int64(classid<<32|objid), 10) + ")"
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// releasedLocks remembers the session locks the leak guard released, so
// that the unlock the application sends later is answered with what
// happened instead of a bare false.
type releasedLocks struct {
	mu   sync.Mutex
	n    atomic.Int32 // len(keys), read without the lock on the hot path
	keys map[string]time.Time
}

// maxReleasedLocks bounds releasedLocks; the oldest half is forgotten.
const maxReleasedLocks = 1024

func (r *releasedLocks) add(keys []string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = make(map[string]time.Time)
	}
	if len(r.keys)+len(keys) > maxReleasedLocks {
		for k, t := range r.keys {
			if t.Before(at.Add(-time.Minute)) || len(r.keys) > maxReleasedLocks/2 {
				delete(r.keys, k)
			}
		}
	}
	for _, k := range keys {
		r.keys[k] = at
	}
	r.n.Store(int32(len(r.keys)))
}

// take reports, and forgets, when the lock with key k was released.
func (r *releasedLocks) take(k string) (time.Time, bool) {
	if r.n.Load() == 0 {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.keys[k]
	if ok {
		delete(r.keys, k)
		r.n.Store(int32(len(r.keys)))
	}
	return at, ok
}

// report logs err and hands it to the error hook.
func (g *guard) report(ctx context.Context, m poolmode.Mode, err error) {
	g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, err.Error(), slog.String("pool_mode", m.String()))
	if h := g.cfg.errorHook; h != nil {
		h(ctx, err)
	}
}

// leaked reports a leak the guard cleaned up and remembers the keys it
// released, for the unlock that will come.
func (g *guard) leaked(ctx context.Context, m poolmode.Mode, le *LeakedLockError) {
	if le.Action == LeakRelease || le.Action == LeakDiscard {
		g.released.add(le.keys, time.Now())
	}
	g.report(ctx, m, le)
	g.traceLeaked(m, le)
}
