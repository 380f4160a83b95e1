//! Address-vector storage (`man 3 fi_av`), generic over the AV type `A` and the
//! provider's resolved peer value `V`.
//!
//! [`AvTable`] maps [`FiAddr`] values to the peer's raw address bytes (its endpoint
//! name) and to whatever the provider resolved it to. The encoding of addresses is
//! decided by `A`:
//!
//! * [`Table`](crate::Table): addresses are `0, 1, 2, ...` in insertion order. A removed
//!   index is never handed out again, so a stale index stays invalid forever.
//! * [`Map`](crate::Map): addresses are slot + generation handles. A freed slot is
//!   reused with a bumped generation, so a stale handle never resolves to a later
//!   peer. A slot whose generation space is exhausted is retired instead of wrapping.
//!
//! Addresses handed to [`AvTable::get`] must already be stripped of receive-context
//! bits ([`FiAddr::split_rx`]); an address that still carries them resolves to
//! [`Error::AddrNotAvail`], never to a wrong peer.

use core::fmt;
use core::marker::PhantomData;

use std::sync::{Arc, Weak};

use rustc_hash::FxHashMap;

use crate::attr::AvKind;
use crate::av_type::AvType;
use crate::config::{Config, LockOf};
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::provider::Provider;
use crate::types::FiAddr;

use super::eq::EqInner;

/// Upper bound on what `count_hint` may preallocate: the hint comes from the
/// application's `fi_av_attr::count` and must not turn into a giant allocation.
const MAX_PREALLOC: usize = 1 << 16;

/// A live peer.
struct Entry<V> {
    name: Box<[u8]>,
    /// The other raw addresses its packets arrive under ([`Provider::aliases`]).
    aliases: Box<[Box<[u8]>]>,
    value: V,
}

/// One slot of the table. For [`Map`](crate::Map), `gen` is the generation of the
/// current occupant or, when free, of the next one.
struct Slot<V> {
    gen: u32,
    entry: Option<Entry<V>>,
}

/// Address-vector storage: `FiAddr` -> (raw address bytes, provider value).
///
/// Lookups ([`get`](AvTable::get)) are O(1) and allocation-free; reverse lookups by
/// raw address ([`reverse`](AvTable::reverse)) are O(1) expected.
pub struct AvTable<V, A: AvType> {
    slots: Vec<Slot<V>>,
    /// Freed [`Map`](crate::Map) slots that may be reused (never used for `Table`).
    free: Vec<u32>,
    /// Raw address (a peer's name or one of its aliases) -> live addresses with these
    /// bytes, oldest first. Almost always one element; duplicates are legal in
    /// libfabric.
    by_name: FxHashMap<Box<[u8]>, Vec<FiAddr>>,
    len: usize,
    /// Slots may be numbered `0..max_slots`, so an address never reaches into the
    /// receive-context bits and never equals `FI_ADDR_UNSPEC`.
    max_slots: usize,
    /// Largest generation that fits below the receive-context bits.
    max_gen: u32,
    _type: PhantomData<A>,
}

impl<V, A: AvType> AvTable<V, A> {
    /// An empty table without receive-context bits; `count_hint` (`fi_av_attr::count`)
    /// sizes the initial allocation.
    #[cfg(test)]
    pub fn new(count_hint: usize) -> Self {
        Self::build(count_hint, 0)
    }

    /// An empty table for an AV opened with `rx_ctx_bits` (`fi_av_attr::rx_ctx_bits`):
    /// every address it hands out leaves the top `rx_ctx_bits` bits clear, so
    /// [`FiAddr::rx_addr`] can be applied to it.
    ///
    /// `Err(Error::Inval)` when `rx_ctx_bits > 63` (no room for any address).
    pub fn with_rx_ctx_bits(count_hint: usize, rx_ctx_bits: u32) -> Result<Self> {
        if rx_ctx_bits > 63 {
            return Err(Error::Inval);
        }
        Ok(Self::build(count_hint, rx_ctx_bits))
    }

