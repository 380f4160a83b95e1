//! `fabric-loopback`: the in-process provider, and the reference semantics the other
//! providers are tested against.
//!
//! Every endpoint owns an inbox; a send copies the packet into the destination's inbox
//! (any endpoint of the process, any thread), and the destination's progress drains it.
//! Everything above the transport (matching, RMA, atomics, completions) is the core's.
//!
//! ```
//! use fabric::prelude::*;
//! use fabric_loopback::Loopback;
//! let infos = getinfo::<Stack<Loopback>>(None).unwrap();
//! assert!(infos.iter().all(|i| i.fabric_attr.prov_name == "loopback"));
//! ```
#![deny(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError, Weak};

use fabric::attr::{
    AddrFormat, DomainAttr, EpAttr, EpType, FabricAttr, ResourceMgmt, RxAttr, TxAttr,
};
use fabric::flags::{Caps, Mode, MrMode, Order};
use fabric::waitobj::Waiter;
use fabric::wire::{Header, Op};
use fabric::{Error, Info, Provider, Result, Transport};

/// Largest `inject` payload, as a type ([`Provider::InjectSize`]).
pub type InjectSize = fabric::typenum::U4096;
/// Largest `inject` payload.
pub const INJECT_SIZE: usize = <InjectSize as fabric::typenum::Unsigned>::USIZE;
/// Largest message.
pub const MAX_MSG_SIZE: usize = 64 << 20;
/// Requests an inbox holds before senders see `FI_EAGAIN`.
pub const INBOX_DEPTH: usize = 4096;
/// Bytes of a loopback address.
pub const NAME_LEN: usize = 8;

/// The loopback provider marker.
pub enum Loopback {}

struct Packet {
    hdr: Header,
    src: [u8; NAME_LEN],
    payload: Vec<u8>,
}

#[derive(Default)]
struct Queue {
    packets: VecDeque<Packet>,
    free: Vec<Vec<u8>>,
    requests: usize,
}

/// An endpoint's inbox: the one shared structure of this provider.
pub struct Inbox {
    id: u64,
    q: Mutex<Queue>,
    waker: OnceLock<Arc<Waiter>>,
    closed: AtomicBool,
    /// Held by the one thread draining the inbox, so packets are handled in arrival
    /// order even when several threads progress the same endpoint.
    poller: Mutex<()>,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn is_request(op: u8) -> bool {
    !matches!(
        Op::from_raw(op),
        Some(Op::Ack | Op::ReadResp | Op::AtomicResp)
    )
}

fn registry() -> MutexGuard<'static, HashMap<u64, Weak<Inbox>>> {
    static REG: OnceLock<Mutex<HashMap<u64, Weak<Inbox>>>> = OnceLock::new();
    REG.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The per-endpoint transport of the loopback provider.
pub struct LoopbackEp {
    inbox: Arc<Inbox>,
    name: [u8; NAME_LEN],
}

impl Transport for LoopbackEp {
    type Peer = Arc<Inbox>;

    fn name(&self) -> &[u8] {
        &self.name
    }

    #[inline]
    fn send(&self, to: &Arc<Inbox>, hdr: &Header, payload: &[&[u8]]) -> Result<()> {
        if to.closed.load(Ordering::Acquire) {
            return Err(Error::HostUnreach);
        }
        let req = is_request(hdr.op);
        {
            let mut q = to.lock();
            // Responses bypass the depth limit: they are bounded by the initiator's own
            // transmit queue, and refusing one would lose a completion.
            if req && q.requests >= INBOX_DEPTH {
                return Err(Error::Again);
            }
            let mut buf = q.free.pop().unwrap_or_default();
            buf.clear();
            for p in payload {
                buf.extend_from_slice(p);
            }
            q.requests += req as usize;
            q.packets.push_back(Packet {
                hdr: *hdr,
                src: self.name,
                payload: buf,
            });
        }
        if let Some(w) = to.waker.get() {
            w.signal();
        }
        Ok(())
    }

    #[inline]
    fn poll<F: FnMut(&Header, &[u8], &[u8]) -> bool>(&self, mut f: F) -> usize {
        // Another thread is draining: it will hand over every packet in order.
        let _draining = match self.inbox.poller.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return 0,
        };
        let mut n = 0;
        loop {
            // The lock is not held while the core handles a packet: handling may send to
            // this same inbox (an endpoint talking to itself).
            let Some(p) = self.inbox.lock().packets.pop_front() else {
                break;
            };
            if !f(&p.hdr, &p.src, &p.payload) {
                self.inbox.lock().packets.push_front(p);
                break;
            }
            n += 1;
            let mut q = self.inbox.lock();
            q.requests -= is_request(p.hdr.op) as usize;
            q.free.push(p.payload);
        }
        n
    }

    fn set_waker(&self, waker: Arc<Waiter>) {
        let _ = self.inbox.waker.set(waker);
    }

