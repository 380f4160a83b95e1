//! `fabric-hybrid`: one endpoint, one AV, one CQ and the core's one matching engine
//! over two providers: shared memory ([`fabric_shm::Shm`]) to the peers on this node,
//! tcp ([`fabric_tcp::Tcp`]) to the others ([`ShmTcp`]).
//!
//! **Names.** An endpoint's name ([`name`]) carries both halves' names and the node
//! the endpoint runs on ([`node`]: the kernel's boot id, the network, pid and user
//! namespaces and the user, or `FABRIC_HYBRID_NODE`). Names come from `fi_getname`
//! and travel out of band; none is made from a node and service.
//!
//! **Peers** are resolved at AV insert ([`Provider::resolve`]): a peer on the same
//! node as this process to the local half, any other to the remote one, as the
//! [`Locality`] parameter decides ([`Host`] by default; [`Elsewhere`] sends every peer
//! through the remote half). The resolved [`Peer`] is an enum, and a send is one match
//! on it followed by the half's own send: no table of functions, no other test. Each
//! pair of endpoints uses one half per direction, so per-peer order is the half's.
//! Packets arrive with the half's name of their sender as source address; the AV
//! knows both halves' names of every peer it holds ([`Provider::aliases`]), so
//! `FI_SOURCE` and directed receives work across both halves, and a response goes back
//! through the half its request came through.
//!
//! **Capabilities** are what both halves offer (RDM endpoints only: shm has no MSG
//! endpoints, tcp no DGRAM ones), plus local and remote communication. Direct access
//! (shm's mapped segments), held-back packets, claims (tcp's large payloads read
//! straight into place) and wake-ups (either half's arrivals wake a sleeper) are each
//! half's own, passed through.
//!
//! **Progress** polls the local half every time and the remote half, whose poll is a
//! system call, every time only while it is in use (see [`transport`]).
//!
//! ```
//! use fabric::prelude::*;
//! use fabric_hybrid::ShmTcp;
//! let infos = getinfo::<Stack<ShmTcp>>(None).unwrap();
//! assert!(infos.iter().all(|i| i.fabric_attr.prov_name == "hybrid"));
//! ```
#![deny(unsafe_code)]

pub mod name;
pub mod node;
pub mod transport;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use fabric::attr::EpType;
use fabric::flags::Caps;
use fabric::{Error, Info, NoPull, Provider, Result, Transport};
use fabric_shm::Shm;
use fabric_tcp::Tcp;

pub use name::Name;
pub use node::{this_node, NODE_ENV, NODE_LEN};
pub use transport::{HybridEp, HybridRx, HybridTx, Peer, COLD_STRIDE, HOT_POLLS};

/// A provider that can be a half of a [`Hybrid`]: it tells its own names apart, so a
/// response can go back through the half its request came through.
pub trait Half: Provider {
    /// Whether `name` is a raw address of this provider (one its transport hands on
    /// as a packet's source).
    fn owns(name: &[u8]) -> bool;
}

impl Half for Shm {
    #[inline]
    fn owns(name: &[u8]) -> bool {
        fabric_shm::name::Name::decode(name).is_ok()
    }
}

impl Half for Tcp {
    #[inline]
    fn owns(name: &[u8]) -> bool {
        fabric_tcp::Name::decode(name).is_ok()
    }
}

/// Decides, at AV insert, whether a peer is reached through the local half.
pub trait Locality: Send + Sync + 'static {
    /// Whether a peer whose name carries the node identity `node` is on this node.
    fn is_local(node: &[u8]) -> bool;
}

/// Peers on this node ([`this_node`]) through the local half, others through the
/// remote one.
pub enum Host {}

impl Locality for Host {
    fn is_local(node: &[u8]) -> bool {
        this_node().is_ok_and(|me| me == node)
    }
}

/// Every peer through the remote half, even in this process: the network path
/// between endpoints of one node (tests, measurements).
pub enum Elsewhere {}

impl Locality for Elsewhere {
    fn is_local(_: &[u8]) -> bool {
        false
    }
}

