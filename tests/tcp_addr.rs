//! Addresses on the tcp provider: `getinfo_node` with a node and service (a peer's
//! address in `dest_addr`) and with `FI_SOURCE` (the endpoint binds where `src_addr`
//! says), `fi_av_insertsvc`, and IPv6 names (`FI_SOCKADDR_IN6`) beside IPv4 ones.

mod tcp_common;

use std::net::TcpListener;

use fabric::flags::InfoFlags;
use fabric::getinfo_node;
use fabric::prelude::*;
use fabric_tcp::{Name, Tcp};
use tcp_common::*;

fn hints() -> Hints {
    Hints::new()
        .caps(Caps::TAGGED | Caps::RMA)
        .ep_type(EpType::Rdm)
}

/// A port nothing listens on right now.
fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends one tagged message from `a` to `b` (inserted into `a`'s AV as `to`) and
/// checks it arrives.
fn exchange(a: &Node, b: &Node, to: FiAddr) {
    let mut rx = vec![0u8; 64];
    // SAFETY: `rx` outlives the receive, which completes (checked below) before it
    // is read or dropped.
    unsafe { b.ep.trecv(&mut rx, FiAddr::UNSPEC, 9, 0, Context(1)) }.unwrap();
    post_send(a, b"over the chosen address", to, 9);
    let got = next(b, &[a]).expect("the receive completes");
    assert_eq!(got.len, 23);
    assert_eq!(&rx[..23], b"over the chosen address");
    next(a, &[b]).expect("the send completes");
}

#[test]
fn source_with_a_chosen_port_binds_there() {
    let port = free_port("127.0.0.1");
    let svc = port.to_string();
    let infos = getinfo_node::<Net>(
        Some("127.0.0.1"),
        Some(&svc),
        InfoFlags::SOURCE,
        Some(&hints()),
    )
    .unwrap();
    let src = infos[0].src_addr.clone().expect("FI_SOURCE fills src_addr");
    assert!(infos[0].dest_addr.is_none());
    let b = node_from(&infos[0], &CqAttr::DEFAULT).unwrap();
    let name = Name::decode(&b.ep.name()).unwrap();
    assert_eq!(name.addr, format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(
        &b.ep.name()[..8],
        &src[..8],
        "family, port and address as asked"
    );

    // The port is taken now: a second endpoint cannot bind it.
    assert_eq!(
        node_from(&infos[0], &CqAttr::DEFAULT).err(),
        Some(Error::AddrInUse)
    );

    // A peer reaches it by node and service: getinfo's dest_addr and insertsvc agree.
    let peer = getinfo_node::<Net>(Some("127.0.0.1"), Some(&svc), InfoFlags::empty(), None)
        .unwrap()
        .remove(0);
    assert!(peer.src_addr.is_none());
    let dest = peer.dest_addr.expect("node and service fill dest_addr");
    let a = node();
    let via_dest = a.av.insert(&dest).unwrap();
    exchange(&a, &b, via_dest);
    let via_svc = a.av.insert_svc("127.0.0.1", &svc).unwrap();
    exchange(&a, &b, via_svc);
}

#[test]
fn a_service_alone_is_a_source_and_port_zero_is_any() {
    let infos = getinfo_node::<Net>(None, Some("0"), InfoFlags::empty(), Some(&hints())).unwrap();
    assert!(infos[0].src_addr.is_some() && infos[0].dest_addr.is_none());
    let n = node_from(&infos[0], &CqAttr::DEFAULT).unwrap();
    assert_ne!(Name::decode(&n.ep.name()).unwrap().addr.port(), 0);
}

#[test]
fn bad_nodes_and_services_are_refused() {
    let h = Some(hints());
    let h = h.as_ref();
    // Not an address of this host: nothing can be bound there.
    assert_eq!(
        getinfo_node::<Net>(Some("192.0.2.1"), Some("0"), InfoFlags::SOURCE, h).err(),
        Some(Error::AddrNotAvail)
    );
    assert_eq!(
        getinfo_node::<Net>(Some("127.0.0.1"), Some("http-ish"), InfoFlags::SOURCE, h).err(),
        Some(Error::Inval)
    );
    // A peer at port 0 cannot be reached.
    assert_eq!(
        getinfo_node::<Net>(Some("127.0.0.1"), Some("0"), InfoFlags::empty(), h).err(),
        Some(Error::Inval)
    );
    // No node and no service: plain getinfo.
    let plain = getinfo_node::<Net>(None, None, InfoFlags::empty(), h).unwrap();
    assert!(plain[0].src_addr.is_none() && plain[0].dest_addr.is_none());
}

#[test]
fn ipv6_and_ipv4_endpoints_talk() {
    let v6 = getinfo_node::<Net>(Some("::1"), None, InfoFlags::SOURCE, Some(&hints()))
        .unwrap()
        .remove(0);
    let b = node_from(&v6, &CqAttr::DEFAULT).unwrap();
    let name = b.ep.name();
    assert_eq!(
        name.len(),
        fabric_tcp::name::NAME6_LEN,
        "a sockaddr_in6 name"
    );
    assert!(Name::decode(&name).unwrap().addr.is_ipv6());
    assert!(Tcp::straddr(&name).starts_with("fi_sockaddr_in6://[::1]:"));
    let a = node();
    let b_at_a = a.av.insert(&name).unwrap();
    exchange(&a, &b, b_at_a);
    // And back, v6 to v4.
    let a_at_b = b.av.insert(&a.ep.name()).unwrap();
    exchange(&b, &a, a_at_b);
}