    fn build(count_hint: usize, rx_ctx_bits: u32) -> Self {
        // Slot u32::MAX is never used: for Map it would let generation u32::MAX form
        // FI_ADDR_UNSPEC.
        let mut max_slots = u32::MAX as u64;
        if rx_ctx_bits > 0 {
            max_slots = max_slots.min(1u64 << (64 - rx_ctx_bits));
        }
        // The Map generation lives in bits 32..64, below the receive-context bits.
        let max_gen = if rx_ctx_bits >= 32 {
            0
        } else {
            ((1u64 << (32 - rx_ctx_bits)) - 1) as u32
        };
        let hint = count_hint.min(MAX_PREALLOC);
        let mut slots = Vec::new();
        // A failed reservation only costs later reallocations; it is not an error.
        let _ = slots.try_reserve(hint);
        let mut by_name = FxHashMap::default();
        let _ = by_name.try_reserve(hint);
        AvTable {
            slots,
            free: Vec::new(),
            by_name,
            len: 0,
            max_slots: usize::try_from(max_slots).unwrap_or(usize::MAX),
            max_gen,
            _type: PhantomData,
        }
    }

    /// Inserts a peer by its raw address bytes (endpoint name) and the provider's
    /// resolved value, returning its address.
    ///
    /// [`Table`](crate::Table): consecutive indices in insertion order, never reused.
    /// [`Map`](crate::Map): a slot + generation handle; freed slots are reused with a
    /// bumped generation. Inserting the same name twice is allowed and yields two
    /// distinct addresses.
    ///
    /// When the address space is exhausted the value is dropped and
    /// [`FiAddr::NOTAVAIL`] is returned, as `fi_av_insert` reports a failed entry; use
    /// [`try_insert`](AvTable::try_insert) to get an error instead.
    #[cfg(test)]
    pub fn insert(&mut self, name: &[u8], value: V) -> FiAddr {
        self.try_insert(name, value).unwrap_or(FiAddr::NOTAVAIL)
    }

    /// [`insert`](AvTable::insert) returning `Err(Error::NoSpc)` when no further
    /// address can be formed (all indices used, or every slot retired).
    #[cfg(test)]
    pub fn try_insert(&mut self, name: &[u8], value: V) -> Result<FiAddr> {
        self.try_insert_aliased(name, Vec::new(), value)
    }

