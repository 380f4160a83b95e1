//! An endpoint's shared region and its layout: a header page, a table of channel
//! controls, then one receive ring per channel. This module owns every access to
//! shared memory; the rest of the provider uses its bounds-checked accessors.
//!
//! ```text
//! page 0   magic | version | nchan | cells | pid | fd | start time | nonce
//!          closed | table generation | table high-water mark | release[STAGE_SLOTS]
//!          wake word
//!          staging file (fd, len) | mapped-segment directory of the process (fd, len)
//!          rendezvous records[RNDV_RECORDS] (state, staged copy's address, help request)
//! table    per channel, two lines: head (consumer position) | claim (claimer's
//!          nonce, 0: free), owner (the claim, once published), state, source name
//! rings    per channel, `cells` cells of 64 bytes, page-aligned
//! ```
//!
//! Channels are many (by default [`crate::DEFAULT_CHANNELS`]) and cost nothing until
//! claimed: the file is sparse, a sender allocates the pages of the ring it claims,
//! and the receiver gives them back when it frees the channel. So the number of
//! sending peers is bounded by the geometry, not by a bitmap word.
//!
//! A peer can write anything anywhere in a region it has mapped, so nothing read back
//! is trusted: callers validate values, and the accessors check bounds.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use fabric::{Error, Result, SharedBytes};

use crate::layout::chantable;
use crate::layout::sys::{self, Mapping, Packet};
use crate::name::{Name, NAME_LEN};

/// Region magic, "FABSHM01".
const MAGIC: u64 = u64::from_le_bytes(*b"FABSHM01");
/// Layout version.
const VERSION: u32 = 4;
/// Bytes of one cell: one cache line.
pub const CELL: usize = 64;
/// Most channels of a region.
pub const MAX_CHANNELS: usize = 1 << 16;
/// Staging slots of one endpoint (large messages): release words in the header.
pub const STAGE_SLOTS: usize = 128;
/// Rendezvous records of one endpoint (see `rndv`): in the header.
pub const RNDV_RECORDS: usize = 32;
/// Largest generation of a rendezvous record: the 56 high bits of its state word
/// (see `rndv`), which descriptors naming the record carry too (see `cell`).
pub const GEN_MAX: u64 = (1 << 56) - 1;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_NCHAN: usize = 12;
const OFF_CELLS: usize = 16;
const OFF_PID: usize = 24;
const OFF_FD: usize = 28;
const OFF_START: usize = 32;
const OFF_NONCE: usize = 40;
const OFF_CLOSED: usize = 48;
/// Generation of the channel table: bumped after every claim and every release.
const OFF_GEN: usize = 56;
/// High-water mark of the channel table: one past the highest channel ever claimed.
/// Claims take the first free channel, so the table is used from its start and the
/// receiver looks at no control beyond this mark (nor touches its pages).
const OFF_HWM: usize = 64;
const OFF_RELEASE: usize = 576;
const OFF_WAKE: usize = OFF_RELEASE + 8 * STAGE_SLOTS;
/// Staging files: (fd u32, len u64) pairs, near then far.
const OFF_STAGE: usize = OFF_WAKE + 8;
const OFF_DIR_FD: usize = OFF_WAKE + 40;
const OFF_DIR_LEN: usize = OFF_WAKE + 48;
/// The inode of the pipe the wake word names.
const OFF_WAKE_INO: usize = OFF_WAKE + 56;
/// Rendezvous records, a line each: state, staged address, then the receiver's
/// request for help (destination address, payload offset, length).
const OFF_RNDV: usize = OFF_WAKE + 64;
const RNDV_STRIDE: usize = 64;
const HEADER_BYTES: usize = 4096;
static_assertions::const_assert!(OFF_RNDV + RNDV_STRIDE * RNDV_RECORDS <= HEADER_BYTES);
/// Page size the layout aligns rings to, so a freed ring's pages can be given back.
const PAGE: usize = 4096;
// Rings start on page (so cell) boundaries: senders count offsets in cells.
static_assertions::const_assert!(HEADER_BYTES.is_multiple_of(PAGE) && PAGE.is_multiple_of(CELL));

