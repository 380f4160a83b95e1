//! `rdm_tagged_bw`: the `fi_rdm_tagged_bw` analogue (fabtests' tagged-message bandwidth
//! over an RDM endpoint), with its options, protocol and output.
//!
//! ```text
//! cargo run --release --example rdm_tagged_bw                   # shm, two processes
//! cargo run --release --example rdm_tagged_bw -- -S all -W 16
//! cargo run --release --example rdm_tagged_bw -- --server       # server on 47592
//! cargo run --release --example rdm_tagged_bw -- 127.0.0.1      # client of that server
//! cargo run --release --example rdm_tagged_bw -- -p loopback -S 4k --json
//! ```
//!
//! The client sends `-W` tagged messages (`fi_tinject` up to the provider's
//! `inject_size`, `fi_tsend` above), waits for their completions, then for the server's
//! small acknowledgement, and repeats until `-w` warm-up plus `-I` timed messages are
//! through; the server keeps a window of receives posted (each completed receive is
//! posted again at once) and acknowledges each window. Timing starts at the first timed
//! message and ends with the last acknowledgement. Afterwards the server reports how
//! many messages it received, which the client checks.
//!
//! The client prints `fabtests`' `show_perf` table: `iters` and `total` count the timed
//! messages and their bytes, `MB/sec` is 10^6 bytes per second, `usec/xfer` the time
//! per message. `--json` prints one object per size instead (`bytes`, `iters`,
//! `window`, `mb_per_sec`, `msgs_per_sec`, `usec_per_xfer`, plus `provider` and
//! `time_s`).
//!
//! Roles are as in `pingpong`: `<srv_addr>` (client, `-P` port), `--server`/`-B port`
//! (server), or neither: a self-contained run, two processes on shm (the tool starts
//! itself as the server), two threads on loopback or with `--threads`.
//!
//! As in fabtests, every receive of the window lands in one `size`-byte buffer, which so
//! stays warm in the cache; `--rx-slots` gives each window entry a buffer of its own
//! (`size × window` bytes, which for large sizes no longer fit the cache).
//!
//! Differences from `fi_rdm_tagged_bw`: a last partial window is acknowledged too, so
//! both sides end each size in step; only the client prints.

#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use common::{
    BwArgs, BwOpts, Call, Ctrl, Failure, Objects, PeerArgs, Res, Setup, Tool, ToolProvider, Watch,
};
use fabric::prelude::*;

/// Tag of the data messages.
const TAG: u64 = 0xb0;
/// Tag of the server's acknowledgements.
const ACK_TAG: u64 = 0xac;
/// Completions read at once.
const BATCH: usize = 64;

/// `fi_rdm_tagged_bw`'s options.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "rdm_tagged_bw",
    about = "Tagged message bandwidth over an RDM endpoint (fi_rdm_tagged_bw analogue)",
    override_usage = "rdm_tagged_bw [OPTIONS]\t\t\ttwo-process run (shm) or in-process run (loopback)\n       rdm_tagged_bw [OPTIONS] --server|-B <port>\tstart server\n       rdm_tagged_bw [OPTIONS] <srv_addr>\t\tconnect to server"
)]
struct Args {
    #[command(flatten)]
    peer: PeerArgs,
    #[command(flatten)]
    bw: BwArgs,
    /// one receive buffer per window entry instead of one for all (fabtests' method)
    #[arg(long = "rx-slots")]
    rx_slots: bool,
}

/// Validated options.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Opts {
    setup: Setup,
    bw: BwOpts,
    /// `--rx-slots`.
    rx_slots: bool,
}

impl Opts {
    fn from_args(a: &Args) -> Res<Opts> {
        Ok(Opts {
            setup: a.peer.setup(a.bw.debug)?,
            bw: a.bw.opts()?,
            rx_slots: a.rx_slots,
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
            "bytes": b.size,
            "iters": b.iters,
            "window": b.window,
            "time_s": b.elapsed.as_secs_f64(),
            "mb_per_sec": b.mb_per_sec(),
            "msgs_per_sec": b.per_sec(),
            "usec_per_xfer": b.usec_per_xfer(),
        })
        .to_string()
    }
}

/// The server's receive buffers of one size: receive `slot` of the window lands at
/// `base + slot * stride`, `size` bytes.
struct RxBufs {
    base: *mut u8,
    size: usize,
    /// `size` with `--rx-slots`, else 0: every receive into the same bytes.
    stride: usize,
}

