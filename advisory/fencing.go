package advisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/pgadvisory/pgadvisory/advisory/internal/bridge"
)

// Token is a fencing token: a number that grows with every acquisition of
// a lock taken WithFencing. Storage that remembers the highest token it has
// accepted for a resource can refuse a write that carries a lower one.
type Token int64

// FencingSchema creates what WithFencing and CheckToken use, in the
// current schema (search_path):
//
//   - pgadvisory_fencing_seq, the sequence tokens come from. CACHE 1 is
//     required: with a per-session cache two sessions hand out values out of
//     order.
//   - pgadvisory_fence, the highest token accepted per resource.
//
// The statements are idempotent. Run them from your migrations, or call
// CreateFencingSchema. FencingSchema is several statements separated by
// semicolons; FencingSchemaStatements lists them one by one for drivers or
// tools that run one statement per call.
const FencingSchema = fencingSeqDDL + ";\n" + fencingTableDDL + ";\n"

const (
	fencingSeqDDL   = "CREATE SEQUENCE IF NOT EXISTS pgadvisory_fencing_seq AS bigint CACHE 1 NO CYCLE"
	fencingTableDDL = "CREATE TABLE IF NOT EXISTS pgadvisory_fence (\n" +
		"\tresource text PRIMARY KEY,\n" +
		"\ttoken bigint NOT NULL,\n" +
		"\tupdated_at timestamptz NOT NULL DEFAULT now()\n" +
		")"
)

// FencingSchemaStatements returns the statements of FencingSchema, one per
// element, without trailing semicolons.
func FencingSchemaStatements() []string { return []string{fencingSeqDDL, fencingTableDDL} }

// CreateFencingSchema runs FencingSchemaStatements on db.
func CreateFencingSchema(ctx context.Context, db Querier) (err error) {
	if err := badArgs("CreateFencingSchema", ctx, db, "database handle"); err != nil {
		return err
	}
	defer foreign("CreateFencingSchema", &err)
	return createFencingSchema(ctx, "CreateFencingSchema", querierStmts{db})
}

// createFencingSchema is CreateFencingSchema for any driver.
func createFencingSchema(ctx context.Context, fn string, db bridge.Stmts) error {
	if err := badArgs(fn, ctx, db, "database handle"); err != nil {
		return err
	}
	for _, s := range FencingSchemaStatements() {
		if err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("advisory: create fencing schema (%s): %w", strings.SplitN(s, " (", 2)[0], err)
		}
	}
	return nil
}

const (
	// checkTokenSQL records token as the highest for resource unless a
	// higher one is already there. ON CONFLICT DO UPDATE locks the row even
	// when its WHERE is false, so a concurrent check for the same resource
	// waits for this transaction and then re-reads the row.
	checkTokenSQL = "INSERT INTO pgadvisory_fence AS f (resource, token) VALUES ($1, $2) " +
		"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now() " +
		"WHERE f.token <= EXCLUDED.token RETURNING f.token"
	highestTokenSQL = "SELECT token FROM pgadvisory_fence WHERE resource = $1"
)

// CheckToken is the storage-side half of fencing. Call it in the same
// transaction as the write it guards: it accepts the write when token is
// not lower than the highest token recorded for resource, records token as
// the new highest, and locks the resource's row until the transaction ends.
// It returns a *StaleTokenError (matching ErrStaleToken) when a newer
// holder has already written; roll the transaction back then.
//
// resource names what is written (a row, a file, an account), not the lock
// key: several resources may be guarded by one lock. An equal token is
// accepted so that one holder may write the same resource several times.
//
// The transaction that carries the check need not be the one that holds the
// lock, and need not even run on the same database connection; it must run
// on the database that holds pgadvisory_fence.
func CheckToken(ctx context.Context, tx Querier, resource string, token Token) (err error) {
	if err := badArgs("CheckToken", ctx, tx, "transaction"); err != nil {
		return err
	}
	if _, ok := tx.(Beginner); ok {
		return fmt.Errorf("advisory: CheckToken needs the transaction that writes the resource, got %T", tx)
	}
	defer foreign("CheckToken", &err)
	return checkToken(ctx, "CheckToken", querierStmts{tx}, resource, token)
}

// checkToken is CheckToken for any driver's transaction.
func checkToken(ctx context.Context, fn string, tx bridge.Stmts, resource string, token Token) error {
	if err := badArgs(fn, ctx, tx, "transaction"); err != nil {
		return err
	}
	var got int64
	err := tx.QueryRow(ctx, checkTokenSQL, []any{resource, int64(token)}, &got)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("advisory: check fencing token for %q: %w", capInput(resource), fencingHint(err))
	}
	var highest int64
	if err := tx.QueryRow(ctx, highestTokenSQL, []any{resource}, &highest); err != nil {
		return fmt.Errorf("advisory: check fencing token for %q: read highest: %w", capInput(resource), fencingHint(err))
	}
	return &StaleTokenError{Resource: resource, Token: token, Highest: Token(highest)}
}

// sqlStateUndefinedTable is undefined_table: the fencing schema is missing.
const sqlStateUndefinedTable = "42P01"

// FencingSchemaError wraps the server's error when the fencing sequence or
// table does not exist in the database (SQLSTATE 42P01), and says how to
// create them.
type FencingSchemaError struct {
	// Err is the server's error.
	Err error
}

// Error names the cause and the fix.
func (e *FencingSchemaError) Error() string {
	if e == nil || e.Err == nil {
		return "advisory: fencing schema missing (run advisory.CreateFencingSchema)"
	}
	return e.Err.Error() + " (the fencing schema is missing: run advisory.CreateFencingSchema " +
		"(pgxadvisory.CreateFencingSchema with pgx), or advisory.FencingSchema from a migration, on this database)"
}

// Unwrap returns the server's error.
func (e *FencingSchemaError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// fencingHint adds the CreateFencingSchema hint to an undefined_table error.
func fencingHint(err error) error {
	var st sqlStater
	if errors.As(err, &st) && st.SQLState() == sqlStateUndefinedTable {
		return &FencingSchemaError{Err: err}
	}
	return err
}
