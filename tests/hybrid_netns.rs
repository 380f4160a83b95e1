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

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_hybrid::ShmTcp;
use fabric_tcp::IFACE_ENV;

type Net = Stack<ShmTcp>;

/// How long any wait lasts before the test fails.
const DEADLINE: Duration = Duration::from_secs(20);
/// Environment variable that makes `child_entry` act: `server` or `client`.
const CHILD_ENV: &str = "FABRIC_HYBRID_NETNS_CHILD";
/// The server's endpoint name in hex, for the client.
const SERVER_ENV: &str = "FABRIC_HYBRID_NETNS_SERVER";
/// The server's region's remote address and key, for the client.
const REGION_ENV: &str = "FABRIC_HYBRID_NETNS_REGION";
/// Prefix of the lines children report on stdout (libtest prints around them).
const MARK: &str = "HYBRID ";
/// The two hosts' addresses (`hosts.sh`).
const ADDRS: [&str; 2] = ["10.77.0.1", "10.77.0.2"];
/// Size of the server's registered region: a counter, then the written bytes.
const REGION: usize = 256 << 10;
/// Tagged messages each way.
const MESSAGES: u64 = 20;
/// Fetch-and-adds of the counter.
const ATOMICS: u64 = 16;

struct Node {
    ep: Endpoint<Net>,
    av: AddressVector<Net>,
    cq: Cq<Net>,
    domain: Domain<Net>,
    _fabric: Fabric<Net>,
}

fn node() -> Node {
    let caps = Caps::TAGGED | Caps::RMA | Caps::ATOMIC | Caps::DIRECTED_RECV | Caps::SOURCE;
    let hints = Hints::new().caps(caps).ep_type(EpType::Rdm);
    let info = getinfo::<Net>(Some(&hints)).unwrap().remove(0);
    let fabric = Fabric::<Net>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Node {
        ep,
        av,
        cq,
        domain,
        _fabric: fabric,
    }
}

/// The next completion of `n` with its source address; an error entry's error.
fn next_from(n: &Node) -> Result<(CqTaggedEntry, FiAddr)> {
    let start = Instant::now();
    let mut e = [CqTaggedEntry::default(); 1];
    let mut src = [FiAddr::UNSPEC; 1];
    loop {
        match n.cq.read_from(&mut e, &mut src) {
            Ok(1) => return Ok((e[0], src[0])),
            Err(Error::Avail) => return Err(n.cq.read_err().unwrap().err),
            Ok(_) | Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no completion within {DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}

/// Waits for the successful completion of the request with context `ctx`.
#[track_caller]
fn done(n: &Node, ctx: usize) {
    assert_eq!(next_from(n).unwrap().0.op_context, Context(ctx));
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
    let (e, src) = next_from(n).unwrap();
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

/// Reports a line to the parent.
fn report(what: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{MARK}{what}").unwrap();
    out.flush().unwrap();
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

/// The namespaces and the children running in them: on drop (a panic included) the
/// children are killed and the namespaces deleted.
struct Hosts {
    names: Vec<String>,
    children: Vec<Child>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/netns/hosts.sh")
}

impl Hosts {
    /// The hosts, or `None` when the machine cannot make them and skipping is allowed.
    fn up() -> Option<Hosts> {
        let out = Command::new("bash")
            .arg(script())
            .arg("up")
            .output()
            .unwrap();
        let why = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(77) {
            let allowed = std::env::var("FABRIC_TEST_ALLOW_SKIP").as_deref() == Ok("1");
            assert!(
                allowed,
                "cannot make test hosts ({}); run as root with iproute2, or set \
                 FABRIC_TEST_ALLOW_SKIP=1 to accept not running this test",
                why.trim()
            );
            eprintln!("SKIPPED (FABRIC_TEST_ALLOW_SKIP=1): {}", why.trim());
            return None;
        }
        assert!(out.status.success(), "hosts.sh up failed: {why}");
        let names: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert_eq!(names.len(), 2, "hosts.sh up printed {names:?}");
        Some(Hosts {
            names,
            children: Vec::new(),
        })
    }

    /// Starts this binary's `child_entry` as `role` on host `h`, its tcp half on the
    /// host's address; returns the child's index and its reported lines.
    fn spawn(&mut self, h: usize, role: &str, env: &[(&str, String)]) -> (usize, Receiver<String>) {
        let exe = std::env::current_exe().unwrap();
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[h]])
            .arg(exe)
            .args(["--ignored", "--exact", "child_entry", "--nocapture"])
            .env(CHILD_ENV, role)
            .env(IFACE_ENV, ADDRS[h])
            .env_remove(fabric_hybrid::NODE_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        let role = role.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(MARK) {
                    eprintln!("{role}: {}", &line[at + MARK.len()..]);
                    if tx.send(line[at + MARK.len()..].to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        self.children.push(child);
        (self.children.len() - 1, rx)
    }

    /// Waits for child `i` to exit; returns whether it succeeded.
    fn wait(&mut self, i: usize) -> bool {
        let start = Instant::now();
        loop {
            if let Some(s) = self.children[i].try_wait().unwrap() {
                return s.success();
            }
            assert!(start.elapsed() < DEADLINE, "child {i} did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let ok = Command::new("bash")
            .arg(script())
            .arg("down")
            .args(&self.names)
            .status()
            .is_ok_and(|s| s.success());
        // Not an assert: a panic while unwinding from another would abort.
        if !ok {
            eprintln!("hosts.sh down {:?} failed", self.names);
        }
    }
}

/// The next line child `role` reports, which must start with `what`; returns the rest.
fn expect(rx: &Receiver<String>, role: &str, what: &str) -> String {
    let line = rx
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|e| panic!("{role} did not report {what}: {e}"));
    line.strip_prefix(what)
        .unwrap_or_else(|| panic!("{role} reported {line:?}, not {what}"))
        .trim()
        .to_owned()
}

/// (local peers, remote peers, packets through the tcp half) a child reported.
fn stats(rx: &Receiver<String>, role: &str) -> (u64, u64, u64) {
    let s = expect(rx, role, "STATS");
    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(v.len(), 3, "{role} reported {s:?}");
    (v[0], v[1], v[2])
}

/// Runs the server on host 0 and the client on host `client_host`; returns both
/// children's stats.
fn pair(client_host: usize) -> Option<[(u64, u64, u64); 2]> {
    let mut hosts = Hosts::up()?;
    let start = Instant::now();
    let (srv, srv_out) = hosts.spawn(0, "server", &[]);
    let name = expect(&srv_out, "server", "NAME");
    let region = expect(&srv_out, "server", "REGION");
    let (cli, cli_out) = hosts.spawn(
        client_host,
        "client",
        &[(SERVER_ENV, name), (REGION_ENV, region)],
    );
    let s = stats(&srv_out, "server");
    let c = stats(&cli_out, "client");
    assert!(hosts.wait(cli), "the client failed");
    assert!(hosts.wait(srv), "the server failed");
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
