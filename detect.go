package pgadvisory

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/poolmode"
	"github.com/pgadvisory/pgadvisory/poolmode/pgdetect"
)

// adminAnswerTTL is how long the admin console's answer serves new
// physical connections: concurrent first connections share one probe, and
// a pooler's pool mode is asked again after this long.
const adminAnswerTTL = 30 * time.Second

// adminProbe is the admin console's answer, shared by a guard's
// connections.
type adminProbe struct {
	mu       sync.Mutex
	inflight chan struct{} // closed when the probe in flight ends
	at       time.Time
	mode     poolmode.Mode
	version  string
	poolMode string
	err      error
	probes   int // probes made (tests)
}

// ask returns the admin console's answer, asking it at most once per
// adminAnswerTTL however many connections want it at once.
func (a *adminProbe) ask(ctx context.Context, admin *pgconn.Config, database, user string) (poolmode.Mode, string, string, error) {
	for {
		a.mu.Lock()
		if !a.at.IsZero() && time.Since(a.at) < adminAnswerTTL {
			defer a.mu.Unlock()
			return a.mode, a.version, a.poolMode, a.err
		}
		if wait := a.inflight; wait != nil {
			a.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return poolmode.Unknown, "", "", ctx.Err()
			}
		}
		done := make(chan struct{})
		a.inflight = done
		a.probes++
		a.mu.Unlock()

		m, version, poolMode, err := pgdetect.AskAdmin(ctx, admin, database, user)

		a.mu.Lock()
		a.inflight = nil
		if ctx.Err() == nil { // a probe cut short by its caller answers nobody else
			a.at, a.mode, a.version, a.poolMode, a.err = time.Now(), m, version, poolMode, err
		}
		a.mu.Unlock()
		close(done)
		return m, version, poolMode, err
	}
}

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// detect works out the pool mode of a new physical connection (pgconn's
// AfterConnect): declared; or the BackendKeyData PID against
// pg_backend_pid() (equal: direct), one simple-protocol round trip unless
// the PID is one no backend can have (pgdetect.NoBackendPID); behind a
// pooler, the admin console's answer when credentials are given (one probe
// shared by concurrent connections); else transaction pooling, assumed. A
// declared direct connection that a pooler answers is an error.
func (g *guard) detect(ctx context.Context, pc *pgconn.PgConn) error {
	gc, ok := pc.Conn().(*guardConn)
	if !ok {
		return fmt.Errorf("pgadvisory: the connection is %T, not the guard's: another AfterNetConnect replaced it", pc.Conn())
	}
	switch g.cfg.declared {
	case poolmode.Unknown:
	case poolmode.Direct:
		// No round trip (a declared mode costs none): a BackendKeyData PID
		// above Linux's largest process ID cannot be a PostgreSQL
		// backend's. Poolers send random 32-bit PIDs, so this catches all
		// but about one connection in a thousand behind one. (0 and 1, no
		// backend's either, are no pooler's random PID: a declared direct
		// connection to a server that sends them, such as a test's
		// scripted one, is left alone, as plain pgx leaves it.)
		if pid := pc.PID(); pid > pgdetect.MaxBackendPID {
			return fmt.Errorf("pgadvisory: pool mode declared direct, but a connection pooler answers (BackendKeyData PID %d is no PostgreSQL backend's): session-level locks would leak; declare pgadvisory_pool_mode=session|transaction|statement, or leave it to detection", pid)
		}
		return nil
	default:
		return nil
	}
	m, ev, err := pgdetect.Detect(ctx, pc, pgdetect.Options{Logger: discardLogger, Database: g.database, User: g.user})
	if err != nil {
		return fmt.Errorf("pgadvisory: detect pool mode: %w", err)
	}
	if ev.PoolerSuspected && g.cfg.admin != nil {
		am, version, poolMode, aerr := g.admin.ask(ctx, g.cfg.admin, g.database, g.user)
		ev.PgBouncerVersion, ev.AdminPoolMode = version, poolMode
		if aerr == nil {
			m, ev.Source = am, poolmode.SourceAdminConsole
		} else {
			ev.AdminError = aerr.Error()
		}
	}
	if m != poolmode.Direct && g.statementPooling.Load() {
		m, ev.Source = poolmode.Statement, poolmode.SourcePoolerRefusal
	}
	if ev.Source == poolmode.SourceFallback {
		g.warnAssumed.Do(func() {
			g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, assumedWarning(poolerUnknown, g.cfg.policy, declareHint)+" (logged once per configuration)", ev.LogAttrs()...)
		})
	}
	gc.setMode(m, ev)
	if !m.SessionLocksSafe() && !g.cfg.preparedOK && !safeExecMode(gc.execMode) {
		// The exec mode would fail (or return another client's rows) on
		// this connection: say so now.
		return &UnsafeExecModeError{Mode: m, ExecMode: gc.execMode}
	}
	return nil
}

// declareHint says how to make the pool mode known.
const declareHint = "declare it with the DSN parameter pgadvisory_pool_mode=session|transaction|statement, or give admin-console credentials (pgadvisory_admin_user, pgadvisory_admin_password)"

// assumedWarning is the once-per-configuration line logged when the pool
// mode is not known (why): what the assumption means under policy p, and
// how to end it.
func assumedWarning(why string, p Policy, how string) string {
	return "pgadvisory: " + why + ": assuming transaction pooling, so session-level advisory lock calls are " + policyEffect(p) + "; " + how
}

// poolerUnknown is why the mode is assumed behind an unidentified pooler.
const poolerUnknown = "a connection pooler answers and its pool mode is unknown"

// policyEffect says what p does to a session-level lock call behind
// transaction pooling.
func policyEffect(p Policy) string {
	switch p {
	case PolicyHold:
		return "held for their connection when a statement is one lock call (policy hold)"
	case PolicyRewrite:
		return "rewritten to transaction-level locks inside transactions and held in autocommit when a statement is one lock call (policy rewrite)"
	case PolicyWarn:
		return "logged and sent (policy warn)"
	case PolicyAllow:
		return "sent (policy allow)"
	default:
		return "refused (policy reject)"
	}
}
