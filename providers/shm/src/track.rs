//! Requests an endpoint sent that wait for a response, so that when their peer dies
//! each one can be answered with an error ([`fabric::Error::HostUnreach`]) instead of
//! waiting forever.
//!
//! A request is tracked by its sender before the packet becomes visible and untracked
//! when its response arrives (or when the send fails). Both happen on every RMA,
//! atomic and acknowledged message, so the common case is one slot of a direct-mapped
//! table indexed by the request id, claimed and freed without a lock: the core's ids
//! of requests in flight at the same time differ in their low bits (a pending-table
//! index), so they rarely share a slot. A request whose slot is taken goes to an
//! overflow map behind a mutex, which is consulted only while it holds something.
//!
//! Each slot's state word is `seq << 2 | tag`: empty or full. The tracker (one at a
//! time: the endpoint's sender) writes the fields of an empty slot and publishes it
//! full with a release store; a remover moves it full → empty with the next `seq` by
//! compare-and-swap, so a remover that read the fields of a full slot frees it only
//! if it is still the same occupancy (no ABA; fields it read while a new occupancy
//! was being written are then discarded), and at most one remover wins. While a slot
//! is full its fields do not change.

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

use fabric::provider::wire::Op;
use rustc_hash::FxHashMap;

/// Slots of the direct-mapped table: the core's default transmit queue depth, so one
/// context's requests in flight each find their own slot.
#[cfg(not(loom))]
const SLOTS: usize = 1024;
/// Under loom: few slots, so collisions and overflow come quickly.
#[cfg(loom)]
const SLOTS: usize = 2;

const EMPTY: u64 = 0;
const FULL: u64 = 2;
const TAG: u64 = 3;

#[derive(Default)]
struct Slot {
    state: AtomicU64,
    req: AtomicU64,
    nonce: AtomicU64,
    /// Transmit context in the low 16 bits, response op above.
    meta: AtomicU32,
}

/// A tracked request: who it went to and which response op answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracked {
    /// Transmit context of the request.
    pub tx_idx: u16,
    /// The request id.
    pub req: u64,
    /// Nonce of the peer the request went to.
    pub nonce: u64,
    /// The response op that answers it.
    pub op: Op,
}

/// The requests of one endpoint awaiting responses.
pub struct Track {
    slots: Box<[Slot]>,
    overflow: Mutex<FxHashMap<(u16, u64), (u64, Op)>>,
    /// Entries in `overflow`, read without its lock.
    overflowed: AtomicUsize,
    /// Set once anything was tracked: endpoints that never expect a response skip
    /// every lookup.
    used: AtomicBool,
    /// Slots `0..span` are the only ones ever filled: the liveness sweep looks at
    /// those (the core reuses its lowest free ids, so usually a handful).
    span: AtomicUsize,
}

impl Default for Track {
    fn default() -> Self {
        Track {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            overflow: Mutex::new(FxHashMap::default()),
            overflowed: AtomicUsize::new(0),
            used: AtomicBool::new(false),
            span: AtomicUsize::new(0),
        }
    }
}

#[inline]
fn index(tx_idx: u16, req: u64) -> usize {
    (req as usize ^ (tx_idx as usize).wrapping_mul(0x9e37)) & (SLOTS - 1)
}

#[inline]
fn meta(tx_idx: u16, op: Op) -> u32 {
    u32::from(tx_idx) | (op as u32) << 16
}

impl Track {
    fn overflow(&self) -> MutexGuard<'_, FxHashMap<(u16, u64), (u64, Op)>> {
        self.overflow.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether anything was ever tracked.
    #[inline]
    pub fn used(&self) -> bool {
        self.used.load(Ordering::Relaxed)
    }

    /// Records request (`tx_idx`, `req`) to peer `nonce`, answered by `op`.
    ///
    /// Callers are serialized (the endpoint's one sender, which the core serializes):
    /// an empty slot then stays empty until this call fills it, since removers only
    /// ever act on full ones, so its fields are written while it reads empty and it
    /// is published full with one release store, without a compare-and-swap (a
    /// locked instruction on every request).
    #[inline]
    pub fn track(&self, tx_idx: u16, req: u64, nonce: u64, op: Op) {
        let i = index(tx_idx, req);
        let s = &self.slots[i];
        // Acquire: the remover that emptied the slot read its old fields before
        // (its compare-and-swap releases them), so they cannot see these stores.
        let st = s.state.load(Ordering::Acquire);
        if st & TAG == EMPTY {
            s.req.store(req, Ordering::Relaxed);
            s.nonce.store(nonce, Ordering::Relaxed);
            s.meta.store(meta(tx_idx, op), Ordering::Relaxed);
            s.state.store(st | FULL, Ordering::Release);
            if i >= self.span.load(Ordering::Relaxed) {
                self.grow(i);
            }
        } else {
            self.track_overflow(tx_idx, req, nonce, op);
        }
    }

