// The message conformance suite, written once for any provider: conformance of the
// message and tagged data paths and of the completion, counter, EQ, AV, wait and endpoint
// objects against libfabric's man pages (`fi_msg`, `fi_tagged`, `fi_cq`, `fi_cntr`,
// `fi_eq`, `fi_av`, `fi_poll`, `fi_endpoint`), with one generic body per behaviour
// (written against `common::Api`) instantiated for the matrix of
// `common::conformance_matrix`: static stacks and the same choices made at run time.
//
// Not a test crate of its own: a test crate includes it at its root after naming the
// provider under test, e.g. `tests/conformance_msg.rs` (loopback):
//
//     type Prov = fabric_loopback::Loopback;
//     include!("suite/msg.rs");
//
// Adding a provider is one such file (`tests/shm_conformance_msg.rs` with
// `type Prov = fabric_shm::Shm;`); see the top of `suite/common.rs`. Being included, this
// file has no inner attributes or `//!` docs: the including crate carries them.
//
// The test lists at the bottom go to `suite_matrix!`: RDM endpoints for the whole
// matrix by default, connected MSG endpoints for the static stacks when the including
// crate asks for them (`tests/conformance_msg_ep.rs`; see the top of `suite/common.rs`).

#[path = "common.rs"]
#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::*;
use fabric::dynamic::prelude::*;
use fabric::prelude::*;

const ANY: FiAddr = FiAddr::UNSPEC;

/// Sends `buf` tagged `tag` with `FI_DELIVERY_COMPLETE` and waits for its completion, so
/// that the message has been accepted by `to`'s endpoint (matched or queued unexpected)
/// under either progress model.
fn deliver_tagged<A: Api>(from: &Node<A>, to: &Node<A>, dest: FiAddr, buf: &[u8], tag: u64) {
    let iov = [buf];
    let ctx = Context(0xde11_0000 + tag as usize);
    from.ep
        .tsendmsg(
            &TaggedMsg {
                iov: &iov,
                addr: dest,
                tag,
                context: ctx,
                data: 0,
            },
            OpFlags::DELIVERY_COMPLETE,
        )
        .unwrap();
    let e = wait_ok(&from.cq, &[&to.domain]);
    assert_eq!(e.context(), ctx);
}

/// As [`deliver_tagged`] for an untagged message.
fn deliver_msg<A: Api>(from: &Node<A>, to: &Node<A>, dest: FiAddr, buf: &[u8], ctx: Context) {
    let iov = [buf];
    from.ep
        .sendmsg(
            &Msg {
                iov: &iov,
                addr: dest,
                context: ctx,
                data: 0,
            },
            OpFlags::DELIVERY_COMPLETE,
        )
        .unwrap();
    let e = wait_ok(&from.cq, &[&to.domain]);
    assert_eq!(e.context(), ctx);
}

// ---------------------------------------------------------------------------------------
// fi_msg
// ---------------------------------------------------------------------------------------

fn msg_send_recv<A: Api>() {
    let mut buf = [0u8; 16];
    let (a, b, b_at_a, _) = pair::<A>();
    // SAFETY: buf outlives the receive, which completes below before buf is read.
    unsafe { b.ep.recv(&mut buf, ANY, Context(7)).unwrap() };
    a.ep.send(b"hello", b_at_a, Context(1)).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::SEND | CqFlags::MSG,
        Some(5),
        None,
        None,
    );
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(7),
        CqFlags::RECV | CqFlags::MSG,
        Some(5),
        None,
        None,
    );
    if let Some(f) = e.flags() {
        assert!(!f.contains(CqFlags::REMOTE_CQ_DATA), "{f:?}");
        assert!(!f.intersects(CqFlags::SEND | CqFlags::TAGGED), "{f:?}");
    }
    if let Some(p) = e.buf() {
        assert_eq!(p, buf.as_ptr() as usize, "buf of a receive is its start");
    }
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(a.cntr_tx.read(), 1);
    assert_eq!(b.cntr_rx.read(), 1);
    assert_eq!((a.cntr_tx.read_err(), b.cntr_rx.read_err()), (0, 0));
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_cq_empty(&b.cq, &[&a.domain]);
}

fn msg_sendv_recvv<A: Api>() {
    let mut r1 = [0u8; 3];
    let mut r2 = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    {
        let mut iov: [&mut [u8]; 2] = [&mut r1, &mut r2];
        // SAFETY: r1 and r2 outlive the receive, which completes below.
        unsafe { b.ep.recvv(&mut iov, ANY, Context(2)).unwrap() };
    }
    a.ep.sendv(&[b"abcd", b"efg"], b_at_a, Context(3)).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(3),
        CqFlags::SEND | CqFlags::MSG,
        Some(7),
        None,
        None,
    );
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::RECV | CqFlags::MSG,
        Some(7),
        None,
        None,
    );
    assert_eq!(&r1, b"abc");
    assert_eq!(&r2[..4], b"defg");
    assert_eq!(r2[4..], [0; 4]);
}

fn msg_sendmsg_recvmsg<A: Api>() {
    let mut r1 = [0u8; 4];
    let mut r2 = [0u8; 4];
    let (a, b, b_at_a, _) = pair::<A>();
    {
        let mut iov: [&mut [u8]; 2] = [&mut r1, &mut r2];
        let mut m = MsgMut {
            iov: &mut iov,
            addr: ANY,
            context: Context(21),
        };
        // SAFETY: r1 and r2 outlive the receive, which completes below.
        unsafe { b.ep.recvmsg(&mut m, OpFlags::empty()).unwrap() };
    }
    let iov: [&[u8]; 2] = [b"12", b"345678"];
    a.ep.sendmsg(
        &Msg {
            iov: &iov,
            addr: b_at_a,
            context: Context(20),
            data: 0xfeed,
        },
        OpFlags::REMOTE_CQ_DATA | OpFlags::COMPLETION,
    )
    .unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(20),
        CqFlags::SEND | CqFlags::MSG,
        Some(8),
        None,
        None,
    );
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(21),
        CqFlags::RECV | CqFlags::MSG | CqFlags::REMOTE_CQ_DATA,
        Some(8),
        None,
        Some(0xfeed),
    );
    assert_eq!((&r1, &r2), (b"1234", b"5678"));
}

fn msg_inject<A: Api>() {
    let mut buf = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    // SAFETY: buf outlives the receive, which completes below.
    unsafe { b.ep.recv(&mut buf, ANY, Context(5)).unwrap() };
    let mut src = *b"inject!!";
    a.ep.inject(&src, b_at_a).unwrap();
    src.fill(0); // the buffer is reusable as soon as inject returns
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(5),
        CqFlags::RECV | CqFlags::MSG,
        Some(8),
        None,
        None,
    );
    assert_eq!(&buf, b"inject!!");
    // fi_inject generates no completion, but counts.
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_eq!(a.cntr_tx.read(), 1);
    // The info reports the provider's limits.
    let inject_size = <Prov as fabric::Provider>::INJECT_SIZE;
    assert_eq!(a.info.tx_attr.inject_size, inject_size);
    assert_eq!(
        a.info.ep_attr.max_msg_size,
        <Prov as fabric::Provider>::MAX_MSG_SIZE
    );
    // Exactly inject_size bytes: accepted and delivered whole.
    let mut full = vec![0u8; inject_size];
    // SAFETY: full outlives the receive, which completes below.
    unsafe { b.ep.recv(&mut full, ANY, Context(6)).unwrap() };
    let edge = (0..inject_size)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<_>>();
    a.ep.inject(&edge, b_at_a).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(6),
        CqFlags::RECV | CqFlags::MSG,
        Some(inject_size),
        None,
        None,
    );
    assert!(
        full == edge,
        "an inject of inject_size bytes arrives intact"
    );
    wait_cntr(&a.cntr_tx, 2, &[&b.domain]);
    assert_eq!(a.cntr_tx.read(), 2);
    // Larger than inject_size: FI_EMSGSIZE.
    let big = vec![0u8; inject_size + 1];
    assert_eq!(a.ep.inject(&big, b_at_a), Err(Error::MsgSize));
}

fn msg_senddata_injectdata<A: Api>() {
    let mut r1 = [0u8; 8];
    let mut r2 = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    // SAFETY: buffers outlive the receives, which complete below.
    unsafe {
        b.ep.recv(&mut r1, ANY, Context(1)).unwrap();
        b.ep.recv(&mut r2, ANY, Context(2)).unwrap();
    }
    a.ep.senddata(b"one", 111, b_at_a, Context(10)).unwrap();
    a.ep.injectdata(b"two", 222, b_at_a).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(10),
        CqFlags::SEND | CqFlags::MSG,
        Some(3),
        None,
        None,
    );
    let want = CqFlags::RECV | CqFlags::MSG | CqFlags::REMOTE_CQ_DATA;
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(&e, Context(1), want, Some(3), None, Some(111));
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(&e, Context(2), want, Some(3), None, Some(222));
    assert_eq!((&r1[..3], &r2[..3]), (&b"one"[..], &b"two"[..]));
    assert_cq_empty(&a.cq, &[&b.domain]);
}

