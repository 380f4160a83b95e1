//! The message conformance suite (`suite/msg.rs`) on connected MSG endpoints of the tcp
//! provider: every test body that applies to a connection, each node pair connected
//! through a passive endpoint (`common::pair`) over 127.0.0.1, one socket per
//! connection carrying both directions, for the static stacks of
//! `common::conformance_msg_matrix`.

/// The provider under test.
type Prov = fabric_tcp::Tcp;

/// The suite runs on connected MSG endpoints.
use common::msg_suite as suite_matrix;

include!("suite/msg.rs");
