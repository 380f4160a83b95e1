//! The tcp provider under faults, over 127.0.0.1: a second process (this test binary
//! re-run as a child, `child_entry`), a peer SIGKILLed while requests wait on it,
//! strangers writing garbage to the listening port and into a connection they opened,
//! and a receiver that stops polling.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_tcp::{Name, HELLO_LEN, MAGIC, VERSION};

mod tcp_common;
use tcp_common::{hex, next, node, pattern, post_send as send, spin, unhex, Node, DEADLINE};

/// The bound within which requests waiting on a killed peer must complete in error.
const DEATH_BOUND: Duration = Duration::from_secs(2);
/// Environment variable that makes `child_entry` act, with the parent's name in hex.
const CHILD_ENV: &str = "FABRIC_TCP_TEST_CHILD";

/// The child: greets the parent with its name and 64 messages of growing sizes (up to
/// 4 MiB), then, if asked, answers nothing (sleeps) until it is killed.
#[test]
#[ignore = "run by the other tests as a child process"]
fn child_entry() {
    let Ok(parent) = std::env::var(CHILD_ENV) else {
        return;
    };
    let n = node();
    let to = n.av.insert(&unhex(&parent)).unwrap();
    let name = n.ep.name();
    send(&n, &name, to, 1);
    assert!(next(&n, &[]).is_ok());
    if std::env::var("FABRIC_TCP_TEST_SLEEP").is_ok() {
        // Never progresses again: whatever the parent sends waits until it kills us.
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    for i in 0..64u64 {
        let len = (1usize << (i % 23)) + i as usize;
        send(&n, &pattern(len, i), to, 100 + i);
        assert!(next(&n, &[]).is_ok());
    }
    // Wait for the parent's goodbye, so nothing is cut off in flight.
    let mut bye = [0u8; 8];
    // SAFETY: `bye` outlives the receive, read after its completion.
    unsafe { n.ep.trecv(&mut bye, FiAddr::UNSPEC, 2, 0, Context(2)) }.unwrap();
    assert_eq!(next(&n, &[]).unwrap().tag, 2);
}

fn spawn_child(parent: &Node, sleep: bool) -> std::process::Child {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args(["--ignored", "--exact", "child_entry", "--nocapture"])
        .env(CHILD_ENV, hex(&parent.ep.name()));
    if sleep {
        c.env("FABRIC_TCP_TEST_SLEEP", "1");
    }
    c.stdout(std::process::Stdio::null()).spawn().unwrap()
}

/// Receives the child's greeting: its name.
fn child_name(p: &Node) -> FiAddr {
    let mut buf = vec![0u8; 64];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { p.ep.trecv(&mut buf, FiAddr::UNSPEC, 1, 0, Context(1)) }.unwrap();
    let e = next(p, &[]).unwrap();
    p.av.insert(&buf[..e.len]).unwrap()
}

#[test]
fn two_processes_messages_up_to_4mib() {
    let p = node();
    let mut child = spawn_child(&p, false);
    let to = child_name(&p);
    let mut buf = vec![0u8; 5 << 20];
    for i in 0..64u64 {
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { p.ep.trecv(&mut buf, to, 100 + i, 0, Context(3)) }.unwrap();
        let e = next(&p, &[]).unwrap();
        let len = (1usize << (i % 23)) + i as usize;
        assert_eq!((e.tag, e.len), (100 + i, len));
        assert!(buf[..len] == pattern(len, i)[..], "message {i} differs");
    }
    send(&p, b"bye", to, 2);
    assert!(next(&p, &[]).is_ok());
    assert!(child.wait().unwrap().success());
}

#[test]
fn sigkilled_peer_fails_pending_requests_others_carry_on() {
    let p = node();
    let other = node();
    let to_other = p.av.insert(&other.ep.name()).unwrap();
    let mut child = spawn_child(&p, true);
    let to = child_name(&p);
    // Acknowledged sends wait for the sleeping child's answer.
    const PENDING: usize = 8;
    for i in 0..PENDING {
        let iov = [&b"are you there"[..]];
        let m = TaggedMsg {
            iov: &iov,
            addr: to,
            tag: 7,
            context: Context(1000 + i),
            data: 0,
        };
        loop {
            match p.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE) {
                Ok(()) => break,
                Err(Error::Again) => spin(&p, Duration::ZERO),
                Err(e) => panic!("tsendmsg: {e}"),
            }
        }
    }
    spin(&p, Duration::from_millis(100));
    let mut e = [CqTaggedEntry::default(); 1];
    assert!(matches!(p.cq.read(&mut e), Err(Error::Again)));
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    let mut failed = 0;
    while failed < PENDING {
        assert_eq!(next(&p, &[]), Err(Error::HostUnreach));
        failed += 1;
    }
    let took = killed.elapsed();
    assert!(took < DEATH_BOUND, "took {took:?}");
    // Later sends to the dead peer fail; the other peer is unaffected.
    assert_eq!(p.ep.tsend(b"x", to, 7, Context(1)), Err(Error::HostUnreach));
    let mut buf = [0u8; 8];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { other.ep.trecv(&mut buf, FiAddr::UNSPEC, 9, 0, Context(9)) }.unwrap();
    send(&p, b"fine", to_other, 9);
    assert!(next(&p, &[&other]).is_ok());
    assert_eq!(next(&other, &[&p]).unwrap().len, 4);
    assert_eq!(&buf[..4], b"fine");
}

