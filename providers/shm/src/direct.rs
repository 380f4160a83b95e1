//! The initiator side of directly mapped regions ([`crate::MappedSegment`]): RMA and
//! atomics performed by the initiator into a peer's published segment
//! ([`fabric::provider::DirectAccess::direct`]).
//!
//! Per operation, on the fast path: one lookup in the sender's cache of (peer, key) →
//! segment, the checks the target's MR table would make (access, then bounds, with
//! checked arithmetic) against the cached directory entry, then the access between
//! marking this sender's busy lane of the segment and clearing it (plain stores; the
//! segment's shared busy count, two locked instructions, where no lane is to be had),
//! with the entry's state word rechecked in between (the handshake with the owner's
//! withdrawal, see `mapped` and `lanes`). A cache miss reads the peer's directory
//! (mapped read-only, once per peer process) and maps the segment (once per process,
//! shared by all endpoints).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use fabric::atomic::{self, AtomicClass, AtomicOp, Datatype};
use fabric::flags::MrAccess;
use fabric::limits::MAX_ATOMIC_SIZE;
use fabric::provider::{Direct, DirectOp, DirectReq};
use fabric::{Error, Result, SharedBytes};

use crate::layout::directory::PeerDir;
use crate::layout::lanes;
use crate::layout::segment::{Lane, SegFile};
use crate::layout::sys;
use crate::peer::PeerRegion;

/// Most cached (peer, key) entries of one sender before the cache starts over.
const CACHE_MAX: usize = 4096;

/// The directory of `to`'s process, if it advertises one that maps.
#[inline]
fn peer_dir(to: &PeerRegion) -> Option<&Arc<PeerDir>> {
    to.direct
        .get_or_init(|| {
            let (fd, len) = to.region.directory()?;
            PeerDir::get(to.name.pid, to.name.start, fd, len).ok()
        })
        .as_ref()
}

/// A published segment as a sender caches it.
pub(crate) struct Target {
    dir: Arc<PeerDir>,
    slot: usize,
    /// The entry's state word when cached: any change invalidates the rest.
    state: u64,
    base: u64,
    len: u64,
    access: MrAccess,
    pub(crate) seg: Arc<SegFile>,
    /// This sender's busy lane of the segment, if it got one.
    lane: Option<Lane>,
}

impl Target {
    #[inline]
    fn current(&self) -> bool {
        self.dir.dir.state(self.slot).load(Ordering::Acquire) == self.state
    }

    /// Shows the owner this sender is inside an access, then rechecks the entry
    /// (sequentially consistent); `false`, after [`Self::leave`], when it was withdrawn.
    #[inline(always)]
    fn enter(&self) -> bool {
        match &self.lane {
            Some(l) => lanes::enter(l.word()),
            None => {
                self.seg.busy().fetch_add(1, Ordering::SeqCst);
            }
        }
        if self.dir.dir.state(self.slot).load(Ordering::SeqCst) == self.state {
            return true;
        }
        self.leave();
        false
    }

    /// Ends what [`Self::enter`] began: the access happens before the owner sees it
    /// over.
    #[inline(always)]
    fn leave(&self) {
        match &self.lane {
            Some(l) => lanes::leave(l.word()),
            None => {
                self.seg.busy().fetch_sub(1, Ordering::Release);
            }
        }
    }

    /// The registered address of the segment's first byte.
    #[inline]
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// The segment's length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The target MR table's checks for `len` bytes at `addr` with `access` (see
    /// [`check`]); the data offset of `addr`.
    #[inline]
    pub(crate) fn check(&self, addr: u64, len: usize, access: MrAccess) -> Result<usize> {
        check(self, addr, len, access)
    }

    /// Runs `f` while counted busy on the segment, if its entry is still the one
    /// attached (the handshake with the owner's withdrawal, see `mapped`): `NoKey` once
    /// the owner closed or refreshed the registration.
    #[inline]
    pub(crate) fn busy<R>(&self, f: impl FnOnce(&SegFile) -> R) -> Result<R> {
        if !self.enter() {
            return Err(Error::NoKey);
        }
        let r = f(&self.seg);
        self.leave();
        Ok(r)
    }
}

