//! `fi_getinfo`'s data model: [`Info`] (`struct fi_info`), [`Hints`], and the matching of a
//! provider's candidate infos against hints ([`filter`], [`grant`]).
//!
//! A provider describes each way it can be used as a *candidate* [`Info`]: the full set of
//! capabilities it can offer, its limits (largest sizes and counts), the mode bits and
//! `mr_mode` bits it *requires*, and the threading/progress/AV/resource-management models
//! it provides. [`grant`] checks one candidate against the application's hints and returns
//! the *granted* info, i.e. the candidate narrowed to what the application asked for, as
//! `fi_getinfo(3)` describes. [`filter`] does that for a whole provider list.
//!
//! # Matching rules
//!
//! The general rule of `fi_getinfo(3)` applies: a non-zero hint must be supported or the
//! candidate is rejected; a zero hint is a wildcard. In detail:
//!
//! * **Names** (`prov_name`, fabric and domain name): empty matches anything; otherwise
//!   compared ASCII case-insensitively, like libfabric. A provider name `^name` excludes
//!   that provider and matches every other one.
//! * **Capabilities**: the requested caps, after expanding primary capabilities without
//!   direction modifiers ([`expand_directions`]), must be a subset of the candidate's
//!   (also expanded). Granted caps are the expanded request plus the candidate's
//!   [`Caps::SECONDARY`] caps; with no caps requested, all the candidate's caps.
//! * **Modes**: the candidate's required mode bits must be supported by the application.
//!   With no hints, or with hints whose mode was never set (see [`Hints::mode_set`]),
//!   every mode is accepted. Granted mode is the candidate's required mode. The same
//!   applies to `tx_attr.mode`, `rx_attr.mode` and `domain_attr.mode`, where a zero hint
//!   falls back to the info-level mode (`fi_endpoint(3)`).
//! * **Endpoint type**: `FI_EP_UNSPEC` matches anything, otherwise it must be equal.
//! * **Address format**: `FI_FORMAT_UNSPEC` matches anything. A candidate with
//!   `FI_SOCKADDR` accepts `FI_SOCKADDR_IN`/`_IN6`, one with `FI_SOCKADDR_IN6` also accepts
//!   `FI_SOCKADDR_IN` (v4-mapped), otherwise formats must be equal. The requested format is
//!   granted.
//! * **Threading**: models are ranked by the parallelism they allow:
//!   `SAFE > ENDPOINT > COMPLETION > DOMAIN`. A candidate satisfies any request ranked at or
//!   below its own level (so `FI_THREAD_SAFE` satisfies everything); the requested level is
//!   granted.
//! * **Progress** (control and data): `AUTO` satisfies `AUTO` and `MANUAL` (an application
//!   driving progress is harmless to an automatic provider), `MANUAL` only `MANUAL`. The
//!   requested model is granted.
//! * **Resource management**: `ENABLED` satisfies both, `DISABLED` only `DISABLED`.
//! * **AV type**: must be equal when both are specified.
//! * For threading, progress, resource management and AV type, a candidate value of
//!   `*_UNSPEC` means "not constrained" and satisfies every request.
//! * **`mr_mode`**: hint bits are the registration modes the application *supports*,
//!   candidate bits the ones the provider *requires* (`fi_mr(3)`: the provider clears the
//!   bits it does not need). The requirement is first narrowed to the granted caps, as
//!   libfabric does: without being an RMA/atomic target (`FI_REMOTE_READ`/`_WRITE`),
//!   `FI_MR_RAW`, `FI_MR_VIRT_ADDR`, `FI_MR_PROV_KEY` and `FI_MR_RMA_EVENT` are not needed,
//!   and with neither a target role nor `FI_MR_LOCAL` nothing is; `FI_MR_HMEM` is never
//!   needed since there is no `FI_HMEM` capability. The narrowed requirement must be a
//!   subset of the hint (`FI_LOCAL_MR` in an explicitly set mode counts as `FI_MR_LOCAL`)
//!   and is what is granted. A zero hint means the application supports no `mr_mode` bit,
//!   as in libfabric ≥ 1.5; with no hints at all the candidate's bits are granted as-is.
//! * **Numeric limits** (queue sizes, iov limits, counts, `cq_data_size`, `mr_key_size`,
//!   ...) must not exceed the candidate's; a non-zero request is granted as requested.
//!   `inject_size`, `max_msg_size`, `protocol_version` and the `max_order_*_size` limits
//!   report the provider's value. `ep_attr.tx_ctx_cnt`/`rx_ctx_cnt` are limited by the
//!   domain's `max_ep_tx_ctx`/`max_ep_rx_ctx` (or, when those are zero, by the candidate's
//!   endpoint value, at least 1); [`SHARED_CONTEXT`] requires `max_ep_stx_ctx`/`_srx_ctx`.
//! * **Orders**: requested `msg_order`/`comp_order` must be a subset of the candidate's;
//!   the candidate's (stricter) orders are reported.
//! * **`mem_tag_format`**: the requested tag width (bits up to the highest set one) must
//!   fit in the candidate's; the requested format is granted.
//! * **`tx_attr.caps`/`rx_attr.caps`**: with no hint, the granted info caps (within the
//!   candidate's context caps) restricted to the capabilities applying to that side
//!   ([`TX_CAPS`], [`RX_CAPS`]); otherwise the (expanded) hint, which must be within both
//!   the granted info caps and the candidate's context caps. A primary capability left
//!   without a direction on a side (`FI_TAGGED` on the receive side of a send-only
//!   endpoint) is dropped from that side. Domain caps are all secondary (`fi_domain(3)`):
//!   a hint must be supported, the candidate's are reported.
//! * `op_flags`, `src_addr` and `dest_addr` from the hints are carried into the granted
//!   info; otherwise the candidate's are kept.
//! * `fabric_attr.prov_version`/`api_version` and `ep_attr.msg_prefix_size` hints are
//!   ignored; the candidate's values are reported.

use core::fmt;

use crate::attr::{
    AddrFormat, AvKind, DomainAttr, EpAttr, EpType, FabricAttr, ProgressMode, ResourceMgmt, RxAttr,
    ThreadingLevel, TxAttr,
};
use crate::error::{Error, Result};
use crate::flags::{Caps, Mode, MrMode, OpFlags, Order};

/// Every mode bit, including ones this crate has no name for.
const ANY_MODE: Mode = Mode::from_bits_retain(u64::MAX);

/// `FI_SHARED_CONTEXT`: `ep_attr.tx_ctx_cnt`/`rx_ctx_cnt` value requesting a shared context.
pub const SHARED_CONTEXT: usize = usize::MAX;

/// `FI_VERSION(major, minor)`: the encoding of `prov_version` and `api_version`.
#[inline]
pub const fn version(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// `struct fi_info`: one way to use a provider.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Info {
    /// Capabilities (`FI_MSG`, `FI_TAGGED`, ...).
    pub caps: Caps,
    /// Mode bits: in a candidate or granted info, the ones the application must honour.
    pub mode: Mode,
    /// Address format of `src_addr`, `dest_addr` and the AV.
    pub addr_format: AddrFormat,
    /// Source address (`src_addr`/`src_addrlen`).
    pub src_addr: Option<Vec<u8>>,
    /// Destination address (`dest_addr`/`dest_addrlen`).
    pub dest_addr: Option<Vec<u8>>,
    /// Transmit context attributes.
    pub tx_attr: TxAttr,
    /// Receive context attributes.
    pub rx_attr: RxAttr,
    /// Endpoint attributes.
    pub ep_attr: EpAttr,
    /// Domain attributes.
    pub domain_attr: DomainAttr,
    /// Fabric attributes.
    pub fabric_attr: FabricAttr,
    /// The connection request an `FI_CONNREQ` event carries (`fi_info::handle`): an
    /// MSG endpoint opened from this info answers that request with `accept`.
    pub handle: Option<ConnHandle>,
}

/// A connection request received by a passive endpoint (`fi_info::handle` of an
/// `FI_CONNREQ` event's info), answered by `Endpoint::accept` of an endpoint opened
/// from that info or by `PassiveEndpoint::reject`. Clones name the same request; two
/// handles are equal when they do.
#[derive(Clone)]
pub struct ConnHandle(pub(crate) std::sync::Arc<dyn core::any::Any + Send + Sync>);

impl PartialEq for ConnHandle {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::addr_eq(
            std::sync::Arc::as_ptr(&self.0),
            std::sync::Arc::as_ptr(&other.0),
        )
    }
}

impl Eq for ConnHandle {}

impl fmt::Debug for ConnHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnHandle({:p})", std::sync::Arc::as_ptr(&self.0))
    }
}

/// Hints: the same fields as [`Info`], zero/empty meaning "unspecified", with builder
/// methods for the common ones.
///
/// Builders that set a single attribute field (e.g. [`Hints::threading`]) write into the
/// corresponding attribute struct, so call them after the whole-struct builders
/// ([`Hints::domain_attr`], ...) they would otherwise be overwritten by.
///
/// ```
/// use fabric::attr::{EpType, ThreadingLevel};
/// use fabric::flags::Caps;
/// use fabric::info::Hints;
/// let h = Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm).threading(ThreadingLevel::Domain);
/// assert_eq!(h.info.domain_attr.threading, ThreadingLevel::Domain);
/// assert!(!h.mode_set);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hints {
    /// The hinted fields.
    pub info: Info,
    /// True once [`Hints::mode`] was called. libfabric treats `hints->mode == 0` as "the
    /// application supports no mode bits"; here that needs an explicit `.mode(Mode::empty())`,
    /// while hints whose mode was never set (and `info.mode` left empty) accept every mode,
    /// like no hints at all.
    pub mode_set: bool,
}

impl Hints {
    /// Empty hints: everything unspecified, every mode accepted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requested capabilities.
    pub fn caps(mut self, caps: Caps) -> Self {
        self.info.caps = caps;
        self
    }

    /// The mode bits the application supports (`Mode::empty()`: none).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.info.mode = mode;
        self.mode_set = true;
        self
    }

    /// Endpoint type.
    pub fn ep_type(mut self, ep_type: EpType) -> Self {
        self.info.ep_attr.ep_type = ep_type;
        self
    }

    /// Address format.
    pub fn addr_format(mut self, format: AddrFormat) -> Self {
        self.info.addr_format = format;
        self
    }

    /// Provider name (`^name` excludes that provider).
    pub fn prov_name(mut self, name: &'static str) -> Self {
        self.info.fabric_attr.prov_name = name;
        self
    }

    /// Fabric name.
    pub fn fabric_name(mut self, name: &'static str) -> Self {
        self.info.fabric_attr.name = name;
        self
    }

    /// Domain name.
    pub fn domain_name(mut self, name: &'static str) -> Self {
        self.info.domain_attr.name = name;
        self
    }

    /// Threading model.
    pub fn threading(mut self, level: ThreadingLevel) -> Self {
        self.info.domain_attr.threading = level;
        self
    }

    /// Data progress model.
    pub fn data_progress(mut self, progress: ProgressMode) -> Self {
        self.info.domain_attr.data_progress = progress;
        self
    }

    /// Control progress model.
    pub fn control_progress(mut self, progress: ProgressMode) -> Self {
        self.info.domain_attr.control_progress = progress;
        self
    }

    /// AV type.
    pub fn av_type(mut self, av_type: AvKind) -> Self {
        self.info.domain_attr.av_type = av_type;
        self
    }

    /// The memory-registration modes the application supports.
    pub fn mr_mode(mut self, mr_mode: MrMode) -> Self {
        self.info.domain_attr.mr_mode = mr_mode;
        self
    }

    /// Resource management.
    pub fn resource_mgmt(mut self, rm: ResourceMgmt) -> Self {
        self.info.domain_attr.resource_mgmt = rm;
        self
    }

    /// All transmit attributes.
    pub fn tx_attr(mut self, attr: TxAttr) -> Self {
        self.info.tx_attr = attr;
        self
    }

    /// All receive attributes.
    pub fn rx_attr(mut self, attr: RxAttr) -> Self {
        self.info.rx_attr = attr;
        self
    }

    /// All endpoint attributes.
    pub fn ep_attr(mut self, attr: EpAttr) -> Self {
        self.info.ep_attr = attr;
        self
    }

    /// All domain attributes.
    pub fn domain_attr(mut self, attr: DomainAttr) -> Self {
        self.info.domain_attr = attr;
        self
    }

    /// Source address.
    pub fn src_addr(mut self, addr: Vec<u8>) -> Self {
        self.info.src_addr = Some(addr);
        self
    }

    /// Destination address.
    pub fn dest_addr(mut self, addr: Vec<u8>) -> Self {
        self.info.dest_addr = Some(addr);
        self
    }

    /// The mode bits the application supports: the hint when set, otherwise all.
    fn app_mode(&self) -> Mode {
        if self.mode_set || !self.info.mode.is_empty() {
            self.info.mode
        } else {
            ANY_MODE
        }
    }

    /// The `mr_mode` bits the application supports, `FI_LOCAL_MR` folded into `FI_MR_LOCAL`.
    fn app_mr_mode(&self) -> MrMode {
        let mut mr = self.info.domain_attr.mr_mode;
        if (self.mode_set || !self.info.mode.is_empty()) && self.info.mode.contains(Mode::LOCAL_MR)
        {
            mr |= MrMode::LOCAL;
        }
        mr
    }
}

