//! The direct message entry on shm (`EpInner::post_eager`, the short path of
//! `ShmEp::send_eager`): `fi_send`/`fi_tsend`/`fi_inject`/`fi_tinject` and their
//! `*data` forms skip the generic request when nothing stands in their way, and hand
//! back to the generic path, having done nothing, when something does. These tests
//! pin the semantics both paths must share: ordering with queued and earlier
//! operations, backpressure, size limits, dead peers, counters, selective completion
//! and remote CQ data, on both threading levels.

mod shm_child;

use fabric::prelude::*;
use fabric_shm::Shm;
use shm_child::node::{next, node, node_with, nothing, open_node, pattern, Node};

type Safe = Stack<Shm, ThreadSafe, Manual>;

/// What a receive got.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    tagged: bool,
    tag: u64,
    data: Option<u64>,
    payload: Vec<u8>,
}

/// Receives the next message of either queue (tagged when `tagged`), any tag.
#[track_caller]
fn recv_one<S: Config>(t: &Node<S>, tagged: bool) -> Got
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let mut buf = vec![0u8; 256 << 10];
    // SAFETY: `buf` outlives the receive, which completes before this returns.
    unsafe {
        if tagged {
            t.ep.trecv(&mut buf, FiAddr::UNSPEC, 0, u64::MAX, Context(0xfeed))
        } else {
            t.ep.recv(&mut buf, FiAddr::UNSPEC, Context(0xfeed))
        }
        .unwrap();
    }
    let e = next(t).expect("a receive completion");
    assert_eq!(e.op_context, Context(0xfeed));
    assert!(e.flags.contains(CqFlags::RECV));
    assert_eq!(e.flags.contains(CqFlags::TAGGED), tagged);
    let data = e.flags.contains(CqFlags::REMOTE_CQ_DATA).then_some(e.data);
    buf.truncate(e.len);
    Got {
        tagged,
        tag: if tagged { e.tag } else { 0 },
        data,
        payload: buf,
    }
}

fn got(tagged: bool, tag: u64, data: Option<u64>, payload: Vec<u8>) -> Got {
    Got {
        tagged,
        tag,
        data,
        payload,
    }
}

/// Runs `post` until the target's ring takes it: a refusal (`FI_EAGAIN`, the ring
/// full) has the target progress, which moves what waits in its ring to its queue of
/// unexpected messages, in order.
#[track_caller]
fn post<S: Config>(t: &Node<S>, mut post: impl FnMut() -> fabric::Result<()>) {
    for _ in 0..10_000 {
        match post() {
            Err(Error::Again) => {
                t.domain.progress();
            }
            r => return r.unwrap(),
        }
    }
    panic!("refused 10000 times");
}

