#!/usr/bin/env bash
# budget.sh: what adopting pgadvisory costs a program, measured on a fresh
# consumer module built from this checkout.
#
# It writes, in a temporary directory that it removes at the end:
#   consumer/  imports the driver and advisory (replace => this checkout);
#   pgxonly/   imports pgx's stdlib only, at the pgx version the library uses;
#   advonly/   imports advisory and poolmode only (any database/sql driver);
#   scanonly/  imports lockscan only (the SQL scanner with its parser);
#   empty/     a program that imports nothing;
# and reports
#   - the consumer's `go list -m all` count against pgx-only's, failing
#     above BUDGET_MODULES (30) or when a module of the lab appears
#     (this repository's lab/ and cmd/ modules, testcontainers, docker,
#     redis, pprof, otel, golangci, x/tools) that
#     the pgx-only graph does not already have; and failing when the
#     consumer links any package of those, or advonly any of pgx's;
#   - the binary sizes of the consumer and the pgx-only program with each
#     parser (cgo: pg_query_go; CGO_ENABLED=0: go-pgquery, WebAssembly), and
#     what of it is lockscan with its parser (scanonly less empty);
#   - CGO_ENABLED=0 builds for the host, linux/arm64 and darwin/arm64, which
#     must succeed.
#
# Usage: scripts/budget.sh            (from anywhere; needs the go command
#                                      and the module proxy or a warm cache)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
budget=${BUDGET_MODULES:-30}
lab='github.com/pgadvisory/pgadvisory/(lab|cmd)|testcontainers|docker|redis|pprof|opentelemetry|otel|golangci|golang.org/x/tools'

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pgadvisory-budget.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export GOWORK=off GOFLAGS=-mod=mod
fail=0

goversion=$(cd "$root" && go mod edit -json | sed -n 's/^[[:space:]]*"Go": "\(.*\)",*$/\1/p')
pgxversion=$(cd "$root" && go list -m -f '{{.Version}}' github.com/jackc/pgx/v5)

# module NAME REQUIRE MAIN.GO: a module in $tmp/NAME with one main package.
module() {
	mkdir -p "$tmp/$1"
	{
		printf 'module example.com/%s\n\ngo %s\n' "$1" "$goversion"
		[ -z "$2" ] || printf '\n%s\n' "$2"
	} >"$tmp/$1/go.mod"
	cat >"$tmp/$1/main.go"
	(cd "$tmp/$1" && go mod tidy)
}

module consumer "require github.com/pgadvisory/pgadvisory v0.0.0
replace github.com/pgadvisory/pgadvisory => $root" <<'EOF'
// A program that locks through the pgadvisory driver and advisory.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
)

func main() {
	db, err := sql.Open(pgadvisory.DriverName, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer db.Close()
	err = advisory.WithXactLock(context.Background(), db, advisory.KeyFromString("budget"),
		func(ctx context.Context, tx *sql.Tx) error { return nil })
	fmt.Println(err)
}
EOF

module pgxonly "require github.com/jackc/pgx/v5 $pgxversion" <<'EOF'
// The same lock with pgx's stdlib and nothing else.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib"
)

func main() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer db.Close()
	_, err = db.ExecContext(context.Background(), "SELECT pg_advisory_xact_lock($1)", 1)
	fmt.Println(err)
}
EOF

module scanonly "require github.com/pgadvisory/pgadvisory v0.0.0
replace github.com/pgadvisory/pgadvisory => $root" <<'EOF'
// The SQL scanner with its parser, and nothing else of pgadvisory.
package main

import (
	"fmt"

	"github.com/pgadvisory/pgadvisory/lockscan"
)

func main() { fmt.Println(lockscan.Scan("SELECT pg_advisory_lock(1)")) }
EOF

module advonly "require github.com/pgadvisory/pgadvisory v0.0.0
replace github.com/pgadvisory/pgadvisory => $root" <<'EOF'
// advisory with any database/sql driver, declaring the pool mode.
package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

func main() {
	db, err := sql.Open("somedriver", "")
	if err == nil {
		err = advisory.WithXactLock(context.Background(), db, advisory.PairKey(1, 2),
			func(ctx context.Context, tx *sql.Tx) error { return nil }, advisory.WithPoolMode(poolmode.Direct))
	}
	fmt.Println(err)
}
EOF

module empty "" <<'EOF'
package main

func main() {}
EOF

