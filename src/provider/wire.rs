//! The core protocol every provider carries between endpoints.
//!
//! Providers are transports: they move a [`Header`] plus payload from one endpoint to
//! another. Matching, RMA, atomics, acknowledgements and completions are implemented
//! once in the core on top of these packets. The header is a zerocopy type so a
//! provider that receives it from another process parses untrusted bytes without
//! `unsafe`; [`Header::parse`] validates every field the core later relies on.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{Error, Result};

/// Operation carried by a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Untagged message.
    Msg = 1,
    /// Tagged message.
    Tagged = 2,
    /// RMA write (payload = data).
    Write = 3,
    /// RMA read request (len = bytes wanted).
    ReadReq = 4,
    /// RMA read response (payload = data, status).
    ReadResp = 5,
    /// Atomic request (payload = operands then compare values).
    Atomic = 6,
    /// Atomic response (payload = fetched values, status).
    AtomicResp = 7,
    /// Acknowledgement of a write, a base atomic or a delivery-complete message (status).
    Ack = 8,
}

impl Op {
    /// From the wire value.
    pub const fn from_raw(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Msg,
            2 => Op::Tagged,
            3 => Op::Write,
            4 => Op::ReadReq,
            5 => Op::ReadResp,
            6 => Op::Atomic,
            7 => Op::AtomicResp,
            8 => Op::Ack,
            _ => return None,
        })
    }
}

/// Header flag: `data` holds remote CQ data.
pub const HDR_REMOTE_CQ_DATA: u8 = 1 << 0;
/// Header flag: the initiator waits for an [`Op::Ack`] (delivery complete).
pub const HDR_ACK: u8 = 1 << 1;
/// Header flag: atomic request of the fetch class.
pub const HDR_FETCH: u8 = 1 << 2;
/// Header flag: atomic request of the compare class.
pub const HDR_COMPARE: u8 = 1 << 3;

/// The fixed 64-byte header of every packet.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Header {
    /// [`Op`] value.
    pub op: u8,
    /// `HDR_*` bits.
    pub flags: u8,
    /// Atomic operation (`fi_op`).
    pub atomic_op: u8,
    /// Atomic datatype (`fi_datatype`).
    pub datatype: u8,
    /// Target receive context (scalable endpoints).
    pub rx_idx: u16,
    /// Initiator transmit context, echoed in responses.
    pub tx_idx: u16,
    /// Status of a response: 0 or a positive `FI_E*` code.
    pub status: u32,
    /// Auxiliary length: bytes of target memory an atomic touches.
    pub aux: u32,
    /// Initiator request id, echoed in responses.
    pub req: u64,
    /// Message tag.
    pub tag: u64,
    /// Remote CQ data.
    pub data: u64,
    /// RMA/atomic target address.
    pub addr: u64,
    /// RMA/atomic key.
    pub key: u64,
    /// Payload length, or the requested length of a read.
    pub len: u64,
}

static_assertions::const_assert_eq!(core::mem::size_of::<Header>(), 64);

impl Header {
    /// Parses and validates a packet: the header and exactly `len` payload bytes
    /// (except read requests, whose `len` is the amount wanted and carry no payload).
    pub fn parse(bytes: &[u8]) -> Result<(Header, &[u8])> {
        let (hdr, rest) = Header::read_from_prefix(bytes).map_err(|_| Error::Io)?;
        let op = Op::from_raw(hdr.op).ok_or(Error::Io)?;
        let want = match op {
            Op::ReadReq | Op::Ack => 0,
            _ => usize::try_from(hdr.len).map_err(|_| Error::Io)?,
        };
        if rest.len() != want {
            return Err(Error::Io);
        }
        Ok((hdr, rest))
    }

    /// The operation, if the header holds a valid one.
    #[inline]
    pub fn op(&self) -> Option<Op> {
        Op::from_raw(self.op)
    }

    /// The header as bytes (for byte-stream transports).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// A message (`fi_send` / `fi_tsend` families) that completes when it is sent: the
/// only header fields such a message has. The core hands these to
/// [`Transport::send_eager`](crate::provider::Transport::send_eager), so a transport
/// with a shorter wire form for them need not decode a whole [`Header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eager {
    /// [`Op::Msg`] or [`Op::Tagged`].
    pub op: Op,
    /// The receive context at the target.
    pub rx_idx: u16,
    /// The tag (0 for untagged messages).
    pub tag: u64,
    /// Remote CQ data, if the message carries any.
    pub data: Option<u64>,
    /// Payload bytes.
    pub len: usize,
}

