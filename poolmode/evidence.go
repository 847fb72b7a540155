package poolmode

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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

// ParameterStatusKeys are the ParameterStatus names pgdetect.Detect reads for a pool
// mode announced by the server. PgBouncer 1.18 sends none of them (its
// ParameterStatus values are the server's), so this step only helps poolers
// that choose to announce themselves.
var ParameterStatusKeys = []string{"pgbouncer.pool_mode", "pgbouncer_pool_mode", "pool_mode"}

// Evidence records why a detection (pgdetect.Detect, or the pgadvisory
// driver) concluded what it did. Fields that a step did
// not look at stay zero.
type Evidence struct {
	// Source is the step that decided the mode.
	Source Source
	// BackendKeyPID is the process ID from the BackendKeyData message of the
	// connection (what the server or pooler claims).
	BackendKeyPID uint32
	// ServerPID is what SELECT pg_backend_pid() returned; 0 when not asked.
	ServerPID uint32
	// PoolerSuspected is true when the two PIDs differ, or when the
	// BackendKeyData PID is one no PostgreSQL backend can have (0, 1, or
	// above Linux's largest, 2^22; the server is then not asked): some pooler
	// answers the connection.
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
		fmt.Fprintf(&b, " backend_key_pid=%d", e.BackendKeyPID)
	}
	if e.ServerPID != 0 {
		fmt.Fprintf(&b, " server_pid=%d", e.ServerPID)
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

// LogAttrs is the evidence of a detection that fell back to Transaction, as
// the attributes of its log line: the BackendKeyData PID, the server's PID
// when it was asked, and why the admin console could not answer.
func (e Evidence) LogAttrs() []slog.Attr {
	attrs := []slog.Attr{slog.Uint64("backend_key_pid", uint64(e.BackendKeyPID))}
	if e.ServerPID != 0 {
		attrs = append(attrs, slog.Uint64("server_pid", uint64(e.ServerPID)))
	}
	if e.AdminError != "" {
		attrs = append(attrs, slog.String("admin_error", e.AdminError))
	}
	return attrs
}
