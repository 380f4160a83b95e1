//! Idle and excess connections on the tcp provider, closed by their owner with a
//! goodbye: traffic after a close flows in order both ways, sends racing the close
//! lose and duplicate nothing (seeded, the seed printed), an endpoint talking to 16
//! peers keeps at most `FABRIC_TCP_MAX_CONNS` connections open, a read awaiting its
//! response keeps its connection, a peer that dies after the close is still detected,
//! and the scan timer's request holds no send completion. Connections are observed in
//! `/proc`: the sockets this process holds whose TCP endpoints use the test's ports.

mod tcp_common;

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_tcp::{Name, IDLE_ENV, MAX_CONNS_ENV};
use tcp_common::*;

/// The idle period every endpoint of this binary opens with.
const IDLE: Duration = Duration::from_millis(100);
/// The connection limit every endpoint of this binary opens with.
const MAX_CONNS: usize = 4;
/// Replays the race test's run.
const SEED_ENV: &str = "FABRIC_IDLE_SEED";
/// Tag of the test messages.
const TAG: u64 = 5;

/// Sets the idle period and the limit before any endpoint opens, and runs the tests
/// of this binary one at a time: the sockets counted are told apart by port only, and
/// a test's peer may listen on a port an earlier test's endpoint left (and another
/// test still tries to reach).
fn setup() -> MutexGuard<'static, ()> {
    static ONCE: Once = Once::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    ONCE.call_once(|| {
        std::env::set_var(IDLE_ENV, IDLE.as_millis().to_string());
        std::env::set_var(MAX_CONNS_ENV, MAX_CONNS.to_string());
    });
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn port(n: &Node) -> u16 {
    Name::decode(&n.ep.name()).unwrap().addr.port()
}

/// A TCP socket this process holds: its ports and state (`/proc/net/tcp` codes:
/// 1 established, 2 SYN sent).
#[derive(Debug, Clone, Copy)]
struct Sock {
    local: u16,
    remote: u16,
    state: u8,
}

fn sockets() -> Vec<Sock> {
    let inodes: HashSet<u64> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|p| {
            p.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    let port = |a: &str| u16::from_str_radix(a.rsplit(':').next().unwrap(), 16).unwrap();
    let mut v = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let c: Vec<&str> = line.split_whitespace().collect();
            let inode: u64 = c[9].parse().unwrap();
            if inode != 0 && inodes.contains(&inode) {
                v.push(Sock {
                    local: port(c[1]),
                    remote: port(c[2]),
                    state: u8::from_str_radix(c[3], 16).unwrap(),
                });
            }
        }
    }
    v
}

/// Connection sockets (both ends) from or to the endpoints listening on `ports`.
fn conns(ports: &[u16]) -> usize {
    sockets()
        .iter()
        .filter(|s| s.remote != 0 && (ports.contains(&s.local) || ports.contains(&s.remote)))
        .count()
}

/// Open (established or connecting) outgoing connections to the endpoints on `peers`
/// from any other endpoint.
fn open_to(peers: &[u16]) -> usize {
    sockets()
        .iter()
        .filter(|s| peers.contains(&s.remote) && !peers.contains(&s.local))
        .filter(|s| s.state == 1 || s.state == 2)
        .count()
}

fn drive(all: &[&Node]) {
    for n in all {
        let _ = n.cq.read(&mut []);
    }
}

/// Drives `all` until `done`, failing after [`DEADLINE`].
fn drive_until(all: &[&Node], what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        drive(all);
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}

/// Retries `op` while the provider pushes back, driving `all`.
fn retry(all: &[&Node], what: &str, mut op: impl FnMut() -> Result<()>) -> Result<()> {
    let start = Instant::now();
    loop {
        match op() {
            Err(Error::Again) => {
                drive(all);
                assert!(
                    start.elapsed() < DEADLINE,
                    "{what}: refused for {DEADLINE:?}"
                );
            }
            r => return r,
        }
    }
}

/// The operations a node posted and not yet seen complete, by context: every one
/// must complete exactly once, successfully.
#[derive(Default)]
struct Ledger {
    pending: HashSet<usize>,
    next: usize,
}

