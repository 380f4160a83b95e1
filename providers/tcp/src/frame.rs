//! What travels on a connection, and the checks on everything that arrives.
//!
//! A connection starts with a hello from the connecting side: magic, protocol
//! version, the connector's endpoint name and the name of the endpoint it means to
//! reach. Nothing else is read from a connection before its hello passed. Then come
//! frames: the core's 64-byte [`Header`] and its payload, whose length the header
//! gives (`len`, except read requests and acknowledgements, which carry none).
//! Every header is checked before a byte of its payload is awaited: a valid op and a
//! length no larger than the largest message, so a peer can never make the receiver
//! wait for, or stage, more than [`MAX_MSG_SIZE`](crate::MAX_MSG_SIZE) bytes.
//!
//! One frame is the provider's own: the goodbye ([`BYE`]), the last frame of a
//! connection its owner closes because it is idle or in excess. It is a bare header,
//! every field zero but the op; anything else with that op is garbage.

use fabric::provider::wire::{Header, Op, HDR_ACK};
use fabric::{Error, Result};
use zerocopy::FromBytes;

use crate::name::{Name, NAME_LEN};

/// `"FTCP"`: the first bytes of every connection.
pub const MAGIC: u32 = u32::from_be_bytes(*b"FTCP");
/// Protocol version; a hello with another one is refused (2: with the goodbye frame).
pub const VERSION: u16 = 2;
/// Op of the goodbye frame, outside the core's op range: it is never handed over.
pub const BYE: u8 = 0x80;
/// Bytes of a hello: magic, version, two name lengths, two name fields.
pub const HELLO_LEN: usize = 8 + 2 * NAME_LEN;
/// Bytes of a frame header.
pub const HDR_LEN: usize = 64;

/// A hello: `from` (the connector) asks to reach `to`.
pub fn hello(from: &Name, to: &Name) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    let (f, t) = (from.raw(), to.raw());
    b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&VERSION.to_be_bytes());
    b[6] = f.as_bytes().len() as u8;
    b[7] = t.as_bytes().len() as u8;
    b[8..8 + f.as_bytes().len()].copy_from_slice(f.as_bytes());
    b[8 + NAME_LEN..8 + NAME_LEN + t.as_bytes().len()].copy_from_slice(t.as_bytes());
    b
}

/// Checks a hello received by the endpoint `me`: the right magic and version, two
/// well-formed names, and a target that is this incarnation of `me` (or any, nonce 0)
/// at its port. Returns the connector's name. `Err(Io)` for anything else.
pub fn check_hello(b: &[u8; HELLO_LEN], me: &Name) -> Result<Name> {
    if u32::from_be_bytes(b[0..4].try_into().unwrap()) != MAGIC
        || u16::from_be_bytes(b[4..6].try_into().unwrap()) != VERSION
    {
        return Err(Error::Io);
    }
    let (fl, tl) = (b[6] as usize, b[7] as usize);
    if fl > NAME_LEN || tl > NAME_LEN {
        return Err(Error::Io);
    }
    let from = Name::decode(&b[8..8 + fl]).map_err(|_| Error::Io)?;
    let to = Name::decode(&b[8 + NAME_LEN..8 + NAME_LEN + tl]).map_err(|_| Error::Io)?;
    // The address the connector used may differ from ours (an alias of this host);
    // the port and the incarnation may not.
    if to.addr.port() != me.addr.port() || (to.nonce != 0 && to.nonce != me.nonce) {
        return Err(Error::Io);
    }
    Ok(from)
}

/// The goodbye frame.
pub fn bye() -> Header {
    Header {
        op: BYE,
        ..Header::default()
    }
}

/// Checks a frame header from a peer; returns it with the number of payload bytes
/// that follow it. `Err(Io)` for an unknown op, a length beyond `max`, or a goodbye
/// that is not exactly [`bye`].
#[inline]
pub fn check_header(b: &[u8], max: usize) -> Result<(Header, usize)> {
    let hdr = Header::read_from_bytes(b).map_err(|_| Error::Io)?;
    let Some(op) = Op::from_raw(hdr.op) else {
        return if hdr == bye() {
            Ok((hdr, 0))
        } else {
            Err(Error::Io)
        };
    };
    if hdr.len > max as u64 {
        return Err(Error::Io);
    }
    let payload = match op {
        Op::ReadReq | Op::Ack => 0,
        _ => hdr.len as usize,
    };
    Ok((hdr, payload))
}

