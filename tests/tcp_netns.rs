//! The tcp provider between two hosts: two network namespaces joined by a veth pair
//! (`tests/netns/hosts.sh`), a server process in one and a client in the other (this test
//! binary re-run as a child inside each with `ip netns exec`, `child_entry`), each
//! listening on its namespace's address through `FABRIC_TCP_IFACE`. Tagged messages
//! both ways and an RMA write and read across the veth pair, data checked at both ends;
//! then the server is SIGKILLed while the client has operations waiting on it, which
//! must all complete in error within [`DEATH_BOUND`].
//!
//! Needs root and iproute2 (CI runs as root; `.ci/run` installs iproute2). Without them
//! the test fails, unless `FABRIC_TEST_ALLOW_SKIP=1` says that a run without hosts is
//! acceptable here.

use std::time::{Duration, Instant};

use fabric::prelude::*;

mod netns;
mod tcp_common;
use netns::{report, told, Hosts, ADDRS, CHILD_ENV, REGION_ENV, SERVER_ENV};
use tcp_common::{
    eq_event, hex, msg_info, msg_listener, msg_node, node, pattern, post_send, spin, unhex, Node,
};

/// The bound within which the client's requests waiting on the killed server complete
/// in error, counted from the client learning of the kill.
const DEATH_BOUND: Duration = Duration::from_secs(2);
/// Size of the server's registered region.
const REGION: usize = 256 << 10;
/// Tagged messages each way.
const MESSAGES: u64 = 24;
/// Requests the client leaves waiting on the server before it is killed.
const PENDING: usize = 8;

// ---------------------------------------------------------------------------------
// Both children
// ---------------------------------------------------------------------------------

/// Sends and waits for the send's completion, retrying while the provider pushes back.
fn send(n: &Node, buf: &[u8], to: FiAddr, tag: u64) {
    post_send(n, buf, to, tag);
    done(n, tag as usize);
}

/// One completion or error entry of `n`.
fn next(n: &Node) -> Result<CqTaggedEntry> {
    tcp_common::next(n, &[])
}

/// Waits for the successful completion of the request with context `ctx`.
#[track_caller]
fn done(n: &Node, ctx: usize) {
    assert_eq!(next(n).unwrap().op_context, Context(ctx));
}

/// Receives the message tagged `tag` into `buf`; returns its length.
fn recv(n: &Node, buf: &mut [u8], tag: u64) -> usize {
    // SAFETY: `buf` outlives the receive, read only after its completion below.
    unsafe {
        n.ep.trecv(buf, FiAddr::UNSPEC, tag, 0, Context(tag as usize))
    }
    .unwrap();
    let e = next(n).unwrap();
    assert_eq!(e.tag, tag);
    e.len
}

/// Length of tagged message `i`: from one byte to past the inject size, up to 512 KiB.
fn msg_len(i: u64) -> usize {
    (1usize << (i % 20)) + i as usize
}

/// A child process on one host: `server` or `client` (from [`CHILD_ENV`]).
#[test]
#[ignore = "run by `tagged_rma_and_sigkill_across_a_veth_pair` inside a namespace"]
fn child_entry() {
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("server") => server(),
        Ok("client") => client(),
        Ok("msg_server") => msg_server(),
        Ok("msg_client") => msg_client(),
        _ => {}
    }
}

/// Echoes the client's tagged messages, exposes a region for its RMA, checks what it
/// wrote and writes a new pattern for it to read, then stops progressing until killed.
fn server() {
    let mut region = vec![0u8; REGION];
    let n = node();
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        offset: 0,
        requested_key: 0x77,
        context: 0,
    };
    let mr = n.domain.mr_reg(&mut region, &attr).unwrap();
    report(format_args!("NAME {}", hex(&n.ep.name())));
    report(format_args!("REGION {}:{}", mr.remote_addr(), mr.key()));

    let mut buf = vec![0u8; 1 << 20];
    let len = recv(&n, &mut buf, 1);
    let client = n.av.insert(&buf[..len]).unwrap();
    for i in 0..MESSAGES {
        let len = recv(&n, &mut buf, 100 + i);
        assert_eq!(len, msg_len(i));
        assert!(buf[..len] == pattern(len, i)[..], "message {i} differs");
        send(&n, &pattern(len, 1000 + i), client, 200 + i);
    }
    // The client wrote the whole region and says so: check it, then refill it.
    recv(&n, &mut buf, 3);
    let mut seen = vec![0u8; REGION];
    mr.read(0, &mut seen).unwrap();
    assert!(seen == pattern(REGION, 5), "the client's RMA write differs");
    mr.write(0, &pattern(REGION, 6)).unwrap();
    send(&n, b"refilled", client, 4);
    // Reads of the region need this process's progress: wait until the client is done.
    recv(&n, &mut buf, 5);
    // Its operations from now on wait on this process, which no longer progresses.
    report(format_args!("ASLEEP {}", std::process::id()));
    std::thread::sleep(Duration::from_secs(60));
    panic!("not killed within a minute");
}

