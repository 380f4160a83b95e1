//! Event queues opened on the fabric (`fi_eq_open`), before any domain chose a stack.
//!
//! They run on one fixed stack (thread-safe, like an EQ that may be shared by domains of
//! any threading level): `fi_eq_read`, `readerr`, `sread`, `write` (with `FI_WRITE`)
//! and `strerror` work. Endpoints on that stack (MSG and passive endpoints always) take
//! one for their connection events; binding one to an endpoint or AV of another stack
//! is not offered yet (`-FI_ENOSYS`). An EQ opened with `FI_WAIT_SET` joins that wait
//! set, which then wakes for its events.

use core::any::Any;
use core::ffi::{c_char, c_int, c_void};
use core::ptr;

use fabric::attr::{EqAttr, WaitObj};
use fabric::av_type::Table;
use fabric::config::{Manual, Stack, ThreadSafe};
use fabric::cq_format::CqTagged;
use fabric::{Context, EqEntry, EqEvent, Error, EventQueue};

use crate::fid::{self, neg, ptr_of, timeout, Holds, Obj, Object, Refs};
use crate::St;
use crate::{sys, Exposed};

/// The stack fabric-level EQs run on.
pub type EqStack<E> = Stack<E, ThreadSafe, Manual, CqTagged, Table>;

/// An event queue.
pub struct EqState<E: Exposed> {
    eq: EventQueue<EqStack<E>>,
    holds: Holds,
    /// The `err_data` of the last error entry read, which C may read until the next
    /// `fi_eq_readerr` when it gave no buffer of its own.
    err_data: std::sync::Mutex<Vec<u8>>,
    /// Its place in a wait set (`FI_WAIT_SET`), left when it closes.
    _set: Option<Box<dyn Any>>,
}

/// The EQ behind a C handle, if it is one of ours, live, and runs on stack `S`
/// (EQs run on the fabric's [`EqStack`]; endpoints on another stack cannot take one).
pub(crate) fn lookup<'a, S: St>(fid: *mut sys::fid) -> Option<&'a EventQueue<S>> {
    let st = EqObj::<S::Provider>::lookup(fid)?;
    (&st.eq as &dyn core::any::Any).downcast_ref::<EventQueue<S>>()
}

type EqObj<E> = Obj<EqState<E>>;