/// The tagged bandwidth test, one side at a time.
struct TaggedBw<'o> {
    opts: &'o Opts,
}

/// What one side needs during a size.
struct Run<'a, P: Provider> {
    o: &'a Objects<P>,
    watch: &'a Watch,
    peer: FiAddr,
    inject_size: usize,
    window: usize,
}

impl<P: Provider> Run<'_, P> {
    /// The client's part of one size: windows of sends, each closed by the server's
    /// acknowledgement. Returns the time from the first timed message to the last
    /// acknowledgement.
    fn client(
        &self,
        tx: &[u8],
        ack: &mut [u8; 8],
        total: usize,
        warmup: usize,
    ) -> Res<std::time::Duration> {
        let ep = &self.o.ep;
        let (peer, size) = (self.peer, tx.len());
        let mut entries = [CqTaggedEntry::default(); BATCH];
        let mut start = Instant::now();
        let mut sent = 0;
        while sent < total {
            let w = self.window.min(total - sent);
            // SAFETY: `ack` is read only after this receive's completion has been
            // taken below; the caller keeps it alive past the endpoint, whose drop
            // cancels a receive still posted.
            unsafe { ep.trecv(ack, peer, ACK_TAG, 0, Context(usize::MAX)) }.call("fi_trecv")?;
            let mut pending = 0usize;
            for k in 0..w {
                if sent + k == warmup {
                    start = Instant::now();
                }
                if size <= self.inject_size {
                    common::post_retry(
                        self.watch,
                        "fi_tinject",
                        || ep.tinject(tx, peer, TAG),
                        || {
                            self.o.domain.progress();
                            Ok(())
                        },
                    )?;
                } else {
                    // A full transmit queue: take completions to free it.
                    common::post_retry(
                        self.watch,
                        "fi_tsend",
                        || ep.tsend(tx, peer, TAG, Context(k)),
                        || {
                            let n = common::read_cq::<P>(&self.o.txcq, &mut entries, "send")?;
                            pending -= n;
                            Ok(())
                        },
                    )?;
                    pending += 1;
                }
            }
            common::wait_n::<P>(&self.o.txcq, self.watch, &mut entries, pending, "send")?;
            common::wait_one::<P>(&self.o.rxcq, self.watch, "acknowledgement")?;
            sent += w;
            let acked = u64::from_le_bytes(*ack);
            if acked != sent as u64 {
                return Err(Failure::new(
                    Error::Io,
                    format!("the server acknowledged {acked} messages, {sent} were sent"),
                ));
            }
        }
        Ok(start.elapsed())
    }

    /// Posts receive `slot` of the window into its buffer of `rx`.
    fn post(&self, rx: &RxBufs, slot: usize) -> Res<()> {
        // SAFETY: `rx.base + slot * rx.stride .. + rx.size` lies inside the server's
        // receive vector (`stride` is 0 or `size`, `slot < window`, and the vector
        // holds `size × window` bytes with slots, `size` without), which outlives
        // every receive (all complete within the size, and on an error the endpoint,
        // dropped before the vector, cancels the rest). Receives sharing one buffer
        // (fabtests' method) are written one after another by this thread's progress,
        // and nothing reads the bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(rx.base.add(slot * rx.stride), rx.size) };
        // SAFETY: as above, the buffer outlives the receive.
        unsafe { self.o.ep.trecv(buf, FiAddr::UNSPEC, TAG, 0, Context(slot)) }.call("fi_trecv")
    }

    /// The server's part of one size, after the first window of receives is posted:
    /// re-posts each completed receive, acknowledges every window. Returns the messages
    /// received and how many had the wrong length.
    fn server(&self, rx: &RxBufs, mut posted: usize, total: usize, size: usize) -> Res<(u64, u64)> {
        let mut entries = [CqTaggedEntry::default(); BATCH];
        let (mut received, mut bad, mut since_ack) = (0usize, 0u64, 0usize);
        while received < total {
            let n = common::read_cq::<P>(&self.o.rxcq, &mut entries, "receive")?;
            if n == 0 {
                self.watch.idle()?;
                continue;
            }
            self.watch.busy();
            for e in &entries[..n] {
                received += 1;
                since_ack += 1;
                if e.len != size {
                    bad += 1;
                }
                if posted < total {
                    self.post(rx, e.op_context.0)?;
                    posted += 1;
                }
                if since_ack == self.window || received == total {
                    since_ack = 0;
                    let count = (received as u64).to_le_bytes();
                    common::post_retry(
                        self.watch,
                        "fi_tinject",
                        || self.o.ep.tinject(&count, self.peer, ACK_TAG),
                        || {
                            self.o.domain.progress();
                            Ok(())
                        },
                    )?;
                }
            }
        }
        Ok((received as u64, bad))
    }
}

