#!/usr/bin/env python3
"""Driver of benches/shm_vs_peers.sh: our shm provider against libfabric shm and UCX.

Every round runs every metric once per side (ours, libfabric, UCX, floor), rotating the
order of the sides from round to round so that none always runs first on this noisy
2-core machine; the table reports per-side medians over the rounds and the raw values, and
for latencies the median of ours over UCX taken round by round (a round runs one
metric's sides back to back, so each pair mostly shares the vCPU placement).

The floor is the one-way time of a bare cache-line ping-pong between two processes,
measured in every round of the tag_lat_*/msg_lat_* metrics: on this VM the latency
depends on where the hypervisor places the two vCPUs (about 0.026, 0.055 or 0.2 us, and
the state changes from second to second), and the floor shows which state a round ran in.

Sides and tools:
  ours       target/release/examples/{pingpong,rdm_tagged_bw,rma_bw} ... --json
             (each spawns its own peer process when given no address)
  libfabric  fi_pingpong (server + client over 127.0.0.1) for latency; for bandwidth,
             message rate, RMA and atomics benches/peers/fi_peer.sh (fabtests is not
             packaged in Debian 12; fi_peer is a small fabtests-style C program)
  ucx        ucx_perftest server + client 127.0.0.1, `-v` CSV output, distinct `-p`
  floor      benches/peers/line_floor.sh -I 50000 (a small C program built with cc), for
             the latency metrics only; a reference, not a competitor: no ratio

Environment: ROUNDS (5), SIDES (ours,libfabric,ucx,floor), ONLY (regex on metric names),
OURS_PROV (shm: `-p` of our tools), OURS_DIR (target/release/examples),
BEST_OF (1: each side's slot in a round runs its command that many times back to back
and keeps the best value, a filter against preemption by other load; all are kept raw),
PRIO (none | nice: `nice -n -10` | rt: `chrt -f 1`, applied alike to every measured
process of every side; rt keeps busy-polling pairs from being preempted by other load,
the kernel's RT throttling still leaves other processes 5% of each CPU),
PLACEMENT (0; 1: every run of a latency metric, every side, is bracketed by two floor
readings of 20000 iterations, and the report adds each side's median per
placement, the run counted in a placement only when both of its readings fall in it),
RESULTS (JSON file to write, default target/peers/shm_vs_peers.json), VERBOSE=1 (echo
every command). `--list` prints the metric table with every side's exact command.
"""

import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
OURS_DIR = os.environ.get("OURS_DIR", os.path.join(REPO, "target", "release", "examples"))
OURS_PROV = os.environ.get("OURS_PROV", "shm")
FI_PEER = os.path.join(HERE, "fi_peer.sh")
LINE_FLOOR = os.path.join(HERE, "line_floor.sh")
FLOOR_ITERS = "50000"
# The bracketing readings of PLACEMENT=1: short, since there are two per run.
PLACEMENT_ITERS = "20000"
# Floor readings (one-way us) that mark the placements seen on this VM: about 0.026 (the
# two vCPUs on one core's hyperthreads), 0.05 (two cores) and 0.2 (farther apart).
PLACEMENTS = (("fast", 0.0, 0.04), ("medium", 0.04, 0.10), ("slow", 0.10, float("inf")))
RUN_TIMEOUT = float(os.environ.get("RUN_TIMEOUT", "90"))
VERBOSE = os.environ.get("VERBOSE") == "1"

UCX_SMALL = "posix,self"
UCX_LARGE = "cma,posix,self"
MIB = 1 << 20
# UCX prints bandwidth in MiB/s; everything here is 10^6 bytes/s as fabtests prints.
MIB_PER_S_TO_MB_PER_S = MIB / 1e6

SIDE_NAMES = ("ours", "libfabric", "ucx", "floor")


class Spec:
    """How one side measures one metric: a command and the field to take."""

    def __init__(self, kind, args, field, env=None, note=""):
        self.kind = kind  # "ours", "fi_pingpong", "fi_peer", "ucx", "floor"
        self.args = args
        self.field = field
        self.env = env or {}
        self.note = note


class Metric:
    def __init__(self, name, unit, lower_better, ours, libfabric, ucx, floor=None):
        self.name = name
        self.unit = unit
        self.lower_better = lower_better
        self.sides = {"ours": ours, "libfabric": libfabric, "ucx": ucx, "floor": floor}


def placement(floor):
    """The placement a floor reading (us) belongs to."""
    for name, lo, hi in PLACEMENTS:
        if lo <= floor < hi:
            return name
    return None


