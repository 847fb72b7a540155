package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// WithTracer hands the guard's events to a Tracer — here a TracerFunc that
// prints them; in a service it would count them (examples/metrics feeds
// Prometheus). The same option goes to ParseConfig, ParsePoolConfig,
// ConfigureConn, ConfigurePool, ConfigurePgconn and NewConnector.
func ExampleWithTracer() {
	mdb, _, _ := sqlmock.NewWithDSN("example-tracer")
	defer mdb.Close()
	tracer := pgadvisory.TracerFunc(func(ev pgadvisory.Event) {
		fmt.Println("event:", ev.Kind, ev.Code, "under", ev.Mode, "pooling")
	})
	c, err := pgadvisory.Wrap(exampleConnector{mdb.Driver(), "example-tracer"},
		pgadvisory.WithPoolMode(poolmode.Transaction), pgadvisory.WithTracer(tracer))
	if err != nil {
		fmt.Println(err)
		return
	}
	db := sql.OpenDB(c)
	defer db.Close()

	_, err = db.ExecContext(context.Background(), "SELECT pg_advisory_lock(42)")
	fmt.Println("refused:", err != nil)
	// Output:
	// event: refused PA001 under transaction pooling
	// refused: true
}
