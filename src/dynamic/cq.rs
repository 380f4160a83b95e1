//! The dyn completion queue: the format is chosen at open time from
//! [`CqAttr::format`](crate::attr::CqAttr::format), and entries are converted into it on
//! read.
//!
//! The stacks behind the dynamic layer all store tagged entries (the superset of every
//! format), so a read converts each stored entry into the CQ's format, dropping the
//! fields the format lacks, exactly as a static CQ of that format would have built it.
//! Where the entries go is the caller's choice of output buffer, a [`CqBuf`].

use std::any::Any;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::attr::CqFormatKind;
use crate::cq::CqErrEntry;
use crate::cq_format::{
    Completion, CqContext, CqData, CqDataEntry, CqEntry, CqFormat, CqMsg, CqMsgEntry, CqTagged,
    CqTaggedEntry,
};
use crate::error::{Error, Result};
use crate::flags::CqFlags;
use crate::types::{Context, FiAddr};
use crate::wait::Waitable;

use super::cast::same_slice_mut;
use super::ops::{through, Block, CqOps};

/// The format an `FI_CQ_FORMAT_UNSPEC` CQ gets: tagged, libfabric's richest.
pub const DEFAULT_FORMAT: CqFormatKind = CqFormatKind::Tagged;

fn resolve(format: CqFormatKind) -> CqFormatKind {
    match format {
        CqFormatKind::Unspec => DEFAULT_FORMAT,
        f => f,
    }
}

/// Size in bytes of one C-layout entry of `format` (`Unspec`: the default, tagged).
pub const fn entry_size(format: CqFormatKind) -> usize {
    match format {
        CqFormatKind::Context => core::mem::size_of::<CqEntry>(),
        CqFormatKind::Msg => core::mem::size_of::<CqMsgEntry>(),
        CqFormatKind::Data => core::mem::size_of::<CqDataEntry>(),
        CqFormatKind::Tagged | CqFormatKind::Unspec => core::mem::size_of::<CqTaggedEntry>(),
    }
}

/// A completion entry of any of the four libfabric formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DynEntry {
    /// `struct fi_cq_entry`.
    Context(CqEntry),
    /// `struct fi_cq_msg_entry`.
    Msg(CqMsgEntry),
    /// `struct fi_cq_data_entry`.
    Data(CqDataEntry),
    /// `struct fi_cq_tagged_entry`.
    Tagged(CqTaggedEntry),
}

impl Default for DynEntry {
    /// An empty tagged entry (the default format), to fill output buffers with.
    fn default() -> Self {
        DynEntry::Tagged(CqTaggedEntry::default())
    }
}

impl DynEntry {
    /// The entry of `format` reporting `c` (`Unspec`: tagged).
    pub fn make(format: CqFormatKind, c: &Completion) -> Self {
        match resolve(format) {
            CqFormatKind::Context => DynEntry::Context(CqContext::make(c)),
            CqFormatKind::Msg => DynEntry::Msg(CqMsg::make(c)),
            CqFormatKind::Data => DynEntry::Data(CqData::make(c)),
            _ => DynEntry::Tagged(CqTagged::make(c)),
        }
    }

    /// The entry's format.
    pub fn format(&self) -> CqFormatKind {
        match self {
            DynEntry::Context(_) => CqFormatKind::Context,
            DynEntry::Msg(_) => CqFormatKind::Msg,
            DynEntry::Data(_) => CqFormatKind::Data,
            DynEntry::Tagged(_) => CqFormatKind::Tagged,
        }
    }

    /// The completion the entry reports, fields its format lacks zero.
    pub fn completion(&self) -> Completion {
        match self {
            DynEntry::Context(e) => CqContext::completion(e),
            DynEntry::Msg(e) => CqMsg::completion(e),
            DynEntry::Data(e) => CqData::completion(e),
            DynEntry::Tagged(e) => CqTagged::completion(e),
        }
    }

    /// `op_context`.
    pub fn context(&self) -> Context {
        self.completion().context
    }

    /// `flags` (`None` for the context format).
    pub fn flags(&self) -> Option<CqFlags> {
        (!matches!(self, DynEntry::Context(_))).then(|| self.completion().flags)
    }

