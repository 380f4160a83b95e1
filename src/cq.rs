//! Completion queues (`fi_cq`): read, readfrom, readerr, sread, signal, wait objects.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attr::{CqAttr, CqWaitCond};
use crate::config::{Config, Progress};
use crate::engine::cq::{CqInner, Entry, Reader};
use crate::engine::DomainInner;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::types::FiAddr;
use crate::waitobj::Waiter;

pub use crate::engine::cq::CqErrEntry;

/// Default number of CQ entries when the attribute leaves it 0.
pub const DEFAULT_CQ_SIZE: usize = 1024;

/// A completion queue of configuration `S`; entries have the type `S::Cq::Entry`.
pub struct Cq<S: Config> {
    pub(crate) inner: Arc<CqInner<S>>,
    /// Progressed by reads under manual progress.
    pub(crate) domain: Arc<DomainInner<S>>,
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
        Ok(Cq {
            inner: Arc::new(CqInner::new(&domain.shared, size, waiter, attr.wait_cond)),
            domain: domain.clone(),
        })
    }

    #[inline]
    fn progress(&self) {
        if !<S::Progress as Progress>::AUTO {
            self.domain.progress();
        }
    }

    /// Manual progress on behalf of a read into `out` (and `src`): returns how many
    /// entries the pass delivered there directly.
    #[inline]
    fn progress_into(&self, out: &mut [Entry<S>], src: Option<&mut [FiAddr]>) -> usize {
        if <S::Progress as Progress>::AUTO {
            return 0;
        }
        let mut rd = Reader::new(&self.inner, out, src);
        self.domain.progress_with(Some(&mut rd));
        rd.filled()
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
        let dom = &self.domain;
        loop {
            let token_cq = self.inner.waiter.as_ref().map(|w| w.prepare());
            let token_dom = dom.shared.doorbell.prepare();
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
                let _ = dom.shared.doorbell.wait(token_dom, Some(slice));
            }
        }
    }

    /// `fi_cq_signal`: wakes a thread blocked in [`Cq::sread`]; with nothing to read it
    /// returns `Err(Again)`.
    pub fn signal(&self) {
        self.inner.signaled.store(true, Ordering::Release);
        self.domain.shared.doorbell.signal();
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
                self.domain.arm_wake(target);
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
            domain: self.domain.clone(),
        }
    }
}
