//! The composed provider between processes: two in different network namespaces (two
//! "nodes", `tests/netns/hosts.sh`) must talk through its tcp half, two in the same
//! namespace through its shm half. Each pair exchanges tagged messages both ways (up to
//! past tcp's receive buffer, so large ones are claimed), received by directed
//! receives with `FI_SOURCE` checked, then an RMA write and read and fetching atomics;
//! every byte is checked, and both processes report which half their peers were
//! resolved to and how many packets the tcp half delivered ([`fabric_hybrid::stats`]).
//!
//! Needs root and iproute2 (CI runs as root; `.ci/run` installs iproute2). Without them
//! the test fails, unless `FABRIC_TEST_ALLOW_SKIP=1` says that a run without hosts is
//! acceptable here.

use std::time::Instant;

use fabric::prelude::*;

mod hybrid_common;
mod netns;
use hybrid_common::{next, node, Node, DEADLINE};
use netns::{report, Hosts, Kid, CHILD_ENV, REGION_ENV, SERVER_ENV};

/// Size of the server's registered region: a counter, then the written bytes.
const REGION: usize = 256 << 10;
/// Tagged messages each way.
const MESSAGES: u64 = 20;
/// Fetch-and-adds of the counter.
const ATOMICS: u64 = 16;

/// Waits for the successful completion of the request with context `ctx`.
#[track_caller]
fn done(n: &Node, ctx: usize) {
    assert_eq!(next(n, &[]).0.op_context, Context(ctx));
}

/// Sends and waits for the send's completion, retrying while the provider pushes back.
fn send(n: &Node, buf: &[u8], to: FiAddr, tag: u64) {
    let start = Instant::now();
    loop {
        match n.ep.tsend(buf, to, tag, Context(tag as usize)) {
            Ok(()) => break,
            Err(Error::Again) => {
                let _ = n.cq.read(&mut []);
                assert!(
                    start.elapsed() < DEADLINE,
                    "send {tag} refused until the deadline"
                );
            }
            Err(e) => panic!("send {tag}: {e}"),
        }
    }
    done(n, tag as usize);
}

/// Receives the message tagged `tag` from `from` into `buf`; returns its length and
/// its reported source.
fn recv(n: &Node, buf: &mut [u8], from: FiAddr, tag: u64) -> (usize, FiAddr) {
    // SAFETY: `buf` outlives the receive, read only after its completion below.
    unsafe { n.ep.trecv(buf, from, tag, 0, Context(tag as usize)) }.unwrap();
    let (e, src) = next(n, &[]);
    assert_eq!(e.tag, tag);
    (e.len, src)
}

/// Length of tagged message `i`: from one byte to past tcp's receive buffer.
fn msg_len(i: u64) -> usize {
    (1usize << (i % 20)) + i as usize
}

/// `len` bytes that depend on `seed`.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed * 7) as u8)
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn report_stats() {
    let s = fabric_hybrid::stats();
    report(format_args!(
        "STATS {} {} {}",
        s.local_peers, s.remote_peers, s.remote_packets
    ));
}

/// A child process: `server` or `client` (from [`CHILD_ENV`]).
#[test]
#[ignore = "run by the tests below inside a namespace"]
fn child_entry() {
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("server") => server(),
        Ok("client") => client(),
        _ => {}
    }
}

