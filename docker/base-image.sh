#!/usr/bin/env bash
# Makes the base image vipl-bookworm-base:latest from Debian's packages alone (no image
# registry): debootstrap --variant=minbase bookworm, then `docker import`.  About a minute.
#   docker/base-image.sh [MIRROR]   (default: $VIPL_DEBIAN_MIRROR, else deb.debian.org)
# Needs root (debootstrap) and the debootstrap package.  Where a registry is reachable,
# docker/build.sh --base debian:bookworm needs none of this.
set -euo pipefail
mirror=${1:-${VIPL_DEBIAN_MIRROR:-http://deb.debian.org/debian}}
image=vipl-bookworm-base:latest
docker=${DOCKER:-docker}
[ "$(id -u)" = 0 ] || { echo "base-image.sh: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "base-image.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
root=$(mktemp -d /tmp/vipl-base-XXXXXX)
trap 'rm -rf "$root"' EXIT
log=$root.log
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "base-image.sh: debootstrap failed (log above; mirror $mirror)" >&2
    exit 1
fi
rm -f "$log"
# What debootstrap downloaded is not part of the image; apt's lists are fetched again.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | $docker import -c 'CMD ["bash"]' -m "Debian bookworm minbase ($mirror)" - "$image" >/dev/null
echo "base-image.sh: $image made from $mirror"
