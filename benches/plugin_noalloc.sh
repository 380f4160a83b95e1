#!/usr/bin/env bash
# Allocator calls per operation through the plugin (fabric-ofi), two ways:
#  1. plugin/tests/plugin_c/noalloc.c, which counts the calls into malloc & co. of the
#     thread making the libfabric calls (it defines them itself), per vector operation
#     at iov_limit entries, on each provider in PROVS;
#  2. valgrind's heap summary (memcheck) of one operation, OP, run 1 and 1 + ITERS
#     rounds: the difference in "total heap usage ... allocs" over ITERS is the
#     allocations per round, counted by a tool that knows nothing of the program.
#
#   benches/plugin_noalloc.sh
#   SO=/path/to/libfabric_ofi.so SKIP_VALGRIND=1 benches/plugin_noalloc.sh
#
# SO names a plugin library built elsewhere (another checkout's, to compare); by
# default the release build of plugin/ is made and used.
set -euo pipefail
cd "$(dirname "$0")/.."

PROVS=${PROVS:-"fab_shm fab_tcp fab_hybrid"}
COUNT_ITERS=${COUNT_ITERS:-20000}
OP=${OP:-fi_sendv+fi_recvv}
ITERS=${ITERS:-100000}
TARGET=${CARGO_TARGET_DIR:-target}

if [[ -z ${SO:-} ]]; then
    cargo build --release -p fabric-ofi >&2
    SO=$TARGET/release/libfabric_ofi.so
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# One library, installed under the name of each provider it serves.
for p in fab_shm fab_tcp fab_hybrid; do
    cp "$SO" "$dir/lib$p-fi.so"
done
export FI_PROVIDER_PATH=$dir
cc -std=gnu11 -Wall -Wextra -O1 -o "$dir/noalloc" plugin/tests/plugin_c/noalloc.c -lfabric

for p in $PROVS; do
    # A run that allocates exits non-zero after printing its counts: show them anyway.
    FAB_PROV=$p NOALLOC_ITERS=$COUNT_ITERS "$dir/noalloc" || true
done

[[ ${SKIP_VALGRIND:-0} == 1 ]] && exit 0
# valgrind's total allocations of a run of `$1` measured rounds of $OP on fab_shm.
# valgrind replaces the allocator, the program's counting with it: NOALLOC_COUNT=0.
allocs() {
    FAB_PROV=fab_shm NOALLOC_COUNT=0 NOALLOC_ONLY=$OP NOALLOC_ITERS=$1 \
        valgrind --tool=memcheck "$dir/noalloc" 2>&1 \
        | awk '/total heap usage/ { gsub(",", "", $5); print $5 }'
}
a=$(allocs 1)
b=$(allocs $((ITERS + 1)))
echo "valgrind: $OP on fab_shm: $a allocs for 1 round, $b for $((ITERS + 1)):" \
    "$(awk -v a="$a" -v b="$b" -v n="$ITERS" 'BEGIN { printf "%.4f", (b - a) / n }') per round"