fn msg_multi_recv<A: Api>() {
    let mut big = [0u8; 128];
    let (a, b, b_at_a, _) = pair::<A>();
    assert_eq!(
        b.ep.getopt(EpOptName::MinMultiRecv).unwrap(),
        EpOpt::MinMultiRecv(fabric::endpoint::DEFAULT_MIN_MULTI_RECV)
    );
    b.ep.setopt(EpOpt::MinMultiRecv(32)).unwrap();
    assert_eq!(
        b.ep.getopt(EpOptName::MinMultiRecv).unwrap(),
        EpOpt::MinMultiRecv(32)
    );
    assert_eq!(b.ep.setopt(EpOpt::CmDataSize(8)), Err(Error::NoProtoOpt));
    let base = big.as_ptr() as usize;
    {
        let mut iov: [&mut [u8]; 1] = [&mut big];
        let mut m = MsgMut {
            iov: &mut iov,
            addr: ANY,
            context: Context(77),
        };
        // SAFETY: big outlives the multi-receive, which is released below.
        unsafe { b.ep.recvmsg(&mut m, OpFlags::MULTI_RECV).unwrap() };
    }
    for (i, fill) in [b'x', b'y', b'z'].into_iter().enumerate() {
        a.ep.send(&[fill; 40], b_at_a, Context(i + 1)).unwrap();
    }
    // 128 - 40 = 88 and 128 - 80 = 48 stay >= 32: still posted; 8 left after the third.
    for i in 0..3 {
        let e = wait_ok(&b.cq, &[&a.domain]);
        check_entry(
            &e,
            Context(77),
            CqFlags::RECV | CqFlags::MSG,
            Some(40),
            None,
            None,
        );
        if let Some(f) = e.flags() {
            assert_eq!(
                f.contains(CqFlags::MULTI_RECV),
                i == 2,
                "FI_MULTI_RECV only on the releasing completion (entry {i}: {f:?})"
            );
        }
        if let Some(p) = e.buf() {
            assert_eq!(p, base + 40 * i, "entry {i} points into the buffer");
        }
    }
    assert_eq!(&big[..40], &[b'x'; 40]);
    assert_eq!(&big[40..80], &[b'y'; 40]);
    assert_eq!(&big[80..120], &[b'z'; 40]);
    assert_eq!(b.cntr_rx.read(), 3);
    // Released: nothing left posted, a new message goes unexpected.
    assert_eq!(b.ep.cancel(Context(77)), Err(Error::NoEnt));
    // Tagged receives cannot be multi-receive.
    let mut t = [0u8; 4];
    let mut iov: [&mut [u8]; 1] = [&mut t];
    let mut tm = TaggedMsgMut {
        iov: &mut iov,
        addr: ANY,
        tag: 0,
        ignore: 0,
        context: Context(1),
    };
    // SAFETY: rejected, so nothing is posted.
    let r = unsafe { b.ep.trecvmsg(&mut tm, OpFlags::MULTI_RECV) };
    assert_eq!(r, Err(Error::BadFlags));
}

// ---------------------------------------------------------------------------------------
// fi_tagged
// ---------------------------------------------------------------------------------------

fn tagged_all_sends<A: Api>() {
    let mut bufs = [[0u8; 8]; 6];
    let (a, b, b_at_a, _) = pair::<A>();
    for (i, buf) in bufs.iter_mut().enumerate() {
        // Each receive takes exactly tag 0x100 + i.
        // SAFETY: bufs outlive the receives, which complete below.
        unsafe {
            b.ep.trecv(buf, ANY, 0x100 + i as u64, 0, Context(50 + i))
                .unwrap()
        };
    }
    // Post sends in reverse tag order: matching is by tag, not arrival.
    let t = |i: u64| 0x100 + i;
    a.ep.tinjectdata(b"i5", 55, b_at_a, t(5)).unwrap();
    a.ep.tsenddata(b"d4", 44, b_at_a, t(4), Context(4)).unwrap();
    a.ep.tinject(b"i3", b_at_a, t(3)).unwrap();
    let iov: [&[u8]; 1] = [b"m2"];
    a.ep.tsendmsg(
        &TaggedMsg {
            iov: &iov,
            addr: b_at_a,
            tag: t(2),
            context: Context(2),
            data: 22,
        },
        OpFlags::REMOTE_CQ_DATA,
    )
    .unwrap();
    a.ep.tsendv(&[b"v", b"1"], b_at_a, t(1), Context(1))
        .unwrap();
    a.ep.tsend(b"s0", b_at_a, t(0), Context(0)).unwrap();
    // Sender: completions for the four non-inject sends, in posting order.
    for ctx in [4, 2, 1, 0] {
        let e = wait_ok(&a.cq, &[&b.domain]);
        check_entry(
            &e,
            Context(ctx),
            CqFlags::SEND | CqFlags::TAGGED,
            Some(2),
            None,
            None,
        );
    }
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_eq!(a.cntr_tx.read(), 6);
    let mut seen = [false; 6];
    for _ in 0..6 {
        let e = wait_ok(&b.cq, &[&a.domain]);
        let i = e.context().0 - 50;
        assert!(i < 6 && !seen[i], "unexpected context {:?}", e.context());
        seen[i] = true;
        let data = [None, None, Some(22), None, Some(44), Some(55)][i];
        let mut f = CqFlags::RECV | CqFlags::TAGGED;
        if data.is_some() {
            f |= CqFlags::REMOTE_CQ_DATA;
        }
        check_entry(&e, Context(50 + i), f, Some(2), Some(t(i as u64)), data);
        if let (Some(fl), None) = (e.flags(), data) {
            assert!(!fl.contains(CqFlags::REMOTE_CQ_DATA));
        }
    }
    let want: [&[u8]; 6] = [b"s0", b"v1", b"m2", b"i3", b"d4", b"i5"];
    for i in 0..6 {
        assert_eq!(&bufs[i][..2], want[i], "buffer {i}");
    }
}

fn tagged_ignore_mask<A: Api>() {
    let mut wild = [0u8; 8];
    let mut exact = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    // SAFETY: buffers outlive the receives, which complete below.
    unsafe {
        b.ep.trecv(&mut wild, ANY, 0xab00, 0xff, Context(1))
            .unwrap();
        b.ep.trecv(&mut exact, ANY, 0x77, 0, Context(2)).unwrap();
    }
    // 0xac42 differs outside the mask: matches neither, stays unexpected.
    a.ep.tsend(b"no", b_at_a, 0xac42, Context(10)).unwrap();
    a.ep.tsend(b"yes", b_at_a, 0xab42, Context(11)).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(3),
        Some(0xab42),
        None,
    );
    assert_eq!(&wild[..3], b"yes");
    assert_cq_empty(&b.cq, &[&a.domain]);
    // The unmatched message is still there for a receive that accepts it.
    let mut late = [0u8; 8];
    // SAFETY: late outlives the receive, which completes below.
    unsafe { b.ep.trecv(&mut late, ANY, 0, u64::MAX, Context(3)).unwrap() };
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(3),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(2),
        Some(0xac42),
        None,
    );
    assert_eq!(&late[..2], b"no");
    a.ep.tsend(b"x", b_at_a, 0x77, Context(12)).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(1),
        Some(0x77),
        None,
    );
}

fn tagged_peek<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    // Not found: an FI_ENOMSG error entry.
    let mut none: [&mut [u8]; 0] = [];
    let mut m = TaggedMsgMut {
        iov: &mut none,
        addr: ANY,
        tag: 9,
        ignore: 0,
        context: Context(90),
    };
    // SAFETY: a peek touches no buffer.
    unsafe { b.ep.trecvmsg(&mut m, OpFlags::PEEK).unwrap() };
    let e = wait_err(&b.cq, &[&a.domain]);
    assert_eq!((e.context, e.err), (Context(90), Error::NoMsg));
    deliver_tagged(&a, &b, b_at_a, b"peekaboo", 9);
    // Found: a completion with the message's length and tag; the message stays.
    for ctx in [91, 92] {
        let mut none: [&mut [u8]; 0] = [];
        let mut m = TaggedMsgMut {
            iov: &mut none,
            addr: ANY,
            tag: 9,
            ignore: 0,
            context: Context(ctx),
        };
        // SAFETY: a peek touches no buffer.
        unsafe { b.ep.trecvmsg(&mut m, OpFlags::PEEK).unwrap() };
        let e = wait_ok(&b.cq, &[&a.domain]);
        check_entry(
            &e,
            Context(ctx),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(8),
            Some(9),
            None,
        );
    }
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives the receive, which completes below.
    unsafe { b.ep.trecv(&mut buf, ANY, 9, 0, Context(93)).unwrap() };
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(93),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(8),
        Some(9),
        None,
    );
    assert_eq!(&buf, b"peekaboo");
    // Untagged peek is not defined: FI_EBADFLAGS.
    let mut none: [&mut [u8]; 0] = [];
    let mut mm = MsgMut {
        iov: &mut none,
        addr: ANY,
        context: Context(94),
    };
    // SAFETY: rejected.
    assert_eq!(
        unsafe { b.ep.recvmsg(&mut mm, OpFlags::PEEK) },
        Err(Error::BadFlags)
    );
}

fn tagged_peek_claim<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    deliver_tagged(&a, &b, b_at_a, b"claimed", 0x42);
    let mut none: [&mut [u8]; 0] = [];
    let mut m = TaggedMsgMut {
        iov: &mut none,
        addr: ANY,
        tag: 0x40,
        ignore: 0xf,
        context: Context(5),
    };
    // SAFETY: a peek touches no buffer.
    unsafe {
        b.ep.trecvmsg(&mut m, OpFlags::PEEK | OpFlags::CLAIM)
            .unwrap()
    };
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(5),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(7),
        Some(0x42),
        None,
    );
    // Claimed: neither a peek nor a plain receive can see it any more.
    let mut none: [&mut [u8]; 0] = [];
    let mut m = TaggedMsgMut {
        iov: &mut none,
        addr: ANY,
        tag: 0x42,
        ignore: 0,
        context: Context(6),
    };
    // SAFETY: a peek touches no buffer.
    unsafe { b.ep.trecvmsg(&mut m, OpFlags::PEEK).unwrap() };
    assert_eq!(wait_err(&b.cq, &[&a.domain]).err, Error::NoMsg);
    // FI_CLAIM with the peek's context receives it.
    let mut buf = [0u8; 16];
    {
        let mut iov: [&mut [u8]; 1] = [&mut buf];
        let mut m = TaggedMsgMut {
            iov: &mut iov,
            addr: ANY,
            tag: 0x42,
            ignore: 0,
            context: Context(5),
        };
        // SAFETY: buf outlives the claim, which completes below.
        unsafe { b.ep.trecvmsg(&mut m, OpFlags::CLAIM).unwrap() };
    }
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(5),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(7),
        Some(0x42),
        None,
    );
    assert_eq!(&buf[..7], b"claimed");
    // A second claim of the same context finds nothing.
    let mut none: [&mut [u8]; 0] = [];
    let mut m = TaggedMsgMut {
        iov: &mut none,
        addr: ANY,
        tag: 0x42,
        ignore: 0,
        context: Context(5),
    };
    // SAFETY: rejected.
    assert_eq!(
        unsafe { b.ep.trecvmsg(&mut m, OpFlags::CLAIM) },
        Err(Error::NoMsg)
    );
}

