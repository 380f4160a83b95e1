//! The CQ-format parameter `C` and the completion entries, laid out exactly like
//! libfabric's `fi_cq_*_entry` structs.
//!
//! A provider describes a completion once as a [`Completion`]; the format's
//! [`CqFormat::make`] picks the fields its entry has, so with inlining the others are
//! never computed or stored.
//!
//! An application may declare its own entry with any subset of the completion fields;
//! the provider then writes exactly those:
//!
//! ```
//! use fabric::prelude::*;
//!
//! #[derive(Clone, Copy, Default, Debug, fabric::CqFormat)]
//! #[repr(C)]
//! struct Entry {
//!     context: Context,
//!     len: usize,
//!     src: FiAddr, // the sender's AV address with FI_SOURCE
//! }
//! type Net = Stack<fabric_loopback::Loopback, ThreadDomain, Manual, Entry>;
//! assert_eq!(core::mem::size_of::<<Entry as CqFormat>::Entry>(), 24);
//! let c = Completion { context: Context(3), len: 5, tag: 9, src: FiAddr(1), ..Default::default() };
//! let e = <Entry as CqFormat>::make(&c);
//! assert_eq!((e.context, e.len, e.src), (Context(3), 5, FiAddr(1)));
//! # let _ = getinfo::<Net>(None).unwrap();
//! ```

use static_assertions::const_assert_eq;

use crate::attr::CqFormatKind;
use crate::flags::CqFlags;
use crate::types::{Context, FiAddr};

/// Everything a completion can report; formats copy the subset they hold.
///
/// The default is an empty completion from an unknown source (`src` is
/// [`FiAddr::NOTAVAIL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    /// The operation's context.
    pub context: Context,
    /// Completion flags.
    pub flags: CqFlags,
    /// Bytes transferred (received length for receives).
    pub len: usize,
    /// Start of the received data (receives; multi-receive gives the position in the buffer).
    pub buf: usize,
    /// Remote CQ data (valid with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
    /// The message's tag (tagged receives).
    pub tag: u64,
    /// The source address (receives on an endpoint with `FI_SOURCE`; otherwise
    /// [`FiAddr::NOTAVAIL`]). It is what `fi_cq_readfrom` reports, and what a user
    /// format with a `src` field stores.
    pub src: FiAddr,
}

/// A CQ entry format. Open: users may define their own entry type, most easily with
/// [`#[derive(CqFormat)]`](macro@crate::CqFormat) on a `#[repr(C)]` struct whose fields
/// are a subset of [`Completion`]'s.
pub trait CqFormat: 'static {
    /// The run-time view (`FI_CQ_FORMAT_*`), `Unspec` for user formats.
    const KIND: CqFormatKind;
    /// The entry stored in and read from the CQ.
    type Entry: Copy + Default + Send + 'static;
    /// Builds an entry from a completion, copying only the fields the format has.
    fn make(c: &Completion) -> Self::Entry;
    /// The inverse of [`make`](Self::make): the completion an entry reports, with the
    /// fields the format lacks left at their defaults (zero). Format-independent readers
    /// (the run-time dispatch layer, logging) see any stack's entries through it.
    fn completion(e: &Self::Entry) -> Completion;
}

/// `struct fi_cq_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct CqEntry {
    /// `op_context`.
    pub op_context: Context,
}

/// `struct fi_cq_msg_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct CqMsgEntry {
    /// `op_context`.
    pub op_context: Context,
    /// `flags`.
    pub flags: CqFlags,
    /// `len`.
    pub len: usize,
}

/// `struct fi_cq_data_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct CqDataEntry {
    /// `op_context`.
    pub op_context: Context,
    /// `flags`.
    pub flags: CqFlags,
    /// `len`.
    pub len: usize,
    /// `buf`.
    pub buf: usize,
    /// `data`.
    pub data: u64,
}

/// `struct fi_cq_tagged_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct CqTaggedEntry {
    /// `op_context`.
    pub op_context: Context,
    /// `flags`.
    pub flags: CqFlags,
    /// `len`.
    pub len: usize,
    /// `buf`.
    pub buf: usize,
    /// `data`.
    pub data: u64,
    /// `tag`.
    pub tag: u64,
}

