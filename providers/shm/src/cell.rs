//! The cell format of a receive channel, and its parser.
//!
//! A packet occupies consecutive 64-byte cells and never wraps around the end of the
//! ring (a skip marker fills the tail instead). The first 8 bytes of its first cell
//! are the control word, published last with release ordering:
//!
//! ```text
//! bits  0..32  stamp: the ring position + 1 (truncated), so cells of older laps never look ready
//! bits 32..36  kind: SKIP | COMPACT | COMPACT_DATA | FULL | LARGE | STREAM | RESPONSE | ATOMIC
//! bits 36..40  op (COMPACT*: Msg or Tagged; RESPONSE: Ack, ReadResp or AtomicResp)
//! bits 40..56  payload length (COMPACT*, STREAM, RESPONSE, ATOMIC)
//! bit  56      remote CQ data present (STREAM)
//! ```
//! - `COMPACT`: tag (8 bytes), payload. A message of up to 48 bytes is one cache line.
//! - `COMPACT_DATA`: tag, remote CQ data (8 bytes each), payload.
//! - `STREAM`: tag, remote CQ data, and at [`STREAM_PROGRESS`] a progress word; the
//!   payload starts with the second cell. The sender publishes the packet after the
//!   payload's first bytes and copies the rest behind it, storing (release) the count
//!   of bytes in place after each piece, so the receiver copies out while the sender
//!   still copies in.
//! - `FULL`: the 64-byte [`Header`], payload.
//! - `LARGE`: the header, then a [`Desc`] saying where the payload waits in the sender.
//! - `ATOMIC`: an atomic request without remote CQ data: request id, address, key
//!   (8 bytes each), transmit and receive context (2 each), target bytes (4), flags,
//!   atomic op, datatype (1 each), 5 bytes of zero, the operands (and compare values):
//!   up to 16 bytes of them (a fetch-add, a compare-swap of one `u64`) in one cache line.
//! - `RESPONSE`: the request id (8 bytes), the status (4), the transmit context (2),
//!   2 bytes of zero, the payload: a response with up to 40 bytes of result (a
//!   fetching atomic's old values) is one cache line.
//!
//! Every value comes from another process and is validated here: [`parse`] never
//! panics and never yields a length or offset outside the cells it was given. The
//! cells are [`SharedBytes`]: the sender's process can still write them, so each field
//! is copied out once and parsed from the copy, and payloads are handed on as views to
//! copy out of, never as slices.

use fabric::provider::wire::{
    Eager, Header, Op, Response, HDR_COMPARE, HDR_FETCH, HDR_REMOTE_CQ_DATA,
};
use fabric::{Error, Result, SharedBytes};
use zerocopy::FromBytes;

use crate::layout::region::{CELL, GEN_MAX, RNDV_RECORDS};

/// Kind: filler up to the end of the ring.
pub const SKIP: u64 = 1;
/// Kind: message with a tag and no other header field.
pub const COMPACT: u64 = 2;
/// Kind: message with a tag and remote CQ data.
pub const COMPACT_DATA: u64 = 3;
/// Kind: full header and inline payload.
pub const FULL: u64 = 4;
/// Kind: full header and a descriptor of a payload staged by the sender.
pub const LARGE: u64 = 5;
/// Kind: message with a tag, remote CQ data and a payload still being written behind
/// a progress word.
pub const STREAM: u64 = 6;

/// Kind: a response (no [`Header`]): request id, status, transmit context, payload.
pub const RESPONSE: u64 = 7;

/// Kind: an atomic request (no [`Header`]; see the module documentation).
pub const ATOMIC: u64 = 8;

/// Bytes of the control word.
pub const WORD: usize = 8;
/// Offset of a full header.
pub const HDR_OFF: usize = WORD;
/// Offset of a full packet's payload or descriptor.
pub const BODY_OFF: usize = WORD + 64;
/// Bytes of a descriptor.
pub const DESC_LEN: usize = 32;
/// Largest compact payload (16-bit length field).
pub const COMPACT_MAX: usize = u16::MAX as usize;
/// Offset of a response packet's request id.
pub const RESP_REQ: usize = WORD;
/// Offset of a response packet's status.
pub const RESP_STATUS: usize = WORD + 8;
/// Offset of a response packet's transmit context.
pub const RESP_TX: usize = WORD + 12;
/// Offset of a response packet's payload.
pub const RESP_BODY: usize = WORD + 16;
/// Offset of an atomic request's payload (its fields before it: see the module
/// documentation).
pub const ATOMIC_BODY: usize = WORD + 40;
/// Offset in a stream packet's first cell of its progress word: payload bytes written.
pub const STREAM_PROGRESS: usize = CELL - WORD;
/// Offset of a stream packet's payload: the second cell.
pub const STREAM_BODY: usize = CELL;

