#!/bin/sh
# bench.sh SLUICE LOCKBENCH - the benchmarks of `make bench`. Numbers are
# printed, never asserted. Everything runs on free loopback ports, side by
# side in one run, targets interleaved round by round with the order
# rotated, so a busy machine slows every target alike. Throughputs shown
# are medians over the rounds; ratios are medians of the ratios measured
# within each round (targets of a round run back to back, so the slow
# swings of a shared machine cancel out). Takes about 20 minutes on 2 cores.
#
#   1. redis-benchmark GET/SET, -c 1/50, -P 1/16: direct Redis, twemproxy
#      (Debian's nutcracker, one server connection) and sluice.
#   2. LOCK+UNLOCK pairs through sluice vs the same scripts as EVALSHA
#      straight to Redis (tools/lockbench.c), same concurrency; beside them
#      LOCK ... ACKS 1 through a sluice whose Redis has one replica (no
#      target: each grant costs a replication round trip); the same
#      EVALSHA through twemproxy shows what a proxy hop alone costs.
#   3. sluice with no rules, 100 rules none of which match, 1 matching rule
#      whose limit is never reached (more rounds: the effect is small).
#      With 2 or more cores, Redis runs on core 0, and the sluice under test
#      shares core 1 with redis-benchmark: where the scheduler puts three
#      busy processes on two cores otherwise moves throughput by 10-30%
#      from one run to the next, more than the rules cost. Sharing its core
#      with the client, every cycle sluice spends shows in the throughput.
#      Beside throughput: sluice's own CPU time per request (schedstat).
#   4. Fairness (tools/slowreader.py): one client pipelines 20,000 GETs of a
#      100 KB value and never reads; another client's GET latency (p50, p99,
#      max), Redis's peak output buffer for sluice, sluice's memory growth.
#   5. Authentication: sluice without a users file vs with one, the clients
#      logged in as a user whose every request is checked (+@all -@dangerous,
#      keys key:*), placed on cores as section 3; throughput and CPU/request.
#   6. TLS: redis-benchmark --tls GET/SET at -c 50, -P 1/16 through sluice's
#      tls_listen (plain backend), against the same sluice's plain listen and
#      against Redis's own TLS port (redis-server --tls-port), same rounds.
#   7. RESP3 next to RESP2 through sluice: GET/SET, -c 1/50, -P 1/16, with
#      tools/respbench.c (redis-benchmark has no RESP3 switch), the same
#      client once after HELLO 3 and once without, on a sluice of its own;
#      placed on cores like section 3 (Redis on core 0, sluice and the
#      client on core 1) while it runs. Beside throughput: sluice's CPU time
#      per request.
#   8. Redis Cluster (3 primaries, no replicas, on this machine): redis-benchmark
#      GET/SET -c 50, -P 1/16, random keys over all slots, against the cluster
#      directly (redis-benchmark --cluster) and through sluice (cluster =),
#      interleaved rounds; ratio sluice/direct and sluice's CPU per request.
#      Plus LOCK+UNLOCK pairs (-c 50, a key per connection) through sluice vs
#      the same EVALSHA pairs from a cluster-aware client (lockbench -m
#      cluster: each connection on its key's primary), same rounds.
#   9. A client mixing scripts and plain commands: 10,000 commands in one
#      pipeline (redis-cli --pipe) alternating EVALSHA (an INCR script) and
#      GET, then all EVALSHA and all GET, through sluice vs Redis directly;
#      and one ioredis client (tests/node/mixedbench.mjs) sending batches
#      of 200 alternating commands, median time per batch.
#  10. Metrics (issue 21): two sluices started alike, one with metrics_listen
#      and a scraper reading /metrics every second (as Prometheus would),
#      one without; GET/SET at -c 50, -P 1/16, placed on cores as section 3,
#      the two back to back in rotated order; throughput and sluice's CPU
#      time per request.
#  11. Sentinel (issue 23): a sluice in Sentinel mode (one Sentinel
#      monitoring the benchmark's Redis) vs a sluice with the same Redis as a
#      plain backend, started alike: GET/SET -c 50, -P 1/16, back to back in
#      rotated order each round; ratio and sluice's CPU time per request.
#  12. Shared rules at local speed (issue 33): on a Redis of its own, four
#      sluices started alike: no rule, a local rule, a shared rule (leases,
#      the default) and the same shared rule with lease = off (a script
#      call per command, as before leases), each rule matching every GET
#      and never reached; redis-benchmark GET -c 50 -r 100000 at -P 1 and
#      16, rotated order each round: throughput, p50 latency, and Redis's
#      script calls (INFO commandstats: EVALSHA + EVAL) per 100 GETs.
#  13. CPU per request against a pinned previous release (BENCH_PREV,
#      default 39bb195) built from git in this run, row by row with the
#      ratio, and what each feature costs (TOP, slow log, metrics scraped,
#      one rule, users) as its own row: tools/bench_cpu.sh.
#   Every section's keys vary: redis-benchmark -r BENCH_KEYS (default
#   100000; respbench -r the same), locks a key per connection (a constant key would hide
#   the cost of what is kept per key, as PROXY TOP's sketch).
#  14. Planned-switchover write pause and lost writes (issue 34): 20
#      `SENTINEL FAILOVER`s (a primary, two replicas, three Sentinels) under
#      INCR writers through two sluices (tests/integration/
#      test_sentinel_switchover.py with SWITCHOVER_FAILOVERS): each sluice's
#      write pause (hold to release) against Sentinel's own switch time
#      (its first failover event to +switch-master, as sluice heard them),
#      and acknowledged INCRs missing from Redis at the end (target 0).
#   Sections 6 and 8 also print a CPU budget: the whole machine's CPU time
#   per request (/proc/stat: client, servers, proxy and kernel) for both
#   targets, how busy the cores were, and the ceiling, the ratio sluice
#   would reach if both kept every core busy. Meaningful on a quiet machine
#   only: other work on it counts too.
#
# Knobs: BENCH_QUICK=1 (one short round, for a smoke run), BENCH_ROUNDS=N,
# BENCH_RULES_ROUNDS=N, BENCH_TLS_ROUNDS=N, BENCH_CLUSTER_ROUNDS=N,
# BENCH_MIXED_ROUNDS=N, BENCH_SENTINEL_ROUNDS=N, BENCH_LEASE_ROUNDS=N,
# BENCH_SCALE=F (multiplies request counts), BENCH_SECTIONS="1 2 3 4 5 6 7 8 9 10
# 11 12 13 14" (which sections to run, e.g. "3" for the rules), BENCH_KEYS=N
# (distinct keys, 100000), BENCH_PREV=REV and BENCH_CPU_ROUNDS=N (section 13),
# BENCH_SWITCHOVERS=N (section 14's failovers, 20).
set -eu

sluice=$(readlink -f "$1")
lockbench=$(readlink -f "$2")
respbench=$(readlink -f "$3")
rounds=${BENCH_ROUNDS:-5}
rules_rounds=${BENCH_RULES_ROUNDS:-9}
tls_rounds=${BENCH_TLS_ROUNDS:-3}
scale=${BENCH_SCALE:-1}
cluster_rounds=${BENCH_CLUSTER_ROUNDS:-3}
mixed_rounds=${BENCH_MIXED_ROUNDS:-5}
sentinel_rounds=${BENCH_SENTINEL_ROUNDS:-3}
lease_rounds=${BENCH_LEASE_ROUNDS:-5}
sections=${BENCH_SECTIONS:-1 2 3 4 5 6 7 8 9 10 11 12 13 14}
keys=${BENCH_KEYS:-100000}
switchovers=${BENCH_SWITCHOVERS:-20}
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    rounds=1
    rules_rounds=1
    tls_rounds=1
    cluster_rounds=1
    mixed_rounds=1
    sentinel_rounds=1
    lease_rounds=1
    switchovers=3
    scale=0.1
