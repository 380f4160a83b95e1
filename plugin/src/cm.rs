//! Connection management through the plugin (`fi_cm`): passive endpoints
//! (`fi_passive_ep`, `fi_pep_bind`, `fi_listen`, `fi_reject`, `fi_getname`,
//! `fi_setname`) and the connection requests `FI_CONNREQ` events hand to C as
//! `fi_info::handle`.
//!
//! Passive endpoints run on the stack of the fabric's EQs ([`EqStack`]), as MSG
//! endpoints do (their infos say so), so one EQ reports the requests of a passive
//! endpoint and the connection events of the endpoints that accept them.

use core::ffi::{c_int, c_void};

use fabric::{Context, Error, PassiveEndpoint};

use crate::cmem::{bytes, name_out};
use crate::eq::{self, EqStack};
use crate::fid::{self, neg, ptr_of, ret, Holds, Obj, Object};
use crate::{sys, Exposed};

/// A passive endpoint.
pub struct PepState<E: Exposed> {
    pep: PassiveEndpoint<EqStack<E>>,
    holds: Holds,
}

type PepObj<E> = Obj<PepState<E>>;

impl<E: Exposed> Object for PepState<E> {
    type Hdr = sys::fid_pep;
    const CLASS: u32 = sys::FI_CLASS_PEP;
    const BIND: fid::BindFn = pep_bind::<E>;
    fn release(&self) {
        self.holds.release()
    }
}

static PEP_EP_OPS: sys::fi_ops_ep = sys::fi_ops_ep {
    size: core::mem::size_of::<sys::fi_ops_ep>(),
    cancel: Some(pep_cancel),
    getopt: Some(pep_getopt),
    setopt: Some(pep_setopt),
    tx_ctx: Some(pep_ctx::<sys::fi_tx_attr>),
    rx_ctx: Some(pep_ctx::<sys::fi_rx_attr>),
    rx_size_left: Some(pep_size_left),
    tx_size_left: Some(pep_size_left),
};

const fn pep_cm_ops<E: Exposed>() -> sys::fi_ops_cm {
    sys::fi_ops_cm {
        size: core::mem::size_of::<sys::fi_ops_cm>(),
        setname: Some(pep_setname::<E>),
        getname: Some(pep_getname::<E>),
        getpeer: Some(pep_getpeer),
        connect: Some(pep_connect),
        listen: Some(pep_listen::<E>),
        accept: Some(pep_accept),
        reject: Some(pep_reject::<E>),
        shutdown: Some(pep_shutdown),
        join: Some(pep_join),
    }
}

/// `fi_passive_ep` on a fabric of provider `E`.
pub(crate) unsafe extern "C" fn pep_open<E: Exposed>(
    f: *mut sys::fid_fabric,
    info: *mut sys::fi_info,
    out: *mut *mut sys::fid_pep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through the fabric's ops table, with fi_passive_ep's arguments.
    let (fab, info) = match unsafe { crate::open_on_fabric::<E, _>(f, info, out) } {
        Ok(a) => a,
        Err(e) => return e,
    };
    let pep = match fab.eqs.passive_ep(&info) {
        Ok(p) => p,
        Err(e) => return neg(e),
    };
    let st = PepState {
        pep,
        holds: Holds::on(&fab.refs),
    };
    let hdr = sys::fid_pep {
        fid: fid::head::<PepState<E>>(context),
        ops: ptr_of(&PEP_EP_OPS),
        cm: ptr_of(const { &pep_cm_ops::<E>() }),
    };
    // Its FI_CONNREQ events name it by its fid, as C compares them.
    let tell = |s: &PepState<E>, fid| s.pep.set_fid_context(Context(fid as usize));
    // SAFETY: `out` is non-NULL and writable by fi_passive_ep's contract.
    unsafe { PepObj::<E>::create_told(hdr, st, out, tell) }
}

