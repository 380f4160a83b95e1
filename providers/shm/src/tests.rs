//! Transport-level tests: packets between endpoints of this process, garbage from a
//! peer, backpressure, large payloads through both staging modes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::provider::wire::{Eager, Header, Op, Response, HDR_ACK, HDR_REMOTE_CQ_DATA};
use fabric::provider::HeldBack;
use fabric::{Error, Payload, Provider, Pull, Transport};
use proptest::prelude::*;

use crate::cell;
use crate::layout::region::{Geometry, CELL};
use crate::peer::{self, PeerRegion};
use crate::transport::{ShmEp, ShmPull, ShmRx, ShmTx, Tuning, RESERVE_DIV, STREAM_MIN};

struct End {
    ep: ShmEp,
    tx: ShmTx,
    rx: ShmRx,
}

fn tuning(cma: bool) -> Tuning {
    Tuning {
        inline_max: crate::INLINE_MAX,
        // Where the kernel refuses cross-memory attach, both runs use the files.
        cma: cma && crate::cma_enabled(),
        rndv_min: crate::RNDV_MIN,
        rndv_wait: crate::rndv::WAIT_BASE,
    }
}

/// Whether a test that needs cross-memory attach can run here. Where the kernel
/// refuses it, the test fails, unless `FABRIC_TEST_ALLOW_SKIP=1` (which CI does not
/// set) allows it to skip, which it then says.
fn cma_or_allowed_skip(test: &str) -> bool {
    if crate::cma_enabled() {
        return true;
    }
    assert_eq!(
        std::env::var("FABRIC_TEST_ALLOW_SKIP").as_deref(),
        Ok("1"),
        "{test}: cross-memory attach is refused here; FABRIC_TEST_ALLOW_SKIP=1 skips"
    );
    eprintln!("{test}: skipped, no cross-memory attach (FABRIC_TEST_ALLOW_SKIP=1)");
    false
}

fn end(cma: bool) -> End {
    end_with(tuning(cma))
}

fn end_with(t: Tuning) -> End {
    let ep = ShmEp::open(Geometry::new(4, 256).unwrap(), t).unwrap();
    let tx = ep.sender();
    let rx = ep.receiver();
    End { ep, tx, rx }
}

fn resolve(e: &End) -> Arc<PeerRegion> {
    peer::resolve(e.ep.name()).unwrap()
}

fn send(from: &mut End, to: &Arc<PeerRegion>, hdr: &Header, payload: &[u8]) -> fabric::Result<()> {
    from.ep.send(&mut from.tx, to, hdr, &[payload])
}

/// Everything `e` can poll now, as (header, source, payload bytes).
fn drain(e: &mut End) -> Vec<(Header, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    e.ep.poll(&mut e.rx, |h, s, p| {
        let mut b = vec![0u8; p.len()];
        p.copy_to(0, &mut b).unwrap();
        out.push((*h, s.to_vec(), b));
        true
    });
    out
}

/// Sends response `r` with `payload` from `from` to the endpoint named `to`.
fn respond(from: &mut End, to: &[u8], r: &Response, payload: &[u8]) -> fabric::Result<()> {
    from.ep
        .respond(&mut from.tx, to, r, payload, crate::Shm::resolve)
}

fn tagged(tag: u64, len: usize) -> Header {
    Header {
        op: Op::Tagged as u8,
        tag,
        len: len as u64,
        ..Header::default()
    }
}

#[test]
fn compact_full_and_large_packets_arrive_in_order() {
    for cma in [true, false] {
        let mut a = end(cma);
        let mut b = end(cma);
        let to_b = resolve(&b);
        let small = [1u8; 48];
        let medium = vec![2u8; 5000];
        let large: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        // Past the near staging file: cross-memory attach, or the far file.
        let huge: Vec<u8> = (0..(3usize << 20)).map(|i| (i * 7) as u8).collect();
        send(&mut a, &to_b, &tagged(7, 48), &small).unwrap();
        let with_data = Header {
            flags: HDR_REMOTE_CQ_DATA,
            data: 99,
            ..tagged(8, 5000)
        };
        send(&mut a, &to_b, &with_data, &medium).unwrap();
        let acked = Header {
            flags: HDR_ACK,
            req: 5,
            ..tagged(9, large.len())
        };
        send(&mut a, &to_b, &acked, &large).unwrap();
        send(&mut a, &to_b, &tagged(10, huge.len()), &huge).unwrap();
        let got = drain(&mut b);
        assert_eq!(got.len(), 4, "cma={cma}");
        assert_eq!(got[3].2, huge);
        assert_eq!((got[0].0.tag, &got[0].2[..]), (7, &small[..]));
        assert_eq!((got[1].0.tag, got[1].0.data), (8, 99));
        assert_eq!(got[1].2, medium);
        assert_eq!((got[2].0.tag, got[2].0.req), (9, 5));
        assert_eq!(got[2].2, large);
        assert!(got.iter().all(|g| g.1 == a.ep.name()));
    }
}

#[test]
fn a_refused_packet_stays_first() {
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    send(&mut a, &to_b, &tagged(1, 1), &[1]).unwrap();
    send(&mut a, &to_b, &tagged(2, 1), &[2]).unwrap();
    let n = b.ep.poll(&mut b.rx, |_, _, _| false);
    assert_eq!(n, 0);
    let got = drain(&mut b);
    assert_eq!(got.iter().map(|g| g.0.tag).collect::<Vec<_>>(), [1, 2]);
}

