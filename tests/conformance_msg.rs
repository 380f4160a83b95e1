//! Conformance of the message and tagged data paths and of the completion, counter, EQ,
//! AV, wait and endpoint objects against libfabric's man pages (`fi_msg`, `fi_tagged`,
//! `fi_cq`, `fi_cntr`, `fi_eq`, `fi_av`, `fi_poll`, `fi_endpoint`) on the loopback
//! provider: the provider-independent suite of `suite/msg.rs` instantiated for the matrix
//! of `common::conformance_matrix` (static stacks and the same choices made at run time).

/// The provider under test.
type Prov = fabric_loopback::Loopback;

include!("suite/msg.rs");