impl<E: Exposed> Object for EqState<E> {
    type Hdr = sys::fid_eq;
    const CLASS: u32 = sys::FI_CLASS_EQ;
    fn release(&self) {
        self.holds.release()
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

/// The core EQ behind a new C one, from the opener [`open`] is given.
pub(crate) struct Core<'a, E: Exposed> {
    /// The EQ.
    pub eq: EventQueue<EqStack<E>>,
    /// For one opened in a wait set (`FI_WAIT_SET`): its place there, dropped when the
    /// EQ closes, and the set's count of dependents, which the EQ holds.
    pub set: Option<(Box<dyn Any>, &'a Refs)>,
}

/// Opens an EQ for `fi_eq_open`: checks the attribute, has `core` open the core EQ
/// (given the attribute and the `wait_set` it names, which the caller resolves: wait
/// sets are other objects' business), and makes the C object.
///
/// # Safety
/// `attr` is NULL or valid; `out` is NULL or writable; `parent` is the fabric's count
/// of dependents, open until this EQ closes.
pub unsafe fn open<'a, E: Exposed>(
    parent: &Refs,
    attr: *mut sys::fi_eq_attr,
    out: *mut *mut sys::fid_eq,
    context: *mut c_void,
    core: impl FnOnce(&EqAttr, *mut sys::fid_wait) -> fabric::Result<Core<'a, E>>,
) -> c_int {
    // SAFETY: the caller's contract.
    let (Some(a), false) = (unsafe { attr.as_ref() }, out.is_null()) else {
        return neg(Error::Inval);
    };
    let Some(wait_obj) = WaitObj::from_raw(a.wait_obj) else {
        return neg(Error::Inval);
    };
    if a.flags & !sys::FI_WRITE as u64 != 0 {
        return neg(Error::BadFlags);
    }
    let ea = EqAttr {
        size: a.size,
        flags: a.flags,
        wait_obj,
        signaling_vector: a.signaling_vector,
    };
    let Core { eq, set } = match core(&ea, a.wait_set) {
        Ok(c) => c,
        Err(e) => return neg(e),
    };
    let hdr = sys::fid_eq {
        fid: fid::head::<EqState<E>>(context),
        ops: ptr_of(const { &eq_ops::<E>() }),
    };
    let (place, set_refs) = set.unzip();
    let st = EqState {
        eq,
        holds: Holds::on(parent),
        err_data: std::sync::Mutex::default(),
        _set: place,
    };
    if let Some(refs) = set_refs {
        st.holds.add(refs);
    }
    // SAFETY: `out` is non-NULL and writable by the caller's contract.
    unsafe { EqObj::<E>::create_into(hdr, st, out) }
}

const ENTRY: usize = core::mem::size_of::<sys::fi_eq_entry>();

/// Checks C's buffer before an event is taken off the queue, so a short one loses
/// nothing.
/// Bytes of a `struct fi_eq_cm_entry` before its connection data.
const CM_ENTRY: usize = core::mem::size_of::<sys::fi_eq_cm_entry>();

fn room(buf: *mut c_void, len: usize) -> Result<(), isize> {
    if buf.is_null() {
        Err(neg(Error::Inval) as isize)
    } else if len < CM_ENTRY {
        Err(neg(Error::TooSmall) as isize)
    } else {
        Ok(())
    }
}

/// Whether `e` is written as a `struct fi_eq_cm_entry`.
fn is_cm(e: &EqEntry) -> bool {
    matches!(
        e.event,
        EqEvent::ConnReq | EqEvent::Connected | EqEvent::Shutdown
    )
}

/// Whether `e` fits in `len` bytes (connection data is cut to what fits).
fn fits(e: &EqEntry, len: usize) -> bool {
    len >= if is_cm(e) { CM_ENTRY } else { ENTRY }
}

/// Writes `e` as a `struct fi_eq_entry`, or a `struct fi_eq_cm_entry` with its
/// connection data, into C's buffer (and its event); returns the bytes written. An
/// `FI_CONNREQ` carries a new `fi_info` (C frees it with `fi_freeinfo`) whose `handle`
/// names the request.
///
/// # Safety
/// `event` is NULL or writable; `buf` has `len` writable bytes, enough for `e`
/// ([`fits`]).
unsafe fn put<E: Exposed>(e: &EqEntry, event: *mut u32, buf: *mut c_void, len: usize) -> isize {
    let n = if is_cm(e) {
        let info = match &e.conn {
            Some(i) => {
                let c = crate::convert::info_to_c(i, E::C_NAME);
                if c.is_null() {
                    return neg(Error::NoMem) as isize;
                }
                if let Some(h) = i.handle.clone() {
                    // SAFETY: `c` was just allocated and is ours.
                    unsafe { (*c).handle = crate::connreq::new_request(h) };
                }
                c
            }
            None => ptr::null_mut(),
        };
        let data = e.info.as_deref().unwrap_or(&[]);
        let take = data.len().min(len - CM_ENTRY);
        // SAFETY: the caller's contract: `len` bytes, at least CM_ENTRY; C buffers need
        // not be aligned.
        unsafe {
            let head = buf.cast::<*mut c_void>();
            head.write_unaligned(e.fid_context.0 as *mut c_void);
            head.add(1).write_unaligned(info.cast());
            ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>().add(CM_ENTRY), take);
        }
        CM_ENTRY + take
    } else {
        let out = sys::fi_eq_entry {
            fid: e.fid_context.0 as *mut sys::fid,
            context: e.context.0 as *mut c_void,
            data: e.data,
        };
        // SAFETY: the caller's contract; C buffers need not be aligned.
        unsafe { buf.cast::<sys::fi_eq_entry>().write_unaligned(out) };
        ENTRY
    };
    if !event.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *event = e.event.as_raw() };
    }
    n as isize
}

