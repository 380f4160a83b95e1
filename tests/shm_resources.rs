//! What an endpoint holds stays bounded: peers that depart leave nothing behind, and
//! a flood of large unexpected messages costs the receiver a bounded amount of
//! memory. In a test binary of their own, one test at a time: they count the
//! process's descriptors, mappings and memory, which tests running beside them in
//! one process would change.

mod shm_child;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_shm::Shm;
use shm_child::{
    hex,
    node::{next, node, pattern},
    unhex, Ctl, Kid, ROLE,
};

/// Sends the parent a small message and a staged one (tags 1 and 2), receives one
/// from it (tag 3), reports `SENT` once all three completed, then exits when told
/// (`BYE`).
fn role_send_exit<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let peer = connect(ctl, &n);
    loop {
        match n.ep.tinject(&pattern(64, 1), peer, 1) {
            Ok(()) => break,
            Err(Error::Again) => {
                n.domain.progress();
            }
            Err(e) => panic!("inject: {e}"),
        }
    }
    n.ep.tsend(&pattern(50_000, 2), peer, 2, Context(2))
        .unwrap();
    let mut from_parent = [0u8; 64];
    // SAFETY: `from_parent` outlives the receive, which completes below.
    unsafe { n.ep.trecv(&mut from_parent, peer, 3, 0, Context(3)) }.unwrap();
    next(&n).unwrap();
    next(&n).unwrap();
    assert_eq!(from_parent[..], pattern(64, 3)[..]);
    ctl.report("SENT");
    ctl.expect("BYE");
}

/// Large messages the large flood sends, and their size.
const BIG_FLOOD: u64 = 80;
const BIG: usize = 16 << 20;

/// Sends [`BIG_FLOOD`] messages of [`BIG`] bytes as fast as it can, retrying on EAGAIN.
fn role_big_flood<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let peer = connect(ctl, &n);
    let mut again = 0u64;
    let mut buf = vec![0u8; BIG];
    for i in 0..BIG_FLOOD {
        buf[..8].copy_from_slice(&i.to_le_bytes());
        buf[BIG - 8..].copy_from_slice(&(!i).to_le_bytes());
        loop {
            match n.ep.tsend(&buf, peer, i, Context(i as usize)) {
                Ok(()) => break,
                Err(Error::Again) => {
                    if again == 0 {
                        ctl.report(&format!("BLOCKED {i}"));
                    }
                    again += 1;
                    n.domain.progress();
                    std::thread::yield_now();
                }
                Err(e) => panic!("big flood send {i}: {e}"),
            }
        }
    }
    for _ in 0..BIG_FLOOD {
        next(&n).expect("send completion");
    }
    ctl.report(&format!("SENT {again}"));
    ctl.expect("BYE");
}

/// Held by each test for its whole run: the counts of one must not see another's
/// endpoints.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Entry point of child processes (does nothing unless started as one).
#[test]
#[ignore = "child process of the departure test"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let ctl = Ctl::new();
    match role.as_str() {
        "send_exit" => role_send_exit::<Stack<Shm>>(&ctl),
        "big_flood" => role_big_flood::<Stack<Shm>>(&ctl),
        other => panic!("unknown role {other}"),
    }
}

/// Exchanges names with the parent: reports ours, learns the peer's.
fn connect<S: Config>(ctl: &Ctl, n: &shm_child::node::Node<S>) -> FiAddr {
    ctl.report(&format!("NAME {}", hex(&n.ep.name())));
    let peer = unhex(&ctl.expect("PEER"));
    n.av.insert(&peer).expect("av insert")
}

/// Descriptors and shared-memory mappings of the provider in this process. Other
/// mappings are left out: the test's own threads come and go with their stacks, and
/// the allocator keeps the arenas they used.
fn fds_and_maps() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let maps = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("memfd:fabric-shm"))
        .count();
    (fds, maps)
}

