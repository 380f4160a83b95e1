//! Tag matching for posted receives and unexpected messages.
//!
//! Every provider reuses [`Matcher`] to implement `fi_tagged`/`fi_msg` receive-side
//! semantics: an incoming message is matched against the *oldest* posted receive that
//! accepts it, and a newly posted receive first consumes the *oldest* queued unexpected
//! message it accepts. Untagged messages use the same engine with tag 0 and ignore 0.
//!
//! A receive posted with `(tag, ignore, src)` accepts a message `(t, s)` when
//! `t & !ignore == tag & !ignore` and (`src == FiAddr::UNSPEC` or `src == s`).
//! Because `FiAddr::NOTAVAIL` and `FiAddr::UNSPEC` share a value, a message whose source is
//! unknown is accepted only by receives that did not name a source.
//!
//! # Layout
//!
//! Entries live in a slab (a `Vec` with a free list) and are threaded on intrusive
//! doubly-linked lists by index, so removal from anywhere is O(1) and steady-state
//! operation allocates nothing. Each entry sits on two lists:
//!
//! * **posted receives**: either the per-tag bucket of exact receives (`ignore == 0`) or
//!   the wildcard list (`ignore != 0`). Matching looks at the head of one bucket and the
//!   wildcard list, and picks the older by a global post sequence number. No global list:
//!   cancel and drain (rare, and linear anyway) order the slab by that number instead,
//!   which keeps a post and a match to one list operation each.
//! * **unexpected messages**: the global arrival-order list (for wildcard receives) and
//!   the per-tag bucket (for exact receives).
//!
//! A receive posted while no other is posted skips all of this: it is kept in a place
//! of its own, tried before the lists (it is older than anything in them, since later
//! receives go to the lists until both are empty again). A receive posted ahead of
//! each message, one at a time (a ping-pong, a message-rate loop), never touches the
//! slab, the buckets or the links.
//!
//! Handles ([`PostedId`], [`UnexpectedId`]) carry a slot index and a generation, so a
//! handle to an entry that has been removed is rejected even after its slot was reused
//! (until the slot's 32-bit generation wraps around).

use core::fmt;

use rustc_hash::FxHashMap;

use crate::types::FiAddr;

/// Index value meaning "no entry" in the intrusive lists and free list.
const NIL: u32 = u32::MAX;

/// Handle to a posted receive inside a [`Matcher`] (stale handles are detected: index +
/// generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostedId {
    idx: u32,
    gen: u32,
}

/// Handle to an unexpected message inside a [`Matcher`] (stale handles are detected:
/// index + generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnexpectedId {
    idx: u32,
    gen: u32,
}

macro_rules! id_bits {
    ($t:ty) => {
        impl $t {
            /// Packs the handle into a `u64`, e.g. to store it in a provider's context field.
            #[inline]
            #[cfg(test)]
            pub const fn to_bits(self) -> u64 {
                ((self.gen as u64) << 32) | self.idx as u64
            }

            /// Rebuilds a handle from [`Self::to_bits`]. Any value is accepted; a value that
            /// names no live entry is simply rejected by the matcher's lookups.
            #[inline]
            #[cfg(test)]
            pub const fn from_bits(bits: u64) -> Self {
                Self {
                    idx: bits as u32,
                    gen: (bits >> 32) as u32,
                }
            }
        }
    };
}
id_bits!(PostedId);
id_bits!(UnexpectedId);

/// Does a receive that named `want` accept a message from `from`?
#[inline]
fn src_accepts(want: FiAddr, from: FiAddr) -> bool {
    want == FiAddr::UNSPEC || want == from
}

/// Does a receive `(recv_tag, ignore)` accept message tag `msg_tag`?
#[inline]
fn tag_accepts(recv_tag: u64, ignore: u64, msg_tag: u64) -> bool {
    (recv_tag ^ msg_tag) & !ignore == 0
}

// ---------------------------------------------------------------------------------------
// Slab
// ---------------------------------------------------------------------------------------

/// One entry: its matching data and links (always initialized, so list surgery is a
/// bounds-checked index and nothing more) and its value (`None` while vacant).
struct Slot<T> {
    node: Node,
    gen: u32,
    val: Option<T>,
}

/// A `Vec` of slots with a LIFO free list threaded through the vacant slots'
/// `node.all.next`. LIFO keeps recently used (cache-warm) slots in play.
struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: u32,
    len: usize,
}

impl<T> Slab<T> {
    fn with_capacity(cap: usize) -> Self {
        Self {
            slots: Vec::with_capacity(cap),
            free: NIL,
            len: 0,
        }
    }

    /// Stores `v` with its `node`, returning its (index, generation).
    ///
    /// Panics only if more than `u32::MAX - 1` entries are live at once (a capacity
    /// overflow, like `Vec`'s).
    #[inline(always)]
    fn insert(&mut self, node: Node, v: T) -> (u32, u32) {
        let idx = self.free;
        if let Some(slot) = self.slots.get_mut(idx as usize) {
            if slot.val.is_none() {
                self.free = slot.node.all.next;
                slot.node = node;
                slot.val = Some(v);
                self.len += 1;
                return (idx, slot.gen);
            }
        }
        let idx = self.slots.len();
        assert!(
            idx < NIL as usize,
            "matcher: more than u32::MAX - 1 live entries"
        );
        self.slots.push(Slot {
            node,
            gen: 0,
            val: Some(v),
        });
        self.len += 1;
        (idx as u32, 0)
    }

    /// The live slot `(idx, gen)`.
    #[inline]
    fn live(&self, idx: u32, gen: u32) -> Option<&Slot<T>> {
        self.slots
            .get(idx as usize)
            .filter(|s| s.gen == gen && s.val.is_some())
    }

    #[inline]
    fn get(&self, idx: u32, gen: u32) -> Option<&T> {
        self.live(idx, gen)?.val.as_ref()
    }

    #[inline]
    #[cfg(test)]
    fn get_mut(&mut self, idx: u32, gen: u32) -> Option<&mut T> {
        match self.slots.get_mut(idx as usize) {
            Some(s) if s.gen == gen => s.val.as_mut(),
            _ => None,
        }
    }

    /// Internal access by index alone (links carry no generation). `NIL` yields `None`.
    #[inline]
    fn node(&self, idx: u32) -> Option<&Node> {
        self.slots.get(idx as usize).map(|s| &s.node)
    }

    #[inline]
    fn node_mut(&mut self, idx: u32) -> Option<&mut Node> {
        self.slots.get_mut(idx as usize).map(|s| &mut s.node)
    }

    #[inline]
    fn gen(&self, idx: u32) -> u32 {
        self.slots.get(idx as usize).map_or(0, |s| s.gen)
    }

    /// Vacates the live slot `(idx, gen)`, handing its value to `take`.
    #[inline]
    fn vacate<R>(
        &mut self,
        idx: u32,
        gen: u32,
        take: impl FnOnce(&mut Option<T>) -> R,
    ) -> Option<R> {
        let slot = self.slots.get_mut(idx as usize)?;
        if slot.gen != gen || slot.val.is_none() {
            return None;
        }
        let r = take(&mut slot.val);
        slot.val = None;
        slot.node.all.next = self.free;
        // Bumping the generation is what makes every outstanding handle to this slot stale.
        slot.gen = slot.gen.wrapping_add(1);
        self.free = idx;
        self.len -= 1;
        Some(r)
    }

    fn remove(&mut self, idx: u32, gen: u32) -> Option<T> {
        self.vacate(idx, gen, Option::take).flatten()
    }

    /// [`Self::remove`] dropping the value in place: nothing is moved out.
    #[inline]
    #[cfg(test)]
    fn discard(&mut self, idx: u32, gen: u32) -> bool {
        self.vacate(idx, gen, |_| ()).is_some()
    }
}

// ---------------------------------------------------------------------------------------
// Intrusive lists
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
};

#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

