//! Completion queues (`fi_cq`): read, readfrom, readerr, sread, signal, wait objects.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attr::{CqAttr, CqWaitCond, ResourceMgmt};
use crate::config::{Config, LockOf, Progress};
use crate::cq_format::{Completion, CqFormat};
use crate::domain::DomainInner;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::ring::{CqErrEntry, CqRing};
use crate::types::FiAddr;
use crate::waitobj::Waiter;

/// Default number of CQ entries when the attribute leaves it 0.
pub const DEFAULT_CQ_SIZE: usize = 1024;

type Entry<S> = <<S as Config>::Cq as CqFormat>::Entry;

pub(crate) struct CqState<S: Config> {
    ring: CqRing<Entry<S>>,
    overflow: VecDeque<(Entry<S>, FiAddr)>,
    overrun: bool,
}

pub(crate) struct CqInner<S: Config> {
    pub(crate) domain: Arc<DomainInner<S>>,
    state: LockOf<S, CqState<S>>,
    waiter: Option<Arc<Waiter>>,
    rm_enabled: bool,
    wait_cond: CqWaitCond,
    signaled: AtomicBool,
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
        let Some(rd) = rd.filter(|rd| std::ptr::eq(rd.cq, self) && rd.n < rd.room) else {
            return self.complete(c);
        };
        let direct = self.state.with(|st| {
            if !st.ring.is_empty() || st.ring.has_err() || st.overrun {
                return false;
            }
            rd.out[rd.n] = <S::Cq as CqFormat>::make(c);
            if let Some(src) = rd.src.as_deref_mut() {
                src[rd.n] = c.src;
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

    fn pending(&self) -> usize {
        self.state
            .with(|st| st.ring.len() + st.overflow.len() + st.ring.err_len())
    }

    #[inline]
    fn read_inner(&self, out: &mut [Entry<S>], src: Option<&mut [FiAddr]>) -> Result<usize> {
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
    /// Entries `out` (and `src`) can take.
    room: usize,
    /// Entries filled so far.
    n: usize,
}

impl<S: Config> Reader<'_, S> {
    /// Whether the caller's entries are all filled.
    #[inline(always)]
    pub(crate) fn full(&self) -> bool {
        self.n >= self.room
    }
}

/// A completion queue of configuration `S`; entries have the type `S::Cq::Entry`.
pub struct Cq<S: Config> {
    pub(crate) inner: Arc<CqInner<S>>,
}

impl<S: Config> Cq<S> {
    pub(crate) fn open(
        domain: &Arc<DomainInner<S>>,
        attr: &CqAttr,
        wait_set: Option<Arc<Waiter>>,
    ) -> Result<Cq<S>> {
        let size = if attr.size == 0 {
            DEFAULT_CQ_SIZE
        } else {
            attr.size
        };
        let waiter = Waiter::for_object(attr.wait_obj, wait_set)?;
        let rm_enabled = domain.info.domain_attr.resource_mgmt != ResourceMgmt::Disabled;
        Ok(Cq {
            inner: Arc::new(CqInner {
                domain: domain.clone(),
                state: LockOf::<S, _>::new(CqState {
                    ring: CqRing::new(size),
                    overflow: VecDeque::new(),
                    overrun: false,
                }),
                waiter,
                rm_enabled,
                wait_cond: attr.wait_cond,
                signaled: AtomicBool::new(false),
                full: AtomicBool::new(false),
            }),
        })
    }

    #[inline]
    fn progress(&self) {
        if !<S::Progress as Progress>::AUTO {
            self.inner.domain.progress();
        }
    }

    /// Manual progress on behalf of a read into `out` (and `src`): returns how many
    /// entries the pass delivered there directly.
    #[inline]
    fn progress_into(&self, out: &mut [Entry<S>], src: Option<&mut [FiAddr]>) -> usize {
        if <S::Progress as Progress>::AUTO {
            return 0;
        }
        let room = src.as_ref().map_or(out.len(), |s| s.len().min(out.len()));
        let mut rd = Reader {
            cq: Arc::as_ptr(&self.inner),
            out,
            src,
            room,
            n: 0,
        };
        self.inner.domain.progress_with(Some(&mut rd));
        rd.n
    }

    /// `fi_cq_read`: up to `out.len()` completions. `Err(Again)` when none,
    /// `Err(Avail)` when an error entry waits for [`Cq::read_err`].
    #[inline]
    pub fn read(&self, out: &mut [Entry<S>]) -> Result<usize> {
        match self.progress_into(out, None) {
            0 => self.inner.read_inner(out, None),
            n => Ok(n),
        }
    }

    /// `fi_cq_readfrom`: as [`Cq::read`], with each entry's source address
    /// (`FiAddr::NOTAVAIL` unless the endpoint has `FI_SOURCE`).
    #[inline]
    pub fn read_from(&self, out: &mut [Entry<S>], src: &mut [FiAddr]) -> Result<usize> {
        match self.progress_into(out, Some(src)) {
            0 => self.inner.read_inner(out, Some(src)),
            n => Ok(n),
        }
    }

    /// `fi_cq_readerr`: the oldest error entry, `Err(Again)` when none.
    pub fn read_err(&self) -> Result<CqErrEntry> {
        self.progress();
        self.inner.state.with(|st| st.ring.read_err())
    }

    /// `fi_cq_sread`: blocks until at least one completion (or, with the threshold wait
    /// condition, `threshold` of them) or the timeout (`Err(Again)`), then reads.
    pub fn sread(
        &self,
        out: &mut [Entry<S>],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.wait_until(threshold, timeout)?;
        self.read(out)
    }

    /// `fi_cq_sreadfrom`.
    pub fn sread_from(
        &self,
        out: &mut [Entry<S>],
        src: &mut [FiAddr],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.wait_until(threshold, timeout)?;
        self.read_from(out, src)
    }

    fn wait_until(&self, threshold: usize, timeout: Option<Duration>) -> Result<()> {
        if self.inner.waiter.is_none() {
            return Err(Error::NoSys);
        }
        let want = if self.inner.wait_cond == CqWaitCond::Threshold {
            threshold.max(1)
        } else {
            1
        };
        let deadline = timeout.map(|t| Instant::now() + t);
        let dom = &self.inner.domain;
        loop {
            let token_cq = self.inner.waiter.as_ref().map(|w| w.prepare());
            let token_dom = dom.doorbell.prepare();
            self.progress();
            if self.inner.pending() >= want
                || self.inner.state.with(|st| st.ring.has_err() || st.overrun)
            {
                return Ok(());
            }
            if self.inner.signaled.swap(false, Ordering::AcqRel) {
                return Err(Error::Again);
            }
            let left = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Again);
                    }
                    Some(d - now)
                }
            };
            // With manual progress arrivals ring the domain doorbell; with auto progress
            // the progress thread writes entries and rings the CQ's own waiter.
            let slice = left.map_or(Duration::from_millis(5), |l| {
                l.min(Duration::from_millis(5))
            });
            if <S::Progress as Progress>::AUTO {
                if let (Some(w), Some(t)) = (&self.inner.waiter, token_cq) {
                    let _ = w.wait(t, Some(slice));
                }
            } else {
                // Peers in other processes ring the doorbell only once armed; what
                // they sent before is visible to this last look.
                dom.arm_doorbell();
                self.progress();
                if self.inner.pending() >= want
                    || self.inner.state.with(|st| st.ring.has_err() || st.overrun)
                {
                    return Ok(());
                }
                let _ = dom.doorbell.wait(token_dom, Some(slice));
            }
        }
    }

    /// `fi_cq_signal`: wakes a thread blocked in [`Cq::sread`]; with nothing to read it
    /// returns `Err(Again)`.
    pub fn signal(&self) {
        self.inner.signaled.store(true, Ordering::Release);
        self.inner.domain.doorbell.signal();
        if let Some(w) = &self.inner.waiter {
            w.signal();
        }
    }

    /// The file descriptor of an `FI_WAIT_FD` CQ (`fi_control(FI_GETWAIT)`), for epoll.
    /// Call [`Cq::trywait`] before blocking on it.
    pub fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.waiter.as_ref().and_then(|w| w.fd())
    }

    /// `fi_trywait` for this CQ: `Ok(())` when it is safe to block on the wait object,
    /// `Err(Again)` when completions are ready (read them first).
    pub fn trywait(&self) -> Result<()> {
        if !<S::Progress as Progress>::AUTO {
            // The application is about to sleep on the fd: peers in other processes
            // cannot ring the domain's waiter, so the transports are told which pipe to
            // write to; the progress below then sees anything sent before.
            if let Some(target) = self.inner.waiter.as_ref().and_then(|w| w.remote_signal()) {
                self.inner.domain.arm_wake(target);
            }
        }
        self.progress();
        if self.inner.pending() > 0 {
            return Err(Error::Again);
        }
        if let Some(w) = &self.inner.waiter {
            w.clear();
        }
        Ok(())
    }

    /// `fi_cq_strerror`: the text for an error entry's provider error number.
    pub fn strerror(&self, e: &CqErrEntry) -> &'static str {
        e.strerror()
    }
}

impl<S: Config> Clone for Cq<S> {
    fn clone(&self) -> Self {
        Cq {
            inner: self.inner.clone(),
        }
    }
}
