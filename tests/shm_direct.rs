//! Directly mapped regions of the shm provider ([`fabric_shm::MappedSegment`]): RMA and
//! atomics into a published segment are performed by the initiator and complete at
//! once, with the target never progressing; checks fail at once with the target's
//! errors; everything else keeps the ring path.
//!
//! In-process tests put target and initiator in separate fabrics and domains, so that
//! progressing the initiator never progresses the target. Cross-process tests re-run
//! this binary as children (`child_entry`, ignored in normal runs), as
//! tests/shm_multiprocess.rs does.

mod shm_child;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fabric::atomic::{self, AtomicClass};
use fabric::prelude::*;
use fabric_shm::{DirectMr, MappedSegment, RemoteKey, Shm};
use shm_child::{
    hex,
    node::{next, node, node_with, nothing, pattern, Entry, Node},
    unhex, Ctl, Kid, ROLE, STACK,
};

// ---------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------

/// The completion that must be there at once: one CQ read, no waiting.
#[track_caller]
fn now<S: Config>(n: &Node<S>) -> Entry
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let mut e = [CqTaggedEntry::default(); 1];
    match n.cq.read(&mut e) {
        Ok(1) => Ok(e[0]),
        Err(Error::Avail) => Err(n.cq.read_err().unwrap()),
        other => panic!("no completion at once: {other:?}"),
    }
}

/// The next `n` completions of `node` as (context, error if any), ordered by context:
/// error entries are read apart from successes, so their order is not kept.
#[track_caller]
fn completions<S: Config>(node: &Node<S>, n: usize) -> Vec<(Context, Option<Error>)>
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let mut done: Vec<_> = (0..n)
        .map(|_| match next(node) {
            Ok(e) => (e.op_context, None),
            Err(e) => (e.context, Some(e.err)),
        })
        .collect();
    done.sort_by_key(|d| d.0 .0);
    done
}

fn attr(access: MrAccess, key: u64, offset: u64) -> MrAttr {
    MrAttr {
        access,
        offset,
        requested_key: key,
        context: 0,
    }
}

const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

fn u64_at<S: Config>(mr: &DirectMr<'_, S>, off: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read(off, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

/// A simple deterministic generator for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

// ---------------------------------------------------------------------------------
// In-process tests
// ---------------------------------------------------------------------------------

/// Writes (small and large), reads, fetch-adds, compare-swaps and base atomics into a
/// published segment complete at once; the target never progresses and receives no
/// packet; the target's memory holds the results.
fn basic_ops<I: Config>(key: u64)
where
    I::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let t = node::<Stack<Shm>>();
    let i = node::<I>();
    let mut seg = MappedSegment::new(1 << 20).unwrap();
    let mr = seg.register(&t.domain, &attr(RW, key, 0)).unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let cntr = i.domain.cntr(&CntrAttr::default()).unwrap();
    i.ep.bind_cntr(&cntr, BindFlags::WRITE | BindFlags::READ)
        .unwrap();

    i.ep.write(b"directly", peer, 16, key, Context(1)).unwrap();
    let e = now(&i).unwrap();
    assert_eq!(e.op_context, Context(1));
    assert_eq!(e.flags, CqFlags::RMA | CqFlags::WRITE);
    assert_eq!(e.len, 8);
    let mut b = [0u8; 8];
    mr.read(16, &mut b).unwrap();
    assert_eq!(&b, b"directly");

    let mut back = [0u8; 8];
    // SAFETY: `back` outlives the operation, which completes before it is read.
    unsafe { i.ep.read(&mut back, peer, 16, key, Context(2)) }.unwrap();
    let e = now(&i).unwrap();
    assert_eq!((e.op_context, e.len), (Context(2), 8));
    assert_eq!(e.flags, CqFlags::RMA | CqFlags::READ);
    assert_eq!(&back, b"directly");

    // Larger than the ring's inline payload: one copy, still at once.
    let big = pattern(100_000, 7);
    i.ep.write(&big, peer, 4096, key, Context(3)).unwrap();
    assert_eq!(now(&i).unwrap().len, big.len());
    let mut got = vec![0u8; big.len()];
    // SAFETY: as above.
    unsafe { i.ep.read(&mut got, peer, 4096, key, Context(4)) }.unwrap();
    now(&i).unwrap();
    assert!(got == big);

    for want in [0u64, 5] {
        let mut old = [0u8; 8];
        // SAFETY: `old` outlives the operation.
        unsafe {
            i.ep.fetch_atomic(
                &5u64.to_ne_bytes(),
                &mut old,
                Datatype::Uint64,
                AtomicOp::Sum,
                peer,
                0,
                key,
                Context(5),
            )
        }
        .unwrap();
        let e = now(&i).unwrap();
        assert_eq!(e.flags, CqFlags::ATOMIC | CqFlags::READ);
        assert_eq!(u64::from_ne_bytes(old), want);
    }
    assert_eq!(
        mr.local_u64(0)
            .unwrap()
            .load(std::sync::atomic::Ordering::SeqCst),
        10
    );

    for (cmp, want_old, after) in [(10u64, 10u64, 77u64), (1, 77, 77)] {
        let mut old = [0u8; 8];
        // SAFETY: `old` outlives the operation.
        unsafe {
            i.ep.compare_atomic(
                &77u64.to_ne_bytes(),
                &cmp.to_ne_bytes(),
                &mut old,
                Datatype::Uint64,
                AtomicOp::Cswap,
                peer,
                0,
                key,
                Context(6),
            )
        }
        .unwrap();
        now(&i).unwrap();
        assert_eq!(u64::from_ne_bytes(old), want_old);
        assert_eq!(u64_at(&mr, 0), after);
    }

    i.ep.atomic(
        &3u32.to_ne_bytes(),
        Datatype::Uint32,
        AtomicOp::Bor,
        peer,
        40,
        key,
        Context(7),
    )
    .unwrap();
    let e = now(&i).unwrap();
    assert_eq!(e.flags, CqFlags::ATOMIC | CqFlags::WRITE);
    let mut w = [0u8; 4];
    mr.read(40, &mut w).unwrap();
    assert_eq!(u32::from_ne_bytes(w), 3);

    // Injected and selective-completion operations count but add no entry.
    i.ep.inject_write(b"inj", peer, 100, key).unwrap();
    nothing(&i);
    let mut b = [0u8; 3];
    mr.read(100, &mut b).unwrap();
    assert_eq!(&b, b"inj");
    // 2 writes + a base atomic + an inject (write counter), 2 reads + 4 fetching (read).
    assert_eq!(cntr.read(), 4 + 6);
    assert_eq!(cntr.read_err(), 0);

    // Nothing ever reached the target's rings.
    assert_eq!(t.domain.progress(), 0);
    drop(mr);
}

#[test]
fn direct_ops_complete_without_target_progress() {
    basic_ops::<Stack<Shm>>(0xd1_0001);
    basic_ops::<Stack<Shm, ThreadSafe>>(0xd1_0002);
}

