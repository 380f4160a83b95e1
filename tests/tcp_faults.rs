//! The tcp provider under faults, over 127.0.0.1: a second process (this test binary
//! re-run as a child, `child_entry`), a peer SIGKILLed while requests wait on it,
//! strangers writing garbage to the listening port and into a connection they opened
//! (also in the middle of a well-behaved peer's stream, which loses nothing), a receiver
//! that stops polling (also for longer than the liveness bound), 1000 peers that come and go (the server's fds and memory stay
//! flat), and an `FI_WAIT_FD` CQ whose blocked waiter wakes when a message arrives.

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

/// A receiver that stops polling for longer than the liveness bound, its window shut
/// all that time, is alive: the sender's connection stays up, nothing fails, and
/// everything arrives once the receiver polls again. (`TCP_USER_TIMEOUT` would break
/// the connection after that long.)
#[test]
fn receiver_silent_past_the_liveness_bound_loses_nothing() {
    let a = node();
    let b = node();
    let to = a.av.insert(&b.ep.name()).unwrap();
    const LEN: usize = 64 << 10;
    let msg = pattern(LEN, 2);
    let mut sent = 0u64;
    let start = Instant::now();
    loop {
        match a.ep.tsend(&msg, to, sent, Context(1)) {
            Ok(()) => sent += 1,
            Err(Error::Again) => break,
            Err(e) => panic!("tsend: {e}"),
        }
        assert!(start.elapsed() < DEADLINE, "never pushed back");
    }
    // a polls (and so checks its connections) past the bound while b reads nothing.
    let mut done = 0u64;
    let mut e = [CqTaggedEntry::default(); 16];
    let mut read = |done: &mut u64| match a.cq.read(&mut e) {
        Ok(k) => *done += k as u64,
        Err(Error::Again) => {}
        Err(Error::Avail) => panic!("a send failed: {:?}", a.cq.read_err()),
        Err(err) => panic!("cq read: {err}"),
    };
    let silent = fabric_tcp::transport::LIVENESS + Duration::from_secs(3);
    while start.elapsed() < silent {
        read(&mut done);
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut buf = vec![0u8; LEN];
    for i in 0..sent {
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, i, 0, Context(2)) }.unwrap();
        let got = next(&b, &[&a]).unwrap();
        assert_eq!((got.tag, got.len), (i, LEN));
        assert!(buf == msg);
    }
    let end = Instant::now() + DEADLINE;
    while done < sent {
        read(&mut done);
        assert!(Instant::now() < end, "{done} of {sent} sends completed");
    }
    assert_eq!(done, sent);
}

/// A send still partly queued (its receiver was not reading) is delivered whole
/// though the sender closes its endpoint right after posting it: the close hands
/// the queue over first.
#[test]
fn a_send_completed_before_the_close_is_delivered() {
    const LEN: usize = 16 << 20;
    let (name_tx, name_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    // The receiver on a thread of its own: it reads nothing until the sender closes.
    let receiver = std::thread::spawn(move || {
        let b = node();
        name_tx.send(b.ep.name()).unwrap();
        go_rx.recv().unwrap();
        let mut buf = vec![0u8; LEN];
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 7, 0, Context(2)) }.unwrap();
        let got = next(&b, &[]).unwrap();
        assert_eq!((got.tag, got.len), (7, LEN));
        assert!(buf == pattern(LEN, 3), "payload differs");
    });
    let a = node();
    let to = a.av.insert(&name_rx.recv().unwrap()).unwrap();
    send(&a, &pattern(LEN, 3), to, 7);
    go_tx.send(()).unwrap();
    drop(a);
    receiver.join().unwrap();
}

