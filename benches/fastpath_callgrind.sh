#!/usr/bin/env bash
# Instructions per message of the static fast path (tinject + trecv + CQ read on the
# default loopback stack), counted by callgrind: deterministic, unlike timings.
# It runs the example with two message counts and divides the difference, so set-up
# cost cancels out. `fastpath_callgrind.sh array` measures `tinject_array` instead of
# `tinject` (the compile-time-proven length skips the run-time inject-size test).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --example fastpath >/dev/null
bin=target/release/examples/fastpath
mode=${1:-slice}
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$mode" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
lo=10000; hi=110000
a=$(count $lo); b=$(count $hi)
echo "$mode: instructions: $lo msgs = $a, $hi msgs = $b"
echo "instructions per message: $(( (b - a) / (hi - lo) ))"
