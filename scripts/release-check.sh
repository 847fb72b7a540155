#!/usr/bin/env bash
# release-check.sh: the committed tree, published, installs as the README
# says. It simulates a release of every module at one version (v0.1.0, the
# tags docs/release.md lists) without pushing anything:
#
#   1. `git archive` of the commit (default HEAD; REV=... for another) into a
#      temporary directory: only what is committed is checked;
#   2. no go.mod may carry a replace directive or a pseudo-version of a
#      module of this repository (go.work alone replaces them);
#   3. lab/internal/publish writes every module into a file:// module proxy
#      (MODULE/@v/list, .info, .mod, .zip by golang.org/x/mod/zip);
#   4. every module of the archive, alone (GOWORK=off) against that proxy:
#      go build ./... and go mod tidy -diff, which may only add the go.sum
#      lines of this repository's modules (their hashes exist once tagged);
#   5. in a fresh module outside the tree, with
#      GOPROXY=file://PROXY,$(go env GOPROXY) GOSUMDB=off GOWORK=off:
#      go install of the vettool, the CLI and the lab command @VERSION (and
#      runs them), go get of sqlxbind (and a build using it), go get -tool
#      of the vettool (and go vet with it), and a build of a program that
#      registers the golangci-lint module plugin as golangci-lint custom
#      builds it, asking the plugin registry for the analyzer.
#
# Usage: scripts/release-check.sh     (from anywhere in the repository; needs
#   REV=<commit>  VERSION=v0.1.0      the go command, git, cgo for the
#   KEEP=1 keeps the work directory   vettool, and the module proxy or a
#                                     warm module cache)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rev=${REV:-HEAD}
version=${VERSION:-v0.1.0}
repo=github.com/pgadvisory/pgadvisory
upstream=$(go env GOPROXY)

work=$(mktemp -d "${TMPDIR:-/tmp}/pgadvisory-release.XXXXXX")
if [ "${KEEP:-}" = 1 ]; then
	echo "release-check: work directory $work (kept)"
else
	trap 'rm -rf "$work"' EXIT
fi
fail() {
	echo "release-check: FAIL: $*"
	exit 1
}

commit=$(git -C "$root" rev-parse --verify "$rev^{commit}")
echo "== release check of $commit as $version"
mkdir -p "$work/tree" "$work/proxy" "$work/bin"
git -C "$root" archive --format=tar "$commit" | tar -x -C "$work/tree"

# --- 2. nothing but go.work replaces a module -----------------------------------
bad=$(cd "$work/tree" && grep -lE '^[[:space:]]*replace|v0\.0\.0-00010101000000-000000000000' $(find . -name go.mod -not -path '*/testdata/*') || true)
[ -z "$bad" ] || fail "replace directives or placeholder pseudo-versions in: $bad"

# --- 3. publish --------------------------------------------------------------
stamp=$(git -C "$root" log -1 --format=%cI "$commit")
(cd "$root" && go run ./lab/internal/publish -tree "$work/tree" -out "$work/proxy" -version "$version" -time "$stamp") >"$work/modules"
echo "published to file://$work/proxy:"
sed 's/^/  /' "$work/modules"

# A module cache of the check's own: a version of this repository's modules
# fetched by an earlier check (of another commit) stays in a module cache
# for good and would be used instead of this commit's. Other modules come
# from the machine's module cache, itself a file:// proxy, before the
# network; -modcacherw lets the cleanup remove the private cache.
realcache=$(go env GOMODCACHE)
export GOMODCACHE=$work/modcache
export GOWORK=off GOSUMDB=off GOPROXY="file://$work/proxy,file://$realcache/cache/download,$upstream"
userflags="$(go env GOFLAGS) -modcacherw"
# In the archive the modules' go.sum lack their siblings' lines (see
# docs/release.md); -mod=mod lets the build add them there.
export GOFLAGS="$userflags -mod=mod"

