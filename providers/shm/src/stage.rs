//! Large payloads. A payload too big for the ring is copied once, at post time, into
//! a staging slot of the sender (the core promises callers that send buffers are
//! theirs again when the call returns), and the receiver copies it from there straight
//! into its destination:
//! - near staging file (every endpoint, [`NEAR_BYTES`]): payloads up to [`NEAR_MAX`]
//!   while it has room; the receiver maps it once and copies with `memcpy`, no system
//!   call per message;
//! - private buffers read with cross-memory attach (`process_vm_readv`, when the
//!   start-up probe works), for larger payloads or when the near file is full, so
//!   large data never takes shared memory; only for a receiver seen to read our
//!   memory (a rendezvous read showed it, see `rndv`), since a ptrace policy may
//!   refuse it the reads that our own probe was allowed;
//! - far staging file (bounce-buffer fallback: `FABRIC_SHM_CMA=0`, the kernel refuses
//!   the probe, or a receiver not known to read our memory), sparse, sized once when
//!   made, mapped by the receiver on first use.
//!
//! In a staging file, each payload follows a line holding its progress word: the
//! sender copies the [`FIRST`] bytes, sends the packet, then copies the rest a chunk at
//! a time, publishing each; the receiver copies out behind it, so the two copies
//! overlap. A receiver waiting on a sender that died, or that stops making progress
//! for [`PROGRESS_LIMIT`], gives the payload up with `FI_EIO`. The sender writes a
//! staging file with ordinary stores or with stores that bypass its cache, whichever
//! its recent copies say suits where the receiver runs (see [`crate::layout::bypass`]).
//!
//! Payloads that fit go round the first [`WINDOW`] bytes of the near file, each after
//! the last; the others, and any while the window is full, take the first fit. The
//! window's pages are allocated and mapped on both sides when the file is created and
//! when the receiver maps it, so that no copy through the window takes a page fault.
//!
//! Payloads sent by rendezvous (see `rndv`), and medium ones streamed through the ring
//! (see [`crate::cell::STREAM`]), are read by the same [`crate::ShmPull`].
//!
//! The receiver writes the slot's generation into the sender's release word once it
//! has copied the payload; the sender reuses released slots, and slots whose receiver
//! died.

use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fabric::{Error, Result};

use crate::cell::Desc;
use crate::layout::bypass::{self, Chooser, Stores};
use crate::layout::region::{Region, RNDV_RECORDS, STAGE_SLOTS};
use crate::layout::sys::{self, Mapping};
use crate::peer::{CmaReads, PeerRegion, StageMap};
use crate::rndv;

/// Bytes of the near staging file every endpoint has: payloads up to [`NEAR_MAX`] are
/// staged there while it has room. Counted in the default footprint.
pub const NEAR_BYTES: usize = 2560 << 10;
/// Largest payload staged in the near file.
pub const NEAR_MAX: usize = 1 << 20;
/// Bytes of the far staging file of the bounce-buffer fallback (sparse: only extents in
/// use take memory).
pub const FAR_BYTES: usize = 256 << 20;
/// Most bytes staged privately at once (cross-memory attach) before sends see EAGAIN.
pub const STAGE_PRIVATE_BYTES: usize = 512 << 20;
/// Bytes of a payload staged in a file before its packet goes out: small, so the
/// receiver starts early. The rest follows in [`CHUNK`]s while the receiver already
/// copies out behind the sender (see [`Stage::fill`]), so the two copies overlap
/// instead of following each other.
pub const FIRST: usize = 8 << 10;
/// The pieces after the [`FIRST`], each published once copied: larger, so the receiver
/// that caught up waits on fewer boundaries.
pub const CHUNK: usize = 16 << 10;
/// Bytes before each payload in a staging file: the line of its progress word, the
/// count of payload bytes copied so far.
pub(crate) const PROGRESS: usize = 64;
/// Bytes at the start of the near staging file that payloads go round in turn: a
/// payload then goes to lines neither core touched for a few payloads, which both
/// copy faster than lines the other core just used (the sender's stores need not take
/// them back from the receiver's cache first). In a 64 KiB ping-pong between cores
/// sharing a cache, 0.68-0.77 times the time of reusing the first fit (in-process A/B,
/// blocks of 50 round trips alternating; see the README).
pub(crate) const WINDOW: usize = 1 << 20;
/// Bytes at the start of each staging file (near, far) whose pages are allocated and
/// mapped up front, by the sender when it creates the file and by a receiver when it
/// maps it: the near file's window, none of the sparse far file.
const POPULATED: [usize; 2] = [WINDOW, 0];
/// How long a receiver waits for a sender's copy to make progress before it gives the
/// payload up (`FI_EIO`): far beyond any live sender's copy, so only a stuck or
/// malicious one meets it.
const PROGRESS_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

