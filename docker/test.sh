#!/usr/bin/env bash
# The container part of the test command (scripts/test.sh): builds the images
# (docker/build.sh), brings docker/compose.yaml's cluster up under a project of its own,
# and checks across containers, each check bounded in time:
#   1. a PL/Proxy remote transaction from node0 to node1 rode the interconnect's tcp
#      provider (node0's pg_stat_vipl: a tcp client connection that moved bytes), and
#      Table 2's driver (bench table2) ran remote transactions over it on both nodes;
#   2. an omniORB call from one container to another over giop:vipl (the client's
#      counters: a vipl connection), and Table 3's client (bench-orb) against it;
#   3. shm between two containers sharing a network and IPC namespace (vipl-pingpong,
#      device shm0);
#   4. a container killed mid-transfer: the ORB client blocked in a 20 s call gets
#      COMM_FAILURE at once; node1 killed under a remote call: node0's caller gets
#      PostgreSQL's error, node0 keeps serving and holds no connection to it;
#   5. compose.node.yaml's deployment, one node per "host" (two projects with host
#      networking on this machine, ports of their own, password authentication): Table
#      2's driver ran remote transactions, inter-node connections on the interconnect
#      (shm here: the nodes share the host's network namespace).
# Where no engine can run (not root, no dockerd, no overlay2) it says what is missing
# and exits 77 (the caller prints it as skipped, never as passed).
set -uo pipefail
cd "$(dirname "$0")/.."
project=vipltest$$
compose=(docker-compose -p "$project" -f docker/compose.yaml)
failed=0

skip() {
    echo "docker tests SKIPPED: $*"
    exit 77
}
pass() { echo "docker: PASS $*"; }
fail() {
    echo "docker: FAIL $*"
    failed=1
}

engine() {
    if ! command -v dockerd >/dev/null || ! command -v docker-compose >/dev/null ||
        ! command -v debootstrap >/dev/null; then
        [ "$(id -u)" = 0 ] || skip "docker.io, docker-compose or debootstrap missing, and not root to install them"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            docker.io docker-compose debootstrap >/dev/null 2>&1 ||
            skip "apt-get could not install docker.io docker-compose debootstrap"
    fi
    docker info >/dev/null 2>&1 && return
    [ "$(id -u)" = 0 ] || skip "no docker engine answers, and not root to start dockerd"
    dockerd --storage-driver=overlay2 >/tmp/vipl-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && return
        sleep 0.5
    done
    skip "dockerd did not start with overlay2: $(tail -n 3 /tmp/vipl-dockerd.log | tr '\n' ' ')"
}

envs=()
# hostnode SECONDS I ARGS...: docker-compose for "host" I of check 5, bounded.
hostnode() {
    timeout "$1" docker-compose -p "$project-host$2" -f docker/compose.node.yaml \
        --env-file "${envs[$2]}" "${@:3}"
}
cleanup() {
    timeout 120 "${compose[@]}" --profile orb --profile shm --profile bench down -v -t 5 >/dev/null 2>&1
    for i in "${!envs[@]}"; do
        hostnode 120 "$i" down -v -t 5 >/dev/null 2>&1
        rm -f "${envs[i]}"
    done
}

# Waits (at most $2 s) until the service's container reports healthy.
healthy() {
    local id
    for _ in $(seq 1 "$2"); do
        id=$("${compose[@]}" ps -q "$1" 2>/dev/null)
        [ -n "$id" ] && [ "$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null)" = healthy ] && return 0
        sleep 1
    done
    return 1
}

psql0() { timeout "${T:-30}" "${compose[@]}" exec -T node0 psql -X -At -h /var/run/postgresql -d bench "$@"; }

engine
start=$(date +%s)
bash docker/build.sh || { echo "docker: FAIL the images did not build"; exit 1; }
echo "docker: images ready in $(($(date +%s) - start)) s"
trap cleanup EXIT

timeout 120 "${compose[@]}" up -d node0 node1 >/dev/null 2>&1 || fail "compose up node0 node1"
if healthy node0 240 && healthy node1 60; then
    pass "two vipl-postgres nodes healthy in $(($(date +%s) - start)) s since the build began"
