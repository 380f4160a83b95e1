//! Per-context state: what a transmit and a receive context hold.

use std::sync::Arc;

use crate::config::{Config, LockOf};
use crate::engine::av::AvInner;
use crate::engine::cntr::CntrInner;
use crate::engine::cq::CqInner;
use crate::engine::matching::Matcher;
use crate::flags::{Caps, CqFlags};
use crate::lock::Lock;
use crate::mem::RawIov;
use crate::types::{Context, FiAddr};

use super::owned::{CntrKind, OwnedTx};

/// Default transmit/receive queue depth.
pub const DEFAULT_QUEUE_SIZE: usize = 1024;
/// Default `FI_OPT_MIN_MULTI_RECV`.
pub const DEFAULT_MIN_MULTI_RECV: usize = 64;

/// What an operation awaiting a response remembers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) ctx: Context,
    pub(crate) flags: CqFlags,
    pub(crate) len: usize,
    pub(crate) result: RawIov,
    pub(crate) want: bool,
    pub(crate) cntr: CntrKind,
}

impl Pending {
    /// What an unused slot holds.
    const VACANT: Pending = Pending {
        ctx: Context(0),
        flags: CqFlags::empty(),
        len: 0,
        result: RawIov::EMPTY,
        want: false,
        cntr: CntrKind::Send,
    };
}

/// Fixed-capacity table of pending operations; ids carry a generation so a stale or
/// forged response id is ignored.
///
/// Slot `i`'s generation is odd while it holds an operation and even while it is free;
/// an id is the generation it was issued at (odd) and `i`. Taking an operation frees its
/// slot and leaves its fields in place ([`PendingTable::release`] then
/// [`PendingTable::get`]), so a response reads them without copying them out.
pub(crate) struct PendingTable {
    slots: Vec<Pending>,
    gens: Vec<u32>,
    free: Vec<u32>,
}

impl PendingTable {
    pub(crate) fn new(cap: usize) -> Self {
        PendingTable {
            slots: vec![Pending::VACANT; cap],
            gens: vec![0; cap],
            free: (0..cap as u32).rev().collect(),
        }
    }

    /// Records `p`; its id, or `None` when the table is full.
    #[inline]
    pub(crate) fn insert(&mut self, p: Pending) -> Option<u64> {
        let (id, slot) = self.claim()?;
        *slot = p;
        Some(id)
    }

    /// Takes a free slot for an operation: its id and the entry to fill in (every field
    /// of it: it holds whatever it held before). `None` when the table is full.
    #[inline]
    pub(crate) fn claim(&mut self) -> Option<(u64, &mut Pending)> {
        let i = self.free.pop()? as usize;
        let (Some(g), Some(slot)) = (self.gens.get_mut(i), self.slots.get_mut(i)) else {
            return None;
        };
        *g = g.wrapping_add(1);
        Some((((*g as u64) << 32) | i as u64, slot))
    }

    /// Frees the slot of the operation with `id` and returns its index, whose fields
    /// [`Self::get`] reads until the next [`Self::insert`]. `None` for an id that is not
    /// pending (unknown, stale, forged).
    #[inline]
    pub(crate) fn release(&mut self, id: u64) -> Option<usize> {
        let i = (id as u32) as usize;
        let g = self.gens.get_mut(i)?;
        let want = (id >> 32) as u32;
        if *g != want || want & 1 == 0 {
            return None;
        }
        *g = g.wrapping_add(1);
        self.free.push(i as u32);
        Some(i)
    }

    /// The fields of the operation last recorded in slot `i` (a [`Self::release`]d
    /// index).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &Pending {
        &self.slots[i]
    }

    /// The operation with `id`, left pending (`None` if it is not pending).
    #[inline]
    pub(crate) fn peek(&self, id: u64) -> Option<&Pending> {
        let i = (id as u32) as usize;
        let want = (id >> 32) as u32;
        match self.gens.get(i) {
            Some(&g) if g == want && want & 1 == 1 => self.slots.get(i),
            _ => None,
        }
    }

    /// Removes the operation with `id` and returns it (`None` if it is not pending).
    #[inline]
    pub(crate) fn take(&mut self, id: u64) -> Option<Pending> {
        self.release(id).map(|i| self.slots[i])
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn drain(&mut self) -> Vec<Pending> {
        let mut v = Vec::new();
        for (i, g) in self.gens.iter_mut().enumerate() {
            if *g & 1 == 1 {
                *g = g.wrapping_add(1);
                v.push(self.slots[i]);
                self.free.push(i as u32);
            }
        }
        v
    }
}

#[cfg(test)]
mod pending_tests {
    use super::*;

