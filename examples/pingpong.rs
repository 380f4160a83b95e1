//! A `fi_pingpong`-style latency/bandwidth test over the loopback provider.
//!
//! Two threads of one process each open their own fabric, domain, CQ, AV and endpoint
//! on the default stack (`Stack<Loopback>`: `FI_THREAD_DOMAIN`, manual progress, so no
//! locks anywhere): every object stays on the thread that made it, and only the
//! endpoint names cross between threads (loopback delivers to any endpoint of the
//! process). The "ping" thread sends a message and waits for the "pong" thread to
//! return it; messages up to `inject_size` use `fi_inject`, larger ones `fi_send`.
//!
//! ```text
//! cargo run --release --example pingpong [-I iterations] [-S size]
//! ```
//!
//! Without `-S` a range of sizes is run; without `-I` the iteration count is 10000,
//! reduced for large sizes so each size moves at most about 1 GiB. The columns are
//! those of `fi_pingpong`: `#sent`/`#ack` count iterations, `total` is the bytes moved
//! in both directions, `MB/sec` is 10^6 bytes per second, `usec/xfer` is the time per
//! one-way transfer (half a round trip).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use fabric::prelude::*;
use fabric_loopback::Loopback;

type Net = Stack<Loopback>;

const DEFAULT_ITERS: usize = 10_000;
const DEFAULT_SIZES: [usize; 8] = [1, 64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 1 << 20];
/// Bytes (both directions) a default-iteration run may move per size.
const BYTE_BUDGET: usize = 1 << 30;
const WARMUP: usize = 10;

struct Opts {
    iters: Option<usize>,
    sizes: Vec<usize>,
}