    /// `len` (`None` for the context format).
    #[allow(clippy::len_without_is_empty)] // the entry field, not a container length
    pub fn len(&self) -> Option<usize> {
        (!matches!(self, DynEntry::Context(_))).then(|| self.completion().len)
    }

    /// `buf` (data and tagged formats).
    pub fn buf(&self) -> Option<usize> {
        matches!(self, DynEntry::Data(_) | DynEntry::Tagged(_)).then(|| self.completion().buf)
    }

    /// `data` (data and tagged formats).
    pub fn data(&self) -> Option<u64> {
        matches!(self, DynEntry::Data(_) | DynEntry::Tagged(_)).then(|| self.completion().data)
    }

    /// `tag` (tagged format).
    pub fn tag(&self) -> Option<u64> {
        match self {
            DynEntry::Tagged(e) => Some(e.tag),
            _ => None,
        }
    }
}

/// The completion as a CQ of `format` reports it: the fields the format lacks zeroed.
fn mask(format: CqFormatKind, c: &Completion) -> Completion {
    DynEntry::make(format, c).completion()
}

/// An output buffer for [`DynCq`] reads:
///
/// | buffer | what is written |
/// |---|---|
/// | `[u8]` | C-layout entries of the CQ's format (`struct fi_cq_*_entry`), `entry_size()` bytes each, as `fi_cq_read` writes them |
/// | `[DynEntry]` | one [`DynEntry`] per completion, tagged with the CQ's format |
/// | `[CqEntry]`, `[CqMsgEntry]`, `[CqDataEntry]`, `[CqTaggedEntry]` | the typed entries; the type must be the CQ's format (`Err(Inval)` otherwise) |
/// | `[Completion]` | format-independent completions, fields the format lacks zero |
pub trait CqBuf {
    /// How many entries of `format` fit, or `Err(Inval)` when the buffer cannot hold
    /// entries of that format.
    fn capacity(&self, format: CqFormatKind) -> Result<usize>;
    /// Stores completion `c` as entry `index` (below the capacity) of `format`.
    fn store(&mut self, index: usize, format: CqFormatKind, c: &Completion);
    /// The buffer as tagged entries, if it is made of them: a tagged CQ then reads
    /// into it directly, with no conversion through [`CqBuf::store`].
    fn tagged(&mut self) -> Option<&mut [CqTaggedEntry]> {
        None
    }
}

/// One read (`src`: readfrom; `block`: sread) of `cq` into tagged entries.
#[inline(always)]
fn read_tagged(
    cq: &dyn CqOps,
    out: &mut [CqTaggedEntry],
    src: Option<&mut [FiAddr]>,
    block: Block,
) -> Result<usize> {
    match block {
        None => cq.read_tagged(out, src),
        Some((threshold, timeout)) => cq.sread_tagged(out, src, threshold, timeout),
    }
}

/// Writes `bytes` at `off` of `out`.
#[inline]
fn put(out: &mut [u8], off: usize, bytes: &[u8]) {
    out[off..off + bytes.len()].copy_from_slice(bytes);
}

/// Writes the C layout of `c` in `format` into `out` (exactly one entry long); padding,
/// if the target has any, is zero.
fn write_c(format: CqFormatKind, c: &Completion, out: &mut [u8]) {
    use core::mem::offset_of;
    out.fill(0);
    let ctx = c.context.0.to_ne_bytes();
    let flags = c.flags.bits().to_ne_bytes();
    let len = c.len.to_ne_bytes();
    match resolve(format) {
        CqFormatKind::Context => put(out, offset_of!(CqEntry, op_context), &ctx),
        CqFormatKind::Msg => {
            put(out, offset_of!(CqMsgEntry, op_context), &ctx);
            put(out, offset_of!(CqMsgEntry, flags), &flags);
            put(out, offset_of!(CqMsgEntry, len), &len);
        }
        CqFormatKind::Data => {
            put(out, offset_of!(CqDataEntry, op_context), &ctx);
            put(out, offset_of!(CqDataEntry, flags), &flags);
            put(out, offset_of!(CqDataEntry, len), &len);
            put(out, offset_of!(CqDataEntry, buf), &c.buf.to_ne_bytes());
            put(out, offset_of!(CqDataEntry, data), &c.data.to_ne_bytes());
        }
        _ => {
            put(out, offset_of!(CqTaggedEntry, op_context), &ctx);
            put(out, offset_of!(CqTaggedEntry, flags), &flags);
            put(out, offset_of!(CqTaggedEntry, len), &len);
            put(out, offset_of!(CqTaggedEntry, buf), &c.buf.to_ne_bytes());
            put(out, offset_of!(CqTaggedEntry, data), &c.data.to_ne_bytes());
            put(out, offset_of!(CqTaggedEntry, tag), &c.tag.to_ne_bytes());
        }
    }
}

