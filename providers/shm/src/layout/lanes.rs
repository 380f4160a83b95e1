//! Busy lanes: how an initiator shows the owner of a directly mapped segment that it
//! is inside an access, without a locked instruction.
//!
//! The owner withdraws a published segment by changing its directory entry, then waits
//! until no initiator is inside an access before it reuses the memory (see `mapped`).
//! Initiators have two ways to be seen:
//! - the segment's shared busy count, incremented and decremented around every access
//!   (two locked instructions, about 7 ns of an 8-byte put on this machine's CPUs);
//! - a lane of their own: one cache line of the segment's header, claimed once when
//!   the initiator caches the segment, on which it stores [`BUSY`] before the access and
//!   [`IDLE`] after it. Plain stores: the store-load fence this Dekker handshake needs
//!   between "I am busy" and "is the entry still there" comes from the owner, which
//!   issues `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` between withdrawing the entry
//!   and reading the lanes. That call makes every thread of every registered process
//!   pass a full barrier, so either the initiator's recheck sees the entry withdrawn or
//!   the owner sees the lane busy (the asymmetric fence of user-space RCU).
//!
//! Lanes serve only initiators whose process registered for the expedited barrier and
//! segments whose owner issues it (the `fenced` flag of the segment's header); everyone else
//! counts. The loom tests model the barrier as a sequentially consistent fence on both
//! sides.
//!
//! Lanes lie in memory every peer of the segment can write. Garbage there can only make
//! a withdrawal wait (for at most `mapped::UNPUBLISH_WAIT`, as a stuck busy count does)
//! or a claim pass a lane by; an initiator killed holding a lane leaves it claimed, and
//! once all are, newcomers count.

use std::sync::atomic::Ordering;

use crate::layout::word::Word;

/// A lane nobody claimed.
pub(crate) const FREE: u64 = 0;
/// A claimed lane whose initiator is outside any access.
pub(crate) const IDLE: u64 = 1;
/// A claimed lane whose initiator is inside an access.
pub(crate) const BUSY: u64 = 2;

/// Claims a lane nobody claimed ([`FREE`] to [`IDLE`]); whether this call did.
#[inline]
pub(crate) fn claim<W: Word>(lane: &W) -> bool {
    lane.swap_if(FREE, IDLE)
}

/// Initiator: marks its lane busy before it rechecks the entry. Only the compiler is
/// kept from moving the recheck above the store; the owner's barrier does the rest.
#[inline(always)]
pub(crate) fn enter<W: Word>(lane: &W) {
    lane.store(BUSY, Ordering::Relaxed);
    initiator_fence();
}

/// Initiator: leaves the access; everything it did to the segment happens before the
/// owner sees the lane idle.
#[inline(always)]
pub(crate) fn leave<W: Word>(lane: &W) {
    lane.store(IDLE, Ordering::Release);
}

/// Owner, after withdrawing the entry and [`owner_fence`]: whether any lane is still
/// inside an access.
pub(crate) fn any_busy<'a, W: Word + 'a>(lanes: impl IntoIterator<Item = &'a W>) -> bool {
    lanes.into_iter().any(|l| l.load(Ordering::SeqCst) == BUSY)
}

#[cfg(not(all(test, loom)))]
#[inline(always)]
fn initiator_fence() {
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

#[cfg(all(test, loom))]
fn initiator_fence() {
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// Owner: the barrier that stands in for the initiators' fences. `false` when the
/// kernel refused it.
#[cfg(not(all(test, loom)))]
pub(crate) fn owner_fence() -> bool {
    crate::layout::sys::membarrier_global()
}

#[cfg(all(test, loom))]
pub(crate) fn owner_fence() -> bool {
    loom::sync::atomic::fence(Ordering::SeqCst);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn lanes_are_claimed_once_and_seen_busy_inside_an_access() {
        let lanes: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(FREE)).collect();
        assert!(claim(&lanes[1]));
        assert!(!claim(&lanes[1]), "a claimed lane is not claimed again");
        assert!(!any_busy(&lanes));
        enter(&lanes[1]);
        assert!(any_busy(&lanes));
        leave(&lanes[1]);
        assert!(!any_busy(&lanes));
        assert_eq!(lanes[1].load(Ordering::SeqCst), IDLE);
    }
}

#[cfg(all(test, loom))]
#[allow(unsafe_code)]
mod loom_tests {
    //! An initiator's access on its lane against the owner's withdrawal and reuse of
    //! the memory: loom flags the two touching the memory concurrently.
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;

    struct Seg {
        /// The directory entry's state: 0 published, 1 withdrawn.
        state: AtomicU64,
        lane: AtomicU64,
        data: UnsafeCell<u64>,
    }

    #[test]
    fn an_access_never_overlaps_the_owners_reuse() {
        loom::model(|| {
            let seg = Arc::new(Seg {
                state: AtomicU64::new(0),
                lane: AtomicU64::new(FREE),
                data: UnsafeCell::new(0),
            });
            assert!(claim(&seg.lane));
            let s = seg.clone();
            let initiator = loom::thread::spawn(move || {
                enter(&s.lane);
                let current = s.state.load(Ordering::SeqCst) == 0;
                if current {
                    // SAFETY: loom's cell; loom reports an access racing the owner's.
                    s.data.with_mut(|p| unsafe { *p = 7 });
                }
                leave(&s.lane);
                current
            });
            seg.state.store(1, Ordering::SeqCst);
            assert!(owner_fence());
            while any_busy([&seg.lane]) {
                loom::thread::yield_now();
            }
            // The memory is the owner's again.
            // SAFETY: loom's cell; loom reports an access racing the initiator's.
            let seen = seg.data.with_mut(|p| unsafe {
                let v = *p;
                *p = 9;
                v
            });
            let wrote = initiator.join().unwrap();
            // Whatever the initiator wrote, it wrote before the owner looked.
            assert_eq!(seen, if wrote { 7 } else { 0 });
        });
    }
}
