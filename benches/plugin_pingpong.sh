#!/usr/bin/env bash
# fi_pingpong (libfabric-bin, unmodified) through our plugin (fab_shm, the release
# build of plugin/) against libfabric's own shm provider, RDM endpoints, two processes.
# Sizes and rounds alternate (ours, then libfabric's, per round); prints every round's
# client-side usec/xfer and the medians.
#
#   ROUNDS=5 ITERS=100000 SIZES="8 64" benches/plugin_pingpong.sh
#
# PRIO=rt runs both processes under `chrt -f 1` (root), so other load on the machine
# does not decide the figures.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-100000}
SIZES=${SIZES:-"8 64"}
TARGET=${CARGO_TARGET_DIR:-target}

[[ ${SKIP_BUILD:-0} == 1 ]] || cargo build --release -p fabric-ofi >&2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$TARGET/release/libfabric_ofi.so" "$dir/libfab_shm-fi.so"
export FI_PROVIDER_PATH=$dir

prio=()
[[ ${PRIO:-} == rt ]] && prio=(chrt -f 1)
port=47600
# One fi_pingpong run of provider $1 at size $2: prints the client's usec/xfer.
run() {
    port=$((port + 1))
    "${prio[@]}" fi_pingpong -p "$1" -e rdm -I "$ITERS" -S "$2" -B "$port" >/dev/null 2>&1 &
    local srv=$!
    local out
    for _ in $(seq 100); do
        out=$("${prio[@]}" fi_pingpong -p "$1" -e rdm -I "$ITERS" -S "$2" -P "$port" 127.0.0.1 2>/dev/null) && break
        sleep 0.05
    done
    wait "$srv"
    awk -v s="$2" '$1 == s { print $7 }' <<<"$out"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A res
for r in $(seq "$ROUNDS"); do
    for s in $SIZES; do
        for p in fab_shm shm; do
            v=$(run "$p" "$s")
            echo "round $r size $s $p usec/xfer $v"
            res[$p.$s]+="$v "
        done
    done
done
echo
printf '%-6s %-14s %-14s %s\n' bytes "fab_shm (us)" "shm (us)" "fab_shm/shm"
for s in $SIZES; do
    a=$(tr ' ' '\n' <<<"${res[fab_shm.$s]}" | grep . | median)
    b=$(tr ' ' '\n' <<<"${res[shm.$s]}" | grep . | median)
    printf '%-6s %-14s %-14s %.2f\n' "$s" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')"
done
