#!/usr/bin/env bash
# Two builds of our rdm_tagged_bw side by side over tcp loopback, a server and a client
# process each, interleaved round by round (the order alternating), so that a change's
# effect on bandwidth is read as a ratio of the same minutes. Prints, per endpoint
# type, every round's MB/s and the medians of A and B and B/A.
#
#   benches/ab_tcp_bw.sh OLD_RDM_TAGGED_BW NEW_RDM_TAGGED_BW
#   ROUNDS=9 SIZE=65536 benches/ab_tcp_bw.sh a/rdm_tagged_bw b/rdm_tagged_bw
#
# Environment: ROUNDS (7), SIZE (1048576), WINDOW (64), ITERS (640), EPS ("rdm msg"),
# PRIO (rt: every measured process under `chrt -f 1`, which makes a loaded 2-core box
# repeatable; none: as is).
set -euo pipefail
[[ $# == 2 ]] || { sed -n 2,12p "$0"; exit 2; }
A=$1
B=$2
ROUNDS=${ROUNDS:-7}
SIZE=${SIZE:-1048576}
WINDOW=${WINDOW:-64}
ITERS=${ITERS:-640}
EPS=${EPS:-"rdm msg"}
prio=()
if [[ "${PRIO:-rt}" == rt ]]; then prio=(chrt -f 1); fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
port=$((20000 + RANDOM % 10000))

bw() { # binary ep -> MB/s
    local args=(-p tcp -e "$2" -S "$SIZE" -W "$WINDOW" -I "$ITERS" --json)
    port=$((port + 1))
    FABRIC_TCP_IFACE=127.0.0.1 "${prio[@]}" "$1" "${args[@]}" -B "$port" >/dev/null &
    local server=$!
    FABRIC_TCP_IFACE=127.0.0.1 timeout 60 "${prio[@]}" "$1" "${args[@]}" -T 20 -P "$port" \
        127.0.0.1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["mb_per_sec"])'
    wait "$server"
}

for r in $(seq 1 "$ROUNDS"); do
    for ep in $EPS; do
        if ((r % 2)); then order="A B"; else order="B A"; fi
        for side in $order; do
            bin=$A
            [[ $side == B ]] && bin=$B
            v=$(bw "$bin" "$ep")
            echo "round $r $ep $side $v" | tee -a "$out"
        done
    done
done
python3 - "$out" <<'EOF'
import statistics, sys
d = {}
for line in open(sys.argv[1]):
    _, _, ep, side, v = line.split()
    d.setdefault(ep, {}).setdefault(side, []).append(float(v))
for ep, s in d.items():
    a, b = statistics.median(s["A"]), statistics.median(s["B"])
    print(f"{ep}: A {a:.0f} MB/s, B {b:.0f} MB/s, B/A {b / a:.2f} (medians of {len(s['A'])})")
EOF
