//! The state behind every counter (`man 3 fi_cntr`): success and error counts and
//! the wake-ups a change rings.

use core::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::Config;
use crate::lock::LockFamily;
use crate::waitobj::Waiter;

pub(crate) struct CntrInner<S: Config> {
    /// The domain's doorbell, rung on every change so that threads blocked on the
    /// domain (counter waits, the progress thread) look again.
    doorbell: Arc<Waiter>,
    pub(crate) value: AtomicU64,
    pub(crate) err: AtomicU64,
    pub(crate) waiter: Option<Arc<Waiter>>,
    _stack: PhantomData<fn() -> S>,
}

/// Adds `n` to counter word `w`. Objects that only one thread can use (`S::Locks` not
/// [`SHARED`](LockFamily::SHARED): `FI_THREAD_DOMAIN` with manual progress) have one
/// writer, so a load and a store do; otherwise an atomic add (a locked instruction).
#[inline(always)]
pub(crate) fn add_to<S: Config>(w: &AtomicU64, n: u64) {
    if <S::Locks as LockFamily>::SHARED {
        w.fetch_add(n, Ordering::AcqRel);
    } else {
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }
}

impl<S: Config> CntrInner<S> {
    /// A counter at 0 that rings `doorbell` (its domain's) and `waiter` on changes.
    pub(crate) fn new(doorbell: Arc<Waiter>, waiter: Option<Arc<Waiter>>) -> Self {
        CntrInner {
            doorbell,
            value: AtomicU64::new(0),
            err: AtomicU64::new(0),
            waiter,
            _stack: PhantomData,
        }
    }

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
    pub(crate) fn changed(&self) {
        if let Some(w) = &self.waiter {
            w.signal();
        }
        self.doorbell.signal();
    }

    pub(crate) fn value(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }
}
