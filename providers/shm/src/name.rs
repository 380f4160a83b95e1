//! Endpoint addresses: which process (pid and start time), which descriptor of it
//! holds the region, and a nonce naming the endpoint.

use fabric::{Error, Result};

/// Bytes of an shm address.
pub const NAME_LEN: usize = 32;
const TAG: [u8; 4] = *b"fshm";

/// A parsed shm address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Name {
    /// Owner process.
    pub pid: u32,
    /// The owner's descriptor of the region.
    pub fd: u32,
    /// The owner's start time (clock ticks since boot): pid reuse is told apart.
    pub start: u64,
    /// Endpoint nonce, unique on the host for the life of the process.
    pub nonce: u64,
}

impl Name {
    /// The wire form.
    pub fn encode(&self) -> [u8; NAME_LEN] {
        let mut b = [0u8; NAME_LEN];
        b[0..4].copy_from_slice(&TAG);
        b[4..8].copy_from_slice(&self.pid.to_le_bytes());
        b[8..12].copy_from_slice(&self.fd.to_le_bytes());
        b[16..24].copy_from_slice(&self.start.to_le_bytes());
        b[24..32].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    /// Parses a wire form; `Inval` for anything that is not one.
    pub fn decode(b: &[u8]) -> Result<Name> {
        let b: &[u8; NAME_LEN] = b.try_into().map_err(|_| Error::Inval)?;
        if b[0..4] != TAG || b[12..16] != [0; 4] {
            return Err(Error::Inval);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let n = Name {
            pid: u32_at(4),
            fd: u32_at(8),
            start: u64_at(16),
            nonce: u64_at(24),
        };
        if n.pid == 0 || n.nonce == 0 {
            return Err(Error::Inval);
        }
        Ok(n)
    }

    /// Printable form (`fi_av_straddr`).
    pub fn to_url(&self) -> String {
        format!(
            "fi_shm://{}:{}/{}/{:x}",
            self.pid, self.start, self.fd, self.nonce
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn roundtrip() {
        let n = Name {
            pid: 12,
            fd: 5,
            start: 99,
            nonce: 0xabc,
        };
        assert_eq!(Name::decode(&n.encode()).unwrap(), n);
        assert_eq!(n.to_url(), "fi_shm://12:99/5/abc");
        assert_eq!(Name::decode(&[0; 8]), Err(Error::Inval));
        assert_eq!(Name::decode(&[0; NAME_LEN]), Err(Error::Inval));
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Name::decode(&b);
        }
    }
}