    /// Inserts a peer by its raw address bytes (endpoint name), the other raw
    /// addresses its packets arrive under ([`Provider::aliases`]: a reverse lookup of
    /// any of them finds it too) and the provider's resolved value, returning its
    /// address, as [`insert`](AvTable::insert) does; `Err(Error::NoSpc)` when no
    /// further address can be formed (all indices used, or every slot retired).
    pub fn try_insert_aliased(
        &mut self,
        name: &[u8],
        aliases: Vec<Box<[u8]>>,
        value: V,
    ) -> Result<FiAddr> {
        // A peer inserted again keeps the address it has: fi_av(3) leaves duplicate
        // inserts to the provider, Open MPI makes one per communicator that reaches a
        // peer, and a directed receive for one of two addresses would not take a
        // message resolved to the other (libfabric's own AVs return the existing one).
        if let Some(&a) = self.by_name.get(name).and_then(|addrs| {
            addrs
                .iter()
                .find(|&&a| self.entry(a).is_some_and(|e| *e.name == *name))
        }) {
            return Ok(a);
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                if self.slots.len() >= self.max_slots {
                    return Err(Error::NoSpc);
                }
                let slot = u32::try_from(self.slots.len()).map_err(|_| Error::NoSpc)?;
                self.slots.push(Slot {
                    gen: 0,
                    entry: None,
                });
                slot
            }
        };
        let name: Box<[u8]> = name.into();
        let s = &mut self.slots[slot as usize];
        let addr = FiAddr(A::encode(slot, s.gen));
        self.by_name.entry(name.clone()).or_default().push(addr);
        for a in &aliases {
            if **a != *name {
                self.by_name.entry(a.clone()).or_default().push(addr);
            }
        }
        s.entry = Some(Entry {
            name,
            aliases: aliases.into_boxed_slice(),
            value,
        });
        self.len += 1;
        Ok(addr)
    }

    /// `fi_av_remove`: removes a peer and returns its value.
    ///
    /// `Err(Error::Inval)` for an address that is not currently valid.
    pub fn remove(&mut self, addr: FiAddr) -> Result<V> {
        let slot = self.live_slot(addr).ok_or(Error::Inval)?;
        let s = &mut self.slots[slot];
        let entry = s.entry.take().ok_or(Error::Inval)?;
        if matches!(A::KIND, AvKind::Map) && s.gen < self.max_gen {
            s.gen += 1;
            // `slot` came from a u32 slot number, so this cannot truncate.
            self.free.push(slot as u32);
        }
        // Otherwise the slot is retired: Table indices are never reused, and a Map
        // slot out of generations would make an old handle valid again.
        self.len -= 1;
        for key in core::iter::once(&entry.name).chain(entry.aliases.iter()) {
            if let Some(addrs) = self.by_name.get_mut(key) {
                if let Some(i) = addrs.iter().position(|&a| a == addr) {
                    addrs.remove(i);
                }
                if addrs.is_empty() {
                    self.by_name.remove(key);
                }
            }
        }
        Ok(entry.value)
    }

    /// The slot index of a currently valid address.
    #[inline]
    fn live_slot(&self, addr: FiAddr) -> Option<usize> {
        let (slot, gen) = A::decode(addr.0)?;
        let slot = slot as usize;
        let s = self.slots.get(slot)?;
        if let Some(gen) = gen {
            if gen != s.gen {
                return None;
            }
        }
        s.entry.as_ref().map(|_| slot)
    }

    #[inline]
    fn entry(&self, addr: FiAddr) -> Option<&Entry<V>> {
        let (slot, gen) = A::decode(addr.0)?;
        let s = self.slots.get(slot as usize)?;
        match gen {
            Some(gen) if gen != s.gen => None,
            _ => s.entry.as_ref(),
        }
    }

    /// Fast path: resolves an address (already stripped of receive-context bits).
    ///
    /// `Err(Error::AddrNotAvail)` for unknown, removed or malformed addresses.
    #[inline]
    pub fn get(&self, addr: FiAddr) -> Result<&V> {
        match self.entry(addr) {
            Some(e) => Ok(&e.value),
            None => Err(Error::AddrNotAvail),
        }
    }

    /// [`get`](AvTable::get) with mutable access to the provider's value.
    #[inline]
    #[cfg(test)]
    pub fn get_mut(&mut self, addr: FiAddr) -> Result<&mut V> {
        let slot = self.live_slot(addr).ok_or(Error::AddrNotAvail)?;
        match self.slots[slot].entry.as_mut() {
            Some(e) => Ok(&mut e.value),
            None => Err(Error::AddrNotAvail),
        }
    }

    /// `fi_av_lookup`: the raw address bytes of a peer.
    ///
    /// `Err(Error::AddrNotAvail)` for an address that is not currently valid.
    #[inline]
    pub fn lookup(&self, addr: FiAddr) -> Result<&[u8]> {
        match self.entry(addr) {
            Some(e) => Ok(&e.name),
            None => Err(Error::AddrNotAvail),
        }
    }

    /// Reverse lookup for `FI_SOURCE`: the address of the most recently inserted live
    /// peer with these raw bytes as its name or one of its aliases, `None` if there is
    /// none.
    #[inline]
    pub fn reverse(&self, name: &[u8]) -> Option<FiAddr> {
        self.by_name
            .get(name)
            .and_then(|addrs| addrs.last().copied())
    }

    /// Number of live peers.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table has no live peers.
    #[inline]
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All live peers as `(address, raw bytes, value)`, in slot order: address order
    /// for [`Table`](crate::Table), ascending slot number for [`Map`](crate::Map).
    pub fn iter(&self) -> impl Iterator<Item = (FiAddr, &[u8], &V)> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.entry
                .as_ref()
                .map(|e| (FiAddr(A::encode(i as u32, s.gen)), &*e.name, &e.value))
        })
    }
}

impl<V: fmt::Debug, A: AvType> fmt::Debug for AvTable<V, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (addr, name, value) in self.iter() {
            m.entry(&addr.0, &(name, value));
        }
        m.finish()
    }
}

/// The `rx_ctx_bits` of a connection's table ([`AvInner::connection`]): beyond any
/// an application may ask for (at most 63), so no AV opened by the API has it.
const CONNECTION: u32 = u32::MAX;

pub(crate) type Peer<S> = <<S as Config>::Provider as Provider>::Peer;

