//! Completion queues: `fi_cq_open`'s attribute, and the CQ operations, with reads
//! monomorphized for the C entry format.

use core::ffi::{c_char, c_int, c_void};
use core::ptr;

use fabric::attr::{CqAttr, CqFormatKind, CqWaitCond, WaitObj};
use fabric::{Cq, CqDataEntry, CqEntry, CqMsgEntry, CqTaggedEntry, Error, FiAddr};

use super::{completion, waitset, CqObj, DomainObj, EINVAL};
use crate::cmem::strerror_into;
use crate::fid::{neg, timeout};
use crate::{sys, St};

/// A C completion entry format: built from the tagged entry every stack stores.
pub trait CEntry: Copy {
    /// True for the tagged entry itself, read straight into C's buffer.
    const DIRECT: bool = false;
    /// The format's entry for `e`.
    fn from_tagged(e: &CqTaggedEntry) -> Self;
}

impl CEntry for CqEntry {
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqEntry {
            op_context: e.op_context,
        }
    }
}
impl CEntry for CqMsgEntry {
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqMsgEntry {
            op_context: e.op_context,
            flags: e.flags,
            len: e.len,
        }
    }
}
impl CEntry for CqDataEntry {
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqDataEntry {
            op_context: e.op_context,
            flags: e.flags,
            len: e.len,
            buf: e.buf,
            data: e.data,
        }
    }
}
impl CEntry for CqTaggedEntry {
    const DIRECT: bool = true;
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        *e
    }
}

pub(super) unsafe extern "C" fn cq_open<S: St>(
    d: *mut sys::fid_domain,
    attr: *mut sys::fi_cq_attr,
    out: *mut *mut sys::fid_cq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: NULL or a valid attribute by fi_cq_open's contract.
    let (Some(a), false) = (unsafe { attr.as_ref() }, out.is_null()) else {
        return neg(Error::Inval);
    };
    let Some(format) = CqFormatKind::from_raw(a.format) else {
        return neg(Error::Inval);
    };
    let (Some(wait_obj), Some(wait_cond)) = (
        WaitObj::from_raw(a.wait_obj),
        CqWaitCond::from_raw(a.wait_cond),
    ) else {
        return neg(Error::Inval);
    };
    if a.flags & !(sys::FI_AFFINITY as u64) != 0 {
        return neg(Error::BadFlags);
    }
    let Ok(set) = waitset::named(wait_obj, a.wait_set) else {
        return neg(Error::Inval);
    };
    let ca = CqAttr {
        size: a.size,
        flags: 0,
        format,
        wait_obj,
        signaling_vector: a.signaling_vector,
        wait_cond,
    };
    let ops: &'static sys::fi_ops_cq = match format {
        CqFormatKind::Context => const { &cq_ops::<S, CqEntry>() },
        CqFormatKind::Msg => const { &cq_ops::<S, CqMsgEntry>() },
        CqFormatKind::Data => const { &cq_ops::<S, CqDataEntry>() },
        CqFormatKind::Tagged | CqFormatKind::Unspec => const { &cq_ops::<S, CqTaggedEntry>() },
    };
    // SAFETY: `out` is non-NULL and writable by fi_cq_open's contract.
    unsafe { completion::open::<Cq<S>>(dom, &ca, set, ops, context, out) }
}

const fn cq_ops<S: St, E: CEntry>() -> sys::fi_ops_cq {
    sys::fi_ops_cq {
        size: core::mem::size_of::<sys::fi_ops_cq>(),
        read: Some(cq_read::<S, E>),
        readfrom: Some(cq_readfrom::<S, E>),
        readerr: Some(cq_readerr::<S>),
        sread: Some(cq_sread::<S, E>),
        sreadfrom: Some(cq_sreadfrom::<S, E>),
        signal: Some(cq_signal::<S>),
        strerror: Some(cq_strerror),
    }
}

