//! Memory C hands in: buffers, iovec lists and the output buffers of names and
//! error strings. Every pointer is checked for NULL and every length bounded
//! before a slice is made of it.

use core::ffi::{c_char, c_int, c_void};
use core::ptr;

use fabric::Error;

use crate::fid::neg;
use crate::sys;

/// The most iovec entries looked at; the core's limit is far lower and gives the error.
pub(crate) const MAX_IOV: usize = 1024;

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

/// An `iovec` array from C, as slices (`None`: NULL where data is required).
///
/// # Safety
/// `iov` is NULL (with `count` 0) or points to `count` iovecs whose buffers outlive the
/// operation.
pub(crate) unsafe fn iovs<'a>(iov: *const sys::iovec, count: usize) -> Option<Vec<&'a mut [u8]>> {
    if count == 0 {
        return Some(Vec::new());
    }
    // Far beyond any iov_limit: refused before a slice of that length is made.
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

/// Gather list from C iovecs (read-only view of [`iovs`]).
///
/// # Safety
/// As [`iovs`].
pub(crate) unsafe fn iovs_ref<'a>(iov: *const sys::iovec, count: usize) -> Option<Vec<&'a [u8]>> {
    // SAFETY: the caller's contract.
    unsafe { iovs(iov, count) }.map(|v| v.into_iter().map(|b| &*b).collect())
}

/// Copies `name` into C's buffer of `*len` bytes, truncating, and sets `*len` to the
/// full length: `-FI_ETOOSMALL` when it was truncated (libfabric's convention).
///
/// # Safety
/// `len` is valid; `buf` is NULL or has `*len` writable bytes.
pub(crate) unsafe fn copy_out(name: &[u8], buf: *mut c_void, len: *mut usize) -> c_int {
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
