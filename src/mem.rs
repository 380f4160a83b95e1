//! Raw views of application buffers that operations write into after the posting call
//! returned (receives, RMA reads, fetching atomics), and of registered target memory.
//!
//! This module owns the `unsafe` of those writes. The contracts that make them sound
//! are the `# Safety` sections of the posting calls (the buffer stays valid and
//! untouched until the operation completes or its endpoint is dropped) and of memory
//! registration (the region outlives the registration, which borrows it).
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use crate::provider::{Payload, Pull};

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
    #[inline(always)]
    pub unsafe fn fill(&self, src: &[&[u8]]) -> usize {
        if let ([s], 1) = (src, self.n) {
            // The common case: one buffer, one source.
            let (p, l) = self.segs[0];
            let n = l.min(s.len());
            // SAFETY: as below, with `n <= l`.
            unsafe { copy_bytes(s.as_ptr(), p as *mut u8, n) };
            return n;
        }
        // SAFETY: forwarded contract.
        unsafe { self.fill_many(src) }
    }

    /// [`RawIov::fill`] of the buffers past their first `skip` bytes: a result
    /// delivered in pieces. The first piece (`skip == 0`, usually the only one) builds
    /// no shortened list.
    ///
    /// # Safety
    /// As [`RawIov::fill`].
    #[inline(always)]
    pub unsafe fn fill_at(&self, skip: usize, src: &[&[u8]]) -> usize {
        // SAFETY (both): forwarded contract.
        if skip == 0 {
            unsafe { self.fill(src) }
        } else {
            unsafe { self.advance(skip).fill(src) }
        }
    }

    /// The general case of [`RawIov::fill`]: several buffers or sources.
    ///
    /// # Safety
    /// As [`RawIov::fill`].
    #[inline(never)]
    unsafe fn fill_many(&self, src: &[&[u8]]) -> usize {
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
                unsafe { copy_bytes(s.as_ptr(), (p + doff) as *mut u8, n) };
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

    /// Copies a received payload into the buffers: its first `min(src.len(),
    /// self.len())` bytes. Returns that count, and whether every byte arrived: a
    /// remote payload whose sender vanished fails with `Err` (then the buffers hold
    /// partial data in that range). An inline payload is [`RawIov::fill`], unchanged.
    ///
    /// # Safety
    /// As [`RawIov::fill`].
    #[inline]
    pub unsafe fn fill_payload<R: Pull>(&self, src: Payload<'_, R>) -> (usize, Result<()>) {
        match src {
            // SAFETY: forwarded contract.
            Payload::Inline(s) => (unsafe { self.fill(&[s]) }, Ok(())),
            // `len` asked inline: unreachable for `NoPull`, so the arm compiles away.
            // SAFETY: forwarded contract.
            Payload::Remote(r) => unsafe { self.fill_remote(r, r.len()) },
        }
    }

    /// The remote arm of [`RawIov::fill_payload`]: one pull per buffer.
    ///
    /// # Safety
    /// As [`RawIov::fill`].
    #[cold]
    #[inline(never)]
    unsafe fn fill_remote<R: Pull>(&self, r: &R, total: usize) -> (usize, Result<()>) {
        let n = total.min(self.len());
        let src = Payload::Remote(r);
        let mut off = 0;
        for &(p, l) in &self.segs[..self.n as usize] {
            let k = l.min(n - off);
            if k == 0 {
                continue;
            }
            // SAFETY: (p, l) was recorded from a `&mut [u8]` that the caller guarantees
            // is still valid and unaliased; `k <= l` keeps the view inside it.
            let dst = unsafe { core::slice::from_raw_parts_mut(p as *mut u8, k) };
            if let Err(e) = src.copy_to(off, dst) {
                return (n, Err(e));
            }
            off += k;
        }
        (n, Ok(()))
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

    #[test]
    fn small_and_large_copies_are_exact() {
        let src: Vec<u8> = (0..80u8)
            .map(|i| i.wrapping_mul(37).wrapping_add(1))
            .collect();
        // Every inline width (up to 64) and the first `memcpy` sizes.
        for n in 0..=80 {
            for off in 0..3 {
                let mut dst = [0xEEu8; 88];
                // SAFETY: `n + off <= 83 < 88` bytes of `dst`, `n <= 80` of `src`,
                // distinct arrays.
                unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr().add(off), n) };
                assert_eq!(&dst[off..off + n], &src[..n], "n {n} off {off}");
                assert!(dst[..off].iter().all(|&b| b == 0xEE), "before, n {n}");
                assert!(dst[off + n..].iter().all(|&b| b == 0xEE), "after, n {n}");
            }
            // Through `fill`: one buffer, one source (the fast path), exact and short.
            let mut buf = [0u8; 24];
            let iov = RawIov::one(&mut buf[..n.min(24)]);
            // SAFETY: `buf` outlives the call and is not otherwise borrowed.
            let got = unsafe { iov.fill(&[&src[..n]]) };
            assert_eq!(got, n.min(24));
            assert_eq!(&buf[..got], &src[..got]);
        }
    }

    /// Bytes `..fail` of `data`, then a lost sender.
    struct Flaky<'a> {
        data: &'a [u8],
        fail: usize,
    }

    impl Pull for Flaky<'_> {
        fn len(&self) -> usize {
            self.data.len()
        }
        fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
            let end = off + dst.len();
            if end > self.fail {
                return Err(Error::Io);
            }
            dst.copy_from_slice(&self.data[off..end]);
            Ok(())
        }
    }

    #[test]
    fn fill_payload_pulls_per_buffer_and_reports_loss() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 4];
        let iov = RawIov::many(&mut [&mut a[..], &mut b[..]]).unwrap();
        let whole = Flaky {
            data: b"remote!!!",
            fail: usize::MAX,
        };
        // SAFETY: a and b outlive the calls and are not otherwise borrowed.
        let (n, r) = unsafe { iov.fill_payload(Payload::Remote(&whole)) };
        assert_eq!((n, r), (7, Ok(())));
        assert_eq!((&a, &b), (b"rem", b"ote!"));
        // Lost in the second buffer: the first is whole, the count is still the span.
        let lost = Flaky {
            data: b"REMOTE",
            fail: 4,
        };
        // SAFETY: as above.
        let (n, r) = unsafe { iov.fill_payload(Payload::Remote(&lost)) };
        assert_eq!((n, r), (6, Err(Error::Io)));
        assert_eq!(&a, b"REM");
        // Inline payloads are plain copies.
        // SAFETY: as above.
        let (n, r) = unsafe { iov.fill_payload(Payload::<Flaky<'_>>::Inline(b"xy")) };
        assert_eq!((n, r), (2, Ok(())));
        assert_eq!(&a, b"xyM");
    }
}