/// Finds `key` in the directory of `to`'s process and maps its segment: the
/// attachment behind [`crate::RemoteKey`]. `NoKey` when the peer's process published
/// no segment under `key` (or withdrew it meanwhile), `HostUnreach` when the peer is
/// gone.
pub(crate) fn attach(to: &PeerRegion, key: u64) -> Result<Target> {
    if to.gone() {
        return Err(Error::HostUnreach);
    }
    let dir = peer_dir(to).ok_or(Error::NoKey)?;
    let snap = dir.dir.lookup(key).ok_or(Error::NoKey)?;
    let seg = dir.segment(&snap)?;
    // The descriptor was opened after the entry was read: it is the segment the entry
    // names only if the entry is still the same.
    if dir.dir.state(snap.slot).load(Ordering::SeqCst) != snap.state {
        return Err(Error::NoKey);
    }
    Ok(Target {
        dir: dir.clone(),
        slot: snap.slot,
        state: snap.state,
        base: snap.entry.base,
        len: snap.entry.len,
        access: MrAccess::from_bits_truncate(snap.entry.access),
        seg,
        // A `RemoteKey` may be used from several threads at once: it counts.
        lane: None,
    })
}

enum Cached {
    Mapped(Target),
    /// No entry for the key while the directory's epoch is unchanged.
    Absent {
        dir: Arc<PeerDir>,
        epoch: u64,
    },
    /// The entry (slot, state) exists but its segment did not map.
    Unmappable {
        dir: Arc<PeerDir>,
        slot: usize,
        state: u64,
    },
}

impl Cached {
    fn current(&self) -> bool {
        match self {
            Cached::Mapped(t) => t.current(),
            Cached::Absent { dir, epoch } => dir.dir.epoch() == *epoch,
            Cached::Unmappable { dir, slot, state } => {
                dir.dir.state(*slot).load(Ordering::Acquire) == *state
            }
        }
    }
}

/// FxHash-style hasher for (peer nonce, key) pairs: the cache sits on the fast path.
#[derive(Default)]
struct PairHasher(u64);

impl Hasher for PairHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A sender's direct-access state: its cache of published segments of peers.
#[derive(Default)]
pub struct TxDirect {
    /// Cached entries by (peer nonce, key).
    entries: Vec<((u64, u64), Cached)>,
    /// Index of `entries`.
    index: HashMap<(u64, u64), usize, BuildHasherDefault<PairHasher>>,
    /// The entry used last: repeated use of one (peer, key) skips the hash lookup.
    last: usize,
}

impl TxDirect {
    /// The mapped target for `k` (a peer's nonce and a key) if it is the one used
    /// last: repeated use of one (peer, key), the common case, skips the hash lookup.
    ///
    /// Mapped entries are returned without checking that they are current: the caller
    /// checks that once it counted itself busy, and evicts them when they are not.
    #[inline]
    fn last(&self, k: (u64, u64)) -> Option<&Target> {
        match self.entries.get(self.last) {
            Some((at, Cached::Mapped(t))) if *at == k => Some(t),
            _ => None,
        }
    }

    /// The mapped target for `k` (`to`'s nonce and a key) when it is not the one used
    /// last (see [`Self::last`]): looked up in the cache, and in `to`'s directory on a
    /// miss; it becomes the one used last. `None` when absent or unmappable.
    #[inline(never)]
    fn find(&mut self, to: &PeerRegion, k: (u64, u64)) -> Option<&Target> {
        let i = match self.index.get(&k).copied() {
            Some(i) if matches!(self.entries[i].1, Cached::Mapped(_)) => i,
            Some(i) if self.entries[i].1.current() => {
                // Remembered so the next request for it is refused by `known_absent`.
                self.last = i;
                return None;
            }
            _ => self.fill(k, peer_dir(to)?)?,
        };
        self.last = i;
        match &self.entries[i].1 {
            Cached::Mapped(t) => Some(t),
            _ => None,
        }
    }