#[test]
fn backpressure_then_everything_once() {
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    let payload = [5u8; 100];
    let mut sent = 0u64;
    loop {
        match send(&mut a, &to_b, &tagged(sent, 100), &payload) {
            Ok(()) => sent += 1,
            Err(Error::Again) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(sent < 10_000, "no backpressure");
    }
    // 256 cells, 2 per packet, the reserve kept for responses.
    assert_eq!(sent, (256 - 256 / RESERVE_DIV) / 2);
    // Responses still pass.
    let ack = Header {
        op: Op::Ack as u8,
        ..Header::default()
    };
    b.ep.expect_response(a.ep.name(), 0, 0, Op::Ack);
    send(&mut a, &to_b, &ack, &[]).unwrap();
    let got = drain(&mut b);
    assert_eq!(got.len() as u64, sent + 1);
    for (i, g) in got.iter().take(sent as usize).enumerate() {
        assert_eq!(g.0.tag, i as u64);
    }
    send(&mut a, &to_b, &tagged(0, 100), &payload).unwrap();
}

#[test]
fn responses_spill_and_flush_in_order() {
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    let body = vec![3u8; 4000];
    let mut n = 0u64;
    // Fill the ring with responses far past its size: none is refused.
    while n < 40 {
        let h = Header {
            op: Op::ReadResp as u8,
            req: n,
            len: body.len() as u64,
            ..Header::default()
        };
        b.ep.expect_response(a.ep.name(), 0, n, Op::ReadResp);
        send(&mut a, &to_b, &h, &body).unwrap();
        n += 1;
    }
    let mut got = Vec::new();
    for _ in 0..100 {
        got.extend(drain(&mut b).into_iter().map(|g| g.0.req));
        <ShmEp as HeldBack<ShmEp>>::flush(&a.ep, &mut a.tx);
        if got.len() == 40 {
            break;
        }
    }
    assert_eq!(got, (0..40).collect::<Vec<_>>());
}

/// Writes `cells` (a control word without its stamp, then body bytes, cut at the end
/// of the ring) one packet after another into a channel of `to`'s region claimed for a
/// third endpoint, as a peer that owns the channel could. Each gets a valid stamp, so
/// the receiver parses the garbage. Returns the third endpoint, open while it lives.
#[must_use]
fn forge<'a>(to: &PeerRegion, cells: impl IntoIterator<Item = (u64, &'a [u8])>) -> End {
    let attacker = end(true);
    let region = &to.region;
    let c = region
        .claim(&attacker.ep.name().try_into().unwrap(), 0x5151)
        .unwrap();
    let ring = region.geometry().cells as u64;
    let mut pos = region
        .chan_head(c)
        .load(std::sync::atomic::Ordering::Acquire);
    for (w, bytes) in cells {
        let off = region.cell_off(c, pos);
        let room = (ring - (pos & (ring - 1))) as usize * CELL;
        let n = bytes.len().min(room - cell::WORD);
        region.copy_in(off + cell::WORD, &bytes[..n]);
        region.cell_word(off).store(
            w | cell::stamp(pos) as u64,
            std::sync::atomic::Ordering::Release,
        );
        pos += 1 + (n / CELL) as u64;
    }
    attacker
}

/// Whether `b` still takes a message from `good` on its own channel (after garbage in
/// another one).
fn still_delivers(b: &mut End, good: &mut End, to_b: &Arc<PeerRegion>) -> bool {
    send(good, to_b, &tagged(42, 3), &[1, 2, 3]).unwrap();
    drain(b)
        .iter()
        .any(|g| g.0.tag == 42 && g.2 == [1, 2, 3] && g.1 == good.ep.name())
}

/// Forges `cells` into a channel of a fresh endpoint and polls it a few times, reading
/// every payload handed on (`check` sees each header with its payload's length): that
/// returns, never panics. Then whether the endpoint still takes a good sender's messages.
fn contained<'a>(
    cells: impl IntoIterator<Item = (u64, &'a [u8])>,
    check: impl Fn(&Header, usize),
) -> bool {
    let mut b = end(true);
    let mut good = end(true);
    let to_b = resolve(&b);
    let _attacker = forge(&to_b, cells);
    for _ in 0..4 {
        b.ep.poll(&mut b.rx, |h, _, p| {
            let mut buf = vec![0u8; p.len().min(1 << 20)];
            let _ = p.copy_to(0, &mut buf);
            check(h, p.len());
            true
        });
    }
    still_delivers(&mut b, &mut good, &to_b)
}