struct Slot {
    gen: u64,
    busy: bool,
    /// Private buffer (cross-memory attach).
    buf: Vec<u8>,
    /// Staging file (0 near, 1 far) and extent, or `None` for a private buffer.
    file: Option<usize>,
    off: usize,
    /// Bytes held: the extent in a file (progress line included), or the payload in
    /// a private buffer.
    len: usize,
    peer: Option<Arc<PeerRegion>>,
}

struct File {
    map: Mapping,
    _fd: OwnedFd,
}

impl File {
    fn new(own: &Region, i: usize, len: usize) -> Result<File> {
        let fd = sys::memfd(len)?;
        let map = Mapping::new(&fd, len)?;
        map.populate(POPULATED[i]);
        own.set_stage(i, fd.as_raw_fd() as u32, len as u64);
        Ok(File { map, _fd: fd })
    }
}

/// A sender's staging slots.
pub struct Stage {
    /// Near file (always), far file (from the start without cross-memory attach, else
    /// made for the first large payload to a receiver not known to read our memory).
    files: [Option<File>; 2],
    cma: bool,
    slots: Vec<Slot>,
    /// Bytes staged privately.
    used: usize,
    /// How payloads are copied into the files.
    chooser: Chooser,
    /// Where the next payload of the near file's [`WINDOW`] goes.
    cursor: usize,
}

impl Stage {
    /// Staging for an endpoint whose region is `own`: a near file for payloads up to
    /// [`NEAR_MAX`], then private buffers read with cross-memory attach, or without it
    /// a far file; both files are published in `own`'s header.
    pub fn new(own: &Region, cma: bool) -> Result<Stage> {
        let near = File::new(own, 0, NEAR_BYTES)?;
        let far = if cma {
            None
        } else {
            Some(File::new(own, 1, FAR_BYTES)?)
        };
        let slots = (0..STAGE_SLOTS)
            .map(|_| Slot {
                gen: 0,
                busy: false,
                buf: Vec::new(),
                file: None,
                off: 0,
                len: 0,
                peer: None,
            })
            .collect();
        Ok(Stage {
            files: [Some(near), far],
            cma,
            slots,
            used: 0,
            chooser: Chooser::default(),
            cursor: 0,
        })
    }

    /// Copies `parts` (`len` bytes in all) into a free slot for `peer` and describes it.
    /// `Again` while every slot (or every byte of the place it needs) is in use.
    ///
    /// A payload staged in a file is copied only up to its [`FIRST`] bytes here: once
    /// the packet describing it is out, [`Self::fill`] with the returned [`Fill`] copies
    /// the rest.
    pub fn stage(
        &mut self,
        own: &Region,
        peer: &Arc<PeerRegion>,
        parts: &[&[u8]],
        len: usize,
    ) -> Result<(Desc, Option<Fill>)> {
        self.reclaim(own, false);
        // Private memory only for a receiver seen to read ours: the kernel may refuse
        // it, and nobody would be left to stage the payload again once we returned.
        let private = self.cma && peer.cma_reads() == CmaReads::Yes;
        if !private && len > NEAR_MAX && self.files[1].is_none() {
            self.files[1] = Some(File::new(own, 1, FAR_BYTES)?);
        }
        let placed = match self.place(len, private) {
            Some(p) => p,
            None => {
                self.reclaim(own, true);
                self.place(len, private).ok_or(Error::Again)?
            }
        };
        let (s, file, off) = placed;
        let (addr, mode, rest) = match file {
            None => {
                let slot = &mut self.slots[s];
                slot.buf.clear();
                // Out of memory is the caller's error to handle, not an abort.
                slot.buf.try_reserve(len).map_err(|_| Error::NoMem)?;
                for p in parts {
                    slot.buf.extend_from_slice(p);
                }
                self.used += len;
                (slot.buf.as_ptr() as u64, Desc::CMA, None)
            }
            Some(f) => {
                let map = &self.files[f].as_ref().ok_or(Error::NoMem)?.map;
                let at = off + PROGRESS;
                let first = len.min(FIRST);
                let how = self.chooser.pick(len - first);
                copy_range(map, at, parts, 0, first, how);
                // Before the packet: its receiver sees at least the first chunk.
                map.word(off).store(first as u64, Ordering::Release);
                let mode = if f == 0 {
                    Desc::MAPPED
                } else {
                    Desc::MAPPED_FAR
                };
                let rest = (first < len).then_some(Fill {
                    file: f,
                    at,
                    from: first,
                    len,
                    how,
                });
                (at as u64, mode, rest)
            }
        };
        let slot = &mut self.slots[s];
        slot.gen += 1;
        slot.busy = true;
        slot.file = file;
        slot.off = off;
        slot.len = if file.is_some() { PROGRESS + len } else { len };
        slot.peer = Some(peer.clone());
        if file == Some(0) && off + slot.len <= WINDOW {
            self.cursor = (off + slot.len).next_multiple_of(64);
        }
        let desc = Desc {
            addr,
            len: len as u64,
            slot: s as u32,
            mode,
            gen: slot.gen,
        };
        Ok((desc, rest))
    }