/// Offsets in a channel's control (two lines of the table): the head on a line of its
/// own (the receiver writes it), the claim and what the claimer writes on the other.
const CTL_HEAD: usize = 0;
const CTL_CLAIM: usize = 64;
const CTL_OWNER: usize = 72;
const CTL_STATE: usize = 80;
const CTL_NAME: usize = 88;
const CTL_BYTES: usize = 128;
static_assertions::const_assert!(CTL_NAME + NAME_LEN <= CTL_BYTES);

/// Channel state: in use by its claimer.
pub const CH_OPEN: u64 = 0;
/// Channel state: the claimer is gone; the receiver frees it once drained.
pub const CH_CLOSING: u64 = 1;

/// Fewest cells a channel may have: the largest packet (an inline payload of
/// [`crate::INLINE_MAX`] bytes behind a full header, 130 cells) and the quarter kept
/// for responses fit in an empty ring, so no packet waits for room that never comes.
pub const MIN_CELLS: usize = 256;

/// Geometry of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Channels (sending peers at once).
    pub nchan: usize,
    /// Cells per channel, a power of two, at least 256 (`MIN_CELLS`).
    pub cells: usize,
}

impl Geometry {
    /// Checked geometry.
    pub fn new(nchan: usize, cells: usize) -> Result<Geometry> {
        if nchan == 0
            || nchan > MAX_CHANNELS
            || !cells.is_power_of_two()
            || !(MIN_CELLS..=1 << 20).contains(&cells)
        {
            return Err(Error::Inval);
        }
        Ok(Geometry { nchan, cells })
    }

    /// Bytes of one ring.
    pub fn ring_bytes(&self) -> usize {
        self.cells * CELL
    }

    /// Offset of the first ring: past the header and the table.
    fn rings(&self) -> usize {
        HEADER_BYTES + (self.nchan * CTL_BYTES).next_multiple_of(PAGE)
    }

    /// Bytes of the whole region (a sparse file: only claimed rings take memory).
    pub fn bytes(&self) -> usize {
        self.rings() + self.nchan * self.ring_bytes()
    }

    /// Offset of channel `c`'s control.
    fn ctl(&self, c: usize) -> usize {
        HEADER_BYTES + c * CTL_BYTES
    }

    /// Offset of channel `c`'s ring, page-aligned (a ring is a whole number of pages).
    fn ring(&self, c: usize) -> usize {
        self.rings() + c * self.ring_bytes()
    }
}

/// One channel's place in a region, worked out once ([`Region::chan`]) so that the
/// receiver's per-packet accessors ([`Region::cell_at`], [`Region::head_of`]) need
/// neither the multiplication nor the per-access bounds checks of
/// [`Region::cell_off`] and [`Region::cell_word`].
///
/// The fields are private and only [`Region::chan`] builds one, from the region's
/// geometry: `head` is the 8-aligned head word of the channel's control, `cells` is a
/// multiple of [`CELL`], `mask + 1` cells follow it, and `end` is one past the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chan {
    /// Offset of the head word.
    head: usize,
    /// Offset of cell 0.
    cells: usize,
    /// Cells of the ring minus one (a power of two minus one).
    mask: u64,
    /// Offset one past the last cell.
    end: usize,
}

/// A ready-to-read view of one cell ([`Region::cell_at`]).
pub struct CellAt<'a> {
    /// Byte offset of the cell in the region.
    pub off: usize,
    /// The cell's control word.
    pub word: &'a AtomicU64,
    /// The bytes from the cell to the end of the ring (at least one cell), which the
    /// sender may be writing: copied out, never borrowed.
    pub avail: SharedBytes<'a>,
}

/// A mapped region, ours or a peer's.
pub struct Region {
    map: Mapping,
    geo: Geometry,
    /// Keeps our own region's file open so peers can open it through /proc (`None`
    /// for a peer's region: the mapping keeps the memory, a descriptor would only
    /// count against our limit).
    _fd: Option<OwnedFd>,
}