/// A peer that owns a channel writes arbitrary cells, stamps included: the receiver
/// neither panics nor hangs, and other channels keep working.
#[test]
fn garbage_in_a_channel_is_contained() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64));
    runner
        .run(
            &proptest::collection::vec(
                (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..200)),
                1..20,
            ),
            |cells| {
                let forged = cells
                    .iter()
                    .map(|(w, bytes)| (w & !0xffff_ffff, &bytes[..]));
                let ok = contained(forged, |_, _| {});
                prop_assert!(ok, "a good sender no longer gets through");
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn closed_peer_is_unreachable() {
    let mut a = end(true);
    let b = end(true);
    let to_b = resolve(&b);
    send(&mut a, &to_b, &tagged(1, 1), &[1]).unwrap();
    drop(b);
    assert_eq!(
        send(&mut a, &to_b, &tagged(1, 1), &[1]),
        Err(Error::HostUnreach)
    );
}

/// A full ring is backpressure: the sender asks whether the receiver is gone at most
/// once per `ASK_PERIOD`, yet a receiver that closed its endpoint in between is
/// unreachable at the next refused send.
#[test]
fn full_ring_then_closed_peer_is_unreachable_at_once() {
    let mut a = end(true);
    let b = end(true);
    let to_b = resolve(&b);
    let mut sent = 0;
    while send(&mut a, &to_b, &tagged(sent, 8), &[0; 8]).is_ok() {
        sent += 1;
        assert!(sent <= 256, "the ring has 256 cells");
    }
    // Refused again and again: backpressure, the peer is alive.
    for _ in 0..100 {
        assert_eq!(
            send(&mut a, &to_b, &tagged(0, 8), &[0; 8]),
            Err(Error::Again)
        );
    }
    assert!(!to_b.gone_lately(), "asked within the period: not gone");
    drop(b);
    assert!(to_b.gone_lately(), "a closed region answers at once");
    assert_eq!(
        send(&mut a, &to_b, &tagged(0, 8), &[0; 8]),
        Err(Error::HostUnreach)
    );
}

#[test]
fn staged_payload_reads_are_bounds_checked() {
    for cma in [true, false] {
        let mut a = end(cma);
        let mut b = end(cma);
        let to_b = resolve(&b);
        let large = vec![9u8; 100_000];
        send(&mut a, &to_b, &tagged(1, large.len()), &large).unwrap();
        let mut checked = false;
        b.ep.poll(&mut b.rx, |_, _, p| {
            if let Payload::Remote(r) = p {
                let mut buf = [0u8; 16];
                assert_eq!(r.read(large.len() - 8, &mut buf), Err(Error::Io));
                assert_eq!(r.read(usize::MAX, &mut buf[..1]), Err(Error::Io));
                r.read(100, &mut buf).unwrap();
                assert_eq!(buf, [9u8; 16]);
                checked = true;
            }
            true
        });
        assert!(checked, "cma={cma}");
    }
}

/// A payload staged in a file goes out after its first chunk; a read of what the
/// sender has not copied yet waits for it (and a read of the first chunk does not).
/// The parts split the payload at odd places. The first four payloads are copied with
/// either kind of stores (each is tried twice before it is measured).
#[test]
fn file_staged_payloads_are_read_while_the_sender_copies() {
    use crate::layout::bypass::{self, Stores};
    use crate::stage::{Stage, CHUNK, FIRST};
    let len = FIRST + 2 * CHUNK + 1234;
    let body: Vec<u8> = (0..len).map(|k| (k * 7 + 1) as u8).collect();
    let parts = [&body[..5], &body[5..CHUNK + 3], &body[CHUNK + 3..]];
    for cma in [true, false] {
        let a = end(cma);
        let region = a.ep.region();
        let mut stage = Stage::new(region, cma).unwrap();
        let sender = resolve(&a);
        let mut kinds = Vec::new();
        for _ in 0..4 {
            let (desc, rest) = stage.stage(region, &sender, &parts, len).unwrap();
            let rest = rest.expect("a payload of several chunks is filled in later");
            kinds.push(rest.stores());
            let pull = ShmPull::new(sender.clone(), &desc).unwrap();
            let mut first = vec![0u8; FIRST];
            pull.read(0, &mut first).unwrap();
            assert_eq!(first, body[..FIRST], "cma={cma}");
            let mut all = vec![0u8; len];
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    std::thread::sleep(Duration::from_millis(20));
                    stage.fill(rest, &parts);
                });
                pull.read(0, &mut all).unwrap();
            });
            assert!(
                all == body,
                "cma={cma} {kinds:?}: read before the sender copied it"
            );
            pull.finish();
        }
        if bypass::AVAILABLE {
            assert!(kinds.contains(&Stores::Plain) && kinds.contains(&Stores::Bypass));
        }
    }
}

/// Payloads that fit go round the near file's window, each after the last, whether or
/// not the earlier ones were released; while the window is full they go to the first
/// fit beyond it, and a payload larger than the window goes to the first fit.
#[test]
fn near_staging_goes_round_its_window() {
    use crate::stage::{Stage, NEAR_MAX, PROGRESS, WINDOW};
    let len = 60 << 10;
    let body: Vec<u8> = (0..NEAR_MAX).map(|k| (k * 13 + 5) as u8).collect();
    let a = end(true);
    let region = a.ep.region();
    let mut stage = Stage::new(region, true).unwrap();
    let sender = resolve(&a);
    let extent = (PROGRESS + len).next_multiple_of(64);
    let fits = WINDOW / extent;
    let send = |stage: &mut Stage, len: usize| {
        let parts = [&body[..len]];
        let (desc, rest) = stage.stage(region, &sender, &parts, len).unwrap();
        if let Some(rest) = rest {
            stage.fill(rest, &parts);
        }
        (desc, ShmPull::new(sender.clone(), &desc).unwrap())
    };
    for k in 0..2 * fits + 1 {
        let (desc, pull) = send(&mut stage, len);
        assert_eq!(desc.addr as usize, PROGRESS + (k % fits) * extent, "{k}");
        let mut got = vec![0u8; len];
        pull.read(0, &mut got).unwrap();
        assert!(got == body[..len], "{k}");
        pull.finish();
    }
    // A whole window of payloads held: the next goes beyond it.
    let held: Vec<_> = (0..fits).map(|_| send(&mut stage, len).1).collect();
    let (desc, beyond) = send(&mut stage, len);
    assert_eq!(desc.addr as usize, PROGRESS + fits * extent);
    for p in held {
        p.finish();
    }
    beyond.finish();
    const { assert!(PROGRESS + NEAR_MAX > WINDOW) };
    let (desc, big) = send(&mut stage, NEAR_MAX);
    assert_eq!(desc.addr as usize, PROGRESS);
    let mut got = vec![0u8; NEAR_MAX];
    big.read(0, &mut got).unwrap();
    assert!(got == body);
    big.finish();
}

