//! The shared layout of a directly mapped segment (see `mapped` and `direct`): an
//! anonymous file (`memfd`, mode 0600, sealed at its size) holding a header page, then the data peers
//! access with plain copies and CPU atomics. This module owns every access to it.
//!
//! ```text
//! page 0   magic | nonce (identity, also in the directory entry) | fenced
//!          busy: direct accesses in progress (own cache line, written by peers)
//!          LANES lanes, a cache line each (see `lanes`)
//! page 1.. data
//! ```
//! Peers may write anything anywhere in a segment they mapped, including its header:
//! values read back are validated, and accessors check bounds and alignment.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use fabric::{Error, Result, SharedBytes};

use crate::layout::lanes;
use crate::layout::sys::{self, Mapping};

/// Bytes before the data: the header page (keeps the data page-aligned).
pub const SEG_HEADER: usize = 4096;
/// Segment magic, "FABSEG01".
const MAGIC: u64 = u64::from_le_bytes(*b"FABSEG01");
const OFF_MAGIC: usize = 0;
const OFF_NONCE: usize = 8;
/// 1 when the owner issues `membarrier(GLOBAL_EXPEDITED)` on withdrawal (`lanes`).
const OFF_FENCED: usize = 16;
const OFF_BUSY: usize = 64;
const OFF_LANES: usize = 128;
/// Initiators that can hold a busy lane of one segment at a time; the others count.
pub const LANES: usize = (SEG_HEADER - OFF_LANES) / 64;

/// An atomic type that can view a naturally aligned word of a segment.
pub trait Word: Sync + sealed::Sealed {
    /// Bytes of the word.
    const SIZE: usize;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! word {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Word for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
        }
    )*};
}
word!(AtomicU8, AtomicU16, AtomicU32, AtomicU64);

/// A mapped segment file: the owner's (created) or a peer's (opened).
pub struct SegFile {
    map: Mapping,
    fd: OwnedFd,
    len: usize,
    nonce: u64,
    /// The file (descriptor, nonce) that a quarantine ([`SegView::quarantine`]) put
    /// under the owner's mapping, until [`Self::settle`] takes it.
    swapped: Mutex<Option<(OwnedFd, u64)>>,
}

impl SegFile {
    /// Creates a segment of `len` data bytes, identified by `nonce`.
    pub fn create(len: usize, nonce: u64) -> Result<SegFile> {
        let total = SEG_HEADER.checked_add(len).ok_or(Error::Inval)?;
        let fd = sys::memfd(total)?;
        let map = Mapping::new(&fd, total)?;
        let s = SegFile {
            map,
            fd,
            len,
            nonce,
            swapped: Mutex::new(None),
        };
        s.word64(OFF_NONCE).store(nonce, Ordering::Relaxed);
        // Lanes are offered only if the barrier works here: a withdrawal issues it.
        if lanes::owner_fence() {
            s.word64(OFF_FENCED).store(1, Ordering::Relaxed);
        }
        s.word64(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(s)
    }

    /// Maps segment descriptor `fd` of process `pid`, which its directory says holds
    /// `len` data bytes and identity `nonce`; anything else (a reused descriptor, a
    /// resized file) is `Err(AddrNotAvail)`.
    pub fn open(pid: u32, fd: u32, len: usize, nonce: u64) -> Result<SegFile> {
        let fd = sys::open_peer_fd(pid, fd)?;
        // Checked before the size: a file that could still shrink has no size to trust.
        sys::require_sealed(&fd)?;
        let total = SEG_HEADER.checked_add(len).ok_or(Error::AddrNotAvail)?;
        if sys::file_size(&fd)? != total {
            return Err(Error::AddrNotAvail);
        }
        let map = Mapping::new(&fd, total)?;
        let s = SegFile {
            map,
            fd,
            len,
            nonce,
            swapped: Mutex::new(None),
        };
        if s.word64(OFF_MAGIC).load(Ordering::Acquire) != MAGIC
            || s.word64(OFF_NONCE).load(Ordering::Relaxed) != nonce
        {
            return Err(Error::AddrNotAvail);
        }
        Ok(s)
    }

    /// Adopts the file a quarantine put under the owner's mapping, if any: from then
    /// on [`Self::fd`] and [`Self::nonce`] name it. The owner calls it before it
    /// publishes the segment again.
    pub fn settle(&mut self) {
        let swapped = self.swapped.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some((fd, nonce)) = swapped.take() {
            self.fd = fd;
            self.nonce = nonce;
        }
    }

    /// The descriptor peers open through `/proc` (the owner's).
    pub fn fd(&self) -> u32 {
        self.fd.as_raw_fd() as u32
    }

    /// Data bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The identity written at creation.
    pub fn nonce(&self) -> u64 {
        self.nonce
    }

    #[inline]
    fn word64(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= SEG_HEADER);
        // SAFETY: in the header page of a live mapping, 8-aligned (mappings are
        // page-aligned); these words are only ever accessed atomically.
        unsafe { &*self.map.ptr().add(off).cast::<AtomicU64>() }
    }