/// Echoes the client's tagged messages (received only from it, its address reported
/// as their source), exposes a region for its RMA and atomics and checks them.
fn server() {
    let mut region = vec![0u8; REGION];
    let n = node();
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        offset: 0,
        requested_key: 0x79,
        context: 0,
    };
    let mr = n.domain.mr_reg(&mut region, &attr).unwrap();
    report(format_args!("NAME {}", hex(&n.ep.name())));
    report(format_args!("REGION {}:{}", mr.remote_addr(), mr.key()));

    let mut buf = vec![0u8; 1 << 20];
    let (len, _) = recv(&n, &mut buf, FiAddr::UNSPEC, 1);
    let client = n.av.insert(&buf[..len]).unwrap();
    for i in 0..MESSAGES {
        let (len, src) = recv(&n, &mut buf, client, 100 + i);
        assert_eq!((len, src), (msg_len(i), client), "message {i}");
        assert!(buf[..len] == pattern(len, i)[..], "message {i} differs");
        send(&n, &pattern(len, 1000 + i), client, 200 + i);
    }
    recv(&n, &mut buf, client, 3);
    let mut seen = vec![0u8; REGION];
    mr.read(0, &mut seen).unwrap();
    assert_eq!(seen[..8], ATOMICS.to_le_bytes(), "the client's atomics");
    assert!(
        seen[8..] == pattern(REGION - 8, 5),
        "the client's RMA write differs"
    );
    report_stats();
    send(&n, b"bye", client, 4);
}

/// The server's peer: messages, then RMA write and read back, then fetch-and-adds.
fn client() {
    let mut got = vec![0u8; REGION - 8];
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
        let (len, src) = recv(&n, &mut buf, server, 200 + i);
        assert_eq!((len, src), (msg_len(i), server), "echo {i}");
        assert!(buf[..len] == pattern(len, 1000 + i)[..], "echo {i} differs");
    }
    let mine = pattern(REGION - 8, 5);
    n.ep.write(&mine, server, base + 8, key, Context(10))
        .unwrap();
    done(&n, 10);
    // SAFETY: `got` outlives the read, looked at only after its completion.
    unsafe { n.ep.read(&mut got, server, base + 8, key, Context(11)) }.unwrap();
    done(&n, 11);
    assert!(got == mine, "RMA read after write differs");
    for i in 0..ATOMICS {
        let mut old = [0u8; 8];
        // SAFETY: `old` outlives the atomic, which completes below.
        unsafe {
            n.ep.fetch_atomic(
                &1u64.to_le_bytes(),
                &mut old,
                Datatype::Uint64,
                AtomicOp::Sum,
                server,
                base,
                key,
                Context(20),
            )
        }
        .unwrap();
        done(&n, 20);
        assert_eq!(u64::from_le_bytes(old), i, "fetch-and-add {i}");
    }
    send(&n, b"done", server, 3);
    recv(&n, &mut buf, server, 4);
    report_stats();
}

/// (local peers, remote peers, packets through the tcp half) `kid` reported.
fn stats(kid: &Kid) -> (u64, u64, u64) {
    let s = kid.expect("STATS");
    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(v.len(), 3, "{} reported {s:?}", kid.role());
    (v[0], v[1], v[2])
}

/// Runs the server on host 0 and the client on host `client_host`; returns both
/// children's stats.
fn pair(client_host: usize) -> Option<[(u64, u64, u64); 2]> {
    let mut hosts = Hosts::up()?;
    let start = Instant::now();
    let (srv, cli) = hosts.pair(("server", "client"), client_host, &[]);
    let s = stats(&srv);
    let c = stats(&cli);
    hosts.finish(&cli);
    hosts.finish(&srv);
    eprintln!("server {s:?}, client {c:?}, run {:?}", start.elapsed());
    Some([s, c])
}

#[test]
fn different_namespaces_talk_through_tcp() {
    let Some(both) = pair(1) else {
        return;
    };
    for (role, (local, remote, packets)) in ["server", "client"].iter().zip(both) {
        assert_eq!((local, remote), (0, 1), "{role}: peers resolved");
        // At least every message and response the other side sent.
        assert!(packets >= MESSAGES, "{role}: {packets} packets through tcp");
    }
}

#[test]
fn one_namespace_talks_through_shm() {
    let Some(both) = pair(0) else {
        return;
    };
    for (role, s) in ["server", "client"].iter().zip(both) {
        assert_eq!(
            s,
            (1, 0, 0),
            "{role}: (local peers, remote peers, tcp packets)"
        );
    }
}
