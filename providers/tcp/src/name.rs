//! Endpoint names: the socket address peers connect to, in the layout of the C
//! structures (`FI_SOCKADDR_IN`, `FI_SOCKADDR_IN6`), plus a nonce that tells one
//! incarnation of an endpoint from the next one listening on the same port.
//!
//! IPv4: a `struct sockaddr_in` (16 bytes) whose `sin_zero` holds the nonce, so the
//! name is exactly a valid `sockaddr_in`. IPv6: a `struct sockaddr_in6` (28 bytes)
//! followed by the nonce (36 bytes): the name starts with a valid `sockaddr_in6`.
//! Nonce 0 means "whichever endpoint listens there" (a name made from a node and a
//! service, [`fabric::Provider::name_from_svc`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use fabric::{Error, Result};

/// Bytes of an IPv4 name.
pub const NAME4_LEN: usize = 16;
/// Bytes of an IPv6 name.
pub const NAME6_LEN: usize = 36;
/// Bytes of the longest name.
pub const NAME_LEN: usize = NAME6_LEN;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// A decoded endpoint name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Name {
    /// Where the endpoint listens.
    pub addr: SocketAddr,
    /// The endpoint's incarnation; 0 for "any".
    pub nonce: u64,
}

/// A name in a fixed-size buffer, for maps keyed by peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Raw {
    bytes: [u8; NAME_LEN],
    len: u8,
}

