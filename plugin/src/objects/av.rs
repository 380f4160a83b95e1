//! Address vectors: `fi_av_open` and the AV operations.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr;

use fabric::attr::{AvAttr, AvKind};
use fabric::av_type::AvType;
use fabric::{Error, FiAddr};

use super::{addr_bytes, AvObj, AvState, DomainObj};
use crate::cmem::{bytes, name_out};
use crate::fid::{self, neg, ptr_of, ret, Holds, Object, Refs};
use crate::{sys, Exposed, St};

impl<S: St> Object for AvState<S> {
    type Hdr = sys::fid_av;
    const CLASS: u32 = sys::FI_CLASS_AV;
    fn busy(&self) -> bool {
        self.refs.busy()
    }
    fn release(&self) {
        self.holds.release()
    }
}

pub(super) unsafe extern "C" fn av_open<S: St>(
    d: *mut sys::fid_domain,
    attr: *mut sys::fi_av_attr,
    out: *mut *mut sys::fid_av,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: NULL or valid by fi_av_open's contract.
    let (Some(a), false) = (unsafe { attr.as_ref() }, out.is_null()) else {
        return neg(Error::Inval);
    };
    let Some(kind) = AvKind::from_raw(a.type_) else {
        return neg(Error::Inval);
    };
    // The domain's stack fixed the AV type; another one would need another stack. A
    // table serves a request for a map: a map's addresses are whatever values insert
    // returns, and a table's indices are such values (libfabric's own util AV does the
    // same). A map cannot serve a table, whose addresses must be 0, 1, 2...
    let fits = match kind {
        AvKind::Unspec => true,
        AvKind::Map => matches!(<S::Av as AvType>::KIND, AvKind::Map | AvKind::Table),
        k => k == <S::Av as AvType>::KIND,
    };
    if !fits {
        return neg(Error::Inval);
    }
    if !a.name.is_null() || !a.map_addr.is_null() || a.rx_ctx_bits != 0 {
        return neg(Error::NoSys);
    }
    if a.flags != 0 {
        return neg(Error::BadFlags);
    }
    let aa = AvAttr {
        av_type: <S::Av as AvType>::KIND,
        count: a.count,
        ep_per_node: a.ep_per_node,
        ..AvAttr::default()
    };
    let av = match dom.domain.av(&aa) {
        Ok(a) => a,
        Err(e) => return neg(e),
    };
    let st = AvState {
        av,
        refs: Refs::default(),
        holds: Holds::on(&dom.refs),
    };
    let hdr = sys::fid_av {
        fid: fid::head::<AvState<S>>(context),
        ops: ptr_of(const { &av_ops::<S>() }),
    };
    // SAFETY: `out` is non-NULL and writable by fi_av_open's contract.
    unsafe { AvObj::<S>::create_into(hdr, st, out) }
}

const fn av_ops<S: St>() -> sys::fi_ops_av {
    sys::fi_ops_av {
        size: core::mem::size_of::<sys::fi_ops_av>(),
        insert: Some(av_insert::<S>),
        insertsvc: Some(av_insertsvc::<S>),
        insertsym: Some(av_insertsym),
        remove: Some(av_remove::<S>),
        lookup: Some(av_lookup::<S>),
        straddr: Some(av_straddr::<S>),
        av_set: None,
    }
}

