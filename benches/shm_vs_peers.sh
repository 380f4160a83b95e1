#!/usr/bin/env bash
# Our shm provider side by side with libfabric's shm provider and UCX (posix/cma), two
# processes on this host, in alternating rounds; prints per-side medians and the raw
# per-round values. Next to the latency metrics (tag_lat_*, msg_lat_*) each round also
# measures the floor, the one-way time of a bare cache-line ping-pong between two
# processes (benches/peers/line_floor.sh): on this VM it moves between about 0.026, 0.055
# and 0.2 us with the hypervisor's placement of the two vCPUs, so it shows which state
# each round ran in. Latencies also get ours over UCX round by round, and its median.
#
#   benches/shm_vs_peers.sh                 # 5 rounds, all sides, all metrics
#   ROUNDS=3 ONLY='lat' benches/shm_vs_peers.sh
#   SIDES=libfabric,ucx benches/shm_vs_peers.sh      # the peers only
#   benches/shm_vs_peers.sh --list          # every metric's exact command per side
#   benches/shm_vs_peers.sh --plot-only     # remake the plot from the last RESULTS
#
# Environment:
#   ROUNDS      rounds (5); each round runs every metric once per side, the side order
#               rotating per round
#   SIDES       comma list of ours,libfabric,ucx,floor (all)
#   ONLY        regex on metric names (tag_lat_8, msg_lat_4096, am_lat_4096, tag_bw_1m,
#               tag_bw_16m, tag_rate_8, rma_write_rate_8, rma_write_bw_1m,
#               rma_write_lat_8, put_pingpong_lat_8, fadd_lat_8). msg_lat_* and
#               tag_lat_* compare with UCX's tag latency; am_lat_* runs our msg
#               latency against ucp_am_lat, whose handler copies nothing out
#   OURS_PROV   `-p` given to our tools (shm)
#   SKIP_BUILD  1: do not run `cargo build --release --examples` first
#   BEST_OF     k (1): run each slot k times back to back and keep the best value
#   PRIO        none (default) | nice (nice -n -10) | rt (chrt -f 1): scheduling of every
#               measured process, all sides alike. On a loaded 2-core box busy-polling
#               pairs get preempted for milliseconds; rt makes the figures repeatable
#               (RT throttling still leaves other processes 5% of each CPU)
#   PLACEMENT   1: bracket every latency run (all sides) by two short floor readings and
#               add a table of each side's medians per placement (fast, medium, slow),
#               a run counting only where both of its readings agree
#   VERBOSE     1: echo every command run
#   RESULTS     JSON file for all values and commands (target/peers/shm_vs_peers.json)
#   PLOT        SVG of tagged latency and bandwidth against size, ours vs the peers
#               (target/peers/shm_vs_peers.svg; written when a tag_lat/tag_bw row ran)
#
# Ours: target/release/examples/{pingpong,rdm_tagged_bw,rma_bw} ... --json, each
# spawning its own peer process; a tool not built yet shows as "not built".
# Peers (apt-get install -y libfabric-bin libfabric-dev ucx-utils): fi_pingpong for
# libfabric latency, benches/peers/fi_peer.sh (a fabtests-style C program built against
# the installed libfabric: Debian does not package fabtests) for libfabric bandwidth,
# message rate, RMA and atomics, ucx_perftest with UCX_TLS=posix,self (latency, rates)
# or cma,posix,self (1 MiB and 16 MiB bandwidth).
# Floor: benches/peers/line_floor.sh -I 50000 (a C program built with cc), latency only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
for tool in fi_pingpong ucx_perftest python3 cc; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    echo "missing: ${missing[*]} (apt-get install -y libfabric-bin libfabric-dev ucx-utils gcc)" >&2
    exit 1
fi

if [[ "${1:-}" != "--list" && "${1:-}" != "--plot-only" ]]; then
    if [[ "${SKIP_BUILD:-0}" != 1 && ",${SIDES:-ours}," == *",ours,"* ]]; then
        echo "building our examples (cargo build --release --examples)" >&2
        if ! cargo build --release --examples >&2; then
            echo "cargo build failed: measuring whichever of our examples exist" >&2
        fi
    fi
    benches/peers/fi_peer.sh --build >/dev/null
    benches/peers/line_floor.sh --build >/dev/null
fi

exec python3 benches/peers/shm_vs_peers.py "$@"