/// Whether a packet is a response (never refused, answers a tracked request).
#[inline]
pub fn is_response(op: u8) -> bool {
    matches!(
        Op::from_raw(op),
        Some(Op::Ack | Op::ReadResp | Op::AtomicResp)
    )
}

/// The response op that answers request `hdr`, if it expects one.
#[inline]
pub fn answered_by(hdr: &Header) -> Option<Op> {
    match Op::from_raw(hdr.op)? {
        Op::ReadReq => Some(Op::ReadResp),
        Op::Atomic => Some(Op::AtomicResp),
        Op::Write => Some(Op::Ack),
        Op::Msg | Op::Tagged if hdr.flags & HDR_ACK != 0 => Some(Op::Ack),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    const MAX: usize = crate::MAX_MSG_SIZE;

    fn name(a: &str, nonce: u64) -> Name {
        Name {
            addr: a.parse().unwrap(),
            nonce,
        }
    }

    #[test]
    fn hello_round_trip_and_refusals() {
        let me = name("127.0.0.1:5000", 9);
        let from = name("[::1]:6000", 3);
        assert_eq!(check_hello(&hello(&from, &me), &me), Ok(from));
        // Any incarnation, and an alias address of this host, are accepted.
        assert_eq!(
            check_hello(&hello(&from, &name("127.0.0.2:5000", 0)), &me),
            Ok(from)
        );
        // Another incarnation, another port.
        for to in [name("127.0.0.1:5000", 8), name("127.0.0.1:5001", 9)] {
            assert_eq!(check_hello(&hello(&from, &to), &me), Err(Error::Io));
        }
        let good = hello(&from, &me);
        // Byte 5 = 1: a peer of the first version, which knows no goodbye.
        for (i, v) in [(0, 0u8), (5, 1), (5, 3), (6, 200), (7, 17), (8, 99)] {
            let mut b = good;
            b[i] = v;
            assert_eq!(check_hello(&b, &me), Err(Error::Io), "byte {i} = {v}");
        }
    }

    #[test]
    fn header_checks() {
        let mut h = Header {
            op: Op::Msg as u8,
            len: 10,
            ..Header::default()
        };
        assert_eq!(check_header(h.as_bytes(), 10).map(|x| x.1), Ok(10));
        assert_eq!(check_header(h.as_bytes(), 9), Err(Error::Io));
        h.op = Op::ReadReq as u8;
        assert_eq!(check_header(h.as_bytes(), 10).map(|x| x.1), Ok(0));
        h.op = 0;
        assert_eq!(check_header(h.as_bytes(), 10), Err(Error::Io));
        h.op = 9;
        assert_eq!(check_header(h.as_bytes(), 10), Err(Error::Io));
        assert_eq!(check_header(&[0u8; 63], 10), Err(Error::Io));
        h.op = Op::Write as u8;
        assert_eq!(answered_by(&h), Some(Op::Ack));
        h.op = Op::Msg as u8;
        assert_eq!(answered_by(&h), None);
        h.flags = HDR_ACK;
        assert_eq!(answered_by(&h), Some(Op::Ack));
        assert!(is_response(Op::AtomicResp as u8) && !is_response(Op::Atomic as u8));
    }

    #[test]
    fn bye_is_a_bare_header() {
        let b = bye();
        assert_eq!(check_header(b.as_bytes(), 0), Ok((b, 0)));
        assert!(!is_response(b.op) && answered_by(&b).is_none());
        // A payload, or any other field set, makes it garbage.
        for f in [
            |h: &mut Header| h.len = 1,
            |h: &mut Header| h.req = 7,
            |h: &mut Header| h.flags = HDR_ACK,
            |h: &mut Header| h.status = 1,
        ] {
            let mut h = bye();
            f(&mut h);
            assert_eq!(check_header(h.as_bytes(), MAX), Err(Error::Io), "{h:?}");
        }
    }
}
