//! Raw views of application buffers that operations write into after the posting call
//! returned (receives, RMA reads, fetching atomics), and of registered target memory.
//!
//! This module owns the `unsafe` of those writes. The contracts that make them sound
//! are the `# Safety` sections of the posting calls (the buffer stays valid and
//! untouched until the operation completes or its endpoint is dropped) and of memory
//! registration (the region outlives the registration, which borrows it).
#![allow(unsafe_code)]

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::atomic;
use crate::bytes::copy_bytes;
use crate::error::{Error, Result};
use crate::limits::IOV_LIMIT;
use crate::provider::{Payload, Pull, SharedBytes};

/// A list of up to [`IOV_LIMIT`] raw writable buffers, stored inline (no allocation).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawIov {
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

    /// Copies `src` into the buffers, returning the bytes copied (at most
    /// `self.len()`). `src` may be memory another process writes (a packet in a
    /// shared ring, a peer's segment): it is read through raw pointers only.
    ///
    /// # Safety
    /// Every recorded buffer must still be valid for writes and not aliased by any live
    /// Rust reference: the contract of the posting call that recorded it.
    #[inline(always)]
    pub unsafe fn fill(&self, src: SharedBytes<'_>) -> usize {
        if self.n == 1 {
            // The common case: one buffer.
            let (p, l) = self.segs[0];
            let n = l.min(src.len());
            // SAFETY: as below, with `n <= l`.
            unsafe { copy_bytes(src.as_ptr(), p as *mut u8, n) };
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
    pub unsafe fn fill_at(&self, skip: usize, src: SharedBytes<'_>) -> usize {
        // SAFETY (both): forwarded contract.
        if skip == 0 {
            unsafe { self.fill(src) }
        } else {
            unsafe { self.advance(skip).fill(src) }
        }
    }

    /// The general case of [`RawIov::fill`]: several buffers (or none).
    ///
    /// # Safety
    /// As [`RawIov::fill`].
    #[inline(never)]
    unsafe fn fill_many(&self, src: SharedBytes<'_>) -> usize {
        let mut copied = 0;
        for &(p, l) in &self.segs[..self.n as usize] {
            let n = l.min(src.len() - copied);
            if n == 0 {
                break;
            }
            // SAFETY: (p, l) was recorded from a `&mut [u8]` whose validity the caller
            // guarantees, and `n <= l`; `copied + n <= src.len()` bytes of `src` are
            // readable (`SharedBytes`), and they are not the caller's buffers, which
            // no one else may reach, so the ranges do not overlap.
            unsafe { copy_bytes(src.as_ptr().add(copied), p as *mut u8, n) };
            copied += n;
        }
        copied
    }

    /// The contiguous stretch of the buffers that starts `skip` bytes in, at most
    /// `max` bytes long (empty past the end): where a payload received in pieces goes
    /// next, for a socket read straight into it.
    ///
    /// # Safety
    /// As [`RawIov::fill`], and no other view of that stretch may be live while the
    /// returned one is: the caller holds it only for one write into it.
    #[inline]
    pub unsafe fn piece_mut<'a>(&self, mut skip: usize, max: usize) -> &'a mut [u8] {
        for &(p, l) in &self.segs[..self.n as usize] {
            if skip >= l {
                skip -= l;
                continue;
            }
            let n = (l - skip).min(max);
            if n == 0 {
                break;
            }
            // SAFETY: (p, l) was recorded from a `&mut [u8]` that the caller guarantees
            // is still valid and unaliased; `skip + n <= l` keeps the view inside it.
            return unsafe { core::slice::from_raw_parts_mut((p + skip) as *mut u8, n) };
        }
        &mut []
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
            Payload::Inline(s) => (unsafe { self.fill(s) }, Ok(())),
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

/// Reads `len` bytes of registered memory at `addr`.
///
/// # Safety
/// `[addr, addr + len)` must lie in a live registration (checked by the MR table under
/// its lock, which the caller holds), and nothing may write it concurrently.
#[inline]
pub(crate) unsafe fn region<'a>(addr: usize, len: usize) -> &'a [u8] {
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
pub(crate) unsafe fn region_mut<'a>(addr: usize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller guarantees a live, checked, exclusively accessed range.
    unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) }
}

/// Applies an atomic operation (`class`, `op`, `dt`, operands as for
/// [`atomic::apply`]) to the `len` bytes at `addr`, which other processes may update at
/// the same time with CPU atomics (memory published for direct access by the shm
/// provider): element by element, each element read and replaced with one atomic
/// instruction of its width, its new value computed by [`atomic::apply`] on a copy
/// (so results match it bit for bit) and computed again if the element changed
/// meanwhile. No update by another process is lost, and no Rust reference to the
/// range is made. Elements wider than 8 bytes, or a range not aligned to the element
/// size, have no such instruction: they are applied to the bytes in place.
///
/// The operands may lie in memory the initiator's process can still write (a packet
/// in a shared ring): each is read once, into a copy that the checks and the operation
/// then use, so the values checked are the values applied.
///
/// # Safety
/// As [`region_mut`] for this process: the range is live and nothing else in this
/// process accesses it during the call. Other processes may access it meanwhile only
/// with atomic instructions of the element's width (wider or unaligned elements: not
/// at all).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn atomic_shared(
    class: atomic::AtomicClass,
    op: atomic::AtomicOp,
    dt: atomic::Datatype,
    addr: usize,
    len: usize,
    operand: SharedBytes<'_>,
    compare: SharedBytes<'_>,
    fetch: Option<&mut [u8]>,
) -> Result<()> {
    // The commonest atomics, on one aligned 64-bit integer, skip the generic checks
    // and loop below: an add (fetching or not) is one `lock xadd`, a compare-and-swap
    // one `lock cmpxchg`, with the results the loop would give.
    if len == 8
        && addr.is_multiple_of(8)
        && matches!(dt, atomic::Datatype::Uint64 | atomic::Datatype::Int64)
    {
        if let Some(prev) = word64(class, op, addr, operand, compare) {
            match fetch {
                Some(f) if f.len() != 8 => return Err(Error::Inval),
                Some(f) => f.copy_from_slice(&prev.to_ne_bytes()),
                None => {}
            }
            return Ok(());
        }
    }
    // SAFETY: forwarded contract.
    unsafe { atomic_elements(class, op, dt, addr, len, operand, compare, fetch) }
}

