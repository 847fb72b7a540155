package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Policy says what happens to a session-level advisory lock call behind
// transaction or statement pooling. Direct and session mode always let lock
// calls through.
type Policy int

const (
	// PolicyReject refuses the statement with a *SessionLockError; nothing is
	// sent. The default.
	PolicyReject Policy = iota
	// PolicyRewrite rewrites session-level lock calls to their
	// transaction-level twins inside an explicit transaction (an unlock of a
	// key the transaction took returns true, of any other key false).
	// Outside a transaction it holds a statement that is one lock call, as
	// PolicyHold does, and rejects every other statement with a session lock
	// like PolicyReject.
	PolicyRewrite
	// PolicyWarn logs the statement (slog, level WARN) and sends it as is.
	PolicyWarn
	// PolicyAllow sends the statement as is.
	PolicyAllow
	// PolicyHold keeps session locks working behind transaction pooling: a
	// statement that is one session-level lock call and nothing else
	// (SELECT pg_advisory_lock($1), pg_try_advisory_lock(42) AS ok,
	// pg_advisory_unlock($1), pg_advisory_unlock_all(), shared and two-key
	// forms, integer literals or bound parameters), alone in its round trip,
	// is held by the guard: a server connection of its own, through the same
	// pooler, takes the session-level lock inside an open transaction and
	// keeps it until the client unlocks it or closes its connection, or a
	// pgxpool takes the connection back (a database/sql pool keeps it with
	// the connection, as a session's). The client sees what PostgreSQL shows
	// a session: lock waits (bounded by the caller's deadline, Close,
	// lock_timeout and statement_timeout), try-lock returns true or false,
	// locks count re-entrantly per mode, unlock returns false (with
	// PostgreSQL's WARNING) for a key not held. If a holder connection ends,
	// every later statement of the connection fails with *LockLostError.
	// Each held key costs one server connection of the pooler while held
	// (WithHoldLimits caps them); a waiting lock polls with
	// pg_try_advisory_lock in a new transaction each time and pins none. A
	// lock call that shares its round trip with other statements, or,
	// inside a transaction, its statement, is refused with *HoldUnitError
	// and nothing is taken; in autocommit a statement with more than the
	// call is rejected as under PolicyReject. Behind statement pooling,
	// which cannot keep a transaction open, it rejects.
	PolicyHold
)

// DefaultPolicy is the policy when none is given.
const DefaultPolicy = PolicyReject

var policyNames = [...]string{PolicyReject: "reject", PolicyRewrite: "rewrite", PolicyWarn: "warn", PolicyAllow: "allow", PolicyHold: "hold"}

// String returns the name accepted by the pgadvisory_policy DSN parameter.
func (p Policy) String() string {
	if p < 0 || int(p) >= len(policyNames) {
		return fmt.Sprintf("pgadvisory.Policy(%d)", int(p))
	}
	return policyNames[p]
}

// ParsePolicy parses "reject", "rewrite", "warn", "allow" or "hold", in
// any letter case (as poolmode.Parse reads pool modes).
func ParsePolicy(s string) (Policy, error) {
	if i := indexOf(policyNames[:], s); i >= 0 {
		return Policy(i), nil
	}
	return 0, fmt.Errorf("pgadvisory: unknown policy %q (accepted: %s)", s, strings.Join(policyNames[:], ", "))
}

// DynamicPolicy says what happens, behind transaction or statement pooling,
// to a statement holding dynamic SQL the scanner cannot see into (for
// example EXECUTE in a DO block): it may or may not take a session lock.
type DynamicPolicy int

const (
	// DynamicWarn logs the statement and sends it. The default.
	DynamicWarn DynamicPolicy = iota
	// DynamicReject refuses it with a *DynamicSQLError.
	DynamicReject
	// DynamicAllow sends it silently.
	DynamicAllow
)

var dynamicNames = [...]string{DynamicWarn: "warn", DynamicReject: "reject", DynamicAllow: "allow"}

