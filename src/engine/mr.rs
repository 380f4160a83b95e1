//! The memory-registration key table (`man 3 fi_mr`): the one gate every remote
//! access passes.
//!
//! [`MrTable::register`] records a region (a list of [`Segment`]s, access rights and,
//! for offset-addressed domains, the offset of its first byte) under a key;
//! [`MrTable::check`] validates a remote access `(key, addr, len, access)` and returns
//! the local memory it touches as [`Chunks`].
//!
//! Remote addresses follow the domain's [`MrMode`]:
//!
//! * `FI_MR_VIRT_ADDR`: a remote address is the virtual address of the target byte.
//!   An access may span several segments only where they are virtually contiguous.
//! * otherwise: the region is the concatenation of its segments and its first byte
//!   has remote address `offset` (`fi_mr_attr::offset`, usually 0).
//!
//! Zero-length regions and zero-length accesses are legal: a zero-length access
//! succeeds anywhere from the first byte to one past the last byte of a run of the
//! region.

use core::fmt;
use core::hash::{BuildHasher, Hasher};
use core::iter::FusedIterator;

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::flags::{BindFlags, MrAccess, MrMode};
use crate::types::{MrKey, KEY_NOTAVAIL};

use super::cntr::CntrInner;

/// One contiguous piece of registered memory: start address (as `usize`) and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Address of the first byte.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

/// A stretch of the region as seen remotely, precomputed at registration so that
/// [`MrTable::check`] is a binary search plus two comparisons.
///
/// Pieces are sorted by `at` and never overlap. In offset mode they are the non-empty
/// segments in order (one empty piece at `offset` if the region has no bytes), all
/// sharing `run_end`; in virtual mode they are the maximal virtually contiguous runs
/// of the segments, each its own run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    /// Remote address of the first byte.
    at: u64,
    /// Length in bytes (`at + len` never overflows).
    len: u64,
    /// Local address of the first byte (`mem + len` never overflows).
    mem: usize,
    /// End (exclusive) of the remotely contiguous stretch this piece belongs to.
    run_end: u64,
}

/// A registered region.
pub struct MrEntry<U> {
    segments: Vec<Segment>,
    pieces: Vec<Piece>,
    access: MrAccess,
    offset: u64,
    #[cfg(test)]
    len: usize,
    enabled: bool,
    user: U,
}

impl<U> MrEntry<U> {
    /// The access rights the region was registered with.
    #[inline]
    pub fn access(&self) -> MrAccess {
        self.access
    }

    /// The registered segments, in registration order.
    #[inline]
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Total registered bytes.
    #[inline]
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    #[inline]
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The owner's data.
    #[inline]
    pub fn user(&self) -> &U {
        &self.user
    }

    /// The owner's data, mutably.
    #[inline]
    pub fn user_mut(&mut self) -> &mut U {
        &mut self.user
    }

    /// The requested offset (`fi_mr_attr::offset`): remote address of the first byte
    /// in offset-addressed domains; informational with `FI_MR_VIRT_ADDR`.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether remote accesses are accepted (`fi_mr_enable` was called, or the
    /// domain does not require it).
    #[inline]
    #[cfg(test)]
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }
}

impl<U: fmt::Debug> fmt::Debug for MrEntry<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrEntry")
            .field("segments", &self.segments)
            .field("access", &self.access)
            .field("offset", &self.offset)
            .field("enabled", &self.enabled)
            .field("user", &self.user)
            .finish()
    }
}

/// The domain's table of registered regions, by key.
pub struct MrTable<U> {
    mode: MrMode,
    entries: FxHashMap<MrKey, MrEntry<U>>,
    /// Provider-key state: `counter` advances per registration, `salt` makes the
    /// sequence differ between tables and processes.
    counter: u64,
    salt: u64,
}

