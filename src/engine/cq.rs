//! The state behind every CQ (`man 3 fi_cq`): the ring, the overflow kept under
//! resource management, and the read under way that receives may complete into.
//!
//! [`CqRing`] is a fixed-capacity FIFO of completion entries plus their source
//! addresses, allocated once at creation; [`push`](CqRing::push) and
//! [`read`](CqRing::read) never allocate. Error completions ([`CqErrEntry`]) live in
//! a separate, growable FIFO that never drops entries: errors are rare and losing
//! one would hide a failed operation from the application.
//!
//! Entries and source addresses are stored in two parallel arrays so that
//! [`read`](CqRing::read) is at most two `memcpy`s and reading without sources does
//! not touch the address array at all.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::attr::{CqWaitCond, ResourceMgmt};
use crate::config::{Config, LockOf};
use crate::cq_format::{Completion, CqFormat};
use crate::error::{Error, Result};
use crate::flags::CqFlags;
use crate::lock::Lock;
use crate::types::{Context, FiAddr};
use crate::waitobj::Waiter;

use super::shared::Shared;

/// A CQ error entry (`struct fi_cq_err_entry` without the `err_data` pointer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqErrEntry {
    /// The failed operation's context (`op_context`).
    pub context: Context,
    /// Completion flags (`FI_SEND`, `FI_RECV`, ...).
    pub flags: CqFlags,
    /// Length of the data transferred before the error.
    pub len: usize,
    /// Address of the receive data buffer, if any.
    pub buf: usize,
    /// Remote CQ data, valid with [`CqFlags::REMOTE_CQ_DATA`].
    pub data: u64,
    /// Tag of a tagged receive.
    pub tag: u64,
    /// Overflow length: how many bytes were truncated (`FI_ETRUNC`).
    pub olen: usize,
    /// The generic error (`err`, a positive `FI_E*` value in C).
    pub err: Error,
    /// Provider-specific error number (0 when none).
    pub prov_errno: i32,
    /// Source address of the failed receive, [`FiAddr::NOTAVAIL`] when unknown.
    pub src: FiAddr,
}

impl CqErrEntry {
    /// An error entry for `context` failing with `err`: every other field is zero,
    /// the flags are empty and the source is [`FiAddr::NOTAVAIL`].
    #[inline]
    pub fn new(context: Context, err: Error) -> Self {
        CqErrEntry {
            context,
            flags: CqFlags::empty(),
            len: 0,
            buf: 0,
            data: 0,
            tag: 0,
            olen: 0,
            err,
            prov_errno: 0,
            src: FiAddr::NOTAVAIL,
        }
    }

    /// `fi_cq_strerror`: printable text for this entry.
    ///
    /// Providers of this library report `FI_E*` numbers as `prov_errno`, so a
    /// non-zero `prov_errno` is translated like `fi_strerror`; otherwise the text of
    /// the generic [`err`](Self::err) is returned.
    pub fn strerror(&self) -> &'static str {
        if self.prov_errno != 0 {
            let e = Error::from_code(self.prov_errno);
            // An unknown provider number says less than the generic error does.
            if e != Error::Other || self.err == Error::Other {
                return e.as_str();
            }
        }
        self.err.as_str()
    }
}

/// A fixed-capacity circular completion queue with a separate error FIFO.
///
/// `E` is the CQ entry format (`fi_cq_entry`, `fi_cq_msg_entry`, ...); it is `Copy`
/// and `Default` so the storage can be filled once, safely, at creation.
#[derive(Debug, Clone)]
pub struct CqRing<E> {
    /// Entry slots; `entries.len()` is the capacity and never changes.
    entries: Box<[E]>,
    /// Source address of each slot, parallel to `entries`.
    srcs: Box<[FiAddr]>,
    /// Slot of the oldest entry.
    head: usize,
    /// Number of queued entries.
    len: usize,
    /// Error entries, oldest first.
    errs: VecDeque<CqErrEntry>,
}

