//! The tcp provider between two hosts under faults: two network namespaces joined by a
//! veth pair (`tests/netns/hosts.sh`, one pair per test, so the tests run in parallel),
//! a process in each (this binary re-run inside it with `ip netns exec`,
//! `child_entry`). A peer host whose link goes down mid-stream, packet loss injected
//! with nftables, and messages and RMA of the largest size.
//!
//! Needs root and iproute2, and nftables for the loss test (CI runs as root; `.ci/run`
//! installs both). Without them the tests fail, unless `FABRIC_TEST_ALLOW_SKIP=1` says
//! that a run without hosts is acceptable here.

use std::process::Command;
use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_tcp::MAX_MSG_SIZE;

mod netns;
mod tcp_common;
use netns::{report, told, Hosts, CHILD_ENV, REGION_ENV, SERVER_ENV};
use tcp_common::{
    hex, next_within, node, node_with, pattern, post_send, spin, unhex, Node, DEADLINE,
};

/// The loss test's seed, for both children (set it to replay a run).
const SEED_ENV: &str = "FABRIC_NETNS_LOSS_SEED";

/// Within this bound of the link going down, every request waiting on the vanished
/// host completes in error: the transport's keepalive and `TCP_USER_TIMEOUT` settings
/// detect it in about 10 s.
const LINK_DOWN_BOUND: Duration = Duration::from_secs(20);
/// Requests of each kind the client leaves waiting on the host whose link goes down.
const PENDING: usize = 8;
/// Size of the link-down server's region.
const REGION: usize = 256 << 10;

/// Tagged messages each way in the loss test.
const LOSS_MESSAGES: u64 = 200;
/// RMA writes (each read back) in the loss test, and the size of its region.
const LOSS_WRITES: u64 = 32;
const LOSS_REGION: usize = 4 << 20;
/// Largest message in the loss test.
const LOSS_MAX: usize = 1 << 20;
/// How long the loss test's waits last: a lossy link is slow.
const LOSS_DEADLINE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------
// Children
// ---------------------------------------------------------------------------------

/// Waits for the successful completion of the request with context `ctx`.
#[track_caller]
fn done(n: &Node, ctx: usize) {
    assert_eq!(
        next_within(n, &[], LOSS_DEADLINE).unwrap().op_context,
        Context(ctx)
    );
}

/// Posts with `op`, retrying while the provider pushes back.
fn retry(n: &Node, mut op: impl FnMut() -> Result<()>) {
    let start = Instant::now();
    loop {
        match op() {
            Ok(()) => return,
            Err(Error::Again) => spin(n, Duration::from_millis(1)),
            Err(e) => panic!("post: {e}"),
        }
        assert!(start.elapsed() < DEADLINE, "refused for {DEADLINE:?}");
    }
}

/// Sends and waits for the send's completion.
fn send(n: &Node, buf: &[u8], to: FiAddr, tag: u64) {
    post_send(n, buf, to, tag);
    done(n, tag as usize);
}

/// Receives the message tagged `tag` into `buf`; returns its length.
fn recv(n: &Node, buf: &mut [u8], tag: u64) -> usize {
    // SAFETY: `buf` outlives the receive, read only after its completion below.
    unsafe {
        n.ep.trecv(buf, FiAddr::UNSPEC, tag, 0, Context(tag as usize))
    }
    .unwrap();
    let e = next_within(n, &[], LOSS_DEADLINE).unwrap();
    assert_eq!(e.tag, tag);
    e.len
}

/// The server named in the environment, and its region (address, key).
fn server_of(n: &Node) -> (FiAddr, u64, u64) {
    let server =
        n.av.insert(&unhex(&std::env::var(SERVER_ENV).unwrap()))
            .unwrap();
    let region = std::env::var(REGION_ENV).unwrap();
    let (base, key) = region.split_once(':').unwrap();
    (server, base.parse().unwrap(), key.parse().unwrap())
}

/// Registers `region` for remote reads and writes and reports the name and the region.
fn expose<'a>(n: &Node, region: &'a mut [u8]) -> MemoryRegion<'a, tcp_common::Net> {
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        offset: 0,
        requested_key: 0x78,
        context: 0,
    };
    let mr = n.domain.mr_reg(region, &attr).unwrap();
    report(format_args!("NAME {}", hex(&n.ep.name())));
    report(format_args!("REGION {}:{}", mr.remote_addr(), mr.key()));
    mr
}

/// Receives the client's greeting (its name, tag 1) and inserts it.
fn greeted(n: &Node) -> FiAddr {
    let mut buf = vec![0u8; 64];
    let len = recv(n, &mut buf, 1);
    n.av.insert(&buf[..len]).unwrap()
}