/// Every send form, on both paths of each (short messages take the direct entry;
/// gather lists, streamed and staged sizes and `*msg` calls the generic one), arrives
/// intact and in posting order, with its tag and remote CQ data; the initiator's
/// completions carry the right contexts and flags, and inject calls write none.
fn every_form_in_order<S: Config>()
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
    fabric::typenum::Const<8>: InjectFits<S::Provider>,
{
    let t = node::<S>();
    let i = node::<S>();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let mut want: Vec<Got> = Vec::new();
    let mut done: Vec<(Context, CqFlags, usize)> = Vec::new();
    let tsend = CqFlags::SEND | CqFlags::TAGGED;
    let msend = CqFlags::SEND | CqFlags::MSG;
    // Sizes around the short path's limits: empty, small, a full first line, the
    // largest compact unstreamed one, streamed, staged.
    let sizes = [0usize, 1, 8, 40, 41, 200, 2047, 2048, 3000, 100 << 10];
    for (k, &n) in sizes.iter().enumerate() {
        let k = k as u64;
        let p = pattern(n, 10 + k);
        post(&t, || {
            i.ep.tsend(&p, peer, 100 + k, Context(100 + k as usize))
        });
        want.push(got(true, 100 + k, None, p.clone()));
        done.push((Context(100 + k as usize), tsend, n));
        post(&t, || {
            i.ep.tsenddata(&p, 7000 + k, peer, 200 + k, Context(200 + k as usize))
        });
        want.push(got(true, 200 + k, Some(7000 + k), p.clone()));
        done.push((Context(200 + k as usize), tsend, n));
        post(&t, || i.ep.send(&p, peer, Context(300 + k as usize)));
        want.push(got(false, 0, None, p.clone()));
        done.push((Context(300 + k as usize), msend, n));
        post(&t, || {
            i.ep.senddata(&p, 8000 + k, peer, Context(400 + k as usize))
        });
        want.push(got(false, 0, Some(8000 + k), p.clone()));
        done.push((Context(400 + k as usize), msend, n));
        if n <= <Shm as Provider>::INJECT_SIZE {
            post(&t, || i.ep.tinject(&p, peer, 500 + k));
            want.push(got(true, 500 + k, None, p.clone()));
            post(&t, || i.ep.tinjectdata(&p, 9000 + k, peer, 600 + k));
            want.push(got(true, 600 + k, Some(9000 + k), p.clone()));
            post(&t, || i.ep.inject(&p, peer));
            want.push(got(false, 0, None, p.clone()));
            post(&t, || i.ep.injectdata(&p, 9500 + k, peer));
            want.push(got(false, 0, Some(9500 + k), p.clone()));
        }
        // The generic path in between: a gather list and a `*msg` call.
        let (a, b) = p.split_at(n / 2);
        post(&t, || {
            i.ep.tsendv(&[a, b], peer, 700 + k, Context(700 + k as usize))
        });
        want.push(got(true, 700 + k, None, p.clone()));
        done.push((Context(700 + k as usize), tsend, n));
        let m = TaggedMsg {
            iov: &[&p],
            addr: peer,
            tag: 800 + k,
            context: Context(800 + k as usize),
            data: 9900 + k,
        };
        post(&t, || i.ep.tsendmsg(&m, OpFlags::REMOTE_CQ_DATA));
        want.push(got(true, 800 + k, Some(9900 + k), p.clone()));
        done.push((Context(800 + k as usize), tsend, n));
        post(&t, || i.ep.tinject_array(&[k as u8; 8], peer, 900 + k));
        want.push(got(true, 900 + k, None, vec![k as u8; 8]));
        // Completions drained by size (the target's ring may fill: see `post`).
        for d in done.drain(..) {
            let e = next(&i).expect("a send completion");
            assert_eq!((e.op_context, e.flags, e.len), d);
        }
        nothing(&i);
        // Each queue in its own posting order.
        for tagged in [true, false] {
            for w in want.iter().filter(|w| w.tagged == tagged) {
                assert_eq!(&recv_one(&t, tagged), w);
            }
        }
        want.clear();
    }
    nothing(&t);
}

#[test]
fn every_form_in_order_domain() {
    every_form_in_order::<Stack<Shm>>();
}

#[test]
fn every_form_in_order_safe() {
    every_form_in_order::<Safe>();
}

/// Sends posted while a fence holds operations back queue behind them, the direct
/// entry's included: the target sees nothing past the fence until the operation
/// before it was acknowledged, then everything in posting order.
#[test]
fn sends_behind_a_fence_keep_their_place() {
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let msg = |tag: u64, ctx: usize, p: &[u8], flags: OpFlags| {
        let m = TaggedMsg {
            iov: &[p],
            addr: peer,
            tag,
            context: Context(ctx),
            data: 0,
        };
        i.ep.tsendmsg(&m, flags).unwrap();
    };
    // In flight until the target acknowledges it.
    msg(1, 1, &[1; 8], OpFlags::DELIVERY_COMPLETE);
    msg(2, 2, &[2; 8], OpFlags::FENCE);
    i.ep.tinject(&[3; 8], peer, 3).unwrap();
    i.ep.tsend(&[4; 8], peer, 4, Context(4)).unwrap();
    i.ep.inject(&[5; 8], peer).unwrap();
    nothing(&i);
    // The target sees the first message only (and acknowledges it).
    assert_eq!(t.domain.progress(), 1);
    assert_eq!(recv_one(&t, true), got(true, 1, None, vec![1; 8]));
    assert_eq!(t.domain.progress(), 0);
    // The acknowledgement releases the rest, in order.
    for ctx in [1, 2, 4] {
        assert_eq!(next(&i).unwrap().op_context, Context(ctx));
    }
    nothing(&i);
    for tag in [2u64, 3, 4] {
        assert_eq!(recv_one(&t, true), got(true, tag, None, vec![tag as u8; 8]));
    }
    assert_eq!(recv_one(&t, false), got(false, 0, None, vec![5; 8]));
    // Nothing queued any more: straight through again.
    i.ep.tinject(&[6; 8], peer, 6).unwrap();
    assert_eq!(recv_one(&t, true), got(true, 6, None, vec![6; 8]));
}