#[cfg(target_pointer_width = "64")]
mod layout {
    use super::*;
    const_assert_eq!(core::mem::size_of::<CqEntry>(), 8);
    const_assert_eq!(core::mem::size_of::<CqMsgEntry>(), 24);
    const_assert_eq!(core::mem::size_of::<CqDataEntry>(), 40);
    const_assert_eq!(core::mem::size_of::<CqTaggedEntry>(), 48);
    const_assert_eq!(core::mem::offset_of!(CqTaggedEntry, flags), 8);
    const_assert_eq!(core::mem::offset_of!(CqTaggedEntry, len), 16);
    const_assert_eq!(core::mem::offset_of!(CqTaggedEntry, buf), 24);
    const_assert_eq!(core::mem::offset_of!(CqTaggedEntry, data), 32);
    const_assert_eq!(core::mem::offset_of!(CqTaggedEntry, tag), 40);
}

/// `FI_CQ_FORMAT_CONTEXT`.
pub enum CqContext {}
/// `FI_CQ_FORMAT_MSG`.
pub enum CqMsg {}
/// `FI_CQ_FORMAT_DATA`.
pub enum CqData {}
/// `FI_CQ_FORMAT_TAGGED`.
pub enum CqTagged {}

impl CqFormat for CqContext {
    const KIND: CqFormatKind = CqFormatKind::Context;
    type Entry = CqEntry;
    #[inline(always)]
    fn make(c: &Completion) -> CqEntry {
        CqEntry {
            op_context: c.context,
        }
    }
    #[inline(always)]
    fn completion(e: &CqEntry) -> Completion {
        Completion {
            context: e.op_context,
            ..Completion::default()
        }
    }
}
impl CqFormat for CqMsg {
    const KIND: CqFormatKind = CqFormatKind::Msg;
    type Entry = CqMsgEntry;
    #[inline(always)]
    fn make(c: &Completion) -> CqMsgEntry {
        CqMsgEntry {
            op_context: c.context,
            flags: c.flags,
            len: c.len,
        }
    }
    #[inline(always)]
    fn completion(e: &CqMsgEntry) -> Completion {
        Completion {
            context: e.op_context,
            flags: e.flags,
            len: e.len,
            ..Completion::default()
        }
    }
}
impl CqFormat for CqData {
    const KIND: CqFormatKind = CqFormatKind::Data;
    type Entry = CqDataEntry;
    #[inline(always)]
    fn make(c: &Completion) -> CqDataEntry {
        CqDataEntry {
            op_context: c.context,
            flags: c.flags,
            len: c.len,
            buf: c.buf,
            data: c.data,
        }
    }
    #[inline(always)]
    fn completion(e: &CqDataEntry) -> Completion {
        Completion {
            context: e.op_context,
            flags: e.flags,
            len: e.len,
            buf: e.buf,
            data: e.data,
            ..Completion::default()
        }
    }
}
impl CqFormat for CqTagged {
    const KIND: CqFormatKind = CqFormatKind::Tagged;
    type Entry = CqTaggedEntry;
    #[inline(always)]
    fn make(c: &Completion) -> CqTaggedEntry {
        CqTaggedEntry {
            op_context: c.context,
            flags: c.flags,
            len: c.len,
            buf: c.buf,
            data: c.data,
            tag: c.tag,
        }
    }
    #[inline(always)]
    fn completion(e: &CqTaggedEntry) -> Completion {
        Completion {
            context: e.op_context,
            flags: e.flags,
            len: e.len,
            buf: e.buf,
            data: e.data,
            tag: e.tag,
            ..Completion::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `completion` inverts `make` on the fields each format holds, zeroing the others.
    #[test]
    fn completion_inverts_make() {
        let c = Completion {
            context: Context(9),
            flags: CqFlags::RECV | CqFlags::TAGGED,
            len: 3,
            buf: 0x1000,
            data: 7,
            tag: 0x42,
            src: FiAddr::NOTAVAIL,
        };
        let only = |f: fn(&mut Completion)| {
            let mut z = Completion::default();
            f(&mut z);
            z
        };
        assert_eq!(
            CqContext::completion(&CqContext::make(&c)),
            only(|z| z.context = Context(9))
        );
        assert_eq!(
            CqMsg::completion(&CqMsg::make(&c)),
            only(|z| {
                z.context = Context(9);
                z.flags = CqFlags::RECV | CqFlags::TAGGED;
                z.len = 3;
            })
        );
        assert_eq!(
            CqData::completion(&CqData::make(&c)),
            Completion { tag: 0, ..c }
        );
        assert_eq!(CqTagged::completion(&CqTagged::make(&c)), c);
    }
}