// String returns the name accepted by the pgadvisory_dynamic DSN parameter.
func (d DynamicPolicy) String() string {
	if d < 0 || int(d) >= len(dynamicNames) {
		return fmt.Sprintf("pgadvisory.DynamicPolicy(%d)", int(d))
	}
	return dynamicNames[d]
}

// LeakAction says what the leak guard does with a connection that comes
// back to its pool still holding advisory locks (direct and session mode).
// database/sql keeps a session's locks with its connection (as plain pgx
// does: the pool hands the same connection back to the code that unlocks)
// and logs a warning once, except under LeakDiscard.
type LeakAction int

const (
	// LeakRelease runs pg_advisory_unlock_all() and keeps the connection
	// (pgxpool, in PrepareConn); database/sql keeps the locks with the
	// connection and warns once. The default.
	LeakRelease LeakAction = iota
	// LeakDiscard closes the connection (the server then frees its locks),
	// pgxpool and database/sql alike.
	LeakDiscard
	// LeakKeep leaves the locks on the connection, as plain pgx does: code
	// that takes a session lock through a pool and unlocks it later through
	// the same pool keeps it when both calls happen to get the same
	// connection, and leaks it to the next user otherwise.
	LeakKeep
)

var leakNames = [...]string{LeakRelease: "release", LeakDiscard: "discard", LeakKeep: "keep"}

// String returns the name accepted by the pgadvisory_leak_action DSN parameter.
func (a LeakAction) String() string {
	if a < 0 || int(a) >= len(leakNames) {
		return fmt.Sprintf("pgadvisory.LeakAction(%d)", int(a))
	}
	return leakNames[a]
}

// DefaultSafeExecMode is the pgx query exec mode the driver uses behind
// transaction and statement pooling when the DSN does not choose one. It
// caches statement descriptions and runs every query on the unnamed
// statement in one round trip: no named prepared statement is ever left on a
// pooled backend. Measured correct with 8 clients × 150 queries through
// PgBouncer 1.18 transaction pooling (so are exec and simple_protocol).
const DefaultSafeExecMode = pgx.QueryExecModeCacheDescribe

// DefaultScanCacheSize is the number of distinct statement texts whose scan
// results a connector keeps.
const DefaultScanCacheSize = 1024

// Option configures a Connector. Options given in code override the same
// setting in the DSN.
type Option func(*config) error

type config struct {
	declared      poolmode.Mode
	policy        Policy
	dynamic       DynamicPolicy
	leakAction    LeakAction
	errorHook     func(context.Context, error)
	logger        *slog.Logger
	preparedOK    bool
	safeExecMode  pgx.QueryExecMode
	scanCacheSize int
	admin         *pgconn.Config
	pipelineBegin bool
	holdPerConn   int    // PolicyHold: keys one connection may hold
	holdPerGuard  int    // PolicyHold: keys all connections of the config may hold
	tracer        Tracer // WithTracer; nil: none

	// admin parts from the DSN, assembled in finish.
	adminDSN, adminUser, adminPassword, adminHost, adminPort, adminDatabase string
}

func defaultConfig() config {
	return config{policy: DefaultPolicy, safeExecMode: DefaultSafeExecMode, scanCacheSize: DefaultScanCacheSize, pipelineBegin: DefaultPipelineBegin,
		holdPerConn: DefaultHoldPerConn, holdPerGuard: DefaultHoldPerGuard}
}

// WithPoolMode declares the pool mode instead of detecting it. Unknown means
// detect (the default).
func WithPoolMode(m poolmode.Mode) Option {
	return func(c *config) error {
		if _, err := poolmode.Parse(m.String()); err != nil {
			return fmt.Errorf("pgadvisory: WithPoolMode: %w", err)
		}
		c.declared = m
		return nil
	}
}