impl Ledger {
    fn post(&mut self) -> Context {
        self.next += 1;
        assert!(self.pending.insert(self.next));
        Context(self.next)
    }

    /// Takes the node's completions; each must be one it is waiting for.
    fn take(&mut self, n: &Node) {
        let mut e = [CqTaggedEntry::default(); 16];
        loop {
            match n.cq.read(&mut e) {
                Ok(k) if k > 0 => {
                    for c in &e[..k] {
                        assert!(
                            self.pending.remove(&c.op_context.0),
                            "completion of {:?}: unknown or a second time",
                            c.op_context
                        );
                    }
                }
                Err(Error::Avail) => {
                    let err = n.cq.read_err().unwrap();
                    panic!("operation {:?} failed: {}", err.context, err.err);
                }
                _ => return,
            }
        }
    }
}

/// Posts `count` receives on `to` and sends that many numbered messages from `from`,
/// from `first` on; returns when all completed, checking each arrived once, in order.
fn transfer(from: &Node, to: &Node, dest: FiAddr, first: u64, count: usize) {
    let (mut tx, mut rx) = (Ledger::default(), Ledger::default());
    let mut bufs = vec![[0u8; 8]; count];
    let mut ctx = Vec::with_capacity(count);
    for b in bufs.iter_mut() {
        let c = rx.post();
        ctx.push(c);
        // SAFETY: `bufs` is not moved or dropped before every receive completed
        // (checked below); it is read only then.
        unsafe { to.ep.trecv(b, FiAddr::UNSPEC, TAG, 0, c) }.unwrap();
    }
    for i in 0..count as u64 {
        let c = tx.post();
        let msg = (first + i).to_le_bytes();
        retry(&[from, to], "send", || from.ep.tsend(&msg, dest, TAG, c)).unwrap();
    }
    drive_until(&[from, to], "transfer", || {
        tx.take(from);
        rx.take(to);
        tx.pending.is_empty() && rx.pending.is_empty()
    });
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(*b), first + i as u64, "message {i}");
    }
}

#[test]
fn idle_connections_close_then_traffic_flows_again_in_order() {
    let _serial = setup();
    let (a, b) = (node(), node());
    let ports = [port(&a), port(&b)];
    let ab = a.av.insert(&b.ep.name()).unwrap();
    let ba = b.av.insert(&a.ep.name()).unwrap();
    assert_eq!(conns(&ports), 0);
    for round in 0..3u64 {
        transfer(&a, &b, ab, round * 1000, 200);
        transfer(&b, &a, ba, round * 1000 + 500, 200);
        // One connection each way, both ends in this process.
        assert_eq!(conns(&ports), 4, "round {round}");
        let quiet = Instant::now();
        drive_until(&[&a, &b], "idle close", || conns(&ports) == 0);
        assert!(
            quiet.elapsed() >= IDLE,
            "closed after {:?}, before the idle period",
            quiet.elapsed()
        );
    }
}

/// A read whose response has not come keeps its connection open past the idle
/// period, then completes with the data; then the connection goes idle and closes.
#[test]
fn a_read_awaiting_its_response_is_not_cut() {
    let _serial = setup();
    let (a, b) = (node(), node());
    let ports = [port(&a), port(&b)];
    let mut mem = pattern(256, 7);
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ,
        requested_key: 0x11,
        ..MrAttr::default()
    };
    let mr = b.domain.mr_reg(&mut mem, &attr).unwrap();
    let ab = a.av.insert(&b.ep.name()).unwrap();
    let mut back = [0u8; 64];
    let mut l = Ledger::default();
    let c = l.post();
    // SAFETY: `back` outlives the read, which completes below before it is read.
    retry(&[&a], "read", || unsafe {
        a.ep.read(&mut back, ab, mr.remote_addr() + 32, mr.key(), c)
    })
    .unwrap();
    // Only `a` progresses: the request waits in `b`'s socket, unanswered.
    let start = Instant::now();
    while start.elapsed() < 5 * IDLE {
        l.take(&a);
        std::thread::yield_now();
    }
    assert_eq!(l.pending.len(), 1, "the read cannot complete unanswered");
    assert_eq!(open_to(&[ports[1]]), 1, "a's connection to b was closed");
    drive_until(&[&a, &b], "read response", || {
        l.take(&a);
        l.pending.is_empty()
    });
    assert_eq!(back[..], pattern(256, 7)[32..96]);
    drive_until(&[&a, &b], "idle close", || conns(&ports) == 0);
}

