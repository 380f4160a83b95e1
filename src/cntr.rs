//! Counters (`fi_cntr`): read, readerr, add, set, adderr, seterr, wait with threshold,
//! and the triggered operations deferred until a counter reaches a threshold.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attr::CntrAttr;
use crate::config::{Config, Progress};
use crate::engine::cntr::{add_to, CntrInner};
use crate::engine::DomainInner;
use crate::error::{Error, Result};
use crate::waitobj::Waiter;

/// A completion counter.
pub struct Counter<S: Config> {
    pub(crate) inner: Arc<CntrInner<S>>,
    /// Progressed by reads under manual progress; runs the triggered operations.
    pub(crate) domain: Arc<DomainInner<S>>,
}

impl<S: Config> Clone for Counter<S> {
    fn clone(&self) -> Self {
        Counter {
            inner: self.inner.clone(),
            domain: self.domain.clone(),
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
            inner: Arc::new(CntrInner::new(domain.shared.doorbell.clone(), waiter)),
            domain: domain.clone(),
        })
    }

    #[inline]
    fn progress(&self) {
        if !<S::Progress as Progress>::AUTO {
            self.domain.progress();
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
        self.domain.run_triggers();
    }

    /// `fi_cntr_set`.
    pub fn set(&self, v: u64) {
        self.inner.value.store(v, Ordering::Release);
        self.inner.changed();
        self.domain.run_triggers();
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
        let dom = &self.domain;
        loop {
            let token = dom.shared.doorbell.prepare();
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
            let _ = dom.shared.doorbell.wait(token, Some(left));
        }
    }

    /// The `FI_WAIT_FD` descriptor, if any.
    pub fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.waiter.as_ref().and_then(|w| w.fd())
    }
}
