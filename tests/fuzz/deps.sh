#!/bin/sh
# Install what `make fuzz` needs on top of tools/deps.sh: clang and its
# runtime (libFuzzer, ASan, UBSan), when missing. `make test` never needs these.
exec "$(dirname "$0")/../../tools/deps.sh" clang libclang-rt-14-dev