else
    fail "nodes not healthy: $("${compose[@]}" logs --tail 20 node0 node1 2>&1 | tail -n 20)"
fi

# 1. PL/Proxy across containers, over vipl.
out=$(psql0 -c "SELECT t2_remote_whoami(1)" \
    -c "SELECT transport, bytes_in + bytes_out FROM pg_stat_vipl WHERE role = 'client' AND pid = pg_backend_pid()" 2>&1)
if [ "$(echo "$out" | head -n1)" = 1 ] && echo "$out" | sed -n 2p | grep -Eq '^tcp\|[1-9][0-9]*$'; then
    pass "PL/Proxy call node0 -> node1 answered by node1 over the tcp provider ($(echo "$out" | sed -n 2p))"
else
    fail "PL/Proxy call node0 -> node1: $out"
fi
out=$(timeout 300 "${compose[@]}" run --rm bench table2 tpcb 25 3 2>&1)
if echo "$out" | grep -q '^cluster of 2: tps' && echo "$out" | grep -q '^node 0 inter-node connections: tcp' &&
    echo "$out" | grep -q '^node 1 inter-node connections: tcp'; then
    pass "Table 2 driver across containers: $(echo "$out" | grep '^cluster of 2')"
else
    fail "Table 2 driver: $(echo "$out" | tail -n 8)"
fi

# 2. omniORB across containers, over giop:vipl.
timeout 120 "${compose[@]}" --profile orb up -d orb-server >/dev/null 2>&1
if healthy orb-server 60; then
    out=$(timeout 60 "${compose[@]}" run --rm orb-client sh -c \
        'orb-echo-client "$(cat /var/lib/vipl-bench/echo.ior)" concurrent 2 50' 2>&1)
    if echo "$out" | grep -q '^ok' && echo "$out" | grep -Eq '^vipl_connected=[1-9]'; then
        pass "omniORB calls across containers over giop:vipl ($(echo "$out" | grep vipl_connected))"
    else
        fail "omniORB calls across containers: $out"
    fi
    out=$(timeout 120 "${compose[@]}" run --rm orb-client orb-client 500 2>&1)
    echo "$out" | grep -q '^rt_p50,giop:vipl,hosts,0,' && echo "$out" | grep -q '^rt_p50,giop:tcp,hosts,0,' &&
        pass "Table 3 client across containers: $(echo "$out" | grep '^rt_p50,giop:[a-z]*,hosts,0,' | cut -d, -f2,5 | tr '\n' ' ')" ||
        fail "Table 3 client across containers: $(echo "$out" | tail -n 5)"
else
    fail "orb-server not healthy: $("${compose[@]}" logs --tail 10 orb-server 2>&1)"
fi

# 3. shm between containers sharing node0's network and IPC namespaces.
timeout 10 "${compose[@]}" exec -T -d node0 timeout 60 vipl-pingpong -s -n 2000 -m lat -S 8,4096 >/dev/null 2>&1
sleep 1
out=$(timeout 60 "${compose[@]}" run --rm shm-peer vipl-pingpong -c -n 2000 -m lat -S 8,4096 2>&1)
if [ $? = 0 ] && echo "$out" | grep -Eq '(^| )4096( |$)'; then
    pass "vipl-pingpong over shm0 between two containers: $(echo "$out" | grep -E '(^| )8( |$)' | head -n1 | tr -s ' ')"
else
    fail "vipl-pingpong over shm0 between containers: $out"
fi

# 4a. The ORB server's container killed while a client waits in a 20 s call.
id=$("${compose[@]}" ps -q orb-server)
"${compose[@]}" run --rm orb-client sh -c 'orb-echo-client "$(cat /var/lib/vipl-bench/echo.ior)" death' \
    >/tmp/vipl-docker-death.$$ 2>&1 &