/// A child process on one host, its role from [`CHILD_ENV`].
#[test]
#[ignore = "run by the other tests inside a namespace"]
fn child_entry() {
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("down-server") => down_server(),
        Ok("down-client") => down_client(),
        Ok("loss-server") => loss_server(),
        Ok("loss-client") => loss_client(),
        Ok("big-server") => big_server(),
        Ok("big-client") => big_client(),
        _ => {}
    }
}

/// Echoes a few messages, then stops progressing (its host's link goes down next).
fn down_server() {
    let mut region = pattern(REGION, 9);
    let n = node();
    let _mr = expose(&n, &mut region);
    let client = greeted(&n);
    let mut buf = vec![0u8; 64 << 10];
    for i in 0..16u64 {
        let len = recv(&n, &mut buf, 100 + i);
        send(&n, &buf[..len], client, 200 + i);
    }
    // Reads of the region need this process's progress: wait until the client is done.
    recv(&n, &mut buf, 5);
    report(format_args!("ASLEEP"));
    std::thread::sleep(Duration::from_secs(120));
    panic!("not killed within two minutes");
}

/// Talks to the server, leaves acknowledged sends and RMA reads waiting on it, and
/// when told its host's link went down, checks that they all fail in time, that later
/// sends to it fail, and that another peer on this host is still served.
fn down_client() {
    // Buffers that pending reads may write outlive the endpoint.
    let mut late = vec![vec![0u8; 64 << 10]; PENDING];
    let mut got = vec![0u8; REGION];
    let big = pattern(1 << 20, 3);
    let n = node();
    let other = node();
    let to_other = n.av.insert(&other.ep.name()).unwrap();
    let (server, base, key) = server_of(&n);
    send(&n, &n.ep.name(), server, 1);
    let mut buf = vec![0u8; 64 << 10];
    for i in 0..16u64 {
        let msg = pattern(4096 * (i as usize + 1), i);
        send(&n, &msg, server, 100 + i);
        let len = recv(&n, &mut buf, 200 + i);
        assert!(buf[..len] == msg[..], "echo {i} differs");
    }
    // SAFETY: `got` outlives the read, looked at only after its completion.
    retry(&n, || unsafe {
        n.ep.read(&mut got, server, base, key, Context(11))
    });
    done(&n, 11);
    assert!(got == pattern(REGION, 9), "RMA read differs");
    send(&n, b"read", server, 5);

    // The server no longer progresses: these wait for it.
    for (i, b) in late.iter_mut().enumerate() {
        let iov = [&big[..(i + 1) << 10]];
        let m = TaggedMsg {
            iov: &iov,
            addr: server,
            tag: 7,
            context: Context(1000 + i),
            data: 0,
        };
        loop {
            match n.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE) {
                Ok(()) => break,
                Err(Error::Again) => spin(&n, Duration::from_millis(1)),
                Err(e) => panic!("tsendmsg: {e}"),
            }
        }
        // SAFETY: `late` outlives the endpoint, and is not looked at again.
        retry(&n, || unsafe {
            n.ep.read(b, server, base, key, Context(2000 + i))
        });
    }
    spin(&n, Duration::from_millis(200));
    let mut e = [CqTaggedEntry::default(); 1];
    assert!(
        matches!(n.cq.read(&mut e), Err(Error::Again)),
        "a request on the sleeping server completed"
    );
    report(format_args!("PENDING"));
    told("DOWN");
    let down = Instant::now();
    // Traffic after the link went down: unacknowledged bytes in flight too.
    let iov = [&big[..]];
    let m = TaggedMsg {
        iov: &iov,
        addr: server,
        tag: 8,
        context: Context(3000),
        data: 0,
    };
    let extra = match n.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE) {
        Ok(()) => 1,
        Err(Error::Again) | Err(Error::HostUnreach) => 0,
        Err(e) => panic!("tsendmsg after the link went down: {e}"),
    };
    for _ in 0..2 * PENDING + extra {
        // Past the bound by a margin, so a late detection is reported as such.
        match next_within(&n, &[&other], LINK_DOWN_BOUND + Duration::from_secs(10)) {
            Err(Error::HostUnreach) => {}
            other => panic!("a request on the vanished host gave {other:?}"),
        }
    }
    let took = down.elapsed();
    assert!(
        took < LINK_DOWN_BOUND,
        "requests failed {took:?} after the link went down"
    );
    // Nothing more: each request completed once.
    spin(&n, Duration::from_millis(100));
    assert!(matches!(n.cq.read(&mut e), Err(Error::Again)));
    assert_eq!(
        n.ep.tsend(b"x", server, 7, Context(1)),
        Err(Error::HostUnreach)
    );
    // SAFETY: refused at once, so `got` is never written.
    assert_eq!(
        unsafe { n.ep.read(&mut got[..8], server, base, key, Context(1)) },
        Err(Error::HostUnreach)
    );
    // The endpoint still serves another peer on its own host, both ways.
    let to_n = other.av.insert(&n.ep.name()).unwrap();
    let mut small = [0u8; 16];
    // SAFETY: `small` outlives the receive, read after its completion.
    unsafe { other.ep.trecv(&mut small, FiAddr::UNSPEC, 9, 0, Context(9)) }.unwrap();
    post_send(&n, b"still here", to_other, 9);
    assert!(next_within(&n, &[&other], DEADLINE).is_ok());
    assert_eq!(next_within(&other, &[&n], DEADLINE).unwrap().len, 10);
    assert_eq!(&small[..10], b"still here");
    // SAFETY: as above.
    unsafe { n.ep.trecv(&mut small, FiAddr::UNSPEC, 10, 0, Context(10)) }.unwrap();
    post_send(&other, b"so am i", to_n, 10);
    assert!(next_within(&other, &[&n], DEADLINE).is_ok());
    assert_eq!(next_within(&n, &[&other], DEADLINE).unwrap().len, 7);
    report(format_args!("FAILED_IN_MS {}", took.as_millis()));
}