fn tagged_discard<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    deliver_tagged(&a, &b, b_at_a, b"drop me", 3);
    deliver_tagged(&a, &b, b_at_a, b"claim+discard", 4);
    let peek = |tag: u64, ctx: usize, flags: OpFlags| {
        let mut none: [&mut [u8]; 0] = [];
        let mut m = TaggedMsgMut {
            iov: &mut none,
            addr: ANY,
            tag,
            ignore: 0,
            context: Context(ctx),
        };
        // SAFETY: no buffer given.
        unsafe { b.ep.trecvmsg(&mut m, flags) }
    };
    peek(3, 30, OpFlags::PEEK | OpFlags::DISCARD).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(30),
        CqFlags::RECV | CqFlags::TAGGED,
        None,
        Some(3),
        None,
    );
    peek(3, 31, OpFlags::PEEK).unwrap();
    assert_eq!(wait_err(&b.cq, &[&a.domain]).err, Error::NoMsg);
    // Claim, then discard the claimed message.
    peek(4, 40, OpFlags::PEEK | OpFlags::CLAIM).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(40),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(13),
        Some(4),
        None,
    );
    peek(4, 40, OpFlags::CLAIM | OpFlags::DISCARD).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    assert_eq!(e.context(), Context(40));
    peek(4, 41, OpFlags::PEEK).unwrap();
    assert_eq!(wait_err(&b.cq, &[&a.domain]).err, Error::NoMsg);
    assert_cq_empty(&b.cq, &[&a.domain]);
}

// ---------------------------------------------------------------------------------------
// Matching: directed receive, unexpected/expected, truncation, cancel, FI_SOURCE
// ---------------------------------------------------------------------------------------

fn directed_recv<A: Api>() {
    let mut from_c = [0u8; 8];
    let mut from_a = [0u8; 8];
    let (a, b, b_at_a, a_at_b) = pair::<A>();
    assert!(
        b.info.caps.contains(Caps::DIRECTED_RECV),
        "{:?}",
        b.info.caps
    );
    let c = node::<A>(|_| {});
    let b_at_c = c.av.insert(&b.ep.name()).unwrap();
    let c_at_b = b.av.insert(&c.ep.name()).unwrap();
    assert_ne!(a_at_b, c_at_b);
    // SAFETY: buffers outlive the receives, which complete below.
    unsafe { b.ep.trecv(&mut from_c, c_at_b, 1, 0, Context(3)).unwrap() };
    // From a: must not match the receive naming c.
    deliver_tagged(&a, &b, b_at_a, b"from a", 1);
    assert_cq_empty(&b.cq, &[&a.domain, &c.domain]);
    deliver_tagged(&c, &b, b_at_c, b"from c", 1);
    let e = wait_ok(&b.cq, &[&a.domain, &c.domain]);
    check_entry(
        &e,
        Context(3),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(6),
        Some(1),
        None,
    );
    assert_eq!(&from_c[..6], b"from c");
    // a's message waits for a receive naming a (or anyone).
    // SAFETY: as above.
    unsafe { b.ep.trecv(&mut from_a, a_at_b, 1, 0, Context(4)).unwrap() };
    let e = wait_ok(&b.cq, &[&a.domain, &c.domain]);
    check_entry(
        &e,
        Context(4),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(6),
        Some(1),
        None,
    );
    assert_eq!(&from_a[..6], b"from a");
}

/// A peer's messages that arrive before the receiver inserted it (Open MPI inserts a
/// peer when it first addresses it) match the receives later posted for its new
/// address, directed or tagged with a peek, and report it as their source; a sender
/// never inserted stays `FI_ADDR_NOTAVAIL` and is taken only by a receive from anyone.
fn directed_recv_sender_inserted_later<A: Api>() {
    let mut bufs = [[0u8; 8]; 3];
    let (a, b, _b_at_a, a_at_b) = pair::<A>();
    let c = node::<A>(|_| {});
    let d = node::<A>(|_| {});
    let b_at_c = c.av.insert(&b.ep.name()).unwrap();
    let b_at_d = d.av.insert(&b.ep.name()).unwrap();
    deliver_tagged(&c, &b, b_at_c, b"early c", 7);
    deliver_tagged(&d, &b, b_at_d, b"early d", 7);
    deliver_tagged(&c, &b, b_at_c, b"peek c", 8);
    let doms: [&dyn DomainOps; 3] = [&a.domain, &c.domain, &d.domain];
    let doms = &doms[..];
    assert_cq_empty(&b.cq, doms);
    // Inserted only now.
    let c_at_b = b.av.insert(&c.ep.name()).unwrap();
    assert_ne!(c_at_b, a_at_b);
    let [r0, r1, r2] = &mut bufs;
    // SAFETY: the buffers outlive the receives, which complete below.
    unsafe { b.ep.trecv(r0, c_at_b, 7, 0, Context(1)).unwrap() };
    let (e, src) = wait_one_from(&b.cq, doms).unwrap();
    assert_eq!(e.context(), Context(1));
    assert_eq!(src, c_at_b, "the source once inserted");
    assert_eq!(&r0[..7], b"early c");
    // A peek naming c finds its other message.
    let mut none: [&mut [u8]; 0] = [];
    let mut m = TaggedMsgMut {
        iov: &mut none,
        addr: c_at_b,
        tag: 8,
        ignore: 0,
        context: Context(2),
    };
    // SAFETY: no buffers.
    unsafe { b.ep.trecvmsg(&mut m, OpFlags::PEEK).unwrap() };
    let (e, src) = wait_one_from(&b.cq, doms).unwrap();
    assert_eq!((e.context(), src), (Context(2), c_at_b));
    // SAFETY: as above.
    unsafe { b.ep.trecv(r1, c_at_b, 8, 0, Context(3)).unwrap() };
    let (e, _) = wait_one_from(&b.cq, doms).unwrap();
    assert_eq!(e.context(), Context(3));
    assert_eq!(&r1[..6], b"peek c");
    // d was never inserted: a receive naming a does not take its message, one from
    // anyone does, and reports no source.
    // SAFETY: as above.
    unsafe { b.ep.trecv(r2, a_at_b, 7, 0, Context(4)).unwrap() };
    assert_cq_empty(&b.cq, doms);
    assert_eq!(b.ep.cancel(Context(4)), Ok(()));
    let err = wait_err(&b.cq, doms);
    assert_eq!(err.err, Error::Canceled);
    // SAFETY: as above.
    unsafe { b.ep.trecv(r2, ANY, 7, 0, Context(5)).unwrap() };
    let (e, src) = wait_one_from(&b.cq, doms).unwrap();
    assert_eq!((e.context(), src), (Context(5), FiAddr::NOTAVAIL));
    assert_eq!(&r2[..7], b"early d");
}

fn unexpected_then_expected<A: Api>() {
    let mut r = [[0u8; 4]; 3];
    let (a, b, b_at_a, _) = pair::<A>();
    // Unexpected: sent and accepted before any receive is posted; order is kept.
    deliver_msg(&a, &b, b_at_a, b"u1", Context(1));
    deliver_msg(&a, &b, b_at_a, b"u2", Context(2));
    assert_cq_empty(&b.cq, &[&a.domain]);
    let [r0, r1, r2] = &mut r;
    // SAFETY: r outlives the receives, which complete below.
    unsafe {
        b.ep.recv(r0, ANY, Context(10)).unwrap();
        b.ep.recv(r1, ANY, Context(11)).unwrap();
        // Expected: posted before the send.
        b.ep.recv(r2, ANY, Context(12)).unwrap();
    }
    a.ep.send(b"e3", b_at_a, Context(3)).unwrap();
    for (i, ctx) in [10, 11, 12].into_iter().enumerate() {
        let e = wait_ok(&b.cq, &[&a.domain]);
        check_entry(
            &e,
            Context(ctx),
            CqFlags::RECV | CqFlags::MSG,
            Some(2),
            None,
            None,
        );
        let _ = i;
    }
    assert_eq!(&r[0][..2], b"u1");
    assert_eq!(&r[1][..2], b"u2");
    assert_eq!(&r[2][..2], b"e3");
    assert_eq!(b.cntr_rx.read(), 3);
}

fn truncation<A: Api>() {
    let mut small = [0u8; 4];
    let mut tsmall = [0u8; 2];
    let (a, b, b_at_a, _) = pair::<A>();
    // SAFETY: buffers outlive the receives, which complete (in error) below.
    unsafe {
        b.ep.recv(&mut small, ANY, Context(8)).unwrap();
        b.ep.trecv(&mut tsmall, ANY, 6, 0, Context(9)).unwrap();
    }
    a.ep.send(b"0123456789", b_at_a, Context(1)).unwrap();
    let e = wait_err(&b.cq, &[&a.domain]);
    assert_eq!((e.context, e.err), (Context(8), Error::Trunc));
    assert_eq!((e.len, e.olen), (4, 6));
    assert!(
        e.flags.contains(CqFlags::RECV | CqFlags::MSG),
        "{:?}",
        e.flags
    );
    assert_eq!(&small, b"0123");
    a.ep.tsend(b"abcde", b_at_a, 6, Context(2)).unwrap();
    let e = wait_err(&b.cq, &[&a.domain]);
    assert_eq!(
        (e.context, e.err, e.len, e.olen),
        (Context(9), Error::Trunc, 2, 3)
    );
    assert_eq!(e.tag, 6);
    assert!(e.flags.contains(CqFlags::RECV | CqFlags::TAGGED));
    assert_eq!(&tsmall, b"ab");
    assert_eq!(b.cntr_rx.read_err(), 2);
    assert_eq!(b.cntr_rx.read(), 0);
    // Error entries are reported through Err(Avail) by cq.read first.
    a.ep.send(b"0123456789", b_at_a, Context(3)).unwrap();
    let mut small2 = [0u8; 1];
    // SAFETY: small2 outlives the receive, which completes below.
    unsafe { b.ep.recv(&mut small2, ANY, Context(10)).unwrap() };
    let mut es = [A::Entry::default(); 4];
    let r = retry(&[&a.domain], || match b.cq.read(&mut es) {
        Err(Error::Again) => Err(Error::Again),
        r => Ok(r),
    });
    assert_eq!(r, Err(Error::Avail));
    let e = b.cq.read_err().unwrap();
    assert_eq!((e.context, e.err), (Context(10), Error::Trunc));
    assert!(!b.cq.strerror(&e).is_empty());
    assert_eq!(b.cq.read_err(), Err(Error::Again));
}

