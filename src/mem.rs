//! Raw views of application buffers that operations write into after the posting call
//! returned (receives, RMA reads, fetching atomics), and of registered target memory.
//!
//! This module owns the `unsafe` of those writes. The contracts that make them sound
//! are the `# Safety` sections of the posting calls (the buffer stays valid and
//! untouched until the operation completes or its endpoint is dropped) and of memory
//! registration (the region outlives the registration, which borrows it).
#![allow(unsafe_code)]

use crate::error::{Error, Result};

/// Most scatter-gather entries per operation (`iov_limit`).
pub const IOV_LIMIT: usize = 4;

/// A list of up to [`IOV_LIMIT`] raw writable buffers, stored inline (no allocation).
#[derive(Debug, Clone, Copy, Default)]
pub struct RawIov {
    segs: [(usize, usize); IOV_LIMIT],
    n: u8,
}

impl RawIov {
    /// An empty list.
    pub const EMPTY: RawIov = RawIov {
        segs: [(0, 0); IOV_LIMIT],
        n: 0,
    };

    /// Records one buffer.
    #[inline]
    pub fn one(buf: &mut [u8]) -> RawIov {
        let mut r = RawIov::EMPTY;
        r.segs[0] = (buf.as_mut_ptr() as usize, buf.len());
        r.n = 1;
        r
    }

    /// Records several buffers; more than [`IOV_LIMIT`] is `Err(Inval)`.
    pub fn many(bufs: &mut [&mut [u8]]) -> Result<RawIov> {
        if bufs.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let mut r = RawIov::EMPTY;
        for (i, b) in bufs.iter_mut().enumerate() {
            r.segs[i] = (b.as_mut_ptr() as usize, b.len());
        }
        r.n = bufs.len() as u8;
        Ok(r)
    }

    /// Total bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.segs[..self.n as usize].iter().map(|s| s.1).sum()
    }

    /// Whether there are no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Address of the first byte (0 when empty).
    #[inline]
    pub fn base(&self) -> usize {
        if self.n == 0 {
            0
        } else {
            self.segs[0].0
        }
    }

    /// The list without its first `skip` bytes (multi-receive consumption).
    pub fn advance(&self, mut skip: usize) -> RawIov {
        let mut r = RawIov::EMPTY;
        for &(p, l) in &self.segs[..self.n as usize] {
            if skip >= l {
                skip -= l;
                continue;
            }
            r.segs[r.n as usize] = (p + skip, l - skip);
            r.n += 1;
            skip = 0;
        }
        r
    }

    /// Copies `src` (a gather list) into the buffers, returning the bytes copied
    /// (at most `self.len()`).
    ///
    /// # Safety
    /// Every recorded buffer must still be valid for writes and not aliased by any live
    /// Rust reference: the contract of the posting call that recorded it.
    #[inline]
    pub unsafe fn fill(&self, src: &[&[u8]]) -> usize {
        let mut copied = 0;
        let mut di = 0;
        let mut doff = 0;
        for s in src {
            let mut s: &[u8] = s;
            while !s.is_empty() && di < self.n as usize {
                let (p, l) = self.segs[di];
                let n = (l - doff).min(s.len());
                // SAFETY: (p, l) was recorded from a `&mut [u8]` whose validity the caller
                // guarantees; `doff + n <= l` keeps the write inside it, and `s` is a
                // separate shared slice so the ranges do not overlap.
                unsafe { core::ptr::copy_nonoverlapping(s.as_ptr(), (p + doff) as *mut u8, n) };
                copied += n;
                doff += n;
                s = &s[n..];
                if doff == l {
                    di += 1;
                    doff = 0;
                }
            }
        }
        copied
    }
}

/// Reads `len` bytes of registered memory at `addr`.
///
/// # Safety
/// `[addr, addr + len)` must lie in a live registration (checked by the MR table under
/// its lock, which the caller holds), and nothing may write it concurrently.
#[inline]
pub unsafe fn region<'a>(addr: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller guarantees a live, checked registration of this range.
    unsafe { core::slice::from_raw_parts(addr as *const u8, len) }
}

/// Mutable view of `len` bytes of registered memory at `addr`.
///
/// # Safety
/// As [`region`], and no other reference to the range may be live.
#[inline]
pub unsafe fn region_mut<'a>(addr: usize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller guarantees a live, checked, exclusively accessed range.
    unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_scatters_and_truncates() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 4];
        let iov = RawIov::many(&mut [&mut a[..], &mut b[..]]).unwrap();
        assert_eq!(iov.len(), 7);
        // SAFETY: a and b outlive the call and are not otherwise borrowed.
        let n = unsafe { iov.fill(&[b"hel", b"lo world"]) };
        assert_eq!(n, 7);
        assert_eq!(&a, b"hel");
        assert_eq!(&b, b"lo w");
        let adv = iov.advance(4);
        assert_eq!(adv.len(), 3);
    }
}
