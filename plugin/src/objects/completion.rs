//! What CQs and counters share as C objects, written once over [`Completion`]:
//! opening one (alone or in a wait set) once its attribute is read, closing it,
//! `FI_GETWAIT`, and binding it to an endpoint.

use core::ffi::{c_int, c_void};

use fabric::flags::BindFlags;
use fabric::Error;

use super::waitset::WaitState;
use super::{completion_of, CompState, Completion, DomainState, EpState};
use crate::fid::{self, neg, ret, ControlFn, Holds, Obj, Object, Refs};
use crate::sys;

impl<Q: Completion> Object for CompState<Q> {
    type Hdr = Q::Hdr;
    const CLASS: u32 = Q::CLASS;
    const CONTROL: ControlFn = control::<Q>;
    fn busy(&self) -> bool {
        self.refs.busy()
    }
    fn release(&self) {
        self.holds.release()
    }
}

/// `fi_cq_open` and `fi_cntr_open` once the attribute is read: opens the object on
/// domain `dom`, in wait set `set` if one was named, with C operations `ops`; both
/// domain and set stay open while it is.
///
/// # Safety
/// `out` is non-NULL and writable.
pub(super) unsafe fn open<Q: Completion>(
    dom: &DomainState<Q::Stack>,
    attr: &Q::Attr,
    set: Option<&WaitState>,
    ops: &'static Q::Ops,
    context: *mut c_void,
    out: *mut *mut Q::Hdr,
) -> c_int {
    let r = match set {
        Some(w) => w.join::<Q>(&dom.domain, attr).map(|(c, s)| (c, Some(s))),
        None => Q::open(&dom.domain, attr).map(|c| (c, None)),
    };
    let (core, in_set) = match r {
        Ok(c) => c,
        Err(e) => return neg(e),
    };
    let st = CompState {
        core,
        refs: Refs::default(),
        holds: Holds::on(&dom.refs),
        _set: in_set,
    };
    if let Some(w) = set {
        st.holds.add(&w.refs);
    }
    let hdr = Q::header(fid::head::<CompState<Q>>(context), ops);
    // SAFETY: the caller's contract.
    unsafe { Obj::<CompState<Q>>::create_into(hdr, st, out) }
}

/// `fi_control` of a CQ or counter: `FI_GETWAIT` of an `FI_WAIT_FD` one.
unsafe extern "C" fn control<Q: Completion>(
    f: *mut sys::fid,
    cmd: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { Obj::<CompState<Q>>::state(f) }) else {
        return neg(Error::Inval);
    };
    match (cmd as u32, c.core.wait_fd()) {
        (sys::FI_GETWAIT, Some(fd)) if !arg.is_null() => {
            // SAFETY: FI_GETWAIT on an FI_WAIT_FD object takes an `int *`.
            unsafe { *arg.cast::<c_int>() = fd };
            0
        }
        (sys::FI_GETWAIT, _) => neg(Error::Inval),
        _ => neg(Error::NoSys),
    }
}

/// `fi_ep_bind` of the CQ or counter `b` to endpoint `e`, which then holds it open.
pub(super) fn bind<Q: Completion>(e: &EpState<Q::Stack>, b: *mut sys::fid, flags: u64) -> c_int {
    let Some(c) = completion_of::<Q>(b) else {
        return neg(Error::Inval);
    };
    let Some(bf) = BindFlags::from_bits(flags) else {
        return neg(Error::BadFlags);
    };
    let r = c.core.bind(&e.ep, bf);
    if r.is_ok() {
        e.holds.add(&c.refs);
    }
    ret(r)
}