/// Tiny deterministic generator (splitmix64) for the seeded race test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Write slots in each side's region, and the read-only part after them.
const SLOTS: usize = 16;
const RO: usize = 256;

/// One direction of the race test: what `from` sent to `to` and must find there.
struct Dir {
    /// Receives posted on the receiver, in order: the i-th gets message i.
    rx_bufs: Vec<[u8; 8]>,
    rx_posted: usize,
    sent: u64,
    /// Last value written to each slot of the peer's region.
    written: [u64; SLOTS],
    /// Reads: (offset in the read-only part, buffer).
    reads: Vec<(usize, [u8; 16])>,
}

#[test]
fn sends_racing_the_idle_close_lose_and_duplicate_nothing() {
    let _serial = setup();
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("seed {seed} (replay with {SEED_ENV}={seed})");
    let mut rng = Rng(seed);
    const ROUNDS: usize = 60;
    const BURST: u64 = 12;
    let cap = ROUNDS * BURST as usize;

    let nodes = [node(), node()];
    let ports = [port(&nodes[0]), port(&nodes[1])];
    let dest = [
        nodes[0].av.insert(&nodes[1].ep.name()).unwrap(),
        nodes[1].av.insert(&nodes[0].ep.name()).unwrap(),
    ];
    let mut mems = [vec![0u8; SLOTS * 8 + RO], vec![0u8; SLOTS * 8 + RO]];
    for (i, m) in mems.iter_mut().enumerate() {
        m[SLOTS * 8..].copy_from_slice(&pattern(RO, 40 + i as u64));
    }
    let attr = |key| MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        requested_key: key,
        ..MrAttr::default()
    };
    let [m0, m1] = &mut mems;
    let mrs = [
        nodes[0].domain.mr_reg(m0, &attr(0x21)).unwrap(),
        nodes[1].domain.mr_reg(m1, &attr(0x22)).unwrap(),
    ];
    let mut ledgers = [Ledger::default(), Ledger::default()];
    let mut dirs: Vec<Dir> = (0..2)
        .map(|_| Dir {
            rx_bufs: vec![[0u8; 8]; cap],
            rx_posted: 0,
            sent: 0,
            written: [0; SLOTS],
            reads: vec![(0, [0u8; 16]); cap],
        })
        .collect();
    let mut nreads = [0usize; 2];
    let all = [&nodes[0], &nodes[1]];
    let mut closed_rounds = 0;
    for round in 0..ROUNDS {
        for d in 0..2 {
            let (from, to) = (&nodes[d], &nodes[1 - d]);
            let (base, key) = (mrs[1 - d].remote_addr(), mrs[1 - d].key());
            let ops: Vec<u64> = (0..rng.below(BURST + 1)).map(|_| rng.below(4)).collect();
            let dir = &mut dirs[d];
            for _ in ops.iter().filter(|&&op| op < 2) {
                let c = ledgers[1 - d].post();
                let b = &mut dir.rx_bufs[dir.rx_posted];
                // SAFETY: `rx_bufs` never grows or moves; it is read after every
                // operation completed.
                unsafe { to.ep.trecv(b, FiAddr::UNSPEC, TAG, 0, c) }.unwrap();
                dir.rx_posted += 1;
            }
            for op in ops {
                let c = ledgers[d].post();
                match op {
                    0 | 1 => {
                        let msg = dir.sent.to_le_bytes();
                        retry(&all, "send", || from.ep.tsend(&msg, dest[d], TAG, c)).unwrap();
                        dir.sent += 1;
                    }
                    2 => {
                        let v = rng.next();
                        let slot = rng.below(SLOTS as u64) as usize;
                        let at = base + 8 * slot as u64;
                        retry(&all, "write", || {
                            from.ep.write(&v.to_le_bytes(), dest[d], at, key, c)
                        })
                        .unwrap();
                        dir.written[slot] = v;
                    }
                    _ => {
                        let off = rng.below((RO - 16) as u64) as usize;
                        let r = &mut dir.reads[nreads[d]];
                        r.0 = off;
                        let at = base + (SLOTS * 8 + off) as u64;
                        // SAFETY: `reads` never grows or moves; it is read after every
                        // operation completed.
                        retry(&all, "read", || unsafe {
                            from.ep.read(&mut r.1, dest[d], at, key, c)
                        })
                        .unwrap();
                        nreads[d] += 1;
                    }
                }
            }
        }
        // A pause around the idle period, so closes race the next round's sends;
        // every tenth round waits for the close itself.
        let pause = Duration::from_millis(rng.below(IDLE.as_millis() as u64 * 3 / 2));
        let start = Instant::now();
        while start.elapsed() < pause || (round % 10 == 9 && conns(&ports) != 0) {
            for (l, n) in ledgers.iter_mut().zip(all) {
                l.take(n);
            }
            assert!(start.elapsed() < DEADLINE, "round {round}: no idle close");
            std::thread::yield_now();
        }
        if conns(&ports) < 4 {
            closed_rounds += 1;
        }
    }
    drive_until(&all, "every operation", || {
        for (l, n) in ledgers.iter_mut().zip(all) {
            l.take(n);
        }
        ledgers.iter().all(|l| l.pending.is_empty())
    });
    println!("rounds ending with a connection closed: {closed_rounds} of {ROUNDS}");
    assert!(closed_rounds >= ROUNDS / 10);
    for (d, dir) in dirs.iter().enumerate() {
        assert_eq!(dir.rx_posted as u64, dir.sent);
        for (i, b) in dir.rx_bufs[..dir.rx_posted].iter().enumerate() {
            assert_eq!(
                u64::from_le_bytes(*b),
                i as u64,
                "direction {d}, message {i}"
            );
        }
        let ro = pattern(RO, 40 + (1 - d) as u64);
        for (off, got) in &dir.reads[..nreads[d]] {
            assert_eq!(got[..], ro[*off..*off + 16], "direction {d}, read at {off}");
        }
    }
    // The writes landed, the last one per slot last.
    for d in 0..2 {
        let mut back = vec![0u8; SLOTS * 8];
        let c = ledgers[d].post();
        let (from, to) = (&nodes[d], &nodes[1 - d]);
        // SAFETY: `back` outlives the read, which completes below before it is read.
        retry(&all, "read back", || unsafe {
            from.ep.read(
                &mut back,
                dest[d],
                mrs[1 - d].remote_addr(),
                mrs[1 - d].key(),
                c,
            )
        })
        .unwrap();
        drive_until(&[from, to], "read back", || {
            ledgers[d].take(from);
            ledgers[d].pending.is_empty()
        });
        for (slot, want) in dirs[d].written.iter().enumerate() {
            let got = u64::from_le_bytes(back[8 * slot..8 * slot + 8].try_into().unwrap());
            assert_eq!(got, *want, "direction {d}, slot {slot}");
        }
    }
}

