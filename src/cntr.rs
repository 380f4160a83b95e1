//! Counters (`fi_cntr`): read, readerr, add, set, adderr, seterr, wait with threshold,
//! and the triggered operations deferred until a counter reaches a threshold.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attr::CntrAttr;
use crate::config::{Config, LockOf, Progress};
use crate::domain::DomainInner;
use crate::endpoint::Deferred;
use crate::error::{Error, Result};
use crate::lock::{Lock, LockFamily};
use crate::waitobj::Waiter;

pub(crate) struct CntrInner<S: Config> {
    pub(crate) domain: Arc<DomainInner<S>>,
    value: AtomicU64,
    err: AtomicU64,
    waiter: Option<Arc<Waiter>>,
    pub(crate) triggers: LockOf<S, Vec<Deferred<S>>>,
}

/// Adds `n` to counter word `w`. Objects that only one thread can use (`S::Locks` not
/// [`SHARED`](LockFamily::SHARED): `FI_THREAD_DOMAIN` with manual progress) have one
/// writer, so a load and a store do; otherwise an atomic add (a locked instruction).
#[inline(always)]
fn add_to<S: Config>(w: &AtomicU64, n: u64) {
    if <S::Locks as LockFamily>::SHARED {
        w.fetch_add(n, Ordering::AcqRel);
    } else {
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }
}

impl<S: Config> CntrInner<S> {
    /// One successful completion.
    #[inline]
    pub(crate) fn inc(&self) {
        add_to::<S>(&self.value, 1);
        self.changed();
    }

    /// One failed completion.
    pub(crate) fn inc_err(&self) {
        add_to::<S>(&self.err, 1);
        self.changed();
    }

    #[inline]
    fn changed(&self) {
        if let Some(w) = &self.waiter {
            w.signal();
        }
        self.domain.doorbell.signal();
    }

    pub(crate) fn value(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// Removes and returns the triggered operations whose threshold has been reached,
    /// in threshold order (oldest first among equal thresholds).
    pub(crate) fn take_due(&self) -> Vec<Deferred<S>> {
        let v = self.value();
        self.triggers.with(|t| {
            if t.iter().all(|d| d.threshold > v) {
                return Vec::new();
            }
            let (mut due, keep): (Vec<_>, Vec<_>) = t.drain(..).partition(|d| d.threshold <= v);
            *t = keep;
            // fi_trigger(3): operations fire in threshold order even when one increment
            // passes several thresholds; the stable sort keeps submission order for equal
            // thresholds.
            due.sort_by_key(|d| d.threshold);
            due
        })
    }
}

/// A completion counter.
pub struct Counter<S: Config> {
    pub(crate) inner: Arc<CntrInner<S>>,
}

impl<S: Config> Clone for Counter<S> {
    fn clone(&self) -> Self {
        Counter {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Config> Counter<S> {
    pub(crate) fn open(
        domain: &Arc<DomainInner<S>>,
        attr: &CntrAttr,
        wait_set: Option<Arc<Waiter>>,
    ) -> Result<Counter<S>> {
        let waiter = Waiter::for_object(attr.wait_obj, wait_set)?;
        Ok(Counter {
            inner: Arc::new(CntrInner {
                domain: domain.clone(),
                value: AtomicU64::new(0),
                err: AtomicU64::new(0),
                waiter,
                triggers: LockOf::<S, _>::new(Vec::new()),
            }),
        })
    }

    #[inline]
    fn progress(&self) {
        if !<S::Progress as Progress>::AUTO {
            self.inner.domain.progress();
        }
    }

    /// `fi_cntr_read`: completed operations (progresses the domain under manual progress).
    #[inline]
    pub fn read(&self) -> u64 {
        self.progress();
        self.inner.value()
    }

    /// `fi_cntr_readerr`: failed operations.
    pub fn read_err(&self) -> u64 {
        self.progress();
        self.inner.err.load(Ordering::Acquire)
    }

    /// `fi_cntr_add`.
    pub fn add(&self, v: u64) {
        add_to::<S>(&self.inner.value, v);
        self.inner.changed();
        self.inner.domain.run_triggers();
    }

    /// `fi_cntr_set`.
    pub fn set(&self, v: u64) {
        self.inner.value.store(v, Ordering::Release);
        self.inner.changed();
        self.inner.domain.run_triggers();
    }

    /// `fi_cntr_adderr`.
    pub fn add_err(&self, v: u64) {
        add_to::<S>(&self.inner.err, v);
        self.inner.changed();
    }

    /// `fi_cntr_seterr`.
    pub fn set_err(&self, v: u64) {
        self.inner.err.store(v, Ordering::Release);
        self.inner.changed();
    }

    /// `fi_cntr_wait`: blocks until the counter reaches `threshold`. `Err(Again)` on
    /// timeout; `Err(Avail)` when the error count changes while waiting.
    pub fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        if self.inner.waiter.is_none() {
            return Err(Error::NoSys);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let err0 = self.inner.err.load(Ordering::Acquire);
        let dom = &self.inner.domain;
        loop {
            let token = dom.doorbell.prepare();
            if self.read() >= threshold {
                return Ok(());
            }
            if self.inner.err.load(Ordering::Acquire) != err0 {
                return Err(Error::Avail);
            }
            let left = match deadline {
                None => Duration::from_millis(5),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Again);
                    }
                    (d - now).min(Duration::from_millis(5))
                }
            };
            // Peers in other processes ring the doorbell only once armed; what they
            // sent before is visible to this last look (`read` progresses).
            dom.arm_doorbell();
            if self.read() >= threshold {
                return Ok(());
            }
            let _ = dom.doorbell.wait(token, Some(left));
        }
    }

    /// The `FI_WAIT_FD` descriptor, if any.
    pub fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.waiter.as_ref().and_then(|w| w.fd())
    }
}
