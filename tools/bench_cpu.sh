#!/bin/sh
# bench_cpu.sh SLUICE - make bench section 13: sluice's CPU time per request
# against a pinned previous release built from git in this run, and what
# each observability feature costs, side by side, rounds interleaved with
# the order rotated. Numbers printed, never asserted. CPU per request is
# the sluice process's time on a CPU over the run (user + system: what
# /proc/PID/stat gives as utime + stime, read from /proc/PID/schedstat in
# nanoseconds rather than 10 ms ticks), divided by the requests; medians
# of the rounds, ratios medians of each round's ratio.
#
#   previous: BENCH_PREV (default 39bb195, the build before the
#             observability issues) checked out with `git worktree add`
#             into a temporary folder, built with `make all`, removed after.
#   rows:     GET/SET, -c 50, -P 1/16, keys uniform over BENCH_KEYS
#             (default 100000; redis-benchmark -r).
#   features: this build with defaults vs the same with one thing changed:
#             top_keys_capacity = 0 (PROXY TOP off), slowlog_log_slower_than
#             = -1 (slow log off), metrics_listen with /metrics read every
#             second, one rule that matches every request, a users file
#             (the client logged in as a user whose requests are checked).
#   TOP over other keys: TOP on/off for GET/SET -P 16 with keys over 1,000
#             and 10,000,000 (the sketch's best and worst case).
#
# Knobs: BENCH_CPU_ROUNDS (3), BENCH_SCALE (multiplies request counts),
# BENCH_PREV (a git revision), BENCH_KEYS.
set -eu

sluice=$(readlink -f "$1")
rounds=${BENCH_CPU_ROUNDS:-3}
scale=${BENCH_SCALE:-1}
prev=${BENCH_PREV:-39bb195}
keys=${BENCH_KEYS:-100000}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)