/// Small injects (the receive lane of a provider with a short wire form: shm's compact
/// cells) that find a posted receive too short: `FI_ETRUNC` with the overflow length,
/// the tag and the remote CQ data; then whole ones, tagged and untagged.
fn lane_truncation_and_data<A: Api>() {
    let mut short = [0u8; 3];
    let mut whole = [0u8; 8];
    let mut untagged = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    // SAFETY: buffers outlive the receives, which complete below.
    unsafe {
        b.ep.trecv(&mut short, ANY, 9, 0, Context(1)).unwrap();
        b.ep.trecv(&mut whole, ANY, 9, 0, Context(2)).unwrap();
        b.ep.recv(&mut untagged, ANY, Context(3)).unwrap();
    }
    a.ep.tinjectdata(b"abcdefgh", 99, b_at_a, 9).unwrap();
    let e = wait_err(&b.cq, &[&a.domain]);
    assert_eq!(
        (e.context, e.err, e.len, e.olen, e.tag, e.data),
        (Context(1), Error::Trunc, 3, 5, 9, 99)
    );
    assert!(e.flags.contains(CqFlags::RECV | CqFlags::TAGGED | CqFlags::REMOTE_CQ_DATA));
    assert_eq!(&short, b"abc");
    a.ep.tinject(b"12345678", b_at_a, 9).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(8),
        Some(9),
        None,
    );
    if let Some(f) = e.flags() {
        assert!(!f.contains(CqFlags::REMOTE_CQ_DATA), "{f:?}");
    }
    assert_eq!(&whole, b"12345678");
    a.ep.injectdata(b"xyz", 7, b_at_a).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    let want = CqFlags::RECV | CqFlags::MSG | CqFlags::REMOTE_CQ_DATA;
    check_entry(&e, Context(3), want, Some(3), None, Some(7));
    assert_eq!(&untagged[..3], b"xyz");
    assert_eq!(b.cntr_rx.read_err(), 1);
    assert_eq!(b.cntr_rx.read(), 2);
    assert_cq_empty(&b.cq, &[&a.domain]);
}

/// A wildcard receive posted before exact ones takes the first message although the
/// exact receive has the message's tag: the exact-tag lane is skipped while a wildcard
/// receive is posted, and resumes once it is gone.
fn lane_skipped_for_older_wildcard<A: Api>() {
    let mut wild = [0u8; 8];
    let mut exact = [0u8; 8];
    let mut later = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    // SAFETY: buffers outlive the receives, which complete below.
    unsafe {
        b.ep.trecv(&mut wild, ANY, 0x500, 0xff, Context(1)).unwrap();
        b.ep.trecv(&mut exact, ANY, 0x505, 0, Context(2)).unwrap();
    }
    a.ep.tinject(b"first", b_at_a, 0x505).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(5),
        Some(0x505),
        None,
    );
    a.ep.tinject(b"second", b_at_a, 0x505).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::RECV | CqFlags::TAGGED,
        Some(6),
        Some(0x505),
        None,
    );
    // An exact receive posted before a wildcard one keeps its turn.
    // SAFETY: as above.
    unsafe {
        b.ep.trecv(&mut later, ANY, 0x505, 0, Context(3)).unwrap();
        b.ep.trecv(&mut wild, ANY, 0, !0, Context(4)).unwrap();
    }
    a.ep.tinject(b"third", b_at_a, 0x505).unwrap();
    a.ep.tinject(b"fourth", b_at_a, 0x505).unwrap();
    let e = wait_ok(&b.cq, &[&a.domain]);
    assert_eq!(e.context(), Context(3));
    let e = wait_ok(&b.cq, &[&a.domain]);
    assert_eq!(e.context(), Context(4));
    assert_eq!((&exact[..6], &later[..5], &wild[..6]), (&b"second"[..], &b"third"[..], &b"fourth"[..]));
}

fn cancel<A: Api>() {
    let mut buf = [0u8; 8];
    let mut tbuf = [0u8; 8];
    let (a, b, b_at_a, _) = pair::<A>();
    // SAFETY: buffers outlive the receives, which are canceled below.
    unsafe {
        b.ep.recv(&mut buf, ANY, Context(5)).unwrap();
        b.ep.trecv(&mut tbuf, ANY, 1, 0, Context(6)).unwrap();
    }
    b.ep.cancel(Context(5)).unwrap();
    let e = wait_err(&b.cq, &[&a.domain]);
    assert_eq!((e.context, e.err), (Context(5), Error::Canceled));
    assert!(
        e.flags.contains(CqFlags::RECV | CqFlags::MSG),
        "{:?}",
        e.flags
    );
    b.ep.cancel(Context(6)).unwrap();
    let e = wait_err(&b.cq, &[&a.domain]);
    assert_eq!((e.context, e.err), (Context(6), Error::Canceled));
    assert!(e.flags.contains(CqFlags::RECV | CqFlags::TAGGED));
    // Already canceled or never posted: FI_ENOENT.
    assert_eq!(b.ep.cancel(Context(5)), Err(Error::NoEnt));
    assert_eq!(b.ep.cancel(Context(999)), Err(Error::NoEnt));
    // A canceled receive does not take a later message.
    a.ep.send(b"late", b_at_a, Context(1)).unwrap();
    assert_cq_empty(&b.cq, &[&a.domain]);
    assert_eq!(buf, [0; 8]);
}

fn readfrom_source<A: Api>() {
    let mut buf = [0u8; 8];
    let (a, b, b_at_a, a_at_b) = pair::<A>();
    assert!(b.info.caps.contains(Caps::SOURCE), "{:?}", b.info.caps);
    // SAFETY: buf outlives the receive, which completes below.
    unsafe { b.ep.recv(&mut buf, ANY, Context(1)).unwrap() };
    a.ep.send(b"who", b_at_a, Context(2)).unwrap();
    let (e, src) = wait_one_from(&b.cq, &[&a.domain]).unwrap();
    assert_eq!(e.context(), Context(1));
    assert_eq!(src, a_at_b, "FI_SOURCE reports the sender's AV address");
    // A transmit completion has no source.
    let (e, src) = wait_one_from(&a.cq, &[&b.domain]).unwrap();
    assert_eq!((e.context(), src), (Context(2), FiAddr::NOTAVAIL));
    // A sender not in the AV is reported as FI_ADDR_NOTAVAIL.
    let c = node::<A>(|_| {});
    let b_at_c = c.av.insert(&b.ep.name()).unwrap();
    // SAFETY: as above.
    unsafe { b.ep.recv(&mut buf, ANY, Context(3)).unwrap() };
    c.ep.send(b"anon", b_at_c, Context(4)).unwrap();
    let (e, src) = wait_one_from(&b.cq, &[&c.domain]).unwrap();
    assert_eq!((e.context(), src), (Context(3), FiAddr::NOTAVAIL));
}

/// A CQ read hands out completions in the order they happened, whether they arrive
/// during its own progress pass (and may go straight into the caller's entries) or
/// were queued before: two messages taken in one pass come out one per one-entry read;
/// a message arriving while an entry waits comes after it; an error entry queued first
/// is reported first (`FI_EAVAIL`); `fi_cq_readfrom` takes no more entries than its
/// source array holds.
fn cq_read_keeps_order<A: Api>() {
    let mut bufs = [[0u8; 8]; 6];
    let mut short = [0u8; 2];
    let (a, b, b_at_a, a_at_b) = pair::<A>();
    {
        let [r1, r2, r5, r4, r6, r7] = &mut bufs;
        // SAFETY: the buffers outlive the receives, which all complete below.
        unsafe {
            b.ep.trecv(r1, ANY, 1, 0, Context(1)).unwrap();
            b.ep.trecv(r2, ANY, 2, 0, Context(2)).unwrap();
            b.ep.trecv(r5, ANY, 5, 0, Context(5)).unwrap();
            b.ep.trecv(&mut short, ANY, 3, 0, Context(3)).unwrap();
            b.ep.trecv(r4, ANY, 4, 0, Context(4)).unwrap();
            b.ep.trecv(r6, ANY, 6, 0, Context(6)).unwrap();
            b.ep.trecv(r7, ANY, 7, 0, Context(7)).unwrap();
        }
    }
    let others: &[&dyn DomainOps] = &[&a.domain];
    // Both are in b's inbox before b's next read drives progress.
    a.ep.tinject(b"one", b_at_a, 1).unwrap();
    a.ep.tinject(b"two", b_at_a, 2).unwrap();
    assert_eq!(wait_ok(&b.cq, others).context(), Context(1));
    // "two" waits in the CQ while "five" arrives during the next read.
    a.ep.tinject(b"five", b_at_a, 5).unwrap();
    assert_eq!(wait_ok(&b.cq, others).context(), Context(2));
    assert_eq!(wait_ok(&b.cq, others).context(), Context(5));
    // The truncated receive's error entry comes before the message behind it.
    a.ep.tinject(b"three", b_at_a, 3).unwrap();
    a.ep.tinject(b"four", b_at_a, 4).unwrap();
    let e = wait_err(&b.cq, others);
    assert_eq!((e.context, e.err, e.olen), (Context(3), Error::Trunc, 3));
    assert_eq!(wait_ok(&b.cq, others).context(), Context(4));
    a.ep.tinject(b"six", b_at_a, 6).unwrap();
    a.ep.tinject(b"seven", b_at_a, 7).unwrap();
    let mut out = [A::Entry::default(); 4];
    let mut src = [FiAddr(0xdead); 1];
    let deadline = Instant::now() + DEADLINE;
    let n = loop {
        match b.cq.read_from(&mut out, &mut src) {
            Ok(n) => break n,
            Err(Error::Again) => {}
            Err(e) => panic!("cq.read_from failed: {e}"),
        }
        progress_all(others);
        assert!(Instant::now() < deadline, "no completion within {DEADLINE:?}");
        std::thread::sleep(Duration::from_micros(100));
    };
    // A connection reports no source address (no FI_SOURCE on MSG endpoints).
    let want_src = match A::EP_TYPE {
        EpType::Msg => FiAddr::NOTAVAIL,
        _ => a_at_b,
    };
    assert_eq!((n, out[0].context(), src[0]), (1, Context(6), want_src));
    assert_eq!(wait_ok(&b.cq, others).context(), Context(7));
    assert_eq!(&short, b"th");
    let got: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
    assert_eq!(
        got,
        [
            &b"one\0\0\0\0\0"[..],
            b"two\0\0\0\0\0",
            b"five\0\0\0\0",
            b"four\0\0\0\0",
            b"six\0\0\0\0\0",
            b"seven\0\0\0"
        ]
    );
    assert_cq_empty(&b.cq, others);
}

