//! Run-time dispatch: the provider and the other four stack parameters chosen at run
//! time, the way a plain libfabric program works. An optional layer over the static
//! object model, which never depends on it.
//!
//! * [`Registry<L>`] is `fi_getinfo` / `fi_fabric` over a provider list named as a type
//!   (`Registry<(Shm, Tcp, Udp, Loopback)>`), honouring `FI_PROVIDER`
//!   ([`ProviderFilter`]). Hints choose threading, progress and AV type (defaults:
//!   `FI_THREAD_DOMAIN`, `FI_PROGRESS_MANUAL`, `FI_AV_TABLE`); the returned
//!   [`Info`](crate::info::Info)
//!   selects one of 8 static stacks per provider ([`Choice`]).
//! * [`ops`] holds the object-safe traits (`EndpointOps`, `CqOps`, `DomainOps`, ...),
//!   implemented for the static objects of every `S: Config` by delegating to their
//!   inherent methods, so any static object can also be used as a trait object.
//! * The `Dyn*` wrappers ([`DynFabric`], [`DynDomain`], [`DynEndpoint`], [`DynCq`], ...)
//!   hold the boxed trait objects. Objects passed to calls (a CQ to bind, a counter that
//!   triggers) are `&dyn XxxOps`: a wrapper or a static object of the same stack; one of
//!   another stack is refused with `Err(Domain)`.
//! * The CQ format is chosen per CQ at open time ([`CqAttr::format`](crate::attr::CqAttr),
//!   default tagged): every stack here stores tagged entries and a [`DynCq`] converts them
//!   on read into C-layout bytes, [`DynEntry`]s or the format's typed entries.
//!
//! Data calls cost one virtual call on top of the static path; CQ reads into tagged
//! entries too, reads into other buffers a copy per completion for the conversion. The wrappers are not `Send`/`Sync`, whatever the threading
//! level chosen: the compiler cannot check a run-time promise.
//!
//! See [`Registry`] for a complete example.

mod cast;
mod choice;
mod cq;
mod objects;
pub mod ops;
mod registry;

pub use choice::Choice;
pub use cq::{entry_size, CqBuf, DynCq, DynEntry, DEFAULT_FORMAT};
pub use objects::{
    DynAv, DynCntr, DynDomain, DynEndpoint, DynEq, DynFabric, DynMr, DynPollSet, DynRxContext,
    DynScalableEndpoint, DynSharedRx, DynSharedTx, DynTxContext, DynWaitSet,
};
pub use ops::{
    AvOps, CntrOps, CqOps, DomainOps, EndpointOps, EqOps, FabricOps, MrOps, PollSetOps,
    RxContextOps, RxOps, ScalableEndpointOps, SharedRxOps, SharedTxOps, TxContextOps, TxOps,
    WaitSetOps,
};
pub use registry::{ProviderFilter, ProviderList, Registry, FI_PROVIDER};

/// The traits whose methods the dyn objects are used through.
pub mod prelude {
    pub use super::ops::{
        AvOps, CntrOps, CqOps, DomainOps, EndpointOps, EqOps, FabricOps, MrOps, PollSetOps,
        RxContextOps, RxOps, ScalableEndpointOps, SharedRxOps, SharedTxOps, TxContextOps, TxOps,
        WaitSetOps,
    };
    pub use super::{CqBuf, DynEntry, Registry};
    pub use crate::wait::Waitable;
}

/// Every trait stays object safe: this fails to compile otherwise.
#[allow(dead_code, clippy::too_many_arguments)]
fn object_safe(
    _: &dyn FabricOps,
    _: &dyn DomainOps,
    _: &dyn EndpointOps,
    _: &dyn TxOps,
    _: &dyn RxOps,
    _: &dyn ScalableEndpointOps,
    _: &dyn TxContextOps,
    _: &dyn RxContextOps,
    _: &dyn SharedTxOps,
    _: &dyn SharedRxOps,
    _: &dyn CqOps,
    _: &dyn CntrOps,
    _: &dyn EqOps,
    _: &dyn AvOps,
    _: &dyn MrOps,
    _: &dyn WaitSetOps,
    _: &dyn PollSetOps,
) {
}
