package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/pgadvisory/advisory"
)

func init() {
	register(command{name: "locks", summary: "list who holds and who awaits advisory locks in a database", run: runLocks})
}

func runLocks(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("locks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	width := fs.Int("query-width", 60, "truncate queries to this many characters (0: no truncation)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: pgadvisory locks [-timeout D] [-query-width N] DSN")
		fmt.Fprintln(stderr, "\nLists every advisory lock held or awaited in the DSN's database (pg_locks joined with")
		fmt.Fprintln(stderr, "pg_stat_activity), then who waits for whom. Works directly and through any pooler.")
		fmt.Fprintln(stderr, "Other roles' queries and addresses are hidden without the pg_read_all_stats role.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"expected exactly one DSN argument"}
	}
	if *timeout <= 0 {
		return usageError{"-timeout must be positive"}
	}
	if *width < 0 {
		return usageError{"-query-width must not be negative"}
	}
	db, err := openForLocks(fs.Arg(0))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	locks, err := advisory.Locks(ctx, db)
	if err != nil {
		return err
	}
	printLocks(stdout, locks, time.Now(), *width)
	return nil
}

// openForLocks opens the DSN with pgx's stdlib driver. Parameters meant for
// the pgadvisory driver (pgadvisory_*) are dropped, since servers and
// poolers reject unknown startup parameters; pgx's default statement cache,
// which breaks behind transaction pooling, is replaced by the exec mode.
func openForLocks(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	for k := range cfg.RuntimeParams {
		if strings.HasPrefix(k, "pgadvisory_") {
			delete(cfg.RuntimeParams, k)
		}
	}
	if cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(1)
	return db, nil
}

// printLocks writes the lock table and the wait graph.
func printLocks(w io.Writer, locks []advisory.LockInfo, now time.Time, width int) {
	if len(locks) == 0 {
		fmt.Fprintln(w, "no advisory locks held or awaited")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPID\tSTATUS\tMODE\tWAITING\tBLOCKED BY\tUSER\tAPPLICATION\tCLIENT\tSTATE\tQUERY")
	for _, l := range locks {
		status, waiting := "holds", "-"
		if !l.Granted {
			status = "waits"
			if !l.WaitingSince.IsZero() {
				waiting = now.Sub(l.WaitingSince).Round(time.Millisecond).String()
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			l.Key, l.PID, status, modeName(l.Mode), waiting, dash(joinPIDs(l.BlockedBy)),
			dash(l.User), dash(l.ApplicationName), dash(l.ClientAddr), dash(l.State), dash(shorten(l.Query, width)))
	}
	tw.Flush()

	var waits []string
	for _, l := range locks {
		if l.Granted {
			continue
		}
		by := "no one (about to be granted)"
		if len(l.BlockedBy) > 0 {
			by = "pid " + joinPIDs(l.BlockedBy)
		}
		waits = append(waits, fmt.Sprintf("  pid %d waits for key %s (%s), blocked by %s", l.PID, l.Key, modeName(l.Mode), by))
	}
	if len(waits) > 0 {
		fmt.Fprintln(w, "\nWho waits for whom:")
		for _, s := range waits {
			fmt.Fprintln(w, s)
		}
	}
}

func modeName(m string) string {
	switch m {
	case "ExclusiveLock":
		return "exclusive"
	case "ShareLock":
		return "shared"
	}
	return m
}

func joinPIDs(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shorten collapses whitespace (queries span lines) and truncates to width
// runes.
func shorten(q string, width int) string {
	q = strings.Join(strings.Fields(q), " ")
	if r := []rune(q); width > 0 && len(r) > width {
		return string(r[:max(width-1, 0)]) + "…"
	}
	return q
}
