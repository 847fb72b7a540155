package advisory

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// nilQuerier is a foreign Querier that breaks the database/sql contract:
// nil results with nil errors.
type nilQuerier struct{}

func (nilQuerier) ExecContext(context.Context, string, ...any) (sql.Result, error) { return nil, nil }
func (nilQuerier) QueryContext(context.Context, string, ...any) (*sql.Rows, error) { return nil, nil }
func (nilQuerier) QueryRowContext(context.Context, string, ...any) *sql.Row        { return nil }

// nilBeginner returns neither a transaction nor an error.
type nilBeginner struct{}

func (nilBeginner) BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error) { return nil, nil }

// No public function or method panics on nil, zero or foreign input: each
// returns an error (or, for accessors, a zero value) instead.
func TestNoPanicOnBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	fn := func(context.Context, *sql.Tx) error { return nil }
	var nilLock *SessionLock
	zeroLock := &SessionLock{}
	keys := []Key{{}, IntKey(0), PairKey(0, 0), NamespacedKey("", ""), KeyFromString("")}
	calls := map[string]func() error{
		"WithXactLock zero sql.DB":      func() error { return WithXactLock(ctx, &sql.DB{}, IntKey(1), fn) },
		"WithXactLock foreign Beginner": func() error { return WithXactLock(ctx, nilBeginner{}, IntKey(1), fn) },
		"XactLock foreign Querier try":  func() error { _, err := TryXactLock(ctx, nilQuerier{}, IntKey(1)); return err },
		"XactLock foreign Querier restore": func() error {
			return XactLock(ctx, nilQuerier{}, IntKey(1), WithTimeout(time.Second), RestoreLockTimeout())
		},
		"XactLock zero sql.Tx":            func() error { return XactLock(ctx, &sql.Tx{}, IntKey(1)) },
		"CheckToken foreign Querier":      func() error { return CheckToken(ctx, nilQuerier{}, "r", 1) },
		"CheckToken zero sql.Tx":          func() error { return CheckToken(ctx, &sql.Tx{}, "r", 1) },
		"CreateFencingSchema zero sql.DB": func() error { return CreateFencingSchema(ctx, &sql.DB{}) },
		"Locks foreign Querier":           func() error { _, err := Locks(ctx, nilQuerier{}); return err },
		"Locks nil":                       func() error { _, err := Locks(ctx, nil); return err },
		"Locks zero sql.DB":               func() error { _, err := Locks(ctx, &sql.DB{}); return err },
		"Holders nil ctx":                 func() error { _, err := Holders(nilCtx, nilQuerier{}, IntKey(1)); return err },
		"Waiters typed nil":               func() error { _, err := Waiters(ctx, (*sql.DB)(nil), IntKey(1)); return err },
		"HoldSession zero sql.DB": func() error {
			_, err := HoldSession(ctx, &sql.DB{}, IntKey(1), WithPoolMode(poolmode.Direct))
			return err
		},
		"HoldSession nil ctx":      func() error { _, err := HoldSession(nilCtx, &sql.DB{}, IntKey(1)); return err },
		"nil SessionLock Release":  func() error { return nilLock.Release(ctx) },
		"zero SessionLock Release": func() error { return zeroLock.Release(ctx) },
		"nil SessionLock Err":      func() error { return nilLock.Err() },
		"zero SessionLock Err":     func() error { return zeroLock.Err() },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				err = call()
			}()
			if err == nil || !strings.HasPrefix(err.Error(), "advisory: ") {
				t.Fatalf("err = %v; want an advisory: error", err)
			}
		})
	}
	// A foreign Querier whose Exec reports success is believed: no panic,
	// no error.
	noPanic(t, "XactLock on a foreign Querier", func() {
		if err := XactLock(ctx, nilQuerier{}, IntKey(1)); err != nil {
			t.Errorf("XactLock = %v", err)
		}
		if err := CreateFencingSchema(ctx, nilQuerier{}); err != nil {
			t.Errorf("CreateFencingSchema = %v", err)
		}
	})
	// Accessors of a lock that HoldSession did not make, and error values
	// built by hand, return zero values and readable text.
	noPanic(t, "SessionLock accessors", func() {
		for _, l := range []*SessionLock{nilLock, zeroLock} {
			_, _, _ = l.Key(), l.PID(), l.Token()
			select {
			case <-l.Done():
			default:
				t.Error("Done of a lock that is not held is open")
			}
			if l.Context().Err() == nil {
				t.Error("Context of a lock that is not held is live")
			}
		}
		for _, e := range []error{(*LockError)(nil), &LockError{}, (*PoolModeError)(nil), &PoolModeError{},
			(*StaleTokenError)(nil), &StaleTokenError{}, (*FencingSchemaError)(nil), &FencingSchemaError{}} {
			if e.Error() == "" {
				t.Errorf("%T: empty message", e)
			}
			_ = errors.Unwrap(e)
			_ = errors.Is(e, ErrLockLost)
		}
		for _, k := range keys {
			_, _, _ = k.String(), k.describe(), k.IsPair()
		}
	})
}

// Release with a nil context is an error and keeps the lock: a later
// Release with a context unlocks it (sqlmock expects exactly one unlock).
func TestReleaseNilContextKeepsTheLock(t *testing.T) {
	ctx := context.Background()
	l, mock := heldSessionMock(t)
	var nilCtx context.Context
	if err := l.Release(nilCtx); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Fatalf("Release(nil) = %v; want a nil-context error", err)
	}
	if l.Err() != nil {
		t.Fatalf("after Release(nil) the lock is reported gone: %v", l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after Release(nil): %v", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("%s: panic: %v", what, p)
		}
	}()
	f()
}

// The key constructors and the error text built from them accept any
// string: no panic, the names round-trip, and what an error echoes is
// capped and stays valid UTF-8 when the input is.
func FuzzKeyConstructors(f *testing.F) {
	for _, s := range [][2]string{{"", ""}, {"billing", "invoice-42"}, {"ключи", "x"}, {strings.Repeat("é", 40), "\x00"}, {"\xff\xfe", "a"}} {
		f.Add(s[0], s[1], int32(0), int32(-1))
	}
	f.Fuzz(func(t *testing.T, ns, name string, a, b int32) {
		k := NamespacedKey(ns, name)
		if gotNS, gotName, ok := k.Name(); !ok || gotNS != ns || gotName != name {
			t.Fatalf("Name() = %q, %q, %v", gotNS, gotName, ok)
		}
		if !k.SameLock(KeyFromString(strconv.Itoa(len(ns)) + ":" + ns + name)) {
			t.Fatal("NamespacedKey is not the documented KeyFromString")
		}
		msg := (&LockError{Op: "lock", Key: k, Kind: ErrLockTimeout}).Error()
		if len(msg) > 2*4*maxEcho+200 { // strconv.Quote writes a byte as at most 4
			t.Fatalf("%d-byte message for %d+%d bytes of names", len(msg), len(ns), len(name))
		}
		if c := capInput(ns); utf8.ValidString(ns) && !utf8.ValidString(c) {
			t.Fatalf("capInput cut a rune: %q", c)
		}
		if x, y, ok := PairKey(a, b).Pair(); !ok || x != a || y != b {
			t.Fatalf("PairKey(%d, %d).Pair() = %d, %d", a, b, x, y)
		}
	})
}
