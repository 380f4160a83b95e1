//! How the shm provider scales with the number of peers of one endpoint: N sender
//! processes against one receiver (this process).
//!
//! - `rate`: every sender injects `--count` 8-byte tagged messages as fast as it can;
//!   the receiver reports the messages per second it took in all.
//! - `lat`: every sender ping-pongs 8-byte tagged messages with the receiver, all at
//!   once; each reports the median one-way time (half a round trip), and the receiver
//!   the median over senders.
//! - `idle`: the senders each send one message (so each holds a channel in the
//!   receiver's region) and then sleep; the receiver reports the time of one empty
//!   completion-queue read, which polls every channel, against its time with no peer,
//!   and what the attached peers cost it: descriptors, mappings of the provider's
//!   files, and shared memory resident in its mappings, before and after.
//!
//! One JSON line per run on stdout:
//!
//! ```text
//! cargo run --release --example shm_scaling -- --mode rate --senders 16
//! cargo run --release --example shm_scaling -- --mode idle --senders 256
//! ```
//!
//! `benches/shm_scaling.sh` runs the series and draws the plot.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use fabric::prelude::*;
use fabric_shm::Shm;

type S = Stack<Shm>;

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Messages per second from all senders together.
    Rate,
    /// One-way latency while every sender ping-pongs at once.
    Lat,
    /// The receiver's empty poll with idle peers attached.
    Idle,
}

#[derive(Parser, Debug)]
#[command(about = "N shm senders to one receiver: rate, latency, poll cost")]
struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value = "rate")]
    mode: Mode,
    /// Sender processes.
    #[arg(long, default_value_t = 1)]
    senders: usize,
    /// Messages per sender (rate), round trips per sender (lat), or empty polls (idle).
    #[arg(long, default_value_t = 0)]
    count: u64,
}

/// Tags: the first message of a sender carries its name; then data, pings and pongs.
const HELLO: u64 = 1 << 60;
const GO: u64 = 2 << 60;
const DATA: u64 = 3 << 60;
const PING: u64 = 4 << 60;
const PONG: u64 = 5 << 60;
/// Receives the receiver keeps posted.
const WINDOW: usize = 512;

struct Node {
    ep: Endpoint<S>,
    cq: Cq<S>,
    av: AddressVector<S>,
    domain: Domain<S>,
    _fabric: Fabric<S>,
}