impl Eager {
    /// The full header of this message, as [`Transport::send`] takes it.
    ///
    /// [`Transport::send`]: crate::provider::Transport::send
    ///
    /// ```
    /// use fabric::provider::wire::{Eager, Op, HDR_REMOTE_CQ_DATA};
    ///
    /// let m = Eager { op: Op::Tagged, rx_idx: 0, tag: 7, data: Some(9), len: 8 };
    /// let h = m.header();
    /// assert_eq!((h.op, h.tag, h.data, h.len), (Op::Tagged as u8, 7, 9, 8));
    /// assert_eq!(h.flags, HDR_REMOTE_CQ_DATA);
    /// ```
    #[inline]
    pub fn header(&self) -> Header {
        let mut h = Header {
            op: self.op as u8,
            rx_idx: self.rx_idx,
            tag: self.tag,
            len: self.len as u64,
            ..Header::default()
        };
        if let Some(d) = self.data {
            h.flags = HDR_REMOTE_CQ_DATA;
            h.data = d;
        }
        h
    }
}

/// A response ([`Op::Ack`], [`Op::ReadResp`] or [`Op::AtomicResp`]) to one of the
/// initiator's requests: the only header fields a response has. A transport with a
/// short wire form for responses hands these to
/// [`Sink::response`](crate::provider::Sink::response) without building a whole
/// [`Header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// [`Op::Ack`], [`Op::ReadResp`] or [`Op::AtomicResp`].
    pub op: Op,
    /// The initiator's transmit context, echoed from the request.
    pub tx_idx: u16,
    /// The initiator's request id, echoed from the request.
    pub req: u64,
    /// 0 or a positive `FI_E*` code.
    pub status: u32,
}

impl Response {
    /// The response that header `hdr` carries, if its op is a response.
    #[inline]
    pub fn of(hdr: &Header) -> Option<Response> {
        let op = match Op::from_raw(hdr.op)? {
            op @ (Op::Ack | Op::ReadResp | Op::AtomicResp) => op,
            _ => return None,
        };
        Some(Response {
            op,
            tx_idx: hdr.tx_idx,
            req: hdr.req,
            status: hdr.status,
        })
    }

    /// The full header of this response with `len` payload bytes, as
    /// [`Transport::send`](crate::provider::Transport::send) takes it.
    ///
    /// ```
    /// use fabric::provider::wire::{Op, Response};
    ///
    /// let r = Response { op: Op::AtomicResp, tx_idx: 2, req: 9, status: 0 };
    /// let h = r.header(8);
    /// assert_eq!((h.op, h.tx_idx, h.req, h.status, h.len), (Op::AtomicResp as u8, 2, 9, 0, 8));
    /// assert_eq!(Response::of(&h), Some(r));
    /// ```
    #[inline]
    pub fn header(&self, len: usize) -> Header {
        Header {
            op: self.op as u8,
            tx_idx: self.tx_idx,
            req: self.req,
            status: self.status,
            len: len as u64,
            ..Header::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trip_and_rejects_garbage() {
        let h = Header {
            op: Op::Msg as u8,
            len: 3,
            tag: 7,
            ..Header::default()
        };
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let (p, payload) = Header::parse(&bytes).unwrap();
        assert_eq!(p, h);
        assert_eq!(payload, b"abc");
        assert_eq!(Header::parse(&bytes[..10]), Err(Error::Io));
        bytes.push(0);
        assert_eq!(Header::parse(&bytes), Err(Error::Io));
        let bad = Header {
            op: 99,
            ..Header::default()
        };
        assert_eq!(Header::parse(bad.as_bytes()), Err(Error::Io));
        let huge = Header {
            op: Op::Write as u8,
            len: u64::MAX,
            ..Header::default()
        };
        assert_eq!(Header::parse(huge.as_bytes()), Err(Error::Io));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Arbitrary peer bytes never panic the parser, and whatever it accepts has a
            /// valid op and exactly the payload length it declares.
            #[test]
            fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
                if let Ok((h, payload)) = Header::parse(&bytes) {
                    let op = h.op().expect("accepted header has a valid op");
                    let want = if matches!(op, Op::ReadReq | Op::Ack) { 0 } else { h.len as usize };
                    prop_assert_eq!(payload.len(), want);
                    prop_assert_eq!(bytes.len(), 64 + want);
                }
            }

            /// Every well-formed packet round-trips.
            #[test]
            fn round_trip(op in 1u8..=8, tag: u64, data: u64, payload in proptest::collection::vec(any::<u8>(), 0..64)) {
                let carries = !matches!(Op::from_raw(op), Some(Op::ReadReq | Op::Ack));
                let len = if carries { payload.len() as u64 } else { 4096 };
                let h = Header { op, tag, data, len, ..Header::default() };
                let mut bytes = h.as_bytes().to_vec();
                if carries {
                    bytes.extend_from_slice(&payload);
                }
                let (p, pl) = Header::parse(&bytes).unwrap();
                prop_assert_eq!(p, h);
                prop_assert_eq!(pl.len(), if carries { payload.len() } else { 0 });
            }
        }
    }
}
