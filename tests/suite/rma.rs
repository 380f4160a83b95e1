// The RMA conformance suite, written once for any provider: conformance of RMA
// (`fi_rma`), atomics (`fi_atomic`), memory registration (`fi_mr`), counters bound to RMA
// (`fi_cntr`), triggered operations (`fi_trigger`) and `FI_FENCE` against libfabric's man
// pages, for the matrix of static stacks and run-time choices
// (`common::conformance_matrix`), each body written once against `common::Api`.
//
// Not a test crate of its own: a test crate includes it at its root after naming the
// provider under test, e.g. `tests/conformance_rma.rs` (loopback):
//
//     type Prov = fabric_loopback::Loopback;
//     include!("suite/rma.rs");
//
// Adding a provider is one such file (`tests/shm_conformance_rma.rs` with
// `type Prov = fabric_shm::Shm;`); see the top of `suite/common.rs`. Being included, this
// file has no inner attributes or `//!` docs: the including crate carries them.
//
// The test lists at the bottom go to `suite_matrix!`: RDM endpoints for the whole
// matrix by default, connected MSG endpoints for the static stacks when the including
// crate asks for them (`tests/conformance_rma_ep.rs`; see the top of `suite/common.rs`).
//
// Buffers that an `unsafe` call (read, fetching atomic, receive) may write are declared
// before the nodes, so that even when a test panics they outlive the endpoints that
// could still write them.
//
// Tests that need an operation to stay outstanding for as long as the test decides
// target a *held* peer: a node of the manual-progress default stack of the same provider,
// which only makes progress when the test drives it. That keeps them deterministic for
// initiators with a progress thread too.

#[path = "common.rs"]
#[macro_use]
mod common;

use std::time::Instant;

use common::*;
use fabric::atomic::AtomicClass;
use fabric::dynamic::prelude::*;
use fabric::prelude::*;

/// The stack of held peers: manual progress, driven only by the test.
type HeldStack = Stack<Prov>;
/// The API of held peers of nodes of `A`: the held stack on `A`'s endpoint type.
type Held<A> = St<HeldStack, <A as Api>::Kind>;

const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

fn mr_attr(access: MrAccess, key: u64) -> MrAttr {
    MrAttr {
        access,
        offset: 0,
        requested_key: key,
        context: 0,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

/// The whole region, through the serialized local accessor.
fn snapshot(mr: &dyn MrOps) -> Vec<u8> {
    let mut v = vec![0u8; mr.len()];
    mr.read(0, &mut v).expect("MemoryRegion::read");
    v
}

#[track_caller]
fn expect_err(e: &CqErrEntry, ctx: Context, err: Error) {
    assert_eq!(e.err, err, "error of {e:?}");
    assert_eq!(e.context, ctx, "context of {e:?}");
}

/// A node of `A` (its info changed by `tweak`) and a held peer reachable from it:
/// `(node, held peer, held peer as seen from the node)`.
fn held<A: Api>(tweak: impl Fn(&mut Info)) -> (Node<A>, Node<Held<A>>, FiAddr) {
    let sa = NodeSpec {
        tweak: &tweak,
        ..NodeSpec::DEFAULT
    };
    let (a, h, h_at_a, _) = pair_across::<A, Held<A>>(&sa, &NodeSpec::DEFAULT);
    (a, h, h_at_a)
}

/// Reads one entry from `cq`, calling `drive` between attempts; bounded by [`DEADLINE`].
fn wait_with<C: TestCq>(
    cq: &C,
    mut drive: impl FnMut(),
) -> std::result::Result<C::Entry, CqErrEntry> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut e = [C::Entry::default(); 1];
        match cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Ok(n) => panic!("cq.read into a 1-entry buffer returned {n}"),
            Err(Error::Avail) => return Err(cq.read_err().expect("read_err after Avail")),
            Err(Error::Again) => {}
            Err(e) => panic!("cq.read failed: {e}"),
        }
        drive();
        assert!(
            Instant::now() < deadline,
            "no completion within {DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}

#[track_caller]
fn ok<E: EntryView>(r: std::result::Result<E, CqErrEntry>) -> E {
    r.unwrap_or_else(|e| panic!("expected a completion, got error entry {e:?}"))
}

#[track_caller]
fn err<E: EntryView>(r: std::result::Result<E, CqErrEntry>) -> CqErrEntry {
    match r {
        Ok(e) => panic!("expected an error entry, got {e:?}"),
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------------
// RMA data transfer
// ---------------------------------------------------------------------------------

/// write, writev, writemsg and inject_write land at the right remote offsets (with a
/// non-zero registration offset), complete with `FI_RMA | FI_WRITE`, bump the initiator's
/// write counter and the target's remote-write counter, and make no target CQ entry.
fn rma_write<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = vec![0u8; 256];
    let attr = MrAttr {
        offset: 0x1000,
        ..mr_attr(RW, 0x51)
    };
    let mr = A::mr_reg(&b.domain, &mut mem, &attr).expect("mr_reg");
    assert_eq!(mr.key(), 0x51);
    assert_eq!(mr.remote_addr(), 0x1000);
    assert_eq!(mr.len(), 256);
    assert_eq!(mr.access(), RW);
    let (base, key) = (mr.remote_addr(), mr.key());
    let mut expect = vec![0u8; 256];

    let p = pattern(40, 1);
    a.ep.write(&p, b_at_a, base + 8, key, Context(1)).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::RMA | CqFlags::WRITE,
        Some(40),
        None,
        None,
    );
    expect[8..48].copy_from_slice(&p);
    assert_eq!(snapshot(&mr), expect);

    let (p1, p2, p3) = (pattern(7, 2), pattern(13, 3), pattern(1, 4));
    a.ep.writev(&[&p1, &p2, &p3], b_at_a, base + 100, key, Context(2))
        .unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::RMA | CqFlags::WRITE,
        Some(21),
        None,
        None,
    );
    expect[100..107].copy_from_slice(&p1);
    expect[107..120].copy_from_slice(&p2);
    expect[120..121].copy_from_slice(&p3);
    assert_eq!(snapshot(&mr), expect);

    let q = pattern(16, 5);
    let iov = [&q[..9], &q[9..]];
    let m = RmaMsg {
        iov: &iov,
        addr: b_at_a,
        rma_iov: RmaIov {
            addr: base + 200,
            len: 16,
            key,
        },
        context: Context(3),
        data: 0,
    };
    a.ep.writemsg(&m, OpFlags::empty()).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(3),
        CqFlags::RMA | CqFlags::WRITE,
        Some(16),
        None,
        None,
    );
    expect[200..216].copy_from_slice(&q);

    let r = pattern(32, 6);
    a.ep.inject_write(&r, b_at_a, base + 224, key).unwrap();
    expect[224..256].copy_from_slice(&r);
    wait_cntr(&b.cntr_rx, 4, &[&a.domain]);
    assert_eq!(b.cntr_rx.read(), 4, "one remote-write count per write");
    assert_eq!(snapshot(&mr), expect);
    // inject: no initiator completion; no remote CQ data: no target entry.
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_cq_empty(&b.cq, &[&a.domain]);
    assert!(
        a.cntr_tx.read() >= 3,
        "write counter counts completed writes"
    );
    assert_eq!(a.cntr_tx.read_err(), 0);
    assert_eq!(b.cntr_rx.read_err(), 0);
}

/// read, readv and readmsg fill the initiator's buffers, leave the target unchanged,
/// complete with `FI_RMA | FI_READ` and bump the read and remote-read counters.
fn rma_read<A: Api>() {
    let mut buf = [0u8; 32];
    let mut x = [0u8; 3];
    let mut y = [0u8; 20];
    let mut z = [0u8; 16];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = pattern(128, 9);
    let orig = mem.clone();
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x52)).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());

    // SAFETY: `buf` outlives the nodes and is only read after the completion.
    unsafe { a.ep.read(&mut buf, b_at_a, base + 5, key, Context(1)) }.unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::RMA | CqFlags::READ,
        Some(32),
        None,
        None,
    );
    assert_eq!(buf[..], orig[5..37]);

    {
        let mut iov: [&mut [u8]; 2] = [&mut x, &mut y];
        // SAFETY: as above, for both buffers.
        unsafe { a.ep.readv(&mut iov, b_at_a, base + 100, key, Context(2)) }.unwrap();
    }
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::RMA | CqFlags::READ,
        Some(23),
        None,
        None,
    );
    assert_eq!(x[..], orig[100..103]);
    assert_eq!(y[..], orig[103..123]);

    {
        let (z1, z2) = z.split_at_mut(10);
        let mut iov: [&mut [u8]; 2] = [z1, z2];
        let mut m = RmaMsgMut {
            iov: &mut iov,
            addr: b_at_a,
            rma_iov: RmaIov {
                addr: base + 112,
                len: 16,
                key,
            },
            context: Context(3),
        };
        // SAFETY: as above.
        unsafe { a.ep.readmsg(&mut m, OpFlags::empty()) }.unwrap();
    }
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(3),
        CqFlags::RMA | CqFlags::READ,
        Some(16),
        None,
        None,
    );
    assert_eq!(z[..], orig[112..128]);

    assert_eq!(snapshot(&mr), orig, "reads leave the target unchanged");
    assert_eq!(a.cntr_tx.read(), 3);
    wait_cntr(&b.cntr_rx, 3, &[&a.domain]);
    assert_eq!(b.cntr_rx.read(), 3);
    assert_cq_empty(&b.cq, &[&a.domain]);
}