impl Raw {
    /// The name's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl Name {
    /// Encodes the name.
    pub fn raw(&self) -> Raw {
        let mut bytes = [0u8; NAME_LEN];
        let len = match self.addr {
            SocketAddr::V4(a) => {
                bytes[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
                bytes[2..4].copy_from_slice(&a.port().to_be_bytes());
                bytes[4..8].copy_from_slice(&a.ip().octets());
                bytes[8..16].copy_from_slice(&self.nonce.to_le_bytes());
                NAME4_LEN
            }
            SocketAddr::V6(a) => {
                bytes[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
                bytes[2..4].copy_from_slice(&a.port().to_be_bytes());
                bytes[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
                bytes[8..24].copy_from_slice(&a.ip().octets());
                bytes[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
                bytes[28..36].copy_from_slice(&self.nonce.to_le_bytes());
                NAME6_LEN
            }
        };
        Raw {
            bytes,
            len: len as u8,
        }
    }

    /// Decodes a name from a peer or an application: `Err(Inval)` for anything that is
    /// not exactly one of the two layouts, or whose port is 0 or address unspecified
    /// (nothing listens there).
    pub fn decode(b: &[u8]) -> Result<Name> {
        let fam = u16::from_ne_bytes(b.get(0..2).ok_or(Error::Inval)?.try_into().unwrap());
        let port = u16::from_be_bytes(b.get(2..4).ok_or(Error::Inval)?.try_into().unwrap());
        let (addr, nonce) = match (fam, b.len()) {
            (AF_INET, NAME4_LEN) => {
                let ip = Ipv4Addr::from(<[u8; 4]>::try_from(&b[4..8]).unwrap());
                let nonce = u64::from_le_bytes(b[8..16].try_into().unwrap());
                (SocketAddr::V4(SocketAddrV4::new(ip, port)), nonce)
            }
            (AF_INET6, NAME6_LEN) => {
                let flow = u32::from_be_bytes(b[4..8].try_into().unwrap());
                let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).unwrap());
                let scope = u32::from_ne_bytes(b[24..28].try_into().unwrap());
                let nonce = u64::from_le_bytes(b[28..36].try_into().unwrap());
                (
                    SocketAddr::V6(SocketAddrV6::new(ip, port, flow, scope)),
                    nonce,
                )
            }
            _ => return Err(Error::Inval),
        };
        if port == 0 || addr.ip().is_unspecified() || addr.ip().is_multicast() {
            return Err(Error::Inval);
        }
        Ok(Name { addr, nonce })
    }

    /// Whether a connection from the endpoint named `other` comes from the endpoint
    /// this name designates: same address, and the same incarnation unless this name
    /// accepts any (nonce 0).
    #[inline]
    pub fn designates(&self, other: &Name) -> bool {
        self.addr == other.addr && (self.nonce == 0 || self.nonce == other.nonce)
    }

    /// The printable form (`fi_av_straddr`).
    pub fn to_url(&self) -> String {
        match self.addr.ip() {
            IpAddr::V4(_) => format!("fi_sockaddr_in://{}#{:x}", self.addr, self.nonce),
            IpAddr::V6(_) => format!("fi_sockaddr_in6://{}#{:x}", self.addr, self.nonce),
        }
    }
}

/// The address a `src_addr` asks an endpoint to bind to: one of the two layouts (the
/// nonce is ignored), port 0 meaning any. `Err(Inval)` for anything else or an
/// unspecified or multicast address (peers could not reach a name carrying it).
pub fn decode_source(b: &[u8]) -> Result<SocketAddr> {
    let mut probe = b.to_vec();
    // Decode with a placeholder port, since a source may leave the port to the system.
    let port = u16::from_be_bytes(probe.get(2..4).ok_or(Error::Inval)?.try_into().unwrap());
    probe[2..4].copy_from_slice(&1u16.to_be_bytes());
    let mut addr = Name::decode(&probe)?.addr;
    addr.set_port(port);
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_both_families_and_rejects_malformed() {
        for addr in ["127.0.0.1:4242", "[::1]:7", "[fe80::1%3]:9"] {
            let n = Name {
                addr: addr.parse().unwrap(),
                nonce: 0xdead_beef_0102,
            };
            let raw = n.raw();
            assert_eq!(Name::decode(raw.as_bytes()), Ok(n));
            assert!(n.designates(&n));
        }
        let v4 = Name {
            addr: "10.0.0.1:80".parse().unwrap(),
            nonce: 5,
        };
        let b = v4.raw();
        assert_eq!(b.as_bytes().len(), NAME4_LEN);
        // Truncated, extended, wrong family, port 0, unspecified address.
        assert_eq!(Name::decode(&b.as_bytes()[..15]), Err(Error::Inval));
        assert_eq!(
            Name::decode(&[b.as_bytes(), &[0]].concat()),
            Err(Error::Inval)
        );
        assert_eq!(Name::decode(&[]), Err(Error::Inval));
        let mut bad = b.as_bytes().to_vec();
        bad[0..2].copy_from_slice(&7u16.to_ne_bytes());
        assert_eq!(Name::decode(&bad), Err(Error::Inval));
        for a in ["10.0.0.1:0", "0.0.0.0:80", "[::]:80"] {
            let n = Name {
                addr: a.parse().unwrap(),
                nonce: 1,
            };
            assert_eq!(Name::decode(n.raw().as_bytes()), Err(Error::Inval));
        }
        // Nonce 0 designates every incarnation at that address, and only there.
        let any = Name { nonce: 0, ..v4 };
        assert!(any.designates(&v4) && !v4.designates(&Name { nonce: 6, ..v4 }));
        assert!(!any.designates(&Name {
            addr: "10.0.0.1:81".parse().unwrap(),
            nonce: 5
        }));
        assert_eq!(v4.to_url(), "fi_sockaddr_in://10.0.0.1:80#5");
        // A source may leave the port to the system, never the address.
        let any_port = Name {
            addr: "10.0.0.1:0".parse().unwrap(),
            nonce: 0,
        };
        assert_eq!(decode_source(any_port.raw().as_bytes()), Ok(any_port.addr));
        assert_eq!(decode_source(v4.raw().as_bytes()), Ok(v4.addr));
        let unspec = Name {
            addr: "0.0.0.0:0".parse().unwrap(),
            nonce: 0,
        };
        assert_eq!(decode_source(unspec.raw().as_bytes()), Err(Error::Inval));
        assert_eq!(decode_source(&[2, 0]), Err(Error::Inval));
    }
}