fn node() -> Node {
    let hints = Hints::new()
        .caps(Caps::MSG | Caps::TAGGED)
        .ep_type(EpType::Rdm);
    let info = getinfo::<S>(Some(&hints)).expect("getinfo").remove(0);
    let fabric = Fabric::<S>::open(&info).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let cq = domain.cq(&CqAttr::DEFAULT).expect("cq");
    let av = domain.av(&AvAttr::DEFAULT).expect("av");
    let ep = domain.endpoint(&info).expect("endpoint");
    ep.bind_av(&av).expect("bind av");
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .expect("bind cq");
    ep.enable().expect("enable");
    Node {
        ep,
        cq,
        av,
        domain,
        _fabric: fabric,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// The next completion (an error entry is fatal), yielding between empty reads: the
/// processes outnumber the cores.
fn next(n: &Node) -> CqTaggedEntry {
    let mut e = [CqTaggedEntry::default(); 1];
    let secs = std::env::var("SHM_SCALING_DEADLINE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match n.cq.read(&mut e) {
            Ok(1) => return e[0],
            Err(Error::Avail) => panic!("error completion: {:?}", n.cq.read_err()),
            Ok(_) | Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
        assert!(
            Instant::now() < deadline,
            "{} no completion in {secs} s",
            std::process::id()
        );
        std::thread::yield_now();
    }
}

/// Sends, retrying while the transport pushes back.
fn tsend(n: &Node, buf: &[u8], to: FiAddr, tag: u64) {
    loop {
        match n.ep.tinject(buf, to, tag) {
            Ok(()) => return,
            Err(Error::Again) => {
                n.domain.progress();
                std::thread::yield_now();
            }
            Err(e) => panic!("tinject: {e}"),
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A sender process: says hello with its name, waits for the go (not in idle mode),
/// then does its part and reports one line on stdout.
fn sender(mode: Mode, count: u64, recv_name: &str) {
    let n = node();
    let to = n.av.insert(&unhex(recv_name)).expect("av insert");
    tsend(&n, &n.ep.name(), to, HELLO);
    if mode == Mode::Idle {
        println!("READY");
        std::io::stdout().flush().unwrap();
        // Held until the parent closes our stdin.
        let _ = std::io::stdin().lock().lines().count();
        return;
    }
    let mut go = [0u8; 8];
    // SAFETY: `go` outlives the receive, read only after its completion.
    unsafe {
        n.ep.trecv(&mut go, FiAddr::UNSPEC, GO, 0, Context(1))
            .expect("trecv")
    };
    next(&n);
    // The go carries this sender's index, which tags its pings.
    let me = u64::from_le_bytes(go);
    match mode {
        Mode::Rate => {
            for i in 0..count {
                tsend(&n, &i.to_le_bytes(), to, DATA);
            }
            println!("SENT");
        }
        Mode::Lat => {
            let mut pong = [0u8; 8];
            let mut one_way = Vec::with_capacity(count as usize);
            for i in 0..count {
                // SAFETY: as above.
                unsafe {
                    n.ep.trecv(&mut pong, FiAddr::UNSPEC, PONG, 0, Context(2))
                        .expect("trecv")
                };
                let t = Instant::now();
                tsend(&n, &i.to_le_bytes(), to, PING | me);
                next(&n);
                one_way.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
            println!("LAT {}", median(&mut one_way));
        }
        Mode::Idle => unreachable!(),
    }
    std::io::stdout().flush().unwrap();
}

fn spawn(mode: Mode, count: u64, name: &str) -> Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .env("SHM_SCALING_ROLE", "sender")
        .env("SHM_SCALING_RECV", name)
        .args([
            "--mode",
            &format!("{mode:?}").to_lowercase(),
            "--count",
            &count.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn sender")
}

fn line(c: &mut Child) -> String {
    let mut l = String::new();
    BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut l)
        .expect("read sender");
    l.trim().to_string()
}

/// This process's open descriptors (but pipes), mappings of the provider's files, and resident
/// shared memory in KiB (`RssShmem`).
fn resources() -> (usize, usize, u64) {
    // Pipes are the senders' stdin and stdout, the tool's own: not counted.
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| {
        d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| !l.to_string_lossy().starts_with("pipe:"))
            .count()
    });
    let maps = std::fs::read_to_string("/proc/self/maps").map_or(0, |m| {
        m.lines().filter(|l| l.contains("fabric-shm")).count()
    });
    let shmem = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssShmem:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0);
    (fds, maps, shmem)
}

/// The time of one empty CQ read, in ns (median of 9 batches of `polls`).
fn poll_ns(n: &Node, polls: u64) -> f64 {
    let mut e = [CqTaggedEntry::default(); 1];
    let mut batches: Vec<f64> = (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..polls {
                let r = n.cq.read(&mut e);
                assert!(matches!(r, Err(Error::Again) | Ok(0)), "{r:?}");
            }
            t.elapsed().as_nanos() as f64 / polls as f64
        })
        .collect();
    median(&mut batches)
}

fn main() {
    let args = Args::parse();
    if std::env::var("SHM_SCALING_ROLE").as_deref() == Ok("sender") {
        let name = std::env::var("SHM_SCALING_RECV").expect("SHM_SCALING_RECV");
        sender(args.mode, args.count, &name);
        return;
    }
    let count = match (args.count, args.mode) {
        (0, Mode::Rate) => 20_000,
        (0, Mode::Lat) => 2_000,
        (0, Mode::Idle) => 200_000,
        (c, _) => c,
    };
    let n = node();
    let name = hex(&n.ep.name());
    let baseline = (args.mode == Mode::Idle).then(|| poll_ns(&n, count));
    let before = resources();
    let mut kids: Vec<Child> = (0..args.senders)
        .map(|_| spawn(args.mode, count, &name))
        .collect();
    // Hellos: each sender's name.
    let mut peers = Vec::with_capacity(args.senders);
    let mut nb = [0u8; 64];
    for _ in 0..args.senders {
        // SAFETY: `nb` outlives the receive, read only after its completion.
        unsafe {
            n.ep.trecv(&mut nb, FiAddr::UNSPEC, HELLO, 0, Context(1))
                .unwrap()
        };
        let e = next(&n);
        peers.push(n.av.insert(&nb[..e.len]).expect("av insert"));
    }
    let result = match args.mode {
        Mode::Idle => {
            for k in &mut kids {
                assert_eq!(line(k), "READY");
            }
            let ns = poll_ns(&n, count);
            let after = resources();
            format!(
                "\"poll_ns\":{ns:.1},\"poll_ns_no_peer\":{:.1},\"fds\":[{},{}],\
                 \"maps\":[{},{}],\"shmem_kib\":[{},{}]",
                baseline.unwrap(),
                before.0,
                after.0,
                before.1,
                after.1,
                before.2,
                after.2
            )
        }
        Mode::Rate => {
            let mut bufs = vec![[0u8; 8]; WINDOW];
            for (i, b) in bufs.iter_mut().enumerate() {
                // SAFETY: `bufs` outlives every receive (all complete before it drops).
                unsafe { n.ep.trecv(b, FiAddr::UNSPEC, DATA, 0, Context(i)).unwrap() };
            }
            let total = count * args.senders as u64;
            let t = Instant::now();
            for (i, &p) in peers.iter().enumerate() {
                tsend(&n, &(i as u64).to_le_bytes(), p, GO);
            }
            for got in 0..total {
                let e = next(&n);
                let i = e.op_context.0;
                if i < WINDOW && got + (WINDOW as u64) < total {
                    // SAFETY: as above.
                    unsafe {
                        n.ep.trecv(&mut bufs[i], FiAddr::UNSPEC, DATA, 0, Context(i))
                            .unwrap()
                    };
                }
            }
            let secs = t.elapsed().as_secs_f64();
            for k in &mut kids {
                assert_eq!(line(k), "SENT");
            }
            format!("\"msgs_per_s\":{:.0}", total as f64 / secs)
        }
        Mode::Lat => {
            let mut pings = vec![[0u8; 8]; args.senders];
            for (i, b) in pings.iter_mut().enumerate() {
                let tag = PING | i as u64;
                // SAFETY: `pings` outlives every receive.
                unsafe { n.ep.trecv(b, FiAddr::UNSPEC, tag, 0, Context(i)).unwrap() };
            }
            for (i, &p) in peers.iter().enumerate() {
                tsend(&n, &(i as u64).to_le_bytes(), p, GO);
            }
            let total = count * args.senders as u64;
            let mut left = vec![count; args.senders];
            for _ in 0..total {
                let e = next(&n);
                let i = e.op_context.0;
                tsend(&n, &pings[i].clone(), peers[i], PONG);
                left[i] -= 1;
                if left[i] > 0 {
                    // SAFETY: as above.
                    let tag = PING | i as u64;
                    unsafe {
                        n.ep.trecv(&mut pings[i], FiAddr::UNSPEC, tag, 0, Context(i))
                            .unwrap()
                    };
                }
            }
            let mut lat: Vec<f64> = kids
                .iter_mut()
                .map(|k| {
                    let l = line(k);
                    l.strip_prefix("LAT ")
                        .unwrap_or_else(|| panic!("sender said {l}"))
                        .parse()
                        .unwrap()
                })
                .collect();
            format!("\"lat_us\":{:.3}", median(&mut lat))
        }
    };
    for mut k in kids {
        drop(k.stdin.take());
        let st = k.wait().expect("wait sender");
        assert!(st.success(), "sender failed: {st}");
    }
    println!(
        "{{\"mode\":\"{:?}\",\"senders\":{},\"count\":{count},{result}}}",
        args.mode, args.senders
    );
}