/// A published key with a bad range or without the right fails at once with the
/// target's error (counted, reported), and the target's memory is unchanged.
#[test]
fn checks_fail_at_once_and_memory_is_unchanged() {
    const KEY_RW: u64 = 0xd2_0001;
    const KEY_RO: u64 = 0xd2_0002;
    const BASE: u64 = 1 << 40;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let mut ro_seg = MappedSegment::new(4096).unwrap();
    ro_seg.as_mut_slice().copy_from_slice(&pattern(4096, 3));
    // Offset-addressed: the first byte is at remote address BASE.
    let mr = seg.register(&t.domain, &attr(RW, KEY_RW, BASE)).unwrap();
    let ro = ro_seg
        .register(&t.domain, &attr(MrAccess::REMOTE_READ, KEY_RO, 0))
        .unwrap();
    assert_eq!(mr.remote_addr(), BASE);
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let cntr = i.domain.cntr(&CntrAttr::default()).unwrap();
    i.ep.bind_cntr(&cntr, BindFlags::WRITE | BindFlags::READ)
        .unwrap();

    let expect_err = |ctx: usize, err: Error, flags: CqFlags| {
        let e = now(&i).expect_err("an error entry");
        assert_eq!((e.context, e.err, e.flags), (Context(ctx), err, flags));
        assert_eq!(e.prov_errno, err.code());
    };
    let wflags = CqFlags::RMA | CqFlags::WRITE;
    i.ep.write(&[1; 8], peer, 0, KEY_RO, Context(1)).unwrap();
    expect_err(1, Error::Access, wflags);
    i.ep.write(&[1; 8], peer, BASE + 4092, KEY_RW, Context(2))
        .unwrap();
    expect_err(2, Error::Fault, wflags);
    i.ep.write(&[1; 8], peer, BASE - 1, KEY_RW, Context(3))
        .unwrap();
    expect_err(3, Error::Fault, wflags);
    i.ep.write(&[1; 8], peer, u64::MAX - 3, KEY_RW, Context(4))
        .unwrap();
    expect_err(4, Error::Fault, wflags);
    let mut buf = [0u8; 16];
    // SAFETY: `buf` outlives the operations.
    unsafe { i.ep.read(&mut buf, peer, BASE + 4090, KEY_RW, Context(5)) }.unwrap();
    expect_err(5, Error::Fault, CqFlags::RMA | CqFlags::READ);
    let mut old = [0u8; 8];
    // SAFETY: as above.
    unsafe {
        i.ep.fetch_atomic(
            &1u64.to_ne_bytes(),
            &mut old,
            Datatype::Uint64,
            AtomicOp::Sum,
            peer,
            0,
            KEY_RO,
            Context(6),
        )
    }
    .unwrap();
    expect_err(6, Error::Access, CqFlags::ATOMIC | CqFlags::READ);
    i.ep.atomic(
        &1u64.to_ne_bytes(),
        Datatype::Uint64,
        AtomicOp::Sum,
        peer,
        BASE + 4096,
        KEY_RW,
        Context(7),
    )
    .unwrap();
    expect_err(7, Error::Fault, CqFlags::ATOMIC | CqFlags::WRITE);
    // Reading a read-only segment (and atomically reading it) is allowed.
    // SAFETY: as above.
    unsafe { i.ep.read(&mut buf, peer, 8, KEY_RO, Context(8)) }.unwrap();
    now(&i).unwrap();
    assert_eq!(buf[..], pattern(4096, 3)[8..24]);
    // SAFETY: as above.
    unsafe {
        i.ep.fetch_atomic(
            &[],
            &mut old,
            Datatype::Uint64,
            AtomicOp::AtomicRead,
            peer,
            16,
            KEY_RO,
            Context(9),
        )
    }
    .unwrap();
    now(&i).unwrap();
    assert_eq!(old[..], pattern(4096, 3)[16..24]);
    // Zero-length write at the very end: legal, as in the MR table.
    i.ep.write(&[], peer, BASE + 4096, KEY_RW, Context(10))
        .unwrap();
    now(&i).unwrap();

    assert_eq!(cntr.read(), 3);
    assert_eq!(cntr.read_err(), 7);
    let mut all = vec![0u8; 4096];
    mr.read(0, &mut all).unwrap();
    assert!(all.iter().all(|&b| b == 0), "target memory changed");
    let mut all = vec![0u8; 4096];
    ro.read(0, &mut all).unwrap();
    assert_eq!(all, pattern(4096, 3));
    assert_eq!(t.domain.progress(), 0);
}

/// Keys nobody published take the ring path: nothing completes until the target
/// progresses, then the target's MR table answers (an error for an unknown key,
/// success for an ordinary registration).
#[test]
fn unpublished_keys_take_the_ring_path() {
    const KEY: u64 = 0xd3_0001;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut plain = vec![0u8; 64];
    let mr = t.domain.mr_reg(&mut plain, &attr(RW, KEY, 0)).unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();

    i.ep.write(&[9; 8], peer, 0, 0xd3_dead, Context(1)).unwrap();
    nothing(&i);
    assert_eq!(t.domain.progress(), 1);
    let e = next(&i).expect_err("unknown key");
    assert_eq!((e.context, e.err), (Context(1), Error::KeyRejected));

    i.ep.write(&[9; 8], peer, 8, KEY, Context(2)).unwrap();
    nothing(&i);
    assert_eq!(t.domain.progress(), 1);
    assert_eq!(next(&i).unwrap().op_context, Context(2));
    let mut b = [0u8; 8];
    mr.read(8, &mut b).unwrap();
    assert_eq!(b, [9; 8]);
}

/// After its `DirectMr` is dropped a segment is never accessed directly: operations
/// on its key go to the target (which no longer has it). Publishing it again works.
#[test]
fn withdrawn_segments_are_not_accessed() {
    const KEY: u64 = 0xd4_0001;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    {
        let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
        i.ep.write(&[1; 8], peer, 0, KEY, Context(1)).unwrap();
        now(&i).unwrap();
        assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([1; 8]));
    }
    i.ep.write(&[2; 8], peer, 0, KEY, Context(2)).unwrap();
    nothing(&i);
    assert_eq!(seg.as_slice()[..8], [1; 8]);
    assert_eq!(t.domain.progress(), 1);
    assert_eq!(next(&i).expect_err("withdrawn").err, Error::KeyRejected);
    assert_eq!(seg.as_slice()[..8], [1; 8]);

    // Published again (a new generation of the entry): direct again.
    let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
    i.ep.write(&[3; 8], peer, 0, KEY, Context(3)).unwrap();
    now(&i).unwrap();
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([3; 8]));
    // Keys are process-wide for published segments.
    let t2 = node::<Stack<Shm>>();
    let mut other = MappedSegment::new(64).unwrap();
    assert_eq!(
        other.register(&t2.domain, &attr(RW, KEY, 0)).err(),
        Some(Error::KeyRejected)
    );
}

