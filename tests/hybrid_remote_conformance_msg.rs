//! The message conformance suite (tests/suite/msg.rs) on the composed
//! provider with every peer resolved to the remote half ([`fabric_hybrid::Elsewhere`]):
//! every packet goes through the tcp half, over 127.0.0.1.

/// The provider under test.
type Prov = fabric_hybrid::Hybrid<fabric_shm::Shm, fabric_tcp::Tcp, fabric_hybrid::Elsewhere>;

include!("suite/msg.rs");
