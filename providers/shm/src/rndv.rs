//! Sender-side synchronous rendezvous for large payloads: one copy instead of two.
//!
//! The send API lends the payload only for the duration of the call, so a payload
//! that the receiver is to copy straight out of the sender's memory (cross-memory
//! attach) keeps the sender waiting until the receiver is done with it. A *record*
//! in the sender's region (state word + address of a staged copy, [`RNDV_RECORDS`]
//! of them) tells both sides where they stand:
//!
//! ```text
//!   sender: post            receiver: claim (CAS)         receiver: release
//!  FREE ───────▶ POSTED ─────────────────────────▶ READING ─────────────┐
//!                 │  ▲ ╰── receiver: finish (CAS) ──▶ DONE ◀── complete ─┤
//!                 │  ╰──────────── partial read ─────────────────────────┘
//!                 │ sender: withdraw (CAS), after copying the payload aside
//!                 ▼
//!               STAGED ──── receiver: finish (CAS) ──▶ DONE ──▶ (sender reuses)
//! ```
//! - The sender posts the record, writes the packet, then waits. It returns once it
//!   sees `DONE` (the receiver read the payload: one copy in all), or, when the bound
//!   on its wait passes while the record is still `POSTED` (the receiver did not
//!   poll: no receive progress, a busy receiver, a send to itself on one thread), it
//!   copies the payload into a private buffer of the record, publishes its address
//!   and moves `POSTED → STAGED` with a CAS: from then on the receiver reads the copy
//!   and the caller's buffer is free. The receiver finishes the record (`DONE`) after
//!   it consumed the packet; the sender reuses it then.
//! - The receiver holds `READING` only for one `process_vm_readv` of the caller's
//!   buffer, and gives the record back (`POSTED`) between reads, or `DONE` after the
//!   last byte: the sender's wait in `READING` is bounded by one copy, whatever the
//!   receiver does between reads (a reply that needs a lock the sender holds, say).
//! - A large read is shared: the receiver, holding `READING`, writes a request (its
//!   destination address, payload offset, length, a piece counter) and stores `HELP`;
//!   then both sides take [`PIECE`]-sized pieces from the counter, the receiver
//!   reading its own with `process_vm_readv`, the sender, idle in its wait anyway,
//!   writing its own into the destination with `process_vm_writev` after taking the
//!   request on (`HELP → HELPING`, CAS). Out of pieces, the receiver takes the request
//!   back (`HELP → READING`, CAS: the sender never started) or waits for `HELPED`
//!   (`UNHELPED`: a write failed, it reads everything itself). Two cores copy: the
//!   kernel's copy reaches only about half of `memcpy`'s speed into memory that is
//!   not in cache.
//! - Each posting has a generation, stored with the state: a receiver that kept a
//!   stale descriptor fails its CAS instead of touching a reused record.
//! - The kernel may refuse the receiver the read although both sides can read
//!   themselves: a ptrace policy (Yama's `ptrace_scope = 1` between sibling
//!   processes) applies to each pair of processes. The receiver then marks the record
//!   [`READ_REFUSED`] (help word 3), gives it back (`POSTED`) and waits for `STAGED`;
//!   the sender, seeing the mark, withdraws at once. A withdrawn payload goes to a
//!   private buffer only for a peer whose reads were seen to work ([`READ_OK`], set
//!   by the receiver after a read): for any other it goes to the record's extent of a
//!   sealed shared file ([`FILE_BYTES`], sparse) that the receiver maps, its address
//!   word then tagged [`FILE_TAG`]. The sender remembers the outcome per peer
//!   ([`PeerRegion::cma_reads`]): to a refused peer it withdraws without waiting, and
//!   the staging path (`stage`) leaves nothing in private memory for a peer not seen
//!   to read it. No payload is lost and no error reaches the user where files work.
//!
//! The state functions below are the only operations on a record's state word: each
//! is one atomic operation (or a CAS retried once on a value only its caller's side
//! can leave), which is what the exhaustive model in the tests and the loom tests
//! (`RUSTFLAGS="--cfg loom"`) interleave.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{Error, Result};

use std::os::fd::{AsRawFd, OwnedFd};

pub use crate::layout::region::RNDV_RECORDS;
use crate::layout::region::{Region, GEN_MAX};
use crate::layout::sys::{self, Mapping};
use crate::peer::{CmaReads, PeerRegion};

/// A record's state word: [`FREE`], [`POSTED`], ... in the low 8 bits, the
/// generation above.
pub trait Word {
    /// Load with acquire ordering.
    fn load(&self) -> u64;
    /// Store with release ordering.
    fn store(&self, v: u64);
    /// Compare-and-swap with acquire-release ordering (acquire on failure): the value
    /// found on failure.
    fn cas(&self, cur: u64, new: u64) -> std::result::Result<u64, u64>;
}

impl Word for std::sync::atomic::AtomicU64 {
    #[inline]
    fn load(&self) -> u64 {
        self.load(std::sync::atomic::Ordering::Acquire)
    }
    #[inline]
    fn store(&self, v: u64) {
        self.store(v, std::sync::atomic::Ordering::Release)
    }
    #[inline]
    fn cas(&self, cur: u64, new: u64) -> std::result::Result<u64, u64> {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        self.compare_exchange(cur, new, AcqRel, Acquire)
    }
}

