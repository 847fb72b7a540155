package advisory

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// noCancel is a ctxwatch.Handler that does nothing: the benchmark's
// contexts are not canceled.
type noCancel struct{}

func (noCancel) HandleCancel(context.Context) {}
func (noCancel) HandleUnwatchAfterCancel()    {}

// watcher watches each call's context as pgconn does for every query.
var watcher = ctxwatch.NewContextWatcher(noCancel{})

// watch is one pgx call's watching of ctx.
func watch(ctx context.Context) {
	watcher.Watch(ctx)
	watcher.Unwatch()
}

// BenchmarkWaitBound measures what WithTimeout's bound costs a
// WithXactLock cycle on the client, without a server: the three pgx calls
// of a cycle (BEGIN and the lock statement under the bound, COMMIT under the
// caller's context), each watched by pgconn's own ContextWatcher, with the
// bound around the first two, against the same calls without it.
//
//	go test -run '^$' -bench WaitBound -benchmem -count 8 ./advisory
func BenchmarkWaitBound(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("bound=none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			watch(parent)
			watch(parent)
			watch(parent)
		}
	})
	b.Run("bound=WithTimeout", func(b *testing.B) {
		var c config
		b.ReportAllocs()
		for b.Loop() {
			bd := startWaitBound(&c, parent, 5*time.Second, &errWaitLimit)
			watch(bd.ctx) // BEGIN
			if bd.stop() {
				b.Fatal("the bound fired")
			}
			bd.rearm(5*time.Second, &errNoAnswer)
			watch(bd.ctx) // the lock statement
			if bd.stop() {
				b.Fatal("the bound fired")
			}
			watch(parent) // COMMIT
			bd.release()
		}
	})
}