    /// Copies the rest of a payload that [`Self::stage`] began, a [`CHUNK`] at a time,
    /// publishing each in the payload's progress word for the receiver copying out
    /// behind. Called once the packet that describes the payload is out.
    pub fn fill(&mut self, rest: Fill, parts: &[&[u8]]) {
        let Some(file) = &self.files[rest.file] else {
            return;
        };
        let progress = file.map.word(rest.at - PROGRESS);
        let start = bypass::ticks();
        let mut done = rest.from;
        while done < rest.len {
            let next = (done + CHUNK).min(rest.len);
            copy_range(&file.map, rest.at, parts, done, next, rest.how);
            progress.store(next as u64, Ordering::Release);
            done = next;
        }
        let took = bypass::ticks().wrapping_sub(start);
        self.chooser.record(rest.how, rest.len - rest.from, took);
    }

    /// Where a payload of `len` bytes goes: (slot, staging file or private, offset of
    /// its extent, which starts with the progress line). Private memory only if
    /// `private` allows it.
    fn place(&self, len: usize, private: bool) -> Option<(usize, Option<usize>, usize)> {
        let s = self.slots.iter().position(|s| !s.busy)?;
        if len <= NEAR_MAX {
            // Waiting for room near beats a system call per message.
            return self.near(PROGRESS + len).map(|off| (s, Some(0), off));
        }
        if private {
            if self.used + len > STAGE_PRIVATE_BYTES && self.used > 0 {
                return None;
            }
            return Some((s, None, 0));
        }
        self.fit(1, PROGRESS + len, 0, usize::MAX)
            .map(|off| (s, Some(1), off))
    }

    /// An extent of `len` bytes in the near file: the next in the [`WINDOW`] if it
    /// fits there, else the first fit in the file.
    fn near(&self, len: usize) -> Option<usize> {
        self.fit(0, len, self.cursor, WINDOW)
            .or_else(|| self.fit(0, len, 0, usize::MAX))
    }

    /// First fit in staging file `f` at or after `at` that ends by `below`, avoiding
    /// extents in use (no allocation: the candidate moves past every extent it
    /// overlaps until none does).
    fn fit(&self, f: usize, len: usize, mut at: usize, below: usize) -> Option<usize> {
        let cap = self.files[f].as_ref()?.map.len().min(below);
        loop {
            let end = at.checked_add(len)?;
            if end > cap {
                return None;
            }
            let clash = self
                .slots
                .iter()
                .filter(|s| s.busy && s.file == Some(f) && s.off < end && at < s.off + s.len)
                .map(|s| (s.off + s.len).next_multiple_of(64))
                .max();
            match clash {
                Some(next) => at = next,
                None => return Some(at),
            }
        }
    }