#[cfg(all(test, loom))]
impl Word for loom::sync::atomic::AtomicU64 {
    fn load(&self) -> u64 {
        self.load(loom::sync::atomic::Ordering::Acquire)
    }
    fn store(&self, v: u64) {
        self.store(v, loom::sync::atomic::Ordering::Release)
    }
    fn cas(&self, cur: u64, new: u64) -> std::result::Result<u64, u64> {
        use loom::sync::atomic::Ordering::{AcqRel, Acquire};
        self.compare_exchange(cur, new, AcqRel, Acquire)
    }
}

/// State: unused (the sender's to take).
pub const FREE: u64 = 0;
/// State: the packet is out and the caller's buffer may be read.
pub const POSTED: u64 = 1;
/// State: the receiver is reading the caller's buffer.
pub const READING: u64 = 2;
/// State: the receiver is done with the payload.
pub const DONE: u64 = 3;
/// State: the sender withdrew its buffer; the payload waits in the staged copy.
pub const STAGED: u64 = 4;
/// State: the receiver, reading, asks the sender to write part of the payload into
/// its destination (the request is in the record's help words).
pub const HELP: u64 = 5;
/// State: the sender is writing the part asked for.
pub const HELPING: u64 = 6;
/// State: the sender wrote it.
pub const HELPED: u64 = 7;
/// State: the sender could not write it (the receiver copies it itself).
pub const UNHELPED: u64 = 8;
/// The state word of `state` at generation `gen`.
#[inline]
pub fn word(gen: u64, state: u64) -> u64 {
    (gen & GEN_MAX) << 8 | state
}

/// Sender: the packet is about to be published; the caller's buffer may be read.
#[inline]
pub fn post(w: &impl Word, gen: u64) {
    w.store(word(gen, POSTED));
}

/// What a waiting sender sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not claimed (or given back between reads).
    Posted,
    /// The receiver is in a read of the caller's buffer.
    Reading,
    /// The receiver asks for help with its read.
    Help,
    /// The receiver is done.
    Done,
    /// Anything else: a misbehaving receiver.
    Other,
}

/// Sender: the record's state.
#[inline]
pub fn seen(w: &impl Word, gen: u64) -> Seen {
    let v = w.load();
    if v == word(gen, POSTED) {
        Seen::Posted
    } else if v == word(gen, HELP) {
        Seen::Help
    } else if v == word(gen, READING)
        || v == word(gen, HELPED)
        || v == word(gen, UNHELPED)
        || v == word(gen, HELPING)
    {
        Seen::Reading
    } else if v == word(gen, DONE) {
        Seen::Done
    } else {
        Seen::Other
    }
}

/// Sender: hands the receiver the staged copy instead of the caller's buffer (the copy
/// and its address are written before). `false`: the receiver is reading or done.
#[inline]
pub fn withdraw(w: &impl Word, gen: u64) -> bool {
    w.cas(word(gen, POSTED), word(gen, STAGED)).is_ok()
}

/// Sender: gives up on a receiver that is gone (no read may start afterwards).
/// `false`: it is reading or done.
#[inline]
pub fn abandon(w: &impl Word, gen: u64) -> bool {
    w.cas(word(gen, POSTED), word(gen, DONE)).is_ok()
}

/// Sender: takes on the receiver's request for help. `false`: the receiver took it
/// back.
#[inline]
pub fn start_help(w: &impl Word, gen: u64) -> bool {
    w.cas(word(gen, HELP), word(gen, HELPING)).is_ok()
}

/// Sender: the part asked for is written (`ok`) or could not be.
#[inline]
pub fn end_help(w: &impl Word, gen: u64, ok: bool) {
    w.store(word(gen, if ok { HELPED } else { UNHELPED }));
}

/// What a receiver may read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The caller's buffer, until [`release_read`].
    Direct,
    /// The staged copy.
    Staged,
    /// Nothing: stale or garbage descriptor, or a sender that gave up.
    Refused,
}

/// Receiver: claims the payload for one read.
#[inline]
pub fn claim(w: &impl Word, gen: u64) -> Claim {
    match w.cas(word(gen, POSTED), word(gen, READING)) {
        Ok(_) => Claim::Direct,
        Err(v) if v == word(gen, STAGED) => Claim::Staged,
        Err(_) => Claim::Refused,
    }
}

/// Receiver: ends a [`Claim::Direct`] read; `complete` once every byte was read, which
/// lets the sender go at once.
#[inline]
pub fn release_read(w: &impl Word, gen: u64, complete: bool) {
    w.store(word(gen, if complete { DONE } else { POSTED }));
}

/// Receiver, in a [`Claim::Direct`] read: asks the sender to write part of it (the help
/// words are written before).
#[inline]
pub fn ask_help(w: &impl Word, gen: u64) {
    w.store(word(gen, HELP));
}

/// Where a request for help stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Help {
    /// Not taken on: the receiver has it back (and reads the part itself).
    Mine,
    /// The sender is writing it.
    Busy,
    /// Written.
    Written,
    /// The sender could not write it: the receiver reads the part itself.
    Failed,
    /// Anything else: a misbehaving sender.
    Other,
}

/// Receiver: takes its request back unless the sender took it on.
#[inline]
pub fn take_back(w: &impl Word, gen: u64) -> Help {
    match w.cas(word(gen, HELP), word(gen, READING)) {
        Ok(_) => Help::Mine,
        Err(v) => help_of(v, gen),
    }
}

