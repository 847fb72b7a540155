package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func TestLocksUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{nil, {"a", "b"}, {"-timeout", "0s", "dsn"}, {"-query-width", "-1", "dsn"},
		{"-key", "x", "dsn"}, {"-key", "1,99999999999", "dsn"}, {"-name", "no-colon", "dsn"}, {"-key", "1", "-name", "a:b", "dsn"}} {
		var ue usageError
		if err := runLocks(context.Background(), args, &out, &errb); !errors.As(err, &ue) {
			t.Errorf("args %q: err = %v, want usageError", args, err)
		}
	}
	if err := runLocks(context.Background(), []string{"postgres://%zz"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "parse DSN") {
		t.Errorf("bad DSN: err = %v", err)
	}
}

func TestPrintLocks(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	printLocks(&b, []advisory.LockInfo{
		{Key: advisory.IntKey(42), PID: 10, Granted: true, Mode: "ExclusiveLock", User: "app", State: "idle in transaction", Query: "SELECT\n  pg_advisory_xact_lock(42)"},
		{Key: advisory.IntKey(42), PID: 11, Mode: "ExclusiveLock", WaitingSince: now.Add(-1500 * time.Millisecond), BlockedBy: []int{10}, Query: strings.Repeat("x", 100)},
		{Key: advisory.PairKey(1, 2), PID: 12, Granted: true, Mode: "ShareLock"},
	}, now, 20, nil, nil)
	out := b.String()
	for _, want := range []string{
		"KEY", "BLOCKED BY",
		"SELECT pg_advisory_…", // whitespace collapsed, cut to 20 runes with the ellipsis
		"1.5s",
		"(1,2)", "shared",
		"pid 11 waits for key 42 (exclusive), blocked by pid 10",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printLocks(&b, nil, now, 20, nil, nil)
	if !strings.Contains(b.String(), "no advisory locks") {
		t.Errorf("empty listing: %q", b.String())
	}
}

func TestLocksAgainstHarness(t *testing.T) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction))
	ctx := t.Context()
	db, err := openForLocks(c.WideDSN(pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(3)
	key := advisory.NamespacedKey("pgadvisory-cli-test", t.Name())
	held, release := make(chan int, 1), make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- advisory.WithXactLock(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
			var pid int
			if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			held <- pid
			<-release
			return nil
		})
	}()
	holderPID := <-held
	waiterDone := make(chan error, 1)
	go func() {
		waiterDone <- advisory.WithXactLock(ctx, db, key, func(context.Context, *sql.Tx) error { return nil }, advisory.WithTimeout(30*time.Second))
	}()
	for {
		w, err := advisory.Waiters(ctx, db, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(w) == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, dsn := range []string{c.DirectDSN(), c.DSN(pgbouncer.Transaction)} {
		var out, errb bytes.Buffer
		if err := runLocks(ctx, []string{dsn + "&pgadvisory_pool_mode=transaction"}, &out, &errb); err != nil {
			t.Fatalf("%v\n%s", err, errb.String())
		}
		pid := strconv.Itoa(holderPID)
		for _, want := range []string{key.String() + "  " + pid, "holds", "waits", "blocked by pid " + pid, "idle in transaction"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
		t.Logf("pgadvisory locks:\n%s", out.String())
	}
	close(release)
	if err := errors.Join(<-holderDone, <-waiterDone); err != nil {
		t.Fatal(err)
	}
}

// A session lock taken through PgBouncer in transaction mode by a client
// that then goes away stays on the pooler's idle server connection, held by
// nobody. pgadvisory locks flags it LEAKED: through the pooler by itself
// (it recognizes the pooler's address from its own connection), directly
// when told the pooler's address, and as SESSION when it cannot tell.
func TestLocksFlagsLeakThroughPgBouncer(t *testing.T) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction))
	ctx := t.Context()
	const ns, name = "billing", "invoice-42"
	key := advisory.NamespacedKey(ns, name)
	v, _ := key.Int64()

	leaker, err := pgx.Connect(ctx, c.DSN(pgbouncer.Transaction)+"&default_query_exec_mode=simple_protocol&application_name=leaky-worker")
	if err != nil {
		t.Fatal(err)
	}
	var leakPID int
	//pgadvisory:ignore the leak through transaction pooling is what this test lists
	if err := leaker.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) l", v).Scan(&leakPID); err != nil {
		t.Fatal(err)
	}
	leaker.Close(ctx) // the client leaves; the lock stays on PgBouncer's server connection
	su, err := pgx.Connect(ctx, c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(context.Background())
	t.Cleanup(func() { _, _ = su.Exec(context.Background(), "SELECT pg_terminate_backend($1)", leakPID) })
	var poolerAddr string
	if err := su.QueryRow(ctx, "SELECT coalesce(host(client_addr), '') FROM pg_stat_activity WHERE pid = $1", leakPID).Scan(&poolerAddr); err != nil {
		t.Fatal(err)
	}

	locks := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if err := runLocks(ctx, args, &out, &errb); err != nil {
			t.Fatalf("locks %q: %v\n%s", args, err, errb.String())
		}
		return out.String()
	}
	// Directly first: a listing through the pooler runs on the leaked
	// backend and replaces its last query.
	if direct := locks("-key", key.String(), c.DirectDSN()); !strings.Contains(direct, "SESSION") || strings.Contains(direct, "LEAKED") {
		t.Errorf("directly, without -pooler-addr: want SESSION (a session lock on an idle backend), not LEAKED:\n%s", direct)
	}
	direct := locks("-key", key.String(), "-pooler-addr", poolerAddr, c.DirectDSN())
	t.Logf("pgadvisory locks -key %s -pooler-addr %s <direct DSN>:\n%s", key, poolerAddr, direct)
	if !strings.Contains(direct, "LEAKED") || !strings.Contains(direct, "pg_advisory_lock") {
		t.Errorf("directly, with -pooler-addr %s: want LEAKED and the leaker's last query:\n%s", poolerAddr, direct)
	}

	pid := strconv.Itoa(leakPID)
	through := locks("-name", ns+":"+name, c.DSN(pgbouncer.Transaction))
	t.Logf("pgadvisory locks -name %s:%s <pgbouncer DSN>:\n%s", ns, name, through)
	for _, want := range []string{"billing:invoice-42 (" + key.String() + ")  " + pid, "holds", "LEAKED", "leaky-worker",
		"Looks leaked", "pooler's idle server connection"} {
		if !strings.Contains(through, want) {
			t.Errorf("through PgBouncer: output lacks %q:\n%s", want, through)
		}
	}
	var got []jsonLock
	if err := json.Unmarshal([]byte(locks("-json", "-name", ns+":"+name, c.DSN(pgbouncer.Transaction))), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Flag != flagLeaked || got[0].PID != leakPID || got[0].Name != ns+":"+name ||
		got[0].Key != key.String() || !got[0].Granted {
		t.Fatalf("-json = %+v; want the one leaked lock", got)
	}
	if other := locks("-key", "1,2", c.DirectDSN()); !strings.Contains(other, "no advisory lock on key (1,2)") {
		t.Errorf("-key of a free key: %s", other)
	}
}

