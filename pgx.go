package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/lockscan"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// guard is what the connections of one configured pgx config share: the
// settings, the scanner and its cache.
type guard struct {
	cfg          config
	scanner      *lockscan.Scanner
	explicitExec bool // the user chose the query exec mode
	execMode     pgx.QueryExecMode
	database     string
	user         string

	// statementPooling is set once the pooler refused a transaction as
	// only statement pooling does: detection then concludes Statement.
	statementPooling atomic.Bool

	admin       adminProbe    // the admin console's answer, shared
	released    releasedLocks // session locks the leak guard released
	warnAssumed sync.Once     // the "pool mode unknown" line, once

	// PolicyHold: the holder connections, and the AfterNetConnect that was
	// set before the guard's (holders connect with it, without the guard).
	holders holderPool
	prevNet func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error)
	// warnPooled: the "held locks went back to a database/sql pool" line,
	// once.
	warnPooled sync.Once
	// poolHooks, set by ConfigurePool, fails a new connection whose pool's
	// release hooks are no longer the guard's (*PoolHooksError).
	poolHooks func() error
}

// holdEnabled reports whether the policy holds lone session-lock calls.
func (g *guard) holdEnabled() bool {
	return g.cfg.policy == PolicyHold || g.cfg.policy == PolicyRewrite
}

// statementPoolingRefusal is PgBouncer's message for a transaction behind
// statement pooling.
const statementPoolingRefusal = "transaction blocks not allowed in statement pooling mode"

func newGuard(cfg config) *guard {
	return &guard{cfg: cfg, scanner: lockscan.NewScanner(cacheSizeArg(cfg.scanCacheSize))}
}

// mayIntercept is the hot-path filter: false means the text cannot hold
// anything the policy acts on (a lock function's name in any spelling, or
// a dynamic-SQL construct) — the scanner's own pre-filter.
func (g *guard) mayIntercept(text string) bool {
	return lockscan.MayContainCall(text)
}

func (g *guard) warn(n notice, mode poolmode.Mode, query string) {
	attrs := append(n.attrs, slog.String("pool_mode", mode.String()), slog.String("query", truncate(query, maxLoggedQuery)))
	g.cfg.logger.LogAttrs(context.Background(), slog.LevelWarn, n.msg, attrs...)
}