/// Why a candidate does not match the hints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// Requested capabilities the candidate lacks (after direction expansion).
    Caps(Caps),
    /// Modes the candidate requires that the application does not support.
    Mode(Mode),
    /// Endpoint type differs.
    EpType,
    /// Address format not supported.
    AddrFormat,
    /// Provider name differs (or is excluded).
    ProvName,
    /// Fabric name differs.
    FabricName,
    /// Domain name differs.
    DomainName,
    /// Threading model not supported.
    Threading,
    /// Control or data progress model not supported.
    Progress,
    /// AV type differs.
    AvType,
    /// The candidate requires `mr_mode` bits the application does not support.
    MrMode,
    /// Resource management model not supported.
    ResourceMgmt,
    /// A transmit attribute (named) is not supported.
    TxAttr(&'static str),
    /// A receive attribute (named) is not supported.
    RxAttr(&'static str),
    /// An endpoint attribute (named) is not supported.
    EpAttr(&'static str),
    /// A domain attribute (named) is not supported.
    DomainAttr(&'static str),
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Caps(c) => {
                write!(f, "unsupported capabilities: {}", FlagList(c.bits(), CAPS))
            }
            Mismatch::Mode(m) => write!(
                f,
                "required mode not supported: {}",
                FlagList(m.bits(), MODES)
            ),
            Mismatch::EpType => f.write_str("unsupported endpoint type"),
            Mismatch::AddrFormat => f.write_str("unsupported address format"),
            Mismatch::ProvName => f.write_str("provider name does not match"),
            Mismatch::FabricName => f.write_str("fabric name does not match"),
            Mismatch::DomainName => f.write_str("domain name does not match"),
            Mismatch::Threading => f.write_str("unsupported threading model"),
            Mismatch::Progress => f.write_str("unsupported progress model"),
            Mismatch::AvType => f.write_str("unsupported AV type"),
            Mismatch::MrMode => f.write_str("required mr_mode not supported"),
            Mismatch::ResourceMgmt => f.write_str("unsupported resource management"),
            Mismatch::TxAttr(field) => write!(f, "tx_attr.{field} not supported"),
            Mismatch::RxAttr(field) => write!(f, "rx_attr.{field} not supported"),
            Mismatch::EpAttr(field) => write!(f, "ep_attr.{field} not supported"),
            Mismatch::DomainAttr(field) => write!(f, "domain_attr.{field} not supported"),
        }
    }
}

impl std::error::Error for Mismatch {}

/// What a provider whose transport carries the core protocol offers: every capability
/// the core implements (messages, tagged, RMA, atomics, multi-receive, triggered
/// operations, fences, RMA events, `FI_SOURCE`, directed receive, named receive
/// contexts, shared AVs), strict message ordering, completions in order on the receive
/// side (not on the transmit side, where a send completes before an RMA or atomic
/// posted earlier that waits for its answer), resource management on, and the core's
/// limits. Providers fill in their name, version, sizes and endpoint count.
///
/// ```
/// use fabric::attr::EpType;
/// let i = fabric::info::core_candidate("mine", 1 << 16, EpType::Rdm, 64, 1 << 20, 16);
/// assert_eq!((i.fabric_attr.prov_name, i.tx_attr.inject_size), ("mine", 64));
/// ```
pub fn core_candidate(
    prov: &'static str,
    version: u32,
    ep_type: EpType,
    inject_size: usize,
    max_msg_size: usize,
    max_eps: usize,
) -> Info {
    let caps = Caps::MSG
        | Caps::TAGGED
        | Caps::RMA
        | Caps::ATOMIC
        | Caps::SEND
        | Caps::RECV
        | Caps::READ
        | Caps::WRITE
        | Caps::REMOTE_READ
        | Caps::REMOTE_WRITE
        | Caps::MULTI_RECV
        | Caps::TRIGGER
        | Caps::FENCE
        | Caps::RMA_EVENT
        | Caps::SOURCE
        | Caps::DIRECTED_RECV
        | Caps::NAMED_RX_CTX
        | Caps::SHARED_AV
        | Caps::LOCAL_COMM;
    Info {
        caps,
        mode: Mode::empty(),
        addr_format: AddrFormat::Proto,
        src_addr: None,
        dest_addr: None,
        tx_attr: TxAttr {
            caps,
            msg_order: Order::STRICT,
            // Sends complete when sent, RMA and atomics when the target answers: a
            // send completes before a write posted earlier.
            comp_order: Order::empty(),
            inject_size,
            size: 1024,
            iov_limit: crate::limits::IOV_LIMIT,
            rma_iov_limit: 1,
            ..TxAttr::default()
        },
        rx_attr: RxAttr {
            caps,
            msg_order: Order::STRICT,
            comp_order: Order::STRICT,
            size: 1024,
            iov_limit: crate::limits::IOV_LIMIT,
            ..RxAttr::default()
        },
        ep_attr: EpAttr {
            ep_type,
            max_msg_size,
            mem_tag_format: u64::MAX,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            max_order_raw_size: max_msg_size,
            max_order_war_size: max_msg_size,
            max_order_waw_size: max_msg_size,
            ..EpAttr::default()
        },
        domain_attr: DomainAttr {
            name: prov,
            resource_mgmt: ResourceMgmt::Enabled,
            mr_mode: MrMode::empty(),
            mr_key_size: 8,
            cq_data_size: 8,
            cq_cnt: 1 << 16,
            ep_cnt: max_eps,
            tx_ctx_cnt: max_eps,
            rx_ctx_cnt: max_eps,
            max_ep_tx_ctx: 16,
            max_ep_rx_ctx: 16,
            max_ep_stx_ctx: 1,
            max_ep_srx_ctx: 1,
            cntr_cnt: 1 << 16,
            mr_iov_limit: 4,
            mr_cnt: 1 << 20,
            caps: Caps::LOCAL_COMM,
            ..DomainAttr::default()
        },
        fabric_attr: FabricAttr {
            name: prov,
            prov_name: prov,
            prov_version: version,
            api_version: (1 << 16) | 17,
        },
        handle: None,
    }
}

/// Filters a provider's candidate infos by hints, returning the granted infos in the
/// candidates' order (providers list their best option first), each adjusted to the hints.
///
/// Returns [`Error::NoData`] when nothing matches (`-FI_ENODATA`).
pub fn filter(candidates: &[Info], hints: Option<&Hints>) -> Result<Vec<Info>> {
    let granted: Vec<Info> = candidates
        .iter()
        .filter_map(|c| grant(c, hints).ok())
        .collect();
    if granted.is_empty() {
        Err(Error::NoData)
    } else {
        Ok(granted)
    }
}

/// Checks a single candidate against hints, returning the granted [`Info`] or the first
/// reason it does not match (for `fi_info -v` style diagnostics).
///
/// Checks run in a fixed order: provider, fabric and domain names, endpoint type, address
/// format, caps, mode, threading, progress, AV type, `mr_mode`, resource management, then
/// the transmit, receive, endpoint and domain attributes. See the [module docs](self) for
/// the rules.
pub fn grant(candidate: &Info, hints: Option<&Hints>) -> core::result::Result<Info, Mismatch> {
    match hints {
        Some(h) => grant_with(candidate, &h.info, h.app_mode(), Some(h.app_mr_mode())),
        None => grant_with(candidate, &Info::default(), ANY_MODE, None),
    }
}

/// Primary capabilities whose direction is chosen by `FI_SEND`/`FI_RECV`.
const MSG_LIKE: Caps = Caps::MSG.union(Caps::TAGGED).union(Caps::MULTICAST);
/// The direction modifiers of [`MSG_LIKE`].
const MSG_DIRS: Caps = Caps::SEND.union(Caps::RECV);
/// Primary capabilities whose direction is chosen by `FI_READ`/`FI_WRITE`/`FI_REMOTE_*`.
const RMA_LIKE: Caps = Caps::RMA.union(Caps::ATOMIC);
/// The direction modifiers of [`RMA_LIKE`].
const RMA_DIRS: Caps = Caps::READ
    .union(Caps::WRITE)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE);

/// Capabilities that apply to a transmit context (`fi_endpoint(3)`).
pub const TX_CAPS: Caps = Caps::MSG
    .union(Caps::RMA)
    .union(Caps::TAGGED)
    .union(Caps::ATOMIC)
    .union(Caps::READ)
    .union(Caps::WRITE)
    .union(Caps::SEND)
    .union(Caps::TRIGGER)
    .union(Caps::FENCE)
    .union(Caps::MULTICAST)
    .union(Caps::NAMED_RX_CTX)
    .union(Caps::COLLECTIVE);

/// Capabilities that apply to a receive context (`fi_endpoint(3)`).
pub const RX_CAPS: Caps = Caps::MSG
    .union(Caps::RMA)
    .union(Caps::TAGGED)
    .union(Caps::ATOMIC)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE)
    .union(Caps::RECV)
    .union(Caps::TRIGGER)
    .union(Caps::DIRECTED_RECV)
    .union(Caps::MULTI_RECV)
    .union(Caps::SOURCE)
    .union(Caps::RMA_EVENT)
    .union(Caps::COLLECTIVE);

/// Makes implied directions explicit: `FI_MSG`/`FI_TAGGED`/`FI_MULTICAST` without
/// `FI_SEND`/`FI_RECV` mean both; `FI_RMA`/`FI_ATOMIC` without any of `FI_READ`,
/// `FI_WRITE`, `FI_REMOTE_READ`, `FI_REMOTE_WRITE` mean all four (`fi_getinfo(3)`).
///
/// ```
/// use fabric::flags::Caps;
/// use fabric::info::expand_directions;
/// assert_eq!(expand_directions(Caps::TAGGED), Caps::TAGGED | Caps::SEND | Caps::RECV);
/// assert_eq!(expand_directions(Caps::MSG | Caps::SEND), Caps::MSG | Caps::SEND);
/// ```
pub const fn expand_directions(caps: Caps) -> Caps {
    let mut out = caps;
    if caps.intersects(MSG_LIKE) && !caps.intersects(MSG_DIRS) {
        out = out.union(MSG_DIRS);
    }
    if caps.intersects(RMA_LIKE) && !caps.intersects(RMA_DIRS) {
        out = out.union(RMA_DIRS);
    }
    out
}

/// The core of [`grant`]. `app_mr` is `None` without hints (every `mr_mode` accepted).
fn grant_with(
    cand: &Info,
    hint: &Info,
    app_mode: Mode,
    app_mr: Option<MrMode>,
) -> core::result::Result<Info, Mismatch> {
    if !prov_name_matches(hint.fabric_attr.prov_name, cand.fabric_attr.prov_name) {
        return Err(Mismatch::ProvName);
    }
    if !name_matches(hint.fabric_attr.name, cand.fabric_attr.name) {
        return Err(Mismatch::FabricName);
    }
    if !name_matches(hint.domain_attr.name, cand.domain_attr.name) {
        return Err(Mismatch::DomainName);
    }
    if hint.ep_attr.ep_type != EpType::Unspec && hint.ep_attr.ep_type != cand.ep_attr.ep_type {
        return Err(Mismatch::EpType);
    }
    if !addr_format_ok(cand.addr_format, hint.addr_format) {
        return Err(Mismatch::AddrFormat);
    }

    let cand_caps = expand_directions(cand.caps);
    let caps = if hint.caps.is_empty() {
        cand_caps
    } else {
        let req = expand_directions(hint.caps);
        let missing = req.difference(cand_caps);
        if !missing.is_empty() {
            return Err(Mismatch::Caps(missing));
        }
        req | (cand_caps & Caps::SECONDARY)
    };

    let missing_mode = cand.mode.difference(app_mode);
    if !missing_mode.is_empty() {
        return Err(Mismatch::Mode(missing_mode));
    }

    let cd = &cand.domain_attr;
    let hd = &hint.domain_attr;
    let threading = grant_ranked(
        cd.threading,
        hd.threading,
        ThreadingLevel::Unspec,
        thread_rank,
    )
    .ok_or(Mismatch::Threading)?;
    let control_progress = grant_ranked(
        cd.control_progress,
        hd.control_progress,
        ProgressMode::Unspec,
        progress_rank,
    )
    .ok_or(Mismatch::Progress)?;
    let data_progress = grant_ranked(
        cd.data_progress,
        hd.data_progress,
        ProgressMode::Unspec,
        progress_rank,
    )
    .ok_or(Mismatch::Progress)?;
    let av_type = grant_av(cd.av_type, hd.av_type).ok_or(Mismatch::AvType)?;
    let mr_mode = match app_mr {
        None => cd.mr_mode,
        Some(app) => {
            let required = needed_mr_mode(caps, cd.mr_mode);
            if !app.contains(required) {
                return Err(Mismatch::MrMode);
            }
            required
        }
    };
    let resource_mgmt = grant_ranked(
        cd.resource_mgmt,
        hd.resource_mgmt,
        ResourceMgmt::Unspec,
        rm_rank,
    )
    .ok_or(Mismatch::ResourceMgmt)?;

    let tx_attr = grant_tx(cand, &hint.tx_attr, caps, app_mode)?;
    let rx_attr = grant_rx(cand, &hint.rx_attr, caps, app_mode)?;
    let ep_attr = grant_ep(cand, &hint.ep_attr)?;
    let mut domain_attr = grant_domain(cd, hd, app_mode)?;
    domain_attr.threading = threading;
    domain_attr.control_progress = control_progress;
    domain_attr.data_progress = data_progress;
    domain_attr.av_type = av_type;
    domain_attr.mr_mode = mr_mode;
    domain_attr.resource_mgmt = resource_mgmt;

    Ok(Info {
        caps,
        mode: cand.mode,
        addr_format: if hint.addr_format == AddrFormat::Unspec {
            cand.addr_format
        } else {
            hint.addr_format
        },
        src_addr: hint.src_addr.clone().or_else(|| cand.src_addr.clone()),
        dest_addr: hint.dest_addr.clone().or_else(|| cand.dest_addr.clone()),
        tx_attr,
        rx_attr,
        ep_attr,
        domain_attr,
        fabric_attr: cand.fabric_attr.clone(),
        handle: None,
    })
}