fi

tmp=$(mktemp -d /tmp/sluice-bench.XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap "exit 1" INT TERM HUP PIPE   # then EXIT cleans up (PIPE: output piped into head)

section() {     # section N: true when section N is to run
    case " $sections " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}
section 1 || section 2 || section 7 || rounds=0
section 3 || section 5 || section 10 || rules_rounds=0
section 6 || tls_rounds=0
section 8 || cluster_rounds=0

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {   # wait_port PORT: until something answers PING there
    i=0
    until redis-cli -p "$1" PING >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "bench: nothing answers on port $1" >&2; exit 1; }
        sleep 0.05
    done
}

n_of() {        # n_of BASE: requests for one run
    awk -v b="$1" -v s="$scale" 'BEGIN { printf "%d", b * s }'
}

# ---- the servers ---------------------------------------------------------
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" &
rpid=$!
pids="$pids $rpid"
wait_port "$rport"

start_sluice() {   # start_sluice NAME [RULES_FILE [USERS_FILE [METRICS_PORT]]]: prints its port
    port=$(free_port)
    {
        echo "[proxy]"
        echo "listen = 127.0.0.1:$port"
        echo "backend = 127.0.0.1:$rport"
        echo "log_level = warning"
        echo "lock_failover_grace_ms = 0"
        [ -z "${2:-}" ] || echo "rules = $2"
        [ -z "${3:-}" ] || echo "users = $3"
        [ -z "${4:-}" ] || echo "metrics_listen = 127.0.0.1:$4"
    } >"$tmp/$1.conf"
    "$sluice" -c "$tmp/$1.conf" >"$tmp/$1.log" 2>&1 &
    echo "$port $!"
}

set -- $(start_sluice sluice); sport=$1; spid=$2; pids="$pids $2"

# Section 2's ACKS 1 row: a primary with one replica, and a sluice of its own.
if section 2; then
    aport=$(free_port)
    redis-server --port "$aport" --bind 127.0.0.1 --save '' --appendonly no \
        --repl-diskless-sync-delay 0 --dir "$tmp" --logfile "$tmp/redis-acks.log" &
    pids="$pids $!"
    arport=$(free_port)
    redis-server --port "$arport" --bind 127.0.0.1 --save '' --appendonly no \
        --replicaof 127.0.0.1 "$aport" --dir "$tmp" --dbfilename replica.rdb \
        --logfile "$tmp/redis-replica.log" &
    pids="$pids $!"
    wait_port "$aport"
    wait_port "$arport"
    i=0
    until redis-cli -p "$aport" INFO replication | grep -q 'state=online'; do
        i=$((i + 1))
        [ $i -lt 200 ] || { echo "bench: the replica did not come online" >&2; exit 1; }
        sleep 0.05
    done
    saved_rport=$rport; rport=$aport
    set -- $(start_sluice sluice-acks); ackport=$1; pids="$pids $2"
    rport=$saved_rport
fi

nport=$(free_port)
cat >"$tmp/nutcracker.yml" <<EOF
bench:
  listen: 127.0.0.1:$nport
  hash: fnv1a_64
  distribution: ketama
  redis: true
  server_connections: 1
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:$rport:1
EOF
nutcracker -c "$tmp/nutcracker.yml" -o "$tmp/nutcracker.log" -s "$(free_port)" &
pids="$pids $!"

# 100 rules that never match the benchmark: other addresses, names, users,
# key patterns and commands (each kind costs differently per request).
i=0
while [ $i -lt 100 ]; do
    echo "[limit nomatch-$i]"
    case $((i % 5)) in
        0) echo "match_ip = 10.$i.0.0/16 fd00:$i::/32" ;;
        1) echo "match_name = worker-$i-*" ;;
        2) echo "match_user = batch$i" ;;
        3) echo "keys = other:$i:* tenant:$i:*" ;;
        4) echo "commands = HSET LPUSH ZADD @geo" ;;
    esac
    echo "rate = 100/s"
    echo
    i=$((i + 1))
done >"$tmp/rules100.ini"
printf '[limit roomy]\ncommands = GET SET\nrate = 100000000/s\nburst = 100000000\n' \
    >"$tmp/rules1.ini"
# The rules section compares three sluices started alike, none of which
# the other sections use.
set -- $(start_sluice rules0); s0=$1; p0=$2; pids="$pids $2"
set -- $(start_sluice rules100 "$tmp/rules100.ini"); s100=$1; p100=$2; pids="$pids $2"
set -- $(start_sluice rules1 "$tmp/rules1.ini"); s1=$1; p1=$2; pids="$pids $2"

# Section 5: the same sluice with a users file; redis-benchmark logs in as
# "bench", whose every request passes the command and key checks.
printf '[user bench]\npassword = bench-pw\ncommands = +@all -@dangerous\nkeys = key:*\n' \
    >"$tmp/users.ini"
set -- $(start_sluice users "" "$tmp/users.ini"); su=$1; pu=$2; pids="$pids $2"

# Section 10: a sluice without metrics and one with metrics_listen, read
# every second by a scraper as Prometheus would (the whole page each time).
set -- $(start_sluice metrics_off); smo=$1; pmo=$2; pids="$pids $2"
mport=$(free_port)
set -- $(start_sluice metrics_on "" "" "$mport"); smi=$1; pmi=$2; pids="$pids $2"
if section 10; then
    /usr/bin/python3 -c '
import sys, time, urllib.request
url = "http://127.0.0.1:%s/metrics" % sys.argv[1]
while True:
    try:
        urllib.request.urlopen(url, timeout=5).read()
    except OSError:
        pass
    time.sleep(1)
' "$mport" >/dev/null 2>&1 &
    pids="$pids $!"
fi

# Section 7's sluice: RESP2 and RESP3 clients of the same sluice.
set -- $(start_sluice resp3); s3=$1; p3=$2; pids="$pids $2"

for p in $sport $nport $s0 $s100 $s1 $su $s3 $smo $smi; do wait_port "$p"; done