// WithPolicy sets the policy for session-level lock calls behind transaction
// and statement pooling. Default PolicyReject.
func WithPolicy(p Policy) Option {
	return func(c *config) error {
		if p < 0 || int(p) >= len(policyNames) {
			return fmt.Errorf("pgadvisory: WithPolicy: unknown policy %d", int(p))
		}
		c.policy = p
		return nil
	}
}

// WithDynamicPolicy sets what happens to dynamic SQL behind transaction and
// statement pooling. Default DynamicWarn.
func WithDynamicPolicy(d DynamicPolicy) Option {
	return func(c *config) error {
		if d < 0 || int(d) >= len(dynamicNames) {
			return fmt.Errorf("pgadvisory: WithDynamicPolicy: unknown dynamic policy %d", int(d))
		}
		c.dynamic = d
		return nil
	}
}

// WithLeakAction sets what ResetSession does with a connection that returns
// to the pool holding advisory locks. Default LeakRelease.
func WithLeakAction(a LeakAction) Option {
	return func(c *config) error {
		if a < 0 || int(a) >= len(leakNames) {
			return fmt.Errorf("pgadvisory: WithLeakAction: unknown action %d", int(a))
		}
		c.leakAction = a
		return nil
	}
}

// WithErrorHook registers a function that receives errors the driver handles
// on its own and that no caller would see, such as *LeakedLockError from
// ResetSession. It must be safe for concurrent use.
func WithErrorHook(f func(context.Context, error)) Option {
	return func(c *config) error { c.errorHook = f; return nil }
}

// WithLogger sets the logger for warnings (policy warn, leaked locks, the
// detection fallback). Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error { c.logger = l; return nil }
}

// WithPreparedStatements declares that the pooler handles named prepared
// statements (PgBouncer ≥ 1.21 with max_prepared_statements > 0): the driver
// then keeps pgx's exec mode and server-side prepared statements behind
// transaction pooling. DSN: pgadvisory_prepared_statements=true.
func WithPreparedStatements(ok bool) Option {
	return func(c *config) error { c.preparedOK = ok; return nil }
}

// WithSafeExecMode sets the exec mode used behind transaction and statement
// pooling when the DSN chooses none. Only cache_describe, exec and
// simple_protocol are accepted. Default DefaultSafeExecMode.
func WithSafeExecMode(m pgx.QueryExecMode) Option {
	return func(c *config) error {
		if !safeExecMode(m) {
			return fmt.Errorf("pgadvisory: WithSafeExecMode: %s is not safe behind transaction pooling (accepted: cache_describe, exec, simple_protocol)", execModeName(m))
		}
		c.safeExecMode = m
		return nil
	}
}

// WithScanCacheSize sets how many distinct statement texts' scan results are
// cached (only texts that mention an advisory function are scanned).
func WithScanCacheSize(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("pgadvisory: WithScanCacheSize: negative size %d", n)
		}
		c.scanCacheSize = n
		return nil
	}
}

// DefaultPipelineBegin says whether a transaction's BEGIN travels with its
// first statement when no option or DSN parameter says otherwise.
const DefaultPipelineBegin = true

// WithPipelineBegin turns the deferred BEGIN on (the default) or off. When
// on, a BEGIN sent alone (pgx's Begin/BeginTx, database/sql's BeginTx) is
// answered by the guard and goes to the server in the same network write as
// the transaction's first statement, so a lock cycle (BEGIN; SELECT
// pg_advisory_xact_lock(...); COMMIT) costs two round trips instead of
// three. A transaction that runs no statement sends nothing at all, not even
// on Commit or Rollback. If the BEGIN itself fails, the first statement
// returns its error and does not run; later statements fail with 25P02 and
// Commit rolls back. Off, BEGIN goes to the server at once, as without
// pgadvisory. Statement pooling never defers (it refuses transactions).
// DSN: pgadvisory_pipeline_begin=true|false.
func WithPipelineBegin(on bool) Option {
	return func(c *config) error { c.pipelineBegin = on; return nil }
}

