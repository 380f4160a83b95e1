//! `pingpong`: the `fi_pingpong` analogue, with its options, protocol and output.
//!
//! ```text
//! cargo run --release --example pingpong                       # loopback, both sides
//! cargo run --release --example pingpong -- -e rdm -m tagged -S all -c
//! cargo run --release --example pingpong -- -I 1000 -S 4096 --json
//! ```
//!
//! Like `fi_pingpong`, a server (no `<srv_addr>`) and a client exchange their endpoint
//! names over a control stream, synchronize before each size, run `-I` round trips
//! (client sends, server returns), compare receive counts and finish with a `fin`
//! message. The client prints one line per size with `fi_pingpong`'s columns: `#sent`
//! and `#ack` are iterations sent and messages received back, `total` the bytes moved
//! in both directions, `MB/sec` 10^6 bytes per second, `usec/xfer` the time of one
//! one-way transfer (half a round trip).
//!
//! The loopback provider (the only one this build has) delivers within one process,
//! so both sides run here, on two threads that each open their own fabric, domain,
//! CQs, AV and endpoint on `Stack<Loopback>` (`FI_THREAD_DOMAIN`, manual progress:
//! no locks). Their control stream is an in-memory socket pair, or, when `-B`/`-P` is
//! given, a TCP connection on localhost as `fi_pingpong` uses between hosts (`-B` is
//! the server's listening port, `-P` the port the client connects to, default `-B`).
//! A `<srv_addr>` is rejected: loopback runs both sides in one process.
//!
//! Differences from `fi_pingpong`: without `-I` the iteration count depends on the size
//! (10000, 1000 from 64 KiB, 100 from 1 MiB: the `size_to_count` of earlier versions)
//! instead of 10, so the default run gives meaningful numbers in about a second;
//! `-S` also takes `k`/`m`/`g` suffixes; `--json` prints one JSON object per size
//! instead of the table. `-c` checks data as `fi_pingpong -c` does; `-v` prints debug
//! output to stderr. `-e msg` fails with `FI_ENOSYS`: MSG endpoints come with tcp.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use fabric::info::ep_type_name;
use fabric::prelude::*;
use fabric_loopback::Loopback;

type Net = Stack<Loopback>;

/// `fi_pingpong`'s default control port.
const DEFAULT_CTRL_PORT: u16 = 47592;
/// Largest message of an `-S all` or default run (`PP_MAX_DATA_MSG`: 4 MiB + 2 MiB).
const MAX_DATA_MSG: usize = (1 << 22) + (1 << 21);
/// Smallest receive buffer (`PP_MAX_CTRL_MSG`): the `fin` message must fit.
const MIN_RX: usize = 64;
/// The default sizes (`fi_pingpong` without `-S`).
const DEFAULT_SIZES: [usize; 6] = [64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20];
/// Tag of every message with `-m tagged`.
const TAG: u64 = 0x7070;
/// `fi_pingpong`'s data-check alphabet and per-message rotation.
const INTEG_ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const INTEG_SEED: usize = 7;
/// Control messages, as `fi_pingpong` sends them (with the C string terminator).
const SYNC_Q: &[u8] = b"q\0";
const SYNC_A: &[u8] = b"a\0";
const CNT_OK: &[u8] = b"cnt ok\0";
const CNT_LEN: usize = 10;
const FIN: &[u8] = b"fin\0";

/// `fi_pingpong`'s options.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "pingpong",
    about = "Ping pong client and server (fi_pingpong analogue)",
    override_usage = "pingpong [OPTIONS]\t\tstart server\n       pingpong [OPTIONS] <srv_addr>\tconnect to server"
)]
struct Args {
    /// source control port number (server: 47592, client: auto)
    #[arg(short = 'B', value_name = "src_port")]
    src_port: Option<u16>,
    /// destination control port number (client: 47592)
    #[arg(short = 'P', value_name = "dst_port")]
    dst_port: Option<u16>,
    /// domain name
    #[arg(short = 'd', value_name = "domain")]
    domain: Option<String>,
    /// specific provider name eg loopback
    #[arg(short = 'p', value_name = "provider")]
    provider: Option<String>,
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
    /// use IPv6 address (for the TCP control connection)
    #[arg(short = '6')]
    ipv6: bool,
    /// print one JSON object per size instead of the table
    #[arg(long = "json")]
    json: bool,
    /// server address: run as client
    srv_addr: Option<String>,
}