/// The server's peer: tagged messages, RMA write and read, then requests left waiting
/// on the server until it is killed (notice on stdin), which must fail them in time.
fn client() {
    // Buffers that pending reads may write outlive the endpoint.
    let mut got = vec![0u8; REGION];
    let mut late = vec![vec![0u8; 4096]; PENDING];
    let n = node();
    let server =
        n.av.insert(&unhex(&std::env::var(SERVER_ENV).unwrap()))
            .unwrap();
    let region = std::env::var(REGION_ENV).unwrap();
    let (base, key) = region.split_once(':').unwrap();
    let (base, key): (u64, u64) = (base.parse().unwrap(), key.parse().unwrap());

    send(&n, &n.ep.name(), server, 1);
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..MESSAGES {
        send(&n, &pattern(msg_len(i), i), server, 100 + i);
        let len = recv(&n, &mut buf, 200 + i);
        assert_eq!(len, msg_len(i));
        assert!(buf[..len] == pattern(len, 1000 + i)[..], "echo {i} differs");
    }

    // RMA write of the whole region, read back, then the server's own pattern.
    let mine = pattern(REGION, 5);
    n.ep.write(&mine, server, base, key, Context(10)).unwrap();
    done(&n, 10);
    // SAFETY: `got` outlives the read, looked at only after its completion.
    unsafe { n.ep.read(&mut got, server, base, key, Context(11)) }.unwrap();
    done(&n, 11);
    assert!(got == mine, "RMA read after write differs");
    send(&n, b"written", server, 3);
    recv(&n, &mut buf, 4);
    // SAFETY: as above.
    unsafe { n.ep.read(&mut got, server, base, key, Context(12)) }.unwrap();
    done(&n, 12);
    assert!(
        got == pattern(REGION, 6),
        "RMA read of the server's data differs"
    );
    send(&n, b"read", server, 5);
    report(format_args!("VERIFIED"));

    // Acknowledged sends and reads, which wait for the sleeping server.
    for (i, b) in late.iter_mut().enumerate() {
        let iov = [&b"are you there"[..]];
        let m = TaggedMsg {
            iov: &iov,
            addr: server,
            tag: 7,
            context: Context(1000 + i),
            data: 0,
        };
        n.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
        // SAFETY: `late` outlives the endpoint, and is not looked at again.
        unsafe { n.ep.read(b, server, base, key, Context(2000 + i)) }.unwrap();
    }
    spin(&n, Duration::from_millis(100));
    let mut e = [CqTaggedEntry::default(); 1];
    assert!(
        matches!(n.cq.read(&mut e), Err(Error::Again)),
        "a request on the sleeping server completed"
    );
    report(format_args!("PENDING"));
    told("KILLED");
    let killed = Instant::now();
    for _ in 0..2 * PENDING {
        assert_eq!(next(&n), Err(Error::HostUnreach));
    }
    let took = killed.elapsed();
    assert!(took < DEATH_BOUND, "pending requests failed after {took:?}");
    assert_eq!(
        n.ep.tsend(b"x", server, 7, Context(1)),
        Err(Error::HostUnreach)
    );
    report(format_args!("FAILED_IN_US {}", took.as_micros()));
}

/// The MSG server: a passive endpoint on its namespace's address; accepts the client
/// with its region's address and key as the accept's connection data, echoes the
/// client's tagged messages, checks the client's RMA write and refills the region for
/// its read, then waits for the client's shutdown.
fn msg_server() {
    let mut region = vec![0u8; REGION];
    let (_fabric, pep, leq) = msg_listener();
    report(format_args!("NAME {}", hex(&pep.name())));
    let req = eq_event(&leq, EqEvent::ConnReq);
    let (n, eq) = msg_node(&req.conn.unwrap());
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        offset: 0,
        requested_key: 0x78,
        context: 0,
    };
    let mr = n.domain.mr_reg(&mut region, &attr).unwrap();
    let data = format!("{}:{}", mr.remote_addr(), mr.key());
    n.ep.accept(data.as_bytes()).unwrap();
    eq_event(&eq, EqEvent::Connected);
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..MESSAGES {
        let len = recv(&n, &mut buf, 100 + i);
        assert_eq!(len, msg_len(i));
        assert!(buf[..len] == pattern(len, i)[..], "message {i} differs");
        send(&n, &pattern(len, 1000 + i), FiAddr::UNSPEC, 200 + i);
    }
    recv(&n, &mut buf, 3);
    let mut seen = vec![0u8; REGION];
    mr.read(0, &mut seen).unwrap();
    assert!(seen == pattern(REGION, 7), "the client's RMA write differs");
    mr.write(0, &pattern(REGION, 8)).unwrap();
    send(&n, b"refilled", FiAddr::UNSPEC, 4);
    recv(&n, &mut buf, 5);
    eq_event(&eq, EqEvent::Shutdown);
    assert_eq!(n.ep.peer(), Err(Error::NotConn));
    report(format_args!("SHUTDOWN"));
}

