//! The state behind every event queue (`man 3 fi_eq`).
//!
//! [`EqQueue`] holds control events (connection management, asynchronous MR and AV
//! completions, ...) in a bounded FIFO, and error events in a separate FIFO that
//! never drops entries. Events are rare, so this is a plain `VecDeque`, not a ring
//! tuned for the data path.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::config::{Config, LockOf};
use crate::error::{Error, Result};
use crate::info::Info;
use crate::lock::Lock;
use crate::types::Context;
use crate::waitobj::Waiter;

use super::CmSource;

/// The event type of an EQ entry (`FI_NOTIFY`, `FI_CONNREQ`, ...), with libfabric's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EqEvent {
    /// `FI_NOTIFY`: a generic notification.
    Notify = 0,
    /// `FI_CONNREQ`: a connection request arrived on a passive endpoint.
    ConnReq = 1,
    /// `FI_CONNECTED`: a connection was established.
    Connected = 2,
    /// `FI_SHUTDOWN`: a connection was shut down.
    Shutdown = 3,
    /// `FI_MR_COMPLETE`: an asynchronous memory registration completed.
    MrComplete = 4,
    /// `FI_AV_COMPLETE`: an asynchronous address-vector insertion completed.
    AvComplete = 5,
    /// `FI_JOIN_COMPLETE`: a multicast join completed.
    JoinComplete = 6,
}

impl EqEvent {
    /// The libfabric numeric value (`uint32_t event`).
    #[inline]
    pub const fn as_raw(self) -> u32 {
        self as u32
    }

    /// From the libfabric numeric value; `None` for unknown events.
    pub const fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            0 => EqEvent::Notify,
            1 => EqEvent::ConnReq,
            2 => EqEvent::Connected,
            3 => EqEvent::Shutdown,
            4 => EqEvent::MrComplete,
            5 => EqEvent::AvComplete,
            6 => EqEvent::JoinComplete,
            _ => return None,
        })
    }
}

/// An EQ event: the `fi_eq_entry` / `fi_eq_cm_entry` payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EqEntry {
    /// The event type.
    pub event: EqEvent,
    /// Context of the object the event is about (the `fid`'s context).
    pub fid_context: Context,
    /// The operation's context (e.g. the context passed to `fi_av_insert`).
    pub context: Context,
    /// Event data (e.g. the number of addresses inserted for `FI_AV_COMPLETE`).
    pub data: u64,
    /// Connection data of a connection-management event (`fi_eq_cm_entry::data`: the
    /// connect's data for `FI_CONNREQ`, the accept's for `FI_CONNECTED`), or another
    /// event's payload; `None` when absent.
    pub info: Option<Vec<u8>>,
    /// For `FI_CONNREQ`: the info to open the accepting endpoint with
    /// (`fi_eq_cm_entry::info`), its [`handle`](Info::handle) naming the request.
    pub conn: Option<Box<Info>>,
}

/// An EQ error event (`struct fi_eq_err_entry` without the `err_data` pointer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EqErrEntry {
    /// Context of the object the error is about (the `fid`'s context).
    pub fid_context: Context,
    /// The failed operation's context.
    pub context: Context,
    /// Event data (e.g. how many AV insertions succeeded).
    pub data: u64,
    /// The generic error.
    pub err: Error,
    /// Provider-specific error number (0 when none).
    pub prov_errno: i32,
    /// Error data (`err_data`): the reject's connection data of an `FI_ECONNREFUSED`;
    /// empty when none.
    pub err_data: Vec<u8>,
}

/// Bounded FIFO of EQ events with an unbounded FIFO of error events.
#[derive(Debug, Clone)]
pub struct EqQueue {
    events: VecDeque<EqEntry>,
    errs: VecDeque<EqErrEntry>,
    capacity: usize,
}

impl EqQueue {
    /// A queue of up to `capacity` events (`fi_eq_attr::size`); 0 is treated as 1.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        EqQueue {
            // Reserve modestly: EQ sizes can be large and events are rare.
            events: VecDeque::with_capacity(capacity.min(64)),
            errs: VecDeque::new(),
            capacity,
        }
    }

    /// Maximum number of queued (non-error) events.
    #[inline]
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Adds an event; `Err(Error::Again)` when the queue is full.
    pub fn push(&mut self, e: EqEntry) -> Result<()> {
        if self.events.len() >= self.capacity {
            return Err(Error::Again);
        }
        self.events.push_back(e);
        Ok(())
    }

    /// Adds an error event. Error events are never dropped.
    pub fn push_err(&mut self, e: EqErrEntry) {
        self.errs.push_back(e);
    }

    /// `fi_eq_read`: the oldest event, removed unless `peek` (`FI_PEEK`).
    ///
    /// `Err(Error::Avail)` while an error event is pending (errors are reported
    /// first; read them with [`read_err`](Self::read_err)), `Err(Error::Again)`
    /// when no event is queued.
    pub fn read(&mut self, peek: bool) -> Result<EqEntry> {
        if !self.errs.is_empty() {
            return Err(Error::Avail);
        }
        if peek {
            self.events.front().cloned().ok_or(Error::Again)
        } else {
            self.events.pop_front().ok_or(Error::Again)
        }
    }

    /// `fi_eq_readerr`: the oldest error event, removed unless `peek`;
    /// `Err(Error::Again)` when none is pending.
    pub fn read_err(&mut self, peek: bool) -> Result<EqErrEntry> {
        if peek {
            self.errs.front().cloned().ok_or(Error::Again)
        } else {
            self.errs.pop_front().ok_or(Error::Again)
        }
    }

    /// Number of queued (non-error) events.
    #[inline]
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no (non-error) event is queued; see [`has_err`](Self::has_err).
    #[inline]
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// True while an error event is pending.
    #[inline]
    #[cfg(test)]
    pub fn has_err(&self) -> bool {
        !self.errs.is_empty()
    }

    /// Number of pending error events.
    #[inline]
    #[cfg(test)]
    pub fn err_len(&self) -> usize {
        self.errs.len()
    }
}