# TLS (section 6): a CA and a server certificate for 127.0.0.1, a Redis
# with only a TLS port, and a sluice with a plain and a TLS listener in
# front of the plain Redis. Clients show no certificate.
if [ "$tls_rounds" -gt 0 ]; then
    openssl req -x509 -new -nodes -newkey rsa:2048 -keyout "$tmp/ca.key" -out "$tmp/ca.crt" \
        -days 2 -subj "/CN=sluice bench CA" >/dev/null 2>&1
    openssl req -new -nodes -newkey rsa:2048 -keyout "$tmp/server.key" -out "$tmp/server.csr" \
        -subj "/CN=localhost" >/dev/null 2>&1
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$tmp/server.ext"
    openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" \
        -CAcreateserial -out "$tmp/server.crt" -days 2 -extfile "$tmp/server.ext" >/dev/null 2>&1
    rtport=$(free_port)
    redis-server --port 0 --tls-port "$rtport" --bind 127.0.0.1 --save '' --appendonly no \
        --tls-cert-file "$tmp/server.crt" --tls-key-file "$tmp/server.key" \
        --tls-ca-cert-file "$tmp/ca.crt" --tls-auth-clients no \
        --dir "$tmp" --logfile "$tmp/redis-tls.log" &
    pids="$pids $!"
    stport=$(free_port)
    stplain=$(free_port)
    {
        echo "[proxy]"
        echo "listen = 127.0.0.1:$stplain"
        echo "tls_listen = 127.0.0.1:$stport"
        echo "backend = 127.0.0.1:$rport"
        echo "log_level = warning"
        echo "lock_failover_grace_ms = 0"
        echo "tls_cert_file = $tmp/server.crt"
        echo "tls_key_file = $tmp/server.key"
        echo "tls_auth_clients = no"
    } >"$tmp/sluice-tls.conf"
    "$sluice" -c "$tmp/sluice-tls.conf" >"$tmp/sluice-tls.log" 2>&1 &
    pids="$pids $!"
    wait_port "$stplain"
    i=0
    until redis-cli --tls --cacert "$tmp/ca.crt" -p "$rtport" PING >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "bench: the TLS redis-server does not answer" >&2; exit 1; }
        sleep 0.05
    done
fi

# Redis Cluster (section 8): 3 primaries without replicas, and a sluice
# with them as seeds.
if [ "$cluster_rounds" -gt 0 ]; then
    cports=""
    for i in 1 2 3; do
        cp=$(free_port)
        while [ "$cp" -gt 55535 ]; do cp=$(free_port); done
        mkdir -p "$tmp/cluster$i"
        redis-server --port "$cp" --bind 127.0.0.1 --save '' --appendonly no \
            --cluster-enabled yes --cluster-config-file "$tmp/cluster$i/nodes.conf" \
            --cluster-node-timeout 1000 --dir "$tmp/cluster$i" --logfile "$tmp/cluster$i.log" &
        pids="$pids $!"
        cports="$cports $cp"
    done
    seeds=""
    for cp in $cports; do wait_port "$cp"; seeds="$seeds 127.0.0.1:$cp"; done
    # shellcheck disable=SC2086
    redis-cli --cluster create $seeds --cluster-replicas 0 --cluster-yes >"$tmp/cluster-create.log" 2>&1
    cport1=$(echo $cports | awk '{ print $1 }')
    i=0
    until redis-cli -p "$cport1" CLUSTER INFO 2>/dev/null | grep -q 'cluster_state:ok'; do
        i=$((i + 1)); [ $i -lt 200 ] || { echo "bench: the cluster is not ok" >&2; exit 1; }
        sleep 0.05
    done
    scport=$(free_port)
    printf '[proxy]\nlisten = 127.0.0.1:%s\ncluster =%s\nlog_level = warning\nlock_failover_grace_ms = 0\n' "$scport" "$seeds" \
        >"$tmp/sluice-cluster.conf"
    "$sluice" -c "$tmp/sluice-cluster.conf" >"$tmp/sluice-cluster.log" 2>&1 &
    scpid=$!
    pids="$pids $scpid"
    i=0
    until [ "$(redis-cli -p "$scport" SET bench:ready 1 2>/dev/null)" = OK ]; do
        i=$((i + 1)); [ $i -lt 200 ] || { echo "bench: sluice does not serve the cluster" >&2; exit 1; }
        sleep 0.05
    done
    for cp in $cports; do
        csha_a=$(redis-cli -p "$cp" SCRIPT LOAD "$(cat lua/lock_acquire.lua)")
        csha_r=$(redis-cli -p "$cp" SCRIPT LOAD "$(cat lua/lock_release.lua)")
    done
fi

# ---- running ---------------------------------------------------------------
resp_pin=""
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    resp_pin="taskset -c 1"
fi

# resp_round ROUND: section 7's runs of one round, RESP2 and RESP3 back to
# back for each workload (order rotated), with sluice's CPU ns per request.
resp_round() {
    if [ -n "$resp_pin" ]; then
        taskset -apc 0 "$rpid" >/dev/null
        taskset -apc 1 "$p3" >/dev/null
    fi
    for t in get set; do
        for c in 1 50; do
            for p in 1 16; do
                n=$(n_of "$(base_n $c $p)")
                for proto in $(rotate $(( $1 + c + p )) resp2 resp3); do
                    flag=""; [ "$proto" = resp2 ] || flag=-3
                    ns0=$(cpu_ns "$p3")
                    v=$($resp_pin "$respbench" -p "$s3" -t "$t" -c "$c" -P "$p" -n "$n" -r "$keys" $flag)
                    ns1=$(cpu_ns "$p3")
                    echo "$proto $t $c $p ${v:-0} $1" >>"$results"
                    echo "cpu_$proto $t $c $p $(( (ns1 - ns0) / n )) $1" >>"$results"
                done
            done
        done
    done
    [ -z "$resp_pin" ] || taskset -apc "0-$(( $(nproc) - 1 ))" "$rpid" >/dev/null
}

results="$tmp/results"
: >"$results"

# Results: one line per run, "LABEL TEST CLIENTS PIPELINE VALUE ROUND".
# With PID, also "cpu_LABEL ..." lines: that process's CPU ns per request.
# Always "all_LABEL ...": the whole machine's CPU ns per request (client,
# servers, proxies and kernel alike, from /proc/stat), and "busy_LABEL ...":
# the share of all cores busy during the run, in percent.
# $client_cpu (a taskset prefix, or empty) places redis-benchmark.
client_cpu=""
bench_login=""   # redis-benchmark's login options, for the users file's sluice
bench_one() {   # bench_one LABEL PORT TEST CLIENTS PIPELINE N ROUND [PID]
    [ -z "${8:-}" ] || ns0=$(cpu_ns "$8")
    # shellcheck disable=SC2046
    set -- "$1" "$2" "$3" "$4" "$5" "$6" "$7" "${8:-}" $(machine_ticks)
    # shellcheck disable=SC2086
    rps=$($client_cpu redis-benchmark -p "$2" $bench_login -t "$3" -c "$4" -P "$5" -n "$6" -r "$keys" --csv \
          2>/dev/null | awk -F'"' 'header { print $4; exit } /^"test"/ { header = 1 }')
    echo "$1 $3 $4 $5 ${rps:-0} $7" >>"$results"
    # shellcheck disable=SC2046
    set -- "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "${10}" $(machine_ticks)
    echo "all_$1 $3 $4 $5 $(awk -v b="$((${11} - $9))" -v n="$6" -v hz="$clk_tck" \
        'BEGIN { printf "%.0f", b * 1e9 / hz / n }') $7" >>"$results"
    echo "busy_$1 $3 $4 $5 $(awk -v b="$((${11} - $9))" -v t="$((${12} - ${10}))" \
        'BEGIN { printf "%.0f", (t > 0 ? 100 * b / t : 0) }') $7" >>"$results"
    if [ -n "${8:-}" ]; then
        ns1=$(cpu_ns "$8")
        echo "cpu_$1 $3 $4 $5 $(( (ns1 - ns0) / $6 )) $7" >>"$results"
    fi
}

# machine_ticks: "BUSY TOTAL" clock ticks of all cores since boot (/proc/stat):
# busy is user, nice, system, irq and softirq time (not steal: the host's).
clk_tck=$(getconf CLK_TCK)
machine_ticks() {
    awk '/^cpu / { printf "%d %d\n", $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9; exit }' \
        /proc/stat
}
cpu_ns() {      # cpu_ns PID: nanoseconds the process has run on a CPU
    awk '{ print $1 }' "/proc/$1/schedstat" 2>/dev/null || echo 0
}

