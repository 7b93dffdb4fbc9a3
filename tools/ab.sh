#!/bin/sh
# ab.sh OLD_SLUICE NEW_SLUICE [ROUNDS] - two builds of sluice side by side
# in front of one redis-server: redis-benchmark GET/SET at -c 1/50 and
# -P 1/16 against each, alternating within every round, and per row the
# median of the per-round ratios new/old. For checking that a change costs
# no throughput (e.g. "no row drops by more than 3%"); prints, asserts
# nothing. Everything on free loopback ports, cleaned up on exit.
# AB_PIN=1 places the processes as make bench's rules section does: Redis
# on core 0, both sluices and redis-benchmark on core 1 (three busy
# processes left to the scheduler move -P 16 rows by 10-30%).
# AB_ROWS="get:50:16 set:50:16" picks rows (default: all eight).
set -eu
old=$(readlink -f "$1")
new=$(readlink -f "$2")
rounds=${3:-5}
tmp=$(mktemp -d /tmp/sluice-ab.XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
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
        i=$((i + 1)); [ $i -lt 100 ] || { echo "ab: nothing on port $1" >&2; exit 1; }
        sleep 0.05
    done
}
rport=$(free_port)
pin0=""
pin1=""
if [ "${AB_PIN:-0}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
    pin0="taskset -c 0"
    pin1="taskset -c 1"
fi
$pin0 redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no >"$tmp/redis.log" 2>&1 &
pids="$pids $!"
wait_port "$rport"
start() {   # start NAME BINARY: prints its port
    port=$(free_port)
    printf '[proxy]\nlisten = 127.0.0.1:%s\nbackend = 127.0.0.1:%s\nlog_level = warning\n' \
        "$port" "$rport" >"$tmp/$1.conf"
    $pin1 "$2" -c "$tmp/$1.conf" >"$tmp/$1.log" 2>&1 &
    echo "$port $!"
}
set -- $(start old "$old"); oport=$1; pids="$pids $2"
set -- $(start new "$new"); nport=$1; pids="$pids $2"
wait_port "$oport"
wait_port "$nport"

rps() {     # rps PORT TEST CLIENTS PIPELINE: requests per second
    n=$(( $3 * $4 * 2000 )); [ $n -ge 100000 ] || n=100000; [ $n -le 1000000 ] || n=1000000
    $pin1 redis-benchmark -p "$1" -t "$2" -c "$3" -P "$4" -n "$n" -q 2>/dev/null |
        awk -F'[: ]+' '/requests per second/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }'
}
printf 'sluice A/B, %s rounds: old %s, new %s\n' "$rounds" "$old" "$new"
printf '%-4s %3s %3s %12s %12s %8s\n' cmd -c -P old new new/old
rows=${AB_ROWS:-get:1:1 get:1:16 get:50:1 get:50:16 set:1:1 set:1:16 set:50:1 set:50:16}
for row in $rows; do
    t=${row%%:*}; rest=${row#*:}; c=${rest%%:*}; p=${rest#*:}
    {
            : >"$tmp/ratios"
            : >"$tmp/olds"
            : >"$tmp/news"
            r=0
            while [ $r -lt "$rounds" ]; do
                if [ $((r % 2)) = 0 ]; then
                    a=$(rps "$oport" $t $c $p); b=$(rps "$nport" $t $c $p)
                else
                    b=$(rps "$nport" $t $c $p); a=$(rps "$oport" $t $c $p)
                fi
                echo "$a" >>"$tmp/olds"; echo "$b" >>"$tmp/news"
                awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.4f\n", b / a }' >>"$tmp/ratios"
                r=$((r + 1))
            done
            med() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : 0) }'; }
            printf '%-4s %3s %3s %12.0f %12.0f %8.3f\n' $t $c $p "$(med "$tmp/olds")" \
                "$(med "$tmp/news")" "$(med "$tmp/ratios")"
    }
done
