//! The RMA conformance suite (`suite/rma.rs`) on connected MSG endpoints of the loopback
//! provider: each node pair connected through a passive endpoint (`common::pair`), RMA
//! and atomics addressed with `FI_ADDR_UNSPEC`, for the static stacks of
//! `common::conformance_msg_matrix`.

/// The provider under test.
type Prov = fabric_loopback::Loopback;

/// The suite runs on connected MSG endpoints.
use common::msg_suite as suite_matrix;

include!("suite/rma.rs");
