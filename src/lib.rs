//! `fabric`: the OFI/libfabric programming model with the whole stack chosen at
//! compile time.
//!
//! Provider, threading level, progress model, CQ format and AV type are the five type
//! parameters of a [`Stack`]; every object is generic over it, so a data-transfer call
//! monomorphizes into the provider's code with no vtable and no run-time test of a
//! choice the types already made.
//!
//! ```
//! use fabric::prelude::*;
//! use fabric_loopback::Loopback;
//!
//! type Net = Stack<Loopback>; // ThreadDomain, Manual, CqTagged, Table
//! let info = getinfo::<Net>(Some(&Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm))).unwrap().remove(0);
//! let fabric = Fabric::<Net>::open(&info).unwrap();
//! let domain = fabric.domain(&info).unwrap();
//! let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
//! let av = domain.av(&AvAttr::DEFAULT).unwrap();
//! let ep = domain.endpoint(&info).unwrap();
//! ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
//! ep.bind_av(&av).unwrap();
//! ep.enable().unwrap();
//! let me = av.insert(&ep.name()).unwrap();
//!
//! let mut buf = [0u8; 5];
//! // SAFETY: `buf` outlives the receive, which completes below before it is read.
//! unsafe { ep.trecv(&mut buf, FiAddr::UNSPEC, 7, 0, Context(1)).unwrap() };
//! ep.tinject(b"hello", me, 7).unwrap();
//! let mut entries = [CqTaggedEntry::default(); 4];
//! let n = loop {
//!     match cq.read(&mut entries) {
//!         Ok(n) => break n,
//!         Err(Error::Again) => continue,
//!         Err(e) => panic!("{e}"),
//!     }
//! };
//! assert_eq!((n, entries[0].tag, &buf), (1, 7, b"hello"));
//! ```
//!
//! For per-cluster builds, [`direct!`] picks the provider from the build-time variable
//! `FABRIC_DIRECT` (default `loopback`), the other parameters from its arguments:
//!
//! ```
//! type Net = fabric::direct!(threading = Domain, progress = Manual, cq = Tagged, av = Table);
//! # use fabric::Config;
//! # assert_eq!(<<Net as Config>::Provider as fabric::Provider>::NAME, "loopback");
//! ```
//!
//! [`dynamic`] is the optional run-time counterpart: provider and parameters chosen from
//! `fi_getinfo` results, objects behind object-safe traits. The static types never depend
//! on it.
//!
//! # A tour of the layers
//!
//! - **What applications call**, named after libfabric's man pages: [`info`]
//!   (`fi_getinfo` and the attributes), [`domain`] (fabric and domain), [`endpoint`]
//!   (messages, tagged messages, RMA, atomics, triggered operations), [`cq`],
//!   [`cntr`], [`eq`], [`av`], [`mr`] and [`wait`] (wait and poll sets); [`prelude`]
//!   brings them in. [`config`] holds the five parameters of a [`Stack`].
//! - **The engine every provider shares**, below them and crate-private: matching
//!   of receives, the completion rings (formats in [`cq_format`]), the AV and MR
//!   tables, target-side handling of RMA and atomics, acknowledgements, fences,
//!   triggers and cancel, and progress. It uses the atomic kernels ([`atomic`]) and raw
//!   views of user and registered memory ([`mem`], which owns that `unsafe`). Locks
//!   come from the threading level (none at all for `ThreadDomain`).
//! - **The provider contract**, at the bottom: [`provider`] ([`Provider`], the
//!   per-endpoint [`Transport`] that moves packets, resolves addresses and may offer
//!   initiator-side direct access) and [`provider::wire`] (the packet header). A provider is a
//!   transport; everything semantic above is the engine's, so every provider inherits
//!   the conformance suite. The providers live in their own crates (`fabric-loopback`,
//!   `fabric-shm`).
//!
//! The module tree keeps these layers apart: a module imports only from layers below
//! it, and modules of one directory import each other without cycles
//! (`tests/layers.rs` checks both).
#![deny(unsafe_code)]

