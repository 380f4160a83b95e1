//! `fabric-tcp`: the TCP provider, reliable datagram (RDM) and connected (MSG)
//! endpoints between hosts.
//!
//! An endpoint listens on one TCP socket; its name ([`name`]) is the socket address
//! peers connect to, laid out as a C `sockaddr_in` or `sockaddr_in6`, with a nonce
//! that tells this endpoint from a later one on the same port. The first packet to a
//! peer opens a connection; each direction of a pair has its own (see
//! [`transport`] for the protocol, flow control, and what happens when a peer dies).
//! Matching, RMA and atomics against the MR table, completions and counters are the
//! core's, so everything the conformance suite covers works as on the other
//! providers. Nothing from the network is trusted: a connection must open with a
//! hello (magic, version, the names of both endpoints) before anything else is read
//! from it, every frame header is checked (op, length at most [`MAX_MSG_SIZE`]), and
//! a connection whose bytes fail a check is closed without disturbing the others.
//!
//! **Interface.** `FABRIC_TCP_IFACE` chooses where endpoints listen (and so the
//! address their names carry): an interface name (`eth0`: its first IPv4 address, or
//! its first IPv6 one if it has none) or an address (`192.0.2.7`, `fd00::2`). Unset,
//! endpoints listen on `127.0.0.1`: a provider cannot know which of a host's networks
//! its peers share, and a wrong guess would hand out names that reach nobody (or the
//! wrong host), so jobs across hosts name the interface. A value that names no local
//! interface or address makes `getinfo` and endpoint open fail with
//! `FI_EADDRNOTAVAIL`, with a message on stderr.
//!
//! **Progress.** Manual progress reads the sockets without blocking (one `epoll_wait`
//! with a zero timeout per poll); auto progress is the core's progress thread doing
//! the same. Blocking waits (`fi_cq_sread`, counter waits, an `FI_WAIT_FD` CQ after
//! `fi_trywait`) really wake when bytes arrive: see `wake`.
//!
//! **Liveness.** A peer process that dies closes its sockets: its connections end,
//! every request waiting for it completes with `FI_EHOSTUNREACH` at the next poll and
//! later sends to it fail with `FI_EHOSTUNREACH`. A peer host that vanishes is
//! detected within about 10 s: by TCP keepalive while nothing is in flight, and by
//! retransmissions that go unanswered for [`transport::LIVENESS`] otherwise. A peer
//! process that only stops polling is not gone, however long it stays away: its
//! window shuts, sends to it get `FI_EAGAIN`, and nothing fails. A peer that
//! dies while no connection to it is open (it was closed for idleness) is detected
//! by the next send, whose connection is refused.
//!
//! **Idle and excess connections.** An outgoing connection with nothing queued and no
//! request awaiting a response is closed by its owner once it carried nothing for
//! `FABRIC_TCP_IDLE_MS` milliseconds ([`IDLE_ENV`]; default 30 000, 0: never), and,
//! before an endpoint opens more than `FABRIC_TCP_MAX_CONNS` ([`MAX_CONNS_ENV`];
//! default 1024, 0: no limit), the least recently used such one (with none, the new
//! one opens anyway). The close is a goodbye frame after everything sent: nothing is
//! lost or reordered, and neither side takes it for a dead peer. The next packet to
//! that peer opens a new connection once the peer has read to the goodbye; until then
//! requests to it get `FI_EAGAIN`. Both variables are read when an endpoint opens; a
//! value that is not a number makes the open fail with `FI_EINVAL`.
//!
//! **Addresses.** `getinfo_node` with a node and service (or `fi_av_insertsvc`) makes
//! a peer's name (any incarnation listening there); with `InfoFlags::SOURCE`, or a
//! service alone, it makes the `src_addr` an endpoint binds to: a chosen port (0 or
//! none: any) on an address of this host.
//!
//! **MSG endpoints** (`fi_cm`): a passive endpoint listens on a socket at its
//! `src_addr` (or the interface above, any port); connect, accept and reject carry up
//! to 256 bytes of connection data, and one socket then carries both directions of
//! the connection with the RDM path's framing, flow control and checks (see [`cm`]).
//! The getinfo list has the MSG info after the RDM one.
//!
//! **Large messages.** A frame larger than a connection's receive buffer
//! ([`RX_BUF`]) is read from the socket straight into its destination when the core
//! has one when its header arrives: the posted receive a message matches (truncated as
//! for small messages when the buffer is shorter), the registered memory an RMA write
//! targets, the buffer of the read a response answers. An unexpected message, a
//! multi-receive buffer or a request that fails its checks has none: such a frame is
//! staged whole, within [`STAGE_BUDGET`] per endpoint, beyond which the receiver stops
//! reading the connection and TCP stops the sender. A connection that breaks in the
//! middle of a payload fails its operation once (`FI_EHOSTUNREACH`). [`large_rx`]
//! counts both kinds (a diagnostic).
//!
//! A frame larger than [`LARGE_TX`] is sent from the caller's buffers: `send` writes
//! it itself, waiting in `poll` while the socket is full, and returns once the kernel
//! has it all, or, when the socket took nothing for [`TX_STALL`] or the whole took
//! longer than [`tx_bound`] of its size (a receiver that does not poll), after it
//! copied what is left into the connection's queue for progress to write out. So
//! with a receiver that keeps up a large message is copied only by the kernel, and a
//! sender never waits on a receiver for long. A connection that fails during the
//! write fails the send (`FI_EHOSTUNREACH`) or, for an operation that awaits a
//! response, its completion. [`large_tx`] counts the bytes sent either way.
//!
//! ```
//! use fabric::prelude::*;
//! use fabric_tcp::Tcp;
//! let infos = getinfo::<Stack<Tcp>>(None).unwrap();
//! assert!(infos.iter().all(|i| i.fabric_attr.prov_name == "tcp"));
//! ```
#![deny(unsafe_code)]

