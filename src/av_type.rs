//! The AV-type parameter `A`: [`Map`] or [`Table`] (`FI_AV_MAP` / `FI_AV_TABLE`).
//!
//! The marker decides how an [`FiAddr`](crate::FiAddr) is encoded, so resolving a
//! destination on the fast path has no branch on the AV type.

use crate::attr::AvKind;

mod sealed {
    pub trait Sealed {}
}

/// How addresses of an address vector are formed. Sealed: [`Map`] and [`Table`] only.
pub trait AvType: sealed::Sealed + Send + Sync + 'static {
    /// The run-time view (`FI_AV_MAP` / `FI_AV_TABLE`).
    const KIND: AvKind;
    /// Encodes the address of `slot`, inserted in generation `gen`.
    fn encode(slot: u32, gen: u32) -> u64;
    /// Decodes an address into its slot and, for [`Map`], the generation it must have.
    /// `None` when the value cannot be an address of this type.
    fn decode(addr: u64) -> Option<(u32, Option<u32>)>;
}

/// `FI_AV_MAP`: addresses are opaque handles (slot and generation), so an address
/// that was removed is never mistaken for a later peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Map {}

/// `FI_AV_TABLE`: addresses are consecutive indices `0, 1, 2, ...` in insertion order,
/// which applications may compute (and combine with `fi_rx_addr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {}

impl sealed::Sealed for Map {}
impl sealed::Sealed for Table {}

impl AvType for Map {
    const KIND: AvKind = AvKind::Map;
    #[inline]
    fn encode(slot: u32, gen: u32) -> u64 {
        // Generation in the high half keeps bit 63 clear for gen < 2^31, leaving room
        // for rx_ctx_bits in the top bits only when the generation is small; the AV
        // masks generations to the bits rx_ctx_bits leaves free.
        ((gen as u64) << 32) | slot as u64
    }
    #[inline]
    fn decode(addr: u64) -> Option<(u32, Option<u32>)> {
        Some((addr as u32, Some((addr >> 32) as u32)))
    }
}

impl AvType for Table {
    const KIND: AvKind = AvKind::Table;
    #[inline]
    fn encode(slot: u32, _gen: u32) -> u64 {
        slot as u64
    }
    #[inline]
    fn decode(addr: u64) -> Option<(u32, Option<u32>)> {
        if addr > u32::MAX as u64 {
            None
        } else {
            Some((addr as u32, None))
        }
    }
}
