//! Endpoints: `fi_endpoint`, which puts together the ops tables of every family of
//! operations, binding, `FI_ENABLE`, options, and connection management.

use core::ffi::{c_int, c_void};
use core::ptr;

use fabric::{Context, Counter, Cq, EpOpt, EpOptName, Error};

use super::{
    addr_bytes, atomic, completion, msg, rma, tagged, AvObj, DomainObj, EpObj, EpState, EINVAL,
};
use crate::cmem::{bytes, name_out};
use crate::fid::{self, neg, ptr_of, ret, sret, BindFn, ControlFn, Holds, Object};
use crate::{sys, St};

impl<S: St> Object for EpState<S> {
    type Hdr = sys::fid_ep;
    const CLASS: u32 = sys::FI_CLASS_EP;
    const BIND: BindFn = ep_bind::<S>;
    const CONTROL: ControlFn = ep_control::<S>;
    fn release(&self) {
        self.holds.release()
    }
}

pub(super) unsafe extern "C" fn ep_open<S: St>(
    d: *mut sys::fid_domain,
    info: *mut sys::fi_info,
    out: *mut *mut sys::fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    if out.is_null() {
        return neg(Error::Inval);
    }
    let (info, request) = if info.is_null() {
        (dom.info.clone(), ptr::null_mut())
    } else {
        // SAFETY: a valid fi_info by fi_endpoint's contract.
        match unsafe { crate::info_from_app::<S::Provider>(info) } {
            // SAFETY: as above.
            Ok(i) => (i, unsafe { (*info).handle }),
            Err(e) => return neg(e),
        }
    };
    let ep = match dom.domain.endpoint(&info) {
        Ok(e) => e,
        Err(e) => return neg(e),
    };
    // The endpoint holds the request it will accept; C's handle is no longer needed.
    if !request.is_null() {
        crate::connreq::release(request);
    }
    let st = EpState {
        ep,
        holds: Holds::on(&dom.refs),
    };
    let hdr = sys::fid_ep {
        fid: fid::head::<EpState<S>>(context),
        ops: ptr_of(const { &ep_ops::<S>() }),
        cm: ptr_of(const { &cm_ops::<S>() }),
        msg: ptr_of(const { &msg::msg_ops::<S>() }),
        rma: ptr_of(const { &rma::rma_ops::<S>() }),
        tagged: ptr_of(const { &tagged::tagged_ops::<S>() }),
        atomic: ptr_of(const { &atomic::atomic_ops::<S>() }),
        collective: ptr_of(&crate::nosys::COLL),
    };
    // Connection events name the endpoint by its fid, as C compares them; RDM and
    // DGRAM endpoints have none (and say so).
    let tell = |s: &EpState<S>, fid| {
        let _ = s.ep.set_fid_context(Context(fid as usize));
    };
    // SAFETY: `out` is non-NULL and writable by fi_endpoint's contract.
    unsafe { EpObj::<S>::create_told(hdr, st, out, tell) }
}

unsafe extern "C" fn ep_bind<S: St>(f: *mut sys::fid, b: *mut sys::fid, flags: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    if b.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: non-NULL; every fid starts with its class (the lookup below then checks
    // it is really one of ours before anything else is read).
    let class = unsafe { (*b).fclass } as u32;
    match class {
        sys::FI_CLASS_CQ => completion::bind::<Cq<S>>(e, b, flags),
        sys::FI_CLASS_AV => {
            let Some(av) = AvObj::<S>::lookup(b) else {
                return neg(Error::Inval);
            };
            if flags != 0 {
                return neg(Error::BadFlags);
            }
            let r = e.ep.bind_av(&av.av);
            if r.is_ok() {
                e.holds.add(&av.refs);
            }
            ret(r)
        }
        sys::FI_CLASS_CNTR => completion::bind::<Counter<S>>(e, b, flags),
        // An EQ runs on the fabric's EQ stack: endpoints on it (MSG ones always) take
        // one; others are on another stack and cannot yet.
        sys::FI_CLASS_EQ => {
            if flags != 0 {
                return neg(Error::BadFlags);
            }
            match crate::eq::lookup::<S>(b) {
                Some(q) => ret(e.ep.bind_eq(q)),
                None if crate::eq::lookup::<crate::eq::EqStack<S::Provider>>(b).is_some() => {
                    neg(Error::NoSys)
                }
                None => neg(Error::Inval),
            }
        }
        // Shared contexts are not offered through the plugin yet.
        sys::FI_CLASS_STX_CTX | sys::FI_CLASS_SRX_CTX => neg(Error::NoSys),
        _ => neg(Error::Inval),
    }
}

unsafe extern "C" fn ep_control<S: St>(f: *mut sys::fid, cmd: c_int, _arg: *mut c_void) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    match cmd as u32 {
        sys::FI_ENABLE => ret(e.ep.enable()),
        _ => neg(Error::NoSys),
    }
}

const fn ep_ops<S: St>() -> sys::fi_ops_ep {
    sys::fi_ops_ep {
        size: core::mem::size_of::<sys::fi_ops_ep>(),
        cancel: Some(ep_cancel::<S>),
        getopt: Some(ep_getopt::<S>),
        setopt: Some(ep_setopt::<S>),
        tx_ctx: Some(ep_tx_ctx),
        rx_ctx: Some(ep_rx_ctx),
        rx_size_left: Some(ep_rx_size_left::<S>),
        tx_size_left: Some(ep_tx_size_left::<S>),
    }
}

unsafe extern "C" fn ep_cancel<S: St>(f: *mut sys::fid, context: *mut c_void) -> isize {
    // SAFETY: called through the endpoint's ops table.
    match unsafe { EpObj::<S>::state(f) } {
        Some(e) => sret(e.ep.cancel(Context(context as usize))),
        None => EINVAL,
    }
}