pub mod cm;
mod cm_wire;
mod conn;
mod frame;
pub mod name;
mod place;
pub mod transport;
mod wake;

use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};

use fabric::attr::{AddrFormat, EpType};
use fabric::flags::Caps;
use fabric::{Error, Info, Provider, Result};

pub use frame::{HELLO_LEN, MAGIC, VERSION};
pub use name::{Name, NAME_LEN};
pub use place::{large_rx, LargeRx};
pub use transport::{
    large_tx, tx_bound, LargeTx, TcpEp, TcpPeer, TcpRx, TcpTx, DEFAULT_IDLE, DEFAULT_MAX_CONNS,
    IDLE_ENV, LARGE_TX, MAX_CONNS_ENV, RX_BUF, STAGE_BUDGET, TX_STALL,
};

/// Largest `inject` payload, as a type ([`Provider::InjectSize`]).
pub type InjectSize = fabric::typenum::U4096;
/// Largest `inject` payload.
pub const INJECT_SIZE: usize = <InjectSize as fabric::typenum::Unsigned>::USIZE;
/// Largest message.
pub const MAX_MSG_SIZE: usize = 64 << 20;
/// The environment variable that chooses the interface.
pub const IFACE_ENV: &str = "FABRIC_TCP_IFACE";

/// The tcp provider marker.
pub enum Tcp {}

/// A nonce for a new endpoint: never 0 (which means "any"), and different from every
/// earlier one of this process and, with overwhelming probability, of any other.
fn fresh_nonce() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish().max(1)
}

/// The address endpoints listen on: from [`IFACE_ENV`], or `127.0.0.1`.
pub fn local_addr() -> Result<IpAddr> {
    let Ok(v) = std::env::var(IFACE_ENV) else {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    };
    iface_addr(v.trim()).inspect_err(|_| {
        eprintln!("fabric-tcp: {IFACE_ENV}={v:?} names no interface or address of this host")
    })
}

fn iface_addr(v: &str) -> Result<IpAddr> {
    let ifs = if_addrs::get_if_addrs().map_err(|_| Error::AddrNotAvail)?;
    if let Ok(ip) = v.parse::<IpAddr>() {
        return ifs
            .iter()
            .any(|i| i.ip() == ip)
            .then_some(ip)
            .ok_or(Error::AddrNotAvail);
    }
    let mine: Vec<IpAddr> = ifs.iter().filter(|i| i.name == v).map(|i| i.ip()).collect();
    mine.iter()
        .find(|a| a.is_ipv4())
        .or_else(|| {
            mine.iter()
                .find(|a| matches!(a, IpAddr::V6(v6) if !v6.is_unicast_link_local()))
        })
        .copied()
        .ok_or(Error::AddrNotAvail)
}

