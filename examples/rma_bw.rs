//! `rma_bw`: the `fi_rma_bw` / `fi_rdm_atomic` analogue: RMA write, read, write with
//! remote CQ data, or atomic fetch-add bandwidth and latency over an RDM endpoint.
//!
//! ```text
//! cargo run --release --example rma_bw                        # write, shm, two processes
//! cargo run --release --example rma_bw -- -o read -S 64k
//! cargo run --release --example rma_bw -- -o fadd -W 1        # atomic latency
//! cargo run --release --example rma_bw -- --server            # server on 47592
//! cargo run --release --example rma_bw -- -o writedata 127.0.0.1
//! cargo run --release --example rma_bw -- -p loopback --json
//! ```
//!
//! The server registers a buffer of `-W` x `-S` bytes (remote read and write access)
//! and sends `{address, key, length}` over the control connection. The client then
//! issues `-w` warm-up plus `-I` timed operations (`-o`): `write` (`fi_write`), `read`
//! (`fi_read`), `writedata` (`fi_writedata`: the server takes one remote-CQ-data
//! completion per write) or `fadd` (`fi_fetch_atomic` of `FI_SUM` on one `FI_UINT64`,
//! 8 bytes). Operation `k` of a window targets slot `k` of the buffer; after `-W`
//! operations the client waits for all their completions. `-W 1` is latency mode: one
//! operation, then its completion. The server busy-polls its CQ (driving the target
//! side under manual progress) until the client's `done` message. Then the result is
//! checked: the server reports the writes' data (first slot), the remote-CQ-data count,
//! or the counter's value (warm-up + timed fetch-adds), and the client checks its reads
//! against the server's pattern.
//!
//! Output is `fabtests`' `show_perf` table (`usec/xfer` per operation), or with
//! `--json` one object per size: `bytes`, `iters`, `window`, `usec_per_op`,
//! `mb_per_sec`, `ops_per_sec` (plus `provider`, `op`, `time_s`).
//!
//! Roles are as in `pingpong`: `<srv_addr>` (client, `-P` port), `--server`/`-B port`
//! (server), or neither: a self-contained run, two processes on shm (the tool starts
//! itself as the server), two threads on loopback or with `--threads`.
//!
//! Differences from `fi_rma_bw`: a write is a completed `fi_write` (no
//! `fi_inject_write` for small sizes, whose missing completion would time only the
//! posting), except with `--direct`: there a write of less than `inject_size` bytes is an
//! `fi_inject_write`, which has stored the data in the target's memory when it returns
//! (the put of UCX's `ucp_put_bw` completes the same way, in place). Only the client
//! prints.

#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{
    BwArgs, BwOpts, Call, Ctrl, Failure, Objects, PeerArgs, Prov, Res, Setup, Sizes, Tool,
    ToolProvider, Watch,
};
use fabric::prelude::*;

/// The key the server asks for (used unless the domain assigns keys).
const RMA_KEY: u64 = 0xC0DE;
/// Size of one fetch-add (one `FI_UINT64`).
const FADD_SIZE: usize = 8;
/// Completions read at once.
const BATCH: usize = 64;
/// Context of the server's `done` receive.
const DONE_CTX: Context = Context(usize::MAX);

/// The operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Read,
    WriteData,
    FetchAdd,
}

