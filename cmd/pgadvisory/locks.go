package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
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
	keyFlag := fs.String("key", "", "show only this key: a bigint (`N`) or a pair (A,B)")
	nameFlag := fs.String("name", "", "show only the key advisory.NamespacedKey(NAMESPACE, NAME) computes, given as `NAMESPACE:NAME` (split at the first colon)")
	poolers := fs.String("pooler-addr", "", "comma-separated `addresses` of poolers as PostgreSQL sees them (pg_stat_activity.client_addr); found by itself when DSN goes through one")
	asJSON := fs.Bool("json", false, "print the locks as a JSON array instead of a table")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: pgadvisory locks [-key N | -name NAMESPACE:NAME] [-json] [-pooler-addr ADDRS] [-timeout D] [-query-width N] DSN")
		fmt.Fprintln(stderr, "\nLists every advisory lock held or awaited in the DSN's database (pg_locks joined with")
		fmt.Fprintln(stderr, "pg_stat_activity), then who waits for whom. Works directly and through any pooler.")
		fmt.Fprintln(stderr, "Other roles' queries and addresses are hidden without the pg_read_all_stats role.")
		fmt.Fprintln(stderr, "\nThe FLAG column marks locks that look leaked:")
		fmt.Fprintln(stderr, "  LEAKED   held by an idle backend (no transaction open, so a session lock) whose client is a")
		fmt.Fprintln(stderr, "           pooler: the client that took it is gone and the pooler hands the backend to others")
		fmt.Fprintln(stderr, "  SESSION  held by an idle backend of another client: a session lock, intended (a leader) or")
		fmt.Fprintln(stderr, "           left behind in a client-side pool")
		fmt.Fprintln(stderr, "  POOLER   held in a transaction on a pooler's server connection: a session lock of an earlier")
		fmt.Fprintln(stderr, "           client may sit on that backend; check that this transaction took it")
		fmt.Fprintln(stderr, "A client is a pooler when its address is in -pooler-addr or is the address this command's")
		fmt.Fprintln(stderr, "own connection arrives from when DSN goes through a pooler.")
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
	filter, err := keyFilter(*keyFlag, *nameFlag)
	if err != nil {
		return err
	}
	db, err := openForLocks(fs.Arg(0))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	known := poolerSet(*poolers)
	if addr, through, err := ownPooler(ctx, db); err != nil {
		return err
	} else if through {
		known[addr] = true
	}
	locks, err := advisory.Locks(ctx, db)
	if err != nil {
		return err
	}
	if filter != nil {
		locks = slices.DeleteFunc(locks, func(l advisory.LockInfo) bool { return !l.Key.SameLock(filter.key) })
	}
	if *asJSON {
		return printLocksJSON(stdout, locks, known, filter)
	}
	printLocks(stdout, locks, time.Now(), *width, known, filter)
	return nil
}

// wantedKey is the key of -key or -name, and how to print it.
type wantedKey struct {
	key   advisory.Key
	label string // "billing:invoice-42 (-2679328347133616878)" for -name
}

// keyFilter parses -key and -name; nil when neither is given.
func keyFilter(keyArg, nameArg string) (*wantedKey, error) {
	switch {
	case keyArg != "" && nameArg != "":
		return nil, usageError{"give -key or -name, not both"}
	case nameArg != "":
		ns, name, ok := strings.Cut(nameArg, ":")
		if !ok {
			return nil, usageError{"-name wants NAMESPACE:NAME, as passed to advisory.NamespacedKey"}
		}
		k := advisory.NamespacedKey(ns, name)
		return &wantedKey{key: k, label: nameArg + " (" + k.String() + ")"}, nil
	case keyArg != "":
		k, err := parseKey(keyArg)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		return &wantedKey{key: k, label: k.String()}, nil
	}
	return nil, nil
}