/// Where a large payload waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Desc {
    /// Address in the sender (cross-memory attach) or offset in its staging file.
    pub addr: u64,
    /// Payload bytes.
    pub len: u64,
    /// The sender's staging slot, released by the receiver once copied.
    pub slot: u32,
    /// How to reach it: [`Desc::CMA`], [`Desc::MAPPED`], [`Desc::MAPPED_FAR`] or
    /// [`Desc::RNDV`] (then `slot` is the sender's rendezvous record).
    pub mode: u32,
    /// Generation of the slot (written back on release) or of the record.
    pub gen: u64,
}

impl Desc {
    /// Read with `process_vm_readv` from the sender's memory.
    pub const CMA: u32 = 1;
    /// Copied from the sender's near staging file (small, always there), mapped by the
    /// receiver.
    pub const MAPPED: u32 = 2;
    /// Copied from the sender's far staging file (large, when cross-memory attach is
    /// refused), mapped by the receiver.
    pub const MAPPED_FAR: u32 = 3;
    /// The sender's own buffer, read with `process_vm_readv` while the sender waits
    /// in rendezvous record `slot` (see `rndv`).
    pub const RNDV: u32 = 4;

    /// The staging file a mapped descriptor points into.
    pub fn file(&self) -> usize {
        usize::from(self.mode == Desc::MAPPED_FAR)
    }

    /// The wire form.
    pub fn encode(&self) -> [u8; DESC_LEN] {
        let mut b = [0u8; DESC_LEN];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..20].copy_from_slice(&self.slot.to_le_bytes());
        b[20..24].copy_from_slice(&self.mode.to_le_bytes());
        b[24..32].copy_from_slice(&self.gen.to_le_bytes());
        b
    }

    fn decode(b: &[u8; DESC_LEN]) -> Result<Desc> {
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let d = Desc {
            addr: u64_at(0),
            len: u64_at(8),
            slot: u32_at(16),
            mode: u32_at(20),
            gen: u64_at(24),
        };
        match d.mode {
            Desc::CMA | Desc::MAPPED | Desc::MAPPED_FAR => {}
            Desc::RNDV if (d.slot as usize) < RNDV_RECORDS && d.gen <= GEN_MAX => {}
            _ => return Err(Error::Io),
        }
        Ok(d)
    }
}

/// The stamp of ring position `pos`.
#[inline]
pub fn stamp(pos: u64) -> u32 {
    (pos as u32).wrapping_add(1)
}

/// Control word of a compact packet.
#[inline]
pub fn word_compact(pos: u64, op: Op, data: bool, len: usize) -> u64 {
    let kind = if data { COMPACT_DATA } else { COMPACT };
    stamp(pos) as u64 | kind << 32 | (op as u64) << 36 | (len as u64) << 40
}

/// Control word of a stream packet.
#[inline]
pub fn word_stream(pos: u64, op: Op, data: bool, len: usize) -> u64 {
    stamp(pos) as u64 | STREAM << 32 | (op as u64) << 36 | (len as u64) << 40 | (data as u64) << 56
}

/// Control word of a response packet of `op` (a response op) with `len` payload bytes
/// (at most [`COMPACT_MAX`]).
#[inline]
pub fn word_response(pos: u64, op: u8, len: usize) -> u64 {
    stamp(pos) as u64 | RESPONSE << 32 | (op as u64 & 0xf) << 36 | (len as u64) << 40
}

/// Control word of an atomic request with `len` payload bytes (at most [`COMPACT_MAX`]).
#[inline]
pub fn word_atomic(pos: u64, len: usize) -> u64 {
    stamp(pos) as u64 | ATOMIC << 32 | (len as u64) << 40
}

/// Whether request `hdr` with `len` payload bytes can travel in the atomic request
/// form: an atomic without remote CQ data (the fields it drops are zero or unused).
#[inline]
pub fn atomic_ok(hdr: &Header, len: usize) -> bool {
    hdr.op == Op::Atomic as u8
        && hdr.flags & !(HDR_FETCH | HDR_COMPARE) == 0
        && hdr.len == len as u64
        && len <= COMPACT_MAX
}

/// The fields of atomic request `hdr` as the atomic request form lays them out after
/// the control word.
#[inline(always)]
pub fn atomic_fields(hdr: &Header) -> [u8; ATOMIC_BODY - WORD] {
    let mut b = [0u8; ATOMIC_BODY - WORD];
    b[0..8].copy_from_slice(&hdr.req.to_le_bytes());
    b[8..16].copy_from_slice(&hdr.addr.to_le_bytes());
    b[16..24].copy_from_slice(&hdr.key.to_le_bytes());
    b[24..26].copy_from_slice(&hdr.tx_idx.to_le_bytes());
    b[26..28].copy_from_slice(&hdr.rx_idx.to_le_bytes());
    b[28..32].copy_from_slice(&hdr.aux.to_le_bytes());
    b[32] = hdr.flags;
    b[33] = hdr.atomic_op;
    b[34] = hdr.datatype;
    b
}