def bracketed(before, after):
    """The placement of a run between two floor readings: theirs when they agree, else
    None (the placement changed during the run, or a reading failed)."""
    if before is None or after is None:
        return None
    a, b = placement(before), placement(after)
    return a if a == b else None


def lat_iters(size):
    return 5000 if size <= 4096 else 2000


def pingpong_args(prov, mode, size):
    """`-p prov -e rdm -m mode -I n -S size`: the options our pingpong and fi_pingpong share."""
    return ["-p", prov, "-e", "rdm", "-m", mode, "-I", str(lat_iters(size)), "-S", str(size)]


def ucx_lat(test, size):
    """A ucx_perftest latency test over posix shared memory."""
    return Spec("ucx", ["-t", test, "-s", str(size), "-n", str(lat_iters(size)), "-w", "500"],
                "overall_lat", {"UCX_TLS": UCX_SMALL})


def metrics():
    out = []
    for mode in ("tagged", "msg"):
        for size in (8, 64, 4096, 65536):
            # Both modes against UCX's tag latency, the reference of the latency targets:
            # like fi_recv and fi_trecv, ucp_tag_recv delivers into the caller's buffer.
            out.append(Metric(
                f"{'tag' if mode == 'tagged' else 'msg'}_lat_{size}", "usec", True,
                Spec("ours", ["pingpong"] + pingpong_args(OURS_PROV, mode, size),
                     "usec_per_xfer"),
                Spec("fi_pingpong", pingpong_args("shm", mode, size), "usec_per_xfer"),
                ucx_lat("tag_lat", size),
                Spec("floor", ["-I", FLOOR_ITERS], "usec_per_xfer"),
            ))
    # Our untagged latency against UCX's active messages, for reference: ucp_am_lat's
    # handler is handed the message where it landed and copies nothing out, while a
    # receive delivers into its buffer, so the receiving core never pulls an AM's payload.
    for size in (8, 64, 4096, 65536):
        out.append(Metric(
            f"am_lat_{size}", "usec", True,
            Spec("ours", ["pingpong"] + pingpong_args(OURS_PROV, "msg", size), "usec_per_xfer"),
            None,
            ucx_lat("ucp_am_lat", size),
        ))
    # Tagged bandwidth: window 64 at 1 MiB, 16 at 16 MiB (the receive buffer is reused).
    for size, win, iters in ((MIB, 64, 640), (16 * MIB, 16, 64)):
        out.append(Metric(
            f"tag_bw_{size // MIB}m", "MB/s", False,
            Spec("ours", ["rdm_tagged_bw", "-p", OURS_PROV, "-S", str(size), "-W", str(win),
                          "-I", str(iters)], "mb_per_sec"),
            Spec("fi_peer", ["-t", "tagged", "-S", str(size), "-W", str(win), "-I", str(iters)],
                 "mb_per_sec"),
            Spec("ucx", ["-t", "tag_bw", "-s", str(size), "-n", str(iters), "-w", str(win),
                         "-O", str(win)], "overall_bw", {"UCX_TLS": UCX_LARGE}),
        ))
    out.append(Metric(
        "tag_rate_8", "msg/s", False,
        Spec("ours", ["rdm_tagged_bw", "-p", OURS_PROV, "-S", "8", "-W", "64", "-I", "64000"],
             "msgs_per_sec"),
        Spec("fi_peer", ["-t", "tagged", "-S", "8", "-W", "64", "-I", "64000"], "ops_per_sec"),
        Spec("ucx", ["-t", "tag_bw", "-s", "8", "-n", "64000", "-w", "6400", "-O", "64"],
             "overall_mr", {"UCX_TLS": UCX_SMALL}),
    ))
    out.append(Metric(
        "rma_write_rate_8", "ops/s", False,
        Spec("ours", ["rma_bw", "-p", OURS_PROV, "-o", "write", "-S", "8", "-W", "64",
                      "-I", "64000"], "ops_per_sec"),
        Spec("fi_peer", ["-t", "write", "-S", "8", "-W", "64", "-I", "64000"], "ops_per_sec"),
        Spec("ucx", ["-t", "ucp_put_bw", "-s", "8", "-n", "64000", "-w", "6400", "-O", "64"],
             "overall_mr", {"UCX_TLS": UCX_SMALL}),
    ))
    out.append(Metric(
        "rma_write_bw_1m", "MB/s", False,
        Spec("ours", ["rma_bw", "-p", OURS_PROV, "-o", "write", "-S", str(MIB), "-W", "64",
                      "-I", "640"], "mb_per_sec"),
        Spec("fi_peer", ["-t", "write", "-S", str(MIB), "-W", "64", "-I", "640"], "mb_per_sec"),
        Spec("ucx", ["-t", "ucp_put_bw", "-s", str(MIB), "-n", "640", "-w", "64", "-O", "64"],
             "overall_bw", {"UCX_TLS": UCX_LARGE}),
    ))
    # Window 1: post one write, wait for its completion. UCX's put completes once the
    # data is stored into the peer's mapped segment; its closest test is ucp_put_lat
    # (a put ping-pong, one-way time), reported in its own row below.
    out.append(Metric(
        "rma_write_lat_8", "usec", True,
        Spec("ours", ["rma_bw", "-p", OURS_PROV, "-o", "write", "-S", "8", "-W", "1",
                      "-I", "10000"], "usec_per_op"),
        Spec("fi_peer", ["-t", "write", "-S", "8", "-W", "1", "-I", "10000"], "usec_per_op"),
        Spec("ucx", ["-t", "ucp_put_bw", "-s", "8", "-n", "10000", "-w", "500", "-O", "1"],
             "overall_lat", {"UCX_TLS": UCX_SMALL}),
    ))
    out.append(Metric(
        "put_pingpong_lat_8", "usec", True,
        None,
        None,
        Spec("ucx", ["-t", "ucp_put_lat", "-s", "8", "-n", "10000", "-w", "500"],
             "overall_lat", {"UCX_TLS": UCX_SMALL}),
    ))
    out.append(Metric(
        "fadd_lat_8", "usec", True,
        Spec("ours", ["rma_bw", "-p", OURS_PROV, "-o", "fadd", "-S", "8", "-W", "1",
                      "-I", "10000"], "usec_per_op"),
        Spec("fi_peer", ["-t", "fadd", "-S", "8", "-W", "1", "-I", "10000"], "usec_per_op"),
        Spec("ucx", ["-t", "ucp_fadd", "-s", "8", "-n", "10000", "-w", "500", "-O", "1"],
             "overall_lat", {"UCX_TLS": UCX_SMALL}),
    ))
    # Directly mapped regions (shm only): the target memory is a MappedSegment, the
    # initiator stores and updates it itself and the operation completes at once,
    # like UCX's posix put and fetch-add. Window 1: one target buffer, as in UCX's test.
    if OURS_PROV == "shm":
        out.append(Metric(
            "direct_put_lat_8", "usec", True,
            Spec("ours", ["rma_bw", "-p", OURS_PROV, "--direct", "-o", "write", "-S", "8",
                          "-W", "1", "-I", "10000"], "usec_per_op"),
            None,
            Spec("ucx", ["-t", "ucp_put_bw", "-s", "8", "-n", "10000", "-w", "500", "-O", "1"],
                 "overall_lat", {"UCX_TLS": UCX_SMALL}),
        ))
        out.append(Metric(
            "direct_put_bw_1m", "MB/s", False,
            Spec("ours", ["rma_bw", "-p", OURS_PROV, "--direct", "-o", "write", "-S", str(MIB),
                          "-W", "1", "-I", "640"], "mb_per_sec"),
            None,
            Spec("ucx", ["-t", "ucp_put_bw", "-s", str(MIB), "-n", "640", "-w", "64", "-O", "64"],
                 "overall_bw", {"UCX_TLS": UCX_LARGE}),
        ))
        # The same through an attached remote key (fabric_shm::RemoteKey, --rkey): the
        # segment resolved once, like the rkey UCX unpacks before its puts.
        out.append(Metric(
            "rkey_put_lat_8", "usec", True,
            Spec("ours", ["rma_bw", "-p", OURS_PROV, "--direct", "--rkey", "-o", "write",
                          "-S", "8", "-W", "1", "-I", "100000"], "usec_per_op"),
            None,
            Spec("ucx", ["-t", "ucp_put_bw", "-s", "8", "-n", "100000", "-w", "500", "-O", "1"],
                 "overall_lat", {"UCX_TLS": UCX_SMALL}),
        ))
        out.append(Metric(
            "rkey_put_bw_1m", "MB/s", False,
            Spec("ours", ["rma_bw", "-p", OURS_PROV, "--direct", "--rkey", "-o", "write",
                          "-S", str(MIB), "-W", "1", "-I", "640"], "mb_per_sec"),
            None,
            Spec("ucx", ["-t", "ucp_put_bw", "-s", str(MIB), "-n", "640", "-w", "64", "-O", "64"],
                 "overall_bw", {"UCX_TLS": UCX_LARGE}),
        ))
        out.append(Metric(
            "rkey_fadd_lat_8", "usec", True,
            Spec("ours", ["rma_bw", "-p", OURS_PROV, "--direct", "--rkey", "-o", "fadd",
                          "-S", "8", "-W", "1", "-I", "100000"], "usec_per_op"),
            None,
            Spec("ucx", ["-t", "ucp_fadd", "-s", "8", "-n", "100000", "-w", "500", "-O", "1"],
                 "overall_lat", {"UCX_TLS": UCX_SMALL}),
        ))
        out.append(Metric(
            "direct_fadd_lat_8", "usec", True,
            Spec("ours", ["rma_bw", "-p", OURS_PROV, "--direct", "-o", "fadd", "-S", "8",
                          "-W", "1", "-I", "10000"], "usec_per_op"),
            None,
            Spec("ucx", ["-t", "ucp_fadd", "-s", "8", "-n", "10000", "-w", "500", "-O", "1"],
                 "overall_lat", {"UCX_TLS": UCX_SMALL}),
        ))
    return out