/// Which sizes to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sizes {
    /// 64, 256, 1k, 4k, 64k, 1m.
    Default,
    /// 0, 1, 2, 3, 4, 6, 8, 12, ... (powers of two and one and a half times them).
    All,
    /// One size.
    One(usize),
}

/// How the two sides talk out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CtrlSpec {
    /// A connected socket pair in this process.
    InMemory,
    /// TCP on localhost: the server listens on `listen` (0: any free port), the client
    /// connects to `connect` (`None`: wherever the server listens).
    Tcp {
        listen: u16,
        connect: Option<u16>,
        ipv6: bool,
    },
}

/// Validated options.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Opts {
    provider: Option<String>,
    domain: Option<String>,
    ep_type: EpType,
    tagged: bool,
    iterations: Option<usize>,
    sizes: Sizes,
    check: bool,
    debug: bool,
    json: bool,
    ctrl: CtrlSpec,
}

/// A failure: message for stderr, and the `FI_E*` code that becomes the exit status.
#[derive(Debug, PartialEq, Eq)]
struct Failure {
    code: i32,
    msg: String,
}

impl Failure {
    fn new(err: Error, msg: impl Into<String>) -> Self {
        Failure {
            code: err.code(),
            msg: msg.into(),
        }
    }

    /// A failed call, printed like `fi_pingpong`'s `PP_PRINTERR`.
    fn call(call: &str, err: Error) -> Self {
        Failure::new(
            err,
            format!("{call}(): ret=-{} ({})", err.code(), err.as_str()),
        )
    }

    fn usage(msg: impl Into<String>) -> Self {
        Failure::new(Error::Inval, msg)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        let msg = format!("control connection: {e}");
        Failure::new(Error::from(e), msg)
    }
}

type Res<T> = std::result::Result<T, Failure>;

/// Adds the failing call's name to a library error.
trait Call<T> {
    fn call(self, name: &str) -> Res<T>;
}

impl<T> Call<T> for fabric::Result<T> {
    fn call(self, name: &str) -> Res<T> {
        self.map_err(|e| Failure::call(name, e))
    }
}

/// `-S`: a byte count with an optional `k`/`m`/`g` suffix, or `all`.
fn parse_size(s: &str) -> Res<Sizes> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Sizes::All);
    }
    let bad = || Failure::usage(format!("Error parsing \"{s}\": Invalid argument"));
    let (num, shift) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: usize = num.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).map(Sizes::One).ok_or_else(bad)
}

