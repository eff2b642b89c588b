#!/usr/bin/env bash
# Installs every build, test and benchmark dependency from Debian bookworm.
# Idempotent and quiet when everything is already present.
set -euo pipefail

packages=(
    build-essential cmake ninja-build pkg-config git
    libtsan2
    catch2
    clang-14 clang-format-14 libclang-rt-14-dev
    ucx-utils libucx-dev libfabric-bin libfabric-dev
    python3 python3-matplotlib
    util-linux procps iproute2 strace
    # db-interconnect: PostgreSQL 15 (server, psql, dblink) and PGXS for the vipl extension
    postgresql-15 postgresql-client-15 postgresql-server-dev-15
    libboost-dev
    # orb-transport: omniORB 4.2 (internal headers), its IDL compiler, the naming service
    libomniorb4-dev omniidl omniorb-nameserver omniorb
    # db-interconnect's program tests: unmodified programs under the interposer
    socat netcat-openbsd curl
    # the database section of bench/: perf stat beside pgbench
    linux-perf
    # the byte-order test: a big-endian (s390x) peer, cross-built, run under qemu-user
    g++-s390x-linux-gnu qemu-user
    # db-interconnect's PostgreSQL suite: the server and its clients, postgres_fdw and
    # dblink (contrib), PL/Proxy, openssl for the TLS test's certificate, bash
    postgresql-15 postgresql-client-15 postgresql-contrib postgresql-15-plproxy openssl bash
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