/// writedata, inject_writedata and writemsg with `FI_REMOTE_CQ_DATA` produce a target
/// CQ entry with `FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA` and the data.
fn rma_writedata<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = vec![0u8; 64];
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x53)).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());
    let remote = CqFlags::RMA | CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA;
    let mut expect = vec![0u8; 64];

    let p = pattern(10, 1);
    a.ep.writedata(&p, 0xfeed_0001, b_at_a, base, key, Context(1))
        .unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::RMA | CqFlags::WRITE,
        Some(10),
        None,
        None,
    );
    let t = wait_ok(&b.cq, &[&a.domain]);
    check_entry(&t, Context::NULL, remote, Some(10), None, Some(0xfeed_0001));
    expect[..10].copy_from_slice(&p);
    assert_eq!(snapshot(&mr), expect);

    let q = pattern(6, 2);
    a.ep.inject_writedata(&q, 0xfeed_0002, b_at_a, base + 20, key)
        .unwrap();
    let t = wait_ok(&b.cq, &[&a.domain]);
    check_entry(&t, Context::NULL, remote, Some(6), None, Some(0xfeed_0002));
    expect[20..26].copy_from_slice(&q);
    assert_eq!(snapshot(&mr), expect);

    let r = pattern(8, 3);
    let iov = [&r[..]];
    let m = RmaMsg {
        iov: &iov,
        addr: b_at_a,
        rma_iov: RmaIov {
            addr: base + 40,
            len: 8,
            key,
        },
        context: Context(3),
        data: 0xfeed_0003,
    };
    a.ep.writemsg(&m, OpFlags::REMOTE_CQ_DATA).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(3),
        CqFlags::RMA | CqFlags::WRITE,
        Some(8),
        None,
        None,
    );
    let t = wait_ok(&b.cq, &[&a.domain]);
    check_entry(&t, Context::NULL, remote, Some(8), None, Some(0xfeed_0003));
    expect[40..48].copy_from_slice(&r);
    assert_eq!(snapshot(&mr), expect);

    // A write without remote CQ data makes no target entry.
    a.ep.write(&r, b_at_a, base + 50, key, Context(4)).unwrap();
    wait_ok(&a.cq, &[&b.domain]);
    assert_cq_empty(&b.cq, &[&a.domain]);
    assert_cq_empty(&a.cq, &[&b.domain]);
}

/// Counters bound to an MR count remote accesses of that region only, per the bound
/// event (`FI_REMOTE_WRITE` / `FI_REMOTE_READ`).
fn rma_mr_counters<A: Api>() {
    let mut out = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    let c1 = A::cntr(&b.domain, &CntrAttr::DEFAULT).unwrap();
    let c2 = A::cntr(&b.domain, &CntrAttr::DEFAULT).unwrap();
    let mut m1 = vec![0u8; 32];
    let mut m2 = vec![0u8; 32];
    let mr1 = A::mr_reg(&b.domain, &mut m1, &mr_attr(RW, 1)).unwrap();
    let mr2 = A::mr_reg(&b.domain, &mut m2, &mr_attr(RW, 2)).unwrap();
    mr1.bind_cntr(&c1, BindFlags::REMOTE_WRITE | BindFlags::REMOTE_READ)
        .unwrap();
    mr2.bind_cntr(&c2, BindFlags::REMOTE_WRITE).unwrap();
    assert_eq!(
        mr2.bind_cntr(&c2, BindFlags::TRANSMIT),
        Err(Error::BadFlags),
        "an MR counter counts remote accesses only"
    );

    for (i, mr) in [&mr1, &mr2].into_iter().enumerate() {
        let c = i * 10;
        a.ep.write(
            b"12345678",
            b_at_a,
            mr.remote_addr(),
            mr.key(),
            Context(c + 1),
        )
        .unwrap();
        wait_ok(&a.cq, &[&b.domain]);
        // SAFETY: `out` outlives the nodes; read after the completion.
        unsafe {
            a.ep.read(&mut out, b_at_a, mr.remote_addr(), mr.key(), Context(c + 2))
        }
        .unwrap();
        wait_ok(&a.cq, &[&b.domain]);
        assert_eq!(&out, b"12345678");
    }
    // A failed access counts nowhere.
    a.ep.write(b"x", b_at_a, mr1.remote_addr() + 32, mr1.key(), Context(99))
        .unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(99), Error::Fault);

    assert_eq!(c1.read(), 2, "write and read of mr1");
    assert_eq!(
        c2.read(),
        1,
        "only the write of mr2 (bound REMOTE_WRITE only)"
    );
    assert_eq!(b.cntr_rx.read(), 4, "endpoint remote counter sees all four");
    assert_eq!(a.cntr_tx.read(), 4);
    assert_eq!(a.cntr_tx.read_err(), 1);
}

// ---------------------------------------------------------------------------------
// RMA error paths
// ---------------------------------------------------------------------------------

/// A wrong key fails write, read and inject_write with `FI_EKEYREJECTED` error entries;
/// the target is untouched and the error counter counts them.
fn rma_bad_key<A: Api>() {
    let mut buf = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = pattern(64, 3);
    let orig = mem.clone();
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x77)).unwrap();
    let base = mr.remote_addr();

    a.ep.write(b"garbage!", b_at_a, base, 0x78, Context(1))
        .unwrap();
    let e = wait_err(&a.cq, &[&b.domain]);
    expect_err(&e, Context(1), Error::KeyRejected);
    assert!(e.flags.contains(CqFlags::RMA | CqFlags::WRITE), "{e:?}");

    // SAFETY: `buf` outlives the nodes.
    unsafe { a.ep.read(&mut buf, b_at_a, base, 0x78, Context(2)) }.unwrap();
    let e = wait_err(&a.cq, &[&b.domain]);
    expect_err(&e, Context(2), Error::KeyRejected);
    assert!(e.flags.contains(CqFlags::RMA | CqFlags::READ), "{e:?}");

    // inject_write: no completion on success, but a target failure is reported.
    a.ep.inject_write(b"garbage!", b_at_a, base, 0x78).unwrap();
    expect_err(
        &wait_err(&a.cq, &[&b.domain]),
        Context::NULL,
        Error::KeyRejected,
    );
    a.ep.writedata(b"garbage!", 5, b_at_a, base, 0x78, Context(4))
        .unwrap();
    expect_err(
        &wait_err(&a.cq, &[&b.domain]),
        Context(4),
        Error::KeyRejected,
    );

    assert_eq!(snapshot(&mr), orig, "target memory unchanged");
    assert_eq!(a.cntr_tx.read_err(), 4);
    assert_eq!(a.cntr_tx.read(), 0);
    assert_eq!(b.cntr_rx.read(), 0);
    // A rejected writedata makes no target entry.
    assert_cq_empty(&b.cq, &[&a.domain]);
}

/// Accesses one byte outside the region (either end, or overlapping the end) fail with
/// `FI_EFAULT`; accesses exactly up to the end succeed.
fn rma_out_of_range<A: Api>() {
    let mut buf = [0u8; 2];
    let mut last = [0u8; 1];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = pattern(64, 4);
    let orig = mem.clone();
    let attr = MrAttr {
        offset: 0x2000,
        ..mr_attr(RW, 0x33)
    };
    let mr = A::mr_reg(&b.domain, &mut mem, &attr).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());
    assert_eq!(base, 0x2000);

    let full = vec![0xeeu8; 64];
    a.ep.write(&full, b_at_a, base + 1, key, Context(1))
        .unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(1), Error::Fault);
    a.ep.write(b"x", b_at_a, base + 64, key, Context(2))
        .unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(2), Error::Fault);
    a.ep.write(b"x", b_at_a, base - 1, key, Context(3)).unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(3), Error::Fault);
    // SAFETY: `buf` outlives the nodes.
    unsafe { a.ep.read(&mut buf, b_at_a, base + 63, key, Context(4)) }.unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(4), Error::Fault);
    assert_eq!(snapshot(&mr), orig, "target memory unchanged");
    assert_eq!(a.cntr_tx.read_err(), 4);
    assert_eq!(b.cntr_rx.read(), 0);

    // Exactly the last byte, and exactly the whole region, are fine.
    // SAFETY: `last` outlives the nodes.
    unsafe { a.ep.read(&mut last, b_at_a, base + 63, key, Context(5)) }.unwrap();
    wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(last[0], orig[63]);
    a.ep.write(&full, b_at_a, base, key, Context(6)).unwrap();
    wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(snapshot(&mr), full);
}

