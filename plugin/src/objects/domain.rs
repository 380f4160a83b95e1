//! Domains: opening one on a stack, its ops table (which opens every other object of
//! the stack), and `fi_query_atomic`.

use core::ffi::{c_int, c_void};

use fabric::info::Info;
use fabric::{AtomicClass, Error, Fabric};

use super::{atomic, av, cntr, cq, ep, mr, pollset, DomainObj, DomainState};
use crate::fid::{self, neg, ptr_of, Holds, Object, Refs};
use crate::{sys, St};

impl<S: St> Object for DomainState<S> {
    type Hdr = sys::fid_domain;
    const CLASS: u32 = sys::FI_CLASS_DOMAIN;
    fn busy(&self) -> bool {
        self.refs.busy()
    }
    fn release(&self) {
        self.holds.release()
    }
}

/// Opens the core fabric and domain of stack `S` for `info` and returns the C domain.
///
/// # Safety
/// `parent` is the live fabric's reference count, open until this domain closes.
pub unsafe fn open_domain<S: St>(
    info: Info,
    parent: &Refs,
    context: *mut c_void,
) -> fabric::Result<*mut sys::fid_domain> {
    let fabric = Fabric::<S>::open(&info)?;
    let domain = fabric.domain(&info)?;
    let st = DomainState {
        domain,
        _fabric: fabric,
        info,
        refs: Refs::default(),
        holds: Holds::on(parent),
    };
    let hdr = sys::fid_domain {
        fid: fid::head::<DomainState<S>>(context),
        ops: ptr_of(const { &domain_ops::<S>() }),
        mr: ptr_of(const { &mr::mr_ops::<S>() }),
    };
    Ok(DomainObj::<S>::create(hdr, st).cast())
}

const fn domain_ops<S: St>() -> sys::fi_ops_domain {
    sys::fi_ops_domain {
        size: core::mem::size_of::<sys::fi_ops_domain>(),
        av_open: Some(av::av_open::<S>),
        cq_open: Some(cq::cq_open::<S>),
        endpoint: Some(ep::ep_open::<S>),
        scalable_ep: Some(no_scalable_ep),
        cntr_open: Some(cntr::cntr_open::<S>),
        poll_open: Some(pollset::poll_open::<S>),
        stx_ctx: Some(no_stx_ctx),
        srx_ctx: Some(no_srx_ctx),
        query_atomic: Some(query_atomic::<S>),
        query_collective: None,
        endpoint2: None,
    }
}

unsafe extern "C" fn no_scalable_ep(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_info,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn no_stx_ctx(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_tx_attr,
    _: *mut *mut sys::fid_stx,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn no_srx_ctx(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_rx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn query_atomic<S: St>(
    d: *mut sys::fid_domain,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    attr: *mut sys::fi_atomic_attr,
    flags: u64,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    let class = match flags {
        0 => AtomicClass::Base,
        sys::FI_FETCH_ATOMIC => AtomicClass::Fetch,
        sys::FI_COMPARE_ATOMIC => AtomicClass::Compare,
        _ => return neg(Error::BadFlags),
    };
    let (Some((dt, op)), false) = (atomic::dt_op(dt, op), attr.is_null()) else {
        return neg(Error::Inval);
    };
    match dom.domain.query_atomic(class, op, dt) {
        Ok(count) => {
            // SAFETY: `attr` is non-NULL and writable by fi_query_atomic's contract.
            unsafe {
                (*attr).count = count;
                (*attr).size = dt.size();
            }
            0
        }
        Err(e) => neg(e),
    }
}
