package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// advisory.HoldSession learns the pool mode from the pgadvisory driver
// (advisory.PoolModer through (*sql.Conn).Raw), with no WithPoolMode: it
// holds a leader lock direct and through session pooling, and refuses
// through transaction pooling before sending anything.
func TestIntegrationHoldSessionThroughDriver(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	key := advisory.IntKey(880501)
	for _, tc := range []struct {
		name     string
		dsn      string
		wantMode poolmode.Mode
	}{
		{"direct", c.DirectDSN(), poolmode.Direct},
		// Session pooling is recognised through the admin console; without
		// it the driver would assume transaction pooling (fail safe).
		{"session", withParams(t, c.WideDSN(pgbouncer.Session), adminParams(c)...), poolmode.Session},
		{"transaction", c.DSN(pgbouncer.Transaction), poolmode.Transaction},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db := openT(t, tc.dsn)
			lock, err := advisory.HoldSession(ctx, db, key, advisory.WithHealthInterval(250*time.Millisecond))
			if !tc.wantMode.SessionLocksSafe() {
				var pm *advisory.PoolModeError
				if !errors.Is(err, advisory.ErrUnsafePoolMode) || !errors.As(err, &pm) || pm.Mode != tc.wantMode {
					t.Fatalf("HoldSession through %s pooling = %v, want a PoolModeError for %v", tc.name, err, tc.wantMode)
				}
				if n := advisoryHolders(t, c, 880501); n != 0 {
					t.Fatalf("%d locks held after the refusal", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("HoldSession: %v", err)
			}
			if n := advisoryHolders(t, c, 880501); n != 1 {
				t.Fatalf("%d holders while the leader lock is held, want 1", n)
			}
			// A second candidate on another connection does not get it.
			other := openT(t, tc.dsn)
			if _, err := advisory.HoldSession(ctx, other, key, advisory.NoWait()); !errors.Is(err, advisory.ErrNotAcquired) {
				t.Fatalf("second HoldSession = %v, want ErrNotAcquired", err)
			}
			time.Sleep(600 * time.Millisecond) // two health checks; each has one interval to answer, which a loaded -race run needs
			if err := lock.Err(); err != nil {
				t.Fatalf("lock reported lost while held: %v", err)
			}
			if err := lock.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if n := advisoryHolders(t, c, 880501); n != 0 {
				t.Fatalf("%d holders after Release", n)
			}
		})
	}
}