median_of() {   # the median of the numbers on standard input (0 when none)
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else print v[int((NR + 1) / 2)] }'
}

median() {      # median LABEL TEST CLIENTS PIPELINE
    awk -v l="$1" -v t="$2" -v c="$3" -v p="$4" \
        '$1 == l && $2 == t && $3 == c && $4 == p { print $5 }' "$results" | median_of
}

# The median over rounds of A/B, each round's A divided by the same round's B.
median_ratio() {   # median_ratio A B TEST CLIENTS PIPELINE
    awk -v a="$1" -v b="$2" -v t="$3" -v c="$4" -v p="$5" '
        $2 == t && $3 == c && $4 == p && $1 == a { va[$6] = $5 }
        $2 == t && $3 == c && $4 == p && $1 == b { vb[$6] = $5 }
        END { for (r in va) if ((r in vb) && vb[r] > 0) print va[r] / vb[r] }' "$results" |
        median_of | awk '{ if ($1 > 0) printf "%.2f", $1; else print "-" }'
}

rotate() {      # rotate K WORDS...: the words, starting at the (K mod count)th
    k=$1; shift
    k=$((k % $#))
    i=0; head=""; tail=""
    for w in "$@"; do
        if [ $i -lt $k ]; then tail="$tail $w"; else head="$head $w"; fi
        i=$((i + 1))
    done
    echo $head $tail
}

base_n() {      # requests per run, by clients and pipeline
    case "$1/$2" in
        1/1) echo 40000 ;;
        1/16) echo 400000 ;;
        50/1) echo 200000 ;;
        *) echo 1000000 ;;
    esac
}

echo "sluice bench: sections $sections; $rounds round(s), $rules_rounds for the rules;" \
    "Redis $(redis-server --version | awk '{print $3}' | sed 's/^v=//'), $(nproc) cores"
r=1
while [ $r -le "$rounds" ]; do
    echo "  round $r/$rounds ..." >&2
    section 1 && for t in get set; do
        for c in 1 50; do
            for p in 1 16; do
                n=$(n_of "$(base_n $c $p)")
                # Rotate who goes first, so no target always runs warm or cold.
                for target in $(rotate $(( r + c + p )) direct twemproxy sluice); do
                    case $target in
                        direct) port=$rport ;;
                        twemproxy) port=$nport ;;
                        sluice) port=$sport ;;
                    esac
                    bench_one "$target" "$port" "$t" "$c" "$p" "$n" "$r"
                done
            done
        done
    done
    section 7 && resp_round "$r"
    section 2 || { r=$((r + 1)); continue; }
    sha_a=$(redis-cli -p "$rport" SCRIPT LOAD "$(cat lua/lock_acquire.lua)")
    sha_r=$(redis-cli -p "$rport" SCRIPT LOAD "$(cat lua/lock_release.lua)")
    for c in 1 50; do
        n=$(n_of $((c == 1 ? 20000 : 100000)))
        for target in $(rotate "$r" direct twemproxy sluice); do
            case $target in
                direct) v=$("$lockbench" -p "$rport" -c "$c" -n "$n" -m direct -a "$sha_a" -r "$sha_r") ;;
                twemproxy) v=$("$lockbench" -p "$nport" -c "$c" -n "$n" -m direct -a "$sha_a" -r "$sha_r") ;;
                sluice) v=$("$lockbench" -p "$sport" -c "$c" -n "$n" -m sluice) ;;
            esac
            echo "lock_$target pairs $c 1 ${v:-0} $r" >>"$results"
        done
        v=$("$lockbench" -p "$ackport" -c "$c" -n "$(n_of $((c == 1 ? 5000 : 20000)))" -m sluice -k 1)
        echo "lock_acks pairs $c 1 ${v:-0} $r" >>"$results"
    done
    r=$((r + 1))
done

# The rules cost little next to the noise of a shared machine: more rounds,
# the three sluices back to back for each workload, placed on cores as the
# header says (taskset -a: all of a process's threads).
pinned=0
if [ "$rules_rounds" -gt 0 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    taskset -apc 0 "$rpid" >/dev/null
    for p in $p0 $p100 $p1 $pu $pmo $pmi; do taskset -apc 1 "$p" >/dev/null; done
    client_cpu="taskset -c 1"
    pinned=1
fi
r=1
while [ $r -le "$rules_rounds" ]; do
    echo "  rules round $r/$rules_rounds ..." >&2
    for t in get set; do
        for p in 1 16; do
            n=$(n_of $((p == 1 ? 100000 : 500000)))
            for target in $(rotate $(( r + p )) rules0 rules100 rules1); do
                case $target in
                    rules0) port=$s0; pid=$p0 ;;
                    rules100) port=$s100; pid=$p100 ;;
                    rules1) port=$s1; pid=$p1 ;;
                esac
                section 3 && bench_one "rules_$target" "$port" "$t" 50 "$p" "$n" "$r" "$pid"
            done
            # Section 10: without metrics and with metrics scraped, back to back.
            if section 10; then
                for target in $(rotate $(( r + p )) off on); do
                    if [ "$target" = on ]; then port=$smi; pid=$pmi; else port=$smo; pid=$pmo; fi
                    bench_one "metrics_$target" "$port" "$t" 50 "$p" "$n" "$r" "$pid"
                done
            fi
            # Section 5: without a users file (rules0) and with one, back to back.
            section 5 || continue
            for target in $(rotate $(( r + p )) none users); do
                if [ "$target" = users ]; then
                    bench_login="--user bench -a bench-pw"; port=$su; pid=$pu
                else
                    bench_login=""; port=$s0; pid=$p0
                fi
                bench_one "auth_$target" "$port" "$t" 50 "$p" "$n" "$r" "$pid"
            done
            bench_login=""
        done
    done
    r=$((r + 1))
done
if [ "$pinned" = 1 ]; then
    taskset -apc "0-$(( $(nproc) - 1 ))" "$rpid" >/dev/null
    client_cpu=""
fi

# TLS: the targets of a row back to back, in rotated order. $bench_login
# carries redis-benchmark's TLS options.
r=1
while [ $r -le "$tls_rounds" ]; do
    echo "  TLS round $r/$tls_rounds ..." >&2
    for t in get set; do
        for p in 1 16; do
            n=$(n_of $((p == 1 ? 100000 : 500000)))
            for target in $(rotate $(( r + p )) tls_sluice plain_sluice tls_redis); do
                bench_login="--tls --cacert $tmp/ca.crt"
                case $target in
                    tls_sluice) port=$stport ;;
                    plain_sluice) port=$stplain; bench_login="" ;;
                    tls_redis) port=$rtport ;;
                esac
                bench_one "$target" "$port" "$t" 50 "$p" "$n" "$r"
            done
            bench_login=""
        done
    done
    r=$((r + 1))
done

# ---- report ----------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

if section 1; then
    echo
    echo "1. Throughput, requests/s (median of $rounds)"
    printf '%-4s %3s %3s %11s %11s %11s %10s %10s\n' cmd -c -P direct twemproxy sluice "s/twem" "s/direct"
    for t in get set; do
        for c in 1 50; do
            for p in 1 16; do
                d=$(median direct $t $c $p); w=$(median twemproxy $t $c $p); s=$(median sluice $t $c $p)
                printf '%-4s %3s %3s %11.0f %11.0f %11.0f %10s %10s\n' "$t" "$c" "$p" "$d" "$w" "$s" \
                    "$(median_ratio sluice twemproxy "$t" "$c" "$p")" \
                    "$(median_ratio sluice direct "$t" "$c" "$p")"
            done
        done
    done
    echo "   targets: s/twem >= 1 on every row; s/direct >= 0.9 at -c 50 -P 1"