/// Without `FI_REMOTE_WRITE` a write fails with `FI_EACCES`, without `FI_REMOTE_READ` a
/// read does; the memory is untouched. The permitted direction still works.
fn rma_no_permission<A: Api>() {
    let mut buf = [0u8; 8];
    let mut ok_buf = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut m_ro = pattern(16, 1);
    let mut m_wo = pattern(16, 2);
    let mut m_local = pattern(16, 3);
    let (o_ro, o_local) = (m_ro.clone(), m_local.clone());
    let ro = A::mr_reg(&b.domain, &mut m_ro, &mr_attr(MrAccess::REMOTE_READ, 1)).unwrap();
    let wo = A::mr_reg(&b.domain, &mut m_wo, &mr_attr(MrAccess::REMOTE_WRITE, 2)).unwrap();
    let local = A::mr_reg(
        &b.domain,
        &mut m_local,
        &mr_attr(MrAccess::READ | MrAccess::WRITE, 3),
    )
    .unwrap();

    a.ep.write(b"denied!!", b_at_a, ro.remote_addr(), ro.key(), Context(1))
        .unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(1), Error::Access);
    // SAFETY: `buf` outlives the nodes.
    unsafe {
        a.ep.read(&mut buf, b_at_a, wo.remote_addr(), wo.key(), Context(2))
    }
    .unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(2), Error::Access);
    a.ep.write(
        b"denied!!",
        b_at_a,
        local.remote_addr(),
        local.key(),
        Context(3),
    )
    .unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(3), Error::Access);
    // SAFETY: as above.
    unsafe {
        a.ep.read(
            &mut buf,
            b_at_a,
            local.remote_addr(),
            local.key(),
            Context(4),
        )
    }
    .unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(4), Error::Access);
    assert_eq!(snapshot(&ro), o_ro);
    assert_eq!(snapshot(&local), o_local);
    assert_eq!(a.cntr_tx.read_err(), 4);

    // SAFETY: `ok_buf` outlives the nodes.
    unsafe {
        a.ep.read(&mut ok_buf, b_at_a, ro.remote_addr(), ro.key(), Context(5))
    }
    .unwrap();
    wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(ok_buf[..], o_ro[..8]);
    a.ep.write(b"allowed!", b_at_a, wo.remote_addr(), wo.key(), Context(6))
        .unwrap();
    wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(&snapshot(&wo)[..8], b"allowed!");
    assert_eq!(a.cntr_tx.read(), 2);
}

// ---------------------------------------------------------------------------------
// Memory registration
// ---------------------------------------------------------------------------------

/// A requested key already in use is refused with `FI_ENOKEY`; it is free again once
/// the region is closed.
fn mr_key_in_use<A: Api>() {
    let n = node::<A>(|_| {});
    let mut m1 = vec![0u8; 16];
    let mut m2 = vec![0u8; 16];
    let mut m3 = vec![0u8; 16];
    let mr1 = A::mr_reg(&n.domain, &mut m1, &mr_attr(RW, 5)).unwrap();
    assert_eq!(mr1.key(), 5);
    assert!(matches!(
        A::mr_reg(&n.domain, &mut m2, &mr_attr(RW, 5)),
        Err(Error::NoKey)
    ));
    let other = A::mr_reg(&n.domain, &mut m3, &mr_attr(RW, 6)).unwrap();
    assert_eq!(other.key(), 6);
    drop(mr1);
    let again = A::mr_reg(&n.domain, &mut m2, &mr_attr(RW, 5)).unwrap();
    assert_eq!(again.key(), 5);
}

/// With `FI_MR_PROV_KEY | FI_MR_VIRT_ADDR` the provider picks unique keys (ignoring the
/// requested one), remote addresses are virtual addresses, and RMA works through them.
fn mr_prov_keys_virt_addr<A: Api>() {
    let mut out = [0u8; 8];
    let (a, b, b_at_a, _) = pair_with::<A>(|i| {
        i.domain_attr.mr_mode = MrMode::PROV_KEY | MrMode::VIRT_ADDR;
    });
    let mut bufs: Vec<Vec<u8>> = (0..16).map(|i| vec![i as u8; 32]).collect();
    let ptrs: Vec<u64> = bufs.iter().map(|v| v.as_ptr() as u64).collect();
    let mrs: Vec<A::Mr<'_>> = bufs
        .iter_mut()
        .map(|v| A::mr_reg(&b.domain, v, &mr_attr(RW, 7)).expect("mr_reg"))
        .collect();
    let keys: std::collections::HashSet<u64> = mrs.iter().map(|m| m.key()).collect();
    assert_eq!(keys.len(), mrs.len(), "provider keys are unique");
    for (m, p) in mrs.iter().zip(&ptrs) {
        assert_eq!(
            m.remote_addr(),
            *p,
            "FI_MR_VIRT_ADDR: remote address is the VA"
        );
    }

    let m3 = &mrs[3];
    a.ep.write(b"virtual!", b_at_a, ptrs[3] + 4, m3.key(), Context(1))
        .unwrap();
    wait_ok(&a.cq, &[&b.domain]);
    let mut expect = vec![3u8; 32];
    expect[4..12].copy_from_slice(b"virtual!");
    assert_eq!(snapshot(m3), expect);
    // SAFETY: `out` outlives the nodes.
    unsafe {
        a.ep.read(&mut out, b_at_a, ptrs[5] + 24, mrs[5].key(), Context(2))
    }
    .unwrap();
    wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(out, [5u8; 8]);

    // An offset-style address is not inside a virtually addressed region.
    a.ep.write(b"x", b_at_a, 4, m3.key(), Context(3)).unwrap();
    expect_err(&wait_err(&a.cq, &[&b.domain]), Context(3), Error::Fault);
    let unused = (1u64..).find(|k| !keys.contains(k)).unwrap();
    a.ep.write(b"x", b_at_a, ptrs[3], unused, Context(4))
        .unwrap();
    expect_err(
        &wait_err(&a.cq, &[&b.domain]),
        Context(4),
        Error::KeyRejected,
    );
    assert_eq!(snapshot(m3), expect);
}

/// After the region is closed its key is rejected and the memory is not touched.
fn mr_dereg_then_write<A: Api>() {
    let mut buf = [0u8; 4];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = vec![0u8; 32];
    let (base, key) = {
        let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 9)).unwrap();
        mr.refresh().unwrap();
        a.ep.write(b"live", b_at_a, mr.remote_addr(), mr.key(), Context(1))
            .unwrap();
        wait_ok(&a.cq, &[&b.domain]);
        (mr.remote_addr(), mr.key())
    };
    a.ep.write(b"dead", b_at_a, base, key, Context(2)).unwrap();
    expect_err(
        &wait_err(&a.cq, &[&b.domain]),
        Context(2),
        Error::KeyRejected,
    );
    // SAFETY: `buf` outlives the nodes.
    unsafe { a.ep.read(&mut buf, b_at_a, base, key, Context(3)) }.unwrap();
    expect_err(
        &wait_err(&a.cq, &[&b.domain]),
        Context(3),
        Error::KeyRejected,
    );
    assert_eq!(&mem[..4], b"live");
    assert!(mem[4..].iter().all(|&x| x == 0));
    assert_eq!(a.cntr_tx.read_err(), 2);
}

// ---------------------------------------------------------------------------------
// Atomics
// ---------------------------------------------------------------------------------

/// The classes an op belongs to, per fi_atomic(3)'s op lists.
fn classes_of(op: AtomicOp) -> &'static [AtomicClass] {
    use AtomicOp::*;
    match op {
        Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt | Mswap => &[AtomicClass::Compare],
        AtomicRead => &[AtomicClass::Fetch],
        _ => &[AtomicClass::Base, AtomicClass::Fetch],
    }
}

/// Whether `op` accepts `dt` (libfabric's reference tables, fi_atomic(3)).
fn spec_accepts(op: AtomicOp, dt: Datatype) -> bool {
    use AtomicOp::*;
    dt.is_supported()
        && match op {
            Min | Max | CswapLe | CswapLt | CswapGe | CswapGt => !dt.is_complex(),
            Bor | Band | Bxor | Mswap => dt.is_integer(),
            _ => true,
        }
}