/// splitmix64's finalizer: a bijection on `u64`, so distinct counters give
/// distinct keys while consecutive keys look unrelated.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<U> MrTable<U> {
    /// An empty table for a domain with memory-registration mode `mode`.
    ///
    /// With `FI_MR_PROV_KEY` the table chooses keys; otherwise the application's
    /// requested key is used. `FI_MR_VIRT_ADDR` selects virtual addressing.
    /// `FI_MR_ENDPOINT` or `FI_MR_RMA_EVENT` make new regions start disabled.
    pub fn new(mode: MrMode) -> Self {
        // RandomState is seeded randomly per process (and varies per instance), which
        // is enough to keep provider keys from being guessable from a fixed sequence.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x6d72_5f6b_6579);
        MrTable {
            mode,
            entries: FxHashMap::default(),
            counter: 0,
            salt: h.finish(),
        }
    }

    /// Registers a region and returns its key.
    ///
    /// `requested_key` is used unless the mode has `FI_MR_PROV_KEY`; a key already
    /// registered (or `FI_KEY_NOTAVAIL`) gives `Err(Error::NoKey)`. An empty segment
    /// list, a segment wrapping the address space, or (offset mode) a region whose
    /// remote range would pass `u64::MAX` gives `Err(Error::Inval)`. Segments of
    /// length 0, and regions of length 0, are allowed.
    pub fn register(
        &mut self,
        segments: &[Segment],
        access: MrAccess,
        offset: u64,
        requested_key: u64,
        user: U,
    ) -> Result<MrKey> {
        if segments.is_empty() {
            return Err(Error::Inval);
        }
        let mut total: usize = 0;
        for s in segments {
            s.addr.checked_add(s.len).ok_or(Error::Inval)?;
            total = total.checked_add(s.len).ok_or(Error::Inval)?;
        }
        let pieces = if self.mode.contains(MrMode::VIRT_ADDR) {
            virt_pieces(segments)
        } else {
            offset_pieces(segments, offset, total)?
        };

        let key = if self.mode.contains(MrMode::PROV_KEY) {
            self.next_key()
        } else {
            if requested_key == KEY_NOTAVAIL || self.entries.contains_key(&requested_key) {
                return Err(Error::NoKey);
            }
            requested_key
        };
        let enabled = !self.mode.intersects(MrMode::ENDPOINT | MrMode::RMA_EVENT);
        self.entries.insert(
            key,
            MrEntry {
                segments: segments.to_vec(),
                pieces,
                access,
                offset,
                #[cfg(test)]
                len: total,
                enabled,
                user,
            },
        );
        Ok(key)
    }

    /// A fresh provider key: never 0, never `FI_KEY_NOTAVAIL`, never one in use.
    fn next_key(&mut self) -> MrKey {
        loop {
            self.counter = self.counter.wrapping_add(1);
            let key = mix(self.counter.wrapping_add(self.salt));
            // `mix` is a bijection, so this loop only repeats for the two reserved
            // values or after 2^64 registrations.
            if key != 0 && key != KEY_NOTAVAIL && !self.entries.contains_key(&key) {
                return key;
            }
        }
    }

    /// `fi_mr_enable`: starts accepting remote accesses through `key`. Idempotent.
    ///
    /// `Err(Error::NoKey)` for a key that is not registered.
    pub fn enable(&mut self, key: MrKey) -> Result<()> {
        let e = self.entries.get_mut(&key).ok_or(Error::NoKey)?;
        e.enabled = true;
        Ok(())
    }

    /// Deregisters (`fi_close` of the MR) and returns the owner's data. The key is
    /// rejected from now on.
    ///
    /// `Err(Error::NoKey)` for a key that is not registered.
    pub fn deregister(&mut self, key: MrKey) -> Result<U> {
        self.entries
            .remove(&key)
            .map(|e| e.user)
            .ok_or(Error::NoKey)
    }

    /// The region registered under `key`, enabled or not.
    #[inline]
    pub fn get(&self, key: MrKey) -> Option<&MrEntry<U>> {
        self.entries.get(&key)
    }

    /// The region registered under `key`, mutably.
    #[inline]
    pub fn get_mut(&mut self, key: MrKey) -> Option<&mut MrEntry<U>> {
        self.entries.get_mut(&key)
    }

    /// THE GATE: validates a remote access of `len` bytes at remote address `addr`
    /// through `key`, needing rights `access` (e.g. `REMOTE_WRITE`).
    ///
    /// Errors, checked in this order:
    /// * `Error::KeyRejected`: the key is unknown or the region is not enabled;
    /// * `Error::Access`: `access` is not a subset of the region's rights;
    /// * `Error::Fault`: `[addr, addr + len)` is not inside the region (or is not
    ///   virtually contiguous with `FI_MR_VIRT_ADDR`), including when it wraps.
    ///
    /// On success, returns the local memory covering the range, in order, and the
    /// owner's data. Allocation-free.
    #[inline]
    pub fn check(
        &self,
        key: MrKey,
        addr: u64,
        len: usize,
        access: MrAccess,
    ) -> Result<(Chunks<'_>, &U)> {
        let (e, end) = self.admit(key, addr, len, access)?;
        // The last piece starting at or before `addr`: since pieces are disjoint and
        // sorted, only its stretch can contain the range.
        let i = e.pieces.partition_point(|p| p.at <= addr);
        let first = i.checked_sub(1).ok_or(Error::Fault)?;
        let pieces = &e.pieces[first..];
        match pieces.first() {
            // `at <= addr` holds by the search, and pieces of one stretch are
            // remotely contiguous, so `end <= run_end` is the whole range check
            // (also for `len == 0`, which then only needs `addr <= run_end`).
            Some(p) if end <= p.run_end => Ok((
                Chunks {
                    pieces,
                    pos: addr,
                    end,
                },
                &e.user,
            )),
            _ => Err(Error::Fault),
        }
    }

    /// The checks `check` and `check_contiguous` share, in their order: an enabled
    /// region under `key`, with `access`, and a range end that does not overflow.
    #[inline(always)]
    fn admit(
        &self,
        key: MrKey,
        addr: u64,
        len: usize,
        access: MrAccess,
    ) -> Result<(&MrEntry<U>, u64)> {
        let e = match self.entries.get(&key) {
            Some(e) if e.enabled => e,
            _ => return Err(Error::KeyRejected),
        };
        if !e.access.contains(access) {
            return Err(Error::Access);
        }
        let end = u64::try_from(len)
            .ok()
            .and_then(|l| addr.checked_add(l))
            .ok_or(Error::Fault)?;
        Ok((e, end))
    }

    /// [`check`](Self::check) of an access that must touch one contiguous piece of
    /// local memory (an atomic's target): the local address of its first byte and the
    /// owner's data, without the chunk iterator.
    ///
    /// The same errors in the same order as `check`, and `Error::Fault` as well when
    /// `len` is 0 or the range, though inside the region, spans two local pieces:
    /// exactly when `check` would yield anything but one chunk of `len` bytes.
    #[inline]
    pub fn check_contiguous(
        &self,
        key: MrKey,
        addr: u64,
        len: usize,
        access: MrAccess,
    ) -> Result<(usize, &U)> {
        let (e, end) = self.admit(key, addr, len, access)?;
        // One piece (every region of one buffer) needs no search.
        let p = match e.pieces.as_slice() {
            [one] => one,
            many => {
                let i = many.partition_point(|p| p.at <= addr);
                &many[i.checked_sub(1).ok_or(Error::Fault)?]
            }
        };
        // `p.at + p.len` does not overflow (see `Piece`); `addr < end` rules out
        // `len == 0`, and `end <= p.at + p.len` keeps the range in this piece, which
        // is inside its stretch, so `check` would pass it as one chunk of `len`.
        if p.at <= addr && addr < end && end <= p.at + p.len {
            // Fits in usize: bounded by the piece's local range.
            Ok((p.mem + (addr - p.at) as usize, &e.user))
        } else {
            Err(Error::Fault)
        }
    }

    /// Number of registered regions.
    #[inline]
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no region is registered.
    #[inline]
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<U: fmt::Debug> fmt::Debug for MrTable<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrTable")
            .field("mode", &self.mode)
            .field("entries", &self.entries)
            .finish()
    }
}

