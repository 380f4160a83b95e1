//! Large messages over tcp sent straight from the caller's buffer: with a receiver
//! that polls, a 64 MiB send leaves the caller's memory only through the kernel; with
//! one that does not, the send returns within its bound (`fabric_tcp::tx_bound`) and
//! the rest arrives once it polls; two endpoints on one thread sending 64 MiB to each
//! other before either receives do not deadlock; a receiver killed in the middle of
//! a send fails it (a child process: this binary re-run).
//!
//! `fabric_tcp::large_tx()` counts, process-wide, the payload bytes of large frames
//! sent straight and those copied; the tests run one at a time (`SERIAL`) so that
//! each sees only its own bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_tcp::{large_tx, tx_bound, LargeTx};

mod tcp_common;
use tcp_common::{hex, node, node_with, pattern, unhex, Node, DEADLINE};

/// The largest message.
const MAX: usize = fabric_tcp::MAX_MSG_SIZE;
/// Payload bytes a 64 MiB send to a polling receiver may still copy, in the best of
/// [`ATTEMPTS`]: what the socket could not take while the receiving thread was off
/// its core for longer than `TX_STALL`, or the send's bound passed, on a loaded
/// machine. On an idle one it copies nothing.
const COPY_ALLOWANCE: u64 = 8 << 20;
/// Sends to the polling receiver: one of them must keep within [`COPY_ALLOWANCE`].
const ATTEMPTS: usize = 3;
/// Besides its bound, a send to a receiver that does not poll takes one copy of
/// what is left (under 64 MiB): this much at most, on a loaded machine.
const COPY_TIME: Duration = Duration::from_secs(1);
/// The bound within which a send to a killed receiver must fail.
const DEATH_BOUND: Duration = Duration::from_secs(2);
/// Environment variable that makes `child_entry` act, with the parent's name in hex.
const CHILD_ENV: &str = "FABRIC_TCP_LARGE_TX_CHILD";

/// One test at a time: the counts are process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The change of the counts since `before`: (direct, copied).
fn since(before: LargeTx) -> (u64, u64) {
    let now = large_tx();
    (now.direct - before.direct, now.copied - before.copied)
}

/// One round of progress on `n`.
fn progress(n: &Node) {
    let _ = n.cq.read(&mut []);
}

/// The next entry of `n`, success or error, driving `others` too.
fn entry(n: &Node, others: &[&Node]) -> std::result::Result<CqTaggedEntry, CqErrEntry> {
    let start = Instant::now();
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        match n.cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Err(Error::Avail) => return Err(n.cq.read_err().unwrap()),
            Ok(_) | Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
        for o in others {
            progress(o);
        }
        assert!(start.elapsed() < DEADLINE, "no entry within {DEADLINE:?}");
        std::thread::yield_now();
    }
}

/// The next entry of `n`, which must be a success with context `ctx`.
fn done(n: &Node, others: &[&Node], ctx: usize) -> CqTaggedEntry {
    let e = entry(n, others).unwrap_or_else(|e| panic!("context {ctx} failed: {e:?}"));
    assert_eq!(e.op_context, Context(ctx));
    e
}

/// Retries `op` while the provider pushes back, driving `n` and `others`.
fn retry(n: &Node, others: &[&Node], mut op: impl FnMut() -> Result<()>) {
    let start = Instant::now();
    loop {
        match op() {
            Ok(()) => return,
            Err(Error::Again) => {
                progress(n);
                for o in others {
                    progress(o);
                }
                assert!(start.elapsed() < DEADLINE, "refused for {DEADLINE:?}");
            }
            Err(e) => panic!("post: {e}"),
        }
    }
}

/// Opens the connection from `a` to `to` with a small message `b` receives, so that
/// the large send that follows finds it established.
fn warm(a: &Node, b: &Node, to: FiAddr) {
    let mut one = [0u8; 1];
    // SAFETY: `one` outlives the receive, read after its completion.
    unsafe { b.ep.trecv(&mut one, FiAddr::UNSPEC, 99, 0, Context(99)) }.unwrap();
    retry(a, &[b], || a.ep.tsend(&[1], to, 99, Context(98)));
    done(b, &[a], 99);
    done(a, &[b], 98);
}