/// Posts one atomic of `class` and waits for its completion. `res` receives the fetched
/// values (fetch and compare classes). The completion is checked for context and flags.
#[allow(clippy::too_many_arguments)]
fn run_atomic<A: Api>(
    a: &Node<A>,
    b: &Node<A>,
    dest: FiAddr,
    class: AtomicClass,
    op: AtomicOp,
    dt: Datatype,
    addr: u64,
    key: u64,
    operand: &[u8],
    compare: &[u8],
    res: &mut [u8],
    ctx: Context,
) -> std::result::Result<A::Entry, CqErrEntry> {
    let operand: &[u8] = if op == AtomicOp::AtomicRead {
        &[]
    } else {
        operand
    };
    let posted = match class {
        AtomicClass::Base => a.ep.atomic(operand, dt, op, dest, addr, key, ctx),
        // SAFETY: `res` is owned by the caller, declared before the nodes, and only read
        // after the completion is reaped below.
        AtomicClass::Fetch => unsafe {
            a.ep.fetch_atomic(operand, res, dt, op, dest, addr, key, ctx)
        },
        // SAFETY: as above.
        AtomicClass::Compare => unsafe {
            a.ep.compare_atomic(operand, compare, res, dt, op, dest, addr, key, ctx)
        },
    };
    posted.unwrap_or_else(|e| panic!("posting {class:?} {op:?} on {dt:?}: {e}"));
    let r = wait_one(&a.cq, &[&b.domain]);
    if let Ok(e) = &r {
        let f = match class {
            AtomicClass::Base => CqFlags::ATOMIC | CqFlags::WRITE,
            _ => CqFlags::ATOMIC | CqFlags::READ,
        };
        check_entry(e, ctx, f, None, None, None);
    }
    r
}

trait Int: Copy + PartialEq + PartialOrd + std::fmt::Debug {
    const ZERO: Self;
    const ONE: Self;
    fn put(self, out: &mut Vec<u8>);
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn and(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn not(self) -> Self;
}

macro_rules! int_impl {
    ($($t:ty),*) => {$(
        impl Int for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn or(self, o: Self) -> Self { self | o }
            fn and(self, o: Self) -> Self { self & o }
            fn xor(self, o: Self) -> Self { self ^ o }
            fn not(self) -> Self { !self }
        }
    )*};
}
int_impl!(u64, i32, u128);

fn bytes<T: Int>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for x in v {
        x.put(&mut out);
    }
    out
}

/// What `op` leaves in a target holding `a`, with operand `b` and compare `c`
/// (fi_atomic(3)).
fn int_ref<T: Int>(op: AtomicOp, a: T, b: T, c: T) -> T {
    use AtomicOp::*;
    let t = |x: bool| if x { T::ONE } else { T::ZERO };
    let nz = |x: T| x != T::ZERO;
    let swap_if = |x: bool| if x { b } else { a };
    match op {
        Min => swap_if(b < a),
        Max => swap_if(b > a),
        Sum => a.add(b),
        Prod => a.mul(b),
        Lor => t(nz(a) || nz(b)),
        Land => t(nz(a) && nz(b)),
        Bor => a.or(b),
        Band => a.and(b),
        Lxor => t(nz(a) != nz(b)),
        Bxor => a.xor(b),
        AtomicRead => a,
        AtomicWrite => b,
        Cswap => swap_if(c == a),
        CswapNe => swap_if(c != a),
        CswapLe => swap_if(c <= a),
        CswapLt => swap_if(c < a),
        CswapGe => swap_if(c >= a),
        CswapGt => swap_if(c > a),
        Mswap => b.and(c).or(a.and(c.not())),
    }
}

/// Every op of every class on an integer type: target values and fetched old values.
fn int_ops<A: Api, T: Int>(dt: Datatype, target: &[T], operand: &[T], compare: &[T]) {
    let mut res = vec![0u8; 256];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = vec![0u8; 256];
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x40)).unwrap();
    let off = 64usize;
    let addr = mr.remote_addr() + off as u64;
    let n = target.len() * dt.size();
    let (t0, ob, cb) = (bytes(target), bytes(operand), bytes(compare));
    let mut ctx = 100;
    for op in AtomicOp::ALL {
        for &class in classes_of(op) {
            ctx += 1;
            assert_eq!(
                match class {
                    AtomicClass::Base => a.ep.atomicvalid(dt, op),
                    AtomicClass::Fetch => a.ep.fetch_atomicvalid(dt, op),
                    AtomicClass::Compare => a.ep.compare_atomicvalid(dt, op),
                },
                Ok(4096 / dt.size()),
                "{class:?} {op:?} {dt:?} is valid"
            );
            mr.write(off, &t0).unwrap();
            res[..n].fill(0xa5);
            let e = run_atomic(
                &a,
                &b,
                b_at_a,
                class,
                op,
                dt,
                addr,
                mr.key(),
                &ob,
                &cb,
                &mut res[..n],
                Context(ctx),
            );
            ok(e);
            let want: Vec<T> = (0..target.len())
                .map(|i| int_ref(op, target[i], operand[i], compare[i]))
                .collect();
            let mut got = vec![0u8; n];
            mr.read(off, &mut got).unwrap();
            assert_eq!(got, bytes(&want), "{class:?} {op:?} {dt:?}: target");
            if class != AtomicClass::Base {
                assert_eq!(res[..n], t0[..], "{class:?} {op:?} {dt:?}: fetched");
            }
        }
    }
    // Bytes around the operated range were never touched.
    let all = snapshot(&mr);
    assert!(all[..off].iter().chain(&all[off + n..]).all(|&x| x == 0));
    assert_eq!(a.cntr_tx.read_err(), 0);
}

fn atomic_uint64_ops<A: Api>() {
    int_ops::<A, u64>(
        Datatype::Uint64,
        &[5, 7, 0, u64::MAX, 0xf0f0],
        &[3, 7, 9, 1, 0x0ff0],
        &[5, 4, 1, u64::MAX, 0x00ff],
    );
}

fn atomic_int32_ops<A: Api>() {
    int_ops::<A, i32>(
        Datatype::Int32,
        &[5, -7, 0, i32::MAX, -1],
        &[3, -7, 9, 1, 6],
        &[5, 4, -1, i32::MAX, -2],
    );
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// An x86 80-bit extended value in 16 bytes of storage, padding zeroed.
fn ld(mantissa: u64, sign_exp: u16) -> Vec<u8> {
    let mut v = mantissa.to_le_bytes().to_vec();
    v.extend_from_slice(&sign_exp.to_le_bytes());
    v.extend_from_slice(&[0; 6]);
    v
}

/// Base and fetch forms of one float case; the target is reset first.
#[allow(clippy::too_many_arguments)]
fn float_case<A: Api>(
    a: &Node<A>,
    b: &Node<A>,
    dest: FiAddr,
    mr: &dyn MrOps,
    res: &mut [u8],
    dt: Datatype,
    op: AtomicOp,
    target: &[u8],
    operand: &[u8],
    want: &[u8],
) {
    let n = target.len();
    for class in [AtomicClass::Base, AtomicClass::Fetch] {
        mr.write(0, target).unwrap();
        res[..n].fill(0xa5);
        let e = run_atomic(
            a,
            b,
            dest,
            class,
            op,
            dt,
            mr.remote_addr(),
            mr.key(),
            operand,
            &[],
            &mut res[..n],
            Context(7),
        );
        ok(e);
        let mut got = vec![0u8; n];
        mr.read(0, &mut got).unwrap();
        assert_eq!(got, want, "{class:?} {op:?} {dt:?}: target");
        if class == AtomicClass::Fetch {
            assert_eq!(&res[..n], target, "{op:?} {dt:?}: fetched");
        }
    }
}

/// Double sum/min/max, float complex sum, long double sum (base and fetch), plus the
/// msg and inject forms.
fn atomic_float_ops<A: Api>() {
    let mut res = vec![0u8; 64];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = vec![0u8; 64];
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x41)).unwrap();
    let t = f64s(&[1.5, -2.0, 3.25]);
    let o = f64s(&[2.25, -3.0, 1.0]);
    let d = Datatype::Double;
    let cases = [
        (AtomicOp::Sum, f64s(&[3.75, -5.0, 4.25])),
        (AtomicOp::Min, f64s(&[1.5, -3.0, 1.0])),
        (AtomicOp::Max, f64s(&[2.25, -2.0, 3.25])),
    ];
    for (op, want) in &cases {
        float_case(&a, &b, b_at_a, &mr, &mut res, d, *op, &t, &o, want);
    }
    float_case(
        &a,
        &b,
        b_at_a,
        &mr,
        &mut res,
        Datatype::FloatComplex,
        AtomicOp::Sum,
        &f32s(&[1.5, 2.0, -1.0, 0.5]),
        &f32s(&[0.25, -1.0, 2.0, 2.0]),
        &f32s(&[1.75, 1.0, 1.0, 2.5]),
    );
    let one = ld(0x8000_0000_0000_0000, 0x3fff);
    let one_half = ld(0xc000_0000_0000_0000, 0x3fff);
    let two = ld(0x8000_0000_0000_0000, 0x4000);
    let half = ld(0x8000_0000_0000_0000, 0x3ffe);
    let three = ld(0xc000_0000_0000_0000, 0x4000);
    if Datatype::LongDouble.is_supported() {
        float_case(
            &a,
            &b,
            b_at_a,
            &mr,
            &mut res,
            Datatype::LongDouble,
            AtomicOp::Sum,
            &[one.clone(), one_half].concat(),
            &[two.clone(), half].concat(),
            &[three, two].concat(),
        );
    } else {
        assert_eq!(
            a.ep.atomicvalid(Datatype::LongDouble, AtomicOp::Sum),
            Err(Error::OpNotSupp)
        );
    }

    // atomicmsg, fetch_atomicmsg and inject_atomic.
    mr.write(0, &f64s(&[10.0])).unwrap();
    let op1 = f64s(&[0.5]);
    let m = AtomicMsg {
        operand: &op1,
        addr: b_at_a,
        remote_addr: mr.remote_addr(),
        key: mr.key(),
        datatype: d,
        op: AtomicOp::Sum,
        context: Context(21),
        data: 0,
    };
    a.ep.atomicmsg(&m, OpFlags::empty()).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(21),
        CqFlags::ATOMIC | CqFlags::WRITE,
        None,
        None,
        None,
    );
    let m = AtomicMsg {
        context: Context(22),
        ..m
    };
    // SAFETY: `res` outlives the nodes; read after the completion.
    unsafe { a.ep.fetch_atomicmsg(&m, &mut res[..8], OpFlags::empty()) }.unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(22),
        CqFlags::ATOMIC | CqFlags::READ,
        None,
        None,
        None,
    );
    assert_eq!(res[..8], f64s(&[10.5])[..]);
    let before = b.cntr_rx.read();
    a.ep.inject_atomic(&op1, d, AtomicOp::Sum, b_at_a, mr.remote_addr(), mr.key())
        .unwrap();
    wait_cntr(&b.cntr_rx, before + 1, &[&a.domain]);
    let mut got = [0u8; 8];
    mr.read(0, &mut got).unwrap();
    assert_eq!(got[..], f64s(&[11.5])[..]);
    assert_cq_empty(&a.cq, &[&b.domain]);
}