// ---------------------------------------------------------------------------------------
// Completion semantics
// ---------------------------------------------------------------------------------------

fn selective_completion<A: Api>() {
    let mut r1 = [0u8; 4];
    let mut r2 = [0u8; 4];
    let selective = NodeSpec {
        cq_bind: BindFlags::SELECTIVE_COMPLETION,
        ..NodeSpec::DEFAULT
    };
    let (a, b, b_at_a, _) = pair_of::<A>(&selective, &selective);
    // Receive without FI_COMPLETION: counted, no entry.
    // SAFETY: buffers outlive the receives, which complete below.
    unsafe { b.ep.recv(&mut r1, ANY, Context(1)).unwrap() };
    a.ep.send(b"q", b_at_a, Context(2)).unwrap();
    wait_cntr(&b.cntr_rx, 1, &[&a.domain]);
    assert_eq!(a.cntr_tx.read(), 1);
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_cq_empty(&b.cq, &[&a.domain]);
    assert_eq!(r1[0], b'q');
    // With FI_COMPLETION: entries on both sides.
    {
        let mut iov: [&mut [u8]; 1] = [&mut r2];
        let mut m = MsgMut {
            iov: &mut iov,
            addr: ANY,
            context: Context(3),
        };
        // SAFETY: as above.
        unsafe { b.ep.recvmsg(&mut m, OpFlags::COMPLETION).unwrap() };
    }
    let iov: [&[u8]; 1] = [b"w"];
    a.ep.sendmsg(
        &Msg {
            iov: &iov,
            addr: b_at_a,
            context: Context(4),
            data: 0,
        },
        OpFlags::COMPLETION,
    )
    .unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(4),
        CqFlags::SEND | CqFlags::MSG,
        Some(1),
        None,
        None,
    );
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(3),
        CqFlags::RECV | CqFlags::MSG,
        Some(1),
        None,
        None,
    );
    assert_eq!(r2[0], b'w');
    // An alias whose default flags include FI_COMPLETION reports plain sends.
    let al =
        a.ep.alias(OpFlags::COMPLETION, BindFlags::TRANSMIT)
            .unwrap();
    al.send(b"z", b_at_a, Context(5)).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(e.context(), Context(5));
    a.ep.send(b"z", b_at_a, Context(6)).unwrap();
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_eq!(
        a.ep.alias(OpFlags::COMPLETION, BindFlags::empty()).err(),
        Some(Error::BadFlags)
    );
}

fn completion_levels<A: Api>() {
    let mut bufs = [[0u8; 4]; 3];
    let (a, b, b_at_a, _) = pair::<A>();
    for (i, buf) in bufs.iter_mut().enumerate() {
        // SAFETY: bufs outlive the receives, which complete below.
        unsafe { b.ep.recv(buf, ANY, Context(100 + i)).unwrap() };
    }
    let levels = [
        OpFlags::INJECT_COMPLETE,
        OpFlags::TRANSMIT_COMPLETE,
        OpFlags::DELIVERY_COMPLETE,
    ];
    for (i, fl) in levels.into_iter().enumerate() {
        let iov: [&[u8]; 1] = [&[i as u8; 4]];
        a.ep.sendmsg(
            &Msg {
                iov: &iov,
                addr: b_at_a,
                context: Context(i + 1),
                data: 0,
            },
            fl,
        )
        .unwrap();
        let e = wait_ok(&a.cq, &[&b.domain]);
        check_entry(
            &e,
            Context(i + 1),
            CqFlags::SEND | CqFlags::MSG,
            Some(4),
            None,
            None,
        );
        if fl == OpFlags::DELIVERY_COMPLETE {
            // Delivery complete: the data is in the target buffer already.
            assert_eq!(b.cntr_rx.read(), 3);
        }
    }
    for i in 0..3 {
        let e = wait_ok(&b.cq, &[&a.domain]);
        assert_eq!(e.context(), Context(100 + i));
    }
    for (i, buf) in bufs.iter().enumerate() {
        assert_eq!(buf, &[i as u8; 4]);
    }
    // Tagged with delivery complete to an endpoint with no receive posted: completes once
    // the message is queued unexpected.
    deliver_tagged(&a, &b, b_at_a, b"unexp", 77);
    assert_eq!(a.cntr_tx.read(), 4);
}

fn cq_full_resource_mgmt<A: Api>() {
    let small = CqAttr {
        size: 2,
        ..NODE_CQ_ATTR
    };
    let mut bufs = [[0u8; 4]; 4];
    let spec = NodeSpec {
        cq_attr: &small,
        ..NodeSpec::DEFAULT
    };
    let (a, b, b_at_a, _) = pair_of::<A>(&spec, &spec);
    assert_eq!(a.info.domain_attr.resource_mgmt, ResourceMgmt::Enabled);
    // Transmit side: two completions fill the CQ; the third post is refused.
    a.ep.send(b"s0", b_at_a, Context(0)).unwrap();
    a.ep.send(b"s1", b_at_a, Context(1)).unwrap();
    assert_eq!(a.ep.send(b"s2", b_at_a, Context(2)), Err(Error::Again));
    a.ep.send(b"s3", b_at_a, Context(3)).unwrap_err();
    let got = wait_n(&a.cq, &[&b.domain], 2);
    assert_eq!(
        got.iter().map(|e| e.context()).collect::<Vec<_>>(),
        [Context(0), Context(1)]
    );
    a.ep.send(b"s2", b_at_a, Context(2)).unwrap();
    a.ep.send(b"s3", b_at_a, Context(3)).unwrap();
    // Receive side: two receives complete and fill b's CQ; the messages that arrive
    // meanwhile wait, and posting more is refused until the CQ is drained.
    let [b0, b1, b2, b3] = &mut bufs;
    // SAFETY: bufs outlive the receives, which complete below.
    unsafe {
        b.ep.recv(b0, ANY, Context(10)).unwrap();
        b.ep.recv(b1, ANY, Context(11)).unwrap();
    }
    wait_cntr(&b.cntr_rx, 2, &[&a.domain]);
    // SAFETY: rejected, nothing posted.
    assert_eq!(
        unsafe { b.ep.recv(b2, ANY, Context(12)) },
        Err(Error::Again)
    );
    let got = wait_n(&b.cq, &[&a.domain], 2);
    assert_eq!(
        got.iter().map(|e| e.context()).collect::<Vec<_>>(),
        [Context(10), Context(11)]
    );
    // SAFETY: as above.
    unsafe {
        b.ep.recv(b2, ANY, Context(12)).unwrap();
        b.ep.recv(b3, ANY, Context(13)).unwrap();
    }
    let got = wait_n(&b.cq, &[&a.domain], 2);
    assert_eq!(
        got.iter().map(|e| e.context()).collect::<Vec<_>>(),
        [Context(12), Context(13)]
    );
    assert_eq!(bufs.map(|b| [b[0], b[1]]), [*b"s0", *b"s1", *b"s2", *b"s3"]);
    let got = wait_n(&a.cq, &[&b.domain], 2);
    assert_eq!(got[1].context(), Context(3));
}

fn cq_overrun_without_resource_mgmt<A: Api>() {
    let small = CqAttr {
        size: 2,
        ..NODE_CQ_ATTR
    };
    let sa = NodeSpec {
        tweak: &|i| i.domain_attr.resource_mgmt = ResourceMgmt::Disabled,
        cq_attr: &small,
        ..NodeSpec::DEFAULT
    };
    let (a, _b, b_at_a, _) = pair_of::<A>(&sa, &NodeSpec::DEFAULT);
    for i in 0..3 {
        a.ep.send(b"x", b_at_a, Context(i)).unwrap();
    }
    let mut es = [A::Entry::default(); 4];
    assert_eq!(a.cq.read(&mut es), Err(Error::Overrun));
}

fn cq_sread<A: Api>() {
    let mut buf = [0u8; 4];
    let (a, b, b_at_a, _) = pair::<A>();
    let mut es = [A::Entry::default(); 2];
    let t0 = Instant::now();
    assert_eq!(
        b.cq.sread(&mut es, 1, Some(Duration::from_millis(20))),
        Err(Error::Again)
    );
    let dt = t0.elapsed();
    assert!(
        dt >= Duration::from_millis(20),
        "sread returned after {dt:?}"
    );
    assert!(dt < Duration::from_secs(2), "sread overslept: {dt:?}");
    // SAFETY: buf outlives the receive, which completes below.
    unsafe { b.ep.recv(&mut buf, ANY, Context(4)).unwrap() };
    a.ep.send(b"sr", b_at_a, Context(1)).unwrap();
    // The message sits in b's transport: sread progresses b and returns it.
    let n = b.cq.sread(&mut es, 1, Some(DEADLINE)).unwrap();
    assert_eq!(n, 1);
    check_entry(
        &es[0],
        Context(4),
        CqFlags::RECV | CqFlags::MSG,
        Some(2),
        None,
        None,
    );
    // A CQ without a wait object cannot block.
    let nowait = A::cq(
        &a.domain,
        &CqAttr {
            wait_obj: WaitObj::None,
            ..CqAttr::DEFAULT
        },
    )
    .unwrap();
    assert_eq!(
        nowait.sread(&mut es, 1, Some(Duration::ZERO)),
        Err(Error::NoSys)
    );
}

fn cq_signal<A: Api>() {
    let (a, _b, _, _) = pair::<A>();
    let mut es = [A::Entry::default(); 1];
    a.cq.signal();
    let t0 = Instant::now();
    assert_eq!(
        a.cq.sread(&mut es, 1, Some(Duration::from_secs(3))),
        Err(Error::Again)
    );
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "signal did not wake sread"
    );
    // The signal is consumed: the next sread times out normally.
    let t0 = Instant::now();
    assert_eq!(
        a.cq.sread(&mut es, 1, Some(Duration::from_millis(10))),
        Err(Error::Again)
    );
    assert!(t0.elapsed() >= Duration::from_millis(10));
}