/// Offset mode: segments concatenated, the first byte at `offset`.
fn offset_pieces(segments: &[Segment], offset: u64, total: usize) -> Result<Vec<Piece>> {
    let total = u64::try_from(total).map_err(|_| Error::Inval)?;
    let run_end = offset.checked_add(total).ok_or(Error::Inval)?;
    let mut pieces = Vec::with_capacity(segments.len());
    let mut at = offset;
    for s in segments.iter().filter(|s| s.len > 0) {
        let len = s.len as u64;
        pieces.push(Piece {
            at,
            len,
            mem: s.addr,
            run_end,
        });
        // Cannot overflow: the sum of all lengths plus `offset` is `run_end`.
        at += len;
    }
    if pieces.is_empty() {
        // An empty region still has a base where zero-length accesses succeed.
        pieces.push(Piece {
            at: offset,
            len: 0,
            mem: segments[0].addr,
            run_end,
        });
    }
    Ok(pieces)
}

/// Virtual mode: the maximal virtually contiguous runs of the segments. Overlapping
/// or touching segments merge; empty segments survive as empty runs (bases for
/// zero-length accesses) unless they touch a run.
fn virt_pieces(segments: &[Segment]) -> Vec<Piece> {
    let mut spans: Vec<(usize, usize)> =
        segments.iter().map(|s| (s.addr, s.addr + s.len)).collect();
    spans.sort_unstable();
    let mut pieces: Vec<Piece> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        if let Some(last) = pieces.last_mut() {
            if start as u64 <= last.run_end {
                last.run_end = last.run_end.max(end as u64);
                last.len = last.run_end - last.at;
                continue;
            }
        }
        pieces.push(Piece {
            at: start as u64,
            len: (end - start) as u64,
            mem: start,
            run_end: end as u64,
        });
    }
    pieces.shrink_to_fit();
    pieces
}

