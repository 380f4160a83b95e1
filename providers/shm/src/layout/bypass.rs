//! Copies into a staging file that bypass the sender's cache, and the choice, per
//! payload, between them and ordinary copies.
//!
//! A receiver copies a staged payload out of lines the sender has just written. When
//! the two cores share a cache, ordinary stores are best: the receiver finds the lines
//! in that cache. When they do not (cores on two dies of a multi-die processor, which
//! a virtual machine's vCPUs become without notice), every line moves from one die's
//! cache to the other's on request, slowly and a few at a time, and it becomes faster
//! to write the payload to memory with non-temporal stores and let the receiver stream
//! it back from there. Measured on this project's test machine (2-vCPU VM, AMD Zen 3),
//! 64 KiB handed from one core to the other took 4-6 us with ordinary stores and 5-6.5
//! us with non-temporal ones between cores sharing a cache, and 13-20 us with ordinary
//! stores against 5.5-7.5 us with non-temporal ones across dies.
//!
//! The two cases are told apart by what the sender sees of its own copies: across
//! dies, ordinary stores to lines the receiver last read are several times slower than
//! non-temporal ones; near, about as fast. [`Chooser`] keeps the recent cost of each
//! kind, uses the cheaper by that rule and tries the other now and then, so it follows
//! a placement that changes.
#![allow(unsafe_code)]

/// How a payload is copied into a staging file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stores {
    /// Ordinary stores (`memcpy`): the lines stay in the sender's cache.
    #[default]
    Plain,
    /// Non-temporal stores: the lines go to memory, not to the sender's cache.
    Bypass,
}

/// Non-temporal stores exist on this target.
pub const AVAILABLE: bool = cfg!(target_arch = "x86_64");

/// Copies `n` bytes from `src` to `dst` with non-temporal stores where the target has
/// them (ordinary ones elsewhere), then fences them: a later store (a `Release`
/// progress word) is seen after them.
///
/// # Safety
/// As `core::ptr::copy_nonoverlapping(src, dst, n)`.
#[inline]
pub unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees `n` readable bytes at `src` and `n` writable ones
    // at `dst`, not overlapping; every access stays in `[0, n)`: `head` and the
    // ordinary tail are in range, and each 16-byte store starts at a 16-aligned `dst +
    // i` with `i + 16 <= n`. SSE2 is part of x86_64.
    unsafe {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = dst.align_offset(16).min(n);
        // Head and tail are under 16 bytes: copied inline, not by a `memcpy` call.
        fabric::bytes::copy_bytes(src, dst, head);
        let mut i = head;
        while i + 64 <= n {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
            i += 64;
        }
        while i + 16 <= n {
            _mm_stream_si128(
                dst.add(i).cast::<__m128i>(),
                _mm_loadu_si128(src.add(i).cast::<__m128i>()),
            );
            i += 16;
        }
        fabric::bytes::copy_bytes(src.add(i), dst.add(i), n - i);
        // Non-temporal stores are not ordered with later stores by x86's memory model.
        _mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's guarantee is `copy_nonoverlapping`'s.
    unsafe {
        core::ptr::copy_nonoverlapping(src, dst, n)
    }
}

/// Smallest copy whose time is recorded: shorter ones say more of the clock than of
/// the stores.
pub const MEASURE_MIN: usize = 8 << 10;
/// One measured payload in this many is copied the other way, to keep its cost
/// current. Each such try costs a payload's copy time again (across dies, about 10 us
/// at 64 KiB); a change of placement shows within this many payloads when bypassing,
/// at once otherwise (every ordinary copy is measured).
pub const PROBE: u32 = 256;
/// Ordinary stores give way to non-temporal ones when they cost the sender more than
/// `ENTER` halves of what these cost, and come back below `LEAVE` halves. Near,
/// ordinary copies are the better even where they cost the sender somewhat more (the
/// receiver then reads from a cache rather than from memory): measured near, 0.5-1.6
/// times the cost of non-temporal copies, across dies about 3-5 times.
const ENTER: u64 = 5;
const LEAVE: u64 = 4;

/// Picks how to copy each staged payload from the recent cost of either kind of copy
/// (see the module documentation).
#[derive(Debug, Default)]
pub struct Chooser {
    /// Per kind (`Plain`, `Bypass`), the costs of its last two measured copies, in
    /// clock units per KiB; 0 for none yet.
    cost: [[u64; 2]; 2],
    /// Payloads picked for.
    n: u32,
    /// The kind used but when probing.
    usual: Stores,
}

impl Chooser {
    /// The kind of copy for the next payload, of which `bytes` bytes will be timed
    /// and [recorded](Self::record): a kind not measured twice yet is tried first, and the
    /// other kind every [`PROBE`]th payload, but only on a payload whose copy says
    /// something of its cost.
    #[inline]
    pub fn pick(&mut self, bytes: usize) -> Stores {
        let usual = self.usual;
        if !measured(bytes) {
            return usual;
        }
        self.n = self.n.wrapping_add(1);
        let other = match usual {
            Stores::Plain => Stores::Bypass,
            Stores::Bypass => Stores::Plain,
        };
        if self.estimate(other) == 0 || self.n.is_multiple_of(PROBE) {
            other
        } else {
            usual
        }
    }