    /// Whether the last lookup, for (`to`, `key`), found that the peer publishes no
    /// segment under `key`, and its directory did not change since: the direct path
    /// would decline, and the caller skips it.
    #[inline]
    pub(crate) fn known_absent(&self, to: &PeerRegion, key: u64) -> bool {
        match self.entries.get(self.last) {
            Some(((nonce, k), Cached::Absent { dir, epoch })) => {
                *k == key && *nonce == to.name.nonce && dir.dir.epoch() == *epoch
            }
            _ => false,
        }
    }

    /// Looks `k` up in the peer's directory and caches what it finds; returns its
    /// index, or `None` when the entry changed while it was being mapped.
    #[cold]
    #[inline(never)]
    fn fill(&mut self, k: (u64, u64), dir: &Arc<PeerDir>) -> Option<usize> {
        // Misses are rare (first use of a key, or after a change): drop what changed,
        // so mappings of withdrawn segments are released.
        self.entries.retain(|(_, c)| c.current());
        if self.entries.len() >= CACHE_MAX {
            self.entries.clear();
        }
        let epoch = dir.dir.epoch();
        let entry = match dir.dir.lookup(k.1) {
            None => Cached::Absent {
                dir: dir.clone(),
                epoch,
            },
            Some(snap) => match dir.segment(&snap) {
                // The descriptor was opened after the entry was read: it is the
                // segment the entry names only if the entry is still the same (the
                // nonce check of `SegFile::open` rules out any other file too).
                Ok(seg) if dir.dir.state(snap.slot).load(Ordering::SeqCst) == snap.state => {
                    // One sender uses its cache at a time: a lane of its own, when the
                    // owner's barrier can reach this process.
                    let lane = if sys::membarrier_registered() {
                        seg.claim_lane()
                    } else {
                        None
                    };
                    Cached::Mapped(Target {
                        dir: dir.clone(),
                        slot: snap.slot,
                        state: snap.state,
                        base: snap.entry.base,
                        len: snap.entry.len,
                        access: MrAccess::from_bits_truncate(snap.entry.access),
                        seg,
                        lane,
                    })
                }
                // Changed meanwhile: the next operation looks again.
                Ok(_) => {
                    self.reindex();
                    return None;
                }
                Err(_) => Cached::Unmappable {
                    dir: dir.clone(),
                    slot: snap.slot,
                    state: snap.state,
                },
            },
        };
        // `k` had no current entry, so the sweep above removed any it had.
        self.entries.push((k, entry));
        self.reindex();
        Some(self.entries.len() - 1)
    }

    fn reindex(&mut self) {
        self.index.clear();
        for (i, (k, _)) in self.entries.iter().enumerate() {
            self.index.insert(*k, i);
        }
        self.last = 0;
    }

    /// Drops the entry of `k` (found withdrawn).
    #[cold]
    fn evict(&mut self, k: (u64, u64)) {
        self.entries.retain(|(at, _)| *at != k);
        self.reindex();
    }

    #[cold]
    fn forget_peer(&mut self, nonce: u64) {
        self.entries.retain(|((n, _), _)| *n != nonce);
        self.reindex();
    }
}

/// An atomic request the direct path can perform.
#[derive(Debug, Clone, Copy)]
struct AtomicReq {
    class: AtomicClass,
    op: AtomicOp,
    dt: Datatype,
    /// Bytes of target memory (elements × size).
    n: usize,
}

