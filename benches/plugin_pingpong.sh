#!/usr/bin/env bash
# fi_pingpong (libfabric-bin, unmodified) through our plugin (the release build of
# plugin/) against one of libfabric's own providers, two processes: by default fab_shm
# against shm on RDM endpoints; OURS=fab_tcp THEIRS=tcp compares the tcp providers
# (libfabric's RDM over tcp is tcp;ofi_rxm), EP=msg their MSG endpoints. Sizes and
# rounds alternate (ours, then libfabric's, per round); prints every round's
# client-side usec/xfer, the medians, and the median of the rounds' own ratios.
#
#   ROUNDS=5 ITERS=100000 SIZES="8 64" benches/plugin_pingpong.sh
#   OURS=fab_tcp THEIRS=tcp SIZES="8 64 1024 65536 1048576" benches/plugin_pingpong.sh
#
# PRIO=rt runs both processes under `chrt -f 1` (root), so other load on the machine
# does not decide the figures.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-100000}
SIZES=${SIZES:-"8 64"}
OURS=${OURS:-fab_shm}
THEIRS=${THEIRS:-shm}
EP=${EP:-rdm}
TARGET=${CARGO_TARGET_DIR:-target}

[[ ${SKIP_BUILD:-0} == 1 ]] || cargo build --release -p fabric-ofi >&2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# One library, installed under the name of the provider it serves.
cp "$TARGET/release/libfabric_ofi.so" "$dir/lib$OURS-fi.so"
export FI_PROVIDER_PATH=$dir

prio=()
[[ ${PRIO:-} == rt ]] && prio=(chrt -f 1)
port=47600
# One fi_pingpong run of provider $1 at size $2: prints the client's usec/xfer.
run() {
    port=$((port + 1))
    "${prio[@]}" fi_pingpong -p "$1" -e "$EP" -I "$ITERS" -S "$2" -B "$port" >/dev/null 2>&1 &
    local srv=$!
    local out
    for _ in $(seq 100); do
        out=$("${prio[@]}" fi_pingpong -p "$1" -e "$EP" -I "$ITERS" -S "$2" -P "$port" 127.0.0.1 2>/dev/null) && break
        sleep 0.05
    done
    wait "$srv"
    # fi_pingpong prints sizes as 8, 1k, 1m: match the row by its position instead.
    # Its usec/xfer has two decimals, a tenth of a fast transfer: below 1 us take the
    # inverse of Mxfers/sec, which keeps three significant digits there.
    awk '$2 ~ /^[0-9]/ && $3 ~ /^=/ { if ($8 >= 1) printf "%.4f\n", 1 / $8; else print $7 }' <<<"$out" | tail -1
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A res
for r in $(seq "$ROUNDS"); do
    for s in $SIZES; do
        declare -A v
        for p in "$OURS" "$THEIRS"; do
            v[$p]=$(run "$p" "$s")
            echo "round $r size $s $p usec/xfer ${v[$p]}"
            res[$p.$s]+="${v[$p]} "
        done
        # The round's own ratio: both runs sat in the same placement of the vCPUs.
        res[ratio.$s]+="$(awk -v a="${v[$OURS]}" -v b="${v[$THEIRS]}" 'BEGIN { print a / b }') "
    done
done
echo
printf '%-8s %-14s %-14s %-14s %s\n' bytes "$OURS (us)" "$THEIRS (us)" "$OURS/$THEIRS" "median of round ratios"
for s in $SIZES; do
    a=$(tr ' ' '\n' <<<"${res[$OURS.$s]}" | grep . | median)
    b=$(tr ' ' '\n' <<<"${res[$THEIRS.$s]}" | grep . | median)
    q=$(tr ' ' '\n' <<<"${res[ratio.$s]}" | grep . | median)
    printf '%-8s %-14s %-14s %-14.2f %.2f\n' "$s" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')" "$q"
done
