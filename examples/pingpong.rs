//! `pingpong`: the `fi_pingpong` analogue, with its options, protocol and output.
//!
//! ```text
//! cargo run --release --example pingpong                  # shm, two processes
//! cargo run --release --example pingpong -- --server      # server on port 47592
//! cargo run --release --example pingpong -- 127.0.0.1     # client of that server
//! cargo run --release --example pingpong -- -p loopback -e rdm -m tagged -S all -c
//! cargo run --release --example pingpong -- -I 1000 -S 4096 --json
//! ```
//!
//! Like `fi_pingpong`, a server and a client exchange their endpoint names
//! (`fi_getname`, opaque bytes) over a TCP control connection, insert the peer's into
//! their AV, synchronize before each size, run `-I` round trips (client sends, server
//! returns), compare receive counts and finish with a `fin` message. The client prints
//! one line per size with `fi_pingpong`'s columns: `#sent` and `#ack` are iterations
//! sent and messages received back, `total` the bytes moved in both directions,
//! `MB/sec` 10^6 bytes per second, `usec/xfer` the time of one one-way transfer (half
//! a round trip).
//!
//! Roles: `<srv_addr>` runs the client (control port `-P`, default 47592); `--server`
//! or `-B port` runs the server. With neither, the run is self-contained: on shm (the
//! default provider) the tool starts itself as the server child on a free port and
//! runs as the client, so the two sides are two processes; on loopback (`-p loopback`,
//! in-process only) or with `--threads`, both sides run here on two threads, their
//! control stream an in-memory socket pair or, with `-B`/`-P`, TCP on localhost.
//!
//! `-p` picks the provider at run time; each side then runs on that provider's static
//! stack (`Stack<P>`: `FI_THREAD_DOMAIN`, manual progress, no locks) and busy-polls its
//! CQs (no blocking `sread`) for the best latency.
//!
//! Differences from `fi_pingpong`: without `-I` the iteration count depends on the size
//! (10000, 1000 from 64 KiB, 100 from 1 MiB: the `size_to_count` of earlier versions)
//! instead of 10, so the default run gives meaningful numbers in about a second;
//! `-S` also takes `k`/`m`/`g` suffixes; `--json` prints one JSON object per size
//! instead of the table. `-c` checks data as `fi_pingpong -c` does; `-v` prints debug
//! output to stderr. `-e msg` fails with `FI_ENOSYS`: MSG endpoints come with tcp.

#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{
    check, cnt_str, fill, parse_size, size_str, test_sizes, Call, Ctrl, Failure, Objects, PeerArgs,
    Res, Setup, Sizes, Tool, ToolProvider, Watch,
};
use fabric::info::ep_type_name;
use fabric::prelude::*;

/// Largest message of an `-S all` or default run (`PP_MAX_DATA_MSG`: 4 MiB + 2 MiB).
const MAX_DATA_MSG: usize = (1 << 22) + (1 << 21);
/// Smallest receive buffer (`PP_MAX_CTRL_MSG`): the `fin` message must fit.
const MIN_RX: usize = 64;
/// Tag of every message with `-m tagged`.
const TAG: u64 = 0x7070;
/// The `fin` message, as `fi_pingpong` sends it (with the C string terminator).
const FIN: &[u8] = b"fin\0";

