#!/usr/bin/env bash
# Two builds of our pingpong side by side with UCX's tag latency, two processes on
# this host, interleaved round by round (the order rotating), so that a change's
# effect on the two-process latency is read as a ratio to a peer measured in the same
# minutes. Prints per-size medians of A, B and UCX, and the medians of A/UCX and B/UCX
# taken round by round.
#
#   benches/ab_latency.sh OLD_PINGPONG NEW_PINGPONG
#   ROUNDS=15 SIZES="8 64" benches/ab_latency.sh a/pingpong b/pingpong
#
# Environment: ROUNDS (10), SIZES ("8 64 4096"), ITERS (5000), PRIO (rt: every
# measured process under `chrt -f 1`, which makes a loaded 2-core box repeatable;
# none: as is). Needs ucx_perftest (apt-get install -y ucx-utils).
set -euo pipefail
[[ $# == 2 ]] || { sed -n 2,13p "$0"; exit 2; }
A=$1
B=$2
ROUNDS=${ROUNDS:-10}
SIZES=${SIZES:-"8 64 4096"}
ITERS=${ITERS:-5000}
prio=()
if [[ "${PRIO:-rt}" == rt ]]; then prio=(chrt -f 1); fi
out=$(mktemp)
port=$((20000 + RANDOM % 20000))

ours() { # binary size -> one-way usec
    "${prio[@]}" "$1" -p shm -e rdm -m tagged -I "$ITERS" -S "$2" --json |
        python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["usec_per_xfer"])'
}
ucx() { # size -> one-way usec (avg_lat)
    port=$((port + 1))
    UCX_TLS=posix,self "${prio[@]}" ucx_perftest -p "$port" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    UCX_TLS=posix,self "${prio[@]}" ucx_perftest 127.0.0.1 -p "$port" -v -t tag_lat \
        -s "$1" -n "$ITERS" -w 500 2>/dev/null | tail -1 | cut -d, -f3
    wait "$srv" 2>/dev/null || true
}

for r in $(seq "$ROUNDS"); do
    for s in $SIZES; do
        case $((r % 3)) in
            0) order="a b u" ;;
            1) order="b u a" ;;
            *) order="u a b" ;;
        esac
        for side in $order; do
            case $side in
                a) v=$(ours "$A" "$s") ;;
                b) v=$(ours "$B" "$s") ;;
                u) v=$(ucx "$s") ;;
            esac
            echo "$r $s $side $v" >>"$out"
        done
    done
done

python3 - "$out" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
v = {}
for r, s, side, x in rows:
    v.setdefault((int(s), side), {})[int(r)] = float(x)
print("| size | A us | B us | UCX us | A/UCX | B/UCX | B/A |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for s in sorted({int(s) for _, s, _, _ in rows}):
    a, b, u = v[(s, "a")], v[(s, "b")], v[(s, "u")]
    rs = sorted(set(a) & set(b) & set(u))
    med = lambda d: statistics.median(d[r] for r in rs)
    ra = statistics.median(a[r] / u[r] for r in rs)
    rb = statistics.median(b[r] / u[r] for r in rs)
    ba = statistics.median(b[r] / a[r] for r in rs)
    print(f"| {s} | {med(a):.3f} | {med(b):.3f} | {med(u):.3f} | {ra:.2f} | {rb:.2f} | {ba:.2f} |")
EOF
rm -f "$out"