fi

if section 2; then
    echo
    echo "2. LOCK+UNLOCK pairs/s (median of $rounds)"
    printf '%-8s %14s %14s %12s %10s %10s %12s %10s\n' clients "EVALSHA direct" "EVALSHA twem" \
        "LOCK sluice" "s/direct" "twem/direct" "LOCK ACKS 1" "acks/s"
    for c in 1 50; do
        d=$(median lock_direct pairs $c 1); w=$(median lock_twemproxy pairs $c 1)
        s=$(median lock_sluice pairs $c 1); a=$(median lock_acks pairs $c 1)
        printf '%-8s %14.0f %14.0f %12.0f %10s %10s %12.0f %10s\n' "$c" "$d" "$w" "$s" \
            "$(median_ratio lock_sluice lock_direct pairs $c 1)" \
            "$(median_ratio lock_twemproxy lock_direct pairs $c 1)" "$a" \
            "$(median_ratio lock_acks lock_sluice pairs $c 1)"
    done
    echo "   LOCK ACKS 1: through a sluice whose Redis has one replica (no target: each"
    echo "   grant waits for the replica, on a one-shot connection of its own)"
    echo "   target: s/direct >= 0.8; twem/direct: the same scripts through a proxy that"
    echo "   only forwards them, i.e. what the extra hop alone costs on this machine"
fi

# rules_table PREFIX: the rules section's rows for the results labelled
# PREFIXrules0/100/1; ratios are with rules / without for throughput, and
# the other way round for CPU time (cpu_ labels), so 1.00 means "no cost".
rules_table() {
    printf '%-4s %3s %11s %11s %8s %11s %8s\n' cmd -P "no rules" "100 nomatch" ratio "1 match" ratio
    for t in get set; do
        for p in 1 16; do
            if [ "$1" = cpu_rules_ ]; then
                q100=$(median_ratio "${1}rules0" "${1}rules100" $t 50 $p)
                q1=$(median_ratio "${1}rules0" "${1}rules1" $t 50 $p)
            else
                q100=$(median_ratio "${1}rules100" "${1}rules0" $t 50 $p)
                q1=$(median_ratio "${1}rules1" "${1}rules0" $t 50 $p)
            fi
            printf '%-4s %3s %11.0f %11.0f %8s %11.0f %8s\n' "$t" "$p" \
                "$(median "${1}rules0" $t 50 $p)" "$(median "${1}rules100" $t 50 $p)" "$q100" \
                "$(median "${1}rules1" $t 50 $p)" "$q1"
        done
    done
}

if section 3; then
    echo
    if [ "$pinned" = 1 ]; then
        echo "3. Rules overhead at -c 50, requests/s (median of $rules_rounds; Redis on core 0,"
        echo "   sluice and redis-benchmark on core 1)"
    else
        echo "3. Rules overhead at -c 50, requests/s (median of $rules_rounds)"
    fi
    rules_table rules_
    echo "   targets: 100 non-matching >= 0.97; 1 matching >= 0.95"
    echo
    echo "3a. sluice's CPU time per request, ns (same runs, median of $rules_rounds)"
    rules_table cpu_rules_
    echo "   ratio: CPU without rules / with (1.00: the rules cost nothing), kernel included"
    # Throughput on a shared 2-core machine moves by more than the rules cost;
    # instructions do not: the same requests through each sluice under
    # callgrind, user-space instructions per request (kernel time not counted).
    if command -v valgrind >/dev/null 2>&1; then
        echo
        echo "3b. Instructions per request in sluice (callgrind, GET -c 50 -P 16)"
        nreq=$(n_of 40000)
        for variant in none rules100 rules1; do
            port=$(free_port)
            {
                echo "[proxy]"
                echo "listen = 127.0.0.1:$port"
                echo "backend = 127.0.0.1:$rport"
                echo "log_level = warning"
        echo "lock_failover_grace_ms = 0"
                [ "$variant" = none ] || echo "rules = $tmp/$variant.ini"
            } >"$tmp/cg-$variant.conf"
            valgrind --tool=callgrind --toggle-collect=event_base_loop \
                --toggle-collect=client_write_now --toggle-collect=backend_write_now \
                --callgrind-out-file="$tmp/cg-$variant.out" \
                "$sluice" -c "$tmp/cg-$variant.conf" >"$tmp/cg-$variant.log" 2>&1 &
            vpid=$!
            i=0
            until redis-cli -p "$port" PROXY PING >/dev/null 2>&1; do
                i=$((i + 1)); [ $i -lt 400 ] || break; sleep 0.05
            done
            redis-benchmark -p "$port" -t get -c 50 -P 16 -n "$nreq" -r "$keys" -q >/dev/null 2>&1 || true
            kill -TERM "$vpid" 2>/dev/null || true
            wait "$vpid" 2>/dev/null || true
            ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$tmp/cg-$variant.out" 2>/dev/null)
            echo "cg $variant ${ir:-0}" >>"$results"
        done
        base=$(awk '$1 == "cg" && $2 == "none" { print $3 }' "$results")
        printf '%-10s %14s %10s %8s\n' rules instructions "per req" ratio
        for variant in none rules100 rules1; do
            ir=$(awk -v v="$variant" '$1 == "cg" && $2 == v { print $3 }' "$results")
            printf '%-10s %14s %10s %8s\n' "$variant" "$ir" \
                "$(awk -v a="$ir" -v n="$nreq" 'BEGIN { printf "%.0f", a / n }')" "$(ratio "$base" "$ir")"
        done
        echo "   ratio: instructions without rules / with (1.00: the rules cost nothing); counted"
        echo "   inside the event loop only, so start-up and rule loading are left out"
    fi
fi

r=1
while [ $r -le "$cluster_rounds" ]; do
    echo "  cluster round $r/$cluster_rounds ..." >&2
    for t in get set; do
        for p in 1 16; do
            n=$(n_of $((p == 1 ? 200000 : 1000000)))
            for target in $(rotate $(( r + p )) direct sluice); do
                if [ "$target" = direct ]; then
                    bench_login="--cluster"
                    bench_one cluster_direct "$cport1" "$t" 50 "$p" "$n" "$r"
                else
                    bench_login=""
                    bench_one cluster_sluice "$scport" "$t" 50 "$p" "$n" "$r" "$scpid"
                fi
            done
        done
    done
    bench_login=""
    n=$(n_of 100000)
    for target in $(rotate "$r" direct sluice); do
        if [ "$target" = direct ]; then
            v=$($client_cpu "$lockbench" -p "$cport1" -c 50 -n "$n" -m cluster -a "$csha_a" -r "$csha_r")
            echo "clock_direct pairs 50 1 ${v:-0} $r" >>"$results"
        else
            ns0=$(cpu_ns "$scpid")
            v=$($client_cpu "$lockbench" -p "$scport" -c 50 -n "$n" -m sluice)
            ns1=$(cpu_ns "$scpid")
            echo "clock_sluice pairs 50 1 ${v:-0} $r" >>"$results"
            echo "cpu_clock_sluice pairs 50 1 $(( (ns1 - ns0) / (2 * n) )) $r" >>"$results"
        fi
    done
    r=$((r + 1))
