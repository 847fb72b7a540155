package advisory

import (
	"context"

	"github.com/pgadvisory/pgadvisory/advisory/internal/bridge"
)

// core is the lock logic as driver adapters see it (package pgxadvisory):
// the same functions the database/sql API runs on, over bridge's
// interfaces. fn names the public function in errors.
type core struct{}

func init() { bridge.Core = core{} }

// WithXactLock takes the adapter's call as one value, run (nil: no
// callback), which it allocates once; the functions made from it here do
// not escape withXactLock, so they cost no allocation.
func (core) WithXactLock(ctx context.Context, fn string, handle any, run bridge.XactRun, key Key, opts []LockOption) error {
	if run == nil {
		return withXactLock(ctx, fn, handle, nil, key, nil, opts)
	}
	return withXactLock(ctx, fn, handle, run.Begin, key, func(ctx context.Context, _ bridge.Tx) error { return run.Body(ctx) }, opts)
}

func (core) XactLock(ctx context.Context, fn string, tx bridge.Stmts, key Key, opts []LockOption) error {
	return xactLock(ctx, fn, tx, key, opts)
}

func (core) TryXactLock(ctx context.Context, fn string, tx bridge.Stmts, key Key, opts []LockOption) (bool, error) {
	return tryXactLock(ctx, fn, tx, key, opts)
}

func (core) CheckToken(ctx context.Context, fn string, tx bridge.Stmts, resource string, token Token) error {
	return checkToken(ctx, fn, tx, resource, token)
}

func (core) HoldSession(ctx context.Context, fn string, handle any, pin bridge.Pin, key Key, opts []LockOption) (*SessionLock, error) {
	return holdSession(ctx, fn, handle, pin, key, opts)
}

func (core) CreateFencingSchema(ctx context.Context, fn string, db bridge.Stmts) error {
	return createFencingSchema(ctx, fn, db)
}