/// An attached remote key ([`RemoteKey`]): puts, gets and atomics straight into the
/// target's segment with the target never progressing; the target's checks fail at once
/// with its errors and change nothing; after the owner drops the registration the key
/// refuses every operation.
#[test]
fn remote_key_ops_checks_and_withdrawal() {
    const KEY: u64 = 0xd5_0001;
    const KEY_RO: u64 = 0xd5_0002;
    let t = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let mut ro = MappedSegment::new(64).unwrap();
    ro.as_mut_slice().copy_from_slice(&pattern(64, 3));
    let ro_mr = ro
        .register(&t.domain, &attr(MrAccess::REMOTE_READ, KEY_RO, 0x1000))
        .unwrap();
    {
        let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
        let rk = RemoteKey::attach(&t.ep.name(), KEY).unwrap();
        assert_eq!((rk.base(), rk.len()), (0, 4096));
        rk.put(64, &pattern(100, 9)).unwrap();
        let mut back = vec![0u8; 100];
        rk.get(64, &mut back).unwrap();
        assert_eq!(back, pattern(100, 9));
        assert_eq!(rk.fetch_add_u64(8, 5).unwrap(), 0);
        assert_eq!(rk.fetch_add_u64(8, 2).unwrap(), 5);
        assert_eq!(
            rk.compare_swap_u64(8, 6, 100).unwrap(),
            7,
            "mismatch: no swap"
        );
        assert_eq!(rk.compare_swap_u64(8, 7, 100).unwrap(), 7);
        assert_eq!(u64_at(&mr, 8), 100);
        // The target's checks, at once, and nothing written.
        let before = seg_bytes(&mr);
        assert_eq!(rk.put(4090, &[1; 7]), Err(Error::Fault));
        assert_eq!(rk.put(u64::MAX - 2, &[1; 8]), Err(Error::Fault));
        assert_eq!(rk.get(4096, &mut [0; 1]), Err(Error::Fault));
        assert_eq!(rk.fetch_add_u64(4092, 1), Err(Error::Fault));
        assert_eq!(
            rk.fetch_add_u64(12, 1),
            Err(Error::Inval),
            "unaligned atomic"
        );
        assert_eq!(seg_bytes(&mr), before);
        let rok = RemoteKey::attach(&t.ep.name(), KEY_RO).unwrap();
        let mut b = [0u8; 16];
        rok.get(0x1000 + 16, &mut b).unwrap();
        assert_eq!(b[..], pattern(64, 3)[16..32]);
        assert_eq!(rok.put(0x1000, &[0; 8]), Err(Error::Access));
        assert_eq!(rok.fetch_add_u64(0x1000, 1), Err(Error::Access));
        let mut ro_now = [0u8; 64];
        ro_mr.mr().read(0, &mut ro_now).unwrap();
        assert_eq!(ro_now[..], pattern(64, 3)[..]);
        assert_eq!(
            RemoteKey::attach(&t.ep.name(), 0xd5_0003).err(),
            Some(Error::NoKey)
        );
        assert_eq!(
            RemoteKey::attach(&[7u8; 3], KEY)
                .err()
                .map(|e| e != Error::NoKey),
            Some(true),
            "a malformed address is refused"
        );
        drop(mr);
        assert_eq!(rk.put(64, &[0xee; 8]), Err(Error::NoKey));
        assert_eq!(rk.fetch_add_u64(8, 1), Err(Error::NoKey));
    }
    assert_eq!(
        seg.as_slice()[64..164],
        pattern(100, 9)[..],
        "nothing after withdrawal"
    );
    assert_eq!(seg.as_slice()[8..16], 100u64.to_ne_bytes());
    // The target never progressed: everything above was done by this side.
    assert_eq!(t.domain.progress(), 0);
}

/// All data bytes of a published segment, read through the registration.
fn seg_bytes<S: Config>(mr: &DirectMr<'_, S>) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    mr.mr().read(0, &mut b).unwrap();
    b
}

/// A direct operation posted while ring-path operations are in flight waits for them
/// (it would otherwise overtake them): completions and memory keep the posting order.
#[test]
fn direct_ops_wait_for_earlier_ring_ops() {
    const KEY: u64 = 0xd5_0011;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();

    // Remote CQ data needs the target: the ring path.
    i.ep.writedata(&[1; 8], 99, peer, 0, KEY, Context(1))
        .unwrap();
    i.ep.write(&[2; 8], peer, 0, KEY, Context(2)).unwrap();
    // Even a failure waits its turn.
    i.ep.write(&[4; 8], peer, 4092, KEY, Context(4)).unwrap();
    nothing(&i);
    assert_eq!(
        u64_at(&mr, 0),
        0,
        "the direct write overtook the ring write"
    );
    assert_eq!(t.domain.progress(), 1);
    // (Error entries are read apart from successes: compare as sets.)
    let done = completions(&i, 3);
    assert_eq!(
        done,
        [
            (Context(1), None),
            (Context(2), None),
            (Context(4), Some(Error::Fault))
        ]
    );
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([2; 8]));
    let e = next(&t).unwrap();
    assert!(e.flags.contains(CqFlags::REMOTE_CQ_DATA));
    assert_eq!(e.data, 99);
    // Nothing in flight any more: direct again.
    i.ep.write(&[3; 8], peer, 0, KEY, Context(3)).unwrap();
    assert_eq!(now(&i).unwrap().op_context, Context(3));
}

/// A direct access never overtakes a message sent before it that the target has not
/// processed yet (`FI_ORDER_WAS`, `FI_ORDER_RAS`, which getinfo advertises): the
/// write takes the ring, behind the message, and lands when the target processes
/// both; once the target took everything, writes are direct again.
#[test]
fn direct_ops_wait_for_earlier_messages() {
    const KEY: u64 = 0xd5_0012;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();

    i.ep.tinject(b"first", peer, 5).unwrap();
    i.ep.write(&[2; 8], peer, 0, KEY, Context(2)).unwrap();
    i.ep.inject_write(&[3; 8], peer, 8, KEY).unwrap();
    nothing(&i);
    assert_eq!(u64_at(&mr, 0), 0, "the write overtook the message");
    assert_eq!(u64_at(&mr, 8), 0, "the inject overtook the message");
    // The target processes the message (unexpected), then the write; the inject,
    // held behind the write in flight, goes once the write completed.
    assert!(t.domain.progress() >= 1);
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([2; 8]));
    assert_eq!(next(&i).unwrap().op_context, Context(2));
    nothing(&i);
    assert_eq!(u64_at(&mr, 8), u64::from_ne_bytes([3; 8]));
    let mut buf = [0u8; 5];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { t.ep.trecv(&mut buf, FiAddr::UNSPEC, 5, 0, Context(9)) }.unwrap();
    assert_eq!(next(&t).unwrap().op_context, Context(9));
    assert_eq!(&buf, b"first");
    // Everything taken and answered: direct again, done before any target progress.
    nothing(&i);
    i.ep.write(&[4; 8], peer, 0, KEY, Context(4)).unwrap();
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([4; 8]));
    assert_eq!(now(&i).unwrap().op_context, Context(4));
}