    /// The count of direct accesses in progress (incremented by each accessor around
    /// its access; the owner waits for zero before it reuses the memory).
    #[inline]
    pub fn busy(&self) -> &AtomicU64 {
        self.word64(OFF_BUSY)
    }

    /// Whether the owner issues the barrier that lets initiators use lanes.
    pub fn fenced(&self) -> bool {
        self.word64(OFF_FENCED).load(Ordering::Relaxed) == 1
    }

    /// Lane `i` (below [`LANES`]).
    fn lane(&self, i: usize) -> &AtomicU64 {
        self.word64(OFF_LANES + 64 * i)
    }

    /// Claims a free lane for one initiator, if the owner offers lanes and one is free.
    pub fn claim_lane(self: &Arc<Self>) -> Option<Lane> {
        if !self.fenced() {
            return None;
        }
        let word = (0..LANES)
            .map(|i| self.lane(i))
            .find(|w| lanes::claim(*w))?;
        Some(Lane {
            word: NonNull::from(word),
            _seg: self.clone(),
        })
    }

    /// Address of the first data byte in this process (for alignment tests).
    #[inline]
    pub fn data_addr(&self) -> usize {
        self.map.ptr() as usize + SEG_HEADER
    }

    /// The data, exclusively: for the owner while no peer may access it.
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: the data lies in the live mapping; `&mut self` excludes every other
        // access through this process, and peers only access published segments (the
        // busy-count protocol of `mapped` guarantees none does after unpublishing).
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr().add(SEG_HEADER), self.len) }
    }

    /// The data, shared: for the owner while no peer may access it.
    pub fn data(&self) -> &[u8] {
        // SAFETY: the data lies in the live mapping. As in `data_mut`, peers only
        // access published segments, and a withdrawal that could not wait out their
        // accesses moves the data to a fresh file they never mapped (`mapped`), so no
        // other process writes these bytes while the owner holds them unpublished.
        unsafe { std::slice::from_raw_parts(self.map.ptr().add(SEG_HEADER), self.len) }
    }

    /// Splits the owner's segment into a view of its shared words (the busy count, data
    /// words for local atomics) and its data, for the registration of a published
    /// segment. Both borrow the segment for `'a` and do not overlap as memory the
    /// caller reaches through them: the view only hands out atomics.
    pub fn split(&mut self) -> (SegView<'_>, &mut [u8]) {
        let base = self.map.ptr();
        // SAFETY: the data lies in the live mapping and is handed out once, for the
        // borrow of `self`; as in `data_mut`, peers only access it while published.
        // The view refers to the header words (atomics) and to `swapped`, which the
        // slice does not cover.
        let data = unsafe { std::slice::from_raw_parts_mut(base.add(SEG_HEADER), self.len) };
        let view = SegView {
            // SAFETY: the mapping is live and non-null for the borrow.
            base: unsafe { NonNull::new_unchecked(base) },
            len: self.len,
            swapped: &self.swapped,
            _seg: PhantomData,
        };
        (view, data)
    }

    /// Copies `src` to data offset `off` (bounds checked by the caller's range check;
    /// asserted here).
    #[inline(always)]
    pub fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(off <= self.len && src.len() <= self.len - off);
        // SAFETY: inside the live mapping's data (asserted). `src` is ordinary memory
        // of ours, so the ranges do not overlap; peers racing on these bytes only change
        // what they read (RMA races are undefined in libfabric, not unsafe here: no
        // reference to the shared bytes is formed). Small writes are copied inline:
        // a call into `memcpy` costs more than an 8-byte put.
        unsafe {
            fabric::bytes::copy_bytes(
                src.as_ptr(),
                self.map.ptr().add(SEG_HEADER + off),
                src.len(),
            )
        };
    }

    /// [`copy_in`](Self::copy_in) if `src` fits the data at offset `off`; `false`
    /// (nothing copied) otherwise. The one range test of a write whose caller has not
    /// checked it yet.
    #[inline(always)]
    pub fn put(&self, off: u64, src: &[u8]) -> bool {
        match usize::try_from(off) {
            Ok(off) if off <= self.len && src.len() <= self.len - off => {
                self.copy_in(off, src);
                true
            }
            _ => false,
        }
    }

    /// Data bytes `off..off + len`, which peers may change while they are read: a
    /// view to copy out of, never a reference.
    #[inline]
    pub fn shared(&self, off: usize, len: usize) -> SharedBytes<'_> {
        assert!(off <= self.len && len <= self.len - off);
        self.map.shared(SEG_HEADER + off, len)
    }

    /// Copies data bytes `off..off + dst.len()` into `dst` (bounds checked by the
    /// caller's range check; asserted here).
    #[inline]
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off <= self.len && dst.len() <= self.len - off);
        self.map.copy_out(SEG_HEADER + off, dst);
    }

    /// The word of type `W` at data offset `off`, if it lies inside the data and is
    /// naturally aligned.
    #[inline]
    pub fn word<W: Word>(&self, off: usize) -> Option<&W> {
        let end = off.checked_add(W::SIZE)?;
        if end > self.len || !(self.data_addr() + off).is_multiple_of(W::SIZE) {
            return None;
        }
        // SAFETY: inside the live mapping's data and naturally aligned; shared memory
        // that peers access concurrently, so only ever through this atomic view (or
        // byte copies of RMA, whose races with atomics libfabric leaves undefined).
        Some(unsafe { &*self.map.ptr().add(SEG_HEADER + off).cast::<W>() })
    }
}