/// Sizes over the limits are refused with `FI_EMSGSIZE` before anything is sent or
/// counted: the provider's inject size for the inject calls, smaller limits from the
/// hints, and `FI_INJECT` as an endpoint default for plain sends.
#[test]
fn sizes_over_the_limits_are_refused() {
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let cntr = i.domain.cntr(&CntrAttr::default()).unwrap();
    i.ep.bind_cntr(&cntr, BindFlags::TRANSMIT).unwrap();
    let big = vec![1u8; <Shm as Provider>::INJECT_SIZE + 1];
    assert_eq!(i.ep.tinject(&big, peer, 1), Err(Error::MsgSize));
    assert_eq!(i.ep.tinjectdata(&big, 5, peer, 1), Err(Error::MsgSize));
    assert_eq!(i.ep.inject(&big, peer), Err(Error::MsgSize));
    assert_eq!(i.ep.injectdata(&big, 5, peer), Err(Error::MsgSize));
    let inject = i.ep.alias(OpFlags::INJECT, BindFlags::TRANSMIT).unwrap();
    assert_eq!(inject.tsend(&big, peer, 1, Context(1)), Err(Error::MsgSize));
    assert_eq!(inject.send(&big, peer, Context(1)), Err(Error::MsgSize));
    // Within the size: completes as usual (only `fi_inject*` skip the entry).
    inject.tsend(&[2; 8], peer, 2, Context(2)).unwrap();
    assert_eq!(next(&i).unwrap().op_context, Context(2));
    nothing(&i);
    assert_eq!((cntr.read(), cntr.read_err()), (1, 0));

    // Smaller limits from the hints.
    let hints = Hints::new()
        .caps(Caps::MSG | Caps::TAGGED)
        .ep_type(EpType::Rdm);
    let mut info = getinfo::<Stack<Shm>>(Some(&hints)).unwrap().remove(0);
    info.tx_attr.inject_size = 16;
    info.ep_attr.max_msg_size = 64;
    let ep = i.domain.endpoint(&info).unwrap();
    ep.bind_av(&i.av).unwrap();
    ep.bind_cq(&i.cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.enable().unwrap();
    assert_eq!(ep.tinject(&[3; 17], peer, 3), Err(Error::MsgSize));
    assert_eq!(ep.inject(&[3; 17], peer), Err(Error::MsgSize));
    assert_eq!(ep.tsend(&[3; 65], peer, 3, Context(3)), Err(Error::MsgSize));
    assert_eq!(ep.send(&[3; 65], peer, Context(3)), Err(Error::MsgSize));
    nothing(&i);
    ep.tinject(&[4; 16], peer, 4).unwrap();
    ep.tsend(&[5; 64], peer, 5, Context(5)).unwrap();
    assert_eq!(next(&i).unwrap().op_context, Context(5));
    // The array forms are bounded by the provider's size, which their type proves.
    ep.tinject_array(&[6; 32], peer, 6).unwrap();
    nothing(&i);
    // Two sending endpoints: each one's messages in order, not the two interleaved.
    let mut all: Vec<_> = (0..4).map(|_| recv_one(&t, true)).collect();
    let second: Vec<u64> = all.iter().map(|g| g.tag).filter(|&t| t != 2).collect();
    assert_eq!(second, [4, 5, 6], "one sender's messages in order");
    all.sort_by_key(|g| g.tag);
    assert_eq!(
        all,
        [
            got(true, 2, None, vec![2; 8]),
            got(true, 4, None, vec![4; 16]),
            got(true, 5, None, vec![5; 64]),
            got(true, 6, None, vec![6; 32]),
        ]
    );
    nothing(&t);
}

/// A closed peer is unreachable at once, even right after a send took the direct
/// entry to it; an unknown address is refused; neither writes an entry.
#[test]
fn sends_to_a_closed_peer_are_unreachable() {
    let Node {
        ep: t_ep,
        domain: t_domain,
        ..
    } = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let peer = i.av.insert(&t_ep.name()).unwrap();
    let cntr = i.domain.cntr(&CntrAttr::default()).unwrap();
    i.ep.bind_cntr(&cntr, BindFlags::TRANSMIT).unwrap();
    i.ep.tinject(&[1; 8], peer, 1).unwrap();
    assert_eq!(cntr.read(), 1);
    drop(t_ep);
    drop(t_domain);
    assert_eq!(i.ep.tinject(&[2; 8], peer, 2), Err(Error::HostUnreach));
    assert_eq!(
        i.ep.tsend(&[2; 8], peer, 2, Context(2)),
        Err(Error::HostUnreach)
    );
    assert_eq!(
        i.ep.senddata(&[2; 8], 9, peer, Context(2)),
        Err(Error::HostUnreach)
    );
    assert_eq!(
        i.ep.tinject(&[2; 8], FiAddr(77), 2),
        Err(Error::AddrNotAvail)
    );
    assert_eq!(
        i.ep.tsend(&[2; 8], FiAddr(77), 2, Context(2)),
        Err(Error::AddrNotAvail)
    );
    nothing(&i);
    assert_eq!((cntr.read(), cntr.read_err()), (1, 0));
}

/// With the target not progressing, injects fill the ring until `FI_EAGAIN`; once the
/// target drains it, every message accepted arrives once, intact and in order, and
/// sending goes on. Sizes vary so that packets straddle the ring's end many times.
fn backpressure_then_everything<S: Config>()
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let t = node::<S>();
    let i = node::<S>();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let cntr = i.domain.cntr(&CntrAttr::default()).unwrap();
    i.ep.bind_cntr(&cntr, BindFlags::TRANSMIT).unwrap();
    let sizes = [0usize, 8, 40, 41, 100, 500, 1000, 1500, 2047];
    let mut seq = 0u64;
    let mut received = 0u64;
    for round in 0..6 {
        let first = seq;
        loop {
            let n = sizes[(seq as usize) % sizes.len()];
            match i.ep.tinject(&pattern(n, seq), peer, seq) {
                Ok(()) => seq += 1,
                Err(Error::Again) => break,
                Err(e) => panic!("tinject: {e}"),
            }
            assert!(seq - first < 1 << 20, "the ring never filled");
        }
        assert!(seq > first, "round {round}: nothing accepted");
        assert_eq!(cntr.read(), seq);
        for k in first..seq {
            let n = sizes[(k as usize) % sizes.len()];
            assert_eq!(recv_one(&t, true), got(true, k, None, pattern(n, k)));
            received += 1;
        }
    }
    nothing(&t);
    nothing(&i);
    assert_eq!(received, seq);
    assert_eq!(cntr.read_err(), 0);
}

