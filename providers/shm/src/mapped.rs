//! Directly mapped regions: memory a process allocates in shared memory and registers,
//! which peers on the host map on first use, so that RMA and atomics into it are done
//! by the initiator itself (plain copies and CPU atomics, complete at once) without
//! any progress by the target: the model of SHMEM/PGAS symmetric heaps.
//!
//! ```
//! use fabric::prelude::*;
//! use fabric_shm::{MappedSegment, Shm};
//!
//! let info = getinfo::<Stack<Shm>>(None).unwrap().remove(0);
//! let fabric = Fabric::<Stack<Shm>>::open(&info).unwrap();
//! let domain = fabric.domain(&info).unwrap();
//! let mut seg = MappedSegment::new(1 << 20).unwrap();
//! let attr = MrAttr {
//!     access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
//!     offset: 0,
//!     requested_key: 0x5eed,
//!     context: 0,
//! };
//! let mr = seg.register(&domain, &attr).unwrap();
//! // Peers' writes, reads and atomics through key 0x5eed now go straight to memory.
//! mr.local_u64(0).unwrap().store(1, std::sync::atomic::Ordering::Release);
//! ```
//!
//! A registration made this way is an ordinary memory region of the domain (the ring
//! path serves peers that do not map it) which is also *published* in the process's
//! directory (see `directory`): its key, segment, base address and access rights.
//! Initiators check key, bounds and access against that entry exactly as the target's
//! MR table would, and report the same errors at once.
//!
//! What differs from the ring path, by design:
//! - Keys of published regions are process-wide: publishing a key already published
//!   by any domain of the process fails with `KeyRejected`, and a published region is
//!   reachable through every shm endpoint of the process.
//! - Direct accesses are invisible to the target: they count in no remote counter
//!   (endpoint or MR) and raise no event. Writes with remote CQ data, atomics on
//!   16-byte datatypes and misaligned atomics take the ring path.
//! - Atomics of the direct path are CPU atomics: atomic with respect to each other and
//!   to [`DirectMr::local_u64`], not to ring-path atomics on the same bytes.
//! - Ordering: a direct operation waits until no earlier operation of its transmit
//!   context awaits a response (ring-path RMA and atomics, delivery-complete sends),
//!   so RMA keeps its order whichever path each operation takes. Plain sends complete
//!   when posted and are not waited for: a direct write may become visible before the
//!   target receives an earlier message (never after a later one).
//!
//! Withdrawal is safe: dropping the [`DirectMr`] first withdraws the directory entry,
//! then waits until no peer is inside an access (each initiator counts itself in the
//! segment's busy word around every access, or marks its own busy lane, then rechecks
//! the entry: either it sees the entry gone or the owner sees it busy; see `lanes`),
//! for at most [`UNPUBLISH_WAIT`], then deregisters the region. A peer still inside
//! an access then (stopped by a signal or a debugger, or killed) may write later, and
//! that cannot be known in bounded time: the segment is then *quarantined* before the
//! drop returns. A new file with a copy of the data is put under the owner's mapping
//! at the same addresses, so the owner gets back memory no peer maps, and a late write
//! lands in the old file, which lives on only in peers' mappings. [`quarantined`]
//! counts these withdrawals, and each logs a line on standard error. Either way, no
//! peer's access reaches the memory the owner got back.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fabric::attr::MrAttr;
use fabric::flags::MrMode;
use fabric::{Config, Domain, Error, MemoryRegion, Result};

use crate::layout::directory::{Directory, Entry};
use crate::layout::segment::{SegFile, SegView};
use crate::Shm;

/// Longest a withdrawal waits for peers' accesses in progress. Only a peer stopped in
/// the middle of an access (a copy of at most `MAX_MSG_SIZE` bytes, or one atomic) for
/// longer, or one killed inside it, makes it give up and quarantine the segment (see
/// the module documentation).
pub const UNPUBLISH_WAIT: Duration = Duration::from_secs(1);

/// Withdrawals of this process that quarantined their segment: peers were still
/// inside an access after [`UNPUBLISH_WAIT`] (see the module documentation).
pub fn quarantined() -> u64 {
    QUARANTINED.load(Ordering::Relaxed)
}

static QUARANTINED: AtomicU64 = AtomicU64::new(0);

/// Shared memory for a directly mapped region: an anonymous file (`memfd`, mode 0600)
/// mapped in this process, which peers of the same user map when it is published.
pub struct MappedSegment {
    file: SegFile,
}

impl std::fmt::Debug for MappedSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedSegment")
            .field("len", &self.file.len())
            .finish()
    }
}

