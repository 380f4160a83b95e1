#!/usr/bin/env bash
# How the shm provider scales with peers: N sender processes against one receiver
# (examples/shm_scaling.rs), N = 1..64, for message rate and latency, and the
# receiver's empty-poll cost with 1, 16, 64 and 256 idle peers attached. Writes the
# raw JSON lines, a markdown table and an SVG plot.
#
#   benches/shm_scaling.sh                  # everything, 3 rounds each, medians
#   ROUNDS=5 NS="1 2 4 8" benches/shm_scaling.sh
#
# Environment:
#   ROUNDS      rounds per point (3); the point is the median
#   NS          sender counts for rate and latency (1 2 4 8 16 32 64)
#   IDLE        idle peer counts for the poll cost (1 16 64 256)
#   OUT         output folder (target/shm_scaling): results.jsonl, table.md, scaling.svg
#   SKIP_BUILD  1: do not build the example first
#   PLOT_ONLY   1: run nothing, remake the table and plot from OUT/results.jsonl
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ROUNDS=${ROUNDS:-3}
NS=${NS:-"1 2 4 8 16 32 64"}
IDLE=${IDLE:-"1 16 64 256"}
OUT=${OUT:-target/shm_scaling}
mkdir -p "$OUT"
if [[ "${SKIP_BUILD:-0}" != 1 && "${PLOT_ONLY:-0}" != 1 ]]; then
    cargo build --release --example shm_scaling >&2
fi
bin=target/release/examples/shm_scaling
# 256 senders hold a pipe each.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

run() {
    echo "+ $bin $*" >&2
    timeout 600 "$bin" "$@" | tee -a "$OUT/results.jsonl"
}
if [[ "${PLOT_ONLY:-0}" != 1 ]]; then
    : >"$OUT/results.jsonl"
    for r in $(seq "$ROUNDS"); do
        for n in $NS; do
            run --mode rate --senders "$n"
            run --mode lat --senders "$n"
        done
        for n in $IDLE; do
            run --mode idle --senders "$n"
        done
    done >/dev/null
fi

python3 - "$OUT" <<'EOF'
import json, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/results.jsonl") if l.strip()]
def med(mode, n, key):
    v = [r[key] for r in rows if r["mode"] == mode and r["senders"] == n]
    return statistics.median(v) if v else None
ns = sorted({r["senders"] for r in rows if r["mode"] == "Rate"})
idle = sorted({r["senders"] for r in rows if r["mode"] == "Idle"})
lines = ["| senders | rate (M msg/s, all senders) | latency (us, one way, median sender) |",
         "|---:|---:|---:|"]
for n in ns:
    rate, lat = med("Rate", n, "msgs_per_s"), med("Lat", n, "lat_us")
    lines.append(f"| {n} | {rate / 1e6:.2f} | {lat:.2f} |")
lines += ["", "| idle peers | empty CQ read (ns) | with no peer (ns) | descriptors | mappings of shm files | resident shared memory (KiB) |",
          "|---:|---:|---:|---:|---:|---:|"]
def pair(n, key):
    r = next(r for r in rows if r["mode"] == "Idle" and r["senders"] == n)
    return f"{r[key][0]} -> {r[key][1]}"
for n in idle:
    lines.append(f"| {n} | {med('Idle', n, 'poll_ns'):.1f} | {med('Idle', n, 'poll_ns_no_peer'):.1f} | "
                 f"{pair(n, 'fds')} | {pair(n, 'maps')} | {pair(n, 'shmem_kib')} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))

# Three panels side by side: rate, latency, poll cost, each against log2 of N.
import math
W, H, PAD = 300, 220, 45
def panel(x0, title, pts, ylab):
    s = [f'<g transform="translate({x0},0)">',
         f'<text x="{W/2}" y="16" text-anchor="middle" font-size="13">{title}</text>']
    if not pts:
        return s + ["</g>"]
    xs = [math.log2(p[0]) for p in pts]
    ymax = max(p[1] for p in pts) * 1.1 or 1
    xmax = max(xs) or 1
    X = lambda x: PAD + (W - PAD - 10) * x / xmax
    Y = lambda y: H - 30 - (H - 60) * y / ymax
    s.append(f'<line x1="{PAD}" y1="{H-30}" x2="{W-10}" y2="{H-30}" stroke="black"/>')
    s.append(f'<line x1="{PAD}" y1="30" x2="{PAD}" y2="{H-30}" stroke="black"/>')
    for i in range(5):
        y = ymax * i / 4
        lab = f"{y:.0f}" if ymax >= 100 else f"{y:.3g}"
        s.append(f'<text x="{PAD-4}" y="{Y(y)+4}" text-anchor="end" font-size="10">{lab}</text>')
    for (n, _), x in zip(pts, xs):
        s.append(f'<text x="{X(x)}" y="{H-16}" text-anchor="middle" font-size="10">{n}</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{X(x):.1f},{Y(p[1]):.1f}" for i, (p, x) in enumerate(zip(pts, xs)))
    s.append(f'<path d="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for p, x in zip(pts, xs):
        s.append(f'<circle cx="{X(x):.1f}" cy="{Y(p[1]):.1f}" r="3" fill="#1f77b4"/>')
    s.append(f'<text x="{W/2}" y="{H-2}" text-anchor="middle" font-size="10">{ylab}</text>')
    return s + ["</g>"]
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{3*W}" height="{H}" font-family="sans-serif">',
       f'<rect width="{3*W}" height="{H}" fill="white"/>']
svg += panel(0, "message rate, M msg/s", [(n, med("Rate", n, "msgs_per_s") / 1e6) for n in ns], "senders")
svg += panel(W, "one-way latency, us", [(n, med("Lat", n, "lat_us")) for n in ns], "senders")
svg += panel(2 * W, "empty CQ read, ns", [(n, med("Idle", n, "poll_ns")) for n in idle], "idle peers")
svg.append("</svg>")
open(f"{out}/scaling.svg", "w").write("\n".join(svg) + "\n")
EOF
echo "wrote $OUT/results.jsonl $OUT/table.md $OUT/scaling.svg" >&2