/// 16 peers, talked to round-robin several times by one endpoint that may keep 4
/// connections: every message arrives once, in order per peer, and the endpoint never
/// has more than 4 connections open (closing ones aside).
#[test]
fn excess_connections_close_least_recently_used_first() {
    let _serial = setup();
    const PEERS: usize = 16;
    const ROUNDS: u64 = 4;
    const PER_VISIT: u64 = 3;
    let s = node();
    let peers: Vec<Node> = (0..PEERS).map(|_| node()).collect();
    let peer_ports: Vec<u16> = peers.iter().map(port).collect();
    let dest: Vec<FiAddr> = peers
        .iter()
        .map(|p| s.av.insert(&p.ep.name()).unwrap())
        .collect();
    let mut all: Vec<&Node> = peers.iter().collect();
    all.push(&s);
    let per_peer = (ROUNDS * PER_VISIT) as usize;
    let mut bufs = vec![[0u8; 8]; PEERS * per_peer];
    let mut rx: Vec<Ledger> = (0..PEERS).map(|_| Ledger::default()).collect();
    for (k, chunk) in bufs.chunks_mut(per_peer).enumerate() {
        for b in chunk {
            let c = rx[k].post();
            // SAFETY: `bufs` is not moved or dropped before every receive completed.
            unsafe { peers[k].ep.trecv(b, FiAddr::UNSPEC, TAG, 0, c) }.unwrap();
        }
    }
    let mut tx = Ledger::default();
    let mut most = 0;
    for r in 0..ROUNDS {
        for (k, &to) in dest.iter().enumerate() {
            for j in 0..PER_VISIT {
                let c = tx.post();
                let msg = (r * PER_VISIT + j).to_le_bytes();
                retry(&all, "send", || s.ep.tsend(&msg, to, TAG, c)).unwrap();
            }
            let open = open_to(&peer_ports);
            assert!(open <= MAX_CONNS, "{open} connections open after peer {k}");
            most = most.max(open);
            tx.take(&s);
            for (l, p) in rx.iter_mut().zip(&peers) {
                l.take(p);
            }
        }
    }
    drive_until(&all, "every message", || {
        tx.take(&s);
        for (l, p) in rx.iter_mut().zip(&peers) {
            l.take(p);
        }
        tx.pending.is_empty() && rx.iter().all(|l| l.pending.is_empty())
    });
    println!("at most {most} connections open to {PEERS} peers");
    assert_eq!(most, MAX_CONNS);
    for (k, chunk) in bufs.chunks(per_peer).enumerate() {
        for (i, b) in chunk.iter().enumerate() {
            assert_eq!(u64::from_le_bytes(*b), i as u64, "peer {k}, message {i}");
        }
    }
}