impl MappedSegment {
    /// A zero-filled segment of `len` bytes. `Err(NoMem)` when the system refuses
    /// the memory, `Err(Inval)` for an impossible length.
    pub fn new(len: usize) -> Result<MappedSegment> {
        Ok(MappedSegment {
            file: SegFile::create(len, crate::fresh_nonce())?,
        })
    }

    /// Bytes of the segment.
    pub fn len(&self) -> usize {
        self.file.len()
    }

    /// Whether the segment has no bytes.
    pub fn is_empty(&self) -> bool {
        self.file.len() == 0
    }

    /// The memory, while it is not registered through [`Self::register`] (peers only
    /// access it while it is).
    pub fn as_slice(&self) -> &[u8] {
        self.file.data()
    }

    /// The memory, mutably, while it is not registered through [`Self::register`]. It
    /// may also be registered the ordinary way (`domain.mr_reg(seg.as_mut_slice(),
    /// ..)`): then it is not published and peers reach it through the ring path only.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.file.data_mut()
    }

    /// Registers the whole segment in `domain` with `attr` (`domain.mr_reg`) and
    /// publishes it for direct access by peers under the region's key, with the
    /// region's remote address of the first byte and `attr.access`.
    ///
    /// Errors: those of `mr_reg` (`NoKey` for a key the domain already has);
    /// `KeyRejected` when another published region of this process has the key;
    /// `NoMem` when the process already publishes [`DIR_ENTRIES`](crate::DIR_ENTRIES)
    /// regions; `OpNotSupp` in domains whose regions need `fi_mr_enable` or an
    /// endpoint binding (`FI_MR_ENDPOINT`, `FI_MR_RMA_EVENT`), which a published region
    /// could not honor.
    pub fn register<'a, S>(
        &'a mut self,
        domain: &Domain<S>,
        attr: &MrAttr,
    ) -> Result<DirectMr<'a, S>>
    where
        S: Config<Provider = Shm>,
    {
        if domain
            .info()
            .domain_attr
            .mr_mode
            .intersects(MrMode::ENDPOINT | MrMode::RMA_EVENT)
        {
            return Err(Error::OpNotSupp);
        }
        let dir = Directory::global()?;
        self.file.settle();
        let fd = self.file.fd();
        let nonce = self.file.nonce();
        let (view, data) = self.file.split();
        let len = data.len() as u64;
        let mr = domain.mr_reg(data, attr)?;
        let entry = Entry {
            key: mr.key(),
            fd,
            len,
            base: mr.remote_addr(),
            access: attr.access.bits(),
            nonce,
        };
        // On error `mr` is dropped here: deregistered, never published.
        let (slot, state) = dir.publish(&entry)?;
        Ok(DirectMr {
            publication: Publication {
                dir,
                slot,
                state,
                view,
            },
            mr: Some(mr),
        })
    }
}

/// The published state of a [`DirectMr`]; dropped before its region.
struct Publication<'a> {
    dir: &'static Directory,
    slot: usize,
    state: u64,
    view: SegView<'a>,
}

impl Publication<'_> {
    /// Withdraws the directory entry and waits for peers' accesses in progress, for at
    /// most [`UNPUBLISH_WAIT`]; whether they all ended.
    fn withdraw(&self) -> bool {
        self.dir.unpublish(self.slot, self.state);
        // Peers count themselves busy (sequentially consistent), or mark their lane
        // busy with the barrier below standing in for their fence, before they recheck
        // the entry: from here, either they see it withdrawn or we see them busy.
        if self.view.fenced() && !crate::layout::lanes::owner_fence() {
            // The barrier worked when the segment was made. Should it fail now, a lane's
            // busy store may still sit in its CPU's store buffer, which drains within
            // nanoseconds: give it a millisecond before reading the lanes.
            std::thread::sleep(Duration::from_millis(1));
        }
        let busy = self.view.busy();
        let deadline = Instant::now() + UNPUBLISH_WAIT;
        let mut spins = 0u32;
        while busy.load(Ordering::SeqCst) != 0 || self.view.lanes_busy() {
            if spins < 1 << 10 {
                spins += 1;
                std::hint::spin_loop();
            } else if Instant::now() >= deadline {
                return false;
            } else {
                std::thread::yield_now();
            }
        }
        true
    }

    /// Keeps the memory from peers that did not leave in time (see the module
    /// documentation). Without a new file and mapping the memory could only be handed
    /// back while a peer may still write it: the process stops instead.
    fn quarantine(&self) {
        match self.view.quarantine(crate::fresh_nonce()) {
            Ok(()) => {
                QUARANTINED.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "fabric-shm: a peer was still inside an access to a withdrawn segment \
                     ({} bytes) after {UNPUBLISH_WAIT:?}: its memory was quarantined",
                    self.view.len()
                );
            }
            Err(e) => {
                eprintln!(
                    "fabric-shm: cannot quarantine a withdrawn segment that a peer may \
                     still write ({e}); aborting rather than hand the memory back"
                );
                std::process::abort();
            }
        }
    }
}