fn parse_ep_type(s: &str) -> Res<EpType> {
    match s.to_ascii_lowercase().as_str() {
        "msg" => Ok(EpType::Msg),
        "rdm" => Ok(EpType::Rdm),
        "dgram" => Ok(EpType::Dgram),
        _ => Err(Failure::usage(format!("Unknown endpoint : {s}"))),
    }
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
        if let Some(addr) = &a.srv_addr {
            return Err(Failure::new(
                Error::NotSupported,
                format!(
                    "cannot connect to {addr}: loopback runs both sides in one process; \
                     run without <srv_addr>"
                ),
            ));
        }
        let ctrl = match (a.src_port, a.dst_port) {
            (None, None) => CtrlSpec::InMemory,
            (listen, connect) => CtrlSpec::Tcp {
                listen: listen.filter(|&p| p != 0).unwrap_or(DEFAULT_CTRL_PORT),
                connect: connect.filter(|&p| p != 0),
                ipv6: a.ipv6,
            },
        };
        if a.iterations == Some(0) {
            return Err(Failure::usage("-I: the iteration count must be at least 1"));
        }
        Ok(Opts {
            provider: a.provider.clone(),
            domain: a.domain.clone(),
            ep_type: parse_ep_type(&a.ep_type)?,
            tagged: parse_mode(&a.mode)?,
            iterations: a.iterations,
            sizes: a.size.as_deref().map_or(Ok(Sizes::Default), parse_size)?,
            check: a.check,
            debug: a.debug,
            json: a.json,
            ctrl,
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

/// The sizes to run given the largest message (`generate_test_sizes`).
fn test_sizes(sizes: Sizes, tx_size: usize) -> Vec<usize> {
    match sizes {
        Sizes::One(n) => vec![n],
        Sizes::Default => DEFAULT_SIZES
            .into_iter()
            .take_while(|&s| s <= tx_size)
            .collect(),
        Sizes::All => {
            let mut v = vec![0];
            if tx_size >= 1 {
                v.push(1);
            }
            for i in 1..usize::BITS - 1 {
                let pow = 1usize << i;
                if pow > tx_size {
                    break;
                }
                v.push(pow);
                let half_up = pow + pow / 2;
                if half_up > tx_size {
                    break;
                }
                v.push(half_up);
            }
            v
        }
    }
}

/// `size_str` of `fi_pingpong`: binary magnitudes, one decimal below 10.
fn size_str(n: u64) -> String {
    let (base, mag) = match n {
        n if n >= 1 << 30 => (1u64 << 30, "g"),
        n if n >= 1 << 20 => (1 << 20, "m"),
        n if n >= 1 << 10 => (1 << 10, "k"),
        _ => (1, ""),
    };
    let frac = if n / base < 10 {
        (n % base) * 10 / base
    } else {
        0
    };
    if frac != 0 {
        format!("{}.{frac}{mag}", n / base)
    } else {
        format!("{}{mag}", n / base)
    }
}

/// `cnt_str` of `fi_pingpong`: decimal magnitudes, truncated.
fn cnt_str(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{}b", n / 1_000_000_000),
        n if n >= 1_000_000 => format!("{}m", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
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
    fn json(&self, info: &Info, opts: &Opts) -> String {
        serde_json::json!({
            "provider": info.fabric_attr.prov_name,
            "ep_type": ep_type_name(info.ep_attr.ep_type),
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

/// `pp_fill_buf`/`pp_check_buf`: message `iter` starts at alphabet index
/// `iter * 7 mod 62` and runs through the alphabet, wrapping. Yields the pattern as
/// `(offset, alphabet slice)` runs so filling and checking are `memcpy`/`memcmp`.
fn pattern_runs(len: usize, iter: u64) -> impl Iterator<Item = (usize, &'static [u8])> {
    let n = INTEG_ALPHABET.len();
    let start = (iter % n as u64) as usize * INTEG_SEED % n;
    let mut off = 0;
    let mut k = start;
    std::iter::from_fn(move || {
        if off >= len {
            return None;
        }
        let run = &INTEG_ALPHABET[k..(k + len - off).min(n)];
        let at = off;
        off += run.len();
        k = 0;
        Some((at, run))
    })
}

fn fill(buf: &mut [u8], iter: u64) {
    for (at, run) in pattern_runs(buf.len(), iter) {
        buf[at..at + run.len()].copy_from_slice(run);
    }
}

/// The first differing byte, if any.
fn check(buf: &[u8], iter: u64) -> Option<usize> {
    pattern_runs(buf.len(), iter).find_map(|(at, run)| {
        let got = &buf[at..at + run.len()];
        (got != run).then(|| at + got.iter().zip(run).take_while(|(a, b)| a == b).count())
    })
}

/// The control stream: `fi_pingpong`'s out-of-band protocol over any byte stream.
struct Ctrl<S> {
    s: S,
}

impl<S: Read + Write> Ctrl<S> {
    fn send(&mut self, b: &[u8]) -> Res<()> {
        self.s.write_all(b)?;
        Ok(())
    }

    fn recv_exact(&mut self, n: usize) -> Res<Vec<u8>> {
        let mut b = vec![0; n];
        self.s.read_exact(&mut b).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Failure::new(
                    Error::ConnAborted,
                    "ctrl/read: no data or remote connection closed",
                )
            } else {
                Failure::from(e)
            }
        })?;
        Ok(b)
    }

    fn expect(&mut self, want: &[u8], what: &str) -> Res<()> {
        let got = self.recv_exact(want.len())?;
        if got == want {
            Ok(())
        } else {
            Err(Failure::new(
                Error::Io,
                format!("{what}: unexpected control message {got:?}"),
            ))
        }
    }

    /// `pp_send_name`: big-endian length, then the name.
    fn send_name(&mut self, name: &[u8]) -> Res<()> {
        let len = u32::try_from(name.len()).map_err(|_| Failure::new(Error::MsgSize, "name"))?;
        self.send(&len.to_be_bytes())?;
        self.send(name)
    }

    fn recv_name(&mut self) -> Res<Vec<u8>> {
        let len = u32::from_be_bytes(self.recv_exact(4)?.try_into().unwrap_or_default());
        if len as usize > MIN_RX {
            return Err(Failure::new(
                Error::MsgSize,
                "peer name longer than 64 bytes",
            ));
        }
        self.recv_exact(len as usize)
    }

    /// `pp_ctrl_sync`: the client asks, the server answers.
    fn sync(&mut self, client: bool) -> Res<()> {
        if client {
            self.send(SYNC_Q)?;
            self.expect(SYNC_A, "sync")
        } else {
            self.expect(SYNC_Q, "sync")?;
            self.send(SYNC_A)
        }
    }

    /// `pp_ctrl_txrx_msg_count`: the client sends its receive count as 10 bytes of
    /// NUL-padded decimal; the server acknowledges. Returns the client's count.
    fn exchange_count(&mut self, client: bool, count: u64) -> Res<u64> {
        if client {
            let mut b = [0u8; CNT_LEN];
            let digits = count.to_string();
            let n = digits.len().min(CNT_LEN);
            b[..n].copy_from_slice(&digits.as_bytes()[..n]);
            self.send(&b)?;
            self.expect(CNT_OK, "count")?;
            Ok(count)
        } else {
            let b = self.recv_exact(CNT_LEN)?;
            let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
            let n = std::str::from_utf8(&b[..end])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Failure::new(Error::Io, "count: not a number"))?;
            self.send(CNT_OK)?;
            Ok(n)
        }
    }
}

/// One side's objects, all made and used on that side's thread.
///
/// Field order is drop order: the endpoint goes first, cancelling the receive that is
/// always posted into `rx`, before the buffers are freed.
struct Side<'o> {
    ep: Endpoint<Net>,
    txcq: Cq<Net>,
    rxcq: Cq<Net>,
    av: AddressVector<Net>,
    domain: Domain<Net>,
    _fabric: Fabric<Net>,
    peer: FiAddr,
    inject_size: usize,
    opts: &'o Opts,
    /// Set when either side failed, so the other stops waiting for it.
    stop: &'o AtomicBool,
    /// Messages received during timed runs (`cnt_ack_msg`).
    acked: u64,
    /// Data messages sent and received, numbering the `-c` patterns.
    tx_seq: u64,
    rx_seq: u64,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl<'o> Side<'o> {
    /// Opens the objects, posts the first receive and exchanges names: the client
    /// receives the server's name first, as in `fi_pingpong`.
    fn open<S: Read + Write>(
        info: &Info,
        opts: &'o Opts,
        stop: &'o AtomicBool,
        ctrl: &mut Ctrl<S>,
        client: bool,
    ) -> Res<Side<'o>> {
        let peer_name = if client {
            Some(ctrl.recv_name()?)
        } else {
            None
        };
        let fabric = Fabric::<Net>::open(info).call("fi_fabric")?;
        let domain = fabric.domain(info).call("fi_domain")?;
        let txcq = domain
            .cq(&CqAttr {
                size: info.tx_attr.size,
                ..CqAttr::DEFAULT
            })
            .call("fi_cq_open")?;
        let rxcq = domain
            .cq(&CqAttr {
                size: info.rx_attr.size,
                ..CqAttr::DEFAULT
            })
            .call("fi_cq_open")?;
        let av = domain.av(&AvAttr::DEFAULT).call("fi_av_open")?;
        let ep = domain.endpoint(info).call("fi_endpoint")?;
        ep.bind_av(&av).call("fi_ep_bind")?;
        ep.bind_cq(&txcq, BindFlags::TRANSMIT).call("fi_ep_bind")?;
        ep.bind_cq(&rxcq, BindFlags::RECV).call("fi_ep_bind")?;
        ep.enable().call("fi_enable")?;
        let max = tx_size(info, opts);
        let mut side = Side {
            ep,
            txcq,
            rxcq,
            av,
            domain,
            _fabric: fabric,
            peer: FiAddr::UNSPEC,
            inject_size: info.tx_attr.inject_size,
            opts,
            stop,
            acked: 0,
            tx_seq: 0,
            rx_seq: 0,
            tx: vec![0; max.max(MIN_RX)],
            rx: vec![0; max.max(MIN_RX)],
        };
        side.post_rx()?;
        ctrl.send_name(&side.ep.name())?;
        let peer_name = match peer_name {
            Some(n) => n,
            None => ctrl.recv_name()?,
        };
        side.peer = side.av.insert(&peer_name).call("fi_av_insert")?;
        opts.debug(format_args!(
            "{}: endpoint {} talks to {}",
            if client { "CLIENT" } else { "SERVER" },
            side.av.straddr(&side.ep.name()),
            side.av.straddr(&peer_name)
        ));
        Ok(side)
    }

    /// Posts the whole receive buffer (as `fi_pingpong` does: one size fits all).
    fn post_rx(&mut self) -> Res<()> {
        let buf = &mut self.rx[..];
        // SAFETY: `rx` is only read after this receive's completion has been taken
        // from the CQ (`rx_done`), and it outlives the endpoint (field order), whose
        // drop cancels a receive still posted.
        let r = unsafe {
            if self.opts.tagged {
                self.ep.trecv(buf, FiAddr::UNSPEC, TAG, 0, Context(1))
            } else {
                self.ep.recv(buf, FiAddr::UNSPEC, Context(1))
            }
        };
        r.call(if self.opts.tagged {
            "fi_trecv"
        } else {
            "fi_recv"
        })
    }

    /// Reads one completion from `cq`, busy-polling (each read runs progress).
    fn wait(&self, cq: &Cq<Net>, what: &str) -> Res<CqTaggedEntry> {
        let mut e = [CqTaggedEntry::default(); 1];
        let mut idle = 0u32;
        loop {
            match cq.read(&mut e) {
                Ok(n) if n > 0 => return Ok(e[0]),
                Ok(_) | Err(Error::Again) => {}
                Err(Error::Avail) => {
                    let err = cq.read_err().call("fi_cq_readerr")?;
                    return Err(Failure::new(
                        err.err,
                        format!("{what} completion error: {}", cq.strerror(&err)),
                    ));
                }
                Err(err) => return Err(Failure::call("fi_cq_read", err)),
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(Failure::new(Error::Canceled, "peer side stopped"));
            }
            // Busy-poll for latency, but let the peer thread run when both share a core.
            idle = idle.wrapping_add(1);
            if idle.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// `pp_tx`/`pp_inject`: sends `size` bytes (a `-c` pattern while timing).
    fn tx(&mut self, size: usize, data: bool) -> Res<()> {
        if data && self.opts.check {
            fill(&mut self.tx[..size], self.tx_seq);
        }
        if data {
            self.tx_seq += 1;
        }
        let buf = &self.tx[..size];
        let (peer, tagged) = (self.peer, self.opts.tagged);
        if size <= self.inject_size {
            loop {
                let r = if tagged {
                    self.ep.tinject(buf, peer, TAG)
                } else {
                    self.ep.inject(buf, peer)
                };
                match r {
                    Err(Error::Again) if !self.stop.load(Ordering::Relaxed) => {
                        // The peer's inbox is full: drive our own progress and retry.
                        self.domain.progress();
                    }
                    r => return r.call(if tagged { "fi_tinject" } else { "fi_inject" }),
                }
            }
        }
        let r = if tagged {
            self.ep.tsend(buf, peer, TAG, Context(2))
        } else {
            self.ep.send(buf, peer, Context(2))
        };
        r.call(if tagged { "fi_tsend" } else { "fi_send" })?;
        self.wait(&self.txcq, "transmit").map(drop)
    }

    /// `pp_rx`: takes one receive completion, checks it, and posts the next receive
    /// before anything else is sent (so a DGRAM peer always finds one posted).
    fn rx(&mut self, size: usize, data: bool) -> Res<()> {
        let e = self.wait(&self.rxcq, "receive")?;
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
        self.post_rx()?;
        if data {
            self.acked += 1;
        }
        Ok(())
    }

    /// `pingpong()` for one size: returns the client's result, `None` on the server.
    fn run_size<S: Read + Write>(
        &mut self,
        ctrl: &mut Ctrl<S>,
        client: bool,
        size: usize,
    ) -> Res<Option<Perf>> {
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

/// `pp_getinfo`: the default stack's info for the options.
fn getinfo_for(opts: &Opts) -> Res<Info> {
    if opts.ep_type == EpType::Msg {
        return Err(Failure::new(
            Error::NotSupported,
            format!(
                "fi_endpoint(): ret=-{} ({}): FI_EP_MSG endpoints are not supported by \
                 the loopback provider (they come with tcp); use -e rdm or -e dgram",
                Error::NotSupported.code(),
                Error::NotSupported.as_str()
            ),
        ));
    }
    let mut hints = Hints::new()
        .caps(if opts.tagged { Caps::TAGGED } else { Caps::MSG })
        .ep_type(opts.ep_type);
    // Hints hold `&'static str` names; one per run, so leaking is bounded.
    if let Some(p) = &opts.provider {
        hints = hints.prov_name(Box::leak(p.clone().into_boxed_str()));
    }
    if let Some(d) = &opts.domain {
        hints = hints.domain_name(Box::leak(d.clone().into_boxed_str()));
    }
    let info = getinfo::<Net>(Some(&hints))
        .call("fi_getinfo")?
        .into_iter()
        .next()
        .ok_or_else(|| Failure::call("fi_getinfo", Error::NoData))?;
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

/// One side from start to end: open, every size, finalize. The client hands each
/// size's result to `report`.
fn side_main<S: Read + Write>(
    info: &Info,
    opts: &Opts,
    stop: &AtomicBool,
    stream: S,
    client: bool,
    report: &mut dyn FnMut(Perf) -> Res<()>,
) -> Res<()> {
    let mut ctrl = Ctrl { s: stream };
    let mut side = Side::open(info, opts, stop, &mut ctrl, client)?;
    for size in test_sizes(opts.sizes, tx_size(info, opts)) {
        opts.debug(format_args!("size {size}"));
        if let Some(p) = side.run_size(&mut ctrl, client, size)? {
            report(p)?;
        }
    }
    side.finalize()
}

/// Runs server and client in this process (two threads, each with its own objects)
/// over the control stream `opts.ctrl` selects; `report` gets the client's results.
fn run_pair(opts: &Opts, info: &Info, report: &mut dyn FnMut(Perf) -> Res<()>) -> Res<()> {
    let stop = AtomicBool::new(false);
    let stop = &stop;
    let (server_stream, client_stream): (Box<dyn ReadWrite>, Box<dyn ReadWrite>) = match opts.ctrl {
        CtrlSpec::InMemory => {
            let (a, b) = UnixStream::pair()?;
            (Box::new(a), Box::new(b))
        }
        CtrlSpec::Tcp {
            listen,
            connect,
            ipv6,
        } => {
            let any = |port| -> SocketAddr {
                if ipv6 {
                    (Ipv6Addr::LOCALHOST, port).into()
                } else {
                    (Ipv4Addr::LOCALHOST, port).into()
                }
            };
            let listener = TcpListener::bind(any(listen)).map_err(|e| {
                let msg = format!("bind(): control port {listen}: {e}");
                Failure::new(Error::from(e), msg)
            })?;
            let port = connect.unwrap_or(listener.local_addr()?.port());
            opts.debug(format_args!("SERVER: waiting for connection on {listen}"));
            let client = TcpStream::connect(any(port)).map_err(|e| {
                let msg = format!("failed to connect to control port {port}: {e}");
                Failure::new(Error::from(e), msg)
            })?;
            let (server, _) = listener.accept()?;
            server.set_nodelay(true)?;
            client.set_nodelay(true)?;
            (Box::new(server), Box::new(client))
        }
    };
    std::thread::scope(|s| {
        let server = s.spawn(move || {
            let r = side_main(info, opts, stop, server_stream, false, &mut |_| Ok(()));
            if r.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            r
        });
        let client = side_main(info, opts, stop, client_stream, true, report);
        if client.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let server = server
            .join()
            .unwrap_or_else(|_| Err(Failure::new(Error::Other, "server thread panicked")));
        // The first real error wins over the other side's "peer stopped".
        match (client, server) {
            (Ok(()), r) | (r, Ok(())) => r,
            (Err(c), Err(s)) if c.code == Error::Canceled.code() => Err(s),
            (Err(c), _) => Err(c),
        }
    })
}

/// A control stream of either kind, movable to the side's thread.
trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

/// The whole tool: prints the table (or JSON lines) to `out`.
fn run(opts: &Opts, out: &mut dyn Write) -> Res<Vec<Perf>> {
    let info = getinfo_for(opts)?;
    opts.debug(format_args!(
        "Running pingpong test with the {} endpoint through a {} provider",
        ep_type_name(info.ep_attr.ep_type),
        info.fabric_attr.prov_name
    ));
    let mut results = Vec::new();
    let mut header = !opts.json;
    run_pair(opts, &info, &mut |p: Perf| {
        let text = if opts.json {
            p.json(&info, opts)
        } else if std::mem::take(&mut header) {
            format!("{}\n{}", Perf::header(), p.line())
        } else {
            p.line()
        };
        // A closed stdout (`| head`) ends the run instead of running it to the end.
        writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(|e| Failure::new(Error::from(e), "writing the results failed"))?;
        results.push(p);
        Ok(())
    })?;
    Ok(results)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = Opts::from_args(&args).and_then(|o| run(&o, &mut std::io::stdout()));
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("{}", f.msg);
            ExitCode::from(u8::try_from(f.code & 0xff).unwrap_or(1).max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(cli: &[&str]) -> Res<Opts> {
        let a = Args::try_parse_from(std::iter::once("pingpong").chain(cli.iter().copied()))
            .map_err(|e| Failure::usage(e.to_string()))?;
        Opts::from_args(&a)
    }

    #[test]
    fn defaults_match_fi_pingpong() {
        let o = opts(&[]).unwrap();
        assert_eq!(o.ep_type, EpType::Dgram);
        assert!(!o.tagged && !o.check && !o.json && !o.debug);
        assert_eq!(o.sizes, Sizes::Default);
        assert_eq!(o.ctrl, CtrlSpec::InMemory);
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
        assert_eq!(o.provider.as_deref(), Some("loopback"));
        assert_eq!(o.ep_type, EpType::Rdm);
        assert_eq!(o.iterations_for(1 << 20), 5);
        assert_eq!(o.sizes, Sizes::One(4096));
        assert!(o.tagged && o.check && o.debug && o.json);
        assert_eq!(opts(&["-S", "all"]).unwrap().sizes, Sizes::All);
        assert_eq!(opts(&["-S", "100"]).unwrap().sizes, Sizes::One(100));
        assert_eq!(opts(&["-e", "msg"]).unwrap().ep_type, EpType::Msg);
        assert_eq!(
            opts(&["-B", "5000"]).unwrap().ctrl,
            CtrlSpec::Tcp {
                listen: 5000,
                connect: None,
                ipv6: false
            }
        );
        assert_eq!(
            opts(&["-P", "6000", "-6"]).unwrap().ctrl,
            CtrlSpec::Tcp {
                listen: DEFAULT_CTRL_PORT,
                connect: Some(6000),
                ipv6: true
            }
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
    fn destination_address_is_rejected_clearly() {
        let e = opts(&["127.0.0.1"]).unwrap_err();
        assert_eq!(e.code, Error::NotSupported.code());
        assert!(e.msg.contains("loopback runs both sides in one process"));
    }

    #[test]
    fn msg_endpoints_and_unknown_providers_fail_clearly() {
        let e = getinfo_for(&opts(&["-e", "msg"]).unwrap()).unwrap_err();
        assert_eq!(e.code, Error::NotSupported.code());
        assert!(e.msg.contains("FI_EP_MSG") && e.msg.contains("tcp"));
        let e = getinfo_for(&opts(&["-p", "verbs"]).unwrap()).unwrap_err();
        assert_eq!(e.msg, "fi_getinfo(): ret=-61 (No data available)");
        assert_eq!(e.code, 61);
        let e = getinfo_for(&opts(&["-S", "1g"]).unwrap()).unwrap_err();
        assert_eq!(e.code, Error::MsgSize.code());
    }

    #[test]
    fn sizes_follow_generate_test_sizes() {
        assert_eq!(
            test_sizes(Sizes::Default, MAX_DATA_MSG),
            vec![64, 256, 1024, 4096, 65536, 1 << 20]
        );
        assert_eq!(test_sizes(Sizes::Default, 4096), vec![64, 256, 1024, 4096]);
        assert_eq!(test_sizes(Sizes::All, 13), vec![0, 1, 2, 3, 4, 6, 8, 12]);
        let all = test_sizes(Sizes::All, MAX_DATA_MSG);
        assert_eq!(all.last(), Some(&MAX_DATA_MSG));
        assert_eq!(all.len(), 46);
        assert_eq!(test_sizes(Sizes::One(7), 0), vec![7]);
    }

    #[test]
    fn number_formatting_matches_fi_pingpong() {
        assert_eq!(size_str(64), "64");
        assert_eq!(size_str(1024), "1k");
        assert_eq!(size_str(1280), "1.2k");
        assert_eq!(size_str(5 * 1024), "5k");
        assert_eq!(size_str(20 * 1024), "20k");
        assert_eq!(size_str(1280 << 10), "1.2m");
        assert_eq!(size_str(3 << 30), "3g");
        assert_eq!(cnt_str(10), "10");
        assert_eq!(cnt_str(10_000), "10k");
        assert_eq!(cnt_str(2_500_000), "2m");
        assert_eq!(cnt_str(7_000_000_000), "7b");
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
        let o = opts(&["-e", "rdm", "-m", "tagged"]).unwrap();
        let info = getinfo_for(&o).unwrap();
        let p = Perf {
            size: 256,
            sent: 100,
            acked: 100,
            elapsed: Duration::from_millis(2),
        };
        let v: serde_json::Value = serde_json::from_str(&p.json(&info, &o)).unwrap();
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

    #[test]
    fn integrity_pattern_matches_pp_fill_buf() {
        let mut b = [0u8; 70];
        fill(&mut b, 0);
        assert_eq!(&b[..4], b"0123");
        assert_eq!(b[62], b'0');
        fill(&mut b, 1);
        assert_eq!(&b[..3], b"789");
        assert_eq!(check(&b, 1), None);
        b[5] ^= 1;
        assert_eq!(check(&b, 1), Some(5));
        assert_eq!(check(&b, 2), Some(0));
    }

    #[test]
    fn control_protocol_round_trips() {
        let (a, b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = Ctrl { s: b };
            let name = s.recv_name().unwrap();
            s.sync(false).unwrap();
            let n = s.exchange_count(false, 0).unwrap();
            (name, n)
        });
        let mut c = Ctrl { s: a };
        c.send_name(b"12345678").unwrap();
        c.sync(true).unwrap();
        assert_eq!(c.exchange_count(true, 4242).unwrap(), 4242);
        assert_eq!(t.join().unwrap(), (b"12345678".to_vec(), 4242));
    }

    fn run_quiet(o: &Opts) -> Res<(Vec<Perf>, String)> {
        let mut out = Vec::new();
        let r = run(o, &mut out)?;
        Ok((r, String::from_utf8(out).unwrap()))
    }

    #[test]
    fn end_to_end_rdm_msg() {
        let (r, out) = run_quiet(&opts(&["-e", "rdm", "-I", "100", "-S", "64"]).unwrap()).unwrap();
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
        let mut o = opts(&["-I", "50", "-m", "tagged", "-c", "--json"]).unwrap();
        // Any free port: the client connects wherever the server listens.
        o.ctrl = CtrlSpec::Tcp {
            listen: 0,
            connect: None,
            ipv6: false,
        };
        // 8k is above inject_size: the fi_send path.
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
        let o = opts(&["-e", "rdm", "-I", "20", "-c"]).unwrap();
        let (r, out) = run_quiet(&o).unwrap();
        assert_eq!(
            r.iter().map(|p| p.size).collect::<Vec<_>>(),
            DEFAULT_SIZES.to_vec()
        );
        assert!(r.iter().all(|p| p.sent == 20 && p.acked == 20));
        assert_eq!(out.lines().count(), 1 + DEFAULT_SIZES.len());
    }
}
