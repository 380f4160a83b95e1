//! Node identity: which endpoints can reach each other through shared memory.
//!
//! A host name says too little (containers and network namespaces share one, and two
//! hosts may be given the same). The shm provider needs the peer on the same kernel,
//! its pid meaningful here (`/proc/<pid>/fd` and `process_vm_readv` name peers by
//! pid), and the same user to open its region (mode 0600) and read its memory. So the
//! identity is the kernel's boot id, the inodes of the network, pid and user
//! namespaces, and the effective user id. The network namespace is not something shm
//! needs, but it is what a "node" is when hosts are simulated as namespaces on one
//! machine, and endpoints of two namespaces must not bypass the network between them.
//!
//! `FABRIC_HYBRID_NODE` ([`NODE_ENV`]) replaces the identity with its value (1 to
//! [`MAX_OVERRIDE`] bytes): processes with different values talk over the network even
//! on one node, processes with the same value through shared memory (where shm can
//! reach the peer at all). It is read once per process.
//!
//! Names carry a 64-bit digest of the identity ([`NODE_LEN`] bytes, FNV-1a), not the
//! identity itself: libfabric programs keep endpoint names in `FI_NAME_MAX` (64) bytes
//! (Open MPI's mtl ofi does), and the digest keeps a name with an IPv4 tcp half within
//! that. Two nodes whose identities share a digest would be taken for one; at 2^-64 per
//! pair that is not a concern, and the shm half still checks its peer is there.

use std::hash::Hasher;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

use fabric::{Error, Result};

/// The environment variable that replaces the node identity.
pub const NODE_ENV: &str = "FABRIC_HYBRID_NODE";
/// Longest value of [`NODE_ENV`].
pub const MAX_OVERRIDE: usize = 64;

/// Kind byte of an identity read from the kernel.
const KERNEL: u8 = b'k';
/// Kind byte of an identity given in [`NODE_ENV`].
const GIVEN: u8 = b'o';

/// Bytes of the node identity's digest in a name.
pub const NODE_LEN: usize = 8;

/// This process's node identity's digest, as endpoint names carry it. `Err` when the
/// environment's value is refused (`Inval`, with a message on stderr) or the kernel's
/// facts cannot be read (`NoSys`).
pub fn this_node() -> Result<&'static [u8]> {
    static NODE: OnceLock<Result<[u8; NODE_LEN]>> = OnceLock::new();
    NODE.get_or_init(|| {
        let id = match std::env::var_os(NODE_ENV) {
            Some(v) => given(v.as_encoded_bytes()).inspect_err(|_| {
                eprintln!(
                    "fabric-hybrid: {NODE_ENV}={v:?} is no node identity (1 to {MAX_OVERRIDE} bytes)"
                )
            }),
            None => from_kernel(),
        }?;
        Ok(digest(&id))
    })
    .as_ref()
    .map(|d| &d[..])
    .map_err(|e| *e)
}

/// FNV-1a (64-bit) of an identity: a fixed function, so every process of a job, of
/// whatever build, computes the same digest for the same node.
fn digest(id: &[u8]) -> [u8; NODE_LEN] {
    let mut h = fnv::FnvHasher::default();
    h.write(id);
    h.finish().to_le_bytes()
}

fn given(v: &[u8]) -> Result<Vec<u8>> {
    if v.is_empty() || v.len() > MAX_OVERRIDE {
        return Err(Error::Inval);
    }
    Ok([&[GIVEN][..], v].concat())
}

fn from_kernel() -> Result<Vec<u8>> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(|s| parse_uuid(s.trim()))
        .ok_or(Error::NoSys)?;
    let mut id = Vec::with_capacity(1 + 16 + 3 * 8 + 4);
    id.push(KERNEL);
    id.extend_from_slice(&boot);
    for ns in ["net", "pid", "user"] {
        let ino = std::fs::metadata(format!("/proc/self/ns/{ns}"))
            .map_err(|_| Error::NoSys)?
            .ino();
        id.extend_from_slice(&ino.to_le_bytes());
    }
    id.extend_from_slice(&rustix::process::geteuid().as_raw().to_le_bytes());
    Ok(id)
}

/// The 16 bytes of a textual UUID (`8-4-4-4-12` hex digits).
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = s.split('-').collect();
    if groups.iter().map(|g| g.len()).collect::<Vec<_>>() != [8, 4, 4, 4, 12] {
        return None;
    }
    let hex: String = groups.concat();
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_identity_is_stable_and_well_formed() {
        let a = from_kernel().unwrap();
        assert_eq!(a.len(), 1 + 16 + 24 + 4);
        assert_eq!(a[0], KERNEL);
        assert_eq!(from_kernel().unwrap(), a);
        // An override never equals a kernel identity.
        assert_ne!(given(&a[1..]).unwrap(), a);
    }

    #[test]
    fn digests_are_fixed_and_tell_identities_apart() {
        // FNV-1a's published value for the empty input and for "a".
        assert_eq!(u64::from_le_bytes(digest(b"")), 0xcbf2_9ce4_8422_2325);
        assert_eq!(u64::from_le_bytes(digest(b"a")), 0xaf63_dc4c_8601_ec8c);
        let k = from_kernel().unwrap();
        assert_ne!(digest(&k), digest(&given(&k[1..]).unwrap()));
        assert_ne!(
            digest(&given(b"h1").unwrap()),
            digest(&given(b"h2").unwrap())
        );
        assert_eq!(this_node().unwrap().len(), NODE_LEN);
    }

    #[test]
    fn overrides_are_bounded() {
        assert_eq!(given(b"h1").unwrap(), b"oh1");
        assert_eq!(given(b""), Err(Error::Inval));
        assert_eq!(given(&[b'x'; MAX_OVERRIDE + 1]), Err(Error::Inval));
        assert!(given(&[b'x'; MAX_OVERRIDE]).is_ok());
    }

    #[test]
    fn uuids_parse_exactly() {
        assert_eq!(
            parse_uuid("0123abcd-4567-89ef-0011-223344556677"),
            Some([
                0x01, 0x23, 0xab, 0xcd, 0x45, 0x67, 0x89, 0xef, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55,
                0x66, 0x77
            ])
        );
        for bad in [
            "",
            "0123abcd-4567-89ef-0011-22334455667",
            "0123abcd456789ef0011223344556677",
            "0123abcd-4567-89ef-0011-2233445566zz",
            "0123abcd-4567-89ef-0011-22334455667é",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
    }
}