# ---------------------------------------------------------------- running processes

class RunError(Exception):
    pass


_port = [int(os.environ.get("PORT_BASE", str(21000 + (os.getpid() % 2000) * 10)))]


def next_port():
    _port[0] += 1
    if _port[0] > 60000:
        _port[0] = 21000
    return _port[0]


def listening(port):
    """True once some socket listens on `port` (read from /proc: a probe connection
    would be taken by the server as its client)."""
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def show(cmd, env):
    pre = " ".join(f"{k}={v}" for k, v in env.items())
    return (pre + " " if pre else "") + " ".join(shlex.quote(c) for c in cmd)


PRIO_PREFIX = {"none": [], "nice": ["nice", "-n", "-10"], "rt": ["chrt", "-f", "1"]}


def prio():
    name = os.environ.get("PRIO", "none")
    if name not in PRIO_PREFIX:
        sys.exit(f"PRIO: one of {', '.join(PRIO_PREFIX)}")
    return PRIO_PREFIX[name]


def run_one(cmd, env=None, timeout=RUN_TIMEOUT):
    cmd = prio() + cmd
    full_env = dict(os.environ)
    full_env.update(env or {})
    if VERBOSE:
        print("  $ " + show(cmd, env or {}), file=sys.stderr)
    try:
        p = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout,
                           start_new_session=True)
    except subprocess.TimeoutExpired as e:
        raise RunError(f"timed out after {timeout:.0f}s") from e
    except OSError as e:
        raise RunError(str(e)) from e
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()
        raise RunError(f"exit {p.returncode}: {err[-1] if err else ''}")
    return p.stdout


