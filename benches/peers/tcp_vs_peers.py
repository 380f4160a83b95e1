#!/usr/bin/env python3
"""Driver of benches/tcp_vs_peers.sh: our tcp provider against libfabric's tcp, UCX over
TCP, sockperf and a raw-socket floor, on loopback and across a veth pair.

Two places: `loopback` (both processes in this network namespace, over 127.0.0.1) and
`veth` (two network namespaces joined by a veth pair, tests/netns/hosts.sh: the server
in one at 10.77.0.1, the client in the other at 10.77.0.2). Every run is a server
process and a client process started apart, as on two hosts; the client's output gives
the value. Each round runs every metric once per side, rotating the order of the sides
from round to round so that none always runs first on a noisy machine; the report takes
per-side medians over the rounds, and the ratios from those medians of the same run.

Sides (each metric runs the ones that have it):
  ours       target/release/examples/{pingpong,rdm_tagged_bw} -p tcp --json, as server
             (-B port) and client (-P port addr), FABRIC_TCP_IFACE set per side.
             OURS_EPS below lists our endpoint types (ours: RDM, ours_msg: MSG).
  fi_msg     fi_pingpong -p tcp -e msg (latency)
  fi_rdm     fi_pingpong -p tcp -e rdm (latency; libfabric 1.17 has no native tcp RDM
             endpoint, so this resolves to tcp;ofi_rxm, as fi_pingpong -v shows)
  fi_rxm     fi_pingpong -p "tcp;ofi_rxm" -e rdm (latency); benches/peers/fi_peer.sh -p
             "tcp;ofi_rxm" (bandwidth and message rate: fabtests is not packaged)
  ucx        UCX_TLS=tcp ucx_perftest tag_lat / tag_bw (-O 64: window 64)
  sockperf   sockperf ping-pong --tcp (latency; a reference, no ratio; its smallest
             message is 14 bytes, used for the 8-byte row)
  floor      benches/peers/tcp_floor.sh (latency, and bandwidth/rate with one send() per
             message and window 64); a reference

Usage:
  tcp_vs_peers.py                 # measure, write RESULTS, the table and the plot
  tcp_vs_peers.py --report        # remake the table and plot from RESULTS
  tcp_vs_peers.py --update-doc    # ... and put the table into docs/performance.md
  tcp_vs_peers.py --syscalls      # system calls per 8-byte ping-pong message, per side
  tcp_vs_peers.py --list          # every metric's commands per side

Environment: ROUNDS (5), PLACES (loopback,veth), ONLY (regex on metric names),
SIDES (comma list; default all), RESULTS (target/peers/tcp_vs_peers.json), TABLE
(target/peers/tcp_vs_peers.md), PLOT (docs/tcp_vs_peers.png), OURS_DIR
(target/release/examples), RUN_TIMEOUT (60 s per run), VERBOSE=1 (echo commands).
"""

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
OURS_DIR = os.environ.get("OURS_DIR", os.path.join(TARGET, "release", "examples"))
PEERS_DIR = os.path.join(REPO, "target", "peers")
RESULTS = os.environ.get("RESULTS", os.path.join(PEERS_DIR, "tcp_vs_peers.json"))
TABLE = os.environ.get("TABLE", os.path.join(PEERS_DIR, "tcp_vs_peers.md"))
PLOT = os.environ.get("PLOT", os.path.join(REPO, "docs", "tcp_vs_peers.png"))
DOC = os.path.join(REPO, "docs", "performance.md")
HOSTS = os.path.join(REPO, "tests", "netns", "hosts.sh")
FI_PEER = os.path.join(PEERS_DIR, "fi_peer")
TCP_FLOOR = os.path.join(PEERS_DIR, "tcp_floor")
RUN_TIMEOUT = float(os.environ.get("RUN_TIMEOUT", "60"))
VERBOSE = os.environ.get("VERBOSE") == "1"
MIB = 1 << 20
# UCX prints bandwidth in MiB/s; everything here is 10^6 bytes/s as fabtests prints.
MIB_PER_S_TO_MB_PER_S = MIB / 1e6
LAT_ITERS = 10000
FLOOR_LAT_ITERS = 20000
SOCKPERF_MIN = 14