impl AtomicReq {
    /// The atomic `req` asks for (of `class`, `op`, `dt`), if it is one of the lock-free
    /// kinds: datatypes of at most 8 bytes, valid for the class, with well-formed
    /// lengths. Anything else goes to the target, which answers it (with the canonical
    /// error if it is malformed).
    #[inline]
    fn new(
        req: &DirectReq<'_>,
        class: AtomicClass,
        op: AtomicOp,
        dt: Datatype,
    ) -> Option<AtomicReq> {
        let size = dt.size();
        let n = req.len;
        if size > 8
            || !atomic::is_valid(class, op, dt)
            || n == 0
            || n > MAX_ATOMIC_SIZE
            || !n.is_multiple_of(size)
        {
            return None;
        }
        let operands = if op == AtomicOp::AtomicRead { 0 } else { n };
        let compare = if class == AtomicClass::Compare { n } else { 0 };
        let total: usize = req.payload.iter().map(|p| p.len()).sum();
        (total == operands && req.compare.len() == compare).then_some(AtomicReq {
            class,
            op,
            dt,
            n,
        })
    }

    /// Rights needed, as the target checks them.
    #[inline]
    fn access(&self) -> MrAccess {
        match (self.class, self.op) {
            (AtomicClass::Base, _) => MrAccess::REMOTE_WRITE,
            (_, AtomicOp::AtomicRead) => MrAccess::REMOTE_READ,
            _ => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        }
    }
}

/// What one operation does to target memory.
#[derive(Clone, Copy)]
enum Kind {
    Write,
    Read,
    Atomic(AtomicReq),
}

/// Performs `req` into `to`'s published memory if there is any under its key (see
/// [`fabric::provider::DirectAccess::direct`] for the contract).
#[inline]
pub fn run<F: FnMut(SharedBytes<'_>)>(
    tx: &mut TxDirect,
    to: &PeerRegion,
    req: &DirectReq<'_>,
    hold: bool,
    out: F,
) -> Direct {
    let (kind, access) = match req.op {
        DirectOp::Write => (Kind::Write, MrAccess::REMOTE_WRITE),
        DirectOp::Read => (Kind::Read, MrAccess::REMOTE_READ),
        DirectOp::Atomic { class, op, dt } => match AtomicReq::new(req, class, op, dt) {
            Some(a) => (Kind::Atomic(a), a.access()),
            None => return Direct::Declined,
        },
    };
    if !admit(tx, to) {
        return Direct::Declined;
    }
    perform(tx, to, req, (kind, access), hold, out)
}

/// Whether `to` may be accessed directly now: its endpoint open and its process alive,
/// checked on every operation (a few loads, see [`PeerRegion::gone_lately`]), so no
/// operation after the target's death is reported done. A declined operation takes
/// the ring path, which fails it with `HostUnreach`.
#[inline(always)]
fn admit(tx: &mut TxDirect, to: &PeerRegion) -> bool {
    !to.gone_lately() || departed(tx, to)
}

/// [`admit`] of a peer found gone: forgets its segments, so their mappings go.
#[cold]
#[inline(never)]
fn departed(tx: &mut TxDirect, to: &PeerRegion) -> bool {
    tx.forget_peer(to.name.nonce);
    false
}

/// An RMA write of `data` to `addr` under `key` into `to`'s published memory: [`run`]
/// of a [`DirectOp::Write`] with `hold` false, for
/// [`fabric::provider::DirectAccess::direct_write`]. The common case, the (peer, key) used last,
/// still current, whose checks pass, is done inline; everything else takes the
/// general path.
#[inline(always)]
pub fn write(tx: &mut TxDirect, to: &PeerRegion, addr: u64, key: u64, data: &[u8]) -> Direct {
    if !admit(tx, to) {
        return Direct::Declined;
    }
    if let Some(t) = tx.last((to.name.nonce, key)) {
        // The access test of `check`; its range test is the copy's own, against the
        // mapped segment, whose length is the entry's (`PeerDir::segment`). A failure
        // of either is reported by the general path.
        if let (true, Some(off)) = (
            t.access.contains(MrAccess::REMOTE_WRITE),
            addr.checked_sub(t.base),
        ) {
            // The handshake of `perform`: the entry is still the one cached.
            if t.enter() {
                if t.seg.put(off, data) {
                    t.leave();
                    return Direct::Done;
                }
                t.leave();
            }
        }
    }
    write_slow(tx, to, addr, key, data)
}

