#!/usr/bin/env bash
# Instructions per message of the fast path (tinject + trecv + CQ read on the loopback
# provider), counted by callgrind: deterministic, unlike timings.
# It runs examples/fastpath.rs with two message counts and divides the difference, so
# set-up cost cancels out.
#
#   fastpath_callgrind.sh [slice|array|dynamic|shm|fadd|add|cswap|idle|hybrid|hybrid_idle|compare|hybrid_vs_shm] [domain|safe]
#
#   slice    the static default stack (Stack<Loopback>), tinject of a slice (default)
#   array    tinject_array (the compile-time-proven length skips the run-time
#            inject-size test)
#   dynamic  the same loop through fabric::dynamic (Registry<(Loopback,)> + Dyn*
#            objects, same threading / manual progress / tagged CQ / Table AV)
#   shm      slice on the shm provider (Stack<Shm>), the endpoint sending to itself
#            through its own shared-memory FIFO (transport included)
#   fadd     fetch_atomic (FI_SUM, u64) into the endpoint's own registered word on
#            shm, polled to completion: initiator, target and response
#   add      atomic (FI_SUM of 1, u64, no fetch) into the same word on shm, polled to
#            its completion (the target's acknowledgement)
#   cswap    compare_atomic (FI_CSWAP, u64: the word from i to i + 1, old value
#            checked) on shm, polled to completion
#   idle     on shm, one empty CQ read (progress finds nothing): per read, not per message
#   hybrid   shm's loop on the composed provider (Stack<fabric_hybrid::ShmTcp>): the
#            endpoint is on this node, so its own shm half carries it
#   hybrid_idle  idle on the composed provider (the tcp half looked at while due)
#   compare  slice and dynamic, then dynamic / static
#   hybrid_vs_shm  shm and hybrid, idle and hybrid_idle, then hybrid / shm
#   domain|safe  FI_THREAD_DOMAIN (default) or FI_THREAD_SAFE
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --example fastpath >/dev/null
# Where cargo put it: a CARGO_TARGET_DIR of its own (as parallel builders use) or ./target.
bin=${CARGO_TARGET_DIR:-target}/release/examples/fastpath
mode=${1:-slice}
threading=${2:-domain}
lo=10000; hi=110000
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$threading" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
# Prints "<mode>/<threading>: ..." and sets $per to the instructions per message.
measure() {
    local a b
    a=$(count $lo "$1"); b=$(count $hi "$1")
    per=$(( (b - a) / (hi - lo) ))
    echo "$1/$threading: instructions: $lo msgs = $a, $hi msgs = $b"
    echo "$1/$threading: instructions per message: $per"
}
case $mode in
slice | array | dynamic | shm | fadd | add | cswap | idle | hybrid | hybrid_idle) measure "$mode" ;;
compare)
    measure slice; s=$per
    measure dynamic; d=$per
    awk -v s="$s" -v d="$d" -v t="$threading" \
        'BEGIN { printf "%s: static %d, dynamic %d instructions/message; dynamic/static = %.2f\n", t, s, d, d / s }'
    ;;
hybrid_vs_shm)
    measure shm; s=$per
    measure hybrid; h=$per
    measure idle; si=$per
    measure hybrid_idle; hi_=$per
    awk -v s="$s" -v h="$h" -v si="$si" -v hi="$hi_" -v t="$threading" \
        'BEGIN { printf "%s: message shm %d, hybrid %d (%.3f); empty read shm %d, hybrid %d (%.3f)\n", t, s, h, h / s, si, hi, hi / si }'
    ;;
*) echo "usage: $0 [slice|array|dynamic|shm|fadd|add|cswap|idle|hybrid|hybrid_idle|compare|hybrid_vs_shm] [domain|safe]" >&2; exit 2 ;;
esac
