#!/bin/sh
# test.sh BUILD_DIR - check the layers of calls, run every unit test binary in
# BUILD_DIR/unit, then the
# integration suite against BUILD_DIR/sluice with Debian's python3.
# Exits non-zero when anything failed.
set -u
build=$1
status=0
# The layers (proxy/layers.txt): no circle of calls between files, no call
# up a layer, read from the object files the tests run.
/usr/bin/python3 tools/callgraph.py "$build/obj" --layers proxy/layers.txt || status=1
# The docs say what the code does (every key, metric, command, error text;
# links; shell blocks run or marked): first, as it takes a second.
# tests/integration/test_docs.py runs it again with the tour.
/usr/bin/python3 tools/check_docs.py || status=1
for t in "$build"/unit/test_*; do
    [ -x "$t" ] || continue
    "$t" || status=1
done
SLUICE_BIN="$(cd "$build" && pwd)/sluice" /usr/bin/python3 -m pytest -q tests/integration \
    -p no:cacheprovider || status=1
exit $status
