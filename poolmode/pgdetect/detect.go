// Package pgdetect detects the pool mode behind a live pgx connection
// (pgconn): the round trips that package poolmode's names describe.
//
// It is a package of its own so that poolmode, which advisory's API uses
// with any driver, links nothing of pgx. Detect, ServerPID and AskAdmin
// were poolmode.Detect, poolmode.ServerPID and poolmode.AskAdmin;
// poolmode.DetectOptions is Options.
package pgdetect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Options tunes Detect.
type Options struct {
	// Declared, when not Unknown, is returned at once with SourceDeclared and
	// no round trip.
	Declared poolmode.Mode
	// Admin is the PgBouncer admin console to ask when a pooler is
	// suspected. Nil skips the step.
	Admin *pgconn.Config
	// Database and User identify our pool in SHOW POOLS (the database name
	// as the client wrote it, which is PgBouncer's database entry).
	Database, User string
	// Logger receives the one line written when the mode falls back to
	// Transaction. Nil means slog.Default().
	Logger *slog.Logger
}

// Detect works out the pool mode behind pc, in this order: declared;
// a ParameterStatus announcing the mode; the BackendKeyData PID against
// SELECT pg_backend_pid() (equal means Direct — every common pooler sends a
// made-up PID); PgBouncer's admin console (SHOW POOLS, simple query
// protocol) when opts.Admin is set; otherwise Transaction, with one log line
// saying how to declare the mode.
//
// Detect costs at most one round trip on pc (the pg_backend_pid query, sent
// with the simple protocol so no prepared statement is left behind), and
// none when the BackendKeyData PID is one no backend can have
// (NoBackendPID: a pooler made it up), plus one short
// admin-console connection when a pooler is suspected and credentials are
// given. pc must be idle.
func Detect(ctx context.Context, pc *pgconn.PgConn, opts Options) (poolmode.Mode, poolmode.Evidence, error) {
	if opts.Declared != poolmode.Unknown {
		if _, err := poolmode.Parse(opts.Declared.String()); err != nil {
			return poolmode.Unknown, poolmode.Evidence{}, fmt.Errorf("poolmode: invalid declared mode %d", int(opts.Declared))
		}
		return opts.Declared, poolmode.Evidence{Source: poolmode.SourceDeclared}, nil
	}
	if pc == nil {
		return poolmode.Unknown, poolmode.Evidence{}, errors.New("poolmode: detect needs a connection")
	}
	ev := poolmode.Evidence{Database: opts.Database, User: opts.User, BackendKeyPID: pc.PID()}
	for _, k := range poolmode.ParameterStatusKeys {
		if v := pc.ParameterStatus(k); v != "" {
			if m, err := parsePoolerMode(v); err == nil {
				ev.Source, ev.ParameterStatus = poolmode.SourceParameterStatus, v
				return m, ev, nil
			}
		}
	}
	if !NoBackendPID(ev.BackendKeyPID) {
		// The PID may be a backend's: ask the server whose it is.
		pid, err := ServerPID(ctx, pc)
		if err != nil {
			return poolmode.Unknown, ev, err
		}
		ev.ServerPID = pid
		if pid == ev.BackendKeyPID {
			ev.Source = poolmode.SourceBackendPID
			return poolmode.Direct, ev, nil
		}
	}
	ev.PoolerSuspected = true
	if opts.Admin != nil {
		m, version, poolMode, err := AskAdmin(ctx, opts.Admin, opts.Database, opts.User)
		ev.PgBouncerVersion, ev.AdminPoolMode = version, poolMode
		if err == nil {
			ev.Source = poolmode.SourceAdminConsole
			return m, ev, nil
		}
		ev.AdminError = err.Error()
	}
	ev.Source = poolmode.SourceFallback
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(ctx, slog.LevelWarn,
		"pgadvisory: a connection pooler answers and its pool mode is unknown: assuming transaction pooling, where session-level advisory locks leak to other clients; declare it with the DSN parameter pgadvisory_pool_mode=session|transaction|statement, or give admin-console credentials (pgadvisory_admin_user, pgadvisory_admin_password)",
		ev.LogAttrs()...)
	return poolmode.Transaction, ev, nil
}

