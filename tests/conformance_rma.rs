//! Conformance of RMA (`fi_rma`), atomics (`fi_atomic`), memory registration (`fi_mr`),
//! counters bound to RMA (`fi_cntr`), triggered operations (`fi_trigger`) and `FI_FENCE`
//! against libfabric's man pages on the loopback provider: the provider-independent suite
//! of `suite/rma.rs` instantiated for the matrix of `common::conformance_matrix` (static
//! stacks and the same choices made at run time).

/// The provider under test.
type Prov = fabric_loopback::Loopback;

include!("suite/rma.rs");
