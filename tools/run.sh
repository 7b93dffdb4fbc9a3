#!/bin/sh
# run.sh BIN CONFIG - start sluice in the foreground with CONFIG. When the
# configured backend does not answer, start a local redis-server for it
# first; Ctrl-C stops both.
set -u
bin=$1; conf=$2
backend=$(sed -n 's/^[[:space:]]*backend[[:space:]]*=[[:space:]]*\([^;[:space:]]*\).*/\1/p' "$conf" | head -n1)
host=${backend%:*}; port=${backend##*:}
redis_pid=""
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    [ -n "${datadir:-}" ] && rm -rf "$datadir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; then
    datadir=$(mktemp -d)
    echo "run: no Redis at $backend; starting redis-server there (data in $datadir)" >&2
    redis-server --bind "$host" --port "$port" --save '' --appendonly no --dir "$datadir" \
        --daemonize no --loglevel warning &
    redis_pid=$!
    i=0
    until redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -gt 50 ] && { echo "run: redis-server did not start" >&2; exit 1; }
        sleep 0.1
    done
fi
echo "run: sluice on $(sed -n 's/^[[:space:]]*listen[[:space:]]*=[[:space:]]*\([^;[:space:]]*\).*/\1/p' "$conf" | tr '\n' ' ')-> $backend (Ctrl-C stops)" >&2
listen=$(sed -n 's/^[[:space:]]*listen[[:space:]]*=[[:space:]]*\([^;[:space:]]*\).*/\1/p' "$conf" | head -n1)
echo "run: restart or upgrade without losing a request: \`kill -USR2 <pid>\`, or run \`$bin -c $conf\` again (it takes over)" >&2
"$bin" -c "$conf"
# Handed over to a new sluice: keep the redis-server started here while
# a sluice still answers on the listen address.
if [ -n "$redis_pid" ]; then
    while redis-cli -h "${listen%:*}" -p "${listen##*:}" PROXY PING >/dev/null 2>&1; do
        sleep 1
    done
fi