impl CqBuf for [u8] {
    fn capacity(&self, format: CqFormatKind) -> Result<usize> {
        Ok(self.len() / entry_size(format))
    }
    fn store(&mut self, index: usize, format: CqFormatKind, c: &Completion) {
        let n = entry_size(format);
        write_c(format, c, &mut self[index * n..(index + 1) * n]);
    }
}

impl CqBuf for [DynEntry] {
    fn capacity(&self, _format: CqFormatKind) -> Result<usize> {
        Ok(self.len())
    }
    fn store(&mut self, index: usize, format: CqFormatKind, c: &Completion) {
        self[index] = DynEntry::make(format, c);
    }
}

impl CqBuf for [Completion] {
    fn capacity(&self, _format: CqFormatKind) -> Result<usize> {
        Ok(self.len())
    }
    fn store(&mut self, index: usize, format: CqFormatKind, c: &Completion) {
        self[index] = mask(format, c);
    }
}

macro_rules! typed_buf {
    ($($entry:ty => $fmt:ty),*) => {$(
        impl CqBuf for [$entry] {
            fn capacity(&self, format: CqFormatKind) -> Result<usize> {
                if resolve(format) == <$fmt as CqFormat>::KIND {
                    Ok(self.len())
                } else {
                    Err(Error::Inval)
                }
            }
            fn store(&mut self, index: usize, _format: CqFormatKind, c: &Completion) {
                self[index] = <$fmt as CqFormat>::make(c);
            }
            #[inline]
            fn tagged(&mut self) -> Option<&mut [CqTaggedEntry]> {
                same_slice_mut::<$entry, CqTaggedEntry>(self)
            }
        }
    )*};
}
typed_buf!(CqEntry => CqContext, CqMsgEntry => CqMsg, CqDataEntry => CqData, CqTaggedEntry => CqTagged);

/// A completion queue whose entry format was chosen at open time.
///
/// Reads are generic over the output buffer ([`CqBuf`], see there): bytes in the C layout of the
/// format, [`DynEntry`]s, the format's typed entries, or [`Completion`]s. The other CQ
/// calls (`read_err`, `signal`, `wait_fd`, `strerror`) come from [`CqOps`], `trywait`
/// from [`Waitable`].
///
/// A read into [`CqTaggedEntry`]s of a tagged CQ is the stack's own read, straight into
/// the caller's entries. A read into any other buffer moves the stored entries through a
/// stack buffer in chunks of 16, converting each; a chunk's error (including
/// `Err(Avail)` for a waiting error entry) after some entries were read ends the read
/// with those entries, and the next read reports it.
pub struct DynCq {
    inner: Box<dyn CqOps>,
    format: CqFormatKind,
}

impl DynCq {
    /// Wraps a CQ that stores tagged entries, presenting them in `format`.
    pub(crate) fn new(inner: Box<dyn CqOps>, format: CqFormatKind) -> Result<Self> {
        let format = resolve(format);
        // The stored format must hold every field of the presented one.
        let stored = inner.format();
        if stored != CqFormatKind::Tagged && stored != format {
            return Err(Error::Inval);
        }
        Ok(DynCq { inner, format })
    }

    /// The CQ's entry format (`FI_CQ_FORMAT_*`; an `Unspec` request was opened as
    /// [`DEFAULT_FORMAT`]).
    pub fn format(&self) -> CqFormatKind {
        self.format
    }

    /// Bytes of one C-layout entry of the CQ's format.
    pub fn entry_size(&self) -> usize {
        entry_size(self.format)
    }

