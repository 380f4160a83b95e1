//! The engine: everything semantic between the API handles and the provider's
//! transport. Crate-private.
//!
//! Layers, bottom up (each module imports only those before it):
//! - `matching` (posted receives against arrivals), `cq` (the CQ ring and the read
//!   under way), `cntr`, `eq`, `mr` (the MR key table), `av` (the address table);
//! - `shared`: what a domain's objects share below the domain (info, MR table,
//!   doorbell);
//! - `endpoint`: an endpoint's transport, contexts and handlers for arrivals;
//! - `trigger`: operations deferred until a counter reaches a threshold;
//! - `cm`: connection management of passive and MSG endpoints;
//! - this module: [`DomainInner`], the one owner of a domain's endpoints and
//!   triggers, which runs progress over them (`progress_thread` under auto progress).

pub(crate) mod av;
pub(crate) mod cm;
pub(crate) mod cntr;
pub(crate) mod cq;
pub(crate) mod endpoint;
pub(crate) mod eq;
pub(crate) mod matching;
pub(crate) mod mr;
mod progress_thread;
pub(crate) mod shared;
pub(crate) mod trigger;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::config::{Config, LockOf, Progress};
use crate::error::Result;
use crate::info::Info;
use crate::lock::Lock;
use crate::provider::{RemoteWake, Transport};

use av::NamedAvs;
use cq::Reader;
use endpoint::{EpInner, TransportOf};
use shared::Shared;
use trigger::Deferred;

/// An object whose connection events an EQ's reads collect (it is bound to the EQ).
/// Here rather than in `eq`, which holds a list of them: `eq` stays below `endpoint`
/// and `cm`.
pub(crate) enum CmSource<S: Config> {
    /// An MSG endpoint: its connection's events.
    Ep(Weak<EpInner<S>>),
    /// A passive endpoint: its connection requests.
    Pep(Weak<cm::PepInner<S>>),
}

impl<S: Config> CmSource<S> {
    /// Collects the object's events into its EQ; `false` once the object is gone.
    pub(crate) fn poll(&self) -> bool {
        match self {
            CmSource::Ep(w) => w.upgrade().map(|ep| ep.poll_cm()).is_some(),
            CmSource::Pep(w) => w.upgrade().map(|p| p.poll_cm()).is_some(),
        }
    }
}

/// A fabric's state: what its domains share.
pub(crate) struct FabricInner<S: Config> {
    pub(crate) info: Info,
    pub(crate) named_avs: LockOf<S, NamedAvs<S>>,
}

impl<S: Config> FabricInner<S> {
    pub(crate) fn new(info: &Info) -> Self {
        FabricInner {
            info: info.clone(),
            named_avs: LockOf::<S, _>::new(Vec::new()),
        }
    }
}

/// A domain's engine: its endpoints and waiting triggered operations, and the
/// progress that drains them.
pub(crate) struct DomainInner<S: Config> {
    pub(crate) fabric: Arc<FabricInner<S>>,
    pub(crate) shared: Arc<Shared<S>>,
    eps: LockOf<S, Vec<Arc<EpInner<S>>>>,
    /// Triggered operations not yet due, in submission order.
    trig: LockOf<S, Vec<Deferred<S>>>,
    /// Whether `trig` may be non-empty: progress skips the lock when not.
    has_trig: AtomicBool,
}

/// How long an idle progress thread sleeps between passes when nothing rings.
const AUTO_IDLE: Duration = Duration::from_millis(1);

impl<S: Config> DomainInner<S> {
    /// A domain of `fabric` opened with `info`; under auto progress, its thread starts.
    pub(crate) fn open(fabric: &Arc<FabricInner<S>>, info: &Info) -> Result<Arc<Self>> {
        let inner = Arc::new(DomainInner {
            fabric: fabric.clone(),
            shared: Arc::new(Shared::new(info)?),
            eps: LockOf::<S, _>::new(Vec::new()),
            trig: LockOf::<S, _>::new(Vec::new()),
            has_trig: AtomicBool::new(false),
        });
        if <S::Progress as Progress>::AUTO {
            progress_thread::spawn(Arc::downgrade(&inner))?;
        }
        Ok(inner)
    }

    /// The info the domain was opened with.
    pub(crate) fn info(&self) -> &Info {
        &self.shared.info
    }

    /// Puts `ep` under this domain's progress.
    pub(crate) fn add_ep(&self, ep: &Arc<EpInner<S>>) {
        self.eps.with(|v| v.push(ep.clone()));
    }

    /// Takes `ep` out of this domain's progress.
    pub(crate) fn remove_ep(&self, ep: &Arc<EpInner<S>>) {
        self.eps.with(|v| v.retain(|e| !Arc::ptr_eq(e, ep)));
    }

    /// One pass of the progress engine: drains every endpoint's transport, then runs
    /// triggered operations whose counters reached their thresholds.
    #[inline]
    pub(crate) fn progress(&self) -> usize {
        self.progress_with(None)
    }

    /// [`Self::progress`] for a CQ read under way: receives completing for that CQ
    /// go straight into its entries ([`CqInner::complete_to`](cq::CqInner)).
    #[inline]
    pub(crate) fn progress_with(&self, mut rd: Option<&mut Reader<'_, S>>) -> usize {
        let n = self.eps.with(|eps| {
            let mut n = 0;
            for ep in eps.iter() {
                n += ep.progress(rd.as_deref_mut());
            }
            n
        });
        if self.has_trig.load(Ordering::Acquire) {
            self.run_triggers();
        }
        n
    }

    /// Arms the doorbell for peers in other processes before a thread sleeps on it
    /// under manual progress; the caller then checks for work once more.
    pub(crate) fn arm_doorbell(&self) {
        if let Some(t) = self.shared.doorbell.remote_signal() {
            self.arm_wake(t);
        }
    }

    /// Arms every endpoint's transport to write to the pipe `target` when a packet
    /// from another process arrives ([`RemoteWake::arm`]).
    pub(crate) fn arm_wake(&self, target: (std::os::fd::RawFd, u64)) {
        self.eps.with(|eps| {
            for ep in eps.iter() {
                <<TransportOf<S> as Transport>::RemoteWake as RemoteWake<_>>::arm(
                    &ep.transport,
                    target,
                );
            }
        });
    }

    /// Queues a triggered operation, and runs it at once if its counter is there.
    pub(crate) fn defer(&self, d: Deferred<S>) {
        self.trig.with(|t| t.push(d));
        self.has_trig.store(true, Ordering::Release);
        self.run_triggers();
    }

    /// Runs the triggered operations that are due, in threshold order per counter
    /// (fi_trigger(3): even when one increment passes several thresholds), submission
    /// order among equal thresholds.
    pub(crate) fn run_triggers(&self) {
        if !self.has_trig.load(Ordering::Acquire) {
            return;
        }
        let due = self.trig.with(|t| {
            if t.iter().all(|d| d.threshold > d.cntr.value()) {
                return Vec::new();
            }
            let (mut due, keep): (Vec<_>, Vec<_>) =
                t.drain(..).partition(|d| d.threshold <= d.cntr.value());
            *t = keep;
            if t.is_empty() {
                self.has_trig.store(false, Ordering::Release);
            }
            // Stable: submission order among equal thresholds.
            due.sort_by_key(|d| d.threshold);
            due
        });
        for d in due {
            d.run();
        }
    }

    /// Whether triggered operations wait (the progress thread keeps polling then).
    pub(crate) fn has_triggers(&self) -> bool {
        self.has_trig.load(Ordering::Acquire)
    }
}