unsafe extern "C" fn pep_bind<E: Exposed>(f: *mut sys::fid, b: *mut sys::fid, flags: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(p) = (unsafe { PepObj::<E>::state(f) }) else {
        return neg(Error::Inval);
    };
    if b.is_null() {
        return neg(Error::Inval);
    }
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    match eq::lookup::<EqStack<E>>(b) {
        Some(q) => ret(p.pep.bind_eq(q)),
        None => neg(Error::Inval),
    }
}

unsafe extern "C" fn pep_getname<E: Exposed>(
    f: *mut sys::fid,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(p) = (unsafe { PepObj::<E>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `addrlen` is NULL or valid, `addr` NULL or `*addrlen` bytes (fi_getname).
    unsafe { name_out(addr, addrlen, || Ok(p.pep.name())) }
}

unsafe extern "C" fn pep_setname<E: Exposed>(
    f: *mut sys::fid,
    addr: *mut c_void,
    addrlen: usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(p) = (unsafe { PepObj::<E>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `addr` holds `addrlen` bytes by fi_setname's contract.
    match unsafe { bytes(addr, addrlen) } {
        Some(name) if !name.is_empty() => ret(p.pep.set_name(name)),
        _ => neg(Error::Inval),
    }
}

unsafe extern "C" fn pep_listen<E: Exposed>(f: *mut sys::fid_pep) -> c_int {
    // SAFETY: called through this type's ops table.
    match unsafe { PepObj::<E>::state(f) } {
        Some(p) => ret(p.pep.listen()),
        None => neg(Error::Inval),
    }
}

unsafe extern "C" fn pep_reject<E: Exposed>(
    f: *mut sys::fid_pep,
    handle: sys::fid_t,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(p) = (unsafe { PepObj::<E>::state(f) }) else {
        return neg(Error::Inval);
    };
    let Some(h) = crate::connreq::request(handle) else {
        return neg(Error::Inval);
    };
    // SAFETY: `param` holds `paramlen` bytes by fi_reject's contract.
    let Some(data) = (unsafe { bytes(param, paramlen) }) else {
        return neg(Error::Inval);
    };
    let r = p.pep.reject(&h, data);
    if r.is_ok() {
        crate::connreq::release(handle);
    }
    ret(r)
}

// What a passive endpoint does not do: it only listens.
unsafe extern "C" fn pep_getpeer(_: *mut sys::fid_ep, _: *mut c_void, _: *mut usize) -> c_int {
    neg(Error::Inval)
}
unsafe extern "C" fn pep_connect(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: *const c_void,
    _: usize,
) -> c_int {
    neg(Error::Inval)
}
unsafe extern "C" fn pep_accept(_: *mut sys::fid_ep, _: *const c_void, _: usize) -> c_int {
    neg(Error::Inval)
}
unsafe extern "C" fn pep_shutdown(_: *mut sys::fid_ep, _: u64) -> c_int {
    neg(Error::Inval)
}
unsafe extern "C" fn pep_join(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: u64,
    _: *mut *mut sys::fid_mc,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn pep_cancel(_: sys::fid_t, _: *mut c_void) -> isize {
    neg(Error::Inval) as isize
}
unsafe extern "C" fn pep_getopt(
    _: sys::fid_t,
    _: c_int,
    _: c_int,
    _: *mut c_void,
    _: *mut usize,
) -> c_int {
    -(sys::FI_ENOPROTOOPT as c_int)
}
unsafe extern "C" fn pep_setopt(
    _: sys::fid_t,
    _: c_int,
    _: c_int,
    _: *const c_void,
    _: usize,
) -> c_int {
    -(sys::FI_ENOPROTOOPT as c_int)
}
unsafe extern "C" fn pep_ctx<A>(
    _: *mut sys::fid_ep,
    _: c_int,
    _: *mut A,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn pep_size_left(_: *mut sys::fid_ep) -> isize {
    neg(Error::Inval) as isize
}