// The vocabulary: numbers, flags and attribute types everything else speaks.
pub mod attr;
pub mod error;
pub mod flags;
pub mod limits;
pub(crate) mod lock;
pub mod types;
#[allow(unsafe_code)]
pub mod waitobj;

// Bytes another process may write, and the copy everything goes through.
pub mod bytes;

// Atomic operations: the types of the API and the kernels both sides apply.
#[allow(unsafe_code)]
pub mod atomic;

// What a stack is made of: getinfo's data, the provider contract (with the wire
// format), and the type parameters.
pub mod av_type;
pub mod config;
pub mod cq_format;
pub mod info;
pub mod provider;

// Memory access primitives shared by the engine and the providers.
pub mod mem;

// The engine (crate-private): matching, tables, endpoint cores, progress.
mod engine;

// The API, named after libfabric's man pages.
pub mod av;
pub mod cntr;
pub mod cq;
pub mod domain;
pub mod endpoint;
pub mod eq;
pub mod mr;
pub mod wait;

// Run-time provider choice over the static stacks.
pub mod dynamic;

pub use atomic::{AtomicClass, AtomicOp, Datatype};
pub use av::AddressVector;
pub use av_type::{AvType, Map, Table};
pub use cntr::Counter;
pub use config::{
    Auto, Config, DefaultStack, Manual, Progress, SafeStack, Stack, ThreadCompletion, ThreadDomain,
    ThreadEndpoint, ThreadSafe, Threading,
};
pub use cq::{Cq, CqErrEntry};
pub use cq_format::{
    Completion, CqContext, CqData, CqDataEntry, CqEntry, CqFormat, CqMsg, CqMsgEntry, CqTagged,
    CqTaggedEntry,
};
pub use domain::{getinfo, getinfo_node, Domain, Fabric};
pub use endpoint::{
    AtomicMsg, Endpoint, EpOpt, EpOptName, Msg, MsgMut, PassiveEndpoint, RmaIov, RmaMsg, RmaMsgMut,
    RxContext, ScalableEndpoint, SharedRx, SharedTx, TaggedMsg, TaggedMsgMut, TxContext,
};
pub use eq::{EqEntry, EqErrEntry, EqEvent, EventQueue};
pub use error::{Error, Result};
pub use info::{ConnHandle, Hints, Info};
pub use mr::{MemoryRegion, MrDesc};
pub use provider::{
    Fits, InjectFits, NoPull, Payload, Provider, Pull, SharedBytes, Sink, Transport,
};
pub use types::{Context, FiAddr, MrKey};
pub use wait::{trywait, PollSet, WaitSet, Waitable};

/// Type-level numbers, for provider limits such as [`Provider::InjectSize`].
pub use typenum;

pub use fabric_macros::{direct, CqFormat};

/// Support for the code that `fabric-macros` generates. Not a public API.
#[doc(hidden)]
pub mod __private {
    /// `[T; 1] -> T`: lets `direct!` carry an `option_env!` in a type.
    pub trait One {
        /// The element type.
        type Item;
    }
    impl<T> One for [T; 1] {
        type Item = T;
    }

    /// A derived CQ format's field of declared type `D` takes a completion field of
    /// type `Self`.
    #[diagnostic::on_unimplemented(
        message = "a `CqFormat` field of type `{D}` cannot hold this completion field, which is a `{Self}`",
        label = "declare this field as `{Self}`"
    )]
    pub trait FieldIs<D> {
        /// The value, as the declared type.
        fn into_field(self) -> D;
    }
    impl<T> FieldIs<T> for T {
        #[inline(always)]
        fn into_field(self) -> T {
            self
        }
    }

    /// Converts completion field `v` (type `E`) into a field declared as `D`.
    #[inline(always)]
    pub fn field<D, E: FieldIs<D>>(v: E) -> D {
        v.into_field()
    }
}

/// Everything an application usually needs, in one import.
pub mod prelude {
    pub use crate::attr::*;
    pub use crate::flags::*;
    pub use crate::*;
    pub use const_default::ConstDefault;
}
