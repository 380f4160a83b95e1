#!/usr/bin/env python3
"""Latency against message size from outputs of benches/plugin_pingpong.sh, as an SVG.

    python3 benches/plugin_plot.py OUT.svg RUN1.txt RUN2.txt ...

Reads every "round R size S PROVIDER usec/xfer V" line of the given outputs, takes
the median per provider and size, and draws one line per provider on log-log axes
(plain SVG, no plotting library needed).
"""
import math
import re
import statistics
import sys
from collections import defaultdict

out, runs = sys.argv[1], sys.argv[2:]
vals = defaultdict(list)
for path in runs:
    for line in open(path):
        m = re.match(r"round \d+ size (\d+) (\S+) usec/xfer ([0-9.]+)", line)
        if m:
            vals[(m.group(2), int(m.group(1)))].append(float(m.group(3)))
series = defaultdict(list)
for (prov, size), v in sorted(vals.items(), key=lambda kv: kv[0][1]):
    series[prov].append((size, statistics.median(v)))

W, H, L, R, T, B = 640, 400, 70, 150, 30, 50
xs = [s for pts in series.values() for s, _ in pts]
ys = [v for pts in series.values() for _, v in pts]
x0, x1 = math.log10(min(xs)), math.log10(max(xs))
y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))


def px(s):
    return L + (math.log10(s) - x0) / (x1 - x0) * (W - L - R)


def py(v):
    return H - B - (math.log10(v) - y0) / (y1 - y0) * (H - T - B)


colors = ["#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e"]
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{L}" y="18">fi_pingpong latency (us per transfer, median), log-log</text>']
for e in range(y0, y1 + 1):
    y = py(10 ** e)
    svg.append(f'<line x1="{L}" x2="{W - R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
    svg.append(f'<text x="{L - 8}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
for s in sorted(set(xs)):
    x = px(s)
    label = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1 << 10 else f"{s} B"
    svg.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{T}" y2="{H - B}" stroke="#eee"/>')
    svg.append(f'<text x="{x:.1f}" y="{H - B + 16}" text-anchor="middle">{label}</text>')
svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">message size</text>')
for i, (prov, pts) in enumerate(sorted(series.items())):
    c = colors[i % len(colors)]
    path = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in pts)
    svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
    for s, v in pts:
        svg.append(f'<circle cx="{px(s):.1f}" cy="{py(v):.1f}" r="3" fill="{c}"/>')
    y = T + 20 + 18 * i
    svg.append(f'<line x1="{W - R + 10}" x2="{W - R + 30}" y1="{y}" y2="{y}" stroke="{c}" stroke-width="2"/>')
    name = prov if prov.startswith("fab_") else f"{prov} (libfabric)"
    svg.append(f'<text x="{W - R + 36}" y="{y + 4}">{name}</text>')
svg.append("</svg>")
open(out, "w").write("\n".join(svg) + "\n")
