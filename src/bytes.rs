//! Bytes another process may write while we read them ([`SharedBytes`]), and the
//! small-copy primitive every copy of the library goes through ([`copy_bytes`]).
//!
//! The lowest layer of memory access: the provider contract hands received payloads
//! over as [`SharedBytes`], and `mem` and the providers copy with [`copy_bytes`].
// `unsafe` here only: the view reads bytes through raw pointers, never through a
// Rust reference, whose immutability a writing peer would break.
#![allow(unsafe_code)]

use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use crate::error::{Error, Result};

/// `len` bytes that stay readable for `'a` but that another process (or another
/// thread) may change at any time: a packet in a shared-memory ring, a peer's
/// published segment. Unlike `&'a [u8]`, holding one asserts nothing about the
/// bytes staying unchanged, so a peer writing them while we hold it breaks no rule
/// of the language: they are only ever copied out ([`copy_to`](Self::copy_to),
/// [`read`](Self::read), ...), and what was copied is then checked like any other
/// input from a peer.
///
/// There is deliberately no way back to a slice. Safe code builds one from a slice
/// (`From<&[u8]>`, ordinary memory a borrow keeps unchanged); a provider builds one
/// over shared memory with [`SharedBytes::new`], whose contract it upholds.
#[derive(Clone, Copy)]
pub struct SharedBytes<'a> {
    // Non-null, like a slice's: `Payload` keeps its niche and stays two words.
    ptr: NonNull<u8>,
    len: usize,
    _life: PhantomData<&'a [u8]>,
}

impl<'a> SharedBytes<'a> {
    /// A view of the `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr` must be non-null and `ptr..ptr + len` readable memory, and stay so
    /// for `'a` (a mapping that is not unmapped, shrunk or made inaccessible while
    /// `'a` lasts), with `len <= isize::MAX`. Its bytes may change at any time:
    /// nothing else is required of them.
    #[inline(always)]
    pub unsafe fn new(ptr: *const u8, len: usize) -> SharedBytes<'a> {
        SharedBytes {
            // SAFETY: non-null, by the caller's contract.
            ptr: unsafe { NonNull::new_unchecked(ptr.cast_mut()) },
            len,
            _life: PhantomData,
        }
    }

    /// Bytes in view.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first byte: `len()` bytes there are readable for `'a` (they
    /// may change at any time, so they must be read through raw pointers only).
    #[inline(always)]
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The bytes `off..off + len` of the view, if it has them.
    #[inline(always)]
    pub fn get(&self, off: usize, len: usize) -> Option<SharedBytes<'a>> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => return None,
        }
        // SAFETY: a sub-range (checked above) of a range readable for `'a`.
        Some(unsafe { SharedBytes::new(self.as_ptr().add(off), len) })
    }

    /// Copies bytes `off..off + dst.len()` into `dst`; `Err(Io)` when the view does
    /// not have them (nothing copied). Never panics.
    #[inline(always)]
    pub fn copy_to(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        match off.checked_add(dst.len()) {
            Some(end) if end <= self.len => {}
            _ => return Err(Error::Io),
        }
        // SAFETY: the source is in the view (checked above), readable for `'a`;
        // `dst` is memory of ours that no one else can reach while we hold it
        // mutably, so the ranges do not overlap. Bytes changed by a peer during the
        // copy only change the values copied.
        unsafe { copy_bytes(self.as_ptr().add(off), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// The `N` bytes at `off`, copied out (a field of a header in shared memory,
    /// parsed from the copy), if the view has them.
    #[inline(always)]
    pub fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        let mut b = [0u8; N];
        self.copy_to(off, &mut b).ok()?;
        Some(b)
    }

    /// Copies the whole view into the start of `buf` and returns that copy; `None`
    /// (nothing copied) when `buf` is shorter. `buf` need not be initialized: a
    /// caller with a large stack buffer of which only a few bytes are used pays
    /// for no zeroing.
    #[inline(always)]
    pub fn read_into<'b>(&self, buf: &'b mut [MaybeUninit<u8>]) -> Option<&'b [u8]> {
        let dst = buf.get_mut(..self.len)?;
        // SAFETY: `dst` is `len` writable bytes of ours, the source `len` readable
        // bytes of the view, not overlapping (as in `copy_to`); once written, all
        // `len` bytes of `dst` are initialized, so they can be read as `[u8]`.
        unsafe {
            copy_bytes(self.as_ptr(), dst.as_mut_ptr().cast(), self.len);
            Some(core::slice::from_raw_parts(dst.as_ptr().cast(), self.len))
        }
    }

    /// Appends the bytes to `v` (allocating only if `v` lacks the capacity).
    #[inline]
    pub fn append_to(&self, v: &mut Vec<u8>) {
        v.reserve(self.len);
        let at = v.len();
        // SAFETY: `reserve` left room for `len` bytes past `at`; the source is the
        // view, which `v`'s own memory does not overlap (a view over `v` would be
        // a borrow of it, and `v` is borrowed mutably). After the copy those bytes
        // are initialized, so the length may cover them.
        unsafe {
            copy_bytes(self.as_ptr(), v.as_mut_ptr().add(at), self.len);
            v.set_len(at + self.len);
        }
    }

    /// The bytes, copied into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.append_to(&mut v);
        v
    }
}