/// The composed provider: `L` to the peers on this node, `R` to the others, as `N`
/// decides.
pub struct Hybrid<L, R, N = Host>(PhantomData<(L, R, N)>);

/// Shared memory inside the node, tcp between nodes.
pub type ShmTcp = Hybrid<Shm, Tcp>;

static LOCAL_PEERS: AtomicU64 = AtomicU64::new(0);
static REMOTE_PEERS: AtomicU64 = AtomicU64::new(0);
pub(crate) static REMOTE_PACKETS: AtomicU64 = AtomicU64::new(0);

/// What the composed provider did in this process so far (a diagnostic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Peers resolved to the local half.
    pub local_peers: u64,
    /// Peers resolved to the remote half.
    pub remote_peers: u64,
    /// Packets received through the remote half.
    pub remote_packets: u64,
}

/// The counts of this process ([`Stats`]).
pub fn stats() -> Stats {
    Stats {
        local_peers: LOCAL_PEERS.load(Ordering::Relaxed),
        remote_peers: REMOTE_PEERS.load(Ordering::Relaxed),
        remote_packets: REMOTE_PACKETS.load(Ordering::Relaxed),
    }
}

const fn min(a: usize, b: usize) -> usize {
    if a < b {
        a
    } else {
        b
    }
}

/// The communication scopes: what the composition adds to its halves.
const SCOPES: Caps = Caps::LOCAL_COMM.union(Caps::REMOTE_COMM);

