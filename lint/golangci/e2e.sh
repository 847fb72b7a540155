#!/bin/sh
# e2e.sh builds a custom golangci-lint with the pgadvisory module plugin and
# runs it over test modules, checking its findings against expected lines.
#
# MANUAL, not part of `make test`: it downloads golangci-lint's source and
# its ~150 dependencies through the Go module proxy and builds the whole
# linter with cgo (pg_query_go): minutes on a small machine, ~1 GB of cache.
#
# It does by hand what `golangci-lint custom` does with a `path:` plugin
# (pkg/commands/internal/builder.go): take golangci-lint's source at
# $GCL_VERSION (from the module cache instead of a git clone, which this
# script must avoid), overwrite cmd/golangci-lint/plugins.go with a blank
# import of the plugin package, replace the plugin's module and the two it
# requires (lint, the analyzer; the root, lockscan) with the working tree,
# go mod tidy, go build ./cmd/golangci-lint.
#
# Then it lints, with the README's .golangci.yml (settings.skip: [conn]):
#   1. lint/testdata/vetmodule (database/sql; pgadvisoryvet's findings are in
#      lint/testdata/vetmodule.golden): the pooled and tx findings, not conn;
#   2. the same module with no plugin settings: all four, conn included;
#   3. a small generated module using pgxpool, pgx.Tx, *pgx.Conn and sqlx,
#      with a //nolint:pgadvisory and a //pgadvisory:ignore line;
#   4. a bad setting (skip: [pinned]): golangci-lint must fail and name it;
#   5. run --fix on a copy of vetmodule: the tx lock becomes
#      pg_advisory_xact_lock, the other findings stay.
#
# Usage: lint/golangci/e2e.sh [-keep]      (from anywhere in the repository)
#   GCL_VERSION   golangci-lint version (default v2.15.0)
#   E2E_DIR       work directory (default: a fresh mktemp -d, removed at the
#                 end unless -keep); reusing one skips the copy and tidy.
set -eu

GCL_VERSION=${GCL_VERSION:-v2.15.0}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
repo_mod=github.com/pgadvisory/pgadvisory
plugin_mod=$repo_mod/lint/golangci # a module of its own
plugin_import=$plugin_mod

keep=no
[ "${1:-}" = "-keep" ] && keep=yes
if [ -n "${E2E_DIR:-}" ]; then
	work=$E2E_DIR
	mkdir -p "$work"
	keep=yes
else
	work=$(mktemp -d)
fi
[ "$keep" = yes ] || trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

export GOWORK=off
export CGO_ENABLED=1 # pg_query_go is cgo: without it the plugin does not build
step() { echo "e2e: $*" >&2; }

# --- build -------------------------------------------------------------------
src=$work/golangci-lint
bin=$work/custom-gcl
if [ ! -x "$bin" ]; then
	if [ ! -d "$src" ]; then
		step "fetching golangci-lint $GCL_VERSION through the module proxy"
		dir=$(cd "$work" && go mod download -json "github.com/golangci/golangci-lint/v2@$GCL_VERSION" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
		[ -n "$dir" ] && [ -d "$dir" ] || {
			echo "e2e: go mod download gave no source directory" >&2
			exit 1
		}
		cp -R "$dir" "$src"
		chmod -R u+w "$src" # the module cache is read-only
	fi
	step "writing cmd/golangci-lint/plugins.go (as golangci-lint custom does)"
	cat >"$src/cmd/golangci-lint/plugins.go" <<EOF
package main

import (
	_ "$plugin_import"
)
EOF
	step "go mod edit -replace $plugin_mod, $repo_mod/lint and $repo_mod => the working tree; go mod tidy"
	(cd "$src" && go mod edit -replace "$plugin_mod=$root/lint/golangci" \
		-replace "$repo_mod/lint=$root/lint" -replace "$repo_mod=$root" && go mod tidy)
	step "go build ./cmd/golangci-lint (takes minutes)"
	(cd "$src" && go build -ldflags "-s -w -X 'main.version=${GCL_VERSION#v}-custom-gcl-pgadvisory' -X 'main.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)'" \
		-o "$bin" ./cmd/golangci-lint)
fi
"$bin" version >&2

# --- configs -----------------------------------------------------------------
# The README's .golangci.yml, verbatim.
cat >"$work/readme.golangci.yml" <<'EOF'
version: "2"
linters:
  enable: [pgadvisory]
  settings:
    custom:
      pgadvisory:
        type: module
        description: session-level advisory locks in SQL
        settings:
          skip: [conn]
EOF
# The same with no plugin settings: every category is reported.
cat >"$work/nosettings.golangci.yml" <<'EOF'
version: "2"
linters:
  enable: [pgadvisory]
  settings:
    custom:
      pgadvisory:
        type: module
        description: session-level advisory locks in SQL
EOF
sed 's/skip: \[conn\]/skip: [pinned]/' "$work/readme.golangci.yml" >"$work/bad.golangci.yml"

# --- test modules ------------------------------------------------------------
rm -rf "$work/vetmodule" "$work/pgxmodule"
cp -R "$root/lint/testdata/vetmodule" "$work/vetmodule"

mkdir -p "$work/pgxmodule/app"
cat >"$work/pgxmodule/go.mod" <<'EOF'
module example.com/pgxmodule

go 1.26

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/jmoiron/sqlx v1.4.0
)
EOF
cat >"$work/pgxmodule/app/app.go" <<'EOF'
// Package app takes advisory locks through pgx v5 and sqlx.
package app

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
)

const lockSQL = "SELECT pg_advisory_lock($1)"