impl Region {
    /// Creates this endpoint's region, anonymous and mode 0600.
    pub fn create(geo: Geometry, nonce: u64) -> Result<(Region, Name)> {
        let fd = sys::memfd(geo.bytes())?;
        // Only the header is allocated up front: rings are allocated by the senders
        // that claim them, and the table's pages as claims touch them.
        let map = Mapping::new(&fd, geo.bytes())?;
        map.populate(HEADER_BYTES);
        let pid = sys::getpid();
        let start = sys::start_time(pid).ok_or(Error::Io)?;
        let rawfd = fd.as_raw_fd() as u32;
        let r = Region {
            map,
            geo,
            _fd: Some(fd),
        };
        r.publish_lifeline();
        r.put_u32(OFF_VERSION, VERSION);
        r.put_u32(OFF_NCHAN, geo.nchan as u32);
        r.put_u32(OFF_CELLS, geo.cells as u32);
        r.put_u32(OFF_PID, pid);
        r.put_u32(OFF_FD, rawfd);
        r.atomic(OFF_START).store(start, Ordering::Relaxed);
        r.atomic(OFF_NONCE).store(nonce, Ordering::Relaxed);
        r.atomic(OFF_MAGIC).store(MAGIC, Ordering::Release);
        let name = Name {
            pid,
            fd: rawfd,
            start,
            nonce,
        };
        Ok((r, name))
    }