// WithHoldLimits caps the session locks PolicyHold (and PolicyRewrite in
// autocommit) keeps: how many distinct keys one connection may hold, and
// how many all connections of this config (a pgxpool.Pool, a sql.DB) may
// hold together. Each held key keeps one server connection of the pooler
// in a transaction, so keep the total below the pooler's pool size. A
// lock past a cap fails with *HoldLimitError. Defaults DefaultHoldPerConn
// and DefaultHoldPerGuard. DSN: pgadvisory_hold_max_per_conn,
// pgadvisory_hold_max.
func WithHoldLimits(perConn, total int) Option {
	return func(c *config) error {
		if perConn < 1 || total < 1 {
			return fmt.Errorf("pgadvisory: WithHoldLimits: limits must be at least 1 (got %d per connection, %d in all)", perConn, total)
		}
		c.holdPerConn, c.holdPerGuard = perConn, total
		return nil
	}
}

// WithAdminConsole gives the PgBouncer admin console to ask for the pool
// mode during detection, as a connection string (database "pgbouncer").
func WithAdminConsole(dsn string) Option {
	return func(c *config) error {
		if strings.TrimSpace(dsn) == "" {
			// pgconn would fill in libpq defaults (localhost:5432, the OS
			// user): not the admin console anyone meant.
			return errors.New("pgadvisory: WithAdminConsole: empty DSN")
		}
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			return fmt.Errorf("pgadvisory: WithAdminConsole: %w", err) // pgconn redacts passwords
		}
		c.admin = cfg
		return nil
	}
}

// WithAdminCredentials gives a user and password for PgBouncer's admin
// console on the application DSN's host and port (database "pgbouncer"),
// like the pgadvisory_admin_user and pgadvisory_admin_password parameters.
func WithAdminCredentials(user, password string) Option {
	return func(c *config) error {
		if user == "" {
			return errors.New("pgadvisory: WithAdminCredentials: empty user")
		}
		c.adminUser, c.adminPassword = user, password
		return nil
	}
}

func safeExecMode(m pgx.QueryExecMode) bool {
	return m == pgx.QueryExecModeCacheDescribe || m == pgx.QueryExecModeExec || m == pgx.QueryExecModeSimpleProtocol
}

// DSN parameters. All carry the prefix "pgadvisory_" and are removed before
// pgx connects.
const (
	ParamPoolMode           = "pgadvisory_pool_mode"           // auto|direct|session|transaction|statement
	ParamPolicy             = "pgadvisory_policy"              // reject|rewrite|warn|allow|hold
	ParamDynamic            = "pgadvisory_dynamic"             // warn|reject|allow
	ParamLeakAction         = "pgadvisory_leak_action"         // release|discard|keep
	ParamPreparedStatements = "pgadvisory_prepared_statements" // true|false
	ParamAdminDSN           = "pgadvisory_admin_dsn"           // full admin-console connection string
	ParamAdminUser          = "pgadvisory_admin_user"
	ParamAdminPassword      = "pgadvisory_admin_password"
	ParamAdminHost          = "pgadvisory_admin_host"        // default: the DSN's host
	ParamAdminPort          = "pgadvisory_admin_port"        // default: the DSN's port
	ParamAdminDatabase      = "pgadvisory_admin_database"    // default: pgbouncer
	ParamPipelineBegin      = "pgadvisory_pipeline_begin"    // true|false (default true)
	ParamHoldMaxPerConn     = "pgadvisory_hold_max_per_conn" // keys one connection may hold (policy hold)
	ParamHoldMax            = "pgadvisory_hold_max"          // keys all connections may hold (policy hold)
)

var secretParams = map[string]bool{ParamAdminPassword: true, ParamAdminDSN: true}

// knownParams lists every parameter applyParam takes, for the error that
// names an unknown one.
var knownParams = []string{ParamPoolMode, ParamPolicy, ParamDynamic, ParamLeakAction, ParamPreparedStatements,
	ParamPipelineBegin, ParamHoldMaxPerConn, ParamHoldMax,
	ParamAdminDSN, ParamAdminUser, ParamAdminPassword, ParamAdminHost, ParamAdminPort, ParamAdminDatabase}