impl<E: Copy + Default> CqRing<E> {
    /// A ring holding up to `capacity` entries, allocated here once.
    ///
    /// A capacity of 0 is treated as 1 (a CQ always holds at least one entry).
    /// Aborts like any allocation if the memory is not available; use
    /// [`try_new`](Self::try_new) to get an error instead.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        CqRing {
            entries: vec![E::default(); capacity].into_boxed_slice(),
            srcs: vec![FiAddr::NOTAVAIL; capacity].into_boxed_slice(),
            head: 0,
            len: 0,
            errs: VecDeque::new(),
        }
    }

    /// Like [`new`](Self::new), but `Err(Error::Inval)` for a zero capacity and
    /// `Err(Error::NoMem)` if the storage cannot be allocated (e.g. an absurd
    /// `fi_cq_attr::size` from the application).
    #[cfg(test)]
    pub fn try_new(capacity: usize) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::Inval);
        }
        let mut entries = Vec::new();
        entries
            .try_reserve_exact(capacity)
            .map_err(|_| Error::NoMem)?;
        entries.resize(capacity, E::default());
        let mut srcs = Vec::new();
        srcs.try_reserve_exact(capacity).map_err(|_| Error::NoMem)?;
        srcs.resize(capacity, FiAddr::NOTAVAIL);
        Ok(CqRing {
            entries: entries.into_boxed_slice(),
            srcs: srcs.into_boxed_slice(),
            head: 0,
            len: 0,
            errs: VecDeque::new(),
        })
    }
}

