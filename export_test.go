package pgadvisory

import "github.com/jackc/pgx/v5"

// AdminProbes returns how many admin-console probes the guard of conn's
// configuration has made.
func AdminProbes(conn *pgx.Conn) int {
	gc := guardOf(conn)
	gc.g.admin.mu.Lock()
	defer gc.g.admin.mu.Unlock()
	return gc.g.admin.probes
}

// CloseIdleHolders closes the idle holder connections of the guard of
// conn's configuration (policy hold), so that a test ends without them.
func CloseIdleHolders(conn *pgx.Conn) {
	if gc := guardOf(conn); gc != nil {
		gc.g.holders.closeIdle()
	}
}