/// Receiver: where the request the sender took on stands.
#[inline]
pub fn help_state(w: &impl Word, gen: u64) -> Help {
    help_of(w.load(), gen)
}

#[inline]
fn help_of(v: u64, gen: u64) -> Help {
    if v == word(gen, HELPING) {
        Help::Busy
    } else if v == word(gen, HELPED) {
        Help::Written
    } else if v == word(gen, UNHELPED) {
        Help::Failed
    } else {
        Help::Other
    }
}

/// Receiver, after giving back a read the kernel refused it ([`READ_REFUSED`]):
/// whether the sender withdrew the payload (`Some(true)`: read the staged copy), has
/// not yet (`Some(false)`), or the record moved on otherwise (`None`).
#[inline]
pub fn withdrawn(w: &impl Word, gen: u64) -> Option<bool> {
    let v = w.load();
    if v == word(gen, STAGED) {
        Some(true)
    } else if v == word(gen, POSTED) {
        Some(false)
    } else {
        None
    }
}

/// Receiver: the packet is consumed; the sender may return (or reuse its staged copy).
/// `false` if the record was already done or is not this posting's.
#[inline]
pub fn finish(w: &impl Word, gen: u64) -> bool {
    match w.cas(word(gen, POSTED), word(gen, DONE)) {
        Ok(_) => true,
        // Only the receiver leaves STAGED: the second CAS cannot lose a race.
        Err(v) if v == word(gen, STAGED) => w.cas(v, word(gen, DONE)).is_ok(),
        Err(_) => false,
    }
}

/// How long a sender waits for the receiver before staging a payload of `len` bytes:
/// `base` plus [`WAIT_PER_MIB`] per MiB.
#[inline]
pub fn bound(base: Duration, len: usize) -> Duration {
    base + WAIT_PER_MIB.mul_f64(len as f64 / (1 << 20) as f64)
}

/// Size-proportional part of the wait bound, per MiB: about the time of one copy at a
/// pessimistic 4 GB/s. A receiver busy copying an earlier payload of the same size
/// (another sender's, say) is waited for; a receiver that does not poll costs a
/// sender at most about one more copy than staging at once would have.
pub const WAIT_PER_MIB: Duration = Duration::from_micros(250);
/// Default fixed part of the wait bound: a polling receiver picks a packet up within
/// a few microseconds; this leaves room for one that is between two polls.
pub const WAIT_BASE: Duration = Duration::from_micros(30);
/// Smallest read of a rendezvous payload that the receiver shares with the sender:
/// both take [`PIECE`]s in turn, the receiver reading them, the sender (idle in its
/// wait) writing them into the destination (`process_vm_writev`), so two cores copy.
pub const SPLIT_MIN: usize = 2 * PIECE;
/// Default smallest rendezvous payload. Measured (tagged, two processes): from 16 KiB
/// on a rendezvous moves a window of messages twice as fast as staging, but up to
/// 64 KiB one message takes longer (a `process_vm_readv` costs more than two hot
/// `memcpy`s: 10.4 against 6.8 us at 64 KiB); from 128 KiB on it is faster both ways.
pub const RNDV_MIN: usize = 128 << 10;
/// Most bytes held in staged copies of withdrawn payloads at once; beyond it large
/// sends take the ordinary staging path (which refuses with `EAGAIN` when full).
pub const STAGED_BYTES: usize = 256 << 20;
/// Capacity of staged-copy buffers kept for reuse, in all; also the bytes at the
/// start of the shared file whose pages stay allocated between payloads.
const KEEP_BYTES: usize = 64 << 20;
/// Bytes of the shared file withdrawn payloads go to when their receiver is not known
/// to read our memory (sparse: only pages written take memory). Every posting
/// reserves an extent in it, so that its withdrawal never fails.
pub const FILE_BYTES: usize = STAGED_BYTES;
/// Tag of a staged address that is an extent of the shared file: the file's
/// descriptor in bits 32..63 below the tag, the offset in bits 0..32 (user addresses
/// never have bit 63 set on the targets Linux runs on).
pub const FILE_TAG: u64 = 1 << 63;
/// Help word 3 after the receiver read the caller's buffer: its reads work.
pub const READ_OK: u64 = u64::MAX - 1;
/// Help word 3 after the kernel refused the receiver a read of the caller's buffer.
pub const READ_REFUSED: u64 = u64::MAX - 2;
static_assertions::const_assert!(FILE_BYTES <= 1 << 32);

/// A staged address word for offset `off` of the shared file, descriptor `fd`.
#[inline]
pub fn file_addr(fd: u32, off: usize) -> u64 {
    FILE_TAG | (u64::from(fd) & 0x7fff_ffff) << 32 | off as u64
}

/// The (descriptor, offset) a staged address word names in the shared file, or `None`
/// for a private address.
#[inline]
pub fn file_of(addr: u64) -> Option<(u32, usize)> {
    (addr & FILE_TAG != 0).then_some(((addr >> 32) as u32 & 0x7fff_ffff, addr as u32 as usize))
}
/// How often a waiting sender checks that its receiver is alive.
const LIVENESS_PERIOD: Duration = Duration::from_millis(10);
/// Spinning (rather than yielding) this long first: a receiver on another core.
const SPIN: Duration = Duration::from_micros(20);

