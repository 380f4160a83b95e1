//! Threading proofs.
//!
//! Compile-time: `tests/ui/thread_domain_*.rs` must NOT compile (a `ThreadDomain`
//! endpoint or CQ used from another thread, moved or shared), `tests/ui/pass_*.rs` must
//! compile and run (`ThreadSafe`, and `ThreadDomain` with `Auto` progress). Regenerate
//! the expected diagnostics with `TRYBUILD=overwrite cargo test -p fabric --test threading`.
//!
//! Run time: a `ThreadSafe` endpoint shared by two sending threads delivers everything.

use std::collections::HashSet;

use fabric::prelude::*;
use fabric_loopback::Loopback;

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/thread_domain_*.rs");
    t.pass("tests/ui/pass_*.rs");
}

type Safe = Stack<Loopback, ThreadSafe, Manual>;

const PER_THREAD: u64 = 2000;
const LEN: usize = 16;

/// Two threads share one `ThreadSafe` endpoint (`&ep` in `std::thread::scope`) and
/// each `tsend`s `PER_THREAD` messages, reaping their own send completions from the
/// shared transmit CQ; the main thread receives every message exactly once, intact.
#[test]
fn thread_safe_endpoint_shared_by_two_senders() {
    let hints = Hints::new()
        .caps(Caps::TAGGED | Caps::MSG)
        .ep_type(EpType::Rdm);
    let info = getinfo::<Safe>(Some(&hints)).unwrap().remove(0);
    let fabric = Fabric::<Safe>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let tx_cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let rx_cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let tx = domain.endpoint(&info).unwrap();
    tx.bind_cq(&tx_cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    tx.bind_av(&av).unwrap();
    tx.enable().unwrap();
    let rx = domain.endpoint(&info).unwrap();
    rx.bind_cq(&rx_cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    rx.bind_av(&av).unwrap();
    rx.enable().unwrap();
    let to_rx = av.insert(&rx.name()).unwrap();

    let total = 2 * PER_THREAD as usize;
    // Receives are kept posted in a window of `SLOTS` buffers, each reposted as soon as
    // its completion has been checked; tags are `thread << 32 | seq`, and each receive
    // takes any tag (ignore all bits).
    const SLOTS: usize = 256;
    let mut slots = [[0u8; LEN]; SLOTS];
    for (i, b) in slots.iter_mut().enumerate() {
        // SAFETY: a slot is read only after its receive completed, then reposted.
        unsafe { rx.trecv(b, FiAddr::UNSPEC, 0, u64::MAX, Context(i)) }.unwrap();
    }
    let mut arrivals = Vec::with_capacity(total);

    let tx_done: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let (tx, tx_cq) = (&tx, &tx_cq);
                s.spawn(move || {
                    let mut done = 0usize;
                    let mut e = [CqTaggedEntry::default(); 16];
                    let mut seq = 0;
                    while seq < PER_THREAD {
                        let tag = t << 32 | seq;
                        let mut msg = [t as u8; LEN];
                        msg[..8].copy_from_slice(&tag.to_le_bytes());
                        match tx.tsend(&msg, to_rx, tag, Context(tag as usize)) {
                            Ok(()) => seq += 1,
                            Err(Error::Again) => {}
                            Err(err) => panic!("tsend: {err}"),
                        }
                        // Either thread may reap either thread's completions.
                        match tx_cq.read(&mut e) {
                            Ok(n) => done += n,
                            Err(Error::Again) => {}
                            Err(err) => panic!("tx cq: {err}"),
                        }
                    }
                    done
                })
            })
            .collect();

        // This thread receives while the two senders run.
        let mut e = [CqTaggedEntry::default(); 64];
        let mut spins = 0u64;
        while arrivals.len() < total {
            spins += 1;
            assert!(spins < 100_000_000, "stuck: {} received", arrivals.len());
            match rx_cq.read(&mut e) {
                Ok(n) => {
                    for x in &e[..n] {
                        assert_eq!(x.len, LEN);
                        let k = x.op_context.0;
                        let b = slots[k];
                        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), x.tag);
                        arrivals.push(b);
                        if arrivals.len() + SLOTS <= total {
                            // SAFETY: as above.
                            unsafe {
                                rx.trecv(&mut slots[k], FiAddr::UNSPEC, 0, u64::MAX, Context(k))
                            }
                            .unwrap();
                        }
                    }
                }
                Err(Error::Again) => std::thread::yield_now(),
                Err(err) => panic!("rx cq: {err}"),
            }
        }
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });

    // Send completions not reaped by the senders themselves.
    let mut tx_done = tx_done;
    let mut e = [CqTaggedEntry::default(); 64];
    let mut spins = 0u64;
    while tx_done < total {
        spins += 1;
        assert!(spins < 10_000_000, "stuck: {tx_done} send completions");
        match tx_cq.read(&mut e) {
            Ok(n) => tx_done += n,
            Err(Error::Again) => {}
            Err(err) => panic!("tx cq: {err}"),
        }
    }
    assert_eq!(tx_done, total);
    assert_eq!(tx_cq.read(&mut e), Err(Error::Again));

    // Every message arrived exactly once and intact (body matches tag), and per sender
    // in send order (loopback is FI_ORDER_STRICT; receives match in posting order).
    let mut seen = HashSet::new();
    let mut next = [0u64; 2];
    for b in &arrivals {
        let tag = u64::from_le_bytes(b[..8].try_into().unwrap());
        assert!(seen.insert(tag), "tag {tag:#x} twice");
        let t = (tag >> 32) as usize;
        assert!(
            b[8..].iter().all(|&x| x as usize == t),
            "torn message {b:?}"
        );
        assert_eq!(tag & 0xffff_ffff, next[t], "sender {t} out of order");
        next[t] += 1;
    }
    assert_eq!(next, [PER_THREAD; 2]);
}