fn candidate(ep_type: EpType, ip: IpAddr) -> Info {
    let mut i = fabric::info::core_candidate(
        "tcp",
        Tcp::VERSION,
        ep_type,
        INJECT_SIZE,
        MAX_MSG_SIZE,
        1 << 12,
    );
    i.addr_format = if ip.is_ipv4() {
        AddrFormat::SockaddrIn
    } else {
        AddrFormat::SockaddrIn6
    };
    // Peers may be on other hosts.
    i.caps |= Caps::REMOTE_COMM;
    i.tx_attr.caps |= Caps::REMOTE_COMM;
    i.rx_attr.caps |= Caps::REMOTE_COMM;
    i.domain_attr.caps |= Caps::REMOTE_COMM;
    i
}

impl Provider for Tcp {
    const NAME: &'static str = "tcp";
    const VERSION: u32 = 1 << 16;
    type InjectSize = InjectSize;
    const MAX_MSG_SIZE: usize = MAX_MSG_SIZE;

    type Peer = TcpPeer;
    type Transport = TcpEp;

    fn candidates() -> Vec<Info> {
        match local_addr() {
            // MSG last: the first info, what applications without hints take, stays
            // RDM. A connection has one peer and no AV: no source addresses to
            // report, no receive filtered by source, no receive contexts or AVs to
            // name or share.
            Ok(ip) => {
                let mut msg = candidate(EpType::Msg, ip);
                let no_av =
                    Caps::SOURCE | Caps::DIRECTED_RECV | Caps::NAMED_RX_CTX | Caps::SHARED_AV;
                msg.caps.remove(no_av);
                msg.tx_attr.caps.remove(no_av);
                msg.rx_attr.caps.remove(no_av);
                vec![candidate(EpType::Rdm, ip), msg]
            }
            Err(_) => Vec::new(),
        }
    }

    fn open(info: &Info) -> Result<TcpEp> {
        let at = match &info.src_addr {
            Some(src) => name::decode_source(src)?,
            None => SocketAddr::new(local_addr()?, 0),
        };
        match info.ep_attr.ep_type {
            EpType::Msg => TcpEp::open_msg(at),
            _ => TcpEp::open(at),
        }
    }

    fn resolve(name: &[u8]) -> Result<TcpPeer> {
        let n = Name::decode(name)?;
        Ok(TcpPeer {
            name: n,
            raw: n.raw(),
        })
    }

    fn name_from_svc(node: &str, service: &str) -> Result<Vec<u8>> {
        let port: u16 = service.trim().parse().map_err(|_| Error::Inval)?;
        if port == 0 {
            return Err(Error::Inval);
        }
        let addr = if node.is_empty() {
            SocketAddr::new(local_addr()?, port)
        } else {
            let all: Vec<SocketAddr> = (node, port)
                .to_socket_addrs()
                .map_err(|_| Error::AddrNotAvail)?
                .collect();
            *all.iter()
                .find(|a| a.is_ipv4())
                .or(all.first())
                .ok_or(Error::AddrNotAvail)?
        };
        Ok(Name { addr, nonce: 0 }.raw().as_bytes().to_vec())
    }

    fn source_from_svc(node: &str, service: &str) -> Result<Vec<u8>> {
        let port: u16 = match service.trim() {
            "" => 0,
            s => s.parse().map_err(|_| Error::Inval)?,
        };
        let ip = if node.is_empty() {
            local_addr()?
        } else {
            match node.parse::<IpAddr>() {
                Ok(ip) => ip,
                Err(_) => (node, 0)
                    .to_socket_addrs()
                    .map_err(|_| Error::AddrNotAvail)?
                    .map(|a| a.ip())
                    .find(|ip| iface_addr(&ip.to_string()).is_ok())
                    .ok_or(Error::AddrNotAvail)?,
            }
        };
        // Only an address of this host can be bound.
        iface_addr(&ip.to_string())?;
        Ok(Name {
            addr: SocketAddr::new(ip, port),
            nonce: 0,
        }
        .raw()
        .as_bytes()
        .to_vec())
    }

    fn straddr(name: &[u8]) -> String {
        match Name::decode(name) {
            Ok(n) => n.to_url(),
            Err(_) => format!("fi_sockaddr://invalid({} bytes)", name.len()),
        }
    }
}
