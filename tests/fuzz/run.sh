#!/bin/sh
# Run libFuzzer targets one after another for a bounded time each.
#   tests/fuzz/run.sh BUILD SECONDS TARGET...
# Each target BUILD/TARGET starts from a copy of its seed corpus
# (tests/fuzz/corpus/NAME, NAME = TARGET without "fuzz_") in
# BUILD/corpus/NAME, which keeps what it finds between local runs; the
# repository's seeds are never written. Crashes go to BUILD/artifacts/NAME.
# Prints executions and the result per target; exits 1 if any failed.
set -u
build=$1 seconds=$2
shift 2
seeds=$(dirname "$0")/corpus
# A smaller quarantine and no malloc fill: fewer fresh pages per input,
# about 1.5x the executions, still catching use after free.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=16:max_malloc_fill_size=0}"
passed=0 failed=0
for target in "$@"; do
    name=${target#fuzz_}
    corpus=$build/corpus/$name artifacts=$build/artifacts/$name/ log=$build/logs/$target.log
    mkdir -p "$corpus" "$artifacts" "$build/logs"
    [ -d "$seeds/$name" ] && cp -n "$seeds/$name"/* "$corpus"/ 2>/dev/null
    dict=""
    [ -f "$(dirname "$0")/dict/$name.dict" ] && dict="-dict=$(dirname "$0")/dict/$name.dict"
    echo "fuzz: $target for ${seconds}s (log $log)"
    stamp=$build/logs/$target.started   # what this run wrote is newer
    touch "$stamp"
    # shellcheck disable=SC2086
    "$build/$target" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$artifacts" $dict "$corpus" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        echo "fuzz: $target: ${execs:-?} executions (${rate:-?}/s), corpus $(ls "$corpus" | wc -l) inputs: ok"
    else
        failed=$((failed + 1))
        echo "fuzz: $target: FAILED (exit $rc) after ${execs:-?} executions; input in $artifacts"
        grep -v '^    #' "$log" | tail -n 25
        # The input itself, so a failure on a machine whose build directory
        # is gone (CI) can still be replayed: base64 -d it into a file and
        # run BUILD/TARGET FILE.
        find "$artifacts" -type f -newer "$stamp" | while read -r input; do
            echo "fuzz: $input ($(wc -c <"$input") bytes), base64:"
            head -c 8192 "$input" | base64
        done
    fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