impl Op {
    fn parse(s: &str) -> Res<Op> {
        match s.to_ascii_lowercase().as_str() {
            "write" => Ok(Op::Write),
            "read" => Ok(Op::Read),
            "writedata" => Ok(Op::WriteData),
            "fadd" => Ok(Op::FetchAdd),
            _ => Err(Failure::usage(format!(
                "Unknown operation : {s} (write|read|writedata|fadd)"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::WriteData => "writedata",
            Op::FetchAdd => "fadd",
        }
    }
}

/// `fi_rma_bw`'s options.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "rma_bw",
    about = "RMA and atomic bandwidth/latency over an RDM endpoint (fi_rma_bw analogue)",
    override_usage = "rma_bw [OPTIONS]\t\t\ttwo-process run (shm) or in-process run (loopback)\n       rma_bw [OPTIONS] --server|-B <port>\tstart server\n       rma_bw [OPTIONS] <srv_addr>\t\tconnect to server"
)]
struct Args {
    #[command(flatten)]
    peer: PeerArgs,
    #[command(flatten)]
    bw: BwArgs,
    /// operation: write|read|writedata|fadd (fadd: fetch-add of one u64)
    #[arg(short = 'o', value_name = "op", default_value = "write")]
    op: String,
    /// target memory is a directly mapped shm segment: the initiator's process does the
    /// copies and atomics, the target does nothing (shm only)
    #[arg(long)]
    direct: bool,
    /// with --direct: the client attaches the server's segment once
    /// (fabric_shm::RemoteKey, like UCX's unpacked rkey) and puts, gets and fetch-adds
    /// through it instead of through the endpoint
    #[arg(long)]
    rkey: bool,
}

/// Validated options.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Opts {
    setup: Setup,
    bw: BwOpts,
    op: Op,
    direct: bool,
    rkey: bool,
}

impl Opts {
    fn from_args(a: &Args) -> Res<Opts> {
        let setup = a.peer.setup(a.bw.debug)?;
        let op = Op::parse(&a.op)?;
        let mut bw = a.bw.opts()?;
        if op == Op::FetchAdd {
            match bw.sizes {
                Sizes::Default => bw.sizes = Sizes::One(FADD_SIZE),
                Sizes::One(FADD_SIZE) => {}
                _ => {
                    return Err(Failure::usage(format!(
                        "-o fadd works on one u64: -S {FADD_SIZE} or no -S"
                    )))
                }
            }
        }
        if a.direct && setup.prov != Prov::Shm {
            return Err(Failure::usage("--direct needs -p shm"));
        }
        if a.direct && op == Op::WriteData {
            return Err(Failure::usage(
                "--direct with writedata: remote CQ data needs the target (use -o write)",
            ));
        }
        if a.rkey && !a.direct {
            return Err(Failure::usage("--rkey needs --direct"));
        }
        Ok(Opts {
            setup,
            bw,
            op,
            direct: a.direct,
            rkey: a.rkey,
        })
    }
}

/// One size's result.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Perf {
    bw: common::Bw,
}

impl Perf {
    /// `--json`: one object per size.
    fn json(&self, opts: &Opts) -> String {
        let b = &self.bw;
        serde_json::json!({
            "provider": opts.setup.prov.name(),
            "op": opts.op.name(),
            "bytes": b.size,
            "iters": b.iters,
            "window": b.window,
            "time_s": b.elapsed.as_secs_f64(),
            "usec_per_op": b.usec_per_xfer(),
            "mb_per_sec": b.mb_per_sec(),
            "ops_per_sec": b.per_sec(),
        })
        .to_string()
    }
}

/// The server's buffer as the client addresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Remote {
    addr: u64,
    key: MrKey,
    len: u64,
}

/// The RMA test, one side at a time.
struct RmaBw<'o> {
    opts: &'o Opts,
}

/// The operations of the current window still in flight.
struct Window {
    /// Posted, not completed.
    pending: usize,
    /// Room to read completions into.
    entries: [CqTaggedEntry; BATCH],
}

/// How the operations of one size are posted.
#[derive(Debug, Clone, Copy)]
struct Posting {
    /// Bytes per operation.
    size: usize,
    /// `fi_inject_write`: complete when posted, no completion to wait for.
    inject: bool,
    /// The call, for error messages.
    name: &'static str,
}

/// The client's state during a size.
struct Client<'a, P: Provider> {
    o: &'a Objects<P>,
    watch: &'a Watch,
    peer: FiAddr,
    remote: Remote,
    op: Op,
    window: usize,
    /// Writes shorter than this are injected (`--direct`: complete when posted); 0: none.
    inject_below: usize,
    /// `--rkey`: the server's segment, attached; operations go through it.
    rkey: Option<fabric_shm::RemoteKey>,
}

