//! Attached remote keys: a peer's directly mapped region ([`crate::MappedSegment`])
//! resolved once, then read, written and updated by this process with no lookup per
//! operation: the counterpart of UCX's unpacked rkey, or of `fi_mr_map_raw`, for
//! SHMEM/PGAS runtimes that issue many small puts to the same symmetric heap.
//!
//! Every operation makes the checks the target's MR table would make (access right,
//! then bounds with checked arithmetic) and runs between an increment and a decrement
//! of the segment's busy count with the directory entry rechecked in between, so an
//! operation either lands before the owner's `close`/`refresh` of the registration
//! returns or fails with `NoKey`; it never writes memory the owner took back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fabric::flags::MrAccess;
use fabric::{Error, Result};

use crate::direct::{self, Target};
use crate::peer::{self, PeerRegion};

/// A peer's registered, directly mapped region, attached by this process.
///
/// `attach` takes the peer endpoint's address (the bytes of `Endpoint::name`, as shipped
/// out of band or read back with `AddressVector::lookup`) and the registration's key;
/// addresses are the registration's (`MemoryRegion::remote_addr` plus an offset), as in
/// `fi_write`. Operations complete when they return.
///
/// ```no_run
/// # fn main() -> fabric::Result<()> {
/// # let (peer_name, key, base) = (vec![0u8; fabric_shm::NAME_LEN], 1u64, 0u64);
/// let rk = fabric_shm::RemoteKey::attach(&peer_name, key)?;
/// rk.put(base, &42u64.to_le_bytes())?;
/// let before = rk.fetch_add_u64(base + 8, 1)?;
/// let mut back = [0u8; 8];
/// rk.get(base, &mut back)?;
/// assert_eq!(u64::from_le_bytes(back), 42);
/// # let _ = before;
/// # Ok(())
/// # }
/// ```
pub struct RemoteKey {
    target: Target,
    peer: Arc<PeerRegion>,
}

impl std::fmt::Debug for RemoteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteKey")
            .field("base", &self.target.base())
            .field("len", &self.target.len())
            .finish_non_exhaustive()
    }
}

impl RemoteKey {
    /// Attaches the region that the endpoint named `peer` (an shm address) registered
    /// under `key` from a [`crate::MappedSegment`].
    ///
    /// Errors: `Inval`/`AddrNotAvail` for a malformed or stale address, `HostUnreach`
    /// when the peer is gone, `NoKey` when its process published no mapped region
    /// under `key` (plain registrations are reached through the endpoint's RMA calls).
    pub fn attach(peer: &[u8], key: u64) -> Result<RemoteKey> {
        let peer = peer::resolve(peer)?;
        let target = direct::attach(&peer, key)?;
        Ok(RemoteKey { target, peer })
    }

    /// The registered address of the region's first byte.
    pub fn base(&self) -> u64 {
        self.target.base()
    }

    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        self.target.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.target.len() == 0
    }

    /// Stores `src` at registered address `addr` (`fi_write`). `Access` without remote
    /// write access, `Fault` out of bounds, `NoKey` after the owner closed the
    /// registration, `HostUnreach` once the peer died (from the first operation after
    /// its threads ended, which happens before it can be reaped), or closed its
    /// endpoint.
    #[inline]
    pub fn put(&self, addr: u64, src: &[u8]) -> Result<()> {
        let off = self.start(addr, src.len(), MrAccess::REMOTE_WRITE)?;
        self.target.busy(|seg| seg.copy_in(off, src))
    }

    /// Loads `dst.len()` bytes from registered address `addr` (`fi_read`); errors as
    /// for [`put`](Self::put), with remote read access.
    #[inline]
    pub fn get(&self, addr: u64, dst: &mut [u8]) -> Result<()> {
        let off = self.start(addr, dst.len(), MrAccess::REMOTE_READ)?;
        self.target.busy(|seg| seg.copy_out(off, dst))
    }

    /// Atomically adds `v` to the little-endian `u64` at `addr` and returns its previous
    /// value (`fi_fetch_atomic` with `FI_SUM` on `FI_UINT64`). `Inval` when `addr` is
    /// not 8-byte aligned in memory (CPU atomics need it); otherwise errors as for
    /// [`put`](Self::put), with remote read and write access.
    #[inline]
    pub fn fetch_add_u64(&self, addr: u64, v: u64) -> Result<u64> {
        self.word(addr, |w| w.fetch_add(v, Ordering::SeqCst))
    }

    /// Atomically replaces the `u64` at `addr` with `desired` if it equals `expected`,
    /// and returns its previous value (`fi_compare_atomic` with `FI_CSWAP` on
    /// `FI_UINT64`); errors as for [`fetch_add_u64`](Self::fetch_add_u64).
    #[inline]
    pub fn compare_swap_u64(&self, addr: u64, expected: u64, desired: u64) -> Result<u64> {
        self.word(addr, |w| {
            match w.compare_exchange(expected, desired, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(old) | Err(old) => old,
            }
        })
    }

    /// Runs `f` on the 8-byte word at `addr`, checked and counted busy.
    #[inline]
    fn word<R>(&self, addr: u64, f: impl FnOnce(&AtomicU64) -> R) -> Result<R> {
        let off = self.start(addr, 8, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)?;
        self.target
            .busy(|seg| seg.word::<AtomicU64>(off).map(f))?
            .ok_or(Error::Inval)
    }

    /// The checks before an operation: the peer's liveness (a few loads, see
    /// [`PeerRegion::gone_lately`]), then access and bounds; the data offset of `addr`.
    #[inline]
    fn start(&self, addr: u64, len: usize, access: MrAccess) -> Result<usize> {
        if self.peer.gone_lately() {
            return Err(Error::HostUnreach);
        }
        self.target.check(addr, len, access)
    }
}
