package sqlxbind_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/pgadvisory/pgadvisory/advisory"
	_ "github.com/pgadvisory/pgadvisory/sqlxbind" // sqlx: the pgadvisory driver binds $1
)

// sqlx over the pgadvisory driver: named statements bind as $1, and
// advisory's helpers take sqlx's transactions. (Not run by go test: it needs
// a server.)
func Example() {
	ctx := context.Background()
	db := sqlx.MustOpen("pgadvisory", os.Getenv("DATABASE_URL"))
	defer db.Close()
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := advisory.XactLock(ctx, tx, advisory.PairKey(1, 42), advisory.WithTimeout(time.Second)); err != nil {
		log.Fatal(err)
	}
	type invoice struct {
		ID int `db:"id"`
	}
	if _, err := tx.NamedExecContext(ctx, "UPDATE invoices SET settled = true WHERE id = :id", invoice{ID: 42}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil { // releases the lock
		log.Fatal(err)
	}
}
