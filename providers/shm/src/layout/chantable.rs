//! The channel table's protocol: how senders claim receive channels in a peer's
//! region and how the receiver finds and frees them, on the words `region` lays out
//! (see there). Written over [`Word`] so that the loom model below runs this very
//! code (the words are [`Word`]s).
//!
//! A sender takes a channel's claim word from 0 to its nonce ([`take`]), writes its
//! name, then publishes ([`publish`]): the owner word gets the nonce (release: the
//! name is visible to whoever reads it), the table's high-water mark covers the
//! channel, and the table's generation changes. The receiver, on a generation it has
//! not seen, looks at the channels below the mark and adopts those whose claim and
//! owner agree ([`claimed`]). It frees a drained channel of a departed sender in two
//! steps around giving the ring's pages back ([`release_begin`], [`release_end`]):
//! the head goes back to 0 before the claim word is cleared (release), so the next
//! claimer, whose taking of the word acquires it, starts at 0 in a zeroed ring.
//!
//! Peers may write garbage in any of these words: a claim or owner word that is
//! wrong makes a channel look free or taken (a sender may pass it by, or two may
//! write one ring, which only garbles what those two send), never an access out of
//! the table, which the caller bounds by the geometry.

use std::sync::atomic::Ordering;

use crate::layout::word::Word;

/// Sender: takes a channel whose claim word is free (0) for `nonce` (not 0). On
/// success the channel's previous release is visible (its head is back at 0).
#[inline]
pub(crate) fn take<W: Word>(claim: &W, nonce: u64) -> bool {
    nonce != 0 && claim.load(Ordering::Relaxed) == 0 && claim.swap_if(0, nonce)
}

/// Sender, after [`take`] of channel `c` and writing its name: makes the claim
/// visible to the receiver.
#[inline]
pub(crate) fn publish<W: Word>(owner: &W, hwm: &W, gen: &W, c: usize, nonce: u64) {
    owner.store(nonce, Ordering::Release);
    hwm.fetch_max(c as u64 + 1, Ordering::Release);
    gen.fetch_add(1, Ordering::Release);
}

/// Receiver: the claim of a channel once its claimer published it (the claimer's
/// nonce, its name visible), else 0.
#[inline]
pub(crate) fn claimed<W: Word>(claim: &W, owner: &W) -> u64 {
    let c = claim.load(Ordering::Acquire);
    if c != 0 && owner.load(Ordering::Acquire) == c {
        c
    } else {
        0
    }
}

/// Receiver: first step of freeing a channel; the caller then gives the ring's pages
/// back and calls [`release_end`].
#[inline]
pub(crate) fn release_begin<W: Word>(owner: &W) {
    owner.store(0, Ordering::Relaxed);
}

/// Receiver: frees the channel for the next claimer, whose ring starts at 0.
#[inline]
pub(crate) fn release_end<W: Word>(head: &W, claim: &W, gen: &W) {
    head.store(0, Ordering::Relaxed);
    claim.store(0, Ordering::Release);
    gen.fetch_add(1, Ordering::Release);
}

/// Every interleaving (`RUSTFLAGS="--cfg loom" cargo test -p fabric-shm --lib
/// chantable::loom_tests`) of senders claiming channels while the receiver adopts or
/// frees them.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;

    /// Two channels: claim, owner, head and the claimer's name (one word, written
    /// relaxed as the name's bytes are) each, and the table's mark and generation.
    #[derive(Default)]
    struct Table {
        claim: [AtomicU64; 2],
        owner: [AtomicU64; 2],
        head: [AtomicU64; 2],
        name: [AtomicU64; 2],
        hwm: AtomicU64,
        gen: AtomicU64,
    }

    impl Table {
        /// What `Region::claim` does: the first free channel.
        fn claim(&self, nonce: u64) -> Option<(usize, u64)> {
            for c in 0..2 {
                if take(&self.claim[c], nonce) {
                    let head = self.head[c].load(Ordering::Relaxed);
                    self.name[c].store(nonce, Ordering::Relaxed);
                    publish(&self.owner[c], &self.hwm, &self.gen, c, nonce);
                    return Some((c, head));
                }
            }
            None
        }

        /// What the receiver's adoption does: every published channel below the mark,
        /// each with its claimer's name visible.
        fn adopt(&self) -> Vec<(usize, u64)> {
            let _gen = self.gen.load(Ordering::Acquire);
            let hwm = self.hwm.load(Ordering::Acquire).min(2) as usize;
            let mut seen = Vec::new();
            for c in 0..hwm {
                let k = claimed(&self.claim[c], &self.owner[c]);
                if k != 0 {
                    assert_eq!(self.name[c].load(Ordering::Relaxed), k, "name not visible");
                    seen.push((c, k));
                }
            }
            seen
        }
    }

    #[test]
    fn racing_claims_get_distinct_channels_and_are_adopted_whole() {
        loom::model(|| {
            let t = Arc::new(Table::default());
            let senders: Vec<_> = [7u64, 9]
                .into_iter()
                .map(|nonce| {
                    let t = t.clone();
                    loom::thread::spawn(move || t.claim(nonce))
                })
                .collect();
            let during = t.adopt();
            let got: Vec<_> = senders.into_iter().map(|s| s.join().unwrap()).collect();
            let (a, b) = (got[0].unwrap(), got[1].unwrap());
            assert_ne!(a.0, b.0, "one channel each");
            // What the receiver saw during the claims is part of what is there after.
            let after = t.adopt();
            assert!(during.iter().all(|x| after.contains(x)));
            assert_eq!(after.len(), 2);
            assert_eq!(t.hwm.load(Ordering::Relaxed), 2);
        });
    }

    #[test]
    fn a_channel_freed_while_claimed_again_starts_at_zero() {
        loom::model(|| {
            let t = Arc::new(Table::default());
            // Channel 0 is held by a sender that left at head 5; channel 1 by another.
            t.claim(3).unwrap();
            t.head[0].store(5, Ordering::Relaxed);
            t.claim(4).unwrap();
            let r = t.clone();
            let receiver = loom::thread::spawn(move || {
                release_begin(&r.owner[0]);
                release_end(&r.head[0], &r.claim[0], &r.gen);
            });
            let newcomer = t.claim(8);
            receiver.join().unwrap();
            if let Some((c, head)) = newcomer {
                assert_eq!((c, head), (0, 0), "the freed channel, from the start");
                assert_eq!(claimed(&t.claim[0], &t.owner[0]), 8);
            } else {
                // Too early: both were still taken, and channel 0 is free now.
                assert_eq!(claimed(&t.claim[0], &t.owner[0]), 0);
            }
        });
    }
}
