//! The message conformance suite (`suite/msg.rs`) on connected MSG endpoints of the
//! loopback provider: every test body that applies to a connection, each node pair
//! connected through a passive endpoint (`common::pair`), data calls addressed with
//! `FI_ADDR_UNSPEC`, for the static stacks of `common::conformance_msg_matrix`. The
//! tests left out (they need an AV, several peers or source addresses) are listed with
//! their reasons at the bottom of the suite.

/// The provider under test.
type Prov = fabric_loopback::Loopback;

/// The suite runs on connected MSG endpoints.
use common::msg_suite as suite_matrix;

include!("suite/msg.rs");