// paramError names the parameter and the accepted values; the value is left
// out for secret parameters.
func paramError(key, value, accepted string) error {
	if secretParams[key] {
		return fmt.Errorf("pgadvisory: invalid value for DSN parameter %s (accepted: %s)", key, accepted)
	}
	return fmt.Errorf("pgadvisory: invalid value %q for DSN parameter %s (accepted: %s)", value, key, accepted)
}

// takeParams removes every pgadvisory_* key from params (pgx puts unknown DSN
// keys in RuntimeParams, for URL and keyword/value DSNs alike) and applies
// them to c.
func (c *config) takeParams(params map[string]string) error {
	keys := make([]string, 0, 4)
	for k := range params {
		if strings.HasPrefix(k, "pgadvisory_") {
			keys = append(keys, k)
		} else if strings.HasPrefix(strings.ToLower(k), "pgadvisory_") {
			// It would reach the server as a startup parameter and fail
			// there with a far less helpful message.
			return fmt.Errorf("pgadvisory: DSN parameter %s: pgadvisory parameter names are lower case (%s)", k, strings.ToLower(k))
		}
	}
	sort.Strings(keys)
	if _, ok := params[ParamAdminDSN]; ok {
		if _, ok := params[ParamAdminUser]; ok {
			return fmt.Errorf("pgadvisory: DSN parameters %s and %s exclude each other: give the admin console as a whole DSN or as user and password", ParamAdminDSN, ParamAdminUser)
		}
	}
	for _, k := range keys {
		v := params[k]
		delete(params, k)
		if v == "" {
			// An empty value must not quietly mean "not set".
			return fmt.Errorf("pgadvisory: empty value for DSN parameter %s", k)
		}
		if err := c.applyParam(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (c *config) applyParam(k, v string) error {
	switch k {
	case ParamPoolMode:
		if strings.EqualFold(v, "auto") {
			c.declared = poolmode.Unknown
			return nil
		}
		m, err := poolmode.Parse(v)
		if err != nil || m == poolmode.Unknown {
			return paramError(k, v, "auto, direct, session, transaction, statement")
		}
		c.declared = m
	case ParamPolicy:
		p, err := ParsePolicy(v)
		if err != nil {
			return paramError(k, v, strings.Join(policyNames[:], ", "))
		}
		c.policy = p
	case ParamDynamic:
		i := indexOf(dynamicNames[:], v)
		if i < 0 {
			return paramError(k, v, strings.Join(dynamicNames[:], ", "))
		}
		c.dynamic = DynamicPolicy(i)
	case ParamLeakAction:
		i := indexOf(leakNames[:], v)
		if i < 0 {
			return paramError(k, v, strings.Join(leakNames[:], ", "))
		}
		c.leakAction = LeakAction(i)
	case ParamPreparedStatements:
		b, err := parseBool(v)
		if err != nil {
			return paramError(k, v, "true, false")
		}
		c.preparedOK = b
	case ParamPipelineBegin:
		b, err := parseBool(v)
		if err != nil {
			return paramError(k, v, "true, false")
		}
		c.pipelineBegin = b
	case ParamHoldMaxPerConn, ParamHoldMax:
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return paramError(k, v, "a positive number of keys")
		}
		if k == ParamHoldMax {
			c.holdPerGuard = n
		} else {
			c.holdPerConn = n
		}
	case ParamAdminDSN:
		c.adminDSN = v
	case ParamAdminUser:
		c.adminUser = v
	case ParamAdminPassword:
		c.adminPassword = v
	case ParamAdminHost:
		c.adminHost = v
	case ParamAdminPort:
		if p, err := strconv.ParseUint(v, 10, 16); err != nil || p == 0 {
			return paramError(k, v, "a TCP port number")
		}
		c.adminPort = v
	case ParamAdminDatabase:
		c.adminDatabase = v
	default:
		return fmt.Errorf("pgadvisory: unknown DSN parameter %s (known: %s)", k, strings.Join(knownParams, ", "))
	}
	return nil
}

// indexOf finds v among names in any letter case: every pgadvisory_* value
// is read that way, as poolmode.Parse reads pool modes.
func indexOf(names []string, v string) int {
	for i, n := range names {
		if strings.EqualFold(n, v) {
			return i
		}
	}
	return -1
}

// parseBool is strconv.ParseBool in any letter case ("True", "FALSE", "t").
func parseBool(v string) (bool, error) { return strconv.ParseBool(strings.ToLower(v)) }

// buildAdmin assembles the admin-console config from the DSN parameters,
// defaulting host and port to the application's connection.
func (c *config) buildAdmin(host string, port uint16) error {
	if c.admin != nil {
		return nil
	}
	if c.adminDSN != "" {
		cfg, err := pgconn.ParseConfig(c.adminDSN)
		if err != nil {
			return fmt.Errorf("pgadvisory: DSN parameter %s: %w", ParamAdminDSN, err) // pgconn redacts passwords
		}
		c.admin = cfg
		return nil
	}
	if c.adminUser == "" {
		if c.adminPassword != "" || c.adminHost != "" || c.adminPort != "" || c.adminDatabase != "" {
			return fmt.Errorf("pgadvisory: DSN parameter %s is required with the other pgadvisory_admin_* parameters", ParamAdminUser)
		}
		return nil
	}
	if c.adminHost == "" {
		c.adminHost = host
	}
	if c.adminPort == "" {
		c.adminPort = strconv.Itoa(int(port))
	}
	if c.adminDatabase == "" {
		c.adminDatabase = "pgbouncer"
	}
	kv := fmt.Sprintf("host=%s port=%s dbname=%s user=%s sslmode=disable",
		quoteKV(c.adminHost), c.adminPort, quoteKV(c.adminDatabase), quoteKV(c.adminUser))
	cfg, err := pgconn.ParseConfig(kv)
	if err != nil {
		return fmt.Errorf("pgadvisory: admin console settings: %w", err)
	}
	cfg.Password = c.adminPassword
	c.admin = cfg
	return nil
}

func quoteKV(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// duplicateParam returns the first pgadvisory_* parameter that appears more
// than once in dsn (URL or keyword/value), or "". pgx keeps one of the
// values silently — the first in a URL, the last in keyword/value form — so
// a contradictory DSN would otherwise be accepted. A DSN that does not
// tokenise is left to pgx to reject.
func duplicateParam(dsn string) string {
	seen := map[string]bool{}
	dup := func(k string) bool {
		if !strings.HasPrefix(k, "pgadvisory_") {
			return false
		}
		if seen[k] {
			return true
		}
		seen[k] = true
		return false
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return ""
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return ""
		}
		names := make([]string, 0, len(q))
		for k, vs := range q {
			if len(vs) > 1 && strings.HasPrefix(k, "pgadvisory_") {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		if len(names) > 0 {
			return names[0]
		}
		return ""
	}
	// keyword/value, as libpq tokenises it: key = value, where a value is
	// either '...' (backslash escapes) or a run of non-blanks (backslash
	// escapes).
	s := dsn
	i := 0
	blank := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	for {
		for i < len(s) && blank(s[i]) {
			i++
		}
		if i >= len(s) {
			return ""
		}
		start := i
		for i < len(s) && s[i] != '=' && !blank(s[i]) {
			i++
		}
		key := s[start:i]
		for i < len(s) && blank(s[i]) {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			return ""
		}
		i++
		for i < len(s) && blank(s[i]) {
			i++
		}
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return ""
			}
			i++
		} else {
			for i < len(s) && !blank(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
		}
		if dup(key) {
			return key
		}
	}
}
