package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
)

// Errors name the key as the caller named it: the namespace and name of a
// NamespacedKey (and KeyFromString's name) beside the bigint pg_locks
// shows, and a PairKey's two integers.
func TestErrorsNameTheKey(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	db, _ := newMock(t)
	noop := func(context.Context, *sql.Tx) error { return nil }
	ns := advisory.NamespacedKey("billing", "invoice-42")
	nsValue, _ := ns.Int64()
	cases := []struct {
		key  advisory.Key
		want []string
	}{
		{ns, []string{`key -2679328347133616878 (namespace "billing", name "invoice-42")`}},
		{advisory.KeyFromString("leader"), []string{`key 5574161153772379146 (name "leader")`}},
		{advisory.PairKey(7, 42), []string{"key (7,42):"}},
		{advisory.IntKey(42), []string{"key 42:"}},
	}
	if nsValue != -2679328347133616878 {
		t.Fatalf("NamespacedKey value changed: %d", nsValue)
	}
	for _, tc := range cases {
		err := advisory.WithXactLock(canceled, db, tc.key, noop)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: err = %v; want it to contain %q", tc.key, err, w)
			}
		}
	}
	// The names do not change the lock: a key decoded from pg_locks is the
	// same lock.
	if !ns.SameLock(advisory.IntKey(nsValue)) || ns == advisory.IntKey(nsValue) {
		t.Error("SameLock must ignore the names, == must not")
	}
	if gotNS, gotName, ok := ns.Name(); !ok || gotNS != "billing" || gotName != "invoice-42" {
		t.Errorf("Name() = %q, %q, %v", gotNS, gotName, ok)
	}
	if _, _, ok := advisory.IntKey(1).Name(); ok {
		t.Error("IntKey has a name")
	}
}

// Caller input in errors is capped: a 1 MiB namespace, name or resource
// shows as a short prefix and its length.
func TestErrorsCapEchoedInput(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	db, mock := newMock(t)
	noop := func(context.Context, *sql.Tx) error { return nil }
	errs := []error{
		advisory.WithXactLock(canceled, db, advisory.NamespacedKey(huge, huge), noop),
		advisory.WithXactLock(canceled, db, advisory.KeyFromString(huge), noop),
		&advisory.StaleTokenError{Resource: huge, Token: 1, Highest: 2},
	}
	tx := begin(t, db, mock)
	mock.ExpectQuery("INSERT INTO pgadvisory_fence AS f (resource, token) VALUES ($1, $2) " +
		"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now() " +
		"WHERE f.token <= EXCLUDED.token RETURNING f.token").WillReturnError(errors.New("boom"))
	errs = append(errs, advisory.CheckToken(context.Background(), tx, huge, 1))
	for i, err := range errs {
		if err == nil {
			t.Fatalf("case %d: nil error", i)
		}
		if msg := err.Error(); len(msg) > 400 || !strings.Contains(msg, "(1048576 bytes)") {
			t.Errorf("case %d: %d-byte message %.200q...; want a capped one naming the length", i, len(msg), msg)
		}
	}
}

// WithFencing and CheckToken without the schema say how to create it and
// still unwrap to the server's error.
func TestFencingWithoutSchemaHints(t *testing.T) {
	db, mock := newMock(t)
	tx := begin(t, db, mock)
	missing := &pgconn.PgError{Code: "42P01", Message: `relation "pgadvisory_fencing_seq" does not exist`}
	mock.ExpectExec("SELECT pg_advisory_xact_lock($1)").WithArgs(int64(3)).WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectQuery("SELECT nextval('pgadvisory_fencing_seq')").WillReturnError(missing)
	var tok advisory.Token
	err := advisory.XactLock(context.Background(), tx, advisory.IntKey(3), advisory.WithFencing(&tok))
	var fe *advisory.FencingSchemaError
	var pgErr *pgconn.PgError
	if !errors.As(err, &fe) || !errors.As(err, &pgErr) || !strings.Contains(err.Error(), "advisory.CreateFencingSchema") {
		t.Fatalf("err = %v; want a FencingSchemaError naming CreateFencingSchema and wrapping the PgError", err)
	}
}

// TestErrLockLostIsTheDrivers: advisory and the driver name one value, so
// either spelling matches a lost lock wherever it was found.
func TestErrLockLostIsTheDrivers(t *testing.T) {
	if advisory.ErrLockLost != pgadvisory.ErrLockLost {
		t.Fatalf("advisory.ErrLockLost (%v) and pgadvisory.ErrLockLost (%v) are different values", advisory.ErrLockLost, pgadvisory.ErrLockLost)
	}
}