/// The general case of [`atomic_shared`], with its contract: the operands copied out
/// once (into buffers of the largest atomic, whose frame the common case never pays
/// for), then applied element by element.
///
/// # Safety
/// As [`atomic_shared`].
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn atomic_elements(
    class: atomic::AtomicClass,
    op: atomic::AtomicOp,
    dt: atomic::Datatype,
    addr: usize,
    len: usize,
    operand: SharedBytes<'_>,
    compare: SharedBytes<'_>,
    mut fetch: Option<&mut [u8]>,
) -> Result<()> {
    let mut operand_buf = [MaybeUninit::uninit(); crate::limits::MAX_ATOMIC_SIZE];
    let mut compare_buf = [MaybeUninit::uninit(); crate::limits::MAX_ATOMIC_SIZE];
    // Operands longer than any atomic: refused as `check` refuses a length mismatch.
    let (Some(operand), Some(compare)) = (
        operand.read_into(&mut operand_buf),
        compare.read_into(&mut compare_buf),
    ) else {
        return Err(Error::Inval);
    };
    let size = dt.size();
    atomic::check(
        class,
        op,
        dt,
        len,
        operand,
        compare,
        fetch.as_deref().map(<[u8]>::len),
    )?;
    if size > 8 || !addr.is_multiple_of(size) {
        // SAFETY: the caller's contract, and no other process touches such elements.
        let target = unsafe { region_mut(addr, len) };
        return atomic::apply(class, op, dt, target, operand, compare, fetch);
    }
    let int_sum = op == atomic::AtomicOp::Sum && dt.is_integer();
    for k in 0..len / size {
        let range = k * size..(k + 1) * size;
        let opnd = operand.get(range.clone()).unwrap_or(&[]);
        let cmp = compare.get(range.clone()).unwrap_or(&[]);
        let old = fetch.as_deref_mut().map(|f| &mut f[range.clone()]);
        let at = addr + k * size;
        macro_rules! element {
            ($a:ty, $t:ty) => {{
                const N: usize = core::mem::size_of::<$t>();
                // SAFETY: `at` lies in the caller's live range, aligned to `N` (the
                // range's start is, and elements are `N` apart); every concurrent
                // access to it is atomic (the caller's contract).
                let w = unsafe { <$a>::from_ptr(at as *mut $t) };
                let prev: $t = if int_sum {
                    // Two's complement: one instruction for signed and unsigned alike.
                    let mut v = [0u8; N];
                    v.copy_from_slice(opnd);
                    w.fetch_add(<$t>::from_ne_bytes(v), Ordering::AcqRel)
                } else {
                    let mut cur = w.load(Ordering::Acquire);
                    loop {
                        let mut t = cur.to_ne_bytes();
                        atomic::apply(class, op, dt, &mut t, opnd, cmp, None)?;
                        let new = <$t>::from_ne_bytes(t);
                        // Unchanged (a read, a failed compare, a min that keeps): the
                        // load was the operation.
                        if new == cur {
                            break cur;
                        }
                        match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
                        {
                            Ok(_) => break cur,
                            Err(v) => cur = v,
                        }
                    }
                };
                if let Some(o) = old {
                    o.copy_from_slice(&prev.to_ne_bytes());
                }
            }};
        }
        match size {
            1 => element!(AtomicU8, u8),
            2 => element!(AtomicU16, u16),
            4 => element!(AtomicU32, u32),
            _ => element!(AtomicU64, u64),
        }
    }
    Ok(())
}

