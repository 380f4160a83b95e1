//! The message conformance suite (tests/suite/msg.rs) on the composed
//! provider, every endpoint in this process: every peer is on this node, so every
//! packet goes through the shm half.

/// The provider under test.
type Prov = fabric_hybrid::ShmTcp;

include!("suite/msg.rs");