// parseKey reads "N" as IntKey(N) and "A,B" or "(A,B)" as PairKey(A, B).
func parseKey(s string) (advisory.Key, error) {
	t := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "("), ")")
	if a, b, pair := strings.Cut(t, ","); pair {
		x, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 32)
		y, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 32)
		if err1 != nil || err2 != nil {
			return advisory.Key{}, fmt.Errorf("-key %q: a pair is two int4 values, as in 7,42", s)
		}
		return advisory.PairKey(int32(x), int32(y)), nil
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return advisory.Key{}, fmt.Errorf("-key %q: want a bigint or a pair A,B", s)
	}
	return advisory.IntKey(v), nil
}

// poolerSet parses -pooler-addr.
func poolerSet(list string) map[string]bool {
	set := map[string]bool{}
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			set[a] = true
		}
	}
	return set
}

// ownPooler tells whether db's connection goes through a pooler, the way
// the driver's detection does (the BackendKeyData PID the client was given
// is not pg_backend_pid()), and if so the pooler's address as PostgreSQL
// sees it: the client_addr of every server connection of that pooler.
func ownPooler(ctx context.Context, db *sql.DB) (addr string, through bool, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", false, err
	}
	defer conn.Close()
	var keyPID uint32
	if err := conn.Raw(func(dc any) error {
		if sc, ok := dc.(*stdlib.Conn); ok {
			keyPID = sc.Conn().PgConn().PID()
		}
		return nil
	}); err != nil {
		return "", false, err
	}
	var serverPID uint32
	var client sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid(), host(inet_client_addr())").Scan(&serverPID, &client); err != nil {
		return "", false, fmt.Errorf("read own backend: %w", err)
	}
	return client.String, keyPID != 0 && keyPID != serverPID, nil
}

// Flags of locks that look leaked (see the usage text).
const (
	flagLeaked  = "LEAKED"
	flagSession = "SESSION"
	flagPooler  = "POOLER"
)

// suspect classifies a lock from its backend's pg_stat_activity row.
// Transaction-level locks end with their transaction, so a lock on a
// backend that is idle (no transaction open) is a session-level lock;
// poolers are recognized by their address (client_addr).
func suspect(l advisory.LockInfo, poolers map[string]bool) (flag, reason string) {
	if !l.Granted || l.State == "" || (l.BackendType != "" && l.BackendType != "client backend") {
		return "", ""
	}
	pooler := poolers[l.ClientAddr]
	// The backend that ran the listing was idle until it was lent to this
	// command, and the listing takes no lock.
	idle := l.State == "idle" || l.Self
	switch {
	case idle && pooler:
		return flagLeaked, "session lock on a pooler's idle server connection: the client that took it is gone, " +
			"the pooler hands this backend to other clients, and the lock lasts until the pooler closes the connection (server_lifetime)"
	case idle:
		return flagSession, "session lock on an idle connection: a leader's lock (HoldSession) if someone owns it, " +
			"else left behind in a client-side pool (*sql.DB)"
	case pooler:
		return flagPooler, "held in a transaction on a pooler's server connection: if this transaction did not take it, " +
			"it is a session lock an earlier client left on the backend"
	}
	return "", ""
}

// jsonLock is one lock of -json output.
type jsonLock struct {
	Key             string     `json:"key"`
	Name            string     `json:"name,omitempty"`
	PID             int        `json:"pid"`
	Granted         bool       `json:"granted"`
	Mode            string     `json:"mode"`
	WaitingSince    *time.Time `json:"waiting_since,omitempty"`
	BlockedBy       []int      `json:"blocked_by,omitempty"`
	User            string     `json:"user,omitempty"`
	ApplicationName string     `json:"application_name,omitempty"`
	ClientAddr      string     `json:"client_addr,omitempty"`
	ClientPort      int        `json:"client_port,omitempty"`
	BackendType     string     `json:"backend_type,omitempty"`
	State           string     `json:"state,omitempty"`
	XactStart       *time.Time `json:"xact_start,omitempty"`
	Query           string     `json:"query,omitempty"`
	Self            bool       `json:"self,omitempty"`
	Flag            string     `json:"flag,omitempty"`
	Reason          string     `json:"reason,omitempty"`
}