    #[inline]
    fn read_impl<B: CqBuf + ?Sized>(
        &self,
        out: &mut B,
        src: Option<&mut [FiAddr]>,
        block: Block,
    ) -> Result<usize> {
        let format = self.format;
        let cap = out.capacity(format)?;
        if format == CqFormatKind::Tagged {
            if let Some(out) = out.tagged() {
                return read_tagged(&*self.inner, out, src, block);
            }
        }
        self.read_through(cap, src, block, |i, e| {
            out.store(i, format, &CqTagged::completion(e))
        })
    }

    /// Reads up to `cap` stored entries in chunks (see [`through`]), handing each to
    /// `put` with its index in the read.
    fn read_through(
        &self,
        cap: usize,
        src: Option<&mut [FiAddr]>,
        block: Block,
        put: impl FnMut(usize, &CqTaggedEntry),
    ) -> Result<usize> {
        through(
            cap,
            src,
            |t, s, first| read_tagged(&*self.inner, t, s, block.filter(|_| first)),
            put,
        )
    }

    /// A tagged read of a CQ of any format: its entries as tagged ones, the fields the
    /// format lacks zero (a CQ's [`CqOps`] view, whatever buffer the format takes).
    fn read_tagged_masked(
        &self,
        out: &mut [CqTaggedEntry],
        src: Option<&mut [FiAddr]>,
        block: Block,
    ) -> Result<usize> {
        if self.format == CqFormatKind::Tagged {
            return read_tagged(&*self.inner, out, src, block);
        }
        let format = self.format;
        self.read_through(out.len(), src, block, |i, e| {
            out[i] = CqTagged::make(&mask(format, &CqTagged::completion(e)))
        })
    }

    /// `fi_cq_read`: up to the buffer's capacity of completions. `Err(Again)` when none,
    /// `Err(Avail)` when an error entry waits for `read_err`, `Err(Inval)` when the
    /// buffer cannot hold this CQ's format.
    pub fn read<B: CqBuf + ?Sized>(&self, out: &mut B) -> Result<usize> {
        self.read_impl(out, None, None)
    }

    /// `fi_cq_readfrom`: as [`DynCq::read`], with each entry's source address.
    pub fn read_from<B: CqBuf + ?Sized>(&self, out: &mut B, src: &mut [FiAddr]) -> Result<usize> {
        self.read_impl(out, Some(src), None)
    }

    /// `fi_cq_sread`: blocks until a completion (or `threshold` of them with the
    /// threshold wait condition) or the timeout (`Err(Again)`), then reads.
    pub fn sread<B: CqBuf + ?Sized>(
        &self,
        out: &mut B,
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.read_impl(out, None, Some((threshold, timeout)))
    }

    /// `fi_cq_sreadfrom`.
    pub fn sread_from<B: CqBuf + ?Sized>(
        &self,
        out: &mut B,
        src: &mut [FiAddr],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.read_impl(out, Some(src), Some((threshold, timeout)))
    }
}

impl Waitable for DynCq {
    fn trywait(&self) -> Result<()> {
        self.inner.trywait()
    }
}

impl CqOps for DynCq {
    fn format(&self) -> CqFormatKind {
        self.format
    }
    fn read_tagged(&self, out: &mut [CqTaggedEntry], src: Option<&mut [FiAddr]>) -> Result<usize> {
        self.read_tagged_masked(out, src, None)
    }
    fn sread_tagged(
        &self,
        out: &mut [CqTaggedEntry],
        src: Option<&mut [FiAddr]>,
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.read_tagged_masked(out, src, Some((threshold, timeout)))
    }
    fn read_completions(&self, out: &mut [Completion]) -> Result<usize> {
        self.read(out)
    }
    fn read_completions_from(&self, out: &mut [Completion], src: &mut [FiAddr]) -> Result<usize> {
        self.read_from(out, src)
    }
    fn sread_completions(
        &self,
        out: &mut [Completion],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.sread(out, threshold, timeout)
    }
    fn sread_completions_from(
        &self,
        out: &mut [Completion],
        src: &mut [FiAddr],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.sread_from(out, src, threshold, timeout)
    }
    fn read_err(&self) -> Result<CqErrEntry> {
        self.inner.read_err()
    }
    fn signal(&self) {
        self.inner.signal()
    }
    fn wait_fd(&self) -> Option<RawFd> {
        self.inner.wait_fd()
    }
    fn strerror(&self, e: &CqErrEntry) -> &'static str {
        self.inner.strerror(e)
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Completion {
        Completion {
            context: Context(0x1122),
            flags: CqFlags::RECV | CqFlags::TAGGED | CqFlags::REMOTE_CQ_DATA,
            len: 77,
            buf: 0xdead_b000,
            data: 0x55aa,
            tag: 0x7777_0001,
            src: FiAddr::NOTAVAIL,
        }
    }

