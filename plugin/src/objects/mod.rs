//! The objects of one stack `S`: domain, endpoint, CQ, counter, AV and MR, with ops
//! tables whose entries are `extern "C"` functions monomorphized for `S` (and, for CQ
//! reads, for the C entry format). A call from C is one indirect call into the static
//! stack's path.
//!
//! This module holds the objects' states, which its submodules share; each submodule
//! holds the C operations of one kind of object, or of one family of endpoint
//! operations. CQs and counters are one generic state over [`Completion`], so what
//! they share ([`completion`]) is written once.

mod atomic;
mod av;
mod cntr;
mod completion;
mod cq;
mod domain;
mod ep;
mod mr;
mod msg;
pub(crate) mod pollset;
mod rma;
mod tagged;
pub(crate) mod waitset;

use core::ffi::c_void;
use std::os::fd::RawFd;

use fabric::attr::{CntrAttr, CqAttr};
use fabric::flags::BindFlags;
use fabric::info::Info;
use fabric::{
    AddressVector, Context, Counter, Cq, Domain, Endpoint, Fabric, MemoryRegion, PollSet, WaitSet,
    Waitable,
};

use crate::cmem::bytes;
use crate::fid::{ptr_of, Holds, Obj, Refs};
use crate::sys;
use crate::{Exposed, St};
use waitset::InSet;

pub(crate) use domain::open_domain;

/// A domain of stack `S`, with the fabric the core opens alongside it.
pub struct DomainState<S: St> {
    domain: Domain<S>,
    _fabric: Fabric<S>,
    info: Info,
    refs: Refs,
    holds: Holds,
}

/// An endpoint.
pub struct EpState<S: St> {
    ep: Endpoint<S>,
    holds: Holds,
}

/// A CQ or a counter, by the core's object `Q`.
pub struct CompState<Q: Completion> {
    /// The core's CQ or counter.
    pub(crate) core: Q,
    pub(crate) refs: Refs,
    pub(crate) holds: Holds,
    /// Its place in a wait set (`FI_WAIT_SET`), left when it closes.
    _set: Option<InSet<Q>>,
}

/// A completion queue.
pub type CqState<S> = CompState<Cq<S>>;
/// A counter.
pub type CntrState<S> = CompState<Counter<S>>;

/// An address vector.
pub struct AvState<S: St> {
    av: AddressVector<S>,
    refs: Refs,
    holds: Holds,
}

/// A memory region: C owns the memory and promises it outlives the registration.
pub struct MrState<S: St> {
    _mr: MemoryRegion<'static, S>,
    holds: Holds,
}

type DomainObj<S> = Obj<DomainState<S>>;
type EpObj<S> = Obj<EpState<S>>;
type CqObj<S> = Obj<CqState<S>>;
type CntrObj<S> = Obj<CntrState<S>>;
type AvObj<S> = Obj<AvState<S>>;
type MrObj<S> = Obj<MrState<S>>;

/// A CQ or a counter of the core: where an endpoint reports completions, and what wait
/// sets and poll sets gather. This is all the two differ in as C objects.
pub trait Completion: Waitable + Clone + 'static {
    /// Its stack.
    type Stack: St;
    /// Its attribute, in the core's terms.
    type Attr;
    /// Its C header (`fid_cq`, `fid_cntr`).
    type Hdr: 'static;
    /// The C table of its own operations.
    type Ops: 'static;
    /// Its `FI_CLASS_*`.
    const CLASS: u32;
    /// The C header of one, from its `struct fid` and its operations.
    fn header(fid: sys::fid, ops: &'static Self::Ops) -> Self::Hdr;
    /// Opens one on `domain`.
    fn open(domain: &Domain<Self::Stack>, attr: &Self::Attr) -> fabric::Result<Self>;
    /// Opens one on `domain` that signals wait set `set` (`FI_WAIT_SET`).
    fn open_in(
        domain: &Domain<Self::Stack>,
        attr: &Self::Attr,
        set: &WaitSet<Self::Stack>,
    ) -> fabric::Result<Self>;
    /// Takes it out of wait set `set`.
    fn detach(&self, set: &WaitSet<Self::Stack>);
    /// Adds it to poll set `set`, which reports it as `name`.
    fn poll_add(&self, set: &PollSet<Self::Stack>, name: Context);
    /// Binds it to endpoint `ep`.
    fn bind(&self, ep: &Endpoint<Self::Stack>, flags: BindFlags) -> fabric::Result<()>;
    /// Its file descriptor, for `FI_GETWAIT` (`FI_WAIT_FD` ones).
    fn wait_fd(&self) -> Option<RawFd>;
}

