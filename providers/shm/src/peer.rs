//! Resolved peers: a peer endpoint's region mapped into this process, cached per
//! process so every endpoint talking to it shares one mapping, plus what tells
//! whether the peer is still there.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use fabric::waitobj::Waiter;
use fabric::{Error, Result};
use rustc_hash::FxHashMap;

use crate::direct::PeerDir;
use crate::name::{Name, NAME_LEN};
use crate::region::Region;
use crate::stage::StageMap;
use crate::sys::{self, ProcessHandle};

/// How often, at most, [`PeerRegion::gone_lately`] asks the kernel.
pub const ASK_PERIOD: Duration = Duration::from_millis(1);

/// What endpoints of this process share with their in-process peers: the waiter to
/// wake after a send.
#[derive(Default)]
pub struct Local {
    /// The endpoint's doorbell, once the core installed it.
    pub waker: OnceLock<Arc<Waiter>>,
}

/// A peer endpoint as seen by this process ([`fabric::Provider::Peer`]).
pub struct PeerRegion {
    /// The peer's region, mapped.
    pub region: Region,
    /// The peer's address.
    pub name: Name,
    /// The peer's address, wire form.
    pub raw: [u8; NAME_LEN],
    /// The peer's process, when it is another process.
    proc: Option<ProcessHandle>,
    /// The peer's shared state, when it lives in this process.
    pub local: Option<Arc<Local>>,
    /// Set once the peer was seen dead: later sends fail at once.
    dead: AtomicBool,
    /// When [`Self::gone_lately`] last asked the kernel: nanoseconds since [`epoch`]
    /// plus one (0: never).
    asked: AtomicU64,
    /// The peer's staging files (near, far), mapped on first use.
    pub stage: [OnceLock<Result<StageMap>>; 2],
    /// The file the peer stages withdrawn rendezvous payloads in (see `rndv`): its
    /// descriptor in the peer and the mapping, on first use.
    pub rndv_file: OnceLock<Result<(u32, StageMap)>>,
    /// Whether the peer's process may read our memory with cross-memory attach, as far
    /// as we learned it ([`CmaReads`] as a byte).
    cma_reads: AtomicU8,
    /// The peer process's mapped-segment directory, mapped on first direct access
    /// (`None`: it has none that maps).
    pub direct: OnceLock<Option<Arc<PeerDir>>>,
}

/// Whether a peer's process may read ours with cross-memory attach: a ptrace policy
/// (Yama) may refuse it between processes that may each read themselves, so only the
/// peer's own reads tell (see `rndv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmaReads {
    /// Not known yet: nothing the peer must read after the sender returned is left in
    /// private memory.
    Unknown = 0,
    /// The peer read our memory.
    Yes = 1,
    /// The kernel refused the peer a read of our memory.
    No = 2,
}

impl PeerRegion {
    /// Whether the peer's process may read our memory with cross-memory attach. A peer
    /// in this process reads its own memory, which works wherever the attach does.
    #[inline]
    pub fn cma_reads(&self) -> CmaReads {
        if self.local.is_some() {
            return CmaReads::Yes;
        }
        match self.cma_reads.load(Ordering::Relaxed) {
            1 => CmaReads::Yes,
            2 => CmaReads::No,
            _ => CmaReads::Unknown,
        }
    }

    /// Records what a read by the peer showed. A refusal stands once seen: a peer
    /// refused once is not trusted with private memory again.
    pub fn set_cma_reads(&self, yes: bool) {
        if yes {
            let _ = self.cma_reads.compare_exchange(
                CmaReads::Unknown as u8,
                CmaReads::Yes as u8,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else {
            self.cma_reads.store(CmaReads::No as u8, Ordering::Relaxed);
        }
    }

    /// Whether the peer closed its endpoint or its process is gone. Costs system
    /// calls for another process: for slow paths only.
    pub fn gone(&self) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return true;
        }
        let gone = self.region.closed()
            || match &self.proc {
                Some(p) => !p.alive(),
                None => self
                    .local
                    .as_ref()
                    .is_some_and(|l| Arc::strong_count(l) == 1),
            };
        if gone {
            self.dead.store(true, Ordering::Relaxed);
        }
        gone
    }

    /// [`Self::gone`] for a sender that the peer's full ring refuses, which may retry
    /// in a tight loop: the system calls at most once per [`ASK_PERIOD`] (a peer seen
    /// dead or a closed region still answer at once). A full ring is backpressure
    /// far more often than a dead peer, and every ask costs microseconds.
    pub fn gone_lately(&self) -> bool {
        if self.known_dead() || self.region.closed() {
            return self.gone();
        }
        let now = epoch().elapsed().as_nanos() as u64 + 1;
        let last = self.asked.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < ASK_PERIOD.as_nanos() as u64 {
            return false;
        }
        self.asked.store(now, Ordering::Relaxed);
        self.gone()
    }

