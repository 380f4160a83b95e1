//! What the tcp tests share: one RDM endpoint with its CQ and AV, waits with a
//! deadline, and the hex and pattern helpers children use to exchange names and data.
#![allow(dead_code)] // each test binary uses its own part of it

use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_tcp::Tcp;

/// The stack under test.
pub type Net = Stack<Tcp>;

/// How long any wait here lasts before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// One enabled RDM endpoint (tagged and RMA) with its CQ and AV.
pub struct Node {
    pub ep: Endpoint<Net>,
    pub av: AddressVector<Net>,
    pub cq: Cq<Net>,
    pub domain: Domain<Net>,
    _fabric: Fabric<Net>,
}

pub fn node() -> Node {
    node_with(Caps::TAGGED | Caps::RMA, &CqAttr::DEFAULT)
}

/// [`node`] with other capabilities or another CQ (a wait object, say).
pub fn node_with(caps: Caps, cq: &CqAttr) -> Node {
    let hints = Hints::new().caps(caps).ep_type(EpType::Rdm);
    let info = getinfo::<Net>(Some(&hints)).unwrap().remove(0);
    node_from(&info, cq).unwrap()
}

/// A node opened from `info`, its CQ with `cq`.
pub fn node_from(info: &Info, cq: &CqAttr) -> Result<Node> {
    let fabric = Fabric::<Net>::open(info)?;
    let domain = fabric.domain(info)?;
    let cq = domain.cq(cq)?;
    let av = domain.av(&AvAttr::DEFAULT)?;
    let ep = domain.endpoint(info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;
    Ok(Node {
        ep,
        av,
        cq,
        domain,
        _fabric: fabric,
    })
}

/// One completion or error entry of `n`, driving the progress of `others` too.
pub fn next(n: &Node, others: &[&Node]) -> Result<CqTaggedEntry> {
    next_within(n, others, DEADLINE)
}

/// [`next`], failing after `d` instead of [`DEADLINE`].
pub fn next_within(n: &Node, others: &[&Node], d: Duration) -> Result<CqTaggedEntry> {
    let start = Instant::now();
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        match n.cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Err(Error::Avail) => return Err(n.cq.read_err().unwrap().err),
            Ok(_) | Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
        for o in others {
            let _ = o.cq.read(&mut []);
        }
        assert!(start.elapsed() < d, "no completion within {d:?}");
        std::thread::yield_now();
    }
}

/// Drives `n` for `d`.
pub fn spin(n: &Node, d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        let _ = n.cq.read(&mut []);
        std::thread::yield_now();
    }
}

/// Posts a tagged send (context = tag), retrying while the provider pushes back.
pub fn post_send(n: &Node, buf: &[u8], to: FiAddr, tag: u64) {
    let start = Instant::now();
    loop {
        match n.ep.tsend(buf, to, tag, Context(tag as usize)) {
            Ok(()) => return,
            Err(Error::Again) => {
                spin(n, Duration::ZERO);
                assert!(start.elapsed() < DEADLINE, "send refused for {DEADLINE:?}");
            }
            Err(e) => panic!("tsend: {e}"),
        }
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

/// An enabled MSG endpoint opened from `info` (an MSG info: the client's, or a
/// connection request's), its CQ and EQ bound, not connected yet. Its AV is opened
/// but not bound: a connection has none.
pub fn msg_node(info: &Info) -> (Node, EventQueue<Net>) {
    let fabric = Fabric::<Net>::open(info).unwrap();
    let domain = fabric.domain(info).unwrap();
    let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let eq = fabric.eq(&EqAttr::default()).unwrap();
    let ep = domain.endpoint(info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_eq(&eq).unwrap();
    ep.enable().unwrap();
    let n = Node {
        ep,
        av,
        cq,
        domain,
        _fabric: fabric,
    };
    (n, eq)
}

/// The MSG info for tagged messages and RMA.
pub fn msg_info() -> Info {
    let hints = Hints::new()
        .caps(Caps::TAGGED | Caps::RMA)
        .ep_type(EpType::Msg);
    getinfo::<Net>(Some(&hints)).unwrap().remove(0)
}

/// A listening passive endpoint with its EQ (and the fabric that holds them).
pub fn msg_listener() -> (Fabric<Net>, PassiveEndpoint<Net>, EventQueue<Net>) {
    let info = msg_info();
    let fabric = Fabric::<Net>::open(&info).unwrap();
    let eq = fabric.eq(&EqAttr::default()).unwrap();
    let pep = fabric.passive_ep(&info).unwrap();
    pep.bind_eq(&eq).unwrap();
    pep.listen().unwrap();
    (fabric, pep, eq)
}

/// The next event of `eq`, which must be `want`, within [`DEADLINE`].
#[track_caller]
pub fn eq_event(eq: &EventQueue<Net>, want: EqEvent) -> EqEntry {
    let start = Instant::now();
    loop {
        match eq.read(false) {
            Ok(e) => {
                assert_eq!(e.event, want, "{e:?}");
                return e;
            }
            Err(Error::Again) => {}
            Err(Error::Avail) => panic!("EQ error {:?}, not {want:?}", eq.read_err(false)),
            Err(e) => panic!("eq read: {e}"),
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no {want:?} within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
