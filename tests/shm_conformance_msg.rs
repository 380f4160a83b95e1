//! The message conformance suite (tests/suite/msg.rs) on the shm provider, every
//! endpoint in this process: the same rings, cell parser, staging and liveness code as
//! between processes (tests/shm_multiprocess.rs covers those).

/// The provider under test.
type Prov = fabric_shm::Shm;

include!("suite/msg.rs");
