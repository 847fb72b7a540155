#!/bin/sh
# vetgolden.sh builds lint/cmd/pgadvisoryvet, runs it standalone, as
# `go vet -vettool`, and with -fix -diff over the standalone module
# lint/testdata/vetmodule, and diffs the combined output (paths made
# relative, exit codes included) against lint/testdata/vetmodule.golden.
#
# Usage: lint/vetgolden.sh [-update]   (from anywhere in the repository)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
mod="$here/testdata/vetmodule"
golden="$here/testdata/vetmodule.golden"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$here" && go build -o "$tmp/pgadvisoryvet" ./cmd/pgadvisoryvet)

run() { # run TITLE CMD...: append the command's output and exit code
	title=$1
	shift
	echo "== $title" >>"$tmp/out"
	set +e
	(cd "$mod" && GOWORK=off GOFLAGS=-mod=mod "$@") >"$tmp/cmd" 2>&1
	code=$?
	set -e
	sed -e "s|$mod/||g" -e "s|$tmp/||g" "$tmp/cmd" >>"$tmp/out"
	echo "exit $code" >>"$tmp/out"
}

: >"$tmp/out"
run "pgadvisoryvet ./..." "$tmp/pgadvisoryvet" ./...
run "go vet -vettool=pgadvisoryvet ./..." go vet -vettool="$tmp/pgadvisoryvet" ./...
run "pgadvisoryvet -skip=pooled,tx,conn ./..." "$tmp/pgadvisoryvet" -skip=pooled,tx,conn ./...
run "pgadvisoryvet -fix -diff ./..." "$tmp/pgadvisoryvet" -fix -diff ./...

if [ "${1:-}" = "-update" ]; then
	cp "$tmp/out" "$golden"
	echo "vetgolden: updated $golden"
	exit 0
fi
if ! diff -u "$golden" "$tmp/out"; then
	echo "vetgolden: output differs from $golden (run lint/vetgolden.sh -update if intended)" >&2
	exit 1
fi
echo "vetgolden: ok"