fn name_matches(hint: &str, cand: &str) -> bool {
    hint.is_empty() || hint.eq_ignore_ascii_case(cand)
}

fn prov_name_matches(hint: &str, cand: &str) -> bool {
    match hint.strip_prefix('^') {
        Some(excluded) => !excluded.eq_ignore_ascii_case(cand),
        None => name_matches(hint, cand),
    }
}

fn addr_format_ok(cand: AddrFormat, hint: AddrFormat) -> bool {
    use AddrFormat::*;
    match (cand, hint) {
        (_, Unspec) => true,
        (Sockaddr, Sockaddr | SockaddrIn | SockaddrIn6) => true,
        (SockaddrIn6, Sockaddr | SockaddrIn) => true,
        (SockaddrIn, Sockaddr) => true,
        (c, h) => c == h,
    }
}

/// Grants a ranked model: `req` unspecified gets the candidate's, an unspecified
/// candidate accepts anything, otherwise the candidate's rank must reach the request's.
fn grant_ranked<T: Copy + PartialEq>(cand: T, req: T, unspec: T, rank: fn(T) -> u8) -> Option<T> {
    if req == unspec {
        Some(cand)
    } else if cand == unspec || rank(cand) >= rank(req) {
        Some(req)
    } else {
        None
    }
}

/// Parallelism a threading model allows the application (libfabric's ordering).
fn thread_rank(t: ThreadingLevel) -> u8 {
    match t {
        ThreadingLevel::Unspec => 0,
        ThreadingLevel::Domain => 1,
        ThreadingLevel::Completion => 2,
        ThreadingLevel::Endpoint => 3,
        ThreadingLevel::Safe => 4,
    }
}

fn progress_rank(p: ProgressMode) -> u8 {
    match p {
        ProgressMode::Unspec => 0,
        ProgressMode::Manual => 1,
        ProgressMode::Auto => 2,
    }
}

fn rm_rank(r: ResourceMgmt) -> u8 {
    match r {
        ResourceMgmt::Unspec => 0,
        ResourceMgmt::Disabled => 1,
        ResourceMgmt::Enabled => 2,
    }
}

fn grant_av(cand: AvKind, req: AvKind) -> Option<AvKind> {
    match (cand, req) {
        (c, AvKind::Unspec) => Some(c),
        (AvKind::Unspec, r) => Some(r),
        (c, r) if c == r => Some(r),
        _ => None,
    }
}

/// The `mr_mode` bits actually needed for `caps` (libfabric's `ofi_cap_mr_mode`).
fn needed_mr_mode(caps: Caps, mr: MrMode) -> MrMode {
    // No FI_HMEM capability exists here, so device-memory registration is never needed.
    let mut mr = mr.difference(MrMode::HMEM);
    let rma_target =
        caps.intersects(RMA_LIKE) && caps.intersects(Caps::REMOTE_READ.union(Caps::REMOTE_WRITE));
    if !rma_target {
        if !mr.contains(MrMode::LOCAL) {
            return MrMode::empty();
        }
        mr = mr.difference(
            MrMode::RAW
                .union(MrMode::VIRT_ADDR)
                .union(MrMode::PROV_KEY)
                .union(MrMode::RMA_EVENT),
        );
    }
    mr
}

/// A requested limit: 0 takes the candidate's, otherwise it must fit and is granted.
fn limit(req: usize, cand: usize) -> Option<usize> {
    if req == 0 {
        Some(cand)
    } else if req <= cand {
        Some(req)
    } else {
        None
    }
}

/// A requested minimum the provider reports its own value for.
fn at_most(req: usize, cand: usize) -> Option<usize> {
    (req <= cand).then_some(cand)
}

/// One side of an endpoint: the capabilities that apply to it and its direction modifiers.
struct Side {
    caps: Caps,
    msg_dir: Caps,
    rma_dirs: Caps,
}

const TX_SIDE: Side = Side {
    caps: TX_CAPS,
    msg_dir: Caps::SEND,
    rma_dirs: Caps::READ.union(Caps::WRITE),
};

const RX_SIDE: Side = Side {
    caps: RX_CAPS,
    msg_dir: Caps::RECV,
    rma_dirs: Caps::REMOTE_READ.union(Caps::REMOTE_WRITE),
};

impl Side {
    /// Drops primary caps with no direction on this side (e.g. `FI_TAGGED` on the receive
    /// side of a send-only endpoint): bare, they would read as "both directions".
    fn prune(&self, caps: Caps) -> Caps {
        let mut c = caps & self.caps;
        if !c.intersects(self.msg_dir) {
            c = c.difference(MSG_LIKE);
        }
        if !c.intersects(self.rma_dirs) {
            c = c.difference(RMA_LIKE);
        }
        c
    }
}

/// Caps of one context side: the hint (expanded, within the endpoint's and the
/// candidate's context caps) or, without one, the endpoint caps that apply to the side.
fn context_caps(
    hint: Caps,
    cand_ctx: Caps,
    cand_info: Caps,
    info_caps: Caps,
    side: &Side,
) -> Option<Caps> {
    let src = if cand_ctx.is_empty() {
        cand_info
    } else {
        cand_ctx
    };
    let offered = expand_directions(src);
    if hint.is_empty() {
        return Some(side.prune(info_caps & offered));
    }
    let req = side.prune(expand_directions(hint));
    (offered.contains(req) && info_caps.contains(req)).then_some(req)
}

fn ctx_mode(hint: Mode, app_mode: Mode) -> Mode {
    if hint.is_empty() {
        app_mode
    } else {
        hint
    }
}

fn grant_tx(
    cand: &Info,
    h: &TxAttr,
    info_caps: Caps,
    app_mode: Mode,
) -> core::result::Result<TxAttr, Mismatch> {
    let c = &cand.tx_attr;
    let e = Mismatch::TxAttr;
    let caps = context_caps(h.caps, c.caps, cand.caps, info_caps, &TX_SIDE).ok_or(e("caps"))?;
    if !ctx_mode(h.mode, app_mode).contains(c.mode) {
        return Err(e("mode"));
    }
    if !c.msg_order.contains(h.msg_order) {
        return Err(e("msg_order"));
    }
    if !c.comp_order.contains(h.comp_order) {
        return Err(e("comp_order"));
    }
    Ok(TxAttr {
        caps,
        mode: c.mode,
        op_flags: if h.op_flags.is_empty() {
            c.op_flags
        } else {
            h.op_flags
        },
        msg_order: c.msg_order,
        comp_order: c.comp_order,
        inject_size: at_most(h.inject_size, c.inject_size).ok_or(e("inject_size"))?,
        size: limit(h.size, c.size).ok_or(e("size"))?,
        iov_limit: limit(h.iov_limit, c.iov_limit).ok_or(e("iov_limit"))?,
        rma_iov_limit: limit(h.rma_iov_limit, c.rma_iov_limit).ok_or(e("rma_iov_limit"))?,
    })
}

fn grant_rx(
    cand: &Info,
    h: &RxAttr,
    info_caps: Caps,
    app_mode: Mode,
) -> core::result::Result<RxAttr, Mismatch> {
    let c = &cand.rx_attr;
    let e = Mismatch::RxAttr;
    let caps = context_caps(h.caps, c.caps, cand.caps, info_caps, &RX_SIDE).ok_or(e("caps"))?;
    if !ctx_mode(h.mode, app_mode).contains(c.mode) {
        return Err(e("mode"));
    }
    if !c.msg_order.contains(h.msg_order) {
        return Err(e("msg_order"));
    }
    if !c.comp_order.contains(h.comp_order) {
        return Err(e("comp_order"));
    }
    Ok(RxAttr {
        caps,
        mode: c.mode,
        op_flags: if h.op_flags.is_empty() {
            c.op_flags
        } else {
            h.op_flags
        },
        msg_order: c.msg_order,
        comp_order: c.comp_order,
        total_buffered_recv: limit(h.total_buffered_recv, c.total_buffered_recv)
            .ok_or(e("total_buffered_recv"))?,
        size: limit(h.size, c.size).ok_or(e("size"))?,
        iov_limit: limit(h.iov_limit, c.iov_limit).ok_or(e("iov_limit"))?,
    })
}

/// Significant width of a tag format: bits up to and including the highest set bit.
fn tag_width(format: u64) -> u32 {
    u64::BITS - format.leading_zeros()
}

/// An endpoint context count: bounded by the domain's per-endpoint maximum.
fn ctx_cnt(req: usize, ep_value: usize, dom_max: usize, shared_max: usize) -> Option<usize> {
    if req == 0 {
        return Some(ep_value);
    }
    if req == SHARED_CONTEXT {
        return (shared_max > 0).then_some(req);
    }
    let max = if dom_max != 0 {
        dom_max
    } else {
        ep_value.max(1)
    };
    (req <= max).then_some(req)
}

fn grant_ep(cand: &Info, h: &EpAttr) -> core::result::Result<EpAttr, Mismatch> {
    let c = &cand.ep_attr;
    let d = &cand.domain_attr;
    let e = Mismatch::EpAttr;
    if h.protocol != 0 && h.protocol != c.protocol {
        return Err(e("protocol"));
    }
    if h.protocol_version > c.protocol_version {
        return Err(e("protocol_version"));
    }
    if h.mem_tag_format != 0 && tag_width(h.mem_tag_format) > tag_width(c.mem_tag_format) {
        return Err(e("mem_tag_format"));
    }
    Ok(EpAttr {
        ep_type: c.ep_type,
        protocol: c.protocol,
        protocol_version: c.protocol_version,
        max_msg_size: at_most(h.max_msg_size, c.max_msg_size).ok_or(e("max_msg_size"))?,
        msg_prefix_size: c.msg_prefix_size,
        max_order_raw_size: at_most(h.max_order_raw_size, c.max_order_raw_size)
            .ok_or(e("max_order_raw_size"))?,
        max_order_war_size: at_most(h.max_order_war_size, c.max_order_war_size)
            .ok_or(e("max_order_war_size"))?,
        max_order_waw_size: at_most(h.max_order_waw_size, c.max_order_waw_size)
            .ok_or(e("max_order_waw_size"))?,
        mem_tag_format: if h.mem_tag_format != 0 {
            h.mem_tag_format
        } else {
            c.mem_tag_format
        },
        tx_ctx_cnt: ctx_cnt(
            h.tx_ctx_cnt,
            c.tx_ctx_cnt,
            d.max_ep_tx_ctx,
            d.max_ep_stx_ctx,
        )
        .ok_or(e("tx_ctx_cnt"))?,
        rx_ctx_cnt: ctx_cnt(
            h.rx_ctx_cnt,
            c.rx_ctx_cnt,
            d.max_ep_rx_ctx,
            d.max_ep_srx_ctx,
        )
        .ok_or(e("rx_ctx_cnt"))?,
    })
}