unsafe extern "C" fn av_insert<S: St>(
    av: *mut sys::fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut sys::fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return neg(Error::Inval);
    };
    if flags & !(sys::FI_MORE as u64 | sys::FI_SYNC_ERR) != 0 {
        return neg(Error::BadFlags);
    }
    let mut at = addr.cast::<u8>();
    let mut done = 0;
    for i in 0..count {
        // SAFETY: `addr` holds `count` of our addresses by fi_av_insert's contract, and
        // each is at least as long as its head.
        let Some(head) = (unsafe { bytes(at.cast(), <S::Provider as Exposed>::ADDR_HEAD) }) else {
            return neg(Error::Inval);
        };
        let Some(len) = <S::Provider as Exposed>::addr_len(head) else {
            // Without a length the next addresses cannot be found.
            return if done == 0 {
                neg(Error::Inval)
            } else {
                done as c_int
            };
        };
        // SAFETY: as above; the head says how long this address is.
        let Some(name) = (unsafe { bytes(at.cast(), len) }) else {
            return neg(Error::Inval);
        };
        let r = a.av.insert(name);
        if !fi_addr.is_null() {
            // SAFETY: `fi_addr` has `count` slots by fi_av_insert's contract.
            unsafe { *fi_addr.add(i) = r.map_or(u64::MAX, |f| f.0) };
        }
        done += usize::from(r.is_ok());
        // SAFETY: still within the caller's array, or one past its end.
        at = unsafe { at.add(len) };
    }
    done as c_int
}

unsafe extern "C" fn av_insertsvc<S: St>(
    av: *mut sys::fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut sys::fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    // shm addresses come from fi_getname; no node/service names them.
    if !<S::Provider as Exposed>::NODE_SERVICE {
        return -(sys::FI_ENOSYS as c_int);
    }
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return neg(Error::Inval);
    };
    if flags & !(sys::FI_MORE as u64 | sys::FI_SYNC_ERR) != 0 {
        return neg(Error::BadFlags);
    }
    if node.is_null() || service.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: non-NULL C strings by fi_av_insertsvc's contract.
    let (n, svc) = unsafe { (CStr::from_ptr(node), CStr::from_ptr(service)) };
    let (Ok(n), Ok(svc)) = (n.to_str(), svc.to_str()) else {
        return neg(Error::Inval);
    };
    let r = a.av.insert_svc(n, svc);
    if !fi_addr.is_null() {
        // SAFETY: one slot by fi_av_insertsvc's contract.
        unsafe { *fi_addr = r.as_ref().map_or(u64::MAX, |f| f.0) };
    }
    match r {
        Ok(_) => 1,
        Err(e) => neg(e),
    }
}

unsafe extern "C" fn av_insertsym(
    _: *mut sys::fid_av,
    _: *const c_char,
    _: usize,
    _: *const c_char,
    _: usize,
    _: *mut sys::fi_addr_t,
    _: u64,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn av_remove<S: St>(
    av: *mut sys::fid_av,
    fi_addr: *mut sys::fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return neg(Error::Inval);
    };
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    if count == 0 {
        return 0;
    }
    if fi_addr.is_null() || count > isize::MAX as usize / core::mem::size_of::<FiAddr>() {
        return neg(Error::Inval);
    }
    // SAFETY: `count` addresses by fi_av_remove's contract; FiAddr is a transparent u64.
    let v = unsafe { core::slice::from_raw_parts(fi_addr.cast::<FiAddr>(), count) };
    ret(a.av.remove(v))
}

unsafe extern "C" fn av_lookup<S: St>(
    av: *mut sys::fid_av,
    fi_addr: sys::fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `addrlen` is NULL or readable and writable, `addr` has `*addrlen` bytes.
    unsafe { name_out(addr, addrlen, || a.av.lookup(FiAddr(fi_addr))) }
}

unsafe extern "C" fn av_straddr<S: St>(
    av: *mut sys::fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return ptr::null();
    };
    // SAFETY: `addr` is one of our addresses by fi_av_straddr's contract.
    let name = unsafe { addr_bytes::<S::Provider>(addr) };
    let (Some(name), false, false) = (name, buf.is_null(), len.is_null()) else {
        return ptr::null();
    };
    let mut s = a.av.straddr(name).into_bytes();
    s.push(0);
    // SAFETY: `len` is valid and `buf` has `*len` bytes (checked non-NULL above); the
    // result is truncated and NUL-terminated like libfabric's providers do.
    unsafe {
        let room = *len;
        *len = s.len();
        if room > 0 {
            let n = s.len().min(room);
            ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, n);
            *buf.add(n - 1) = 0;
        }
    }
    buf
}
