#!/usr/bin/env bash
# Our tcp provider side by side with libfabric's tcp (fi_pingpong -e msg, -e rdm, and
# tcp;ofi_rxm), UCX over TCP, sockperf and a raw-socket floor, on loopback and across a
# veth pair between two network namespaces, in alternating rounds; prints per-side
# medians, ours over the best peer and over the floor, and whether the targets are met.
#
#   benches/tcp_vs_peers.sh                 # 5 rounds, both places, all metrics
#   benches/tcp_vs_peers.sh --update-doc    # the same, then the table into
#                                           # docs/performance.md (the plot is
#                                           # docs/tcp_vs_peers.png either way)
#   ROUNDS=3 ONLY=lat PLACES=veth benches/tcp_vs_peers.sh
#   benches/tcp_vs_peers.sh --report        # table and plot again from RESULTS
#   benches/tcp_vs_peers.sh --syscalls      # system calls per 8-byte ping-pong message
#   benches/tcp_vs_peers.sh --list          # every metric's exact commands per side
#
# Environment:
#   ROUNDS      rounds (5); each round runs every metric once per side, the side order
#               rotating per round
#   PLACES      comma list of loopback,veth (both); veth needs root and iproute2
#   SIDES       comma list of ours,fi_msg,fi_rdm,fi_rxm,ucx,sockperf,floor (all)
#   ONLY        regex on metric names (lat_8, lat_64, bw_1m, rate_8)
#   SKIP_BUILD  1: do not run `cargo build --release --examples` first
#   RESULTS     JSON of every value, error and command (target/peers/tcp_vs_peers.json)
#   TABLE       the markdown table (target/peers/tcp_vs_peers.md)
#   PLOT        the bar chart (docs/tcp_vs_peers.png; needs matplotlib)
#   RUN_TIMEOUT seconds a client may take (60); VERBOSE=1 echoes every command
#
# Ours: target/release/examples/{pingpong,rdm_tagged_bw} -p tcp --json as server and
# client (CARGO_TARGET_DIR is honoured). Peers: apt-get install -y libfabric-bin
# libfabric-dev ucx-utils sockperf iproute2 gcc (installed here when missing, as root);
# benches/peers/fi_peer.sh (libfabric bandwidth and rate) and benches/peers/tcp_floor.sh
# (the floor) are C programs built with cc.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -A pkg=([fi_pingpong]=libfabric-bin [ucx_perftest]=ucx-utils [sockperf]=sockperf
    [cc]=gcc [ip]=iproute2 [ss]=iproute2 [perf]=linux-perf [strace]=strace)
missing=()
for tool in fi_pingpong ucx_perftest sockperf cc ip ss; do
    command -v "$tool" >/dev/null || missing+=("${pkg[$tool]}")
done
[[ -f /usr/include/rdma/fabric.h ]] || missing+=(libfabric-dev)
if [[ " $* " == *" --syscalls "* ]]; then
    for tool in perf strace; do command -v "$tool" >/dev/null || missing+=("${pkg[$tool]}"); done
fi
if ((${#missing[@]})); then
    if [[ $EUID == 0 ]] && command -v apt-get >/dev/null; then
        echo "installing ${missing[*]}" >&2
        apt-get update -qq && apt-get install -y -qq "${missing[@]}" >&2
    else
        echo "missing: ${missing[*]} (apt-get install -y ${missing[*]})" >&2
        exit 1
    fi
fi
command -v python3 >/dev/null || { echo "missing: python3" >&2; exit 1; }

case " $* " in
*" --list "* | *" --report "*) ;;
*)
    if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
        echo "building our examples (cargo build --release --examples)" >&2
        cargo build --release --examples >&2
    fi
    benches/peers/fi_peer.sh --build >/dev/null
    benches/peers/tcp_floor.sh --build >/dev/null
    ;;
esac

exec python3 benches/peers/tcp_vs_peers.py "$@"