/// Messages around and above the stream threshold, their payload split at odd places,
/// arrive whole, in order, with tag and data (two at a time: the test ring is small).
#[test]
fn streamed_messages_arrive_whole() {
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    let sizes = [STREAM_MIN - 1, STREAM_MIN, 4096, 5000, crate::INLINE_MAX];
    let bodies: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&n| (0..n).map(|k| (k * 13 + n) as u8).collect())
        .collect();
    let mut got = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let m = Eager {
            op: Op::Tagged,
            rx_idx: 0,
            tag: i as u64,
            data: (i % 2 == 1).then_some(1000 + i as u64),
            len: body.len(),
        };
        let parts = [&body[..3], &body[3..1500], &body[1500..]];
        a.ep.send_eager(&mut a.tx, &to_b, &m, &parts).unwrap();
        if i % 2 == 1 {
            got.extend(drain(&mut b));
        }
    }
    got.extend(drain(&mut b));
    assert_eq!(got.len(), sizes.len());
    for (i, (h, src, payload)) in got.iter().enumerate() {
        assert_eq!(
            (h.tag, h.op, h.len),
            (i as u64, Op::Tagged as u8, sizes[i] as u64)
        );
        let data = (h.flags & HDR_REMOTE_CQ_DATA != 0).then_some(h.data);
        assert_eq!(data, (i % 2 == 1).then_some(1000 + i as u64));
        assert!(payload == &bodies[i], "size {}", sizes[i]);
        assert_eq!(src, a.ep.name());
    }
}

/// Sends a tagged message of `len` bytes (`tag`) from `a` to `b`, after one refusal
/// at most, which the receiver's poll ends; `Err` when it was refused twice. Returns
/// whether it was refused once.
fn send_wrapping(a: &mut End, b: &mut End, to_b: &Arc<PeerRegion>, tag: u64, len: usize) -> bool {
    let body: Vec<u8> = (0..len).map(|k| (k as u64 * 7 + tag) as u8).collect();
    let m = Eager {
        op: Op::Tagged,
        rx_idx: 0,
        tag,
        data: None,
        len,
    };
    let mut got = Vec::new();
    let refused = match a.ep.send_eager(&mut a.tx, to_b, &m, &[&body]) {
        Ok(()) => false,
        Err(e) => {
            assert_eq!(e, fabric::Error::Again, "size {len}, tag {tag}");
            got = drain(b);
            assert!(got.is_empty(), "a skip marker only");
            a.ep.send_eager(&mut a.tx, to_b, &m, &[&body]).unwrap();
            true
        }
    };
    got.extend(drain(b));
    assert_eq!(got.len(), 1, "size {len}, tag {tag}");
    let (h, _, payload) = &got[0];
    assert_eq!((h.tag, h.len), (tag, len as u64));
    assert!(payload == &body, "size {len}, tag {tag}");
    refused
}

/// Packets that must wrap around the ring go through in the smallest ring, lap after
/// lap, each received before the next is sent. The skip marker before one goes in on
/// its own and its cells stand in for the reserve, so the packet is not refused:
/// skip, packet and reserve claimed together needed more than the 256 cells of this
/// ring for an 8 KiB payload, and every such send was refused for good.
#[test]
fn wrapping_packets_fit_the_smallest_ring() {
    assert_eq!(crate::layout::region::MIN_CELLS, 256, "the ring of `end`");
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    // A full inline payload (130 cells), a stream just over 4 KiB (66), a compact
    // message of 1 KiB (17): each size laps the ring at a different place.
    for (n, len) in [crate::INLINE_MAX, 4100, 1024].into_iter().enumerate() {
        for i in 0..12u64 {
            let refused = send_wrapping(&mut a, &mut b, &to_b, n as u64 * 100 + i, len);
            assert!(!refused, "size {len}, message {i}");
        }
    }
}

/// A packet whose skip marker leaves too little room even so (8 KiB, 130 cells, with
/// 128 left to the end of the lap) is refused with `FI_EAGAIN` until the receiver has
/// passed the marker, and then taken.
#[test]
fn a_packet_behind_its_skip_waits_for_the_receiver_to_pass_it() {
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    // 128 cells: a stream packet's first cell and 127 of payload.
    let fill = 127 * crate::layout::region::CELL;
    assert_eq!(cell::cells_for(cell::STREAM_BODY + fill), 128);
    for lap in 0..3u64 {
        assert!(!send_wrapping(&mut a, &mut b, &to_b, lap * 2, fill));
        assert!(send_wrapping(
            &mut a,
            &mut b,
            &to_b,
            lap * 2 + 1,
            crate::INLINE_MAX
        ));
    }
}

/// Writes the first `ready` of `body` as a stream packet from `from` into a channel of
/// `to` claimed for it; returns where the packet's first cell is.
fn half_written_stream(from: &End, to: &PeerRegion, body: &[u8], ready: usize) -> usize {
    use std::sync::atomic::Ordering;
    let region = &to.region;
    let c = region
        .claim(&from.ep.name().try_into().unwrap(), 0x5252)
        .unwrap();
    let pos = region.chan_head(c).load(Ordering::Acquire);
    let off = region.cell_off(c, pos);
    region.copy_in(off + cell::WORD, &77u64.to_le_bytes());
    region.copy_in(off + cell::STREAM_BODY, &body[..ready]);
    region
        .cell_word(off + cell::STREAM_PROGRESS)
        .store(ready as u64, Ordering::Release);
    let w = cell::word_stream(pos, Op::Msg, false, body.len());
    region.cell_word(off).store(w, Ordering::Release);
    off
}

/// The receiver copies out a stream packet's payload behind its sender: what is there
/// is read at once, the rest once the progress word says so.
#[test]
fn stream_payloads_are_read_while_the_sender_copies() {
    use std::sync::atomic::Ordering;
    let a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    let body: Vec<u8> = (0..6000u32).map(|k| (k * 3) as u8).collect();
    let off = half_written_stream(&a, &to_b, &body, 1000);
    let region = &to_b.region;
    let mut got = Vec::new();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            region.copy_in(off + cell::STREAM_BODY + 1000, &body[1000..]);
            region
                .cell_word(off + cell::STREAM_PROGRESS)
                .store(body.len() as u64, Ordering::Release);
        });
        b.ep.poll(&mut b.rx, |h, _, p| {
            assert_eq!((h.tag, h.len), (77, 6000));
            let mut first = [0u8; 1000];
            p.copy_to(0, &mut first).unwrap();
            assert_eq!(first, body[..1000]);
            let mut all = vec![0u8; p.len()];
            p.copy_to(0, &mut all).unwrap();
            got = all;
            true
        });
    });
    assert!(got == body, "read before the sender copied it");
}

