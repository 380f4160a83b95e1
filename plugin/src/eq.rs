//! Event queues opened on the fabric (`fi_eq_open`), before any domain chose a stack.
//!
//! They run on one fixed stack (thread-safe, like an EQ that may be shared by domains of
//! any threading level): `fi_eq_read`, `readerr`, `sread`, `write` (with `FI_WRITE`)
//! and `strerror` work. Binding one to an endpoint or AV, whose stack may differ, is not
//! offered yet (`-FI_ENOSYS`); RDM endpoints report nothing there.

use core::ffi::{c_char, c_int, c_void};
use core::ptr;
use std::time::Duration;

use fabric::attr::{EqAttr, WaitObj};
use fabric::av_type::Table;
use fabric::config::{Manual, Stack, ThreadSafe};
use fabric::cq_format::CqTagged;
use fabric::{Context, EqEntry, EqEvent, Error, EventQueue, Fabric};

use crate::fid::{neg, Obj};
use crate::objects::{no_bind, no_control, no_ops_open, Holds, Refs};
use crate::{sys, Exposed};

/// The stack fabric-level EQs run on.
pub type EqStack<E> = Stack<E, ThreadSafe, Manual, CqTagged, Table>;

/// An event queue.
pub struct EqState<E: Exposed> {
    eq: EventQueue<EqStack<E>>,
    holds: Holds,
}

type EqObj<E> = Obj<sys::fid_eq, EqState<E>>;

const fn eq_fi_ops<E: Exposed>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(eq_close::<E>),
        bind: Some(no_bind),
        control: Some(no_control),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
    }
}

const fn eq_ops<E: Exposed>() -> sys::fi_ops_eq {
    sys::fi_ops_eq {
        size: core::mem::size_of::<sys::fi_ops_eq>(),
        read: Some(eq_read::<E>),
        readerr: Some(eq_readerr::<E>),
        write: Some(eq_write::<E>),
        sread: Some(eq_sread::<E>),
        strerror: Some(eq_strerror),
    }
}

/// Opens an EQ for `fi_eq_open` on `fabric`.
///
/// # Safety
/// `attr` is NULL or valid; `out` is NULL or writable; `parent` is the fabric's count
/// of dependents, open until this EQ closes.
pub unsafe fn open<E: Exposed>(
    fabric: &Fabric<EqStack<E>>,
    parent: &Refs,
    attr: *mut sys::fi_eq_attr,
    out: *mut *mut sys::fid_eq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    let (Some(a), false) = (unsafe { attr.as_ref() }, out.is_null()) else {
        return neg(Error::Inval);
    };
    let Some(wait_obj) = WaitObj::from_raw(a.wait_obj) else {
        return neg(Error::Inval);
    };
    if wait_obj == WaitObj::Set || !a.wait_set.is_null() {
        return neg(Error::NoSys);
    }
    if a.flags & !sys::FI_WRITE as u64 != 0 {
        return neg(Error::BadFlags);
    }
    let ea = EqAttr {
        size: a.size,
        flags: a.flags,
        wait_obj,
        signaling_vector: a.signaling_vector,
    };
    let eq = match fabric.eq(&ea) {
        Ok(e) => e,
        Err(e) => return neg(e),
    };
    let hdr = sys::fid_eq {
        fid: sys::fid {
            fclass: sys::FI_CLASS_EQ as usize,
            context,
            ops: const { &eq_fi_ops::<E>() } as *const _ as *mut _,
        },
        ops: const { &eq_ops::<E>() } as *const _ as *mut _,
    };
    let st = EqState {
        eq,
        holds: Holds::default(),
    };
    st.holds.add(parent);
    // SAFETY: `out` is non-NULL and writable by the caller's contract.
    unsafe { *out = EqObj::<E>::create(hdr, st, sys::FI_CLASS_EQ).cast() };
    0
}

unsafe extern "C" fn eq_close<E: Exposed>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through the EQ's ops table.
    unsafe { EqObj::<E>::close(f, |_| false, |s| s.holds.release()) }
}

const ENTRY: usize = core::mem::size_of::<sys::fi_eq_entry>();

/// Checks C's buffer before an event is taken off the queue, so a short one loses
/// nothing.
fn room(buf: *mut c_void, len: usize) -> Result<(), isize> {
    if buf.is_null() {
        Err(neg(Error::Inval) as isize)
    } else if len < ENTRY {
        Err(neg(Error::TooSmall) as isize)
    } else {
        Ok(())
    }
}