#[test]
fn polling_receiver_takes_64mib_straight_from_the_senders_buffer() {
    let _s = serial();
    let a = node();
    let (name_tx, name_rx) = mpsc::channel::<Vec<u8>>();
    let (go_tx, go_rx) = mpsc::channel::<Vec<u8>>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let msg = pattern(MAX, 5);
    let expect = msg.clone();
    // The receiver polls on a thread of its own, as a process would.
    let receiver = std::thread::spawn(move || {
        let b = node();
        name_tx.send(b.ep.name()).unwrap();
        b.av.insert(&go_rx.recv().unwrap()).unwrap();
        let mut one = [0u8; 1];
        // SAFETY: `one` outlives the receive, read after its completion.
        unsafe { b.ep.trecv(&mut one, FiAddr::UNSPEC, 99, 0, Context(99)) }.unwrap();
        done(&b, &[], 99);
        let mut buf = vec![0u8; MAX];
        for i in 0..ATTEMPTS {
            buf.fill(0);
            // SAFETY: `buf` outlives the receive, read after its completion.
            unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 7, 0, Context(7)) }.unwrap();
            // Polling from now on: the sender may start.
            ready_tx.send(()).unwrap();
            let e = done(&b, &[], 7);
            assert_eq!(e.len, MAX);
            assert!(buf == expect, "64 MiB message {i} differs");
        }
    });
    let b_at_a = a.av.insert(&name_rx.recv().unwrap()).unwrap();
    go_tx.send(a.ep.name()).unwrap();
    retry(&a, &[], || a.ep.tsend(&[1], b_at_a, 99, Context(98)));
    done(&a, &[], 98);
    let mut least = u64::MAX;
    for _ in 0..ATTEMPTS {
        let start = Instant::now();
        while ready_rx.try_recv().is_err() {
            // Whatever an attempt before copied is written out by progress.
            progress(&a);
            assert!(start.elapsed() < DEADLINE, "receiver not ready");
            std::thread::yield_now();
        }
        let before = large_tx();
        let start = Instant::now();
        retry(&a, &[], || a.ep.tsend(&msg, b_at_a, 7, Context(1)));
        let took = start.elapsed();
        let (direct, copied) = since(before);
        println!("64 MiB to a polling receiver: {took:?}, {direct} B direct, {copied} B copied");
        assert_eq!(direct + copied, MAX as u64);
        least = least.min(copied);
        done(&a, &[], 1);
    }
    let start = Instant::now();
    while !receiver.is_finished() {
        progress(&a);
        assert!(
            start.elapsed() < DEADLINE,
            "not received within {DEADLINE:?}"
        );
        std::thread::yield_now();
    }
    receiver.join().unwrap();
    assert!(
        least <= COPY_ALLOWANCE,
        "at least {least} bytes copied in each of {ATTEMPTS} sends, more than {COPY_ALLOWANCE}"
    );
}

#[test]
fn idle_receiver_send_returns_within_its_bound_and_arrives_once_it_polls() {
    let _s = serial();
    let a = node();
    let b = node();
    let b_at_a = a.av.insert(&b.ep.name()).unwrap();
    warm(&a, &b, b_at_a);
    let msg = pattern(MAX, 9);
    let mut buf = vec![0u8; MAX];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 7, 0, Context(7)) }.unwrap();
    let before = large_tx();
    let start = Instant::now();
    // `b` does not poll while `a` sends.
    retry(&a, &[], || a.ep.tsend(&msg, b_at_a, 7, Context(1)));
    let took = start.elapsed();
    let (direct, copied) = since(before);
    println!("64 MiB to an idle receiver: {took:?}, {direct} B direct, {copied} B copied");
    let bound = tx_bound(MAX) + COPY_TIME;
    assert!(took < bound, "send took {took:?}, more than {bound:?}");
    assert_eq!(direct + copied, MAX as u64);
    assert!(
        copied > 0,
        "nothing copied although the receiver did not poll"
    );
    drop(msg);
    let e = done(&b, &[&a], 7);
    assert_eq!(e.len, MAX);
    done(&a, &[&b], 1);
    assert!(buf == pattern(MAX, 9), "64 MiB message differs");
}