    /// Waits, up to `linger`, until every staged payload was copied by its receiver
    /// (or the receiver is gone): an endpoint closing right after a large send (a
    /// process about to exit, say) still delivers it.
    pub fn drain(&mut self, own: &Region, linger: std::time::Duration) {
        let deadline = std::time::Instant::now() + linger;
        loop {
            self.reclaim(own, true);
            if self.slots.iter().all(|s| !s.busy) || std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// Frees released slots; with `sweep`, also slots whose receiver is gone.
    fn reclaim(&mut self, own: &Region, sweep: bool) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if !s.busy {
                continue;
            }
            let released = own.release(i).load(Ordering::Acquire) == s.gen;
            if released || (sweep && s.peer.as_ref().is_some_and(|p| p.gone())) {
                s.busy = false;
                s.peer = None;
                if s.file.is_none() {
                    self.used -= s.len;
                }
                if s.buf.capacity() > (64 << 20) {
                    s.buf = Vec::new();
                }
            }
        }
    }
}

/// The part of a file-staged payload still to copy once its packet is out
/// ([`Stage::fill`]).
#[derive(Debug)]
pub struct Fill {
    file: usize,
    /// Offset of the payload in the file.
    at: usize,
    /// Bytes already copied.
    from: usize,
    len: usize,
    /// How the payload is copied.
    how: Stores,
}

impl Fill {
    /// How the payload is copied.
    #[cfg(test)]
    pub fn stores(&self) -> Stores {
        self.how
    }
}

/// Copies bytes `from..to` of the payload `parts` (split anywhere) to `at + from` in
/// `map`, with the stores `how` says.
pub(crate) fn copy_range(
    map: &Mapping,
    at: usize,
    parts: &[&[u8]],
    from: usize,
    to: usize,
    how: Stores,
) {
    let mut start = 0;
    for p in parts {
        let end = start + p.len();
        let (a, b) = (start.max(from), end.min(to));
        if a < b {
            let (off, src) = (at + a, &p[a - start..b - start]);
            match how {
                Stores::Plain => map.copy_in(off, src),
                Stores::Bypass => map.copy_in_bypass(off, src),
            }
        }
        start = end;
    }
}

/// Copies `dst.len()` bytes of the payload at `at` of staging file `map` (behind its
/// progress line, whose `len` bytes in all the sender publishes as it copies them),
/// from payload offset `off` on, each piece once the sender published it. `gone` says
/// whether the sender died, asked only once it stalls.
fn copy_staged(
    map: &StageMap,
    at: usize,
    len: usize,
    off: usize,
    dst: &mut [u8],
    gone: impl Fn() -> bool,
) -> Result<()> {
    let progress = || map.load(at - PROGRESS, Ordering::Acquire);
    let end = off + dst.len();
    let mut done = off;
    while done < end {
        let ready = wait_ready(progress, done, len, &gone)?.min(end);
        map.copy_out(at + done, &mut dst[done - off..ready - off]);
        done = ready;
    }
    Ok(())
}

/// A large payload: staged by the sender, or (rendezvous) still in its buffer (read
/// through [`crate::ShmPull`]).
pub(crate) struct Staged {
    peer: Arc<PeerRegion>,
    desc: Desc,
    len: usize,
    /// Rendezvous: bytes read in order from the start; the read that completes them
    /// lets the sender go at once.
    next: Cell<usize>,
}

impl Staged {
    /// The payload `desc` describes, staged by `peer`. `Err(Io)` when the descriptor
    /// points outside what the peer published.
    pub(crate) fn new(peer: Arc<PeerRegion>, desc: &Desc) -> Result<Staged> {
        let len = usize::try_from(desc.len).map_err(|_| Error::Io)?;
        match desc.mode {
            Desc::CMA => {}
            Desc::RNDV => {
                if desc.slot as usize >= RNDV_RECORDS {
                    return Err(Error::Io);
                }
            }
            _ => {
                let map = Self::map(&peer, desc.file())?;
                let off = usize::try_from(desc.addr).map_err(|_| Error::Io)?;
                // The payload follows its progress line.
                if off < PROGRESS
                    || !off.is_multiple_of(8)
                    || off > map.len()
                    || len > map.len() - off
                {
                    return Err(Error::Io);
                }
            }
        }
        Ok(Staged {
            peer,
            desc: *desc,
            len,
            next: Cell::new(0),
        })
    }

    fn map(peer: &PeerRegion, i: usize) -> Result<&StageMap> {
        peer.stage[i]
            .get_or_init(|| {
                let (fd, len) = peer.region.stage(i).ok_or(Error::Io)?;
                StageMap::open(peer.name.pid, fd, len, POPULATED[i])
            })
            .as_ref()
            .map_err(|e| *e)
    }