fn parse_size(s: &str) -> Option<usize> {
    let (num, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

fn usage() -> String {
    "usage: pingpong [-I iterations] [-S size[k|m|g]]".to_string()
}

fn parse_args() -> std::result::Result<Opts, String> {
    let mut opts = Opts {
        iters: None,
        sizes: DEFAULT_SIZES.to_vec(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{}", usage()))
        };
        match a.as_str() {
            "-I" => {
                let v = value("-I")?;
                let n = v
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("bad iteration count {v:?}"))?;
                opts.iters = Some(n);
            }
            "-S" => {
                let v = value("-S")?;
                let n = parse_size(&v)
                    .filter(|&n| n > 0 && n <= fabric_loopback::MAX_MSG_SIZE)
                    .ok_or_else(|| {
                        format!(
                            "bad size {v:?} (1 to {} bytes)",
                            fabric_loopback::MAX_MSG_SIZE
                        )
                    })?;
                opts.sizes = vec![n];
            }
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    Ok(opts)
}

fn iterations(opts: &Opts, size: usize) -> usize {
    opts.iters
        .unwrap_or_else(|| (BYTE_BUDGET / (2 * size)).clamp(100, DEFAULT_ITERS))
}

/// One side's objects, all created (and used) on that side's thread.
struct Side {
    _fabric: Fabric<Net>,
    _domain: Domain<Net>,
    _av: AddressVector<Net>,
    cq: Cq<Net>,
    ep: Endpoint<Net>,
    peer: FiAddr,
    inject_size: usize,
    /// Set when the other side gave up, so this one stops waiting for it.
    stop: &'static AtomicBool,
}

impl Side {
    /// Opens the objects, sends this endpoint's name to the peer thread and inserts the
    /// peer's name.
    fn open(
        to_peer: mpsc::Sender<Vec<u8>>,
        from_peer: mpsc::Receiver<Vec<u8>>,
        stop: &'static AtomicBool,
    ) -> fabric::Result<Side> {
        let hints = Hints::new().caps(Caps::MSG).ep_type(EpType::Rdm);
        let info = getinfo::<Net>(Some(&hints))?.remove(0);
        let fabric = Fabric::<Net>::open(&info)?;
        let domain = fabric.domain(&info)?;
        let av = domain.av(&AvAttr::DEFAULT)?;
        let cq = domain.cq(&CqAttr::DEFAULT)?;
        let ep = domain.endpoint(&info)?;
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        to_peer.send(ep.name()).map_err(|_| Error::ConnAborted)?;
        let name = from_peer.recv().map_err(|_| Error::ConnAborted)?;
        let peer = av.insert(&name)?;
        Ok(Side {
            inject_size: info.tx_attr.inject_size,
            _fabric: fabric,
            _domain: domain,
            _av: av,
            cq,
            ep,
            peer,
            stop,
        })
    }

    /// Polls the CQ (each read runs this domain's progress) until one completion
    /// arrives, and returns it; it must carry `flags` (no other completion is expected).
    fn wait(&self, flags: CqFlags) -> fabric::Result<CqTaggedEntry> {
        let mut e = [CqTaggedEntry::default(); 1];
        let mut idle = 0u32;
        loop {
            match self.cq.read(&mut e) {
                Ok(_) if e[0].flags.contains(flags) => return Ok(e[0]),
                Ok(_) => return Err(Error::Other),
                Err(Error::Again) if self.stop.load(Ordering::Relaxed) => {
                    return Err(Error::Canceled)
                }
                Err(Error::Again) => {
                    // Busy-poll for latency, but let the peer thread run when both
                    // share a core.
                    idle += 1;
                    if idle.is_multiple_of(256) {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    fn post_recv(&self, buf: &mut [u8]) -> fabric::Result<()> {
        // SAFETY: callers do not touch `buf` until `wait(RECV)` has returned its
        // completion (every receive posted here completes before the buffer is reused).
        unsafe { self.ep.recv(buf, FiAddr::UNSPEC, Context(1)) }
    }

    fn send(&self, buf: &[u8]) -> fabric::Result<()> {
        if buf.len() <= self.inject_size {
            self.ep.inject(buf, self.peer)
        } else {
            self.ep.send(buf, self.peer, Context(2))?;
            self.wait(CqFlags::SEND).map(drop)
        }
    }
}

fn pattern(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
}

fn check(buf: &[u8], seed: u8) -> fabric::Result<()> {
    let ok = buf
        .iter()
        .enumerate()
        .all(|(i, &b)| b == seed.wrapping_add(i as u8));
    if ok {
        Ok(())
    } else {
        Err(Error::Io)
    }
}

/// The ping side: times `iters` round trips per size and prints one line each.
fn ping(side: Side, opts: &Opts) -> fabric::Result<()> {
    let max = opts.sizes.iter().copied().max().unwrap_or(0);
    let mut tx = vec![0u8; max];
    let mut rx = vec![0u8; max];
    println!(
        "{:<8}{:<8}{:<9}{:<8}{:>8} {:>10}{:>13}{:>13}",
        "bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"
    );
    for &size in &opts.sizes {
        let iters = iterations(opts, size);
        pattern(&mut tx[..size], size as u8);
        let mut start = Instant::now();
        for i in 0..WARMUP + iters {
            if i == WARMUP {
                start = Instant::now();
            }
            side.post_recv(&mut rx[..size])?;
            side.send(&tx[..size])?;
            let e = side.wait(CqFlags::RECV)?;
            if e.len != size {
                return Err(Error::Trunc);
            }
        }
        let elapsed = start.elapsed();
        check(&rx[..size], size as u8)?;
        print_line(size, iters, elapsed.as_secs_f64());
    }
    Ok(())
}

/// The pong side: returns every message it receives.
fn pong(side: Side, opts: &Opts) -> fabric::Result<()> {
    let max = opts.sizes.iter().copied().max().unwrap_or(0);
    let mut buf = vec![0u8; max];
    for &size in &opts.sizes {
        for _ in 0..WARMUP + iterations(opts, size) {
            side.post_recv(&mut buf[..size])?;
            let e = side.wait(CqFlags::RECV)?;
            if e.len != size {
                return Err(Error::Trunc);
            }
            side.send(&buf[..size])?;
        }
        check(&buf[..size], size as u8)?;
    }
    Ok(())
}

/// `size_str` of fabtests: binary magnitudes, one decimal below 10.
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

/// `cnt_str` of fabtests: decimal magnitudes.
fn cnt_str(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{}b", n / 1_000_000_000),
        n if n >= 1_000_000 => format!("{}m", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

fn print_line(size: usize, iters: usize, secs: f64) {
    const XFERS_PER_ITER: f64 = 2.0;
    let bytes = (iters * size) as f64 * XFERS_PER_ITER;
    let usec = secs * 1e6;
    let usec_per_xfer = usec / iters as f64 / XFERS_PER_ITER;
    println!(
        "{:<8}{:<8}={:<8}{:<8}{:>7.2}s{:>10.2}{:>11.2}{:>11.2}",
        size_str(size as u64),
        cnt_str(iters as u64),
        cnt_str(iters as u64),
        size_str(bytes as u64),
        secs,
        bytes / usec,
        usec_per_xfer,
        1.0 / usec_per_xfer,
    );
}

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    static STOP: AtomicBool = AtomicBool::new(false);
    let (a_tx, a_rx) = mpsc::channel();
    let (b_tx, b_rx) = mpsc::channel();
    let result = std::thread::scope(|s| {
        let opts = &opts;
        let pong = s.spawn(move || {
            let r = Side::open(b_tx, a_rx, &STOP).and_then(|side| pong(side, opts));
            STOP.store(true, Ordering::Relaxed);
            r
        });
        let ping = Side::open(a_tx, b_rx, &STOP).and_then(|side| ping(side, opts));
        STOP.store(true, Ordering::Relaxed);
        let pong = pong.join().unwrap_or(Err(Error::Other));
        ping.and(pong)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong failed: {e}");
            ExitCode::FAILURE
        }
    }
}
