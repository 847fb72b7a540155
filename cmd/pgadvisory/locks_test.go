package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func TestLocksUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{nil, {"a", "b"}, {"-timeout", "0s", "dsn"}, {"-query-width", "-1", "dsn"}} {
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
	}, now, 20)
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
	printLocks(&b, nil, now, 20)
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