    fn shutdown(&self) {
        self.inbox.closed.store(true, Ordering::Release);
        registry().remove(&self.inbox.id);
    }
}

impl Drop for LoopbackEp {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn candidate(ep_type: EpType) -> Info {
    let caps = Caps::MSG
        | Caps::TAGGED
        | Caps::RMA
        | Caps::ATOMIC
        | Caps::SEND
        | Caps::RECV
        | Caps::READ
        | Caps::WRITE
        | Caps::REMOTE_READ
        | Caps::REMOTE_WRITE
        | Caps::MULTI_RECV
        | Caps::TRIGGER
        | Caps::FENCE
        | Caps::RMA_EVENT
        | Caps::SOURCE
        | Caps::DIRECTED_RECV
        | Caps::NAMED_RX_CTX
        | Caps::SHARED_AV
        | Caps::LOCAL_COMM;
    Info {
        caps,
        mode: Mode::empty(),
        addr_format: AddrFormat::Proto,
        src_addr: None,
        dest_addr: None,
        tx_attr: TxAttr {
            caps,
            msg_order: Order::STRICT,
            comp_order: Order::STRICT,
            inject_size: INJECT_SIZE,
            size: 1024,
            iov_limit: fabric::mem::IOV_LIMIT,
            rma_iov_limit: 1,
            ..TxAttr::default()
        },
        rx_attr: RxAttr {
            caps,
            msg_order: Order::STRICT,
            comp_order: Order::STRICT,
            size: 1024,
            iov_limit: fabric::mem::IOV_LIMIT,
            ..RxAttr::default()
        },
        ep_attr: EpAttr {
            ep_type,
            max_msg_size: MAX_MSG_SIZE,
            mem_tag_format: u64::MAX,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            max_order_raw_size: MAX_MSG_SIZE,
            max_order_war_size: MAX_MSG_SIZE,
            max_order_waw_size: MAX_MSG_SIZE,
            ..EpAttr::default()
        },
        domain_attr: DomainAttr {
            name: "loopback",
            resource_mgmt: ResourceMgmt::Enabled,
            mr_mode: MrMode::empty(),
            mr_key_size: 8,
            cq_data_size: 8,
            cq_cnt: 1 << 16,
            ep_cnt: 1 << 16,
            tx_ctx_cnt: 1 << 16,
            rx_ctx_cnt: 1 << 16,
            max_ep_tx_ctx: 16,
            max_ep_rx_ctx: 16,
            max_ep_stx_ctx: 1,
            max_ep_srx_ctx: 1,
            cntr_cnt: 1 << 16,
            mr_iov_limit: 4,
            mr_cnt: 1 << 20,
            caps: Caps::LOCAL_COMM,
            ..DomainAttr::default()
        },
        fabric_attr: FabricAttr {
            name: "loopback",
            prov_name: "loopback",
            prov_version: Loopback::VERSION,
            api_version: (1 << 16) | 17,
        },
    }
}

impl Provider for Loopback {
    const NAME: &'static str = "loopback";
    const VERSION: u32 = 1 << 16;
    type InjectSize = InjectSize;
    const MAX_MSG_SIZE: usize = MAX_MSG_SIZE;

    type Peer = Arc<Inbox>;
    type Transport = LoopbackEp;

    fn candidates() -> Vec<Info> {
        vec![candidate(EpType::Rdm), candidate(EpType::Dgram)]
    }

    fn open(_info: &Info) -> Result<LoopbackEp> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let inbox = Arc::new(Inbox {
            id,
            q: Mutex::new(Queue::default()),
            waker: OnceLock::new(),
            closed: AtomicBool::new(false),
            poller: Mutex::new(()),
        });
        registry().insert(id, Arc::downgrade(&inbox));
        Ok(LoopbackEp {
            inbox,
            name: id.to_le_bytes(),
        })
    }

    fn resolve(name: &[u8]) -> Result<Arc<Inbox>> {
        let id: [u8; NAME_LEN] = name.try_into().map_err(|_| Error::Inval)?;
        registry()
            .get(&u64::from_le_bytes(id))
            .and_then(Weak::upgrade)
            .ok_or(Error::AddrNotAvail)
    }

    fn name_from_svc(node: &str, service: &str) -> Result<Vec<u8>> {
        if !matches!(node, "" | "loopback" | "localhost") {
            return Err(Error::AddrNotAvail);
        }
        let id: u64 = service.parse().map_err(|_| Error::Inval)?;
        Ok(id.to_le_bytes().to_vec())
    }

    fn straddr(name: &[u8]) -> String {
        match <[u8; NAME_LEN]>::try_from(name) {
            Ok(b) => format!("fi_loopback://{}", u64::from_le_bytes(b)),
            Err(_) => format!("fi_loopback://invalid({} bytes)", name.len()),
        }
    }
}