impl<L: Half, R: Half<InjectSize = L::InjectSize>, N: Locality> Provider for Hybrid<L, R, N>
where
    R::Transport: Transport<Pull = NoPull>,
{
    const NAME: &'static str = "hybrid";
    const VERSION: u32 = 1 << 16;
    type InjectSize = L::InjectSize;
    const MAX_MSG_SIZE: usize = min(L::MAX_MSG_SIZE, R::MAX_MSG_SIZE);

    type Peer = Peer<L::Peer, R::Peer>;
    type Transport = HybridEp<L, R>;

    /// One RDM info, with the capabilities both halves' RDM infos have (and both
    /// communication scopes); none when either half has none.
    fn candidates() -> Vec<Info> {
        let rdm = |c: Vec<Info>| c.into_iter().find(|i| i.ep_attr.ep_type == EpType::Rdm);
        let (Some(l), Some(r)) = (rdm(L::candidates()), rdm(R::candidates())) else {
            return Vec::new();
        };
        let mut i = fabric::info::core_candidate(
            Self::NAME,
            Self::VERSION,
            EpType::Rdm,
            Self::INJECT_SIZE,
            Self::MAX_MSG_SIZE,
            min(l.domain_attr.ep_cnt, r.domain_attr.ep_cnt),
        );
        let both = |a: Caps, b: Caps, c: Caps| (a & b & c) | ((a | b | c) & SCOPES);
        i.caps = both(i.caps, l.caps, r.caps);
        i.tx_attr.caps = both(i.tx_attr.caps, l.tx_attr.caps, r.tx_attr.caps);
        i.rx_attr.caps = both(i.rx_attr.caps, l.rx_attr.caps, r.rx_attr.caps);
        i.domain_attr.caps = both(i.domain_attr.caps, l.domain_attr.caps, r.domain_attr.caps);
        i.tx_attr.msg_order &= l.tx_attr.msg_order & r.tx_attr.msg_order;
        i.rx_attr.msg_order &= l.rx_attr.msg_order & r.rx_attr.msg_order;
        i.rx_attr.comp_order &= l.rx_attr.comp_order & r.rx_attr.comp_order;
        vec![i]
    }

    /// Opens both halves. A `src_addr` must be a name of this provider: the remote
    /// half binds to its part (the local half's addresses are not chosen).
    fn open(info: &Info) -> Result<HybridEp<L, R>> {
        if info.ep_attr.ep_type != EpType::Rdm {
            return Err(Error::NotSupported);
        }
        let node = this_node()?;
        let mut inner = info.clone();
        inner.dest_addr = None;
        inner.src_addr = None;
        let local = L::open(&inner)?;
        if let Some(src) = &info.src_addr {
            inner.src_addr = Some(Name::decode(src)?.remote.to_vec());
        }
        let remote = R::open(&inner)?;
        let name = Name {
            node,
            local: local.name(),
            remote: remote.name(),
        }
        .encode()?;
        Ok(HybridEp::new(local, remote, name))
    }

    fn resolve(name: &[u8]) -> Result<Self::Peer> {
        let n = Name::decode(name)?;
        if N::is_local(n.node) {
            let p = L::resolve(n.local)?;
            LOCAL_PEERS.fetch_add(1, Ordering::Relaxed);
            Ok(Peer::Local(p))
        } else {
            let p = R::resolve(n.remote)?;
            REMOTE_PEERS.fetch_add(1, Ordering::Relaxed);
            Ok(Peer::Remote(p))
        }
    }

    /// Both halves' names: a peer's packets arrive under one of them.
    fn aliases(name: &[u8]) -> Vec<Box<[u8]>> {
        match Name::decode(name) {
            Ok(n) => vec![n.local.into(), n.remote.into()],
            Err(_) => Vec::new(),
        }
    }

    fn name_from_svc(_node: &str, _service: &str) -> Result<Vec<u8>> {
        // A name carries the local half's opaque address, which no node and service
        // give.
        Err(Error::NoSys)
    }

    fn straddr(name: &[u8]) -> String {
        match Name::decode(name) {
            Ok(n) => format!(
                "fi_hybrid://{}/{}/{}",
                n.node
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
                L::straddr(n.local),
                R::straddr(n.remote)
            ),
            Err(_) => format!("fi_hybrid://invalid({} bytes)", name.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::prelude::*;

    #[test]
    fn candidates_are_rdm_with_both_scopes() {
        let c = ShmTcp::candidates();
        assert_eq!(c.len(), 1);
        let i = &c[0];
        assert_eq!(i.ep_attr.ep_type, EpType::Rdm);
        assert!(i
            .caps
            .contains(SCOPES | Caps::TAGGED | Caps::RMA | Caps::ATOMIC));
        assert!(i.caps.contains(Caps::DIRECTED_RECV | Caps::SOURCE));
        assert_eq!(
            i.tx_attr.inject_size,
            fabric_shm::INJECT_SIZE.min(fabric_tcp::INJECT_SIZE)
        );
        assert_eq!(
            i.ep_attr.max_msg_size,
            fabric_shm::MAX_MSG_SIZE.min(fabric_tcp::MAX_MSG_SIZE)
        );
        // Neither MSG (shm has none) nor DGRAM (tcp has none).
        for t in [EpType::Msg, EpType::Dgram] {
            let h = Hints::new().ep_type(t);
            assert!(getinfo::<Stack<ShmTcp>>(Some(&h)).is_err());
        }
    }

    #[test]
    fn resolution_follows_the_node() {
        let info = getinfo::<Stack<ShmTcp>>(None).unwrap().remove(0);
        let ep = ShmTcp::open(&info).unwrap();
        let name = ep.name().to_vec();
        let n = Name::decode(&name).unwrap();
        assert_eq!(n.node, this_node().unwrap());
        assert!(Shm::owns(n.local) && !Shm::owns(n.remote));
        assert!(Tcp::owns(n.remote) && !Tcp::owns(n.local));
        assert!(ShmTcp::resolve(&name).unwrap().is_local());
        assert!(!Hybrid::<Shm, Tcp, Elsewhere>::resolve(&name)
            .unwrap()
            .is_local());
        // Another node's name goes to tcp, with the same halves' names.
        let other = Name {
            node: b"elsewhere",
            ..n
        }
        .encode()
        .unwrap();
        assert!(!ShmTcp::resolve(&other).unwrap().is_local());
        assert_eq!(
            ShmTcp::aliases(&other),
            vec![Box::from(n.local), Box::from(n.remote)]
        );
        assert_eq!(ShmTcp::resolve(n.local).err(), Some(Error::Inval));
        assert!(ShmTcp::straddr(&name).starts_with("fi_hybrid://"));
        assert_eq!(ShmTcp::name_from_svc("h", "1").err(), Some(Error::NoSys));
    }
}
