package toolcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the control's plain driver, "pgx"
	ternmigrate "github.com/jackc/tern/v2/migrate"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/pgadvisory/pgadvisory"
)

// The two ways a child reaches the database.
const (
	// viaPgadvisory: sql.Open("pgadvisory", dsn), or pgx.ConnectConfig
	// with a config from pgadvisory.ParseConfig.
	viaPgadvisory = "pgadvisory"
	// viaPlainPgx: sql.Open("pgx", dsn) (pgx's stdlib driver), or
	// pgx.ConnectConfig with a config from pgx.ParseConfig.
	viaPlainPgx = "pgx"
)

// tool is one migration tool: how a child runs it, and how the parent reads
// its version table afterwards.
type tool struct {
	name string
	// run migrates the database at dsn through driver (viaPgadvisory or
	// viaPlainPgx), as a user of the tool would, and returns how many
	// migrations this process applied (-1 when the tool does not say).
	run func(ctx context.Context, driver, dsn string) (applied int, err error)
	// versionTable is the tool's own bookkeeping table.
	versionTable string
	// versions reads the version table: a summary for the log and whether
	// it records exactly the len(migrations) steps, each once, clean.
	versions func(ctx context.Context, conn *pgx.Conn) (summary string, ok bool, err error)
	// recorded counts the migrations the version table records as
	// applied; 0 when the table does not exist. (goose creates its table
	// before it locks, so a refused goose leaves an empty one.)
	recorded string
}

var tools = map[string]*tool{
	"golang-migrate-postgres": {
		name:         "golang-migrate-postgres",
		run:          runGolangMigrate("postgres"),
		versionTable: "schema_migrations",
		versions:     golangMigrateVersions,
		recorded:     "SELECT coalesce(max(version), 0) FROM schema_migrations",
	},
	"golang-migrate-pgx5": {
		name:         "golang-migrate-pgx5",
		run:          runGolangMigrate("pgx5"),
		versionTable: "schema_migrations",
		versions:     golangMigrateVersions,
		recorded:     "SELECT coalesce(max(version), 0) FROM schema_migrations",
	},
	"goose": {
		name:         "goose",
		run:          runGoose,
		versionTable: "goose_db_version",
		versions:     gooseVersions,
		recorded:     "SELECT count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0 AND is_applied",
	},
	// Not a migration tool: the critical sections of sections_test.go.
	sectionsTool.name: sectionsTool,
	"tern": {
		name:         "tern",
		run:          runTern,
		versionTable: "schema_version",
		versions:     ternVersions,
		recorded:     "SELECT coalesce(max(version), 0) FROM public.schema_version",
	},
}

// countingLogger is a golang-migrate Logger. Not verbose, golang-migrate
// prints one line per migration it ran, so the lines count them.
type countingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *countingLogger) Printf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (l *countingLogger) Verbose() bool { return false }

// runGolangMigrate runs golang-migrate v4 with its postgres driver or its
// pgx/v5 driver ("pgx5"), each given a *sql.DB through WithInstance: the
// documented way to hand it a database/sql pool of one's own.
func runGolangMigrate(driverName string) func(ctx context.Context, driver, dsn string) (int, error) {
	return func(ctx context.Context, driver, dsn string) (int, error) {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return 0, err
		}
		var drv database.Driver
		switch driverName {
		case "postgres":
			drv, err = postgres.WithInstance(db, &postgres.Config{})
		case "pgx5":
			drv, err = migratepgx.WithInstance(db, &migratepgx.Config{})
		default:
			err = fmt.Errorf("unknown golang-migrate driver %q", driverName)
		}
		if err != nil {
			return 0, errors.Join(err, db.Close())
		}
		src, err := iofs.New(golangMigrateFS(), ".")
		if err != nil {
			return 0, errors.Join(err, drv.Close())
		}
		m, err := migrate.NewWithInstance("iofs", src, driverName, drv)
		if err != nil {
			return 0, errors.Join(err, src.Close(), drv.Close())
		}
		log := &countingLogger{}
		m.Log = log
		err = m.Up()
		if errors.Is(err, migrate.ErrNoChange) {
			err = nil // another process applied them: the expected outcome for two of three
		}
		srcErr, dbErr := m.Close()
		return len(log.lines), errors.Join(err, srcErr, dbErr)
	}
}

// runGoose runs goose v3's Provider with its Postgres session locker
// (pg_try_advisory_lock on a pinned *sql.Conn, retried every 5 s).
func runGoose(ctx context.Context, driver, dsn string) (int, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return 0, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, errors.Join(err, db.Close())
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, gooseFS(), goose.WithSessionLocker(locker))
	if err != nil {
		return 0, errors.Join(err, db.Close())
	}
	results, err := p.Up(ctx)
	return len(results), errors.Join(err, p.Close())
}

// runTern runs tern v2's migrator on one *pgx.Conn (pg_advisory_lock on that
// connection, outside a transaction, around the version table set-up and
// around the migrations).
func runTern(ctx context.Context, driver, dsn string) (int, error) {
	var cfg *pgx.ConnConfig
	var err error
	switch driver {
	case viaPgadvisory:
		cfg, err = pgadvisory.ParseConfig(dsn)
	case viaPlainPgx:
		cfg, err = pgx.ParseConfig(dsn)
	default:
		err = fmt.Errorf("unknown driver %q", driver)
	}
	if err != nil {
		return 0, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := ternmigrate.NewMigrator(ctx, conn, "public.schema_version")
	if err != nil {
		return 0, err
	}
	if err := m.LoadMigrations(ternFS()); err != nil {
		return 0, err
	}
	applied := 0
	m.OnStart = func(int32, string, string, string) { applied++ }
	err = m.Migrate(ctx)
	return applied, errors.Join(err, conn.Close(ctx))
}

// golangMigrateVersions reads schema_migrations: one row, the last version,
// not dirty.
func golangMigrateVersions(ctx context.Context, conn *pgx.Conn) (string, bool, error) {
	rows, err := conn.Query(ctx, "SELECT version, dirty FROM schema_migrations ORDER BY version")
	if err != nil {
		return "", false, err
	}
	type row struct {
		Version int64
		Dirty   bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return "", false, err
	}
	ok := len(got) == 1 && got[0].Version == int64(len(migrations)) && !got[0].Dirty
	return fmt.Sprintf("schema_migrations %v", got), ok, nil
}

// gooseVersions reads goose_db_version: versions 0 (goose's own) to
// len(migrations), each applied exactly once.
func gooseVersions(ctx context.Context, conn *pgx.Conn) (string, bool, error) {
	rows, err := conn.Query(ctx, "SELECT version_id, count(*) FROM goose_db_version WHERE is_applied GROUP BY version_id ORDER BY version_id")
	if err != nil {
		return "", false, err
	}
	type row struct {
		Version int64
		Count   int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return "", false, err
	}
	var total int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM goose_db_version").Scan(&total); err != nil {
		return "", false, err
	}
	ok := len(got) == len(migrations)+1 && total == int64(len(migrations)+1)
	for i, r := range got {
		ok = ok && r.Version == int64(i) && r.Count == 1
	}
	return fmt.Sprintf("goose_db_version (version, count) %v, %d rows", got, total), ok, nil
}

// ternVersions reads tern's version table: one row, the last version.
func ternVersions(ctx context.Context, conn *pgx.Conn) (string, bool, error) {
	rows, err := conn.Query(ctx, "SELECT version FROM public.schema_version")
	if err != nil {
		return "", false, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return "", false, err
	}
	ok := len(got) == 1 && got[0] == int32(len(migrations))
	return fmt.Sprintf("schema_version %v", got), ok, nil
}
