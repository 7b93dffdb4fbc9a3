#!/bin/sh
# cgreq.sh SLUICE RESPBENCH [CONFIG_LINE...] - instructions sluice runs per
# request (callgrind), for one workload: repeatable to a fraction of a
# percent however busy the machine is, unlike CPU time. Starts a
# redis-server and SLUICE (under valgrind --tool=callgrind, with the
# [proxy] CONFIG_LINEs given, e.g. "top_keys_capacity = 0"), warms up,
# zeroes the counters, runs the workload, dumps and prints
#
#   <instructions per request> <callgrind dump file>
#
# The dump stays in CGREQ_OUT (default /tmp) for callgrind_annotate.
# Workload from the environment: T=get|set, P (pipeline, 16), C (clients,
# 50), N (requests measured, 20000), R (distinct keys, 100000), Z=1 for a
# Zipf-like mix over R keys (respbench -z; else redis-benchmark -r R);
# CGREQ_NO_SLOWLOG=1 for a build without a slow log (39bb195 and older).
# Under valgrind every request takes longer than the slow log's default
# 10 ms, so each would be logged (a cost sluice does not have at native
# speed): slowlog_log_slower_than is 10 s here unless a CONFIG_LINE sets it
# (the capture of each request's arguments, the cost that stays, is
# counted either way).
set -eu

sluice=$(readlink -f "$1")
respbench=$(readlink -f "$2")
shift 2
t=${T:-get}; p=${P:-16}; c=${C:-50}; n=${N:-20000}; r=${R:-100000}; z=${Z:-0}
out=${CGREQ_OUT:-/tmp}

tmp=$(mktemp -d /tmp/sluice-cgreq.XXXXXX)
pids=""
cleanup() {
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    for pid in $pids; do wait "$pid" 2>/dev/null || true; done
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
        [ $i -lt 600 ] || { echo "cgreq: nothing answers on port $1" >&2; exit 1; }
        sleep 0.1
    done
}
load() {        # load REQUESTS: the workload against sluice
    if [ "$z" = 1 ]; then
        "$respbench" -p "$sport" -c "$c" -P "$p" -n "$1" -t "$t" -r "$r" -z >/dev/null
    else
        redis-benchmark -p "$sport" -c "$c" -P "$p" -n "$1" -t "$t" -r "$r" -q >/dev/null
    fi
}

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" &
pids="$pids $!"
wait_port "$rport"
sport=$(free_port)
{
    echo "[proxy]"
    echo "listen = 127.0.0.1:$sport"
    echo "backend = 127.0.0.1:$rport"
    echo "log_level = warning"
    if [ "${CGREQ_NO_SLOWLOG:-0}" != 1 ]; then
        case "$*" in *slowlog_log_slower_than*) ;; *) echo "slowlog_log_slower_than = 10000000" ;; esac
    fi
    for line in "$@"; do echo "$line"; done
} >"$tmp/sluice.conf"
valgrind --tool=callgrind --callgrind-out-file="$out/cgreq.%p" \
    "$sluice" -c "$tmp/sluice.conf" >"$tmp/sluice.log" 2>&1 &
spid=$!
pids="$pids $spid"
wait_port "$sport"
load $((n / 4 + 1000))   # warm: connections, buffers, a full TOP table
callgrind_control -z "$spid" >/dev/null 2>&1
load "$n"
callgrind_control -d "$spid" >/dev/null 2>&1
dump=$(ls -t "$out"/cgreq."$spid".* | head -1)
ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
awk -v ir="$ir" -v n="$n" -v d="$dump" 'BEGIN { printf "%.0f %s\n", ir / n, d }'