/// `fi_inject_write` into a published segment: no entry on success, counted; the
/// target's checks fail at once with an error entry of null context; a key nobody
/// published waits for the target, which rejects it; the inject size and the address
/// are refused before anything is done. Writes alternating between two keys each
/// find another cached entry than the one used last. Target memory changes only for
/// the writes that succeed.
#[test]
fn inject_write_checks_and_errors() {
    const KEY_RW: u64 = 0xd7_0001;
    const KEY_RO: u64 = 0xd7_0002;
    const KEY_B: u64 = 0xd7_0003;
    const BASE: u64 = 1 << 40;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let mut seg_b = MappedSegment::new(4096).unwrap();
    let mut ro_seg = MappedSegment::new(4096).unwrap();
    ro_seg.as_mut_slice().copy_from_slice(&pattern(4096, 9));
    let mr = seg.register(&t.domain, &attr(RW, KEY_RW, BASE)).unwrap();
    let mr_b = seg_b.register(&t.domain, &attr(RW, KEY_B, 0)).unwrap();
    let ro = ro_seg
        .register(&t.domain, &attr(MrAccess::REMOTE_READ, KEY_RO, 0))
        .unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let cntr = i.domain.cntr(&CntrAttr::default()).unwrap();
    i.ep.bind_cntr(&cntr, BindFlags::WRITE).unwrap();

    for k in 0..4u8 {
        let at = 8 * u64::from(k);
        i.ep.inject_write(&[k + 1; 8], peer, BASE + at, KEY_RW)
            .unwrap();
        i.ep.inject_write(&[k + 11; 8], peer, at, KEY_B).unwrap();
    }
    nothing(&i);
    assert_eq!(cntr.read(), 8);
    for k in 0..4u8 {
        assert_eq!(u64_at(&mr, 8 * k as usize), u64::from_ne_bytes([k + 1; 8]));
        assert_eq!(
            u64_at(&mr_b, 8 * k as usize),
            u64::from_ne_bytes([k + 11; 8])
        );
    }

    let wflags = CqFlags::RMA | CqFlags::WRITE;
    let expect_err = |err: Error| {
        let e = now(&i).expect_err("an error entry");
        assert_eq!((e.context, e.err, e.flags), (Context::NULL, err, wflags));
        assert_eq!(e.prov_errno, err.code());
    };
    // Twice: the second finds the entry the first used (and cached) last.
    for _ in 0..2 {
        i.ep.inject_write(&[1; 8], peer, 0, KEY_RO).unwrap();
        expect_err(Error::Access);
    }
    i.ep.inject_write(&[1; 8], peer, BASE + 4092, KEY_RW)
        .unwrap();
    expect_err(Error::Fault);
    i.ep.inject_write(&[1; 8], peer, BASE - 1, KEY_RW).unwrap();
    expect_err(Error::Fault);
    i.ep.inject_write(&[1; 8], peer, u64::MAX - 3, KEY_RW)
        .unwrap();
    expect_err(Error::Fault);
    // A failure, then a success through the same (still current) entry.
    i.ep.inject_write(&[5; 8], peer, BASE + 32, KEY_RW).unwrap();
    nothing(&i);
    assert_eq!(u64_at(&mr, 32), u64::from_ne_bytes([5; 8]));
    assert_eq!((cntr.read(), cntr.read_err()), (9, 5));

    // Refused before anything is done: no entry, no count.
    let big = vec![7u8; <Shm as Provider>::INJECT_SIZE + 1];
    assert_eq!(
        i.ep.inject_write(&big, peer, BASE + 64, KEY_RW),
        Err(Error::MsgSize)
    );
    assert_eq!(
        i.ep.inject_write(&[1; 8], FiAddr(77), BASE + 64, KEY_RW),
        Err(Error::AddrNotAvail)
    );
    nothing(&i);
    assert_eq!((cntr.read(), cntr.read_err()), (9, 5));

    // Nobody published this key: the target's MR table answers when it progresses.
    assert_eq!(t.domain.progress(), 0);
    i.ep.inject_write(&[1; 8], peer, 0, 0xd7_dead).unwrap();
    nothing(&i);
    assert_eq!(t.domain.progress(), 1);
    let e = next(&i).expect_err("unknown key");
    assert_eq!((e.context, e.err), (Context::NULL, Error::KeyRejected));
    assert_eq!((cntr.read(), cntr.read_err()), (9, 6));

    let rest = seg_bytes(&mr);
    assert!(rest[40..].iter().all(|&b| b == 0), "target memory changed");
    let mut all = vec![0u8; 4096];
    ro.read(0, &mut all).unwrap();
    assert_eq!(all, pattern(4096, 9));
}

/// `fi_inject_write` and `fi_write` posted while a ring operation is in flight do not
/// overtake it, nor do their failures: memory and completions follow the posting
/// order once the target answers. With nothing in flight any more, they complete at
/// once again.
#[test]
fn inject_write_waits_for_earlier_ring_ops() {
    const KEY: u64 = 0xd8_0001;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let cntr = i.domain.cntr(&CntrAttr::default()).unwrap();
    i.ep.bind_cntr(&cntr, BindFlags::WRITE).unwrap();

    // Remote CQ data needs the target: the ring path.
    i.ep.writedata(&[1; 8], 7, peer, 0, KEY, Context(1))
        .unwrap();
    i.ep.inject_write(&[2; 8], peer, 0, KEY).unwrap();
    i.ep.inject_write(&[4; 8], peer, 4092, KEY).unwrap();
    i.ep.write(&[3; 8], peer, 8, KEY, Context(3)).unwrap();
    nothing(&i);
    assert_eq!(u64_at(&mr, 0), 0, "the inject overtook the ring write");
    assert_eq!(u64_at(&mr, 8), 0, "the write overtook the ring write");
    assert_eq!(cntr.read(), 0);
    assert_eq!(t.domain.progress(), 1);
    let done = completions(&i, 3);
    assert_eq!(
        done,
        [
            (Context::NULL, Some(Error::Fault)),
            (Context(1), None),
            (Context(3), None)
        ]
    );
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([2; 8]));
    assert_eq!(u64_at(&mr, 8), u64::from_ne_bytes([3; 8]));
    assert_eq!((cntr.read(), cntr.read_err()), (3, 1));
    assert_eq!(next(&t).unwrap().data, 7);

    i.ep.inject_write(&[5; 8], peer, 0, KEY).unwrap();
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([5; 8]));
    nothing(&i);
    assert_eq!(cntr.read(), 4);
    assert_eq!(t.domain.progress(), 0);
}

/// Once the target's endpoint is closed, a write to its still published segment is
/// no longer performed directly, even right after one that was: it goes to the ring,
/// which refuses it.
#[test]
fn writes_to_a_closed_endpoint_are_refused() {
    const KEY: u64 = 0xda_0001;
    let Node {
        ep: t_ep,
        domain: t_domain,
        ..
    } = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let mr = seg.register(&t_domain, &attr(RW, KEY, 0)).unwrap();
    let peer = i.av.insert(&t_ep.name()).unwrap();
    i.ep.inject_write(&[1; 8], peer, 0, KEY).unwrap();
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([1; 8]));
    drop(t_ep);
    assert_eq!(
        i.ep.inject_write(&[2; 8], peer, 0, KEY),
        Err(Error::HostUnreach)
    );
    assert_eq!(
        i.ep.write(&[2; 8], peer, 0, KEY, Context(1)),
        Err(Error::HostUnreach)
    );
    nothing(&i);
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([1; 8]));
}