/// The loss test's seed: from the environment.
fn seed() -> u64 {
    std::env::var(SEED_ENV).unwrap().parse().unwrap()
}

/// splitmix64: the loss test's sizes and offsets, the same in both children.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce5_e9b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Length of message `i` of direction `dir`: 8 B to [`LOSS_MAX`], spread over the
/// powers of two.
fn loss_len(seed: u64, dir: u64, i: u64) -> usize {
    let r = mix(seed ^ (dir << 62) ^ i);
    let top = 1usize << (3 + r % 18); // 8 .. 1 MiB
    (top - (r >> 32) as usize % (top / 2 + 1)).clamp(8, LOSS_MAX)
}

/// Receives [`LOSS_MESSAGES`] messages of direction `dir` with any tag, in turn: each
/// must be the next in sequence, with its length and bytes; nothing more may follow.
fn loss_receive(n: &Node, dir: u64) {
    let seed = seed();
    let mut buf = vec![0u8; LOSS_MAX];
    for i in 0..LOSS_MESSAGES {
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe {
            n.ep.trecv(&mut buf, FiAddr::UNSPEC, 0, u64::MAX, Context(5))
        }
        .unwrap();
        let e = next_within(n, &[], LOSS_DEADLINE).unwrap();
        let len = loss_len(seed, dir, i);
        assert_eq!((e.tag, e.len), (dir << 32 | i, len), "message {i} of {dir}");
        assert!(
            buf[..len] == pattern(len, seed ^ i)[..],
            "message {i} of {dir} differs"
        );
    }
}

/// Sends [`LOSS_MESSAGES`] messages of direction `dir`, several in flight.
fn loss_send(n: &Node, to: FiAddr, dir: u64) {
    let seed = seed();
    let msgs: Vec<Vec<u8>> = (0..LOSS_MESSAGES)
        .map(|i| pattern(loss_len(seed, dir, i), seed ^ i))
        .collect();
    let mut completed = 0;
    for (i, m) in msgs.iter().enumerate() {
        let tag = dir << 32 | i as u64;
        loop {
            match n.ep.tsend(m, to, tag, Context(7)) {
                Ok(()) => break,
                Err(Error::Again) => {
                    let mut e = [CqTaggedEntry::default(); 8];
                    if let Ok(k) = n.cq.read(&mut e) {
                        completed += k;
                    }
                }
                Err(e) => panic!("tsend {i}: {e}"),
            }
        }
    }
    while completed < LOSS_MESSAGES as usize {
        assert_eq!(
            next_within(n, &[], LOSS_DEADLINE).unwrap().op_context,
            Context(7)
        );
        completed += 1;
    }
}

/// Offset and length of RMA write `i` of the loss test.
fn loss_write(seed: u64, i: u64) -> (usize, usize) {
    let r = mix(seed ^ 0x5752 ^ (i << 40));
    let len = 1 + (r % (LOSS_REGION as u64 / 4)) as usize;
    let off = ((r >> 32) as usize) % (LOSS_REGION - len + 1);
    (off, len)
}

