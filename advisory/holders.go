package advisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LockInfo is one row of pg_locks for an advisory lock in the current
// database, with the session that holds or awaits it.
type LockInfo struct {
	// Key is the lock key, decoded from classid, objid and objsubid: for
	// the bigint form (objsubid 1) the key is classid<<32 | objid; for the
	// two-integer form (objsubid 2) it is (classid, objid).
	Key Key
	// PID is the server process holding or awaiting the lock. Behind a
	// pooler it is the backend's PID, not something the client knows.
	PID int
	// Granted is true for a holder, false for a waiter.
	Granted bool
	// Mode is "ExclusiveLock" or "ShareLock".
	Mode string
	// WaitingSince is when the wait began (PostgreSQL 14 and later; zero
	// for holders and older servers).
	WaitingSince time.Time
	// BlockedBy lists the PIDs the waiter waits for (pg_blocking_pids);
	// empty for holders.
	BlockedBy []int
	// User, ApplicationName, ClientAddr, State and Query come from
	// pg_stat_activity. Without the pg_read_all_stats role, the query and
	// client address of other roles' sessions are hidden by the server.
	User            string
	ApplicationName string
	ClientAddr      string
	State           string
	Query           string
	// ClientPort is the client's TCP port (0 for a Unix socket or when
	// hidden). Behind a pooler, client address and port are the pooler's
	// end of its server connection.
	ClientPort int
	// BackendType is pg_stat_activity.backend_type ("client backend" for
	// connections of clients and poolers).
	BackendType string
	// Self is true when the lock is held or awaited by the very backend
	// that answered the listing. Through a transaction pooler that means
	// the pooler lent this client a backend that still holds somebody
	// else's session lock: the listing statement takes no lock itself.
	Self bool
	// XactStart is when the session's current transaction began (zero
	// outside a transaction).
	XactStart time.Time
}

// locksSQL lists advisory locks of the current database. waitstart is read
// through to_jsonb so the statement also runs before PostgreSQL 14, where the
// column does not exist. pg_blocking_pids is called for waiters only.
const locksSQL = `SELECT l.classid::int8, l.objid::int8, l.objsubid::int4, l.pid, l.mode, l.granted,
	(to_jsonb(l) ->> 'waitstart')::timestamptz,
	CASE WHEN l.granted THEN '' ELSE array_to_string(pg_blocking_pids(l.pid), ',') END,
	coalesce(a.usename, ''), coalesce(a.application_name, ''), coalesce(host(a.client_addr), ''),
	coalesce(a.state, ''), coalesce(a.query, ''), a.xact_start,
	coalesce(a.client_port, 0), coalesce(a.backend_type, ''), l.pid = pg_backend_pid()
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND ($1::int4 IS NULL OR (l.classid::int8 = $2 AND l.objid::int8 = $3 AND l.objsubid = $1))
	AND ($4::bool IS NULL OR l.granted = $4)
ORDER BY l.objsubid, l.classid, l.objid, l.granted DESC, (to_jsonb(l) ->> 'waitstart') NULLS FIRST, l.pid`

// Locks lists every advisory lock held or awaited in the current database:
// holders first for each key, then waiters in the order they began to wait.
// It works through any pooler (pg_locks is server-wide).
func Locks(ctx context.Context, db Querier) ([]LockInfo, error) {
	return queryLocks(ctx, db, nil, nil)
}

// Holders lists the sessions that hold key (granted locks only; a shared
// lock can have several holders).
func Holders(ctx context.Context, db Querier, key Key) ([]LockInfo, error) {
	granted := true
	return queryLocks(ctx, db, &key, &granted)
}

// Waiters lists the sessions waiting for key, oldest wait first.
func Waiters(ctx context.Context, db Querier, key Key) ([]LockInfo, error) {
	granted := false
	return queryLocks(ctx, db, &key, &granted)
}

func queryLocks(ctx context.Context, db Querier, key *Key, granted *bool) (_ []LockInfo, err error) {
	if err := badArgs("list locks", ctx, db, "database handle"); err != nil {
		return nil, err
	}
	defer foreign("list locks", &err)
	var subID, classID, objID, g any // NULL unless filtered
	if key != nil {
		c, o, s := key.lockIDs()
		subID, classID, objID = int64(s), c, o
	}
	if granted != nil {
		g = *granted
	}
	rows, err := db.QueryContext(ctx, locksSQL, subID, classID, objID, g)
	if err == nil && rows == nil {
		err = errors.New("QueryContext returned neither rows nor an error")
	}
	if err != nil {
		return nil, fmt.Errorf("advisory: list locks: %w", err)
	}
	defer rows.Close()
	var out []LockInfo
	for rows.Next() {
		var (
			li                  LockInfo
			classID, objID      int64
			subID               int32
			waitStart, xactTime sql.NullTime
			blocked             string
		)
		if err := rows.Scan(&classID, &objID, &subID, &li.PID, &li.Mode, &li.Granted, &waitStart, &blocked,
			&li.User, &li.ApplicationName, &li.ClientAddr, &li.State, &li.Query, &xactTime,
			&li.ClientPort, &li.BackendType, &li.Self); err != nil {
			return nil, fmt.Errorf("advisory: list locks: %w", err)
		}
		k, ok := keyFromLockIDs(classID, objID, subID)
		if !ok {
			continue // not a key form this package knows
		}
		li.Key = k
		li.WaitingSince = waitStart.Time
		li.XactStart = xactTime.Time
		if li.BlockedBy, err = parsePIDs(blocked); err != nil {
			return nil, fmt.Errorf("advisory: list locks: %w", err)
		}
		out = append(out, li)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("advisory: list locks: %w", err)
	}
	return out, nil
}

func parsePIDs(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	pids := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("pg_blocking_pids: bad pid %q", p)
		}
		pids[i] = n
	}
	return pids, nil
}