#[test]
fn backpressure_then_everything_domain() {
    backpressure_then_everything::<Stack<Shm>>();
}

#[test]
fn backpressure_then_everything_safe() {
    backpressure_then_everything::<Safe>();
}

/// Requests leave a quarter of the ring to responses: one-cell messages are refused
/// with `FI_EAGAIN` at exactly three quarters of the cells, lap after lap, whichever
/// path wrote them.
#[test]
fn requests_leave_the_response_reserve() {
    let cells = std::env::var("FABRIC_SHM_CELLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(fabric_shm::DEFAULT_CELLS) as u64;
    let t = node::<Stack<Shm>>();
    let i = node::<Stack<Shm>>();
    let peer = i.av.insert(&t.ep.name()).unwrap();
    let mut seq = 0u64;
    for _ in 0..3 {
        let first = seq;
        while i.ep.tinject(&seq.to_le_bytes(), peer, seq).is_ok() {
            seq += 1;
            assert!(seq - first <= cells, "no reserve kept");
        }
        assert_eq!(
            i.ep.tinject(&[0; 8], peer, 0),
            Err(Error::Again),
            "still refused"
        );
        // The reserve is one cell in four (`RESERVE_DIV`).
        assert_eq!(seq - first, cells - cells / 4);
        for k in first..seq {
            assert_eq!(
                recv_one(&t, true),
                got(true, k, None, k.to_le_bytes().to_vec())
            );
        }
    }
}

/// Selective completion: sends count without an entry unless asked; a full CQ
/// refuses a send that wants an entry with `FI_EAGAIN` before it is sent, while an
/// inject, which wants none, still goes.
#[test]
fn counters_selective_completion_and_a_full_cq() {
    let t = node::<Stack<Shm>>();
    let s = node_with::<Stack<Shm>>(&CqAttr::DEFAULT, BindFlags::SELECTIVE_COMPLETION);
    let peer = s.av.insert(&t.ep.name()).unwrap();
    let cntr = s.domain.cntr(&CntrAttr::default()).unwrap();
    s.ep.bind_cntr(&cntr, BindFlags::TRANSMIT).unwrap();
    s.ep.tsend(&[1; 8], peer, 1, Context(1)).unwrap();
    s.ep.send(&[2; 8], peer, Context(2)).unwrap();
    nothing(&s);
    assert_eq!(cntr.read(), 2);
    let asked =
        s.ep.alias(OpFlags::COMPLETION, BindFlags::TRANSMIT)
            .unwrap();
    asked.tsend(&[3; 8], peer, 3, Context(3)).unwrap();
    let e = next(&s).unwrap();
    assert_eq!(
        (e.op_context, e.flags, e.len),
        (Context(3), CqFlags::SEND | CqFlags::TAGGED, 8)
    );
    asked.tinject(&[4; 8], peer, 4).unwrap();
    nothing(&s);
    assert_eq!(cntr.read(), 4);
    for (tag, b) in [(1, 1u8), (3, 3), (4, 4)] {
        assert_eq!(recv_one(&t, true), got(true, tag, None, vec![b; 8]));
    }
    assert_eq!(recv_one(&t, false), got(false, 0, None, vec![2; 8]));

    let small = CqAttr {
        size: 4,
        ..CqAttr::DEFAULT
    };
    let f = node_with::<Stack<Shm>>(&small, BindFlags::empty());
    let fp = f.av.insert(&t.ep.name()).unwrap();
    let mut posted = 0u64;
    loop {
        match f
            .ep
            .tsend(&[5; 8], fp, posted, Context(10 + posted as usize))
        {
            Ok(()) => posted += 1,
            Err(Error::Again) => break,
            Err(e) => panic!("tsend: {e}"),
        }
        assert!(posted <= 64, "the CQ never filled");
    }
    assert!(posted >= 1);
    // No entry wanted: not refused.
    f.ep.tinject(&[6; 8], fp, 1000).unwrap();
    for k in 0..posted {
        assert_eq!(next(&f).unwrap().op_context, Context(10 + k as usize));
    }
    nothing(&f);
    f.ep.tsend(&[7; 8], fp, 2000, Context(99)).unwrap();
    assert_eq!(next(&f).unwrap().op_context, Context(99));
    for k in 0..posted {
        assert_eq!(recv_one(&t, true), got(true, k, None, vec![5; 8]));
    }
    assert_eq!(recv_one(&t, true), got(true, 1000, None, vec![6; 8]));
    assert_eq!(recv_one(&t, true), got(true, 2000, None, vec![7; 8]));
    nothing(&t);
}

/// The generic path's answers for what the direct entry hands back: a missing
/// capability, and a context that is not enabled.
#[test]
fn capability_and_state_errors() {
    let t = node::<Stack<Shm>>();
    let Node { ep, av, .. } =
        &open_node::<Stack<Shm>>(Caps::MSG, &CqAttr::DEFAULT, BindFlags::empty(), false);
    let peer = av.insert(&t.ep.name()).unwrap();
    assert_eq!(ep.inject(&[1; 8], peer), Err(Error::OpBadState));
    assert_eq!(ep.send(&[1; 8], peer, Context(1)), Err(Error::OpBadState));
    ep.enable().unwrap();
    assert_eq!(ep.tinject(&[1; 8], peer, 1), Err(Error::OpNotSupp));
    assert_eq!(
        ep.tsend(&[1; 8], peer, 1, Context(1)),
        Err(Error::OpNotSupp)
    );
    ep.inject(&[2; 8], peer).unwrap();
    assert_eq!(recv_one(&t, false), got(false, 0, None, vec![2; 8]));
}
