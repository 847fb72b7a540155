package toolcheck

import (
	"fmt"
	"strings"
	"testing/fstest"
)

// migration is one step of the schema, in plain SQL that every tool runs as
// given. Each up ends with an INSERT into the audit table, which has no
// unique key: a migration applied twice leaves two rows.
type migration struct {
	name     string
	up, down string
}

// auditTable records every migration run.
const auditTable = "toolcheck_audit"

func auditInsert(n int) string {
	return fmt.Sprintf("INSERT INTO %s (migration) VALUES (%d);", auditTable, n)
}

// migrations is the schema every tool applies. Nothing in it is idempotent
// (no IF NOT EXISTS): a second run of any step fails or shows in the audit
// table. Step 2 sleeps a little to widen the window in which an unlocked
// concurrent run would overlap.
var migrations = []migration{
	{
		name: "audit",
		up: `CREATE TABLE ` + auditTable + ` (
    id bigserial PRIMARY KEY,
    migration int NOT NULL,
    backend_pid int NOT NULL DEFAULT pg_backend_pid(),
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
` + auditInsert(1),
		down: `DROP TABLE ` + auditTable + `;`,
	},
	{
		name: "accounts",
		up: `CREATE TABLE accounts (
    id bigint PRIMARY KEY,
    owner text NOT NULL
);
SELECT pg_sleep(0.2);
` + auditInsert(2),
		down: `DROP TABLE accounts;`,
	},
	{
		name: "balance",
		up: `ALTER TABLE accounts ADD COLUMN balance numeric(12,2) NOT NULL DEFAULT 0;
` + auditInsert(3),
		down: `ALTER TABLE accounts DROP COLUMN balance;`,
	},
	{
		name: "payments",
		up: `CREATE TABLE payments (
    id bigserial PRIMARY KEY,
    account_id bigint NOT NULL REFERENCES accounts (id),
    amount numeric(12,2) NOT NULL CHECK (amount > 0)
);
CREATE INDEX payments_account_id_idx ON payments (account_id);
` + auditInsert(4),
		down: `DROP TABLE payments;`,
	},
	{
		name: "seed",
		up: `INSERT INTO accounts (id, owner, balance) VALUES (1, 'alice', 100), (2, 'bob', 50);
ALTER TABLE accounts ADD CONSTRAINT accounts_balance_nonnegative CHECK (balance >= 0);
` + auditInsert(5),
		down: `ALTER TABLE accounts DROP CONSTRAINT accounts_balance_nonnegative;
DELETE FROM accounts WHERE id IN (1, 2);`,
	},
}

// golangMigrateFS lays the migrations out as golang-migrate's source/iofs
// reads them: 1_audit.up.sql, 1_audit.down.sql, ...
func golangMigrateFS() fstest.MapFS {
	fsys := fstest.MapFS{}
	for i, m := range migrations {
		fsys[fmt.Sprintf("%d_%s.up.sql", i+1, m.name)] = &fstest.MapFile{Data: []byte(m.up + "\n")}
		fsys[fmt.Sprintf("%d_%s.down.sql", i+1, m.name)] = &fstest.MapFile{Data: []byte(m.down + "\n")}
	}
	return fsys
}

// gooseFS lays them out as goose's SQL migrations: 00001_audit.sql with
// +goose Up and +goose Down annotations.
func gooseFS() fstest.MapFS {
	fsys := fstest.MapFS{}
	for i, m := range migrations {
		body := "-- +goose Up\n" + m.up + "\n\n-- +goose Down\n" + m.down + "\n"
		fsys[fmt.Sprintf("%05d_%s.sql", i+1, m.name)] = &fstest.MapFile{Data: []byte(body)}
	}
	return fsys
}

// ternFS lays them out as tern's migrations: 001_audit.sql, up and down
// split by tern's marker line.
func ternFS() fstest.MapFS {
	fsys := fstest.MapFS{}
	for i, m := range migrations {
		body := strings.Join([]string{m.up, "---- create above / drop below ----", m.down}, "\n") + "\n"
		fsys[fmt.Sprintf("%03d_%s.sql", i+1, m.name)] = &fstest.MapFile{Data: []byte(body)}
	}
	return fsys
}