impl Tool for TaggedBw<'_> {
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
        let bw = &self.opts.bw;
        let hints = Hints::new().caps(Caps::TAGGED).prov_name(P::NAME);
        let info = common::getinfo_ep::<P>(hints, bw.ep_type)?;
        let queue = info.tx_attr.size.min(info.rx_attr.size);
        if bw.window > queue {
            return Err(Failure::usage(format!(
                "-W {}: larger than the provider's queue size ({queue})",
                bw.window
            )));
        }
        let sizes = bw.sizes_for(info.ep_attr.max_msg_size)?;
        let max = sizes.iter().copied().max().unwrap_or(0);
        if client {
            bw.debug(format_args!(
                "tagged bandwidth through the {} provider, sizes {sizes:?}",
                info.fabric_attr.prov_name
            ));
        }
        // Buffers before objects: the endpoint goes first at drop, cancelling what is
        // still posted into them.
        let tx = vec![0x5au8; if client { max } else { 0 }];
        let mut ack = [0u8; 8];
        // Written once now: `vec![0; n]` maps zero pages lazily, and their first-touch
        // faults would otherwise land in the first timed window (fabtests' one receive
        // buffer is warm after its warm-up messages).
        let slots = if self.opts.rx_slots { bw.window } else { 1 };
        let mut rx = vec![0xa5u8; if client { 0 } else { max * slots }];
        let (o, peer) = Objects::<P>::establish(&info, ctrl, client, watch)?;
        let run = Run {
            o: &o,
            watch,
            peer,
            inject_size: info.tx_attr.inject_size,
            window: bw.window,
        };
        for size in sizes {
            let total = bw.warmup + bw.iterations_for(size);
            bw.debug(format_args!("size {size}: {total} messages"));
            if client {
                ctrl.sync(true)?;
                let elapsed = run.client(&tx[..size], &mut ack, total, bw.warmup)?;
                let [received, bad] = ctrl.recv_u64s::<2>()?;
                if received != total as u64 || bad != 0 {
                    return Err(Failure::new(
                        Error::Io,
                        format!(
                            "size {size}: the server received {received} messages \
                             ({bad} of a wrong length), {total} were sent"
                        ),
                    ));
                }
                report(Perf {
                    bw: common::Bw {
                        size,
                        iters: (total - bw.warmup) as u64,
                        window: bw.window,
                        elapsed,
                    },
                })?;
            } else {
                let bufs = RxBufs {
                    base: rx.as_mut_ptr(),
                    size,
                    stride: if self.opts.rx_slots { size } else { 0 },
                };
                // The first window is posted before the client may start.
                let first = bw.window.min(total);
                for slot in 0..first {
                    run.post(&bufs, slot)?;
                }
                ctrl.sync(false)?;
                let (received, bad) = run.server(&bufs, first, total, size)?;
                ctrl.send_u64s(&[received, bad])?;
            }
        }
        // Both sides are done with the fabric before either tears down.
        ctrl.sync(client)
    }
}