/// A lane of a segment claimed by one initiator (see `lanes`), given back when dropped.
pub struct Lane {
    word: NonNull<AtomicU64>,
    /// Keeps the mapping `word` points into.
    _seg: Arc<SegFile>,
}

// SAFETY: `word` is an atomic in a mapping the lane keeps alive.
unsafe impl Send for Lane {}
// SAFETY: as above; it is only accessed atomically.
unsafe impl Sync for Lane {}

impl Lane {
    /// The lane's word.
    #[inline(always)]
    pub fn word(&self) -> &AtomicU64 {
        // SAFETY: a header word of the mapping `_seg` keeps alive (taken from
        // `SegFile::lane`, so in bounds and 8-aligned).
        unsafe { self.word.as_ref() }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.word().store(lanes::FREE, Ordering::Release);
    }
}

/// The owner's view of a published segment's shared words while its data is lent to a
/// registration.
pub struct SegView<'a> {
    base: NonNull<u8>,
    len: usize,
    swapped: &'a Mutex<Option<(OwnedFd, u64)>>,
    _seg: PhantomData<&'a SegFile>,
}

// SAFETY: a view of shared memory accessed only through atomics.
unsafe impl Send for SegView<'_> {}
// SAFETY: as above.
unsafe impl Sync for SegView<'_> {}