// ParseConfig is pgx.ParseConfig followed by ConfigureConn: the returned
// config connects through the guard. pgadvisory_* parameters in connString
// are taken out before pgx sees them; opts override them.
func ParseConfig(connString string, opts ...Option) (*pgx.ConnConfig, error) {
	if k := duplicateParam(connString); k != "" {
		return nil, fmt.Errorf("pgadvisory: DSN parameter %s given more than once", k)
	}
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgadvisory: %w", err) // pgconn's ParseConfigError redacts passwords
	}
	if err := ConfigureConn(cfg, opts...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParsePoolConfig is pgxpool.ParseConfig followed by ConfigurePool.
func ParsePoolConfig(connString string, opts ...Option) (*pgxpool.Config, error) {
	if k := duplicateParam(connString); k != "" {
		return nil, fmt.Errorf("pgadvisory: DSN parameter %s given more than once", k)
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgadvisory: %w", err)
	}
	if err := ConfigurePool(cfg, opts...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ConfigureConn installs the guard on cfg, a config created by
// pgx.ParseConfig (or pgxpool's), for pgx.ConnectConfig, stdlib.OpenDB and
// stdlib.GetConnector. It takes the pgadvisory_* parameters out of
// cfg.RuntimeParams (opts override them) and chains the guard in front of
// any AfterNetConnect and AfterConnect already set:
//
//   - AfterNetConnect wraps each new network connection (after TLS), so
//     every statement of every pgx API passes the guard;
//   - AfterConnect works out the pool mode of that physical connection
//     (declared, or detected with one round trip).
//
// Behind transaction and statement pooling — and while the mode is not
// known — session-level advisory lock calls get the policy (WithPolicy),
// and named prepared statements are refused; unless the connection string
// chose a query exec mode, the exec mode becomes WithSafeExecMode's
// (cache_describe) when the mode is not declared direct or session.
// Call it once per config.
func ConfigureConn(cfg *pgx.ConnConfig, opts ...Option) error {
	_, err := configureConn(cfg, opts)
	return err
}

// buildConfig reads the pgadvisory_* parameters out of params (nil for
// none) and applies opts over them.
func buildConfig(params map[string]string, opts []Option) (config, error) {
	c := defaultConfig()
	if err := c.takeParams(params); err != nil {
		return c, err
	}
	for i, o := range opts {
		if o == nil {
			// Most likely an option variable that was never assigned.
			return c, fmt.Errorf("pgadvisory: option %d of %d is nil", i+1, len(opts))
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

func configureConn(cfg *pgx.ConnConfig, opts []Option) (*guard, error) {
	if cfg == nil {
		return nil, errors.New("pgadvisory: ConfigureConn: nil config")
	}
	if cfg.Host == "" && cfg.ConnString() == "" {
		return nil, errors.New("pgadvisory: ConfigureConn: config must be created by pgx.ParseConfig (or pgxpool.ParseConfig)")
	}
	g, err := newConfiguredGuard(&cfg.Config, opts)
	if err != nil {
		return nil, err
	}
	g.explicitExec = explicitExecMode(cfg)
	if err := g.chooseExecMode(cfg); err != nil {
		return nil, err
	}
	g.execMode = cfg.DefaultQueryExecMode
	if g.mayUpgrade() {
		// Reach the copy of cfg that pgx connects with, to give a
		// connection proven direct pgx's own default exec mode.
		if cfg.Tracer == nil {
			cfg.Tracer = configTracer{}
		} else {
			cfg.Tracer = multitracer.New(cfg.Tracer, configTracer{})
		}
	}
	g.install(&cfg.Config)
	return g, nil
}

// usesTLS reports whether pc may connect over TLS: its own TLS
// configuration or a fallback's.
func usesTLS(pc *pgconn.Config) bool {
	if pc.TLSConfig != nil {
		return true
	}
	for _, f := range pc.Fallbacks {
		if f.TLSConfig != nil {
			return true
		}
	}
	return false
}

// newConfiguredGuard reads the pgadvisory_* parameters out of pc and opts
// and returns the guard for pc, not installed yet.
func newConfiguredGuard(pc *pgconn.Config, opts []Option) (*guard, error) {
	if pc.ChannelBinding == "require" && usesTLS(pc) {
		// pgconn finds channel-binding data only on a *tls.Conn, which the
		// guard's wrapper hides from it. Without TLS, pgconn refuses
		// channel_binding=require itself, as it does for plain pgx.
		return nil, errors.New("pgadvisory: channel_binding=require is not supported: pgconn reads SCRAM channel-binding data only from a *tls.Conn, and the guard wraps the connection; use channel_binding=prefer or disable with sslmode=verify-full")
	}
	c, err := buildConfig(pc.RuntimeParams, opts)
	if err != nil {
		return nil, err
	}
	if err := c.buildAdmin(pc.Host, pc.Port); err != nil {
		return nil, err
	}
	if c.admin != nil && c.adminDSN == "" && pc.TLSConfig != nil {
		// The admin console is the same PgBouncer: talk to it as securely
		// as the connection string does.
		c.admin.TLSConfig = pc.TLSConfig.Clone()
		if c.adminHost != pc.Host {
			c.admin.TLSConfig.ServerName = c.adminHost
		}
		// sslmode=prefer (the default) or allow: the connection string
		// accepts plaintext when the server refuses TLS, and so does the
		// console (a PgBouncer without client TLS refuses it for both).
		for _, fb := range pc.Fallbacks {
			if fb.TLSConfig == nil {
				c.admin.Fallbacks = append(c.admin.Fallbacks, &pgconn.FallbackConfig{Host: c.admin.Host, Port: c.admin.Port})
				break
			}
		}
	}
	// The pure-Go parser (CGO_ENABLED=0) compiles its WebAssembly module
	// once, in seconds: start now, off the first statement's path (a scan
	// meanwhile waits for it; nothing passes unscanned).
	go lockscan.Warm()
	g := newGuard(c)
	g.database, g.user = pc.Database, pc.User
	return g, nil
}

// install chains the guard's AfterNetConnect and AfterConnect in front of
// those pc has.
func (g *guard) install(pc *pgconn.Config) {
	prevNet := pc.AfterNetConnect
	g.prevNet = prevNet
	pc.AfterNetConnect = func(ctx context.Context, pc *pgconn.Config, conn net.Conn) (net.Conn, error) {
		if g.poolHooks != nil {
			if err := g.poolHooks(); err != nil {
				// pgconn closes the conn returned with the error (a nil
				// one panics): give it back the network connection.
				return conn, err
			}
		}
		if prevNet != nil {
			wrapped, err := prevNet(ctx, pc, conn)
			if err != nil {
				if wrapped == nil {
					wrapped = conn
				}
				return wrapped, err
			}
			conn = wrapped
		}
		gc := newGuardConn(g, conn)
		gc.execMode = g.execMode
		gc.pc = pc
		gc.maxBody = pc.MaxProtocolMessageBodyLen
		return gc, nil
	}
	prevAfter := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, pc *pgconn.PgConn) error {
		if err := g.detect(ctx, pc); err != nil {
			return err
		}
		g.upgrade(ctx, pc)
		if prevAfter != nil {
			return prevAfter(ctx, pc)
		}
		return nil
	}
}

// ConfigurePool installs the guard on a pgxpool config (ConfigureConn on
// its ConnConfig) and the leak guard on its PrepareConn: directly and behind
// session pooling, a connection that ran a session-level lock function is
// checked before it is handed out again, and advisory locks it still holds
// are released (and remembered: a later unlock of one returns
// ErrLockReleased) or the connection destroyed, per WithLeakAction. A
// PrepareConn or BeforeAcquire already set runs after it. Under policy hold
// (and rewrite) it adds a pgxpool.ReleaseTracer to ConnConfig.Tracer (with
// pgx's multitracer beside a tracer already set) that ends a connection's
// held locks within Release.
func ConfigurePool(cfg *pgxpool.Config, opts ...Option) error {
	if cfg == nil || cfg.ConnConfig == nil {
		return errors.New("pgadvisory: ConfigurePool: nil config (create it with pgxpool.ParseConfig)")
	}
	g, err := configureConn(cfg.ConnConfig, opts)
	if err != nil {
		return err
	}
	var ourTracer pgx.QueryTracer
	var ourPrepare func(context.Context, *pgx.Conn) (bool, error)
	// Checked as each connection is made, by the guard itself (a hook of
	// the pool config could be replaced as well).
	g.poolHooks = func() error {
		if g.holdEnabled() && (cfg.ConnConfig.Tracer != ourTracer || !sameFunc(cfg.PrepareConn, ourPrepare)) {
			// Set after ConfigurePool, they replaced the guard's: held
			// locks would outlive Release and pass to the next acquirer.
			return &PoolHooksError{Tracer: cfg.ConnConfig.Tracer != ourTracer, PrepareConn: !sameFunc(cfg.PrepareConn, ourPrepare)}
		}
		return nil
	}
	prev := cfg.PrepareConn
	if prev == nil && cfg.BeforeAcquire != nil {
		before := cfg.BeforeAcquire
		prev = func(ctx context.Context, conn *pgx.Conn) (bool, error) { return before(ctx, conn), nil }
	}
	// Held locks (PolicyHold) must end when the connection goes back. Not
	// in AfterRelease: with that hook set, pgxpool hands every released
	// connection to a goroutine, and the next Acquire waits for it or opens
	// a new connection. pgxpool calls a ReleaseTracer on the releasing
	// goroutine, before its own checks, so the tracer releases them.
	if g.holdEnabled() {
		if cfg.ConnConfig.Tracer == nil {
			cfg.ConnConfig.Tracer = holdReleaseTracer{}
		} else {
			cfg.ConnConfig.Tracer = multitracer.New(cfg.ConnConfig.Tracer, holdReleaseTracer{})
		}
	}
	cfg.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		if gc := guardOf(conn); gc != nil {
			gc.resetHolds() // a conn back in the pool without Release's tracer (none otherwise)
		}
		if !releaseLeaks(ctx, conn) {
			return false, nil // destroyed; pgxpool retries on another connection
		}
		if prev != nil {
			return prev(ctx, conn)
		}
		return true, nil
	}
	ourTracer, ourPrepare = cfg.ConnConfig.Tracer, cfg.PrepareConn
	return nil
}

// holdReleaseTracer ends the held locks of a pooled connection as it is
// released (pgxpool.ReleaseTracer): a connection whose holder was lost is
// closed, which makes pgxpool destroy it; otherwise its holders let their
// locks go, as a plain session's locks would be gone with the session.
type holdReleaseTracer struct{ noQueryTrace }

// TraceRelease releases conn's held locks, or closes conn if one was lost.
// A connection pgxpool destroys anyway (closed, busy, inside a transaction)
// is left to the guard's Close, which lets its holders go.
func (holdReleaseTracer) TraceRelease(_ *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	gc := guardOf(data.Conn)
	if gc == nil || data.Conn.IsClosed() || data.Conn.PgConn().IsBusy() || data.Conn.PgConn().TxStatus() != 'I' {
		return
	}
	if gc.holdLost() {
		ctx, cancel := context.WithTimeout(context.Background(), holderReleaseWait)
		defer cancel()
		_ = data.Conn.Close(ctx) // broken for good: pgxpool destroys a closed connection
		return
	}
	gc.resetHolds()
}

// sameFunc reports whether a and b are the same function value's code (a
// hook the guard installed, not one set over it).
func sameFunc[F any](a, b F) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

// explicitExecMode reports whether the connection string chose
// default_query_exec_mode (pgx consumes the key, so look at the string).
func explicitExecMode(cfg *pgx.ConnConfig) bool {
	s := cfg.ConnString()
	if s == "" {
		return cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement
	}
	raw, err := pgconn.ParseConfig(s)
	if err != nil {
		return cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement
	}
	_, ok := raw.RuntimeParams["default_query_exec_mode"]
	return ok || cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement
}

// chooseExecMode picks a query exec mode that works behind the declared (or
// not yet known) pool mode, and refuses an unsafe one the user chose for a
// declared pooler.
func (g *guard) chooseExecMode(cfg *pgx.ConnConfig) error {
	if g.cfg.preparedOK || g.cfg.declared.SessionLocksSafe() {
		return nil
	}
	if safeExecMode(cfg.DefaultQueryExecMode) {
		return nil
	}
	if g.explicitExec {
		if g.cfg.declared != poolmode.Unknown {
			return (&UnsafeExecModeError{Mode: g.cfg.declared, ExecMode: cfg.DefaultQueryExecMode})
		}
		return nil // detection decides, per connection
	}
	m := g.cfg.safeExecMode
	if m == pgx.QueryExecModeCacheDescribe && cfg.DescriptionCacheCapacity == 0 {
		m = pgx.QueryExecModeExec
	}
	cfg.DefaultQueryExecMode = m
	return nil
}

// UnsafeExecModeError refuses a query exec mode the user chose that cannot
// work behind the connection's pooler.
type UnsafeExecModeError struct {
	Mode     poolmode.Mode
	ExecMode pgx.QueryExecMode
}

func (e *UnsafeExecModeError) Error() string {
	return fmt.Sprintf("pgadvisory: default_query_exec_mode=%v behind %s leaves prepared statements on shared server backends (measured: errors 42P05/26000, or another client's rows); use cache_describe, exec or simple_protocol, or declare that the pooler handles prepared statements with pgadvisory_prepared_statements=true (PgBouncer >= 1.21 with max_prepared_statements)",
		execModeName(e.ExecMode), poolingPhrase(e.Mode, false))
}

// Unwrap returns ErrUnsafeExecMode.
func (e *UnsafeExecModeError) Unwrap() error { return ErrUnsafeExecMode }

// guardOf returns the guard's connection under a pgx connection, or nil.
func guardOf(conn *pgx.Conn) *guardConn {
	if conn == nil || conn.PgConn() == nil {
		return nil
	}
	gc, _ := conn.PgConn().Conn().(*guardConn)
	return gc
}

// ConnPoolMode returns the pool mode the guard works under on conn's
// physical connection and its evidence; ok is false when conn does not go
// through the guard.
func ConnPoolMode(conn *pgx.Conn) (m poolmode.Mode, ev poolmode.Evidence, ok bool) {
	gc := guardOf(conn)
	if gc == nil {
		return poolmode.Unknown, poolmode.Evidence{}, false
	}
	m, ev, _ = gc.PoolMode()
	return m, ev, true
}

// releaseLeaks is the pool's leak guard: it reports whether conn may be
// handed out again.
func releaseLeaks(ctx context.Context, conn *pgx.Conn) bool {
	gc := guardOf(conn)
	if gc == nil || !gc.takeSessionLocked() {
		return true
	}
	m, _, _ := gc.PoolMode()
	if !m.SessionLocksSafe() {
		return true // behind transaction pooling the backend is not ours to check
	}
	ctx, cancel := context.WithTimeout(ctx, leakCheckTimeout)
	defer cancel()
	le, keep := checkLeaks(ctx, conn.PgConn(), gc.g.cfg.leakAction)
	if le != nil {
		gc.g.leaked(ctx, m, le)
	}
	return keep
}

// mayUpgrade reports whether a connection proven direct (or session
// pooling) may run pgx's default exec mode, cache_statement, instead of the
// safe mode chooseExecMode picked: the user chose no exec mode, declared no
// pool mode and no pooler support for prepared statements.
func (g *guard) mayUpgrade() bool {
	return !g.explicitExec && g.cfg.declared == poolmode.Unknown && !g.cfg.preparedOK
}

// configTracer is a pgx.ConnectTracer that hands the guard the copy of the
// ConnConfig pgx connects with (pgx.ConnectConfig copies the config and
// reads DefaultQueryExecMode from the copy for every query): it puts it in
// the context that AfterConnect receives. It traces nothing else.
type configTracer struct{ noQueryTrace }

// noQueryTrace is the pgx.QueryTracer a tracer of the guard's must be to sit
// in pgx.ConnConfig.Tracer: it traces no query.
type noQueryTrace struct{}

// TraceQueryStart does nothing.
func (noQueryTrace) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd does nothing.
func (noQueryTrace) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// connConfigKey is the context key of the ConnConfig pgx connects with.
type connConfigKey struct{}

// TraceConnectStart puts the config pgx connects with in the context.
func (configTracer) TraceConnectStart(ctx context.Context, data pgx.TraceConnectStartData) context.Context {
	return context.WithValue(ctx, connConfigKey{}, data.ConnConfig)
}

// TraceConnectEnd does nothing.
func (configTracer) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}

// upgrade gives a connection that detection proved direct or session
// pooling pgx's default exec mode, cache_statement, as plain pgx has it:
// it sets DefaultQueryExecMode on the config pgx connects with, which is
// the one pgx reads for every query of this connection. Only that config
// is touched, found by identity (its pgconn.Config is the one the guard's
// AfterNetConnect received), and only when pgx has a statement cache.
func (g *guard) upgrade(ctx context.Context, pc *pgconn.PgConn) {
	if !g.mayUpgrade() {
		return
	}
	gc, ok := pc.Conn().(*guardConn)
	if !ok {
		return
	}
	cc, _ := ctx.Value(connConfigKey{}).(*pgx.ConnConfig)
	if cc == nil || &cc.Config != gc.pc || cc.StatementCacheCapacity <= 0 {
		return
	}
	if m, _, _ := gc.PoolMode(); !m.SessionLocksSafe() {
		return
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	gc.mu.Lock()
	gc.execMode = pgx.QueryExecModeCacheStatement
	gc.mu.Unlock()
}
