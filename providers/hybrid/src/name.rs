//! Endpoint names: what both halves need to reach the endpoint, and where it runs.
//!
//! Layout: the tag `fhyb`, a version byte, the lengths of the three parts (one byte
//! each, none empty), then the node identity ([`crate::node`]), the local half's name
//! and the remote half's name, back to back. A name is exactly that long: nothing
//! before, between or after the parts.

use fabric::{Error, Result};

const TAG: [u8; 4] = *b"fhyb";
const VERSION: u8 = 1;
/// Bytes before the parts.
pub const PREFIX_LEN: usize = 8;

/// A decoded name, borrowing the bytes it was decoded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Name<'a> {
    /// Where the endpoint runs ([`crate::node`]).
    pub node: &'a [u8],
    /// The local (shared-memory) half's name.
    pub local: &'a [u8],
    /// The remote (network) half's name.
    pub remote: &'a [u8],
}

/// The length of the name whose first [`PREFIX_LEN`] bytes are `head`, or `None` when
/// `head` is not the start of one (what a packed array of names needs to be walked).
pub fn encoded_len(head: &[u8]) -> Option<usize> {
    let head = head.get(..PREFIX_LEN)?;
    if head[..4] != TAG || head[4] != VERSION || head[5..].contains(&0) {
        return None;
    }
    Some(PREFIX_LEN + head[5] as usize + head[6] as usize + head[7] as usize)
}

impl<'a> Name<'a> {
    /// The wire form. `Err(Inval)` when a part is empty or longer than 255 bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let len = |p: &[u8]| match u8::try_from(p.len()) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(Error::Inval),
        };
        let (n, l, r) = (len(self.node)?, len(self.local)?, len(self.remote)?);
        let mut b =
            Vec::with_capacity(PREFIX_LEN + self.node.len() + self.local.len() + self.remote.len());
        b.extend_from_slice(&TAG);
        b.extend_from_slice(&[VERSION, n, l, r]);
        b.extend_from_slice(self.node);
        b.extend_from_slice(self.local);
        b.extend_from_slice(self.remote);
        Ok(b)
    }

    /// Parses a wire form; `Err(Inval)` for anything that is not exactly one.
    pub fn decode(b: &'a [u8]) -> Result<Name<'a>> {
        if encoded_len(b) != Some(b.len()) {
            return Err(Error::Inval);
        }
        let (n, l) = (b[5] as usize, b[6] as usize);
        let (node, rest) = b[PREFIX_LEN..].split_at(n);
        let (local, remote) = rest.split_at(l);
        Ok(Name {
            node,
            local,
            remote,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_malformed() {
        let n = Name {
            node: b"node",
            local: &[1; 32],
            remote: &[2; 16],
        };
        let b = n.encode().unwrap();
        assert_eq!(b.len(), PREFIX_LEN + 4 + 32 + 16);
        assert_eq!(Name::decode(&b), Ok(n));
        // Truncated, extended, wrong tag or version.
        assert_eq!(Name::decode(&b[..b.len() - 1]), Err(Error::Inval));
        assert_eq!(Name::decode(&[&b[..], &[0]].concat()), Err(Error::Inval));
        for i in [0, 4] {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert_eq!(Name::decode(&bad), Err(Error::Inval));
        }
        assert_eq!(Name::decode(&[]), Err(Error::Inval));
        // Empty or overlong parts are not encoded.
        assert_eq!(Name { node: b"", ..n }.encode(), Err(Error::Inval));
        assert_eq!(
            Name {
                remote: &[0; 256],
                ..n
            }
            .encode(),
            Err(Error::Inval)
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..96)) {
            if let Ok(n) = Name::decode(&b) {
                prop_assert_eq!(n.encode().unwrap(), b);
            }
        }

        #[test]
        fn any_parts_round_trip(
            node in proptest::collection::vec(any::<u8>(), 1..64),
            local in proptest::collection::vec(any::<u8>(), 1..64),
            remote in proptest::collection::vec(any::<u8>(), 1..64),
        ) {
            let n = Name { node: &node, local: &local, remote: &remote };
            let b = n.encode().unwrap();
            prop_assert_eq!(Name::decode(&b), Ok(n));
        }
    }
}