/// Writes whose flags or state keep them off the direct write entry still do what
/// the generic path does: endpoint defaults `FI_FENCE` and `FI_DELIVERY_COMPLETE`
/// (through an alias) complete at once; `FI_INJECT` as a default bounds `fi_write` by
/// the inject size; selective completion counts without an entry unless asked; a
/// full CQ refuses the write with `FI_EAGAIN` before it touches memory.
#[test]
fn writes_off_the_direct_entry() {
    const KEY: u64 = 0xd9_0011;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();

    let fenced =
        i.ep.alias(
            OpFlags::FENCE | OpFlags::DELIVERY_COMPLETE,
            BindFlags::TRANSMIT,
        )
        .unwrap();
    fenced.write(&[1; 8], peer, 0, KEY, Context(1)).unwrap();
    assert_eq!(now(&i).unwrap().op_context, Context(1));
    fenced.inject_write(&[2; 8], peer, 8, KEY).unwrap();
    nothing(&i);
    assert_eq!(u64_at(&mr, 0), u64::from_ne_bytes([1; 8]));
    assert_eq!(u64_at(&mr, 8), u64::from_ne_bytes([2; 8]));

    let inject = i.ep.alias(OpFlags::INJECT, BindFlags::TRANSMIT).unwrap();
    let big = vec![3u8; <Shm as Provider>::INJECT_SIZE + 1];
    assert_eq!(
        inject.write(&big, peer, 16, KEY, Context(2)),
        Err(Error::MsgSize)
    );
    // Within the size: completes as usual (only `fi_inject_*` skip the entry).
    inject.write(&[3; 8], peer, 16, KEY, Context(3)).unwrap();
    assert_eq!(now(&i).unwrap().op_context, Context(3));
    assert_eq!(u64_at(&mr, 16), u64::from_ne_bytes([3; 8]));
    assert_eq!(u64_at(&mr, 24), 0);

    let s = node_with::<Stack<Shm>>(&CqAttr::DEFAULT, BindFlags::SELECTIVE_COMPLETION);
    let sp = s.av.insert(&t.ep.name()).unwrap();
    let cntr = s.domain.cntr(&CntrAttr::default()).unwrap();
    s.ep.bind_cntr(&cntr, BindFlags::WRITE).unwrap();
    s.ep.write(&[4; 8], sp, 32, KEY, Context(4)).unwrap();
    nothing(&s);
    assert_eq!(cntr.read(), 1);
    assert_eq!(u64_at(&mr, 32), u64::from_ne_bytes([4; 8]));
    let asked =
        s.ep.alias(OpFlags::COMPLETION, BindFlags::TRANSMIT)
            .unwrap();
    asked.write(&[5; 8], sp, 40, KEY, Context(5)).unwrap();
    assert_eq!(now(&s).unwrap().op_context, Context(5));
    assert_eq!(cntr.read(), 2);

    let small = CqAttr {
        size: 4,
        ..CqAttr::DEFAULT
    };
    let f = node_with::<Stack<Shm>>(&small, BindFlags::empty());
    let fp = f.av.insert(&t.ep.name()).unwrap();
    let mut posted = 0usize;
    let at = |k: usize| 64 + 8 * k as u64;
    loop {
        match f
            .ep
            .write(&[6; 8], fp, at(posted), KEY, Context(10 + posted))
        {
            Ok(()) => posted += 1,
            Err(Error::Again) => break,
            Err(e) => panic!("write: {e}"),
        }
        assert!(posted <= 64, "the CQ never filled");
    }
    assert!(posted >= 1);
    assert_eq!(
        u64_at(&mr, at(posted) as usize),
        0,
        "a refused write landed"
    );
    for k in 0..posted {
        assert_eq!(now(&f).unwrap().op_context, Context(10 + k));
    }
    f.ep.write(&[6; 8], fp, at(posted), KEY, Context(99))
        .unwrap();
    assert_eq!(now(&f).unwrap().op_context, Context(99));
    assert_eq!(u64_at(&mr, at(posted) as usize), u64::from_ne_bytes([6; 8]));
    assert_eq!(t.domain.progress(), 0);
}

/// Every lock-free (class, op, datatype) combination gives, on two elements and on one
/// (the single 8-byte sum has its own lane), exactly the values of
/// `fabric::atomic::apply` (the target's semantics): memory and fetched values bit for
/// bit. 16-byte datatypes take the ring path.
#[test]
fn direct_atomics_match_the_model() {
    const KEY: u64 = 0xd6_0001;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(1 << 16).unwrap();
    let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut tried = 0;
    let mut off = 0usize;
    let combos = Datatype::ALL
        .into_iter()
        .filter(|d| d.size() <= 8)
        .flat_map(|dt| AtomicOp::ALL.into_iter().map(move |op| (dt, op)));
    for (dt, op) in combos {
        for elems in [2, 1] {
            for class in [AtomicClass::Base, AtomicClass::Fetch, AtomicClass::Compare] {
                if !atomic::is_valid(class, op, dt) {
                    continue;
                }
                let n = elems * dt.size();
                let init = rng.bytes(n);
                let operand = rng.bytes(n);
                // Element 0 compares equal (the swap path), element 1 likely not.
                let mut compare = rng.bytes(n);
                compare[..dt.size()].copy_from_slice(&init[..dt.size()]);
                mr.write(off, &init).unwrap();
                let mut model = init.clone();
                let mut fetched = vec![0u8; n];
                let cmp: &[u8] = if class == AtomicClass::Compare {
                    &compare
                } else {
                    &[]
                };
                atomic::apply(
                    class,
                    op,
                    dt,
                    &mut model,
                    &operand,
                    cmp,
                    (class != AtomicClass::Base).then_some(&mut fetched[..]),
                )
                .unwrap();
                let mut result = vec![0u8; n];
                let addr = off as u64;
                // SAFETY: `result` outlives the operation, which completes at once.
                unsafe {
                    match class {
                        AtomicClass::Base => {
                            i.ep.atomic(&operand, dt, op, peer, addr, KEY, Context(1))
                        }
                        AtomicClass::Fetch => i.ep.fetch_atomic(
                            &operand,
                            &mut result,
                            dt,
                            op,
                            peer,
                            addr,
                            KEY,
                            Context(1),
                        ),
                        AtomicClass::Compare => i.ep.compare_atomic(
                            &operand,
                            &compare,
                            &mut result,
                            dt,
                            op,
                            peer,
                            addr,
                            KEY,
                            Context(1),
                        ),
                    }
                }
                .unwrap();
                now(&i).unwrap_or_else(|e| panic!("{class:?} {op:?} {dt:?}: {e:?}"));
                let mut got = vec![0u8; n];
                mr.read(off, &mut got).unwrap();
                assert_eq!(got, model, "memory after {class:?} {op:?} {dt:?}");
                if class != AtomicClass::Base {
                    assert_eq!(result, fetched, "fetched by {class:?} {op:?} {dt:?}");
                }
                tried += 1;
                off += 16;
            }
        }
    }
    assert!(tried > 600, "only {tried} combinations");
    assert_eq!(t.domain.progress(), 0);

    // 16 bytes: no lock-free instruction, the target applies it.
    i.ep.atomic(
        &5u128.to_ne_bytes(),
        Datatype::Uint128,
        AtomicOp::Sum,
        peer,
        off as u64,
        KEY,
        Context(2),
    )
    .unwrap();
    nothing(&i);
    assert_eq!(t.domain.progress(), 1);
    assert_eq!(next(&i).unwrap().op_context, Context(2));
    let mut b = [0u8; 16];
    mr.read(off, &mut b).unwrap();
    assert_eq!(u128::from_ne_bytes(b), 5);
    // Misaligned: the target copes.
    i.ep.atomic(
        &5u64.to_ne_bytes(),
        Datatype::Uint64,
        AtomicOp::Sum,
        peer,
        off as u64 + 20,
        KEY,
        Context(3),
    )
    .unwrap();
    nothing(&i);
    assert_eq!(t.domain.progress(), 1);
    assert_eq!(next(&i).unwrap().op_context, Context(3));
}