done

if section 4; then
    echo
    echo "4. Fairness: one client pipelines 20000 GETs of 100 KB and never reads;"
    echo "   another client's GET meanwhile (sluice defaults: client_max_inflight 256,"
    echo "   client_max_pending_bytes 16mb)"
    wait_port "$sport"
    /usr/bin/python3 "$(dirname "$0")/slowreader.py" "$sport" "$rport" "$spid" 5
    echo "   targets: another client's GET answered within 1 s; Redis's buffer bounded"
fi

if section 5; then
    echo
    echo "5. Authentication at -c 50 (median of $rules_rounds, placed as section 3): no users"
    echo "   file vs a users file, redis-benchmark logged in as a user whose requests are"
    echo "   all checked (+@all -@dangerous, keys key:*)"
    printf '%-4s %3s %11s %11s %8s %10s %10s %8s\n' cmd -P "no users" users ratio \
        "ns/req" "ns/req" "cpu"
    for t in get set; do
        for p in 1 16; do
            printf '%-4s %3s %11.0f %11.0f %8s %10.0f %10.0f %8s\n' "$t" "$p" \
                "$(median auth_none $t 50 $p)" "$(median auth_users $t 50 $p)" \
                "$(median_ratio auth_users auth_none $t 50 $p)" \
                "$(median cpu_auth_none $t 50 $p)" "$(median cpu_auth_users $t 50 $p)" \
                "$(median_ratio cpu_auth_none cpu_auth_users $t 50 $p)"
        done
    done
    echo "   target: ratio >= 0.97 (cpu: CPU without / with, 1.00 = authentication costs nothing)"
fi

if section 10; then
    echo
    echo "10. Metrics at -c 50 (median of $rules_rounds, placed as section 3): a sluice without"
    echo "   metrics_listen vs one with it, its /metrics read every second"
    printf '%-4s %3s %11s %11s %8s %10s %10s %8s\n' cmd -P "no metrics" metrics ratio \
        "ns/req" "ns/req" "cpu"
    for t in get set; do
        for p in 1 16; do
            printf '%-4s %3s %11.0f %11.0f %8s %10.0f %10.0f %8s\n' "$t" "$p" \
                "$(median metrics_off $t 50 $p)" "$(median metrics_on $t 50 $p)" \
                "$(median_ratio metrics_on metrics_off $t 50 $p)" \
                "$(median cpu_metrics_off $t 50 $p)" "$(median cpu_metrics_on $t 50 $p)" \
                "$(median_ratio cpu_metrics_off cpu_metrics_on $t 50 $p)"
        done
    done
    echo "   target: ratio >= 0.98 on every row (cpu: CPU without / with, 1.00 = metrics cost nothing)"
fi

# cpu_budget_table LABEL BASE LNAME BNAME: for sections 6 and 8 (-c 50), the
# whole machine's CPU time per request through LABEL and BASE, how busy the
# cores were, and the ceiling: BASE's CPU per request over LABEL's, the
# throughput ratio LABEL/BASE would show if both kept every core busy. A
# ratio below its target and a ceiling below it too say that the machine's
# cores, not idle waiting, bound the row: the hop's system calls cost more
# than the target leaves, whatever the proxy's own code does.
cpu_budget_table() {
    echo "   CPU budget: the machine's CPU time per request (client, servers, proxy, kernel)"
    printf '%-4s %3s %13s %13s %8s %8s %8s
' cmd -P "$3 ns" "$4 ns" "busy %" "busy %" ceiling
    for t in get set; do
        for p in 1 16; do
            printf '%-4s %3s %13.0f %13.0f %8.0f %8.0f %8s
' "$t" "$p" \
                "$(median "all_$1" $t 50 $p)" "$(median "all_$2" $t 50 $p)" \
                "$(median "busy_$1" $t 50 $p)" "$(median "busy_$2" $t 50 $p)" \
                "$(median_ratio "all_$2" "all_$1" $t 50 $p)"
        done
    done
    echo "   busy %: share of all cores in use during the run ($1, then $2);"
    echo "   ceiling: $2's CPU per request / $1's"
}

if section 6; then
    echo
    echo "6. TLS at -c 50, requests/s (median of $tls_rounds): sluice's TLS listener"
    echo "   (plain backend), the same sluice's plain listener, Redis's own TLS port"
    printf '%-4s %3s %11s %12s %11s %10s %14s\n' cmd -P "sluice TLS" "sluice plain" "Redis TLS" \
        "TLS/plain" "TLS/Redis TLS"
    for t in get set; do
        for p in 1 16; do
            printf '%-4s %3s %11.0f %12.0f %11.0f %10s %14s\n' "$t" "$p" \
                "$(median tls_sluice $t 50 $p)" "$(median plain_sluice $t 50 $p)" \
                "$(median tls_redis $t 50 $p)" \
                "$(median_ratio tls_sluice plain_sluice $t 50 $p)" \
                "$(median_ratio tls_sluice tls_redis $t 50 $p)"
        done
    done
    echo "   target: TLS/Redis TLS >= 0.9 at -P 16"
    cpu_budget_table tls_sluice tls_redis "sluice TLS" "Redis TLS"
fi

if section 7; then
    echo
    if [ -n "$resp_pin" ]; then
        echo "7. RESP3 and RESP2 clients through sluice (median of $rounds, tools/respbench;"
        echo "   Redis on core 0, sluice and the client on core 1)"
    else
        echo "7. RESP3 and RESP2 clients through sluice (median of $rounds, tools/respbench)"
    fi
    printf '%-4s %3s %3s %11s %11s %6s %9s %9s %6s\n' cmd -c -P "RESP2 rq/s" "RESP3 rq/s" "3/2" \
        "RESP2 ns" "RESP3 ns" "2/3"
    for t in get set; do
        for c in 1 50; do
            for p in 1 16; do
                printf '%-4s %3s %3s %11.0f %11.0f %6s %9.0f %9.0f %6s\n' "$t" "$c" "$p" \
                    "$(median resp2 $t $c $p)" "$(median resp3 $t $c $p)" \
                    "$(median_ratio resp3 resp2 "$t" "$c" "$p")" \
                    "$(median cpu_resp2 $t $c $p)" "$(median cpu_resp3 $t $c $p)" \
                    "$(median_ratio cpu_resp2 cpu_resp3 "$t" "$c" "$p")"
            done
        done
    done
    echo "   ns: sluice's CPU time per request (kernel included); 2/3: RESP2's over RESP3's"
    echo "   target: 3/2 >= 0.97 and 2/3 >= 0.97 on every row"
fi

if section 8; then
    echo
    echo "8. Redis Cluster (3 primaries) at -c 50, random keys over all slots, requests/s"
    echo "   (median of $cluster_rounds): redis-benchmark --cluster against the nodes vs through sluice"
    printf '%-4s %3s %11s %11s %8s %10s\n' cmd -P direct sluice ratio "sluice ns/req"
    for t in get set; do
        for p in 1 16; do
            printf '%-4s %3s %11.0f %11.0f %8s %10.0f\n' "$t" "$p" \
                "$(median cluster_direct $t 50 $p)" "$(median cluster_sluice $t 50 $p)" \
                "$(median_ratio cluster_sluice cluster_direct $t 50 $p)" \
                "$(median cpu_cluster_sluice $t 50 $p)"
        done
    done
    echo "   targets: ratio >= 0.9 at -P 1, >= 0.6 at -P 16 (predixy: 0.51-0.56 / 0.53-0.90)"
    cpu_budget_table cluster_sluice cluster_direct sluice direct
    printf '%-8s %14s %14s %8s %10s\n' "" "EVALSHA direct" "LOCK sluice" ratio "sluice ns/req"
    printf '%-8s %14.0f %14.0f %8s %10.0f\n' "pairs/s" \
        "$(median clock_direct pairs 50 1)" "$(median clock_sluice pairs 50 1)" \
        "$(median_ratio clock_sluice clock_direct pairs 50 1)" "$(median cpu_clock_sluice pairs 50 1)"
    echo "   LOCK+UNLOCK pairs/s at -c 50 (a key per connection): through sluice vs the same"
    echo "   EVALSHA pairs from a cluster-aware client on each key's primary (lockbench -m cluster)"