fn cq_wait_fd<A: Api>() {
    let fd_attr = CqAttr {
        wait_obj: WaitObj::Fd,
        ..CqAttr::DEFAULT
    };
    let sa = NodeSpec {
        cq_attr: &fd_attr,
        ..NodeSpec::DEFAULT
    };
    let (a, b, b_at_a, _) = pair_of::<A>(&sa, &NodeSpec::DEFAULT);
    let fd = a.cq.wait_fd().expect("FI_WAIT_FD CQ has a descriptor");
    assert!(fd >= 0);
    let poll_fd = |ms: i32| {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        assert!(r >= 0, "poll failed");
        r > 0 && p.revents & libc::POLLIN != 0
    };
    assert_eq!(a.cq.trywait(), Ok(()));
    assert!(!poll_fd(10), "fd readable with an empty CQ after trywait");
    a.ep.send(b"fd", b_at_a, Context(1)).unwrap();
    assert!(poll_fd(2000), "fd not readable after a completion");
    assert_eq!(a.cq.trywait(), Err(Error::Again));
    let e = wait_ok(&a.cq, &[&b.domain]);
    assert_eq!(e.context(), Context(1));
    assert_eq!(a.cq.trywait(), Ok(()));
    assert!(!poll_fd(10), "fd still readable after draining and trywait");
    // The default (Unspec) CQ of a node is not an fd CQ.
    assert!(b.cq.wait_fd().is_none() || b.cq.wait_fd().is_some_and(|f| f >= 0));
}

// ---------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------

fn counters<A: Api>() {
    let mut buf = [0u8; 4];
    let mut buf2 = [0u8; 4];
    let mut small = [0u8; 1];
    let (a, b, b_at_a, _) = pair::<A>();
    let c = A::cntr(&a.domain, &CntrAttr::DEFAULT).unwrap();
    assert_eq!((c.read(), c.read_err()), (0, 0));
    c.add(3);
    assert_eq!(c.read(), 3);
    c.set(10);
    assert_eq!(c.read(), 10);
    c.add_err(2);
    assert_eq!(c.read_err(), 2);
    c.set_err(5);
    assert_eq!(c.read_err(), 5);
    assert_eq!(c.read(), 10, "error updates leave the value alone");
    assert_eq!(c.wait(10, Some(Duration::from_millis(1))), Ok(()));
    let t0 = Instant::now();
    assert_eq!(
        c.wait(11, Some(Duration::from_millis(20))),
        Err(Error::Again)
    );
    assert!(t0.elapsed() >= Duration::from_millis(20));
    // Completions drive the bound counters; wait progresses the domain.
    // SAFETY: buffers outlive the receives, which complete below.
    unsafe {
        b.ep.recv(&mut buf, ANY, Context(1)).unwrap();
        b.ep.recv(&mut buf2, ANY, Context(5)).unwrap();
    }
    a.ep.send(b"c1", b_at_a, Context(2)).unwrap();
    a.ep.inject(b"c2", b_at_a).unwrap();
    assert_eq!(a.cntr_tx.wait(2, Some(DEADLINE)), Ok(()));
    assert_eq!(b.cntr_rx.wait(2, Some(DEADLINE)), Ok(()));
    assert_eq!(b.cntr_rx.read(), 2);
    assert_eq!((&buf[..2], &buf2[..2]), (&b"c1"[..], &b"c2"[..]));
    // A failed completion while waiting: FI_EAVAIL.
    // SAFETY: as above.
    unsafe { b.ep.recv(&mut small, ANY, Context(3)).unwrap() };
    a.ep.send(b"too long", b_at_a, Context(4)).unwrap();
    if A::AUTO {
        // The progress thread may count the error before the wait starts (the wait
        // reports errors that occur *while* waiting), so either outcome is correct.
        let r = b.cntr_rx.wait(3, Some(Duration::from_millis(100)));
        assert!(matches!(r, Err(Error::Avail | Error::Again)), "{r:?}");
    } else {
        // Manual progress: the message is handled inside the wait.
        assert_eq!(b.cntr_rx.wait(3, Some(DEADLINE)), Err(Error::Avail));
    }
    let t0 = Instant::now();
    while b.cntr_rx.read_err() == 0 {
        assert!(t0.elapsed() < DEADLINE, "truncation never counted");
        std::thread::yield_now();
    }
    assert_eq!((b.cntr_rx.read(), b.cntr_rx.read_err()), (2, 1));
    // Without a wait object, waiting is not supported.
    let nw = A::cntr(
        &a.domain,
        &CntrAttr {
            wait_obj: WaitObj::None,
            ..CntrAttr::DEFAULT
        },
    )
    .unwrap();
    assert_eq!(nw.wait(0, Some(Duration::ZERO)), Err(Error::NoSys));
}

// ---------------------------------------------------------------------------------------
// Event queues
// ---------------------------------------------------------------------------------------

fn eq_read_write<A: Api>() {
    let n = node::<A>(|_| {});
    let eq = n
        .domain
        .eq(&EqAttr {
            flags: FI_WRITE,
            ..EqAttr::DEFAULT
        })
        .unwrap();
    assert_eq!(eq.read(false), Err(Error::Again));
    assert_eq!(eq.read_err(false), Err(Error::Again));
    let t0 = Instant::now();
    assert_eq!(
        eq.sread(false, Some(Duration::from_millis(15))),
        Err(Error::Again)
    );
    assert!(t0.elapsed() >= Duration::from_millis(15));
    let ev = EqEntry {
        event: EqEvent::Notify,
        fid_context: Context(1),
        context: Context(2),
        data: 3,
        info: Some(vec![4, 5]),
        conn: None,
    };
    eq.write(ev.clone()).unwrap();
    assert_eq!(eq.read(true).unwrap(), ev, "peek");
    assert_eq!(eq.sread(false, Some(DEADLINE)).unwrap(), ev);
    assert_eq!(eq.read(false), Err(Error::Again));
    // Without FI_WRITE the application may not insert events.
    let ro = n.domain.eq(&EqAttr::DEFAULT).unwrap();
    assert_eq!(ro.write(ev.clone()), Err(Error::Inval));
    let feq = n.fabric.eq(&EqAttr::DEFAULT).unwrap();
    assert_eq!(feq.read(false), Err(Error::Again));
}

// ---------------------------------------------------------------------------------------
// Address vectors
// ---------------------------------------------------------------------------------------

fn av_insert_lookup_remove<A: Api>() {
    let a = node::<A>(|_| {});
    let peers: Vec<Node<A>> = (0..3).map(|_| node::<A>(|_| {})).collect();
    let names: Vec<Vec<u8>> = peers.iter().map(|p| p.ep.name()).collect();
    let av = A::av(&a.domain, &AvAttr::DEFAULT).unwrap();
    assert!(av.is_empty());
    let x = av.insert(&names[0]).unwrap();
    let refs: Vec<&[u8]> = vec![&names[1], &names[2]];
    let many = av.insert_many(&refs, 0, Context(0)).unwrap();
    assert_eq!(many.len(), 2);
    let all = [x, many[0], many[1]];
    assert_eq!(av.len(), 3);
    match A::AV {
        AvKind::Table => assert_eq!(all, [FiAddr(0), FiAddr(1), FiAddr(2)]),
        _ => {
            assert!(all.iter().all(|a| *a != FiAddr::UNSPEC));
            assert!(all[0] != all[1] && all[1] != all[2] && all[0] != all[2]);
        }
    }
    for (addr, name) in all.iter().zip(&names) {
        assert_eq!(&av.lookup(*addr).unwrap(), name);
    }
    // straddr is the provider's printable form, one per peer. (How it relates to
    // insert_svc depends on the provider's address format: tests/conformance_loopback.rs.)
    let s = av.straddr(&names[0]);
    assert!(!s.is_empty());
    assert_eq!(s, <Prov as fabric::Provider>::straddr(&names[0]));
    assert_ne!(s, av.straddr(&names[1]));
    // A name nobody owns (a real name's length, all ones): NOTAVAIL in insert_many, an
    // error with FI_SYNC_ERR.
    let bogus = vec![0xffu8; names[0].len()];
    let r = av.insert_many(&[&names[0], &bogus], 0, Context(0)).unwrap();
    assert_eq!(r[1], FiAddr::NOTAVAIL);
    assert_ne!(r[0], FiAddr::NOTAVAIL);
    assert!(av.insert_many(&[&bogus], FI_SYNC_ERR, Context(0)).is_err());
    assert!(av.insert(&bogus).is_err());
    // Remove: lookups and sends to it fail.
    av.remove(&[all[1]]).unwrap();
    assert_eq!(av.lookup(all[1]), Err(Error::AddrNotAvail));
    assert!(av.remove(&[all[1]]).is_err());
    assert_eq!(&av.lookup(all[2]).unwrap(), &names[2]);
}

fn av_send_unknown_and_removed<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    let unknown = match A::AV {
        AvKind::Table => FiAddr(57),
        _ => FiAddr(b_at_a.0 ^ (1 << 40)),
    };
    assert_eq!(
        a.ep.send(b"?", unknown, Context(1)),
        Err(Error::AddrNotAvail)
    );
    assert_eq!(a.ep.tinject(b"?", unknown, 1), Err(Error::AddrNotAvail));
    a.av.remove(&[b_at_a]).unwrap();
    assert_eq!(
        a.ep.send(b"?", b_at_a, Context(2)),
        Err(Error::AddrNotAvail)
    );
    // No completion or count for refused posts.
    assert_cq_empty(&a.cq, &[&b.domain]);
    assert_eq!((a.cntr_tx.read(), a.cntr_tx.read_err()), (0, 0));
}

fn av_async_insert<A: Api>() {
    let a = node::<A>(|_| {});
    let p1 = node::<A>(|_| {});
    let p2 = node::<A>(|_| {});
    let eq = a.domain.eq(&EqAttr::DEFAULT).unwrap();
    let av = A::av(
        &a.domain,
        &AvAttr {
            flags: FI_EVENT,
            ..AvAttr::DEFAULT
        },
    )
    .unwrap();
    let (n1, n2) = (p1.ep.name(), p2.ep.name());
    // A name nobody owns: a real name's length, all ones.
    let bogus = vec![0xffu8; n1.len()];
    // FI_EVENT without a bound EQ: FI_ENOEQ.
    assert_eq!(av.insert_many(&[&n1], 0, Context(1)), Err(Error::NoEq));
    av.bind_eq(&*eq).unwrap();
    let addrs = av.insert_many(&[&n1, &bogus, &n2], 0, Context(42)).unwrap();
    assert_eq!(addrs.len(), 3);
    assert_eq!(addrs[1], FiAddr::NOTAVAIL);
    // The failed index is reported as an error event first.
    assert_eq!(eq.read(false), Err(Error::Avail));
    let err = eq.read_err(false).unwrap();
    assert_eq!((err.context, err.data), (Context(42), 1));
    let ev = eq.read(false).unwrap();
    assert_eq!(ev.event, EqEvent::AvComplete);
    assert_eq!((ev.context, ev.data), (Context(42), 2));
    assert_eq!(eq.read(false), Err(Error::Again));
    assert_eq!(av.lookup(addrs[2]).unwrap(), n2);
}