    /// Records that a copy of `bytes` bytes of kind `how` took `ticks` clock units.
    #[inline]
    pub fn record(&mut self, how: Stores, bytes: usize, ticks: u64) {
        if !measured(bytes) {
            return;
        }
        let per_kib = (ticks.saturating_mul(1024) / bytes as u64).max(1);
        let c = &mut self.cost[how as usize];
        *c = [c[1], per_kib];
        let (plain, bypass) = (self.estimate(Stores::Plain), self.estimate(Stores::Bypass));
        if plain > 0 && bypass > 0 {
            let limit = match self.usual {
                Stores::Plain => ENTER,
                Stores::Bypass => LEAVE,
            };
            self.usual = if plain * 2 > bypass * limit {
                Stores::Bypass
            } else {
                Stores::Plain
            };
        }
    }

    /// A kind's recent cost: the lower of its last two (a copy that was interrupted or
    /// took page faults only ever reads high; the first into a fresh staging file
    /// does), 0 before it was measured twice.
    fn estimate(&self, how: Stores) -> u64 {
        match self.cost[how as usize] {
            [0, _] => 0,
            [a, b] => a.min(b),
        }
    }
}

/// A clock for [`Chooser::record`]: cheap, monotonic within a thread, any unit. 0 on
/// targets without non-temporal stores, where nothing is recorded.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86_64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// A copy of `bytes` bytes is timed and counted: long enough to say more of the stores
/// than of the clock, on a target that has both kinds.
#[inline]
fn measured(bytes: usize) -> bool {
    AVAILABLE && bytes >= MEASURE_MIN
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Picks `n` payloads of 64 KiB, each costing what `cost` says of its kind;
    /// returns how many went each way.
    fn run(c: &mut Chooser, n: u32, cost: impl Fn(Stores) -> u64) -> [u32; 2] {
        let mut seen = [0; 2];
        for _ in 0..n {
            let how = c.pick(64 << 10);
            seen[how as usize] += 1;
            c.record(how, 64 << 10, cost(how) * 64);
        }
        seen
    }

    #[test]
    fn chooser_follows_the_cheaper_kind_by_its_rule_and_keeps_probing() {
        if !AVAILABLE {
            return;
        }
        let mut c = Chooser::default();
        // Near: ordinary stores cost the sender a little more, and are kept.
        let near = |how| if how == Stores::Plain { 180 } else { 130 };
        let seen = run(&mut c, 10 * PROBE, near);
        assert!(
            (10..=12).contains(&seen[Stores::Bypass as usize]),
            "{seen:?}"
        );
        assert_eq!(c.usual, Stores::Plain);
        // Across dies ordinary stores cost four times as much: within two measured
        // copies the chooser turns, then tries ordinary stores once per PROBE.
        let far = |how| if how == Stores::Plain { 600 } else { 140 };
        let seen = run(&mut c, 2, far);
        assert_eq!(seen[Stores::Plain as usize], 2);
        assert_eq!(c.usual, Stores::Bypass);
        let seen = run(&mut c, 10 * PROBE, far);
        assert!((9..=11).contains(&seen[Stores::Plain as usize]), "{seen:?}");
        // Between the two limits, the kind in use stays.
        let between = |how| if how == Stores::Plain { 310 } else { 140 };
        run(&mut c, 3 * PROBE, between);
        assert_eq!(c.usual, Stores::Bypass);
        // Near again: the next probe of ordinary stores turns it back.
        let seen = run(&mut c, PROBE + 1, near);
        assert!(seen[Stores::Bypass as usize] < PROBE, "{seen:?}");
        assert_eq!(c.usual, Stores::Plain);
        run(&mut c, 3 * PROBE, between);
        assert_eq!(c.usual, Stores::Plain);
    }

    #[test]
    fn chooser_tries_each_kind_first_and_ignores_a_single_slow_copy() {
        if !AVAILABLE {
            return;
        }
        let mut c = Chooser::default();
        // Each kind is tried twice before anything is decided: the first copy into a
        // fresh staging file takes its page faults and reads high.
        let mut kinds = Vec::new();
        for cost in [3000, 140, 150, 150] {
            let how = c.pick(64 << 10);
            kinds.push(how);
            c.record(how, 64 << 10, cost * 64);
        }
        assert_eq!(
            kinds,
            [Stores::Bypass, Stores::Bypass, Stores::Plain, Stores::Plain]
        );
        assert_eq!(c.usual, Stores::Plain);
        // An interrupted copy reads high once: the lower of the last two wins.
        c.record(Stores::Plain, 64 << 10, 5000 * 64);
        assert_eq!(c.usual, Stores::Plain);
        // Copies too short to measure neither probe nor count.
        let n = c.n;
        for _ in 0..3 * PROBE {
            assert_eq!(c.pick(MEASURE_MIN - 1), Stores::Plain);
            c.record(Stores::Bypass, MEASURE_MIN - 1, 1);
        }
        assert_eq!((c.n, c.usual), (n, Stores::Plain));
    }

    #[test]
    fn bypass_copy_copies_every_alignment_and_length() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for s in 0..17 {
            for d in 0..17 {
                for n in [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 283 - s.max(d)] {
                    let mut dst = vec![0xEEu8; 300];
                    // SAFETY: `n + s` and `n + d` stay within the 300-byte buffers,
                    // which are distinct allocations.
                    unsafe { copy(src.as_ptr().add(s), dst.as_mut_ptr().add(d), n) };
                    assert_eq!(&dst[d..d + n], &src[s..s + n], "s {s} d {d} n {n}");
                    assert!(dst[..d].iter().all(|&b| b == 0xEE));
                    assert!(dst[d + n..].iter().all(|&b| b == 0xEE));
                }
            }
        }
    }
}
