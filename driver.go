package pgadvisory

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// DriverName is the name the driver registers with database/sql.
const DriverName = "pgadvisory"

func init() {
	if !slices.Contains(sql.Drivers(), DriverName) {
		sql.Register(DriverName, &Driver{})
	}
	// sqlx picks bind variables by driver name and falls back to "?" for
	// names it does not know, which breaks NamedExec and Rebind on
	// PostgreSQL; tell it we speak $1.
	sqlx.BindDriver(DriverName, sqlx.DOLLAR)
}

// Driver is the database/sql driver registered as "pgadvisory". Its DSN is
// a pgx DSN (URL or keyword/value) that may carry pgadvisory_* parameters.
type Driver struct{}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.DriverContext = (*Driver)(nil)
	_ driver.Connector     = (*Connector)(nil)
	_ io.Closer            = (*Connector)(nil)
)

// Open opens one connection. database/sql uses OpenConnector instead, so the
// pool-mode conclusion is shared by the whole *sql.DB.
func (d *Driver) Open(dsn string) (driver.Conn, error) {
	c, err := NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return c.Connect(context.Background())
}

// OpenConnector parses dsn and returns a Connector; sql.Open calls it once
// per *sql.DB.
func (d *Driver) OpenConnector(dsn string) (driver.Connector, error) {
	return NewConnector(dsn)
}

// Connector creates pgadvisory connections. It detects the pool mode on its
// first physical connection and reuses the conclusion for every later one
// (a failed detection is retried on the next connection). Create it with
// NewConnector, NewConnectorConfig or Wrap; it is safe for concurrent use.
type Connector struct {
	inner   driver.Connector
	cfg     config
	scanner *lockscan.Scanner

	// pgx-built connectors only.
	pgxConfig    *pgx.ConnConfig
	explicitExec bool // the DSN chose default_query_exec_mode

	mu       sync.Mutex
	known    bool
	mode     poolmode.Mode
	evidence poolmode.Evidence
}

// NewConnector returns a Connector for a pgx DSN (URL or keyword/value).
// pgadvisory_* parameters are removed before pgx sees the DSN; options
// override them.
func NewConnector(dsn string, opts ...Option) (*Connector, error) {
	if k := duplicateParam(dsn); k != "" {
		return nil, fmt.Errorf("pgadvisory: DSN parameter %s given more than once", k)
	}
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgadvisory: %w", err) // pgconn's ParseConfigError redacts passwords
	}
	// pgx consumes default_query_exec_mode; look at the raw settings to know
	// whether the user chose it.
	raw, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgadvisory: %w", err)
	}
	_, explicit := raw.RuntimeParams["default_query_exec_mode"]
	return newPgxConnector(pc, explicit, opts)
}

// NewConnectorConfig returns a Connector for a pgx config (created by
// pgx.ParseConfig). pgadvisory_* keys in RuntimeParams are taken out and
// applied; options override them. Since a config cannot tell a chosen
// cache_statement from the default, DefaultQueryExecMode cache_statement is
// treated as not chosen; describe_exec counts as an explicit choice.
func NewConnectorConfig(cfg *pgx.ConnConfig, opts ...Option) (*Connector, error) {
	if cfg == nil {
		return nil, errors.New("pgadvisory: NewConnectorConfig: nil config")
	}
	cfg = cfg.Copy()
	return newPgxConnector(cfg, cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement, opts)
}

func newPgxConnector(pc *pgx.ConnConfig, explicit bool, opts []Option) (*Connector, error) {
	c := &Connector{pgxConfig: pc, explicitExec: explicit, cfg: defaultConfig()}
	if err := c.cfg.takeParams(pc.RuntimeParams); err != nil {
		return nil, err
	}
	if err := c.applyOptions(opts); err != nil {
		return nil, err
	}
	if err := c.cfg.buildAdmin(pc.Host, pc.Port); err != nil {
		return nil, err
	}
	if explicit && !safeExecMode(pc.DefaultQueryExecMode) && !c.cfg.preparedOK && !c.cfg.declared.SessionLocksSafe() && c.cfg.declared != poolmode.Unknown {
		return nil, c.unsafeExecErr(c.cfg.declared, pc.DefaultQueryExecMode)
	}
	c.inner = stdlib.GetConnector(*pc, stdlib.OptionBeforeConnect(c.beforeConnect))
	c.seed()
	return c, nil
}