/// The option `level`/`name` names, as the core calls it.
fn opt_name(level: c_int, name: c_int) -> Option<EpOptName> {
    if level as u32 != sys::FI_OPT_ENDPOINT {
        return None;
    }
    match name as u32 {
        sys::FI_OPT_MIN_MULTI_RECV => Some(EpOptName::MinMultiRecv),
        sys::FI_OPT_CM_DATA_SIZE => Some(EpOptName::CmDataSize),
        _ => None,
    }
}

unsafe extern "C" fn ep_getopt<S: St>(
    f: *mut sys::fid,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    let Some(opt) = opt_name(level, name) else {
        return neg(Error::NoProtoOpt);
    };
    if val.is_null() || len.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: `len` is valid by fi_getopt's contract.
    if unsafe { *len } < core::mem::size_of::<usize>() {
        return neg(Error::TooSmall);
    }
    let v = match e.ep.getopt(opt) {
        Ok(EpOpt::MinMultiRecv(v) | EpOpt::CmDataSize(v)) => v,
        Err(err) => return neg(err),
    };
    // SAFETY: both options are `size_t`s, and `val` has room for one (checked above).
    unsafe {
        val.cast::<usize>().write_unaligned(v);
        *len = core::mem::size_of::<usize>();
    }
    0
}

unsafe extern "C" fn ep_setopt<S: St>(
    f: *mut sys::fid,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    let Some(opt) = opt_name(level, name) else {
        return neg(Error::NoProtoOpt);
    };
    if val.is_null() || len != core::mem::size_of::<usize>() {
        return neg(Error::Inval);
    }
    // SAFETY: a `size_t` by fi_setopt's contract (length checked above).
    let v = unsafe { val.cast::<usize>().read_unaligned() };
    ret(e.ep.setopt(match opt {
        EpOptName::MinMultiRecv => EpOpt::MinMultiRecv(v),
        EpOptName::CmDataSize => EpOpt::CmDataSize(v),
    }))
}

unsafe extern "C" fn ep_tx_ctx(
    _: *mut sys::fid_ep,
    _: c_int,
    _: *mut sys::fi_tx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn ep_rx_ctx(
    _: *mut sys::fid_ep,
    _: c_int,
    _: *mut sys::fi_rx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn ep_rx_size_left<S: St>(ep: *mut sys::fid_ep) -> isize {
    // SAFETY: called through this type's ops table.
    match unsafe { EpObj::<S>::state(ep) } {
        Some(e) => e.ep.rx_size_left() as isize,
        None => EINVAL,
    }
}

unsafe extern "C" fn ep_tx_size_left<S: St>(ep: *mut sys::fid_ep) -> isize {
    // SAFETY: called through this type's ops table.
    match unsafe { EpObj::<S>::state(ep) } {
        Some(e) => e.ep.tx_size_left() as isize,
        None => EINVAL,
    }
}

const fn cm_ops<S: St>() -> sys::fi_ops_cm {
    sys::fi_ops_cm {
        size: core::mem::size_of::<sys::fi_ops_cm>(),
        setname: Some(cm_setname),
        getname: Some(cm_getname::<S>),
        getpeer: Some(cm_getpeer::<S>),
        connect: Some(cm_connect::<S>),
        listen: Some(cm_listen),
        accept: Some(cm_accept::<S>),
        reject: Some(cm_reject),
        shutdown: Some(cm_shutdown::<S>),
        join: Some(cm_join),
    }
}

unsafe extern "C" fn cm_getname<S: St>(
    f: *mut sys::fid,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `addrlen` is NULL or valid, `addr` NULL or `*addrlen` bytes (fi_getname).
    unsafe { name_out(addr, addrlen, || Ok(e.ep.name())) }
}

unsafe extern "C" fn cm_setname(_: *mut sys::fid, _: *mut c_void, _: usize) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn cm_getpeer<S: St>(
    f: *mut sys::fid_ep,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `addrlen` is NULL or valid, `addr` NULL or `*addrlen` bytes (fi_getpeer).
    unsafe { name_out(addr, addrlen, || e.ep.peer()) }
}
unsafe extern "C" fn cm_connect<S: St>(
    f: *mut sys::fid_ep,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `addr` is one of our addresses by fi_connect's contract.
    let name = unsafe { addr_bytes::<S::Provider>(addr) };
    // SAFETY: `param` holds `paramlen` bytes by fi_connect's contract.
    let (Some(name), Some(data)) = (name, unsafe { bytes(param, paramlen) }) else {
        return neg(Error::Inval);
    };
    ret(e.ep.connect(name, data))
}
unsafe extern "C" fn cm_listen(_: *mut sys::fid_pep) -> c_int {
    // An active endpoint does not listen; passive ones have their own table.
    neg(Error::Inval)
}
unsafe extern "C" fn cm_accept<S: St>(
    f: *mut sys::fid_ep,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `param` holds `paramlen` bytes by fi_accept's contract.
    match unsafe { bytes(param, paramlen) } {
        Some(data) => ret(e.ep.accept(data)),
        None => neg(Error::Inval),
    }
}
unsafe extern "C" fn cm_reject(
    _: *mut sys::fid_pep,
    _: sys::fid_t,
    _: *const c_void,
    _: usize,
) -> c_int {
    neg(Error::Inval)
}
unsafe extern "C" fn cm_shutdown<S: St>(f: *mut sys::fid_ep, flags: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    ret(e.ep.shutdown())
}
unsafe extern "C" fn cm_join(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: u64,
    _: *mut *mut sys::fid_mc,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