/// The receive lane of an atomic request packet (`kind(w)` is [`ATOMIC`]): its header,
/// its payload (`hdr.len` bytes at [`ATOMIC_BODY`]) and the cells it takes, all within
/// `avail` (whole cells). Garbage (unknown high bits or flags, more cells than `avail`)
/// gives `Err(Io)`.
#[inline(always)]
pub fn atomic(w: u64, avail: SharedBytes<'_>) -> Result<(Header, SharedBytes<'_>, usize)> {
    if (w >> 36) & 0xf != 0 || w >> 56 != 0 {
        return Err(Error::Io);
    }
    let len = ((w >> 40) & 0xffff) as usize;
    let end = ATOMIC_BODY + len;
    let cells = cells_for(end);
    if cells * CELL > avail.len() {
        return Err(Error::Io);
    }
    // The payload first: its bounds cover the fields before it.
    let Some(payload) = avail.get(ATOMIC_BODY, len) else {
        return Err(Error::Io);
    };
    let Some(b) = avail.read::<{ ATOMIC_BODY - WORD }>(WORD) else {
        return Err(Error::Io);
    };
    let u64_at = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(x)
    };
    let flags = b[32];
    if flags & !(HDR_FETCH | HDR_COMPARE) != 0 {
        return Err(Error::Io);
    }
    let hdr = Header {
        op: Op::Atomic as u8,
        flags,
        atomic_op: b[33],
        datatype: b[34],
        rx_idx: u16::from_le_bytes([b[26], b[27]]),
        tx_idx: u16::from_le_bytes([b[24], b[25]]),
        status: 0,
        aux: u32::from_le_bytes([b[28], b[29], b[30], b[31]]),
        req: u64_at(0),
        tag: 0,
        data: 0,
        addr: u64_at(8),
        key: u64_at(16),
        len: len as u64,
    };
    Ok((hdr, payload, cells))
}

/// Control word of a packet of `kind` other than the compact and stream ones.
#[inline]
pub fn word(pos: u64, kind: u64) -> u64 {
    stamp(pos) as u64 | kind << 32
}

/// Whether a header can travel in compact form (the fields it drops are zero or unused).
#[inline]
pub fn compact_ok(hdr: &Header, len: usize) -> bool {
    matches!(Op::from_raw(hdr.op), Some(Op::Msg | Op::Tagged))
        && hdr.flags & !HDR_REMOTE_CQ_DATA == 0
        && hdr.rx_idx == 0
        && len <= COMPACT_MAX
}

/// Bytes before the payload of a compact packet.
#[inline]
pub fn compact_prefix(data: bool) -> usize {
    WORD + 8 + if data { 8 } else { 0 }
}

/// Cells that `bytes` bytes take.
#[inline]
pub fn cells_for(bytes: usize) -> usize {
    bytes.div_ceil(CELL)
}

/// A parsed packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Filler: the rest of the ring up to its end.
    Skip,
    /// A packet with its payload at `off..off + len` of the packet's bytes.
    Inline {
        /// The header (compact packets have the dropped fields zero).
        hdr: Header,
        /// Payload offset from the first cell.
        off: usize,
        /// Payload bytes.
        len: usize,
        /// Cells used.
        cells: usize,
    },
    /// A message whose payload, at [`STREAM_BODY`], may still be arriving: its first
    /// `progress` bytes are there, where `progress` is the word at [`STREAM_PROGRESS`]
    /// (read with acquire; never trust more than `len`).
    Stream {
        /// The header (the fields a message does not use are zero).
        hdr: Header,
        /// Payload bytes.
        len: usize,
        /// Cells used.
        cells: usize,
    },
    /// A header and the descriptor of a staged payload.
    Large {
        /// The header.
        hdr: Header,
        /// Where the payload is.
        desc: Desc,
        /// Cells used.
        cells: usize,
    },
}