impl Default for List {
    fn default() -> Self {
        Self {
            head: NIL,
            tail: NIL,
        }
    }
}

/// Which of a node's two link pairs a list is threaded through.
#[derive(Clone, Copy)]
enum Which {
    /// Global order list (post order / arrival order).
    All,
    /// Per-tag bucket, or the wildcard list for wildcard receives.
    Queue,
}

struct Node {
    tag: u64,
    /// Always 0 for unexpected messages.
    ignore: u64,
    src: FiAddr,
    /// Global insertion sequence; compares exact and wildcard candidates by age.
    seq: u64,
    all: Link,
    queue: Link,
    /// Position of the node's tag bucket in `Queue::buckets`; `NIL` on the wildcard list.
    bucket: u32,
}

impl Node {
    #[inline]
    fn link(&self, w: Which) -> Link {
        match w {
            Which::All => self.all,
            Which::Queue => self.queue,
        }
    }

    #[inline]
    fn link_mut(&mut self, w: Which) -> &mut Link {
        match w {
            Which::All => &mut self.all,
            Which::Queue => &mut self.queue,
        }
    }
}

/// Makes the entry `idx`, just stored with `prev: tail, next: NIL` as its `w` link,
/// the last of `list` (whose tail was `tail`).
#[inline(always)]
fn link_tail<T>(slab: &mut Slab<T>, list: &mut List, tail: u32, idx: u32, w: Which) {
    match slab.node_mut(tail) {
        Some(t) => t.link_mut(w).next = idx,
        None => list.head = idx,
    }
    list.tail = idx;
}

fn unlink<T>(slab: &mut Slab<T>, list: &mut List, idx: u32, w: Which) {
    let Some(Link { prev, next }) = slab.node(idx).map(|n| n.link(w)) else {
        return;
    };
    match slab.node_mut(prev) {
        Some(p) => p.link_mut(w).next = next,
        None => list.head = next,
    }
    match slab.node_mut(next) {
        Some(n) => n.link_mut(w).prev = prev,
        None => list.tail = prev,
    }
    if let Some(n) = slab.node_mut(idx) {
        *n.link_mut(w) = UNLINKED;
    }
}

// ---------------------------------------------------------------------------------------
// Queue: one slab + global list + per-tag index + wildcard list
// ---------------------------------------------------------------------------------------

struct Queue<T> {
    slab: Slab<T>,
    /// Whether entries are also threaded on `all` (arrival order, which wildcard
    /// receives scan among unexpected messages). Posted receives are not: their order
    /// is their `seq`.
    ordered: bool,
    all: List,
    /// Exact entries (ignore == 0) by tag: `index` maps a tag to its position here, and
    /// each node remembers its bucket's position, so removal needs no hash lookup.
    /// Empty buckets are swept once they outnumber live entries (see `remove`), so a
    /// stream of distinct tags does not grow the table; swept positions are reused
    /// through `free_buckets` and every container keeps its capacity, so steady-state
    /// operation allocates nothing.
    buckets: Vec<List>,
    index: FxHashMap<u64, u32>,
    free_buckets: Vec<u32>,
    /// The last `(tag, bucket)` looked up: a stream of one tag (a ping-pong, a
    /// receive reposted with the tag it just matched) skips the hash table.
    /// `bucket == NIL`: nothing cached.
    last: (u64, u32),
    /// Entries with ignore != 0 (never used for unexpected messages).
    wild: List,
    seq: u64,
}

