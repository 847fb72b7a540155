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

func (core) WithXactLock(ctx context.Context, fn string, handle any, begin bridge.Begin, key Key, body func(context.Context, bridge.Tx) error, opts []LockOption) error {
	return withXactLock(ctx, fn, handle, begin, key, body, opts)
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