    /// The packet was consumed: hands the staging slot or the rendezvous record back
    /// to the sender.
    pub(crate) fn finish(&self) {
        let r = &self.peer.region;
        if self.desc.mode == Desc::RNDV {
            rndv::finish(r.rndv_state(self.desc.slot as usize), self.desc.gen);
        } else {
            r.release(self.desc.slot as usize)
                .store(self.desc.gen, Ordering::Release);
        }
    }

    /// A read of a rendezvous payload: from the sender's buffer while it waits, else
    /// from the copy it staged.
    fn read_rndv(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        let (slot, gen) = (self.desc.slot as usize, self.desc.gen);
        let w = self.peer.region.rndv_state(slot);
        let pid = self.peer.name.pid;
        match rndv::claim(w, gen) {
            rndv::Claim::Direct => {
                let res = if dst.len() >= rndv::SPLIT_MIN {
                    self.split_read(w, off, dst)
                } else {
                    sys::cma_read(pid, self.desc.addr.wrapping_add(off as u64), dst)
                };
                let mark = self.peer.region.rndv_help(slot, 3);
                if res == Err(Error::Access) {
                    // The kernel refuses us the sender's memory: the sender, seeing the
                    // mark, stages the payload in its shared file.
                    mark.store(rndv::READ_REFUSED, Ordering::Relaxed);
                    rndv::release_read(w, gen, false);
                    return self.read_withdrawn(w, off, dst);
                }
                if res.is_ok() {
                    mark.store(rndv::READ_OK, Ordering::Relaxed);
                }
                let mut complete = false;
                if res.is_ok() && off == self.next.get() {
                    self.next.set(off + dst.len());
                    complete = off + dst.len() == self.len;
                }
                rndv::release_read(w, gen, complete);
                res
            }
            rndv::Claim::Staged => self.read_staged(off, dst),
            rndv::Claim::Refused => Err(Error::Io),
        }
    }

    /// A read of a withdrawn rendezvous payload (its state seen `STAGED`): from the
    /// sender's private copy, or from its shared file.
    fn read_staged(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        let slot = self.desc.slot as usize;
        // Ordered by the acquire of STAGED, which the sender published after the
        // address.
        let at = self.peer.region.rndv_addr(slot).load(Ordering::Relaxed);
        let Some((fd, start)) = rndv::file_of(at) else {
            return sys::cma_read(self.peer.name.pid, at.wrapping_add(off as u64), dst);
        };
        let (mapped, map) = self
            .peer
            .rndv_file
            .get_or_init(|| {
                StageMap::open(self.peer.name.pid, fd, rndv::FILE_BYTES as u64, 0).map(|m| (fd, m))
            })
            .as_ref()
            .map_err(|e| *e)?;
        // One file for the life of the sender's endpoint; anything else is garbage.
        if *mapped != fd || start > map.len() || self.len > map.len() - start {
            return Err(Error::Io);
        }
        // Written whole before the sender published STAGED.
        map.copy_out(start + off, dst);
        Ok(())
    }

