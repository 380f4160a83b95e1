//! Resolved peers: a peer endpoint's region mapped into this process, cached per
//! process so every endpoint talking to it shares one mapping, plus what tells
//! whether the peer is still there.
//!
//! Liveness of another process is read from its lifeline (`sys::Lifeline`), mapped
//! read-only once per peer process: one load, no system call, whatever the number of
//! peers. A peer reads dead from the moment its threads ended, which the kernel
//! completes before the process can be reaped: once `waitpid` returned for it, every
//! later check sees it dead. Where a peer has no lifeline (a C library whose mutex
//! layout is unknown) the kernel is asked instead, at most once per [`ASK_PERIOD`] on
//! the paths that check often.
//!
//! A peer seen gone leaves the process-wide cache and the calling thread's last
//! resolution at once, so its mappings go as soon as no endpoint or address vector
//! still holds it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use fabric::waitobj::Waiter;
use fabric::{Error, Result};
use rustc_hash::FxHashMap;

use crate::layout::directory::PeerDir;
use crate::layout::region::Region;
use crate::layout::sys::{self, PeerLifeline, ProcessHandle, ReadOnlyMapping};
use crate::name::{Name, NAME_LEN};

/// How often, at most, [`PeerRegion::gone_lately`] asks the kernel about a peer
/// without a lifeline.
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
    /// What tells whether the peer's process lives.
    life: Life,
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
}

/// What tells whether a peer's process lives.
enum Life {
    /// A peer in this process: it lives as long as its endpoint ([`PeerRegion::local`]).
    Local,
    /// Another process's lifeline, shared by all its endpoints.
    Line(Arc<PeerLifeline>),
    /// Another process without a lifeline: asked of the kernel.
    Proc(ProcessHandle),
}

impl PeerRegion {
    /// Whether the peer closed its endpoint or its process is gone. A few loads,
    /// except for another process without a lifeline, which costs system calls.
    #[inline]
    pub fn gone(&self) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return true;
        }
        let gone = self.region.closed()
            || match &self.life {
                Life::Line(l) => !l.alive(),
                Life::Proc(p) => !p.alive(),
                Life::Local => self
                    .local
                    .as_ref()
                    .is_none_or(|l| Arc::strong_count(l) == 1),
            };
        if gone && !self.dead.swap(true, Ordering::Relaxed) {
            release(self);
        }
        gone
    }

    /// [`Self::gone`] for a caller that may ask in a tight loop (a sender that the
    /// peer's full ring refuses, the direct path on every operation): a peer without a
    /// lifeline is asked of the kernel at most once per `ASK_PERIOD` (a peer seen
    /// dead or a closed region still answer at once).
    #[inline]
    pub fn gone_lately(&self) -> bool {
        match &self.life {
            Life::Proc(_) => self.gone_asking(),
            _ => self.gone(),
        }
    }

    /// [`Self::gone_lately`] of a peer without a lifeline.
    #[cold]
    fn gone_asking(&self) -> bool {
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
    /// thread of ours that is in a call finishes it).
    pub fn process_gone(&self) -> bool {
        match &self.life {
            Life::Local => false,
            Life::Line(l) => !l.alive(),
            Life::Proc(p) => !p.alive(),
        }
    }

    /// Whether the peer is known dead (one load).
    #[inline]
    pub fn known_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }
}

