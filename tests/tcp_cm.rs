//! Connection management of the tcp provider where sockets show through: nobody
//! listening, a listener that never answers, garbage and floods of silent connections
//! at a passive endpoint's port, a peer process killed mid-connection, orderly shutdown
//! from each side with operations outstanding, and the limits of the connection data.
//! The provider-independent behaviour is `tests/tcp_conformance_cm.rs`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use fabric::attr::{CqAttr, EpType, EqAttr};
use fabric::flags::{BindFlags, Caps};
use fabric::prelude::*;
use fabric::{CqErrEntry, EqErrEntry, EventQueue, PassiveEndpoint};
use fabric_tcp::cm::{CM_DATA_SIZE, MAX_HALF_OPEN, REQUEST_TIMEOUT};
use fabric_tcp::{Name, Tcp};

type Net = Stack<Tcp>;

/// How long any wait here lasts before the test fails.
const DEADLINE: Duration = Duration::from_secs(20);
/// Environment variable that makes `child_entry` act.
const CHILD_ENV: &str = "FABRIC_TCP_CM_CHILD";
/// Operations of each kind the parent leaves outstanding on the killed child.
const PENDING: usize = 4;

fn msg_info() -> Info {
    let hints = Hints::new()
        .caps(Caps::MSG | Caps::TAGGED | Caps::RMA)
        .ep_type(EpType::Msg);
    getinfo::<Net>(Some(&hints)).unwrap().remove(0)
}

struct Host {
    fabric: Fabric<Net>,
    domain: Domain<Net>,
    eq: EventQueue<Net>,
}

fn host(info: &Info) -> Host {
    let fabric = Fabric::<Net>::open(info).unwrap();
    let domain = fabric.domain(info).unwrap();
    let eq = fabric.eq(&EqAttr::default()).unwrap();
    Host { fabric, domain, eq }
}

struct Side {
    host: Host,
    cq: Cq<Net>,
    ep: Endpoint<Net>,
}