/// `fi_pingpong`'s options.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "pingpong",
    about = "Ping pong client and server (fi_pingpong analogue)",
    override_usage = "pingpong [OPTIONS]\t\t\ttwo-process run (shm) or in-process run (loopback)\n       pingpong [OPTIONS] --server|-B <port>\tstart server\n       pingpong [OPTIONS] <srv_addr>\t\tconnect to server"
)]
struct Args {
    #[command(flatten)]
    peer: PeerArgs,
    /// domain name
    #[arg(short = 'd', value_name = "domain")]
    domain: Option<String>,
    /// endpoint type: msg|rdm|dgram (dgram)
    #[arg(
        short = 'e',
        value_name = "ep_type",
        default_value = "dgram",
        hide_default_value = true
    )]
    ep_type: String,
    /// number of iterations (by size: 10000, 1000 from 64k, 100 from 1m)
    #[arg(short = 'I', value_name = "number")]
    iterations: Option<usize>,
    /// specific transfer size or 'all' (default: 64, 256, 1k, 4k, 64k, 1m)
    #[arg(short = 'S', value_name = "size")]
    size: Option<String>,
    /// enables data_integrity checks
    #[arg(short = 'c')]
    check: bool,
    /// transmit mode type: msg|tagged (msg)
    #[arg(
        short = 'm',
        value_name = "transmit mode",
        default_value = "msg",
        hide_default_value = true
    )]
    mode: String,
    /// enable debugging output
    #[arg(short = 'v')]
    debug: bool,
    /// print one JSON object per size instead of the table
    #[arg(long = "json")]
    json: bool,
}

/// Validated options.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Opts {
    setup: Setup,
    domain: Option<String>,
    ep_type: EpType,
    tagged: bool,
    iterations: Option<usize>,
    sizes: Sizes,
    check: bool,
    debug: bool,
    json: bool,
}

fn parse_mode(s: &str) -> Res<bool> {
    match s.to_ascii_lowercase().as_str() {
        "msg" => Ok(false),
        "tagged" => Ok(true),
        _ => Err(Failure::usage(format!("Unknown transmit mode : {s}"))),
    }
}

impl Opts {
    fn from_args(a: &Args) -> Res<Opts> {
        let setup = a.peer.setup(a.debug)?;
        if a.iterations == Some(0) {
            return Err(Failure::usage("-I: the iteration count must be at least 1"));
        }
        Ok(Opts {
            setup,
            domain: a.domain.clone(),
            ep_type: common::parse_ep_type(&a.ep_type, &[EpType::Msg, EpType::Rdm, EpType::Dgram])?,
            tagged: parse_mode(&a.mode)?,
            iterations: a.iterations,
            sizes: a.size.as_deref().map_or(Ok(Sizes::Default), parse_size)?,
            check: a.check,
            debug: a.debug,
            json: a.json,
        })
    }

    /// Iterations for one size (`size_to_count` without `-I`).
    fn iterations_for(&self, size: usize) -> usize {
        self.iterations.unwrap_or(match size {
            s if s >= 1 << 20 => 100,
            s if s >= 1 << 16 => 1000,
            _ => 10_000,
        })
    }

    fn debug(&self, msg: std::fmt::Arguments<'_>) {
        if self.debug {
            eprintln!("[debug] {msg}");
        }
    }
}

/// One size's result.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Perf {
    size: usize,
    sent: u64,
    acked: u64,
    elapsed: Duration,
}

/// `show_perf`'s `xfers_per_iter`: a round trip is two transfers.
const XFERS_PER_ITER: u64 = 2;

impl Perf {
    fn bytes(&self) -> u64 {
        self.sent * self.size as u64 * XFERS_PER_ITER
    }

    fn usec(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6
    }

    fn mb_per_sec(&self) -> f64 {
        self.bytes() as f64 / self.usec()
    }

    fn usec_per_xfer(&self) -> f64 {
        self.usec() / self.sent as f64 / XFERS_PER_ITER as f64
    }

    /// `show_perf`'s header.
    fn header() -> String {
        format!(
            "{:<8}{:<8}{:<9}{:<8}{:>8} {:>10}{:>13}{:>13}",
            "bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"
        )
    }

    /// `show_perf`'s line.
    fn line(&self) -> String {
        let ack = match self.sent.cmp(&self.acked) {
            std::cmp::Ordering::Equal => format!("={}", cnt_str(self.acked)),
            std::cmp::Ordering::Less => format!("-{}", cnt_str(self.acked - self.sent)),
            std::cmp::Ordering::Greater => format!("+{}", cnt_str(self.sent - self.acked)),
        };
        let per = self.usec_per_xfer();
        format!(
            "{:<8}{:<8}{:<9}{:<8}{:>8.2}s{:>10.2}{:>11.2}{:>11.2}",
            size_str(self.size as u64),
            cnt_str(self.sent),
            ack,
            size_str(self.bytes()),
            self.elapsed.as_secs_f64(),
            self.mb_per_sec(),
            per,
            1.0 / per,
        )
    }

