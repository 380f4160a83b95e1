//! Memory regions: the domain's MR operations (`fi_mr_reg`, `fi_mr_regv`,
//! `fi_mr_regattr`).

use core::ffi::{c_int, c_void};
use core::ptr;

use fabric::attr::MrAttr;
use fabric::flags::MrAccess;
use fabric::Error;

use super::{DomainObj, MrObj, MrState};
use crate::cmem::iovs;
use crate::fid::{self, neg, Holds, Object};
use crate::{sys, St};

impl<S: St> Object for MrState<S> {
    type Hdr = sys::fid_mr;
    const CLASS: u32 = sys::FI_CLASS_MR;
    fn release(&self) {
        self.holds.release()
    }
}

pub(super) const fn mr_ops<S: St>() -> sys::fi_ops_mr {
    sys::fi_ops_mr {
        size: core::mem::size_of::<sys::fi_ops_mr>(),
        reg: Some(mr_reg::<S>),
        regv: Some(mr_regv::<S>),
        regattr: Some(mr_regattr::<S>),
    }
}

unsafe extern "C" fn mr_reg<S: St>(
    d: *mut sys::fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> c_int {
    let iov = sys::iovec {
        iov_base: buf as *mut c_void,
        iov_len: len,
    };
    // SAFETY: the same contract, one iovec on our stack.
    unsafe {
        mr_regv::<S>(
            d,
            &iov,
            1,
            access,
            offset,
            requested_key,
            flags,
            mr,
            context,
        )
    }
}

unsafe extern "C" fn mr_regattr<S: St>(
    d: *mut sys::fid,
    attr: *const sys::fi_mr_attr,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
) -> c_int {
    // SAFETY: NULL or valid by fi_mr_regattr's contract.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return neg(Error::Inval);
    };
    if a.iface != sys::FI_HMEM_SYSTEM || a.auth_key_size != 0 {
        return neg(Error::NoSys);
    }
    // SAFETY: the attribute's fields carry fi_mr_regv's contract.
    unsafe {
        mr_regv::<S>(
            d,
            a.mr_iov,
            a.iov_count,
            a.access,
            a.offset,
            a.requested_key,
            flags,
            mr,
            a.context,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_regv<S: St>(
    d: *mut sys::fid,
    iov: *const sys::iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's (the domain's) MR ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    if mr.is_null() {
        return neg(Error::Inval);
    }
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    let Some(access) = MrAccess::from_bits(access) else {
        return neg(Error::Inval);
    };
    // SAFETY: C keeps the registered memory valid until it closes the MR (fi_mr_reg's
    // contract), which is what the 'static lifetime stands for here.
    let Some(bufs) = (unsafe { iovs(iov, count) }) else {
        return neg(Error::Inval);
    };
    let attr = MrAttr {
        access,
        offset,
        requested_key,
        context: context as usize,
    };
    let region = match dom.domain.mr_regv(bufs, &attr) {
        Ok(r) => r,
        Err(e) => return neg(e),
    };
    let key = region.key();
    let st = MrState {
        _mr: region,
        holds: Holds::on(&dom.refs),
    };
    let hdr = sys::fid_mr {
        fid: fid::head::<MrState<S>>(context),
        mem_desc: ptr::null_mut(),
        key,
    };
    let p = MrObj::<S>::create(hdr, st);
    // Descriptors are not needed (no FI_MR_LOCAL); a non-NULL one names the region.
    // SAFETY: `p` was just created and is ours; `mr` is writable (checked non-NULL).
    unsafe {
        (*p).hdr.mem_desc = p.cast();
        *mr = p.cast();
    }
    0
}