/// Receives the client's stream, sends its own, then checks the client's RMA writes.
fn loss_server() {
    let mut region = vec![0u8; LOSS_REGION];
    let mut tail = [0u8; 16];
    let n = node();
    let mr = expose(&n, &mut region);
    let client = greeted(&n);
    loss_receive(&n, 1);
    loss_send(&n, client, 2);
    // The client says when its writes are done; the region must hold them all.
    let mut buf = [0u8; 16];
    recv(&n, &mut buf, 3);
    let seed = seed();
    let mut want = vec![0u8; LOSS_REGION];
    for i in 0..LOSS_WRITES {
        let (off, len) = loss_write(seed, i);
        want[off..off + len].copy_from_slice(&pattern(len, seed ^ (i << 8)));
    }
    let mut seen = vec![0u8; LOSS_REGION];
    mr.read(0, &mut seen).unwrap();
    assert!(seen == want, "the region differs from the client's writes");
    // Nothing more arrived: every message was delivered once.
    // SAFETY: `tail` outlives the endpoint, and is not looked at.
    unsafe {
        n.ep.trecv(&mut tail, FiAddr::UNSPEC, 0, u64::MAX, Context(6))
    }
    .unwrap();
    spin(&n, Duration::from_millis(300));
    let mut e = [CqTaggedEntry::default(); 1];
    assert!(
        matches!(n.cq.read(&mut e), Err(Error::Again)),
        "an extra message arrived"
    );
    send(&n, b"checked", client, 4);
    report(format_args!("CHECKED"));
}

/// The server's peer on the lossy host: its stream, the server's, then RMA writes,
/// each read back.
fn loss_client() {
    let n = node();
    let (server, base, key) = server_of(&n);
    send(&n, &n.ep.name(), server, 1);
    loss_send(&n, server, 1);
    loss_receive(&n, 2);
    let seed = seed();
    let mut back = vec![0u8; LOSS_REGION];
    for i in 0..LOSS_WRITES {
        let (off, len) = loss_write(seed, i);
        let data = pattern(len, seed ^ (i << 8));
        retry(&n, || {
            n.ep.write(&data, server, base + off as u64, key, Context(20))
        });
        done(&n, 20);
        // SAFETY: `back` outlives the read, looked at only after its completion.
        let at = base + off as u64;
        retry(&n, || unsafe {
            n.ep.read(&mut back[..len], server, at, key, Context(21))
        });
        done(&n, 21);
        assert!(back[..len] == data[..], "RMA write {i} read back differs");
    }
    send(&n, b"written", server, 3);
    let mut buf = [0u8; 16];
    recv(&n, &mut buf, 4);
    report(format_args!("DONE"));
}

/// Capabilities of the largest-size test: untagged and tagged messages and RMA.
fn big_node() -> Node {
    node_with(Caps::MSG | Caps::TAGGED | Caps::RMA, &CqAttr::DEFAULT)
}

/// Receives a largest untagged and tagged message, checks the client's RMA write of
/// its whole region, then refills it for the client to read.
fn big_server() {
    let mut region = vec![0u8; MAX_MSG_SIZE];
    let n = big_node();
    let mr = expose(&n, &mut region);
    let client = greeted(&n);
    let mut buf = vec![0u8; MAX_MSG_SIZE];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { n.ep.recv(&mut buf, FiAddr::UNSPEC, Context(30)) }.unwrap();
    let e = next_within(&n, &[], LOSS_DEADLINE).unwrap();
    assert_eq!((e.op_context, e.len), (Context(30), MAX_MSG_SIZE));
    assert!(buf == pattern(MAX_MSG_SIZE, 30), "untagged message differs");
    let len = recv(&n, &mut buf, 31);
    assert_eq!(len, MAX_MSG_SIZE);
    assert!(buf == pattern(MAX_MSG_SIZE, 31), "tagged message differs");
    let mut small = [0u8; 16];
    recv(&n, &mut small, 3);
    let mut seen = buf;
    mr.read(0, &mut seen).unwrap();
    assert!(seen == pattern(MAX_MSG_SIZE, 32), "RMA write differs");
    mr.write(0, &pattern(MAX_MSG_SIZE, 33)).unwrap();
    send(&n, b"refilled", client, 4);
    recv(&n, &mut small, 5);
    report(format_args!("CHECKED"));
}