/// A stream whose sender is gone before it finished: the read fails with `FI_EIO`
/// (no hang), and the receiver goes on with the channel's next packets.
#[test]
fn stream_from_a_sender_that_died_fails() {
    let a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    let body = vec![5u8; 4096];
    half_written_stream(&a, &to_b, &body, 1024);
    drop(a);
    let mut results = Vec::new();
    b.ep.poll(&mut b.rx, |_, _, p| {
        let mut all = vec![0u8; p.len()];
        results.push(p.copy_to(0, &mut all));
        true
    });
    assert_eq!(results, [Err(Error::Io)]);
}

#[test]
fn staging_slots_are_reused() {
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    let large = vec![1u8; 20_000];
    for i in 0..(crate::layout::region::STAGE_SLOTS as u64 * 3) {
        send(&mut a, &to_b, &tagged(i, large.len()), &large).unwrap();
        let got = drain(&mut b);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.tag, i);
    }
}

#[test]
fn default_region_has_the_documented_size() {
    let e = ShmEp::open(
        Geometry::new(crate::DEFAULT_CHANNELS, crate::DEFAULT_CELLS).unwrap(),
        tuning(true),
    )
    .unwrap();
    assert_eq!(e.region_bytes(), crate::DEFAULT_REGION_BYTES);
    assert!(crate::default_channels() >= crate::DEFAULT_CHANNELS);
}

/// Responses too large for the ring that find the staging file full wait in the spill
/// queue and go out staged once the receiver has copied the earlier ones.
#[test]
fn large_responses_spill_and_flush_staged() {
    for cma in [true, false] {
        let mut a = end(cma);
        let mut b = end(cma);
        let to_b = resolve(&b);
        let body: Vec<u8> = (0..(1usize << 20)).map(|i| (i % 251) as u8).collect();
        // Three 1 MiB responses: the 2.5 MiB near file holds two.
        for req in 0..3u64 {
            let h = Header {
                op: Op::ReadResp as u8,
                req,
                len: body.len() as u64,
                ..Header::default()
            };
            b.ep.expect_response(a.ep.name(), 0, req, Op::ReadResp);
            send(&mut a, &to_b, &h, &body).unwrap();
        }
        assert!(<ShmEp as HeldBack<ShmEp>>::pending(&a.ep), "cma={cma}");
        let mut got = Vec::new();
        for _ in 0..100 {
            got.extend(drain(&mut b));
            <ShmEp as HeldBack<ShmEp>>::flush(&a.ep, &mut a.tx);
            if got.len() == 3 {
                break;
            }
        }
        assert_eq!(got.iter().map(|g| g.0.req).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(got.iter().all(|g| g.2 == body), "cma={cma}");
        assert!(!<ShmEp as HeldBack<ShmEp>>::pending(&a.ep));
    }
}

/// A rendezvous sender that waits (almost) forever: the receiver always takes it.
fn patient() -> End {
    end_with(Tuning {
        rndv_wait: Duration::from_secs(20),
        ..tuning(true)
    })
}

/// A received packet: header and the payload bytes read.
type Got = (Header, Vec<u8>);

/// Polls `b` on another thread until `n` packets arrived, reading only `keep` bytes of
/// each remote payload (all when `None`).
fn receive_on_thread(
    mut b: End,
    n: usize,
    keep: Option<usize>,
) -> std::thread::JoinHandle<(End, Vec<Got>)> {
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < n {
            b.ep.poll(&mut b.rx, |h, _, p| {
                let mut buf = vec![0u8; keep.unwrap_or(p.len()).min(p.len())];
                p.copy_to(0, &mut buf).unwrap();
                got.push((*h, buf));
                true
            });
            assert!(Instant::now() < deadline, "nothing arrived");
        }
        (b, got)
    })
}

#[test]
fn rendezvous_is_read_from_the_senders_buffer() {
    if !cma_or_allowed_skip("rendezvous_is_read_from_the_senders_buffer") {
        return;
    }
    let mut a = patient();
    let b = end(true);
    let to_b = resolve(&b);
    let sizes = [crate::RNDV_MIN, 1 << 20, 5 << 20];
    let rx = receive_on_thread(b, sizes.len(), None);
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .map(|&n| (0..n).map(|i| (i * 13 + n) as u8).collect())
        .collect();
    for (i, m) in msgs.iter().enumerate() {
        send(&mut a, &to_b, &tagged(i as u64, m.len()), m).unwrap();
    }
    let (_b, got) = rx.join().unwrap();
    // Nothing was staged: every payload was read where the caller had it.
    assert_eq!(a.tx.rndv_withdrawn(), 0);
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(got[i].0.tag, i as u64);
        assert!(got[i].1 == *m, "payload {i} differs");
    }
}

#[test]
fn rendezvous_truncated_read_still_releases_the_sender() {
    if !cma_or_allowed_skip("rendezvous_truncated_read_still_releases_the_sender") {
        return;
    }
    let mut a = patient();
    let b = end(true);
    let to_b = resolve(&b);
    let rx = receive_on_thread(b, 2, Some(1000));
    let m: Vec<u8> = (0..(1usize << 20)).map(|i| i as u8).collect();
    let t = Instant::now();
    send(&mut a, &to_b, &tagged(1, m.len()), &m).unwrap();
    send(&mut a, &to_b, &tagged(2, m.len()), &m).unwrap();
    let (_b, got) = rx.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(a.tx.rndv_withdrawn(), 0);
    assert_eq!(got[1].1, m[..1000]);
}