/// How many entries one read takes at most (a read may return fewer than asked).
const MAX_READ: usize = 1 << 16;
/// How many entries one read takes at most when converting formats.
const CHUNK: usize = 64;
/// The staging buffer of reads of a few entries (a poll loop's usual one), so they do
/// not clear a whole chunk each time.
const SMALL: usize = 4;

/// Reads up to `n <= K` entries into a staging buffer of `K` tagged entries and
/// converts them into C's buffer of `E`s.
///
/// # Safety
/// `buf` has room for `n` `E`s.
#[inline]
unsafe fn read_converted<E: CEntry, const K: usize>(
    buf: *mut c_void,
    n: usize,
    src: Option<&mut [FiAddr]>,
    read: impl FnOnce(&mut [CqTaggedEntry], Option<&mut [FiAddr]>) -> fabric::Result<usize>,
) -> fabric::Result<usize> {
    let mut tmp = [CqTaggedEntry::default(); K];
    let r = read(&mut tmp[..n], src);
    if let Ok(k) = r {
        let out = buf.cast::<E>();
        for (i, e) in tmp[..k].iter().enumerate() {
            // SAFETY: `k <= n` entries fit in `buf` by the caller's contract.
            unsafe { out.add(i).write_unaligned(E::from_tagged(e)) };
        }
    }
    r
}

/// Reads into C's buffer of `E`s: straight into it for the tagged format (the stored
/// one), through a stack buffer otherwise.
///
/// # Safety
/// `buf` points to `count` writable `E`s, `src` is NULL or to `count` `fi_addr_t`s.
#[inline]
unsafe fn read_into<E: CEntry>(
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
    read: impl FnOnce(&mut [CqTaggedEntry], Option<&mut [FiAddr]>) -> fabric::Result<usize>,
) -> isize {
    if buf.is_null() && count != 0 {
        return EINVAL;
    }
    let n = if E::DIRECT {
        count.min(MAX_READ)
    } else {
        count.min(CHUNK)
    };
    // SAFETY: `src` is NULL or `count` addresses by the caller's contract; FiAddr is a
    // transparent u64.
    let src = (!src.is_null())
        .then(|| unsafe { core::slice::from_raw_parts_mut(src.cast::<FiAddr>(), n) });
    let r = if E::DIRECT {
        // SAFETY: E is CqTaggedEntry here (the only DIRECT format), which is
        // #[repr(C)] like `struct fi_cq_tagged_entry`; `buf` holds `count` of them.
        let out = unsafe { core::slice::from_raw_parts_mut(buf.cast::<CqTaggedEntry>(), n) };
        read(out, src)
    } else if n <= SMALL {
        // SAFETY: the caller's contract, `n <= count`.
        unsafe { read_converted::<E, SMALL>(buf, n, src, read) }
    } else {
        // SAFETY: as above.
        unsafe { read_converted::<E, CHUNK>(buf, n, src, read) }
    };
    match r {
        Ok(k) => k as isize,
        Err(e) => neg(e) as isize,
    }
}

unsafe extern "C" fn cq_read<S: St, E: CEntry>(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
) -> isize {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(cq) }) else {
        return EINVAL;
    };
    // SAFETY: fi_cq_read's contract on `buf`.
    unsafe { read_into::<E>(buf, count, ptr::null_mut(), |o, _| c.core.read(o)) }
}

unsafe extern "C" fn cq_readfrom<S: St, E: CEntry>(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut sys::fi_addr_t,
) -> isize {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(cq) }) else {
        return EINVAL;
    };
    // SAFETY: fi_cq_readfrom's contract on `buf` and `src`.
    unsafe {
        read_into::<E>(buf, count, src, |o, s| match s {
            Some(s) => c.core.read_from(o, s),
            None => c.core.read(o),
        })
    }
}

unsafe extern "C" fn cq_sread<S: St, E: CEntry>(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    ms: c_int,
) -> isize {
    // SAFETY: as `cq_readfrom`.
    unsafe { cq_sreadfrom::<S, E>(cq, buf, count, ptr::null_mut(), cond, ms) }
}