    /// `--json`: one object per size, unformatted numbers.
    fn json(&self, opts: &Opts) -> String {
        serde_json::json!({
            "provider": opts.setup.prov.name(),
            "ep_type": ep_type_name(opts.ep_type),
            "mode": if opts.tagged { "tagged" } else { "msg" },
            "bytes": self.size,
            "sent": self.sent,
            "acked": self.acked,
            "total_bytes": self.bytes(),
            "time_s": self.elapsed.as_secs_f64(),
            "mb_per_sec": self.mb_per_sec(),
            "usec_per_xfer": self.usec_per_xfer(),
            "mxfers_per_sec": 1.0 / self.usec_per_xfer(),
        })
        .to_string()
    }
}

/// One side's objects, all made and used on that side's thread.
///
/// Field order is drop order: the endpoint (in `o`) goes first, cancelling a receive
/// still posted into `rx`, before the buffers are freed.
struct Side<'o, P: Provider> {
    o: Objects<P>,
    peer: FiAddr,
    inject_size: usize,
    opts: &'o Opts,
    /// Stops the waits when the peer is gone.
    watch: &'o Watch,
    /// Messages received during timed runs (`cnt_ack_msg`).
    acked: u64,
    /// No receive is posted: the last one completed and, on RDM, the next is posted
    /// right after the next send (see [`Side::rx`]).
    rx_owed: bool,
    /// Data messages sent and received, numbering the `-c` patterns.
    tx_seq: u64,
    rx_seq: u64,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl<'o, P: Provider> Side<'o, P> {
    /// Opens the objects, posts the first receive and exchanges names (the client
    /// receives the server's name first, as in `fi_pingpong`).
    fn open(
        info: &Info,
        opts: &'o Opts,
        watch: &'o Watch,
        ctrl: &mut Ctrl,
        client: bool,
    ) -> Res<Side<'o, P>> {
        let max = tx_size(info, opts);
        // The peer sends nothing before the first size's sync: the receive posted
        // after the connection is in time.
        let (o, peer) = Objects::<P>::establish(info, ctrl, client, watch)?;
        let mut side = Side {
            o,
            peer,
            inject_size: info.tx_attr.inject_size,
            opts,
            watch,
            acked: 0,
            rx_owed: false,
            tx_seq: 0,
            rx_seq: 0,
            tx: vec![0; max.max(MIN_RX)],
            rx: vec![0; max.max(MIN_RX)],
        };
        side.post_rx()?;
        opts.debug(format_args!(
            "{}: endpoint {} talks to {}",
            if client { "CLIENT" } else { "SERVER" },
            side.o.av.straddr(&side.o.ep.name()),
            side.o
                .peer_name(side.peer)
                .map_or_else(|_| "?".into(), |n| side.o.av.straddr(&n))
        ));
        Ok(side)
    }

    /// Posts the whole receive buffer (as `fi_pingpong` does: one size fits all).
    fn post_rx(&mut self) -> Res<()> {
        let buf = &mut self.rx[..];
        // SAFETY: `rx` is only read after this receive's completion has been taken
        // from the CQ (`rx`), and it outlives the endpoint (field order), whose drop
        // cancels a receive still posted.
        let r = unsafe {
            if self.opts.tagged {
                self.o.ep.trecv(buf, FiAddr::UNSPEC, TAG, 0, Context(1))
            } else {
                self.o.ep.recv(buf, FiAddr::UNSPEC, Context(1))
            }
        };
        r.call(if self.opts.tagged {
            "fi_trecv"
        } else {
            "fi_recv"
        })
    }

    /// `pp_tx`/`pp_inject`: sends `size` bytes (a `-c` pattern while timing), then
    /// posts the receive [`Side::rx`] left owed.
    // Inlined, as `rx`: the timed loop keeps one frame from receipt to the next send.
    #[inline(always)]
    fn tx(&mut self, size: usize, data: bool) -> Res<()> {
        if data && self.opts.check {
            fill(&mut self.tx[..size], self.tx_seq);
        }
        if data {
            self.tx_seq += 1;
        }
        let buf = &self.tx[..size];
        let (peer, tagged, ep) = (self.peer, self.opts.tagged, &self.o.ep);
        let inject = size <= self.inject_size;
        let name = match (inject, tagged) {
            (true, true) => "fi_tinject",
            (true, false) => "fi_inject",
            (false, true) => "fi_tsend",
            (false, false) => "fi_send",
        };
        // A full peer inbox: drive our own progress and retry (as fabtests' posts do).
        common::post_retry(
            self.watch,
            name,
            #[inline(always)]
            || match (inject, tagged) {
                (true, true) => ep.tinject(buf, peer, TAG),
                (true, false) => ep.inject(buf, peer),
                (false, true) => ep.tsend(buf, peer, TAG, Context(2)),
                (false, false) => ep.send(buf, peer, Context(2)),
            },
            || {
                self.o.domain.progress();
                Ok(())
            },
        )?;
        if !inject {
            common::wait_one::<P>(&self.o.txcq, self.watch, "transmit")?;
        }
        if self.rx_owed {
            self.rx_owed = false;
            self.post_rx()?;
        }
        Ok(())
    }

    /// `pp_rx`: takes one receive completion, checks it, and posts the next receive.
    ///
    /// On DGRAM the next receive is posted at once, as `fi_pingpong` does, so the
    /// peer's next message always finds one. On RDM it is posted right after this
    /// side's next send ([`Side::tx`]), as `ucx_perftest` posts its receives: the peer
    /// answers only that send, so the post overlaps the message's flight instead of
    /// delaying the send, and an answer that did come first would wait, matched, in
    /// the unexpected queue (RDM delivers it either way).
    #[inline(always)]
    fn rx(&mut self, size: usize, data: bool) -> Res<()> {
        let e = common::wait_one::<P>(&self.o.rxcq, self.watch, "receive")?;
        if e.len != size {
            return Err(Failure::new(
                Error::Trunc,
                format!("received {} bytes, expected {size}", e.len),
            ));
        }
        if data {
            if self.opts.check {
                if let Some(byte) = check(&self.rx[..size], self.rx_seq) {
                    return Err(Failure::new(
                        Error::Io,
                        format!(
                            "Error at iteration={} size={size} byte={byte}",
                            self.rx_seq + 1
                        ),
                    ));
                }
            }
            self.rx_seq += 1;
        }
        if self.opts.ep_type == EpType::Dgram {
            self.post_rx()?;
        } else {
            self.rx_owed = true;
        }
        if data {
            self.acked += 1;
        }
        Ok(())
    }

    /// `pingpong()` for one size: returns the client's result, `None` on the server.
    fn run_size(&mut self, ctrl: &mut Ctrl, client: bool, size: usize) -> Res<Option<Perf>> {
        let iters = self.opts.iterations_for(size);
        self.acked = 0;
        ctrl.sync(client)?;
        let start = Instant::now();
        for _ in 0..iters {
            if client {
                self.tx(size, true)?;
                self.rx(size, true)?;
            } else {
                self.rx(size, true)?;
                self.tx(size, true)?;
            }
        }
        let elapsed = start.elapsed();
        let acked = ctrl.exchange_count(client, self.acked)?;
        Ok(client.then_some(Perf {
            size,
            sent: iters as u64,
            acked,
            elapsed,
        }))
    }

    /// `pp_finalize`: each side sends `fin` and takes the peer's, so the last posted
    /// receive completes before teardown.
    fn finalize(&mut self) -> Res<()> {
        self.tx[..FIN.len()].copy_from_slice(FIN);
        self.tx(FIN.len(), false)?;
        self.rx(FIN.len(), false)
    }
}