/// Domain caps, mode, name and numeric limits; the enum models are filled in by the caller.
fn grant_domain(
    c: &DomainAttr,
    h: &DomainAttr,
    app_mode: Mode,
) -> core::result::Result<DomainAttr, Mismatch> {
    let e = Mismatch::DomainAttr;
    if !c.caps.contains(h.caps) {
        return Err(e("caps"));
    }
    if !ctx_mode(h.mode, app_mode).contains(c.mode) {
        return Err(e("mode"));
    }
    Ok(DomainAttr {
        name: c.name,
        mr_key_size: limit(h.mr_key_size, c.mr_key_size).ok_or(e("mr_key_size"))?,
        cq_data_size: limit(h.cq_data_size, c.cq_data_size).ok_or(e("cq_data_size"))?,
        cq_cnt: limit(h.cq_cnt, c.cq_cnt).ok_or(e("cq_cnt"))?,
        ep_cnt: limit(h.ep_cnt, c.ep_cnt).ok_or(e("ep_cnt"))?,
        tx_ctx_cnt: limit(h.tx_ctx_cnt, c.tx_ctx_cnt).ok_or(e("tx_ctx_cnt"))?,
        rx_ctx_cnt: limit(h.rx_ctx_cnt, c.rx_ctx_cnt).ok_or(e("rx_ctx_cnt"))?,
        max_ep_tx_ctx: limit(h.max_ep_tx_ctx, c.max_ep_tx_ctx).ok_or(e("max_ep_tx_ctx"))?,
        max_ep_rx_ctx: limit(h.max_ep_rx_ctx, c.max_ep_rx_ctx).ok_or(e("max_ep_rx_ctx"))?,
        max_ep_stx_ctx: limit(h.max_ep_stx_ctx, c.max_ep_stx_ctx).ok_or(e("max_ep_stx_ctx"))?,
        max_ep_srx_ctx: limit(h.max_ep_srx_ctx, c.max_ep_srx_ctx).ok_or(e("max_ep_srx_ctx"))?,
        cntr_cnt: limit(h.cntr_cnt, c.cntr_cnt).ok_or(e("cntr_cnt"))?,
        mr_iov_limit: limit(h.mr_iov_limit, c.mr_iov_limit).ok_or(e("mr_iov_limit"))?,
        caps: c.caps,
        mode: c.mode,
        mr_cnt: limit(h.mr_cnt, c.mr_cnt).ok_or(e("mr_cnt"))?,
        ..c.clone()
    })
}

// ---------------------------------------------------------------------------------------
// Printing, `fi_info` style.

/// `(bit, FI_* name)` pairs of one flag type, in libfabric's printing order.
type NameTable = &'static [(u64, &'static str)];

const CAPS: NameTable = &[
    (Caps::MSG.bits(), "FI_MSG"),
    (Caps::RMA.bits(), "FI_RMA"),
    (Caps::TAGGED.bits(), "FI_TAGGED"),
    (Caps::ATOMIC.bits(), "FI_ATOMIC"),
    (Caps::MULTICAST.bits(), "FI_MULTICAST"),
    (Caps::COLLECTIVE.bits(), "FI_COLLECTIVE"),
    (Caps::READ.bits(), "FI_READ"),
    (Caps::WRITE.bits(), "FI_WRITE"),
    (Caps::RECV.bits(), "FI_RECV"),
    (Caps::SEND.bits(), "FI_SEND"),
    (Caps::REMOTE_READ.bits(), "FI_REMOTE_READ"),
    (Caps::REMOTE_WRITE.bits(), "FI_REMOTE_WRITE"),
    (Caps::MULTI_RECV.bits(), "FI_MULTI_RECV"),
    (Caps::TRIGGER.bits(), "FI_TRIGGER"),
    (Caps::FENCE.bits(), "FI_FENCE"),
    (Caps::LOCAL_COMM.bits(), "FI_LOCAL_COMM"),
    (Caps::REMOTE_COMM.bits(), "FI_REMOTE_COMM"),
    (Caps::SHARED_AV.bits(), "FI_SHARED_AV"),
    (Caps::RMA_EVENT.bits(), "FI_RMA_EVENT"),
    (Caps::SOURCE.bits(), "FI_SOURCE"),
    (Caps::NAMED_RX_CTX.bits(), "FI_NAMED_RX_CTX"),
    (Caps::DIRECTED_RECV.bits(), "FI_DIRECTED_RECV"),
];

const MODES: NameTable = &[
    (Mode::CONTEXT.bits(), "FI_CONTEXT"),
    (Mode::MSG_PREFIX.bits(), "FI_MSG_PREFIX"),
    (Mode::ASYNC_IOV.bits(), "FI_ASYNC_IOV"),
    (Mode::RX_CQ_DATA.bits(), "FI_RX_CQ_DATA"),
    (Mode::LOCAL_MR.bits(), "FI_LOCAL_MR"),
    (Mode::NOTIFY_FLAGS_ONLY.bits(), "FI_NOTIFY_FLAGS_ONLY"),
    (Mode::RESTRICTED_COMP.bits(), "FI_RESTRICTED_COMP"),
    (Mode::CONTEXT2.bits(), "FI_CONTEXT2"),
    (Mode::BUFFERED_RECV.bits(), "FI_BUFFERED_RECV"),
];

const OP_FLAGS: NameTable = &[
    (OpFlags::MULTI_RECV.bits(), "FI_MULTI_RECV"),
    (OpFlags::REMOTE_CQ_DATA.bits(), "FI_REMOTE_CQ_DATA"),
    (OpFlags::MORE.bits(), "FI_MORE"),
    (OpFlags::PEEK.bits(), "FI_PEEK"),
    (OpFlags::TRIGGER.bits(), "FI_TRIGGER"),
    (OpFlags::FENCE.bits(), "FI_FENCE"),
    (OpFlags::COMPLETION.bits(), "FI_COMPLETION"),
    (OpFlags::INJECT.bits(), "FI_INJECT"),
    (OpFlags::INJECT_COMPLETE.bits(), "FI_INJECT_COMPLETE"),
    (OpFlags::TRANSMIT_COMPLETE.bits(), "FI_TRANSMIT_COMPLETE"),
    (OpFlags::DELIVERY_COMPLETE.bits(), "FI_DELIVERY_COMPLETE"),
    (OpFlags::MATCH_COMPLETE.bits(), "FI_MATCH_COMPLETE"),
    (OpFlags::DISCARD.bits(), "FI_DISCARD"),
    (OpFlags::CLAIM.bits(), "FI_CLAIM"),
];

const ORDERS: NameTable = &[
    (Order::RAR.bits(), "FI_ORDER_RAR"),
    (Order::RAW.bits(), "FI_ORDER_RAW"),
    (Order::RAS.bits(), "FI_ORDER_RAS"),
    (Order::WAR.bits(), "FI_ORDER_WAR"),
    (Order::WAW.bits(), "FI_ORDER_WAW"),
    (Order::WAS.bits(), "FI_ORDER_WAS"),
    (Order::SAR.bits(), "FI_ORDER_SAR"),
    (Order::SAW.bits(), "FI_ORDER_SAW"),
    (Order::SAS.bits(), "FI_ORDER_SAS"),
    (Order::DATA.bits(), "FI_ORDER_DATA"),
];

const MR_MODES: NameTable = &[
    (MrMode::LOCAL.bits() as u64, "FI_MR_LOCAL"),
    (MrMode::RAW.bits() as u64, "FI_MR_RAW"),
    (MrMode::VIRT_ADDR.bits() as u64, "FI_MR_VIRT_ADDR"),
    (MrMode::ALLOCATED.bits() as u64, "FI_MR_ALLOCATED"),
    (MrMode::PROV_KEY.bits() as u64, "FI_MR_PROV_KEY"),
    (MrMode::MMU_NOTIFY.bits() as u64, "FI_MR_MMU_NOTIFY"),
    (MrMode::RMA_EVENT.bits() as u64, "FI_MR_RMA_EVENT"),
    (MrMode::ENDPOINT.bits() as u64, "FI_MR_ENDPOINT"),
    (MrMode::HMEM.bits() as u64, "FI_MR_HMEM"),
];

/// Prints flags as `[ FI_A, FI_B ]` (libfabric's `fi_tostr` style); unnamed bits in hex.
struct FlagList(u64, NameTable);

impl fmt::Display for FlagList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let FlagList(bits, table) = *self;
        let mut rest = bits;
        let mut first = true;
        f.write_str("[ ")?;
        for &(bit, name) in table {
            if bits & bit != 0 {
                if !first {
                    f.write_str(", ")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !bit;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str(", ")?;
            }
            write!(f, "{rest:#x}")?;
        }
        f.write_str(" ]")
    }
}

/// Orders print `FI_ORDER_NONE` when empty, as libfabric does.
struct OrderList(Order);

impl fmt::Display for OrderList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("[ FI_ORDER_NONE ]")
        } else {
            FlagList(self.0.bits(), ORDERS).fmt(f)
        }
    }
}

/// `FI_EP_*` name of an endpoint type.
pub fn ep_type_name(t: EpType) -> &'static str {
    match t {
        EpType::Unspec => "FI_EP_UNSPEC",
        EpType::Msg => "FI_EP_MSG",
        EpType::Dgram => "FI_EP_DGRAM",
        EpType::Rdm => "FI_EP_RDM",
    }
}

/// `FI_*` name of an address format.
pub fn addr_format_name(f: AddrFormat) -> &'static str {
    match f {
        AddrFormat::Unspec => "FI_FORMAT_UNSPEC",
        AddrFormat::Sockaddr => "FI_SOCKADDR",
        AddrFormat::SockaddrIn => "FI_SOCKADDR_IN",
        AddrFormat::SockaddrIn6 => "FI_SOCKADDR_IN6",
        AddrFormat::Str => "FI_ADDR_STR",
        AddrFormat::Proto => "FI_ADDR_PROTO",
    }
}

/// `FI_THREAD_*` name of a threading model.
pub fn threading_name(t: ThreadingLevel) -> &'static str {
    match t {
        ThreadingLevel::Unspec => "FI_THREAD_UNSPEC",
        ThreadingLevel::Safe => "FI_THREAD_SAFE",
        ThreadingLevel::Domain => "FI_THREAD_DOMAIN",
        ThreadingLevel::Completion => "FI_THREAD_COMPLETION",
        ThreadingLevel::Endpoint => "FI_THREAD_ENDPOINT",
    }
}

/// `FI_PROGRESS_*` name of a progress model.
pub fn progress_name(p: ProgressMode) -> &'static str {
    match p {
        ProgressMode::Unspec => "FI_PROGRESS_UNSPEC",
        ProgressMode::Auto => "FI_PROGRESS_AUTO",
        ProgressMode::Manual => "FI_PROGRESS_MANUAL",
    }
}

/// `FI_RM_*` name of a resource-management model.
pub fn resource_mgmt_name(r: ResourceMgmt) -> &'static str {
    match r {
        ResourceMgmt::Unspec => "FI_RM_UNSPEC",
        ResourceMgmt::Disabled => "FI_RM_DISABLED",
        ResourceMgmt::Enabled => "FI_RM_ENABLED",
    }
}

/// `FI_AV_*` name of an AV type.
pub fn av_type_name(a: AvKind) -> &'static str {
    match a {
        AvKind::Unspec => "FI_AV_UNSPEC",
        AvKind::Map => "FI_AV_MAP",
        AvKind::Table => "FI_AV_TABLE",
    }
}

/// `FI_PROTO_*` names by value (`enum` in `rdma/fabric.h`).
const PROTOCOLS: &[&str] = &[
    "FI_PROTO_UNSPEC",
    "FI_PROTO_RDMA_CM_IB_RC",
    "FI_PROTO_IWARP",
    "FI_PROTO_IB_UD",
    "FI_PROTO_PSMX",
    "FI_PROTO_UDP",
    "FI_PROTO_SOCK_TCP",
    "FI_PROTO_MXM",
    "FI_PROTO_IWARP_RDM",
    "FI_PROTO_IB_RDM",
    "FI_PROTO_GNI",
    "FI_PROTO_RXM",
    "FI_PROTO_RXD",
    "FI_PROTO_MLX",
    "FI_PROTO_NETWORKDIRECT",
    "FI_PROTO_PSMX2",
    "FI_PROTO_SHM",
    "FI_PROTO_MRAIL",
    "FI_PROTO_RSTREAM",
    "FI_PROTO_RDMA_CM_IB_XRC",
    "FI_PROTO_EFA",
    "FI_PROTO_PSMX3",
    "FI_PROTO_RXM_TCP",
    "FI_PROTO_OPX",
    "FI_PROTO_CXI",
    "FI_PROTO_XNET",
];

/// Prints a protocol by `FI_PROTO_*` name, provider-specific ones in hex.
struct Protocol(u32);

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match PROTOCOLS.get(self.0 as usize) {
            Some(name) => f.write_str(name),
            None => write!(f, "{:#x}", self.0),
        }
    }
}

/// Prints an `FI_VERSION` as `major.minor`.
struct Version(u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 >> 16, self.0 & 0xffff)
    }
}

/// Prints a name, `(null)` when empty like the C tools.
struct Name<'a>(&'a str);