    /// Maps a peer's region named `name` and checks that it is the one the name means
    /// (magic, version, pid, start time and nonce), whatever the file turned out to be.
    ///
    /// Nothing is mapped before the header, read with `pread`, names this endpoint and
    /// a geometry the file holds: a forged name pointing at some other (perhaps huge)
    /// file costs two system calls, not a mapping of it. Then only the declared
    /// geometry is mapped, and nothing of it is allocated or faulted in here: the
    /// ring this side claims is, when it claims it.
    pub fn open(name: &Name) -> Result<Region> {
        let fd = sys::open_peer_fd(name.pid, name.fd)?;
        // A file its owner could still shrink could fault our accesses (SIGBUS).
        sys::require_sealed(&fd)?;
        let len = sys::file_size(&fd)?;
        if len < HEADER_BYTES {
            return Err(Error::AddrNotAvail);
        }
        let mut head = [0u8; 48];
        sys::pread_exact(&fd, 0, &mut head)?;
        let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap());
        let geo = Geometry::new(u32_at(OFF_NCHAN) as usize, u32_at(OFF_CELLS) as usize)
            .map_err(|_| Error::AddrNotAvail)?;
        let ok = u64_at(OFF_MAGIC) == MAGIC
            && u32_at(OFF_VERSION) == VERSION
            && u32_at(OFF_PID) == name.pid
            && u64_at(OFF_START) == name.start
            && u64_at(OFF_NONCE) == name.nonce
            && geo.bytes() <= len;
        if !ok {
            return Err(Error::AddrNotAvail);
        }
        let map = Mapping::new(&fd, geo.bytes())?;
        // The descriptor goes now: the mapping keeps the file, and a peer's region
        // costs no descriptor.
        Ok(Region {
            map,
            geo,
            _fd: None,
        })
    }

    /// The region's geometry.
    #[inline]
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    #[inline]
    fn atomic(&self, off: usize) -> &AtomicU64 {
        self.map.word(off)
    }

    fn atomic32(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.map.len());
        // SAFETY: in bounds and 4-aligned; accessed atomically only.
        unsafe { &*self.map.ptr().add(off).cast::<AtomicU32>() }
    }

    fn put_u32(&self, off: usize, v: u32) {
        self.atomic32(off).store(v, Ordering::Relaxed);
    }

    fn get_u32(&self, off: usize) -> u32 {
        self.atomic32(off).load(Ordering::Relaxed)
    }

    /// Marks the region closed: peers stop sending to it.
    pub fn set_closed(&self) {
        self.atomic(OFF_CLOSED).store(1, Ordering::Release);
    }

    /// Whether the owner closed the region.
    #[inline]
    pub fn closed(&self) -> bool {
        self.atomic(OFF_CLOSED).load(Ordering::Acquire) != 0
    }

    /// The generation of the channel table: it changes after every claim and every
    /// release, so the receiver looks at the table only when it did.
    #[inline]
    pub fn active(&self) -> u64 {
        self.atomic(OFF_GEN).load(Ordering::Acquire)
    }

    /// Claims a free channel for the sender `me`: takes its claim word, writes the
    /// sender's name, publishes the claim as the channel's owner, raises the table's
    /// high-water mark to cover it and bumps the table's generation. The first free
    /// channel is taken, so the table fills from its start and the receiver's look
    /// at it stays as short as the most senders it had at once. Returns the channel,
    /// or `None` when all are taken. The pages of the channel's ring are allocated
    /// here, by the claimer, not on the first lap of its sends.
    pub fn claim(&self, me: &[u8; NAME_LEN], my_nonce: u64) -> Option<usize> {
        for c in 0..self.geo.nchan {
            let ctl = self.geo.ctl(c);
            if !chantable::take(self.atomic(ctl + CTL_CLAIM), my_nonce) {
                continue;
            }
            self.map
                .populate_range(self.geo.ring(c), self.geo.ring_bytes());
            self.copy_in(ctl + CTL_NAME, me);
            self.atomic(ctl + CTL_STATE)
                .store(CH_OPEN, Ordering::Relaxed);
            chantable::publish(
                self.atomic(ctl + CTL_OWNER),
                self.atomic(OFF_HWM),
                self.atomic(OFF_GEN),
                c,
                my_nonce,
            );
            return Some(c);
        }
        None
    }

    /// How many channels the receiver need look at: one past the highest ever
    /// claimed (a peer's garbage is bounded by the geometry).
    pub fn hwm(&self) -> usize {
        (self.atomic(OFF_HWM).load(Ordering::Acquire) as usize).min(self.geo.nchan)
    }

    /// The claim of channel `c` once its claimer's name is published (receiver side):
    /// the claimer's nonce when the claim word and the owner word agree, else 0.
    pub fn claimed(&self, c: usize) -> u64 {
        let ctl = self.geo.ctl(c);
        chantable::claimed(self.atomic(ctl + CTL_CLAIM), self.atomic(ctl + CTL_OWNER))
    }

    /// Frees channel `c` (receiver side, once it is drained and closing): its ring's
    /// pages go back to the system and read as zeros, and its head starts again at 0,
    /// so the next claimer finds no stale stamp in it.
    pub fn unclaim(&self, c: usize) {
        let ctl = self.geo.ctl(c);
        chantable::release_begin(self.atomic(ctl + CTL_OWNER));
        self.map.discard(self.geo.ring(c), self.geo.ring_bytes());
        chantable::release_end(
            self.atomic(ctl + CTL_HEAD),
            self.atomic(ctl + CTL_CLAIM),
            self.atomic(OFF_GEN),
        );
    }

    /// The claimer's name of channel `c`.
    pub fn chan_name(&self, c: usize) -> [u8; NAME_LEN] {
        let mut n = [0u8; NAME_LEN];
        self.map.copy_out(self.geo.ctl(c) + CTL_NAME, &mut n);
        n
    }

    /// The state word of channel `c`.
    #[inline]
    pub fn chan_state(&self, c: usize) -> &AtomicU64 {
        self.atomic(self.geo.ctl(c) + CTL_STATE)
    }

    /// The consumer position of channel `c`.
    #[inline]
    pub fn chan_head(&self, c: usize) -> &AtomicU64 {
        self.atomic(self.geo.ctl(c) + CTL_HEAD)
    }

    /// Byte offset of cell `i` (masked) of channel `c`.
    #[inline]
    pub fn cell_off(&self, c: usize, i: u64) -> usize {
        self.geo.ring(c) + ((i as usize) & (self.geo.cells - 1)) * CELL
    }

    /// The first word of the cell at byte offset `off`: its stamp and kind.
    #[inline]
    pub fn cell_word(&self, off: usize) -> &AtomicU64 {
        self.atomic(off)
    }

    /// Channel `c`'s place, for [`Self::cell_at`] and [`Self::head_of`]. Panics if
    /// `c` is not a channel of the region (callers take `c` from its geometry).
    pub fn chan(&self, c: usize) -> Chan {
        assert!(c < self.geo.nchan);
        let cells = self.geo.ring(c);
        Chan {
            head: self.geo.ctl(c) + CTL_HEAD,
            cells,
            mask: self.geo.cells as u64 - 1,
            end: cells + self.geo.cells * CELL,
        }
    }

    /// The cell at ring position `pos` (masked) of channel `ch`.
    ///
    /// One comparison proves every access in bounds: a `ch` of this region always
    /// passes it (the mapping covers the geometry, checked when the region was created
    /// or opened); one of a larger region panics instead of reading outside.
    #[inline(always)]
    pub fn cell_at(&self, ch: &Chan, pos: u64) -> CellAt<'_> {
        assert!(ch.end <= self.map.len());
        let off = ch.cells + ((pos & ch.mask) as usize) * CELL;
        // SAFETY: `Chan`'s invariant (it is built only by `Self::chan`) puts `off` on a
        // cell boundary, a multiple of 8 since `CELL` and the ring's page-aligned start
        // are, and `off + CELL <= ch.end <= len` (asserted above). The mapping is
        // page-aligned and lives as long as `self`; shared words are only accessed
        // atomically, and the bytes only through `SharedBytes`, readable while the
        // mapping lives (`ch.end - off <= len`, far below `isize::MAX`; `p` lies in
        // the mapping, so it is not null).
        unsafe {
            let p = self.map.ptr().add(off);
            CellAt {
                off,
                word: &*p.cast::<AtomicU64>(),
                avail: SharedBytes::new(p, ch.end - off),
            }
        }
    }

    /// Starts fetching the cell after ring position `pos` of channel `ch` into this
    /// CPU's cache. The poll loop asks for it beside each look at the next cell, so
    /// when a packet of two cells lands both lines travel at once instead of the
    /// second one only after the first was seen. A hint: nothing is read.
    ///
    /// The line fetched is the one right behind the cell at `pos`, not the ring's next
    /// position: the same address as [`Self::cell_at`]'s plus one cell, which the
    /// compiler derives from it instead of masking again. At the ring's last cell that
    /// line lies past the ring, a useless but harmless hint (packets never wrap, so
    /// none continues at cell 0).
    #[inline(always)]
    pub fn prefetch_next(&self, ch: &Chan, pos: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let off = ch.cells + ((pos & ch.mask) as usize) * CELL + CELL;
            // SAFETY: a prefetch never faults and reads nothing into the program; the
            // address is formed with `wrapping_add`, so no in-bounds claim is made
            // (it is in bounds for a `ch` of this region except behind the ring's last
            // cell, where it may point past the ring or the mapping).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(self.map.ptr().wrapping_add(off).cast()) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (ch, pos);
    }

    /// The consumer position word of channel `ch` ([`Self::chan_head`] of it).
    #[inline(always)]
    pub fn head_of(&self, ch: &Chan) -> &AtomicU64 {
        assert!(ch.end <= self.map.len());
        // SAFETY: as in `cell_at`: the head word is in the channel's control, which
        // lies before its ring (`head < cells < end <= len`), 8-aligned (the table
        // starts on a page and controls are `CTL_BYTES` apart).
        unsafe { &*self.map.ptr().add(ch.head).cast::<AtomicU64>() }
    }

    /// The release word of staging slot `s` (written by the receiver of a large payload).
    #[inline]
    pub fn release(&self, s: usize) -> &AtomicU64 {
        self.atomic(OFF_RELEASE + 8 * (s % STAGE_SLOTS))
    }

    /// The state word of rendezvous record `r` (see `rndv`): written by the owner
    /// (sender) and by the receiver of the message the record describes.
    #[inline]
    pub fn rndv_state(&self, r: usize) -> &AtomicU64 {
        self.atomic(OFF_RNDV + RNDV_STRIDE * (r % RNDV_RECORDS))
    }

    /// The address, in the owner, of the staged copy of rendezvous record `r`'s
    /// payload: written by the owner before it publishes the copy (`STAGED`).
    #[inline]
    pub fn rndv_addr(&self, r: usize) -> &AtomicU64 {
        self.atomic(OFF_RNDV + RNDV_STRIDE * (r % RNDV_RECORDS) + 8)
    }

    /// Word `i` (0: destination address, 1: payload offset, 2: length, 3: next piece)
    /// of the receiver's request for help in rendezvous record `r`: written by the
    /// receiver before it asks (`HELP`); both sides take pieces from word 3.
    #[inline]
    pub fn rndv_help(&self, r: usize, i: usize) -> &AtomicU64 {
        self.atomic(OFF_RNDV + RNDV_STRIDE * (r % RNDV_RECORDS) + 16 + 8 * (i % 4))
    }

    /// The wake word: while non-zero, the owner may be asleep on a pipe whose write
    /// end is descriptor `word - 1` of its process (inode at `OFF_WAKE_INO`).
    #[inline]
    fn wake_word(&self) -> &AtomicU64 {
        self.atomic(OFF_WAKE)
    }

    /// Owner: asks the next sender from another process to write to pipe `fd`
    /// (write end in this process, inode `ino`). SeqCst: the caller then makes
    /// concurrent senders' stores visible (`sys::membarrier_global`) before it checks
    /// its channels one last time.
    pub fn arm_wake(&self, fd: u32, ino: u64) {
        self.atomic(OFF_WAKE_INO).store(ino, Ordering::Relaxed);
        self.wake_word().store(u64::from(fd) + 1, Ordering::SeqCst);
    }

    /// Sender, after publishing a packet: whether the owner asked to be woken (one
    /// load of a line the owner writes only when it arms).
    #[inline]
    pub fn wake_armed(&self) -> bool {
        self.wake_word().load(Ordering::Relaxed) != 0
    }

    /// Sender: takes the owner's wake request, if still there (one sender wins):
    /// (descriptor, inode) of the owner's pipe, unvalidated.
    pub fn take_wake(&self) -> Option<(u32, u64)> {
        let w = self.wake_word().swap(0, Ordering::AcqRel);
        let fd = u32::try_from(w.checked_sub(1)?).ok()?;
        Some((fd, self.atomic(OFF_WAKE_INO).load(Ordering::Relaxed)))
    }

    /// Publishes the owner's staging file `i` (0: near, 1: far).
    pub fn set_stage(&self, i: usize, fd: u32, len: u64) {
        let off = OFF_STAGE + 16 * (i & 1);
        self.put_u32(off, fd);
        self.atomic(off + 8).store(len, Ordering::Release);
    }

    /// The owner's staging file `i`: descriptor and length, if it has one.
    pub fn stage(&self, i: usize) -> Option<(u32, u64)> {
        let off = OFF_STAGE + 16 * (i & 1);
        let len = self.atomic(off + 8).load(Ordering::Acquire);
        (len != 0).then(|| (self.get_u32(off), len))
    }

    /// Advertises the owner process's mapped-segment directory (see `directory`).
    pub fn set_directory(&self, fd: u32, len: u64) {
        self.put_u32(OFF_DIR_FD, fd);
        self.atomic(OFF_DIR_LEN).store(len, Ordering::Release);
    }

    /// The owner process's mapped-segment directory (descriptor, length), if any.
    pub fn directory(&self) -> Option<(u32, u64)> {
        let len = self.atomic(OFF_DIR_LEN).load(Ordering::Acquire);
        (len != 0).then(|| (self.get_u32(OFF_DIR_FD), len))
    }

    /// The mapping of the region.
    #[inline]
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// A packet of `len` bytes at cell offset `off` (see [`Mapping::packet`]).
    #[inline]
    pub fn packet(&self, off: usize, len: usize) -> Packet<'_> {
        self.map.packet(off, len)
    }

    /// Copies `src` into the region at `off`.
    #[inline]
    pub fn copy_in(&self, off: usize, src: &[u8]) {
        self.map.copy_in(off, src);
    }

    /// Copies the bytes at `off..off + dst.len()` into `dst` (see
    /// [`Mapping::copy_out`]).
    #[inline]
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) {
        self.map.copy_out(off, dst);
    }

    /// Reads a little-endian u64 at `off` (not necessarily published atomically).
    #[inline]
    pub fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.copy_out(off, &mut b);
        u64::from_le_bytes(b)
    }

    /// Bytes of the region.
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// Where the owner process's lifeline is advertised: the header's last line, which
/// nothing else uses.
const OFF_LIFELINE: usize = HEADER_BYTES - 64;
static_assertions::const_assert!(OFF_RNDV + RNDV_STRIDE * RNDV_RECORDS <= OFF_LIFELINE);