/// A completed send needs no more progress from its sender: one that stops calling
/// the provider once its send completed (waiting on something else, as fi_pingpong
/// waits on its control socket) still has the whole message delivered, though the
/// receiver was not reading when the send was made.
#[test]
fn a_completed_send_needs_no_more_progress_from_its_sender() {
    const LEN: usize = 16 << 20;
    let (name_tx, name_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<bool>();
    let receiver = std::thread::spawn(move || {
        let b = node();
        name_tx.send(b.ep.name()).unwrap();
        go_rx.recv().unwrap();
        let mut buf = vec![0u8; LEN];
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 9, 0, Context(2)) }.unwrap();
        let ok =
            matches!(next(&b, &[]), Ok(e) if (e.tag, e.len) == (9, LEN)) && buf == pattern(LEN, 4);
        done_tx.send(ok).unwrap();
    });
    let a = node();
    let to = a.av.insert(&name_rx.recv().unwrap()).unwrap();
    send(&a, &pattern(LEN, 4), to, 9);
    go_tx.send(()).unwrap();
    let e = next(&a, &[]).unwrap();
    assert_eq!(e.op_context, Context(9), "the send completed");
    // From here on a makes no call at all until the receiver is done.
    let delivered = done_rx
        .recv_timeout(DEADLINE + Duration::from_secs(5))
        .unwrap_or(false);
    receiver.join().unwrap_or(());
    assert!(delivered, "the message did not arrive whole");
    drop(a);
}

/// Environment variable that makes `churn_server_entry` act.
const CHURN_ENV: &str = "FABRIC_TCP_TEST_CHURN";
/// Tag of a client's request for the churn server's fd count and resident size.
const STATS: u64 = u64::MAX - 1;
/// Clients of `thousand_connections_opened_and_closed_leave_fds_and_memory_flat`.
const CLIENTS: u64 = 1000;
/// Clients before the first measurement: whatever the server allocates once is there.
const WARMUP: u64 = 100;
/// File descriptors the server may hold at the end beyond the warm-up count.
const FD_MARGIN: usize = 4;
/// Resident bytes the server may have grown by between warm-up and the end.
const RSS_MARGIN: usize = 1 << 20;

/// Open file descriptors and resident bytes of this process.
fn fds_and_rss() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    (fds, pages * page)
}

/// The churn server: prints its name, then answers every client's greeting (its name,
/// tagged with its number) with one message, forgetting the client's address after,
/// until a greeting tagged `CLIENTS`; a greeting tagged [`STATS`] is answered with its
/// fd count and resident size instead.
#[test]
#[ignore = "run by `thousand_connections_opened_and_closed_leave_fds_and_memory_flat`"]
fn churn_server_entry() {
    if std::env::var(CHURN_ENV).is_err() {
        return;
    }
    let n = node();
    println!("\nCHURN {}", hex(&n.ep.name()));
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe {
            n.ep.trecv(&mut buf, FiAddr::UNSPEC, 0, u64::MAX, Context(1))
        }
        .unwrap();
        // Clients come one after the other: allow for a slow machine between them.
        let e = next_within(&n, Duration::from_secs(60)).unwrap();
        let client = n.av.insert(&buf[..e.len]).unwrap();
        let reply = if e.tag == STATS {
            let (fds, rss) = fds_and_rss();
            format!("{fds} {rss}").into_bytes()
        } else {
            e.tag.to_le_bytes().to_vec()
        };
        send(&n, &reply, client, e.tag);
        assert_eq!(next(&n, &[]).unwrap().op_context, Context(e.tag as usize));
        n.av.remove(&[client]).unwrap();
        if e.tag == CLIENTS {
            return;
        }
    }
}

/// [`next`] with another deadline.
fn next_within(n: &Node, d: Duration) -> Result<CqTaggedEntry> {
    let start = Instant::now();
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        match n.cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Err(Error::Avail) => return Err(n.cq.read_err().unwrap().err),
            Ok(_) | Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
        assert!(start.elapsed() < d, "no completion within {d:?}");
        std::thread::yield_now();
    }
}

/// One client of the churn server: a new endpoint greets it with `tag`, takes the
/// answer, and closes. Returns the answer.
fn churn_client(server: &[u8], tag: u64) -> Vec<u8> {
    let c = node();
    let to = c.av.insert(server).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { c.ep.trecv(&mut buf, to, tag, 0, Context(2)) }.unwrap();
    send(&c, &c.ep.name(), to, tag);
    let mut got = Vec::new();
    for _ in 0..2 {
        let e = next(&c, &[]).unwrap();
        if e.op_context == Context(2) {
            got = buf[..e.len].to_vec();
        }
    }
    assert!(!got.is_empty(), "client {tag}: no answer");
    got
}

/// The server's (fds, rss), asked for after a pause in which it handles what the
/// clients before left behind (their connections ending).
fn churn_stats(server: &[u8]) -> (usize, usize) {
    std::thread::sleep(Duration::from_millis(300));
    let got = String::from_utf8(churn_client(server, STATS)).unwrap();
    let (fds, rss) = got.split_once(' ').unwrap();
    (fds.parse().unwrap(), rss.parse().unwrap())
}