def kill_group(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def run_pair(server_cmd, client_cmd, port, env=None, timeout=RUN_TIMEOUT):
    """Server in the background (its own process group), client once it listens."""
    server_cmd = prio() + server_cmd
    full_env = dict(os.environ)
    full_env.update(env or {})
    if VERBOSE:
        print("  $ " + show(server_cmd, env or {}) + " &", file=sys.stderr)
    server = subprocess.Popen(server_cmd, env=full_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not listening(port):
            if server.poll() is not None:
                raise RunError(f"server exit {server.returncode}: "
                               f"{(server.stderr.read() or '').strip()[-200:]}")
            if time.monotonic() > deadline:
                raise RunError("server never listened")
            time.sleep(0.02)
        out = run_one(client_cmd, env, timeout)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return out
    finally:
        kill_group(server)


# ---------------------------------------------------------------- parsing

def parse_json_lines(text, field):
    last = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                last = json.loads(line)
            except json.JSONDecodeError:
                continue
    if last is None:
        raise RunError("no JSON line in output")
    if field not in last:
        raise RunError(f"JSON has no field {field!r}: {sorted(last)}")
    return float(last[field]), last


FI_PP_COLS = ["bytes", "sent", "ack", "total", "time", "mb_per_sec", "usec_per_xfer",
              "mxfers_per_sec"]


def parse_fi_pingpong(text, field):
    """fi_pingpong's table: a header starting `bytes` and one line per size."""
    lines = [l.split() for l in text.splitlines() if l.strip()]
    for i, cols in enumerate(lines):
        if cols and cols[0] == "bytes" and i + 1 < len(lines):
            row = lines[-1]
            if len(row) != len(FI_PP_COLS):
                break
            rec = dict(zip(FI_PP_COLS, row))
            return float(rec[field]), rec
    raise RunError("fi_pingpong: no result line")


def parse_ucx_csv(text, field):
    """ucx_perftest -v: a CSV header `iterations,...` then lines; intermediate reports
    are prefixed `[thread N]`, the final one is a bare line."""
    header = None
    final = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("iterations,"):
            header = s.split(",")
        elif header and re.match(r"^\d+,", s):
            final = s.split(",")
    if not header or not final or len(final) != len(header):
        raise RunError("ucx_perftest: no final CSV line")
    rec = dict(zip(header, final))
    value = float(rec[field])
    if field.endswith("_bw"):
        value *= MIB_PER_S_TO_MB_PER_S
    return value, rec


# ---------------------------------------------------------------- sides

_help_cache = {}


def ours_flags_supported(tool):
    """The short/long flags our tool's --help mentions (the new tools are still being
    written: a flag they do not take is dropped rather than failing the run)."""
    if tool not in _help_cache:
        try:
            p = subprocess.run([os.path.join(OURS_DIR, tool), "--help"], capture_output=True,
                               text=True, timeout=20)
            _help_cache[tool] = set(re.findall(r"(?<![\w-])(-[A-Za-z]|--[a-z][\w-]*)",
                                               p.stdout + p.stderr))
        except (OSError, subprocess.TimeoutExpired):
            _help_cache[tool] = set()
    return _help_cache[tool]


def ours_command(spec):
    tool, args = spec.args[0], spec.args[1:]
    known = ours_flags_supported(tool)
    cmd = [os.path.join(OURS_DIR, tool)]
    i = 0
    while i < len(args):
        flag = args[i]
        if flag.startswith("--"):
            # A long option is a switch (e.g. --direct): no value follows.
            if not known or flag in known:
                cmd.append(flag)
            i += 1
            continue
        value = args[i + 1]
        if not known or flag in known:
            cmd += [flag, value]
        i += 2
    return cmd + ["--json"]


def peer_commands(spec, port):
    """(server command or None, client command) of a peer spec."""
    if spec.kind == "fi_pingpong":
        return (["fi_pingpong"] + spec.args + ["-B", str(port)],
                ["fi_pingpong"] + spec.args + ["-P", str(port), "127.0.0.1"])
    if spec.kind == "fi_peer":
        return None, [FI_PEER] + spec.args
    if spec.kind == "floor":
        return None, [LINE_FLOOR] + spec.args
    if spec.kind == "ucx":
        return (["ucx_perftest", "-p", str(port)],
                ["ucx_perftest", "127.0.0.1", "-p", str(port), "-v"] + spec.args)
    raise ValueError(spec.kind)


def describe(spec, port=None):
    """The exact command line(s) of a spec, for --list and the results file."""
    if spec is None:
        return "n/a"
    if spec.kind == "ours":
        return " ".join(shlex.quote(c) for c in prio() + ours_command(spec))
    server, client = peer_commands(spec, port or 0)
    text = show(prio() + client, spec.env)
    if server:
        text = show(prio() + server, spec.env) + " &  then  " + text
    return text


def measure(spec):
    if spec.kind == "ours":
        exe = os.path.join(OURS_DIR, spec.args[0])
        if not os.access(exe, os.X_OK):
            raise RunError("not built")
        return parse_json_lines(run_one(ours_command(spec)), spec.field)
    port = next_port()
    server, client = peer_commands(spec, port)
    if server is None:
        return parse_json_lines(run_one(client, spec.env), spec.field)
    out = run_pair(server, client, port, spec.env)
    if spec.kind == "fi_pingpong":
        return parse_fi_pingpong(out, spec.field)
    return parse_ucx_csv(out, spec.field)


# ---------------------------------------------------------------- report

def fmt(v):
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:.3f}M"
    if v >= 1e4:
        return f"{v / 1e3:.1f}k"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.3f}"


