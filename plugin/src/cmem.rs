//! Memory C hands in: buffers, iovec lists and the output buffers of names and
//! error strings. Every pointer is checked for NULL and every length bounded
//! before a slice is made of it.

use core::ffi::{c_char, c_int, c_void};
use core::ops::{Deref, DerefMut};
use core::ptr;

use fabric::limits::IOV_LIMIT;
use fabric::Error;

use crate::fid::neg;
use crate::sys;

/// The most iovec entries [`iovs`] looks at; the core's `mr_iov_limit` is far lower
/// and gives the error.
const MAX_IOV: usize = 1024;

/// Bytes C passes in: NULL is allowed only for an empty buffer.
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes that outlive the use.
pub(crate) unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        Some(&[])
    } else if p.is_null() || len > isize::MAX as usize {
        None
    } else {
        // SAFETY: the caller's contract.
        Some(unsafe { core::slice::from_raw_parts(p.cast(), len) })
    }
}

/// A receive buffer from C, as [`bytes`].
///
/// # Safety
/// `p` is NULL or points to `len` writable bytes that outlive the operation.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Option<&'a mut [u8]> {
    if len == 0 {
        Some(&mut [])
    } else if p.is_null() || len > isize::MAX as usize {
        None
    } else {
        // SAFETY: the caller's contract.
        Some(unsafe { core::slice::from_raw_parts_mut(p.cast(), len) })
    }
}

/// The buffers of one vector call, on the stack: at most [`IOV_LIMIT`], the
/// `iov_limit` every provider reports, so posting allocates nothing.
pub(crate) struct IovList<T> {
    bufs: [T; IOV_LIMIT],
    len: usize,
}

impl<T> Deref for IovList<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.bufs[..self.len]
    }
}

impl<T> DerefMut for IovList<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.bufs[..self.len]
    }
}

/// C's array of `count` entries at `p`, each made a buffer by `f`. `None` when
/// `count` is above `iov_limit` (the call is then `-FI_EINVAL`, the error the core
/// gives a list that long), when `p` is NULL with entries, or when `f` refuses one.
///
/// # Safety
/// `p` is NULL (with `count` 0) or points to `count` readable entries.
pub(crate) unsafe fn c_list<E, T: Default>(
    p: *const E,
    count: usize,
    mut f: impl FnMut(&E) -> Option<T>,
) -> Option<IovList<T>> {
    let mut list = IovList {
        bufs: Default::default(),
        len: 0,
    };
    if count == 0 {
        return Some(list);
    }
    // Checked before a slice of `count` entries is made of `p`.
    if p.is_null() || count > IOV_LIMIT {
        return None;
    }
    // SAFETY: `p` is non-NULL and points to `count` entries by the caller's contract.
    let entries = unsafe { core::slice::from_raw_parts(p, count) };
    for (slot, e) in list.bufs.iter_mut().zip(entries) {
        *slot = f(e)?;
    }
    list.len = count;
    Some(list)
}

/// A scatter list from C iovecs (receives and reads), as [`c_list`].
///
/// # Safety
/// `iov` is NULL (with `count` 0) or points to `count` iovecs whose buffers are
/// writable and outlive the operation.
pub(crate) unsafe fn scatter<'a>(
    iov: *const sys::iovec,
    count: usize,
) -> Option<IovList<&'a mut [u8]>> {
    // SAFETY: the caller's contract, for the array and for each entry's buffer.
    unsafe { c_list(iov, count, |e| bytes_mut(e.iov_base, e.iov_len)) }
}

/// A gather list from C iovecs (sends and writes), as [`c_list`].
///
/// # Safety
/// `iov` is NULL (with `count` 0) or points to `count` iovecs whose buffers are
/// readable for the call.
pub(crate) unsafe fn gather<'a>(iov: *const sys::iovec, count: usize) -> Option<IovList<&'a [u8]>> {
    // SAFETY: the caller's contract, for the array and for each entry's buffer.
    unsafe { c_list(iov, count, |e| bytes(e.iov_base, e.iov_len)) }
}

/// An `iovec` array from C for `fi_mr_regv`, as an owned list: the region keeps
/// it (`Domain::mr_regv` takes a `Vec`), so this is registration's, not the data
/// path's. `None`: NULL where data is required.
///
/// # Safety
/// `iov` is NULL (with `count` 0) or points to `count` iovecs whose buffers outlive the
/// operation.
pub(crate) unsafe fn iovs<'a>(iov: *const sys::iovec, count: usize) -> Option<Vec<&'a mut [u8]>> {
    if count == 0 {
        return Some(Vec::new());
    }
    // Far beyond any mr_iov_limit: refused before a slice of that length is made.
    if iov.is_null() || count > MAX_IOV {
        return None;
    }
    // SAFETY: the caller's contract.
    let v = unsafe { core::slice::from_raw_parts(iov, count) };
    v.iter()
        // SAFETY: each entry's buffer by the caller's contract.
        .map(|e| unsafe { bytes_mut(e.iov_base, e.iov_len) })
        .collect()
}

/// An address out to C (`fi_getname`, `fi_getpeer`, `fi_av_lookup`): `-FI_EINVAL`
/// without a length to read, else the address `name` gives (or its error) copied as
/// [`copy_out`] does.
///
/// # Safety
/// `len` is NULL or valid; `buf` is NULL or has `*len` writable bytes.
pub(crate) unsafe fn name_out(
    buf: *mut c_void,
    len: *mut usize,
    name: impl FnOnce() -> fabric::Result<Vec<u8>>,
) -> c_int {
    if len.is_null() {
        return neg(Error::Inval);
    }
    match name() {
        // SAFETY: the caller's contract, `len` non-NULL.
        Ok(n) => unsafe { copy_out(&n, buf, len) },
        Err(e) => neg(e),
    }
}

/// Copies `name` into C's buffer of `*len` bytes, truncating, and sets `*len` to the
/// full length: `-FI_ETOOSMALL` when it was truncated (libfabric's convention).
///
/// # Safety
/// `len` is valid; `buf` is NULL or has `*len` writable bytes.
unsafe fn copy_out(name: &[u8], buf: *mut c_void, len: *mut usize) -> c_int {
    // SAFETY: the caller's contract.
    let room = if buf.is_null() { 0 } else { unsafe { *len } };
    let n = name.len().min(room);
    if n > 0 {
        // SAFETY: `n <= *len` bytes fit in `buf`.
        unsafe { ptr::copy_nonoverlapping(name.as_ptr(), buf.cast::<u8>(), n) };
    }
    // SAFETY: the caller's contract.
    unsafe { *len = name.len() };
    if n < name.len() {
        neg(Error::TooSmall)
    } else {
        0
    }
}

/// The text for a `prov_errno` (ours are libfabric error numbers), copied into C's
/// buffer when it gives one, else libfabric's static string.
///
/// # Safety
/// `buf` is NULL or has `len` writable bytes.
pub(crate) unsafe fn strerror_into(
    prov_errno: c_int,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: fi_strerror returns a static string for any number.
    let s = unsafe { sys::fi_strerror(prov_errno.abs()) };
    if !buf.is_null() && len > 0 {
        // SAFETY: `s` is a C string; `buf` has `len` bytes by the caller's contract.
        unsafe {
            let n = libc::strlen(s).min(len - 1);
            ptr::copy_nonoverlapping(s, buf, n);
            *buf.add(n) = 0;
        }
        return buf;
    }
    s
}