/// A peer whose connection was closed for idleness and that then goes away is
/// detected at the next send, which fails rather than vanish.
#[test]
fn a_peer_gone_after_the_idle_close_is_detected() {
    let _serial = setup();
    let a = node();
    let b = node();
    let ports = [port(&a), port(&b)];
    let ab = a.av.insert(&b.ep.name()).unwrap();
    transfer(&a, &b, ab, 0, 10);
    drive_until(&[&a, &b], "idle close", || conns(&ports) == 0);
    drop(b);
    let r = retry(&[&a], "send", || {
        a.ep.tsend(b"anyone?", ab, TAG, Context(1))
    });
    assert_eq!(r, Err(Error::HostUnreach));
    let r = retry(&[&a], "inject", || a.ep.tinject(b"anyone?", ab, TAG));
    assert_eq!(r, Err(Error::HostUnreach));
}

/// Whether `fd` is readable now.
fn readable(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the duration of the call.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// The scan timer's request to the sender holds no send: a send made while the
/// request waits for the next progress call completes at once (its completion is in
/// the CQ and signals the CQ's descriptor), as when no request waits.
#[test]
fn a_pending_scan_request_holds_no_send_completion() {
    let _serial = setup();
    let cq = CqAttr {
        wait_obj: WaitObj::Fd,
        ..CqAttr::DEFAULT
    };
    let a = node_with(Caps::TAGGED | Caps::RMA, &cq);
    let b = node();
    let to = a.av.insert(&b.ep.name()).unwrap();
    let fd = a.cq.wait_fd().expect("an FI_WAIT_FD CQ has a descriptor");
    for round in 0..5 {
        // A connection exists, so the scan timer runs; past a period, a's next
        // progress call (trywait's, which flushes, then polls) takes the tick and
        // leaves the request for the call after it.
        post_send(&a, b"tick", to, TAG);
        assert_eq!(next(&a, &[&b]).unwrap().op_context, Context(TAG as usize));
        std::thread::sleep(IDLE);
        assert_eq!(fabric::trywait(&[&a.cq]), Ok(()), "round {round}");
        post_send(&a, b"send", to, TAG);
        assert!(
            readable(fd),
            "round {round}: the send's completion was held"
        );
        assert_eq!(next(&a, &[&b]).unwrap().op_context, Context(TAG as usize));
    }
}