fi

# mixed_pipe MODE SHA: 10,000 commands in RESP, alternating EVALSHA SHA
# (an INCR script) and GET (MODE mixed), or all EVALSHA (scripts) or all
# GET (gets), all on one key.
mixed_pipe() {
    awk -v mode="$1" -v sha="$2" 'BEGIN {
        for (i = 0; i < 10000; i++) {
            if (mode == "mixed" ? i % 2 == 0 : mode == "scripts")
                printf "*4\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n$7\r\nmixed:n\r\n", sha
            else
                printf "*2\r\n$3\r\nGET\r\n$7\r\nmixed:n\r\n"
        }
    }'
}

# pipe_per_s PORT FILE: commands/s of redis-cli --pipe sending FILE (10,000).
pipe_per_s() {
    t0=$(date +%s%N)
    out=$(redis-cli -p "$1" --pipe <"$2" 2>&1)
    t1=$(date +%s%N)
    case $out in *"errors: 0, replies: 10000"*) ;; *) echo 0; return ;; esac
    awk -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f\n", 10000 * 1e9 / ns }'
}

if section 9 && [ "$mixed_rounds" -gt 0 ]; then
    msha=$(redis-cli -p "$rport" SCRIPT LOAD "return redis.call('INCR', KEYS[1])")
    for m in mixed scripts gets; do mixed_pipe $m "$msha" >"$tmp/pipe_$m.resp"; done
    nodedir=$(dirname "$(readlink -f "$0")")/../tests/node
    if [ ! -d "$nodedir/node_modules/ioredis" ] && command -v npm >/dev/null 2>&1; then
        (cd "$nodedir" && npm ci --no-audit --no-fund >"$tmp/npm.log" 2>&1) || true
    fi
    r=1
    while [ $r -le "$mixed_rounds" ]; do
        echo "  mixed round $r/$mixed_rounds ..." >&2
        for m in mixed scripts gets; do
            for target in $(rotate "$r" direct sluice); do
                port=$rport; [ "$target" = direct ] || port=$sport
                echo "mx_$target $m 1 1 $(pipe_per_s "$port" "$tmp/pipe_$m.resp") $r" >>"$results"
            done
        done
        if [ -d "$nodedir/node_modules/ioredis" ]; then
            for target in $(rotate "$r" direct sluice); do
                port=$rport; [ "$target" = direct ] || port=$sport
                ms=$(cd "$nodedir" && node mixedbench.mjs "$port" 50 2>>"$tmp/node.log") || ms=0
                # batches/s, so that the ratio reads like the others
                echo "mx_$target ioredis 1 1 $(awk -v ms="$ms" 'BEGIN { printf "%.1f", (ms > 0 ? 1000 / ms : 0) }') $r" \
                    >>"$results"
            done
        fi
        r=$((r + 1))
    done
    echo
    echo "9. A client mixing scripts and plain commands (median of $mixed_rounds): redis-cli"
    echo "   --pipe of 10,000 commands, commands/s; ioredis, batches of 200 alternating"
    echo "   EVALSHA and GET, batches/s"
    printf '%-24s %11s %11s %8s\n' "" direct sluice ratio
    for m in mixed scripts gets ioredis; do
        case $m in
            mixed) label="pipe EVALSHA+GET" ;;
            scripts) label="pipe EVALSHA only" ;;
            gets) label="pipe GET only" ;;
            ioredis) label="ioredis 200 mixed" ;;
        esac
        printf '%-24s %11.0f %11.0f %8s\n' "$label" "$(median mx_direct $m 1 1)" \
            "$(median mx_sluice $m 1 1)" "$(median_ratio mx_sluice mx_direct $m 1 1)"
    done
    echo "   target: mixed rows >= 0.8 (before: about 0.2), the others as before"
fi

# Section 11: Sentinel mode vs a plain backend, the same Redis behind both.
if section 11 && [ "$sentinel_rounds" -gt 0 ]; then
    senport=$(free_port)
    printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor benchm 127.0.0.1 %s 1\n' \
        "$senport" "$tmp" "$rport" >"$tmp/sentinel.conf"
    redis-server "$tmp/sentinel.conf" --sentinel --logfile "$tmp/sentinel.log" &
    pids="$pids $!"
    wait_port "$senport"
    set -- $(start_sluice sen_plain); splain=$1; pplain=$2; pids="$pids $2"
    ssen=$(free_port)
    printf '[proxy]\nlisten = 127.0.0.1:%s\nsentinel = 127.0.0.1:%s\nsentinel_master = benchm\nlog_level = warning\n' \
        "$ssen" "$senport" >"$tmp/sen_sentinel.conf"
    "$sluice" -c "$tmp/sen_sentinel.conf" >"$tmp/sen_sentinel.log" 2>&1 &
    psen=$!
    pids="$pids $psen"
    wait_port "$splain"
    wait_port "$ssen"
    r=1
    while [ $r -le "$sentinel_rounds" ]; do
        echo "  sentinel round $r/$sentinel_rounds ..." >&2
        for t in get set; do
            for p in 1 16; do
                n=$(n_of $((p == 1 ? 100000 : 500000)))
                for target in $(rotate $(( r + p )) plain sentinel); do
                    if [ "$target" = plain ]; then port=$splain; pid=$pplain; else port=$ssen; pid=$psen; fi
                    bench_one "sen_$target" "$port" "$t" 50 "$p" "$n" "$r" "$pid"
                done
            done
        done
        r=$((r + 1))
    done
    echo
    echo "11. Sentinel at -c 50 (median of $sentinel_rounds): sluice with backend = the primary vs"
    echo "   sluice with sentinel = (the same primary, found through one Sentinel)"
    printf '%-4s %3s %11s %11s %8s %10s %10s %8s\n' cmd -P backend sentinel ratio \
        "ns/req" "ns/req" "cpu"
    for t in get set; do
        for p in 1 16; do
            printf '%-4s %3s %11.0f %11.0f %8s %10.0f %10.0f %8s\n' "$t" "$p" \
                "$(median sen_plain $t 50 $p)" "$(median sen_sentinel $t 50 $p)" \
                "$(median_ratio sen_sentinel sen_plain $t 50 $p)" \
                "$(median cpu_sen_plain $t 50 $p)" "$(median cpu_sen_sentinel $t 50 $p)" \
                "$(median_ratio cpu_sen_plain cpu_sen_sentinel $t 50 $p)"
        done
    done
    echo "   target: ratio >= 0.98 on every row (cpu: CPU backend / sentinel)"
fi