// Pool locks on a pgxpool.Pool: pooled.
func Pool(ctx context.Context, p *pgxpool.Pool) error {
	_, err := p.Exec(ctx, lockSQL, 1)
	return err
}

// Tx locks inside a pgx.Tx: tx.
func Tx(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_lock(2)")
	return err
}

// Conn locks on a *pgx.Conn: conn, skipped by skip: [conn].
func Conn(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, "SELECT pg_try_advisory_lock(3)")
	return err
}

// Sqlx locks on a *sqlx.DB: pooled.
func Sqlx(db *sqlx.DB) {
	db.MustExec("SELECT pg_advisory_lock(4)")
}

// Nolint is silenced by golangci-lint's own directive.
func Nolint(ctx context.Context, p *pgxpool.Pool) error {
	_, err := p.Exec(ctx, "SELECT pg_advisory_lock(5)") //nolint:pgadvisory // deliberate, for the test
	return err
}

// Ignored is silenced by the analyzer's directive.
func Ignored(ctx context.Context, p *pgxpool.Pool) error {
	//pgadvisory:ignore deliberate, for the test
	_, err := p.Exec(ctx, "SELECT pg_advisory_lock(6)")
	return err
}

// Xact is correct: nothing to report.
func Xact(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7)")
	return err
}
EOF
(cd "$work/pgxmodule" && go mod tidy)

# --- run and check -----------------------------------------------------------
fail=0
extra=
# check NAME MODULE CONFIG WANT_EXIT WANT_FILE [short]: run the linter in
# MODULE, keep its pgadvisory findings as "file:line:col: message" (paths
# relative to the module; with short, "file:line:col: category") and diff
# them with WANT_FILE. Other linters (golangci-lint's standard set stays on)
# are shown but not checked.
check() {
	name=$1 mod=$2 cfg=$3 want_exit=$4 want=$5 form=${6:-full}
	set +e
	# shellcheck disable=SC2086 # $extra is a list of flags
	(cd "$work/$mod" && "$bin" run --config "$work/$cfg" \
		--output.text.print-issued-lines=false --output.text.colors=false --show-stats=false \
		$extra ./...) >"$work/$name.out" 2>&1
	code=$?
	set -e
	# Paths are relative to the config file's directory ($work).
	sed -n "s|^$mod/\(.*\) (pgadvisory)\$|\1|p" "$work/$name.out" >"$work/$name.got"
	if [ "$form" = short ]; then
		sed 's/^\([^ ]*\) \([a-z]*\): .*/\1 \2/' "$work/$name.got" >"$work/$name.got.short"
		mv "$work/$name.got.short" "$work/$name.got"
	fi
	echo "== $name: exit $code" >&2
	cat "$work/$name.out" >&2
	if [ "$code" != "$want_exit" ]; then
		echo "e2e: FAIL $name: exit $code, want $want_exit" >&2
		fail=1
	fi
	if ! diff -u "$want" "$work/$name.got" >&2; then
		echo "e2e: FAIL $name: findings differ from $want (want -, got +)" >&2
		fail=1
	fi
}

# pgadvisoryvet's findings on vetmodule, from the golden file: golangci-lint
# must report the same positions and messages.
sed -n '/^== pgadvisoryvet \.\/\.\.\.$/,/^exit /p' "$root/lint/testdata/vetmodule.golden" |
	sed '1d;$d' >"$work/vetmodule-all.want"
[ -s "$work/vetmodule-all.want" ] || {
	echo "e2e: no findings read from lint/testdata/vetmodule.golden" >&2
	exit 1
}
grep -v '^[^ ]* conn: ' "$work/vetmodule-all.want" >"$work/vetmodule-skipconn.want"

cat >"$work/pgxmodule.want" <<'EOF'
app/app.go:16:24: pooled
app/app.go:22:33: tx
app/app.go:34:22: pooled
EOF
: >"$work/none.want"

# golangci-lint exit codes: 1 issues found, 3 failure.
check vetmodule-readme vetmodule readme.golangci.yml 1 "$work/vetmodule-skipconn.want"
check vetmodule-nosettings vetmodule nosettings.golangci.yml 1 "$work/vetmodule-all.want"
check pgxmodule-readme pgxmodule readme.golangci.yml 1 "$work/pgxmodule.want" short
check badsettings vetmodule bad.golangci.yml 3 "$work/none.want"
grep -q 'plugin(pgadvisory): .*unknown category "pinned"' "$work/badsettings.out" || {
	echo "e2e: FAIL badsettings: no pgadvisory error naming \"pinned\"" >&2
	fail=1
}

# golangci-lint --fix applies the analyzer's suggested fix (tx: session ->
# xact) and reports the rest.
rm -rf "$work/fixmodule"
cp -R "$root/lint/testdata/vetmodule" "$work/fixmodule"
# (pg_advisory_unlock_all in a transaction is a tx finding without a fix.)
grep -v '^[^ ]* tx: session-level ' "$work/vetmodule-all.want" >"$work/fixmodule.want"
extra=--fix
check fixmodule fixmodule nosettings.golangci.yml 1 "$work/fixmodule.want"
extra=
grep -q 'tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(\$1)", key)' "$work/fixmodule/store/store.go" || {
	echo "e2e: FAIL fixmodule: --fix did not rewrite the tx lock to pg_advisory_xact_lock" >&2
	fail=1
}

if [ "$fail" != 0 ]; then
	echo "e2e: FAIL (outputs kept in $work)" >&2
	trap - EXIT
	exit 1
fi
echo "e2e: ok (golangci-lint $GCL_VERSION)"
