//! The RMA, atomic, counter, trigger and fence conformance suite (tests/suite/rma.rs) on
//! the tcp provider, every endpoint in this process, over 127.0.0.1.

/// The provider under test.
type Prov = fabric_tcp::Tcp;

include!("suite/rma.rs");