/// The local memory covering a checked range, as [`Segment`]s in remote-address
/// order. Empty for a zero-length range.
#[derive(Debug, Clone)]
pub struct Chunks<'a> {
    /// Pieces still to visit; the first one contains `pos` (unless `pos == end`).
    pieces: &'a [Piece],
    pos: u64,
    end: u64,
}

impl Chunks<'_> {
    /// Bytes not yet yielded.
    #[inline]
    #[cfg(test)]
    pub fn remaining(&self) -> u64 {
        self.end - self.pos
    }
}

impl Iterator for Chunks<'_> {
    type Item = Segment;

    #[inline]
    fn next(&mut self) -> Option<Segment> {
        while self.pos < self.end {
            let (p, rest) = self.pieces.split_first()?;
            let piece_end = p.at + p.len;
            if self.pos >= piece_end {
                self.pieces = rest;
                continue;
            }
            let off = self.pos.checked_sub(p.at)?;
            let take = piece_end.min(self.end) - self.pos;
            self.pos += take;
            if self.pos == piece_end {
                self.pieces = rest;
            }
            // Both fit in usize: they are bounded by the piece's usize length.
            return Some(Segment {
                addr: p.mem + off as usize,
                len: take as usize,
            });
        }
        None
    }
}

impl FusedIterator for Chunks<'_> {}

/// What the core attaches to each registration.
pub(crate) struct MrUser<S: Config> {
    pub(crate) cntr: Option<Arc<CntrInner<S>>>,
    pub(crate) cntr_flags: BindFlags,
    /// With `FI_MR_ENDPOINT`: the only endpoint through which peers may access it.
    pub(crate) ep: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

    fn seg(addr: usize, len: usize) -> Segment {
        Segment { addr, len }
    }

    fn chunks<U>(t: &MrTable<U>, key: MrKey, addr: u64, len: usize) -> Result<Vec<Segment>> {
        t.check(key, addr, len, MrAccess::REMOTE_READ)
            .map(|(c, _)| c.collect())
    }

    #[test]
    fn prov_keys_unique_and_valid() {
        let mut t: MrTable<u32> = MrTable::new(MrMode::PROV_KEY);
        let mut keys = std::collections::HashSet::new();
        for i in 0..1000 {
            let k = t.register(&[seg(0x1000, 16)], RW, 0, 42, i).unwrap();
            assert_ne!(k, 0);
            assert_ne!(k, KEY_NOTAVAIL);
            assert!(keys.insert(k), "duplicate key {k:#x}");
        }
        assert_eq!(t.len(), 1000);
        let k = *keys.iter().next().unwrap();
        let u = t.deregister(k).unwrap();
        assert!(u < 1000);
        assert_eq!(t.len(), 999);
        let k2 = t.register(&[seg(0, 1)], RW, 0, 0, 7).unwrap();
        assert!(t.get(k2).is_some());
    }