/// The whole tool: prints the table (or JSON lines) to `out` on the client side.
/// `child_args` are the arguments a two-process run hands its server child.
fn run(opts: &Opts, child_args: &[OsString], out: &mut dyn Write) -> Res<Vec<Perf>> {
    common::run_printing(&TaggedBw { opts }, &opts.setup, child_args, out)
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
    use common::{CtrlSpec, Prov, Role, Sizes};

    fn opts(cli: &[&str]) -> Res<Opts> {
        let a = Args::try_parse_from(std::iter::once("rdm_tagged_bw").chain(cli.iter().copied()))
            .map_err(|e| Failure::usage(e.to_string()))?;
        Opts::from_args(&a)
    }

    #[test]
    fn options_parse() {
        let o = opts(&[]).unwrap();
        assert_eq!(o.setup.prov, Prov::Shm);
        assert_eq!(o.setup.role, Role::Pair { ipv6: false });
        assert_eq!(
            (o.bw.window, o.bw.warmup, o.bw.sizes),
            (64, 10, Sizes::Default)
        );
        assert_eq!(o.bw.iterations_for(64), 20_000);
        assert_eq!(o.bw.iterations_for(64 << 10), 2000);
        assert_eq!(o.bw.iterations_for(1 << 20), 200);
        assert!(!o.rx_slots);
        assert!(opts(&["--rx-slots"]).unwrap().rx_slots);
        let o = opts(&[
            "-p", "loopback", "-S", "all", "-W", "8", "-I", "7", "-w", "0", "--json",
        ])
        .unwrap();
        assert_eq!(o.setup.role, Role::Threads(CtrlSpec::InMemory));
        assert_eq!((o.bw.window, o.bw.warmup, o.bw.sizes), (8, 0, Sizes::All));
        assert_eq!(o.bw.iterations_for(1 << 20), 7);
        assert!(o.bw.json);
        let all = o.bw.sizes_for(64 << 20).unwrap();
        assert_eq!((all[0], all.last().copied()), (1, Some(8 << 20)));
        assert_eq!(o.bw.sizes_for(3).unwrap(), vec![1, 2, 3]);
        assert_eq!(
            opts(&["-S", "2m"])
                .unwrap()
                .bw
                .sizes_for(1 << 20)
                .unwrap_err()
                .code,
            Error::MsgSize.code()
        );
        assert!(opts(&["-W", "0"]).is_err());
        assert!(opts(&["-I", "0"]).is_err());
        assert!(opts(&["-S", "1g"]).is_err());
        assert!(opts(&["-S", "1g", "-W", "1"]).is_ok());
        assert!(opts(&["-o", "write"]).is_err());
    }

    #[test]
    fn json_fields() {
        let o = opts(&["-p", "loopback"]).unwrap();
        let p = Perf {
            bw: common::Bw {
                size: 1000,
                iters: 500,
                window: 64,
                elapsed: std::time::Duration::from_millis(5),
            },
        };
        let v: serde_json::Value = serde_json::from_str(&p.json(&o)).unwrap();
        assert_eq!(v["bytes"], 1000);
        assert_eq!(v["iters"], 500);
        assert_eq!(v["window"], 64);
        assert_eq!(v["mb_per_sec"].as_f64(), Some(100.0));
        assert_eq!(v["msgs_per_sec"].as_f64(), Some(100_000.0));
        assert_eq!(v["usec_per_xfer"].as_f64(), Some(10.0));
        assert_eq!(v["provider"], "loopback");
    }

    #[test]
    fn end_to_end_loopback() {
        // Inject (64), send (64k), a partial last window (3 + 50 = 53 = 3 x 16 + 5).
        let mut o = opts(&["-p", "loopback", "-I", "50", "-w", "3", "-W", "16"]).unwrap();
        for (size, rx_slots) in [(64, false), (64 << 10, false), (64 << 10, true)] {
            o.bw.sizes = Sizes::One(size);
            o.rx_slots = rx_slots;
            let mut out = Vec::new();
            let r = run(&o, &[], &mut out).unwrap();
            assert_eq!(r.len(), 1);
            assert_eq!(
                (r[0].bw.size, r[0].bw.iters, r[0].bw.window),
                (size, 50, 16)
            );
            let text = String::from_utf8(out).unwrap();
            let lines: Vec<_> = text.lines().collect();
            assert_eq!(lines[0], common::Bw::header());
            assert!(lines[1].starts_with(&format!("{:<8}50      ", common::size_str(size as u64))));
        }
        // Window 1 and zero-byte messages.
        o.bw.window = 1;
        o.bw.sizes = Sizes::One(0);
        o.bw.json = true;
        let mut out = Vec::new();
        let r = run(&o, &[], &mut out).unwrap();
        assert_eq!(r[0].bw.iters, 50);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["window"], 1);
    }

    #[test]
    fn end_to_end_shm_in_process() {
        let mut o = opts(&["--threads", "-I", "100", "-w", "2", "-W", "8"]).unwrap();
        for (size, rx_slots) in [(64, false), (64 << 10, false), (64 << 10, true)] {
            o.bw.sizes = Sizes::One(size);
            o.rx_slots = rx_slots;
            let r = run(&o, &[], &mut Vec::new()).unwrap();
            assert_eq!((r[0].bw.size, r[0].bw.iters), (size, 100));
        }
    }
}