# Our endpoint types: side name -> extra options per tool.
OURS_EPS = {
    "ours": {"pingpong": ["-e", "rdm"], "rdm_tagged_bw": []},
    "ours_msg": {"pingpong": ["-e", "msg"], "rdm_tagged_bw": ["-e", "msg"]},
}
PEERS = ("fi_msg", "fi_rdm", "fi_rxm", "ucx")
REFERENCES = ("sockperf", "floor")
ALL_SIDES = tuple(OURS_EPS) + PEERS + REFERENCES

# The targets: (metric regex, reference, bound, "le" or "ge").
TARGETS = (
    (r"^lat_", "ucx", 0.8, "le"),
    (r"^lat_", "floor", 1.2, "le"),
    (r"^bw_", "best peer", 1.1, "ge"),
    (r"^rate_", "best peer", 1.5, "ge"),
)


class RunError(Exception):
    pass


class Place:
    """Where the two processes run: `ns` is (server namespace, client namespace) or
    None, `addr` (server address, client address), `dev` their interfaces ("": the
    default one)."""

    def __init__(self, name, ns, addr, dev=("", "")):
        self.name = name
        self.ns = ns
        self.addr = addr
        self.dev = dev

    def wrap(self, side, argv):
        if self.ns is None:
            return argv
        return ["ip", "netns", "exec", self.ns[side]] + argv


class Run:
    """One measurement: a server command, a client command, the field the client
    reports. Commands get `{port}`, `{saddr}` (server address), `{caddr}` (client
    address) and `{sdev}`/`{cdev}` (their interfaces; an option whose value is an empty
    interface is left out) filled in; `senv`/`cenv` are the two sides' extra environments."""

    def __init__(self, kind, server, client, field, senv=None, cenv=None):
        self.kind = kind
        self.server = server
        self.client = client
        self.field = field
        self.senv = senv or {}
        self.cenv = cenv or {}


def ours(tool, side, args, field):
    extra = OURS_EPS[side][tool]
    exe = os.path.join(OURS_DIR, tool)
    base = [exe, "-p", "tcp"] + extra + args + ["--json"]
    return Run("ours", base + ["-B", "{port}"], base + ["-T", "20", "-P", "{port}", "{saddr}"],
               field, {"FABRIC_TCP_IFACE": "{saddr}"}, {"FABRIC_TCP_IFACE": "{caddr}"})


def fi_pingpong(prov, ep, size):
    base = ["fi_pingpong", "-p", prov, "-e", ep, "-I", str(LAT_ITERS), "-S", str(size)]
    # fi_pingpong takes no source address: its domain (-d) is the interface.
    return Run("fi_pingpong", base + ["-d", "{sdev}", "-B", "{port}"],
               base + ["-d", "{cdev}", "-P", "{port}", "{saddr}"], "usec/xfer")


def fi_peer(args, field):
    base = [FI_PEER, "-p", "tcp;ofi_rxm"] + args
    return Run("fi_peer", base + ["-s", "-b", "{saddr}", "-P", "{port}"],
               base + ["-b", "{caddr}", "-P", "{port}", "{saddr}"], field)


def ucx(args, field):
    env = {"UCX_TLS": "tcp"}
    return Run("ucx", ["ucx_perftest", "-p", "{port}"],
               ["ucx_perftest", "{saddr}", "-p", "{port}", "-v"] + args, field, env, env)


def sockperf(size):
    return Run("sockperf", ["sockperf", "server", "--tcp", "-i", "{saddr}", "-p", "{port}"],
               ["sockperf", "ping-pong", "--tcp", "-i", "{saddr}", "-p", "{port}",
                "-m", str(max(size, SOCKPERF_MIN)), "-t", "2"], "latency")


def floor(args, field):
    return Run("floor", [TCP_FLOOR, "-s", "-b", "{saddr}", "-P", "{port}"],
               [TCP_FLOOR] + args + ["-P", "{port}", "{saddr}"], field)


class Metric:
    def __init__(self, name, unit, lower_better, sides):
        self.name = name
        self.unit = unit
        self.lower_better = lower_better
        self.sides = sides