    /// After a refused read was given back: waits until the sender withdrew the
    /// payload, then reads it from there. `Err(Io)` if the sender dies first, or does
    /// not withdraw within [`PROGRESS_LIMIT`] (a live sender does at once).
    fn read_withdrawn(
        &self,
        w: &std::sync::atomic::AtomicU64,
        off: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        let start = std::time::Instant::now();
        let mut check = start + HELP_LIVENESS;
        let mut n = 0u32;
        loop {
            match rndv::withdrawn(w, self.desc.gen) {
                Some(true) => return self.read_staged(off, dst),
                Some(false) => {}
                None => return Err(Error::Io),
            }
            n = n.wrapping_add(1);
            if n.is_multiple_of(256) {
                let now = std::time::Instant::now();
                if now >= check {
                    if self.peer.process_gone() || now - start >= PROGRESS_LIMIT {
                        return Err(Error::Io);
                    }
                    check = now + HELP_LIVENESS;
                }
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    }
}

impl Staged {
    /// A direct read of a rendezvous payload shared with the sender: both take pieces
    /// in turn, we reading ours, the sender (idle in its wait) writing its own into
    /// `dst`, unless we take the request back before it started.
    fn split_read(
        &self,
        w: &std::sync::atomic::AtomicU64,
        off: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        let (slot, gen) = (self.desc.slot as usize, self.desc.gen);
        let r = &self.peer.region;
        let pid = self.peer.name.pid;
        let at = self.desc.addr.wrapping_add(off as u64);
        let len = dst.len();
        r.rndv_help(slot, 0)
            .store(dst.as_mut_ptr() as u64, Ordering::Relaxed);
        r.rndv_help(slot, 1).store(off as u64, Ordering::Relaxed);
        r.rndv_help(slot, 2).store(len as u64, Ordering::Relaxed);
        let next = r.rndv_help(slot, 3);
        next.store(0, Ordering::Relaxed);
        rndv::ask_help(w, gen);
        // The counter hands each piece out once, ours in increasing order. The pieces
        // the sender took are written by the kernel on its behalf, like a device's
        // DMA: nothing here touches them, and we wait below until it is done with
        // them before `dst` is used again.
        let mut mine = Ok(());
        let mut parts = dst.chunks_mut(rndv::PIECE).enumerate();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some((_, part)) = parts.find(|(i, _)| *i as u64 == k) else {
                break;
            };
            let a = k as usize * rndv::PIECE;
            mine = mine.and(sys::cma_read(pid, at.wrapping_add(a as u64), part));
        }
        let mut state = rndv::take_back(w, gen);
        let mut check = std::time::Instant::now() + HELP_LIVENESS;
        let mut n = 0u32;
        while state == rndv::Help::Busy {
            std::hint::spin_loop();
            n = n.wrapping_add(1);
            if n.is_multiple_of(256) && std::time::Instant::now() >= check {
                if self.peer.process_gone() {
                    return Err(Error::Io);
                }
                check = std::time::Instant::now() + HELP_LIVENESS;
            }
            state = rndv::help_state(w, gen);
        }
        match state {
            rndv::Help::Mine | rndv::Help::Written => mine,
            // Which pieces the sender wrote is unknown: read them all (rare: the kernel
            // refused the write).
            rndv::Help::Failed => sys::cma_read(pid, at, dst),
            rndv::Help::Busy | rndv::Help::Other => Err(Error::Io),
        }
    }
}

/// How often a receiver waiting for its sender's help checks that the sender lives.
const HELP_LIVENESS: std::time::Duration = std::time::Duration::from_millis(10);

/// Waits until a sender copied more than `past` bytes of a payload of `len` (published
/// in the word `progress` loads with acquire ordering), and returns how many it copied
/// (at most `len`). `Err(Io)` when the sender makes no progress for
/// [`PROGRESS_LIMIT`], or stalls and `gone` says it died.
pub(crate) fn wait_ready(
    progress: impl Fn() -> u64,
    past: usize,
    len: usize,
    gone: impl Fn() -> bool,
) -> Result<usize> {
    // The clock is read only once the sender is behind: (last value seen, since).
    let mut stall: Option<(u64, std::time::Instant)> = None;
    let mut n = 0u32;
    loop {
        let p = progress();
        if p as usize > past {
            return Ok((p as usize).min(len));
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(1024) {
            let now = std::time::Instant::now();
            match stall {
                Some((seen, since)) if seen == p => {
                    if now - since >= PROGRESS_LIMIT || gone() {
                        return Err(Error::Io);
                    }
                }
                _ => stall = Some((p, now)),
            }
        }
        std::hint::spin_loop();
    }
}

impl Staged {
    /// Payload bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies payload bytes `off..off + dst.len()` into `dst` ([`fabric::Pull::read`]).
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        if off > self.len || dst.len() > self.len - off {
            return Err(Error::Io);
        }
        match self.desc.mode {
            Desc::RNDV => self.read_rndv(off, dst),
            Desc::CMA => sys::cma_read(
                self.peer.name.pid,
                self.desc.addr.wrapping_add(off as u64),
                dst,
            ),
            _ => {
                // Bounds were checked against the mapping in `new`; the sender may
                // still be copying: each piece is taken once its progress word says
                // it is there.
                let map = Self::map(&self.peer, self.desc.file())?;
                let at = self.desc.addr as usize;
                copy_staged(map, at, self.len, off, dst, || self.peer.process_gone())
            }
        }
    }
}