impl fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "(null)" } else { self.0 })
    }
}

/// Prints an address in libfabric's `fi_<format>://...` style where the format is known.
struct Addr<'a>(AddrFormat, Option<&'a [u8]>);

impl Addr<'_> {
    fn ipv4(f: &mut fmt::Formatter<'_>, b: &[u8]) -> Option<fmt::Result> {
        let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
        let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
        Some(write!(
            f,
            "fi_sockaddr_in://{}:{port}",
            std::net::Ipv4Addr::from(ip)
        ))
    }

    fn ipv6(f: &mut fmt::Formatter<'_>, b: &[u8]) -> Option<fmt::Result> {
        let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
        let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
        Some(write!(
            f,
            "fi_sockaddr_in6://[{}]:{port}",
            std::net::Ipv6Addr::from(ip)
        ))
    }
}

impl fmt::Display for Addr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(b) = self.1 else {
            return f.write_str("(null)");
        };
        // sa_family is host-endian at offset 0 of every sockaddr.
        let family = b
            .get(0..2)
            .map(|s| i32::from(u16::from_ne_bytes([s[0], s[1]])));
        let done = match self.0 {
            AddrFormat::SockaddrIn => Addr::ipv4(f, b),
            AddrFormat::SockaddrIn6 => Addr::ipv6(f, b),
            AddrFormat::Sockaddr if family == Some(libc::AF_INET) => Addr::ipv4(f, b),
            AddrFormat::Sockaddr if family == Some(libc::AF_INET6) => Addr::ipv6(f, b),
            AddrFormat::Str => {
                let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                Some(f.write_str(&String::from_utf8_lossy(&b[..end])))
            }
            _ => None,
        };
        if let Some(r) = done {
            return r;
        }
        f.write_str("0x")?;
        for byte in b {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl Info {
    /// Multi-line description in the style of `fi_info -v` (`fi_tostr(FI_TYPE_INFO)`):
    /// one field per line, flags and enums by their `FI_*` names.
    pub fn to_string_verbose(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = self.write_verbose(&mut s);
        s
    }

    fn write_verbose(&self, s: &mut impl fmt::Write) -> fmt::Result {
        let (tx, rx, ep, d, fa) = (
            &self.tx_attr,
            &self.rx_attr,
            &self.ep_attr,
            &self.domain_attr,
            &self.fabric_attr,
        );
        let len = |a: &Option<Vec<u8>>| a.as_ref().map_or(0, Vec::len);
        writeln!(s, "fi_info:")?;
        writeln!(s, "    caps: {}", FlagList(self.caps.bits(), CAPS))?;
        writeln!(s, "    mode: {}", FlagList(self.mode.bits(), MODES))?;
        writeln!(s, "    addr_format: {}", addr_format_name(self.addr_format))?;
        writeln!(s, "    src_addrlen: {}", len(&self.src_addr))?;
        writeln!(s, "    dest_addrlen: {}", len(&self.dest_addr))?;
        writeln!(
            s,
            "    src_addr: {}",
            Addr(self.addr_format, self.src_addr.as_deref())
        )?;
        writeln!(
            s,
            "    dest_addr: {}",
            Addr(self.addr_format, self.dest_addr.as_deref())
        )?;
        writeln!(s, "    fi_tx_attr:")?;
        writeln!(s, "        caps: {}", FlagList(tx.caps.bits(), CAPS))?;
        writeln!(s, "        mode: {}", FlagList(tx.mode.bits(), MODES))?;
        writeln!(
            s,
            "        op_flags: {}",
            FlagList(tx.op_flags.bits(), OP_FLAGS)
        )?;
        writeln!(s, "        msg_order: {}", OrderList(tx.msg_order))?;
        writeln!(s, "        comp_order: {}", OrderList(tx.comp_order))?;
        writeln!(s, "        inject_size: {}", tx.inject_size)?;
        writeln!(s, "        size: {}", tx.size)?;
        writeln!(s, "        iov_limit: {}", tx.iov_limit)?;
        writeln!(s, "        rma_iov_limit: {}", tx.rma_iov_limit)?;
        writeln!(s, "    fi_rx_attr:")?;
        writeln!(s, "        caps: {}", FlagList(rx.caps.bits(), CAPS))?;
        writeln!(s, "        mode: {}", FlagList(rx.mode.bits(), MODES))?;
        writeln!(
            s,
            "        op_flags: {}",
            FlagList(rx.op_flags.bits(), OP_FLAGS)
        )?;
        writeln!(s, "        msg_order: {}", OrderList(rx.msg_order))?;
        writeln!(s, "        comp_order: {}", OrderList(rx.comp_order))?;
        writeln!(s, "        total_buffered_recv: {}", rx.total_buffered_recv)?;
        writeln!(s, "        size: {}", rx.size)?;
        writeln!(s, "        iov_limit: {}", rx.iov_limit)?;
        writeln!(s, "    fi_ep_attr:")?;
        writeln!(s, "        type: {}", ep_type_name(ep.ep_type))?;
        writeln!(s, "        protocol: {}", Protocol(ep.protocol))?;
        writeln!(s, "        protocol_version: {}", ep.protocol_version)?;
        writeln!(s, "        max_msg_size: {}", ep.max_msg_size)?;
        writeln!(s, "        msg_prefix_size: {}", ep.msg_prefix_size)?;
        writeln!(s, "        max_order_raw_size: {}", ep.max_order_raw_size)?;
        writeln!(s, "        max_order_war_size: {}", ep.max_order_war_size)?;
        writeln!(s, "        max_order_waw_size: {}", ep.max_order_waw_size)?;
        writeln!(s, "        mem_tag_format: {:#018x}", ep.mem_tag_format)?;
        writeln!(s, "        tx_ctx_cnt: {}", ep.tx_ctx_cnt)?;
        writeln!(s, "        rx_ctx_cnt: {}", ep.rx_ctx_cnt)?;
        writeln!(s, "    fi_domain_attr:")?;
        writeln!(s, "        name: {}", Name(d.name))?;
        writeln!(s, "        threading: {}", threading_name(d.threading))?;
        writeln!(
            s,
            "        control_progress: {}",
            progress_name(d.control_progress)
        )?;
        writeln!(
            s,
            "        data_progress: {}",
            progress_name(d.data_progress)
        )?;
        writeln!(
            s,
            "        resource_mgmt: {}",
            resource_mgmt_name(d.resource_mgmt)
        )?;
        writeln!(s, "        av_type: {}", av_type_name(d.av_type))?;
        writeln!(
            s,
            "        mr_mode: {}",
            FlagList(u64::from(d.mr_mode.bits()), MR_MODES)
        )?;
        writeln!(s, "        mr_key_size: {}", d.mr_key_size)?;
        writeln!(s, "        cq_data_size: {}", d.cq_data_size)?;
        writeln!(s, "        cq_cnt: {}", d.cq_cnt)?;
        writeln!(s, "        ep_cnt: {}", d.ep_cnt)?;
        writeln!(s, "        tx_ctx_cnt: {}", d.tx_ctx_cnt)?;
        writeln!(s, "        rx_ctx_cnt: {}", d.rx_ctx_cnt)?;
        writeln!(s, "        max_ep_tx_ctx: {}", d.max_ep_tx_ctx)?;
        writeln!(s, "        max_ep_rx_ctx: {}", d.max_ep_rx_ctx)?;
        writeln!(s, "        max_ep_stx_ctx: {}", d.max_ep_stx_ctx)?;
        writeln!(s, "        max_ep_srx_ctx: {}", d.max_ep_srx_ctx)?;
        writeln!(s, "        cntr_cnt: {}", d.cntr_cnt)?;
        writeln!(s, "        mr_iov_limit: {}", d.mr_iov_limit)?;
        writeln!(s, "        caps: {}", FlagList(d.caps.bits(), CAPS))?;
        writeln!(s, "        mode: {}", FlagList(d.mode.bits(), MODES))?;
        writeln!(s, "        mr_cnt: {}", d.mr_cnt)?;
        writeln!(s, "    fi_fabric_attr:")?;
        writeln!(s, "        name: {}", Name(fa.name))?;
        writeln!(s, "        prov_name: {}", Name(fa.prov_name))?;
        writeln!(s, "        prov_version: {}", Version(fa.prov_version))?;
        writeln!(s, "        api_version: {}", Version(fa.api_version))
    }
}

/// The short form plain `fi_info` prints per entry.
impl fmt::Display for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "provider: {}", Name(self.fabric_attr.prov_name))?;
        writeln!(f, "    fabric: {}", Name(self.fabric_attr.name))?;
        writeln!(f, "    domain: {}", Name(self.domain_attr.name))?;
        writeln!(f, "    version: {}", Version(self.fabric_attr.prov_version))?;
        writeln!(f, "    type: {}", ep_type_name(self.ep_attr.ep_type))?;
        write!(f, "    protocol: {}", Protocol(self.ep_attr.protocol))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_DIRS: Caps = MSG_DIRS.union(RMA_DIRS);

    /// An in-process RDM provider: everything, generous limits, no modes, no MR modes.
    fn cand() -> Info {
        Info {
            caps: Caps::MSG
                | Caps::TAGGED
                | Caps::RMA
                | Caps::ATOMIC
                | ALL_DIRS
                | Caps::MULTI_RECV
                | Caps::SOURCE
                | Caps::DIRECTED_RECV
                | Caps::LOCAL_COMM
                | Caps::REMOTE_COMM,
            addr_format: AddrFormat::Proto,
            tx_attr: TxAttr {
                msg_order: Order::SAS | Order::RAW | Order::WAW,
                comp_order: Order::STRICT,
                op_flags: OpFlags::TRANSMIT_COMPLETE,
                inject_size: 64,
                size: 1024,
                iov_limit: 4,
                rma_iov_limit: 4,
                ..Default::default()
            },
            rx_attr: RxAttr {
                msg_order: Order::SAS | Order::RAW | Order::WAW,
                comp_order: Order::STRICT,
                total_buffered_recv: 4096,
                size: 1024,
                iov_limit: 4,
                ..Default::default()
            },
            ep_attr: EpAttr {
                ep_type: EpType::Rdm,
                protocol: 0x8000_0001,
                protocol_version: 2,
                max_msg_size: 1 << 20,
                max_order_raw_size: 4096,
                max_order_war_size: 4096,
                max_order_waw_size: 4096,
                mem_tag_format: u64::MAX,
                tx_ctx_cnt: 1,
                rx_ctx_cnt: 1,
                ..Default::default()
            },
            domain_attr: DomainAttr {
                name: "loop0",
                threading: ThreadingLevel::Safe,
                control_progress: ProgressMode::Auto,
                data_progress: ProgressMode::Auto,
                resource_mgmt: ResourceMgmt::Enabled,
                av_type: AvKind::Unspec,
                mr_key_size: 8,
                cq_data_size: 8,
                cq_cnt: 64,
                ep_cnt: 128,
                tx_ctx_cnt: 128,
                rx_ctx_cnt: 128,
                max_ep_tx_ctx: 4,
                max_ep_rx_ctx: 4,
                cntr_cnt: 16,
                mr_iov_limit: 4,
                caps: Caps::LOCAL_COMM | Caps::REMOTE_COMM,
                mr_cnt: 1024,
                ..Default::default()
            },
            fabric_attr: FabricAttr {
                name: "loopback",
                prov_name: "loopback",
                prov_version: version(1, 2),
                api_version: version(1, 17),
            },
            ..Default::default()
        }
    }

    fn g(c: &Info, h: &Hints) -> core::result::Result<Info, Mismatch> {
        grant(c, Some(h))
    }

    // ----- no hints, filter, ordering -----

    #[test]
    fn no_hints_grants_candidate_with_explicit_directions() {
        let mut c = cand();
        c.caps = Caps::MSG | Caps::RMA | Caps::REMOTE_COMM;
        c.mode = Mode::CONTEXT;
        c.domain_attr.mr_mode = MrMode::LOCAL | MrMode::HMEM;
        let i = grant(&c, None).unwrap();
        assert_eq!(i.caps, Caps::MSG | Caps::RMA | ALL_DIRS | Caps::REMOTE_COMM);
        assert_eq!(i.mode, Mode::CONTEXT);
        assert_eq!(i.domain_attr.mr_mode, MrMode::LOCAL | MrMode::HMEM);
        assert_eq!(
            i.tx_attr.caps,
            Caps::MSG | Caps::RMA | Caps::SEND | Caps::READ | Caps::WRITE
        );
        assert_eq!(
            i.rx_attr.caps,
            Caps::MSG | Caps::RMA | Caps::RECV | Caps::REMOTE_READ | Caps::REMOTE_WRITE
        );
        assert_eq!(i.ep_attr, c.ep_attr);
        assert_eq!(i.fabric_attr, c.fabric_attr);
        assert_eq!(i.domain_attr.threading, ThreadingLevel::Safe);
        assert_eq!(i.tx_attr.size, 1024);
    }

    #[test]
    fn filter_preserves_order_and_skips_mismatches() {
        let mut a = cand();
        a.domain_attr.name = "a";
        let mut b = cand();
        b.domain_attr.name = "b";
        b.caps = Caps::MSG | MSG_DIRS;
        let mut c = cand();
        c.domain_attr.name = "c";
        let all = filter(&[a.clone(), b.clone(), c.clone()], None).unwrap();
        let names: Vec<_> = all.iter().map(|i| i.domain_attr.name).collect();
        assert_eq!(names, ["a", "b", "c"]);

        let tagged = Hints::new().caps(Caps::TAGGED);
        let got = filter(&[a, b, c], Some(&tagged)).unwrap();
        let names: Vec<_> = got.iter().map(|i| i.domain_attr.name).collect();
        assert_eq!(names, ["a", "c"]);
    }

    #[test]
    fn filter_returns_nodata_when_nothing_matches() {
        let h = Hints::new().ep_type(EpType::Msg);
        assert_eq!(filter(&[cand(), cand()], Some(&h)), Err(Error::NoData));
        assert_eq!(filter(&[], None), Err(Error::NoData));
        assert_eq!(filter(&[], Some(&Hints::new())), Err(Error::NoData));
    }

    #[test]
    fn regranting_a_granted_info_is_stable() {
        let hints = [
            Hints::new(),
            Hints::new()
                .caps(Caps::TAGGED | Caps::SEND)
                .threading(ThreadingLevel::Domain),
            Hints::new()
                .caps(Caps::RMA)
                .mode(Mode::empty())
                .av_type(AvKind::Table),
        ];
        for h in &hints {
            let first = g(&cand(), h).unwrap();
            let again = Hints {
                info: first.clone(),
                mode_set: true,
            };
            assert_eq!(g(&cand(), &again), Ok(first));
        }
    }

    // ----- capabilities -----

    #[test]
    fn caps_subset_granted_with_secondary() {
        let i = g(&cand(), &Hints::new().caps(Caps::TAGGED)).unwrap();
        assert_eq!(
            i.caps,
            Caps::TAGGED | Caps::SEND | Caps::RECV | Caps::LOCAL_COMM | Caps::REMOTE_COMM
        );
        // Unrequested primary caps are not granted.
        assert!(!i.caps.intersects(Caps::MSG | Caps::RMA | Caps::MULTI_RECV));
    }

    #[test]
    fn caps_missing_reported() {
        let mut c = cand();
        c.caps = Caps::MSG | MSG_DIRS;
        assert_eq!(
            g(&c, &Hints::new().caps(Caps::MSG | Caps::TAGGED)),
            Err(Mismatch::Caps(Caps::TAGGED))
        );
        // Requested secondary caps must be supported too.
        assert_eq!(
            g(&c, &Hints::new().caps(Caps::MSG | Caps::LOCAL_COMM)),
            Err(Mismatch::Caps(Caps::LOCAL_COMM))
        );
        c.caps |= Caps::LOCAL_COMM;
        let i = g(&c, &Hints::new().caps(Caps::MSG | Caps::LOCAL_COMM)).unwrap();
        assert_eq!(i.caps, Caps::MSG | MSG_DIRS | Caps::LOCAL_COMM);
    }

    #[test]
    fn implied_directions() {
        let c = cand();
        let i = g(&c, &Hints::new().caps(Caps::MSG)).unwrap();
        assert!(i.caps.contains(Caps::SEND | Caps::RECV));
        let i = g(&c, &Hints::new().caps(Caps::MSG | Caps::SEND)).unwrap();
        assert!(i.caps.contains(Caps::SEND) && !i.caps.contains(Caps::RECV));
        let i = g(&c, &Hints::new().caps(Caps::RMA)).unwrap();
        assert!(i.caps.contains(RMA_DIRS));
        let i = g(&c, &Hints::new().caps(Caps::ATOMIC | Caps::READ)).unwrap();
        assert_eq!(i.caps & RMA_DIRS, Caps::READ);
        // An RMA modifier does not restrict the message direction and vice versa.
        let i = g(&c, &Hints::new().caps(Caps::MSG | Caps::RMA | Caps::READ)).unwrap();
        assert_eq!(i.caps & ALL_DIRS, Caps::SEND | Caps::RECV | Caps::READ);
        let i = g(
            &c,
            &Hints::new().caps(Caps::TAGGED | Caps::RMA | Caps::RECV),
        )
        .unwrap();
        assert_eq!(i.caps & ALL_DIRS, Caps::RECV | RMA_DIRS);
    }

    #[test]
    fn implied_directions_must_be_supported() {
        let mut c = cand();
        c.caps = Caps::MSG | Caps::SEND | Caps::RMA | Caps::READ | Caps::WRITE;
        assert_eq!(
            g(&c, &Hints::new().caps(Caps::MSG)),
            Err(Mismatch::Caps(Caps::RECV))
        );
        assert!(g(&c, &Hints::new().caps(Caps::MSG | Caps::SEND)).is_ok());
        assert_eq!(
            g(&c, &Hints::new().caps(Caps::RMA)),
            Err(Mismatch::Caps(Caps::REMOTE_READ | Caps::REMOTE_WRITE))
        );
        // A candidate listing a primary cap alone supports every direction of it.
        c.caps = Caps::TAGGED;
        let i = g(&c, &Hints::new().caps(Caps::TAGGED | Caps::RECV)).unwrap();
        assert_eq!(i.caps, Caps::TAGGED | Caps::RECV);
    }

    #[test]
    fn context_caps_follow_info_caps_or_hints() {
        let c = cand();
        let i = g(&c, &Hints::new().caps(Caps::TAGGED | Caps::RMA)).unwrap();
        assert_eq!(
            i.tx_attr.caps,
            Caps::TAGGED | Caps::RMA | Caps::SEND | Caps::READ | Caps::WRITE
        );
        assert_eq!(
            i.rx_attr.caps,
            Caps::TAGGED | Caps::RMA | Caps::RECV | Caps::REMOTE_READ | Caps::REMOTE_WRITE
        );

        let mut h = Hints::new().caps(Caps::TAGGED | Caps::RMA);
        h.info.tx_attr.caps = Caps::TAGGED;
        let i = g(&c, &h).unwrap();
        assert_eq!(i.tx_attr.caps, Caps::TAGGED | Caps::SEND);

        // Outside the endpoint's requested caps.
        h.info.tx_attr.caps = Caps::MSG;
        assert_eq!(g(&c, &h), Err(Mismatch::TxAttr("caps")));
        // Outside the candidate's receive caps.
        let mut c2 = cand();
        c2.rx_attr.caps = Caps::TAGGED | Caps::RECV;
        let mut h = Hints::new();
        h.info.rx_attr.caps = Caps::TAGGED | Caps::MULTI_RECV;
        assert_eq!(g(&c2, &h), Err(Mismatch::RxAttr("caps")));
        h.info.rx_attr.caps = Caps::TAGGED;
        assert_eq!(g(&c2, &h).unwrap().rx_attr.caps, Caps::TAGGED | Caps::RECV);

        // A send-only endpoint has nothing tagged on its receive side.
        let i = g(&c, &Hints::new().caps(Caps::TAGGED | Caps::SEND)).unwrap();
        assert_eq!(i.tx_attr.caps, Caps::TAGGED | Caps::SEND);
        assert_eq!(i.rx_attr.caps, Caps::empty());
        let mut h = Hints::new().caps(Caps::TAGGED | Caps::SEND);
        h.info.rx_attr.caps = Caps::TAGGED;
        assert_eq!(g(&c, &h), Err(Mismatch::RxAttr("caps")));
    }

    // ----- modes -----

    #[test]
    fn modes_without_hints_and_without_mode_set_accept_everything() {
        let mut c = cand();
        c.mode = Mode::CONTEXT | Mode::MSG_PREFIX;
        assert_eq!(grant(&c, None).unwrap().mode, c.mode);
        let h = Hints::new().caps(Caps::MSG);
        assert!(!h.mode_set);
        assert_eq!(g(&c, &h).unwrap().mode, c.mode);
    }

    #[test]
    fn explicit_empty_mode_rejects_required_modes() {
        let mut c = cand();
        c.mode = Mode::CONTEXT | Mode::MSG_PREFIX;
        let h = Hints::new().mode(Mode::empty());
        assert!(h.mode_set);
        assert_eq!(
            g(&c, &h),
            Err(Mismatch::Mode(Mode::CONTEXT | Mode::MSG_PREFIX))
        );
        assert_eq!(
            g(&c, &Hints::new().mode(Mode::CONTEXT)),
            Err(Mismatch::Mode(Mode::MSG_PREFIX))
        );
        // A candidate requiring nothing matches an application supporting nothing.
        assert_eq!(g(&cand(), &h).unwrap().mode, Mode::empty());
    }

    #[test]
    fn granted_mode_is_the_candidates_requirement() {
        let mut c = cand();
        c.mode = Mode::CONTEXT;
        let h = Hints::new().mode(Mode::CONTEXT | Mode::CONTEXT2 | Mode::ASYNC_IOV);
        assert_eq!(g(&c, &h).unwrap().mode, Mode::CONTEXT);
        // A mode set directly in the info (without the builder) counts as set.
        let mut h = Hints::new();
        h.info.mode = Mode::ASYNC_IOV;
        assert_eq!(g(&c, &h), Err(Mismatch::Mode(Mode::CONTEXT)));
    }

    #[test]
    fn context_and_domain_modes() {
        let mut c = cand();
        c.tx_attr.mode = Mode::CONTEXT;
        assert_eq!(
            g(&c, &Hints::new().mode(Mode::empty())),
            Err(Mismatch::TxAttr("mode"))
        );
        let mut h = Hints::new().mode(Mode::empty());
        h.info.tx_attr.mode = Mode::CONTEXT;
        assert_eq!(g(&c, &h).unwrap().tx_attr.mode, Mode::CONTEXT);
        // The info-level mode covers the contexts when their hint is zero.
        assert!(g(&c, &Hints::new().mode(Mode::CONTEXT)).is_ok());

        let mut c = cand();
        c.rx_attr.mode = Mode::RX_CQ_DATA;
        assert_eq!(
            g(&c, &Hints::new().mode(Mode::CONTEXT)),
            Err(Mismatch::RxAttr("mode"))
        );
        assert!(g(&c, &Hints::new()).is_ok());

        let mut c = cand();
        c.domain_attr.mode = Mode::RESTRICTED_COMP;
        assert_eq!(
            g(&c, &Hints::new().mode(Mode::empty())),
            Err(Mismatch::DomainAttr("mode"))
        );
        let i = g(&c, &Hints::new().mode(Mode::RESTRICTED_COMP)).unwrap();
        assert_eq!(i.domain_attr.mode, Mode::RESTRICTED_COMP);
    }

    // ----- enums and names -----

    #[test]
    fn ep_type_matching() {
        assert!(g(&cand(), &Hints::new().ep_type(EpType::Unspec)).is_ok());
        assert_eq!(
            g(&cand(), &Hints::new().ep_type(EpType::Rdm))
                .unwrap()
                .ep_attr
                .ep_type,
            EpType::Rdm
        );
        assert_eq!(
            g(&cand(), &Hints::new().ep_type(EpType::Dgram)),
            Err(Mismatch::EpType)
        );
    }

    #[test]
    fn addr_format_matching() {
        let c = cand();
        assert_eq!(g(&c, &Hints::new()).unwrap().addr_format, AddrFormat::Proto);
        assert!(g(&c, &Hints::new().addr_format(AddrFormat::Proto)).is_ok());
        assert_eq!(
            g(&c, &Hints::new().addr_format(AddrFormat::Str)),
            Err(Mismatch::AddrFormat)
        );

        let mut c = cand();
        c.addr_format = AddrFormat::Sockaddr;
        let i = g(&c, &Hints::new().addr_format(AddrFormat::SockaddrIn6)).unwrap();
        assert_eq!(i.addr_format, AddrFormat::SockaddrIn6);
        c.addr_format = AddrFormat::SockaddrIn;
        assert!(g(&c, &Hints::new().addr_format(AddrFormat::SockaddrIn)).is_ok());
        assert_eq!(
            g(&c, &Hints::new().addr_format(AddrFormat::SockaddrIn6)),
            Err(Mismatch::AddrFormat)
        );
        c.addr_format = AddrFormat::SockaddrIn6;
        assert!(g(&c, &Hints::new().addr_format(AddrFormat::SockaddrIn)).is_ok());
    }

    #[test]
    fn names_matching() {
        let c = cand();
        assert!(g(&c, &Hints::new().prov_name("LoopBack")).is_ok());
        assert_eq!(
            g(&c, &Hints::new().prov_name("tcp")),
            Err(Mismatch::ProvName)
        );
        assert_eq!(
            g(&c, &Hints::new().prov_name("^loopback")),
            Err(Mismatch::ProvName)
        );
        assert!(g(&c, &Hints::new().prov_name("^tcp")).is_ok());
        assert!(g(&c, &Hints::new().fabric_name("loopback")).is_ok());
        assert_eq!(
            g(&c, &Hints::new().fabric_name("ib0")),
            Err(Mismatch::FabricName)
        );
        assert!(g(&c, &Hints::new().domain_name("LOOP0")).is_ok());
        assert_eq!(
            g(&c, &Hints::new().domain_name("loop1")),
            Err(Mismatch::DomainName)
        );
        let i = g(&c, &Hints::new().domain_name("LOOP0")).unwrap();
        assert_eq!(i.domain_attr.name, "loop0");
    }

    #[test]
    fn threading_matching() {
        use ThreadingLevel::*;
        let all = [Safe, Endpoint, Completion, Domain];
        for (i, &prov) in all.iter().enumerate() {
            let mut c = cand();
            c.domain_attr.threading = prov;
            assert_eq!(g(&c, &Hints::new()).unwrap().domain_attr.threading, prov);
            for (j, &req) in all.iter().enumerate() {
                let r = g(&c, &Hints::new().threading(req));
                if j >= i {
                    assert_eq!(
                        r.unwrap().domain_attr.threading,
                        req,
                        "{prov:?} grants {req:?}"
                    );
                } else {
                    assert_eq!(r, Err(Mismatch::Threading), "{prov:?} rejects {req:?}");
                }
            }
        }
        let mut c = cand();
        c.domain_attr.threading = Unspec;
        assert_eq!(
            g(&c, &Hints::new().threading(Safe))
                .unwrap()
                .domain_attr
                .threading,
            Safe
        );
    }

    #[test]
    fn progress_matching() {
        use ProgressMode::*;
        let mut c = cand();
        c.domain_attr.data_progress = Unspec;
        c.domain_attr.control_progress = Manual;
        for p in [Auto, Manual] {
            let i = g(&c, &Hints::new().data_progress(p)).unwrap();
            assert_eq!(i.domain_attr.data_progress, p);
        }
        assert_eq!(
            g(&c, &Hints::new().control_progress(Auto)),
            Err(Mismatch::Progress)
        );
        assert!(g(&c, &Hints::new().control_progress(Manual)).is_ok());
        c.domain_attr.data_progress = Manual;
        assert_eq!(
            g(&c, &Hints::new().data_progress(Auto)),
            Err(Mismatch::Progress)
        );
        // An automatic provider serves applications that drive progress themselves.
        let i = g(&cand(), &Hints::new().data_progress(Manual)).unwrap();
        assert_eq!(i.domain_attr.data_progress, Manual);
        assert_eq!(i.domain_attr.control_progress, Auto);
    }

    #[test]
    fn av_type_matching() {
        let i = g(&cand(), &Hints::new().av_type(AvKind::Table)).unwrap();
        assert_eq!(i.domain_attr.av_type, AvKind::Table);
        assert_eq!(
            g(&cand(), &Hints::new()).unwrap().domain_attr.av_type,
            AvKind::Unspec
        );
        let mut c = cand();
        c.domain_attr.av_type = AvKind::Map;
        assert!(g(&c, &Hints::new().av_type(AvKind::Map)).is_ok());
        assert_eq!(
            g(&c, &Hints::new().av_type(AvKind::Table)),
            Err(Mismatch::AvType)
        );
    }

    #[test]
    fn resource_mgmt_matching() {
        use ResourceMgmt::*;
        let i = g(&cand(), &Hints::new().resource_mgmt(Disabled)).unwrap();
        assert_eq!(i.domain_attr.resource_mgmt, Disabled);
        let mut c = cand();
        c.domain_attr.resource_mgmt = Disabled;
        assert_eq!(
            g(&c, &Hints::new().resource_mgmt(Enabled)),
            Err(Mismatch::ResourceMgmt)
        );
        c.domain_attr.resource_mgmt = Unspec;
        assert_eq!(
            g(&c, &Hints::new().resource_mgmt(Enabled))
                .unwrap()
                .domain_attr
                .resource_mgmt,
            Enabled
        );
    }

    // ----- mr_mode -----

    #[test]
    fn mr_mode_none_required() {
        let i = g(&cand(), &Hints::new()).unwrap();
        assert_eq!(i.domain_attr.mr_mode, MrMode::empty());
        // Supported-but-unneeded bits are cleared.
        let i = g(
            &cand(),
            &Hints::new().mr_mode(MrMode::LOCAL | MrMode::VIRT_ADDR),
        )
        .unwrap();
        assert_eq!(i.domain_attr.mr_mode, MrMode::empty());
    }

    #[test]
    fn mr_mode_required_bits_must_be_supported() {
        let mut c = cand();
        c.domain_attr.mr_mode = MrMode::LOCAL | MrMode::VIRT_ADDR | MrMode::PROV_KEY;
        assert_eq!(g(&c, &Hints::new().caps(Caps::MSG)), Err(Mismatch::MrMode));
        let h = Hints::new()
            .caps(Caps::RMA)
            .mr_mode(MrMode::LOCAL | MrMode::VIRT_ADDR);
        assert_eq!(g(&c, &h), Err(Mismatch::MrMode));
        let all = MrMode::LOCAL | MrMode::VIRT_ADDR | MrMode::PROV_KEY | MrMode::ALLOCATED;
        let i = g(&c, &Hints::new().caps(Caps::RMA).mr_mode(all)).unwrap();
        assert_eq!(
            i.domain_attr.mr_mode,
            MrMode::LOCAL | MrMode::VIRT_ADDR | MrMode::PROV_KEY
        );
        // FI_LOCAL_MR in an explicit mode stands for FI_MR_LOCAL.
        let h = Hints::new().caps(Caps::MSG).mode(Mode::LOCAL_MR);
        assert_eq!(g(&c, &h).unwrap().domain_attr.mr_mode, MrMode::LOCAL);
    }

    #[test]
    fn mr_mode_target_bits_only_needed_for_rma_targets() {
        let mut c = cand();
        c.domain_attr.mr_mode = MrMode::VIRT_ADDR | MrMode::PROV_KEY | MrMode::ALLOCATED;
        // Not an RMA target: nothing is needed.
        let i = g(&c, &Hints::new().caps(Caps::MSG)).unwrap();
        assert_eq!(i.domain_attr.mr_mode, MrMode::empty());
        let i = g(&c, &Hints::new().caps(Caps::RMA | Caps::READ | Caps::WRITE)).unwrap();
        assert_eq!(i.domain_attr.mr_mode, MrMode::empty());
        // Target of RMA: everything is needed.
        assert_eq!(
            g(&c, &Hints::new().caps(Caps::RMA | Caps::REMOTE_WRITE)),
            Err(Mismatch::MrMode)
        );
        let h = Hints::new()
            .caps(Caps::RMA | Caps::REMOTE_WRITE)
            .mr_mode(c.domain_attr.mr_mode);
        assert_eq!(
            g(&c, &h).unwrap().domain_attr.mr_mode,
            c.domain_attr.mr_mode
        );
        // With FI_MR_LOCAL the local-registration bits stay, the target bits go.
        c.domain_attr.mr_mode |= MrMode::LOCAL | MrMode::HMEM;
        let h = Hints::new().caps(Caps::MSG).mr_mode(MrMode::all());
        assert_eq!(
            g(&c, &h).unwrap().domain_attr.mr_mode,
            MrMode::LOCAL | MrMode::ALLOCATED
        );
    }

    // ----- numeric limits and orders -----

    #[test]
    fn tx_limits() {
        let c = cand();
        let tx = |a: TxAttr| Hints::new().tx_attr(a);
        let i = g(
            &c,
            &tx(TxAttr {
                size: 16,
                iov_limit: 2,
                rma_iov_limit: 1,
                inject_size: 8,
                ..Default::default()
            }),
        )
        .unwrap();
        assert_eq!(
            (i.tx_attr.size, i.tx_attr.iov_limit, i.tx_attr.rma_iov_limit),
            (16, 2, 1)
        );
        assert_eq!(
            i.tx_attr.inject_size, 64,
            "inject_size reports the provider's value"
        );
        let over = [
            (
                TxAttr {
                    size: 1025,
                    ..Default::default()
                },
                "size",
            ),
            (
                TxAttr {
                    iov_limit: 5,
                    ..Default::default()
                },
                "iov_limit",
            ),
            (
                TxAttr {
                    rma_iov_limit: 5,
                    ..Default::default()
                },
                "rma_iov_limit",
            ),
            (
                TxAttr {
                    inject_size: 65,
                    ..Default::default()
                },
                "inject_size",
            ),
        ];
        for (a, field) in over {
            assert_eq!(g(&c, &tx(a)), Err(Mismatch::TxAttr(field)));
        }
    }

    #[test]
    fn rx_limits() {
        let c = cand();
        let rx = |a: RxAttr| Hints::new().rx_attr(a);
        let i = g(
            &c,
            &rx(RxAttr {
                size: 1024,
                iov_limit: 1,
                total_buffered_recv: 100,
                ..Default::default()
            }),
        )
        .unwrap();
        assert_eq!(
            (
                i.rx_attr.size,
                i.rx_attr.iov_limit,
                i.rx_attr.total_buffered_recv
            ),
            (1024, 1, 100)
        );
        let over = [
            (
                RxAttr {
                    size: 2048,
                    ..Default::default()
                },
                "size",
            ),
            (
                RxAttr {
                    iov_limit: 5,
                    ..Default::default()
                },
                "iov_limit",
            ),
            (
                RxAttr {
                    total_buffered_recv: 4097,
                    ..Default::default()
                },
                "total_buffered_recv",
            ),
        ];
        for (a, field) in over {
            assert_eq!(g(&c, &rx(a)), Err(Mismatch::RxAttr(field)));
        }
    }

    #[test]
    fn ep_limits() {
        let c = cand();
        let ep = |a: EpAttr| Hints::new().ep_attr(a);
        let i = g(
            &c,
            &ep(EpAttr {
                max_msg_size: 1000,
                max_order_waw_size: 8,
                ..Default::default()
            }),
        )
        .unwrap();
        assert_eq!(
            i.ep_attr.max_msg_size,
            1 << 20,
            "max_msg_size reports the provider's value"
        );
        assert_eq!(i.ep_attr.max_order_waw_size, 4096);
        let over = [
            (
                EpAttr {
                    max_msg_size: (1 << 20) + 1,
                    ..Default::default()
                },
                "max_msg_size",
            ),
            (
                EpAttr {
                    max_order_raw_size: usize::MAX,
                    ..Default::default()
                },
                "max_order_raw_size",
            ),
            (
                EpAttr {
                    protocol: 5,
                    ..Default::default()
                },
                "protocol",
            ),
            (
                EpAttr {
                    protocol_version: 3,
                    ..Default::default()
                },
                "protocol_version",
            ),
            (
                EpAttr {
                    tx_ctx_cnt: 5,
                    ..Default::default()
                },
                "tx_ctx_cnt",
            ),
            (
                EpAttr {
                    rx_ctx_cnt: SHARED_CONTEXT,
                    ..Default::default()
                },
                "rx_ctx_cnt",
            ),
        ];
        for (a, field) in over {
            assert_eq!(g(&c, &ep(a)), Err(Mismatch::EpAttr(field)));
        }
        let i = g(
            &c,
            &ep(EpAttr {
                protocol: 0x8000_0001,
                protocol_version: 1,
                tx_ctx_cnt: 4,
                ..Default::default()
            }),
        )
        .unwrap();
        assert_eq!(
            (
                i.ep_attr.protocol_version,
                i.ep_attr.tx_ctx_cnt,
                i.ep_attr.rx_ctx_cnt
            ),
            (2, 4, 1)
        );

        let mut c2 = cand();
        c2.domain_attr.max_ep_srx_ctx = 8;
        let i = g(
            &c2,
            &ep(EpAttr {
                rx_ctx_cnt: SHARED_CONTEXT,
                ..Default::default()
            }),
        )
        .unwrap();
        assert_eq!(i.ep_attr.rx_ctx_cnt, SHARED_CONTEXT);
        // Without a domain maximum the endpoint's own count (at least 1) bounds requests.
        c2.domain_attr.max_ep_tx_ctx = 0;
        assert!(g(
            &c2,
            &ep(EpAttr {
                tx_ctx_cnt: 1,
                ..Default::default()
            })
        )
        .is_ok());
        assert_eq!(
            g(
                &c2,
                &ep(EpAttr {
                    tx_ctx_cnt: 2,
                    ..Default::default()
                })
            ),
            Err(Mismatch::EpAttr("tx_ctx_cnt"))
        );
    }

    #[test]
    fn mem_tag_format_matching() {
        let mut c = cand();
        c.ep_attr.mem_tag_format = 0x0000_FFFF_FFFF_FFFF;
        let ep = |f: u64| {
            Hints::new().ep_attr(EpAttr {
                mem_tag_format: f,
                ..Default::default()
            })
        };
        assert_eq!(
            g(&c, &ep(0)).unwrap().ep_attr.mem_tag_format,
            0x0000_FFFF_FFFF_FFFF
        );
        assert_eq!(g(&c, &ep(0x30FF)).unwrap().ep_attr.mem_tag_format, 0x30FF);
        assert_eq!(
            g(&c, &ep(0x0001_0000_0000_0000)),
            Err(Mismatch::EpAttr("mem_tag_format"))
        );
    }

    #[test]
    fn domain_limits() {
        let c = cand();
        let d = |a: DomainAttr| Hints::new().domain_attr(a);
        let i = g(
            &c,
            &d(DomainAttr {
                cq_data_size: 4,
                mr_key_size: 8,
                mr_iov_limit: 1,
                cq_cnt: 2,
                mr_cnt: 10,
                ..Default::default()
            }),
        )
        .unwrap();
        let da = &i.domain_attr;
        assert_eq!(
            (
                da.cq_data_size,
                da.mr_key_size,
                da.mr_iov_limit,
                da.cq_cnt,
                da.mr_cnt
            ),
            (4, 8, 1, 2, 10)
        );
        assert_eq!(da.ep_cnt, 128);
        let over = [
            (
                DomainAttr {
                    cq_data_size: 9,
                    ..Default::default()
                },
                "cq_data_size",
            ),
            (
                DomainAttr {
                    mr_key_size: 16,
                    ..Default::default()
                },
                "mr_key_size",
            ),
            (
                DomainAttr {
                    mr_iov_limit: 5,
                    ..Default::default()
                },
                "mr_iov_limit",
            ),
            (
                DomainAttr {
                    ep_cnt: 129,
                    ..Default::default()
                },
                "ep_cnt",
            ),
            (
                DomainAttr {
                    cntr_cnt: 17,
                    ..Default::default()
                },
                "cntr_cnt",
            ),
            (
                DomainAttr {
                    max_ep_tx_ctx: 5,
                    ..Default::default()
                },
                "max_ep_tx_ctx",
            ),
            (
                DomainAttr {
                    max_ep_stx_ctx: 1,
                    ..Default::default()
                },
                "max_ep_stx_ctx",
            ),
            (
                DomainAttr {
                    caps: Caps::SHARED_AV,
                    ..Default::default()
                },
                "caps",
            ),
        ];
        for (a, field) in over {
            assert_eq!(g(&c, &d(a)), Err(Mismatch::DomainAttr(field)));
        }
        let i = g(
            &c,
            &d(DomainAttr {
                caps: Caps::LOCAL_COMM,
                ..Default::default()
            }),
        )
        .unwrap();
        assert_eq!(i.domain_attr.caps, Caps::LOCAL_COMM | Caps::REMOTE_COMM);
    }

    #[test]
    fn orders_must_be_subsets() {
        let c = cand();
        let tx = |m: Order, cmp: Order| {
            Hints::new().tx_attr(TxAttr {
                msg_order: m,
                comp_order: cmp,
                ..Default::default()
            })
        };
        let i = g(&c, &tx(Order::SAS, Order::empty())).unwrap();
        assert_eq!(i.tx_attr.msg_order, Order::SAS | Order::RAW | Order::WAW);
        assert_eq!(i.tx_attr.comp_order, Order::STRICT);
        assert_eq!(
            g(&c, &tx(Order::SAS | Order::WAR, Order::empty())),
            Err(Mismatch::TxAttr("msg_order"))
        );
        assert!(g(&c, &tx(Order::empty(), Order::STRICT)).is_ok());
        assert_eq!(
            g(&c, &tx(Order::empty(), Order::DATA)),
            Err(Mismatch::TxAttr("comp_order"))
        );

        let rx = |m: Order, cmp: Order| {
            Hints::new().rx_attr(RxAttr {
                msg_order: m,
                comp_order: cmp,
                ..Default::default()
            })
        };
        assert!(g(&c, &rx(Order::RAW, Order::empty())).is_ok());
        assert_eq!(
            g(&c, &rx(Order::RAR, Order::empty())),
            Err(Mismatch::RxAttr("msg_order"))
        );
        assert_eq!(
            g(&c, &rx(Order::empty(), Order::DATA)),
            Err(Mismatch::RxAttr("comp_order"))
        );
    }

    #[test]
    fn op_flags_and_addresses_carried() {
        let c = cand();
        let i = g(&c, &Hints::new()).unwrap();
        assert_eq!(i.tx_attr.op_flags, OpFlags::TRANSMIT_COMPLETE);
        let h = Hints::new()
            .tx_attr(TxAttr {
                op_flags: OpFlags::DELIVERY_COMPLETE | OpFlags::COMPLETION,
                ..Default::default()
            })
            .rx_attr(RxAttr {
                op_flags: OpFlags::MULTI_RECV,
                ..Default::default()
            })
            .src_addr(vec![1, 2, 3])
            .dest_addr(vec![4, 5]);
        let i = g(&c, &h).unwrap();
        assert_eq!(
            i.tx_attr.op_flags,
            OpFlags::DELIVERY_COMPLETE | OpFlags::COMPLETION
        );
        assert_eq!(i.rx_attr.op_flags, OpFlags::MULTI_RECV);
        assert_eq!(i.src_addr.as_deref(), Some(&[1u8, 2, 3][..]));
        assert_eq!(i.dest_addr.as_deref(), Some(&[4u8, 5][..]));

        let mut c2 = cand();
        c2.src_addr = Some(vec![9]);
        assert_eq!(g(&c2, &Hints::new()).unwrap().src_addr, Some(vec![9]));
        assert_eq!(
            g(&c2, &Hints::new().src_addr(vec![7])).unwrap().src_addr,
            Some(vec![7])
        );
    }

    #[test]
    fn builders_set_fields() {
        let h = Hints::new()
            .caps(Caps::RMA)
            .mode(Mode::CONTEXT)
            .ep_type(EpType::Msg)
            .addr_format(AddrFormat::Str)
            .prov_name("p")
            .fabric_name("f")
            .domain_attr(DomainAttr {
                cq_cnt: 3,
                ..Default::default()
            })
            .domain_name("d")
            .threading(ThreadingLevel::Completion)
            .data_progress(ProgressMode::Manual)
            .control_progress(ProgressMode::Auto)
            .av_type(AvKind::Map)
            .mr_mode(MrMode::PROV_KEY)
            .resource_mgmt(ResourceMgmt::Disabled);
        let i = &h.info;
        assert!(h.mode_set);
        assert_eq!(
            (i.caps, i.mode, i.ep_attr.ep_type, i.addr_format),
            (Caps::RMA, Mode::CONTEXT, EpType::Msg, AddrFormat::Str)
        );
        assert_eq!(
            (
                i.fabric_attr.prov_name,
                i.fabric_attr.name,
                i.domain_attr.name
            ),
            ("p", "f", "d")
        );
        let d = &i.domain_attr;
        assert_eq!(d.cq_cnt, 3);
        assert_eq!(d.threading, ThreadingLevel::Completion);
        assert_eq!(
            (d.data_progress, d.control_progress),
            (ProgressMode::Manual, ProgressMode::Auto)
        );
        assert_eq!(
            (d.av_type, d.mr_mode, d.resource_mgmt),
            (AvKind::Map, MrMode::PROV_KEY, ResourceMgmt::Disabled)
        );
    }

    #[test]
    fn first_mismatch_is_reported_in_a_stable_order() {
        let h = Hints::new()
            .prov_name("x")
            .ep_type(EpType::Msg)
            .caps(Caps::COLLECTIVE);
        assert_eq!(g(&cand(), &h), Err(Mismatch::ProvName));
        let h = Hints::new().ep_type(EpType::Msg).caps(Caps::COLLECTIVE);
        assert_eq!(g(&cand(), &h), Err(Mismatch::EpType));
        assert_eq!(
            Mismatch::Caps(Caps::COLLECTIVE).to_string(),
            "unsupported capabilities: [ FI_COLLECTIVE ]"
        );
        assert_eq!(
            Mismatch::TxAttr("size").to_string(),
            "tx_attr.size not supported"
        );
    }

    // ----- printing -----

    #[test]
    fn display_like_fi_info() {
        let s = cand().to_string();
        assert_eq!(
            s,
            "provider: loopback\n    fabric: loopback\n    domain: loop0\n    version: 1.2\n    type: FI_EP_RDM\n    protocol: 0x80000001"
        );
        let mut c = cand();
        c.ep_attr.protocol = 6;
        c.fabric_attr.prov_name = "";
        let s = c.to_string();
        assert!(s.starts_with("provider: (null)\n"));
        assert!(s.ends_with("protocol: FI_PROTO_SOCK_TCP"));
    }

    #[test]
    fn verbose_lists_every_field_by_name() {
        let mut c = cand();
        c.mode = Mode::CONTEXT | Mode::from_bits_retain(1 << 40);
        c.domain_attr.mr_mode = MrMode::LOCAL | MrMode::PROV_KEY;
        c.rx_attr.comp_order = Order::empty();
        let v = grant(&c, None).unwrap().to_string_verbose();
        assert!(
            v.starts_with("fi_info:\n    caps: [ FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_READ, ")
        );
        for line in [
            "    mode: [ FI_CONTEXT, 0x10000000000 ]\n",
            "    addr_format: FI_ADDR_PROTO\n",
            "    src_addr: (null)\n",
            "    fi_tx_attr:\n        caps: [ FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_READ, FI_WRITE, FI_SEND ]\n",
            "        mode: [  ]\n        op_flags: [ FI_TRANSMIT_COMPLETE ]\n",
            "        msg_order: [ FI_ORDER_RAW, FI_ORDER_WAW, FI_ORDER_SAS ]\n",
            "        comp_order: [ FI_ORDER_NONE ]\n        total_buffered_recv: 4096\n",
            "        type: FI_EP_RDM\n        protocol: 0x80000001\n",
            "        mem_tag_format: 0xffffffffffffffff\n",
            "        threading: FI_THREAD_SAFE\n        control_progress: FI_PROGRESS_AUTO\n",
            "        resource_mgmt: FI_RM_ENABLED\n        av_type: FI_AV_UNSPEC\n",
            "        mr_mode: [ FI_MR_LOCAL, FI_MR_PROV_KEY ]\n",
            "        caps: [ FI_LOCAL_COMM, FI_REMOTE_COMM ]\n",
            "    fi_fabric_attr:\n        name: loopback\n        prov_name: loopback\n        prov_version: 1.2\n        api_version: 1.17\n",
        ] {
            assert!(v.contains(line), "missing {line:?} in\n{v}");
        }
        assert!(v.ends_with("api_version: 1.17\n"));
    }

    #[test]
    fn verbose_formats_addresses() {
        let mut c = cand();
        c.addr_format = AddrFormat::SockaddrIn;
        let mut sin = vec![0u8; 16];
        sin[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        sin[2..4].copy_from_slice(&7471u16.to_be_bytes());
        sin[4..8].copy_from_slice(&[10, 31, 6, 12]);
        c.src_addr = Some(sin.clone());
        let v = c.to_string_verbose();
        assert!(v.contains("    src_addrlen: 16\n    dest_addrlen: 0\n"));
        assert!(v.contains("    src_addr: fi_sockaddr_in://10.31.6.12:7471\n"));
        c.addr_format = AddrFormat::Sockaddr;
        assert!(c
            .to_string_verbose()
            .contains("src_addr: fi_sockaddr_in://10.31.6.12:7471\n"));

        let mut sin6 = vec![0u8; 28];
        sin6[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        sin6[2..4].copy_from_slice(&80u16.to_be_bytes());
        sin6[23] = 1;
        c.dest_addr = Some(sin6);
        assert!(c
            .to_string_verbose()
            .contains("dest_addr: fi_sockaddr_in6://[::1]:80\n"));

        c.addr_format = AddrFormat::Str;
        c.src_addr = Some(b"fi_sockaddr://1.2.3.4:5\0".to_vec());
        assert!(c
            .to_string_verbose()
            .contains("src_addr: fi_sockaddr://1.2.3.4:5\n"));
        c.addr_format = AddrFormat::Proto;
        c.src_addr = Some(vec![0xde, 0xad]);
        assert!(c.to_string_verbose().contains("src_addr: 0xdead\n"));
        // Truncated sockaddrs fall back to hex instead of panicking.
        c.addr_format = AddrFormat::SockaddrIn6;
        c.src_addr = Some(vec![1, 2, 3]);
        assert!(c.to_string_verbose().contains("src_addr: 0x010203\n"));
    }

    #[test]
    fn version_encoding() {
        assert_eq!(version(1, 17), (1 << 16) | 17);
        assert_eq!(Version(version(2, 3)).to_string(), "2.3");
    }
}
