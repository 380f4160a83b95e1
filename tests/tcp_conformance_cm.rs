//! Connection management (`fi_cm`, `fi_eq`, `fi_endpoint`) and the data path of
//! connected MSG endpoints on the tcp provider: the provider-independent suite of
//! `suite/cm.rs` for a matrix of static stacks, every endpoint in this process over
//! 127.0.0.1 (real listening sockets, requests and answers on the wire).

/// The provider under test.
type Prov = fabric_tcp::Tcp;

include!("suite/cm.rs");