// Wrap returns a Connector that sends statements through inner after the
// policy checks: any database/sql connector works (pgx stdlib, go-sqlmock,
// lib/pq). Pool-mode detection needs a pgx connection; for another driver
// declare the mode with WithPoolMode, or the fail-safe Transaction applies.
// When inner yields *stdlib.Conn with an unsafe exec mode behind transaction
// or statement pooling, a safe mode is passed per query.
func Wrap(inner driver.Connector, opts ...Option) (*Connector, error) {
	if inner == nil {
		return nil, errors.New("pgadvisory: Wrap: nil connector")
	}
	c := &Connector{inner: inner, cfg: defaultConfig()}
	if err := c.applyOptions(opts); err != nil {
		return nil, err
	}
	c.seed()
	return c, nil
}

// OpenDB is sql.OpenDB(NewConnector(dsn, opts...)).
func OpenDB(dsn string, opts ...Option) (*sql.DB, error) {
	c, err := NewConnector(dsn, opts...)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

func (c *Connector) applyOptions(opts []Option) error {
	for i, o := range opts {
		if o == nil {
			// Most likely an option variable that was never assigned.
			return fmt.Errorf("pgadvisory: option %d of %d is nil", i+1, len(opts))
		}
		if err := o(&c.cfg); err != nil {
			return err
		}
	}
	if c.cfg.logger == nil {
		c.cfg.logger = slog.Default()
	}
	c.scanner = lockscan.NewScanner(cacheSizeArg(c.cfg.scanCacheSize))
	return nil
}

func cacheSizeArg(n int) int {
	if n == 0 {
		return -1 // lockscan: 0 means default, negative disables
	}
	return n
}

// seed stores a declared mode so that no connection runs detection.
func (c *Connector) seed() {
	if c.cfg.declared != poolmode.Unknown {
		c.known, c.mode, c.evidence = true, c.cfg.declared, poolmode.Evidence{Source: poolmode.SourceDeclared}
	}
}

func (c *Connector) cached() (poolmode.Mode, poolmode.Evidence, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode, c.evidence, c.known
}

// beforeConnect picks the exec mode for a new pgx connection once the pool
// mode is known: the first connection of an auto-detecting connector keeps
// the user's mode and gets a per-query override instead (see Connect).
func (c *Connector) beforeConnect(_ context.Context, cc *pgx.ConnConfig) error {
	mode, _, known := c.cached()
	if known && !mode.SessionLocksSafe() && !c.cfg.preparedOK && !c.explicitExec {
		cc.DefaultQueryExecMode = c.safeModeFor(cc)
	}
	return nil
}

func (c *Connector) safeModeFor(cc *pgx.ConnConfig) pgx.QueryExecMode {
	m := c.cfg.safeExecMode
	if m == pgx.QueryExecModeCacheDescribe && cc.DescriptionCacheCapacity == 0 {
		m = pgx.QueryExecModeExec
	}
	return m
}

func (c *Connector) unsafeExecErr(m poolmode.Mode, e pgx.QueryExecMode) error {
	return fmt.Errorf("%w: default_query_exec_mode=%v behind %s pooling leaves prepared statements on shared server backends (measured: errors 42P05/26000, or another client's rows); use cache_describe, exec or simple_protocol, or declare that the pooler handles prepared statements with pgadvisory_prepared_statements=true (PgBouncer >= 1.21 with max_prepared_statements)",
		ErrUnsafeExecMode, execModeName(e), m)
}

// Connect opens a connection through the inner connector, detects the pool
// mode when it is not known yet (one simple-protocol round trip), and wraps
// the connection.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	inner, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pgxConn := pgxConnOf(inner)
	mode, ev, known := c.cached()
	if !known {
		mode, ev, err = c.detect(ctx, pgxConn)
		if err != nil {
			inner.Close()
			return nil, err
		}
		c.mu.Lock()
		if !c.known {
			c.known, c.mode, c.evidence = true, mode, ev
		}
		c.mu.Unlock()
	}
	conn := newConn(c, inner, pgxConn, mode, ev)
	if pgxConn != nil && !mode.SessionLocksSafe() && !c.cfg.preparedOK {
		// Config copies the whole config: this runs once per connection.
		em := pgxConn.Config().DefaultQueryExecMode
		if !safeExecMode(em) {
			if c.explicitExec {
				inner.Close()
				return nil, c.unsafeExecErr(mode, em)
			}
			conn.execOverride = c.safeModeFor(pgxConn.Config())
		}
	}
	return conn, nil
}