/// A memory region over a [`MappedSegment`], published for direct access by peers.
/// Dereferences to the [`MemoryRegion`] (key, descriptor, local read/write, ...).
/// Dropping it withdraws the publication, waits for peers' accesses in progress, then
/// deregisters the region.
pub struct DirectMr<'a, S: Config> {
    publication: Publication<'a>,
    /// `Some` until dropped: the publication is withdrawn before the region goes, and
    /// a quarantine, if needed, comes after.
    mr: Option<MemoryRegion<'a, S>>,
}

impl<S: Config> Drop for DirectMr<'_, S> {
    fn drop(&mut self) {
        let clear = self.publication.withdraw();
        drop(self.mr.take());
        if !clear {
            self.publication.quarantine();
        }
    }
}

impl<'a, S: Config> DirectMr<'a, S> {
    /// The memory region.
    pub fn mr(&self) -> &MemoryRegion<'a, S> {
        self.mr.as_ref().expect("registered until dropped")
    }

    /// The 8-byte word at byte `offset` of the region, as an atomic: local loads,
    /// stores and read-modify-writes coherent with peers' direct atomics on it (for
    /// example to wait for a flag a peer sets). `Err(Fault)` past the end, `Err(Inval)`
    /// when `offset` is not a multiple of 8.
    pub fn local_u64(&self, offset: usize) -> Result<&AtomicU64> {
        if offset
            .checked_add(8)
            .is_none_or(|end| end > self.publication.view.len())
        {
            return Err(Error::Fault);
        }
        self.publication.view.word64(offset).ok_or(Error::Inval)
    }

    /// Address of the region's first byte in this process (what `shmem_ptr` returns
    /// for local memory). Peers may access the memory at any time while published.
    pub fn as_ptr(&self) -> *mut u8 {
        self.publication.view.data_ptr()
    }
}

impl<'a, S: Config> Deref for DirectMr<'a, S> {
    type Target = MemoryRegion<'a, S>;

    fn deref(&self) -> &MemoryRegion<'a, S> {
        self.mr()
    }
}

