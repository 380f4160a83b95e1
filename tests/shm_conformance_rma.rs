//! The RMA, atomic, counter, trigger and fence conformance suite (tests/suite/rma.rs) on
//! the shm provider, every endpoint in this process.

/// The provider under test.
type Prov = fabric_shm::Shm;

include!("suite/rma.rs");