impl<P: Provider> Client<'_, P> {
    /// Posts operation `slot` of a window; `FI_EAGAIN` takes completions (counted off
    /// `win.pending`) and retries.
    fn post(
        &self,
        how: Posting,
        slot: usize,
        seq: u64,
        src: &[u8],
        dst: &mut [&mut [u8]],
        win: &mut Window,
    ) -> Res<()> {
        let (ep, peer, key) = (&self.o.ep, self.peer, self.remote.key);
        let addr = self.remote.addr + (slot * how.size) as u64;
        if let Some(rk) = &self.rkey {
            // Complete when they return: nothing to wait for.
            let out = &mut *dst[slot];
            return match self.op {
                Op::Write => rk.put(addr, src),
                Op::Read => rk.get(addr, out),
                Op::FetchAdd => rk
                    .fetch_add_u64(self.remote.addr, 1)
                    .map(|old| out.copy_from_slice(&old.to_le_bytes())),
                Op::WriteData => Err(Error::NoSys),
            }
            .call("RemoteKey");
        }
        let ctx = Context(slot);
        let one = 1u64.to_le_bytes();
        let (inject, name) = (how.inject, how.name);
        let out = &mut *dst[slot];
        let ptr = out.as_mut_ptr();
        let len = out.len();
        common::post_retry(
            self.watch,
            name,
            || match self.op {
                Op::Write if inject => ep.inject_write(src, peer, addr, key),
                Op::Write => ep.write(src, peer, addr, key, ctx),
                Op::WriteData => ep.writedata(src, seq, peer, addr, key, ctx),
                // SAFETY: `ptr`/`len` are slot `slot` of the caller's result buffer,
                // which is not touched until this operation's completion has been
                // read (the window is drained before slots are reused) and outlives
                // the endpoint. A retry re-posts the same, still unused slot.
                Op::Read => unsafe {
                    ep.read(
                        std::slice::from_raw_parts_mut(ptr, len),
                        peer,
                        addr,
                        key,
                        ctx,
                    )
                },
                // SAFETY: as for `Read`.
                Op::FetchAdd => unsafe {
                    ep.fetch_atomic(
                        &one,
                        std::slice::from_raw_parts_mut(ptr, len),
                        Datatype::Uint64,
                        AtomicOp::Sum,
                        peer,
                        self.remote.addr,
                        key,
                        ctx,
                    )
                },
            },
            || {
                win.pending -= common::read_cq::<P>(&self.o.txcq, &mut win.entries, name)?;
                Ok(())
            },
        )?;
        if !inject {
            win.pending += 1;
        }
        Ok(())
    }

    /// How operations of `size` bytes are posted: decided once per size, not per
    /// operation (the loop is what is timed).
    fn posting(&self, size: usize) -> Posting {
        let inject = self.op == Op::Write && size < self.inject_below;
        let name = match self.op {
            Op::Write if inject => "fi_inject_write",
            Op::Write => "fi_write",
            Op::Read => "fi_read",
            Op::WriteData => "fi_writedata",
            Op::FetchAdd => "fi_fetch_atomic",
        };
        Posting { size, inject, name }
    }

    /// `bandwidth_rma` for one size: returns the time of the timed operations.
    fn run(
        &self,
        size: usize,
        total: usize,
        warmup: usize,
        src: &[u8],
        dst: &mut [&mut [u8]],
    ) -> Res<Duration> {
        let mut win = Window {
            pending: 0,
            entries: [CqTaggedEntry::default(); BATCH],
        };
        let how = self.posting(size);
        let mut start = Instant::now();
        let mut slot = 0;
        for i in 0..total {
            if i == warmup {
                start = Instant::now();
            }
            self.post(how, slot, i as u64, src, dst, &mut win)?;
            slot += 1;
            if slot == self.window || i + 1 == total {
                common::wait_n::<P>(
                    &self.o.txcq,
                    self.watch,
                    &mut win.entries,
                    win.pending,
                    "RMA",
                )?;
                win.pending = 0;
                slot = 0;
            }
        }
        Ok(start.elapsed())
    }
}