#[test]
fn thousand_connections_opened_and_closed_leave_fds_and_memory_flat() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "churn_server_entry", "--nocapture"])
        .env(CHURN_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let out = child.stdout.take().unwrap();
    let mut server = Reap(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(name) = line.strip_prefix("CHURN ") {
                let _ = tx.send(unhex(name.trim()));
            }
        }
    });
    let name = rx.recv_timeout(DEADLINE).expect("the churn server's name");
    let start = Instant::now();
    let mut warm = (0, 0);
    for i in 0..CLIENTS {
        if i == WARMUP {
            warm = churn_stats(&name);
        }
        assert_eq!(churn_client(&name, i), i.to_le_bytes());
    }
    let end = churn_stats(&name);
    eprintln!(
        "{CLIENTS} connections in {:?}; server after {WARMUP}: {} fds, {} KiB resident; \
         at the end: {} fds, {} KiB resident",
        start.elapsed(),
        warm.0,
        warm.1 >> 10,
        end.0,
        end.1 >> 10
    );
    assert!(
        end.0 <= warm.0 + FD_MARGIN,
        "server fds grew from {} to {}",
        warm.0,
        end.0
    );
    assert!(
        end.1 <= warm.1 + RSS_MARGIN,
        "server resident size grew from {} to {} bytes",
        warm.1,
        end.1
    );
    churn_client(&name, CLIENTS);
    let t = Instant::now();
    while server.0.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < DEADLINE, "churn server did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(server.0.wait().unwrap().success(), "churn server failed");
}

/// A frame header as the transport writes it: `hdr` then `payload`.
fn frame(hdr: &fabric::provider::wire::Header, payload: &[u8]) -> Vec<u8> {
    let mut b = hdr.bytes().to_vec();
    b.extend_from_slice(payload);
    b
}

#[test]
fn garbage_in_an_established_connection_loses_no_completion() {
    use fabric::provider::wire::{Header, Op};
    let a = node();
    let b = node();
    let b_at_a = a.av.insert(&b.ep.name()).unwrap();
    const N: u64 = 64;
    // b takes every message in arrival order: a's numbered ones and the stranger's.
    let mut bufs = vec![[0u8; 64]; N as usize + 2];
    for (i, buf) in bufs.iter_mut().enumerate() {
        // SAFETY: `bufs` outlives the receives (declared before the endpoints are used,
        // checked after their completions).
        unsafe { b.ep.trecv(buf, FiAddr::UNSPEC, 0, u64::MAX, Context(i)) }.unwrap();
    }
    // The stranger completes a valid hello and sends one valid message...
    let mut s = TcpStream::connect(addr_of(&b)).unwrap();
    let mut bytes = hello_to(&b);
    let hdr = Header {
        op: Op::Tagged as u8,
        tag: 1 << 40,
        len: 8,
        ..Header::default()
    };
    bytes.extend(frame(&hdr, b"stranger"));
    s.write_all(&bytes).unwrap();
    let mut got = Vec::new();
    let mut sent = 0;
    // ... while a streams numbered messages; then garbage in the middle of the stream.
    for i in 0..N {
        send(&a, &i.to_le_bytes(), b_at_a, i);
        if i == N / 2 {
            let mut garbage = frame(&hdr, b"stranger");
            garbage.extend_from_slice(&pattern(256, 9));
            s.write_all(&garbage).unwrap();
            assert!(closed_by(&b, &mut s), "garbage: connection not closed");
        }
        let mut e = [CqTaggedEntry::default(); 4];
        while let Ok(k) = a.cq.read(&mut e) {
            sent += k;
        }
        while let Ok(k) = b.cq.read(&mut e) {
            got.extend_from_slice(&e[..k]);
        }
    }
    let start = Instant::now();
    while sent < N as usize || got.iter().filter(|e| e.tag < N).count() < N as usize {
        let mut e = [CqTaggedEntry::default(); 4];
        while let Ok(k) = a.cq.read(&mut e) {
            sent += k;
        }
        match b.cq.read(&mut e) {
            Ok(k) => got.extend_from_slice(&e[..k]),
            Err(Error::Again) => {}
            Err(err) => panic!("b's cq: {err}"),
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{sent} sent, {} received",
            got.len()
        );
    }
    // Nothing doubled or left over: a's N, and the stranger's two valid messages (the
    // second complete before the garbage that follows it).
    spin(&b, Duration::from_millis(200));
    let mut e = [CqTaggedEntry::default(); 4];
    while let Ok(k) = b.cq.read(&mut e) {
        got.extend_from_slice(&e[..k]);
    }
    assert_eq!(sent, N as usize);
    let ours: Vec<u64> = got.iter().map(|e| e.tag).filter(|&t| t < N).collect();
    assert_eq!(
        ours,
        (0..N).collect::<Vec<_>>(),
        "a's messages, once, in order"
    );
    for e in got.iter().filter(|e| e.tag < N) {
        assert_eq!(bufs[e.op_context.0][..8], e.tag.to_le_bytes());
    }
    let strangers: Vec<&[u8]> = got
        .iter()
        .filter(|e| e.tag == 1 << 40)
        .map(|e| &bufs[e.op_context.0][..e.len])
        .collect();
    assert_eq!(strangers, [b"stranger", b"stranger"]);
    assert_eq!(got.len(), N as usize + 2);
}