/// Threads of one process fetch-adding the same word directly lose nothing, while the
/// owner withdraws and republishes nothing (plain contention on the busy count too).
#[test]
fn concurrent_fetch_adds_in_process() {
    const KEY: u64 = 0xd7_0011;
    const N: u64 = 5000;
    let t = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(64).unwrap();
    let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
    let name = t.ep.name();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let name = name.clone();
            s.spawn(move || {
                let i = node::<Stack<Shm>>();
                let peer = i.av.insert(&name).unwrap();
                let mut last = None;
                for _ in 0..N {
                    let mut old = [0u8; 8];
                    // SAFETY: `old` outlives the operation, which completes at once.
                    unsafe {
                        i.ep.fetch_atomic(
                            &1u64.to_ne_bytes(),
                            &mut old,
                            Datatype::Uint64,
                            AtomicOp::Sum,
                            peer,
                            8,
                            KEY,
                            Context(1),
                        )
                    }
                    .unwrap();
                    now(&i).unwrap();
                    let v = u64::from_ne_bytes(old);
                    assert!(last.is_none_or(|l| v > l), "fetched values go up");
                    last = Some(v);
                }
            });
        }
    });
    assert_eq!(u64_at(&mr, 8), 2 * N);
}

/// Direct writes keep coming while the owner withdraws the segment: once the withdrawal
/// returned, none lands (the handshake of the initiator's busy lane, or count, with the
/// owner's withdrawal), however the writer's accesses fall against it.
#[test]
fn no_direct_write_lands_after_withdrawal() {
    const KEY: u64 = 0xd7_0012;
    const MARK: u64 = u64::from_ne_bytes([0xee; 8]);
    let t = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(4096).unwrap();
    let name = t.ep.name();
    for round in 1..=20u8 {
        let stop = AtomicBool::new(false);
        // Registered before the writer starts: a write that found no segment would take
        // the ring path, and wait there for ever (the target never progresses here),
        // holding back every later write of its context, the direct ones included
        // (none overtakes an operation in flight).
        std::thread::scope(|s| {
            let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
            s.spawn(|| {
                let i = node::<Stack<Shm>>();
                let peer = i.av.insert(&name).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    // After the withdrawal the key takes the ring path, which the target
                    // never serves here: refusals (a full ring) are expected.
                    let _ = i.ep.inject_write(&[0xee; 256], peer, 0, KEY);
                }
            });
            // Bounded: a direct path that never delivers fails the test, not hangs it.
            let deadline = Instant::now() + Duration::from_secs(30);
            while u64_at(&mr, 0) != MARK && Instant::now() < deadline {
                std::hint::spin_loop();
            }
            if u64_at(&mr, 0) != MARK {
                stop.store(true, Ordering::Relaxed);
                panic!("round {round}: no direct write landed while the key was published");
            }
            drop(mr);
            seg.as_mut_slice().fill(round);
            let until = Instant::now() + Duration::from_millis(5);
            let mut intact = true;
            while intact && Instant::now() < until {
                intact = seg.as_slice().iter().all(|&b| b == round);
            }
            // Stopped before asserting: a failed round must not leave the writer running.
            stop.store(true, Ordering::Relaxed);
            assert!(intact, "round {round}: a write landed after the withdrawal");
        });
    }
}

// ---------------------------------------------------------------------------------
// Across processes: parent side
// ---------------------------------------------------------------------------------

const KEY_RW: u64 = 0xd9_0001;
const KEY_RO: u64 = 0xd9_0002;
const SEG_LEN: usize = 1 << 20;
const RO_LEN: usize = 4096;
/// Where the concurrent fetch-adds go.
const COUNTER: u64 = 4096;

/// An initiator on `stack` connected to the target named `target`.
fn initiator(stack: &str, target: &str) -> Kid {
    let mut k = Kid::spawn("initiator", stack, &[]);
    k.expect("NAME");
    k.say(&format!("PEER {target}"));
    k
}

fn peek(t: &mut Kid, off: u64, len: usize) -> Vec<u8> {
    t.say(&format!("PEEK {off} {len}"));
    unhex(&t.expect("BYTES"))
}

/// Writes, reads and atomics from other processes into a published segment complete
/// at once while the target process never progresses; bad ranges and rights fail at
/// once with the target's errors and change nothing; after the target withdraws the
/// segment, an operation on its key waits for the target, which rejects the key.
#[test]
fn direct_across_processes_without_target_progress() {
    let mut t = Kid::spawn("target", "default", &[]);
    let nt = t.expect("NAME");
    for (k, stack) in ["default", "safe", "safe_auto"].into_iter().enumerate() {
        let base = k as u64 * 65536;
        let mut i = initiator(stack, &nt);
        i.say(&format!("BASIC {base}"));
        i.expect("DONE");
        i.say("BAD");
        i.expect("DONE");
        i.say("BYE");
        i.finish();
        let words = peek(&mut t, base, 16);
        assert_eq!(words[..8], 10u64.to_ne_bytes(), "{stack}: fetch-adds");
        assert_eq!(words[8..], 0xabcu64.to_ne_bytes(), "{stack}: compare-swap");
        assert_eq!(
            peek(&mut t, base + 64, 16),
            pattern(16, base),
            "{stack}: write"
        );
    }
    // Refused writes changed nothing.
    assert_eq!(peek(&mut t, SEG_LEN as u64 - 8, 8), [0; 8]);
    t.say("UNPUBLISH");
    t.expect("OK");
    let mut i = initiator("default", &nt);
    i.say("AFTER");
    i.expect("WAITING");
    t.say("SERVE");
    i.expect("DONE");
    i.say("BYE");
    i.finish();
    t.say("BYE");
    let fin = unhex(&t.expect("FINAL"));
    assert_eq!(
        fin[..8],
        10u64.to_ne_bytes(),
        "the write after withdrawal landed"
    );
    t.finish();
}

/// Attached remote keys across processes: the target never progresses; data, atomics
/// and the refused operations as through the endpoint; a withdrawn key no longer
/// attaches.
#[test]
fn remote_key_across_processes() {
    let mut t = Kid::spawn("target", "default", &[]);
    let nt = t.expect("NAME");
    let base = 3 * 65536;
    let mut i = initiator("default", &nt);
    i.say(&format!("RKEY {base}"));
    i.expect("DONE");
    let words = peek(&mut t, base, 16);
    assert_eq!(words[..8], 10u64.to_ne_bytes(), "fetch-adds");
    assert_eq!(words[8..], 0xabcu64.to_ne_bytes(), "compare-swap");
    assert_eq!(peek(&mut t, base + 64, 16), pattern(16, base + 1), "put");
    assert_eq!(peek(&mut t, SEG_LEN as u64 - 8, 8), [0; 8], "refused put");
    t.say("UNPUBLISH");
    t.expect("OK");
    i.say("RKEY_AFTER");
    i.expect("DONE");
    i.say("BYE");
    i.finish();
    t.say("BYE");
    t.finish();
}