    const ALL: [CqFormatKind; 4] = [
        CqFormatKind::Context,
        CqFormatKind::Msg,
        CqFormatKind::Data,
        CqFormatKind::Tagged,
    ];

    #[test]
    fn entries_hold_exactly_their_format_fields() {
        let c = sample();
        let e = DynEntry::make(CqFormatKind::Context, &c);
        assert_eq!((e.context(), e.flags(), e.len()), (c.context, None, None));
        assert_eq!((e.buf(), e.data(), e.tag()), (None, None, None));
        let e = DynEntry::make(CqFormatKind::Msg, &c);
        assert_eq!(
            (e.flags(), e.len(), e.buf()),
            (Some(c.flags), Some(77), None)
        );
        let e = DynEntry::make(CqFormatKind::Data, &c);
        assert_eq!(
            (e.buf(), e.data(), e.tag()),
            (Some(c.buf), Some(c.data), None)
        );
        let e = DynEntry::make(CqFormatKind::Unspec, &c);
        assert_eq!(e.format(), CqFormatKind::Tagged);
        assert_eq!(e.completion(), c);
        assert_eq!(e.tag(), Some(c.tag));
        assert_eq!(mask(CqFormatKind::Msg, &c).tag, 0);
        assert_eq!(mask(CqFormatKind::Msg, &c).len, 77);
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn c_layout_matches_the_typed_entries() {
        let c = sample();
        for f in ALL {
            let mut bytes = vec![0xffu8; entry_size(f) * 2 + 3];
            assert_eq!(bytes[..].capacity(f), Ok(2));
            bytes[..].store(1, f, &c);
            assert!(bytes[..entry_size(f)].iter().all(|&b| b == 0xff));
            let e = &bytes[entry_size(f)..2 * entry_size(f)];
            let word = |off: usize| u64::from_ne_bytes(e[off..off + 8].try_into().unwrap());
            assert_eq!(word(0), 0x1122, "{f:?} op_context");
            if f != CqFormatKind::Context {
                assert_eq!(word(8), c.flags.bits(), "{f:?} flags");
                assert_eq!(word(16), 77, "{f:?} len");
            }
            if matches!(f, CqFormatKind::Data | CqFormatKind::Tagged) {
                assert_eq!((word(24), word(32)), (c.buf as u64, c.data), "{f:?}");
            }
            if f == CqFormatKind::Tagged {
                assert_eq!(word(40), c.tag);
            }
            assert_eq!(
                bytes[2 * entry_size(f)..],
                [0xff; 3],
                "{f:?} tail untouched"
            );
        }
    }

    #[test]
    fn typed_buffers_require_their_format() {
        let c = sample();
        let mut msgs = [CqMsgEntry::default(); 2];
        assert_eq!(msgs[..].capacity(CqFormatKind::Msg), Ok(2));
        assert_eq!(msgs[..].capacity(CqFormatKind::Tagged), Err(Error::Inval));
        msgs[..].store(0, CqFormatKind::Msg, &c);
        assert_eq!((msgs[0].op_context, msgs[0].len), (c.context, 77));
        let tagged = [CqTaggedEntry::default(); 1];
        assert_eq!(tagged[..].capacity(CqFormatKind::Unspec), Ok(1));
        let mut comps = [Completion::default(); 1];
        comps[..].store(0, CqFormatKind::Context, &c);
        assert_eq!(
            comps[0],
            Completion {
                context: c.context,
                ..Completion::default()
            }
        );
    }
}