/// 128-bit compare-and-swap: swaps where the compare matches, fetches the old values;
/// also through `compare_atomicmsg`.
fn atomic_uint128_cswap<A: Api>() {
    let mut res = vec![0u8; 32];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = vec![0u8; 32];
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x42)).unwrap();
    let big = (1u128 << 100) | 5;
    let t0 = bytes(&[big, 7u128]);
    mr.write(0, &t0).unwrap();
    let e = run_atomic(
        &a,
        &b,
        b_at_a,
        AtomicClass::Compare,
        AtomicOp::Cswap,
        Datatype::Uint128,
        mr.remote_addr(),
        mr.key(),
        &bytes(&[42u128, 99]),
        &bytes(&[big, 8u128]),
        &mut res,
        Context(1),
    );
    ok(e);
    assert_eq!(snapshot(&mr), bytes(&[42u128, 7]));
    assert_eq!(res, t0);

    let operand = bytes(&[u128::MAX]);
    let m = AtomicMsg {
        operand: &operand,
        addr: b_at_a,
        remote_addr: mr.remote_addr() + 16,
        key: mr.key(),
        datatype: Datatype::Uint128,
        op: AtomicOp::Cswap,
        context: Context(2),
        data: 0,
    };
    let cmp = bytes(&[7u128]);
    // SAFETY: `res` outlives the nodes; read after the completion.
    unsafe {
        a.ep.compare_atomicmsg(&m, &cmp, &mut res[..16], OpFlags::empty())
    }
    .unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::ATOMIC | CqFlags::READ,
        None,
        None,
        None,
    );
    assert_eq!(res[..16], bytes(&[7u128])[..]);
    assert_eq!(snapshot(&mr), bytes(&[42u128, u128::MAX]));
}

/// The valid queries agree with fi_atomic(3) for every (class, op, datatype), with the
/// count `4096 / size` (the core's `MAX_ATOMIC_SIZE`, not a provider limit);
/// `fi_query_atomic` agrees too.
fn atomic_valid_queries<A: Api>() {
    let n = node::<A>(|_| {});
    for dt in Datatype::ALL {
        for op in AtomicOp::ALL {
            for class in AtomicClass::ALL {
                let want = if classes_of(op).contains(&class) && spec_accepts(op, dt) {
                    Ok(4096 / dt.size())
                } else {
                    Err(Error::OpNotSupp)
                };
                let got = match class {
                    AtomicClass::Base => n.ep.atomicvalid(dt, op),
                    AtomicClass::Fetch => n.ep.fetch_atomicvalid(dt, op),
                    AtomicClass::Compare => n.ep.compare_atomicvalid(dt, op),
                };
                assert_eq!(got, want, "{class:?} {op:?} {dt:?}");
                assert_eq!(
                    n.domain.query_atomic(class, op, dt),
                    want,
                    "query {class:?} {op:?} {dt:?}"
                );
            }
        }
    }
}

/// Invalid combinations are refused at post time with `FI_EOPNOTSUPP`; nothing reaches
/// the target.
fn atomic_invalid_rejected<A: Api>() {
    let mut res = [0u8; 16];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = pattern(32, 8);
    let orig = mem.clone();
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x43)).unwrap();
    let (addr, key) = (mr.remote_addr(), mr.key());
    let eight = [1u8; 8];
    let c = Context(1);
    use AtomicOp::*;
    use Datatype::*;
    for (dt, op) in [
        (Double, Bor),
        (FloatComplex, Min),
        (Uint64, AtomicRead),
        (Uint64, Cswap),
        (Uint64, Mswap),
    ] {
        assert_eq!(
            a.ep.atomic(&eight, dt, op, b_at_a, addr, key, c),
            Err(Error::OpNotSupp),
            "atomic {op:?} {dt:?}"
        );
        assert_eq!(
            a.ep.inject_atomic(&eight, dt, op, b_at_a, addr, key),
            Err(Error::OpNotSupp),
            "inject_atomic {op:?} {dt:?}"
        );
    }
    for (dt, op) in [(Uint64, Cswap), (Double, Bxor), (FloatComplex, Max)] {
        // SAFETY: `res` outlives the nodes; the call fails, so nothing is written.
        let r = unsafe {
            a.ep.fetch_atomic(&eight, &mut res[..8], dt, op, b_at_a, addr, key, c)
        };
        assert_eq!(r, Err(Error::OpNotSupp), "fetch_atomic {op:?} {dt:?}");
    }
    for (dt, op) in [
        (Uint64, Sum),
        (Uint64, AtomicRead),
        (FloatComplex, CswapLt),
        (Double, Mswap),
    ] {
        // SAFETY: as above.
        let r = unsafe {
            a.ep.compare_atomic(&eight, &eight, &mut res[..8], dt, op, b_at_a, addr, key, c)
        };
        assert_eq!(r, Err(Error::OpNotSupp), "compare_atomic {op:?} {dt:?}");
    }
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_eq!(snapshot(&mr), orig);
    assert_eq!(b.cntr_rx.read(), 0);
    assert_eq!(a.cntr_tx.read() + a.cntr_tx.read_err(), 0);
}

/// class, op, remote address, key, operand, expected error.
type AtomicCase<'a> = (AtomicClass, AtomicOp, u64, u64, &'a [u8], Error);