func printLocksJSON(w io.Writer, locks []advisory.LockInfo, poolers map[string]bool, want *wantedKey) error {
	out := make([]jsonLock, 0, len(locks))
	for _, l := range locks {
		j := jsonLock{Key: l.Key.String(), PID: l.PID, Self: l.Self, Granted: l.Granted, Mode: modeName(l.Mode), BlockedBy: l.BlockedBy,
			User: l.User, ApplicationName: l.ApplicationName, ClientAddr: l.ClientAddr, ClientPort: l.ClientPort,
			BackendType: l.BackendType, State: l.State, Query: l.Query}
		if want != nil && want.label != j.Key {
			j.Name = strings.TrimSuffix(want.label, " ("+j.Key+")")
		}
		if !l.WaitingSince.IsZero() {
			j.WaitingSince = &l.WaitingSince
		}
		if !l.XactStart.IsZero() {
			j.XactStart = &l.XactStart
		}
		j.Flag, j.Reason = suspect(l, poolers)
		out = append(out, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
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

// printLocks writes the lock table, the wait graph and the locks that look
// leaked.
func printLocks(w io.Writer, locks []advisory.LockInfo, now time.Time, width int, poolers map[string]bool, want *wantedKey) {
	if len(locks) == 0 {
		if want != nil {
			fmt.Fprintf(w, "no advisory lock on key %s held or awaited\n", want.label)
			return
		}
		fmt.Fprintln(w, "no advisory locks held or awaited")
		return
	}
	label := func(k advisory.Key) string {
		if want != nil {
			return want.label
		}
		return k.String()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPID\tSTATUS\tFLAG\tMODE\tWAITING\tBLOCKED BY\tUSER\tAPPLICATION\tCLIENT\tSTATE\tQUERY")
	var leaks, pooled []string
	for _, l := range locks {
		status, waiting := "holds", "-"
		if !l.Granted {
			status = "waits"
			if !l.WaitingSince.IsZero() {
				waiting = now.Sub(l.WaitingSince).Round(time.Millisecond).String()
			}
		}
		flag, reason := suspect(l, poolers)
		line := fmt.Sprintf("  key %s, pid %d: %s: %s", label(l.Key), l.PID, flag, reason)
		switch flag {
		case flagLeaked, flagSession:
			leaks = append(leaks, line)
		case flagPooler:
			pooled = append(pooled, line)
		}
		state, query := l.State, shorten(l.Query, width)
		if l.Self {
			// The pooler lent this backend to the listing: its state and
			// query are the listing's own.
			state, query = "idle (lent to this listing)", "(this listing)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			label(l.Key), l.PID, status, dash(flag), modeName(l.Mode), waiting, dash(joinPIDs(l.BlockedBy)),
			dash(l.User), dash(l.ApplicationName), dash(l.ClientAddr), dash(state), dash(query))
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
		waits = append(waits, fmt.Sprintf("  pid %d waits for key %s (%s), blocked by %s", l.PID, label(l.Key), modeName(l.Mode), by))
	}
	if len(waits) > 0 {
		fmt.Fprintln(w, "\nWho waits for whom:")
		for _, s := range waits {
			fmt.Fprintln(w, s)
		}
	}
	if len(leaks) > 0 {
		fmt.Fprintln(w, "\nLooks leaked (the query shown is the backend's last, perhaps another client's):")
		for _, s := range leaks {
			fmt.Fprintln(w, s)
		}
	}
	if len(pooled) > 0 {
		fmt.Fprintln(w, "\nHeld through a pooler, in a transaction (fine if that transaction took the lock):")
		for _, s := range pooled {
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
