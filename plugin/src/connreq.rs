//! Connection requests handed to C: the `fi_info::handle` of an `FI_CONNREQ`
//! event, a fid of class `FI_CLASS_CONNREQ` until an endpoint opened from that
//! info, or `fi_reject`, answers it.

use core::ptr;

use fabric::ConnHandle;

use crate::fid::{self, Obj, Object};
use crate::sys;

/// A connection request handed to C (`fi_info::handle` of an `FI_CONNREQ` event),
/// until an endpoint opened from that info or `fi_reject` answered it.
pub struct ReqState {
    handle: ConnHandle,
}

type ReqObj = Obj<ReqState>;

impl Object for ReqState {
    type Hdr = sys::fid;
    const CLASS: u32 = sys::FI_CLASS_CONNREQ;
    fn release(&self) {}
}

/// A C handle for connection request `h`.
pub(crate) fn new_request(h: ConnHandle) -> *mut sys::fid {
    let hdr = fid::head::<ReqState>(ptr::null_mut());
    ReqObj::create(hdr, ReqState { handle: h }).cast()
}

/// The connection request behind a C handle, if it is one of ours and unanswered.
pub(crate) fn request(fid: *mut sys::fid) -> Option<ConnHandle> {
    ReqObj::lookup(fid).map(|r| r.handle.clone())
}

/// Forgets the C handle of an answered request (its state holds the request alive).
pub(crate) fn release(fid: *mut sys::fid) {
    if ReqObj::lookup(fid).is_some() {
        // SAFETY: a live request object, as the lookup just checked.
        unsafe { ReqObj::close(fid) };
    }
}