/// Atomics with a wrong key, out of range, or without permission fail with error entries
/// and leave the target unchanged; a fetch of read-only memory works.
fn atomic_errors<A: Api>() {
    let mut res = [0u8; 16];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = pattern(64, 5);
    let mut ro_mem = pattern(16, 6);
    let (orig, ro_orig) = (mem.clone(), ro_mem.clone());
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x31)).unwrap();
    let ro = A::mr_reg(
        &b.domain,
        &mut ro_mem,
        &mr_attr(MrAccess::REMOTE_READ, 0x32),
    )
    .unwrap();
    let base = mr.remote_addr();
    let one = bytes(&[1u64]);
    let two = bytes(&[1u64, 2]);
    let u = Datatype::Uint64;
    use AtomicClass::*;
    use AtomicOp::*;
    let cases: [AtomicCase<'_>; 9] = [
        (Base, Sum, base, 0x30, &one, Error::KeyRejected),
        (Fetch, Sum, base, 0x30, &one, Error::KeyRejected),
        (Compare, Cswap, base, 0x30, &one, Error::KeyRejected),
        (Base, Sum, base + 60, 0x31, &one, Error::Fault),
        (Fetch, Sum, base + 64, 0x31, &one, Error::Fault),
        (Compare, Cswap, base + 57, 0x31, &one, Error::Fault),
        (Base, Sum, base + 56, 0x31, &two, Error::Fault),
        (Base, Sum, ro.remote_addr(), 0x32, &one, Error::Access),
        (Fetch, Sum, ro.remote_addr(), 0x32, &one, Error::Access),
    ];
    for (i, (class, op, addr, key, operand, want)) in cases.into_iter().enumerate() {
        let n = operand.len();
        let e = run_atomic(
            &a,
            &b,
            b_at_a,
            class,
            op,
            u,
            addr,
            key,
            operand,
            &one,
            &mut res[..n],
            Context(i + 1),
        );
        let e = err(e);
        expect_err(&e, Context(i + 1), want);
        assert!(e.flags.contains(CqFlags::ATOMIC), "{e:?}");
    }
    assert_eq!(snapshot(&mr), orig);
    assert_eq!(snapshot(&ro), ro_orig);
    assert_eq!(a.cntr_tx.read_err(), cases.len() as u64);
    assert_eq!(b.cntr_rx.read(), 0);

    // Fetching FI_ATOMIC_READ only needs FI_REMOTE_READ.
    let e = run_atomic(
        &a,
        &b,
        b_at_a,
        Fetch,
        AtomicRead,
        u,
        ro.remote_addr() + 8,
        0x32,
        &[],
        &[],
        &mut res[..8],
        Context(50),
    );
    ok(e);
    assert_eq!(res[..8], ro_orig[8..16]);
}

/// Fetching atomics on each path of the core's fetch entry: the direct one (a plain
/// fetch, `FI_ATOMIC_READ`, remote CQ data refused, and a vector
/// longer than the target's small result buffer) and the generic one it hands
/// `FI_FENCE` to (held behind a write in flight, then seeing what it wrote).
fn atomic_fetch_paths<A: Api>() {
    let mut res = [0u8; 256];
    let mut fenced = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    let start: Vec<u64> = (0..32).map(|i| i * 1000).collect();
    let mut mem = bytes(&start);
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x81)).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());
    use AtomicClass::*;
    use AtomicOp::*;
    let u = Datatype::Uint64;

    // 256 bytes: past the 64 the target fetches into on its own frame.
    let ones = bytes(&[1u64; 32]);
    let e = run_atomic(
        &a, &b, b_at_a, Fetch, Sum, u, base, key, &ones, &[], &mut res, Context(1),
    );
    ok(e);
    assert_eq!(res[..], bytes(&start)[..], "old values of the long vector");
    let now: Vec<u64> = start.iter().map(|v| v + 1).collect();
    assert_eq!(snapshot(&mr), bytes(&now));

    let e = run_atomic(
        &a,
        &b,
        b_at_a,
        Fetch,
        AtomicRead,
        u,
        base + 8,
        key,
        &[],
        &[],
        &mut res[..8],
        Context(2),
    );
    ok(e);
    assert_eq!(res[..8], bytes(&[1001u64])[..]);

    let five = bytes(&[5u64]);
    let m = AtomicMsg {
        operand: &five,
        addr: b_at_a,
        remote_addr: base,
        key,
        datatype: u,
        op: Sum,
        context: Context(3),
        data: 77,
    };
    // The target has no completion for remote CQ data of an atomic: refused.
    // SAFETY: refused, nothing posted.
    let r = unsafe { a.ep.fetch_atomicmsg(&m, &mut res[..8], OpFlags::REMOTE_CQ_DATA) };
    assert_eq!(r, Err(Error::OpNotSupp));
    // SAFETY: `res` outlives the nodes; read after the completion.
    unsafe { a.ep.fetch_atomicmsg(&m, &mut res[..8], OpFlags::empty()) }.unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(&e, Context(3), CqFlags::ATOMIC | CqFlags::READ, None, None, None);
    assert_eq!(res[..8], bytes(&[1u64])[..]);

    let written = bytes(&[40u64]);
    a.ep.write(&written, b_at_a, base + 16, key, Context(4))
        .unwrap();
    let one = bytes(&[1u64]);
    let m = AtomicMsg {
        operand: &one,
        remote_addr: base + 16,
        context: Context(5),
        ..m
    };
    // SAFETY: `fenced` outlives the nodes; read after the completion.
    unsafe { a.ep.fetch_atomicmsg(&m, &mut fenced, OpFlags::FENCE) }.unwrap();
    let e1 = wait_ok(&a.cq, &[&b.domain]);
    let e2 = wait_ok(&a.cq, &[&b.domain]);
    assert_eq!((e1.context(), e2.context()), (Context(4), Context(5)));
    check_entry(&e2, Context(5), CqFlags::ATOMIC | CqFlags::READ, None, None, None);
    assert_eq!(fenced, *bytes(&[40u64]), "the fenced fetch saw the write");
    let mut want = now;
    want[0] += 5;
    want[2] = 41;
    assert_eq!(snapshot(&mr), bytes(&want));
    assert_eq!(a.cntr_tx.read_err(), 0);
    // The target makes no completion of its own for atomics, remote CQ data or not.
    let mut none = [A::Entry::default(); 1];
    assert_eq!(b.cq.read(&mut none), Err(Error::Again));
}

/// Base and compare atomics on each path of the core's one-segment entry: the direct
/// one (plain calls, an inject, remote CQ data refused, `FI_DELIVERY_COMPLETE`, a compare
/// that matches and one that does not) and the generic one it hands `FI_FENCE` to
/// (held behind a write in flight, then seeing what it wrote; refused by the target
/// with error entries, leaving the memory as it was).
fn atomic_base_compare_paths<A: Api>() {
    let mut res = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = bytes(&[0u64, 1000, 2000, 3000]);
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x82)).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());
    use AtomicClass::*;
    use AtomicOp::*;
    let u = Datatype::Uint64;
    let w = |v: u64| bytes(&[v]);
    let (atomic, read) = (
        CqFlags::ATOMIC | CqFlags::WRITE,
        CqFlags::ATOMIC | CqFlags::READ,
    );

    ok(run_atomic(&a, &b, b_at_a, Base, Sum, u, base, key, &w(5), &[], &mut [], Context(1)));
    let e = run_atomic(
        &a, &b, b_at_a, Compare, Cswap, u, base + 16, key, &w(7), &w(2000), &mut res, Context(2),
    );
    ok(e);
    assert_eq!(res, *w(2000), "the matching compare's old value");
    let e = run_atomic(
        &a, &b, b_at_a, Compare, Cswap, u, base + 24, key, &w(9), &w(1), &mut res, Context(3),
    );
    ok(e);
    assert_eq!(res, *w(3000), "the failed compare's old value");

    let two = w(2);
    let m = AtomicMsg {
        operand: &two,
        addr: b_at_a,
        remote_addr: base + 8,
        key,
        datatype: u,
        op: Sum,
        context: Context(4),
        data: 77,
    };
    // The target has no completion for remote CQ data of an atomic: refused.
    assert_eq!(
        a.ep.atomicmsg(&m, OpFlags::REMOTE_CQ_DATA),
        Err(Error::OpNotSupp)
    );
    let dc = OpFlags::DELIVERY_COMPLETE;
    a.ep.atomicmsg(&m, dc).unwrap();
    check_entry(&wait_ok(&a.cq, &[&b.domain]), Context(4), atomic, None, None, None);
    a.ep.inject_atomic(&w(1), u, Sum, b_at_a, base + 8, key)
        .unwrap();
    let (eight, seven) = (w(8), w(7));
    let cm = AtomicMsg {
        operand: &eight,
        remote_addr: base + 16,
        op: Cswap,
        context: Context(5),
        ..m
    };
    // SAFETY: `res` outlives the nodes; read after the completion.
    unsafe { a.ep.compare_atomicmsg(&cm, &seven, &mut res, dc) }.unwrap();
    check_entry(&wait_ok(&a.cq, &[&b.domain]), Context(5), read, None, None, None);
    assert_eq!(res, *seven);

    // Fenced behind a write in flight: each sees what it wrote.
    a.ep.write(&w(40), b_at_a, base + 24, key, Context(6))
        .unwrap();
    let fm = AtomicMsg {
        remote_addr: base + 24,
        context: Context(7),
        ..m
    };
    a.ep.atomicmsg(&fm, OpFlags::FENCE).unwrap();
    let e1 = wait_ok(&a.cq, &[&b.domain]);
    let e2 = wait_ok(&a.cq, &[&b.domain]);
    assert_eq!((e1.context(), e2.context()), (Context(6), Context(7)));
    check_entry(&e2, Context(7), atomic, None, None, None);
    a.ep.write(&w(50), b_at_a, base + 24, key, Context(8))
        .unwrap();
    let (fifty, fifty_one) = (w(50), w(51));
    let fc = AtomicMsg {
        operand: &fifty_one,
        op: Cswap,
        context: Context(9),
        ..fm
    };
    // SAFETY: as above.
    unsafe { a.ep.compare_atomicmsg(&fc, &fifty, &mut res, OpFlags::FENCE) }.unwrap();
    let e1 = wait_ok(&a.cq, &[&b.domain]);
    let e2 = wait_ok(&a.cq, &[&b.domain]);
    assert_eq!((e1.context(), e2.context()), (Context(8), Context(9)));
    check_entry(&e2, Context(9), read, None, None, None);
    assert_eq!(res, *fifty, "the fenced compare saw the write");
    let want = bytes(&[5u64, 1003, 8, 51]);
    assert_eq!(snapshot(&mr), want);

    // Fenced and refused by the target: error entries, the memory as it was.
    let bad = AtomicMsg {
        key: key ^ 0x1000,
        context: Context(10),
        ..fc
    };
    // SAFETY: as above.
    unsafe { a.ep.compare_atomicmsg(&bad, &fifty, &mut res, OpFlags::FENCE) }.unwrap();
    expect_err(&err(wait_one(&a.cq, &[&b.domain])), Context(10), Error::KeyRejected);
    let far = AtomicMsg {
        remote_addr: base + 32,
        context: Context(11),
        ..fm
    };
    a.ep.atomicmsg(&far, OpFlags::FENCE).unwrap();
    expect_err(&err(wait_one(&a.cq, &[&b.domain])), Context(11), Error::Fault);
    assert_eq!(snapshot(&mr), want);
    assert_eq!(a.cntr_tx.read_err(), 2);
    // The target makes no completion of its own for atomics, remote CQ data or not.
    let mut none = [A::Entry::default(); 1];
    assert_eq!(b.cq.read(&mut none), Err(Error::Again));
}