#[test]
fn two_endpoints_on_one_thread_send_64mib_to_each_other_without_deadlock() {
    let _s = serial();
    let a = node_with(Caps::MSG | Caps::TAGGED, &CqAttr::DEFAULT);
    let b = node_with(Caps::MSG | Caps::TAGGED, &CqAttr::DEFAULT);
    let b_at_a = a.av.insert(&b.ep.name()).unwrap();
    let a_at_b = b.av.insert(&a.ep.name()).unwrap();
    warm(&a, &b, b_at_a);
    warm(&b, &a, a_at_b);
    let (to_b, to_a) = (pattern(MAX, 1), pattern(MAX, 2));
    let (mut at_b, mut at_a) = (vec![0u8; MAX], vec![0u8; MAX]);
    let (mut small_b, mut small_a) = ([0u8; 8], [0u8; 8]);
    // Untagged, posted in order: a small message that overtook the large one on its
    // connection would land in the large buffer.
    // SAFETY: the buffers outlive the receives, read after their completions.
    unsafe {
        b.ep.recv(&mut at_b, FiAddr::UNSPEC, Context(10)).unwrap();
        b.ep.recv(&mut small_b, FiAddr::UNSPEC, Context(11))
            .unwrap();
        a.ep.recv(&mut at_a, FiAddr::UNSPEC, Context(20)).unwrap();
        a.ep.recv(&mut small_a, FiAddr::UNSPEC, Context(21))
            .unwrap();
    }
    let start = Instant::now();
    // Neither polls: each send ends by its bound.
    retry(&a, &[], || a.ep.send(&to_b, b_at_a, Context(1)));
    retry(&b, &[], || b.ep.send(&to_a, a_at_b, Context(2)));
    let took = start.elapsed();
    println!("two 64 MiB sends, no receiver polling: {took:?}");
    let bound = 2 * (tx_bound(MAX) + COPY_TIME);
    assert!(took < bound, "sends took {took:?}, more than {bound:?}");
    retry(&a, &[&b], || a.ep.send(b"a-small!", b_at_a, Context(3)));
    retry(&b, &[&a], || b.ep.send(b"b-small!", a_at_b, Context(4)));
    let mut seen = Vec::new();
    while seen.len() < 8 {
        for (n, o) in [(&a, &b), (&b, &a)] {
            let mut e = [CqTaggedEntry::default(); 1];
            match n.cq.read(&mut e) {
                Ok(1) => seen.push((e[0].op_context.0, e[0].len)),
                Ok(_) | Err(Error::Again) => {}
                Err(Error::Avail) => panic!("failed: {:?}", n.cq.read_err()),
                Err(err) => panic!("cq read: {err}"),
            }
            progress(o);
        }
        assert!(
            start.elapsed() < DEADLINE,
            "only {seen:?} within {DEADLINE:?}"
        );
    }
    seen.sort_unstable();
    let want = [
        (1, MAX),
        (2, MAX),
        (3, 8),
        (4, 8),
        (10, MAX),
        (11, 8),
        (20, MAX),
        (21, 8),
    ];
    assert_eq!(seen, want);
    assert!(at_b == to_b && at_a == to_a, "a 64 MiB message differs");
    assert_eq!((&small_b, &small_a), (b"a-small!", b"b-small!"));
}

/// The child of `killed_receiver_fails_the_send`: posts a 64 MiB receive, sends its
/// name to the parent and polls, gently, until it is killed.
#[test]
#[ignore = "run by killed_receiver_fails_the_send as a child process"]
fn child_entry() {
    let Ok(parent) = std::env::var(CHILD_ENV) else {
        return;
    };
    let n = node();
    let to = n.av.insert(&unhex(&parent)).unwrap();
    let mut buf = vec![0u8; MAX];
    // SAFETY: `buf` outlives the receive: the process is killed before it ends.
    unsafe { n.ep.trecv(&mut buf, FiAddr::UNSPEC, 7, 0, Context(7)) }.unwrap();
    let name = n.ep.name();
    retry(&n, &[], || n.ep.tsend(&name, to, 1, Context(1)));
    done(&n, &[], 1);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        progress(&n);
        // Slow enough that the parent is still sending when it kills this process,
        // well within the sender's stall bound.
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("not killed within a minute");
}