func TestParseKeyAndName(t *testing.T) {
	for in, want := range map[string]advisory.Key{
		"42": advisory.IntKey(42), "-9": advisory.IntKey(-9), "7,42": advisory.PairKey(7, 42),
		"(7,42)": advisory.PairKey(7, 42), "(-1, 2)": advisory.PairKey(-1, 2),
	} {
		if got, err := parseKey(in); err != nil || got != want {
			t.Errorf("parseKey(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	w, err := keyFilter("", "billing:invoice:42")
	if err != nil || !w.key.SameLock(advisory.NamespacedKey("billing", "invoice:42")) {
		t.Errorf("-name billing:invoice:42 = %+v, %v; want NamespacedKey(billing, invoice:42)", w, err)
	}
}

// The leak heuristic, one row per case of the usage text.
func TestSuspect(t *testing.T) {
	poolers := map[string]bool{"10.0.0.5": true}
	held := func(state, addr string) advisory.LockInfo {
		return advisory.LockInfo{Granted: true, State: state, ClientAddr: addr, BackendType: "client backend"}
	}
	self := held("active", "10.0.0.5")
	self.Self = true
	waiter := held("idle", "10.0.0.5")
	waiter.Granted = false
	worker := held("idle", "10.0.0.5")
	worker.BackendType = "parallel worker"
	for _, tc := range []struct {
		name string
		l    advisory.LockInfo
		want string
	}{
		{"idle on a pooler", held("idle", "10.0.0.5"), flagLeaked},
		{"the listing's own pooled backend", self, flagLeaked},
		{"idle direct client", held("idle", "10.0.0.9"), flagSession},
		{"in a transaction on a pooler", held("idle in transaction", "10.0.0.5"), flagPooler},
		{"active on a pooler", held("active", "10.0.0.5"), flagPooler},
		{"in a transaction, direct", held("idle in transaction", "10.0.0.9"), ""},
		{"a waiter", waiter, ""},
		{"no pg_stat_activity row", held("", "10.0.0.5"), ""},
		{"not a client backend", worker, ""},
	} {
		if got, _ := suspect(tc.l, poolers); got != tc.want {
			t.Errorf("%s: flag %q; want %q", tc.name, got, tc.want)
		}
	}
}
