//! The conformance checks that depend on the loopback provider's address format, split
//! out of the provider-independent suite (`suite/msg.rs`): a loopback name is the
//! endpoint's id as 8 little-endian bytes, `fi_av_straddr` prints that id, and
//! `fi_av_insertsvc("localhost", id)` names the same endpoint. Run for the same matrix of
//! static stacks and run-time choices as the suite, since each API has its own AV calls.

/// The provider under test.
type Prov = fabric_loopback::Loopback;

#[path = "suite/common.rs"]
#[macro_use]
mod common;

use common::*;
use fabric::dynamic::prelude::*;
use fabric::prelude::*;

/// straddr and insert_svc round-trip a loopback name; other nodes are not reachable.
fn av_straddr_insert_svc<A: Api>() {
    let a = node::<A>(|_| {});
    let p = node::<A>(|_| {});
    let name = p.ep.name();
    assert_eq!(name.len(), fabric_loopback::NAME_LEN);
    let av = A::av(&a.domain, &AvAttr::DEFAULT).unwrap();
    let s = av.straddr(&name);
    let id = u64::from_le_bytes(name[..].try_into().unwrap());
    assert!(s.contains(&id.to_string()), "{s}");
    for node in ["localhost", "loopback", ""] {
        let svc = av.insert_svc(node, &id.to_string()).unwrap();
        assert_eq!(av.lookup(svc).unwrap(), name, "insert_svc({node:?}, {id})");
    }
    assert_eq!(av.insert_svc("elsewhere", "1"), Err(Error::AddrNotAvail));
    assert_eq!(
        av.insert_svc("localhost", "not-a-number"),
        Err(Error::Inval)
    );
    // The service of an endpoint nobody opened.
    assert_eq!(
        av.insert_svc("localhost", &u64::MAX.to_string()),
        Err(Error::AddrNotAvail)
    );
    // The address insert_svc returns reaches the peer.
    let mut buf = [0u8; 4];
    let at = a.av.insert_svc("", &id.to_string()).unwrap();
    // SAFETY: buf outlives the receive, which completes below.
    unsafe { p.ep.recv(&mut buf, FiAddr::UNSPEC, Context(1)).unwrap() };
    a.ep.send(b"svc!", at, Context(2)).unwrap();
    assert_eq!(wait_ok(&p.cq, &[&a.domain]).context(), Context(1));
    assert_eq!(wait_ok(&a.cq, &[&p.domain]).context(), Context(2));
    assert_eq!(&buf, b"svc!");
}

conformance_matrix!([av_straddr_insert_svc]);
