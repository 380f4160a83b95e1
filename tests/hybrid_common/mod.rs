//! What the tests of the composed provider (shm inside the node, tcp between nodes)
//! share: one RDM endpoint with its CQ and AV, made with the capabilities they all use,
//! and completions read with their source.
//!
//! The peers' locality is a type parameter: [`Host`] (the real node identity, from the
//! network namespace) for tests between processes, a test's own [`Locality`] for one
//! that decides per insert.
#![allow(dead_code)] // each test binary uses its own part of it

use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_hybrid::{Host, Hybrid, Locality};
use fabric_shm::Shm;
use fabric_tcp::Tcp;

/// The stack under test, peers' locality decided by `N`.
pub type Net<N = Host> = Stack<Hybrid<Shm, Tcp, N>>;

/// How long any wait here lasts before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// One enabled RDM endpoint (tagged, directed receives, `FI_SOURCE`, RMA and atomics)
/// with its CQ and AV.
pub struct Node<N: Locality = Host> {
    pub ep: Endpoint<Net<N>>,
    pub av: AddressVector<Net<N>>,
    pub cq: Cq<Net<N>>,
    pub domain: Domain<Net<N>>,
    _fabric: Fabric<Net<N>>,
}

/// A [`Node`] on the first fabric `getinfo` offers for those capabilities.
pub fn node<N: Locality>() -> Node<N> {
    let caps = Caps::TAGGED | Caps::RMA | Caps::ATOMIC | Caps::DIRECTED_RECV | Caps::SOURCE;
    let hints = Hints::new().caps(caps).ep_type(EpType::Rdm);
    let info = getinfo::<Net<N>>(Some(&hints)).unwrap().remove(0);
    let fabric = Fabric::<Net<N>>::open(&info).unwrap();
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

/// The next successful completion of `n` with its source address, driving `others`
/// meanwhile; an error entry fails the test.
#[track_caller]
pub fn next<N: Locality>(n: &Node<N>, others: &[&Node<N>]) -> (CqTaggedEntry, FiAddr) {
    let start = Instant::now();
    let mut e = [CqTaggedEntry::default(); 1];
    let mut src = [FiAddr::UNSPEC; 1];
    loop {
        match n.cq.read_from(&mut e, &mut src) {
            Ok(1) => return (e[0], src[0]),
            Err(Error::Avail) => panic!("error entry: {:?}", n.cq.read_err().unwrap()),
            Ok(_) | Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
        for o in others {
            let _ = o.cq.read(&mut []);
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no completion within {DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}