# --- 4. every module alone ------------------------------------------------------
while read -r mv; do
	m=${mv%@*}
	dir=$work/tree/${m#"$repo"}
	echo "== $m: go mod tidy -diff, go build ./..."
	# tidy -diff prints a diff of go.mod and go.sum; a line that is not a
	# header and not an added go.sum line of this repository is a finding.
	# It exits 1 when there is a diff; with no diff, 1 is an error of its own.
	set +e
	(cd "$dir" && go mod tidy -diff >"$work/tidy.diff" 2>"$work/tidy.err")
	code=$?
	set -e
	if [ "$code" -ne 0 ] && [ ! -s "$work/tidy.diff" ]; then
		cat "$work/tidy.err"
		fail "go mod tidy fails in $m"
	fi
	if grep -vE '^(\+\+\+|---|@@|diff )|^\+github\.com/pgadvisory/pgadvisory[/ ]' "$work/tidy.diff" | grep -qE '^[-+]'; then
		cat "$work/tidy.diff"
		fail "$m is not tidy"
	fi
	(cd "$dir" && go build ./...) || fail "$m does not build on its own"
done <"$work/modules"

# --- 5. a user's module ---------------------------------------------------------
# The user's go command: the default -mod, nothing added for the check.
export GOBIN=$work/bin GOFLAGS=$userflags
user=$work/user
mkdir -p "$user/bad"
goversion=$(cd "$work/tree" && go mod edit -json | sed -n 's/^[[:space:]]*"Go": "\(.*\)",*$/\1/p')
printf 'module example.com/user\n\ngo %s\n' "$goversion" >"$user/go.mod"
cd "$user"

for cmd in lint/cmd/pgadvisoryvet cmd/pgadvisory lab/cmd/pgadvisory-lab; do
	echo "== go install $repo/$cmd@$version"
	go install "$repo/$cmd@$version" || fail "go install $repo/$cmd@$version"
done
"$GOBIN/pgadvisory" help >"$work/help" || fail "pgadvisory help exited $?"
grep -q detect "$work/help" || fail "pgadvisory help does not list detect"
"$GOBIN/pgadvisory-lab" help >"$work/help" || fail "pgadvisory-lab help exited $?"
grep -q demo "$work/help" || fail "pgadvisory-lab help does not list demo"

echo "== go get $repo/sqlxbind@$version"
go get "$repo/sqlxbind@$version" || fail "go get sqlxbind"
cat >main.go <<'GO'
// A user's program: sqlx over the pgadvisory driver.
package main

import (
	"fmt"
	"os"

	"github.com/jmoiron/sqlx"

	"github.com/pgadvisory/pgadvisory"
	_ "github.com/pgadvisory/pgadvisory/sqlxbind"
)

func main() {
	db, err := sqlx.Open(pgadvisory.DriverName, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(db.Rebind("SELECT ?"))
}
GO
cat >bad/bad.go <<'GO'
// Package bad takes a session lock through database/sql: pgadvisoryvet
// must report it.
package bad

import (
	"context"
	"database/sql"
)

// Lock takes a session lock on a pooled connection.
func Lock(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, "SELECT pg_advisory_lock(1)")
	return err
}
GO
go build -o "$work/user.bin" . || fail "a program using sqlxbind does not build"
[ "$("$work/user.bin")" = 'SELECT $1' ] || fail "sqlx does not bind \$N for the pgadvisory driver"

echo "== go get -tool $repo/lint/cmd/pgadvisoryvet@$version"
go get -tool "$repo/lint/cmd/pgadvisoryvet@$version" || fail "go get -tool pgadvisoryvet"
go vet -vettool="$(go tool -n pgadvisoryvet)" . || fail "go vet with the tool reports a clean package"
set +e
go tool pgadvisoryvet ./bad >"$work/vet.out" 2>&1
code=$?
"$GOBIN/pgadvisoryvet" ./bad >"$work/vet-installed.out" 2>&1
code_installed=$?
set -e
[ "$code" -eq 3 ] && grep -q 'pg_advisory_lock' "$work/vet.out" ||
	{ cat "$work/vet.out"; fail "go tool pgadvisoryvet ./bad exited $code, want 3 with a finding"; }
[ "$code_installed" -eq 3 ] || { cat "$work/vet-installed.out"; fail "the installed pgadvisoryvet exited $code_installed on ./bad, want 3"; }
echo "pgadvisoryvet (go tool and go install) reports: $(head -1 "$work/vet.out")"

echo "== the golangci-lint module plugin from $repo/lint/golangci@$version"
plugin=$work/plugin
mkdir -p "$plugin"
printf 'module example.com/plugin\n\ngo %s\n' "$goversion" >"$plugin/go.mod"
cat >"$plugin/main.go" <<'GO'
// What golangci-lint custom builds, reduced: the plugin registered by a
// blank import, then asked for its analyzers.
package main

import (
	"fmt"
	"os"

	"github.com/golangci/plugin-module-register/register"

	_ "github.com/pgadvisory/pgadvisory/lint/golangci"
)

func main() {
	newPlugin, err := register.GetPlugin("pgadvisory")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	p, err := newPlugin(map[string]any{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	as, err := p.BuildAnalyzers()
	if err != nil || len(as) == 0 {
		fmt.Fprintln(os.Stderr, "analyzers:", len(as), err)
		os.Exit(1)
	}
	for _, a := range as {
		fmt.Println(a.Name)
	}
}
GO
(cd "$plugin" && go get "$repo/lint/golangci@$version" && go mod tidy && go build -o "$work/plugin.bin" .) ||
	fail "the golangci plugin module does not build"
analyzers=$("$work/plugin.bin") || fail "the plugin registry has no working pgadvisory plugin"
echo "plugin registered, analyzers: $analyzers"

echo "release-check: ok ($(wc -l <"$work/modules") modules at $version)"