fn av_named_shared<A: Api>() {
    let info = rdm_info::<A>();
    let fabric = A::fabric(&info).unwrap();
    let d1 = A::domain(&fabric, &info).unwrap();
    let d2 = A::domain(&fabric, &info).unwrap();
    let p = node::<A>(|_| {});
    let missing = A::av(
        &d1,
        &AvAttr {
            name: Some("conformance-missing"),
            flags: FI_READ,
            ..AvAttr::DEFAULT
        },
    );
    assert_eq!(missing.err(), Some(Error::NoEnt));
    let av1 = A::av(
        &d1,
        &AvAttr {
            name: Some("conformance-shared"),
            ..AvAttr::DEFAULT
        },
    )
    .unwrap();
    assert_eq!(av1.name(), Some("conformance-shared"));
    let x = av1.insert(&p.ep.name()).unwrap();
    let av2 = A::av(
        &d2,
        &AvAttr {
            name: Some("conformance-shared"),
            ..AvAttr::DEFAULT
        },
    )
    .unwrap();
    assert_eq!(av2.len(), 1);
    assert_eq!(av2.lookup(x).unwrap(), p.ep.name());
    // A read-only open of an existing name sees it but may not change it.
    let ro = A::av(
        &d2,
        &AvAttr {
            name: Some("conformance-shared"),
            flags: FI_READ,
            ..AvAttr::DEFAULT
        },
    )
    .unwrap();
    assert_eq!(ro.lookup(x).unwrap(), p.ep.name());
    assert_eq!(ro.insert(&p.ep.name()), Err(Error::Perm));
    // An endpoint in the second domain sends through the shared AV.
    let mut buf = [0u8; 4];
    let cq = A::cq(&d2, &NODE_CQ_ATTR).unwrap();
    let ep = A::endpoint(&d2, &info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_av(&av2).unwrap();
    ep.enable().unwrap();
    // SAFETY: buf outlives the receive, which completes below.
    unsafe { p.ep.recv(&mut buf, ANY, Context(1)).unwrap() };
    ep.send(b"shrd", x, Context(2)).unwrap();
    assert_eq!(wait_ok(&p.cq, &[&d2]).context(), Context(1));
    assert_eq!(&buf, b"shrd");
}

// ---------------------------------------------------------------------------------------
// Wait sets, poll sets, trywait
// ---------------------------------------------------------------------------------------

fn wait_and_poll_sets<A: Api>() {
    let (a, b, b_at_a, _) = pair::<A>();
    let ws = a.fabric.wait_set(&WaitAttr::DEFAULT).unwrap();
    let cq = A::cq_in_set(&a.domain, &NODE_CQ_ATTR, &*ws).unwrap();
    let ep = A::endpoint(&a.domain, &a.info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_av(&a.av).unwrap();
    ep.enable().unwrap();
    let t0 = Instant::now();
    assert_eq!(ws.wait(Some(Duration::from_millis(15))), Err(Error::Again));
    assert!(t0.elapsed() >= Duration::from_millis(15));
    ep.send(b"ws", b_at_a, Context(1)).unwrap();
    assert_eq!(ws.wait(Some(DEADLINE)), Ok(()));
    assert_eq!(wait_ok(&cq, &[&b.domain]).context(), Context(1));
    assert!(fabric::trywait(&[&cq, &a.cq]).is_ok());
    // Poll set over a CQ and a counter.
    let ps = a.domain.poll_set(&PollAttr::DEFAULT).unwrap();
    ps.add_cq(&a.cq, Context(10)).unwrap();
    ps.add_cntr(&a.cntr_tx, Context(11)).unwrap();
    let mut out = [Context::NULL; 4];
    assert_eq!(ps.poll(&mut out).unwrap(), 0);
    a.ep.send(b"ps", b_at_a, Context(2)).unwrap();
    let n = ps.poll(&mut out).unwrap();
    let mut got = out[..n].to_vec();
    got.sort_by_key(|c| c.0);
    assert_eq!(got, [Context(10), Context(11)]);
    assert_eq!(fabric::trywait(&[&a.cq]), Err(Error::Again));
    assert_eq!(wait_ok(&a.cq, &[&b.domain]).context(), Context(2));
    assert_eq!(fabric::trywait(&[&a.cq, &cq]), Ok(()));
    // The counter is reported once per change.
    assert_eq!(ps.poll(&mut out).unwrap(), 0);
    ps.del(Context(10)).unwrap();
    assert_eq!(ps.del(Context(10)), Err(Error::NoEnt));
    // Waiting on a set over a counter.
    let ws2 = a.fabric.wait_set(&WaitAttr::DEFAULT).unwrap();
    let c = a.domain.cntr_in_set(&CntrAttr::DEFAULT, &*ws2).unwrap();
    assert_eq!(ws2.wait(Some(Duration::from_millis(5))), Err(Error::Again));
    c.add(1);
    assert_eq!(ws2.wait(Some(DEADLINE)), Ok(()));
    assert!(a
        .fabric
        .wait_set(&WaitAttr {
            wait_obj: WaitObj::None,
            ..WaitAttr::DEFAULT
        })
        .is_err());
}

// ---------------------------------------------------------------------------------------
// Endpoints
// ---------------------------------------------------------------------------------------

fn queue_sizes<A: Api>() {
    let mut bufs = [[0u8; 4]; 3];
    let sa = NodeSpec {
        tweak: &|i| i.rx_attr.size = 2,
        ..NodeSpec::DEFAULT
    };
    let (a, b, b_at_a, a_at_b) = pair_of::<A>(&sa, &NodeSpec::DEFAULT);
    assert_eq!(a.ep.tx_size_left(), a.info.tx_attr.size);
    assert_eq!(a.ep.rx_size_left(), 2);
    let [b0, b1, b2] = &mut bufs;
    // SAFETY: bufs outlive the receives, which complete below.
    unsafe {
        a.ep.recv(b0, ANY, Context(1)).unwrap();
        assert_eq!(a.ep.rx_size_left(), 1);
        a.ep.trecv(b1, ANY, 5, 0, Context(2)).unwrap();
        assert_eq!(a.ep.rx_size_left(), 0);
        assert_eq!(a.ep.recv(b2, ANY, Context(3)), Err(Error::Again));
    }
    b.ep.send(b"m", a_at_b, Context(9)).unwrap();
    assert_eq!(wait_ok(&a.cq, &[&b.domain]).context(), Context(1));
    assert_eq!(a.ep.rx_size_left(), 1);
    a.ep.cancel(Context(2)).unwrap();
    assert_eq!(wait_err(&a.cq, &[&b.domain]).err, Error::Canceled);
    assert_eq!(a.ep.rx_size_left(), 2);
    // Delivery-complete sends occupy the transmit queue until acknowledged.
    let before = a.ep.tx_size_left();
    let iov: [&[u8]; 1] = [b"d"];
    a.ep.sendmsg(
        &Msg {
            iov: &iov,
            addr: b_at_a,
            context: Context(4),
            data: 0,
        },
        OpFlags::DELIVERY_COMPLETE,
    )
    .unwrap();
    if !A::AUTO {
        assert_eq!(a.ep.tx_size_left(), before - 1);
    }
    assert_eq!(wait_ok(&a.cq, &[&b.domain]).context(), Context(4));
    assert_eq!(a.ep.tx_size_left(), before);
}

fn enable_errors<A: Api>() {
    let info = rdm_info::<A>();
    let fabric = A::fabric(&info).unwrap();
    let d = A::domain(&fabric, &info).unwrap();
    let cq = A::cq(&d, &NODE_CQ_ATTR).unwrap();
    let av = A::av(&d, &AvAttr::DEFAULT).unwrap();
    // No AV.
    let ep = A::endpoint(&d, &info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    assert_eq!(ep.enable(), Err(Error::NoAv));
    // AV, no CQ or counter.
    let ep = A::endpoint(&d, &info).unwrap();
    ep.bind_av(&av).unwrap();
    assert_eq!(ep.enable(), Err(Error::NoCq));
    // Transmit CQ only: the receive side has nothing.
    ep.bind_cq(&cq, BindFlags::TRANSMIT).unwrap();
    assert_eq!(ep.enable(), Err(Error::NoCq));
    // A counter suffices for the receive side.
    let c = A::cntr(&d, &CntrAttr::DEFAULT).unwrap();
    ep.bind_cntr(&c, BindFlags::RECV).unwrap();
    assert_eq!(ep.enable(), Ok(()));
    assert_eq!(ep.bind_cq(&cq, BindFlags::empty()), Err(Error::BadFlags));
    // A CQ of another domain.
    let other = A::cq(&A::domain(&fabric, &info).unwrap(), &NODE_CQ_ATTR).unwrap();
    assert_eq!(ep.bind_cq(&other, BindFlags::TRANSMIT), Err(Error::Domain));
}

fn disabled_endpoint<A: Api>() {
    let mut buf = [0u8; 4];
    let (a, _b, b_at_a, _) = pair::<A>();
    let ep = A::endpoint(&a.domain, &a.info).unwrap();
    ep.bind_cq(&a.cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_av(&a.av).unwrap();
    assert_eq!(ep.send(b"x", b_at_a, Context(1)), Err(Error::OpBadState));
    assert_eq!(ep.tinject(b"x", b_at_a, 0), Err(Error::OpBadState));
    // SAFETY: rejected, nothing posted.
    assert_eq!(
        unsafe { ep.recv(&mut buf, ANY, Context(2)) },
        Err(Error::OpBadState)
    );
    ep.enable().unwrap();
    ep.send(b"x", b_at_a, Context(3)).unwrap();
    assert_eq!(wait_ok(&a.cq, &[]).context(), Context(3));
}

fn dgram_endpoint<A: Api>() {
    let mut buf = [0u8; 16];
    let offers_dgram = <Prov as fabric::Provider>::candidates()
        .iter()
        .any(|i| i.ep_attr.ep_type == EpType::Dgram);
    if !offers_dgram {
        // A provider without datagram endpoints: getinfo must not offer one.
        let hints = Hints::new().caps(TEST_CAPS).ep_type(EpType::Dgram);
        let r = A::getinfo(&hints);
        assert!(
            matches!(&r, Err(Error::NoData)) || r.as_ref().is_ok_and(|v| v.is_empty()),
            "getinfo(FI_EP_DGRAM) of a provider without datagram endpoints: {r:?}"
        );
        return;
    }
    let info = info_for::<A>(EpType::Dgram);
    assert_eq!(info.ep_attr.ep_type, EpType::Dgram);
    let a = node_from_info::<A>(info.clone());
    let b = node_from_info::<A>(info);
    let b_at_a = a.av.insert(&b.ep.name()).unwrap();
    // SAFETY: buf outlives the receive, which completes below.
    unsafe { b.ep.recv(&mut buf, ANY, Context(1)).unwrap() };
    a.ep.send(b"datagram", b_at_a, Context(2)).unwrap();
    let e = wait_ok(&a.cq, &[&b.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::SEND | CqFlags::MSG,
        Some(8),
        None,
        None,
    );
    let e = wait_ok(&b.cq, &[&a.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::RECV | CqFlags::MSG,
        Some(8),
        None,
        None,
    );
    assert_eq!(&buf[..8], b"datagram");
}

fn scalable_endpoint<A: Api>() {
    let mut r0 = [0u8; 4];
    let mut r1 = [0u8; 4];
    let mut info = rdm_info::<A>();
    info.ep_attr.tx_ctx_cnt = 1;
    info.ep_attr.rx_ctx_cnt = 2;
    let fabric = A::fabric(&info).unwrap();
    let d = A::domain(&fabric, &info).unwrap();
    let sep = d.scalable_endpoint(&info).unwrap();
    let sav = A::av(&d, &AvAttr::DEFAULT).unwrap();
    sep.bind_av(&sav).unwrap();
    let cq0 = A::cq(&d, &NODE_CQ_ATTR).unwrap();
    let cq1 = A::cq(&d, &NODE_CQ_ATTR).unwrap();
    let rx0 = sep.rx_context(0).unwrap();
    let rx1 = sep.rx_context(1).unwrap();
    assert!(sep.rx_context(2).is_err());
    assert!(sep.tx_context(1).is_err());
    rx0.bind_cq(&cq0, BindFlags::RECV).unwrap();
    rx1.bind_cq(&cq1, BindFlags::RECV).unwrap();
    rx0.enable().unwrap();
    rx1.enable().unwrap();
    let tx0 = sep.tx_context(0).unwrap();
    tx0.bind_cq(&cq0, BindFlags::TRANSMIT).unwrap();
    tx0.enable().unwrap();
    sep.enable().unwrap();
    // The sender addresses receive contexts through an AV with rx_ctx_bits.
    let s = node::<A>(|_| {});
    let av = A::av(
        &s.domain,
        &AvAttr {
            rx_ctx_bits: 2,
            ..AvAttr::DEFAULT
        },
    )
    .unwrap();
    let ep = A::endpoint(&s.domain, &s.info).unwrap();
    ep.bind_cq(&s.cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    let base = av.insert(&sep.name()).unwrap();
    assert_eq!(av.rx_addr(base, 1), base.rx_addr(1, 2));
    assert_eq!(av.lookup(av.rx_addr(base, 1)).unwrap(), sep.name());
    // SAFETY: buffers outlive the receives, which complete below.
    unsafe {
        rx0.recv(&mut r0, ANY, Context(100)).unwrap();
        rx1.recv(&mut r1, ANY, Context(101)).unwrap();
    }
    ep.send(b"ctx1", av.rx_addr(base, 1), Context(1)).unwrap();
    let e = wait_ok(&cq1, &[&s.domain]);
    check_entry(
        &e,
        Context(101),
        CqFlags::RECV | CqFlags::MSG,
        Some(4),
        None,
        None,
    );
    assert_cq_empty(&cq0, &[&s.domain]);
    ep.send(b"ctx0", av.rx_addr(base, 0), Context(2)).unwrap();
    let e = wait_ok(&cq0, &[&s.domain]);
    check_entry(
        &e,
        Context(100),
        CqFlags::RECV | CqFlags::MSG,
        Some(4),
        None,
        None,
    );
    assert_eq!((&r0, &r1), (b"ctx0", b"ctx1"));
    // The scalable endpoint's transmit context sends too.
    let s_at_sep = sav.insert(&ep.name()).unwrap();
    let mut r2 = [0u8; 4];
    // SAFETY: as above.
    unsafe { ep.recv(&mut r2, ANY, Context(3)).unwrap() };
    for ctx in [1, 2] {
        assert_eq!(wait_ok(&s.cq, &[&d]).context(), Context(ctx));
    }
    tx0.send(b"back", s_at_sep, Context(102)).unwrap();
    let e = wait_ok(&cq0, &[&s.domain]);
    check_entry(
        &e,
        Context(102),
        CqFlags::SEND | CqFlags::MSG,
        Some(4),
        None,
        None,
    );
    assert_eq!(wait_ok(&s.cq, &[&d]).context(), Context(3));
    assert_eq!(&r2, b"back");
    // More contexts than the domain allows.
    let mut too_many = rdm_info::<A>();
    too_many.ep_attr.rx_ctx_cnt = too_many.domain_attr.max_ep_rx_ctx + 1;
    assert_eq!(d.scalable_endpoint(&too_many).err(), Some(Error::Inval));
}

fn shared_rx_context<A: Api>() {
    let mut bufs = [[0u8; 4]; 2];
    let s = node::<A>(|_| {});
    let info = s.info.clone();
    let d = A::domain(&s.fabric, &info).unwrap();
    let srx = d.shared_rx(&info).unwrap();
    let rcq = A::cq(&d, &NODE_CQ_ATTR).unwrap();
    srx.bind_cq(&rcq, BindFlags::RECV).unwrap();
    let av = A::av(&d, &AvAttr::DEFAULT).unwrap();
    let tcq = A::cq(&d, &NODE_CQ_ATTR).unwrap();
    let mk = || {
        let ep = srx.endpoint(&info).unwrap();
        ep.bind_cq(&tcq, BindFlags::TRANSMIT).unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        ep
    };
    let (e1, e2) = (mk(), mk());
    let at1 = s.av.insert(&e1.name()).unwrap();
    let at2 = s.av.insert(&e2.name()).unwrap();
    let [b0, b1] = &mut bufs;
    // Both receives posted through e1 land in the shared queue.
    // SAFETY: bufs outlive the receives, which complete below.
    unsafe {
        e1.recv(b0, ANY, Context(1)).unwrap();
        e1.recv(b1, ANY, Context(2)).unwrap();
    }
    s.ep.send(b"to-2", at2, Context(20)).unwrap();
    let e = wait_ok(&rcq, &[&s.domain]);
    check_entry(
        &e,
        Context(1),
        CqFlags::RECV | CqFlags::MSG,
        Some(4),
        None,
        None,
    );
    s.ep.send(b"to-1", at1, Context(10)).unwrap();
    let e = wait_ok(&rcq, &[&s.domain]);
    check_entry(
        &e,
        Context(2),
        CqFlags::RECV | CqFlags::MSG,
        Some(4),
        None,
        None,
    );
    assert_eq!((&bufs[0], &bufs[1]), (b"to-2", b"to-1"));
    assert_cq_empty(&tcq, &[&s.domain]);
}

fn drop_endpoint_cancels<A: Api>() {
    let mut buf = [0u8; 4];
    let mut tbuf = [0u8; 4];
    let (a, b, _, _) = pair::<A>();
    let Node { ep, cq, domain, .. } = b;
    // SAFETY: the buffers outlive the endpoint, whose drop cancels the receives.
    unsafe {
        ep.recv(&mut buf, ANY, Context(1)).unwrap();
        ep.trecv(&mut tbuf, ANY, 3, 0, Context(2)).unwrap();
    }
    drop(ep);
    let mut seen = Vec::new();
    for _ in 0..2 {
        let e = wait_err(&cq, &[&a.domain, &domain]);
        assert_eq!(e.err, Error::Canceled);
        assert!(e.flags.contains(CqFlags::RECV));
        seen.push(e.context.0);
    }
    seen.sort();
    assert_eq!(seen, [1, 2]);
    assert_cq_empty(&cq, &[&a.domain]);
}

suite_matrix!(
    [
        msg_send_recv,
        msg_sendv_recvv,
        msg_sendmsg_recvmsg,
        msg_inject,
        msg_senddata_injectdata,
        msg_multi_recv,
        tagged_all_sends,
        tagged_ignore_mask,
        tagged_peek,
        tagged_peek_claim,
        tagged_discard,
        unexpected_then_expected,
        truncation,
        lane_truncation_and_data,
        lane_skipped_for_older_wildcard,
        cancel,
        cq_read_keeps_order,
        selective_completion,
        completion_levels,
        cq_full_resource_mgmt,
        cq_overrun_without_resource_mgmt,
        cq_sread,
        cq_signal,
        cq_wait_fd,
        counters,
        eq_read_write,
        queue_sizes,
        drop_endpoint_cancels,
    ],
    rdm_only: [
        // Receives filtered by source among three peers (FI_DIRECTED_RECV, an AV).
        directed_recv,
        // Messages from a peer not yet in the AV match receives for its address later.
        directed_recv_sender_inserted_later,
        // FI_SOURCE addresses of two peers.
        readfrom_source,
        // AV calls.
        av_insert_lookup_remove,
        av_send_unknown_and_removed,
        av_async_insert,
        av_named_shared,
        // A second endpoint of the node's domain reaches the peer through the AV.
        wait_and_poll_sets,
        // The AV an RDM endpoint needs before fi_enable (MSG: `no_av_on_msg`, suite/cm.rs).
        enable_errors,
        // A second, not yet enabled endpoint reaches the peer through the AV.
        disabled_endpoint,
        // DGRAM endpoints, paired through an AV.
        dgram_endpoint,
        // Receive contexts addressed through an AV (FI_NAMED_RX_CTX).
        scalable_endpoint,
        // A shared receive context fed by two peers through an AV.
        shared_rx_context,
    ],
);