/// Drops the process-wide cache's and this thread's hold on `p`, seen gone: its
/// mappings go once the endpoints and address vectors that hold it let go.
#[cold]
fn release(p: &PeerRegion) {
    let mine = |q: &Arc<PeerRegion>| std::ptr::eq(Arc::as_ptr(q), p);
    // Taken out under the lock, dropped after it: a last reference unmaps.
    let cached = {
        let mut map = peers();
        match map.get(&p.name.nonce) {
            Some(q) if mine(q) => map.remove(&p.name.nonce),
            _ => None,
        }
    };
    let last = LAST
        .try_with(|l| {
            l.try_borrow_mut()
                .ok()
                .and_then(|mut l| l.take_if(|q| mine(q)))
        })
        .ok()
        .flatten();
    drop((cached, last));
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
    let life = match local {
        Some(_) => Life::Local,
        None => process_life(&name)?,
    };
    let region = Region::open(&name)?;
    let life = match (life, region.lifeline()) {
        (Life::Proc(p), Some((fd, tid))) => match lifeline(&name, fd, tid) {
            Ok(l) => Life::Line(l),
            // A lifeline that reads dead: so is the process (a bad one only says
            // its owner is dead).
            Err(_) if !p.alive() => return Err(Error::AddrNotAvail),
            Err(_) => Life::Proc(p),
        },
        (life, _) => life,
    };
    let p = Arc::new(PeerRegion {
        region,
        name,
        raw: name.encode(),
        life,
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

/// A handle on the process `name` names, if it is alive and the one that started
/// then (a reused pid is refused).
fn process_life(name: &Name) -> Result<Life> {
    Ok(Life::Proc(ProcessHandle::open(name.pid, name.start)?))
}

/// The lifeline of `name`'s process (descriptor `fd`, thread `tid`), mapped once per
/// process and shared by its endpoints; `AddrNotAvail` unless it reads alive.
fn lifeline(name: &Name, fd: u32, tid: u32) -> Result<Arc<PeerLifeline>> {
    type Lines = FxHashMap<(u32, u64), Weak<PeerLifeline>>;
    static LINES: OnceLock<Mutex<Lines>> = OnceLock::new();
    let mut lines = LINES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let key = (name.pid, name.start);
    if let Some(l) = lines.get(&key).and_then(Weak::upgrade) {
        if l.alive() {
            return Ok(l);
        }
    }
    let l = Arc::new(PeerLifeline::open(name.pid, fd, tid)?);
    if !l.alive() {
        return Err(Error::AddrNotAvail);
    }
    lines.retain(|_, w| w.strong_count() > 0);
    lines.insert(key, Arc::downgrade(&l));
    Ok(l)
}

/// Lets go of every cached peer that is gone (see [`PeerRegion::gone`]): for a
/// receiver after a sender left, whose channel no longer names it. A few loads per
/// cached peer, no system call where peers have lifelines.
pub fn sweep() {
    // Checked outside the lock: `gone` takes it to let go.
    let all: Vec<Arc<PeerRegion>> = peers().values().cloned().collect();
    for p in &all {
        p.gone();
    }
}

/// The cached resolution of endpoint `nonce`, if any.
pub fn cached(nonce: u64) -> Option<Arc<PeerRegion>> {
    peers().get(&nonce).cloned()
}
/// A sender's staging file mapped by a receiver: read-only, since the receiver only
/// reads it (progress words and payloads), and only once the file is sealed at its
/// size, so that neither its owner nor anyone else can truncate it under the mapping.
pub struct StageMap {
    map: ReadOnlyMapping,
}

impl StageMap {
    /// Maps `len` bytes of descriptor `fd` of process `pid`, the first `populate` of
    /// them at once.
    pub(crate) fn open(pid: u32, fd: u32, len: u64, populate: usize) -> Result<StageMap> {
        let fd = sys::open_peer_fd_read_only(pid, fd)?;
        sys::require_sealed(&fd)?;
        let len = usize::try_from(len).map_err(|_| Error::Io)?;
        if sys::file_size(&fd)? < len {
            return Err(Error::Io);
        }
        let map = ReadOnlyMapping::new(&fd, len)?;
        map.populate(populate);
        Ok(StageMap { map })
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Loads the 8-byte word at `off` (a multiple of 8) with `order`: a progress word.
    #[inline]
    pub(crate) fn load(&self, off: usize, order: std::sync::atomic::Ordering) -> u64 {
        self.map.load(off, order)
    }

    /// Copies the bytes at `off..off + dst.len()` into `dst` (the sender may be
    /// writing them: the caller validates what it copies, or waits for the progress
    /// word that publishes them first).
    #[inline]
    pub(crate) fn copy_out(&self, off: usize, dst: &mut [u8]) {
        self.map.copy_out(off, dst);
    }
}
