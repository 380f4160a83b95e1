//! The channel from one sending endpoint to one receiving endpoint: a bounded
//! single-producer/single-consumer ring of packet slots, plus a locked spill queue
//! that only responses use, and only when the ring is full.
//!
//! The ring's fast path is two index words written with `Release` and read with
//! `Acquire` (plain `mov`s on x86, no locked instruction). Each side caches the other
//! side's index and re-reads it only when the cache says full (producer) or empty
//! (consumer). Slots own their payload buffers, which are reused by later packets:
//! a packet is copied once, by the producer, and the consumer reads it in place.
//!
//! Exclusivity is by ownership: [`channel`] returns one [`Producer`] and one
//! [`Consumer`], neither `Clone`, and both act through `&mut self`.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fabric::provider::wire::Header;
use fabric::{NoPull, Payload};

use crate::NAME_LEN;

/// Slot buffers larger than this are freed once consumed rather than kept for reuse,
/// so one large message does not pin its size in every slot it passes through.
pub(crate) const RETAIN: usize = 64 << 10;

/// One packet.
pub(crate) struct Slot {
    hdr: Header,
    payload: Vec<u8>,
}

/// Keeps the two indices on separate cache lines (no false sharing between sides).
#[repr(align(64))]
struct Padded<T>(T);

struct Shared {
    /// Next slot the consumer reads; written by the consumer only.
    head: Padded<AtomicUsize>,
    /// Next slot the producer writes; written by the producer only.
    tail: Padded<AtomicUsize>,
    slots: Box<[UnsafeCell<Slot>]>,
    /// Packets that found the ring full (responses only), after every ring packet.
    spill: Mutex<VecDeque<Slot>>,
    /// `spill.len()` plus a spilled packet the consumer holds, published under `spill`.
    spilled: AtomicUsize,
    /// Cleared when the producer is dropped: an empty ring is then finished.
    producer_alive: AtomicBool,
    /// The sender's address, reported with every packet.
    src: [u8; NAME_LEN],
}

// SAFETY: a slot is accessed by at most one side at a time: the producer only writes
// slots in `[tail, head + cap)` (not yet published, already released by the
// consumer), the consumer only reads slots in `[head, tail)` (published, not yet
// released), and the Release/Acquire pairs on `tail` and `head` hand a slot over
// with its contents. `Producer`/`Consumer` are unique and act through `&mut self`,
// so each side is one thread at a time. Everything else is atomics or a mutex.
unsafe impl Sync for Shared {}

impl Shared {
    fn spill(&self) -> MutexGuard<'_, VecDeque<Slot>> {
        self.spill.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending end of a channel.
pub(crate) struct Producer {
    ring: Arc<Shared>,
    tail: usize,
    head_cache: usize,
    /// Oldest consumed slot whose buffer may still be taken (see `scavenge`).
    scav: usize,
}

/// The receiving end of a channel.
pub(crate) struct Consumer {
    ring: Arc<Shared>,
    head: usize,
    tail_cache: usize,
}

/// A channel of `cap` slots (a power of two) from the endpoint named `src`.
pub(crate) fn channel(cap: usize, src: [u8; NAME_LEN]) -> (Producer, Consumer) {
    assert!(
        cap.is_power_of_two(),
        "ring capacity must be a power of two"
    );
    let slots = (0..cap)
        .map(|_| {
            UnsafeCell::new(Slot {
                hdr: Header::default(),
                payload: Vec::new(),
            })
        })
        .collect();
    let ring = Arc::new(Shared {
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
        slots,
        spill: Mutex::new(VecDeque::new()),
        spilled: AtomicUsize::new(0),
        producer_alive: AtomicBool::new(true),
        src,
    });
    (
        Producer {
            ring: ring.clone(),
            tail: 0,
            head_cache: 0,
            scav: 0,
        },
        Consumer {
            ring,
            head: 0,
            tail_cache: 0,
        },
    )
}

impl Producer {
    /// Appends a packet if fewer than `limit` packets are queued (`limit` at most the
    /// capacity) and nothing is spilled (a spilled packet is older than anything the
    /// ring could take now). Returns whether it was appended.
    #[inline]
    pub(crate) fn push(&mut self, hdr: &Header, payload: &[&[u8]], limit: usize) -> bool {
        let r = &*self.ring;
        let limit = limit.min(r.slots.len());
        if self.tail.wrapping_sub(self.head_cache) >= limit {
            self.head_cache = r.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_cache) >= limit {
                return false;
            }
        }
        if r.spilled.load(Ordering::Acquire) != 0 {
            return false;
        }
        let cell = &r.slots[self.tail & (r.slots.len() - 1)];
        // SAFETY: `tail - head < cap`, so the consumer has released this slot (its
        // Release store of `head`, read above with Acquire, ordered its last use
        // before this write), and it cannot read the slot before the Release store of
        // the new `tail` below. `&mut self` makes this the only producer.
        let slot = unsafe { &mut *cell.get() };
        slot.hdr = *hdr;
        slot.payload.clear();
        let len = match payload {
            [one] => one.len(),
            many => many.iter().map(|p| p.len()).sum(),
        };
        if slot.payload.capacity() < len {
            scavenge(
                r,
                self.tail,
                &mut self.head_cache,
                &mut self.scav,
                &mut slot.payload,
                len,
            );
        }
        for p in payload {
            slot.payload.extend_from_slice(p);
        }
        self.tail = self.tail.wrapping_add(1);
        r.tail.0.store(self.tail, Ordering::Release);
        true
    }