// MaxBackendPID is the largest process ID a PostgreSQL backend can have:
// Linux's limit for pid_max on 64-bit systems (the other systems
// PostgreSQL runs on use smaller ones).
const MaxBackendPID = 1 << 22

// NoBackendPID reports whether pid, a BackendKeyData process ID, is one no
// PostgreSQL backend can have: 0; 1, the init process on Unix (a backend is
// a child of the postmaster, so even a postmaster run as PID 1 in a
// container has none), and on no process at all on Windows, whose PIDs are
// multiples of 4; or above MaxBackendPID. PgBouncer sends
// a random 32-bit PID, so all but about one connection in a thousand
// through it are recognised this way, without a round trip.
func NoBackendPID(pid uint32) bool {
	return pid <= 1 || pid > MaxBackendPID
}

// ServerPID runs SELECT pg_backend_pid() on pc with the simple query
// protocol and returns the result.
func ServerPID(ctx context.Context, pc *pgconn.PgConn) (uint32, error) {
	res, err := pc.Exec(ctx, "SELECT pg_backend_pid()").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("poolmode: select pg_backend_pid(): %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("poolmode: select pg_backend_pid() returned no single value")
	}
	v, err := strconv.ParseUint(string(res[0].Rows[0][0]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("poolmode: pg_backend_pid() returned %q: %w", res[0].Rows[0][0], err)
	}
	return uint32(v), nil
}

// AskAdmin connects to a PgBouncer admin console, runs SHOW POOLS with the
// simple query protocol (the console refuses the
// extended one), and returns the mode of the row for database and user,
// the console's server_version and the raw pool_mode text. An empty
// database or user matches any row only when exactly one row is left.
func AskAdmin(ctx context.Context, admin *pgconn.Config, database, user string) (m poolmode.Mode, version, poolMode string, err error) {
	conn, err := pgconn.ConnectConfig(ctx, admin)
	if err != nil {
		// pgconn's connect errors do not contain the password.
		return poolmode.Unknown, "", "", fmt.Errorf("poolmode: connect to admin console: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	version = conn.ParameterStatus("server_version")
	res, err := conn.Exec(ctx, "SHOW POOLS").ReadAll()
	if err != nil {
		return poolmode.Unknown, version, "", fmt.Errorf("poolmode: admin console SHOW POOLS: %w", err)
	}
	if len(res) != 1 {
		return poolmode.Unknown, version, "", errors.New("poolmode: admin console SHOW POOLS returned no result")
	}
	poolMode, err = findPool(res[0], database, user)
	if err != nil {
		return poolmode.Unknown, version, "", err
	}
	m, err = parsePoolerMode(poolMode)
	return m, version, poolMode, err
}

func findPool(r *pgconn.Result, database, user string) (string, error) {
	col := map[string]int{}
	for i, fd := range r.FieldDescriptions {
		col[fd.Name] = i
	}
	dbi, ok1 := col["database"]
	ui, ok2 := col["user"]
	pmi, ok3 := col["pool_mode"]
	if !ok1 || !ok2 || !ok3 {
		return "", errors.New("poolmode: admin console SHOW POOLS has no database/user/pool_mode columns (PgBouncer older than 1.x?)")
	}
	var found []string
	for _, row := range r.Rows {
		if (database == "" || string(row[dbi]) == database) && (user == "" || string(row[ui]) == user) {
			found = append(found, string(row[pmi]))
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0:
		return "", fmt.Errorf("poolmode: admin console SHOW POOLS has no pool for database %q and user %q", database, user)
	default:
		return "", fmt.Errorf("poolmode: admin console SHOW POOLS has %d pools for database %q and user %q", len(found), database, user)
	}
}

// parsePoolerMode maps a pooler's pool-mode name to a Mode.
func parsePoolerMode(s string) (poolmode.Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "session":
		return poolmode.Session, nil
	case "transaction":
		return poolmode.Transaction, nil
	case "statement":
		return poolmode.Statement, nil
	}
	return poolmode.Unknown, fmt.Errorf("poolmode: unknown pooler pool mode %q", s)
}
