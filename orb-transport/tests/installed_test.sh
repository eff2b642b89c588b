#!/usr/bin/env bash
# The plug-in as installed: cmake --install into a scratch prefix, then unmodified omniORB
# programs (omniNames, nameclt) given the installed libomniviplTP4.so by LD_PRELOAD and no
# LD_LIBRARY_PATH (its RUNPATH finds libvipl.so beside it).  A context bound by one nameclt
# is listed by another through a reference that names giop:vipl, and that call goes
# there.
set -euo pipefail
build=$1
for p in omniNames nameclt; do
    command -v $p >/dev/null || { echo "$p is missing (scripts/install-deps.sh installs omniorb-nameserver and omniorb)"; exit 1; }
done
prefix=$(mktemp -d)
names=""
cleanup() {
    [ -z "$names" ] || kill "$names" 2>/dev/null || true
    rm -rf "$prefix"
}
trap cleanup EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
plugin=$(ls "$prefix"/lib*/libomniviplTP4.so)
readelf -d "$plugin" | grep -q 'RUNPATH.*\$ORIGIN' || { echo "$plugin has no RUNPATH \$ORIGIN"; exit 1; }
unset LD_LIBRARY_PATH
# A random port may be taken (other tests run beside this one): omniNames then exits at
# once and another port is tried.  Readiness is probed with a call that changes nothing,
# so a probe that reached omniNames but failed on the way back cannot leave a binding
# behind that makes the next step fail.
started=""
for attempt in 1 2 3; do
    port=$((40000 + RANDOM % 20000))
    rm -rf "$prefix/names" && mkdir "$prefix/names"
    LD_PRELOAD=$plugin timeout 60 omniNames -start $port -datadir "$prefix/names" \
        -ORBendPoint giop:vipl::$((port + 1)) -ORBendPoint giop:tcp:127.0.0.1:$port >"$prefix/names.log" 2>&1 &
    names=$!
    ref="NameService=corbaloc::127.0.0.1:$port/NameService"
    for i in $(seq 1 50); do
        kill -0 "$names" 2>/dev/null || break
        if LD_PRELOAD=$plugin nameclt -ORBInitRef "$ref" list >/dev/null 2>&1; then
            started=1
            break
        fi
        sleep 0.2
    done
    [ -z "$started" ] || break
    kill "$names" 2>/dev/null || true
    wait "$names" 2>/dev/null || true
    names=""
done
[ -n "$started" ] || { echo "omniNames did not answer: $(cat "$prefix/names.log")"; exit 1; }
LD_PRELOAD=$plugin nameclt -ORBInitRef "$ref" bind_new_context ctx >/dev/null
LD_PRELOAD=$plugin nameclt -ORBInitRef "$ref" bind_new_context ctx/inner >/dev/null
out=$(LD_PRELOAD=$plugin nameclt -ORBInitRef "$ref" -ORBtraceLevel 25 list ctx 2>&1)
grep -q '^inner/' <<<"$out" || { echo "nameclt list ctx: $out"; exit 1; }
grep -q "connect to giop:vipl:" <<<"$out" || { echo "the call did not go over giop:vipl: $(grep -i connect <<<"$out")"; exit 1; }
echo "installed plug-in: ok"