/// A send to an endpoint that this thread polls only after the send returned: the
/// sender stages the payload after its bound, and the receiver reads the copy.
#[test]
fn rendezvous_to_a_late_receiver_is_withdrawn_and_staged() {
    if !cma_or_allowed_skip("rendezvous_to_a_late_receiver_is_withdrawn_and_staged") {
        return;
    }
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    // More sends than records: records come back once their receiver finished.
    for round in 0..3u64 {
        let mut msgs = Vec::new();
        for i in 0..(crate::RNDV_RECORDS as u64 / 2) {
            let m: Vec<u8> = (0..crate::RNDV_MIN + i as usize)
                .map(|k| (k as u64 * 7 + i + round) as u8)
                .collect();
            send(&mut a, &to_b, &tagged(i, m.len()), &m).unwrap();
            msgs.push(m);
        }
        let got = drain(&mut b);
        assert_eq!(got.len(), msgs.len());
        for (g, m) in got.iter().zip(&msgs) {
            assert!(g.2 == *m);
        }
    }
    assert_eq!(a.tx.rndv_withdrawn(), 3 * crate::RNDV_RECORDS as u64 / 2);
    // To itself, on one thread, with a multi-part payload (staged, no rendezvous).
    let to_a = resolve(&a);
    let m = vec![4u8; 200_000];
    send(&mut a, &to_a, &tagged(9, m.len()), &m).unwrap();
    a.ep.send(
        &mut a.tx,
        &to_a,
        &tagged(10, m.len()),
        &[&m[..1000], &m[1000..]],
    )
    .unwrap();
    let got = drain(&mut a);
    assert_eq!((got.len(), &got[0].2, &got[1].2), (2, &m, &m));
    assert_eq!(
        a.tx.rndv_withdrawn(),
        3 * crate::RNDV_RECORDS as u64 / 2 + 1
    );
}

#[test]
fn rendezvous_to_a_receiver_that_goes_away_fails() {
    if !cma_or_allowed_skip("rendezvous_to_a_receiver_that_goes_away_fails") {
        return;
    }
    let mut a = patient();
    let b = end(true);
    let to_b = resolve(&b);
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(b);
    });
    let m = vec![1u8; 1 << 20];
    let t = Instant::now();
    assert_eq!(
        send(&mut a, &to_b, &tagged(1, m.len()), &m),
        Err(Error::HostUnreach)
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    closer.join().unwrap();
}

/// A rendezvous descriptor from a peer naming records it never posted: refused reads,
/// no panic, and the sender's records untouched.
#[test]
fn forged_rendezvous_descriptors_are_refused() {
    if !cma_or_allowed_skip("forged_rendezvous_descriptors_are_refused") {
        return;
    }
    let a = end(true);
    let peer = resolve(&a);
    for (slot, gen) in [(0u32, 0u64), (3, 1), (31, 99)] {
        let d = cell::Desc {
            addr: 4096,
            len: 100_000,
            slot,
            mode: cell::Desc::RNDV,
            gen,
        };
        let pull = ShmPull::new(peer.clone(), &d).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(pull.read(0, &mut buf), Err(Error::Io));
        pull.finish();
        assert_eq!(
            crate::rndv::seen(peer.region.rndv_state(slot as usize), gen),
            crate::rndv::Seen::Other
        );
    }
    let d = cell::Desc {
        addr: 0,
        len: 100_000,
        slot: crate::RNDV_RECORDS as u32,
        mode: cell::Desc::RNDV,
        gen: 1,
    };
    assert!(ShmPull::new(peer, &d).is_err());
}

/// A fetch-add travels as one short atomic cell and its answer as one short response
/// cell: the receiver sees exactly the header and payload that were sent, and error
/// answers (no payload) arrive too.
#[test]
fn atomic_requests_and_responses_travel_short() {
    let mut a = end(true);
    let mut b = end(true);
    let to_b = resolve(&b);
    let req = fetch_add(1, 7 << 32 | 2);
    let head = |e: &End, to: &End| {
        let region = &peer::resolve(to.ep.name()).unwrap().region;
        let c = (0..region.hwm())
            .find(|&c| region.chan_name(c) == e.ep.name())
            .unwrap();
        region
            .chan_head(c)
            .load(std::sync::atomic::Ordering::Acquire)
    };
    send(&mut a, &to_b, &req, &5u64.to_le_bytes()).unwrap();
    let got = drain(&mut b);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, &got[0].2[..]), (req, &5u64.to_le_bytes()[..]));
    // One cell.
    assert_eq!(head(&a, &b), 1);
    for (status, old) in [(0u32, &9u64.to_le_bytes()[..]), (13, &[][..])] {
        if status != 0 {
            // The first answer untracked the request: this one answers it again.
            a.ep.expect_response(b.ep.name(), req.tx_idx, req.req, Op::AtomicResp);
        }
        let r = Response {
            op: Op::AtomicResp,
            tx_idx: req.tx_idx,
            req: req.req,
            status,
        };
        respond(&mut b, a.ep.name(), &r, old).unwrap();
        let got = drain(&mut a);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].0, &got[0].1[..], &got[0].2[..]),
            (r.header(old.len()), b.ep.name(), old)
        );
    }
    assert_eq!(head(&b, &a), 2);
}

/// An 8-byte fetch-add request (`FI_SUM` of a `u64` at key 42) of transmit context
/// `tx_idx` with id `req`.
fn fetch_add(tx_idx: u16, req: u64) -> Header {
    Header {
        op: Op::Atomic as u8,
        flags: fabric::provider::wire::HDR_FETCH,
        atomic_op: 3,
        datatype: 9,
        tx_idx,
        aux: 8,
        req,
        addr: 0x1000,
        key: 42,
        len: 8,
        ..Header::default()
    }
}

