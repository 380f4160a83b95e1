//! One endpoint of the composed provider with a peer on each half at once: A's AV holds
//! B through shm and C through tcp (a test [`Locality`] decides per insert). B and C
//! send A interleaved tagged messages under one tag, small and large (tcp's claimed
//! path, shm's rendezvous), which A takes with receives directed at each in turn: every
//! message lands in a receive for its sender, in its sender's order, with its sender's
//! address as `FI_SOURCE`. A answers both. Then B and C write disjoint halves of A's
//! region and read them back, and both fetch-and-add one counter of it: every old
//! value is seen once.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use fabric::prelude::*;
use fabric_hybrid::Locality;

mod hybrid_common;
use hybrid_common::next;

/// Whether the next AV inserts resolve to the local half.
static LOCAL: AtomicBool = AtomicBool::new(true);

/// Local or remote as [`LOCAL`] says at insert time.
enum Toggle {}

impl Locality for Toggle {
    fn is_local(_: &[u8]) -> bool {
        LOCAL.load(Ordering::SeqCst)
    }
}

/// Messages from each of B and C.
const MESSAGES: usize = 24;
/// Fetch-and-adds from each of B and C.
const ATOMICS: u64 = 32;
/// A's region: the counter, then B's half and C's half.
const HALF: usize = 192 << 10;
const REGION: usize = 8 + 2 * HALF;

/// Length of message `i`: from a byte to past tcp's receive buffer and shm's
/// rendezvous threshold.
fn msg_len(i: usize) -> usize {
    [1, 48, 4096, 9000, 70_000, 300_000][i % 6] + i
}

/// Message `i` of sender `who`: its first 8 bytes say who and which.
fn message(who: u8, i: usize) -> Vec<u8> {
    let len = msg_len(i).max(8);
    let mut m: Vec<u8> = (0..len).map(|k| (k as u8).wrapping_mul(who)).collect();
    m[..4].copy_from_slice(&u32::from(who).to_le_bytes());
    m[4..8].copy_from_slice(&(i as u32).to_le_bytes());
    m
}

#[test]
fn one_endpoint_with_a_peer_on_each_half() {
    let before = fabric_hybrid::stats();
    let node = hybrid_common::node::<Toggle>;
    let (a, b, c) = (node(), node(), node());
    LOCAL.store(true, Ordering::SeqCst);
    let a_b = a.av.insert(&b.ep.name()).unwrap();
    let b_a = b.av.insert(&a.ep.name()).unwrap();
    LOCAL.store(false, Ordering::SeqCst);
    let a_c = a.av.insert(&c.ep.name()).unwrap();
    let c_a = c.av.insert(&a.ep.name()).unwrap();
    let after = fabric_hybrid::stats();
    assert_eq!(after.local_peers - before.local_peers, 2);
    assert_eq!(after.remote_peers - before.remote_peers, 2);

    // Interleaved sends under one tag; A's receives are directed, alternately at B and C.
    let sent: Vec<(u8, usize, Vec<u8>)> = (0..MESSAGES)
        .flat_map(|i| [(2u8, i, message(2, i)), (3u8, i, message(3, i))])
        .collect();
    let mut bufs: Vec<Vec<u8>> = sent.iter().map(|(_, _, m)| vec![0; m.len()]).collect();
    for (k, buf) in bufs.iter_mut().enumerate() {
        let from = if k % 2 == 0 { a_b } else { a_c };
        // SAFETY: `bufs` outlives the receives, all completed below.
        unsafe { a.ep.trecv(buf, from, 7, 0, Context(k)) }.unwrap();
    }
    for (k, (who, _, m)) in sent.iter().enumerate() {
        let (n, to) = if *who == 2 { (&b, b_a) } else { (&c, c_a) };
        loop {
            match n.ep.tsend(m, to, 7, Context(10_000 + k)) {
                Ok(()) => break,
                Err(Error::Again) => {
                    let _ = a.cq.read(&mut []);
                    let _ = n.cq.read(&mut []);
                }
                Err(e) => panic!("send {k}: {e}"),
            }
        }
        // Sends complete at their senders; A makes progress meanwhile.
        let (e, _) = next(n, &[&a]);
        assert_eq!(e.op_context, Context(10_000 + k));
    }
    let mut got = vec![false; sent.len()];
    for _ in 0..sent.len() {
        let (e, src) = next(&a, &[&b, &c]);
        let k = e.op_context.0;
        let (who, i, m) = &sent[k];
        assert!(!got[k], "receive {k} completed twice");
        got[k] = true;
        assert_eq!(
            src,
            if *who == 2 { a_b } else { a_c },
            "source of receive {k}"
        );
        assert_eq!(e.len, m.len(), "length of receive {k}");
        assert!(bufs[k] == *m, "receive {k}: message {i} of {who} differs");
    }

    // A answers each once, through the half each sits on.
    for (n, from, to) in [(&b, b_a, a_b), (&c, c_a, a_c)] {
        let mut buf = [0u8; 16];
        // SAFETY: `buf` outlives the receive, completed below.
        unsafe { n.ep.trecv(&mut buf, from, 8, 0, Context(1)) }.unwrap();
        a.ep.tinject(b"answered", to, 8).unwrap();
        let (e, src) = next(n, &[&a]);
        assert_eq!((e.op_context, e.len, src), (Context(1), 8, from));
        assert_eq!(&buf[..8], b"answered");
    }

    // RMA into disjoint halves, read back; fetch-and-adds of one counter from both.
    let mut region = vec![0u8; REGION];
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        offset: 0,
        requested_key: 0x5,
        context: 0,
    };
    let mr = a.domain.mr_reg(&mut region, &attr).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());
    let mut back = [vec![0u8; HALF], vec![0u8; HALF]];
    for (h, (n, to)) in [(&b, b_a), (&c, c_a)].into_iter().enumerate() {
        let data = message(4 + h as u8, HALF - 1)[..HALF].to_vec();
        let at = base + 8 + (h * HALF) as u64;
        n.ep.write(&data, to, at, key, Context(20)).unwrap();
        assert_eq!(next(n, &[&a]).0.op_context, Context(20));
        // SAFETY: `back` outlives the read, completed below.
        unsafe { n.ep.read(&mut back[h], to, at, key, Context(21)) }.unwrap();
        assert_eq!(next(n, &[&a]).0.op_context, Context(21));
        assert!(back[h] == data, "half {h} read back differs");
    }
    let mut olds = BTreeSet::new();
    for _ in 0..ATOMICS {
        for (n, to) in [(&b, b_a), (&c, c_a)] {
            let mut old = [0u8; 8];
            // SAFETY: `old` outlives the atomic, completed below.
            unsafe {
                n.ep.fetch_atomic(
                    &1u64.to_le_bytes(),
                    &mut old,
                    Datatype::Uint64,
                    AtomicOp::Sum,
                    to,
                    base,
                    key,
                    Context(30),
                )
            }
            .unwrap();
            assert_eq!(next(n, &[&a]).0.op_context, Context(30));
            assert!(olds.insert(u64::from_le_bytes(old)), "old value seen twice");
        }
    }
    assert_eq!(olds, (0..2 * ATOMICS).collect::<BTreeSet<_>>());
    let mut counter = [0u8; 8];
    mr.read(0, &mut counter).unwrap();
    assert_eq!(u64::from_le_bytes(counter), 2 * ATOMICS);
    let end = fabric_hybrid::stats();
    assert!(
        end.remote_packets - before.remote_packets >= MESSAGES as u64,
        "packets through tcp: {}",
        end.remote_packets - before.remote_packets
    );
}