impl<S: Config> std::fmt::Debug for DirectMr<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectMr")
            .field("key", &self.mr().key())
            .field("len", &self.mr().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::sys;
    use fabric::flags::MrAccess;
    use fabric::{getinfo, Fabric, Stack};

    fn domain() -> (Fabric<Stack<Shm>>, Domain<Stack<Shm>>) {
        let info = getinfo::<Stack<Shm>>(None).unwrap().remove(0);
        let fabric = Fabric::open(&info).unwrap();
        let domain = fabric.domain(&info).unwrap();
        (fabric, domain)
    }

    fn attr(key: u64) -> MrAttr {
        MrAttr {
            access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
            offset: 0,
            requested_key: key,
            context: 0,
        }
    }

    /// Drops `mr` while a peer's access ends (`leave`) 100 ms after the drop began;
    /// whether the peer had left by the time the drop returned.
    fn withdraw_while<S: Config, R>(mr: DirectMr<'_, S>, leave: impl FnOnce() -> R + Send) -> bool {
        let leaving = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                // Set first: if the drop returns having seen the access over, it is set.
                leaving.store(true, Ordering::SeqCst);
                leave();
            });
            drop(mr);
            leaving.load(Ordering::SeqCst)
        })
    }

    #[test]
    fn withdrawal_waits_for_accesses_in_progress() {
        let (_f, d) = domain();
        let mut seg = MappedSegment::new(4096).unwrap();
        let (fd, nonce) = (seg.file.fd(), seg.file.nonce());
        let mr = seg.register(&d, &attr(0xa1_0001)).unwrap();
        // A peer inside an access: counted busy.
        let peer = SegFile::open(sys::getpid(), fd, 4096, nonce).unwrap();
        peer.busy().fetch_add(1, Ordering::SeqCst);
        assert!(
            withdraw_while(mr, || peer.busy().fetch_sub(1, Ordering::SeqCst)),
            "the withdrawal returned while the peer was inside an access"
        );
        // Withdrawn: the key can be published again, and the memory is ours again.
        seg.as_mut_slice()[0] = 1;
        let mr = seg.register(&d, &attr(0xa1_0001)).unwrap();
        // A peer that never leaves (stopped inside an access) is waited for until
        // `UNPUBLISH_WAIT`, then given up on: the drop returns with the segment
        // quarantined, so what the peer writes later never reaches the owner.
        peer.busy().fetch_add(1, Ordering::SeqCst);
        let (before, start) = (quarantined(), Instant::now());
        drop(mr);
        assert!(start.elapsed() >= UNPUBLISH_WAIT);
        assert_eq!(quarantined(), before + 1);
        assert_eq!(&seg.as_slice()[..2], &[1, 0], "the data is kept");
        peer.copy_in(0, &[0xee; 64]);
        assert_eq!(
            &seg.as_slice()[..2],
            &[1, 0],
            "a late write reached the owner"
        );
        seg.as_mut_slice()[0] = 3;
        assert_eq!(
            peer.shared(0, 1).to_vec(),
            [0xee],
            "the peer's file is not the owner's"
        );
        // Published again, it is the new file that peers map.
        let mr = seg.register(&d, &attr(0xa1_0001)).unwrap();
        assert_eq!(
            SegFile::open(sys::getpid(), fd, 4096, nonce).err(),
            Some(Error::AddrNotAvail),
            "the old file is still the segment's"
        );
        drop(mr);
        assert_eq!(quarantined(), before + 1);
    }

    #[test]
    fn withdrawal_waits_for_a_busy_lane() {
        let (_f, d) = domain();
        let mut seg = MappedSegment::new(4096).unwrap();
        let (fd, nonce) = (seg.file.fd(), seg.file.nonce());
        let peer = std::sync::Arc::new(SegFile::open(sys::getpid(), fd, 4096, nonce).unwrap());
        if !(sys::membarrier_registered() && peer.fenced()) {
            // No expedited barrier here: no lanes are offered, initiators count.
            assert!(peer.claim_lane().is_none());
            return;
        }
        // Lanes are handed out once each, until none is left; a dropped one is free.
        let mut lanes: Vec<_> = std::iter::from_fn(|| peer.claim_lane()).collect();
        assert_eq!(lanes.len(), crate::layout::segment::LANES);
        let mut words: Vec<_> = lanes.iter().map(|l| l.word().as_ptr()).collect();
        words.sort();
        words.dedup();
        assert_eq!(words.len(), lanes.len());
        lanes.truncate(1);
        assert!(peer.claim_lane().is_some());
        let lane = lanes[0].word();
        let mr = seg.register(&d, &attr(0xa1_0003)).unwrap();
        crate::layout::lanes::enter(lane);
        assert!(
            withdraw_while(mr, || crate::layout::lanes::leave(lane)),
            "the withdrawal returned while the lane was busy"
        );
        // An idle lane is not waited for: the withdrawal returns (it would otherwise
        // give up only after `UNPUBLISH_WAIT`), and the memory is the owner's again.
        assert_eq!(lane.load(Ordering::SeqCst), crate::layout::lanes::IDLE);
        let mr = seg.register(&d, &attr(0xa1_0003)).unwrap();
        drop(mr);
        seg.as_mut_slice()[0] = 7;
        assert_eq!(seg.as_slice()[0], 7);
    }

    #[test]
    fn local_words_and_errors() {
        let (_f, d) = domain();
        let mut seg = MappedSegment::new(64).unwrap();
        assert_eq!(seg.len(), 64);
        assert!(!seg.is_empty());
        let mr = seg.register(&d, &attr(0xa1_0002)).unwrap();
        mr.local_u64(56).unwrap().store(9, Ordering::SeqCst);
        let mut b = [0u8; 8];
        mr.read(56, &mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 9);
        assert_eq!(mr.local_u64(60).err(), Some(Error::Fault));
        assert_eq!(mr.local_u64(usize::MAX).err(), Some(Error::Fault));
        assert_eq!(mr.local_u64(4).err(), Some(Error::Inval));
        assert_eq!(mr.key(), 0xa1_0002);
        assert!(!mr.as_ptr().is_null());
        // The same key in the same domain: the MR table refuses it first.
        let mut other = MappedSegment::new(64).unwrap();
        assert_eq!(
            other.register(&d, &attr(0xa1_0002)).err(),
            Some(Error::NoKey)
        );
        drop(mr);
        assert_eq!(
            u64::from_ne_bytes(seg.as_slice()[56..].try_into().unwrap()),
            9
        );
        let empty = MappedSegment::new(0).unwrap();
        assert!(empty.is_empty() && empty.as_slice().is_empty());
    }
}