    fn op(ctx: u64) -> Pending {
        Pending {
            ctx: Context(ctx as usize),
            ..Pending::VACANT
        }
    }

    #[test]
    fn ids_are_checked_and_single_use() {
        let mut t = PendingTable::new(2);
        let a = t.insert(op(1)).unwrap();
        let b = t.insert(op(2)).unwrap();
        assert!(t.insert(op(3)).is_none());
        assert_eq!(t.in_flight(), 2);
        // Forged: another generation, an out-of-range index, an even (free) generation.
        assert!(t.take(a ^ 1 << 33).is_none());
        assert!(t.take(a | 0xffff).is_none());
        assert!(t.take(a & 0xffff_ffff).is_none());
        assert_eq!(t.peek(a).map(|p| p.ctx), Some(Context(1)));
        assert!(t.peek(a ^ 1 << 33).is_none() && t.peek(a & 0xffff_ffff).is_none());
        assert_eq!(t.take(a).map(|p| p.ctx), Some(Context(1)));
        assert!(t.peek(a).is_none());
        // Replayed: the slot is free now, and stays refused once reused.
        assert!(t.take(a).is_none());
        let c = t.insert(op(4)).unwrap();
        assert_ne!(c, a);
        assert!(t.release(a).is_none());
        let i = t.release(c).unwrap();
        assert_eq!(t.get(i).ctx, Context(4));
        assert_eq!(t.drain().len(), 1);
        assert!(t.take(b).is_none());
        assert_eq!((t.in_flight(), t.capacity()), (0, 2));
    }
}

/// Bindings shared by both directions.
pub(crate) struct Bindings<S: Config> {
    pub(crate) cq: Option<Arc<CqInner<S>>>,
    pub(crate) selective: bool,
}

impl<S: Config> Default for Bindings<S> {
    fn default() -> Self {
        Bindings {
            cq: None,
            selective: false,
        }
    }
}

pub(crate) struct TxState<S: Config> {
    pub(crate) enabled: bool,
    pub(crate) caps: Caps,
    pub(crate) bind: Bindings<S>,
    pub(crate) cntr_send: Option<Arc<CntrInner<S>>>,
    pub(crate) cntr_read: Option<Arc<CntrInner<S>>>,
    pub(crate) cntr_write: Option<Arc<CntrInner<S>>>,
    pub(crate) av: Option<Arc<AvInner<S>>>,
    pub(crate) pending: PendingTable,
    /// Operations held back by an `FI_FENCE` (and everything posted after it).
    pub(crate) fenced: std::collections::VecDeque<OwnedTx>,
    /// Sends that completed when sent while the transport held bytes back
    /// ([`HeldBack`](crate::provider::HeldBack)): reported once it holds none.
    pub(crate) sent: std::collections::VecDeque<Sent>,
    pub(crate) inject_size: usize,
    pub(crate) max_msg_size: usize,
}

/// Held send completions (`TxState::sent`) a transmit context has room for before it
/// grows the queue.
const SENT_ROOM: usize = 64;

/// The completion of a send held back while its bytes may still be held
/// ([`TxState::sent`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    pub(crate) ck: CntrKind,
    pub(crate) want: bool,
    pub(crate) ctx: Context,
    pub(crate) flags: CqFlags,
    pub(crate) len: usize,
}

/// A posted receive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PostedRecv {
    pub(crate) iov: RawIov,
    pub(crate) ctx: Context,
    pub(crate) multi: bool,
    pub(crate) consumed: usize,
    pub(crate) want: bool,
}

/// A message that arrived before a matching receive.
#[derive(Debug)]
pub(crate) struct Unexp {
    pub(crate) buf: Vec<u8>,
    pub(crate) data: Option<u64>,
    pub(crate) tag: u64,
    pub(crate) src: FiAddr,
    /// The sender's name while `src` is unknown because the sender was not in the AV
    /// when the message arrived (see [`RxState::unresolved`]).
    pub(crate) src_name: Option<Box<[u8]>>,
    /// The payload did not arrive whole (its sender vanished mid-copy): the receive
    /// that takes it completes with `FI_EIO`.
    pub(crate) failed: bool,
}