unsafe extern "C" fn cq_sreadfrom<S: St, E: CEntry>(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut sys::fi_addr_t,
    cond: *const c_void,
    ms: c_int,
) -> isize {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(cq) }) else {
        return EINVAL;
    };
    // With FI_CQ_COND_THRESHOLD, `cond` carries the threshold as a size_t value.
    let threshold = cond as usize;
    let t = timeout(ms);
    // SAFETY: fi_cq_sreadfrom's contract on `buf` and `src`.
    unsafe {
        read_into::<E>(buf, count, src, |o, s| match s {
            Some(s) => c.core.sread_from(o, s, threshold, t),
            None => c.core.sread(o, threshold, t),
        })
    }
}

unsafe extern "C" fn cq_readerr<S: St>(
    cq: *mut sys::fid_cq,
    buf: *mut sys::fi_cq_err_entry,
    _flags: u64,
) -> isize {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(cq) }) else {
        return EINVAL;
    };
    if buf.is_null() {
        return EINVAL;
    }
    match c.core.read_err() {
        Ok(e) => {
            // SAFETY: `buf` is a writable fi_cq_err_entry by fi_cq_readerr's contract.
            let b = unsafe { &mut *buf };
            b.op_context = e.context.0 as *mut c_void;
            b.flags = e.flags.bits();
            b.len = e.len;
            b.buf = e.buf as *mut c_void;
            b.data = e.data;
            b.tag = e.tag;
            b.olen = e.olen;
            b.err = e.err.code();
            b.prov_errno = e.prov_errno;
            // No provider data beyond prov_errno: an application buffer is left
            // untouched and said to hold nothing.
            b.err_data_size = 0;
            1
        }
        Err(e) => neg(e) as isize,
    }
}

unsafe extern "C" fn cq_signal<S: St>(cq: *mut sys::fid_cq) -> c_int {
    // SAFETY: called through this type's ops table.
    match unsafe { CqObj::<S>::state(cq) } {
        Some(c) => {
            c.core.signal();
            0
        }
        None => neg(Error::Inval),
    }
}

unsafe extern "C" fn cq_strerror(
    _cq: *mut sys::fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: fi_cq_strerror's contract on `buf`.
    unsafe { strerror_into(prov_errno, buf, len) }
}

/// The core's completion entries are the C structs, field for field: checked here at
/// compile time against the bindgen layouts, so a C buffer can hold them.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<CqEntry>() == size_of::<sys::fi_cq_entry>());
    assert!(size_of::<CqMsgEntry>() == size_of::<sys::fi_cq_msg_entry>());
    assert!(size_of::<CqDataEntry>() == size_of::<sys::fi_cq_data_entry>());
    assert!(size_of::<CqTaggedEntry>() == size_of::<sys::fi_cq_tagged_entry>());
    assert!(offset_of!(CqMsgEntry, flags) == offset_of!(sys::fi_cq_msg_entry, flags));
    assert!(offset_of!(CqMsgEntry, len) == offset_of!(sys::fi_cq_msg_entry, len));
    assert!(offset_of!(CqDataEntry, buf) == offset_of!(sys::fi_cq_data_entry, buf));
    assert!(offset_of!(CqDataEntry, data) == offset_of!(sys::fi_cq_data_entry, data));
    assert!(
        offset_of!(CqTaggedEntry, op_context) == offset_of!(sys::fi_cq_tagged_entry, op_context)
    );
    assert!(offset_of!(CqTaggedEntry, flags) == offset_of!(sys::fi_cq_tagged_entry, flags));
    assert!(offset_of!(CqTaggedEntry, len) == offset_of!(sys::fi_cq_tagged_entry, len));
    assert!(offset_of!(CqTaggedEntry, buf) == offset_of!(sys::fi_cq_tagged_entry, buf));
    assert!(offset_of!(CqTaggedEntry, data) == offset_of!(sys::fi_cq_tagged_entry, data));
    assert!(offset_of!(CqTaggedEntry, tag) == offset_of!(sys::fi_cq_tagged_entry, tag));
    assert!(size_of::<FiAddr>() == size_of::<sys::fi_addr_t>());
};