impl Tool for RmaBw<'_> {
    type Out = Perf;

    fn render(&self, p: &Perf, first: bool) -> String {
        let opts = self.opts;
        common::render_bw(opts.bw.json.then(|| p.json(opts)), first, &p.bw)
    }

    fn side<P: ToolProvider>(
        &self,
        ctrl: &mut Ctrl,
        watch: &Watch,
        client: bool,
        report: &mut dyn FnMut(Perf) -> Res<()>,
    ) -> Res<()> {
        let (bw, op) = (&self.opts.bw, self.opts.op);
        let mut caps = Caps::MSG | Caps::RMA;
        if op == Op::FetchAdd {
            caps |= Caps::ATOMIC;
        }
        let hints = Hints::new().caps(caps).prov_name(P::NAME);
        let info = common::getinfo_ep::<P>(hints, bw.ep_type)?;
        if bw.window > info.tx_attr.size {
            return Err(Failure::usage(format!(
                "-W {}: larger than the provider's transmit queue ({})",
                bw.window, info.tx_attr.size
            )));
        }
        let sizes = bw.sizes_for(info.ep_attr.max_msg_size)?;
        let max = sizes.iter().copied().max().unwrap_or(0);
        let slots_len = max * bw.window;
        if client {
            bw.debug(format_args!(
                "{} through the {} provider, sizes {sizes:?}",
                op.name(),
                info.fabric_attr.prov_name
            ));
        }
        // Buffers before objects: the endpoint (and the registration) go first at drop.
        let mut target = vec![0u8; if client { 0 } else { slots_len }];
        let mut src = vec![0u8; if client { max } else { 0 }];
        // Written once now, so first-touch faults stay out of the timed reads.
        let mut results = vec![0xa5u8; if client { slots_len } else { 0 }];
        let mut done = [0u8; 8];
        common::fill(&mut target, 0);
        common::fill(&mut src, 0);
        let (o, peer) = Objects::<P>::establish(&info, ctrl, client, watch)?;
        if client {
            let [addr, key, len] = ctrl.recv_u64s::<3>()?;
            let remote = Remote { addr, key, len };
            bw.debug(format_args!("remote buffer {remote:?}"));
            if len < slots_len as u64 {
                return Err(Failure::new(
                    Error::Inval,
                    format!("the server registered {len} bytes, {slots_len} are needed"),
                ));
            }
            let c = Client {
                o: &o,
                watch,
                peer,
                remote,
                op,
                window: bw.window,
                inject_below: if self.opts.direct {
                    info.tx_attr.inject_size
                } else {
                    0
                },
                rkey: if self.opts.rkey {
                    let name = o.peer_name(peer)?;
                    P::attach(&name, key)?
                } else {
                    None
                },
            };
            for size in sizes {
                let total = bw.warmup + bw.iterations_for(size);
                bw.debug(format_args!("size {size}: {total} operations"));
                let mut dst: Vec<&mut [u8]> = if size == 0 {
                    (0..bw.window).map(|_| <&mut [u8]>::default()).collect()
                } else {
                    results[..size * bw.window].chunks_mut(size).collect()
                };
                ctrl.sync(true)?;
                let elapsed = c.run(size, total, bw.warmup, &src[..size], &mut dst)?;
                common::post_retry(
                    watch,
                    "fi_inject",
                    || o.ep.inject(b"done", peer),
                    || {
                        o.domain.progress();
                        Ok(())
                    },
                )?;
                let [value, bad] = ctrl.recv_u64s::<2>()?;
                check_result(op, size, total, value, bad, &dst)?;
                report(Perf {
                    bw: common::Bw {
                        size,
                        iters: (total - bw.warmup) as u64,
                        window: bw.window,
                        elapsed,
                    },
                })?;
            }
        } else {
            let attr = MrAttr {
                access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
                requested_key: RMA_KEY,
                ..MrAttr::DEFAULT
            };
            let mut seg = None;
            let direct;
            let plain;
            let mr: &MemoryRegion<'_, Stack<P>> = if self.opts.direct {
                direct = P::direct_target(&o.domain, &mut seg, target.len(), &attr)?
                    .ok_or_else(|| Failure::usage("--direct needs -p shm"))?;
                // The segment is fresh memory: give it the pattern reads are checked
                // against, as `target` has.
                direct.write(0, &target).call("fi_mr write")?;
                &direct
            } else {
                plain = o.domain.mr_reg(&mut target, &attr).call("fi_mr_reg")?;
                &plain
            };
            ctrl.send_u64s(&[mr.remote_addr(), mr.key(), mr.len() as u64])?;
            for size in sizes {
                if op == Op::FetchAdd {
                    mr.write(0, &0u64.to_le_bytes()).call("fi_mr write")?;
                }
                // SAFETY: `done` is read only after this receive's completion (the
                // loop below ends on it) and outlives the endpoint.
                unsafe { o.ep.recv(&mut done, peer, DONE_CTX) }.call("fi_recv")?;
                ctrl.sync(false)?;
                let writes = serve::<P>(&o, watch)?;
                let (value, bad) = match op {
                    Op::Write => {
                        let mut got = vec![0u8; size];
                        mr.read(0, &mut got).call("fi_mr read")?;
                        (0, common::check(&got, 0).map_or(0, |b| b as u64 + 1))
                    }
                    Op::WriteData => (writes, 0),
                    Op::FetchAdd => {
                        let mut got = [0u8; 8];
                        mr.read(0, &mut got).call("fi_mr read")?;
                        (u64::from_le_bytes(got), 0)
                    }
                    Op::Read => (0, 0),
                };
                ctrl.send_u64s(&[value, bad])?;
            }
        }
        // Both sides are done with the fabric before either tears down.
        ctrl.sync(client)
    }
}