    /// Extends `span` to cover slot `i`. Only senders (serialized by the core) grow
    /// it, so a plain maximum suffices; the sweep reads it after the slot's state.
    #[cold]
    #[inline(never)]
    fn grow(&self, i: usize) {
        self.span.fetch_max(i + 1, Ordering::Release);
        self.used.store(true, Ordering::Relaxed);
    }

    #[cold]
    #[inline(never)]
    fn track_overflow(&self, tx_idx: u16, req: u64, nonce: u64, op: Op) {
        let mut m = self.overflow();
        if m.insert((tx_idx, req), (nonce, op)).is_none() {
            self.overflowed.fetch_add(1, Ordering::Relaxed);
        }
        self.used.store(true, Ordering::Relaxed);
    }

    /// Forgets request (`tx_idx`, `req`) sent to the peer with `nonce`: its response
    /// arrived from that peer, or it was never sent. Returns whether it was tracked;
    /// an id that is unknown, or that went to another peer, is left alone.
    #[inline]
    pub fn untrack(&self, tx_idx: u16, req: u64, nonce: u64) -> bool {
        let s = &self.slots[index(tx_idx, req)];
        let st = s.state.load(Ordering::Acquire);
        if st & TAG == FULL
            && s.req.load(Ordering::Relaxed) == req
            && s.meta.load(Ordering::Relaxed) as u16 == tx_idx
            && s.nonce.load(Ordering::Relaxed) == nonce
            && free(s, st)
        {
            return true;
        }
        self.overflowed.load(Ordering::Relaxed) != 0 && self.untrack_overflow(tx_idx, req, nonce)
    }

    #[cold]
    #[inline(never)]
    fn untrack_overflow(&self, tx_idx: u16, req: u64, nonce: u64) -> bool {
        let mut m = self.overflow();
        let found = m.get(&(tx_idx, req)).is_some_and(|&(n, _)| n == nonce)
            && m.remove(&(tx_idx, req)).is_some();
        if found {
            self.overflowed.fetch_sub(1, Ordering::Relaxed);
        }
        found
    }

    /// The slots that may be full.
    fn live(&self) -> &[Slot] {
        &self.slots[..self.span.load(Ordering::Acquire).min(SLOTS)]
    }

    /// Whether `f` holds for the peer of any tracked request (some peers may be asked
    /// more than once). Allocates nothing: the liveness round calls it every 10 ms.
    pub fn any(&self, mut f: impl FnMut(u64) -> bool) -> bool {
        for s in self.live() {
            if s.state.load(Ordering::Acquire) & TAG == FULL && f(s.nonce.load(Ordering::Relaxed)) {
                return true;
            }
        }
        self.overflowed.load(Ordering::Relaxed) != 0
            && self.overflow().values().any(|&(nonce, _)| f(nonce))
    }

    /// Nonces of the peers tracked requests wait on, each once.
    #[cfg(test)]
    pub fn peers(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut add = |n: u64| {
            if !v.contains(&n) {
                v.push(n);
            }
        };
        for s in self.live() {
            if s.state.load(Ordering::Acquire) & TAG == FULL {
                add(s.nonce.load(Ordering::Relaxed));
            }
        }
        if self.overflowed.load(Ordering::Relaxed) != 0 {
            for (nonce, _) in self.overflow().values() {
                add(*nonce);
            }
        }
        v
    }

    /// Removes and returns every request waiting on a peer for which `dead` holds.
    pub fn take_if(&self, mut dead: impl FnMut(u64) -> bool) -> Vec<Tracked> {
        let mut out = Vec::new();
        for s in self.live() {
            let st = s.state.load(Ordering::Acquire);
            if st & TAG != FULL {
                continue;
            }
            let nonce = s.nonce.load(Ordering::Relaxed);
            if !dead(nonce) {
                continue;
            }
            let req = s.req.load(Ordering::Relaxed);
            let m = s.meta.load(Ordering::Relaxed);
            // Only a response op is ever stored; the fields are read under `st`, and
            // `free` succeeds only if the slot still holds that occupancy.
            let op = Op::from_raw((m >> 16) as u8).unwrap_or(Op::Ack);
            if free(s, st) {
                out.push(Tracked {
                    tx_idx: m as u16,
                    req,
                    nonce,
                    op,
                });
            }
        }
        if self.overflowed.load(Ordering::Relaxed) != 0 {
            let mut m = self.overflow();
            m.retain(|&(tx_idx, req), &mut (nonce, op)| {
                if dead(nonce) {
                    out.push(Tracked {
                        tx_idx,
                        req,
                        nonce,
                        op,
                    });
                    false
                } else {
                    true
                }
            });
            self.overflowed.store(m.len(), Ordering::Relaxed);
        }
        out
    }
}