/// [`write`] of anything but its common case: another (peer, key), a failed check
/// (an error if the entry is current), a withdrawn entry (looked up again), a key
/// known to have no published segment (declined).
#[cold]
#[inline(never)]
fn write_slow(tx: &mut TxDirect, to: &PeerRegion, addr: u64, key: u64, data: &[u8]) -> Direct {
    if tx.known_absent(to, key) {
        return Direct::Declined;
    }
    let payload = [data];
    let req = DirectReq::write(addr, key, &payload);
    perform(
        tx,
        to,
        &req,
        (Kind::Write, MrAccess::REMOTE_WRITE),
        false,
        |_: SharedBytes<'_>| {},
    )
}

/// [`run`] after [`admit`]: `req`, of `kind` needing `access`, performed through the
/// cached entry of (`to`, `req.key`), looked up on a miss.
#[inline]
fn perform<F: FnMut(SharedBytes<'_>)>(
    tx: &mut TxDirect,
    to: &PeerRegion,
    req: &DirectReq<'_>,
    (kind, access): (Kind, MrAccess),
    hold: bool,
    mut out: F,
) -> Direct {
    let k = (to.name.nonce, req.key);
    // Twice at most: once more after finding the cached entry withdrawn.
    for _ in 0..2 {
        let Some(t) = (match tx.last(k) {
            Some(t) => Some(t),
            None => tx.find(to, k),
        }) else {
            return Direct::Declined;
        };
        if hold {
            // Even a failure waits: completions keep the order of the operations.
            return Direct::Held;
        }
        let off = match check(t, req.addr, req.len, access) {
            Ok(off) => off,
            Err(e) if t.current() => return Direct::Failed(e),
            Err(_) => {
                tx.evict(k);
                continue;
            }
        };
        if let Kind::Atomic(a) = kind {
            if !(t.seg.data_addr() + off).is_multiple_of(a.dt.size()) {
                // CPU atomics need natural alignment; the target copes with any.
                return Direct::Declined;
            }
        }
        if !t.enter() {
            // Withdrawn (now or earlier): the owner may be waiting for us to leave.
            tx.evict(k);
            continue;
        }
        let res = match kind {
            Kind::Write => {
                match req.payload {
                    // One buffer, the common case, without the loop.
                    [one] => t.seg.copy_in(off, one),
                    many => {
                        let mut at = off;
                        for p in many {
                            t.seg.copy_in(at, p);
                            at += p.len();
                        }
                    }
                }
                Ok(())
            }
            Kind::Read => {
                out(t.seg.shared(off, req.len));
                Ok(())
            }
            Kind::Atomic(a) => apply_atomic(&t.seg, off, &a, (req.payload, req.compare), &mut out),
        };
        t.leave();
        return match res {
            Ok(()) => Direct::Done,
            Err(e) => Direct::Failed(e),
        };
    }
    Direct::Declined
}

/// The target MR table's check against a cached entry: `Access` when `access` is not
/// granted, `Fault` when `[addr, addr + len)` is not inside the segment (with checked
/// arithmetic). Returns the data offset of `addr`.
#[inline]
fn check(t: &Target, addr: u64, len: usize, access: MrAccess) -> Result<usize> {
    if !t.access.contains(access) {
        return Err(Error::Access);
    }
    let off = addr.checked_sub(t.base).ok_or(Error::Fault)?;
    let end = u64::try_from(len)
        .ok()
        .and_then(|l| off.checked_add(l))
        .ok_or(Error::Fault)?;
    if end > t.len {
        return Err(Error::Fault);
    }
    // `end <= t.len`, the length of a mapping of this process: fits `usize`.
    Ok(off as usize)
}

/// Copies payload bytes `pos..pos + dst.len()` (the payload may be split anywhere).
#[inline]
fn gather(parts: &[&[u8]], mut pos: usize, dst: &mut [u8]) {
    let mut done = 0;
    for p in parts {
        if pos >= p.len() {
            pos -= p.len();
            continue;
        }
        let k = (p.len() - pos).min(dst.len() - done);
        dst[done..done + k].copy_from_slice(&p[pos..pos + k]);
        done += k;
        pos = 0;
        if done == dst.len() {
            break;
        }
    }
}