// ---------------------------------------------------------------------------------
// Triggered operations
// ---------------------------------------------------------------------------------

/// A triggered tagged (and untagged) send goes out only when its counter reaches the
/// threshold.
fn triggered_send<A: Api>() {
    let mut rbuf = [0u8; 16];
    let mut mbuf = [0u8; 16];
    let (a, b, b_at_a, _) = pair::<A>();
    let t = A::cntr(&a.domain, &CntrAttr::DEFAULT).unwrap();
    // SAFETY: the buffers outlive the nodes; read after the completions.
    unsafe { b.ep.trecv(&mut rbuf, FiAddr::UNSPEC, 0x77, 0, Context(5)) }.unwrap();
    // SAFETY: as above.
    unsafe { b.ep.recv(&mut mbuf, FiAddr::UNSPEC, Context(6)) }.unwrap();
    let payload = *b"triggered";
    let iov = [&payload[..]];
    let tm = TaggedMsg {
        iov: &iov,
        addr: b_at_a,
        tag: 0x77,
        context: Context(1),
        data: 0,
    };
    a.ep.tsendmsg_triggered(&tm, OpFlags::empty(), &t, 2)
        .unwrap();
    let m = Msg {
        iov: &iov,
        addr: b_at_a,
        context: Context(2),
        data: 0,
    };
    a.ep.sendmsg_triggered(&m, OpFlags::empty(), &t, 3).unwrap();

    assert_cq_empty(&b.cq, &[&a.domain]);
    assert_cq_empty(&a.cq, &[&b.domain]);
    t.add(1);
    assert_cq_empty(&b.cq, &[&a.domain]);
    assert_cq_empty(&a.cq, &[&b.domain]);
    t.add(1);
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(5),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(9),
        Some(0x77),
        None,
    );
    assert_eq!(&rbuf[..9], b"triggered");
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::SEND | CqFlags::TAGGED,
        None,
        None,
        None,
    );
    // The untagged one waits for 3.
    assert_cq_empty(&b.cq, &[&a.domain]);
    t.set(3);
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(6),
        CqFlags::RECV | CqFlags::MSG,
        Some(9),
        None,
        None,
    );
    assert_eq!(&mbuf[..9], b"triggered");
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::SEND | CqFlags::MSG,
        None,
        None,
        None,
    );
}

/// A triggered write and a triggered atomic leave the target untouched until the
/// counter reaches the threshold.
fn triggered_write_atomic<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    let t = A::cntr(&a.domain, &CntrAttr::DEFAULT).unwrap();
    let mut mem = vec![0u8; 32];
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x61)).unwrap();
    mr.write(16, &bytes(&[5u64])).unwrap();
    let data = pattern(16, 2);
    let iov = [&data[..]];
    let m = RmaMsg {
        iov: &iov,
        addr: b_at_a,
        rma_iov: RmaIov {
            addr: mr.remote_addr(),
            len: 16,
            key: mr.key(),
        },
        context: Context(1),
        data: 0,
    };
    a.ep.writemsg_triggered(&m, OpFlags::empty(), &t, 1)
        .unwrap();
    let ten = bytes(&[10u64]);
    let am = AtomicMsg {
        operand: &ten,
        addr: b_at_a,
        remote_addr: mr.remote_addr() + 16,
        key: mr.key(),
        datatype: Datatype::Uint64,
        op: AtomicOp::Sum,
        context: Context(2),
        data: 0,
    };
    a.ep.atomicmsg_triggered(&am, OpFlags::empty(), &t, 2)
        .unwrap();

    let initial = snapshot(&mr);
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_cq_empty(&b.cq, &[&a.domain]);
    assert_eq!(snapshot(&mr), initial, "nothing written before the trigger");
    assert_eq!(b.cntr_rx.read(), 0);

    t.add(1);
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::RMA | CqFlags::WRITE,
        Some(16),
        None,
        None,
    );
    let mut expect = initial.clone();
    expect[..16].copy_from_slice(&data);
    assert_eq!(snapshot(&mr), expect);
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_eq!(snapshot(&mr), expect, "the atomic waits for threshold 2");

    t.add(1);
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::ATOMIC | CqFlags::WRITE,
        None,
        None,
        None,
    );
    expect[16..24].copy_from_slice(&bytes(&[15u64]));
    assert_eq!(snapshot(&mr), expect);
}

/// Operations fire in threshold order, even when one increment passes several
/// thresholds (fi_trigger(3)); a threshold already reached fires at once.
fn triggered_threshold_order<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    let t = A::cntr(&a.domain, &CntrAttr::DEFAULT).unwrap();
    let mut mem = vec![0u8; 4];
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x62)).unwrap();
    let rma_iov = RmaIov {
        addr: mr.remote_addr(),
        len: 4,
        key: mr.key(),
    };
    let (bb, aa) = (*b"BBBB", *b"AAAA");
    let (ib, ia) = ([&bb[..]], [&aa[..]]);
    let msg = |iov, ctx| RmaMsg {
        iov,
        addr: b_at_a,
        rma_iov,
        context: Context(ctx),
        data: 0,
    };
    a.ep.writemsg_triggered(&msg(&ib, 2), OpFlags::empty(), &t, 2)
        .unwrap();
    a.ep.writemsg_triggered(&msg(&ia, 1), OpFlags::empty(), &t, 1)
        .unwrap();
    assert_cq_empty(&a.cq, &[&b.domain]);
    t.add(2);
    let e1 = wait_ok(&a.cq, &[&b.domain]);
    let e2 = wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(
        (e1.context(), e2.context()),
        (Context(1), Context(2)),
        "threshold 1 fires before threshold 2"
    );
    assert_eq!(&snapshot(&mr), b"BBBB", "the threshold-2 write lands last");

    // Threshold already met: fires immediately.
    a.ep.writemsg_triggered(&msg(&ia, 3), OpFlags::empty(), &t, 1)
        .unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(e.context(), Context(3));
    assert_eq!(&snapshot(&mr), b"AAAA");
}

/// A triggered receive is posted only at the threshold: a message arriving earlier
/// waits as unexpected and matches once the receive is posted.
fn triggered_recv<A: Api>() {
    let mut rbuf = [0u8; 16];
    let (a, b, b_at_a, _) = pair::<A>();
    let tb = A::cntr(&b.domain, &CntrAttr::DEFAULT).unwrap();
    {
        let mut iov: [&mut [u8]; 1] = [&mut rbuf];
        let mut m = TaggedMsgMut {
            iov: &mut iov,
            addr: FiAddr::UNSPEC,
            tag: 9,
            ignore: 0,
            context: Context(3),
        };
        // SAFETY: `rbuf` outlives the nodes; read after the completion.
        unsafe { b.ep.trecvmsg_triggered(&mut m, OpFlags::empty(), &tb, 1) }.unwrap();
    }
    a.ep.tsend(b"late", b_at_a, 9, Context(1)).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::SEND | CqFlags::TAGGED,
        None,
        None,
        None,
    );
    assert_cq_empty(&b.cq, &[&a.domain]);
    tb.add(1);
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(3),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(4),
        Some(9),
        None,
    );
    assert_eq!(&rbuf[..4], b"late");
}