/// An EQ opened in a wait set (`fi_eq_open` with `FI_WAIT_SET`): a thread blocked in
/// `fi_wait` wakes when another thread writes an event, and a detached EQ's events no
/// longer count for the set.
#[test]
fn eq_in_a_wait_set_wakes_a_waiting_thread() {
    use std::time::Duration;
    let info = getinfo::<Safe>(None).unwrap().remove(0);
    let fabric = Fabric::<Safe>::open(&info).unwrap();
    let ws = fabric.wait_set(&WaitAttr::DEFAULT).unwrap();
    let attr = EqAttr {
        flags: FI_WRITE,
        ..EqAttr::DEFAULT
    };
    let eq = fabric.eq_in_set(&attr, &ws).unwrap();
    let event = |data| EqEntry {
        event: EqEvent::MrComplete,
        fid_context: Context(7),
        context: Context(8),
        data,
        info: None,
        conn: None,
    };
    assert_eq!(ws.wait(Some(Duration::from_millis(15))), Err(Error::Again));
    assert_eq!(trywait(&[&eq]), Ok(()));
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            eq.write(event(1)).unwrap();
        });
        assert_eq!(ws.wait(Some(Duration::from_secs(10))), Ok(()));
    });
    assert_eq!(trywait(&[&eq]), Err(Error::Again));
    let e = eq.read(false).unwrap();
    assert_eq!(
        (e.event, e.data, e.context),
        (EqEvent::MrComplete, 1, Context(8))
    );
    assert_eq!(ws.wait(Some(Duration::from_millis(5))), Err(Error::Again));
    // Detached, its events still signal the wait object but no longer ready the set.
    ws.detach_eq(&eq);
    eq.write(event(2)).unwrap();
    assert_eq!(ws.wait(Some(Duration::from_millis(15))), Err(Error::Again));
    assert_eq!(eq.read(false).unwrap().data, 2);
}
