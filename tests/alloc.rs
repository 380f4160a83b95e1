//! Steady-state data transfers allocate nothing.
//!
//! A counting global allocator (wrapping [`System`]) counts the allocations and
//! reallocations made by the *current thread* only, so tests running in parallel in
//! this binary do not disturb each other's counts. Each test warms up (growing the
//! rings, pools, inboxes and match lists to their working size), then runs
//! [`MEASURED`] more iterations that must make zero allocations while checking that
//! every message or write really arrived.
//!
//! The tests use the default stacks, `Stack<Loopback>` and `Stack<Shm>` (ThreadDomain,
//! Manual, CqTagged, Table), with two endpoints of one domain, each bound to its own
//! CQ. The shm ones measure for at least [`SPAN`], so that the transport's periodic
//! work (its liveness round, every 10 ms of progress) runs inside the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_loopback::Loopback;
use fabric_shm::Shm;

struct Counting;

thread_local! {
    // `const` initialization: reading it never allocates (no lazy TLS registration
    // that could itself call the allocator).
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

#[inline]
fn bump() {
    // `try_with`: the allocator may run while this thread's TLS is being destroyed.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; counting touches only a thread-local `Cell`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread so far.
fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

const WARMUP: usize = 500;
const MEASURED: usize = 1000;
const LEN: usize = 64;

/// Shortest measured span of the shm tests: several of the transport's liveness rounds.
const SPAN: Duration = Duration::from_millis(50);

type Net = Stack<Loopback>;
type ShmNet = Stack<Shm>;

/// Two enabled endpoints of one domain; `tx` sends to `rx` at `to_rx`.
struct Pair<S: Config = Net> {
    _fabric: Fabric<S>,
    domain: Domain<S>,
    tx: Endpoint<S>,
    tx_cq: Cq<S>,
    rx: Endpoint<S>,
    rx_cq: Cq<S>,
    to_rx: FiAddr,
    _av: AddressVector<S>,
}

fn pair() -> Pair {
    pair_on::<Net>()
}

fn pair_on<S: Config>() -> Pair<S> {
    let hints = Hints::new()
        .caps(Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC)
        .ep_type(EpType::Rdm);
    let info = getinfo::<S>(Some(&hints)).unwrap().remove(0);
    let fabric = Fabric::<S>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let mk = || {
        let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
        let ep = domain.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
            .unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        (ep, cq)
    };
    let (tx, tx_cq) = mk();
    let (rx, rx_cq) = mk();
    let to_rx = av.insert(&rx.name()).unwrap();
    av.insert(&tx.name()).unwrap();
    Pair {
        _fabric: fabric,
        domain,
        tx,
        tx_cq,
        rx,
        rx_cq,
        to_rx,
        _av: av,
    }
}

/// Reads exactly one completion from `cq`, spinning over `Again` (each read progresses
/// the domain). Allocation-free: the entry array lives on the stack.
fn one<S: Config>(cq: &Cq<S>) -> CqTaggedEntry
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let mut e = [CqTaggedEntry::default(); 1];
    for _ in 0..1_000_000 {
        match cq.read(&mut e) {
            Ok(1) => return e[0],
            Ok(n) => panic!("read {n} entries into a 1-entry array"),
            Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
    }
    panic!("no completion");
}

/// Runs `step(i)` for the warm-up, then [`MEASURED`] times counting this thread's
/// allocations; panics naming `what` unless the count is zero.
fn assert_no_alloc(what: &str, step: impl FnMut(usize)) {
    assert_no_alloc_for(what, Duration::ZERO, step);
}

/// [`assert_no_alloc`], the counted part lasting at least `span` (and [`MEASURED`]
/// iterations).
fn assert_no_alloc_for(what: &str, span: Duration, mut step: impl FnMut(usize)) {
    for i in 0..WARMUP {
        step(i);
    }
    let before = allocs();
    let start = Instant::now();
    let mut i = WARMUP;
    while i < WARMUP + MEASURED || start.elapsed() < span {
        step(i);
        i += 1;
    }
    let n = allocs() - before;
    let count = i - WARMUP;
    assert_eq!(n, 0, "{what}: {n} allocations in {count} iterations");
}

fn payload(i: usize) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    for (k, x) in b.iter_mut().enumerate() {
        *x = (i as u8).wrapping_add(k as u8);
    }
    b
}

#[test]
fn allocator_counts_this_thread() {
    let before = allocs();
    let v = std::hint::black_box(vec![1u8; 16]);
    assert_eq!(allocs() - before, 1);
    drop(v);
}

#[test]
fn inject_recv_no_alloc() {
    let p = pair();
    let mut buf = [0u8; LEN];
    assert_no_alloc("inject + recv", |i| {
        let msg = payload(i);
        // SAFETY: `buf` is not touched until the receive completes below.
        unsafe { p.rx.recv(&mut buf, FiAddr::UNSPEC, Context(i)) }.unwrap();
        p.tx.inject(&msg, p.to_rx).unwrap();
        let e = one(&p.rx_cq);
        assert_eq!((e.op_context, e.len), (Context(i), LEN));
        assert!(e.flags.contains(CqFlags::RECV));
        assert_eq!(buf, msg);
    });
    // inject reports nothing at the sender.
    let mut e = [CqTaggedEntry::default(); 1];
    assert_eq!(p.tx_cq.read(&mut e), Err(Error::Again));
}

#[test]
fn send_recv_no_alloc() {
    let p = pair();
    let mut buf = [0u8; LEN];
    assert_no_alloc("send + recv", |i| {
        let msg = payload(i);
        // SAFETY: `buf` is not touched until the receive completes below.
        unsafe { p.rx.recv(&mut buf, FiAddr::UNSPEC, Context(i)) }.unwrap();
        p.tx.send(&msg, p.to_rx, Context(1 << 32 | i)).unwrap();
        let r = one(&p.rx_cq);
        assert_eq!((r.op_context, r.len), (Context(i), LEN));
        assert_eq!(buf, msg);
        let s = one(&p.tx_cq);
        assert_eq!(s.op_context, Context(1 << 32 | i));
        assert!(s.flags.contains(CqFlags::SEND));
    });
}

#[test]
fn tsend_trecv_no_alloc() {
    let p = pair();
    let mut buf = [0u8; LEN];
    assert_no_alloc("tsend + trecv", |i| {
        let msg = payload(i);
        let tag = 0xabc0_0000 | i as u64;
        // SAFETY: `buf` is not touched until the receive completes below.
        unsafe { p.rx.trecv(&mut buf, FiAddr::UNSPEC, tag, 0, Context(i)) }.unwrap();
        p.tx.tsend(&msg, p.to_rx, tag, Context(7)).unwrap();
        let r = one(&p.rx_cq);
        assert_eq!((r.op_context, r.len, r.tag), (Context(i), LEN, tag));
        assert!(r.flags.contains(CqFlags::TAGGED | CqFlags::RECV));
        assert_eq!(buf, msg);
        assert_eq!(one(&p.tx_cq).op_context, Context(7));
    });
}

#[test]
fn tinject_trecv_no_alloc() {
    let p = pair();
    let mut buf = [0u8; LEN];
    assert_no_alloc("tinject + trecv", |i| {
        let msg = payload(i);
        let tag = i as u64;
        // SAFETY: `buf` is not touched until the receive completes below.
        unsafe { p.rx.trecv(&mut buf, FiAddr::UNSPEC, tag, 0, Context(i)) }.unwrap();
        p.tx.tinject(&msg, p.to_rx, tag).unwrap();
        let r = one(&p.rx_cq);
        assert_eq!((r.op_context, r.len, r.tag), (Context(i), LEN, tag));
        assert_eq!(buf, msg);
    });
}

/// The unexpected path: the message arrives (and is buffered) before the receive is
/// posted; the core's unexpected-buffer pool must make this allocation-free too.
#[test]
fn tinject_unexpected_no_alloc() {
    let p = pair();
    let mut buf = [0u8; LEN];
    assert_no_alloc("tinject (unexpected) + trecv", |i| {
        let msg = payload(i);
        let tag = i as u64;
        p.tx.tinject(&msg, p.to_rx, tag).unwrap();
        // Drain the inbox into the unexpected list before the receive exists.
        p.domain.progress();
        // SAFETY: `buf` is not touched until the receive completes below.
        unsafe { p.rx.trecv(&mut buf, FiAddr::UNSPEC, tag, 0, Context(i)) }.unwrap();
        let r = one(&p.rx_cq);
        assert_eq!((r.op_context, r.len, r.tag), (Context(i), LEN, tag));
        assert_eq!(buf, msg);
    });
}

#[test]
fn rma_write_no_alloc() {
    let p = pair();
    let mut target = vec![0u8; LEN * 4];
    let mr = p
        .domain
        .mr_reg(
            &mut target,
            &MrAttr {
                access: MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ,
                requested_key: 42,
                ..MrAttr::DEFAULT
            },
        )
        .unwrap();
    let (key, base) = (mr.key(), mr.remote_addr());
    let mut check = [0u8; LEN];
    assert_no_alloc("write + cq read", |i| {
        let msg = payload(i);
        let off = ((i % 4) * LEN) as u64;
        p.tx.write(&msg, p.to_rx, base + off, key, Context(i))
            .unwrap();
        let w = one(&p.tx_cq);
        assert_eq!(w.op_context, Context(i));
        assert!(w.flags.contains(CqFlags::RMA | CqFlags::WRITE));
        mr.read(off as usize, &mut check).unwrap();
        assert_eq!(check, msg);
    });
}

/// `fi_cq_read` on an empty CQ (the polling loop's common case) and on a CQ holding
/// entries.
#[test]
fn cq_read_no_alloc() {
    let p = pair();
    let mut e = [CqTaggedEntry::default(); 8];
    let mut bufs = [[0u8; 8]; 8];
    assert_no_alloc("cq read", |i| {
        assert_eq!(p.rx_cq.read(&mut e), Err(Error::Again));
        for (k, b) in bufs.iter_mut().enumerate() {
            // SAFETY: the buffers are not touched until the completions are read below.
            unsafe { p.rx.trecv(b, FiAddr::UNSPEC, k as u64, 0, Context(k)) }.unwrap();
            p.tx.tinject(&(i as u64).to_le_bytes(), p.to_rx, k as u64)
                .unwrap();
        }
        let mut got = 0;
        while got < 8 {
            match p.rx_cq.read(&mut e[got..]) {
                Ok(n) => got += n,
                Err(Error::Again) => {}
                Err(err) => panic!("cq read: {err}"),
            }
        }
        for (k, x) in e.iter().enumerate() {
            assert_eq!((x.op_context, x.tag, x.len), (Context(k), k as u64, 8));
        }
        assert!(bufs.iter().all(|b| *b == (i as u64).to_le_bytes()));
    });
}

/// Tagged messages on shm, posted receive first: through the endpoint's own rings.
#[test]
fn shm_tinject_trecv_no_alloc() {
    let p = pair_on::<ShmNet>();
    let mut buf = [0u8; LEN];
    assert_no_alloc_for("shm tinject + trecv", SPAN, |i| {
        let msg = payload(i);
        let tag = i as u64;
        // SAFETY: `buf` is not touched until the receive completes below.
        unsafe { p.rx.trecv(&mut buf, FiAddr::UNSPEC, tag, 0, Context(i)) }.unwrap();
        p.tx.tinject(&msg, p.to_rx, tag).unwrap();
        let r = one(&p.rx_cq);
        assert_eq!((r.op_context, r.len, r.tag), (Context(i), LEN, tag));
        assert_eq!(buf, msg);
    });
}

/// Sends with a completion, and the unexpected path, on shm.
#[test]
fn shm_tsend_unexpected_no_alloc() {
    let p = pair_on::<ShmNet>();
    let mut buf = [0u8; LEN];
    assert_no_alloc_for("shm tsend (unexpected) + trecv", SPAN, |i| {
        let msg = payload(i);
        let tag = i as u64;
        p.tx.tsend(&msg, p.to_rx, tag, Context(7)).unwrap();
        assert_eq!(one(&p.tx_cq).op_context, Context(7));
        p.domain.progress();
        // SAFETY: `buf` is not touched until the receive completes below.
        unsafe { p.rx.trecv(&mut buf, FiAddr::UNSPEC, tag, 0, Context(i)) }.unwrap();
        let r = one(&p.rx_cq);
        assert_eq!((r.op_context, r.len, r.tag), (Context(i), LEN, tag));
        assert_eq!(buf, msg);
    });
}

/// RMA writes and fetching atomics on shm: requests answered by the target, tracked
/// until their responses arrive. The target is in a domain of its own, progressed
/// only when the initiator wants its answer, so every 100th request is still in flight
/// through a whole liveness round of the initiator (which then looks at it).
#[test]
fn shm_write_and_fetch_add_no_alloc() {
    let hints = Hints::new()
        .caps(Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC)
        .ep_type(EpType::Rdm);
    let info = getinfo::<ShmNet>(Some(&hints)).unwrap().remove(0);
    let fabric = Fabric::<ShmNet>::open(&info).unwrap();
    let (d_init, d_target) = (fabric.domain(&info).unwrap(), fabric.domain(&info).unwrap());
    let open = |d: &Domain<ShmNet>| {
        let cq = d.cq(&CqAttr::DEFAULT).unwrap();
        let av = d.av(&AvAttr::DEFAULT).unwrap();
        let ep = d.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
            .unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        (ep, cq, av)
    };
    let (init, init_cq, av) = open(&d_init);
    let (target_ep, _target_cq, target_av) = open(&d_target);
    let to = av.insert(&target_ep.name()).unwrap();
    target_av.insert(&init.name()).unwrap();
    let mut target = vec![0u8; LEN * 4];
    let mr = d_target
        .mr_reg(
            &mut target,
            &MrAttr {
                access: MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ,
                requested_key: 43,
                ..MrAttr::DEFAULT
            },
        )
        .unwrap();
    let (key, base) = (mr.key(), mr.remote_addr());
    // The initiator's completion, progressing the target while waiting for it.
    let done = |want: Context| {
        let mut e = [CqTaggedEntry::default(); 1];
        for _ in 0..1_000_000 {
            d_target.progress();
            match init_cq.read(&mut e) {
                Ok(1) => {
                    assert_eq!(e[0].op_context, want);
                    return;
                }
                Ok(_) | Err(Error::Again) => {}
                Err(err) => panic!("cq read: {err}"),
            }
        }
        panic!("no completion");
    };
    // A liveness round of the initiator's endpoint with the request unanswered.
    let in_flight = || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(12) {
            d_init.progress();
        }
    };
    let mut check = [0u8; LEN];
    let mut old = [0u8; 8];
    let mut sum = 0u64;
    assert_no_alloc_for("shm write + fetch-add + cq read", SPAN, |i| {
        let msg = payload(i);
        let off = ((1 + i % 3) * LEN) as u64;
        init.write(&msg, to, base + off, key, Context(i)).unwrap();
        if i % 100 == 0 {
            in_flight();
        }
        done(Context(i));
        mr.read(off as usize, &mut check).unwrap();
        assert_eq!(check, msg);
        // SAFETY: `old` is read only after the completion below.
        unsafe {
            init.fetch_atomic(
                &1u64.to_ne_bytes(),
                &mut old,
                Datatype::Uint64,
                AtomicOp::Sum,
                to,
                base,
                key,
                Context(i + 1),
            )
        }
        .unwrap();
        done(Context(i + 1));
        assert_eq!(u64::from_ne_bytes(old), sum);
        sum += 1;
    });
}