/// The listening address of endpoint `n`.
fn addr_of(n: &Node) -> SocketAddr {
    Name::decode(&n.ep.name()).unwrap().addr
}

/// Whether the stranger's connection was closed by `n` (driving `n`'s progress).
fn closed_by(n: &Node, s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut b = [0u8; 64];
    while start.elapsed() < Duration::from_secs(8) {
        spin(n, Duration::from_millis(1));
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => return false,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return true,
        }
    }
    false
}

/// A well-formed hello from a made-up endpoint to `to`.
fn hello_to(to: &Node) -> Vec<u8> {
    let me = Name {
        addr: "127.0.0.1:9".parse().unwrap(),
        nonce: 77,
    };
    let to = Name::decode(&to.ep.name()).unwrap();
    let (f, t) = (me.raw(), to.raw());
    let mut b = vec![0u8; HELLO_LEN];
    b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&VERSION.to_be_bytes());
    b[6] = f.as_bytes().len() as u8;
    b[7] = t.as_bytes().len() as u8;
    b[8..8 + f.as_bytes().len()].copy_from_slice(f.as_bytes());
    let o = 8 + fabric_tcp::NAME_LEN;
    b[o..o + t.as_bytes().len()].copy_from_slice(t.as_bytes());
    b
}

#[test]
fn strangers_garbage_closes_their_connection_only() {
    let a = node();
    let b = node();
    let b_at_a = a.av.insert(&b.ep.name()).unwrap();
    let a_at_b = b.av.insert(&a.ep.name()).unwrap();
    // A working pair first.
    send(&a, b"before", b_at_a, 1);
    let mut buf = [0u8; 64];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 1, 0, Context(1)) }.unwrap();
    assert_eq!(next(&b, &[&a]).unwrap().len, 6);
    assert!(next(&a, &[&b]).is_ok());

    let good = hello_to(&b);
    let mut bad_magic = good.clone();
    bad_magic[0] ^= 0xff;
    let mut other_incarnation = good.clone();
    let last = 8 + fabric_tcp::NAME_LEN + 15;
    other_incarnation[last] ^= 1;
    // A valid hello, then a header with an unknown op or a length past the largest
    // message: the connection had passed the handshake and still fails.
    let mut bad_op = good.clone();
    bad_op.extend_from_slice(&[0xee; 64]);
    let mut huge = good.clone();
    let mut h = [0u8; 64];
    h[0] = 1; // Op::Msg
    h[56..64].copy_from_slice(&u64::MAX.to_le_bytes());
    huge.extend_from_slice(&h);
    for (what, bytes) in [
        ("random bytes", pattern(4096, 3)),
        ("bad magic", bad_magic),
        ("another incarnation", other_incarnation),
        ("unknown op", bad_op),
        ("length beyond the largest message", huge),
    ] {
        let mut s = TcpStream::connect(addr_of(&b)).unwrap();
        s.write_all(&bytes).unwrap();
        assert!(closed_by(&b, &mut s), "{what}: connection not closed");
        // The endpoint and its peer carry on, both ways.
        send(&a, what.as_bytes(), b_at_a, 5);
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 5, 0, Context(5)) }.unwrap();
        assert!(next(&a, &[&b]).is_ok());
        assert_eq!(next(&b, &[&a]).unwrap().len, what.len());
        send(&b, b"back", a_at_b, 6);
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { a.ep.trecv(&mut buf, FiAddr::UNSPEC, 6, 0, Context(6)) }.unwrap();
        assert!(next(&b, &[&a]).is_ok());
        assert_eq!(next(&a, &[&b]).unwrap().len, 4);
    }
}

#[test]
fn receiver_that_stops_polling_pushes_back_then_everything_arrives() {
    let a = node();
    let b = node();
    let to = a.av.insert(&b.ep.name()).unwrap();
    const LEN: usize = 64 << 10;
    let msg = pattern(LEN, 1);
    // b never polls: sends are refused after a bounded amount.
    let mut sent = 0u64;
    let start = Instant::now();
    loop {
        match a.ep.tsend(&msg, to, sent, Context(1)) {
            Ok(()) => sent += 1,
            Err(Error::Again) => {
                // Flushes what a holds; b still reads nothing.
                spin(&a, Duration::from_millis(5));
                if a.ep.tsend(&msg, to, sent, Context(1)) == Err(Error::Again) {
                    break;
                }
                sent += 1;
            }
            Err(e) => panic!("tsend: {e}"),
        }
        assert!(start.elapsed() < DEADLINE, "never pushed back");
    }
    // At most the kernel's socket buffers (a few MiB here) plus one message.
    assert!(sent * (LEN as u64) < 64 << 20, "{sent} messages accepted");
    // b polls again: every message arrives once, in order, and a can go on.
    let mut buf = vec![0u8; LEN];
    for i in 0..sent + 16 {
        if i >= sent {
            send(&a, &msg, to, i);
        }
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, i, 0, Context(2)) }.unwrap();
        let e = next(&b, &[&a]).unwrap();
        assert_eq!((e.tag, e.len), (i, LEN));
        assert!(buf == msg);
    }
}
