//! Event queues (`fi_eq`): read, sread, write, readerr, wait object.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attr::{EqAttr, FI_WRITE};
use crate::config::{Config, Progress};
use crate::engine::eq::EqInner;
use crate::engine::DomainInner;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::waitobj::Waiter;

pub use crate::engine::eq::{EqEntry, EqErrEntry, EqEvent};

/// Default number of EQ entries.
pub const DEFAULT_EQ_SIZE: usize = 256;

/// An event queue.
pub struct EventQueue<S: Config> {
    pub(crate) inner: Arc<EqInner<S>>,
    /// The domain a read progresses under manual progress (none for a fabric's EQ).
    domain: Option<Arc<DomainInner<S>>>,
}

impl<S: Config> Clone for EventQueue<S> {
    fn clone(&self) -> Self {
        EventQueue {
            inner: self.inner.clone(),
            domain: self.domain.clone(),
        }
    }
}

impl<S: Config> EventQueue<S> {
    pub(crate) fn open(
        attr: &EqAttr,
        domain: Option<Arc<DomainInner<S>>>,
        wait_set: Option<Arc<Waiter>>,
    ) -> Result<Self> {
        let size = if attr.size == 0 {
            DEFAULT_EQ_SIZE
        } else {
            attr.size
        };
        let waiter = Waiter::for_object(attr.wait_obj, wait_set)?;
        Ok(EventQueue {
            inner: Arc::new(EqInner::new(size, waiter, attr.flags & FI_WRITE != 0)),
            domain,
        })
    }

    /// `fi_eq_read`: the next event; `peek` leaves it queued. `Err(Again)` when empty,
    /// `Err(Avail)` when an error event waits for [`EventQueue::read_err`].
    pub fn read(&self, peek: bool) -> Result<EqEntry> {
        self.inner.progress_cm();
        if !<S::Progress as Progress>::AUTO {
            if let Some(d) = &self.domain {
                d.progress();
            }
        }
        self.inner.q.with(|q| q.read(peek))
    }

    /// `fi_eq_readerr`.
    pub fn read_err(&self, peek: bool) -> Result<EqErrEntry> {
        self.inner.progress_cm();
        self.inner.q.with(|q| q.read_err(peek))
    }

    /// `fi_eq_sread`: blocks until an event or the timeout (`Err(Again)`).
    pub fn sread(&self, peek: bool, timeout: Option<Duration>) -> Result<EqEntry> {
        let w = self.inner.waiter.clone().ok_or(Error::NoSys)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let token = w.prepare();
            match self.read(peek) {
                Err(Error::Again) => {}
                r => return r,
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
            let _ = w.wait(token, Some(left));
        }
    }

    /// `fi_eq_write`: the application inserts an event (the EQ must be opened with
    /// `FI_WRITE` in its flags, else `Err(Inval)`).
    pub fn write(&self, e: EqEntry) -> Result<()> {
        if !self.inner.writable {
            return Err(Error::Inval);
        }
        self.inner.post(e)
    }

    /// The `FI_WAIT_FD` descriptor, if any.
    pub fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.waiter.as_ref().and_then(|w| w.fd())
    }
}
