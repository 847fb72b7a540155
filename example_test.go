package pgadvisory_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// The one-line change: open "pgadvisory" instead of "pgx". Settings ride in
// the DSN and never reach the server.
func Example() {
	db, err := sql.Open("pgadvisory", "postgres://app@pgbouncer:6432/app?pgadvisory_policy=rewrite")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	fmt.Println("opened")
	// Output: opened
}

type exampleConnector struct {
	drv driver.Driver
	dsn string
}

func (e exampleConnector) Connect(context.Context) (driver.Conn, error) { return e.drv.Open(e.dsn) }
func (e exampleConnector) Driver() driver.Driver                        { return e.drv }

// Wrap puts the checks in front of another driver; here go-sqlmock proves
// that the refused statement never reaches it.
func ExampleWrap() {
	mdb, mock, _ := sqlmock.NewWithDSN("example-wrap")
	defer mdb.Close()
	c, err := pgadvisory.Wrap(exampleConnector{mdb.Driver(), "example-wrap"}, pgadvisory.WithPoolMode(poolmode.Transaction))
	if err != nil {
		fmt.Println(err)
		return
	}
	db := sql.OpenDB(c)
	defer db.Close()

	_, err = db.ExecContext(context.Background(), "SELECT pg_advisory_lock(42)")
	var sle *pgadvisory.SessionLockError
	if errors.As(err, &sle) {
		fmt.Println("refused:", sle.Func, "at", sle.Position, "under", sle.Mode, "pooling; use", sle.Twin)
	}
	fmt.Println("sent to the server:", mock.ExpectationsWereMet() == nil)
	// Output:
	// refused: pg_advisory_lock at 8 under transaction pooling; use pg_advisory_xact_lock
	// sent to the server: true
}

// PoolMode tells what the driver concluded for a *sql.DB.
func ExamplePoolMode() {
	db, err := sql.Open("pgadvisory", "postgres://app@localhost:6432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	mode, evidence, err := pgadvisory.PoolMode(context.Background(), db)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(mode, evidence)
}

// NewConnector takes options; they override the DSN's pgadvisory_* settings.
func ExampleNewConnector() {
	c, err := pgadvisory.NewConnector("host=localhost port=6432 dbname=app user=app pgadvisory_pool_mode=transaction",
		pgadvisory.WithPolicy(pgadvisory.PolicyRewrite),
		pgadvisory.WithLeakAction(pgadvisory.LeakDiscard))
	if err != nil {
		fmt.Println(err)
		return
	}
	mode, _, known := c.PoolMode()
	fmt.Println(mode, known)
	// Output: transaction true
}

// An invalid setting is an error naming the parameter and the accepted values.
func ExampleNewConnector_invalid() {
	_, err := pgadvisory.NewConnector("postgres://app:secret@localhost/app?pgadvisory_policy=block")
	fmt.Println(err)
	// Output: pgadvisory: invalid value "block" for DSN parameter pgadvisory_policy (accepted: reject, rewrite, warn, allow, hold)
}

// ConfigurePgconn guards a bare pgconn config: pgadvisory_* parameters are
// taken out (PgBouncer would reject them at startup) and the guard's hooks
// are installed; pgconn.ConnectConfig(ctx, cfg) then connects through it.
func ExampleConfigurePgconn() {
	cfg, err := pgconn.ParseConfig("postgres://app@pgbouncer:6432/app?pgadvisory_pool_mode=transaction&application_name=worker")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.MaxProtocolMessageBodyLen = 16 << 20 // honoured by the guard too
	if err := pgadvisory.ConfigurePgconn(cfg); err != nil {
		fmt.Println(err)
		return
	}
	_, left := cfg.RuntimeParams[pgadvisory.ParamPoolMode]
	fmt.Println(cfg.AfterNetConnect != nil, cfg.AfterConnect != nil, left, cfg.RuntimeParams["application_name"])
	// Output: true true false worker
}
