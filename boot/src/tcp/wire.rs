//! The fallback's messages and their framing: a little-endian `u32` length, then a tag
//! byte and the fields. Everything read from a peer is checked (lengths against what
//! is left and against the limits, keys against the key rules, no trailing bytes)
//! before anything is allocated for it.

use std::io::{self, Read, Write};

use crate::{check_key, BootError, MAX_VALUE_LEN};

/// The largest frame either side accepts: what one fence can carry for the whole job.
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// The longest node identity a rank may announce.
pub(crate) const MAX_NODE_LEN: usize = 256;

/// The longest failure text the server sends.
pub(crate) const MAX_TEXT_LEN: usize = 4096;

/// Sent first by every client, so that a stray connection is told apart from a rank.
pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"FBT1");

const HELLO: u8 = 1;
const READY: u8 = 2;
const SYNC: u8 = 3;
const DONE: u8 = 4;
const FAIL: u8 = 5;

/// A key and its value.
pub(crate) type Entry = (String, Vec<u8>);

/// One message of the exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Client to server: who is connecting.
    Hello { rank: u32, size: u32, node: Vec<u8> },
    /// Server to client: everyone has joined; the client's place on its node.
    Ready { local_rank: u32, local_size: u32 },
    /// Client to server: this rank entered a fence (`data`) or a barrier, with the
    /// values it committed since its last fence.
    Sync { data: bool, entries: Vec<Entry> },
    /// Server to client: every rank arrived; the values committed in this round.
    Done {
        entries: Vec<(u32, String, Vec<u8>)>,
    },
    /// Server to client: the operation failed, and why.
    Fail { text: String },
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

impl Msg {
    /// The frame for this message, length prefix included.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, BootError> {
        let mut out = vec![0u8; 4];
        match self {
            Msg::Hello { rank, size, node } => {
                out.push(HELLO);
                put_u32(&mut out, MAGIC);
                put_u32(&mut out, *rank);
                put_u32(&mut out, *size);
                put_bytes(&mut out, node);
            }
            Msg::Ready {
                local_rank,
                local_size,
            } => {
                out.push(READY);
                put_u32(&mut out, *local_rank);
                put_u32(&mut out, *local_size);
            }
            Msg::Sync { data, entries } => {
                out.push(SYNC);
                out.push(u8::from(*data));
                put_u32(&mut out, entries.len() as u32);
                for (k, v) in entries {
                    put_bytes(&mut out, k.as_bytes());
                    put_bytes(&mut out, v);
                }
            }
            Msg::Done { entries } => {
                out.push(DONE);
                put_u32(&mut out, entries.len() as u32);
                for (r, k, v) in entries {
                    put_u32(&mut out, *r);
                    put_bytes(&mut out, k.as_bytes());
                    put_bytes(&mut out, v);
                }
            }
            Msg::Fail { text } => {
                out.push(FAIL);
                let mut end = text.len().min(MAX_TEXT_LEN);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                put_bytes(&mut out, &text.as_bytes()[..end]);
            }
        }
        let len = out.len() - 4;
        if len > MAX_FRAME {
            return Err(BootError::Invalid(format!(
                "{len} bytes in one exchange message: the limit is {MAX_FRAME}"
            )));
        }
        out[..4].copy_from_slice(&(len as u32).to_le_bytes());
        Ok(out)
    }

    /// Parses a frame's payload (without its length prefix).
    pub(crate) fn decode(payload: &[u8]) -> Result<Msg, BootError> {
        let mut c = Cursor { b: payload };
        let msg = match c.u8()? {
            HELLO => {
                let magic = c.u32()?;
                if magic != MAGIC {
                    return Err(bad("not a fabric-boot client (wrong magic)"));
                }
                let rank = c.u32()?;
                let size = c.u32()?;
                let node = c.bytes(MAX_NODE_LEN)?.to_vec();
                Msg::Hello { rank, size, node }
            }
            READY => Msg::Ready {
                local_rank: c.u32()?,
                local_size: c.u32()?,
            },
            SYNC => {
                let data = match c.u8()? {
                    0 => false,
                    1 => true,
                    b => return Err(bad(&format!("sync flag {b}"))),
                };
                // Each entry takes at least 8 bytes: a count beyond that is a lie.
                let n = c.count(8)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = c.key()?;
                    let v = c.bytes(MAX_VALUE_LEN)?.to_vec();
                    entries.push((k, v));
                }
                Msg::Sync { data, entries }
            }
            DONE => {
                let n = c.count(12)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let r = c.u32()?;
                    let k = c.key()?;
                    let v = c.bytes(MAX_VALUE_LEN)?.to_vec();
                    entries.push((r, k, v));
                }
                Msg::Done { entries }
            }
            FAIL => {
                let t = c.bytes(MAX_TEXT_LEN)?;
                let text = std::str::from_utf8(t).map_err(|_| bad("failure text is not UTF-8"))?;
                Msg::Fail {
                    text: text.to_owned(),
                }
            }
            t => return Err(bad(&format!("unknown message tag {t}"))),
        };
        if !c.b.is_empty() {
            return Err(bad(&format!("{} trailing bytes", c.b.len())));
        }
        Ok(msg)
    }
}