/// The largest message the run needs (`pp_alloc_msgs`).
fn tx_size(info: &Info, opts: &Opts) -> usize {
    match opts.sizes {
        Sizes::One(n) => n,
        _ => MAX_DATA_MSG.min(info.ep_attr.max_msg_size),
    }
}

/// `pp_getinfo`: the info of provider `P`'s stack for the options.
fn getinfo_for<P: Provider>(opts: &Opts) -> Res<Info> {
    let mut hints = Hints::new()
        .caps(if opts.tagged { Caps::TAGGED } else { Caps::MSG })
        .prov_name(P::NAME);
    // Hints hold `&'static str` names; one per run, so leaking is bounded.
    if let Some(d) = &opts.domain {
        hints = hints.domain_name(Box::leak(d.clone().into_boxed_str()));
    }
    let info = common::getinfo_ep::<P>(hints, opts.ep_type)?;
    if let Sizes::One(n) = opts.sizes {
        if n > info.ep_attr.max_msg_size {
            return Err(Failure::new(
                Error::MsgSize,
                format!(
                    "-S {n}: larger than the provider's max_msg_size ({})",
                    info.ep_attr.max_msg_size
                ),
            ));
        }
    }
    Ok(info)
}

/// The ping-pong test, one side at a time.
struct PingPong<'o> {
    opts: &'o Opts,
}