/// Applies an atomic element by element (each element is atomic, as in libfabric),
/// handing the previous values of fetching classes to `out`.
fn apply_atomic<F: FnMut(SharedBytes<'_>)>(
    seg: &SegFile,
    off: usize,
    a: &AtomicReq,
    (operands, compare): (&[&[u8]], &[u8]),
    out: &mut F,
) -> Result<()> {
    let size = a.dt.size();
    let fetch = a.class != AtomicClass::Base;
    // The common PGAS case, one 8-byte integer sum with its operand in one piece: one
    // `lock xadd` (the element path below gives the same result).
    if a.n == 8 && size == 8 && a.op == AtomicOp::Sum && a.dt.is_integer() {
        if let (Ok(v), Some(w)) = (
            operands
                .first()
                .map_or(Err(()), |o| <[u8; 8]>::try_from(*o).map_err(|_| ())),
            seg.word::<AtomicU64>(off),
        ) {
            let prev = w.fetch_add(u64::from_ne_bytes(v), Ordering::AcqRel);
            if fetch {
                out(SharedBytes::from(&prev.to_ne_bytes()));
            }
            return Ok(());
        }
    }
    let mut old = [0u8; 8];
    let opnd_len = if a.op == AtomicOp::AtomicRead {
        0
    } else {
        size
    };
    let cmp_len = if a.class == AtomicClass::Compare {
        size
    } else {
        0
    };
    for k in 0..a.n / size {
        let at = off + k * size;
        let (mut o, mut c) = ([0u8; 8], [0u8; 8]);
        gather(operands, k * size, &mut o[..opnd_len]);
        gather(&[compare], k * size, &mut c[..cmp_len]);
        let (o, c) = (&o[..opnd_len], &c[..cmp_len]);
        let r = match size {
            1 => seg
                .word::<AtomicU8>(at)
                .map(|w| elem_u8(w, a, o, c, &mut old[..1])),
            2 => seg
                .word::<AtomicU16>(at)
                .map(|w| elem_u16(w, a, o, c, &mut old[..2])),
            4 => seg
                .word::<AtomicU32>(at)
                .map(|w| elem_u32(w, a, o, c, &mut old[..4])),
            _ => seg
                .word::<AtomicU64>(at)
                .map(|w| elem_u64(w, a, o, c, &mut old[..8])),
        };
        // Bounds and alignment were checked for the whole range: `None` is unreachable.
        r.ok_or(Error::Fault)??;
        if fetch {
            out(SharedBytes::from(&old[..size]));
        }
    }
    Ok(())
}

/// One element of width `$t` through its atomic `$a`: native instructions where the
/// hardware has them, else a compare-and-swap loop that computes the new value with
/// [`fabric::atomic::apply`], so results match the target's bit for bit.
macro_rules! elem {
    ($name:ident, $a:ty, $t:ty) => {
        #[inline]
        fn $name(
            w: &$a,
            a: &AtomicReq,
            operand: &[u8],
            compare: &[u8],
            old: &mut [u8],
        ) -> Result<()> {
            const N: usize = core::mem::size_of::<$t>();
            let val = |b: &[u8]| {
                let mut x = [0u8; N];
                x.copy_from_slice(&b[..N]);
                <$t>::from_ne_bytes(x)
            };
            let int = a.dt.is_integer();
            let (acq, ar) = (Ordering::Acquire, Ordering::AcqRel);
            let prev: $t = match a.op {
                AtomicOp::AtomicRead => w.load(acq),
                AtomicOp::AtomicWrite => w.swap(val(operand), ar),
                // Two's complement: one instruction for signed and unsigned alike.
                AtomicOp::Sum if int => w.fetch_add(val(operand), ar),
                AtomicOp::Bor => w.fetch_or(val(operand), ar),
                AtomicOp::Band => w.fetch_and(val(operand), ar),
                AtomicOp::Bxor => w.fetch_xor(val(operand), ar),
                // Integer equality is bit equality (not so for floats: -0.0, NaN).
                AtomicOp::Cswap if int => {
                    match w.compare_exchange(val(compare), val(operand), ar, acq) {
                        Ok(v) | Err(v) => v,
                    }
                }
                _ => {
                    let mut cur = w.load(acq);
                    loop {
                        let mut t = cur.to_ne_bytes();
                        atomic::apply(a.class, a.op, a.dt, &mut t, operand, compare, None)?;
                        let new = <$t>::from_ne_bytes(t);
                        // Unchanged (a failed compare, a min that keeps): the read is
                        // the operation.
                        if new == cur {
                            break cur;
                        }
                        match w.compare_exchange_weak(cur, new, ar, acq) {
                            Ok(_) => break cur,
                            Err(v) => cur = v,
                        }
                    }
                }
            };
            old.copy_from_slice(&prev.to_ne_bytes());
            Ok(())
        }
    };
}

