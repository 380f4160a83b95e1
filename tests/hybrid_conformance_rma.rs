//! The RMA, atomic, counter, trigger and fence conformance suite (tests/suite/rma.rs) on the composed
//! provider, every endpoint in this process: every peer is on this node, so every
//! packet goes through the shm half.

/// The provider under test.
type Prov = fabric_hybrid::ShmTcp;

include!("suite/rma.rs");
