#!/usr/bin/env bash
# MPI ping-pong (benches/mpi_pingpong.c, two ranks on this host) over three transports
# of Open MPI 4.1, in alternating rounds: `--mca pml cm --mca mtl ofi` on our
# fab_hybrid (shared memory between the two ranks) and fab_tcp (the release build of
# plugin/), `--mca pml ob1 --mca btl self,vader` (Open MPI's shared memory) and
# `--mca pml ob1 --mca btl self,tcp`. Prints every round and the
# medians of half the round-trip time.
#
#   ROUNDS=5 ITERS=10000 SIZES="8 64 1048576" benches/mpi_pingpong.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
SIZES=${SIZES:-"8 64 1048576"}
export ITERS=${ITERS:-10000}
TARGET=${CARGO_TARGET_DIR:-target}

[[ ${SKIP_BUILD:-0} == 1 ]] || cargo build --release -p fabric-ofi >&2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$TARGET/release/libfabric_ofi.so" "$dir/libfab_tcp-fi.so"
cp "$TARGET/release/libfabric_ofi.so" "$dir/libfab_hybrid-fi.so"
mpicc -O2 -o "$dir/mpi_pingpong" benches/mpi_pingpong.c

mpi=(mpirun --allow-run-as-root --oversubscribe -n 2 -x ITERS)
declare -A how=(
    [fab_hybrid]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include fab_hybrid -x FI_PROVIDER_PATH=$dir"
    [fab_tcp]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include fab_tcp -x FI_PROVIDER_PATH=$dir"
    [vader]="--mca pml ob1 --mca btl self,vader"
    [tcp]="--mca pml ob1 --mca btl self,tcp"
)
order=(${ORDER:-fab_hybrid fab_tcp vader tcp})

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A res
for r in $(seq "$ROUNDS"); do
    for t in "${order[@]}"; do
        # shellcheck disable=SC2086
        out=$("${mpi[@]}" ${how[$t]} "$dir/mpi_pingpong" $SIZES)
        while read -r _ size _ us; do
            echo "round $r $t size $size usec $us"
            res[$t.$size]+="$us "
        done <<<"$out"
    done
done
echo
printf '%-8s' bytes
for t in "${order[@]}"; do printf ' %-14s' "$t (us)"; done
echo
for s in $SIZES; do
    printf '%-8s' "$s"
    for t in "${order[@]}"; do
        printf ' %-14s' "$(tr ' ' '\n' <<<"${res[$t.$s]}" | grep . | median)"
    done
    echo
done
