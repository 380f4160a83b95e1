//! The message conformance suite (tests/suite/msg.rs) on the tcp provider, every
//! endpoint in this process, talking over 127.0.0.1 (the provider's default
//! interface): the same connections, hello, frame checks and flow control as between
//! hosts.

/// The provider under test.
type Prov = fabric_tcp::Tcp;

include!("suite/msg.rs");
