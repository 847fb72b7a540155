package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory"
)

// blockingBeginner's BeginTx waits for its context to end, like a pool with
// no free connection.
type blockingBeginner struct{}

func (blockingBeginner) BeginTx(ctx context.Context, _ *sql.TxOptions) (*sql.Tx, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// WithTimeout follows testing/synctest's fake clock: inside a bubble, the
// wait for a connection ends when WithTimeout's fake time has passed, and
// a bound outside a bubble afterwards still runs on real time. (A bound
// timer shared across calls would break both: created in a bubble, it
// cannot be used outside it, and its time is not the bubble's.)
func TestWithTimeoutInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		err := advisory.WithXactLock(t.Context(), blockingBeginner{}, advisory.IntKey(1), func(context.Context, *sql.Tx) error { return nil },
			advisory.WithTimeout(3*time.Second))
		if !errors.Is(err, advisory.ErrConnTimeout) {
			t.Fatalf("err %v, want ErrConnTimeout", err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Fatalf("waited %v of fake time, want 3s", waited)
		}
	})
	// A bound outside a bubble, after one inside it, runs on real time.
	err := advisory.WithXactLock(t.Context(), blockingBeginner{}, advisory.IntKey(1), func(context.Context, *sql.Tx) error { return nil },
		advisory.WithTimeout(time.Millisecond))
	if !errors.Is(err, advisory.ErrConnTimeout) {
		t.Fatalf("outside the bubble: err %v, want ErrConnTimeout", err)
	}
}
