//! The RMA conformance suite (`suite/rma.rs`) on connected MSG endpoints of the tcp
//! provider: each node pair connected through a passive endpoint (`common::pair`) over
//! 127.0.0.1, RMA and atomics addressed with `FI_ADDR_UNSPEC`, for the static stacks of
//! `common::conformance_msg_matrix`.

/// The provider under test.
type Prov = fabric_tcp::Tcp;

/// The suite runs on connected MSG endpoints.
use common::msg_suite as suite_matrix;

include!("suite/rma.rs");
