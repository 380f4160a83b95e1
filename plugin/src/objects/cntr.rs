//! Counters: `fi_cntr_open`'s attribute, and the counter operations.

use core::ffi::{c_int, c_void};

use fabric::attr::{CntrAttr, WaitObj};
use fabric::{Counter, Error};

use super::{completion, waitset, CntrObj, DomainObj};
use crate::fid::{neg, ret, timeout};
use crate::{sys, St};

pub(super) unsafe extern "C" fn cntr_open<S: St>(
    d: *mut sys::fid_domain,
    attr: *mut sys::fi_cntr_attr,
    out: *mut *mut sys::fid_cntr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    if out.is_null() {
        return neg(Error::Inval);
    }
    let mut set = None;
    // SAFETY: NULL (defaults) or valid by fi_cntr_open's contract.
    let ca = match unsafe { attr.as_ref() } {
        None => CntrAttr::default(),
        Some(a) => {
            let Some(wait_obj) = WaitObj::from_raw(a.wait_obj) else {
                return neg(Error::Inval);
            };
            if a.events != sys::FI_CNTR_EVENTS_COMP {
                return neg(Error::Inval);
            }
            match waitset::named(wait_obj, a.wait_set) {
                Ok(w) => set = w,
                Err(()) => return neg(Error::Inval),
            }
            if a.flags != 0 {
                return neg(Error::BadFlags);
            }
            CntrAttr {
                events: a.events,
                wait_obj,
                flags: 0,
            }
        }
    };
    let ops = const { &cntr_ops::<S>() };
    // SAFETY: `out` is non-NULL and writable by fi_cntr_open's contract.
    unsafe { completion::open::<Counter<S>>(dom, &ca, set, ops, context, out) }
}

const fn cntr_ops<S: St>() -> sys::fi_ops_cntr {
    sys::fi_ops_cntr {
        size: core::mem::size_of::<sys::fi_ops_cntr>(),
        read: Some(cntr_read::<S>),
        readerr: Some(cntr_readerr::<S>),
        add: Some(cntr_add::<S>),
        set: Some(cntr_set::<S>),
        wait: Some(cntr_wait::<S>),
        adderr: Some(cntr_adderr::<S>),
        seterr: Some(cntr_seterr::<S>),
    }
}

/// `fi_cntr_read` and `fi_cntr_readerr` return a value, not an error: a closed or
/// NULL counter reads as 0.
unsafe extern "C" fn cntr_read<S: St>(c: *mut sys::fid_cntr) -> u64 {
    // SAFETY: called through this type's ops table.
    unsafe { CntrObj::<S>::state(c) }.map_or(0, |c| c.core.read())
}

unsafe extern "C" fn cntr_readerr<S: St>(c: *mut sys::fid_cntr) -> u64 {
    // SAFETY: called through this type's ops table.
    unsafe { CntrObj::<S>::state(c) }.map_or(0, |c| c.core.read_err())
}

/// Applies `f` to the counter behind `c`: 0, or `-FI_EINVAL` for a closed one.
///
/// # Safety
/// As [`Obj::state`](crate::fid::Obj::state).
unsafe fn with_cntr<S: St>(c: *mut sys::fid_cntr, f: impl FnOnce(&Counter<S>)) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { CntrObj::<S>::state(c) } {
        Some(c) => {
            f(&c.core);
            0
        }
        None => neg(Error::Inval),
    }
}

unsafe extern "C" fn cntr_add<S: St>(c: *mut sys::fid_cntr, v: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { with_cntr::<S>(c, |c| c.add(v)) }
}

unsafe extern "C" fn cntr_set<S: St>(c: *mut sys::fid_cntr, v: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { with_cntr::<S>(c, |c| c.set(v)) }
}

unsafe extern "C" fn cntr_adderr<S: St>(c: *mut sys::fid_cntr, v: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { with_cntr::<S>(c, |c| c.add_err(v)) }
}

unsafe extern "C" fn cntr_seterr<S: St>(c: *mut sys::fid_cntr, v: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { with_cntr::<S>(c, |c| c.set_err(v)) }
}

unsafe extern "C" fn cntr_wait<S: St>(c: *mut sys::fid_cntr, threshold: u64, ms: c_int) -> c_int {
    // SAFETY: called through this type's ops table.
    match unsafe { CntrObj::<S>::state(c) } {
        // The core says Again at the timeout; fi_cntr_wait's C contract says ETIMEDOUT.
        Some(c) => match c.core.wait(threshold, timeout(ms)) {
            Err(Error::Again) => neg(Error::TimedOut),
            r => ret(r),
        },
        None => neg(Error::Inval),
    }
}
