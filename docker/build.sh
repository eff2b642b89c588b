#!/usr/bin/env bash
# Builds the images vipl-middleware, vipl-postgres and vipl-bench (docker/Dockerfile) from
# this repository; first the base image (docker/base-image.sh) when it is missing.
#   docker/build.sh [--base IMAGE]   IMAGE: debian:bookworm where a registry is reachable
#                                    (default $VIPL_DOCKER_BASE, else vipl-bookworm-base)
# Docker's layer cache keeps the packages and, while the sources are unchanged, the build
# stage: a second run takes seconds.  DOCKER=podman works too.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${VIPL_DOCKER_BASE:-vipl-bookworm-base:latest}
if [ "${1:-}" = --base ] && [ $# -eq 2 ]; then
    base=$2
elif [ $# -ne 0 ]; then
    echo "usage: $0 [--base IMAGE]" >&2
    exit 2
fi
docker=${DOCKER:-docker}
if [ "$base" = vipl-bookworm-base:latest ] && ! $docker image inspect "$base" >/dev/null 2>&1; then
    bash docker/base-image.sh
fi
for target in vipl-middleware vipl-postgres vipl-bench; do
    start=$(date +%s)
    log=$(mktemp /tmp/vipl-docker-build-XXXXXX.log)
    if ! $docker build -f docker/Dockerfile --build-arg BASE="$base" --target "$target" \
        -t "$target:latest" . >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "build.sh: $target failed (log: $log)" >&2
        exit 1
    fi
    rm -f "$log"
    echo "build.sh: $target:latest built in $(($(date +%s) - start)) s"
done