/// Two processes doing 10000 fetch-adds each on the same word of a third, which never
/// progresses: the exact total, and each process sees its fetched values grow.
#[test]
fn concurrent_fetch_adds_across_processes() {
    let mut t = Kid::spawn("target", "default", &[]);
    let nt = t.expect("NAME");
    let mut a = initiator("default", &nt);
    let mut b = initiator("safe", &nt);
    a.say("ADD 10000");
    b.say("ADD 10000");
    a.expect("DONE");
    b.expect("DONE");
    a.say("BYE");
    b.say("BYE");
    a.finish();
    b.finish();
    assert_eq!(peek(&mut t, COUNTER, 8), 20000u64.to_ne_bytes());
    t.say("BYE");
    t.expect("FINAL");
    t.finish();
}

/// The target process is killed while this one accesses its published segment
/// directly (through an attached key and through the endpoint): once `waitpid`
/// returned for it, the very next operation of either kind fails with `HostUnreach`
/// instead of landing in, or reading from, the dead process's memory.
#[test]
fn direct_ops_fail_at_once_after_the_target_died() {
    let mut t = Kid::spawn("target", "default", &[]);
    let nt = unhex(&t.expect("NAME"));
    let i = node::<Stack<Shm>>();
    let peer = i.av.insert(&nt).unwrap();
    let rk = RemoteKey::attach(&nt, KEY_RW).unwrap();
    let fetch_add = |ctx: usize| -> std::result::Result<u64, Error> {
        let mut old = [0u8; 8];
        // SAFETY: `old` outlives the operation, which completes before this returns.
        let posted = unsafe {
            i.ep.fetch_atomic(
                &1u64.to_ne_bytes(),
                &mut old,
                Datatype::Uint64,
                AtomicOp::Sum,
                peer,
                COUNTER + 8,
                KEY_RW,
                Context(ctx),
            )
        };
        posted?;
        match now(&i) {
            Ok(_) => Ok(u64::from_ne_bytes(old)),
            Err(e) => Err(e.err),
        }
    };
    // Live: both paths work, many times over (well past any periodic check).
    for k in 0..1000 {
        assert_eq!(rk.fetch_add_u64(COUNTER, 1), Ok(k));
        assert_eq!(fetch_add(k as usize), Ok(k));
    }
    t.child.kill().unwrap();
    t.child.wait().unwrap();
    assert_eq!(
        rk.fetch_add_u64(COUNTER, 1),
        Err(Error::HostUnreach),
        "a fetch-add on the dead target's memory succeeded"
    );
    assert_eq!(rk.put(COUNTER, &[1; 8]), Err(Error::HostUnreach));
    assert_eq!(fetch_add(7), Err(Error::HostUnreach));
    let mut back = [0u8; 8];
    assert_eq!(rk.get(COUNTER, &mut back), Err(Error::HostUnreach));
}

