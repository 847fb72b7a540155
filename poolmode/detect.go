package poolmode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Source names where a detected Mode came from.
type Source string

const (
	// SourceDeclared: the user declared the mode (option or DSN parameter).
	SourceDeclared Source = "declared"
	// SourceParameterStatus: the server announced the pool mode in a
	// ParameterStatus message at connect time.
	SourceParameterStatus Source = "parameter_status"
	// SourceBackendPID: the BackendKeyData PID matched pg_backend_pid(), so
	// there is no pooler in between.
	SourceBackendPID Source = "backend_pid"
	// SourceAdminConsole: PgBouncer's admin console (SHOW POOLS) named the
	// mode of our database and user.
	SourceAdminConsole Source = "admin_console"
	// SourceFallback: a pooler is in between but nothing identified its mode;
	// Transaction is assumed because it is the strictest mode that still
	// allows transactions (fail safe).
	SourceFallback Source = "fallback"
	// SourcePoolerRefusal: the pooler refused a transaction as only
	// statement pooling does ("transaction blocks not allowed in statement
	// pooling mode").
	SourcePoolerRefusal Source = "pooler_refusal"
)

// ParameterStatusKeys are the ParameterStatus names Detect reads for a pool
// mode announced by the server. PgBouncer 1.18 sends none of them (its
// ParameterStatus values are the server's), so this step only helps poolers
// that choose to announce themselves.
var ParameterStatusKeys = []string{"pgbouncer.pool_mode", "pgbouncer_pool_mode", "pool_mode"}

// Evidence records why Detect concluded what it did. Fields that a step did
// not look at stay zero.
type Evidence struct {
	// Source is the step that decided the mode.
	Source Source
	// BackendKeyPID is the process ID from the BackendKeyData message of the
	// connection (what the server or pooler claims).
	BackendKeyPID uint32
	// ServerPID is what SELECT pg_backend_pid() returned; 0 when not asked.
	ServerPID uint32
	// PoolerSuspected is true when the two PIDs differ: some pooler answers
	// the connection.
	PoolerSuspected bool
	// ParameterStatus is the announced pool mode, when a server sent one.
	ParameterStatus string
	// AdminPoolMode is the pool_mode column of the SHOW POOLS row matching
	// Database and User, when the admin console was asked.
	AdminPoolMode string
	// AdminError is why asking the admin console failed, if it did. The
	// detection then falls back to Transaction.
	AdminError string
	// PgBouncerVersion is the admin console's server_version (for example
	// "1.18.0/bouncer") when it was asked.
	PgBouncerVersion string
	// Database and User are the names the pool was looked up by.
	Database, User string
}

// String summarises the evidence in one line.
func (e Evidence) String() string {
	var b strings.Builder
	b.WriteString("source=" + string(e.Source))
	if e.BackendKeyPID != 0 || e.ServerPID != 0 {
		fmt.Fprintf(&b, " backend_key_pid=%d server_pid=%d", e.BackendKeyPID, e.ServerPID)
	}
	if e.ParameterStatus != "" {
		b.WriteString(" parameter_status=" + e.ParameterStatus)
	}
	if e.PgBouncerVersion != "" {
		b.WriteString(" pgbouncer=" + e.PgBouncerVersion)
	}
	if e.AdminPoolMode != "" {
		b.WriteString(" admin_pool_mode=" + e.AdminPoolMode)
	}
	if e.AdminError != "" {
		b.WriteString(" admin_error=" + strconv.Quote(e.AdminError))
	}
	return b.String()
}

// DetectOptions tunes Detect.
type DetectOptions struct {
	// Declared, when not Unknown, is returned at once with SourceDeclared and
	// no round trip.
	Declared Mode
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
// Detect costs one round trip on pc (the pg_backend_pid query, sent with the
// simple protocol so no prepared statement is left behind), plus one short
// admin-console connection when a pooler is suspected and credentials are
// given. pc must be idle.
func Detect(ctx context.Context, pc *pgconn.PgConn, opts DetectOptions) (Mode, Evidence, error) {
	if opts.Declared != Unknown {
		if _, err := Parse(opts.Declared.String()); err != nil {
			return Unknown, Evidence{}, fmt.Errorf("poolmode: invalid declared mode %d", int(opts.Declared))
		}
		return opts.Declared, Evidence{Source: SourceDeclared}, nil
	}
	if pc == nil {
		return Unknown, Evidence{}, errors.New("poolmode: detect needs a connection")
	}
	ev := Evidence{Database: opts.Database, User: opts.User, BackendKeyPID: pc.PID()}
	for _, k := range ParameterStatusKeys {
		if v := pc.ParameterStatus(k); v != "" {
			if m, err := parsePoolerMode(v); err == nil {
				ev.Source, ev.ParameterStatus = SourceParameterStatus, v
				return m, ev, nil
			}
		}
	}
	pid, err := ServerPID(ctx, pc)
	if err != nil {
		return Unknown, ev, err
	}
	ev.ServerPID = pid
	if pid == ev.BackendKeyPID {
		ev.Source = SourceBackendPID
		return Direct, ev, nil
	}
	ev.PoolerSuspected = true
	if opts.Admin != nil {
		m, version, poolMode, err := AskAdmin(ctx, opts.Admin, opts.Database, opts.User)
		ev.PgBouncerVersion, ev.AdminPoolMode = version, poolMode
		if err == nil {
			ev.Source = SourceAdminConsole
			return m, ev, nil
		}
		ev.AdminError = err.Error()
	}
	ev.Source = SourceFallback
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	attrs := []slog.Attr{slog.Uint64("backend_key_pid", uint64(ev.BackendKeyPID)), slog.Uint64("server_pid", uint64(ev.ServerPID))}
	if ev.AdminError != "" {
		attrs = append(attrs, slog.String("admin_error", ev.AdminError))
	}
	logger.LogAttrs(ctx, slog.LevelWarn,
		"pgadvisory: a connection pooler answers this connection but its pool mode is unknown; assuming transaction pooling (session-level advisory locks are refused). Declare it with the DSN parameter pgadvisory_pool_mode=session|transaction|statement, or give admin-console credentials (pgadvisory_admin_user, pgadvisory_admin_password)",
		attrs...)
	return Transaction, ev, nil
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
func AskAdmin(ctx context.Context, admin *pgconn.Config, database, user string) (m Mode, version, poolMode string, err error) {
	conn, err := pgconn.ConnectConfig(ctx, admin)
	if err != nil {
		// pgconn's connect errors do not contain the password.
		return Unknown, "", "", fmt.Errorf("poolmode: connect to admin console: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	version = conn.ParameterStatus("server_version")
	res, err := conn.Exec(ctx, "SHOW POOLS").ReadAll()
	if err != nil {
		return Unknown, version, "", fmt.Errorf("poolmode: admin console SHOW POOLS: %w", err)
	}
	if len(res) != 1 {
		return Unknown, version, "", errors.New("poolmode: admin console SHOW POOLS returned no result")
	}
	poolMode, err = findPool(res[0], database, user)
	if err != nil {
		return Unknown, version, "", err
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
func parsePoolerMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "session":
		return Session, nil
	case "transaction":
		return Transaction, nil
	case "statement":
		return Statement, nil
	}
	return Unknown, fmt.Errorf("poolmode: unknown pooler pool mode %q", s)
}