/// Parses the packet whose control word is `w`, with `avail` = the bytes from its
/// first cell to the end of the ring (all of which the receiver may read). The stamp
/// has already been matched. Garbage gives `Err(Io)`.
pub fn parse(w: u64, avail: SharedBytes<'_>, max_inline: usize) -> Result<Parsed> {
    let kind = (w >> 32) & 0xf;
    let ok_len = |bytes: usize| -> Result<usize> {
        let cells = cells_for(bytes);
        if cells == 0 || cells * CELL > avail.len() {
            return Err(Error::Io);
        }
        Ok(cells)
    };
    match kind {
        SKIP => Ok(Parsed::Skip),
        COMPACT | COMPACT_DATA => {
            let (m, cells) = eager(w, avail)?;
            Ok(Parsed::Inline {
                hdr: m.header(),
                off: compact_prefix(m.data.is_some()),
                len: m.len,
                cells,
            })
        }
        ATOMIC => {
            let (hdr, payload, cells) = atomic(w, avail)?;
            Ok(Parsed::Inline {
                hdr,
                off: ATOMIC_BODY,
                len: payload.len(),
                cells,
            })
        }
        RESPONSE => {
            let (r, payload, cells) = response(w, avail)?;
            Ok(Parsed::Inline {
                hdr: r.header(payload.len()),
                off: RESP_BODY,
                len: payload.len(),
                cells,
            })
        }
        STREAM => {
            if w >> 57 != 0 {
                return Err(Error::Io);
            }
            let (m, cells) = message(w, avail, w >> 56 & 1 != 0, STREAM_BODY)?;
            Ok(Parsed::Stream {
                hdr: m.header(),
                len: m.len,
                cells,
            })
        }
        FULL => {
            let hdr = read_header(avail)?;
            let op = Op::from_raw(hdr.op).ok_or(Error::Io)?;
            let len = match op {
                Op::ReadReq | Op::Ack => 0,
                _ => usize::try_from(hdr.len).map_err(|_| Error::Io)?,
            };
            if len > max_inline {
                return Err(Error::Io);
            }
            let cells = ok_len(BODY_OFF + len)?;
            Ok(Parsed::Inline {
                hdr,
                off: BODY_OFF,
                len,
                cells,
            })
        }
        LARGE => {
            let hdr = read_header(avail)?;
            match Op::from_raw(hdr.op) {
                Some(Op::Msg | Op::Tagged | Op::Write | Op::ReadResp) => {}
                _ => return Err(Error::Io),
            }
            let cells = ok_len(BODY_OFF + DESC_LEN)?;
            let desc = Desc::decode(&avail.read(BODY_OFF).ok_or(Error::Io)?)?;
            if desc.len != hdr.len {
                return Err(Error::Io);
            }
            Ok(Parsed::Large { hdr, desc, cells })
        }
        _ => Err(Error::Io),
    }
}

/// The kind of the packet whose control word is `w`.
#[inline(always)]
pub fn kind(w: u64) -> u64 {
    (w >> 32) & 0xf
}

/// Parses a compact packet (`kind(w)` is [`COMPACT`] or [`COMPACT_DATA`]) as the
/// message it carries and the cells it takes; its payload is the `m.len` bytes at
/// `compact_prefix(m.data.is_some())`, within `avail`. The receive lane: no
/// [`Header`] is built. Garbage gives `Err(Io)`.
#[inline(always)]
pub fn eager(w: u64, avail: SharedBytes<'_>) -> Result<(Eager, usize)> {
    let data = kind(w) == COMPACT_DATA;
    message(w, avail, data, compact_prefix(data))
}

/// Whether a control word's kind is [`COMPACT`] or [`COMPACT_DATA`] (they differ in
/// the low bit only): the receive lane's one test before [`compact`].
#[inline(always)]
pub fn is_compact(w: u64) -> bool {
    (w >> 32) & 0xe == COMPACT
}

/// The receive lane of a compact packet (`is_compact(w)`): its message, its payload
/// and the cells it takes, all within `avail` (the bytes from its first cell to the end
/// of the ring, whole cells). What [`eager`] and the payload slice give, with each
/// bound checked once. Garbage gives `Err(Io)`.
#[inline(always)]
pub fn compact(w: u64, avail: SharedBytes<'_>) -> Result<(Eager, SharedBytes<'_>, usize)> {
    let has_data = w & (1 << 32) != 0;
    let op = match (w >> 36) & 0xf {
        x if x == Op::Tagged as u64 => Op::Tagged,
        x if x == Op::Msg as u64 => Op::Msg,
        _ => return Err(Error::Io),
    };
    let len = ((w >> 40) & 0xffff) as usize;
    let prefix = compact_prefix(has_data);
    let end = prefix + len;
    let cells = cells_for(end);
    // Whole cells, so this also puts the payload (`..end`) and the prefix in bounds.
    if cells * CELL > avail.len() {
        return Err(Error::Io);
    }
    // The payload first: its bounds cover the tag and the data word before it.
    let Some(payload) = avail.get(prefix, len) else {
        return Err(Error::Io);
    };
    let word = |off: usize| avail.read(off).map(u64::from_le_bytes).ok_or(Error::Io);
    let data = if has_data {
        Some(word(WORD + 8)?)
    } else {
        None
    };
    let m = Eager {
        op,
        rx_idx: 0,
        tag: word(WORD)?,
        data,
        len,
    };
    Ok((m, payload, cells))
}