client=$!
for _ in $(seq 1 100); do grep -q pinged /tmp/vipl-docker-death.$$ && break; sleep 0.2; done
sleep 0.5
t0=$(date +%s%N)
docker kill "$id" >/dev/null 2>&1
for _ in $(seq 1 100); do kill -0 $client 2>/dev/null || break; sleep 0.1; done
ms=$((($(date +%s%N) - t0) / 1000000))
kill $client 2>/dev/null
if grep -q COMM_FAILURE /tmp/vipl-docker-death.$$ && [ $ms -lt 5000 ]; then
    pass "ORB server's container killed mid-call: the client got COMM_FAILURE after $ms ms"
else
    fail "ORB server killed mid-call ($ms ms): $(tail -n 5 /tmp/vipl-docker-death.$$)"
fi
rm -f /tmp/vipl-docker-death.$$

# 4b. node1 killed under a remote call from node0.
timeout 30 "${compose[@]}" exec -T node1 psql -X -q -h /var/run/postgresql -d bench -c \
    "CREATE OR REPLACE FUNCTION test_nap(s float8) RETURNS int AS 'SELECT 1 FROM pg_sleep(s)' LANGUAGE sql" >/dev/null 2>&1
psql0 -c "CREATE OR REPLACE FUNCTION test_nap(node int, s float8) RETURNS int AS \$\$ CLUSTER 'bench'; RUN ON node; SELECT test_nap(s); \$\$ LANGUAGE plproxy" >/dev/null 2>&1
T=60 psql0 -c "SELECT test_nap(1, 30)" >/tmp/vipl-docker-nap.$$ 2>&1 &
caller=$!
sleep 2
t0=$(date +%s%N)
docker kill "$("${compose[@]}" ps -q node1)" >/dev/null 2>&1
for _ in $(seq 1 100); do kill -0 $caller 2>/dev/null || break; sleep 0.1; done
ms=$((($(date +%s%N) - t0) / 1000000))
left=$(psql0 -c "SELECT count(*) FROM pg_stat_vipl WHERE role = 'client'" 2>&1)
if grep -qi 'error' /tmp/vipl-docker-nap.$$ && [ $ms -lt 5000 ] && [ "$left" = 0 ]; then
    pass "node1 killed under a remote call: node0's caller got \"$(grep -i error /tmp/vipl-docker-nap.$$ | head -n1 | cut -c1-90)\" after $ms ms; node0 serves, no connection left"
else
    fail "node1 killed under a remote call ($ms ms, connections left: $left): $(cat /tmp/vipl-docker-nap.$$)"
fi
kill $caller 2>/dev/null
rm -f /tmp/vipl-docker-nap.$$

# 5. compose.node.yaml: two "hosts" on this machine, host networking.
port=60950
while ss -Hltn | grep -Eq ":($port|$((port + 1)))\b" && [ $port -lt 60990 ]; do port=$((port + 2)); done
for i in 0 1; do
    envs[i]=$(mktemp)
    printf 'VIPL_T2_HOSTS=127.0.0.1:%s,127.0.0.1:%s\nVIPL_T2_NODE=%s\nVIPL_T2_PORT=%s\nPOSTGRES_PASSWORD=%s\n' \
        $port $((port + 1)) $i $((port + i)) "pw-$RANDOM$RANDOM" >"${envs[i]}"
done
sed -i "s/^POSTGRES_PASSWORD=.*/$(grep POSTGRES_PASSWORD "${envs[0]}")/" "${envs[1]}" # one cluster password
for i in 0 1; do hostnode 120 $i up -d node >/dev/null 2>&1; done
out=$(hostnode 300 0 run --rm bench table2 tpcb 25 3 2>&1)
if echo "$out" | grep -q '^cluster of 2: tps' && echo "$out" | grep -Eq '^node 0 inter-node connections: (shm|tcp) ' &&
    echo "$out" | grep -Eq '^node 1 inter-node connections: (shm|tcp) '; then
    pass "compose.node.yaml, host networking, password auth: $(echo "$out" | grep -E '^(cluster|node 0 inter)' | paste -sd';')"
else
    fail "compose.node.yaml: $(echo "$out" | tail -n 8) | host 1's log: $(hostnode 30 1 logs --tail 15 node 2>&1)"
fi

echo "docker: container part done in $(($(date +%s) - start)) s"
exit $failed
