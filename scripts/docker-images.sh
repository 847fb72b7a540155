#!/usr/bin/env bash
# docker-images.sh: build (or reuse) the local image of the Docker back end's
# PostgreSQL and PgBouncer containers from Debian packages, for machines
# where no registry can be reached (the official images are the harness's
# defaults everywhere else).
#
# The image is a Debian root file system made by
#   debootstrap --variant=minbase --include=$PACKAGES $SUITE ROOTFS $MIRROR
# and imported with `tar -C ROOTFS -c . | docker import`. It has no
# entrypoint: the harness's container command lines run initdb and write
# pg_hba.conf themselves. One image holds both servers; the harness runs it
# for PostgreSQL and for each PgBouncer.
#
# The tag is a content hash of the inputs (this script, suite, mirror,
# packages, architecture): an image with that tag is reused, so only the first
# run pays for debootstrap. Older pgadvisory-debian images are left alone.
#
# It prints progress on stderr and the image name alone on stdout:
#   image=$(scripts/docker-images.sh)
#
# Settings (environment):
#   DEBIAN_SUITE   default: VERSION_CODENAME of /etc/os-release
#   DEBIAN_MIRROR  default: the first Debian URI of the machine's apt sources
#   IMAGE_PACKAGES default: postgresql-15,pgbouncer
#   IMAGE_REPO     default: pgadvisory-debian
#
# Needs: root (debootstrap), debootstrap, docker with an engine that answers.
set -euo pipefail

say() { echo "docker-images: $*" >&2; }
die() { say "$*"; exit 1; }

suite=${DEBIAN_SUITE:-}
if [ -z "$suite" ] && [ -r /etc/os-release ]; then
	suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
fi
[ -n "$suite" ] || die "no Debian suite: set DEBIAN_SUITE (for example bookworm)"

# The mirror the machine's apt already uses: deb822 "URIs:" lines or
# one-line "deb URI suite ..." entries, skipping the security archive.
apt_mirror() {
	local f
	for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' \
			-e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\).*/\2/p' "$f"
	done | grep -v -e '-security' | head -n 1
}
mirror=${DEBIAN_MIRROR:-$(apt_mirror)}
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources*: set DEBIAN_MIRROR"
packages=${IMAGE_PACKAGES:-postgresql-15,pgbouncer}
repo=${IMAGE_REPO:-pgadvisory-debian}
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)

command -v docker >/dev/null || die "the docker command is missing (apt-get install docker.io)"
docker info >/dev/null 2>&1 || die "no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unset}): start dockerd"

hash=$( { cat "$0"; printf '%s\n' "$suite" "$mirror" "$packages" "$arch"; } | sha256sum | cut -c1-16)
image="$repo:$hash"
if docker image inspect "$image" >/dev/null 2>&1; then
	say "reusing $image (inputs unchanged)"
	echo "$image"
	exit 0
fi

command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"
[ "$(id -u)" -eq 0 ] || die "debootstrap needs root"
rootfs=$(mktemp -d /tmp/pgadvisory-rootfs.XXXXXX)
# debootstrap mounts /proc and /sys inside the root file system while it
# installs; should it stop half-way, unmount them before removing the tree,
# and never cross into another file system.
cleanup() {
	local m
	for m in $(awk -v r="$rootfs/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount -l "$m" || true
	done
	rm -rf --one-file-system "$rootfs" "$rootfs.log"
}
trap cleanup EXIT
say "debootstrap $suite from $mirror with $packages (a few minutes the first time)"
start=$(date +%s)
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
	tail -n 30 "$rootfs.log" >&2
	die "debootstrap failed"
fi
# The downloaded packages and apt's lists are not needed at run time.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
say "importing $image"
tar -C "$rootfs" -c . | docker import \
	--change "LABEL org.pgadvisory.image-inputs=$hash" \
	--message "pgadvisory harness: $packages from $suite" - "$image" >/dev/null
say "built $image in $(( $(date +%s) - start ))s"
echo "$image"