    /// Appends a packet that must not be refused: into the ring if it has room,
    /// otherwise into the spill queue (a lock and an allocation, off the fast path).
    pub(crate) fn push_always(&mut self, hdr: &Header, payload: &[&[u8]]) {
        let cap = self.ring.slots.len();
        if self.push(hdr, payload, cap) {
            return;
        }
        self.spill_push(hdr, payload);
    }

    #[cold]
    fn spill_push(&mut self, hdr: &Header, payload: &[&[u8]]) {
        let mut buf = Vec::with_capacity(payload.iter().map(|p| p.len()).sum());
        for p in payload {
            buf.extend_from_slice(p);
        }
        let mut q = self.ring.spill();
        q.push_back(Slot {
            hdr: *hdr,
            payload: buf,
        });
        let held = self.ring.spilled.load(Ordering::Relaxed) - (q.len() - 1);
        self.ring.spilled.store(q.len() + held, Ordering::Release);
    }
}

/// Gives `buf` (the empty buffer of the slot at `tail`) the buffer of a consumed
/// slot, oldest first, so buffers travel with the producer around the ring: a
/// channel needs as many buffers as packets in flight, not one per slot, and a
/// steady stream allocates nothing even on its first trip around the ring.
#[cold]
fn scavenge(
    r: &Shared,
    tail: usize,
    head_cache: &mut usize,
    scav: &mut usize,
    buf: &mut Vec<u8>,
    len: usize,
) {
    let cap = r.slots.len();
    *head_cache = r.head.0.load(Ordering::Acquire);
    // Slots in (tail - cap, head) are consumed and not yet rewritten; the slot at
    // tail - cap is the one being written (`buf`).
    if tail.wrapping_sub(*scav) >= cap {
        *scav = tail.wrapping_sub(cap).wrapping_add(1);
    }
    while *scav != *head_cache && head_cache.wrapping_sub(*scav) <= cap {
        let cell = &r.slots[*scav & (cap - 1)];
        *scav = scav.wrapping_add(1);
        // SAFETY: the slot is in (tail - cap, head): the consumer released it
        // (Release store of `head`, read above with Acquire) and the producer
        // rewrites it only at index + cap > tail, so nobody else touches it; it is
        // not the slot `buf` belongs to (that one is at tail - cap).
        let other = unsafe { &mut *cell.get() };
        std::mem::swap(buf, &mut other.payload);
        buf.clear();
        if buf.capacity() >= len {
            return;
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.ring.producer_alive.store(false, Ordering::Release);
    }
}

/// How a [`Consumer::drain`] ended.
pub(crate) enum Drained {
    /// Nothing left for now.
    Empty,
    /// Nothing left and the producer is gone: the channel can be dropped.
    Finished,
    /// The handler refused a packet: it stays first.
    Refused,
}

impl Consumer {
    /// Hands packets to `f` in order until it refuses one or none is left; counts the
    /// consumed ones into `n`.
    #[inline]
    pub(crate) fn drain<F: FnMut(&Header, &[u8], Payload<'_, NoPull>) -> bool>(
        &mut self,
        f: &mut F,
        n: &mut usize,
    ) -> Drained {
        let r = &*self.ring;
        loop {
            if self.head == self.tail_cache {
                self.tail_cache = r.tail.0.load(Ordering::Acquire);
            }
            if self.head != self.tail_cache {
                let cell = &r.slots[self.head & (r.slots.len() - 1)];
                // SAFETY: `head < tail`: the producer published this slot with its
                // Release store of `tail` (read above with Acquire) and does not touch
                // it again before our Release store of the advanced `head`. The
                // handler may send into this same channel (an endpoint talking to
                // itself): that writes other slots only.
                let slot = unsafe { &mut *cell.get() };
                // Payloads are copied into the ring: always in the packet.
                if !f(&slot.hdr, &r.src, Payload::Inline(slot.payload[..].into())) {
                    return Drained::Refused;
                }
                if slot.payload.capacity() > RETAIN {
                    slot.payload = Vec::new();
                }
                self.head = self.head.wrapping_add(1);
                r.head.0.store(self.head, Ordering::Release);
                *n += 1;
                continue;
            }
            if r.spilled.load(Ordering::Acquire) != 0 {
                match drain_spill(r, self.head, f, n) {
                    Some(d) => return d,
                    None => continue,
                }
            }
            if !r.producer_alive.load(Ordering::Acquire)
                && r.tail.0.load(Ordering::Acquire) == self.head
            {
                return Drained::Finished;
            }
            return Drained::Empty;
        }
    }
}

/// Handles spilled packets once the ring is empty (the consumer is at `head`).
/// `None`: the ring has packets again (older than any spilled one), go back to it.
#[cold]
fn drain_spill<F: FnMut(&Header, &[u8], Payload<'_, NoPull>) -> bool>(
    r: &Shared,
    head: usize,
    f: &mut F,
    n: &mut usize,
) -> Option<Drained> {
    loop {
        let p = {
            let mut q = r.spill();
            // Under the lock every ring packet pushed before a spilled one is
            // visible (the producer pushed it before taking the lock).
            if r.tail.0.load(Ordering::Acquire) != head {
                return None;
            }
            match q.pop_front() {
                Some(p) => p,
                None => return Some(Drained::Empty),
            }
            // `spilled` still counts `p`: the producer keeps spilling meanwhile.
        };
        // The lock is not held here: the handler may send into this channel.
        let ok = f(&p.hdr, &r.src, Payload::Inline(p.payload[..].into()));
        let mut q = r.spill();
        if !ok {
            q.push_front(p);
            r.spilled.store(q.len(), Ordering::Release);
            return Some(Drained::Refused);
        }
        *n += 1;
        r.spilled.store(q.len(), Ordering::Release);
        if q.is_empty() {
            return Some(Drained::Empty);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn hdr(i: u64) -> Header {
        Header {
            tag: i,
            ..Header::default()
        }
    }

    fn collect(c: &mut Consumer, out: &mut Vec<u64>) -> usize {
        let mut n = 0;
        c.drain(
            &mut |h: &Header, src: &[u8], p: Payload<'_, NoPull>| {
                assert_eq!(src, &[7u8; NAME_LEN]);
                assert_eq!(
                    p.inline().map(|s| s.to_vec()),
                    Some(h.tag.to_le_bytes().to_vec())
                );
                out.push(h.tag);
                true
            },
            &mut n,
        );
        n
    }

    #[test]
    fn fifo_limit_and_reuse() {
        let (mut p, mut c) = channel(4, [7; NAME_LEN]);
        for i in 0..3 {
            assert!(p.push(&hdr(i), &[&i.to_le_bytes()], 3));
        }
        assert!(!p.push(&hdr(9), &[&9u64.to_le_bytes()], 3));
        let mut out = vec![];
        assert_eq!(collect(&mut c, &mut out), 3);
        assert_eq!(out, [0, 1, 2]);
        // Slots come around again with their buffers.
        for i in 3..7 {
            assert!(p.push(&hdr(i), &[&i.to_le_bytes()], 4));
        }
        assert!(!p.push(&hdr(9), &[&9u64.to_le_bytes()], 4));
        assert_eq!(collect(&mut c, &mut out), 4);
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn refused_packet_stays_first() {
        let (mut p, mut c) = channel(4, [7; NAME_LEN]);
        p.push(&hdr(1), &[&1u64.to_le_bytes()], 4);
        p.push(&hdr(2), &[&2u64.to_le_bytes()], 4);
        let mut n = 0;
        let mut first = true;
        let d = c.drain(
            &mut |h: &Header, _: &[u8], _: Payload<'_, NoPull>| {
                assert_eq!(h.tag, 1);
                !std::mem::take(&mut first)
            },
            &mut n,
        );
        assert!(matches!(d, Drained::Refused));
        assert_eq!(n, 0);
        let mut out = vec![];
        assert_eq!(collect(&mut c, &mut out), 2);
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn spill_keeps_order_and_refuses_requests_meanwhile() {
        let (mut p, mut c) = channel(2, [7; NAME_LEN]);
        for i in 0..5 {
            p.push_always(&hdr(i), &[&i.to_le_bytes()]);
        }
        // Spilled packets exist: a request would overtake them.
        assert!(!p.push(&hdr(99), &[&99u64.to_le_bytes()], 2));
        let mut out = vec![];
        assert_eq!(collect(&mut c, &mut out), 5);
        assert_eq!(out, [0, 1, 2, 3, 4]);
        assert!(p.push(&hdr(5), &[&5u64.to_le_bytes()], 2));
        assert_eq!(collect(&mut c, &mut out), 1);
        assert_eq!(out, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn finished_after_producer_drop() {
        let (mut p, mut c) = channel(2, [7; NAME_LEN]);
        p.push(&hdr(0), &[&0u64.to_le_bytes()], 2);
        drop(p);
        let mut out = vec![];
        let mut n = 0;
        let d = c.drain(
            &mut |h: &Header, _: &[u8], _: Payload<'_, NoPull>| {
                out.push(h.tag);
                true
            },
            &mut n,
        );
        assert!(matches!(d, Drained::Finished));
        assert_eq!(out, [0]);
    }

    #[test]
    fn large_buffers_not_retained() {
        let (mut p, mut c) = channel(2, [7; NAME_LEN]);
        let big = vec![1u8; RETAIN + 1];
        p.push(&hdr(0), &[&big], 2);
        let mut n = 0;
        c.drain(
            &mut |_: &Header, _: &[u8], x: Payload<'_, NoPull>| x.len() == RETAIN + 1,
            &mut n,
        );
        assert_eq!(n, 1);
        // SAFETY: the consumer released the slot and no producer runs concurrently.
        assert_eq!(unsafe { &*c.ring.slots[0].get() }.payload.capacity(), 0);
    }

    /// A stream with a few packets in flight keeps reusing the same buffers, even on
    /// its first trip around the ring.
    #[test]
    fn buffers_travel_with_the_producer() {
        let (mut p, mut c) = channel(64, [7; NAME_LEN]);
        let mut out = vec![];
        for round in 0..40u64 {
            for k in 0..3 {
                let i = round * 3 + k;
                assert!(p.push(&hdr(i), &[&i.to_le_bytes()], 64));
            }
            collect(&mut c, &mut out);
        }
        // SAFETY: no push or drain runs while the slots are inspected.
        let with_buf = c
            .ring
            .slots
            .iter()
            .filter(|s| unsafe { &*s.get() }.payload.capacity() > 0)
            .count();
        assert_eq!(with_buf, 3);
        assert_eq!(out, (0..120).collect::<Vec<_>>());
    }

    /// Two threads, a small ring, requests with backpressure mixed with responses
    /// that may spill: every packet arrives exactly once, in order.
    #[test]
    fn stress_two_threads() {
        const N: u64 = 200_000;
        let (mut p, mut c) = channel(64, [7; NAME_LEN]);
        let prod = thread::spawn(move || {
            let mut i = 0;
            while i < N {
                let b = i.to_le_bytes();
                let payload: [&[u8]; 2] = [&b[..3], &b[3..]];
                if i % 7 == 0 {
                    p.push_always(&hdr(i), &payload);
                } else if !p.push(&hdr(i), &payload, 48) {
                    thread::yield_now();
                    continue;
                }
                i += 1;
            }
        });
        let mut next = 0u64;
        let mut n = 0;
        while next < N {
            match c.drain(
                &mut |h: &Header, _: &[u8], x: Payload<'_, NoPull>| {
                    assert_eq!(h.tag, next);
                    assert_eq!(
                        x.inline().map(|s| s.to_vec()),
                        Some(next.to_le_bytes().to_vec())
                    );
                    next += 1;
                    true
                },
                &mut n,
            ) {
                Drained::Refused => unreachable!(),
                Drained::Finished => break,
                Drained::Empty => thread::yield_now(),
            }
        }
        prod.join().unwrap();
        assert_eq!(next, N);
        assert_eq!(n as u64, N);
    }
}