fn bad(what: &str) -> BootError {
    BootError::Protocol(format!("exchange message: {what}"))
}

struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BootError> {
        if n > self.b.len() {
            return Err(bad("truncated"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }

    fn u8(&mut self) -> Result<u8, BootError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, BootError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self, max: usize) -> Result<&'a [u8], BootError> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(bad(&format!("a field of {n} bytes (limit {max})")));
        }
        self.take(n)
    }

    fn key(&mut self) -> Result<String, BootError> {
        let k = self.bytes(crate::MAX_KEY_LEN)?;
        let k = std::str::from_utf8(k).map_err(|_| bad("key is not UTF-8"))?;
        check_key(k).map_err(|_| bad(&format!("invalid key {k:?}")))?;
        Ok(k.to_owned())
    }

    fn count(&mut self, min_each: usize) -> Result<usize, BootError> {
        let n = self.u32()? as usize;
        if n > self.b.len() / min_each {
            return Err(bad(&format!(
                "{n} entries cannot fit in {} bytes",
                self.b.len()
            )));
        }
        Ok(n)
    }
}

/// Reads one frame's payload. A length beyond [`MAX_FRAME`] is refused before any
/// allocation. `Ok(None)` is a clean end of stream between frames.
pub(crate) fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes (limit {MAX_FRAME})"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// Writes a whole frame made by [`Msg::encode`].
pub(crate) fn write_frame(w: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    w.write_all(frame)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_.-]{1,32}"
    }

    fn msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            (
                any::<u32>(),
                any::<u32>(),
                prop::collection::vec(any::<u8>(), 0..=MAX_NODE_LEN)
            )
                .prop_map(|(rank, size, node)| Msg::Hello { rank, size, node }),
            (any::<u32>(), any::<u32>()).prop_map(|(local_rank, local_size)| Msg::Ready {
                local_rank,
                local_size
            }),
            (
                any::<bool>(),
                prop::collection::vec((key(), prop::collection::vec(any::<u8>(), 0..64)), 0..8)
            )
                .prop_map(|(data, entries)| Msg::Sync { data, entries }),
            prop::collection::vec(
                (
                    any::<u32>(),
                    key(),
                    prop::collection::vec(any::<u8>(), 0..64)
                ),
                0..8
            )
            .prop_map(|entries| Msg::Done { entries }),
            ".{0,100}".prop_map(|text| Msg::Fail { text }),
        ]
    }

    proptest! {
        #[test]
        fn roundtrip(m in msg()) {
            let frame = m.encode().unwrap();
            let payload = read_frame(&mut &frame[..]).unwrap().unwrap();
            prop_assert_eq!(Msg::decode(&payload).unwrap(), m);
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            // Whatever the bytes, both layers answer; a decoded message re-encodes to them.
            if let Ok(m) = Msg::decode(&bytes) {
                let frame = m.encode().unwrap();
                prop_assert_eq!(&frame[4..], &bytes[..]);
            }
            let mut r = &bytes[..];
            while let Ok(Some(p)) = read_frame(&mut r) {
                let _ = Msg::decode(&p);
            }
        }

        #[test]
        fn corrupted_frames_are_errors(m in msg(), at in any::<prop::sample::Index>(), x in 1u8..=255) {
            let frame = m.encode().unwrap();
            let mut payload = frame[4..].to_vec();
            // Truncation is always caught.
            prop_assert!(Msg::decode(&payload[..payload.len() - 1]).is_err());
            let i = at.index(payload.len());
            payload[i] ^= x;
            match Msg::decode(&payload) {
                Err(BootError::Protocol(_)) => {}
                Err(e) => prop_assert!(false, "unexpected error kind {e}"),
                // A flipped byte inside a value or a number can still be a valid message,
                // but never the same one.
                Ok(d) => prop_assert_ne!(d, m),
            }
        }
    }

    #[test]
    fn oversized_length_refused_before_allocation() {
        let frame = (MAX_FRAME as u32 + 1).to_le_bytes();
        let err = read_frame(&mut &frame[..]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn lying_counts_refused() {
        // A Done claiming 2^32-1 entries in 4 bytes.
        let mut p = vec![DONE];
        p.extend_from_slice(&u32::MAX.to_le_bytes());
        p.extend_from_slice(&[0; 4]);
        assert!(matches!(Msg::decode(&p), Err(BootError::Protocol(_))));
        // A key longer than the limit.
        let mut p = vec![SYNC, 1];
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&64u32.to_le_bytes());
        p.extend_from_slice(&[b'k'; 64]);
        p.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(Msg::decode(&p), Err(BootError::Protocol(_))));
    }
}
