#!/usr/bin/env bash
# Latency of a local pair: `pingpong -p shm` against `pingpong -p hybrid` (the composed
# provider, whose peers on this node go through its shm half), alternating rounds,
# then the median of each.
#
#   hybrid_latency.sh [rounds] [size] [iterations]     (default 5 64 10000)
#
# PRIO=rt runs both processes under `chrt -f 1` (root), so other load on the machine
# does not preempt them.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --example pingpong
# Where cargo put it: a CARGO_TARGET_DIR of its own (as parallel builders use) or ./target.
bin=${CARGO_TARGET_DIR:-target}/release/examples/pingpong
rounds=${1:-5}
size=${2:-64}
iters=${3:-10000}
prio=()
[[ ${PRIO:-} == rt ]] && prio=(chrt -f 1)
declare -A all
for i in $(seq 1 "$rounds"); do
    for p in shm hybrid; do
        v=$("${prio[@]}" "$bin" -p "$p" -e rdm -S "$size" -I "$iters" --json |
            sed -n 's/.*"usec_per_xfer":\([0-9.]*\).*/\1/p' | tail -1)
        all[$p]+="$v "
        echo "round $i: $p $size bytes: $v us/xfer (load $(cut -d' ' -f1 /proc/loadavg))"
    done
done
for p in shm hybrid; do
    echo -n "median $p $size bytes: "
    tr ' ' '\n' <<<"${all[$p]}" | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
done