/// Writes `e` as a `struct fi_eq_entry` (and its event) into C's buffer.
///
/// # Safety
/// `event` is NULL or writable; `buf` has `len >= ENTRY` writable bytes.
unsafe fn put(e: &EqEntry, event: *mut u32, buf: *mut c_void) -> isize {
    let out = sys::fi_eq_entry {
        fid: e.fid_context.0 as *mut sys::fid,
        context: e.context.0 as *mut c_void,
        data: e.data,
    };
    // SAFETY: the caller's contract; C buffers need not be aligned.
    unsafe {
        buf.cast::<sys::fi_eq_entry>().write_unaligned(out);
        if !event.is_null() {
            *event = e.event.as_raw();
        }
    }
    ENTRY as isize
}

fn read_flags(flags: u64) -> Result<bool, isize> {
    if flags & !(sys::FI_PEEK as u64) != 0 {
        Err(neg(Error::BadFlags) as isize)
    } else {
        Ok(flags != 0)
    }
}

unsafe extern "C" fn eq_read<E: Exposed>(
    eq: *mut sys::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    // SAFETY: called through the EQ's ops table.
    let Some(q) = (unsafe { EqObj::<E>::state(eq) }) else {
        return neg(Error::Inval) as isize;
    };
    let peek = match read_flags(flags).and_then(|p| room(buf, len).map(|()| p)) {
        Ok(p) => p,
        Err(e) => return e,
    };
    match q.eq.read(peek) {
        // SAFETY: fi_eq_read's contract on `event` and `buf` (of `len` bytes, enough).
        Ok(e) => unsafe { put(&e, event, buf) },
        Err(e) => neg(e) as isize,
    }
}

unsafe extern "C" fn eq_sread<E: Exposed>(
    eq: *mut sys::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    // SAFETY: called through the EQ's ops table.
    let Some(q) = (unsafe { EqObj::<E>::state(eq) }) else {
        return neg(Error::Inval) as isize;
    };
    let peek = match read_flags(flags).and_then(|p| room(buf, len).map(|()| p)) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let t = (timeout >= 0).then(|| Duration::from_millis(timeout as u64));
    match q.eq.sread(peek, t) {
        // SAFETY: fi_eq_sread's contract on `event` and `buf` (of `len` bytes, enough).
        Ok(e) => unsafe { put(&e, event, buf) },
        Err(e) => neg(e) as isize,
    }
}

unsafe extern "C" fn eq_readerr<E: Exposed>(
    eq: *mut sys::fid_eq,
    buf: *mut sys::fi_eq_err_entry,
    flags: u64,
) -> isize {
    // SAFETY: called through the EQ's ops table.
    let Some(q) = (unsafe { EqObj::<E>::state(eq) }) else {
        return neg(Error::Inval) as isize;
    };
    let peek = match read_flags(flags) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if buf.is_null() {
        return neg(Error::Inval) as isize;
    }
    match q.eq.read_err(peek) {
        Ok(e) => {
            // SAFETY: `buf` is a writable fi_eq_err_entry by fi_eq_readerr's contract.
            let b = unsafe { &mut *buf };
            b.fid = e.fid_context.0 as *mut sys::fid;
            b.context = e.context.0 as *mut c_void;
            b.data = e.data;
            b.err = e.err.code();
            b.prov_errno = e.prov_errno;
            b.err_data = ptr::null_mut();
            b.err_data_size = 0;
            core::mem::size_of::<sys::fi_eq_err_entry>() as isize
        }
        Err(e) => neg(e) as isize,
    }
}

unsafe extern "C" fn eq_write<E: Exposed>(
    eq: *mut sys::fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    flags: u64,
) -> isize {
    // SAFETY: called through the EQ's ops table.
    let Some(q) = (unsafe { EqObj::<E>::state(eq) }) else {
        return neg(Error::Inval) as isize;
    };
    if flags != 0 {
        return neg(Error::BadFlags) as isize;
    }
    let Some(ev) = EqEvent::from_raw(event) else {
        return neg(Error::Inval) as isize;
    };
    if buf.is_null() || len < ENTRY {
        return neg(Error::Inval) as isize;
    }
    // SAFETY: `buf` holds `len >= ENTRY` readable bytes by fi_eq_write's contract.
    let (entry, extra) = unsafe {
        (
            buf.cast::<sys::fi_eq_entry>().read_unaligned(),
            core::slice::from_raw_parts(buf.cast::<u8>().add(ENTRY), len - ENTRY),
        )
    };
    let e = EqEntry {
        event: ev,
        fid_context: Context(entry.fid as usize),
        context: Context(entry.context as usize),
        data: entry.data,
        info: (!extra.is_empty()).then(|| extra.to_vec()),
        conn: None,
    };
    match q.eq.write(e) {
        Ok(()) => len as isize,
        Err(e) => neg(e) as isize,
    }
}

unsafe extern "C" fn eq_strerror(
    _eq: *mut sys::fid_eq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: the same contract as fi_cq_strerror.
    unsafe { crate::objects::strerror_into(prov_errno, buf, len) }
}
