package pgbouncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// WithWidePoolSize reaches the running PgBouncer: its admin console lists
// the wide database with that pool size.
func TestHarnessWidePoolSize(t *testing.T) {
	const size = 3
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction), pgbouncer.WithWidePoolSize(size))
	if got := c.WidePoolSize(); got != size {
		t.Fatalf("WidePoolSize() = %d, want %d", got, size)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, c.AdminDSN(pgbouncer.Transaction))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	res, err := conn.Exec(ctx, "SHOW DATABASES").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	nameCol, sizeCol := -1, -1
	for i, f := range res[0].FieldDescriptions {
		switch f.Name {
		case "name":
			nameCol = i
		case "pool_size":
			sizeCol = i
		}
	}
	if nameCol < 0 || sizeCol < 0 {
		t.Fatalf("SHOW DATABASES lacks name or pool_size: %v", res[0].FieldDescriptions)
	}
	for _, row := range res[0].Rows {
		if string(row[nameCol]) == pgbouncer.WideDatabase {
			if got := string(row[sizeCol]); got != "3" {
				t.Fatalf("%s pool_size = %s, want %d", pgbouncer.WideDatabase, got, size)
			}
			return
		}
	}
	t.Fatalf("SHOW DATABASES has no %s row", pgbouncer.WideDatabase)
}
