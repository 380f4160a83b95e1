#!/usr/bin/env bash
# The Open MPI 4.1.4 defects behind the tests plugin/tests/mpi4py.sh leaves out
# (plugin/tests/mpi/ompi414.c describes each): every case runs over our fab_tcp and over
# libfabric's own tcp (sockets for cswap, which needs atomics), and, for reference, over
# Open MPI's own transports. Prints one line per run: ok, hang (killed after
# TIMEOUT seconds), or failed (crash or MPI error), with the first error line.
#
#   plugin/tests/ompi414.sh             # every case, 2 ranks
#   NP=4 CASES="cancel-ssend" plugin/tests/ompi414.sh
set -uo pipefail
cd "$(dirname "$0")/../.."

NP=${NP:-2}
TIMEOUT=${TIMEOUT:-20}
CASES=${CASES:-"mprobe-ssend cancel-ssend alltoallw cswap"}
WORK=${WORK:-$(mktemp -d)}
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release -p fabric-ofi >&2 || exit 1
mkdir -p "$WORK/prov"
cp "$TARGET/release/libfabric_ofi.so" "$WORK/prov/libfab_tcp-fi.so"
mpicc -O1 -o "$WORK/ompi414" plugin/tests/mpi/ompi414.c || exit 1

base=(mpirun --allow-run-as-root --oversubscribe -n "$NP" -x "FI_PROVIDER_PATH=$WORK/prov")
for c in $CASES; do
    for prov in fab_tcp libfabric default; do
        p=$prov
        [[ $prov == libfabric ]] && { [[ $c == cswap ]] && p=sockets || p=tcp; }
        case $c in
        cswap) mca=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "$p"
                    --mca osc rdma --mca btl ofi,self --mca btl_ofi_provider_include "$p") ;;
        *) mca=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "$p") ;;
        esac
        [[ $prov == default ]] && mca=()
        out=$(timeout -k 5 "$TIMEOUT" "${base[@]}" "${mca[@]}" "$WORK/ompi414" "$c" 2>&1)
        rc=$?
        oks=$(grep -c "^ok $c" <<<"$out")
        if [[ $rc == 0 && $oks == "$NP" ]]; then
            verdict=ok
        elif [[ $rc == 124 || $rc == 137 ]]; then
            verdict=hang
        else
            verdict="failed: $(grep -m1 -E 'Segmentation|MPI_ERR|error' <<<"$out")"
        fi
        printf '%-13s %-16s %s\n' "$c" "$p" "$verdict"
    done
done