/// The 64-bit integer add or compare-and-swap of [`atomic_shared`] at `addr` (an
/// aligned live word, see there) in one instruction: the previous value, or `None`
/// for any other operation or operands of other lengths (nothing done).
#[inline]
fn word64(
    class: atomic::AtomicClass,
    op: atomic::AtomicOp,
    addr: usize,
    operand: SharedBytes<'_>,
    compare: SharedBytes<'_>,
) -> Option<u64> {
    use atomic::{AtomicClass, AtomicOp};
    if operand.len() != 8 {
        return None;
    }
    let o = u64::from_ne_bytes(operand.read(0)?);
    let sum = op == AtomicOp::Sum && class != AtomicClass::Compare && compare.is_empty();
    let cswap = op == AtomicOp::Cswap && class == AtomicClass::Compare;
    if !(sum || cswap) {
        return None;
    }
    // SAFETY: `addr` is the caller's live, 8-aligned word (checked there); every
    // concurrent access to it is atomic (`atomic_shared`'s contract).
    let w = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
    if sum {
        return Some(w.fetch_add(o, Ordering::AcqRel));
    }
    if compare.len() != 8 {
        return None;
    }
    let c = u64::from_ne_bytes(compare.read(0)?);
    Some(
        match w.compare_exchange(c, o, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An atomic applied by `atomic_shared` loses no update made at the same time by
    /// another thread (as another process's direct access would) with CPU atomics:
    /// integer sums (one instruction) and float sums (a compare-and-swap loop).
    #[test]
    fn atomic_shared_loses_no_concurrent_update() {
        const EACH: u32 = 50_000;
        let word = std::sync::Arc::new(AtomicU64::new(0));
        let f32_word = std::sync::Arc::new(AtomicU32::new(0f32.to_bits()));
        let (w, f) = (word.clone(), f32_word.clone());
        let other = std::thread::spawn(move || {
            for _ in 0..EACH {
                w.fetch_add(1, Ordering::AcqRel);
                let mut cur = f.load(Ordering::Acquire);
                loop {
                    let new = (f32::from_bits(cur) + 1.0).to_bits();
                    match f.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => break,
                        Err(v) => cur = v,
                    }
                }
            }
        });
        let mut old = [0u8; 8];
        for _ in 0..EACH {
            // SAFETY: live words of this test; the other thread uses atomics only.
            unsafe {
                atomic_shared(
                    atomic::AtomicClass::Fetch,
                    atomic::AtomicOp::Sum,
                    atomic::Datatype::Uint64,
                    word.as_ptr() as usize,
                    8,
                    (&1u64.to_ne_bytes()).into(),
                    b"".into(),
                    Some(&mut old),
                )
                .unwrap();
                atomic_shared(
                    atomic::AtomicClass::Base,
                    atomic::AtomicOp::Sum,
                    atomic::Datatype::Float,
                    f32_word.as_ptr() as usize,
                    4,
                    (&1f32.to_ne_bytes()).into(),
                    b"".into(),
                    None,
                )
                .unwrap();
            }
        }
        other.join().unwrap();
        assert_eq!(word.load(Ordering::Relaxed), 2 * u64::from(EACH));
        assert_eq!(
            f32::from_bits(f32_word.load(Ordering::Relaxed)),
            (2 * EACH) as f32
        );
    }

    /// Results match `atomic::apply`, fetched values included, element by element,
    /// and bad lengths fail as there.
    #[test]
    fn atomic_shared_matches_apply() {
        use atomic::{AtomicClass, AtomicOp, Datatype};
        let cases = [
            (AtomicClass::Fetch, AtomicOp::Max, Datatype::Int32),
            (AtomicClass::Compare, AtomicOp::Cswap, Datatype::Uint16),
            (AtomicClass::Fetch, AtomicOp::Prod, Datatype::Double),
            (AtomicClass::Base, AtomicOp::Bxor, Datatype::Uint8),
            (AtomicClass::Fetch, AtomicOp::AtomicWrite, Datatype::Uint64),
        ];
        for (class, op, dt) in cases {
            let n = 4 * dt.size();
            let init: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37) | 1).collect();
            let operand: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(11) | 2).collect();
            let compare = if class == AtomicClass::Compare {
                init.clone()
            } else {
                Vec::new()
            };
            let (mut want, mut want_old) = (init.clone(), vec![0u8; n]);
            let fetch = class != AtomicClass::Base;
            atomic::apply(
                class,
                op,
                dt,
                &mut want,
                &operand,
                &compare,
                fetch.then_some(&mut want_old[..]),
            )
            .unwrap();
            // Aligned storage for the element width.
            let mut store = vec![0u64; n.div_ceil(8)];
            let got = store.as_mut_ptr() as usize;
            let (mut got_old, bytes) = (vec![0u8; n], n);
            // SAFETY: `store` is ours, live and untouched by anything else here.
            unsafe {
                core::ptr::copy_nonoverlapping(init.as_ptr(), got as *mut u8, bytes);
                atomic_shared(
                    class,
                    op,
                    dt,
                    got,
                    n,
                    operand[..].into(),
                    compare[..].into(),
                    fetch.then_some(&mut got_old[..]),
                )
                .unwrap();
                assert_eq!(region(got, n), &want[..], "{op:?} {dt:?}");
            }
            assert_eq!(
                got_old,
                if fetch { want_old } else { vec![0u8; n] },
                "{op:?} {dt:?}"
            );
            // SAFETY: as above.
            let bad = unsafe {
                atomic_shared(
                    class,
                    op,
                    dt,
                    got,
                    n,
                    operand[1..].into(),
                    compare[..].into(),
                    None,
                )
            };
            assert_eq!(bad, Err(Error::Inval));
        }
    }

    #[test]
    fn fill_scatters_and_truncates() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 4];
        let iov = RawIov::many(&mut [&mut a[..], &mut b[..]]).unwrap();
        assert_eq!(iov.len(), 7);
        // SAFETY: a and b outlive the call and are not otherwise borrowed.
        let n = unsafe { iov.fill(b"hello world".into()) };
        assert_eq!(n, 7);
        assert_eq!(&a, b"hel");
        assert_eq!(&b, b"lo w");
        let adv = iov.advance(4);
        assert_eq!(adv.len(), 3);
    }

    #[test]
    fn pieces_walk_the_buffers_in_order() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 4];
        let iov = RawIov::many(&mut [&mut a[..], &mut b[..]]).unwrap();
        // SAFETY: a and b outlive the calls; each piece is dropped before the next.
        unsafe {
            assert_eq!(iov.piece_mut(0, 10).len(), 3);
            assert_eq!(iov.piece_mut(1, 1).len(), 1);
            iov.piece_mut(2, 10).copy_from_slice(b"x");
            iov.piece_mut(3, 10).copy_from_slice(b"yzw!");
            assert_eq!(iov.piece_mut(5, 10).len(), 2);
            assert!(iov.piece_mut(7, 10).is_empty());
            assert!(iov.piece_mut(0, 0).is_empty());
        }
        assert_eq!((&a[2..], &b), (&b"x"[..], b"yzw!"));
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
            let got = unsafe { iov.fill(src[..n].into()) };
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
        let (n, r) = unsafe { iov.fill_payload(Payload::<Flaky<'_>>::Inline(b"xy".into())) };
        assert_eq!((n, r), (2, Ok(())));
        assert_eq!(&a, b"xyM");
    }
}