impl SegView<'_> {
    fn header_word(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= SEG_HEADER);
        // SAFETY: a word of the header page, 8-aligned, in a mapping that outlives
        // `'a`; header words are accessed atomically only.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// The busy count (see [`SegFile::busy`]).
    pub fn busy(&self) -> &AtomicU64 {
        self.header_word(OFF_BUSY)
    }

    /// Whether this segment offers lanes (see [`SegFile::fenced`]).
    pub fn fenced(&self) -> bool {
        self.header_word(OFF_FENCED).load(Ordering::Relaxed) == 1
    }

    /// Whether any initiator's lane is inside an access (see `lanes`).
    pub fn lanes_busy(&self) -> bool {
        lanes::any_busy((0..LANES).map(|i| self.header_word(OFF_LANES + 64 * i)))
    }

    /// Data bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Takes the segment's memory out of reach of peers still mapping it: puts a new
    /// file (a new nonce `nonce`, no peer busy) with a copy of the data under the
    /// owner's mapping, at the same addresses, so that a peer stopped inside an access
    /// that resumes later writes pages the owner no longer maps. The old file lives on
    /// only in peers' mappings. For a withdrawal whose peers did not all leave in
    /// time, once nothing else in this process accesses the data (the registration is
    /// gone): a copy racing with this process's own stores could lose them.
    pub fn quarantine(&self, nonce: u64) -> Result<()> {
        let total = SEG_HEADER + self.len;
        let fresh = SegFile::create(self.len, nonce)?;
        // SAFETY: both ranges are the data of live mappings of `len` bytes, of two
        // different files, so they do not overlap; a stopped peer may still write the
        // source, which only changes the bytes copied (no reference is formed).
        unsafe {
            fabric::bytes::copy_bytes(
                self.base.as_ptr().add(SEG_HEADER),
                fresh.map.ptr().add(SEG_HEADER),
                self.len,
            )
        };
        // SAFETY: replaces, at the same addresses and length, the mapping this view
        // was made from (live for `'a`), by a shared mapping of the new file; no other
        // memory is affected. What lives in the range is shared memory accessed through
        // atomics and copies only, whose bytes are the copy's from here on.
        let p = unsafe {
            libc::mmap(
                self.base.as_ptr().cast(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fresh.fd.as_raw_fd(),
                0,
            )
        };
        if p != self.base.as_ptr().cast() {
            return Err(Error::NoMem);
        }
        let SegFile { fd, .. } = fresh;
        *self.swapped.lock().unwrap_or_else(|e| e.into_inner()) = Some((fd, nonce));
        Ok(())
    }

    /// The data's first byte.
    pub fn data_ptr(&self) -> *mut u8 {
        // SAFETY: the header page precedes the data inside the mapping.
        unsafe { self.base.as_ptr().add(SEG_HEADER) }
    }

    /// The 8-byte word at data offset `off`, if inside the data and 8-aligned.
    pub fn word64(&self, off: usize) -> Option<&AtomicU64> {
        let end = off.checked_add(8)?;
        if end > self.len || !off.is_multiple_of(8) {
            return None;
        }
        // SAFETY: inside the data of a mapping that outlives `'a`, 8-aligned (the data
        // is page-aligned); the data is shared memory written by peers and by the
        // registration, so it is only handed out as an atomic.
        Some(unsafe { &*self.data_ptr().add(off).cast::<AtomicU64>() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_open_and_identity() {
        let mut s = SegFile::create(10_000, 42).unwrap();
        s.data_mut()[5] = 9;
        let p = SegFile::open(sys::getpid(), s.fd(), 10_000, 42).unwrap();
        assert_eq!(p.shared(5, 1).to_vec(), [9]);
        p.copy_in(6, &[1, 2]);
        assert_eq!(&s.data()[5..8], &[9, 1, 2]);
        // Wrong identity or length: refused.
        assert_eq!(
            SegFile::open(sys::getpid(), s.fd(), 10_000, 43).err(),
            Some(Error::AddrNotAvail)
        );
        assert_eq!(
            SegFile::open(sys::getpid(), s.fd(), 9_999, 42).err(),
            Some(Error::AddrNotAvail)
        );
        p.busy().fetch_add(3, Ordering::SeqCst);
        let (view, data) = s.split();
        assert_eq!(view.busy().load(Ordering::SeqCst), 3);
        assert_eq!(data.len(), 10_000);
        assert_eq!(view.len(), 10_000);
    }

    #[test]
    fn it_cannot_be_truncated() {
        let s = SegFile::create(10_000, 3).unwrap();
        let fd = sys::open_peer_fd(sys::getpid(), s.fd()).unwrap();
        assert_eq!(sys::tests::truncate(fd.as_raw_fd(), 0), Err(libc::EPERM));
        assert_eq!(sys::tests::truncate(s.fd() as i32, 4096), Err(libc::EPERM));
        assert!(SegFile::open(sys::getpid(), s.fd(), 10_000, 3).is_ok());
    }

    #[test]
    fn words_are_bounded_and_aligned() {
        let mut s = SegFile::create(64, 1).unwrap();
        assert!(s.word::<AtomicU64>(56).is_some());
        assert!(s.word::<AtomicU64>(60).is_none());
        assert!(s.word::<AtomicU64>(57).is_none());
        assert!(s.word::<AtomicU64>(usize::MAX).is_none());
        assert!(s.word::<AtomicU8>(63).is_some());
        assert!(s.word::<AtomicU16>(63).is_none());
        s.word::<AtomicU32>(8).unwrap().store(7, Ordering::Relaxed);
        let (view, _) = s.split();
        assert_eq!(view.word64(8).unwrap().load(Ordering::Relaxed), 7);
        assert!(view.word64(60).is_none());
        assert!(view.word64(4).is_none());
    }
}