/// The server during a size: busy-polls (progressing the target side) until the
/// client's `done`; returns the remote-CQ-data completions seen.
fn serve<P: Provider>(o: &Objects<P>, watch: &Watch) -> Res<u64> {
    let mut entries = [CqTaggedEntry::default(); BATCH];
    let mut writes = 0u64;
    loop {
        let n = common::read_cq::<P>(&o.rxcq, &mut entries, "target")?;
        if n == 0 {
            watch.idle()?;
            continue;
        }
        watch.busy();
        for e in &entries[..n] {
            if e.flags.contains(CqFlags::REMOTE_CQ_DATA) {
                writes += 1;
            } else if e.op_context == DONE_CTX {
                return Ok(writes);
            }
        }
    }
}

/// Checks one size's outcome: what the server saw (`value`, `bad`) and, for reads,
/// the data read into the first slot.
fn check_result(
    op: Op,
    size: usize,
    total: usize,
    value: u64,
    bad: u64,
    dst: &[&mut [u8]],
) -> Res<()> {
    let fail = |msg: String| Err(Failure::new(Error::Io, format!("size {size}: {msg}")));
    match op {
        Op::Write if bad != 0 => fail(format!(
            "the server's buffer differs from the data written at byte {}",
            bad - 1
        )),
        Op::WriteData if value != total as u64 => fail(format!(
            "the server saw {value} remote CQ data completions, {total} writes were made"
        )),
        Op::FetchAdd if value != total as u64 => fail(format!(
            "the counter is {value} after {total} fetch-adds of 1"
        )),
        Op::Read => match dst.first().and_then(|d| common::check(d, 0)) {
            Some(b) => fail(format!(
                "the data read differs from the server's at byte {b}"
            )),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The whole tool: prints the table (or JSON lines) to `out` on the client side.
/// `child_args` are the arguments a two-process run hands its server child.
fn run(opts: &Opts, child_args: &[OsString], out: &mut dyn Write) -> Res<Vec<Perf>> {
    common::run_printing(&RmaBw { opts }, &opts.setup, child_args, out)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result =
        Opts::from_args(&args).and_then(|o| run(&o, &common::own_args(), &mut std::io::stdout()));
    common::exit(result, args.peer.spawned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::{CtrlSpec, Prov, Role};

    fn opts(cli: &[&str]) -> Res<Opts> {
        let a = Args::try_parse_from(std::iter::once("rma_bw").chain(cli.iter().copied()))
            .map_err(|e| Failure::usage(e.to_string()))?;
        Opts::from_args(&a)
    }

    #[test]
    fn options_parse() {
        let o = opts(&[]).unwrap();
        assert_eq!((o.setup.prov, o.op), (Prov::Shm, Op::Write));
        assert_eq!(o.setup.role, Role::Pair { ipv6: false });
        assert_eq!((o.bw.window, o.bw.sizes), (64, Sizes::Default));
        let o = opts(&[
            "-p", "loopback", "-o", "READ", "-S", "64k", "-W", "1", "-I", "9",
        ])
        .unwrap();
        assert_eq!(o.setup.role, Role::Threads(CtrlSpec::InMemory));
        assert_eq!(
            (o.op, o.bw.sizes, o.bw.window),
            (Op::Read, Sizes::One(65536), 1)
        );
        assert_eq!(o.bw.iterations_for(64 << 10), 9);
        assert_eq!(opts(&["-o", "writedata"]).unwrap().op, Op::WriteData);
        let o = opts(&["-o", "fadd"]).unwrap();
        assert_eq!((o.op, o.bw.sizes), (Op::FetchAdd, Sizes::One(8)));
        assert!(opts(&["-o", "fadd", "-S", "8"]).is_ok());
        assert!(opts(&["-o", "fadd", "-S", "16"]).is_err());
        assert!(opts(&["-o", "fadd", "-S", "all"]).is_err());
        assert_eq!(
            opts(&["-o", "cas"]).unwrap_err().msg,
            "Unknown operation : cas (write|read|writedata|fadd)"
        );
        assert!(opts(&["-W", "0"]).is_err());
    }

    #[test]
    fn json_fields() {
        let o = opts(&["-p", "loopback", "-o", "read"]).unwrap();
        let p = Perf {
            bw: common::Bw {
                size: 4096,
                iters: 1000,
                window: 1,
                elapsed: Duration::from_millis(4),
            },
        };
        let v: serde_json::Value = serde_json::from_str(&p.json(&o)).unwrap();
        assert_eq!(v["op"], "read");
        assert_eq!(
            (v["bytes"].as_u64(), v["iters"].as_u64()),
            (Some(4096), Some(1000))
        );
        assert_eq!(v["window"], 1);
        assert_eq!(v["usec_per_op"].as_f64(), Some(4.0));
        assert_eq!(v["mb_per_sec"].as_f64(), Some(1024.0));
        assert_eq!(v["ops_per_sec"].as_f64(), Some(250_000.0));
    }

    #[test]
    fn result_checks_catch_bad_outcomes() {
        assert!(check_result(Op::WriteData, 8, 10, 10, 0, &[]).is_ok());
        assert!(check_result(Op::WriteData, 8, 10, 9, 0, &[]).is_err());
        assert!(check_result(Op::FetchAdd, 8, 10, 11, 0, &[]).is_err());
        assert!(check_result(Op::Write, 8, 10, 0, 3, &[]).is_err());
        let mut good = [0u8; 16];
        common::fill(&mut good, 0);
        assert!(check_result(Op::Read, 16, 1, 0, 0, &[&mut good]).is_ok());
        good[3] = 0;
        let e = check_result(Op::Read, 16, 1, 0, 0, &[&mut good]).unwrap_err();
        assert!(e.msg.contains("byte 3"), "{}", e.msg);
    }

    #[test]
    fn end_to_end_loopback_every_op() {
        for (op, window) in [
            ("write", "16"),
            ("read", "4"),
            ("writedata", "16"),
            ("fadd", "1"),
            ("fadd", "8"),
        ] {
            let mut o = opts(&[
                "-p", "loopback", "-o", op, "-W", window, "-I", "40", "-w", "5",
            ])
            .unwrap();
            if o.op != Op::FetchAdd {
                o.bw.sizes = Sizes::One(4096);
            }
            let mut out = Vec::new();
            let r = run(&o, &[], &mut out).unwrap_or_else(|e| panic!("{op}: {}", e.msg));
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].bw.iters, 40);
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text.lines().count(), 2, "{text}");
        }
    }

    #[test]
    fn end_to_end_shm_in_process() {
        for op in ["write", "read", "writedata", "fadd"] {
            // A window of 1k reads overfills the target's response ring (64 x 18 cells
            // > 1024): the responses held back must still go out.
            let mut o = opts(&["--threads", "-o", op, "-W", "64", "-I", "300", "-w", "2"]).unwrap();
            if o.op != Op::FetchAdd {
                o.bw.sizes = Sizes::One(1024);
            }
            let r = run(&o, &[], &mut Vec::new()).unwrap_or_else(|e| panic!("{op}: {}", e.msg));
            assert_eq!(r[0].bw.iters, 300);
        }
    }
}