/// The MSG client: connects across the veth pair, tagged messages both ways, RMA
/// write and read of the server's region (named by the accept's data), then
/// `fi_shutdown`.
fn msg_client() {
    let mut got = vec![0u8; REGION];
    let (n, eq) = msg_node(&msg_info());
    n.ep.connect(&unhex(&std::env::var(SERVER_ENV).unwrap()), b"msg client")
        .unwrap();
    let up = eq_event(&eq, EqEvent::Connected);
    let region = String::from_utf8(up.info.unwrap()).unwrap();
    let (base, key) = region.split_once(':').unwrap();
    let (base, key): (u64, u64) = (base.parse().unwrap(), key.parse().unwrap());
    let peer = fabric_tcp::Name::decode(&n.ep.peer().unwrap()).unwrap();
    assert_eq!(peer.addr.ip().to_string(), ADDRS[0]);
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..MESSAGES {
        send(&n, &pattern(msg_len(i), i), FiAddr::UNSPEC, 100 + i);
        let len = recv(&n, &mut buf, 200 + i);
        assert_eq!(len, msg_len(i));
        assert!(buf[..len] == pattern(len, 1000 + i)[..], "echo {i} differs");
    }
    let mine = pattern(REGION, 7);
    n.ep.write(&mine, FiAddr::UNSPEC, base, key, Context(10))
        .unwrap();
    done(&n, 10);
    // SAFETY: `got` outlives the read, looked at only after its completion.
    unsafe { n.ep.read(&mut got, FiAddr::UNSPEC, base, key, Context(11)) }.unwrap();
    done(&n, 11);
    assert!(got == mine, "RMA read after write differs");
    send(&n, b"written", FiAddr::UNSPEC, 3);
    recv(&n, &mut buf, 4);
    // SAFETY: as above.
    unsafe { n.ep.read(&mut got, FiAddr::UNSPEC, base, key, Context(12)) }.unwrap();
    done(&n, 12);
    assert!(
        got == pattern(REGION, 8),
        "RMA read of the server's data differs"
    );
    send(&n, b"read", FiAddr::UNSPEC, 5);
    n.ep.shutdown().unwrap();
    assert_eq!(n.ep.peer(), Err(Error::NotConn));
    report(format_args!("VERIFIED"));
}

// ---------------------------------------------------------------------------------
// The parent
// ---------------------------------------------------------------------------------

#[test]
fn tagged_rma_and_sigkill_across_a_veth_pair() {
    let Some(mut hosts) = Hosts::up() else {
        return;
    };
    let start = Instant::now();
    let srv = hosts.spawn(0, "server", &[]);
    let name = srv.expect("NAME");
    assert!(
        fabric_tcp::Name::decode(&unhex(&name))
            .unwrap()
            .addr
            .ip()
            .to_string()
            == ADDRS[0],
        "the server does not listen on its namespace's address"
    );
    let region = srv.expect("REGION");
    let mut cli = hosts.spawn(1, "client", &[(SERVER_ENV, name), (REGION_ENV, region)]);
    cli.expect("VERIFIED");
    let pid: u32 = srv.expect("ASLEEP").parse().unwrap();
    // `ip netns exec` execs the command, so the child is the server itself.
    assert_eq!(pid, hosts.pid(&srv));
    cli.expect("PENDING");
    hosts.kill(&srv);
    cli.tell("KILLED");
    let us: u128 = cli.expect("FAILED_IN_US").parse().unwrap();
    hosts.finish(&cli);
    eprintln!(
        "pending requests failed {us} us after the kill notice; whole run {:?}",
        start.elapsed()
    );
}

/// MSG endpoints between the two hosts: connect across the veth pair (the server's
/// region named by the accept's connection data), tagged messages both ways, RMA write
/// and read, then the client's `fi_shutdown`, which the server sees as `FI_SHUTDOWN`.
#[test]
fn msg_connection_across_a_veth_pair() {
    let Some(mut hosts) = Hosts::up() else {
        return;
    };
    let start = Instant::now();
    let srv = hosts.spawn(0, "msg_server", &[]);
    let name = srv.expect("NAME");
    let at = fabric_tcp::Name::decode(&unhex(&name)).unwrap().addr;
    assert_eq!(
        at.ip().to_string(),
        ADDRS[0],
        "the passive endpoint's address"
    );
    let cli = hosts.spawn(1, "msg_client", &[(SERVER_ENV, name)]);
    cli.expect("VERIFIED");
    srv.expect("SHUTDOWN");
    hosts.finish(&cli);
    hosts.finish(&srv);
    eprintln!("MSG run across the veth pair: {:?}", start.elapsed());
}