pub(crate) struct EqInner<S: Config> {
    pub(crate) q: LockOf<S, EqQueue>,
    pub(crate) waiter: Option<Arc<Waiter>>,
    pub(crate) writable: bool,
    /// The endpoints and passive endpoints bound to this EQ: a read collects their
    /// connection events.
    cm: LockOf<S, Vec<CmSource<S>>>,
}

impl<S: Config> EqInner<S> {
    /// An EQ of `size` events; `writable`: the application may insert events.
    pub(crate) fn new(size: usize, waiter: Option<Arc<Waiter>>, writable: bool) -> Self {
        EqInner {
            q: LockOf::<S, _>::new(EqQueue::new(size)),
            waiter,
            writable,
            cm: LockOf::<S, _>::new(Vec::new()),
        }
    }

    /// Adds an object whose connection events reads of this EQ collect.
    pub(crate) fn add_cm(&self, src: CmSource<S>) {
        self.cm.with(|v| v.push(src));
    }

    /// Collects the connection events of the bound objects into the queue, forgetting
    /// the objects that are gone.
    pub(crate) fn progress_cm(&self) {
        self.cm.with(|v| v.retain(|s| s.poll()));
    }

    pub(crate) fn post(&self, e: EqEntry) -> Result<()> {
        self.q.with(|q| q.push(e))?;
        if let Some(w) = &self.waiter {
            w.signal();
        }
        Ok(())
    }

    pub(crate) fn post_err(&self, e: EqErrEntry) {
        self.q.with(|q| q.push_err(e));
        if let Some(w) = &self.waiter {
            w.signal();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: EqEvent, data: u64) -> EqEntry {
        EqEntry {
            event,
            fid_context: Context(1),
            context: Context(data as usize),
            data,
            info: None,
            conn: None,
        }
    }

    fn err(data: u64) -> EqErrEntry {
        EqErrEntry {
            fid_context: Context(2),
            context: Context(3),
            data,
            err: Error::AddrNotAvail,
            prov_errno: 0,
            err_data: Vec::new(),
        }
    }

    #[test]
    fn event_values_match_libfabric() {
        assert_eq!(EqEvent::Notify.as_raw(), 0);
        assert_eq!(EqEvent::ConnReq.as_raw(), 1);
        assert_eq!(EqEvent::Connected.as_raw(), 2);
        assert_eq!(EqEvent::Shutdown.as_raw(), 3);
        assert_eq!(EqEvent::MrComplete.as_raw(), 4);
        assert_eq!(EqEvent::AvComplete.as_raw(), 5);
        assert_eq!(EqEvent::JoinComplete.as_raw(), 6);
        for v in 0..7 {
            assert_eq!(EqEvent::from_raw(v).unwrap().as_raw(), v);
        }
        assert_eq!(EqEvent::from_raw(7), None);
    }

    #[test]
    fn empty_queue_is_again() {
        let mut q = EqQueue::new(4);
        assert!(q.is_empty());
        assert_eq!(q.read(false), Err(Error::Again));
        assert_eq!(q.read(true), Err(Error::Again));
        assert_eq!(q.read_err(false), Err(Error::Again));
        assert_eq!(q.read_err(true), Err(Error::Again));
    }

    #[test]
    fn fifo_bounded_and_peek() {
        let mut q = EqQueue::new(2);
        assert_eq!(q.capacity(), 2);
        q.push(ev(EqEvent::AvComplete, 3)).unwrap();
        let mut cm = ev(EqEvent::ConnReq, 4);
        cm.info = Some(vec![1, 2, 3]);
        q.push(cm.clone()).unwrap();
        assert_eq!(q.push(ev(EqEvent::Notify, 5)), Err(Error::Again));
        assert_eq!(q.len(), 2);
        assert_eq!(q.read(true), Ok(ev(EqEvent::AvComplete, 3)));
        assert_eq!(q.len(), 2);
        assert_eq!(q.read(false), Ok(ev(EqEvent::AvComplete, 3)));
        assert_eq!(q.read(false), Ok(cm));
        assert!(q.is_empty());
        assert_eq!(q.read(false), Err(Error::Again));
    }

    #[test]
    fn zero_capacity_is_one() {
        let mut q = EqQueue::new(0);
        assert_eq!(q.capacity(), 1);
        q.push(ev(EqEvent::Notify, 0)).unwrap();
        assert_eq!(q.push(ev(EqEvent::Notify, 1)), Err(Error::Again));
    }

    #[test]
    fn errors_first_never_dropped() {
        let mut q = EqQueue::new(1);
        q.push(ev(EqEvent::MrComplete, 1)).unwrap();
        for i in 0..50 {
            q.push_err(err(i));
        }
        assert!(q.has_err());
        assert_eq!(q.err_len(), 50);
        assert_eq!(q.read(false), Err(Error::Avail));
        assert_eq!(q.read(true), Err(Error::Avail));
        assert_eq!(q.read_err(true), Ok(err(0)));
        assert_eq!(q.err_len(), 50);
        for i in 0..50 {
            assert_eq!(q.read_err(false), Ok(err(i)));
        }
        assert!(!q.has_err());
        assert_eq!(q.read(false), Ok(ev(EqEvent::MrComplete, 1)));
    }
}
