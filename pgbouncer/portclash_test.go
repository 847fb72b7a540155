package pgbouncer

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// A port taken between choosing it and binding it makes the server exit;
// the harness must notice and retry another port, for PostgreSQL and for
// PgBouncer alike.
func TestPortClashRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	if _, err := findBinaries(); err != nil {
		if Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	var mu sync.Mutex
	handedOut := 0
	old := freePort
	t.Cleanup(func() { freePort = old })
	// The first choice for PostgreSQL and the first for PgBouncer are the
	// taken port.
	freePort = func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		handedOut++
		if handedOut == 1 || handedOut == 3 {
			return takenPort, nil
		}
		return kernelFreePort()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, WithBackend(BackendLocal), WithModes(Transaction), WithLogf(t.Logf))
	if err != nil {
		t.Fatalf("Start with a clashing port: %v", err)
	}
	defer c.Close()
	if _, p := c.impl.postgresAddr(); p == takenPort {
		t.Fatal("PostgreSQL reported on the taken port")
	}
	if _, p, _ := c.impl.bouncerAddr(Transaction); p == takenPort {
		t.Fatal("PgBouncer reported on the taken port")
	}
	if handedOut < 4 {
		t.Fatalf("only %d ports handed out: the clash was not retried for both servers", handedOut)
	}
	if err := ping(ctx, c.DSN(Transaction)); err != nil {
		t.Fatal(err)
	}
}