/// Peers that sent to an endpoint and exited leave nothing behind in it: once
/// progress ran a while, its process has about as many descriptors and mappings as
/// before they came (before, each departed peer kept two descriptors and a mapping).
#[test]
fn departed_peers_are_released() {
    let _one = one_at_a_time();
    type S = Stack<Shm>;
    const PEERS: usize = 30;
    // At once no more than the region's channels, so no sender waits for one.
    const BATCH: usize = 10;
    let n = node::<S>();
    let mine = hex(&n.ep.name());
    let mut small = [[0u8; 64]; BATCH];
    let mut big = vec![vec![0u8; 50_000]; BATCH];
    n.domain.progress();
    let (fds0, maps0) = fds_and_maps();
    for _ in 0..PEERS / BATCH {
        let mut addrs = Vec::new();
        let kids: Vec<Kid> = (0..BATCH)
            .map(|_| {
                let mut k = Kid::spawn("send_exit", "default", &[]);
                addrs.push(n.av.insert(&unhex(&k.expect("NAME"))).unwrap());
                k.say(&format!("PEER {mine}"));
                k
            })
            .collect();
        // This endpoint sends to each of them too: its own channels in their regions
        // must go with them.
        for &a in &addrs {
            n.ep.tsend(&pattern(64, 3), a, 3, Context(3)).unwrap();
        }
        for (s, b) in small.iter_mut().zip(big.iter_mut()) {
            // SAFETY: the buffers outlive the receives, which complete below.
            unsafe {
                n.ep.trecv(s, FiAddr::UNSPEC, 1, 0, Context(1)).unwrap();
                n.ep.trecv(b, FiAddr::UNSPEC, 2, 0, Context(2)).unwrap();
            }
        }
        for _ in 0..3 * BATCH {
            next(&n).expect("a message of a departing peer, or a send to it");
        }
        assert!(small.iter().all(|s| s[..] == pattern(64, 1)[..]));
        assert!(big.iter().all(|b| b[..] == pattern(50_000, 2)[..]));
        for mut k in kids {
            k.expect("SENT");
            k.say("BYE");
            k.finish();
        }
        n.av.remove(&addrs).unwrap();
        // Each batch is let go before the next comes: a departure racing with a new
        // sender's claim of the same channel is the channel table's business, not
        // this test's.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut now = fds_and_maps();
        while (now.0 > fds0 + 2 || now.1 > maps0 + 1) && Instant::now() < deadline {
            n.domain.progress();
            std::thread::sleep(Duration::from_millis(1));
            now = fds_and_maps();
        }
        assert!(
            now.0 <= fds0 + 2 && now.1 <= maps0 + 1,
            "{BATCH} departed peers: descriptors {fds0} -> {}, mappings {maps0} -> {}",
            now.0,
            now.1
        );
    }
}

/// Large unexpected messages do not grow the receiver without bound: past
/// [`fabric::endpoint::UNEXPECTED_BYTES`] they stay with the sender, which sees EAGAIN,
/// and all arrive intact once receives are posted.
#[test]
fn large_flood_is_bounded_then_all_delivered() {
    let _one = one_at_a_time();
    type S = Stack<Shm>;
    let mut kid = Kid::spawn("big_flood", "default", &[]);
    let n = node::<S>();
    let name = unhex(&kid.expect("NAME"));
    let peer = n.av.insert(&name).unwrap();
    kid.say(&format!("PEER {}", hex(&n.ep.name())));
    let rss0 = rss_kib();
    let blocked_at: u64 = loop {
        n.domain.progress();
        if let Ok(l) = kid.lines.try_recv() {
            break l
                .strip_prefix("BLOCKED")
                .unwrap_or_else(|| panic!("expected BLOCKED, got {l}"))
                .trim()
                .parse()
                .unwrap();
        }
    };
    assert!(blocked_at < BIG_FLOOD, "the sender never saw EAGAIN");
    for _ in 0..10_000 {
        n.domain.progress();
    }
    let grown = rss_kib().saturating_sub(rss0);
    let bound = (fabric::endpoint::UNEXPECTED_BYTES + BIG) as u64 / 1024 + 32 * 1024;
    assert!(
        grown < bound,
        "receiver's private memory grew by {grown} KiB while flooded (bound {bound} KiB)"
    );
    let mut buf = vec![0u8; BIG];
    for i in 0..BIG_FLOOD {
        // SAFETY: `buf` is read only after this receive's completion.
        unsafe { n.ep.trecv(&mut buf, peer, i, 0, Context(1)).unwrap() };
        let e = next(&n).expect("receive");
        assert_eq!((e.tag, e.len), (i, BIG));
        assert_eq!(buf[..8], i.to_le_bytes(), "message {i}");
        assert_eq!(buf[BIG - 8..], (!i).to_le_bytes(), "message {i}");
    }
    let again: u64 = kid.expect("SENT").parse().unwrap();
    assert!(again > 0);
    kid.say("BYE");
    kid.finish();
}

/// This process's resident private memory, in KiB: what buffering costs it (pages of
/// peers' files it mapped and read are shared, and count elsewhere).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}