/// A response is taken only from the peer its request went to, and only once: a
/// third endpoint answering with the same ids, or a second answer, is dropped in the
/// transport, whichever cell form it takes.
#[test]
fn only_the_asked_peer_answers_once() {
    let mut a = end(true);
    let mut b = end(true);
    let mut c = end(true);
    let to_b = resolve(&b);
    let to_a = resolve(&a);
    let req = fetch_add(2, 5 << 32 | 1);
    send(&mut a, &to_b, &req, &5u64.to_le_bytes()).unwrap();
    assert_eq!(drain(&mut b).len(), 1);
    let answer = Response {
        op: Op::AtomicResp,
        tx_idx: req.tx_idx,
        req: req.req,
        status: 0,
    };
    // The short form and the full header, from a peer that was not asked.
    respond(&mut c, a.ep.name(), &answer, &[7; 8]).unwrap();
    send(&mut c, &to_a, &answer.header(8), &[7; 8]).unwrap();
    assert!(drain(&mut a).is_empty(), "a forged answer got through");
    respond(&mut b, a.ep.name(), &answer, &[9; 8]).unwrap();
    let got = drain(&mut a);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].0.req, &got[0].1[..], &got[0].2[..]),
        (req.req, b.ep.name(), &[9u8; 8][..])
    );
    // A second answer from the right peer finds nothing pending.
    respond(&mut b, a.ep.name(), &answer, &[9; 8]).unwrap();
    assert!(drain(&mut a).is_empty(), "an answer was taken twice");
}

/// Garbage response and atomic cells, stamps included, with arbitrary ids, lengths and
/// fields: the receiver neither panics nor hangs, whatever reaches the core is within
/// the cells, and other channels keep working.
#[test]
fn garbage_short_cells_are_contained() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64));
    runner
        .run(
            &proptest::collection::vec(
                (
                    any::<u64>(),
                    prop_oneof![Just(cell::RESPONSE), Just(cell::ATOMIC)],
                    proptest::collection::vec(any::<u8>(), 0..200),
                ),
                1..20,
            ),
            |cells| {
                let forged = cells
                    .iter()
                    .map(|(w, kind, bytes)| ((w & !0xf_ffff_ffff) | kind << 32, &bytes[..]));
                let ok = contained(forged, |h, len| {
                    if h.op == Op::Atomic as u8 {
                        assert_eq!(h.len, len as u64);
                    }
                });
                prop_assert!(ok, "a good sender no longer gets through");
                Ok(())
            },
        )
        .unwrap();
}

/// A sink whose reader is sated after every message: it records (source, tag).
struct OneAtATime<'a>(&'a mut Vec<(Vec<u8>, u64)>);

impl fabric::provider::Sink<ShmPull> for OneAtATime<'_> {
    fn packet(&mut self, hdr: &Header, src: &[u8], _: Payload<'_, ShmPull>) -> bool {
        self.0.push((src.to_vec(), hdr.tag));
        true
    }
    fn sated(&self) -> bool {
        true
    }
}