pub(crate) struct RxState<S: Config> {
    pub(crate) enabled: bool,
    pub(crate) caps: Caps,
    pub(crate) bind: Bindings<S>,
    pub(crate) cntr_recv: Option<Arc<CntrInner<S>>>,
    pub(crate) cntr_rem_read: Option<Arc<CntrInner<S>>>,
    pub(crate) cntr_rem_write: Option<Arc<CntrInner<S>>>,
    pub(crate) av: Option<Arc<AvInner<S>>>,
    pub(crate) tagged: Matcher<PostedRecv, Unexp>,
    pub(crate) msg: Matcher<PostedRecv, Unexp>,
    pub(crate) size: usize,
    pub(crate) min_multi_recv: usize,
    /// Messages claimed with `FI_PEEK | FI_CLAIM`, by the claiming context.
    pub(crate) claimed: Vec<(Context, Unexp)>,
    /// At least how many unexpected messages have a sender that was not in the AV when
    /// they arrived. A peer may send before the receiver inserts it (Open MPI inserts a
    /// peer when it first addresses it): the receive then posted for that peer's new
    /// address must still match them, so receives look their senders up again first.
    pub(crate) unresolved: usize,
    /// Unexpected-message buffers: recycled, and bounded in bytes.
    pub(crate) pool: UnexpBufs,
}

/// Most bytes of unexpected messages one receive context buffers before arrivals are
/// held back in the transport (which then pushes back on senders): a flood of large
/// sends with no receive posted costs the receiver this much, not the flood.
pub const UNEXPECTED_BYTES: usize = 64 << 20;
/// Largest buffer kept for reuse after its message was received: a large unexpected
/// message's buffer goes back to the system.
const POOL_BUF_MAX: usize = 64 << 10;
/// Most buffers kept for reuse.
const POOL_MAX: usize = 256;

/// The buffers of a receive context's unexpected messages: those in use, counted in
/// bytes against [`UNEXPECTED_BYTES`], and small ones recycled so that steady traffic
/// allocates nothing.
#[derive(Default)]
pub(crate) struct UnexpBufs {
    free: Vec<Vec<u8>>,
    held: usize,
}

impl UnexpBufs {
    /// Whether a message of `len` bytes may be buffered now: always when none is (so
    /// any message can be received), else within [`UNEXPECTED_BYTES`].
    #[inline]
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.held == 0 || self.held.saturating_add(len) <= UNEXPECTED_BYTES
    }

    /// A buffer to fill (a recycled one when there is one).
    #[inline]
    pub(crate) fn take(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_default()
    }

    /// Counts `buf`, now filled with an unexpected message, as held.
    #[inline]
    pub(crate) fn hold(&mut self, buf: &[u8]) {
        self.held += buf.len();
    }

    /// Gives back the buffer of a message that was received or discarded.
    #[inline]
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        self.held = self.held.saturating_sub(buf.len());
        if buf.capacity() <= POOL_BUF_MAX && self.free.len() < POOL_MAX {
            self.free.push(buf);
        }
    }

    /// Buffers kept for reuse.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.free.len()
    }

    /// Bytes of unexpected messages buffered.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

/// A transmit context (an endpoint's own, a scalable endpoint's, or a shared one).
pub(crate) struct TxCtx<S: Config> {
    pub(crate) state: LockOf<S, TxState<S>>,
}

/// A receive context.
pub(crate) struct RxCtx<S: Config> {
    pub(crate) state: LockOf<S, RxState<S>>,
}

impl<S: Config> TxCtx<S> {
    pub(crate) fn new(
        caps: Caps,
        size: usize,
        inject_size: usize,
        max_msg_size: usize,
    ) -> Arc<Self> {
        let size = if size == 0 { DEFAULT_QUEUE_SIZE } else { size };
        Arc::new(TxCtx {
            state: LockOf::<S, _>::new(TxState {
                enabled: false,
                caps,
                bind: Bindings::default(),
                cntr_send: None,
                cntr_read: None,
                cntr_write: None,
                av: None,
                pending: PendingTable::new(size),
                fenced: Default::default(),
                // Room for the usual few, so that holding them allocates nothing.
                sent: std::collections::VecDeque::with_capacity(SENT_ROOM),
                inject_size,
                max_msg_size,
            }),
        })
    }
}

impl<S: Config> RxCtx<S> {
    pub(crate) fn new(caps: Caps, size: usize) -> Arc<Self> {
        let size = if size == 0 { DEFAULT_QUEUE_SIZE } else { size };
        Arc::new(RxCtx {
            state: LockOf::<S, _>::new(RxState {
                enabled: false,
                caps,
                bind: Bindings::default(),
                cntr_recv: None,
                cntr_rem_read: None,
                cntr_rem_write: None,
                av: None,
                tagged: Matcher::with_capacity(size, size),
                msg: Matcher::with_capacity(size, size),
                size,
                min_multi_recv: DEFAULT_MIN_MULTI_RECV,
                claimed: Vec::new(),
                unresolved: 0,
                pool: UnexpBufs::default(),
            }),
        })
    }
}