    #[test]
    fn requested_keys_and_nokey() {
        let mut t: MrTable<&str> = MrTable::new(MrMode::empty());
        assert_eq!(t.register(&[seg(0x1000, 8)], RW, 0, 5, "a"), Ok(5));
        assert_eq!(t.register(&[seg(0x2000, 8)], RW, 0, 0, "b"), Ok(0));
        assert_eq!(
            t.register(&[seg(0x3000, 8)], RW, 0, 5, "c"),
            Err(Error::NoKey)
        );
        assert_eq!(
            t.register(&[seg(0x3000, 8)], RW, 0, KEY_NOTAVAIL, "c"),
            Err(Error::NoKey)
        );
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(5).unwrap().user(), &"a");
        assert_eq!(t.deregister(5), Ok("a"));
        assert_eq!(t.deregister(5), Err(Error::NoKey));
        assert_eq!(t.register(&[seg(0x3000, 8)], RW, 0, 5, "c"), Ok(5));
        assert_eq!(t.get(5).unwrap().user(), &"c");
    }

    #[test]
    fn access_denied() {
        let mut t: MrTable<()> = MrTable::new(MrMode::empty());
        let k = t
            .register(&[seg(0x1000, 64)], MrAccess::REMOTE_READ, 0, 1, ())
            .unwrap();
        assert!(t.check(k, 0, 8, MrAccess::REMOTE_READ).is_ok());
        assert_eq!(
            t.check(k, 0, 8, MrAccess::REMOTE_WRITE).map(|_| ()),
            Err(Error::Access)
        );
        assert_eq!(t.check(k, 0, 8, RW).map(|_| ()), Err(Error::Access));
        // Access is checked before the range.
        assert_eq!(
            t.check(k, 1 << 40, 8, MrAccess::REMOTE_WRITE).map(|_| ()),
            Err(Error::Access)
        );
        assert_eq!(
            t.check(k + 1, 0, 8, MrAccess::REMOTE_READ).map(|_| ()),
            Err(Error::KeyRejected)
        );
    }

    #[test]
    fn bounds_off_by_one_offset_mode() {
        let mut t: MrTable<()> = MrTable::new(MrMode::empty());
        let k = t.register(&[seg(0x1000, 100)], RW, 50, 1, ()).unwrap();
        assert_eq!(chunks(&t, k, 50, 100), Ok(vec![seg(0x1000, 100)]));
        assert_eq!(chunks(&t, k, 49, 100), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 49, 1), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 51, 100), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 50, 101), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 149, 1), Ok(vec![seg(0x1000 + 99, 1)]));
        assert_eq!(chunks(&t, k, 150, 1), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0, 1), Err(Error::Fault));
    }

    #[test]
    fn bounds_off_by_one_virt_mode() {
        let mut t: MrTable<()> = MrTable::new(MrMode::VIRT_ADDR);
        let k = t.register(&[seg(0x1000, 100)], RW, 0, 1, ()).unwrap();
        assert_eq!(chunks(&t, k, 0x1000, 100), Ok(vec![seg(0x1000, 100)]));
        assert_eq!(chunks(&t, k, 0xfff, 1), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0xfff, 100), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0x1000, 101), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0x1001, 100), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0x1063, 1), Ok(vec![seg(0x1063, 1)]));
        assert_eq!(chunks(&t, k, 0x1064, 1), Err(Error::Fault));
        // Offset addressing does not apply.
        assert_eq!(chunks(&t, k, 0, 1), Err(Error::Fault));
    }

    #[test]
    fn zero_length() {
        let mut t: MrTable<()> = MrTable::new(MrMode::empty());
        let k = t.register(&[seg(0x1000, 0)], RW, 8, 1, ()).unwrap();
        assert_eq!(t.get(k).unwrap().len(), 0);
        assert!(t.get(k).unwrap().is_empty());
        assert_eq!(chunks(&t, k, 8, 0), Ok(vec![]));
        assert_eq!(chunks(&t, k, 7, 0), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 9, 0), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 8, 1), Err(Error::Fault));

        let k2 = t.register(&[seg(0x1000, 10)], RW, 0, 2, ()).unwrap();
        assert_eq!(chunks(&t, k2, 0, 0), Ok(vec![]));
        assert_eq!(chunks(&t, k2, 10, 0), Ok(vec![]));
        assert_eq!(chunks(&t, k2, 11, 0), Err(Error::Fault));

        let mut v: MrTable<()> = MrTable::new(MrMode::VIRT_ADDR);
        let k = v.register(&[seg(0x2000, 0)], RW, 0, 1, ()).unwrap();
        assert_eq!(chunks(&v, k, 0x2000, 0), Ok(vec![]));
        assert_eq!(chunks(&v, k, 0x2001, 0), Err(Error::Fault));
        assert_eq!(chunks(&v, k, 0x2000, 1), Err(Error::Fault));
        assert_eq!(chunks(&v, k, u64::MAX, 0), Err(Error::Fault));
    }

    #[test]
    fn overflow_near_u64_max() {
        let mut t: MrTable<()> = MrTable::new(MrMode::empty());
        let k = t
            .register(&[seg(0x1000, 16)], RW, u64::MAX - 16, 1, ())
            .unwrap();
        assert_eq!(chunks(&t, k, u64::MAX - 16, 16), Ok(vec![seg(0x1000, 16)]));
        assert_eq!(chunks(&t, k, u64::MAX - 1, 1), Ok(vec![seg(0x100f, 1)]));
        assert_eq!(chunks(&t, k, u64::MAX - 1, 2), Err(Error::Fault));
        assert_eq!(chunks(&t, k, u64::MAX, 1), Err(Error::Fault));
        assert_eq!(chunks(&t, k, u64::MAX, usize::MAX), Err(Error::Fault));
        assert_eq!(chunks(&t, k, u64::MAX - 16, usize::MAX), Err(Error::Fault));
        // A region whose remote range would pass u64::MAX is rejected.
        assert_eq!(
            t.register(&[seg(0x1000, 16)], RW, u64::MAX - 15, 2, ()),
            Err(Error::Inval)
        );
        // Segments wrapping the address space are rejected.
        assert_eq!(
            t.register(&[seg(usize::MAX - 1, 2)], RW, 0, 3, ()),
            Err(Error::Inval)
        );
        assert_eq!(
            t.register(&[seg(0, usize::MAX), seg(0, 1)], RW, 0, 4, ()),
            Err(Error::Inval)
        );
        assert_eq!(t.register(&[], RW, 0, 5, ()), Err(Error::Inval));

        let mut v: MrTable<()> = MrTable::new(MrMode::VIRT_ADDR);
        let top = usize::MAX - 16;
        let k = v.register(&[seg(top, 16)], RW, 0, 1, ()).unwrap();
        assert_eq!(chunks(&v, k, top as u64, 16), Ok(vec![seg(top, 16)]));
        assert_eq!(chunks(&v, k, top as u64 + 1, usize::MAX), Err(Error::Fault));
        assert_eq!(chunks(&v, k, top as u64, 17), Err(Error::Fault));
    }

    #[test]
    fn offset_mode_multiple_segments() {
        let mut t: MrTable<u8> = MrTable::new(MrMode::empty());
        let segs = [
            seg(0x1000, 10),
            seg(0x5000, 0),
            seg(0x3000, 20),
            seg(0x9000, 5),
        ];
        let k = t.register(&segs, RW, 100, 9, 7).unwrap();
        let e = t.get(k).unwrap();
        assert_eq!(e.len(), 35);
        assert_eq!(e.segments(), &segs);
        assert_eq!(e.offset(), 100);
        assert_eq!(e.access(), RW);
        assert_eq!(
            chunks(&t, k, 100, 35),
            Ok(vec![seg(0x1000, 10), seg(0x3000, 20), seg(0x9000, 5)])
        );
        assert_eq!(
            chunks(&t, k, 105, 10),
            Ok(vec![seg(0x1005, 5), seg(0x3000, 5)])
        );
        assert_eq!(chunks(&t, k, 110, 20), Ok(vec![seg(0x3000, 20)]));
        assert_eq!(
            chunks(&t, k, 129, 3),
            Ok(vec![seg(0x3013, 1), seg(0x9000, 2)])
        );
        assert_eq!(chunks(&t, k, 134, 1), Ok(vec![seg(0x9004, 1)]));
        assert_eq!(chunks(&t, k, 134, 2), Err(Error::Fault));
        let (c, u) = t.check(k, 101, 30, MrAccess::REMOTE_WRITE).unwrap();
        assert_eq!(*u, 7);
        assert_eq!(c.remaining(), 30);
        assert_eq!(c.map(|s| s.len).sum::<usize>(), 30);
    }

    #[test]
    fn virt_mode_contiguity() {
        let mut t: MrTable<()> = MrTable::new(MrMode::VIRT_ADDR);
        // Registered out of order; 0x2000..0x2010 and 0x2010..0x2020 are contiguous,
        // 0x3000.. is separate.
        let segs = [seg(0x2010, 0x10), seg(0x3000, 0x10), seg(0x2000, 0x10)];
        let k = t.register(&segs, RW, 0, 1, ()).unwrap();
        assert_eq!(t.get(k).unwrap().len(), 0x30);
        assert_eq!(chunks(&t, k, 0x2008, 0x10), Ok(vec![seg(0x2008, 0x10)]));
        assert_eq!(chunks(&t, k, 0x2000, 0x20), Ok(vec![seg(0x2000, 0x20)]));
        assert_eq!(chunks(&t, k, 0x2000, 0x21), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0x201f, 0x1000), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0x2020, 1), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0x2020, 0), Ok(vec![]));
        assert_eq!(chunks(&t, k, 0x2021, 0), Err(Error::Fault));
        assert_eq!(chunks(&t, k, 0x3000, 0x10), Ok(vec![seg(0x3000, 0x10)]));
        assert_eq!(chunks(&t, k, 0x2fff, 2), Err(Error::Fault));
        // Overlapping segments merge.
        let k2 = t
            .register(&[seg(0x100, 0x80), seg(0x140, 0x80)], RW, 0, 2, ())
            .unwrap();
        assert_eq!(chunks(&t, k2, 0x100, 0xc0), Ok(vec![seg(0x100, 0xc0)]));
        assert_eq!(chunks(&t, k2, 0x100, 0xc1), Err(Error::Fault));
    }

    #[test]
    fn enable_requirement() {
        for mode in [MrMode::ENDPOINT, MrMode::RMA_EVENT] {
            let mut t: MrTable<()> = MrTable::new(mode | MrMode::PROV_KEY);
            let k = t.register(&[seg(0x1000, 8)], RW, 0, 0, ()).unwrap();
            assert!(!t.get(k).unwrap().is_enabled());
            assert_eq!(chunks(&t, k, 0, 8), Err(Error::KeyRejected));
            t.enable(k).unwrap();
            t.enable(k).unwrap();
            assert!(t.get(k).unwrap().is_enabled());
            assert_eq!(chunks(&t, k, 0, 8), Ok(vec![seg(0x1000, 8)]));
            assert_eq!(t.enable(k ^ 1), Err(Error::NoKey));
        }
        let mut t: MrTable<()> = MrTable::new(MrMode::LOCAL);
        let k = t.register(&[seg(0x1000, 8)], RW, 0, 3, ()).unwrap();
        assert!(t.get(k).unwrap().is_enabled());
    }

    #[test]
    fn deregister_then_check_rejected() {
        let mut t: MrTable<String> = MrTable::new(MrMode::PROV_KEY | MrMode::VIRT_ADDR);
        let k = t
            .register(&[seg(0x1000, 8)], RW, 0, 0, "u".to_string())
            .unwrap();
        t.get_mut(k).unwrap().user_mut().push('!');
        assert_eq!(
            t.check(k, 0x1000, 8, MrAccess::REMOTE_READ).unwrap().1,
            "u!"
        );
        assert_eq!(t.deregister(k), Ok("u!".to_string()));
        assert!(t.is_empty());
        assert_eq!(
            t.check(k, 0x1000, 8, MrAccess::REMOTE_READ).map(|_| ()),
            Err(Error::KeyRejected)
        );
        assert!(t.get(k).is_none());
    }

    #[test]
    fn check_contiguous_errors_in_check_order() {
        let mut t: MrTable<u8> = MrTable::new(MrMode::empty());
        let k = t
            .register(
                &[seg(0x1000, 16), seg(0x4000, 16)],
                MrAccess::REMOTE_READ,
                0,
                9,
                7,
            )
            .unwrap();
        assert_eq!(
            t.check_contiguous(k + 1, 0, 8, MrAccess::REMOTE_READ).err(),
            Some(Error::KeyRejected)
        );
        assert_eq!(
            t.check_contiguous(k, 0, 8, RW).err(),
            Some(Error::Access),
            "access before bounds"
        );
        assert_eq!(
            t.check_contiguous(k, 8, 8, MrAccess::REMOTE_READ),
            Ok((0x1008, &7))
        );
        assert_eq!(
            t.check_contiguous(k, 16, 8, MrAccess::REMOTE_READ),
            Ok((0x4000, &7))
        );
        // In the region but across two pieces, empty, past the end, wrapping.
        for (addr, len) in [(12, 8), (4, 0), (28, 8), (u64::MAX - 3, 8)] {
            assert_eq!(
                t.check_contiguous(k, addr, len, MrAccess::REMOTE_READ)
                    .err(),
                Some(Error::Fault),
                "{addr} {len}"
            );
        }
        // Disabled regions are rejected like unknown keys.
        let mut t: MrTable<u8> = MrTable::new(MrMode::ENDPOINT);
        let k = t.register(&[seg(0x1000, 16)], RW, 0, 9, 7).unwrap();
        assert_eq!(
            t.check_contiguous(k, 0, 8, RW).err(),
            Some(Error::KeyRejected)
        );
        t.enable(k).unwrap();
        assert_eq!(t.check_contiguous(k, 0, 8, RW), Ok((0x1000, &7)));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Naive model: the remote address of every registered byte mapped to its
        /// local address.
        fn model(segs: &[Segment], virt: bool, offset: u64) -> Vec<(u64, usize)> {
            let mut bytes = Vec::new();
            let mut at = offset;
            for s in segs {
                for i in 0..s.len {
                    let remote = if virt {
                        (s.addr + i) as u64
                    } else {
                        at + i as u64
                    };
                    bytes.push((remote, s.addr + i));
                }
                at += s.len as u64;
            }
            bytes
        }

        /// The model's answer for a zero-length access: anywhere from a segment's
        /// first byte to one past its last (offset mode: anywhere in the region's span).
        fn model_zero(segs: &[Segment], virt: bool, offset: u64, addr: u64) -> bool {
            if virt {
                segs.iter()
                    .any(|s| s.addr as u64 <= addr && addr <= (s.addr + s.len) as u64)
            } else {
                let total: u64 = segs.iter().map(|s| s.len as u64).sum();
                offset <= addr && addr <= offset + total
            }
        }

        fn expected(bytes: &[(u64, usize)], addr: u64, len: usize) -> Option<Vec<usize>> {
            let mut out = Vec::with_capacity(len);
            for i in 0..len as u64 {
                let r = addr.checked_add(i)?;
                // In virtual mode overlapping segments map a remote byte to the same
                // local byte, so the first match is the answer.
                let (_, l) = bytes.iter().find(|(b, _)| *b == r)?;
                out.push(*l);
            }
            Some(out)
        }

        /// A table holding one read-write registration of `segs` (virtual addresses or
        /// offsets from `offset`), and its key.
        fn table(segs: &[Segment], virt: bool, offset: u64) -> (MrTable<()>, u64) {
            let mode = if virt {
                MrMode::VIRT_ADDR
            } else {
                MrMode::empty()
            };
            let mut t: MrTable<()> = MrTable::new(mode);
            let k = t.register(segs, RW, offset, 1, ()).unwrap();
            (t, k)
        }

        /// The remote address of probe `a`: around the region in both modes.
        fn probe_addr(virt: bool, offset: u64, a: u64) -> u64 {
            if virt {
                a
            } else {
                offset.wrapping_add(a).wrapping_sub(20)
            }
        }

        fn segment_lists() -> impl Strategy<Value = Vec<Segment>> {
            prop::collection::vec((0usize..200, 0usize..24), 1..5)
                .prop_map(|v| v.into_iter().map(|(a, l)| seg(1000 + a, l)).collect())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn check_matches_byte_model(
                segs in segment_lists(),
                virt in any::<bool>(),
                offset in prop_oneof![0u64..50, Just(u64::MAX - 200)],
                probes in prop::collection::vec((0u64..1300, 0usize..60), 1..24),
            ) {
                let (t, k) = table(&segs, virt, offset);
                let bytes = model(&segs, virt, offset);
                for (a, len) in probes {
                    let addr = probe_addr(virt, offset, a);
                    let got = t.check(k, addr, len, MrAccess::REMOTE_READ);
                    let want = if len == 0 {
                        model_zero(&segs, virt, offset, addr).then(Vec::new)
                    } else {
                        expected(&bytes, addr, len)
                    };
                    match (got, want) {
                        (Ok((chunks, _)), Some(want)) => {
                            let mut flat = Vec::new();
                            for c in chunks {
                                prop_assert!(c.len > 0);
                                flat.extend(c.addr..c.addr + c.len);
                            }
                            prop_assert_eq!(flat, want);
                        }
                        (Err(e), None) => prop_assert_eq!(e, Error::Fault),
                        (got, want) => prop_assert!(
                            false,
                            "addr {} len {}: got {:?}, model {:?}",
                            addr,
                            len,
                            got.map(|(c, _)| c.collect::<Vec<_>>()),
                            want
                        ),
                    }
                }
            }

            /// `check_contiguous` answers exactly as `check` followed by the atomic
            /// target's rule (one chunk of `len` bytes, else `Fault`).
            #[test]
            fn check_contiguous_matches_check(
                segs in segment_lists(),
                virt in any::<bool>(),
                offset in prop_oneof![0u64..50, Just(u64::MAX - 200)],
                probes in prop::collection::vec((0u64..1300, 0usize..60), 1..24),
            ) {
                let (t, k) = table(&segs, virt, offset);
                for (a, len) in probes {
                    let addr = probe_addr(virt, offset, a);
                    let want = t.check(k, addr, len, RW).and_then(|(mut c, _)| {
                        match (c.next(), c.next()) {
                            (Some(one), None) if one.len == len => Ok(one.addr),
                            _ => Err(Error::Fault),
                        }
                    });
                    let got = t.check_contiguous(k, addr, len, RW).map(|(a, _)| a);
                    prop_assert_eq!(got, want, "addr {} len {}", addr, len);
                }
            }

            #[test]
            fn prov_keys_never_collide(n in 1usize..300, remove_every in 1usize..5) {
                let mut t: MrTable<usize> = MrTable::new(MrMode::PROV_KEY);
                let mut live = std::collections::HashMap::new();
                for i in 0..n {
                    let k = t.register(&[seg(0, 1)], RW, 0, 0, i).unwrap();
                    prop_assert!(k != 0 && k != KEY_NOTAVAIL);
                    prop_assert!(live.insert(k, i).is_none());
                    if i % remove_every == 0 {
                        let (&rk, &ri) = live.iter().next().unwrap();
                        prop_assert_eq!(t.deregister(rk), Ok(ri));
                        live.remove(&rk);
                    }
                }
                prop_assert_eq!(t.len(), live.len());
                for (k, i) in live {
                    prop_assert_eq!(t.get(k).map(|e| *e.user()), Some(i));
                }
            }
        }
    }
}