elem!(elem_u8, AtomicU8, u8);
elem!(elem_u16, AtomicU16, u16);
elem!(elem_u32, AtomicU32, u32);
elem!(elem_u64, AtomicU64, u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_crosses_parts() {
        let parts: [&[u8]; 3] = [b"ab", b"", b"cdef"];
        let mut d = [0u8; 3];
        gather(&parts, 1, &mut d);
        assert_eq!(&d, b"bcd");
        gather(&parts, 3, &mut d);
        assert_eq!(&d, b"def");
        gather(&parts, 0, &mut d[..0]);
    }

    #[test]
    fn atomic_requests_the_ring_must_serve() {
        let (one, two): (&[u8], &[u8]) = (&[0; 16], &[0; 8]);
        let a = |op: AtomicOp, dt: Datatype, class, len: usize, operand: &[u8], cmp: &[u8]| {
            let payload = [operand];
            let req = DirectReq {
                op: DirectOp::Atomic { class, op, dt },
                addr: 0,
                key: 0,
                len,
                payload: &payload,
                compare: cmp,
            };
            AtomicReq::new(&req, class, op, dt).map(|a| a.access())
        };
        use AtomicClass::{Base, Compare, Fetch};
        assert_eq!(
            a(AtomicOp::Sum, Datatype::Uint64, Base, 8, &one[..8], &[]),
            Some(MrAccess::REMOTE_WRITE)
        );
        // 16-byte datatypes, invalid combinations, malformed lengths: declined.
        assert!(a(AtomicOp::Sum, Datatype::Int128, Base, 16, one, &[]).is_none());
        assert!(a(AtomicOp::Sum, Datatype::DoubleComplex, Base, 16, one, &[]).is_none());
        assert!(a(AtomicOp::Bor, Datatype::Double, Base, 8, two, &[]).is_none());
        assert!(a(AtomicOp::Sum, Datatype::Uint64, Base, 12, &one[..12], &[]).is_none());
        assert!(a(AtomicOp::Sum, Datatype::Uint64, Base, 8, one, &[]).is_none());
        assert!(a(AtomicOp::Sum, Datatype::Uint64, Base, 0, &[], &[]).is_none());
        assert!(a(
            AtomicOp::Cswap,
            Datatype::Uint32,
            Compare,
            4,
            &two[..4],
            &[]
        )
        .is_none());
        assert_eq!(
            a(
                AtomicOp::Cswap,
                Datatype::Uint32,
                Compare,
                4,
                &two[..4],
                &two[..4]
            ),
            Some(MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)
        );
        assert_eq!(
            a(AtomicOp::AtomicRead, Datatype::Float, Fetch, 4, &[], &[]),
            Some(MrAccess::REMOTE_READ)
        );
        assert!(a(
            AtomicOp::AtomicRead,
            Datatype::Float,
            Fetch,
            4,
            &two[..4],
            &[]
        )
        .is_none());
    }
}