def median(vals):
    vals = [v for v in vals if isinstance(v, float)]
    return statistics.median(vals) if vals else None


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def paired_ratios(ms, results):
    """Per latency metric, ours over UCX in the same round, and their median. A round
    runs one metric's sides back to back, so a round's pair mostly shares a vCPU
    placement, which a quotient of medians over rounds does not ensure."""
    out = {}
    for m in ms:
        if "_lat_" not in m.name or m.sides["ucx"] is None or m.sides["ours"] is None:
            continue
        pairs = [o / u for o, u in zip(results[m.name]["ours"], results[m.name]["ucx"])
                 if isinstance(o, float) and isinstance(u, float) and u > 0]
        if pairs:
            out[m.name] = {"per_round": pairs, "median": statistics.median(pairs)}
    return out


def print_table(head, rows):
    """A text table: the first two columns left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    # rstrip: a blank last cell (a metric without a floor) leaves no trailing spaces.
    line = lambda r: " | ".join(c.rjust(w) if i > 1 else c.ljust(w)
                                for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    print(line(head))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def report(ms, results, errors, sides):
    print()
    print("Medians over rounds (MB/s = 10^6 B/s; usec lower is better, rates higher).")
    print("ours/x is the plain quotient of the medians.")
    print("floor: one-way time of a bare cache-line ping-pong, the hardware floor of the")
    print("vCPU placement the rounds ran in (a reference: no ratio against it).")
    head = ["metric", "unit", "ours", "libfabric", "UCX", "ours/libfabric", "ours/UCX",
            "floor"]
    rows = []
    for m in ms:
        med = {s: median(results[m.name][s]) for s in SIDE_NAMES}
        cells = {}
        for s in SIDE_NAMES:
            if m.sides[s] is None:
                cells[s] = "" if s == "floor" else "n/a"
            elif s not in sides:
                cells[s] = "skipped"
            elif med[s] is None:
                err = errors[m.name].get(s, "failed")
                cells[s] = "not built" if err == "not built" else "failed"
            else:
                cells[s] = fmt(med[s])
        rows.append([m.name, m.unit, cells["ours"], cells["libfabric"], cells["ucx"],
                     ratio(med["ours"], med["libfabric"]), ratio(med["ours"], med["ucx"]),
                     cells["floor"]])
    print_table(head, rows)
    paired = paired_ratios(ms, results) if {"ours", "ucx"} <= set(sides) else {}
    if paired:
        print()
        print("Latency, ours over UCX measured back to back in the same round:")
        for name, p in paired.items():
            shown = " ".join(f"{v:.2f}" for v in p["per_round"])
            print(f"  {name:<14} median {p['median']:.2f}   rounds {shown}")
    print()
    print("Raw per-round values:")
    for m in ms:
        for s in SIDE_NAMES:
            if m.sides[s] is None or s not in sides:
                continue
            vals = results[m.name][s]
            shown = " ".join(fmt(v) if isinstance(v, float) else "x" for v in vals)
            extra = f"   ({errors[m.name][s]})" if s in errors[m.name] else ""
            print(f"  {m.name:<20} {s:<9} {shown}{extra}")


def floor_reading():
    """One short floor reading (us) for PLACEMENT=1, or None when it fails."""
    try:
        value, _ = measure(Spec("floor", ["-I", PLACEMENT_ITERS], "usec_per_xfer"))
    except RunError as e:
        print(f"  floor reading: {e}", file=sys.stderr)
        return None
    return value


def by_placement(ms, placed):
    """Per latency metric and placement: each side's runs there (count and median)."""
    out = {}
    for m in ms:
        rows = {}
        for name, _, _ in PLACEMENTS:
            sides = {}
            for s in ("ours", "libfabric", "ucx"):
                vals = [v for v, where in placed[m.name][s] if where == name]
                if vals:
                    sides[s] = {"n": len(vals), "median": statistics.median(vals)}
            if sides:
                rows[name] = sides
        if rows:
            out[m.name] = rows
    return out


