//! What connection management sends: a request (`fi_connect`: the connector's name
//! and the connection data) and its answer (accept: the accepting endpoint's name and
//! data; reject: data), each a fixed head (magic, version, kind, name length, data
//! length) and the two fields. Every length is checked before a byte behind it is
//! awaited, and a message is read exactly, so what follows it stays in the socket.

use std::os::fd::OwnedFd;

use fabric::provider::DEFAULT_CM_DATA_SIZE;
use fabric::{Error, Result};
use rustix::io::Errno;
use rustix::net::RecvFlags;

use crate::name::{Name, Raw, NAME4_LEN, NAME6_LEN};

/// `"FTCM"`: the first bytes of every connection request and answer.
pub const CM_MAGIC: u32 = u32::from_be_bytes(*b"FTCM");
/// Version of the connection messages; another one is dropped.
pub const CM_VERSION: u16 = 1;
/// Bytes of connection data carried (`FI_OPT_CM_DATA_SIZE`).
pub const CM_DATA_SIZE: usize = DEFAULT_CM_DATA_SIZE;

/// Bytes of a connection message's fixed part: magic, version, kind, name length,
/// data length.
pub(crate) const CM_HDR: usize = 10;
/// Bytes of the longest connection message.
pub(crate) const CM_MAX: usize = CM_HDR + NAME6_LEN + CM_DATA_SIZE;

/// What a connection message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// `fi_connect`: the connector's name and data.
    Request = 1,
    /// `fi_accept`: the accepting endpoint's name and data.
    Accept = 2,
    /// `fi_reject`: data only.
    Reject = 3,
}

/// A connection message as sent.
pub(crate) fn encode(kind: Kind, name: Option<&Name>, data: &[u8]) -> Vec<u8> {
    debug_assert!(data.len() <= CM_DATA_SIZE);
    let raw = name.map(Name::raw);
    let nb = raw.as_ref().map_or(&[][..], Raw::as_bytes);
    let mut b = Vec::with_capacity(CM_HDR + nb.len() + data.len());
    b.extend_from_slice(&CM_MAGIC.to_be_bytes());
    b.extend_from_slice(&CM_VERSION.to_be_bytes());
    b.push(kind as u8);
    b.push(nb.len() as u8);
    b.extend_from_slice(&(data.len() as u16).to_be_bytes());
    b.extend_from_slice(nb);
    b.extend_from_slice(data);
    b
}

/// Checks the fixed part of a message expected to be one of `kinds`; returns the
/// message's whole length. `Err(Io)` for anything else: wrong magic or version,
/// another kind, a name length that is no name's (a reject carries none, the others
/// one), more data than [`CM_DATA_SIZE`].
pub(crate) fn check_head(b: &[u8], kinds: &[Kind]) -> Result<usize> {
    let b: &[u8; CM_HDR] = b.get(..CM_HDR).ok_or(Error::Io)?.try_into().unwrap();
    if u32::from_be_bytes(b[0..4].try_into().unwrap()) != CM_MAGIC
        || u16::from_be_bytes(b[4..6].try_into().unwrap()) != CM_VERSION
    {
        return Err(Error::Io);
    }
    let kind = *kinds.iter().find(|k| **k as u8 == b[6]).ok_or(Error::Io)?;
    let nl = b[7] as usize;
    let named = match kind {
        Kind::Reject => nl == 0,
        Kind::Request | Kind::Accept => nl == NAME4_LEN || nl == NAME6_LEN,
    };
    let dl = u16::from_be_bytes(b[8..10].try_into().unwrap()) as usize;
    if !named || dl > CM_DATA_SIZE {
        return Err(Error::Io);
    }
    Ok(CM_HDR + nl + dl)
}

/// Decodes a whole message whose head passed [`check_head`]: kind, name, data.
pub(crate) fn decode(b: &[u8]) -> Result<(Kind, Option<Name>, Vec<u8>)> {
    let kind = match b[6] {
        1 => Kind::Request,
        2 => Kind::Accept,
        _ => Kind::Reject,
    };
    let nl = b[7] as usize;
    let name = match nl {
        0 => None,
        _ => Some(Name::decode(&b[CM_HDR..CM_HDR + nl]).map_err(|_| Error::Io)?),
    };
    Ok((kind, name, b[CM_HDR + nl..].to_vec()))
}