/// Reads (or peeks) the next entry with `read` when it fits in `len` bytes; one that
/// does not stays queued and gives `-FI_ETOOSMALL`.
fn take(
    len: usize,
    peek: bool,
    mut read: impl FnMut(bool) -> fabric::Result<EqEntry>,
) -> Result<EqEntry, isize> {
    if len < ENTRY {
        // Only a connection event fits: look before taking.
        let e = read(true).map_err(|e| neg(e) as isize)?;
        if !fits(&e, len) {
            return Err(neg(Error::TooSmall) as isize);
        }
        if peek {
            return Ok(e);
        }
    }
    read(peek).map_err(|e| neg(e) as isize)
}

fn read_flags(flags: u64) -> Result<bool, isize> {
    if flags & !(sys::FI_PEEK as u64) != 0 {
        Err(neg(Error::BadFlags) as isize)
    } else {
        Ok(flags != 0)
    }
}

/// `fi_eq_read` and `fi_eq_sread`, which differ in how `read` takes (or peeks at) the
/// next entry of the queue.
///
/// # Safety
/// `eq` is NULL or an EQ of provider `E` (its ops table's call); `event` and `buf` as
/// `fi_eq_read` has them.
unsafe fn read_with<E: Exposed>(
    eq: *mut sys::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
    read: impl Fn(&EventQueue<EqStack<E>>, bool) -> fabric::Result<EqEntry>,
) -> isize {
    // SAFETY: the caller's contract.
    let Some(q) = (unsafe { EqObj::<E>::state(eq) }) else {
        return neg(Error::Inval) as isize;
    };
    let peek = match read_flags(flags).and_then(|p| room(buf, len).map(|()| p)) {
        Ok(p) => p,
        Err(e) => return e,
    };
    match take(len, peek, |p| read(&q.eq, p)) {
        // SAFETY: the caller's contract on `event` and `buf` (of `len` bytes, enough).
        Ok(e) => unsafe { put::<E>(&e, event, buf, len) },
        Err(e) => e,
    }
}

unsafe extern "C" fn eq_read<E: Exposed>(
    eq: *mut sys::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    // SAFETY: called through the EQ's ops table, with fi_eq_read's arguments.
    unsafe { read_with::<E>(eq, event, buf, len, flags, |q, p| q.read(p)) }
}

unsafe extern "C" fn eq_sread<E: Exposed>(
    eq: *mut sys::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    ms: c_int,
    flags: u64,
) -> isize {
    let t = timeout(ms);
    // SAFETY: called through the EQ's ops table, with fi_eq_sread's arguments.
    unsafe { read_with::<E>(eq, event, buf, len, flags, |q, p| q.sread(p, t)) }
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
            // Into C's buffer when it gave one (API 1.5 and later), else ours, valid
            // until the next readerr.
            if !b.err_data.is_null() && b.err_data_size > 0 {
                let n = e.err_data.len().min(b.err_data_size);
                // SAFETY: C's buffer of `err_data_size` bytes by fi_eq_readerr's
                // contract.
                unsafe { ptr::copy_nonoverlapping(e.err_data.as_ptr(), b.err_data.cast(), n) };
                b.err_data_size = n;
            } else {
                let mut keep = q.err_data.lock().unwrap_or_else(|p| p.into_inner());
                *keep = e.err_data;
                b.err_data = if keep.is_empty() {
                    ptr::null_mut()
                } else {
                    keep.as_mut_ptr().cast()
                };
                b.err_data_size = keep.len();
            }
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
    unsafe { crate::cmem::strerror_into(prov_errno, buf, len) }
}