// ---------------------------------------------------------------------------------
// Fence, cancel, queue limits, close
// ---------------------------------------------------------------------------------

/// A fenced send posted after a write is delivered only after the write completed:
/// the target memory holds the write when the message arrives, and the initiator sees
/// the write complete first. Under manual progress the held-back send is observed
/// directly: the target gets only the write until the initiator handles its ack.
fn fence_after_write<A: Api>() {
    let mut rbuf = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut mem = vec![0u8; 32];
    let mr = A::mr_reg(&b.domain, &mut mem, &mr_attr(RW, 0x71)).unwrap();
    // SAFETY: `rbuf` outlives the nodes; read after the completion.
    unsafe { b.ep.trecv(&mut rbuf, FiAddr::UNSPEC, 1, 0, Context(7)) }.unwrap();
    let data = pattern(32, 1);
    a.ep.write(&data, b_at_a, mr.remote_addr(), mr.key(), Context(1))
        .unwrap();
    let msg = *b"fenced";
    let iov = [&msg[..]];
    let tm = TaggedMsg {
        iov: &iov,
        addr: b_at_a,
        tag: 1,
        context: Context(2),
        data: 0,
    };
    a.ep.tsendmsg(&tm, OpFlags::FENCE).unwrap();
    if !A::AUTO {
        assert_eq!(b.domain.progress(), 1, "only the write went out");
        assert_eq!(b.domain.progress(), 0, "the fenced send waits for the ack");
        let mut e = [A::Entry::default(); 1];
        assert_eq!(b.cq.read(&mut e), Err(Error::Again));
    }
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(7),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(6),
        Some(1),
        None,
    );
    assert_eq!(
        snapshot(&mr),
        data,
        "the write landed before the fenced message"
    );
    assert_eq!(&rbuf[..6], b"fenced");
    let e1 = wait_ok(&a.cq, &[&b.domain]);
    let e2 = wait_ok(&a.cq, &[&b.domain]);
    assert_eq!((e1.context(), e2.context()), (Context(1), Context(2)));
}

/// Canceling a fenced (held back) operation completes it with `FI_ECANCELED`; it is never
/// delivered, while what was posted after it still goes out after the fence clears.
fn cancel_fenced<A: Api>() {
    let mut hbuf = [0u8; 8];
    let (a, h, h_at_a) = held::<A>(|_| {});
    let mut mem = vec![0u8; 16];
    let mr = h.domain.mr_reg(&mut mem, &mr_attr(RW, 0x72)).unwrap();
    // SAFETY: `hbuf` outlives the nodes; read after the completion.
    unsafe { h.ep.trecv(&mut hbuf, FiAddr::UNSPEC, 3, 0, Context(70)) }.unwrap();
    a.ep.write(b"written!", h_at_a, mr.remote_addr(), mr.key(), Context(1))
        .unwrap();
    let fenced = *b"fenced";
    let iov = [&fenced[..]];
    let tm = TaggedMsg {
        iov: &iov,
        addr: h_at_a,
        tag: 3,
        context: Context(2),
        data: 0,
    };
    a.ep.tsendmsg(&tm, OpFlags::FENCE).unwrap();
    a.ep.tsend(b"after", h_at_a, 3, Context(3)).unwrap();

    assert_eq!(a.ep.cancel(Context(2)), Ok(()));
    let e = wait_err(&a.cq, &[]);
    expect_err(&e, Context(2), Error::Canceled);
    assert_eq!(a.ep.cancel(Context(2)), Err(Error::NoEnt));
    // The write is still outstanding (the held peer has not run): nothing else yet.
    assert_cq_empty(&a.cq, &[]);

    let e = ok(wait_with(&a.cq, || {
        h.domain.progress();
    }));
    assert_eq!(e.context(), Context(1));
    let e = ok(wait_with(&a.cq, || {
        h.domain.progress();
    }));
    assert_eq!(e.context(), Context(3));
    let e = wait_with(&h.cq, || {}).expect("receive at the held peer");
    check_entry(
        &e,
        Context(70),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(5),
        Some(3),
        None,
    );
    assert_eq!(&hbuf[..5], b"after", "the canceled message never arrives");
    assert_eq!(&snapshot(&mr)[..8], b"written!");
    let mut x = [<Entry<HeldStack>>::default(); 1];
    assert_eq!(h.cq.read(&mut x), Err(Error::Again));
}

/// A small transmit queue fills with outstanding writes (`FI_EAGAIN`) and accepts new
/// ones once completions are drained.
fn tx_queue_backpressure<A: Api>() {
    let (a, h, h_at_a) = held::<A>(|i| i.tx_attr.size = 4);
    let mut mem = vec![0u8; 80];
    let mr = h.domain.mr_reg(&mut mem, &mr_attr(RW, 0x73)).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());
    for i in 0..4u8 {
        a.ep.write(
            &[i + 1; 16],
            h_at_a,
            base + 16 * i as u64,
            key,
            Context(i as usize + 1),
        )
        .unwrap_or_else(|e| panic!("write {i}: {e}"));
    }
    assert_eq!(a.ep.tx_size_left(), 0);
    assert_eq!(
        a.ep.write(&[9; 16], h_at_a, base + 64, key, Context(9)),
        Err(Error::Again)
    );
    assert_eq!(
        a.ep.inject_write(&[9; 16], h_at_a, base + 64, key),
        Err(Error::Again)
    );
    for i in 1..=4 {
        let e = ok(wait_with(&a.cq, || {
            h.domain.progress();
        }));
        assert_eq!(e.context(), Context(i));
    }
    assert_eq!(a.ep.tx_size_left(), 4);
    a.ep.write(&[9; 16], h_at_a, base + 64, key, Context(9))
        .unwrap();
    let e = ok(wait_with(&a.cq, || {
        h.domain.progress();
    }));
    assert_eq!(e.context(), Context(9));
    let want: Vec<u8> = [1u8, 2, 3, 4, 9].iter().flat_map(|&x| [x; 16]).collect();
    assert_eq!(snapshot(&mr), want);
}

/// Dropping an endpoint with operations in flight (writes, a read, a fenced send)
/// completes each with an `FI_ECANCELED` error entry; late responses are ignored and
/// never touch the read buffer.
fn drop_with_pending<A: Api>() {
    let mut rbuf = [0u8; 8];
    let (a, h, h_at_a) = held::<A>(|_| {});
    let mut mem = pattern(32, 3);
    let mr = h.domain.mr_reg(&mut mem, &mr_attr(RW, 0x74)).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());
    let Node { ep, cq, .. } = a;
    ep.write(b"one", h_at_a, base, key, Context(1)).unwrap();
    ep.write(b"two", h_at_a, base + 8, key, Context(2)).unwrap();
    // SAFETY: `rbuf` outlives the nodes; it is checked below to stay untouched.
    unsafe { ep.read(&mut rbuf, h_at_a, base + 16, key, Context(3)) }.unwrap();
    let iov = [&b"fenced"[..]];
    let tm = TaggedMsg {
        iov: &iov,
        addr: h_at_a,
        tag: 1,
        context: Context(4),
        data: 0,
    };
    ep.tsendmsg(&tm, OpFlags::FENCE).unwrap();
    drop(ep);

    let mut ctxs: Vec<usize> = (0..4)
        .map(|_| {
            let e = err(wait_with(&cq, || {}));
            assert_eq!(e.err, Error::Canceled, "{e:?}");
            e.context.0
        })
        .collect();
    ctxs.sort_unstable();
    assert_eq!(ctxs, [1, 2, 3, 4]);
    // The peer now handles what was sent; its answers find no endpoint.
    h.domain.progress();
    h.domain.progress();
    assert_cq_empty(&cq, &[]);
    assert_eq!(
        rbuf, [0u8; 8],
        "a closed endpoint's read buffer is never written"
    );
}

suite_matrix!(
    [
        rma_write,
        rma_read,
        rma_writedata,
        rma_mr_counters,
        rma_bad_key,
        rma_out_of_range,
        rma_no_permission,
        mr_key_in_use,
        mr_prov_keys_virt_addr,
        mr_dereg_then_write,
        atomic_uint64_ops,
        atomic_int32_ops,
        atomic_float_ops,
        atomic_uint128_cswap,
        atomic_valid_queries,
        atomic_invalid_rejected,
        atomic_errors,
        atomic_fetch_paths,
        atomic_base_compare_paths,
        triggered_send,
        triggered_write_atomic,
        triggered_threshold_order,
        triggered_recv,
        fence_after_write,
        cancel_fenced,
        tx_queue_backpressure,
        drop_with_pending,
    ],
    // Every RMA test runs on any endpoint type.
    rdm_only: [],
);