impl<S: St> Completion for Cq<S> {
    type Stack = S;
    type Attr = CqAttr;
    type Hdr = sys::fid_cq;
    type Ops = sys::fi_ops_cq;
    const CLASS: u32 = sys::FI_CLASS_CQ;
    fn header(fid: sys::fid, ops: &'static sys::fi_ops_cq) -> sys::fid_cq {
        sys::fid_cq {
            fid,
            ops: ptr_of(ops),
        }
    }
    fn open(domain: &Domain<S>, attr: &CqAttr) -> fabric::Result<Self> {
        domain.cq(attr)
    }
    fn open_in(domain: &Domain<S>, attr: &CqAttr, set: &WaitSet<S>) -> fabric::Result<Self> {
        domain.cq_in_set(attr, set)
    }
    fn detach(&self, set: &WaitSet<S>) {
        set.detach_cq(self)
    }
    fn poll_add(&self, set: &PollSet<S>, name: Context) {
        set.add_cq(self, name)
    }
    fn bind(&self, ep: &Endpoint<S>, flags: BindFlags) -> fabric::Result<()> {
        ep.bind_cq(self, flags)
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Cq::wait_fd(self)
    }
}

impl<S: St> Completion for Counter<S> {
    type Stack = S;
    type Attr = CntrAttr;
    type Hdr = sys::fid_cntr;
    type Ops = sys::fi_ops_cntr;
    const CLASS: u32 = sys::FI_CLASS_CNTR;
    fn header(fid: sys::fid, ops: &'static sys::fi_ops_cntr) -> sys::fid_cntr {
        sys::fid_cntr {
            fid,
            ops: ptr_of(ops),
        }
    }
    fn open(domain: &Domain<S>, attr: &CntrAttr) -> fabric::Result<Self> {
        domain.cntr(attr)
    }
    fn open_in(domain: &Domain<S>, attr: &CntrAttr, set: &WaitSet<S>) -> fabric::Result<Self> {
        domain.cntr_in_set(attr, set)
    }
    fn detach(&self, set: &WaitSet<S>) {
        set.detach_cntr(self)
    }
    fn poll_add(&self, set: &PollSet<S>, name: Context) {
        set.add_cntr(self, name)
    }
    fn bind(&self, ep: &Endpoint<S>, flags: BindFlags) -> fabric::Result<()> {
        ep.bind_cntr(self, flags)
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Counter::wait_fd(self)
    }
}

/// The core domain behind domain handle `d` of stack `S`, and its count of dependents.
///
/// # Safety
/// As [`Obj::state`]: `d` is NULL or a domain of stack `S` (its ops table's call).
pub(crate) unsafe fn domain_of<'a, S: St>(
    d: *mut sys::fid_domain,
) -> Option<(&'a Domain<S>, &'a Refs)> {
    // SAFETY: the caller's contract.
    unsafe { DomainObj::<S>::state(d) }.map(|s| (&s.domain, &s.refs))
}

/// The CQ or counter `Q` behind `fid`, if it is one and open.
pub(crate) fn completion_of<'a, Q: Completion>(fid: *mut sys::fid) -> Option<&'a CompState<Q>> {
    Obj::<CompState<Q>>::lookup(fid)
}

/// The whole address of provider `P` at `addr`, whose head says how long it is.
///
/// # Safety
/// `addr` is NULL or one of `P`'s addresses.
unsafe fn addr_bytes<'a, P: Exposed>(addr: *const c_void) -> Option<&'a [u8]> {
    // SAFETY: the caller's contract: an address is at least as long as its head.
    let head = unsafe { bytes(addr, P::ADDR_HEAD) }?;
    let len = P::addr_len(head)?;
    // SAFETY: as above; the head says how long the address is.
    unsafe { bytes(addr, len) }
}

/// The `-FI_EINVAL` of the data calls returning `ssize_t`.
const EINVAL: isize = -(sys::FI_EINVAL as isize);

/// The endpoint of stack `S` behind `$ep`, or `-FI_EINVAL` from the calling fn.
macro_rules! ep_or_inval {
    ($ep:expr) => {
        // SAFETY: called through this type's ops table.
        match unsafe { $crate::objects::EpObj::<S>::state($ep) } {
            Some(e) => e,
            None => return $crate::objects::EINVAL,
        }
    };
}
use ep_or_inval;

/// A C buffer argument, or `-FI_EINVAL` from the calling fn.
macro_rules! buf_or_inval {
    ($e:expr) => {
        match $e {
            Some(b) => b,
            None => return $crate::objects::EINVAL,
        }
    };
}
use buf_or_inval;
