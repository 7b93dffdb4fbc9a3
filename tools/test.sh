#!/bin/sh
# test.sh BUILD_DIR - run every unit test binary in BUILD_DIR/unit, then the
# integration suite against BUILD_DIR/sluice with Debian's python3.
# Exits non-zero when anything failed.
set -u
build=$1
status=0
for t in "$build"/unit/test_*; do
    [ -x "$t" ] || continue
    "$t" || status=1
done
SLUICE_BIN="$(cd "$build" && pwd)/sluice" /usr/bin/python3 -m pytest -q tests/integration \
    -p no:cacheprovider || status=1
exit $status