/// The receive lane of a response packet (`kind(w)` is [`RESPONSE`]): the response,
/// its payload and the cells it takes, all within `avail` (the bytes from its first
/// cell to the end of the ring, whole cells). Garbage (an op that is not a response,
/// unknown high bits, more cells than `avail`) gives `Err(Io)`; the request id is the
/// initiator's to check.
#[inline(always)]
pub fn response(w: u64, avail: SharedBytes<'_>) -> Result<(Response, SharedBytes<'_>, usize)> {
    const ACK: u64 = Op::Ack as u64;
    const READ: u64 = Op::ReadResp as u64;
    const ATOMIC: u64 = Op::AtomicResp as u64;
    let op = match (w >> 36) & 0xf {
        ATOMIC => Op::AtomicResp,
        ACK => Op::Ack,
        READ => Op::ReadResp,
        _ => return Err(Error::Io),
    };
    if w >> 56 != 0 {
        return Err(Error::Io);
    }
    let len = ((w >> 40) & 0xffff) as usize;
    let cells = cells_for(RESP_BODY + len);
    // Whole cells, so this also puts the payload and the prefix in bounds.
    if cells * CELL > avail.len() {
        return Err(Error::Io);
    }
    // The payload first: its bounds cover the fields before it. Request id, status
    // and transmit context are copied out together.
    let Some(payload) = avail.get(RESP_BODY, len) else {
        return Err(Error::Io);
    };
    let Some(f) = avail.read::<{ RESP_BODY - RESP_REQ }>(RESP_REQ) else {
        return Err(Error::Io);
    };
    let at = |o: usize| o - RESP_REQ;
    let mut req = [0u8; 8];
    req.copy_from_slice(&f[at(RESP_REQ)..at(RESP_REQ) + 8]);
    let mut status = [0u8; 4];
    status.copy_from_slice(&f[at(RESP_STATUS)..at(RESP_STATUS) + 4]);
    let r = Response {
        op,
        tx_idx: u16::from_le_bytes([f[at(RESP_TX)], f[at(RESP_TX) + 1]]),
        req: u64::from_le_bytes(req),
        status: u32::from_le_bytes(status),
    };
    Ok((r, payload, cells))
}

/// The message of a compact or stream packet: op and length from the control word `w`,
/// the tag (and with `data` the remote CQ data) from the first cell, the payload after
/// `prefix` bytes; and the cells it takes, all within `avail`.
#[inline(always)]
fn message(w: u64, avail: SharedBytes<'_>, data: bool, prefix: usize) -> Result<(Eager, usize)> {
    let op = match ((w >> 36) & 0xf) as u8 {
        x if x == Op::Tagged as u8 => Op::Tagged,
        x if x == Op::Msg as u8 => Op::Msg,
        _ => return Err(Error::Io),
    };
    let len = ((w >> 40) & 0xffff) as usize;
    let cells = cells_for(prefix + len);
    if cells * CELL > avail.len() {
        return Err(Error::Io);
    }
    // In bounds: the packet takes at least one cell, and the prefix fits one.
    let tag = read_u64(avail, WORD)?;
    let data = if data {
        Some(read_u64(avail, WORD + 8)?)
    } else {
        None
    };
    Ok((
        Eager {
            op,
            rx_idx: 0,
            tag,
            data,
            len,
        },
        cells,
    ))
}

#[inline(always)]
fn read_u64(b: SharedBytes<'_>, off: usize) -> Result<u64> {
    b.read(off).map(u64::from_le_bytes).ok_or(Error::Io)
}

