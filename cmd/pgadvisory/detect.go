package main

import (
	"context"
	"database/sql/driver"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
	"github.com/pgadvisory/pgadvisory/poolmode/pgdetect"
)

func init() {
	register(command{name: "detect", summary: "tell which pool mode a DSN sits behind, with the evidence and recommended settings", run: runDetect})
}

// adminPasswordEnv holds the admin-console password, so it stays out of
// the process list and shell history.
const adminPasswordEnv = "PGADVISORY_ADMIN_PASSWORD"

func runDetect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	adminUser := fs.String("admin-user", "", "PgBouncer admin-console user (password from $"+adminPasswordEnv+"); asks SHOW POOLS for the mode")
	adminDSN := fs.String("admin-dsn", "", "PgBouncer admin-console DSN (instead of -admin-user)")
	fallback := fs.Bool("admin-fallback", false, "when the admin console cannot be asked (wrong password, not PgBouncer), print what detection without it concludes and exit 0")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: pgadvisory detect [-admin-user USER | -admin-dsn DSN [-admin-fallback]] DSN")
		fmt.Fprintln(stderr, "\nConnects once, as the pgadvisory driver would, and prints what it concludes.")
		fmt.Fprintln(stderr, "A failed admin-console login is an error (exit 1) unless -admin-fallback is given.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"expected exactly one DSN argument"}
	}
	// The driver's fallback line goes to stderr; the conclusion to stdout.
	opts := []pgadvisory.Option{pgadvisory.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	switch {
	case *adminDSN != "" && *adminUser != "":
		return usageError{"give -admin-user or -admin-dsn, not both"}
	case *adminDSN != "":
		opts = append(opts, pgadvisory.WithAdminConsole(*adminDSN))
	case *adminUser != "":
		opts = append(opts, pgadvisory.WithAdminCredentials(*adminUser, os.Getenv(adminPasswordEnv)))
	}
	conn, err := pgadvisory.NewConnector(fs.Arg(0), opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	dc, err := conn.Connect(ctx)
	if err != nil {
		return err
	}
	defer dc.Close()
	pc, ok := dc.(interface {
		driver.Conn
		PoolMode() poolmode.Mode
		Evidence() poolmode.Evidence
	})
	if !ok {
		return fmt.Errorf("unexpected connection type %T", dc)
	}
	if pc.Evidence().Source == poolmode.SourceFallback {
		// A pooler of unknown mode: transaction and statement pooling look
		// alike until a transaction spans two round trips, which statement
		// pooling refuses (and the guard then records).
		if err := probeTransaction(ctx, dc); err != nil && pc.PoolMode() != poolmode.Statement {
			return fmt.Errorf("probe transaction (BEGIN; SELECT 1; COMMIT): %w", err)
		}
	}
	ev := pc.Evidence()
	printDetection(stdout, pc.PoolMode(), ev, dsnPolicy(fs.Arg(0)))
	if ev.AdminError != "" && !*fallback {
		// The conclusion above comes from the fallback evidence; an
		// operator who asked for the admin console (flags or DSN
		// parameters) must not mistake it for SHOW POOLS.
		msg := "admin console: " + ev.AdminError
		if _, set := os.LookupEnv(adminPasswordEnv); *adminUser != "" && !set {
			msg += "; $" + adminPasswordEnv + " is unset (it holds -admin-user's password)"
		}
		return fmt.Errorf("%s; the conclusion above is without it (pass -admin-fallback to accept that)", msg)
	}
	return nil
}

// probeTransaction runs a two-round-trip transaction on dc: BEGIN with
// SELECT 1, then COMMIT.
func probeTransaction(ctx context.Context, dc driver.Conn) error {
	bt, ok := dc.(driver.ConnBeginTx)
	ex, ok2 := dc.(driver.ExecerContext)
	if !ok || !ok2 {
		return fmt.Errorf("unexpected connection type %T", dc)
	}
	tx, err := bt.BeginTx(ctx, driver.TxOptions{})
	if err != nil {
		return err
	}
	if _, err := ex.ExecContext(ctx, "SELECT 1", nil); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// dsnPolicy returns the policy dsn declares (pgadvisory_policy), or the
// default. NewConnector has checked the value.
func dsnPolicy(dsn string) pgadvisory.Policy {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return pgadvisory.PolicyReject
	}
	p, err := pgadvisory.ParsePolicy(cfg.RuntimeParams[pgadvisory.ParamPolicy])
	if err != nil {
		return pgadvisory.PolicyReject
	}
	return p
}

func printDetection(w io.Writer, m poolmode.Mode, ev poolmode.Evidence, p pgadvisory.Policy) {
	var conclusion string
	switch ev.Source {
	case poolmode.SourceDeclared:
		conclusion = fmt.Sprintf("%s (declared in the DSN; nothing detected)", m)
	case poolmode.SourceBackendPID:
		conclusion = "direct connection to PostgreSQL (no pooler)"
	case poolmode.SourceAdminConsole:
		conclusion = fmt.Sprintf("PgBouncer in %s pooling mode", m)
	case poolmode.SourceParameterStatus:
		conclusion = fmt.Sprintf("a pooler announcing %s pooling mode", m)
	case poolmode.SourcePoolerRefusal:
		conclusion = "a pooler in statement pooling mode (it refused a transaction)"
	default:
		conclusion = "an unidentified connection pooler (treated as transaction pooling, fail safe)"
	}
	fmt.Fprintf(w, "conclusion: %s\n", conclusion)
	fmt.Fprintf(w, "pool mode:  %s\n", m)
	fmt.Fprintln(w, "evidence:")
	fmt.Fprintf(w, "  source: %s\n", ev.Source)
	switch {
	case ev.ServerPID != 0:
		verdict := "equal: the server itself answered"
		if ev.PoolerSuspected {
			verdict = "different: a pooler made up the BackendKeyData PID"
		}
		fmt.Fprintf(w, "  BackendKeyData PID %d, SELECT pg_backend_pid() = %d (%s)\n", ev.BackendKeyPID, ev.ServerPID, verdict)
	case ev.PoolerSuspected:
		fmt.Fprintf(w, "  BackendKeyData PID %d: no PostgreSQL backend has it (0, 1, or above %d), so a pooler made it up; pg_backend_pid() not asked\n", ev.BackendKeyPID, pgdetect.MaxBackendPID)
	}
	if ev.ParameterStatus != "" {
		fmt.Fprintf(w, "  ParameterStatus pool mode: %s\n", ev.ParameterStatus)
	}
	if ev.PgBouncerVersion != "" || ev.AdminPoolMode != "" {
		fmt.Fprintf(w, "  admin console: server_version %s, SHOW POOLS pool_mode=%s for database %q user %q\n", ev.PgBouncerVersion, ev.AdminPoolMode, ev.Database, ev.User)
	}
	if ev.AdminError != "" {
		fmt.Fprintf(w, "  admin console failed: %s\n", ev.AdminError)
	}
	switch ev.Source {
	case poolmode.SourceFallback:
		fmt.Fprintln(w, "  probe transaction (BEGIN; SELECT 1; COMMIT): allowed, so not statement pooling")
	case poolmode.SourcePoolerRefusal:
		fmt.Fprintln(w, "  probe transaction (BEGIN; SELECT 1; COMMIT): refused by the pooler (transaction blocks not allowed in statement pooling mode)")
	}
	fmt.Fprintln(w, "recommended settings:")
	for _, r := range recommendations(m, ev, p) {
		fmt.Fprintf(w, "  - %s\n", r)
	}
}

func recommendations(m poolmode.Mode, ev poolmode.Evidence, p pgadvisory.Policy) []string {
	var rs []string
	switch m {
	case poolmode.Direct, poolmode.Session:
		rs = append(rs,
			"session-level locks are safe on a dedicated *sql.Conn; on a pooled *sql.DB prefer transaction-level locks (advisory.WithXactLock) — the driver releases session locks left on a connection returned to the pool",
			"pgx's default exec mode (cache_statement) is fine here")
		if m == poolmode.Session && ev.Source != poolmode.SourceDeclared {
			rs = append(rs, "add pgadvisory_pool_mode=session to the DSN to skip detection")
		}
	case poolmode.Transaction:
		const holdNeeds = "the driver holds each lock on a server connection of its own, so the pooler's pool_size must exceed the keys held at once"
		switch p {
		case pgadvisory.PolicyHold:
			rs = append(rs,
				"session-level lock calls alone in their statement are held for their connection (pgadvisory_policy=hold, from the DSN): "+holdNeeds,
				"transaction-level locks inside a transaction (pg_advisory_xact_lock, advisory.WithXactLock) need no holder connection")
		case pgadvisory.PolicyRewrite:
			rs = append(rs,
				"session-level lock calls are rewritten to transaction-level ones inside a transaction and held in autocommit (pgadvisory_policy=rewrite, from the DSN): "+holdNeeds,
				"prefer transaction-level locks written as such (pg_advisory_xact_lock, advisory.WithXactLock)")
		case pgadvisory.PolicyWarn, pgadvisory.PolicyAllow:
			rs = append(rs,
				"session-level lock calls are sent as written (pgadvisory_policy="+p.String()+", from the DSN): they leak to other clients here; use reject (the default), rewrite or hold",
				"use transaction-level locks inside a transaction (pg_advisory_xact_lock, advisory.WithXactLock)")
		default:
			rs = append(rs,
				"use transaction-level locks inside a transaction (pg_advisory_xact_lock, advisory.WithXactLock); session-level ones are refused (pgadvisory_policy=reject, the default)",
				"for migration tools and leader election, which need session locks, set pgadvisory_policy=hold: "+holdNeeds)
		}
		rs = append(rs,
			"default_query_exec_mode: leave it unset (the driver uses cache_describe) or choose cache_describe, exec or simple_protocol; set pgadvisory_prepared_statements=true only for PgBouncer >= 1.21 with max_prepared_statements > 0")
		if ev.Source == poolmode.SourceFallback {
			rs = append(rs, "if the pooler really runs in session mode, declare pgadvisory_pool_mode=session, or pass admin-console credentials (-admin-user, $"+adminPasswordEnv+") so the mode can be read from SHOW POOLS")
		} else if ev.Source != poolmode.SourceDeclared {
			rs = append(rs, "add pgadvisory_pool_mode=transaction to the DSN to skip detection")
		}
	case poolmode.Statement:
		rs = append(rs,
			"advisory locks cannot work behind statement pooling: no multi-statement transactions, and every lock ends with its statement; point lock users at a pool in transaction mode",
			"default_query_exec_mode: leave it unset (the driver uses cache_describe) or choose exec or simple_protocol")
	}
	return rs
}
