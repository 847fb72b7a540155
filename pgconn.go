package pgadvisory

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ConfigurePgconn installs the guard on cfg, a config created by
// pgconn.ParseConfig, for programs that use pgconn directly
// (pgconn.ConnectConfig, then Exec, ExecParams, Prepare, Pipeline,
// CopyFrom). It is ConfigureConn's work at pgconn's level: the
// pgadvisory_* parameters are taken out of cfg.RuntimeParams (opts override
// them), AfterNetConnect wraps each network connection so that every
// message passes the guard, and AfterConnect works out the pool mode of
// that physical connection; both run in front of any hook already set.
//
// pgconn has no query exec mode to choose: behind transaction and
// statement pooling (or while the mode is not known) the guard applies the
// policy to session-level lock calls and refuses named prepared statements
// (Prepare with a name other than ""), as for pgx. cfg's
// MaxProtocolMessageBodyLen is honoured: a backend message whose body is
// longer reaches pgconn at once, which fails with
// *pgproto3.ExceededMaxBodyLenErr. Call it once per config.
func ConfigurePgconn(cfg *pgconn.Config, opts ...Option) error {
	if cfg == nil {
		return errors.New("pgadvisory: ConfigurePgconn: nil config")
	}
	if cfg.Host == "" {
		return errors.New("pgadvisory: ConfigurePgconn: config has no host (create it with pgconn.ParseConfig)")
	}
	g, err := newConfiguredGuard(cfg, opts)
	if err != nil {
		return err
	}
	// pgconn sends what its caller asks, statement by statement: there is
	// no default mode to pick or upgrade. Exec stands for that (unnamed
	// statements); named ones are refused behind pooling where they are
	// sent.
	g.explicitExec = true
	g.execMode = pgx.QueryExecModeExec
	g.install(cfg)
	return nil
}