/// Frees slot `s` if it is still in full state `st`.
#[inline]
fn free(s: &Slot, st: u64) -> bool {
    s.state
        .compare_exchange(
            st,
            (st & !TAG) + (TAG + 1),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn track_untrack_direct_and_overflow() {
        let t = Track::default();
        assert!(!t.used());
        t.track(0, 5, 77, Op::AtomicResp);
        assert!(t.used());
        // Same slot, different id: overflows.
        t.track(0, 5 + SLOTS as u64, 78, Op::Ack);
        assert_eq!(t.overflowed.load(Ordering::Relaxed), 1);
        let mut peers = t.peers();
        peers.sort_unstable();
        assert_eq!(peers, vec![77, 78]);
        assert!(!t.untrack(1, 5, 77), "another context's id");
        assert!(!t.untrack(0, 5, 78), "another peer's answer");
        assert!(!t.untrack(0, 5 + SLOTS as u64, 77), "another peer's answer");
        assert!(t.untrack(0, 5, 77));
        assert!(!t.untrack(0, 5, 77), "already gone");
        assert!(t.untrack(0, 5 + SLOTS as u64, 78));
        assert_eq!(t.overflowed.load(Ordering::Relaxed), 0);
        assert!(t.peers().is_empty());
        // The freed slot takes a new request.
        t.track(0, 5, 79, Op::ReadResp);
        assert_eq!(t.peers(), vec![79]);
    }

    #[test]
    fn take_if_removes_only_dead_peers() {
        let t = Track::default();
        for i in 0..(SLOTS as u64 + 10) {
            let nonce = if i % 2 == 0 { 1 } else { 2 };
            t.track(3, i, nonce, Op::Ack);
        }
        // Ids SLOTS.. collide with 0..: those went to the overflow map.
        assert_eq!(t.overflowed.load(Ordering::Relaxed), 10);
        let mut dead = t.take_if(|n| n == 2);
        assert_eq!(dead.len(), (SLOTS + 10) / 2);
        assert!(dead
            .iter()
            .all(|d| d.nonce == 2 && d.tx_idx == 3 && d.op == Op::Ack));
        dead.sort_unstable_by_key(|d| d.req);
        assert!(dead
            .iter()
            .map(|d| d.req)
            .eq((0..SLOTS as u64 + 10).filter(|i| i % 2 == 1)));
        assert_eq!(t.peers(), vec![1]);
        assert!(t.take_if(|n| n == 2).is_empty());
        assert!(t.untrack(3, 0, 1));
        assert!(!t.untrack(3, 1, 2));
        assert_eq!(t.take_if(|_| true).len(), (SLOTS + 10) / 2 - 1);
        assert!(t.peers().is_empty());
    }
}

/// Every interleaving (`RUSTFLAGS="--cfg loom" cargo test -p fabric-shm --lib
/// track::loom_tests`) of a sender tracking requests, the poller untracking the one
/// whose response arrived, and the liveness sweep taking everything of a dead peer:
/// each tracked request is removed exactly once, by one of them, whatever the order.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn racing_removers_take_a_request_once() {
        loom::model(|| {
            let t = Arc::new(Track::default());
            t.track(0, 0, 7, Op::AtomicResp);
            let poller = {
                let t = t.clone();
                loom::thread::spawn(move || t.untrack(0, 0, 7))
            };
            let swept = t.take_if(|n| n == 7).len();
            let untracked = usize::from(poller.join().unwrap());
            assert_eq!(swept + untracked, 1);
        });
    }

    #[test]
    fn each_request_is_removed_once() {
        loom::model(|| {
            let t = Arc::new(Track::default());
            // Requests 0 and SLOTS share a slot: the second goes to the overflow map
            // unless the first was removed by then.
            let sender = {
                let t = t.clone();
                loom::thread::spawn(move || {
                    t.track(0, 0, 7, Op::AtomicResp);
                    t.track(0, SLOTS as u64, 7, Op::Ack);
                })
            };
            let poller = {
                let t = t.clone();
                loom::thread::spawn(move || usize::from(t.untrack(0, 0, 7)))
            };
            let swept = t.take_if(|n| n == 7);
            let untracked = poller.join().unwrap();
            sender.join().unwrap();
            let rest = t.take_if(|_| true);
            let mut removed: Vec<u64> = swept.iter().chain(&rest).map(|r| r.req).collect();
            removed.sort_unstable();
            // Request 0 by exactly one remover, request SLOTS by a sweep.
            let want: Vec<u64> = if untracked == 1 {
                vec![SLOTS as u64]
            } else {
                vec![0, SLOTS as u64]
            };
            assert_eq!(removed, want);
            assert!(t.peers().is_empty());
        });
    }
}