struct Rec {
    gen: u64,
    busy: bool,
    /// Staged copy (read by the receiver with cross-memory attach).
    buf: Vec<u8>,
    /// Bytes staged while busy in `STAGED`.
    staged: usize,
    peer: Option<Arc<PeerRegion>>,
    /// The extent of the shared file reserved while busy: offset and bytes.
    ext: (usize, usize),
    /// Whether the staged copy is in the shared file.
    in_file: bool,
}

/// The shared file withdrawn payloads go to for receivers not known to read us.
struct File {
    map: Mapping,
    fd: OwnedFd,
}

/// A sender's rendezvous records (the shared words are in its region).
pub struct Pool {
    recs: Vec<Rec>,
    /// Made on the first withdrawal that needs it.
    file: Option<File>,
    staged: usize,
    /// Payloads staged after all (the receiver did not take them in time).
    withdrawn: u64,
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            recs: (0..RNDV_RECORDS)
                .map(|_| Rec {
                    gen: 0,
                    busy: false,
                    buf: Vec::new(),
                    staged: 0,
                    peer: None,
                    ext: (0, 0),
                    in_file: false,
                })
                .collect(),
            file: None,
            staged: 0,
            withdrawn: 0,
        }
    }
}

impl Pool {
    /// Takes a record for a payload of `len` bytes and posts it: (record, generation).
    /// `None` when every record is busy or a staged copy of `len` bytes would pass
    /// [`STAGED_BYTES`] (checked now, so a withdrawal later never fails).
    pub fn post(&mut self, own: &Region, len: usize) -> Option<(usize, u64)> {
        let mut r = self.free(len);
        if r.is_none() {
            self.reclaim(own, false);
            r = self.free(len);
            if r.is_none() {
                self.reclaim(own, true);
                r = self.free(len);
            }
        }
        let (r, off) = r?;
        let rec = &mut self.recs[r];
        rec.gen = (rec.gen + 1) & GEN_MAX;
        rec.busy = true;
        rec.ext = (off, len);
        // Before the posting: the receiver's outcome mark is this posting's.
        own.rndv_help(r, 3)
            .store(0, std::sync::atomic::Ordering::Relaxed);
        post(own.rndv_state(r), rec.gen);
        Some((r, rec.gen))
    }

    /// How many payloads were staged after all since the pool was made.
    pub fn withdrawn(&self) -> u64 {
        self.withdrawn
    }

    /// A free record and an extent of `len` bytes of the shared file that no busy
    /// record holds (first fit).
    fn free(&self, len: usize) -> Option<(usize, usize)> {
        if self.staged + len > STAGED_BYTES {
            return None;
        }
        let r = self.recs.iter().position(|r| !r.busy)?;
        let mut at = 0usize;
        loop {
            let end = at.checked_add(len)?;
            if end > FILE_BYTES {
                return None;
            }
            let clash = self
                .recs
                .iter()
                .filter(|q| q.busy && q.ext.0 < end && at < q.ext.0 + q.ext.1)
                .map(|q| (q.ext.0 + q.ext.1).next_multiple_of(64))
                .max();
            match clash {
                Some(next) => at = next,
                None => return Some((r, at)),
            }
        }
    }

    /// Copies `buf` into record `r`'s extent of the shared file (made now if need
    /// be): the staged address word, or `None` if the file cannot be made.
    fn copy_to_file(&mut self, r: usize, buf: &[u8]) -> Option<u64> {
        if self.file.is_none() {
            let fd = sys::memfd(FILE_BYTES).ok()?;
            let map = Mapping::new(&fd, FILE_BYTES).ok()?;
            self.file = Some(File { map, fd });
        }
        let f = self.file.as_ref()?;
        let off = self.recs[r].ext.0;
        f.map.copy_in(off, buf);
        Some(file_addr(f.fd.as_raw_fd() as u32, off))
    }

    /// Returns a record whose packet was never published.
    pub fn cancel(&mut self, own: &Region, r: usize) {
        let rec = &mut self.recs[r];
        Word::store(own.rndv_state(r), word(rec.gen, FREE));
        rec.busy = false;
    }