#[test]
fn a_sated_reader_leaves_the_rest_of_a_ring_to_the_next_poll() {
    let (mut a, mut c, mut b) = (end(true), end(true), end(true));
    let to_b = resolve(&b);
    // `a` sends compact packets, `c` packets with a full header (acknowledged ones).
    for i in 0..3u64 {
        let m = Eager {
            op: Op::Tagged,
            rx_idx: 0,
            tag: 10 + i,
            data: None,
            len: 8,
        };
        a.ep.send_eager(&mut a.tx, &to_b, &m, &[&i.to_le_bytes()])
            .unwrap();
        let acked = Header {
            flags: HDR_ACK,
            req: i,
            ..tagged(20 + i, 8)
        };
        send(&mut c, &to_b, &acked, &i.to_le_bytes()).unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..3 {
        // One message from each sender's channel per poll: no channel waits on another.
        assert_eq!(b.ep.poll_into(&mut b.rx, OneAtATime(&mut seen)), 2);
    }
    assert_eq!(b.ep.poll_into(&mut b.rx, OneAtATime(&mut seen)), 0);
    assert_eq!(seen.len(), 6);
    for (e, base) in [(&a, 10), (&c, 20)] {
        let tags: Vec<u64> = seen
            .iter()
            .filter(|(s, _)| s == e.ep.name())
            .map(|(_, t)| *t)
            .collect();
        assert_eq!(tags, [base, base + 1, base + 2]);
    }
}

/// More senders than the old one-word bitmap held (64) all reach one receiver, each
/// message once and in order per sender: no sender waits for a channel while others
/// hold theirs.
#[test]
fn a_hundred_senders_reach_one_endpoint() {
    let ep = ShmEp::open(crate::geometry().unwrap(), tuning(false)).unwrap();
    let mut rx = End {
        tx: ep.sender(),
        rx: ep.receiver(),
        ep,
    };
    let to = resolve(&rx);
    let mut senders: Vec<End> = (0..100).map(|_| end(false)).collect();
    for round in 0..3u64 {
        for (i, s) in senders.iter_mut().enumerate() {
            let tag = (i as u64) << 8 | round;
            send(s, &to, &tagged(tag, 8), &tag.to_le_bytes()).expect("a channel for every sender");
        }
    }
    let got = drain(&mut rx);
    assert_eq!(got.len(), 300);
    let mut next = vec![0u64; 100];
    for (h, _, b) in got {
        let i = (h.tag >> 8) as usize;
        assert_eq!(h.tag & 0xff, next[i], "in order per sender");
        assert_eq!(b, h.tag.to_le_bytes());
        next[i] += 1;
    }
    assert!(next.iter().all(|&n| n == 3));
}

/// A response to a peer in whose region no channel is free is neither refused nor
/// dropped: it waits in the sender and goes out once a channel frees up.
#[test]
fn a_response_waits_for_a_channel_instead_of_being_dropped() {
    let one = Geometry::new(1, 256).unwrap();
    let ep = ShmEp::open(one, tuning(false)).unwrap();
    let mut initiator = End {
        tx: ep.sender(),
        rx: ep.receiver(),
        ep,
    };
    let mut target = end(false);
    let mut blocker = end(false);
    let to_initiator = resolve(&initiator);
    // The blocker holds the initiator's only channel.
    send(&mut blocker, &to_initiator, &tagged(1, 8), &[1; 8]).unwrap();
    initiator
        .ep
        .expect_response(target.ep.name(), 0, 42, Op::Ack);
    let r = Response {
        op: Op::Ack,
        tx_idx: 0,
        req: 42,
        status: 0,
    };
    respond(&mut target, initiator.ep.name(), &r, &[]).expect("a response is never refused");
    let got = drain(&mut initiator);
    assert_eq!(got.len(), 1, "only the blocker's message so far");
    assert_eq!(got[0].0.tag, 1);
    // The blocker leaves; the initiator frees its channel, and the target's next
    // progress delivers the response.
    drop(blocker);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut acks = Vec::new();
    while acks.is_empty() {
        assert!(Instant::now() < deadline, "the response never arrived");
        <ShmEp as HeldBack<ShmEp>>::flush(&target.ep, &mut target.tx);
        acks = drain(&mut initiator);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0.op, Op::Ack as u8);
    assert_eq!(acks[0].0.req, 42);
}

/// Every file peers map refuses to shrink or grow (`EPERM`), through the owner's
/// descriptor or through `/proc` as any process of the user would open it: the
/// region, both staging files, and (in their own modules' tests) the directory and
/// mapped segments. Large payloads still cross afterwards.
#[test]
fn files_peers_map_cannot_be_resized() {
    use crate::layout::sys::tests::truncate;
    use std::os::fd::AsRawFd;
    // Without cross-memory attach: the far staging file exists as well.
    let mut a = end(false);
    let mut b = end(false);
    let region = crate::name::Name::decode(a.ep.name()).unwrap().fd;
    let near = a.ep.region().stage(0).expect("near staging file").0;
    let far = a.ep.region().stage(1).expect("far staging file").0;
    for fd in [region, near, far] {
        let other = crate::layout::sys::open_peer_fd(crate::layout::sys::getpid(), fd).unwrap();
        for len in [0, 4096, 1 << 30] {
            assert_eq!(truncate(fd as i32, len), Err(libc::EPERM), "fd {fd}");
            assert_eq!(
                truncate(other.as_raw_fd(), len),
                Err(libc::EPERM),
                "fd {fd}"
            );
        }
    }
    let to_b = resolve(&b);
    for (i, len) in [100_000usize, 2 << 20].into_iter().enumerate() {
        let body: Vec<u8> = (0..len).map(|x| (x * 7 + i) as u8).collect();
        send(&mut a, &to_b, &tagged(i as u64, len), &body).unwrap();
        let got = drain(&mut b);
        assert_eq!(got.len(), 1);
        assert!(got[0].2 == body, "payload of {len} bytes differs");
    }
}

/// A variable that is not a number is refused, not replaced by the default.
#[test]
fn bad_numbers_in_the_environment_are_refused() {
    let p = |v| crate::parse_usize("FABRIC_SHM_CHANNELS", v, 16);
    assert_eq!(p(None), Ok(16));
    assert_eq!(p(Some("8")), Ok(8));
    assert_eq!(p(Some(" 32 ")), Ok(32));
    for bad in ["abc", "", "-1", "1.5", "0x10", "16k"] {
        assert_eq!(p(Some(bad)), Err(Error::Inval), "{bad:?}");
    }
}

/// A channel freed and claimed again by another sender before the receiver looked is
/// read as the new sender's: its messages carry the new sender's address and its
/// responses are matched against the requests sent to it. With the old one-word
/// bitmap the receiver saw no change and kept the first sender's name for it, so
/// the new sender's responses were dropped as unsolicited and every operation from
/// that receiver to it hung (finding 1 of the node-scale issue).
#[test]
fn a_channel_claimed_again_is_read_as_the_new_senders() {
    let one = Geometry::new(1, 256).unwrap();
    let ep = ShmEp::open(one, tuning(false)).unwrap();
    let mut r = End {
        tx: ep.sender(),
        rx: ep.receiver(),
        ep,
    };
    let to = resolve(&r);
    let mut s1 = end(false);
    send(&mut s1, &to, &tagged(1, 8), &[1; 8]).unwrap();
    let got = drain(&mut r);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, s1.ep.name());
    // The receiver frees the only channel (as its housekeeping does once the sender
    // left) and, before its next poll, another sender claims it.
    r.ep.region().unclaim(0);
    let mut s2 = end(false);
    send(&mut s2, &to, &tagged(2, 8), &[2; 8]).unwrap();
    // A response from the new sender to a request the receiver sent it.
    r.ep.expect_response(s2.ep.name(), 0, 7, Op::Ack);
    let ack = Response {
        op: Op::Ack,
        tx_idx: 0,
        req: 7,
        status: 0,
    };
    respond(&mut s2, r.ep.name(), &ack, &[]).unwrap();
    let got = drain(&mut r);
    assert_eq!(got.len(), 2, "the message and the response");
    assert_eq!(got[0].0.tag, 2);
    assert_eq!(got[0].1, s2.ep.name(), "the new claimer's address");
    assert_eq!((got[1].0.op, got[1].0.req), (Op::Ack as u8, 7));
    assert_eq!(got[1].1, s2.ep.name());
}