impl<T> Queue<T> {
    fn with_capacity(cap: usize, ordered: bool) -> Self {
        Self {
            slab: Slab::with_capacity(cap),
            ordered,
            all: List::default(),
            buckets: Vec::with_capacity(cap),
            index: FxHashMap::with_capacity_and_hasher(cap, Default::default()),
            free_buckets: Vec::new(),
            last: (0, NIL),
            wild: List::default(),
            seq: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.slab.len
    }

    /// Position of the bucket of `tag`, if it has one.
    #[inline]
    fn find_bucket(&self, tag: u64) -> Option<u32> {
        if self.last.1 != NIL && self.last.0 == tag {
            return Some(self.last.1);
        }
        self.index.get(&tag).copied()
    }

    /// Position of the bucket of `tag`, created if needed; remembered in `last`.
    #[inline]
    fn bucket_for(&mut self, tag: u64) -> u32 {
        if self.last.1 != NIL && self.last.0 == tag {
            return self.last.1;
        }
        let b = match self.index.get(&tag) {
            Some(&b) => b,
            None => self.new_bucket(tag),
        };
        self.last = (tag, b);
        b
    }

    #[cold]
    fn new_bucket(&mut self, tag: u64) -> u32 {
        let b = match self.free_buckets.pop() {
            // Swept buckets are empty lists already.
            Some(b) => b,
            None => {
                let b = self.buckets.len();
                // At most one bucket per live entry plus the sweep slack, so this
                // stays far below `NIL` while the slab index does.
                assert!(b < NIL as usize, "matcher: too many tag buckets");
                self.buckets.push(List::default());
                b as u32
            }
        };
        self.index.insert(tag, b);
        b
    }

    /// Drops the buckets that hold nothing: their positions go to `free_buckets`.
    #[cold]
    fn sweep_buckets(&mut self) {
        let Self {
            buckets,
            index,
            free_buckets,
            ..
        } = self;
        index.retain(|_, b| {
            let empty = buckets.get(*b as usize).is_none_or(|x| x.head == NIL);
            if empty {
                free_buckets.push(*b);
            }
            !empty
        });
        self.last = (0, NIL);
    }

    // Always inlined: the value is then built in its slot, not copied there.
    #[inline(always)]
    fn insert(&mut self, tag: u64, ignore: u64, src: FiAddr, val: T) -> (u32, u32) {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        let bucket = if ignore == 0 {
            self.bucket_for(tag)
        } else {
            NIL
        };
        // The entry goes last on its lists, so its links are known before it is
        // stored: they are written with it, and only the old tails are touched after.
        let list = match self.buckets.get_mut(bucket as usize) {
            Some(b) => b,
            None => &mut self.wild,
        };
        let tail = list.tail;
        let all_tail = self.all.tail;
        let (idx, gen) = self.slab.insert(
            Node {
                tag,
                ignore,
                src,
                seq,
                all: if self.ordered {
                    Link {
                        prev: all_tail,
                        next: NIL,
                    }
                } else {
                    UNLINKED
                },
                queue: Link {
                    prev: tail,
                    next: NIL,
                },
                bucket,
            },
            val,
        );
        link_tail(&mut self.slab, list, tail, idx, Which::Queue);
        if self.ordered {
            link_tail(&mut self.slab, &mut self.all, all_tail, idx, Which::All);
        }
        (idx, gen)
    }

    /// Takes the entry `(idx, gen)` off its lists; `false` if the handle is stale.
    #[inline]
    fn detach(&mut self, idx: u32, gen: u32) -> bool {
        let Some(bucket) = self.slab.live(idx, gen).map(|s| s.node.bucket) else {
            return false;
        };
        if self.ordered {
            unlink(&mut self.slab, &mut self.all, idx, Which::All);
        }
        match self.buckets.get_mut(bucket as usize) {
            Some(b) => unlink(&mut self.slab, b, idx, Which::Queue),
            None => unlink(&mut self.slab, &mut self.wild, idx, Which::Queue),
        }
        true
    }

    /// Takes the live, linked entry `idx` (just found on its lists) off its lists and
    /// drops it: [`Self::discard`] without the handle checks.
    #[inline]
    fn take_linked(&mut self, idx: u32) {
        if self.ordered {
            unlink(&mut self.slab, &mut self.all, idx, Which::All);
        }
        let slab = &mut self.slab;
        let Some(slot) = slab.slots.get_mut(idx as usize) else {
            return;
        };
        let Link { prev, next } = slot.node.queue;
        let bucket = slot.node.bucket;
        // The vacant slot's queue link is left as it was: nothing reads it before
        // `insert` writes the whole node again.
        slot.val = None;
        slot.node.all.next = slab.free;
        // Bumping the generation is what makes every outstanding handle stale.
        slot.gen = slot.gen.wrapping_add(1);
        slab.free = idx;
        slab.len -= 1;
        let list = match self.buckets.get_mut(bucket as usize) {
            Some(b) => b,
            None => &mut self.wild,
        };
        match slab.node_mut(prev) {
            Some(p) => p.queue.next = next,
            None => list.head = next,
        }
        match slab.node_mut(next) {
            Some(n) => n.queue.prev = prev,
            None => list.tail = prev,
        }
        self.after_remove();
    }

    /// Live entries in insertion order: the `all` list, or the slab sorted by `seq`.
    fn in_order(&self) -> Vec<u32> {
        if self.ordered {
            let mut out = Vec::with_capacity(self.len());
            let mut cur = self.all.head;
            while let Some(n) = self.slab.node(cur) {
                out.push(cur);
                cur = n.all.next;
            }
            return out;
        }
        let mut live: Vec<(u64, u32)> = (0..self.slab.slots.len())
            .filter(|&i| self.slab.slots[i].val.is_some())
            .map(|i| (self.slab.slots[i].node.seq, i as u32))
            .collect();
        // Sequence numbers are unique; wrapping would take 2^64 posts.
        live.sort_unstable();
        live.into_iter().map(|(_, i)| i).collect()
    }

    /// After a removal: an empty bucket is kept for the next message with the same tag
    /// (the common case: no hash removal and re-insertion per message) until buckets
    /// outnumber live entries by far (then most of them are empty); then the empty ones
    /// are swept in one pass, so a stream of distinct tags keeps the table bounded.
    /// Amortized O(1): a sweep follows at least `len + 64` removals or insertions.
    #[inline]
    fn after_remove(&mut self) {
        if self.index.len() > 2 * self.slab.len + 64 {
            self.sweep_buckets();
        }
    }

    #[inline]
    fn remove(&mut self, idx: u32, gen: u32) -> Option<T> {
        if !self.detach(idx, gen) {
            return None;
        }
        let v = self.slab.remove(idx, gen);
        self.after_remove();
        v
    }

    /// [`Self::remove`] without moving the value out.
    #[inline]
    #[cfg(test)]
    fn discard(&mut self, idx: u32, gen: u32) -> bool {
        if !self.detach(idx, gen) {
            return false;
        }
        let done = self.slab.discard(idx, gen);
        self.after_remove();
        done
    }

    /// First entry of the `tag` bucket satisfying `pred`, counting examined entries.
    #[inline]
    fn first_in_bucket(
        &self,
        tag: u64,
        steps: &mut usize,
        mut pred: impl FnMut(&Node) -> bool,
    ) -> Option<(u32, u64)> {
        let b = self.find_bucket(tag)?;
        let mut cur = self.buckets.get(b as usize)?.head;
        while let Some(n) = self.slab.node(cur) {
            *steps += 1;
            if pred(n) {
                return Some((cur, n.seq));
            }
            cur = n.queue.next;
        }
        None
    }

    /// Removes every entry in global order.
    fn drain(&mut self) -> Vec<T> {
        let order = self.in_order();
        let mut out = Vec::with_capacity(order.len());
        for idx in order {
            let gen = self.slab.gen(idx);
            if let Some(v) = self.remove(idx, gen) {
                out.push(v);
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Matcher
// ---------------------------------------------------------------------------------------

/// The tag-matching engine: posted receives of type `R` and unexpected messages of type
/// `U` (see the [module docs](self) for the matching rule and data layout).
///
/// Exact-tag operations are O(1) expected (plus skipping directed receives / messages from
/// other sources within one tag bucket); wildcard receives are scanned in order. Nothing
/// allocates once the slabs and hash tables have reached their working size, except the
/// `drain_*` close-path functions.
pub struct Matcher<R, U> {
    posted: Queue<R>,
    /// A receive posted while no other was: then it is the oldest of all, and stays so
    /// (later ones go to `posted`, and a new one comes here only once both are empty),
    /// so it is tried first and needs none of the lists' bookkeeping. A receive posted
    /// ahead of each message, one at a time, never leaves it. Its handle is
    /// `PostedId { idx: NIL, gen: solo_gen }`: `NIL` names no slot.
    solo: Option<Solo<R>>,
    /// Bumped each time `solo` is vacated, so that its old handles are stale.
    solo_gen: u32,
    unexpected: Queue<U>,
    /// Entries examined by the last `match_*` call (test instrumentation).
    #[cfg(test)]
    last_examined: usize,
}

/// The receive in [`Matcher::solo`] with what it accepts.
struct Solo<R> {
    tag: u64,
    ignore: u64,
    src: FiAddr,
    val: R,
}

impl<R> Solo<R> {
    #[inline(always)]
    fn accepts(&self, tag: u64, src: FiAddr) -> bool {
        tag_accepts(self.tag, self.ignore, tag) && src_accepts(self.src, src)
    }

    /// Whether the lists would have looked at it for `tag` (its bucket, or the
    /// wildcard list): what `last_examined` counts, as before it had a place of its own.
    #[cfg(test)]
    fn examined_for(&self, tag: u64) -> usize {
        usize::from(self.ignore != 0 || self.tag == tag)
    }
}

impl<R, U> Default for Matcher<R, U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, U> fmt::Debug for Matcher<R, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matcher")
            .field("posted_len", &self.posted_len())
            .field("unexpected_len", &self.unexpected_len())
            .finish_non_exhaustive()
    }
}

impl<R, U> Matcher<R, U> {
    /// An empty matcher.
    pub fn new() -> Self {
        Self::with_capacity(0, 0)
    }

    /// An empty matcher with room for `posted` receives and `unexpected` messages before
    /// it allocates.
    pub fn with_capacity(posted: usize, unexpected: usize) -> Self {
        Self {
            posted: Queue::with_capacity(posted, false),
            solo: None,
            solo_gen: 0,
            unexpected: Queue::with_capacity(unexpected, true),
            #[cfg(test)]
            last_examined: 0,
        }
    }

    /// Post a receive accepting message tag `t` when `(t & !ignore) == (tag & !ignore)`, and
    /// source `s` when `src == FiAddr::UNSPEC` or `src == s`.
    ///
    /// # Panics
    ///
    /// Only on capacity overflow (more than `u32::MAX - 1` receives posted at once).
    // Always inlined, like `Queue::insert`: the receive is then built in its place.
    #[inline(always)]
    pub fn post(&mut self, tag: u64, ignore: u64, src: FiAddr, r: R) -> PostedId {
        if self.solo.is_none() && self.posted.len() == 0 {
            self.solo = Some(Solo {
                tag,
                ignore,
                src,
                val: r,
            });
            return PostedId {
                idx: NIL,
                gen: self.solo_gen,
            };
        }
        let (idx, gen) = self.posted.insert(tag, ignore, src, r);
        PostedId { idx, gen }
    }

    /// The solo receive, if `id` names it (and is not stale).
    #[inline]
    #[cfg(test)]
    fn solo_of(&self, id: PostedId) -> Option<&Solo<R>> {
        self.solo
            .as_ref()
            .filter(|_| id.idx == NIL && id.gen == self.solo_gen)
    }

    /// Vacates the solo receive, making its handles stale.
    #[inline]
    fn take_solo(&mut self) -> Option<R> {
        let s = self.solo.take()?;
        self.solo_gen = self.solo_gen.wrapping_add(1);
        Some(s.val)
    }

    /// The OLDEST posted receive (post order across exact and wildcard receives) that
    /// accepts an incoming message `(tag, src)`. Does not remove it (multi-recv buffers
    /// stay posted).
    #[inline]
    #[cfg(test)]
    pub fn match_posted(&mut self, tag: u64, src: FiAddr) -> Option<PostedId> {
        let (found, _steps) = self.find_posted(tag, src);
        #[cfg(test)]
        {
            self.last_examined = _steps;
        }
        found
    }

    /// Hands the oldest posted receive accepting `(tag, src)` (as [`Self::match_posted`])
    /// to `f`, and removes it when `f` says it is finished (`.0`). Returns `f`'s `.1`, or
    /// `None` when no receive accepts the message. One lookup where `match_posted`,
    /// `posted_mut` and `remove_posted` take three.
    #[inline]
    pub fn deliver<X>(
        &mut self,
        tag: u64,
        src: FiAddr,
        f: impl FnOnce(&mut R) -> (bool, X),
    ) -> Option<X> {
        // `NIL` for the solo receive. One call of `f` for both: it is usually inlined,
        // and two copies of it made the caller's code larger and slower.
        let (idx, _steps) = if self.solo.as_ref().is_some_and(|s| s.accepts(tag, src)) {
            (NIL, 1)
        } else {
            #[cfg(test)]
            let solo_steps = self.solo.as_ref().map_or(0, |s| s.examined_for(tag));
            let q = &mut self.posted;
            // The lane: with no wildcard receive posted, the oldest receive that
            // accepts the message is the first in its tag's bucket that accepts its
            // source (usually the head); no sequence numbers to compare.
            if q.wild.head == NIL {
                let mut steps = 0;
                let b = q.find_bucket(tag)?;
                let mut cur = q.buckets.get(b as usize)?.head;
                #[cfg(test)]
                {
                    steps += solo_steps;
                }
                loop {
                    let n = q.slab.node(cur)?;
                    steps += 1;
                    if src_accepts(n.src, src) {
                        break (cur, steps);
                    }
                    cur = n.queue.next;
                }
            } else {
                let (found, steps) = self.find_posted(tag, src);
                (found?.idx, steps)
            }
        };
        #[cfg(test)]
        {
            self.last_examined = _steps;
        }
        let r = if idx == NIL {
            &mut self.solo.as_mut()?.val
        } else {
            self.posted.slab.slots.get_mut(idx as usize)?.val.as_mut()?
        };
        let (done, x) = f(r);
        if done {
            if idx == NIL {
                self.take_solo();
            } else {
                self.posted.take_linked(idx);
            }
        }
        Some(x)
    }

    /// Removes the receive behind `id` without returning it; `false` if `id` is stale.
    #[inline]
    #[cfg(test)]
    pub fn discard_posted(&mut self, id: PostedId) -> bool {
        if self.solo_of(id).is_some() {
            return self.take_solo().is_some();
        }
        self.posted.discard(id.idx, id.gen)
    }

    #[inline]
    fn find_posted(&self, tag: u64, src: FiAddr) -> (Option<PostedId>, usize) {
        let mut steps = 0;
        if let Some(s) = &self.solo {
            if s.accepts(tag, src) {
                let id = PostedId {
                    idx: NIL,
                    gen: self.solo_gen,
                };
                return (Some(id), 1);
            }
            #[cfg(test)]
            {
                steps += s.examined_for(tag);
            }
        }
        let q = &self.posted;
        let mut best = q.first_in_bucket(tag, &mut steps, |n| src_accepts(n.src, src));
        let mut cur = q.wild.head;
        while let Some(n) = q.slab.node(cur) {
            steps += 1;
            // The wildcard list is in post order: once past the exact candidate, nothing
            // further can be older.
            if matches!(best, Some((_, seq)) if n.seq > seq) {
                break;
            }
            if tag_accepts(n.tag, n.ignore, tag) && src_accepts(n.src, src) {
                best = Some((cur, n.seq));
                break;
            }
            cur = n.queue.next;
        }
        let id = best.map(|(idx, _)| PostedId {
            idx,
            gen: q.slab.gen(idx),
        });
        (id, steps)
    }

    /// The receive behind `id`, or `None` if `id` is stale.
    #[inline]
    #[cfg(test)]
    pub fn posted(&self, id: PostedId) -> Option<&R> {
        if let Some(s) = self.solo_of(id) {
            return Some(&s.val);
        }
        self.posted.slab.get(id.idx, id.gen)
    }

    /// Mutable access to the receive behind `id` (e.g. to advance a multi-recv buffer).
    #[inline]
    #[cfg(test)]
    pub fn posted_mut(&mut self, id: PostedId) -> Option<&mut R> {
        if self.solo_of(id).is_some() {
            return self.solo.as_mut().map(|s| &mut s.val);
        }
        self.posted.slab.get_mut(id.idx, id.gen)
    }

    /// The `(tag, ignore, src)` the receive behind `id` was posted with.
    #[inline]
    #[cfg(test)]
    pub fn posted_meta(&self, id: PostedId) -> Option<(u64, u64, FiAddr)> {
        if let Some(s) = self.solo_of(id) {
            return Some((s.tag, s.ignore, s.src));
        }
        self.posted
            .slab
            .live(id.idx, id.gen)
            .map(|s| (s.node.tag, s.node.ignore, s.node.src))
    }

    /// Removes the receive behind `id`; `None` if `id` is stale.
    #[inline]
    #[cfg(test)]
    pub fn remove_posted(&mut self, id: PostedId) -> Option<R> {
        if self.solo_of(id).is_some() {
            return self.take_solo();
        }
        self.posted.remove(id.idx, id.gen)
    }

    /// Removes the oldest posted receive for which `pred` is true (used by
    /// cancel-by-context). Linear in the number of posted receives.
    pub fn cancel_posted(&mut self, mut pred: impl FnMut(&R) -> bool) -> Option<R> {
        if self.solo.as_ref().is_some_and(|s| pred(&s.val)) {
            return self.take_solo();
        }
        let q = &self.posted;
        let (idx, gen) = q
            .slab
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.val.as_ref().is_some_and(&mut pred))
            .min_by_key(|(_, s)| s.node.seq)
            .map(|(i, s)| (i as u32, s.gen))?;
        self.posted.remove(idx, gen)
    }

    /// Number of posted receives.
    #[inline]
    pub fn posted_len(&self) -> usize {
        self.posted.len() + usize::from(self.solo.is_some())
    }

    /// Appends an unexpected message (arrival order). `src` may be `FiAddr::NOTAVAIL`
    /// (unknown source).
    ///
    /// # Panics
    ///
    /// Only on capacity overflow (more than `u32::MAX - 1` messages queued at once).
    #[inline]
    pub fn push_unexpected(&mut self, tag: u64, src: FiAddr, u: U) -> UnexpectedId {
        // ignore = 0 files every message in its tag bucket.
        let (idx, gen) = self.unexpected.insert(tag, 0, src, u);
        UnexpectedId { idx, gen }
    }

    /// The OLDEST unexpected message (arrival order) that a receive `(tag, ignore, src)`
    /// would accept. Does not remove it (`FI_PEEK` leaves it queued).
    #[inline]
    pub fn match_unexpected(&mut self, tag: u64, ignore: u64, src: FiAddr) -> Option<UnexpectedId> {
        // Receives are usually posted ahead of their messages: skip the lookups.
        if self.unexpected.len() == 0 {
            #[cfg(test)]
            {
                self.last_examined = 0;
            }
            return None;
        }
        let (found, _steps) = self.find_unexpected(tag, ignore, src);
        #[cfg(test)]
        {
            self.last_examined = _steps;
        }
        found
    }

    fn find_unexpected(&self, tag: u64, ignore: u64, src: FiAddr) -> (Option<UnexpectedId>, usize) {
        let q = &self.unexpected;
        let mut steps = 0;
        let found = if ignore == 0 {
            q.first_in_bucket(tag, &mut steps, |n| src_accepts(src, n.src))
                .map(|(idx, _)| idx)
        } else {
            let mut cur = q.all.head;
            loop {
                let Some(n) = q.slab.node(cur) else {
                    break None;
                };
                steps += 1;
                if tag_accepts(tag, ignore, n.tag) && src_accepts(src, n.src) {
                    break Some(cur);
                }
                cur = n.all.next;
            }
        };
        let id = found.map(|idx| UnexpectedId {
            idx,
            gen: q.slab.gen(idx),
        });
        (id, steps)
    }

    /// Gives each unexpected message of unknown source (`FiAddr::NOTAVAIL`) the source
    /// `f` finds for it now, if any (`f` may update the message too). Arrival order and
    /// tag buckets are unchanged: only what a directed receive compares.
    pub fn resolve_unexpected(&mut self, mut f: impl FnMut(&mut U) -> Option<FiAddr>) {
        let q = &mut self.unexpected;
        let mut cur = q.all.head;
        while let Some(slot) = q.slab.slots.get_mut(cur as usize) {
            let next = slot.node.all.next;
            if slot.node.src == FiAddr::NOTAVAIL {
                if let Some(a) = slot.val.as_mut().and_then(&mut f) {
                    slot.node.src = a;
                }
            }
            cur = next;
        }
    }

    /// The message behind `id`, or `None` if `id` is stale.
    #[inline]
    pub fn unexpected(&self, id: UnexpectedId) -> Option<&U> {
        self.unexpected.slab.get(id.idx, id.gen)
    }

    /// Mutable access to the message behind `id`.
    #[inline]
    #[cfg(test)]
    pub fn unexpected_mut(&mut self, id: UnexpectedId) -> Option<&mut U> {
        self.unexpected.slab.get_mut(id.idx, id.gen)
    }

    /// The tag and source the message behind `id` arrived with.
    #[inline]
    #[cfg(test)]
    pub fn unexpected_meta(&self, id: UnexpectedId) -> Option<(u64, FiAddr)> {
        self.unexpected
            .slab
            .live(id.idx, id.gen)
            .map(|s| (s.node.tag, s.node.src))
    }

    /// Removes the message behind `id`; `None` if `id` is stale.
    #[inline]
    pub fn remove_unexpected(&mut self, id: UnexpectedId) -> Option<U> {
        self.unexpected.remove(id.idx, id.gen)
    }

    /// Number of queued unexpected messages.
    #[inline]
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Removes and returns every posted receive, oldest first (endpoint close cancels them
    /// all). Outstanding [`PostedId`]s become stale; slots and table capacity are kept.
    pub fn drain_posted(&mut self) -> Vec<R> {
        let solo = self.take_solo();
        let rest = self.posted.drain();
        solo.into_iter().chain(rest).collect()
    }

    /// Removes and returns every unexpected message in arrival order. Outstanding
    /// [`UnexpectedId`]s become stale; slots and table capacity are kept.
    #[cfg(test)]
    pub fn drain_unexpected(&mut self) -> Vec<U> {
        self.unexpected.drain()
    }

    /// Entries examined by the last `match_*` call.
    #[cfg(test)]
    fn last_examined(&self) -> usize {
        self.last_examined
    }

    /// Capacities of every container of both queues.
    #[cfg(test)]
    fn capacities(&self) -> [usize; 8] {
        [
            self.posted.slab.slots.capacity(),
            self.unexpected.slab.slots.capacity(),
            self.posted.index.capacity(),
            self.unexpected.index.capacity(),
            self.posted.buckets.capacity(),
            self.unexpected.buckets.capacity(),
            self.posted.free_buckets.capacity(),
            self.unexpected.free_buckets.capacity(),
        ]
    }

    /// Checks every list invariant; used by the model test.
    #[cfg(test)]
    fn check_invariants(&self) {
        fn walk<T>(q: &Queue<T>, list: List, w: Which) -> Vec<u32> {
            let mut out = Vec::new();
            let mut prev = NIL;
            let mut cur = list.head;
            while cur != NIL {
                let slot = &q.slab.slots[cur as usize];
                assert!(slot.val.is_some(), "linked node is occupied");
                let n = &slot.node;
                assert_eq!(n.link(w).prev, prev, "prev link");
                out.push(cur);
                prev = cur;
                cur = n.link(w).next;
            }
            assert_eq!(list.tail, prev, "tail");
            out
        }
        fn check<T>(q: &Queue<T>) {
            let all = if q.ordered {
                walk(q, q.all, Which::All)
            } else {
                assert_eq!(q.all.head, NIL, "unordered queue keeps no global list");
                q.in_order()
            };
            assert_eq!(all.len(), q.len());
            let seqs: Vec<u64> = all.iter().map(|&i| q.slab.node(i).unwrap().seq).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "global order");
            let mut total = walk(q, q.wild, Which::Queue).len();
            // Empty buckets may linger, but never more than the sweep bound allows.
            assert!(q.index.len() <= 2 * q.len() + 65, "empty buckets not swept");
            assert_eq!(
                q.index.len() + q.free_buckets.len(),
                q.buckets.len(),
                "every bucket is either indexed or free"
            );
            if q.last.1 != NIL {
                assert_eq!(
                    q.index.get(&q.last.0),
                    Some(&q.last.1),
                    "stale bucket cache"
                );
            }
            for (tag, &bi) in &q.index {
                assert!(
                    !q.free_buckets.contains(&bi),
                    "indexed bucket on the free list"
                );
                let b = walk(q, q.buckets[bi as usize], Which::Queue);
                for &i in &b {
                    let n = q.slab.node(i).unwrap();
                    assert_eq!((n.tag, n.ignore, n.bucket), (*tag, 0, bi));
                }
                total += b.len();
            }
            for &i in &walk(q, q.wild, Which::Queue) {
                assert_eq!(q.slab.node(i).unwrap().bucket, NIL);
            }
            for &b in &q.free_buckets {
                assert_eq!(q.buckets[b as usize].head, NIL, "free bucket not empty");
            }
            assert_eq!(total, q.len());
            let occupied = q.slab.slots.iter().filter(|s| s.val.is_some()).count();
            assert_eq!(occupied, q.len());
        }
        check(&self.posted);
        check(&self.unexpected);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: FiAddr = FiAddr(1);
    const B: FiAddr = FiAddr(2);
    const ANY: FiAddr = FiAddr::UNSPEC;

    type M = Matcher<u32, u32>;

    fn take_posted(m: &mut M, tag: u64, src: FiAddr) -> Option<u32> {
        let id = m.match_posted(tag, src)?;
        m.remove_posted(id)
    }

    fn take_unexp(m: &mut M, tag: u64, ignore: u64, src: FiAddr) -> Option<u32> {
        let id = m.match_unexpected(tag, ignore, src)?;
        m.remove_unexpected(id)
    }

    #[test]
    fn oldest_first_across_exact_and_wildcard() {
        let mut m = M::new();
        m.post(5, 0, ANY, 1);
        m.post(0, !0, ANY, 2); // matches anything
        m.post(5, 0, ANY, 3);
        m.post(4, 1, ANY, 4); // matches 4 and 5
        assert_eq!(take_posted(&mut m, 5, A), Some(1));
        assert_eq!(take_posted(&mut m, 5, A), Some(2));
        assert_eq!(take_posted(&mut m, 5, A), Some(3));
        assert_eq!(take_posted(&mut m, 5, A), Some(4));
        assert_eq!(take_posted(&mut m, 5, A), None);

        // wildcard older than exact
        m.post(7, 0xff, ANY, 10);
        m.post(7, 0, ANY, 11);
        assert_eq!(take_posted(&mut m, 7, A), Some(10));
        assert_eq!(take_posted(&mut m, 7, A), Some(11));
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn ignore_masks() {
        let mut m = M::new();
        m.post(0x1200, 0x00ff, ANY, 1);
        assert_eq!(m.match_posted(0x1300, A), None);
        assert_eq!(m.match_posted(0x2200, A), None);
        assert_eq!(take_posted(&mut m, 0x12ab, A), Some(1));

        // Bits of the receive tag under the mask are irrelevant.
        m.post(0x12ff, 0x00ff, ANY, 2);
        assert_eq!(take_posted(&mut m, 0x1200, A), Some(2));

        // Unexpected side: the receive's mask applies to the queued message's tag.
        m.push_unexpected(0x1300, A, 1);
        m.push_unexpected(0x12cd, A, 2);
        m.push_unexpected(0x12ef, A, 3);
        assert_eq!(take_unexp(&mut m, 0x1200, 0xff, ANY), Some(2));
        assert_eq!(take_unexp(&mut m, 0x1200, 0xff, ANY), Some(3));
        assert_eq!(take_unexp(&mut m, 0x1200, 0xff, ANY), None);
        assert_eq!(take_unexp(&mut m, 0, !0, ANY), Some(1));
    }

    #[test]
    fn directed_receives() {
        let mut m = M::new();
        m.post(3, 0, A, 1);
        m.post(3, 0, B, 2);
        m.post(3, 0, ANY, 3);
        m.post(3, 1, A, 4);
        // A message from B skips the receive directed at A.
        assert_eq!(take_posted(&mut m, 3, B), Some(2));
        // Unknown source only matches undirected receives.
        assert_eq!(take_posted(&mut m, 3, FiAddr::NOTAVAIL), Some(3));
        assert_eq!(m.match_posted(3, FiAddr::NOTAVAIL), None);
        assert_eq!(m.match_posted(3, B), None);
        assert_eq!(take_posted(&mut m, 3, A), Some(1));
        assert_eq!(take_posted(&mut m, 2, A), Some(4));

        m.push_unexpected(9, A, 1);
        m.push_unexpected(9, FiAddr::NOTAVAIL, 2);
        m.push_unexpected(9, B, 3);
        assert_eq!(take_unexp(&mut m, 9, 0, B), Some(3));
        assert_eq!(take_unexp(&mut m, 9, 0, B), None);
        assert_eq!(take_unexp(&mut m, 9, 0, ANY), Some(1));
        assert_eq!(m.match_unexpected(9, 0, A), None);
        assert_eq!(take_unexp(&mut m, 8, 1, ANY), Some(2));
    }

    #[test]
    fn stale_ids_rejected() {
        let mut m = M::new();
        let p = m.post(1, 0, ANY, 1);
        let u = m.push_unexpected(1, A, 1);
        assert_eq!(m.remove_posted(p), Some(1));
        assert_eq!(m.remove_unexpected(u), Some(1));
        // Slots get reused by the next insert; the old handles must not see them.
        let p2 = m.post(1, 0, ANY, 2);
        let u2 = m.push_unexpected(1, A, 2);
        assert_ne!(p, p2);
        assert_ne!(u, u2);
        assert_eq!(m.posted(p), None);
        assert_eq!(m.posted_mut(p), None);
        assert_eq!(m.posted_meta(p), None);
        assert_eq!(m.remove_posted(p), None);
        assert_eq!(m.unexpected(u), None);
        assert_eq!(m.unexpected_mut(u), None);
        assert_eq!(m.unexpected_meta(u), None);
        assert_eq!(m.remove_unexpected(u), None);
        assert_eq!(m.posted(p2), Some(&2));
        assert_eq!(m.unexpected(u2), Some(&2));
        assert_eq!(m.unexpected_meta(u2), Some((1, A)));
        assert_eq!(m.posted_meta(p2), Some((1, 0, ANY)));
        // Garbage handles are rejected, not panicked on.
        assert_eq!(m.posted(PostedId::from_bits(u64::MAX)), None);
        assert_eq!(m.unexpected(UnexpectedId::from_bits(12345)), None);
        assert_eq!(PostedId::from_bits(p2.to_bits()), p2);
        assert_eq!(UnexpectedId::from_bits(u2.to_bits()), u2);
        // Drain also makes handles stale.
        m.drain_posted();
        assert_eq!(m.posted(p2), None);
    }

    #[test]
    fn cancel_posted_removes_oldest_matching() {
        let mut m = M::new();
        m.post(1, 0, ANY, 10);
        m.post(2, 3, ANY, 20);
        m.post(1, 0, ANY, 10);
        m.post(4, 0, A, 30);
        assert_eq!(m.cancel_posted(|&r| r == 20), Some(20));
        assert_eq!(m.cancel_posted(|&r| r == 20), None);
        assert_eq!(m.cancel_posted(|&r| r >= 10), Some(10));
        assert_eq!(m.posted_len(), 2);
        assert_eq!(m.drain_posted(), vec![10, 30]);
        assert_eq!(m.cancel_posted(|_| true), None);
    }

    #[test]
    fn drain_order() {
        let mut m = M::new();
        for (i, (tag, ignore)) in [(1, 0), (8, 1), (1, 0), (3, 0), (0, !0)].iter().enumerate() {
            m.post(*tag, *ignore, ANY, i as u32);
        }
        let mid = m.match_posted(3, A).unwrap();
        assert_eq!(m.remove_posted(mid), Some(3));
        assert_eq!(m.drain_posted(), vec![0, 1, 2, 4]);
        assert_eq!(m.posted_len(), 0);
        assert_eq!(m.match_posted(1, A), None);

        for i in 0..6u32 {
            m.push_unexpected(u64::from(i % 3), A, i);
        }
        assert_eq!(take_unexp(&mut m, 1, 0, ANY), Some(1));
        assert_eq!(m.drain_unexpected(), vec![0, 2, 3, 4, 5]);
        assert_eq!(m.unexpected_len(), 0);
        assert_eq!(m.match_unexpected(0, !0, ANY), None);
        m.check_invariants();

        // Usable after drain.
        m.post(1, 0, ANY, 7);
        assert_eq!(take_posted(&mut m, 1, A), Some(7));
    }

    #[test]
    fn multi_recv_stays_posted() {
        let mut m: Matcher<usize, ()> = Matcher::new();
        let id = m.post(0, 0, ANY, 100); // bytes left in a multi-recv buffer
        m.post(0, 0, ANY, 50);
        for _ in 0..3 {
            let got = m.match_posted(0, A).unwrap();
            assert_eq!(got, id);
            *m.posted_mut(got).unwrap() -= 30;
        }
        assert_eq!(m.posted(id), Some(&10));
        assert_eq!(m.posted_len(), 2);
        // Buffer below its threshold: the provider releases it and the next one takes over.
        assert_eq!(m.remove_posted(id), Some(10));
        let next = m.match_posted(0, A).unwrap();
        assert_eq!(m.posted(next), Some(&50));
    }

    #[test]
    fn deliver_updates_in_place_and_removes_when_finished() {
        let mut m: Matcher<usize, ()> = Matcher::new();
        let first = m.post(5, 0, ANY, 100);
        m.post(5, 0, ANY, 50);
        m.post(0, !0, B, 7);
        // Leaves a receive with room posted, mutated.
        assert_eq!(
            m.deliver(5, A, |r| {
                *r -= 30;
                (false, *r)
            }),
            Some(70)
        );
        assert_eq!(m.posted(first), Some(&70));
        // Removes it once finished; the next one takes over.
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(70));
        assert_eq!(m.posted(first), None);
        assert!(!m.discard_posted(first));
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(50));
        // Only the wildcard directed at B is left.
        assert_eq!(m.deliver(5, A, |r| (true, *r)), None);
        assert_eq!(m.deliver(9, B, |r| (true, *r)), Some(7));
        assert_eq!(m.posted_len(), 0);
        m.check_invariants();
    }

    #[test]
    fn solo_receive_stays_oldest_and_its_handles_go_stale() {
        let mut m = M::new();
        // Posted into an empty matcher: the solo place.
        let first = m.post(5, 0, ANY, 1);
        assert_eq!(first.idx, NIL);
        let second = m.post(0, !0, ANY, 2);
        assert_ne!(second.idx, NIL);
        assert_eq!(m.posted_len(), 2);
        assert_eq!(m.posted_meta(first), Some((5, 0, ANY)));
        // Oldest first, whether the lists hold wildcards or not.
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(1));
        assert_eq!(m.posted(first), None);
        assert!(!m.discard_posted(first));
        // With a receive still in the lists, a new one goes behind it, not solo.
        let third = m.post(5, 0, ANY, 3);
        assert_ne!(third.idx, NIL);
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(2));
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(3));
        assert_eq!(m.posted_len(), 0);
        // Once all are gone the next one is solo again, under a fresh handle.
        let again = m.post(5, 0, ANY, 4);
        assert_eq!(again.idx, NIL);
        assert_ne!(again, first);
        assert_eq!(m.posted(first), None);
        assert_eq!(m.posted(again), Some(&4));
        *m.posted_mut(again).unwrap() = 40;
        // Not finished: it stays, in place.
        assert_eq!(m.deliver(5, A, |r| (false, *r)), Some(40));
        assert_eq!(m.match_posted(6, A), None);
        assert_eq!(m.cancel_posted(|&v| v == 40), Some(40));
        assert_eq!(m.posted(again), None);
        m.post(1, 0, B, 7);
        m.post(1, 0, ANY, 8);
        assert_eq!(m.deliver(1, A, |r| (true, *r)), Some(8));
        assert_eq!(m.drain_posted(), vec![7]);
        m.check_invariants();
    }

    #[test]
    fn deliver_lane_yields_to_older_wildcard() {
        let mut m = M::new();
        // Exact receives only: the lane takes the bucket's first that accepts the source.
        m.post(5, 0, B, 1);
        m.post(5, 0, ANY, 2);
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(2));
        assert_eq!(m.last_examined(), 2);
        assert_eq!(m.deliver(5, A, |r| (true, *r)), None);
        // A wildcard receive posted earlier wins over the exact one.
        m.post(0, !0, ANY, 3);
        m.post(5, 0, ANY, 4);
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(3));
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(4));
        // One posted later does not.
        m.post(5, 0, ANY, 5);
        m.post(0, !0, ANY, 6);
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(5));
        assert_eq!(m.deliver(5, B, |r| (true, *r)), Some(1));
        assert_eq!(m.deliver(5, A, |r| (true, *r)), Some(6));
        assert_eq!(m.posted_len(), 0);
        m.check_invariants();
        // Cancel and drain still go by post order without a global list.
        for (t, v) in [(1, 10), (2, 11), (1, 12)] {
            m.post(t, 0, ANY, v);
        }
        m.post(0, 3, ANY, 13);
        assert_eq!(m.cancel_posted(|&v| v % 2 == 1), Some(11));
        assert_eq!(m.drain_posted(), vec![10, 12, 13]);
        m.check_invariants();
    }

    #[test]
    fn unexpected_arrival_order() {
        let mut m = M::new();
        m.push_unexpected(4, A, 0);
        m.push_unexpected(5, A, 1);
        m.push_unexpected(4, B, 2);
        m.push_unexpected(6, A, 3);
        let first = m.match_unexpected(0, !0, ANY).unwrap();
        assert_eq!(m.unexpected(first), Some(&0));
        assert_eq!(m.unexpected_meta(first), Some((4, A)));
        *m.unexpected_mut(first).unwrap() = 9;
        assert_eq!(take_unexp(&mut m, 4, 0, ANY), Some(9));
        assert_eq!(take_unexp(&mut m, 4, 3, ANY), Some(1)); // 4..=7, oldest is tag 5
        assert_eq!(take_unexp(&mut m, 4, 3, ANY), Some(2));
        assert_eq!(take_unexp(&mut m, 4, 3, ANY), Some(3));
        assert_eq!(m.unexpected_len(), 0);
    }

    #[test]
    fn exact_match_examines_constant_entries() {
        const N: u64 = 10_000;
        let mut m = M::with_capacity(N as usize, N as usize);
        for t in 0..N {
            m.post(t, 0, ANY, t as u32);
            m.push_unexpected(t, A, t as u32);
        }
        for t in [0, 1, N / 2, N - 2, N - 1] {
            let id = m.match_posted(t, A).unwrap();
            assert_eq!(m.posted(id), Some(&(t as u32)));
            assert_eq!(m.last_examined(), 1, "posted tag {t}");
            let id = m.match_unexpected(t, 0, A).unwrap();
            assert_eq!(m.unexpected(id), Some(&(t as u32)));
            assert_eq!(m.last_examined(), 1, "unexpected tag {t}");
        }
        assert_eq!(m.match_posted(N, A), None);
        assert_eq!(m.last_examined(), 0);
        assert_eq!(m.match_unexpected(N, 0, A), None);
        assert_eq!(m.last_examined(), 0);

        // A directed receive only costs a skip within its own bucket.
        m.post(N, 0, A, 0);
        m.post(N, 0, B, 0);
        let id = m.match_posted(N, B).unwrap();
        assert_eq!(m.posted_meta(id), Some((N, 0, B)));
        assert_eq!(m.last_examined(), 2);

        // Wildcard scans stop at the older exact candidate.
        m.post(0, !0, ANY, 7);
        m.match_posted(N / 2, A).unwrap();
        assert_eq!(m.last_examined(), 2);
    }

    #[test]
    fn steady_state_does_not_grow() {
        let mut m: M = M::new();
        let round = |m: &mut M, base: u64| {
            // Mix of fresh tags (bucket churn), repeated tags, wildcards and directed
            // receives, with both matching directions.
            for i in 0..64u64 {
                let tag = base + i;
                m.post(tag, 0, ANY, i as u32);
                m.post(tag & !7, 7, A, i as u32);
                m.push_unexpected(tag, B, i as u32);
                m.push_unexpected(i % 4, A, i as u32);
            }
            for i in 0..64u64 {
                let tag = base + i;
                assert!(take_posted(m, tag, B).is_some());
                assert!(take_posted(m, tag, A).is_some());
                assert!(take_unexp(m, tag, 0, B).is_some());
                assert!(take_unexp(m, 0, 3, A).is_some());
            }
            assert_eq!(m.posted_len(), 0);
            assert_eq!(m.unexpected_len(), 0);
        };
        for r in 0..64 {
            round(&mut m, r * 1000);
        }
        let caps = m.capacities();
        for r in 64..2064 {
            round(&mut m, r * 1000);
        }
        assert_eq!(m.capacities(), caps);
        m.check_invariants();
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        /// Naive reference: Vecs in insertion order, linear scans.
        #[derive(Default)]
        struct Ref {
            posted: Vec<(u64, u64, FiAddr, u32)>,
            unexp: Vec<(u64, FiAddr, u32)>,
        }

        impl Ref {
            fn match_posted(&self, tag: u64, src: FiAddr) -> Option<usize> {
                self.posted.iter().position(|&(t, ig, s, _)| {
                    t & !ig == tag & !ig && (s == FiAddr::UNSPEC || s == src)
                })
            }
            fn match_unexp(&self, tag: u64, ig: u64, src: FiAddr) -> Option<usize> {
                self.unexp.iter().position(|&(t, s, _)| {
                    t & !ig == tag & !ig && (src == FiAddr::UNSPEC || src == s)
                })
            }
        }

        #[derive(Debug, Clone)]
        enum Op {
            Post(u64, u64, FiAddr),
            MatchPosted(u64, FiAddr, bool),
            /// `deliver`: finished (removed) or left posted.
            Deliver(u64, FiAddr, bool),
            RemovePosted(usize),
            Push(u64, FiAddr),
            MatchUnexp(u64, u64, FiAddr, bool),
            RemoveUnexp(usize),
            Cancel(u32),
            RemoveStale(usize),
            DrainPosted,
            DrainUnexp,
        }

        /// Tags below `n`: a few (long buckets, much matching) or many (bucket churn:
        /// empty buckets swept and their positions reused, the cache invalidated).
        fn tag(n: u64) -> impl Strategy<Value = u64> {
            0u64..n
        }
        fn ignore() -> impl Strategy<Value = u64> {
            prop_oneof![3 => Just(0u64), 1 => Just(1), 1 => Just(2), 1 => Just(3), 1 => Just(!0)]
        }
        fn recv_src() -> impl Strategy<Value = FiAddr> {
            prop_oneof![2 => Just(FiAddr::UNSPEC), 1 => Just(A), 1 => Just(B)]
        }
        fn msg_src() -> impl Strategy<Value = FiAddr> {
            prop_oneof![2 => Just(A), 2 => Just(B), 1 => Just(FiAddr::NOTAVAIL)]
        }
        fn op(tags: u64) -> impl Strategy<Value = Op> {
            prop_oneof![
                6 => (tag(tags), ignore(), recv_src()).prop_map(|(t, i, s)| Op::Post(t, i, s)),
                5 => (tag(tags), msg_src(), any::<bool>()).prop_map(|(t, s, r)| Op::MatchPosted(t, s, r)),
                4 => (tag(tags), msg_src(), any::<bool>()).prop_map(|(t, s, d)| Op::Deliver(t, s, d)),
                2 => any::<usize>().prop_map(Op::RemovePosted),
                6 => (tag(tags), msg_src()).prop_map(|(t, s)| Op::Push(t, s)),
                5 => (tag(tags), ignore(), recv_src(), any::<bool>())
                    .prop_map(|(t, i, s, r)| Op::MatchUnexp(t, i, s, r)),
                2 => any::<usize>().prop_map(Op::RemoveUnexp),
                1 => (0u32..7).prop_map(Op::Cancel),
                1 => any::<usize>().prop_map(Op::RemoveStale),
                1 => Just(Op::DrainPosted),
                1 => Just(Op::DrainUnexp),
            ]
        }

        /// Runs `ops` against the matcher and the naive model side by side.
        fn check_against_model(ops: Vec<Op>) -> Result<(), TestCaseError> {
            let mut m = M::new();
            let mut r = Ref::default();
            // Value -> handle; values are unique per insertion.
            let mut pids: Vec<PostedId> = Vec::new();
            let mut uids: Vec<UnexpectedId> = Vec::new();
            let mut stale_p: Vec<PostedId> = Vec::new();
            let mut stale_u: Vec<UnexpectedId> = Vec::new();
            for op in ops {
                match op {
                    Op::Post(t, i, s) => {
                        let v = pids.len() as u32;
                        pids.push(m.post(t, i, s, v));
                        r.posted.push((t, i, s, v));
                    }
                    Op::MatchPosted(t, s, rm) => {
                        let got = m.match_posted(t, s);
                        let want = r.match_posted(t, s);
                        prop_assert_eq!(
                            got.and_then(|id| m.posted(id)).copied(),
                            want.map(|k| r.posted[k].3)
                        );
                        if let (Some(id), Some(k), true) = (got, want, rm) {
                            prop_assert_eq!(id, pids[r.posted[k].3 as usize]);
                            prop_assert_eq!(m.remove_posted(id), Some(r.posted.remove(k).3));
                            stale_p.push(id);
                        }
                    }
                    Op::Deliver(t, s, done) => {
                        let want = r.match_posted(t, s);
                        let got = m.deliver(t, s, |v| {
                            // Mutations stick when the receive stays posted.
                            *v += 1_000_000;
                            (done, *v - 1_000_000)
                        });
                        prop_assert_eq!(got, want.map(|k| r.posted[k].3));
                        if let Some(k) = want {
                            let v = r.posted[k].3;
                            let id = pids[v as usize];
                            if done {
                                r.posted.remove(k);
                                prop_assert_eq!(m.posted(id), None);
                                stale_p.push(id);
                            } else {
                                prop_assert_eq!(m.posted(id), Some(&(v + 1_000_000)));
                                *m.posted_mut(id).unwrap() = v;
                            }
                        }
                    }
                    Op::RemovePosted(k) if !r.posted.is_empty() => {
                        let (t, i, s, v) = r.posted.remove(k % r.posted.len());
                        let id = pids[v as usize];
                        prop_assert_eq!(m.posted_meta(id), Some((t, i, s)));
                        if k % 2 == 0 {
                            prop_assert_eq!(m.remove_posted(id), Some(v));
                        } else {
                            prop_assert!(m.discard_posted(id));
                        }
                        stale_p.push(id);
                    }
                    Op::RemovePosted(_) => {}
                    Op::Push(t, s) => {
                        let v = uids.len() as u32;
                        uids.push(m.push_unexpected(t, s, v));
                        r.unexp.push((t, s, v));
                    }
                    Op::MatchUnexp(t, i, s, rm) => {
                        let got = m.match_unexpected(t, i, s);
                        let want = r.match_unexp(t, i, s);
                        prop_assert_eq!(
                            got.and_then(|id| m.unexpected(id)).copied(),
                            want.map(|k| r.unexp[k].2)
                        );
                        if let (Some(id), Some(k), true) = (got, want, rm) {
                            let (mt, ms, v) = r.unexp.remove(k);
                            prop_assert_eq!(m.unexpected_meta(id), Some((mt, ms)));
                            prop_assert_eq!(m.remove_unexpected(id), Some(v));
                            stale_u.push(id);
                        }
                    }
                    Op::RemoveUnexp(k) if !r.unexp.is_empty() => {
                        let (_, _, v) = r.unexp.remove(k % r.unexp.len());
                        let id = uids[v as usize];
                        prop_assert_eq!(m.remove_unexpected(id), Some(v));
                        stale_u.push(id);
                    }
                    Op::RemoveUnexp(_) => {}
                    Op::Cancel(x) => {
                        let want = r
                            .posted
                            .iter()
                            .position(|p| p.3 % 7 == x)
                            .map(|k| r.posted.remove(k).3);
                        prop_assert_eq!(m.cancel_posted(|&v| v % 7 == x), want);
                        if let Some(v) = want {
                            stale_p.push(pids[v as usize]);
                        }
                    }
                    Op::RemoveStale(k) => {
                        if !stale_p.is_empty() {
                            let id = stale_p[k % stale_p.len()];
                            prop_assert_eq!(m.posted(id), None);
                            prop_assert_eq!(m.remove_posted(id), None);
                            prop_assert!(!m.discard_posted(id));
                        }
                        if !stale_u.is_empty() {
                            let id = stale_u[k % stale_u.len()];
                            prop_assert_eq!(m.unexpected(id), None);
                            prop_assert_eq!(m.remove_unexpected(id), None);
                        }
                    }
                    Op::DrainPosted => {
                        let want: Vec<u32> = r.posted.drain(..).map(|p| p.3).collect();
                        stale_p.extend(want.iter().map(|&v| pids[v as usize]));
                        prop_assert_eq!(m.drain_posted(), want);
                    }
                    Op::DrainUnexp => {
                        let want: Vec<u32> = r.unexp.drain(..).map(|u| u.2).collect();
                        stale_u.extend(want.iter().map(|&v| uids[v as usize]));
                        prop_assert_eq!(m.drain_unexpected(), want);
                    }
                }
                prop_assert_eq!(m.posted_len(), r.posted.len());
                prop_assert_eq!(m.unexpected_len(), r.unexp.len());
                m.check_invariants();
            }
            Ok(())
        }

        /// Cases per property: a handful under Miri, which runs them a thousand times slower.
        const fn cases(native: u32) -> u32 {
            if cfg!(miri) {
                4
            } else {
                native
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(cases(512)))]
            #[test]
            fn matches_reference(ops in proptest::collection::vec(op(6), 1..200)) {
                check_against_model(ops)?;
            }

        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(cases(128)))]
            #[test]
            fn matches_reference_many_tags(ops in proptest::collection::vec(op(400), 1..600)) {
                check_against_model(ops)?;
            }
        }
    }
}