def report_placements(ms, placed, sides):
    table = by_placement(ms, placed)
    if not table:
        return
    print()
    print("By placement (PLACEMENT=1): each run between two floor readings counts in the")
    print("placement both readings fall in (" +
          ", ".join(f"{n} {lo:g}-{hi:g} us" if hi != float("inf") else f"{n} from {lo:g} us"
                    for n, lo, hi in PLACEMENTS) +
          "), runs whose readings disagree in none; medians, [runs].")
    head = ["metric", "placement", "ours", "libfabric", "UCX", "ours/libfabric", "ours/UCX"]
    rows = []
    for name, per in table.items():
        for where, cells in per.items():
            med = {s: cells[s]["median"] if s in cells else None
                   for s in ("ours", "libfabric", "ucx")}
            shown = {s: f"{fmt(cells[s]['median'])} [{cells[s]['n']}]" if s in cells
                     else ("-" if s in sides else "skipped")
                     for s in ("ours", "libfabric", "ucx")}
            rows.append([name, where, shown["ours"], shown["libfabric"], shown["ucx"],
                         ratio(med["ours"], med["libfabric"]), ratio(med["ours"], med["ucx"])])
    print_table(head, rows)


def main():
    ms = metrics()
    only = os.environ.get("ONLY")
    if only:
        ms = [m for m in ms if re.search(only, m.name)]
    sides = [s.strip() for s in os.environ.get("SIDES", ",".join(SIDE_NAMES)).split(",")]
    bad = [s for s in sides if s not in SIDE_NAMES]
    if bad:
        sys.exit(f"SIDES: unknown side(s) {bad}; use {','.join(SIDE_NAMES)}")
    if "--plot-only" in sys.argv[1:]:
        # Remakes the plot from a run's results file (RESULTS), running nothing.
        path = os.environ.get("RESULTS", os.path.join(REPO, "target", "peers",
                                                      "shm_vs_peers.json"))
        with open(path) as f:
            med = json.load(f)["medians"]
        plot = os.environ.get("PLOT", os.path.join(REPO, "target", "peers",
                                                   "shm_vs_peers.svg"))
        named = [m for m in ms if m.name in med]
        write_plot(named, {m.name: {s: [med[m.name].get(s)] if med[m.name].get(s) is not None
                                    else [] for s in SIDE_NAMES} for m in named}, plot)
        print(f"plot: {plot}")
        return 0
    if "--list" in sys.argv[1:]:
        for m in ms:
            print(f"{m.name} [{m.unit}]")
            for s in SIDE_NAMES:
                print(f"  {s:<9} {describe(m.sides[s], 'PORT')}")
        return 0
    try:
        rounds = int(os.environ.get("ROUNDS", "5"))
    except ValueError:
        sys.exit("ROUNDS must be an integer")
    if rounds < 1:
        sys.exit("ROUNDS must be at least 1")

    try:
        best_of = int(os.environ.get("BEST_OF", "1"))
    except ValueError:
        sys.exit("BEST_OF must be an integer")
    if best_of < 1:
        sys.exit("BEST_OF must be at least 1")
    load0 = os.getloadavg()
    results = {m.name: {s: [] for s in SIDE_NAMES} for m in ms}
    place = os.environ.get("PLACEMENT", "0") == "1"
    # Per latency metric and side: (kept value, placement or None) of each round.
    placed = {m.name: {s: [] for s in SIDE_NAMES} for m in ms}
    errors = {m.name: {} for m in ms}
    records = []
    start = time.monotonic()
    for r in range(rounds):
        print(f"round {r + 1}/{rounds} ({time.monotonic() - start:.0f}s)", file=sys.stderr)
        order = list(sides[r % len(sides):]) + list(sides[:r % len(sides)])
        for m in ms:
            for s in order:
                spec = m.sides[s]
                if spec is None:
                    continue
                bracket = place and s != "floor" and m.sides["floor"] is not None
                tries = []
                # PLACEMENT: the reading after one try is the reading before the next.
                before = floor_reading() if bracket else None
                for _ in range(best_of):
                    try:
                        value, raw = measure(spec)
                    except RunError as e:
                        errors[m.name][s] = str(e)
                        if str(e) != "not built":
                            print(f"  {m.name} {s}: {e}", file=sys.stderr)
                        break
                    after = floor_reading() if bracket else None
                    tries.append((value, bracketed(before, after)))
                    rec = {"round": r + 1, "metric": m.name, "side": s, "value": value,
                           "raw": raw, "loadavg": os.getloadavg()[0],
                           "command": describe(spec, "PORT")}
                    if bracket:
                        rec["floor_before"], rec["floor_after"] = before, after
                    records.append(rec)
                    before = after
                if tries:
                    pick = min if m.lower_better else max
                    value, where = pick(tries, key=lambda t: t[0])
                    results[m.name][s].append(value)
                    if bracket:
                        placed[m.name][s].append((value, where))
                else:
                    results[m.name][s].append(None)
    elapsed = time.monotonic() - start
    for m in ms:
        if "ours" in sides and errors[m.name].get("ours") == "not built":
            print(f"{m.name}: ours: not built ({m.sides['ours'].args[0]})")
    report(ms, results, errors, sides)
    if place:
        report_placements(ms, placed, sides)
    load1 = os.getloadavg()
    print(f"\n{rounds} rounds (best of {best_of} per slot, PRIO={os.environ.get('PRIO', 'none')}) "
          f"in {elapsed:.0f}s; "
          f"1-min load average {load0[0]:.2f} at start, {load1[0]:.2f} at end "
          f"on {os.cpu_count()} CPUs")
    path = os.environ.get("RESULTS", os.path.join(REPO, "target", "peers", "shm_vs_peers.json"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"rounds": rounds, "best_of": best_of,
                   "prio": os.environ.get("PRIO", "none"), "records": records,
                   "medians": {m.name: {s: median(results[m.name][s]) for s in SIDE_NAMES}
                               for m in ms},
                   "paired_over_ucx": paired_ratios(ms, results),
                   "by_placement": by_placement(ms, placed) if place else None,
                   "commands": {m.name: {s: describe(m.sides[s], "PORT") for s in SIDE_NAMES}
                                for m in ms}}, f, indent=1)
    print(f"results: {path}")
    plot = os.environ.get("PLOT", os.path.join(REPO, "target", "peers", "shm_vs_peers.svg"))
    if write_plot(ms, results, plot):
        print(f"plot: {plot}")
    return 0


