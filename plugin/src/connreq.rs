//! Connection requests handed to C: the `fi_info::handle` of an `FI_CONNREQ`
//! event, a fid of class `FI_CLASS_CONNREQ` until an endpoint opened from that
//! info, or `fi_reject`, answers it.

use core::ffi::c_int;
use core::ptr;

use fabric::ConnHandle;

use crate::fid::{no_bind, no_control, no_ops_open, Obj};
use crate::sys;

/// A connection request handed to C (`fi_info::handle` of an `FI_CONNREQ` event),
/// until an endpoint opened from that info or `fi_reject` answered it.
pub struct ReqState {
    handle: ConnHandle,
}

type ReqObj = Obj<sys::fid, ReqState>;

static REQ_FI_OPS: sys::fi_ops = sys::fi_ops {
    size: core::mem::size_of::<sys::fi_ops>(),
    close: Some(req_close),
    bind: Some(no_bind),
    control: Some(no_control),
    ops_open: Some(no_ops_open),
    tostr: None,
    ops_set: None,
};

unsafe extern "C" fn req_close(f: *mut sys::fid) -> c_int {
    // SAFETY: called through the request's ops table.
    unsafe { ReqObj::close(f, |_| false, |_| ()) }
}

/// A C handle for connection request `h`.
pub(crate) fn new_request(h: ConnHandle) -> *mut sys::fid {
    let hdr = sys::fid {
        fclass: sys::FI_CLASS_CONNREQ as usize,
        context: ptr::null_mut(),
        ops: &REQ_FI_OPS as *const _ as *mut _,
    };
    ReqObj::create(hdr, ReqState { handle: h }, sys::FI_CLASS_CONNREQ).cast()
}

/// The connection request behind a C handle, if it is one of ours and unanswered.
pub(crate) fn request(fid: *mut sys::fid) -> Option<ConnHandle> {
    ReqObj::lookup(fid, sys::FI_CLASS_CONNREQ).map(|r| r.handle.clone())
}

/// Forgets the C handle of an answered request (its state holds the request alive).
pub(crate) fn release(fid: *mut sys::fid) {
    if ReqObj::lookup(fid, sys::FI_CLASS_CONNREQ).is_some() {
        // SAFETY: a live request object, as the lookup just checked.
        unsafe { req_close(fid) };
    }
}