def metrics():
    out = []
    for size in (8, 64):
        sides = {s: ours("pingpong", s, ["-m", "tagged", "-I", str(LAT_ITERS), "-S", str(size)],
                         "usec_per_xfer") for s in OURS_EPS}
        sides.update({
            "fi_msg": fi_pingpong("tcp", "msg", size),
            "fi_rdm": fi_pingpong("tcp", "rdm", size),
            "fi_rxm": fi_pingpong("tcp;ofi_rxm", "rdm", size),
            "ucx": ucx(["-t", "tag_lat", "-s", str(size), "-n", str(LAT_ITERS), "-w", "1000"],
                       "overall_lat"),
            "sockperf": sockperf(size),
            "floor": floor(["-m", "lat", "-S", str(size), "-I", str(FLOOR_LAT_ITERS)],
                           "usec_per_xfer"),
        })
        out.append(Metric(f"lat_{size}", "usec", True, sides))
    for name, size, iters, unit, fields in (
            ("bw_1m", MIB, 640, "MB/s", ("mb_per_sec", "mb_per_sec", "overall_bw")),
            ("rate_8", 8, 64000, "msg/s", ("msgs_per_sec", "ops_per_sec", "overall_mr"))):
        ours_f, fi_f, ucx_f = fields
        sides = {s: ours("rdm_tagged_bw", s, ["-S", str(size), "-W", "64", "-I", str(iters)],
                         ours_f) for s in OURS_EPS}
        sides.update({
            "fi_rxm": fi_peer(["-t", "tagged", "-S", str(size), "-W", "64", "-I", str(iters)],
                              fi_f),
            "ucx": ucx(["-t", "tag_bw", "-s", str(size), "-n", str(iters),
                        "-w", str(max(iters // 10, 64)), "-O", "64"], ucx_f),
            "floor": floor(["-m", "bw", "-S", str(size), "-W", "64", "-I", str(iters)],
                           ours_f),
        })
        out.append(Metric(name, unit, False, sides))
    return out


# ---------------------------------------------------------------- parsing

def parse(kind, field, text):
    if kind in ("ours", "fi_peer", "floor"):
        for line in reversed(text.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                rec = json.loads(line)
                return float(rec[field]), rec
        raise RunError(f"{kind}: no JSON line")
    if kind == "fi_pingpong":
        cols = None
        for line in text.splitlines():
            s = line.split()
            if s[:1] == ["bytes"]:
                cols = s
            elif cols and len(s) == len(cols) and re.match(r"^\d", s[0]):
                rec = dict(zip(cols, s))
                return float(rec[field]), rec
        raise RunError("fi_pingpong: no result line")
    if kind == "ucx":
        header = final = None
        for line in text.splitlines():
            s = line.strip()
            if s.startswith("iterations,"):
                header = s.split(",")
            elif header and re.match(r"^\d+,", s):
                final = s.split(",")
        if not header or not final or len(final) != len(header):
            raise RunError("ucx_perftest: no final CSV line")
        rec = dict(zip(header, final))
        v = float(rec[field])
        return (v * MIB_PER_S_TO_MB_PER_S if field.endswith("_bw") else v), rec
    if kind == "sockperf":
        m = re.search(r"Summary: Latency is ([0-9.]+) usec", text)
        if not m:
            raise RunError("sockperf: no summary")
        return float(m.group(1)), {"latency": m.group(1)}
    raise RunError(f"unknown kind {kind}")


# ---------------------------------------------------------------- running

# Control ports below the kernel's ephemeral range (32768 up), so that no connection's
# local port can hold one a server is about to listen on.
PORT_BASE = 20000
_port = [PORT_BASE]


def next_port():
    _port[0] = PORT_BASE + (_port[0] - PORT_BASE + 1) % 1500
    return _port[0]


def fill(argv, subs):
    out = []
    for a in argv:
        v = a.format(**subs)
        if v == "" and out and out[-1].startswith("-"):
            out.pop()
        else:
            out.append(v)
    return out


def listening(place, port):
    cmd = place.wrap(0, ["ss", "-ltnH", f"sport = :{port}"])
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return bool(out.strip())


def stop(proc):
    """Ends a process this script started: by its pid, TERM first."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def no_wrap(_side, argv):
    return argv


def commands(run, place, port, wrap=no_wrap):
    """The server's and client's argv and extra environments; `wrap(i, argv)` may put a
    command in front of side i's (0: server, 1: client)."""
    subs = {"port": port, "saddr": place.addr[0], "caddr": place.addr[1],
            "sdev": place.dev[0], "cdev": place.dev[1]}
    s = place.wrap(0, wrap(0, fill(run.server, subs)))
    c = place.wrap(1, wrap(1, fill(run.client, subs)))
    senv = {k: v.format(**subs) for k, v in run.senv.items()}
    cenv = {k: v.format(**subs) for k, v in run.cenv.items()}
    # On loopback our endpoints listen on 127.0.0.1 without FABRIC_TCP_IFACE.
    if place.ns is None:
        senv.pop("FABRIC_TCP_IFACE", None)
        cenv.pop("FABRIC_TCP_IFACE", None)
    return s, c, senv, cenv


def run_pair(run, place, wrap=no_wrap):
    """Starts the server, waits until it listens, runs the client; returns the client's
    output. Both are ended within RUN_TIMEOUT."""
    port = next_port()
    s, c, senv, cenv = commands(run, place, port, wrap)
    if VERBOSE:
        print(f"  server: {shlex.join(s)}\n  client: {shlex.join(c)}", file=sys.stderr)
    srv = subprocess.Popen(s, env={**os.environ, **senv}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 10
        while not listening(place, port):
            if srv.poll() is not None or time.time() > deadline:
                raise RunError(f"server did not listen on {port}: {srv.stdout.read()[-400:]}")
            time.sleep(0.02)
        try:
            cli = subprocess.run(c, env={**os.environ, **cenv}, capture_output=True, text=True,
                                 timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise RunError(f"client timed out after {RUN_TIMEOUT} s")
        if cli.returncode != 0:
            raise RunError(f"client exit {cli.returncode}: {(cli.stdout + cli.stderr)[-400:]}")
        if run.kind != "sockperf":
            try:
                srv.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        return cli.stdout + cli.stderr
    finally:
        stop(srv)


class Hosts:
    def __enter__(self):
        out = subprocess.run(["bash", HOSTS, "up"], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"hosts.sh up failed ({out.returncode}): {out.stderr.strip()}")
        self.names = out.stdout.split()
        return self.names

    def __exit__(self, *exc):
        subprocess.run(["bash", HOSTS, "down"] + self.names, check=False)


def selected(ms):
    only = os.environ.get("ONLY")
    sides = os.environ.get("SIDES")
    sides = sides.split(",") if sides else list(ALL_SIDES)
    out = []
    for m in ms:
        if only and not re.search(only, m.name):
            continue
        out.append((m, [s for s in ALL_SIDES if s in m.sides and s in sides]))
    return out


def measure():
    rounds = int(os.environ.get("ROUNDS", "5"))
    places = os.environ.get("PLACES", "loopback,veth").split(",")
    ms = selected(metrics())
    results = {"rounds": rounds, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
               "host": os.uname().nodename, "nproc": os.cpu_count(),
               "loadavg_start": os.getloadavg(), "places": {}}
    for pname in places:
        if pname == "loopback":
            ctx = None
            place = Place("loopback", None, ("127.0.0.1", "127.0.0.1"))
        elif pname == "veth":
            ctx = Hosts()
            names = ctx.__enter__()
            pid = names[0].rsplit("-", 1)[1]
            # hosts.sh names the veth ends after the same pid as the namespaces.
            place = Place("veth", names, ("10.77.0.1", "10.77.0.2"), (f"fv1-{pid}", f"fv2-{pid}"))
        else:
            raise SystemExit(f"unknown place {pname} (loopback, veth)")
        try:
            pres = results["places"][pname] = {}
            for r in range(rounds):
                for m, sides in ms:
                    k = r % len(sides)
                    order = sides[k:] + sides[:k]
                    for side in order:
                        run = m.sides[side]
                        cell = pres.setdefault(m.name, {}).setdefault(
                            side, {"values": [], "errors": [], "commands": None})
                        s, c, senv, cenv = commands(run, place, "PORT")
                        cell["commands"] = {"server": shlex.join(s), "client": shlex.join(c),
                                            "server_env": senv, "client_env": cenv}
                        try:
                            v, _ = parse(run.kind, run.field, run_pair(run, place))
                            cell["values"].append(v)
                            print(f"[{pname} round {r + 1}/{rounds}] {m.name} {side}: {v:.4g} "
                                  f"{m.unit}", file=sys.stderr)
                        except (RunError, ValueError, KeyError) as e:
                            cell["errors"].append(str(e))
                            print(f"[{pname} round {r + 1}/{rounds}] {m.name} {side}: FAILED "
                                  f"{e}", file=sys.stderr)
        finally:
            if ctx:
                ctx.__exit__(None, None, None)
    results["loadavg_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(results, f, indent=1)
    return results


# ---------------------------------------------------------------- report

UNITS = {"lat": ("usec", True), "bw": ("MB/s", False), "rate": ("msg/s", False)}


def unit_of(name):
    return UNITS[name.split("_")[0]]


def fmt(v, unit):
    if v is None:
        return "–"
    if unit == "msg/s":
        return f"{v / 1e3:.0f}k"
    if unit == "MB/s":
        return f"{v:.0f}"
    return f"{v:.2f}"


def medians(cells):
    return {s: (statistics.median(c["values"]) if c["values"] else None)
            for s, c in cells.items()}


def ratio_rows(name, med):
    """(ours side, reference, ratio, bound, kind, met) for each target of metric `name`."""
    _, lower = unit_of(name)
    peers = {s: v for s, v in med.items() if s in PEERS and v is not None}
    best = (min if lower else max)(peers.items(), key=lambda kv: kv[1]) if peers else None
    rows = []
    for side in OURS_EPS:
        mine = med.get(side)
        for rx, ref, bound, kind in TARGETS:
            if not re.search(rx, name):
                continue
            if ref == "best peer":
                refv = best[1] if best else None
                label = f"best peer ({best[0]})" if best else "best peer"
            else:
                refv, label = med.get(ref), ref
            if mine is None or refv is None:
                rows.append((side, label, None, bound, kind, None))
                continue
            r = mine / refv
            rows.append((side, label, r, bound, kind, r <= bound if kind == "le" else r >= bound))
    return rows


def report(results):
    lines = []
    rounds = results["rounds"]
    lines.append(f"Medians of {rounds} rounds (started {results['started']} on "
                 f"{results['nproc']} CPUs, load average at start "
                 f"{results['loadavg_start'][0]:.2f}, at end {results['loadavg_end'][0]:.2f}). "
                 "Latency is one-way usec (lower is better); bandwidth 10^6 B/s and rate "
                 "messages/s at window 64 (higher is better). – : not measured by that side.")
    lines.append("")
    for pname, pres in results["places"].items():
        sides = [s for s in ALL_SIDES if any(s in cells for cells in pres.values())]
        lines.append(f"**{pname}**")
        lines.append("")
        lines.append("| metric | " + " | ".join(sides) + " |")
        lines.append("|---|" + "---:|" * len(sides))
        for name, cells in pres.items():
            unit, _ = unit_of(name)
            med = medians(cells)
            row = []
            for s in sides:
                c = cells.get(s)
                v = med.get(s)
                txt = fmt(v, unit)
                if c and c["errors"]:
                    txt += f" ({len(c['errors'])} failed)"
                row.append(txt)
            lines.append(f"| {name} ({unit}) | " + " | ".join(row) + " |")
        lines.append("")
        lines.append("| metric | ours vs | ratio | target | met |")
        lines.append("|---|---|---:|---|---|")
        for name, cells in pres.items():
            for side, label, r, bound, kind, met in ratio_rows(name, medians(cells)):
                sign = "<=" if kind == "le" else ">="
                lines.append(f"| {name} ({side}) | {label} | "
                             f"{'–' if r is None else f'{r:.2f}x'} | {sign} {bound}x | "
                             f"{'–' if met is None else ('yes' if met else 'no')} |")
        lines.append("")
    return "\n".join(lines)


def plot(results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib (pip install matplotlib): plot skipped", file=sys.stderr)
        return
    places = list(results["places"])
    names = [n for n in ("lat_8", "lat_64", "bw_1m", "rate_8")
             if any(n in results["places"][p] for p in places)]
    fig, axes = plt.subplots(len(places), len(names), figsize=(4 * len(names), 3.2 * len(places)),
                             squeeze=False)
    for i, p in enumerate(places):
        for j, n in enumerate(names):
            ax = axes[i][j]
            cells = results["places"][p].get(n, {})
            med = medians(cells)
            sides = [s for s in ALL_SIDES if med.get(s) is not None]
            vals = [med[s] for s in sides]
            colors = ["tab:red" if s in OURS_EPS else "tab:gray" if s in REFERENCES
                      else "tab:blue" for s in sides]
            ax.bar(sides, vals, color=colors)
            unit, lower = unit_of(n)
            ax.set_title(f"{p}: {n} ({unit}, {'lower' if lower else 'higher'} is better)",
                         fontsize=9)
            ax.tick_params(axis="x", labelrotation=45, labelsize=8)
            ax.tick_params(axis="y", labelsize=8)
    fig.suptitle("tcp: ours (red) vs libfabric / UCX (blue), sockperf and floor (gray); "
                 f"medians of {results['rounds']} rounds", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig.savefig(PLOT, dpi=90)
    print(f"plot: {PLOT}", file=sys.stderr)


BEGIN = "<!-- tcp_vs_peers table: generated by benches/tcp_vs_peers.sh --update-doc -->"
END = "<!-- end of tcp_vs_peers table -->"


def update_doc(table):
    with open(DOC) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: no {BEGIN!r} ... {END!r} markers")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(DOC, "w") as f:
        f.write(head + BEGIN + "\n" + table.rstrip() + "\n" + END + tail)
    print(f"updated {DOC}", file=sys.stderr)


def finish(results, doc):
    table = report(results)
    os.makedirs(os.path.dirname(TABLE), exist_ok=True)
    with open(TABLE, "w") as f:
        f.write(table + "\n")
    print(table)
    plot(results)
    if doc:
        update_doc(table)


# ---------------------------------------------------------------- system calls

def syscalls():
    """System calls per 8-byte ping-pong message of each latency side on loopback:
    `perf stat -e raw_syscalls:sys_enter` on server and client (little perturbation),
    divided by the messages both moved (2 per round trip, warm-up included); then
    `strace -f -c` of the client for which calls they are."""
    m = next(m for m in metrics() if m.name == "lat_8")
    place = Place("loopback", None, ("127.0.0.1", "127.0.0.1"))
    # Round trips each side makes, warm-up included, from each tool's options.
    trips = {"ours": LAT_ITERS, "fi_msg": LAT_ITERS, "fi_rdm": LAT_ITERS, "fi_rxm": LAT_ITERS,
             "ucx": LAT_ITERS + 1000, "floor": FLOOR_LAT_ITERS + 1000}
    out = {}
    for side in [s for s in ALL_SIDES if s in m.sides and s != "sockperf"]:
        run = m.sides[side]
        n = trips.get(side, LAT_ITERS)
        files = []

        strace_file = os.path.join(PEERS_DIR, f"strace_{side}.txt")

        def perf(i, argv):
            f = os.path.join(PEERS_DIR, f"syscalls_{side}_{i}.txt")
            files.append(f)
            return ["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-o", f, "--"] + argv

        def strace(i, argv):
            return ["strace", "-f", "-c", "-o", strace_file] + argv if i == 1 else argv

        try:
            v, _ = parse(run.kind, run.field, run_pair(run, place, perf))
            total = 0
            for f in files:
                with open(f) as fh:
                    for line in fh:
                        parts = line.strip().split(",")
                        if len(parts) > 2 and parts[2] == "raw_syscalls:sys_enter":
                            total += int(parts[0])
            run_pair(run, place, strace)
            top = []
            with open(strace_file) as fh:
                for line in fh:
                    p = line.split()
                    if len(p) >= 5 and p[0][0].isdigit() and p[-1] != "total":
                        calls = int(p[3])
                        top.append((calls, p[-1]))
            top.sort(reverse=True)
            per_msg = total / (2 * n)
            out[side] = {"usec": v, "syscalls_per_msg": per_msg, "total": total,
                         "client_top": [(name, round(c / (2 * n), 2)) for c, name in top[:4]]}
            print(f"{side}: {per_msg:.2f} syscalls/message (both processes; {total} in "
                  f"{2 * n} messages); client per message: "
                  + ", ".join(f"{name} {c / (2 * n):.2f}" for c, name in top[:4]))
        except (RunError, ValueError, KeyError, OSError) as e:
            print(f"{side}: FAILED {e}")
    with open(os.path.join(PEERS_DIR, "tcp_syscalls.json"), "w") as f:
        json.dump(out, f, indent=1)


def list_commands():
    place = Place("loopback", None, ("127.0.0.1", "127.0.0.1"))
    for m, sides in selected(metrics()):
        print(f"{m.name} ({m.unit}):")
        for side in sides:
            s, c, senv, cenv = commands(m.sides[side], place, "PORT")
            se = "".join(f"{k}={v} " for k, v in senv.items())
            ce = "".join(f"{k}={v} " for k, v in cenv.items())
            print(f"  {side:9} server: {se}{shlex.join(s)}\n  {'':9} client: {ce}{shlex.join(c)}")


def main(argv):
    if "--list" in argv:
        list_commands()
    elif "--syscalls" in argv:
        syscalls()
    elif "--report" in argv or "--update-doc" in argv:
        with open(RESULTS) as f:
            finish(json.load(f), "--update-doc" in argv)
    else:
        finish(measure(), "--update-doc" in argv)


if __name__ == "__main__":
    main(sys.argv[1:])