pub(crate) struct AvState<S: Config> {
    pub(crate) table: AvTable<Peer<S>, S::Av>,
    pub(crate) eq: Option<Arc<EqInner<S>>>,
}

pub(crate) struct AvInner<S: Config> {
    pub(crate) state: LockOf<S, AvState<S>>,
    pub(crate) rx_ctx_bits: u32,
    pub(crate) name: Option<String>,
    pub(crate) async_events: bool,
}

impl<S: Config> AvInner<S> {
    /// Resolves `addr` (rx bits included) and runs `f` on the peer and the rx index.
    #[inline]
    pub(crate) fn with_peer<R>(
        &self,
        addr: FiAddr,
        f: impl FnOnce(&Peer<S>, u32) -> Result<R>,
    ) -> Result<R> {
        // One test for an AV without receive-context bits, as `split_rx` alone does.
        let (base, rx) = if self.rx_ctx_bits == 0 {
            (addr, 0)
        } else {
            self.split(addr)
        };
        // Forced inline, as the callers' `f`: the fast send path runs through here.
        self.state.with(
            #[inline(always)]
            |st| {
                let peer = st.table.get(base)?;
                f(peer, rx)
            },
        )
    }

    /// The table address and receive context `addr` names: with receive-context bits,
    /// or the connection's one peer whatever `addr` is (a connected MSG endpoint's
    /// destination is implied, as libfabric ignores `dest_addr` there).
    // Out of line: the test above is all an AV without receive-context bits (the RDM
    // fast path) carries of it.
    #[inline(never)]
    fn split(&self, addr: FiAddr) -> (FiAddr, u32) {
        if self.rx_ctx_bits == CONNECTION {
            (FiAddr(0), 0)
        } else {
            addr.split_rx(self.rx_ctx_bits)
        }
    }

    /// The table of a connected MSG endpoint: its one peer, at address 0 once the
    /// connection is up, reached through any address.
    pub(crate) fn connection() -> Self {
        AvInner {
            state: LockOf::<S, _>::new(AvState {
                table: AvTable::build(1, 0),
                eq: None,
            }),
            rx_ctx_bits: CONNECTION,
            name: None,
            async_events: false,
        }
    }

    /// The address of the peer with raw address `name`, for `FI_SOURCE`.
    #[inline]
    pub(crate) fn reverse(&self, name: &[u8]) -> FiAddr {
        self.state
            .with(|st| st.table.reverse(name).unwrap_or(FiAddr::NOTAVAIL))
    }
}