impl<E: Copy> CqRing<E> {
    /// Maximum number of (non-error) entries.
    #[inline]
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Number of queued (non-error) entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no (non-error) entry is queued. Error entries are not counted:
    /// check [`has_err`](Self::has_err).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when [`push`](Self::push) would fail.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == self.entries.len()
    }

    /// Maps a logical position (`head + offset`, `offset <= capacity`) to a slot.
    /// A conditional subtraction instead of `%`: it compiles to a `cmov`.
    #[inline(always)]
    fn slot(&self, offset: usize) -> usize {
        let cap = self.entries.len();
        let i = self.head + offset;
        if i >= cap {
            i - cap
        } else {
            i
        }
    }

    /// Adds a completion with its source address.
    ///
    /// Returns the entry back as `Err(e)` when the ring is full; the caller decides
    /// whether that is backpressure (`FI_EAGAIN` to the initiator) or an overrun.
    #[inline]
    pub fn push(&mut self, e: E, src: FiAddr) -> core::result::Result<(), E> {
        if self.is_full() {
            return Err(e);
        }
        let i = self.slot(self.len);
        self.entries[i] = e;
        self.srcs[i] = src;
        self.len += 1;
        Ok(())
    }

    /// Adds an error entry. The error FIFO grows as needed and never drops entries.
    pub fn push_err(&mut self, e: CqErrEntry) {
        self.errs.push_back(e);
    }

    /// True while an error entry is pending.
    #[inline]
    pub fn has_err(&self) -> bool {
        !self.errs.is_empty()
    }

    /// Number of pending error entries.
    #[inline]
    pub fn err_len(&self) -> usize {
        self.errs.len()
    }

    /// Checks the read preconditions and returns how many entries to copy.
    #[inline(always)]
    fn readable(&self, want: usize) -> Result<usize> {
        if !self.errs.is_empty() {
            return Err(Error::Avail);
        }
        if self.len == 0 {
            return Err(Error::Again);
        }
        Ok(want.min(self.len))
    }

    /// The (at most two) contiguous slot ranges holding the `n` oldest entries.
    #[inline(always)]
    fn spans(&self, n: usize) -> (core::ops::Range<usize>, core::ops::Range<usize>) {
        let first = n.min(self.entries.len() - self.head);
        (self.head..self.head + first, 0..n - first)
    }

    /// Removes the `n` oldest entries (already copied out).
    #[inline(always)]
    fn consume(&mut self, n: usize) {
        self.head = self.slot(n);
        self.len -= n;
        // Restart at slot 0 when empty so later reads are a single contiguous copy.
        if self.len == 0 {
            self.head = 0;
        }
    }

    /// [`Self::consume`] of one entry: the head steps to the next slot, or back to 0
    /// when the ring is empty now.
    #[inline(always)]
    fn pop_one(&mut self) {
        self.len -= 1;
        let next = self.head + 1;
        self.head = if self.len == 0 || next == self.entries.len() {
            0
        } else {
            next
        };
    }

    /// `fi_cq_read`: copies up to `out.len()` of the oldest entries into `out`
    /// and returns how many.
    ///
    /// `Err(Error::Avail)` while an error entry is pending: errors are reported
    /// before any further completion, and the application must drain them with
    /// [`read_err`](Self::read_err). `Err(Error::Again)` when the ring is empty.
    /// An empty `out` on a non-empty ring returns `Ok(0)`.
    #[inline(always)]
    pub fn read(&mut self, out: &mut [E]) -> Result<usize> {
        let n = self.readable(out.len())?;
        if n == 1 {
            // The common poll-one-entry case: a plain copy, not two `memcpy` calls,
            // and the head steps by one.
            out[0] = self.entries[self.head];
            self.pop_one();
            return Ok(1);
        }
        let (a, b) = self.spans(n);
        let split = a.len();
        out[..split].copy_from_slice(&self.entries[a]);
        if !b.is_empty() {
            out[split..n].copy_from_slice(&self.entries[b]);
        }
        self.consume(n);
        Ok(n)
    }

    /// `fi_cq_readfrom`: like [`read`](Self::read), and also writes each returned
    /// entry's source address into `src`. At most `min(out.len(), src.len())`
    /// entries are returned.
    #[inline]
    pub fn read_from(&mut self, out: &mut [E], src: &mut [FiAddr]) -> Result<usize> {
        let n = self.readable(out.len().min(src.len()))?;
        if n == 1 {
            out[0] = self.entries[self.head];
            src[0] = self.srcs[self.head];
            self.pop_one();
            return Ok(1);
        }
        let (a, b) = self.spans(n);
        let split = a.len();
        out[..split].copy_from_slice(&self.entries[a.clone()]);
        out[split..n].copy_from_slice(&self.entries[b.clone()]);
        src[..split].copy_from_slice(&self.srcs[a]);
        src[split..n].copy_from_slice(&self.srcs[b]);
        self.consume(n);
        Ok(n)
    }

    /// `fi_cq_readerr`: removes and returns the oldest error entry,
    /// `Err(Error::Again)` when none is pending.
    pub fn read_err(&mut self) -> Result<CqErrEntry> {
        self.errs.pop_front().ok_or(Error::Again)
    }
}

pub(crate) type Entry<S> = <<S as Config>::Cq as CqFormat>::Entry;

pub(crate) struct CqState<S: Config> {
    pub(crate) ring: CqRing<Entry<S>>,
    overflow: VecDeque<(Entry<S>, FiAddr)>,
    pub(crate) overrun: bool,
}

pub(crate) struct CqInner<S: Config> {
    /// The domain the CQ belongs to (endpoints bind only their own domain's CQs).
    pub(crate) shared: Arc<Shared<S>>,
    pub(crate) state: LockOf<S, CqState<S>>,
    pub(crate) waiter: Option<Arc<Waiter>>,
    rm_enabled: bool,
    pub(crate) wait_cond: CqWaitCond,
    pub(crate) signaled: AtomicBool,
    /// Set (under the state lock) while the ring is full or completions wait in
    /// `overflow`: [`Self::has_room`] reads it without taking the lock, which every
    /// posted receive and every arriving message asks. A snapshot either way: the lock
    /// would be released before the caller acts on the answer.
    full: AtomicBool,
}