def size_of(name, prefix):
    """The message size in bytes a metric name ends with (`tag_lat_4096`, `tag_bw_1m`)."""
    tail = name[len(prefix):]
    scale = {"k": 1 << 10, "m": 1 << 20}.get(tail[-1:], 1)
    digits = tail[:-1] if tail[-1:] in ("k", "m") else tail
    return int(digits) * scale if digits.isdigit() else None


def write_plot(ms, results, path):
    """Writes an SVG of tagged latency and bandwidth against message size, ours against
    libfabric and UCX (medians of the run's rounds); False when the run measured
    neither."""
    series = {}
    for kind, prefix in (("lat", "tag_lat_"), ("bw", "tag_bw_")):
        for m in ms:
            size = size_of(m.name, prefix) if m.name.startswith(prefix) else None
            if size is None:
                continue
            for side in ("ours", "libfabric", "ucx"):
                v = median(results[m.name][side])
                if v is not None:
                    series.setdefault(kind, {}).setdefault(side, []).append((size, v))
    if not series:
        return False
    colors = {"ours": "#1f77b4", "libfabric": "#ff7f0e", "ucx": "#2ca02c"}
    W, H, PAD = 420, 280, 55
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" '
           'font-family="sans-serif">', f'<rect width="{2 * W}" height="{H}" fill="white"/>']

    def label(size):
        return f"{size >> 20}M" if size >= 1 << 20 else (
            f"{size >> 10}K" if size >= 1 << 10 else str(size))

    for i, (kind, title) in enumerate((("lat", "tagged latency, us (one way)"),
                                        ("bw", "tagged bandwidth, MB/s"))):
        sides = series.get(kind, {})
        x0 = i * W
        out.append(f'<text x="{x0 + W / 2}" y="16" text-anchor="middle" font-size="13">'
                   f'{title}</text>')
        pts = [p for v in sides.values() for p in v]
        if not pts:
            continue
        sizes = sorted({p[0] for p in pts})
        xs = {s: j for j, s in enumerate(sizes)}
        span = max(len(sizes) - 1, 1)
        X = lambda s: x0 + PAD + (W - PAD - 20) * xs[s] / span
        # Latency spans decades: a log scale; bandwidth a linear one from 0.
        if kind == "lat":
            lo = math.log10(min(p[1] for p in pts) / 1.3)
            hi = math.log10(max(p[1] for p in pts) * 1.3)
            Y = lambda v: H - 35 - (H - 70) * (math.log10(v) - lo) / (hi - lo)
            ticks = [m * 10 ** e for e in range(math.floor(lo), math.ceil(hi) + 1)
                     for m in (1, 2, 5) if lo <= math.log10(m * 10 ** e) <= hi]
        else:
            ymax = max(p[1] for p in pts) * 1.1
            Y = lambda v: H - 35 - (H - 70) * v / ymax
            ticks = [ymax * k / 4 for k in range(5)]
        out.append(f'<line x1="{x0 + PAD}" y1="{H - 35}" x2="{x0 + W - 20}" y2="{H - 35}" '
                   'stroke="black"/>')
        out.append(f'<line x1="{x0 + PAD}" y1="30" x2="{x0 + PAD}" y2="{H - 35}" '
                   'stroke="black"/>')
        for v in ticks:
            txt = f"{v:.0f}" if v >= 100 else f"{v:g}"
            out.append(f'<text x="{x0 + PAD - 4}" y="{Y(v) + 4:.1f}" text-anchor="end" '
                       f'font-size="10">{txt}</text>')
        for s in sizes:
            out.append(f'<text x="{X(s):.1f}" y="{H - 20}" text-anchor="middle" '
                       f'font-size="10">{label(s)}</text>')
        out.append(f'<text x="{x0 + W / 2}" y="{H - 4}" text-anchor="middle" '
                   'font-size="10">message size, bytes</text>')
        for j, (side, v) in enumerate(sorted(sides.items())):
            v = sorted(v)
            path_d = " ".join(f"{'M' if k == 0 else 'L'}{X(s):.1f},{Y(y):.1f}"
                              for k, (s, y) in enumerate(v))
            out.append(f'<path d="{path_d}" fill="none" stroke="{colors[side]}" '
                       'stroke-width="2"/>')
            for s, y in v:
                out.append(f'<circle cx="{X(s):.1f}" cy="{Y(y):.1f}" r="3" '
                           f'fill="{colors[side]}"/>')
            name = {"ours": "ours", "libfabric": "libfabric shm", "ucx": "UCX"}[side]
            out.append(f'<text x="{x0 + PAD + 10}" y="{40 + 14 * j}" font-size="11" '
                       f'fill="{colors[side]}">{name}</text>')
    out.append("</svg>")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return True


if __name__ == "__main__":
    sys.exit(main())