func (c *Connector) detect(ctx context.Context, pc *pgx.Conn) (poolmode.Mode, poolmode.Evidence, error) {
	if pc == nil {
		c.cfg.logger.LogAttrs(ctx, slog.LevelWarn,
			"pgadvisory: cannot detect the pool mode through a non-pgx connection; assuming transaction pooling (session-level advisory locks are refused). Declare it with pgadvisory.WithPoolMode")
		return poolmode.Transaction, poolmode.Evidence{Source: poolmode.SourceFallback}, nil
	}
	opts := poolmode.DetectOptions{Admin: c.cfg.admin, Logger: c.cfg.logger}
	if c.pgxConfig != nil {
		opts.Database, opts.User = c.pgxConfig.Database, c.pgxConfig.User
	}
	m, ev, err := poolmode.Detect(ctx, pc.PgConn(), opts)
	if err != nil {
		return m, ev, fmt.Errorf("pgadvisory: detect pool mode: %w", err)
	}
	return m, ev, nil
}

// Driver returns the registered *Driver.
func (c *Connector) Driver() driver.Driver { return &Driver{} }

// Close closes the inner connector when it is an io.Closer; database/sql
// calls it from (*sql.DB).Close.
func (c *Connector) Close() error {
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// PoolMode returns the connector's conclusion, and false when no connection
// has been made yet.
func (c *Connector) PoolMode() (poolmode.Mode, poolmode.Evidence, bool) { return c.cached() }

// PoolMode reports the pool mode a pgadvisory *sql.DB concluded for its
// connections, and the evidence. It takes a connection from db (opening one
// if none is idle, which runs detection the first time).
func PoolMode(ctx context.Context, db *sql.DB) (poolmode.Mode, poolmode.Evidence, error) {
	if db == nil {
		return poolmode.Unknown, poolmode.Evidence{}, errors.New("pgadvisory: PoolMode: nil *sql.DB")
	}
	if ctx == nil {
		return poolmode.Unknown, poolmode.Evidence{}, errors.New("pgadvisory: PoolMode: nil context")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return poolmode.Unknown, poolmode.Evidence{}, fmt.Errorf("pgadvisory: PoolMode: %w", err)
	}
	defer conn.Close()
	var (
		m  poolmode.Mode
		ev poolmode.Evidence
	)
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(*Conn)
		if !ok {
			return fmt.Errorf("pgadvisory: PoolMode: db does not use the pgadvisory driver (connection is %T)", dc)
		}
		m, ev = pc.mode, pc.evidence
		return nil
	})
	return m, ev, err
}

func pgxConnOf(dc driver.Conn) *pgx.Conn {
	if sc, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
		return sc.Conn()
	}
	return nil
}

// execModeName spells a query exec mode the way the DSN parameter
// default_query_exec_mode accepts it (pgx's String() has blanks).
func execModeName(m pgx.QueryExecMode) string {
	return strings.ReplaceAll(m.String(), " ", "_")
}