/// A message being read: exactly its bytes and no more, so what follows it stays in
/// the socket.
pub(crate) struct Reading {
    buf: [u8; CM_MAX],
    got: usize,
    need: usize,
}

impl Reading {
    pub(crate) fn new() -> Reading {
        Reading {
            buf: [0; CM_MAX],
            got: 0,
            need: CM_HDR,
        }
    }

    /// Reads more of a message of one of `kinds` from `fd`: `Ok(true)` once it is
    /// whole, `Ok(false)` while more is to come, `Err(Io)` for bytes that fail the
    /// checks and the socket's error (`Ok(0)`: `Errno::PIPE`) when it failed or ended.
    pub(crate) fn read(
        &mut self,
        fd: &OwnedFd,
        kinds: &[Kind],
    ) -> std::result::Result<bool, ReadErr> {
        loop {
            match rustix::net::recv(fd, &mut self.buf[self.got..self.need], RecvFlags::DONTWAIT) {
                Ok((0, _)) => return Err(ReadErr::Ended(Errno::PIPE)),
                Ok((k, _)) => self.got += k,
                Err(Errno::INTR) => continue,
                Err(e) if e == Errno::AGAIN => return Ok(false),
                Err(e) => return Err(ReadErr::Ended(e)),
            }
            if self.got < self.need {
                continue;
            }
            if self.need == CM_HDR {
                self.need = check_head(&self.buf, kinds).map_err(|_| ReadErr::Garbage)?;
                if self.need > CM_HDR {
                    continue;
                }
            }
            return Ok(true);
        }
    }

    pub(crate) fn message(&self) -> &[u8] {
        &self.buf[..self.need]
    }
}

/// Why reading a message stopped.
pub(crate) enum ReadErr {
    /// The bytes are not a message expected here.
    Garbage,
    /// The connection ended or failed (`PIPE` for an end of stream).
    Ended(Errno),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(a: &str, nonce: u64) -> Name {
        Name {
            addr: a.parse().unwrap(),
            nonce,
        }
    }

    #[test]
    fn messages_round_trip_and_refusals() {
        let me = name("127.0.0.1:5000", 9);
        let req = encode(Kind::Request, Some(&me), b"data");
        assert_eq!(check_head(&req, &[Kind::Request]), Ok(req.len()));
        assert_eq!(
            decode(&req),
            Ok((Kind::Request, Some(me), b"data".to_vec()))
        );
        let v6 = encode(Kind::Accept, Some(&name("[::1]:7", 3)), &[1; CM_DATA_SIZE]);
        assert_eq!(check_head(&v6, &[Kind::Accept]), Ok(CM_MAX));
        let rej = encode(Kind::Reject, None, b"no");
        assert_eq!(
            check_head(&rej, &[Kind::Accept, Kind::Reject]),
            Ok(rej.len())
        );
        // A kind not expected here.
        assert_eq!(check_head(&rej, &[Kind::Request]), Err(Error::Io));
        assert_eq!(check_head(&req[..9], &[Kind::Request]), Err(Error::Io));
        // Magic, version, kind, name length, data length.
        for (i, v) in [(0, 0u8), (5, 2), (6, 9), (7, 17), (7, 0), (8, 1), (8, 255)] {
            let mut b = req.clone();
            b[i] = v;
            assert_eq!(check_head(&b, &[Kind::Request]), Err(Error::Io), "byte {i}");
        }
        // A reject carries no name.
        let mut b = rej.clone();
        b[7] = NAME4_LEN as u8;
        assert_eq!(check_head(&b, &[Kind::Reject]), Err(Error::Io));
        // A name that does not decode.
        let mut b = req.clone();
        b[CM_HDR] = 77;
        assert_eq!(decode(&b), Err(Error::Io));
    }
}