fn side(info: &Info) -> Side {
    let host = host(info);
    let cq = host.domain.cq(&CqAttr::default()).unwrap();
    let ep = host.domain.endpoint(info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_eq(&host.eq).unwrap();
    ep.enable().unwrap();
    Side { host, cq, ep }
}

fn listener(info: &Info) -> (Host, PassiveEndpoint<Net>) {
    let h = host(info);
    let pep = h.fabric.passive_ep(info).unwrap();
    pep.bind_eq(&h.eq).unwrap();
    pep.listen().unwrap();
    (h, pep)
}

/// The next event or error event of `eq`, within `within`, progressing `domains`.
fn wait_eq(
    eq: &EventQueue<Net>,
    domains: &[&Domain<Net>],
    within: Duration,
) -> std::result::Result<EqEntry, EqErrEntry> {
    let end = Instant::now() + within;
    loop {
        match eq.read(false) {
            Ok(e) => return Ok(e),
            Err(Error::Avail) => return Err(eq.read_err(false).unwrap()),
            Err(Error::Again) => {}
            Err(e) => panic!("fi_eq_read: {e}"),
        }
        for d in domains {
            d.progress();
        }
        assert!(Instant::now() < end, "no EQ event within {within:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[track_caller]
fn expect_event(eq: &EventQueue<Net>, domains: &[&Domain<Net>], want: EqEvent) -> EqEntry {
    let e = wait_eq(eq, domains, DEADLINE).unwrap_or_else(|e| panic!("error event {e:?}"));
    assert_eq!(e.event, want, "{e:?}");
    e
}

#[track_caller]
fn expect_err(eq: &EventQueue<Net>, domains: &[&Domain<Net>]) -> EqErrEntry {
    wait_eq(eq, domains, DEADLINE).expect_err("an error event")
}

/// The next completion or error completion of `cq`, progressing `domains`.
fn wait_cq(
    cq: &Cq<Net>,
    domains: &[&Domain<Net>],
) -> std::result::Result<CqTaggedEntry, CqErrEntry> {
    let end = Instant::now() + DEADLINE;
    loop {
        let mut e = [CqTaggedEntry::default(); 1];
        match cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Ok(n) => panic!("read {n}"),
            Err(Error::Avail) => return Err(cq.read_err().unwrap()),
            Err(Error::Again) => {}
            Err(e) => panic!("fi_cq_read: {e}"),
        }
        for d in domains {
            d.progress();
        }
        assert!(Instant::now() < end, "no completion within {DEADLINE:?}");
        std::thread::yield_now();
    }
}

/// Connects a fresh side to the listener `(lh, pep)` with `data`; returns the client,
/// the server and the data of the server's accept as the client saw it.
fn connect(lh: &Host, pep: &PassiveEndpoint<Net>, info: &Info) -> (Side, Side) {
    let c = side(info);
    c.ep.connect(&pep.name(), b"hi").unwrap();
    let e = expect_event(&lh.eq, &[&c.host.domain], EqEvent::ConnReq);
    assert_eq!(e.info.as_deref(), Some(&b"hi"[..]));
    let sinfo = *e.conn.unwrap();
    let s = side(&sinfo);
    s.ep.accept(b"welcome").unwrap();
    let e = expect_event(&c.host.eq, &[&s.host.domain], EqEvent::Connected);
    assert_eq!(e.info.as_deref(), Some(&b"welcome"[..]));
    expect_event(&s.host.eq, &[&c.host.domain], EqEvent::Connected);
    (c, s)
}

/// A name where nothing listens: a port that was free a moment ago.
fn nobody() -> Vec<u8> {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    Name {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        nonce: 0,
    }
    .raw()
    .as_bytes()
    .to_vec()
}

#[test]
fn connect_where_nobody_listens_is_refused_without_data() {
    let info = msg_info();
    let c = side(&info);
    c.ep.connect(&nobody(), b"anyone?").unwrap();
    let e = expect_err(&c.host.eq, &[]);
    assert_eq!(e.err, Error::ConnRefused);
    assert!(e.err_data.is_empty());
    assert_eq!(c.ep.peer(), Err(Error::NotConn));
}

#[test]
fn reject_and_accept_carry_data() {
    let info = msg_info();
    let (lh, pep) = listener(&info);
    // Rejected, with the largest data.
    let c = side(&info);
    c.ep.connect(&pep.name(), b"first").unwrap();
    let e = expect_event(&lh.eq, &[&c.host.domain], EqEvent::ConnReq);
    let h = e.conn.unwrap().handle.unwrap();
    let no = vec![0xa5; CM_DATA_SIZE];
    pep.reject(&h, &no).unwrap();
    let e = expect_err(&c.host.eq, &[]);
    assert_eq!((e.err, &e.err_data), (Error::ConnRefused, &no));
    // Accepted: data both ways, then a tagged message each way on the connection.
    let (c, s) = connect(&lh, &pep, &info);
    let mut a = [0u8; 4];
    let mut b = [0u8; 4];
    // SAFETY: the buffers outlive the receives, which complete below.
    unsafe {
        s.ep.trecv(&mut a, FiAddr::UNSPEC, 1, 0, Context(1))
            .unwrap();
        c.ep.trecv(&mut b, FiAddr::UNSPEC, 2, 0, Context(2))
            .unwrap();
    }
    c.ep.tinject(b"ping", FiAddr::UNSPEC, 1).unwrap();
    s.ep.tinject(b"pong", FiAddr::UNSPEC, 2).unwrap();
    assert_eq!(
        wait_cq(&s.cq, &[&c.host.domain]).unwrap().op_context,
        Context(1)
    );
    assert_eq!(
        wait_cq(&c.cq, &[&s.host.domain]).unwrap().op_context,
        Context(2)
    );
    assert_eq!((&a, &b), (b"ping", b"pong"));
}

/// A listener that accepts the TCP connection and never answers: the connect fails
/// with `FI_ETIMEDOUT` once the answer is late, not before.
#[test]
fn silent_listener_times_out() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = Name {
        addr: silent.local_addr().unwrap(),
        nonce: 0,
    };
    let info = msg_info();
    let c = side(&info);
    let start = Instant::now();
    c.ep.connect(to.raw().as_bytes(), b"hello?").unwrap();
    let (mut conn, _) = silent.accept().unwrap();
    let e = expect_err(&c.host.eq, &[]);
    let took = start.elapsed();
    assert_eq!(e.err, Error::TimedOut);
    assert!(took >= REQUEST_TIMEOUT, "timed out after {took:?}");
    assert!(took < REQUEST_TIMEOUT + Duration::from_secs(3), "{took:?}");
    // The request arrived whole, and the connection is closed with the attempt.
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut got = Vec::new();
    conn.read_to_end(&mut got).unwrap();
    assert_eq!(&got[..4], b"FTCM");
    assert!(got.ends_with(b"hello?"));
}

/// Garbage and silence at a passive endpoint's port cost the connections that carry
/// them and nothing else: real connects made meanwhile succeed.
#[test]
fn garbage_and_silence_do_not_disturb_other_connects() {
    let info = msg_info();
    let (lh, pep) = listener(&info);
    let addr = Name::decode(&pep.name()).unwrap().addr;
    let mut garbage = TcpStream::connect(addr).unwrap();
    garbage.write_all(&[0xff; 64]).unwrap();
    let mut wrong_kind = TcpStream::connect(addr).unwrap();
    // The right magic and version, then an accept where a request belongs.
    wrong_kind
        .write_all(&[b'F', b'T', b'C', b'M', 0, 1, 2, 16, 0, 0])
        .unwrap();
    let mut too_long = TcpStream::connect(addr).unwrap();
    // A request announcing one byte of data more than the limit.
    let over = (CM_DATA_SIZE as u16 + 1).to_be_bytes();
    too_long
        .write_all(&[b'F', b'T', b'C', b'M', 0, 1, 1, 16, over[0], over[1]])
        .unwrap();
    let silent = TcpStream::connect(addr).unwrap();
    let (c, s) = connect(&lh, &pep, &info);
    assert_eq!(c.ep.peer().unwrap(), s.ep.name());
    // Each bad connection was closed; the silent one is still waiting.
    for (what, mut conn) in [
        ("garbage", garbage),
        ("kind", wrong_kind),
        ("length", too_long),
    ] {
        conn.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut b = [0u8; 16];
        let n = conn.read(&mut b).unwrap_or(0);
        assert_eq!(n, 0, "{what}: the listener answers garbage with nothing");
    }
    silent
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!((&silent).read(&mut b).is_err(), "silent one still open");
    // None of them made a request.
    for _ in 0..50 {
        assert_eq!(lh.eq.read(false), Err(Error::Again));
    }
}

/// More silent connections than the listener reads at once: the ones past the bound
/// are closed at once, the others when their request is late; afterwards a real
/// connect succeeds.
#[test]
fn half_open_connections_are_bounded() {
    let info = msg_info();
    let (lh, pep) = listener(&info);
    let addr = Name::decode(&pep.name()).unwrap().addr;
    let n = MAX_HALF_OPEN + 36;
    let silent: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Reading the EQ makes the listener take them up.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        assert_eq!(lh.eq.read(false).err(), Some(Error::Again));
        std::thread::sleep(Duration::from_millis(5));
    }
    let closed = |conns: &[TcpStream]| {
        conns
            .iter()
            .filter(|c| {
                c.set_nonblocking(true).unwrap();
                let mut b = [0u8; 1];
                matches!((&**c).read(&mut b), Ok(0))
            })
            .count()
    };
    let early = closed(&silent);
    eprintln!("{n} silent connections: {early} closed at once");
    assert_eq!(early, n - MAX_HALF_OPEN, "closed past the bound");
    // The others go when their request is late.
    let end = Instant::now() + REQUEST_TIMEOUT + Duration::from_secs(5);
    loop {
        let _ = lh.eq.read(false);
        if closed(&silent) == n {
            break;
        }
        assert!(Instant::now() < end, "silent connections still open");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(start.elapsed() >= REQUEST_TIMEOUT);
    let (c, s) = connect(&lh, &pep, &info);
    assert_eq!(s.ep.peer().unwrap(), c.ep.name());
}

#[test]
fn connection_data_limit() {
    let info = msg_info();
    let (lh, pep) = listener(&info);
    let c = side(&info);
    let max = vec![3u8; CM_DATA_SIZE];
    let over = vec![3u8; CM_DATA_SIZE + 1];
    assert_eq!(
        c.ep.getopt(EpOptName::CmDataSize),
        Ok(EpOpt::CmDataSize(CM_DATA_SIZE))
    );
    assert_eq!(c.ep.connect(&pep.name(), &over), Err(Error::Inval));
    c.ep.connect(&pep.name(), &max).unwrap();
    let e = expect_event(&lh.eq, &[&c.host.domain], EqEvent::ConnReq);
    assert_eq!(e.info.as_deref(), Some(&max[..]));
    let sinfo = *e.conn.unwrap();
    let h = sinfo.handle.clone().unwrap();
    assert_eq!(pep.reject(&h, &over), Err(Error::Inval));
    let s = side(&sinfo);
    assert_eq!(s.ep.accept(&over), Err(Error::Inval));
    s.ep.accept(&max).unwrap();
    let e = expect_event(&c.host.eq, &[&s.host.domain], EqEvent::Connected);
    assert_eq!(e.info.as_deref(), Some(&max[..]));
}

/// Orderly shutdown by one side with operations outstanding on both: what was sent
/// before arrives, the other side sees `FI_SHUTDOWN`, every outstanding operation
/// completes in error exactly once (`FI_ECANCELED` on the side that shut down,
/// `FI_ECONNRESET` on the other).
fn shutdown_with_outstanding(by_client: bool) {
    let info = msg_info();
    let (lh, pep) = listener(&info);
    let (c, s) = connect(&lh, &pep, &info);
    let (me, peer) = if by_client { (&c, &s) } else { (&s, &c) };
    let mut last = [0u8; 9];
    let mut mine = [[0u8; 8]; PENDING];
    let mut theirs = [[0u8; 8]; PENDING];
    // SAFETY: the buffers outlive the receives, which all complete below.
    unsafe {
        peer.ep
            .trecv(&mut last, FiAddr::UNSPEC, 9, 0, Context(99))
            .unwrap();
        for (i, b) in mine.iter_mut().enumerate() {
            me.ep
                .trecv(b, FiAddr::UNSPEC, 1, 0, Context(10 + i))
                .unwrap();
        }
        for (i, b) in theirs.iter_mut().enumerate() {
            peer.ep
                .trecv(b, FiAddr::UNSPEC, 1, 0, Context(20 + i))
                .unwrap();
        }
    }
    me.ep
        .tsend(b"last word", FiAddr::UNSPEC, 9, Context(98))
        .unwrap();
    assert_eq!(
        wait_cq(&me.cq, &[&peer.host.domain]).unwrap().op_context,
        Context(98)
    );
    me.ep.shutdown().unwrap();
    expect_event(&peer.host.eq, &[], EqEvent::Shutdown);
    let mut seen = Vec::new();
    let mut mine_err = Vec::new();
    for _ in 0..PENDING {
        let e = wait_cq(&me.cq, &[]).expect_err("canceled");
        assert_eq!(e.err, Error::Canceled);
        mine_err.push(e.context.0);
    }
    // The CQ reports errors ahead of completions: take all, in any order.
    let mut arrived = Vec::new();
    for _ in 0..PENDING + 1 {
        match wait_cq(&peer.cq, &[]) {
            Ok(e) => arrived.push(e.op_context),
            Err(e) => {
                assert_eq!(e.err, Error::ConnReset);
                seen.push(e.context.0);
            }
        }
    }
    assert_eq!(
        arrived,
        [Context(99)],
        "the message sent before the shutdown"
    );
    assert_eq!(&last, b"last word");
    mine_err.sort();
    seen.sort();
    assert_eq!(mine_err, (10..10 + PENDING).collect::<Vec<_>>());
    assert_eq!(seen, (20..20 + PENDING).collect::<Vec<_>>());
    // Exactly once: nothing more on either CQ or EQ.
    let mut e = [CqTaggedEntry::default(); 1];
    for _ in 0..50 {
        me.host.domain.progress();
        peer.host.domain.progress();
        assert_eq!(me.cq.read(&mut e), Err(Error::Again));
        assert_eq!(peer.cq.read(&mut e), Err(Error::Again));
        assert_eq!(me.host.eq.read(false), Err(Error::Again));
        assert_eq!(peer.host.eq.read(false), Err(Error::Again));
    }
    assert!(peer.ep.tinject(b"x", FiAddr::UNSPEC, 1).is_err());
    assert!(me.ep.tinject(b"x", FiAddr::UNSPEC, 1).is_err());
}

#[test]
fn orderly_shutdown_by_client() {
    shutdown_with_outstanding(true)
}

#[test]
fn orderly_shutdown_by_server() {
    shutdown_with_outstanding(false)
}

/// The child: listens, prints its passive endpoint's name, accepts the one request,
/// prints `UP` once connected, then sleeps without progress until it is killed.
#[test]
#[ignore = "run by the other tests as a child process"]
fn child_entry() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let info = msg_info();
    let (lh, pep) = listener(&info);
    println!("NAME {}", hex(&pep.name()));
    let e = expect_event(&lh.eq, &[], EqEvent::ConnReq);
    let s = side(&e.conn.unwrap());
    s.ep.accept(&[]).unwrap();
    expect_event(&s.host.eq, &[], EqEvent::Connected);
    println!("UP");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(DEADLINE * 3);
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

/// The peer process is killed while operations wait on it: the EQ reports the end
/// (`FI_SHUTDOWN` or `FI_ECONNRESET`) and every one of them completes in error, once,
/// within a bound.
#[test]
fn peer_process_killed() {
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_entry", "--nocapture"])
        .env(CHILD_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut child = Reap(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let line = |prefix: &str| loop {
        let l = rx.recv_timeout(DEADLINE).expect("a line from the child");
        if let Some(rest) = l.strip_prefix(prefix) {
            return rest.trim().to_string();
        }
    };
    let name = unhex(&line("NAME "));
    let info = msg_info();
    let c = side(&info);
    c.ep.connect(&name, &[]).unwrap();
    expect_event(&c.host.eq, &[], EqEvent::Connected);
    line("UP");
    let mut bufs = [[0u8; 16]; PENDING];
    let mut reads = [[0u8; 16]; PENDING];
    // SAFETY: the buffers outlive the operations, which all complete below.
    unsafe {
        for (i, b) in bufs.iter_mut().enumerate() {
            c.ep.trecv(b, FiAddr::UNSPEC, 5, 0, Context(100 + i))
                .unwrap();
        }
        // Reads wait for the child's answer, which never comes: it does not progress.
        for (i, b) in reads.iter_mut().enumerate() {
            c.ep.read(b, FiAddr::UNSPEC, 0, 1, Context(200 + i))
                .unwrap();
        }
    }
    c.ep.write(b"to the void", FiAddr::UNSPEC, 0, 1, Context(300))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut e = [CqTaggedEntry::default(); 1];
    assert_eq!(c.cq.read(&mut e), Err(Error::Again), "all still waiting");
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let killed = Instant::now();
    match wait_eq(&c.host.eq, &[&c.host.domain], DEADLINE) {
        Ok(e) => assert_eq!(e.event, EqEvent::Shutdown),
        Err(e) => assert_eq!(e.err, Error::ConnReset),
    }
    let mut failed: Vec<usize> = Vec::new();
    for _ in 0..2 * PENDING + 1 {
        let e = wait_cq(&c.cq, &[]).expect_err("fails");
        assert!(
            matches!(e.err, Error::ConnReset | Error::HostUnreach),
            "{e:?}"
        );
        failed.push(e.context.0);
    }
    let took = killed.elapsed();
    eprintln!("pending operations failed {took:?} after the kill");
    assert!(took < Duration::from_secs(2), "{took:?}");
    failed.sort();
    let want: Vec<usize> = (100..100 + PENDING)
        .chain(200..200 + PENDING)
        .chain([300])
        .collect();
    assert_eq!(failed, want);
    for _ in 0..50 {
        c.host.domain.progress();
        assert_eq!(c.cq.read(&mut e), Err(Error::Again), "completed once");
    }
    assert!(c.ep.tinject(b"x", FiAddr::UNSPEC, 1).is_err());
}