impl<S: Config> CqInner<S> {
    /// Records a successful completion; `c.src` is also what `fi_cq_readfrom` reports.
    /// Always inlined: a few stores, smaller than a call's register saves.
    #[inline(always)]
    pub(crate) fn complete(&self, c: &Completion) {
        let src = c.src;
        let e = <S::Cq as CqFormat>::make(c);
        self.state.with(|st| {
            if let Err(e) = st.ring.push(e, src) {
                if self.rm_enabled {
                    // Resource management promises no completion is lost: keep it aside
                    // (rare path) and refuse new work until the application catches up.
                    st.overflow.push_back((e, src));
                } else {
                    st.overrun = true;
                }
            }
            if st.ring.is_full() {
                self.full.store(true, Ordering::Relaxed);
            }
        });
        if let Some(w) = &self.waiter {
            w.signal();
        }
    }

    /// [`Self::complete`], or straight into the entries of `rd` when `rd` is a read of
    /// this CQ in progress, with room left, and nothing queued ahead of the completion
    /// (no entry, error or overrun): the read then returns it without a trip through
    /// the ring. Entries keep their order: once one is queued, later ones queue too.
    #[inline(always)]
    pub(crate) fn complete_to(&self, c: &Completion, rd: Option<&mut Reader<'_, S>>) {
        let Some(rd) = rd.filter(|rd| std::ptr::eq(rd.cq, self) && rd.n < rd.out.len()) else {
            return self.complete(c);
        };
        let direct = self.state.with(|st| {
            if !st.ring.is_empty() || st.ring.has_err() || st.overrun {
                return false;
            }
            let Some(slot) = rd.out.get_mut(rd.n) else {
                return false;
            };
            *slot = <S::Cq as CqFormat>::make(c);
            if let Some(src) = rd.src.as_deref_mut().and_then(|s| s.get_mut(rd.n)) {
                *src = c.src;
            }
            rd.n += 1;
            true
        });
        // Nobody waits for an entry that the reading thread already holds.
        if !direct {
            self.complete(c);
        }
    }

    /// Records an error completion (never dropped).
    pub(crate) fn complete_err(&self, e: CqErrEntry) {
        self.state.with(|st| st.ring.push_err(e));
        if let Some(w) = &self.waiter {
            w.signal();
        }
    }

    /// Whether new operations may be posted against this CQ (resource management).
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        !self.rm_enabled || !self.full.load(Ordering::Relaxed)
    }

    /// After a read of a ring that was full: moves kept-aside completions into the
    /// room made, and clears `full` once there is room for new work.
    #[cold]
    fn refill(&self, st: &mut CqState<S>) {
        while !st.overflow.is_empty() && !st.ring.is_full() {
            if let Some((e, s)) = st.overflow.pop_front() {
                // Cannot fail: the ring has room.
                let _ = st.ring.push(e, s);
            }
        }
        self.full.store(
            !st.overflow.is_empty() || st.ring.is_full(),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn pending(&self) -> usize {
        self.state
            .with(|st| st.ring.len() + st.overflow.len() + st.ring.err_len())
    }

    #[inline]
    pub(crate) fn read_inner(
        &self,
        out: &mut [Entry<S>],
        src: Option<&mut [FiAddr]>,
    ) -> Result<usize> {
        self.state.with(|st| {
            // The empty poll a busy-polling reader repeats: a few loads, no call.
            if st.ring.is_empty()
                && !st.ring.has_err()
                && !st.overrun
                && !self.full.load(Ordering::Relaxed)
            {
                return Err(Error::Again);
            }
            self.read_ring(st, out, src)
        })
    }

    /// The rest of [`Self::read_inner`]: entries, a waiting error, an overrun, and the
    /// refill from the overflow queue.
    #[inline(never)]
    fn read_ring(
        &self,
        st: &mut CqState<S>,
        out: &mut [Entry<S>],
        src: Option<&mut [FiAddr]>,
    ) -> Result<usize> {
        if st.overrun {
            return Err(Error::Overrun);
        }
        let r = match src {
            None => st.ring.read(out),
            Some(src) => st.ring.read_from(out, src),
        };
        if self.full.load(Ordering::Relaxed) {
            self.refill(st);
        }
        r
    }
}

/// A [`Cq::read`] (or [`Cq::read_from`]) under way: the caller's entries, which
/// receives completing for that CQ during the read's own progress pass fill directly
/// ([`CqInner::complete_to`]).
pub(crate) struct Reader<'r, S: Config> {
    /// The CQ read, compared by address only.
    cq: *const CqInner<S>,
    out: &'r mut [Entry<S>],
    src: Option<&'r mut [FiAddr]>,
    /// Entries filled so far.
    n: usize,
}

