//! Endpoints for the shm tests that span processes (any stack of the matrix), and the
//! helpers their roles share.
// Each test crate uses only part of it.
#![allow(dead_code)]

use std::time::Instant;

use fabric::prelude::*;

use super::DEADLINE;

/// An endpoint with its CQ (transmit and receive), AV, domain and fabric.
pub struct Node<S: Config> {
    pub ep: Endpoint<S>,
    pub cq: Cq<S>,
    pub av: AddressVector<S>,
    pub domain: Domain<S>,
    _fabric: Fabric<S>,
}

/// An endpoint in its own fabric and domain.
pub fn node<S: Config>() -> Node<S> {
    node_with(&CqAttr::DEFAULT, BindFlags::empty())
}

/// [`node`] with a CQ of `cq` attributes bound with `FI_TRANSMIT | FI_RECV` and
/// `bind`.
pub fn node_with<S: Config>(cq: &CqAttr, bind: BindFlags) -> Node<S> {
    open_node(
        Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::ATOMIC,
        cq,
        bind,
        true,
    )
}

/// An endpoint with `caps`, its CQ (`cq` attributes, bound with `FI_TRANSMIT |
/// FI_RECV` and `bind`) and AV bound, enabled when `enable` says so.
pub fn open_node<S: Config>(caps: Caps, cq: &CqAttr, bind: BindFlags, enable: bool) -> Node<S> {
    let hints = Hints::new().caps(caps).ep_type(EpType::Rdm);
    let info = getinfo::<S>(Some(&hints)).expect("getinfo").remove(0);
    let fabric = Fabric::<S>::open(&info).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let cq = domain.cq(cq).expect("cq");
    let av = domain.av(&AvAttr::DEFAULT).expect("av");
    let ep = domain.endpoint(&info).expect("endpoint");
    ep.bind_av(&av).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV | bind)
        .unwrap();
    if enable {
        ep.enable().unwrap();
    }
    Node {
        ep,
        cq,
        av,
        domain,
        _fabric: fabric,
    }
}

/// No completion now (the CQ is read once, without waiting).
#[track_caller]
pub fn nothing<S: Config>(n: &Node<S>)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let mut e = [CqTaggedEntry::default(); 1];
    match n.cq.read(&mut e) {
        Err(Error::Again) | Ok(0) => {}
        other => panic!("unexpected completion: {other:?}"),
    }
}

/// A completion or an error entry.
pub type Entry = std::result::Result<CqTaggedEntry, CqErrEntry>;

/// One completion, progressing while waiting.
#[track_caller]
pub fn next<S: Config>(n: &Node<S>) -> Entry
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let deadline = Instant::now() + DEADLINE;
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        match n.cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Err(Error::Avail) => return Err(n.cq.read_err().unwrap()),
            Ok(_) | Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
        n.domain.progress();
        assert!(Instant::now() < deadline, "no completion in time");
        std::hint::spin_loop();
    }
}

/// `n` bytes that differ with `seed`.
pub fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u64).wrapping_mul(2654435761) ^ seed) as u8)
        .collect()
}