/// Sends a message tagged 1 from a new endpoint in another thread to `to` after `after`;
/// returns when it was sent.
fn send_later(to: Vec<u8>, after: Duration) -> std::thread::JoinHandle<Instant> {
    std::thread::spawn(move || {
        let n = node();
        let at = n.av.insert(&to).unwrap();
        // The connection first, so the delay below is all there is to wait for.
        send(&n, b"hello", at, 2);
        assert!(next(&n, &[]).is_ok());
        std::thread::sleep(after);
        let sent = Instant::now();
        send(&n, b"wake up", at, 1);
        assert!(next(&n, &[]).is_ok());
        // Stays until the message was taken: the receiver's side holds no reference.
        std::thread::sleep(Duration::from_millis(200));
        sent
    })
}

/// How late a blocked waiter may wake after the message was sent.
const WAKE_BOUND: Duration = Duration::from_secs(1);
/// The peer's delay before it sends.
const SEND_AFTER: Duration = Duration::from_millis(300);

#[test]
fn fd_cq_wakes_a_blocked_sread_and_a_poll_on_arrival() {
    let attr = CqAttr {
        wait_obj: WaitObj::Fd,
        ..CqAttr::DEFAULT
    };
    let r = tcp_common::node_with(Caps::TAGGED | Caps::RMA, &attr);
    let mut hello = [0u8; 16];
    let mut buf = [0u8; 16];
    for (i, how) in ["sread", "poll"].iter().enumerate() {
        // SAFETY: `hello` and `buf` outlive the receives, read after their completion.
        unsafe { r.ep.trecv(&mut hello, FiAddr::UNSPEC, 2, 0, Context(2)) }.unwrap();
        // SAFETY: as above.
        unsafe { r.ep.trecv(&mut buf, FiAddr::UNSPEC, 1, 0, Context(1)) }.unwrap();
        let peer = send_later(r.ep.name(), SEND_AFTER);
        assert_eq!(next(&r, &[]).unwrap().op_context, Context(2));
        let mut e = [CqTaggedEntry::default(); 1];
        let start = Instant::now();
        if i == 0 {
            assert_eq!(r.cq.sread(&mut e, 1, Some(Duration::from_secs(30))), Ok(1));
        } else {
            // fi_trywait, then poll(2) on the CQ's fd.
            let fd = r.cq.wait_fd().expect("an FI_WAIT_FD CQ has an fd");
            assert_eq!(r.cq.trywait(), Ok(()));
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `p` is one valid pollfd for the duration of the call.
            let k = unsafe { libc::poll(&mut p, 1, 30_000) };
            assert_eq!(k, 1, "poll on the CQ's fd: {k}");
            assert_eq!(r.cq.read(&mut e), Ok(1));
        }
        let woke = Instant::now();
        let sent = peer.join().unwrap();
        assert_eq!((e[0].op_context, &buf[..7]), (Context(1), &b"wake up"[..]));
        let late = woke.saturating_duration_since(sent);
        eprintln!(
            "{how}: woke {late:?} after the send ({:?} after it blocked)",
            woke - start
        );
        assert!(late < WAKE_BOUND, "{how} woke {late:?} after the send");
    }
}
