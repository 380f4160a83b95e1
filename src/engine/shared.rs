//! What a domain's objects share below the domain itself: the info it was opened
//! with, the MR table every remote access passes, and the doorbell that wakes threads
//! blocked on the domain.
//!
//! Endpoints, CQs and memory regions hold this rather than the domain, so that the
//! domain (which owns the endpoints and runs progress over them) sits above them.

use std::sync::Arc;

use crate::attr::WaitObj;
use crate::config::{Config, LockOf};
use crate::error::Result;
use crate::info::Info;
use crate::lock::Lock;
use crate::waitobj::Waiter;

use super::mr::{MrTable, MrUser};

pub(crate) struct Shared<S: Config> {
    pub(crate) info: Info,
    pub(crate) mr: LockOf<S, MrTable<MrUser<S>>>,
    /// Rung by transports on arrival and by counters; blocking waits sleep on it.
    pub(crate) doorbell: Arc<Waiter>,
}

impl<S: Config> Shared<S> {
    pub(crate) fn new(info: &Info) -> Result<Self> {
        Ok(Shared {
            info: info.clone(),
            mr: LockOf::<S, _>::new(MrTable::new(info.domain_attr.mr_mode)),
            // A pipe, so peers in other processes can ring it too (`arm_wake`).
            doorbell: Arc::new(Waiter::new(WaitObj::Fd)?),
        })
    }
}