impl<'r, S: Config> Reader<'r, S> {
    /// A read of `cq` into `out` (and `src`), nothing filled yet.
    #[inline(always)]
    pub(crate) fn new(
        cq: &CqInner<S>,
        out: &'r mut [Entry<S>],
        src: Option<&'r mut [FiAddr]>,
    ) -> Self {
        // Both cut to the entries they can both take, so one length bounds every
        // index (and the compiler sees it). A plain read has nothing to cut.
        let (out, src) = match src {
            None => (out, None),
            Some(s) => {
                let room = s.len().min(out.len());
                (&mut out[..room], Some(&mut s[..room]))
            }
        };
        Reader { cq, out, src, n: 0 }
    }

    /// Entries filled so far.
    #[inline(always)]
    pub(crate) fn filled(&self) -> usize {
        self.n
    }

    /// Whether the caller's entries are all filled.
    #[inline(always)]
    pub(crate) fn full(&self) -> bool {
        self.n >= self.out.len()
    }
}

impl<S: Config> CqInner<S> {
    /// A CQ of `size` entries in the domain `shared`.
    pub(crate) fn new(
        shared: &Arc<Shared<S>>,
        size: usize,
        waiter: Option<Arc<Waiter>>,
        wait_cond: CqWaitCond,
    ) -> Self {
        CqInner {
            shared: shared.clone(),
            state: LockOf::<S, _>::new(CqState {
                ring: CqRing::new(size),
                overflow: VecDeque::new(),
                overrun: false,
            }),
            waiter,
            rm_enabled: shared.info.domain_attr.resource_mgmt != ResourceMgmt::Disabled,
            wait_cond,
            signaled: AtomicBool::new(false),
            full: AtomicBool::new(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    struct Ent {
        ctx: usize,
        len: usize,
    }

    fn ent(i: usize) -> Ent {
        Ent {
            ctx: i,
            len: i * 10,
        }
    }

    #[test]
    fn empty_ring_reports_again() {
        let mut r: CqRing<Ent> = CqRing::new(4);
        assert_eq!(r.capacity(), 4);
        assert!(r.is_empty());
        assert!(!r.is_full());
        let mut out = [Ent::default(); 4];
        assert_eq!(r.read(&mut out), Err(Error::Again));
        let mut src = [FiAddr(0); 4];
        assert_eq!(r.read_from(&mut out, &mut src), Err(Error::Again));
        assert_eq!(r.read_err(), Err(Error::Again));
    }

    #[test]
    fn zero_capacity_is_one() {
        let mut r: CqRing<Ent> = CqRing::new(0);
        assert_eq!(r.capacity(), 1);
        assert!(r.push(ent(1), FiAddr(1)).is_ok());
        assert_eq!(r.push(ent(2), FiAddr(2)), Err(ent(2)));
        assert_eq!(CqRing::<Ent>::try_new(0).unwrap_err(), Error::Inval);
        assert_eq!(
            CqRing::<Ent>::try_new(usize::MAX).unwrap_err(),
            Error::NoMem
        );
        assert_eq!(CqRing::<Ent>::try_new(3).unwrap().capacity(), 3);
    }

    #[test]
    fn fifo_order_and_full() {
        let mut r: CqRing<Ent> = CqRing::new(3);
        for i in 0..3 {
            r.push(ent(i), FiAddr(i as u64)).unwrap();
        }
        assert!(r.is_full());
        assert_eq!(r.len(), 3);
        assert_eq!(r.push(ent(9), FiAddr(9)), Err(ent(9)));
        let mut out = [Ent::default(); 2];
        assert_eq!(r.read(&mut out), Ok(2));
        assert_eq!(out, [ent(0), ent(1)]);
        assert_eq!(r.len(), 1);
        let mut big = [Ent::default(); 8];
        assert_eq!(r.read(&mut big), Ok(1));
        assert_eq!(big[0], ent(2));
        assert!(r.is_empty());
    }

    #[test]
    fn wraparound_read_and_read_from() {
        let mut r: CqRing<Ent> = CqRing::new(4);
        let mut out = [Ent::default(); 4];
        let mut src = [FiAddr(0); 4];
        // Advance head to slot 3 while keeping one entry so the head is not reset.
        for i in 0..4 {
            r.push(ent(i), FiAddr(100 + i as u64)).unwrap();
        }
        assert_eq!(r.read(&mut out[..3]), Ok(3));
        for i in 4..7 {
            r.push(ent(i), FiAddr(100 + i as u64)).unwrap();
        }
        assert!(r.is_full());
        // Entries 3..7 now straddle the end of the storage.
        assert_eq!(r.read_from(&mut out, &mut src), Ok(4));
        assert_eq!(out, [ent(3), ent(4), ent(5), ent(6)]);
        assert_eq!(src, [FiAddr(103), FiAddr(104), FiAddr(105), FiAddr(106)]);
        assert!(r.is_empty());
    }

    #[test]
    fn one_at_a_time_across_the_end() {
        // Single-entry reads step the head by one: through the last slot back to 0
        // while entries remain, and to 0 whenever the ring empties.
        let mut r: CqRing<Ent> = CqRing::new(3);
        let mut out = [Ent::default(); 1];
        let mut src = [FiAddr(0); 1];
        let mut next_in = 0;
        let mut next_out = 0;
        for round in 0..10 {
            while !r.is_full() {
                r.push(ent(next_in), FiAddr(next_in as u64)).unwrap();
                next_in += 1;
            }
            // Leave one or two behind so the head moves through every slot.
            for _ in 0..1 + round % 2 {
                let n = if round % 3 == 0 {
                    r.read_from(&mut out, &mut src)
                } else {
                    src[0] = FiAddr(next_out as u64);
                    r.read(&mut out)
                };
                assert_eq!(n, Ok(1));
                assert_eq!((out[0], src[0]), (ent(next_out), FiAddr(next_out as u64)));
                next_out += 1;
            }
        }
        while r.read(&mut out) == Ok(1) {
            assert_eq!(out[0], ent(next_out));
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
        assert!(r.is_empty());
        // Emptied by a single read: the next push lands in slot 0, a single copy.
        r.push(ent(100), FiAddr(100)).unwrap();
        r.push(ent(101), FiAddr(101)).unwrap();
        let mut two = [Ent::default(); 2];
        assert_eq!(r.read(&mut two), Ok(2));
        assert_eq!(two, [ent(100), ent(101)]);
    }

    #[test]
    fn read_from_limited_by_src_len() {
        let mut r: CqRing<Ent> = CqRing::new(4);
        for i in 0..4 {
            r.push(ent(i), FiAddr(i as u64)).unwrap();
        }
        let mut out = [Ent::default(); 4];
        let mut src = [FiAddr(0); 2];
        assert_eq!(r.read_from(&mut out, &mut src), Ok(2));
        assert_eq!(&out[..2], &[ent(0), ent(1)]);
        assert_eq!(src, [FiAddr(0), FiAddr(1)]);
        assert_eq!(r.len(), 2);
        // Zero-length buffers on a non-empty ring: nothing copied, nothing lost.
        assert_eq!(r.read(&mut []), Ok(0));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn errors_reported_first_and_never_dropped() {
        let mut r: CqRing<Ent> = CqRing::new(2);
        r.push(ent(1), FiAddr(1)).unwrap();
        for i in 0..100 {
            let mut e = CqErrEntry::new(Context(i), Error::Trunc);
            e.olen = i;
            r.push_err(e);
        }
        assert!(r.has_err());
        assert_eq!(r.err_len(), 100);
        let mut out = [Ent::default(); 2];
        let mut src = [FiAddr(0); 2];
        assert_eq!(r.read(&mut out), Err(Error::Avail));
        assert_eq!(r.read_from(&mut out, &mut src), Err(Error::Avail));
        for i in 0..100 {
            let e = r.read_err().unwrap();
            assert_eq!(e.context, Context(i));
            assert_eq!(e.olen, i);
            assert_eq!(e.err, Error::Trunc);
        }
        assert!(!r.has_err());
        assert_eq!(r.read_err(), Err(Error::Again));
        assert_eq!(r.read(&mut out), Ok(1));
        assert_eq!(out[0], ent(1));
    }

    #[test]
    fn error_on_empty_ring_is_avail() {
        let mut r: CqRing<Ent> = CqRing::new(2);
        r.push_err(CqErrEntry::new(Context(7), Error::Canceled));
        assert_eq!(r.read(&mut [Ent::default()]), Err(Error::Avail));
        assert_eq!(r.read_err().unwrap().context, Context(7));
        assert_eq!(r.read(&mut [Ent::default()]), Err(Error::Again));
    }

    #[test]
    fn err_entry_defaults_and_strerror() {
        let e = CqErrEntry::new(Context(5), Error::Canceled);
        assert_eq!(e.src, FiAddr::NOTAVAIL);
        assert_eq!(e.flags, CqFlags::empty());
        assert_eq!(
            (e.len, e.buf, e.data, e.tag, e.olen, e.prov_errno),
            (0, 0, 0, 0, 0, 0)
        );
        assert_eq!(e.strerror(), "Operation canceled");
        let mut t = CqErrEntry::new(Context(5), Error::Io);
        t.prov_errno = Error::Trunc.code();
        assert_eq!(t.strerror(), "Truncation error");
        t.prov_errno = 99_999;
        assert_eq!(t.strerror(), "Input/output error");
    }

    /// Model check against a VecDeque over a deterministic pseudo-random sequence.
    #[test]
    fn matches_vecdeque_model() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for cap in [1usize, 2, 3, 5, 8] {
            let mut r: CqRing<Ent> = CqRing::new(cap);
            let mut model: VecDeque<(Ent, FiAddr)> = VecDeque::new();
            let mut counter = 0usize;
            for _ in 0..5000 {
                if next() % 3 != 0 {
                    let e = ent(counter);
                    let a = FiAddr(counter as u64 ^ 0xABCD);
                    counter += 1;
                    let res = r.push(e, a);
                    if model.len() < cap {
                        assert_eq!(res, Ok(()));
                        model.push_back((e, a));
                    } else {
                        assert_eq!(res, Err(e));
                    }
                } else {
                    let want = (next() % 6) as usize;
                    let mut out = vec![Ent::default(); want];
                    let mut src = vec![FiAddr(0); want];
                    let with_src = next() % 2 == 0;
                    let res = if with_src {
                        r.read_from(&mut out, &mut src)
                    } else {
                        r.read(&mut out)
                    };
                    if model.is_empty() {
                        assert_eq!(res, Err(Error::Again));
                        continue;
                    }
                    let n = res.unwrap();
                    assert_eq!(n, want.min(model.len()));
                    for i in 0..n {
                        let (e, a) = model.pop_front().unwrap();
                        assert_eq!(out[i], e);
                        if with_src {
                            assert_eq!(src[i], a);
                        }
                    }
                }
                assert_eq!(r.len(), model.len());
                assert_eq!(r.is_full(), model.len() == cap);
            }
        }
    }
}