tmp=$(mktemp -d /tmp/sluice-benchcpu.XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    git -C "$repo" worktree remove --force "$tmp/prev" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap "exit 1" INT TERM HUP PIPE

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {
    i=0
    until redis-cli -p "$1" PING >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 600 ] || { echo "bench_cpu: nothing answers on port $1" >&2; cat "$tmp"/*.log >&2; exit 1; }
        sleep 0.05
    done
}
n_of() { awk -v b="$1" -v s="$scale" 'BEGIN { printf "%d", b * s }'; }
cpu_ns() {      # nanoseconds PID has run on a CPU, user and system
    awk '{ print $1 }' "/proc/$1/schedstat"
}

echo "section 13: CPU per request, this build vs $prev (built from git here), and per feature"
git -C "$repo" worktree add --detach "$tmp/prev" "$prev" >/dev/null 2>&1 ||
    { echo "bench_cpu: cannot check out $prev" >&2; exit 1; }
make -C "$tmp/prev" -j2 all >"$tmp/prev-build.log" 2>&1 ||
    { echo "bench_cpu: $prev does not build (see $tmp/prev-build.log)" >&2; exit 1; }
prev_bin=$tmp/prev/build/sluice

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" &
pids="$pids $!"
wait_port "$rport"

printf '[limit all]\ncommands = GET SET\nrate = 100000000/s\nburst = 100000000\n' >"$tmp/rule.ini"
printf '[user bench]\npassword = bench-pw\ncommands = +@all -@dangerous\nkeys = key:*\n' >"$tmp/users.ini"
mport=$(free_port)

# start NAME BINARY [CONFIG_LINE...]: a sluice with only listen, backend and
# log_level set besides the lines given; sets $port_NAME and $pid_NAME.
start() {
    name=$1 bin=$2
    shift 2
    port=$(free_port)
    {
        echo "[proxy]"
        echo "listen = 127.0.0.1:$port"
        echo "backend = 127.0.0.1:$rport"
        echo "log_level = warning"
        for line in "$@"; do echo "$line"; done
    } >"$tmp/$name.conf"
    "$bin" -c "$tmp/$name.conf" >"$tmp/$name.log" 2>&1 &
    pids="$pids $!"
    eval "port_$name=$port pid_$name=$!"
    wait_port "$port"
}
# No lock hand-over grace at start (as bench.sh), where the build knows it.
grace="lock_failover_grace_ms = 0"
printf '[proxy]\nlisten = 127.0.0.1:1\nbackend = 127.0.0.1:1\n%s\n' "$grace" >"$tmp/probe.conf"
if "$prev_bin" -t -c "$tmp/probe.conf" >/dev/null 2>&1; then
    start prev "$prev_bin" "$grace"
else
    start prev "$prev_bin"
fi
start this "$sluice" "$grace"
start top_off "$sluice" "$grace" "top_keys_capacity = 0"
start slowlog_off "$sluice" "$grace" "slowlog_log_slower_than = -1"
start metrics "$sluice" "$grace" "metrics_listen = 127.0.0.1:$mport"
start rule "$sluice" "$grace" "rules = $tmp/rule.ini"
start users "$sluice" "$grace" "users = $tmp/users.ini"
/usr/bin/python3 -c '
import sys, time, urllib.request
while True:
    try:
        urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read()
    except OSError:
        pass
    time.sleep(1)
' "$mport" >/dev/null 2>&1 &
pids="$pids $!"

rotate() {
    k=$1; shift
    k=$((k % $#)); i=0; head=""; tail=""
    for w in "$@"; do
        if [ $i -lt $k ]; then tail="$tail $w"; else head="$head $w"; fi
        i=$((i + 1))
    done
    echo $head $tail
}
results=$tmp/results
: >"$results"
targets="prev this top_off slowlog_off metrics rule users"
r=1
while [ "$r" -le "$rounds" ]; do
    echo "  round $r/$rounds ..." >&2
    for t in get set; do
        for p in 1 16; do
            n=$(n_of $((p == 1 ? 100000 : 500000)))
            for target in $(rotate $((r + p)) $targets); do
                eval "port=\$port_$target pid=\$pid_$target"
                login=""
                [ "$target" != users ] || login="--user bench -a bench-pw"
                c0=$(cpu_ns "$pid")
                # shellcheck disable=SC2086
                redis-benchmark -p "$port" $login -t "$t" -c 50 -P "$p" -n "$n" -r "$keys" -q \
                    >/dev/null 2>&1
                c1=$(cpu_ns "$pid")
                echo "$target $t $p $(awk -v d="$((c1 - c0))" -v n="$n" \
                    'BEGIN { printf "%.4f", d / 1e3 / n }') $r" >>"$results"
            done
        done
        n=$(n_of 500000)
        for k in 1000 10000000; do
            for target in $(rotate "$r" this top_off); do
                eval "port=\$port_$target pid=\$pid_$target"
                c0=$(cpu_ns "$pid")
                redis-benchmark -p "$port" -t "$t" -c 50 -P 16 -n "$n" -r "$k" -q >/dev/null 2>&1
                c1=$(cpu_ns "$pid")
                echo "$target.$k $t 16 $(awk -v d="$((c1 - c0))" -v n="$n" \
                    'BEGIN { printf "%.4f", d / 1e3 / n }') $r" >>"$results"
            done
        done
    done
    r=$((r + 1))
done

median_of() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else print v[int((NR + 1) / 2)] }'; }
median() { awk -v l="$1" -v t="$2" -v p="$3" '$1 == l && $2 == t && $3 == p { print $4 }' "$results" | median_of; }
median_ratio() {   # A B TEST PIPELINE: median over rounds of A/B
    awk -v a="$1" -v b="$2" -v t="$3" -v p="$4" '
        $2 == t && $3 == p && $1 == a { va[$5] = $4 }
        $2 == t && $3 == p && $1 == b { vb[$5] = $4 }
        END { for (r in va) if ((r in vb) && vb[r] > 0) print va[r] / vb[r] }' "$results" |
        median_of | awk '{ if ($1 > 0) printf "%.2f", $1; else print "-" }'
}

echo
echo "   CPU us per request of the sluice process, -c 50, keys uniform over $keys (median of $rounds)"
printf '   %-10s %10s %10s %8s\n' row "$prev" this "ratio"
for t in get set; do
    for p in 1 16; do
        printf '   %-10s %10.2f %10.2f %8s\n' "$t -P $p" "$(median prev $t $p)" "$(median this $t $p)" \
            "$(median_ratio this prev $t $p)"
    done
done
echo "   target: ratio <= 1.02 on every row"
echo
echo "   Per feature: this build with defaults / the same with one thing changed (CPU per request)"
printf '   %-10s %12s %12s %12s %12s %12s\n' row "TOP on/off" "slowlog on/off" "metrics scraped" "1 rule" "users"
for t in get set; do
    for p in 1 16; do
        printf '   %-10s %12s %12s %12s %12s %12s\n' "$t -P $p" \
            "$(median_ratio this top_off $t $p)" "$(median_ratio this slowlog_off $t $p)" \
            "$(median_ratio metrics this $t $p)" "$(median_ratio rule this $t $p)" \
            "$(median_ratio users this $t $p)"
    done
done
echo "   target: TOP on/off and slow log on/off <= 1.02"
echo
echo "   TOP on/off with keys over 1,000 / $keys / 10,000,000 (-P 16)"
for t in get set; do
    printf '   %-10s %12s %12s %12s\n' "$t -P 16" "$(median_ratio this.1000 top_off.1000 $t 16)" \
        "$(median_ratio this top_off $t 16)" "$(median_ratio this.10000000 top_off.10000000 $t 16)"
done