# --- the module graph ---------------------------------------------------------
(cd "$tmp/consumer" && go list -m all) >"$tmp/consumer.mods"
(cd "$tmp/pgxonly" && go list -m all) >"$tmp/pgxonly.mods"
cut -d' ' -f1 "$tmp/pgxonly.mods" | sort >"$tmp/pgxonly.paths"
n=$(wc -l <"$tmp/consumer.mods")
n_pgx=$(wc -l <"$tmp/pgxonly.mods")
echo "== budget: a fresh module importing github.com/pgadvisory/pgadvisory and .../advisory (go $goversion, pgx $pgxversion)"
echo "modules (go list -m all): $n, budget $budget; a pgx-stdlib-only module: $n_pgx"
beyond=$(cut -d' ' -f1 "$tmp/consumer.mods" | grep -v '^example.com/' | sort | comm -23 - "$tmp/pgxonly.paths")
echo "  $(echo "$beyond" | wc -l) beyond pgx-only's (besides the main module): $(echo "$beyond" | paste -sd ' ' -)"
if [ "$n" -gt "$budget" ]; then
	echo "budget: FAIL: $n modules, more than $budget"
	fail=1
fi
cut -d' ' -f1 "$tmp/consumer.mods" | sort | grep -E "$lab" >"$tmp/lab.mods" || true
comm -23 "$tmp/lab.mods" "$tmp/pgxonly.paths" >"$tmp/lab.new"
if [ -s "$tmp/lab.new" ]; then
	echo "budget: FAIL: modules of the lab in the graph: $(paste -sd ' ' - <"$tmp/lab.new")"
	fail=1
elif [ -s "$tmp/lab.mods" ]; then
	echo "lab modules: none beyond the pgx-only graph's, where a go.mod of pgx's dependencies names them (not linked):"
	(cd "$tmp/pgxonly" && go mod graph) >"$tmp/pgxonly.graph"
	while read -r m; do
		echo "  $m, required by $(awk -v m="$m" 'index($2, m "@") == 1 { print $1 }' "$tmp/pgxonly.graph" | sort -u | paste -sd ' ' -)"
	done <"$tmp/lab.mods"
else
	echo "lab modules: none"
fi
linked=$(cd "$tmp/consumer" && go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' . | grep -E "$lab" || true)
if [ -n "$linked" ]; then
	echo "budget: FAIL: the consumer links $(echo "$linked" | paste -sd ' ' -)"
	fail=1
fi

pgxlinked=$(cd "$tmp/advonly" && go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' . | grep -E '^github.com/(jackc|pganalyze|wasilibs)/' || true)
if [ -n "$pgxlinked" ]; then
	echo "budget: FAIL: a program using advisory and poolmode only links $(echo "$pgxlinked" | paste -sd ' ' -)"
	fail=1
else
	echo "advisory + poolmode alone (any driver): no package of pgx or of a parser linked"
fi

# --- binary sizes ---------------------------------------------------------------
size() { # size DIR ENV...: bytes of DIR's binary built with ENV
	local dir=$1
	shift
	(cd "$tmp/$dir" && env "$@" go build -o "$tmp/bin" . && wc -c <"$tmp/bin")
}
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
host=$(go env GOOS)/$(go env GOARCH)
echo "binary sizes ($host, go build, not stripped):"
printf '  %-34s %-22s %s\n' "" "cgo (pg_query_go)" "CGO_ENABLED=0 (go-pgquery)"
declare -A s
for cgo in 1 0; do
	for p in consumer pgxonly scanonly empty; do
		s[$p$cgo]=$(size $p CGO_ENABLED=$cgo)
	done
done
row() { printf '  %-34s %-22s %s\n' "$1" "$(mb "$2")" "$(mb "$3")"; }
row "driver + advisory" "${s[consumer1]}" "${s[consumer0]}"
row "pgx stdlib only" "${s[pgxonly1]}" "${s[pgxonly0]}"
row "difference" $((s[consumer1] - s[pgxonly1])) $((s[consumer0] - s[pgxonly0]))
row "lockscan + parser alone (vs empty)" $((s[scanonly1] - s[empty1])) $((s[scanonly0] - s[empty0]))

# --- builds without cgo -----------------------------------------------------------
echo "builds of the consumer with CGO_ENABLED=0:"
for target in "$host" linux/arm64 darwin/arm64; do
	if (cd "$tmp/consumer" && CGO_ENABLED=0 GOOS=${target%/*} GOARCH=${target#*/} go build -o "$tmp/cross" .) 2>"$tmp/cross.err"; then
		echo "  $target: ok ($(mb "$(wc -c <"$tmp/cross")"))"
	else
		echo "  $target: FAIL"
		sed 's/^/    /' "$tmp/cross.err"
		fail=1
	fi
done

if [ "$fail" -ne 0 ]; then
	echo "budget: FAIL"
	exit 1
fi
echo "budget: ok"
