//! Attributes of every object (`fi_*_attr`), with `const DEFAULT`s so a whole
//! configuration can live in a `const` or `static`.
//!
//! Zero means "unspecified" in hints, as in libfabric; providers fill in what they grant.

use const_default::ConstDefault;

use crate::flags::{Caps, Mode, MrAccess, MrMode, OpFlags, Order};

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident { $( $(#[$vm:meta])* $v:ident = $n:expr ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(u32)]
        pub enum $name {
            $( $(#[$vm])* $v = $n, )*
        }
        impl ConstDefault for $name {
            const DEFAULT: Self = $name::Unspec;
        }
        impl $name {
            /// The libfabric numeric value.
            pub const fn as_raw(self) -> u32 { self as u32 }
            /// From the libfabric numeric value.
            pub const fn from_raw(v: u32) -> Option<Self> {
                $( if v == $n { return Some($name::$v); } )*
                None
            }
        }
    };
}

c_enum! {
    /// `enum fi_ep_type`.
    EpType { #[default] /** `FI_EP_UNSPEC` */ Unspec = 0, /** `FI_EP_MSG` */ Msg = 1, /** `FI_EP_DGRAM` */ Dgram = 2, /** `FI_EP_RDM` */ Rdm = 3 }
}
c_enum! {
    /// Address formats (`FI_FORMAT_UNSPEC`, `FI_SOCKADDR_IN`, ..., `FI_ADDR_STR`).
    AddrFormat { #[default] /** `FI_FORMAT_UNSPEC` */ Unspec = 0, /** `FI_SOCKADDR` */ Sockaddr = 1,
        /** `FI_SOCKADDR_IN` */ SockaddrIn = 2, /** `FI_SOCKADDR_IN6` */ SockaddrIn6 = 3,
        /** `FI_ADDR_STR` */ Str = 12, /** a provider-specific binary name (`FI_ADDR_PROTO` style) */ Proto = 64 }
}
c_enum! {
    /// `enum fi_threading`, the run-time view of the [`Threading`](crate::Threading) parameter.
    ThreadingLevel { #[default] /** `FI_THREAD_UNSPEC` */ Unspec = 0, /** `FI_THREAD_SAFE` */ Safe = 1,
        /** `FI_THREAD_DOMAIN` */ Domain = 3, /** `FI_THREAD_COMPLETION` */ Completion = 4, /** `FI_THREAD_ENDPOINT` */ Endpoint = 5 }
}
c_enum! {
    /// `enum fi_progress`, the run-time view of the [`Progress`](crate::Progress) parameter.
    ProgressMode { #[default] /** `FI_PROGRESS_UNSPEC` */ Unspec = 0, /** `FI_PROGRESS_AUTO` */ Auto = 1, /** `FI_PROGRESS_MANUAL` */ Manual = 2 }
}
c_enum! {
    /// `enum fi_resource_mgmt`.
    ResourceMgmt { #[default] /** `FI_RM_UNSPEC` */ Unspec = 0, /** `FI_RM_DISABLED` */ Disabled = 1, /** `FI_RM_ENABLED` */ Enabled = 2 }
}
c_enum! {
    /// `enum fi_av_type`, the run-time view of the [`AvType`](crate::AvType) parameter.
    AvKind { #[default] /** `FI_AV_UNSPEC` */ Unspec = 0, /** `FI_AV_MAP` */ Map = 1, /** `FI_AV_TABLE` */ Table = 2 }
}
c_enum! {
    /// `enum fi_wait_obj`.
    WaitObj { /** `FI_WAIT_NONE` */ None = 0, #[default] /** `FI_WAIT_UNSPEC` */ Unspec = 1, /** `FI_WAIT_SET` */ Set = 2,
        /** `FI_WAIT_FD` */ Fd = 3, /** `FI_WAIT_MUTEX_COND` */ MutexCond = 4, /** `FI_WAIT_YIELD` */ Yield = 5 }
}
c_enum! {
    /// `enum fi_cq_format`, the run-time view of the [`CqFormat`](crate::CqFormat) parameter.
    CqFormatKind { #[default] /** `FI_CQ_FORMAT_UNSPEC` */ Unspec = 0, /** `FI_CQ_FORMAT_CONTEXT` */ Context = 1,
        /** `FI_CQ_FORMAT_MSG` */ Msg = 2, /** `FI_CQ_FORMAT_DATA` */ Data = 3, /** `FI_CQ_FORMAT_TAGGED` */ Tagged = 4 }
}
c_enum! {
    /// `enum fi_cq_wait_cond`.
    CqWaitCond { #[default] /** `FI_CQ_COND_NONE` */ Unspec = 0, /** `FI_CQ_COND_THRESHOLD` */ Threshold = 1 }
}

/// `struct fi_tx_attr`.
#[derive(Debug, Clone, PartialEq, Eq, ConstDefault, Default)]
pub struct TxAttr {
    /// Capabilities of the transmit context.
    pub caps: Caps,
    /// Mode bits.
    pub mode: Mode,
    /// Default operation flags (e.g. `FI_DELIVERY_COMPLETE`, `FI_COMPLETION`).
    pub op_flags: OpFlags,
    /// Message ordering.
    pub msg_order: Order,
    /// Completion ordering.
    pub comp_order: Order,
    /// Largest payload of `inject` calls.
    pub inject_size: usize,
    /// Depth of the transmit queue (outstanding operations).
    pub size: usize,
    /// Most scatter-gather entries per operation.
    pub iov_limit: usize,
    /// Most RMA scatter-gather entries per operation.
    pub rma_iov_limit: usize,
}

/// `struct fi_rx_attr`.
#[derive(Debug, Clone, PartialEq, Eq, ConstDefault, Default)]
pub struct RxAttr {
    /// Capabilities of the receive context.
    pub caps: Caps,
    /// Mode bits.
    pub mode: Mode,
    /// Default operation flags.
    pub op_flags: OpFlags,
    /// Message ordering.
    pub msg_order: Order,
    /// Completion ordering.
    pub comp_order: Order,
    /// Buffered receive size.
    pub total_buffered_recv: usize,
    /// Depth of the receive queue (posted receives).
    pub size: usize,
    /// Most scatter-gather entries per receive.
    pub iov_limit: usize,
}

/// `struct fi_ep_attr`.
#[derive(Debug, Clone, PartialEq, Eq, ConstDefault, Default)]
pub struct EpAttr {
    /// Endpoint type.
    pub ep_type: EpType,
    /// Wire protocol identifier.
    pub protocol: u32,
    /// Protocol version.
    pub protocol_version: u32,
    /// Largest message.
    pub max_msg_size: usize,
    /// Prefix size (`FI_MSG_PREFIX`).
    pub msg_prefix_size: usize,
    /// Ordering limit for RAW.
    pub max_order_raw_size: usize,
    /// Ordering limit for WAR.
    pub max_order_war_size: usize,
    /// Ordering limit for WAW.
    pub max_order_waw_size: usize,
    /// Tag format (which tag bits are used).
    pub mem_tag_format: u64,
    /// Transmit contexts of a scalable endpoint (0: default).
    pub tx_ctx_cnt: usize,
    /// Receive contexts of a scalable endpoint (0: default).
    pub rx_ctx_cnt: usize,
}

/// `struct fi_domain_attr`.
#[derive(Debug, Clone, PartialEq, Eq, ConstDefault, Default)]
pub struct DomainAttr {
    /// Domain name (empty: any).
    pub name: &'static str,
    /// Threading level (the run-time view of the stack's parameter).
    pub threading: ThreadingLevel,
    /// Control progress.
    pub control_progress: ProgressMode,
    /// Data progress.
    pub data_progress: ProgressMode,
    /// Resource management.
    pub resource_mgmt: ResourceMgmt,
    /// AV type.
    pub av_type: AvKind,
    /// MR mode bits.
    pub mr_mode: MrMode,
    /// Size of MR keys in bytes.
    pub mr_key_size: usize,
    /// Size of remote CQ data in bytes.
    pub cq_data_size: usize,
    /// Most CQs.
    pub cq_cnt: usize,
    /// Most endpoints.
    pub ep_cnt: usize,
    /// Most tx contexts.
    pub tx_ctx_cnt: usize,
    /// Most rx contexts.
    pub rx_ctx_cnt: usize,
    /// Most tx contexts per scalable endpoint.
    pub max_ep_tx_ctx: usize,
    /// Most rx contexts per scalable endpoint.
    pub max_ep_rx_ctx: usize,
    /// Most shared tx contexts per endpoint.
    pub max_ep_stx_ctx: usize,
    /// Most shared rx contexts per endpoint.
    pub max_ep_srx_ctx: usize,
    /// Most counters.
    pub cntr_cnt: usize,
    /// Most iov entries per registration.
    pub mr_iov_limit: usize,
    /// Domain capabilities.
    pub caps: Caps,
    /// Domain mode.
    pub mode: Mode,
    /// Most MRs.
    pub mr_cnt: usize,
}

/// `struct fi_fabric_attr`.
#[derive(Debug, Clone, PartialEq, Eq, ConstDefault, Default)]
pub struct FabricAttr {
    /// Fabric name (empty: any).
    pub name: &'static str,
    /// Provider name (empty: any).
    pub prov_name: &'static str,
    /// Provider version.
    pub prov_version: u32,
    /// API version.
    pub api_version: u32,
}

/// `struct fi_cq_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ConstDefault, Default)]
pub struct CqAttr {
    /// Number of entries (0: provider default).
    pub size: usize,
    /// `FI_AFFINITY` and friends (unused by the core).
    pub flags: u64,
    /// Entry format, informational: the stack's `C` parameter decides it.
    pub format: CqFormatKind,
    /// Wait object.
    pub wait_obj: WaitObj,
    /// Signaling vector.
    pub signaling_vector: i32,
    /// Wait condition for `sread`.
    pub wait_cond: CqWaitCond,
}

/// `struct fi_cntr_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ConstDefault, Default)]
pub struct CntrAttr {
    /// Events counted (only `FI_CNTR_EVENTS_COMP` exists).
    pub events: u32,
    /// Wait object.
    pub wait_obj: WaitObj,
    /// Flags.
    pub flags: u64,
}

/// `struct fi_eq_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ConstDefault, Default)]
pub struct EqAttr {
    /// Number of entries (0: default).
    pub size: usize,
    /// Flags (`FI_WRITE` allows `fi_eq_write`).
    pub flags: u64,
    /// Wait object.
    pub wait_obj: WaitObj,
    /// Signaling vector.
    pub signaling_vector: i32,
}

/// `struct fi_av_attr`.
#[derive(Debug, Clone, PartialEq, Eq, ConstDefault, Default)]
pub struct AvAttr {
    /// Informational: the stack's `A` parameter decides it.
    pub av_type: AvKind,
    /// Bits of `fi_addr_t` that select a receive context.
    pub rx_ctx_bits: u32,
    /// Expected number of addresses.
    pub count: usize,
    /// Expected endpoints per node.
    pub ep_per_node: usize,
    /// Name of a shared AV (`None`: private).
    pub name: Option<&'static str>,
    /// `FI_READ` (open an existing named AV read-only), `FI_EVENT` (async inserts), `FI_SYMMETRIC`.
    pub flags: u64,
}

/// `struct fi_wait_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ConstDefault, Default)]
pub struct WaitAttr {
    /// Wait object of the set.
    pub wait_obj: WaitObj,
    /// Flags.
    pub flags: u64,
}

/// `struct fi_poll_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ConstDefault, Default)]
pub struct PollAttr {
    /// Flags.
    pub flags: u64,
}

/// `struct fi_mr_attr` without the iovecs (those are the call's arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ConstDefault, Default)]
pub struct MrAttr {
    /// Access rights.
    pub access: MrAccess,
    /// Offset of the first byte for offset-addressed (non `FI_MR_VIRT_ADDR`) domains.
    pub offset: u64,
    /// Requested key (used when the domain is not `FI_MR_PROV_KEY`).
    pub requested_key: u64,
    /// The application's context.
    pub context: usize,
}

/// Flag of `AvAttr::flags` and MR calls: `FI_READ`.
pub const FI_READ: u64 = 1 << 8;
/// Flag of `AvAttr::flags`/`EqAttr::flags`: `FI_EVENT` (async AV inserts report to the EQ).
pub const FI_EVENT: u64 = 1 << 24;
/// Flag of `EqAttr::flags`: `FI_WRITE` (the application may `write` events).
pub const FI_WRITE: u64 = 1 << 9;
/// AV flag `FI_SYMMETRIC`.
pub const FI_SYMMETRIC: u64 = 1 << 59;
/// AV insert flag `FI_SYNC_ERR`: report per-address errors synchronously.
pub const FI_SYNC_ERR: u64 = 1 << 58;