    /// Whether the peer's process is gone (never for a peer of this process: a
    /// thread of ours that is in a call finishes it). Costs system calls.
    pub fn process_gone(&self) -> bool {
        self.proc.as_ref().is_some_and(|p| !p.alive())
    }

    /// Whether the peer is known dead (one load).
    #[inline]
    pub fn known_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }
}

/// The instant [`PeerRegion::gone_lately`] counts from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn peers() -> MutexGuard<'static, FxHashMap<u64, Arc<PeerRegion>>> {
    static PEERS: OnceLock<Mutex<FxHashMap<u64, Arc<PeerRegion>>>> = OnceLock::new();
    PEERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn locals() -> MutexGuard<'static, FxHashMap<u64, Weak<Local>>> {
    static LOCALS: OnceLock<Mutex<FxHashMap<u64, Weak<Local>>>> = OnceLock::new();
    LOCALS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Registers an endpoint of this process, so in-process peers can wake it.
pub fn register_local(nonce: u64, local: &Arc<Local>) {
    locals().insert(nonce, Arc::downgrade(local));
}

/// Forgets an endpoint of this process.
pub fn unregister_local(nonce: u64) {
    locals().remove(&nonce);
    peers().remove(&nonce);
}

thread_local! {
    /// The peer this thread resolved last. A target answers the same initiator over and
    /// over (every response resolves its requester's address), and this skips the
    /// process-wide lock and table for it. It holds at most one mapping per thread, and
    /// is passed over once the peer is known dead or closed its endpoint.
    static LAST: RefCell<Option<Arc<PeerRegion>>> = const { RefCell::new(None) };
}

/// Resolves a peer address, mapping its region on first use.
#[inline]
pub fn resolve(raw: &[u8]) -> Result<Arc<PeerRegion>> {
    let raw: &[u8; NAME_LEN] = raw.try_into().map_err(|_| Error::Inval)?;
    // Compared in wire form: `encode` and `decode` are inverse on valid names, so equal
    // bytes are the same, valid, name, and the hit skips parsing it.
    let hit = LAST.with_borrow(|last| {
        last.as_ref()
            .filter(|p| p.raw == *raw && !p.known_dead() && !p.region.closed())
            .cloned()
    });
    match hit {
        Some(p) => Ok(p),
        None => resolve_miss(raw),
    }
}

/// [`resolve`] past the thread's last peer.
#[cold]
#[inline(never)]
fn resolve_miss(raw: &[u8; NAME_LEN]) -> Result<Arc<PeerRegion>> {
    let p = resolve_shared(Name::decode(raw)?)?;
    LAST.set(Some(p.clone()));
    Ok(p)
}

/// [`resolve`] through the process-wide table.
fn resolve_shared(name: Name) -> Result<Arc<PeerRegion>> {
    {
        let map = peers();
        if let Some(p) = map.get(&name.nonce) {
            if p.name == name && !p.known_dead() {
                return Ok(p.clone());
            }
        }
    }
    let local = if name.pid == sys::getpid() {
        Some(
            locals()
                .get(&name.nonce)
                .and_then(Weak::upgrade)
                .ok_or(Error::AddrNotAvail)?,
        )
    } else {
        None
    };
    let proc = match local {
        Some(_) => None,
        None => Some(ProcessHandle::open(name.pid, name.start)?),
    };
    let region = Region::open(&name)?;
    let p = Arc::new(PeerRegion {
        region,
        name,
        raw: name.encode(),
        proc,
        local,
        dead: AtomicBool::new(false),
        asked: AtomicU64::new(0),
        stage: [OnceLock::new(), OnceLock::new()],
        rndv_file: OnceLock::new(),
        cma_reads: AtomicU8::new(CmaReads::Unknown as u8),
        direct: OnceLock::new(),
    });
    let mut map = peers();
    // Drop mappings of peers that are gone and that nobody uses any more.
    map.retain(|_, q| Arc::strong_count(q) > 1 || !(q.known_dead() || q.region.closed()));
    map.insert(name.nonce, p.clone());
    Ok(p)
}

/// The cached resolution of endpoint `nonce`, if any.
pub fn cached(nonce: u64) -> Option<Arc<PeerRegion>> {
    peers().get(&nonce).cloned()
}