/// Sends the largest messages and RMA, and checks that one byte more is refused.
fn big_client() {
    let n = big_node();
    let (server, base, key) = server_of(&n);
    send(&n, &n.ep.name(), server, 1);
    let mut msg = pattern(MAX_MSG_SIZE + 1, 30);
    // One byte more than the largest message is refused by every operation.
    assert_eq!(
        n.ep.send(&msg, server, Context(1)),
        Err(Error::MsgSize),
        "send"
    );
    assert_eq!(
        n.ep.tsend(&msg, server, 31, Context(1)),
        Err(Error::MsgSize),
        "tsend"
    );
    assert_eq!(
        n.ep.write(&msg, server, base, key, Context(1)),
        Err(Error::MsgSize),
        "write"
    );
    // SAFETY: refused, so `msg` is never written.
    let r = unsafe { n.ep.read(&mut msg, server, base, key, Context(1)) };
    assert_eq!(r, Err(Error::MsgSize), "read");

    let start = Instant::now();
    retry(&n, || n.ep.send(&msg[..MAX_MSG_SIZE], server, Context(30)));
    done(&n, 30);
    send(&n, &pattern(MAX_MSG_SIZE, 31), server, 31);
    let mine = pattern(MAX_MSG_SIZE, 32);
    retry(&n, || n.ep.write(&mine, server, base, key, Context(32)));
    done(&n, 32);
    send(&n, b"written", server, 3);
    let mut small = [0u8; 16];
    recv(&n, &mut small, 4);
    let mut got = vec![0u8; MAX_MSG_SIZE];
    // SAFETY: `got` outlives the read, looked at only after its completion.
    retry(&n, || unsafe {
        n.ep.read(&mut got, server, base, key, Context(33))
    });
    done(&n, 33);
    assert!(got == pattern(MAX_MSG_SIZE, 33), "RMA read differs");
    send(&n, b"read", server, 5);
    report(format_args!("DONE {}", start.elapsed().as_millis()));
}

// ---------------------------------------------------------------------------------
// The parent
// ---------------------------------------------------------------------------------

#[test]
fn link_down_mid_stream_fails_pending_requests_in_bound() {
    let Some(mut hosts) = Hosts::up() else {
        return;
    };
    let (srv, mut cli) = hosts.pair(("down-server", "down-client"), 1, &[]);
    srv.expect("ASLEEP");
    cli.expect("PENDING");
    let veth = hosts.veth(0);
    hosts.run(0, &["ip", "link", "set", &veth, "down"]);
    cli.tell("DOWN");
    let ms: u128 = cli
        .expect_within("FAILED_IN_MS", LINK_DOWN_BOUND + Duration::from_secs(20))
        .parse()
        .unwrap();
    hosts.finish(&cli);
    eprintln!("requests on the vanished host failed {ms} ms after its link went down");
}

#[test]
fn ten_percent_loss_everything_arrives_once_in_order() {
    let Some(mut hosts) = Hosts::up() else {
        return;
    };
    let seed: u64 = match std::env::var(SEED_ENV) {
        Ok(s) => s.parse().unwrap(),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    eprintln!("loss test seed {seed} (replay with {SEED_ENV}={seed})");
    if Command::new("nft").arg("--version").output().is_err() {
        panic!("nft (nftables) is missing: apt-get install -y nftables");
    }
    // Every tenth packet in either direction of the client's host is dropped.
    for rule in [
        "add table inet fab",
        "add chain inet fab in { type filter hook input priority 0; }",
        "add chain inet fab out { type filter hook output priority 0; }",
        "add rule inet fab in numgen random mod 10 == 0 drop",
        "add rule inet fab out numgen random mod 10 == 0 drop",
    ] {
        let mut args = vec!["nft"];
        args.extend(rule.split(' '));
        hosts.run(1, &args);
    }
    let start = Instant::now();
    let env = [(SEED_ENV, seed.to_string())];
    let (srv, cli) = hosts.pair(("loss-server", "loss-client"), 1, &env);
    srv.expect_within("CHECKED", 4 * LOSS_DEADLINE);
    cli.expect("DONE");
    hosts.finish(&srv);
    hosts.finish(&cli);
    let counters = hosts.run(1, &["nft", "list", "table", "inet", "fab"]);
    eprintln!(
        "loss test (seed {seed}) took {:?}; rules: {}",
        start.elapsed(),
        counters.split_whitespace().collect::<Vec<_>>().join(" ")
    );
}

#[test]
fn largest_messages_and_rma_across_hosts_one_byte_more_refused() {
    let Some(mut hosts) = Hosts::up() else {
        return;
    };
    let (srv, cli) = hosts.pair(("big-server", "big-client"), 1, &[]);
    let ms = cli.expect_within("DONE", 2 * LOSS_DEADLINE);
    srv.expect("CHECKED");
    hosts.finish(&srv);
    hosts.finish(&cli);
    eprintln!("64 MiB send, tagged send, RMA write and read across the hosts: {ms} ms");
}