/// A child puts 1 MiB at a time into a published segment, over and over; the owner
/// stops it (`SIGSTOP`), most likely inside a put, withdraws the segment, takes the
/// memory back and fills it, then lets the child go on (`SIGCONT`): whatever the child
/// was doing, no byte of it lands in the memory the owner got back. A withdrawal that
/// outwaited the stopped child quarantined the segment.
#[test]
fn a_stopped_initiator_never_writes_memory_taken_back() {
    const KEY: u64 = 0xd7_0013;
    const LEN: usize = 1 << 20;
    let t = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(LEN).unwrap();
    let mut k = Kid::spawn("putter", "default", &[]);
    k.say(&format!("PEER {} {KEY} {LEN}", hex(&t.ep.name())));
    let pid = k.child.id() as libc::pid_t;
    let before = fabric_shm::quarantined();
    let mut stopped_inside = 0;
    for round in 1..=6u8 {
        let mr = seg.register(&t.domain, &attr(RW, KEY, 0)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while u64_at(&mr, LEN - 8) != u64::from_ne_bytes([0xee; 8]) {
            assert!(Instant::now() < deadline, "round {round}: no put landed");
            std::hint::spin_loop();
        }
        // SAFETY: signals to our own child, which is alive until the end of the test.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        std::thread::sleep(Duration::from_millis(5));
        let start = Instant::now();
        drop(mr);
        if start.elapsed() >= fabric_shm::UNPUBLISH_WAIT {
            stopped_inside += 1;
        }
        seg.as_mut_slice().fill(round);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        let until = Instant::now() + Duration::from_millis(50);
        while Instant::now() < until {
            assert!(
                seg.as_slice().iter().all(|&b| b == round),
                "round {round}: a put landed after the withdrawal"
            );
        }
        if stopped_inside >= 2 {
            break;
        }
    }
    assert!(
        stopped_inside > 0,
        "the child was never stopped inside a put"
    );
    assert_eq!(fabric_shm::quarantined() - before, stopped_inside);
}

// ---------------------------------------------------------------------------------
// Across processes: child side
// ---------------------------------------------------------------------------------

/// Publishes a read-write and a read-only segment and never progresses unless told
/// (`SERVE`, until the next command). Commands: `PEEK off len`, `UNPUBLISH`, `SERVE`,
/// `BYE` (reports the first 64 bytes as `FINAL`).
fn role_target(ctl: &Ctl) {
    let n = node::<Stack<Shm>>();
    let mut seg = MappedSegment::new(SEG_LEN).unwrap();
    let mut ro_seg = MappedSegment::new(RO_LEN).unwrap();
    ro_seg.as_mut_slice().copy_from_slice(&pattern(RO_LEN, 5));
    {
        let mut mr = Some(seg.register(&n.domain, &attr(RW, KEY_RW, 0)).unwrap());
        let _ro = ro_seg
            .register(&n.domain, &attr(MrAccess::REMOTE_READ, KEY_RO, 0))
            .unwrap();
        ctl.report(&format!("NAME {}", hex(&n.ep.name())));
        let mut pending = None;
        loop {
            let l = pending.take().unwrap_or_else(|| ctl.line());
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["PEEK", off, len] => {
                    let mut b = vec![0u8; len.parse().unwrap()];
                    mr.as_ref()
                        .expect("published")
                        .read(off.parse().unwrap(), &mut b)
                        .unwrap();
                    ctl.report(&format!("BYTES {}", hex(&b)));
                }
                ["UNPUBLISH"] => {
                    mr = None;
                    ctl.report("OK");
                }
                ["SERVE"] => loop {
                    n.domain.progress();
                    if let Some(l) = ctl.try_line() {
                        pending = Some(l);
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                },
                ["BYE"] => break,
                _ => panic!("target: unknown command {l:?}"),
            }
        }
    }
    ctl.report(&format!("FINAL {}", hex(&seg.as_slice()[..64])));
}

/// Talks to the target. Commands: `BASIC base`, `BAD`, `ADD n`, `AFTER`, `BYE`.
fn role_initiator<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    ctl.report(&format!("NAME {}", hex(&n.ep.name())));
    let target = unhex(&ctl.expect("PEER"));
    let peer = n.av.insert(&target).unwrap();
    // Auto progress completes on its own thread: wait briefly for "at once" there.
    let auto = <S::Progress as fabric::config::Progress>::AUTO;
    let done = |n: &Node<S>| if auto { next(n) } else { now(n) };
    loop {
        let l = ctl.line();
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["BASIC", base] => {
                let base: u64 = base.parse().unwrap();
                for want in [0u64, 5] {
                    let mut old = [0u8; 8];
                    // SAFETY: `old` outlives the operation.
                    unsafe {
                        n.ep.fetch_atomic(
                            &5u64.to_ne_bytes(),
                            &mut old,
                            Datatype::Uint64,
                            AtomicOp::Sum,
                            peer,
                            base,
                            KEY_RW,
                            Context(1),
                        )
                    }
                    .unwrap();
                    done(&n).unwrap();
                    assert_eq!(u64::from_ne_bytes(old), want);
                }
                let mut old = [0u8; 8];
                // SAFETY: as above.
                unsafe {
                    n.ep.compare_atomic(
                        &0xabcu64.to_ne_bytes(),
                        &0u64.to_ne_bytes(),
                        &mut old,
                        Datatype::Uint64,
                        AtomicOp::Cswap,
                        peer,
                        base + 8,
                        KEY_RW,
                        Context(2),
                    )
                }
                .unwrap();
                done(&n).unwrap();
                assert_eq!(old, [0; 8]);
                n.ep.write(&pattern(16, base), peer, base + 64, KEY_RW, Context(3))
                    .unwrap();
                done(&n).unwrap();
                let big = pattern(40_000, base + 1);
                n.ep.write(&big, peer, base + 4096, KEY_RW, Context(4))
                    .unwrap();
                done(&n).unwrap();
                let mut back = vec![0u8; big.len()];
                // SAFETY: as above.
                unsafe { n.ep.read(&mut back, peer, base + 4096, KEY_RW, Context(5)) }.unwrap();
                done(&n).unwrap();
                assert!(back == big);
                ctl.report("DONE");
            }
            ["BAD"] => {
                let err = |n: &Node<S>| done(n).expect_err("an error entry").err;
                n.ep.write(&[1; 8], peer, 0, KEY_RO, Context(1)).unwrap();
                assert_eq!(err(&n), Error::Access);
                n.ep.write(&[1; 8], peer, SEG_LEN as u64 - 4, KEY_RW, Context(2))
                    .unwrap();
                assert_eq!(err(&n), Error::Fault);
                let mut old = [0u8; 8];
                // SAFETY: `old` outlives the operation.
                unsafe {
                    n.ep.fetch_atomic(
                        &1u64.to_ne_bytes(),
                        &mut old,
                        Datatype::Uint64,
                        AtomicOp::Sum,
                        peer,
                        0,
                        KEY_RO,
                        Context(3),
                    )
                }
                .unwrap();
                assert_eq!(err(&n), Error::Access);
                // SAFETY: as above.
                unsafe {
                    n.ep.fetch_atomic(
                        &[],
                        &mut old,
                        Datatype::Uint64,
                        AtomicOp::AtomicRead,
                        peer,
                        8,
                        KEY_RO,
                        Context(4),
                    )
                }
                .unwrap();
                done(&n).unwrap();
                assert_eq!(old[..], pattern(RO_LEN, 5)[8..16]);
                ctl.report("DONE");
            }
            ["ADD", count] => {
                let count: u64 = count.parse().unwrap();
                let mut last = None;
                for _ in 0..count {
                    let mut old = [0u8; 8];
                    // SAFETY: `old` outlives the operation.
                    unsafe {
                        n.ep.fetch_atomic(
                            &1u64.to_ne_bytes(),
                            &mut old,
                            Datatype::Uint64,
                            AtomicOp::Sum,
                            peer,
                            COUNTER,
                            KEY_RW,
                            Context(1),
                        )
                    }
                    .unwrap();
                    done(&n).unwrap();
                    let v = u64::from_ne_bytes(old);
                    assert!(last.is_none_or(|l| v > l));
                    last = Some(v);
                }
                ctl.report("DONE");
            }
            ["AFTER"] => {
                n.ep.write(&[0xee; 8], peer, 0, KEY_RW, Context(9)).unwrap();
                // The target does not progress: no completion.
                let until = Instant::now() + Duration::from_millis(200);
                let mut e = [CqTaggedEntry::default(); 1];
                while Instant::now() < until {
                    assert!(matches!(n.cq.read(&mut e), Err(Error::Again) | Ok(0)));
                    n.domain.progress();
                }
                ctl.report("WAITING");
                let e = next(&n).expect_err("withdrawn key");
                assert_eq!((e.context, e.err), (Context(9), Error::KeyRejected));
                ctl.report("DONE");
            }
            ["RKEY", base] => {
                // The same operations through an attached key: no endpoint involved.
                let base: u64 = base.parse().unwrap();
                let rk = RemoteKey::attach(&target, KEY_RW).unwrap();
                rk.put(base + 64, &pattern(16, base + 1)).unwrap();
                let mut back = [0u8; 16];
                rk.get(base + 64, &mut back).unwrap();
                assert_eq!(back[..], pattern(16, base + 1)[..]);
                for k in 0..10 {
                    assert_eq!(rk.fetch_add_u64(base, 1).unwrap(), k);
                }
                assert_eq!(rk.compare_swap_u64(base + 8, 0, 0xabc).unwrap(), 0);
                assert_eq!(rk.put(SEG_LEN as u64 - 4, &[1; 8]), Err(Error::Fault));
                let ro = RemoteKey::attach(&target, KEY_RO).unwrap();
                assert_eq!(ro.put(0, &[1; 8]), Err(Error::Access));
                ctl.report("DONE");
            }
            ["RKEY_AFTER"] => {
                let rk = RemoteKey::attach(&target, KEY_RW);
                assert_eq!(rk.err(), Some(Error::NoKey), "withdrawn key still attaches");
                ctl.report("DONE");
            }
            ["BYE"] => break,
            _ => panic!("initiator: unknown command {l:?}"),
        }
    }
}

/// Puts 0xee over the whole segment the parent publishes (`PEER name key len`), again
/// and again, attaching anew whenever the key is withdrawn; until killed.
fn role_putter(ctl: &Ctl) {
    let l = ctl.expect("PEER");
    let w: Vec<&str> = l.split_whitespace().collect();
    let (target, key, len) = (unhex(w[0]), w[1].parse().unwrap(), w[2].parse().unwrap());
    let data = vec![0xeeu8; len];
    loop {
        let Ok(rk) = RemoteKey::attach(&target, key) else {
            std::thread::yield_now();
            continue;
        };
        while rk.put(rk.base(), &data).is_ok() {}
    }
}

/// Entry point of child processes (does nothing unless started as one).
#[test]
#[ignore = "child process of the cross-process tests"]
fn child_entry() {
    let (Ok(role), Ok(stack)) = (std::env::var(ROLE), std::env::var(STACK)) else {
        return;
    };
    let ctl = Ctl::new();
    match (role.as_str(), stack.as_str()) {
        ("target", _) => role_target(&ctl),
        ("putter", _) => role_putter(&ctl),
        ("initiator", "default") => role_initiator::<Stack<Shm>>(&ctl),
        ("initiator", "safe") => role_initiator::<Stack<Shm, ThreadSafe>>(&ctl),
        ("initiator", "safe_auto") => role_initiator::<Stack<Shm, ThreadSafe, Auto>>(&ctl),
        other => panic!("unknown role {other:?}"),
    }
}