/// A fabric's named (shared) AVs.
pub(crate) type NamedAvs<S> = Vec<(String, Weak<AvInner<S>>)>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Map, Table};

    #[test]
    fn table_indices_are_consecutive() {
        let mut av: AvTable<u32, Table> = AvTable::new(4);
        for i in 0..10u32 {
            let a = av.insert(&i.to_le_bytes(), i * 10);
            assert_eq!(a, FiAddr(i as u64));
        }
        assert_eq!(av.len(), 10);
        for i in 0..10u32 {
            assert_eq!(*av.get(FiAddr(i as u64)).unwrap(), i * 10);
            assert_eq!(av.lookup(FiAddr(i as u64)).unwrap(), &i.to_le_bytes());
        }
    }

    #[test]
    fn table_remove_never_reuses() {
        let mut av: AvTable<&str, Table> = AvTable::new(0);
        let a = av.insert(b"a", "a");
        let b = av.insert(b"b", "b");
        assert_eq!(av.remove(a), Ok("a"));
        assert_eq!(av.get(a), Err(Error::AddrNotAvail));
        assert_eq!(av.lookup(a), Err(Error::AddrNotAvail));
        assert_eq!(av.remove(a), Err(Error::Inval));
        let c = av.insert(b"c", "c");
        assert_eq!(c, FiAddr(2));
        assert_eq!(av.get(a), Err(Error::AddrNotAvail));
        assert_eq!(av.get(b), Ok(&"b"));
        assert_eq!(av.len(), 2);
    }

    #[test]
    fn map_remove_then_get_and_generation_reuse() {
        let mut av: AvTable<u8, Map> = AvTable::new(2);
        let a = av.insert(b"a", 1);
        let b = av.insert(b"b", 2);
        assert_ne!(a, b);
        assert_eq!(av.remove(a), Ok(1));
        assert_eq!(av.get(a), Err(Error::AddrNotAvail));
        let c = av.insert(b"c", 3);
        // Same slot, new generation: the old handle must stay invalid.
        assert_eq!(c.0 as u32, a.0 as u32);
        assert_ne!(c, a);
        assert_eq!(av.get(a), Err(Error::AddrNotAvail));
        assert_eq!(av.remove(a), Err(Error::Inval));
        assert_eq!(av.get(c), Ok(&3));
        assert_eq!(av.get(b), Ok(&2));
        *av.get_mut(c).unwrap() = 30;
        assert_eq!(av.get(c), Ok(&30));
        assert_eq!(av.get_mut(a), Err(Error::AddrNotAvail));
    }

    #[test]
    fn map_many_reuses_keep_old_handles_invalid() {
        let mut av: AvTable<u32, Map> = AvTable::new(0);
        let mut old = Vec::new();
        for i in 0..100u32 {
            let a = av.insert(b"x", i);
            assert_eq!(av.get(a), Ok(&i));
            for &o in &old {
                assert_eq!(av.get(o), Err(Error::AddrNotAvail));
            }
            av.remove(a).unwrap();
            old.push(a);
        }
        assert!(av.is_empty());
        assert_eq!(av.reverse(b"x"), None);
    }

    #[test]
    fn map_retires_exhausted_slots() {
        // 31 rx bits leave one generation bit: each slot serves exactly two peers.
        let mut av: AvTable<u32, Map> = AvTable::with_rx_ctx_bits(0, 31).unwrap();
        let a0 = av.insert(b"a", 0);
        av.remove(a0).unwrap();
        let a1 = av.insert(b"a", 1);
        assert_eq!(a1.0 as u32, a0.0 as u32);
        assert_eq!(a1.0 >> 32, 1);
        av.remove(a1).unwrap();
        let a2 = av.insert(b"a", 2);
        assert_ne!(a2.0 as u32, a0.0 as u32, "exhausted slot must be retired");
        assert_eq!(av.get(a0), Err(Error::AddrNotAvail));
        assert_eq!(av.get(a1), Err(Error::AddrNotAvail));
        // All addresses leave the rx bits clear.
        assert_eq!(a2.0 >> 33, 0);
        let (peer, rx) = a2.rx_addr(5, 31).split_rx(31);
        assert_eq!((peer, rx), (a2, 5));
        assert_eq!(av.get(peer), Ok(&2));
        // Unstripped rx bits never resolve.
        assert_eq!(av.get(a2.rx_addr(5, 31)), Err(Error::AddrNotAvail));
    }

    #[test]
    fn rx_bits_limit_table_size() {
        let mut av: AvTable<(), Table> = AvTable::with_rx_ctx_bits(0, 62).unwrap();
        // 2 address bits: four peers.
        for i in 0..4u8 {
            assert_eq!(av.try_insert(&[i], ()), Ok(FiAddr(i as u64)));
        }
        assert_eq!(av.try_insert(b"p", ()), Err(Error::NoSpc));
        assert_eq!(av.insert(b"p", ()), FiAddr::NOTAVAIL);
        assert_eq!(av.len(), 4);
        assert!(AvTable::<(), Table>::with_rx_ctx_bits(0, 64).is_err());
        assert!(AvTable::<(), Map>::with_rx_ctx_bits(0, 63).is_ok());
    }

    #[test]
    fn garbage_addresses() {
        let mut t: AvTable<u8, Table> = AvTable::new(0);
        let mut m: AvTable<u8, Map> = AvTable::new(0);
        t.insert(b"a", 1);
        let ma = m.insert(b"a", 1);
        for bad in [
            FiAddr::UNSPEC,
            FiAddr(1),
            FiAddr(u32::MAX as u64),
            FiAddr(u32::MAX as u64 + 1),
            FiAddr(1 << 63),
        ] {
            assert_eq!(t.get(bad), Err(Error::AddrNotAvail));
            assert_eq!(t.lookup(bad), Err(Error::AddrNotAvail));
            assert_eq!(t.remove(bad), Err(Error::Inval));
            assert_eq!(m.get(bad), Err(Error::AddrNotAvail));
            assert_eq!(m.get_mut(bad), Err(Error::AddrNotAvail));
            assert_eq!(m.remove(bad), Err(Error::Inval));
        }
        // Right slot, wrong generation.
        assert_eq!(m.get(FiAddr(ma.0 | (7 << 32))), Err(Error::AddrNotAvail));
        assert_eq!(t.len(), 1);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn aliases_reverse_to_their_peer_until_removed() {
        let mut av: AvTable<u8, Table> = AvTable::new(0);
        let a = av
            .try_insert_aliased(
                b"both",
                vec![b"left".as_slice().into(), b"right".as_slice().into()],
                1,
            )
            .unwrap();
        let b = av.insert(b"other", 2);
        for key in [&b"both"[..], b"left", b"right"] {
            assert_eq!(av.reverse(key), Some(a));
        }
        assert_eq!(av.lookup(a), Ok(&b"both"[..]));
        // A later peer under the same alias is the one found, until it goes.
        let c = av
            .try_insert_aliased(b"again", vec![b"left".as_slice().into()], 3)
            .unwrap();
        assert_eq!(av.reverse(b"left"), Some(c));
        assert_eq!(av.remove(c), Ok(3));
        assert_eq!(av.reverse(b"left"), Some(a));
        assert_eq!(av.remove(a), Ok(1));
        for key in [&b"both"[..], b"left", b"right", b"again"] {
            assert_eq!(av.reverse(key), None);
        }
        assert_eq!(av.reverse(b"other"), Some(b));
    }

    #[test]
    fn reverse_lookup_duplicates_and_reinsertion() {
        let mut av: AvTable<u8, Map> = AvTable::new(0);
        assert_eq!(av.reverse(b"peer"), None);
        let a = av.insert(b"peer", 1);
        let b = av.insert(b"other", 2);
        assert_eq!(av.reverse(b"peer"), Some(a));
        // Inserted again: the same address, and the value it had.
        let a2 = av.insert(b"peer", 3);
        assert_eq!(a, a2);
        assert_eq!(av.get(a), Ok(&1));
        assert_eq!(av.len(), 2);
        assert_eq!(av.reverse(b"peer"), Some(a));
        // Removed, then inserted again: a live address once more.
        av.remove(a).unwrap();
        assert_eq!(av.reverse(b"peer"), None);
        let a3 = av.insert(b"peer", 4);
        assert_eq!(av.reverse(b"peer"), Some(a3));
        assert_eq!(av.get(a3), Ok(&4));
        av.remove(a3).unwrap();
        assert_eq!(av.reverse(b"peer"), None);
        assert_eq!(av.reverse(b"other"), Some(b));
        assert_eq!(av.reverse(b""), None);
    }

    #[test]
    fn iter_yields_live_peers_in_order() {
        let mut av: AvTable<u32, Table> = AvTable::new(0);
        let addrs: Vec<FiAddr> = (0..5u32).map(|i| av.insert(&[i as u8], i)).collect();
        av.remove(addrs[1]).unwrap();
        av.remove(addrs[3]).unwrap();
        let got: Vec<(FiAddr, Vec<u8>, u32)> =
            av.iter().map(|(a, n, v)| (a, n.to_vec(), *v)).collect();
        assert_eq!(
            got,
            vec![
                (FiAddr(0), vec![0], 0),
                (FiAddr(2), vec![2], 2),
                (FiAddr(4), vec![4], 4)
            ]
        );

        let mut m: AvTable<u32, Map> = AvTable::new(0);
        let a = m.insert(b"a", 0);
        let b = m.insert(b"b", 1);
        m.remove(a).unwrap();
        let c = m.insert(b"c", 2);
        let got: Vec<(FiAddr, u32)> = m.iter().map(|(a, _, v)| (a, *v)).collect();
        assert_eq!(got, vec![(c, 2), (b, 1)]);
        for (a, n, v) in m.iter() {
            assert_eq!(m.get(a), Ok(v));
            assert_eq!(m.lookup(a), Ok(n));
        }
        assert!(format!("{m:?}").contains("[99]"));
    }

    #[test]
    fn huge_count_hint_does_not_allocate_it() {
        let av: AvTable<u64, Table> = AvTable::new(usize::MAX);
        assert!(av.is_empty());
        assert_eq!(av.get(FiAddr(0)), Err(Error::AddrNotAvail));
    }
}