impl<'a> From<&'a [u8]> for SharedBytes<'a> {
    #[inline(always)]
    fn from(s: &'a [u8]) -> SharedBytes<'a> {
        // SAFETY: a slice's pointer is non-null and its bytes readable for its
        // lifetime, and `len <= isize::MAX`.
        unsafe { SharedBytes::new(s.as_ptr(), s.len()) }
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for SharedBytes<'a> {
    #[inline(always)]
    fn from(s: &'a [u8; N]) -> SharedBytes<'a> {
        SharedBytes::from(&s[..])
    }
}

impl core::fmt::Debug for SharedBytes<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedBytes")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// `copy_nonoverlapping` that copies up to 64 bytes inline: for a small message (or
/// an RMA write of a word) a call into `memcpy` costs more than the copy. Providers use
/// it for their own small copies (a payload into a shared-memory cell or segment).
///
/// # Safety
/// As `core::ptr::copy_nonoverlapping(src, dst, n)`.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY (every block): the caller guarantees `n` readable bytes at `src`, `n`
    // writable bytes at `dst`, not overlapping; each access below stays in `[0, n)`:
    // two possibly overlapping blocks of `w` bytes cover `n` in `[w, 2w]`.
    unsafe {
        if n > 16 {
            if n > 64 {
                core::ptr::copy_nonoverlapping(src, dst, n);
            } else if n > 32 {
                // Two 16-byte pairs: the first and the last 32 bytes.
                let a = src.cast::<[u128; 2]>().read_unaligned();
                let b = src.add(n - 32).cast::<[u128; 2]>().read_unaligned();
                dst.cast::<[u128; 2]>().write_unaligned(a);
                dst.add(n - 32).cast::<[u128; 2]>().write_unaligned(b);
            } else {
                let a = src.cast::<u128>().read_unaligned();
                let b = src.add(n - 16).cast::<u128>().read_unaligned();
                dst.cast::<u128>().write_unaligned(a);
                dst.add(n - 16).cast::<u128>().write_unaligned(b);
            }
        } else if n >= 8 {
            let a = src.cast::<u64>().read_unaligned();
            let b = src.add(n - 8).cast::<u64>().read_unaligned();
            dst.cast::<u64>().write_unaligned(a);
            dst.add(n - 8).cast::<u64>().write_unaligned(b);
        } else if n >= 4 {
            let a = src.cast::<u32>().read_unaligned();
            let b = src.add(n - 4).cast::<u32>().read_unaligned();
            dst.cast::<u32>().write_unaligned(a);
            dst.add(n - 4).cast::<u32>().write_unaligned(b);
        } else if n > 0 {
            // 1..=3 bytes: first, middle, last.
            let a = src.read();
            let b = src.add(n / 2).read();
            let c = src.add(n - 1).read();
            dst.write(a);
            dst.add(n / 2).write(b);
            dst.add(n - 1).write(c);
        }
    }
}