# Section 12: shared rules with leases vs no rule, a local rule, and the
# shared rule asking Redis per command (lease = off).
lease_one() {   # lease_one LABEL PORT PIPELINE N ROUND REDIS_PORT PID: rps, p50, calls/100, cpu
    redis-cli -p "$6" CONFIG RESETSTAT >/dev/null
    ns0=$(cpu_ns "$7")
    line=$(redis-benchmark -p "$2" -t get -c 50 -P "$3" -n "$4" -r 100000 --csv 2>/dev/null |
           awk -F'"' 'header { print $4, $10; exit } /^"test"/ { header = 1 }')
    calls=$(redis-cli -p "$6" INFO commandstats |
            awk -F'[:=,]' '/^cmdstat_evalsha:|^cmdstat_eval:/ { n += $3 } END { print n + 0 }')
    ns1=$(cpu_ns "$7")
    set -- "$1" "$2" "$3" "$4" "$5" "$6" "$7" ${line:-0 0}
    echo "$1 get 50 $3 $8 $5" >>"$results"
    echo "p50_$1 get 50 $3 $9 $5" >>"$results"
    echo "cpu_$1 get 50 $3 $(( (ns1 - ns0) / $4 )) $5" >>"$results"
    echo "calls_$1 get 50 $3 $(awk -v c="$calls" -v n="$4" 'BEGIN { printf "%.3f", 100 * c / n }') $5" \
        >>"$results"
}

if section 12 && [ "$lease_rounds" -gt 0 ]; then
    lport=$(free_port)
    redis-server --port "$lport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
        --logfile "$tmp/redis-lease.log" &
    pids="$pids $!"
    wait_port "$lport"
    roomy='commands = GET\nrate = 100000000/s\nburst = 100000000\nper = rule\n'
    printf "[limit roomy]\n$roomy" >"$tmp/lease_local.ini"
    printf "[limit roomy]\n${roomy}scope = shared\n" >"$tmp/lease_shared.ini"
    printf "[limit roomy]\n${roomy}scope = shared\nlease = off\n" >"$tmp/lease_off.ini"
    saved_rport=$rport; rport=$lport
    set -- $(start_sluice lease_none); sln=$1; pln=$2; pids="$pids $2"
    set -- $(start_sluice lease_local "$tmp/lease_local.ini"); sll=$1; pll=$2; pids="$pids $2"
    set -- $(start_sluice lease_shared "$tmp/lease_shared.ini"); sls=$1; pls=$2; pids="$pids $2"
    set -- $(start_sluice lease_off "$tmp/lease_off.ini"); slo=$1; plo=$2; pids="$pids $2"
    rport=$saved_rport
    for p in $sln $sll $sls $slo; do wait_port "$p"; done
    r=1
    while [ $r -le "$lease_rounds" ]; do
        echo "  lease round $r/$lease_rounds ..." >&2
        for p in 1 16; do
            n=$(n_of $((p == 1 ? 100000 : 500000)))
            for target in $(rotate $(( r + p )) none local shared off); do
                case $target in
                    none) port=$sln; pid=$pln ;; local) port=$sll; pid=$pll ;;
                    shared) port=$sls; pid=$pls ;;
                    off) port=$slo; pid=$plo; n=$(n_of $((p == 1 ? 50000 : 100000))) ;;
                esac
                lease_one "lease_$target" "$port" "$p" "$n" "$r" "$lport" "$pid"
                n=$(n_of $((p == 1 ? 100000 : 500000)))
            done
        done
        r=$((r + 1))
    done
    echo
    echo "12. Shared rules at -c 50, GET -r 100000 (median of $lease_rounds): a rule matching every"
    echo "   GET, never reached; shared = leases (the default), off = lease = off (before leases)"
    printf '%3s %10s %10s %10s %6s %10s %6s %7s\n' -P "no rule" local shared ratio off ratio calls
    for p in 1 16; do
        printf '%3s %10.0f %10.0f %10.0f %6s %10.0f %6s %7.2f\n' "$p" \
            "$(median lease_none get 50 $p)" "$(median lease_local get 50 $p)" \
            "$(median lease_shared get 50 $p)" "$(median_ratio lease_shared lease_none get 50 $p)" \
            "$(median lease_off get 50 $p)" "$(median_ratio lease_off lease_none get 50 $p)" \
            "$(median calls_lease_shared get 50 $p)"
    done
    printf '%3s %10s %10s %10s   (p50 latency, ms)\n' -P "no rule" local shared
    for p in 1 16; do
        printf '%3s %10s %10s %10s\n' "$p" "$(median p50_lease_none get 50 $p)" \
            "$(median p50_lease_local get 50 $p)" "$(median p50_lease_shared get 50 $p)"
    done
    printf '%3s %10s %10s %10s %6s %10s   (sluice CPU ns per GET)\n' -P "no rule" local shared \
        ratio off
    for p in 1 16; do
        printf '%3s %10.0f %10.0f %10.0f %6s %10.0f\n' "$p" "$(median cpu_lease_none get 50 $p)" \
            "$(median cpu_lease_local get 50 $p)" "$(median cpu_lease_shared get 50 $p)" \
            "$(median_ratio cpu_lease_none cpu_lease_shared get 50 $p)" \
            "$(median cpu_lease_off get 50 $p)"
    done
    echo "   ratio: shared (or off) / no rule (CPU: no rule / shared); calls: Redis script"
    echo "   calls per 100 GETs, shared. CPU per request is the figure a busy machine moves least."
    echo "   target: shared ratio >= 0.95 at -P 1 and 16, calls <= 1, p50 as no rule's within noise"
fi

if section 13; then
    echo
    BENCH_SCALE=$scale BENCH_KEYS=$keys "$(dirname "$0")/bench_cpu.sh" "$sluice" || true
fi

if section 14; then
    echo "14. Planned-switchover write pause and lost writes: $switchovers SENTINEL FAILOVERs, INCR"
    echo "   writers through two sluices (pause: a sluice's hold to release; Sentinel: its first"
    echo "   failover event to +switch-master, as sluice heard them)"
    so_out=$(cd "$(dirname "$0")/.." && SLUICE_BIN="$sluice" SWITCHOVER_FAILOVERS="$switchovers" \
        SWITCHOVER_REPORT=1 /usr/bin/python3 -m pytest -q -s -p no:cacheprovider \
        tests/integration/test_sentinel_switchover.py 2>&1) || echo "   the run FAILED:"
    echo "$so_out" | awk '
        /^failover [0-9]+:/ { n++; p[n] = $5; s[n] = $9; d = $5 - $9; if (d > dmax) dmax = d
                              if ($12 != "confirmed") unc++ }
        /^acknowledged INCRs:/ { acked = $3 + 0; lost = $5 + 0 }
        /AssertionError|Error:/ { print "   " $0 }
        function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
                                           if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                       return k ? a[int((k + 1) / 2)] : 0 }
        END { printf "   %-28s %8s %8s %8s %10s %10s %6s\n", "", "pause", "Sentinel",
                     "max over", "acked", "lost", "unconf"
              printf "   %-28s %8d %8d %8d %10s %10s %6d\n", "median ms (" n " pauses)", med(p, n),
                     med(s, n), dmax, acked, lost, unc
              print "   target: lost 0; pause no longer than Sentinel'"'"'s switch + 200 ms (max over)" }'
fi

for f in sluice rules0 rules100 rules1 users metrics_off metrics_on sluice-tls resp3 sluice-cluster sen_plain sen_sentinel lease_none lease_local lease_shared lease_off; do
    if [ -s "$tmp/$f.log" ]; then
        echo "--- $f log:"; cat "$tmp/$f.log"
    fi
done