fn read_header(avail: SharedBytes<'_>) -> Result<Header> {
    let b = avail.read::<64>(HDR_OFF).ok_or(Error::Io)?;
    Header::read_from_bytes(&b).map_err(|_| Error::Io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A peer's cells as the parsers see them.
    fn sb(b: &[u8]) -> SharedBytes<'_> {
        b.into()
    }

    fn packet(w: u64, body: &[u8]) -> Vec<u8> {
        let mut v = w.to_le_bytes().to_vec();
        v.extend_from_slice(body);
        v.resize(v.len().div_ceil(CELL) * CELL, 0);
        v
    }

    #[test]
    fn compact_fits_48_bytes_in_one_line() {
        let w = word_compact(5, Op::Tagged, false, 48);
        let mut body = 0x1234u64.to_le_bytes().to_vec();
        body.extend_from_slice(&[7u8; 48]);
        let p = packet(w, &body);
        assert_eq!(p.len(), 64);
        match parse(w, sb(&p), 4096).unwrap() {
            Parsed::Inline {
                hdr,
                off,
                len,
                cells,
            } => {
                assert_eq!((hdr.tag, off, len, cells), (0x1234, 16, 48, 1));
                assert_eq!(hdr.op, Op::Tagged as u8);
            }
            p => panic!("{p:?}"),
        }
        assert_eq!(stamp(5), (w & 0xffff_ffff) as u32);
    }

    #[test]
    fn stream_layout() {
        let w = word_stream(9, Op::Msg, true, 4096);
        let mut body = 0x77u64.to_le_bytes().to_vec();
        body.extend_from_slice(&0x99u64.to_le_bytes());
        body.resize(STREAM_BODY - WORD + 4096, 3);
        let p = packet(w, &body);
        assert_eq!(p.len(), 65 * CELL);
        match parse(w, sb(&p), 4096).unwrap() {
            Parsed::Stream { hdr, len, cells } => {
                assert_eq!((hdr.tag, hdr.data, len, cells), (0x77, 0x99, 4096, 65));
                assert_eq!((hdr.op, hdr.flags), (Op::Msg as u8, HDR_REMOTE_CQ_DATA));
            }
            p => panic!("{p:?}"),
        }
        // Without data; one cell short; an unknown high bit; a non-message op.
        let w0 = word_stream(9, Op::Tagged, false, 4096);
        assert!(
            matches!(parse(w0, sb(&p), 4096), Ok(Parsed::Stream { hdr, .. }) if hdr.flags == 0)
        );
        assert!(parse(w, sb(&p[..64 * CELL]), 4096).is_err());
        assert!(parse(w | 1 << 60, sb(&p), 4096).is_err());
        let rma = stamp(9) as u64 | STREAM << 32 | (Op::Write as u64) << 36;
        assert!(parse(rma, sb(&p), 4096).is_err());
    }

    #[test]
    fn eager_lane_reads_compact_cells() {
        let w = word_compact(3, Op::Msg, true, 5);
        let mut body = 7u64.to_le_bytes().to_vec();
        body.extend_from_slice(&42u64.to_le_bytes());
        body.extend_from_slice(b"hello");
        let p = packet(w, &body);
        let (m, cells) = eager(w, sb(&p)).unwrap();
        assert_eq!(
            (m.op, m.tag, m.data, m.len, cells),
            (Op::Msg, 7, Some(42), 5, 1)
        );
        let off = compact_prefix(true);
        assert_eq!(&p[off..off + m.len], b"hello");
        // The same packet through `parse`: the header the lane does without.
        match parse(w, sb(&p), 4096).unwrap() {
            Parsed::Inline { hdr, .. } => assert_eq!(hdr, m.header()),
            other => panic!("{other:?}"),
        }
        // An op compact cells never carry, or more payload than the cells given.
        let bad_op = (w & !(0xf << 36)) | (Op::Write as u64) << 36;
        assert!(eager(bad_op, sb(&p)).is_err());
        let long = word_compact(3, Op::Tagged, false, 49);
        assert!(eager(long, sb(&p)).is_err());
        assert!(eager(w, sb(&p[..8])).is_err());
        // The lane's parser: the same message, and the payload with it.
        assert!(is_compact(w) && is_compact(long) && !is_compact(word(3, FULL)));
        let (lane, payload, k) = compact(w, sb(&p)).unwrap();
        assert_eq!((lane, payload.to_vec(), k), (m, b"hello".to_vec(), 1));
        assert!(compact(bad_op, sb(&p)).is_err());
        assert!(compact(long, sb(&p)).is_err());
        assert!(compact(w, sb(&p[..8])).is_err());
    }

    #[test]
    fn full_and_large() {
        let hdr = Header {
            op: Op::Write as u8,
            len: 3,
            key: 9,
            ..Header::default()
        };
        let mut body = zerocopy::IntoBytes::as_bytes(&hdr).to_vec();
        body.extend_from_slice(&[1, 2, 3]);
        let p = packet(word(0, FULL), &body);
        assert_eq!(
            parse(word(0, FULL), sb(&p), 4096).unwrap(),
            Parsed::Inline {
                hdr,
                off: BODY_OFF,
                len: 3,
                cells: 2
            }
        );
        // Short of cells, or longer than the inline limit: refused.
        assert!(parse(word(0, FULL), sb(&p[..64]), 4096).is_err());
        assert!(parse(word(0, FULL), sb(&p), 2).is_err());
        let hdr = Header {
            len: 1 << 20,
            ..hdr
        };
        let desc = Desc {
            addr: 4096,
            len: 1 << 20,
            slot: 1,
            mode: Desc::CMA,
            gen: 3,
        };
        let mut body = zerocopy::IntoBytes::as_bytes(&hdr).to_vec();
        body.extend_from_slice(&desc.encode());
        let p = packet(word(0, LARGE), &body);
        assert_eq!(
            parse(word(0, LARGE), sb(&p), 4096).unwrap(),
            Parsed::Large {
                hdr,
                desc,
                cells: 2
            }
        );
        let bad = Desc { len: 5, ..desc };
        let mut body = zerocopy::IntoBytes::as_bytes(&hdr).to_vec();
        body.extend_from_slice(&bad.encode());
        assert!(parse(word(0, LARGE), sb(&packet(word(0, LARGE), &body)), 4096).is_err());
    }

    #[test]
    fn response_and_atomic_cells_fit_one_line() {
        // A fetch-add's answer: 8 bytes of old value.
        let w = word_response(4, Op::AtomicResp as u8, 8);
        let mut body = 0x0123_4567_89ab_cdefu64.to_le_bytes().to_vec();
        body.extend_from_slice(&61u32.to_le_bytes());
        body.extend_from_slice(&3u16.to_le_bytes());
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&7u64.to_le_bytes());
        let p = packet(w, &body);
        assert_eq!(p.len(), CELL);
        let (r, payload, cells) = response(w, sb(&p)).unwrap();
        let want = Response {
            op: Op::AtomicResp,
            tx_idx: 3,
            req: 0x0123_4567_89ab_cdef,
            status: 61,
        };
        assert_eq!(
            (r, payload.to_vec(), cells),
            (want, 7u64.to_le_bytes().to_vec(), 1)
        );
        assert_eq!(
            parse(w, sb(&p), 4096).unwrap(),
            Parsed::Inline {
                hdr: want.header(8),
                off: RESP_BODY,
                len: 8,
                cells: 1
            }
        );
        // Not a response op, unknown high bits, a payload past the cells given.
        for bad in [
            word_response(4, Op::Atomic as u8, 8),
            word_response(4, 0, 8),
            w | 1 << 60,
            word_response(4, Op::Ack as u8, 41),
        ] {
            assert!(response(bad, sb(&p)).is_err(), "{bad:#x}");
            assert!(parse(bad, sb(&p), 4096).is_err(), "{bad:#x}");
        }

        // A fetch-add request: 8 bytes of operand.
        let hdr = Header {
            op: Op::Atomic as u8,
            flags: HDR_FETCH,
            atomic_op: 3,
            datatype: 9,
            rx_idx: 1,
            tx_idx: 2,
            aux: 8,
            req: 1 << 40 | 5,
            addr: 0xdead_b000,
            key: 77,
            len: 8,
            ..Header::default()
        };
        assert!(atomic_ok(&hdr, 8));
        let w = word_atomic(9, 8);
        let mut body = atomic_fields(&hdr).to_vec();
        body.extend_from_slice(&1u64.to_le_bytes());
        let p = packet(w, &body);
        assert_eq!(p.len(), CELL);
        let (h, payload, cells) = atomic(w, sb(&p)).unwrap();
        assert_eq!(
            (h, payload.to_vec(), cells),
            (hdr, 1u64.to_le_bytes().to_vec(), 1)
        );
        assert!(
            matches!(parse(w, sb(&p), 4096), Ok(Parsed::Inline { hdr: h, off: ATOMIC_BODY, len: 8, cells: 1 }) if h == hdr)
        );
        // Remote CQ data, another op or a length that disagrees: not this form.
        let data = Header {
            flags: HDR_FETCH | HDR_REMOTE_CQ_DATA,
            data: 1,
            ..hdr
        };
        assert!(!atomic_ok(&data, 8) && !atomic_ok(&hdr, 16));
        assert!(!atomic_ok(
            &Header {
                op: Op::Write as u8,
                ..hdr
            },
            8
        ));
        // Unknown flags or high bits, a payload past the cells given.
        let mut bad_flags = p.clone();
        bad_flags[WORD + 32] |= HDR_REMOTE_CQ_DATA;
        assert!(atomic(w, sb(&bad_flags)).is_err());
        assert!(atomic(w | 1 << 36, sb(&p)).is_err() && atomic(w | 1 << 60, sb(&p)).is_err());
        assert!(atomic(word_atomic(9, 17), sb(&p)).is_err());
        assert!(atomic(w, sb(&p[..8])).is_err());
    }

    proptest! {
        /// The response and atomic lanes on any word and bytes a peer may write: never
        /// a panic, never a range outside `avail`, and what they accept is what `parse`
        /// accepts.
        #[test]
        fn lanes_are_total(w in any::<u64>(), kind in prop_oneof![Just(RESPONSE), Just(ATOMIC)], avail in proptest::collection::vec(any::<u8>(), 0..512)) {
            let w = (w & !(0xf << 32)) | kind << 32;
            let parsed = parse(w, sb(&avail), 4096);
            if kind == RESPONSE {
                match response(w, sb(&avail)) {
                    Ok((r, payload, cells)) => {
                        prop_assert!(cells * CELL <= avail.len());
                        prop_assert!(RESP_BODY + payload.len() <= cells * CELL);
                        prop_assert!(matches!(r.op, Op::Ack | Op::ReadResp | Op::AtomicResp));
                        prop_assert_eq!(parsed, Ok(Parsed::Inline { hdr: r.header(payload.len()), off: RESP_BODY, len: payload.len(), cells }));
                    }
                    Err(_) => prop_assert!(parsed.is_err()),
                }
            } else {
                match atomic(w, sb(&avail)) {
                    Ok((h, payload, cells)) => {
                        prop_assert!(cells * CELL <= avail.len());
                        prop_assert!(ATOMIC_BODY + payload.len() <= cells * CELL);
                        prop_assert_eq!(h.len, payload.len() as u64);
                        prop_assert_eq!(h.op, Op::Atomic as u8);
                        prop_assert_eq!(h.flags & !(HDR_FETCH | HDR_COMPARE), 0);
                        prop_assert_eq!(parsed, Ok(Parsed::Inline { hdr: h, off: ATOMIC_BODY, len: payload.len(), cells }));
                    }
                    Err(_) => prop_assert!(parsed.is_err()),
                }
            }
        }

        /// Arbitrary bytes from a peer: never a panic, never a range outside `avail`.
        #[test]
        fn parse_is_total(w in any::<u64>(), avail in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok((m, cells)) = eager(w, sb(&avail)) {
                prop_assert!(compact_prefix(m.data.is_some()) + m.len <= avail.len());
                prop_assert!(cells * CELL <= avail.len());
            }
            if let Ok(Parsed::Inline { off, len, cells, .. }) = parse(w, sb(&avail), 256) {
                prop_assert!(off + len <= avail.len());
                prop_assert!(cells * CELL <= avail.len());
            }
            if let Ok(Parsed::Stream { len, cells, hdr }) = parse(w, sb(&avail), 256) {
                prop_assert!(STREAM_BODY + len <= cells * CELL);
                prop_assert!(cells * CELL <= avail.len());
                prop_assert_eq!(hdr.len, len as u64);
            }
            if let Ok(Parsed::Large { cells, desc, hdr }) = parse(w, sb(&avail), 256) {
                prop_assert!(cells * CELL <= avail.len());
                prop_assert_eq!(desc.len, hdr.len);
                if desc.mode == Desc::RNDV {
                    prop_assert!((desc.slot as usize) < RNDV_RECORDS);
                }
            }
        }

        /// The receive lane's parser agrees with `eager` and the payload slice it
        /// describes, on any word and bytes a peer may write.
        #[test]
        fn compact_agrees_with_eager(w in any::<u64>(), avail in proptest::collection::vec(any::<u8>(), 0..512)) {
            let kind = kind(w);
            prop_assert_eq!(is_compact(w), kind == COMPACT || kind == COMPACT_DATA);
            if is_compact(w) {
                let lane = compact(w, sb(&avail)).ok().map(|(m, p, cells)| {
                    // The view is the bytes it claims to be: where they lie in `avail`.
                    let at = p.as_ptr() as usize - avail.as_ptr() as usize;
                    (m, at, p.to_vec(), cells)
                });
                let reference = eager(w, sb(&avail)).ok().map(|(m, cells)| {
                    let o = compact_prefix(m.data.is_some());
                    (m, o, avail[o..o + m.len].to_vec(), cells)
                });
                prop_assert_eq!(lane, reference);
            }
        }

        /// A rendezvous descriptor from a peer: any record index or generation out of
        /// range is refused; in range, it round-trips.
        #[test]
        fn rndv_desc_checked(addr in any::<u64>(), len in 9000u64..1 << 26, slot in any::<u32>(), gen in any::<u64>()) {
            let hdr = Header { op: Op::Tagged as u8, len, ..Header::default() };
            let desc = Desc { addr, len, slot: slot % 256, mode: Desc::RNDV, gen: gen >> (slot % 16) };
            let mut body = zerocopy::IntoBytes::as_bytes(&hdr).to_vec();
            body.extend_from_slice(&desc.encode());
            let p = packet(word(0, LARGE), &body);
            let ok = (desc.slot as usize) < RNDV_RECORDS && desc.gen <= GEN_MAX;
            match parse(word(0, LARGE), sb(&p), 4096) {
                Ok(Parsed::Large { desc: d, .. }) => { prop_assert!(ok); prop_assert_eq!(d, desc); }
                Ok(other) => prop_assert!(false, "{:?}", other),
                Err(_) => prop_assert!(!ok),
            }
        }
    }
}
