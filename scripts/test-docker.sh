#!/usr/bin/env bash
# test-docker.sh: the integration tests on the harness's Docker back end
# (make test-docker), with the local image scripts/docker-images.sh builds.
#
#   1. An engine must answer: without one it says what is missing and exits 1
#      within seconds (docker info is bounded by a timeout).
#   2. The image is built, or reused by the content hash of its inputs.
#   3. The tests that matter run with PGADVISORY_TEST_BACKEND=docker and the
#      image through PGADVISORY_TEST_IMAGES (the harness's WithImages):
#        - the Docker module's own tests (start, the engine's listing after
#          Close, the failure path without an engine);
#        - the library's and the harness's integration tests (every pool
#          mode, refusal, rewrite, hold, detection with admin credentials,
#          TLS), in packages TEST_PACKAGES.
#      Those packages live in the library module, which must not require
#      testcontainers-go; the Docker back end is linked into their test
#      binaries by a blank import that `go test -overlay` adds (workspace
#      mode resolves it to ./pgbouncer/docker), not by a file in the tree.
#
# Settings: TESTFLAGS (for example -v, -run X), TIMEOUT (default 30m),
# TEST_PACKAGES (default below), GO (default go).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
TIMEOUT=${TIMEOUT:-30m}
TEST_PACKAGES=${TEST_PACKAGES:-. ./pgbouncer ./advisory ./advisory/pgxadvisory}
read -r -a testflags <<<"${TESTFLAGS:-}"

command -v docker >/dev/null || { echo "test-docker: the docker command is missing (apt-get install docker.io)" >&2; exit 1; }
if ! out=$(timeout 10 docker info --format '{{.ServerVersion}}' 2>&1); then
	echo "test-docker: no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unset, so unix:///var/run/docker.sock}): ${out:-docker info timed out}" >&2
	echo "test-docker: start dockerd (as root: dockerd &), or point DOCKER_HOST at a running engine" >&2
	exit 1
fi
echo "== Docker engine $out"

start=$(date +%s)
image=$(scripts/docker-images.sh)
echo "== image $image ($(( $(date +%s) - start ))s)"

# No reaper: its image cannot be pulled where there is no registry, and
# every test removes what it starts (asserted by the Docker module's tests).
export TESTCONTAINERS_RYUK_DISABLED=true
export PGADVISORY_TEST_BACKEND=docker PGADVISORY_REQUIRE_INTEGRATION=1
export PGADVISORY_TEST_IMAGES=$image

overlay=$(mktemp -d)
trap 'rm -rf "$overlay"' EXIT
# One link file per package: package NAME_test, importing the back end.
entries=()
for pkg in $TEST_PACKAGES; do
	name=$(cd "$pkg" && "$GO" list -f '{{.Name}}' .)
	dir=$(cd "$pkg" && pwd)
	link="$overlay/$(echo "$pkg" | tr '/.' '__').go"
	printf 'package %s_test\n\nimport _ "github.com/pgadvisory/pgadvisory/pgbouncer/docker"\n' "$name" >"$link"
	entries+=("\"$dir/zz_docker_backend_test.go\": \"$link\"")
done
(IFS=,; printf '{"Replace": {%s}}\n' "${entries[*]}") >"$overlay/overlay.json"

status=0
start=$(date +%s)
echo "== module pgbouncer/docker"
(cd pgbouncer/docker && "$GO" test "${testflags[@]}" -race -count=1 -timeout "$TIMEOUT" ./...) || status=1
echo "== packages $TEST_PACKAGES (Docker back end linked by -overlay)"
# -p 1: each package starts its own containers; on a small machine in
# parallel they only slow each other down.
# shellcheck disable=SC2086 # TEST_PACKAGES is a list
"$GO" test "${testflags[@]}" -overlay "$overlay/overlay.json" -p 1 -race -count=1 -timeout "$TIMEOUT" $TEST_PACKAGES || status=1
echo "== Docker tests took $(( $(date +%s) - start ))s"

left=$(docker ps -aq --filter label=org.pgadvisory.cluster; docker network ls -q --filter label=org.pgadvisory.cluster)
if [ -n "$left" ]; then
	echo "test-docker: left behind (containers, networks labelled org.pgadvisory.cluster):" >&2
	docker ps -a --filter label=org.pgadvisory.cluster >&2
	docker network ls --filter label=org.pgadvisory.cluster >&2
	status=1
fi
exit "$status"