impl Tool for PingPong<'_> {
    type Out = Perf;

    fn render(&self, p: &Perf, first: bool) -> String {
        let opts = self.opts;
        common::render(opts.json.then(|| p.json(opts)), first, Perf::header, || {
            p.line()
        })
    }

    fn side<P: ToolProvider>(
        &self,
        ctrl: &mut Ctrl,
        watch: &Watch,
        client: bool,
        report: &mut dyn FnMut(Perf) -> Res<()>,
    ) -> Res<()> {
        let opts = self.opts;
        let info = getinfo_for::<P>(opts)?;
        if client {
            opts.debug(format_args!(
                "Running pingpong test with the {} endpoint through a {} provider",
                ep_type_name(info.ep_attr.ep_type),
                info.fabric_attr.prov_name
            ));
        }
        let mut side = Side::<P>::open(&info, opts, watch, ctrl, client)?;
        for size in test_sizes(opts.sizes, tx_size(&info, opts)) {
            opts.debug(format_args!("size {size}"));
            if let Some(p) = side.run_size(ctrl, client, size)? {
                report(p)?;
            }
        }
        side.finalize()
    }
}

/// The whole tool: prints the table (or JSON lines) to `out` on the client side.
/// `child_args` are the arguments a two-process run hands its server child.
fn run(opts: &Opts, child_args: &[OsString], out: &mut dyn Write) -> Res<Vec<Perf>> {
    common::run_printing(&PingPong { opts }, &opts.setup, child_args, out)
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
        let a = Args::try_parse_from(std::iter::once("pingpong").chain(cli.iter().copied()))
            .map_err(|e| Failure::usage(e.to_string()))?;
        Opts::from_args(&a)
    }

    #[test]
    fn defaults_match_fi_pingpong() {
        let o = opts(&[]).unwrap();
        assert_eq!(o.setup.prov, Prov::Shm);
        assert_eq!(o.setup.role, Role::Pair { ipv6: false });
        assert_eq!(o.ep_type, EpType::Dgram);
        assert!(!o.tagged && !o.check && !o.json && !o.debug);
        assert_eq!(o.sizes, Sizes::Default);
        assert_eq!(o.iterations_for(64), 10_000);
        assert_eq!(o.iterations_for(64 << 10), 1000);
        assert_eq!(o.iterations_for(1 << 20), 100);
    }

    #[test]
    fn options_parse() {
        let o = opts(&[
            "-p", "loopback", "-e", "rdm", "-I", "5", "-S", "4k", "-m", "tagged", "-c", "-v",
            "--json", "-d", "loopback",
        ])
        .unwrap();
        assert_eq!(o.setup.prov, Prov::Loopback);
        assert_eq!(o.setup.role, Role::Threads(CtrlSpec::InMemory));
        assert_eq!(o.ep_type, EpType::Rdm);
        assert_eq!(o.iterations_for(1 << 20), 5);
        assert_eq!(o.sizes, Sizes::One(4096));
        assert!(o.tagged && o.check && o.debug && o.json);
        assert_eq!(opts(&["-S", "all"]).unwrap().sizes, Sizes::All);
        assert_eq!(opts(&["-S", "100"]).unwrap().sizes, Sizes::One(100));
        assert_eq!(opts(&["-e", "msg"]).unwrap().ep_type, EpType::Msg);
        assert_eq!(
            opts(&["127.0.0.1", "-P", "6000"]).unwrap().setup.role,
            Role::Client {
                host: "127.0.0.1".into(),
                port: 6000
            }
        );
        assert_eq!(
            opts(&["-B", "5000"]).unwrap().setup.role,
            Role::Server {
                port: 5000,
                ipv6: false,
                spawned: false
            }
        );
        assert_eq!(
            opts(&["-p", "loopback", "-P", "6000", "-6"])
                .unwrap()
                .setup
                .role,
            Role::Threads(CtrlSpec::Tcp {
                listen: common::DEFAULT_CTRL_PORT,
                connect: Some(6000),
                ipv6: true
            })
        );
        assert_eq!(
            opts(&["-e", "foo"]).unwrap_err().msg,
            "Unknown endpoint : foo"
        );
        assert_eq!(
            opts(&["-m", "rma"]).unwrap_err().msg,
            "Unknown transmit mode : rma"
        );
        assert_eq!(opts(&["-S", "x1"]).unwrap_err().code, Error::Inval.code());
        assert!(opts(&["-I", "0"]).is_err());
        assert!(opts(&["-I", "-3"]).is_err());
        assert!(opts(&["-B", "70000"]).is_err());
    }

    #[test]
    fn loopback_rejects_a_destination_address_clearly() {
        let e = opts(&["-p", "loopback", "127.0.0.1"]).unwrap_err();
        assert_eq!(e.code, Error::NotSupported.code());
        assert!(e.msg.contains("loopback runs both sides in one process"));
    }

    #[test]
    fn msg_endpoints_and_unknown_providers_fail_clearly() {
        let o = opts(&["-e", "msg", "-p", "shm"]).unwrap();
        let e = getinfo_for::<fabric_shm::Shm>(&o).unwrap_err();
        assert_eq!(e.code, Error::NotSupported.code());
        assert!(e.msg.contains("FI_EP_MSG") && e.msg.contains("-e rdm"));
        let e = opts(&["-p", "verbs"]).unwrap_err();
        assert_eq!(e.msg, "fi_getinfo(): ret=-61 (No data available)");
        assert_eq!(e.code, 61);
        let o = opts(&["-S", "1g", "-p", "loopback"]).unwrap();
        let e = getinfo_for::<fabric_loopback::Loopback>(&o).unwrap_err();
        assert_eq!(e.code, Error::MsgSize.code());
    }

    #[test]
    fn sizes_follow_generate_test_sizes() {
        assert_eq!(
            test_sizes(Sizes::Default, MAX_DATA_MSG),
            vec![64, 256, 1024, 4096, 65536, 1 << 20]
        );
        let all = test_sizes(Sizes::All, MAX_DATA_MSG);
        assert_eq!(all.last(), Some(&MAX_DATA_MSG));
        assert_eq!(all.len(), 46);
        assert_eq!(test_sizes(Sizes::One(7), 0), vec![7]);
    }

    #[test]
    fn number_formatting_matches_fi_pingpong() {
        // The header and a line of the real tool (fi_pingpong -p tcp -e rdm, 1.17).
        assert_eq!(
            Perf::header(),
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec"
        );
        let p = Perf {
            size: 64,
            sent: 10,
            acked: 10,
            elapsed: Duration::from_micros(215_072),
        };
        assert_eq!(
            p.line(),
            "64      10      =10      1.2k        0.22s      0.01   10753.60       0.00"
        );
        let p = Perf {
            size: 1 << 20,
            sent: 10,
            acked: 9,
            elapsed: Duration::from_micros(26_803),
        };
        assert_eq!(
            p.line(),
            "1m      10      +1       20m         0.03s    782.43    1340.15       0.00"
        );
    }

    #[test]
    fn json_shape() {
        let o = opts(&["-e", "rdm", "-m", "tagged", "-p", "loopback"]).unwrap();
        let p = Perf {
            size: 256,
            sent: 100,
            acked: 100,
            elapsed: Duration::from_millis(2),
        };
        let v: serde_json::Value = serde_json::from_str(&p.json(&o)).unwrap();
        assert_eq!(v["provider"], "loopback");
        assert_eq!(v["ep_type"], "FI_EP_RDM");
        assert_eq!(v["mode"], "tagged");
        assert_eq!(v["bytes"], 256);
        assert_eq!(
            (v["sent"].as_u64(), v["acked"].as_u64()),
            (Some(100), Some(100))
        );
        assert_eq!(v["total_bytes"], 51_200);
        assert_eq!(v["time_s"].as_f64(), Some(0.002));
        assert_eq!(v["mb_per_sec"].as_f64(), Some(25.6));
        assert_eq!(v["usec_per_xfer"].as_f64(), Some(10.0));
        assert_eq!(v["mxfers_per_sec"].as_f64(), Some(0.1));
        assert_eq!(v.as_object().map(|m| m.len()), Some(11));
    }

    fn run_quiet(o: &Opts) -> Res<(Vec<Perf>, String)> {
        let mut out = Vec::new();
        let r = run(o, &[], &mut out)?;
        Ok((r, String::from_utf8(out).unwrap()))
    }

    #[test]
    fn end_to_end_rdm_msg() {
        let o = opts(&["-p", "loopback", "-e", "rdm", "-I", "100", "-S", "64"]).unwrap();
        let (r, out) = run_quiet(&o).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].size, r[0].sent, r[0].acked), (64, 100, 100));
        let lines: Vec<_> = out.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], Perf::header());
        assert!(
            lines[1].starts_with("64      100     =100     12k     "),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn end_to_end_dgram_tagged_checked_json_over_tcp() {
        let mut o = opts(&["-p", "loopback", "-I", "50", "-m", "tagged", "-c", "--json"]).unwrap();
        // Any free port: the client connects wherever the server listens.
        o.setup.role = Role::Threads(CtrlSpec::Tcp {
            listen: 0,
            connect: None,
            ipv6: false,
        });
        // 8k is above loopback's inject_size: the fi_send path.
        o.sizes = Sizes::One(8 << 10);
        let (r, out) = run_quiet(&o).unwrap();
        assert_eq!((r[0].sent, r[0].acked), (50, 50));
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["ep_type"], "FI_EP_DGRAM");
        assert_eq!(v["acked"], 50);
        // Every `-S all` size up to 4k, zero bytes included, through the inject path.
        o.json = false;
        for size in test_sizes(Sizes::All, 4096) {
            o.sizes = Sizes::One(size);
            let (r, _) = run_quiet(&o).unwrap();
            assert_eq!((r[0].size, r[0].acked), (size, 50));
        }
    }

    #[test]
    fn end_to_end_default_sizes() {
        let o = opts(&["-p", "loopback", "-e", "rdm", "-I", "20", "-c"]).unwrap();
        let (r, out) = run_quiet(&o).unwrap();
        assert_eq!(
            r.iter().map(|p| p.size).collect::<Vec<_>>(),
            common::DEFAULT_SIZES.to_vec()
        );
        assert!(r.iter().all(|p| p.sent == 20 && p.acked == 20));
        assert_eq!(out.lines().count(), 1 + common::DEFAULT_SIZES.len());
    }

    #[test]
    fn end_to_end_shm_in_process() {
        // Inline (4k) and staged (64k) payloads, checked.
        for size in ["4k", "64k"] {
            let o = opts(&[
                "--threads",
                "-e",
                "rdm",
                "-m",
                "tagged",
                "-I",
                "50",
                "-S",
                size,
                "-c",
            ])
            .unwrap();
            let (r, _) = run_quiet(&o).unwrap();
            assert_eq!((r[0].sent, r[0].acked), (50, 50));
        }
    }
}