/// Starts a child receiver and returns it with its address at `p`.
fn child(p: &Node) -> (std::process::Child, FiAddr) {
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_entry", "--nocapture"])
        .env(CHILD_ENV, hex(&p.ep.name()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut name = vec![0u8; 64];
    // SAFETY: `name` outlives the receive, read after its completion.
    unsafe { p.ep.trecv(&mut name, FiAddr::UNSPEC, 1, 0, Context(1)) }.unwrap();
    let e = done(p, &[], 1);
    (child, p.av.insert(&name[..e.len]).unwrap())
}

/// Kills `child` once a MiB of payload went out straight during a send, or the send
/// is over (`sent`: it ended by its bound with less, the rest queued).
fn kill_during_send<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    mut child: std::process::Child,
    before: LargeTx,
    sent: &'s AtomicBool,
) -> std::thread::ScopedJoinHandle<'s, Instant> {
    s.spawn(move || {
        let start = Instant::now();
        while since(before).0 < 1 << 20 && !sent.load(Ordering::Acquire) {
            assert!(start.elapsed() < DEADLINE, "send not under way");
            std::thread::yield_now();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        Instant::now()
    })
}

#[test]
fn killed_receiver_fails_the_send() {
    let _s = serial();
    let p = node();
    let big = pattern(MAX, 3);

    // Delivery complete: the send awaits the receiver's acknowledgement, which the
    // connection's end answers with an error completion.
    let (c, to) = child(&p);
    let before = large_tx();
    let iov = [&big[..]];
    let m = TaggedMsg {
        iov: &iov,
        addr: to,
        tag: 7,
        context: Context(7),
        data: 0,
    };
    let sent = AtomicBool::new(false);
    let at = std::thread::scope(|s| {
        let k = kill_during_send(s, c, before, &sent);
        retry(&p, &[], || p.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE));
        sent.store(true, Ordering::Release);
        k.join().unwrap()
    });
    let e = entry(&p, &[]).expect_err("a send to a killed receiver succeeded");
    let took = at.elapsed();
    assert_eq!((e.context, e.err), (Context(7), Error::HostUnreach));
    assert!(took < DEATH_BOUND, "failed after {took:?}");
    let (direct, _) = since(before);
    assert!(direct < MAX as u64, "all of it went out before the kill");

    // Transmit complete: the send itself fails, or, if it ended by its bound before
    // the kill, the next one to that peer does.
    let (c, to) = child(&p);
    let before = large_tx();
    let sent = AtomicBool::new(false);
    let (res, at) = std::thread::scope(|s| {
        let k = kill_during_send(s, c, before, &sent);
        let res = loop {
            match p.ep.tsend(&big, to, 7, Context(8)) {
                Err(Error::Again) => progress(&p),
                r => break r,
            }
        };
        sent.store(true, Ordering::Release);
        (res, k.join().unwrap())
    });
    println!("transmit-complete send to a killed receiver: {res:?}");
    match res {
        Err(e) => assert_eq!(e, Error::HostUnreach),
        Ok(()) => {
            let e = entry(&p, &[]).expect("its completion");
            assert_eq!(e.op_context, Context(8));
            let start = Instant::now();
            loop {
                match p.ep.tsend(b"x", to, 9, Context(9)) {
                    Err(Error::HostUnreach) => break,
                    Ok(()) => {
                        done(&p, &[], 9);
                    }
                    Err(Error::Again) => {}
                    Err(e) => panic!("send after the kill: {e}"),
                }
                progress(&p);
                assert!(
                    at.elapsed() < DEATH_BOUND,
                    "peer alive after {:?}",
                    start.elapsed()
                );
            }
        }
    }
}