    /// Waits until the receiver read `buf` (posted in record `r` at `gen` and sent to
    /// `peer`), or, past `bound`, stages a copy of it for the receiver. `HostUnreach`
    /// when the receiver is seen gone first; `Io` when it broke the protocol.
    pub fn wait(
        &mut self,
        own: &Region,
        peer: &Arc<PeerRegion>,
        r: usize,
        gen: u64,
        buf: &[u8],
        bound: Duration,
    ) -> Result<()> {
        let w = own.rndv_state(r);
        let start = Instant::now();
        // A receiver the kernel refused our memory before would only refuse again.
        let deadline = match peer.cma_reads() {
            CmaReads::No => start,
            _ => start + bound,
        };
        let mark = own.rndv_help(r, 3);
        let mut live_check = start + LIVENESS_PERIOD;
        let mut copied = false;
        let mut n = 0u32;
        loop {
            let s = seen(w, gen);
            if s == Seen::Done {
                // Ordered by the acquire of DONE, which the receiver stored after.
                if mark.load(std::sync::atomic::Ordering::Relaxed) == READ_OK {
                    peer.set_cma_reads(true);
                }
                self.recs[r].busy = false;
                return Ok(());
            }
            if s == Seen::Help {
                if start_help(w, gen) {
                    end_help(w, gen, help(own, peer, r, buf));
                }
                continue;
            }
            n = n.wrapping_add(1);
            if !n.is_multiple_of(16) {
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            if now >= live_check {
                live_check = now + LIVENESS_PERIOD;
                if peer.gone() {
                    return self.give_up(w, r, gen, peer);
                }
            }
            let refused = s == Seen::Posted
                && mark.load(std::sync::atomic::Ordering::Relaxed) == READ_REFUSED;
            if refused {
                peer.set_cma_reads(false);
            }
            match s {
                Seen::Posted if now >= deadline || refused => {
                    if !copied {
                        // Private memory only for a receiver seen to read it; else the
                        // shared file (private after all if that cannot be made).
                        let shared = match peer.cma_reads() {
                            CmaReads::Yes => None,
                            _ => self.copy_to_file(r, buf),
                        };
                        let rec = &mut self.recs[r];
                        rec.in_file = shared.is_some();
                        rec.buf.clear();
                        // Out of memory for a private copy: the shared file, else no
                        // withdrawal (the receiver still reads the caller's buffer).
                        let addr = match shared {
                            Some(a) => Some(a),
                            None if rec.buf.try_reserve(buf.len()).is_ok() => {
                                rec.buf.extend_from_slice(buf);
                                Some(rec.buf.as_ptr() as u64)
                            }
                            None => self.copy_to_file(r, buf).inspect(|_| {
                                self.recs[r].in_file = true;
                            }),
                        };
                        if let Some(addr) = addr {
                            own.rndv_addr(r)
                                .store(addr, std::sync::atomic::Ordering::Relaxed);
                            copied = true;
                        }
                    }
                    let rec = &mut self.recs[r];
                    if copied && withdraw(w, gen) {
                        rec.staged = buf.len();
                        rec.peer = Some(peer.clone());
                        self.staged += buf.len();
                        self.withdrawn += 1;
                        return Ok(());
                    }
                }
                Seen::Other => {
                    // Keep the record out of use until the receiver is gone.
                    self.recs[r].peer = Some(peer.clone());
                    return Err(Error::Io);
                }
                _ => {}
            }
            if now - start > SPIN {
                std::thread::yield_now();
            }
        }
    }

    /// The receiver of record `r` is gone: nothing may read the caller's buffer any
    /// more, or the record stays out of use.
    fn give_up(&mut self, w: &impl Word, r: usize, gen: u64, peer: &Arc<PeerRegion>) -> Result<()> {
        let rec = &mut self.recs[r];
        if abandon(w, gen) {
            rec.busy = false;
        } else if seen(w, gen) == Seen::Done {
            // Finished after all, just before it went.
            rec.busy = false;
            return Ok(());
        } else {
            // Gone in the middle of a read: swept with the peer.
            rec.peer = Some(peer.clone());
        }
        Err(Error::HostUnreach)
    }

    /// Frees records the receiver finished; with `sweep`, also those whose receiver is
    /// gone.
    fn reclaim(&mut self, own: &Region, sweep: bool) {
        let mut kept: usize = self.recs.iter().map(|r| r.buf.capacity()).sum();
        for (i, rec) in self.recs.iter_mut().enumerate() {
            if !rec.busy || rec.peer.is_none() {
                continue;
            }
            let done = seen(own.rndv_state(i), rec.gen) == Seen::Done;
            if done || (sweep && rec.peer.as_ref().is_some_and(|p| p.gone())) {
                rec.busy = false;
                rec.peer = None;
                self.staged -= rec.staged;
                rec.staged = 0;
                if std::mem::take(&mut rec.in_file) {
                    // Pages past the first KEEP_BYTES go back to the system.
                    let (off, len) = rec.ext;
                    let from = off.max(KEEP_BYTES);
                    if let Some(f) = self.file.as_ref().filter(|_| off + len > from) {
                        sys::punch_hole(&f.fd, from, off + len - from);
                    }
                }
                if kept > KEEP_BYTES {
                    kept -= rec.buf.capacity();
                    rec.buf = Vec::new();
                }
            }
        }
    }

    /// Waits, up to `linger`, until every staged copy was read by its receiver (or the
    /// receiver is gone): the copies are freed with the sender.
    pub fn drain(&mut self, own: &Region, linger: Duration) {
        let deadline = Instant::now() + linger;
        loop {
            self.reclaim(own, true);
            if self.recs.iter().all(|r| !r.busy) || Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Bytes of one piece of a shared read: each side takes the next piece from the
/// record's counter until none is left, so the faster copier does more.
pub const PIECE: usize = 128 << 10;

/// Piece `k` of a read of `len` bytes: its range, if there is one.
#[inline]
pub fn piece(k: u64, len: usize) -> Option<(usize, usize)> {
    let start = usize::try_from(k).ok()?.checked_mul(PIECE)?;
    (start < len).then(|| (start, len.min(start + PIECE)))
}

/// Sender: writes pieces of the read the receiver of record `r` asked for help with,
/// straight from `buf` into the receiver's destination, until none is left. `false`
/// when a piece could not be written (then the receiver copies the whole read again).
fn help(own: &Region, peer: &PeerRegion, r: usize, buf: &[u8]) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    // Ordered by `start_help`'s acquire of HELP, published after the words. Untrusted:
    // every piece must lie in the caller's buffer.
    let dst = own.rndv_help(r, 0).load(Relaxed);
    let Ok(off) = usize::try_from(own.rndv_help(r, 1).load(Relaxed)) else {
        return false;
    };
    let Ok(len) = usize::try_from(own.rndv_help(r, 2).load(Relaxed)) else {
        return false;
    };
    let next = own.rndv_help(r, 3);
    loop {
        let Some((a, b)) = piece(next.fetch_add(1, Relaxed), len) else {
            return true;
        };
        let src = off
            .checked_add(a)
            .zip(off.checked_add(b))
            .and_then(|(x, y)| buf.get(x..y));
        let ok = src.is_some_and(|p| {
            crate::layout::sys::cma_write(peer.name.pid, dst.wrapping_add(a as u64), p).is_ok()
        });
        if !ok {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::collections::HashSet;

    /// A state word for the single-threaded model: each call is one step.
    struct ModelWord(Cell<u64>);

    impl Word for ModelWord {
        fn load(&self) -> u64 {
            self.0.get()
        }
        fn store(&self, v: u64) {
            self.0.set(v)
        }
        fn cas(&self, cur: u64, new: u64) -> std::result::Result<u64, u64> {
            let v = self.0.get();
            if v == cur {
                self.0.set(new);
                Ok(v)
            } else {
                Err(v)
            }
        }
    }

    #[test]
    fn words_and_single_steps() {
        let w = ModelWord(Cell::new(0));
        post(&w, 7);
        assert_eq!(seen(&w, 7), Seen::Posted);
        assert_eq!(seen(&w, 6), Seen::Other);
        // A stale generation claims nothing.
        assert_eq!(claim(&w, 6), Claim::Refused);
        assert_eq!(claim(&w, 7), Claim::Direct);
        assert_eq!(seen(&w, 7), Seen::Reading);
        assert!(!withdraw(&w, 7));
        assert!(!abandon(&w, 7));
        release_read(&w, 7, false);
        assert!(withdraw(&w, 7));
        assert_eq!(claim(&w, 7), Claim::Staged);
        assert!(finish(&w, 7));
        assert_eq!(seen(&w, 7), Seen::Done);
        assert!(!finish(&w, 7));
        assert_eq!(claim(&w, 7), Claim::Refused);
        post(&w, GEN_MAX + 3);
        assert_eq!(w.load(), word(2, POSTED));
        assert!(bound(WAIT_BASE, 1 << 20) > bound(WAIT_BASE, 64 << 10));
    }

    /// Sender program counter.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
    enum S {
        Post,
        Wait {
            copied: bool,
        },
        /// Writing pieces of the receiver's read into its destination.
        Helping {
            copied: bool,
        },
        /// Returned with the caller's buffer free; the staged copy is live until the
        /// record is seen done.
        Returned {
            staged: bool,
        },
        Reclaimed,
    }

    /// Receiver program counter.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
    enum R {
        /// Before reading piece `k` (the packet is visible once the sender posted).
        Claim(u8),
        /// Between claim and release of a direct read of piece `k`.
        Copy(u8),
        /// Read `k` asked for help: copying its own pieces of it.
        Own(u8),
        TakeBack(u8),
        /// Waiting for the sender to finish the pieces it took.
        Await(u8),
        /// The sender failed: reading all of read `k` itself.
        Copy2(u8),
        Release(u8),
        /// A staged read of piece `k`.
        StagedCopy(u8),
        Finish,
        Finished,
        Dead,
    }

    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
    struct St {
        w: u64,
        s: S,
        r: R,
        /// The caller's buffer may be read (the sender has not returned).
        user: bool,
        /// The staged copy exists (written and not reclaimed).
        stage: bool,
        err: bool,
    }

    const GEN: u64 = 5;

    /// Every successor of `st` (steps that change nothing are left out: a spinning
    /// sender), or the violated invariant.
    fn succ(
        st: St,
        pieces: u8,
        covers: bool,
        may_die: bool,
    ) -> std::result::Result<Vec<St>, String> {
        if matches!(st.s, S::Helping { .. })
            && !matches!(st.r, R::Own(_) | R::TakeBack(_) | R::Await(_) | R::Dead)
        {
            return Err(format!("sender writes into a read that ended: {st:?}"));
        }
        let mut out = Vec::new();
        // Sender steps.
        let w = ModelWord(Cell::new(st.w));
        let mut push = |w: &ModelWord, f: &dyn Fn(&mut St)| {
            let mut n = st;
            n.w = w.0.get();
            f(&mut n);
            out.push(n);
        };
        let dead = st.r == R::Dead;
        match st.s {
            S::Post => {
                post(&w, GEN);
                push(&w, &|n| n.s = S::Wait { copied: false });
            }
            // Each sender step is one operation on the word; it may try any of them
            // at any time (what it saw before may be stale by then).
            S::Wait { copied } => {
                if seen(&w, GEN) == Seen::Done {
                    push(&w, &|n| {
                        n.s = S::Returned { staged: false };
                        n.user = false;
                    });
                }
                if seen(&w, GEN) == Seen::Other {
                    return Err(format!("sender saw garbage in {st:?}"));
                }
                {
                    let w = ModelWord(Cell::new(st.w));
                    if start_help(&w, GEN) {
                        push(&w, &|n| n.s = S::Helping { copied });
                    }
                }
                if !copied {
                    // The bound passed: copy aside, then withdraw.
                    push(&w, &|n| {
                        n.s = S::Wait { copied: true };
                        n.stage = true;
                    });
                } else {
                    let w = ModelWord(Cell::new(st.w));
                    if withdraw(&w, GEN) {
                        push(&w, &|n| {
                            n.s = S::Returned { staged: true };
                            n.user = false;
                        });
                    }
                }
                if dead {
                    // `Pool::give_up`.
                    let w = ModelWord(Cell::new(st.w));
                    let abandoned = abandon(&w, GEN);
                    let ok = !abandoned && seen(&w, GEN) == Seen::Done;
                    push(&w, &|n| {
                        n.s = S::Returned { staged: false };
                        n.user = false;
                        n.err = !ok || n.err;
                    });
                }
            }
            S::Helping { copied } => {
                for ok in [true, false] {
                    let w = ModelWord(Cell::new(st.w));
                    end_help(&w, GEN, ok);
                    push(&w, &|n| n.s = S::Wait { copied });
                }
            }
            S::Returned { staged: true } => {
                if seen(&w, GEN) == Seen::Done || dead {
                    push(&w, &|n| {
                        n.s = S::Reclaimed;
                        n.stage = false;
                    });
                }
            }
            S::Returned { staged: false } => push(&w, &|n| {
                n.s = S::Reclaimed;
                n.stage = false;
            }),
            S::Reclaimed => {}
        }
        // Receiver steps (the packet is visible once posted).
        let w = ModelWord(Cell::new(st.w));
        let visible = st.s != S::Post;
        let last = pieces - 1;
        match st.r {
            _ if !visible => {}
            R::Dead | R::Finished => {}
            R::Claim(k) => match claim(&w, GEN) {
                Claim::Direct => push(&w, &|n| n.r = R::Copy(k)),
                Claim::Staged => push(&w, &|n| n.r = R::StagedCopy(k)),
                Claim::Refused => return Err(format!("receiver refused in {st:?}")),
            },
            R::Copy(k) => {
                if !st.user {
                    return Err(format!("read of a returned buffer in {st:?}"));
                }
                push(&w, &|n| n.r = R::Release(k));
                let w = ModelWord(Cell::new(st.w));
                ask_help(&w, GEN);
                push(&w, &|n| n.r = R::Own(k));
            }
            R::Own(k) | R::Copy2(k) => {
                if !st.user {
                    return Err(format!("read of a returned buffer in {st:?}"));
                }
                let next = if matches!(st.r, R::Own(_)) {
                    R::TakeBack(k)
                } else {
                    R::Release(k)
                };
                push(&w, &|n| n.r = next);
            }
            R::TakeBack(k) => {
                let h = take_back(&w, GEN);
                let next = match h {
                    Help::Mine | Help::Written => R::Release(k),
                    Help::Busy => R::Await(k),
                    Help::Failed => R::Copy2(k),
                    Help::Other => return Err(format!("take back found garbage in {st:?}")),
                };
                push(&w, &|n| n.r = next);
            }
            R::Await(k) => match help_state(&w, GEN) {
                Help::Written => push(&w, &|n| n.r = R::Release(k)),
                Help::Failed => push(&w, &|n| n.r = R::Copy2(k)),
                Help::Busy => {}
                h => return Err(format!("awaiting help found {h:?} in {st:?}")),
            },
            R::Release(k) => {
                release_read(&w, GEN, covers && k == last);
                push(&w, &|n| {
                    n.r = if k == last {
                        R::Finish
                    } else {
                        R::Claim(k + 1)
                    }
                });
            }
            R::StagedCopy(k) => {
                if !st.stage {
                    return Err(format!("read of a reclaimed copy in {st:?}"));
                }
                push(&w, &|n| {
                    n.r = if k == last {
                        R::Finish
                    } else {
                        R::Claim(k + 1)
                    }
                });
            }
            R::Finish => {
                let already = covers && st.w == word(GEN, DONE);
                let ok = finish(&w, GEN);
                if ok == already {
                    return Err(format!("finish returned {ok} in {st:?}"));
                }
                push(&w, &|n| n.r = R::Finished);
            }
        }
        if may_die && visible && !matches!(st.r, R::Dead | R::Finished) {
            push(&ModelWord(Cell::new(st.w)), &|n| n.r = R::Dead);
        }
        Ok(out)
    }

    /// Explores every interleaving of one rendezvous: a sender that may stage at any
    /// time, a receiver reading in `pieces` reads (the last completing the payload
    /// when `covers`) that may die at any point. No read touches a returned buffer or
    /// a reclaimed copy, nothing deadlocks, and every run ends with the sender back,
    /// the record done and reusable.
    fn explore(pieces: u8, covers: bool, may_die: bool) -> usize {
        let start = St {
            w: word(GEN - 1, DONE),
            s: S::Post,
            r: R::Claim(0),
            user: true,
            stage: false,
            err: false,
        };
        let mut seen_states = HashSet::new();
        let mut stack = vec![start];
        while let Some(st) = stack.pop() {
            if !seen_states.insert(st) {
                continue;
            }
            let next = succ(st, pieces, covers, may_die).unwrap_or_else(|e| panic!("{e}"));
            if next.is_empty() {
                assert_eq!(st.s, S::Reclaimed, "stuck: {st:?}");
                assert!(matches!(st.r, R::Finished | R::Dead), "stuck: {st:?}");
                if st.r == R::Finished {
                    assert_eq!(st.w, word(GEN, DONE), "{st:?}");
                    assert!(!st.err, "error with a live receiver: {st:?}");
                }
            }
            stack.extend(next);
        }
        seen_states.len()
    }

    #[test]
    fn model_every_interleaving() {
        for pieces in 1..=3 {
            for covers in [true, false] {
                for may_die in [false, true] {
                    let n = explore(pieces, covers, may_die);
                    assert!(n > 10, "{n} states");
                }
            }
        }
    }
}

#[cfg(all(test, loom))]
#[allow(unsafe_code)]
mod loom_tests {
    //! The protocol at the level of single atomic operations and memory orderings:
    //! loom explores every interleaving and flags any access to the caller's buffer or
    //! the staged copy that is not ordered after (or before) the other side's.
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;

    struct Shared {
        w: AtomicU64,
        /// The caller's buffer: written by the sender after it returned (reuse).
        user: UnsafeCell<u8>,
        /// The staged copy: written by the sender before it withdraws.
        stage: UnsafeCell<u8>,
    }

    fn run(pieces: u8, complete: bool) {
        loom::model(move || {
            let sh = Arc::new(Shared {
                w: AtomicU64::new(0),
                user: UnsafeCell::new(42),
                stage: UnsafeCell::new(0),
            });
            post(&sh.w, 1);
            let rx = sh.clone();
            let receiver = loom::thread::spawn(move || {
                let mut got = Vec::new();
                for k in 0..pieces {
                    match claim(&rx.w, 1) {
                        Claim::Direct => {
                            // SAFETY: loom's cell; loom reports an unordered access.
                            got.push(rx.user.with(|p| unsafe { *p }));
                            release_read(&rx.w, 1, complete && k == pieces - 1);
                        }
                        // SAFETY: as above.
                        Claim::Staged => got.push(rx.stage.with(|p| unsafe { *p })),
                        Claim::Refused => panic!("refused"),
                    }
                }
                finish(&rx.w, 1);
                got
            });
            // The sender: one look, then (the bound passed) stage and withdraw,
            // waiting out a read in progress.
            let mut staged = false;
            loop {
                match seen(&sh.w, 1) {
                    Seen::Done => break,
                    Seen::Posted => {
                        if !staged {
                            // SAFETY: as above.
                            sh.stage.with_mut(|p| unsafe { *p = 42 });
                            staged = true;
                        }
                        if withdraw(&sh.w, 1) {
                            break;
                        }
                    }
                    Seen::Reading | Seen::Help => loom::thread::yield_now(),
                    Seen::Other => panic!("garbage"),
                }
            }
            // Returned: the caller reuses its buffer.
            // SAFETY: as above.
            sh.user.with_mut(|p| unsafe { *p = 0 });
            let got = receiver.join().unwrap();
            assert!(got.iter().all(|&b| b == 42), "{got:?}");
        });
    }

    #[test]
    fn one_read() {
        run(1, true);
    }

    /// A read shared with the sender: two pieces taken from a counter; the sender
    /// writes the pieces it took into the destination, and the receiver uses the
    /// destination only once it has its request back or the sender is done.
    #[test]
    fn shared_read() {
        loom::model(|| {
            let w = Arc::new(AtomicU64::new(0));
            let next = Arc::new(AtomicU64::new(0));
            let dst = Arc::new([UnsafeCell::new(0u8), UnsafeCell::new(0u8)]);
            post(&*w, 1);
            let (w2, next2, dst2) = (w.clone(), next.clone(), dst.clone());
            let receiver = loom::thread::spawn(move || {
                assert_eq!(claim(&*w2, 1), Claim::Direct);
                ask_help(&*w2, 1);
                use loom::sync::atomic::Ordering::Relaxed;
                loop {
                    let k = next2.fetch_add(1, Relaxed) as usize;
                    if k >= 2 {
                        break;
                    }
                    // SAFETY: loom's cell; loom reports an unordered access.
                    dst2[k].with_mut(|p| unsafe { *p = 42 });
                }
                let mut h = take_back(&*w2, 1);
                while h == Help::Busy {
                    loom::thread::yield_now();
                    h = help_state(&*w2, 1);
                }
                assert!(matches!(h, Help::Mine | Help::Written), "{h:?}");
                // SAFETY: as above.
                let got = [0, 1].map(|k| dst2[k].with(|p| unsafe { *p }));
                release_read(&*w2, 1, true);
                got
            });
            loop {
                match seen(&*w, 1) {
                    Seen::Done => break,
                    Seen::Help => {
                        if start_help(&*w, 1) {
                            use loom::sync::atomic::Ordering::Relaxed;
                            loop {
                                let k = next.fetch_add(1, Relaxed) as usize;
                                if k >= 2 {
                                    break;
                                }
                                // SAFETY: as above.
                                dst[k].with_mut(|p| unsafe { *p = 42 });
                            }
                            end_help(&*w, 1, true);
                        }
                    }
                    Seen::Posted | Seen::Reading => loom::thread::yield_now(),
                    Seen::Other => panic!("garbage"),
                }
            }
            assert_eq!(receiver.join().unwrap(), [42, 42]);
        });
    }

    #[test]
    fn two_reads() {
        run(2, true);
    }

    #[test]
    fn truncated() {
        run(2, false);
    }
}