impl Region {
    /// Advertises this process's lifeline (see `sys::Lifeline`), if it has one.
    fn publish_lifeline(&self) {
        if let Some(l) = sys::Lifeline::own() {
            self.set_lifeline(l.fd(), l.tid());
        }
    }

    /// Advertises the owner process's lifeline: descriptor `fd`, mutex thread `tid`.
    pub fn set_lifeline(&self, fd: u32, tid: u32) {
        self.put_u32(OFF_LIFELINE, fd);
        self.atomic32(OFF_LIFELINE + 4)
            .store(tid, Ordering::Release);
    }

    /// The owner process's lifeline (descriptor, mutex thread), unvalidated, if it
    /// advertises one.
    pub fn lifeline(&self) -> Option<(u32, u32)> {
        let tid = self.atomic32(OFF_LIFELINE + 4).load(Ordering::Acquire);
        (tid != 0).then(|| (self.get_u32(OFF_LIFELINE), tid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_open_claim() {
        let geo = Geometry::new(4, 256).unwrap();
        let (r, name) = Region::create(geo, 77).unwrap();
        let p = Region::open(&name).unwrap();
        assert_eq!(p.geometry(), geo);
        let me = [5u8; NAME_LEN];
        let gen0 = r.active();
        assert_eq!(r.hwm(), 0);
        let a = p.claim(&me, 1).unwrap();
        let b = p.claim(&me, 2).unwrap();
        assert_eq!((a, b), (0, 1), "first free channel first");
        assert_eq!(r.hwm(), 2);
        assert_eq!((r.claimed(a), r.claimed(b)), (1, 2));
        assert_eq!(r.active(), gen0 + 2);
        assert_eq!(r.chan_name(b), me);
        r.unclaim(a);
        assert_eq!(r.claimed(a), 0);
        assert_eq!(r.active(), gen0 + 3);
        let others: Vec<_> = (3..6).map(|n| p.claim(&me, n).unwrap()).collect();
        assert!(others.contains(&a), "a freed channel is claimed again");
        assert_eq!(p.claim(&me, 7), None, "all four taken");
        assert!(!p.closed());
        r.set_closed();
        assert!(p.closed());
    }

    #[test]
    fn chan_views_match_the_checked_accessors() {
        let geo = Geometry::new(3, 256).unwrap();
        let (r, _) = Region::create(geo, 5).unwrap();
        for c in 0..geo.nchan {
            let ch = r.chan(c);
            assert!(std::ptr::eq(r.head_of(&ch), r.chan_head(c)));
            // Positions are masked: a lap later is the same cell.
            for pos in [0u64, 1, 255, 256, 257, 1000] {
                let at = r.cell_at(&ch, pos);
                assert_eq!(at.off, r.cell_off(c, pos));
                assert!(std::ptr::eq(at.word, r.cell_word(at.off)));
                let to_end = geo.cells - (pos as usize % geo.cells);
                assert_eq!(at.avail.len(), to_end * CELL);
                assert_eq!(
                    at.avail.as_ptr(),
                    r.mapping().ptr().wrapping_add(at.off).cast_const()
                );
            }
            at_word_roundtrip(&r, &ch);
        }
    }

    fn at_word_roundtrip(r: &Region, ch: &Chan) {
        r.cell_at(ch, 7).word.store(0xabcd, Ordering::Relaxed);
        assert_eq!(r.read_u64(r.cell_at(ch, 7).off), 0xabcd);
        assert_eq!(r.cell_at(ch, 7).avail.read::<2>(0), Some([0xcd, 0xab]));
    }

    #[test]
    #[should_panic]
    fn chan_outside_the_geometry_panics() {
        let (r, _) = Region::create(Geometry::new(2, 256).unwrap(), 6).unwrap();
        let _ = r.chan(2);
    }

    #[test]
    #[should_panic]
    fn chan_of_a_larger_region_is_refused() {
        let (big, _) = Region::create(Geometry::new(4, 512).unwrap(), 7).unwrap();
        let (small, _) = Region::create(Geometry::new(1, 256).unwrap(), 8).unwrap();
        let ch = big.chan(3);
        let _ = small.cell_at(&ch, 0);
    }

    /// A forged address naming a huge file that is not a region costs nothing: the
    /// header is read and refused before anything is mapped, so not one page of the
    /// file is allocated (a mapping with `MAP_POPULATE`, as before, allocated all
    /// of it: 4 GiB and seconds for a 4 GiB sparse file).
    #[test]
    fn a_forged_name_maps_nothing_of_a_huge_file() {
        use std::os::fd::AsRawFd;
        let huge = sys::memfd(1 << 30).unwrap();
        let pid = sys::getpid();
        let forged = Name {
            pid,
            fd: huge.as_raw_fd() as u32,
            start: sys::start_time(pid).unwrap(),
            nonce: 0x1234,
        };
        assert_eq!(Region::open(&forged).err(), Some(Error::AddrNotAvail));
        // SAFETY: `st` is plain old data that fstat fills in; the descriptor is valid.
        let blocks = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::fstat(huge.as_raw_fd(), &mut st), 0);
            st.st_blocks
        };
        assert_eq!(blocks, 0, "pages of the forged file were allocated");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Whatever a file names itself in its header (a peer's bytes), opening it as
        /// a region either fails or maps a geometry the file holds, named as asked: a
        /// hostile header gets no mapping past the file and no panic.
        #[test]
        fn hostile_headers_are_refused_or_fit(
            nchan in proptest::prelude::prop_oneof![
                proptest::prelude::Just(1u32),
                1u32..=70_000,
                proptest::prelude::any::<u32>()
            ],
            cells in proptest::prelude::prop_oneof![
                proptest::prelude::Just(256u32),
                proptest::prelude::any::<u32>()
            ],
            magic_ok in proptest::prelude::any::<bool>(),
            version in proptest::prelude::prop_oneof![
                proptest::prelude::Just(VERSION),
                proptest::prelude::any::<u32>()
            ],
            file_pages in 1usize..64,
        ) {
            use std::os::fd::AsRawFd;
            let len = file_pages * PAGE;
            let fd = sys::memfd(len).unwrap();
            let pid = sys::getpid();
            let name = Name {
                pid,
                fd: fd.as_raw_fd() as u32,
                start: sys::start_time(pid).unwrap(),
                nonce: 0x5eed,
            };
            let map = Mapping::new(&fd, len).unwrap();
            let magic = if magic_ok { MAGIC } else { MAGIC ^ 1 };
            map.word(OFF_MAGIC).store(magic, Ordering::Relaxed);
            map.word(OFF_START).store(name.start, Ordering::Relaxed);
            map.word(OFF_NONCE).store(name.nonce, Ordering::Relaxed);
            map.word(OFF_VERSION).store(u64::from(nchan) << 32 | u64::from(version), Ordering::Relaxed);
            map.word(OFF_CELLS).store(u64::from(cells), Ordering::Relaxed);
            map.word(OFF_PID).store(u64::from(name.fd) << 32 | u64::from(pid), Ordering::Relaxed);
            match Region::open(&name) {
                Ok(r) => {
                    proptest::prop_assert!(r.geometry().bytes() <= len);
                    proptest::prop_assert!(r.len() <= len);
                    proptest::prop_assert!(magic_ok && version == VERSION);
                }
                Err(e) => proptest::prop_assert_eq!(e, Error::AddrNotAvail),
            }
        }
    }

    #[test]
    fn open_checks_identity() {
        let geo = Geometry::new(1, 256).unwrap();
        let (_r, name) = Region::create(geo, 9).unwrap();
        let wrong = Name { nonce: 10, ..name };
        assert!(Region::open(&wrong).is_err());
        let wrong = Name {
            start: name.start + 1,
            ..name
        };
        assert!(Region::open(&wrong).is_err());
        assert!(Geometry::new(0, 256).is_err());
        assert!(Geometry::new(1, 100).is_err());
        assert!(Geometry::new(1, MIN_CELLS / 2).is_err());
        assert!(Geometry::new(1, MIN_CELLS).is_ok());
    }
}
