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
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
	"github.com/pgadvisory/pgadvisory/poolmode/pgdetect"
)

// DriverName is the name the driver registers with database/sql. sqlx
// knows no bind style for it and would send "?" placeholders from NamedExec
// and Rebind: sqlx users import github.com/pgadvisory/pgadvisory/sqlxbind
// for its side effect, or call sqlx.BindDriver(pgadvisory.DriverName,
// sqlx.DOLLAR) once.
const DriverName = "pgadvisory"

func init() {
	if !slices.Contains(sql.Drivers(), DriverName) {
		sql.Register(DriverName, &Driver{})
	}
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

// Connector creates pgadvisory connections. Those of NewConnector,
// NewConnectorConfig and OpenDB are pgx stdlib connections over a config
// guarded by ConfigureConn: the guard works out the pool mode of every
// physical connection and applies the policy on pgx's wire. Those of Wrap
// go through another connector, and the policy runs on the SQL text. It is
// safe for concurrent use.
type Connector struct {
	inner driver.Connector
	cfg   config
	g     *guard

	pgxConfig *pgx.ConnConfig // pgx-built connectors only

	// warnedKept: the "session lock kept on a pooled connection" line was
	// logged.
	warnedKept atomic.Bool

	mu       sync.Mutex
	known    bool
	mode     poolmode.Mode
	evidence poolmode.Evidence
}

// NewConnector returns a Connector for a pgx DSN (URL or keyword/value),
// or for a name from RegisterConnConfig. pgadvisory_* parameters are
// removed before pgx sees the DSN; options override them.
func NewConnector(dsn string, opts ...Option) (*Connector, error) {
	if cfg := registeredConfig(dsn); cfg != nil {
		return NewConnectorConfig(cfg, opts...)
	}
	if k := duplicateParam(dsn); k != "" {
		return nil, fmt.Errorf("pgadvisory: DSN parameter %s given more than once", k)
	}
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgadvisory: %w", err) // pgconn's ParseConfigError redacts passwords
	}
	return newPgxConnector(pc, opts)
}

// NewConnectorConfig returns a Connector for a pgx config, which must come
// from pgx.ParseConfig. The config is copied; pgadvisory_* keys in its
// RuntimeParams are taken out and applied, and options override them.
func NewConnectorConfig(cfg *pgx.ConnConfig, opts ...Option) (*Connector, error) {
	if cfg == nil {
		return nil, errors.New("pgadvisory: NewConnectorConfig: nil config")
	}
	if cfg.Host == "" && cfg.ConnString() == "" {
		return nil, errors.New("pgadvisory: NewConnectorConfig: config must be created by pgx.ParseConfig")
	}
	return newPgxConnector(cfg.Copy(), opts)
}

func newPgxConnector(pc *pgx.ConnConfig, opts []Option) (*Connector, error) {
	g, err := configureConn(pc, opts)
	if err != nil {
		return nil, err
	}
	c := &Connector{pgxConfig: pc, cfg: g.cfg, g: g}
	c.inner = stdlib.GetConnector(*pc)
	c.seed()
	return c, nil
}

// Wrap returns a Connector that sends statements through inner after the
// policy checks on their SQL text: any database/sql connector works (pgx
// stdlib, go-sqlmock, lib/pq). Only the calls through database/sql are
// checked — the guard on pgx's wire needs a config (NewConnectorConfig, or
// ConfigureConn and stdlib.GetConnector). Pool-mode detection needs a pgx
// connection; for another driver declare the mode with WithPoolMode, or
// the fail-safe Transaction applies.
func Wrap(inner driver.Connector, opts ...Option) (*Connector, error) {
	if inner == nil {
		return nil, errors.New("pgadvisory: Wrap: nil connector")
	}
	cfg, err := buildConfig(nil, opts)
	if err != nil {
		return nil, err
	}
	go lockscan.Warm() // see configureConn
	c := &Connector{inner: inner, cfg: cfg, g: newGuard(cfg)}
	c.seed()
	return c, nil
}

// OpenDB is sql.OpenDB(NewConnector(dsn, opts...)). Unlike pgx's
// stdlib.OpenDB, which takes a pgx.ConnConfig and cannot fail, it takes the
// DSN and returns the error of a bad DSN or option at once; for a
// pgx.ConnConfig, use sql.OpenDB(NewConnectorConfig(cfg)).
func OpenDB(dsn string, opts ...Option) (*sql.DB, error) {
	c, err := NewConnector(dsn, opts...)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
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

func (c *Connector) remember(m poolmode.Mode, ev poolmode.Evidence) {
	c.mu.Lock()
	c.known, c.mode, c.evidence = true, m, ev
	c.mu.Unlock()
}

// Connect opens a connection through the inner connector. Through the
// guard, the pool mode is that physical connection's; behind Wrap it is
// detected once (one simple-protocol round trip on a pgx connection) and
// reused.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	if c == nil || c.inner == nil || c.g == nil {
		return nil, errZeroConnector
	}
	inner, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pgxConn := pgxConnOf(inner)
	if gc := guardOf(pgxConn); gc != nil {
		m, ev, _ := gc.PoolMode()
		c.remember(m, ev)
		return newConn(c, inner, pgxConn, m, ev), nil
	}
	mode, ev, known := c.cached()
	if !known {
		mode, ev, err = c.detect(ctx, pgxConn)
		if err != nil {
			inner.Close()
			return nil, err
		}
		c.remember(mode, ev)
	}
	return newConn(c, inner, pgxConn, mode, ev), nil
}

// detect works out the pool mode behind a wrapped connection.
func (c *Connector) detect(ctx context.Context, pc *pgx.Conn) (poolmode.Mode, poolmode.Evidence, error) {
	if pc == nil {
		c.cfg.logger.LogAttrs(ctx, slog.LevelWarn,
			assumedWarning("the pool mode cannot be detected through a non-pgx connection", c.cfg.policy, "declare it with pgadvisory.WithPoolMode"))
		return poolmode.Transaction, poolmode.Evidence{Source: poolmode.SourceFallback}, nil
	}
	pcfg := pc.Config()
	admin := c.cfg
	if err := admin.buildAdmin(pcfg.Host, pcfg.Port); err != nil {
		return poolmode.Unknown, poolmode.Evidence{}, err
	}
	m, ev, err := pgdetect.Detect(ctx, pc.PgConn(), pgdetect.Options{Admin: admin.admin, Logger: c.cfg.logger, Database: pcfg.Database, User: pcfg.User})
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
	if c == nil {
		return nil
	}
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// PoolMode returns the pool mode of the connector's most recent connection
// (or the declared one), and false when no connection has been made yet.
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
