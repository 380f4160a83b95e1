//! Shared scaffolding of the conformance suites (`suite/msg.rs`, `suite/rma.rs`): the
//! [`Api`] abstraction every test body is written against (implemented by the static
//! stacks, [`St<S>`], and by the run-time dispatch layer, [`Dy<C>`]), node and pair setup
//! over any API, format-independent views of CQ entries, bounded waits that drive progress
//! on the peers, and the macros that instantiate one generic test body for the matrix of
//! static stacks and dyn choices.
//!
//! # Running the suite on a provider
//!
//! Nothing here names a provider: everything goes through `crate::Prov`, a type alias the
//! including test crate defines at its root. The loopback instantiation is
//! `tests/conformance_msg.rs` and `tests/conformance_rma.rs`; to run the same suite on
//! another provider (say `fabric_shm::Shm`), make the provider crate a dev-dependency of
//! the root package and add one file per suite, e.g. `tests/shm_conformance_msg.rs`:
//!
//! ```ignore
//! //! The message conformance suite on the shm provider.
//!
//! /// The provider under test.
//! type Prov = fabric_shm::Shm;
//!
//! include!("suite/msg.rs");
//! ```
//!
//! and `tests/shm_conformance_rma.rs` the same with `include!("suite/rma.rs")`. The body
//! file declares this module itself (`#[path = "common.rs"] mod common;`). Limits a test
//! depends on come from the provider (`<Prov as Provider>::INJECT_SIZE`, `MAX_MSG_SIZE`,
//! `candidates()`) or from the `Info` that `getinfo` returns, never from constants of one
//! provider; what is specific to loopback's address format lives in
//! `tests/conformance_loopback.rs`.
//!
//! # RDM or MSG endpoints
//!
//! By default the nodes are RDM endpoints paired through their AVs. A crate that also
//! says `use common::msg_suite as suite_matrix;` at its root (see
//! [`instantiate`]) runs the suite on connected MSG endpoints instead: [`pair`] connects
//! the nodes through a passive endpoint and hands out `FI_ADDR_UNSPEC` as their
//! addresses, for the static stacks only (the run-time layer has no MSG endpoint), and
//! the tests a suite file lists as `rdm_only` are not run. The loopback instantiations
//! are `tests/conformance_msg_ep.rs` and `tests/conformance_rma_ep.rs`.
//!
//! Test bodies call the objects' methods through the object-safe traits of
//! `fabric::dynamic::ops` (which the static objects implement by delegating to their
//! inherent methods, statically dispatched here since the types are known per
//! instantiation), and open the objects they keep typed through [`Api`]'s constructors.
//!
//! Every wait here is bounded by [`DEADLINE`] and panics with a description of what it
//! waited for, so a broken provider fails a test instead of hanging the suite.
#![allow(dead_code, unused_macros, unused_imports)]

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use fabric::attr::{
    AvAttr, AvKind, CntrAttr, CqAttr, CqFormatKind, EpType, EqAttr, MrAttr, ProgressMode,
    ThreadingLevel, WaitObj,
};
use fabric::av_type::AvType;
use fabric::dynamic::prelude::*;
use fabric::dynamic::{
    DynAv, DynCntr, DynCq, DynDomain, DynEndpoint, DynFabric, DynMr, ProviderFilter,
};
use fabric::flags::{BindFlags, Caps, CqFlags};
use fabric::prelude::ConstDefault;
use fabric::Provider;
use fabric::{
    getinfo, AddressVector, Completion, Config, Context, Counter, Cq, CqDataEntry, CqEntry,
    CqFormat, CqMsgEntry, CqTaggedEntry, Domain, Endpoint, EqEntry, EqEvent, Error, EventQueue,
    Fabric, FiAddr, Hints, Info, MemoryRegion, Progress, WaitSet,
};

use crate::Prov;

pub use fabric::CqErrEntry;

/// How long any helper waits for something that should happen before it panics.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// How long [`assert_cq_empty`] keeps driving progress before deciding nothing comes.
pub const QUIET: Duration = Duration::from_millis(20);

/// Format-independent read access to a CQ entry: `None` where the format lacks the field.
pub trait EntryView: Copy + Default + std::fmt::Debug {
    /// `op_context`.
    fn context(&self) -> Context;
    /// `flags` (`None` for `FI_CQ_FORMAT_CONTEXT`).
    fn flags(&self) -> Option<CqFlags>;
    /// `len` (`None` for `FI_CQ_FORMAT_CONTEXT`).
    fn len(&self) -> Option<usize>;
    /// `buf` (data and tagged formats).
    fn buf(&self) -> Option<usize>;
    /// `tag` (tagged format only).
    fn tag(&self) -> Option<u64>;
    /// `data` (data and tagged formats).
    fn data(&self) -> Option<u64>;
}

impl EntryView for CqEntry {
    fn context(&self) -> Context {
        self.op_context
    }
    fn flags(&self) -> Option<CqFlags> {
        None
    }
    fn len(&self) -> Option<usize> {
        None
    }
    fn buf(&self) -> Option<usize> {
        None
    }
    fn tag(&self) -> Option<u64> {
        None
    }
    fn data(&self) -> Option<u64> {
        None
    }
}

impl EntryView for CqMsgEntry {
    fn context(&self) -> Context {
        self.op_context
    }
    fn flags(&self) -> Option<CqFlags> {
        Some(self.flags)
    }
    fn len(&self) -> Option<usize> {
        Some(self.len)
    }
    fn buf(&self) -> Option<usize> {
        None
    }
    fn tag(&self) -> Option<u64> {
        None
    }
    fn data(&self) -> Option<u64> {
        None
    }
}

impl EntryView for CqDataEntry {
    fn context(&self) -> Context {
        self.op_context
    }
    fn flags(&self) -> Option<CqFlags> {
        Some(self.flags)
    }
    fn len(&self) -> Option<usize> {
        Some(self.len)
    }
    fn buf(&self) -> Option<usize> {
        Some(self.buf)
    }
    fn tag(&self) -> Option<u64> {
        None
    }
    fn data(&self) -> Option<u64> {
        Some(self.data)
    }
}

impl EntryView for DynEntry {
    fn context(&self) -> Context {
        DynEntry::context(self)
    }
    fn flags(&self) -> Option<CqFlags> {
        DynEntry::flags(self)
    }
    fn len(&self) -> Option<usize> {
        DynEntry::len(self)
    }
    fn buf(&self) -> Option<usize> {
        DynEntry::buf(self)
    }
    fn tag(&self) -> Option<u64> {
        DynEntry::tag(self)
    }
    fn data(&self) -> Option<u64> {
        DynEntry::data(self)
    }
}

impl EntryView for CqTaggedEntry {
    fn context(&self) -> Context {
        self.op_context
    }
    fn flags(&self) -> Option<CqFlags> {
        Some(self.flags)
    }
    fn len(&self) -> Option<usize> {
        Some(self.len)
    }
    fn buf(&self) -> Option<usize> {
        Some(self.buf)
    }
    fn tag(&self) -> Option<u64> {
        Some(self.tag)
    }
    fn data(&self) -> Option<u64> {
        Some(self.data)
    }
}

/// A CQ format whose entries the helpers can inspect.
pub trait ViewFormat: CqFormat<Entry: EntryView> {}
impl<F: CqFormat<Entry: EntryView>> ViewFormat for F {}

/// The bound of every static stack the suites run on: CQ entries with an [`EntryView`].
pub trait Conf: Config<Cq: ViewFormat> {}
impl<S: Config<Cq: ViewFormat>> Conf for S {}

/// Whether `S` runs a progress thread.
pub fn is_auto<S: Config>() -> bool {
    <S::Progress as Progress>::AUTO
}

// ---------------------------------------------------------------------------------------
// The API abstraction
// ---------------------------------------------------------------------------------------

/// A CQ read with typed entries: the static CQ in its stack's format, the dyn CQ in the
/// format it was opened with. The other CQ calls come from [`CqOps`] and [`Waitable`].
pub trait TestCq: CqOps {
    /// The entry type reads produce.
    type Entry: EntryView;
    /// `fi_cq_read`.
    fn read(&self, out: &mut [Self::Entry]) -> fabric::Result<usize>;
    /// `fi_cq_readfrom`.
    fn read_from(&self, out: &mut [Self::Entry], src: &mut [FiAddr]) -> fabric::Result<usize>;
    /// `fi_cq_sread`.
    fn sread(
        &self,
        out: &mut [Self::Entry],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> fabric::Result<usize>;
    /// Whether the CQ's domain runs a progress thread (waits pace themselves by it).
    fn is_auto(&self) -> bool;
}

/// What a test body is written against: the object types of one API and the
/// constructors of the objects tests keep typed. Everything else goes through the
/// object-safe traits of `fabric::dynamic::ops`.
pub trait Api: 'static {
    /// `fid_fabric`.
    type Fabric: FabricOps;
    /// `fid_domain`.
    type Domain: DomainOps;
    /// `fid_ep`.
    type Ep: EndpointOps;
    /// `fid_cq`, read with typed entries.
    type Cq: TestCq<Entry = Self::Entry>;
    /// `fid_cntr`.
    type Cntr: CntrOps;
    /// `fid_av`.
    type Av: AvOps;
    /// `fid_mr` borrowing its memory for `'a`.
    type Mr<'a>: MrOps;
    /// The CQ entries.
    type Entry: EntryView;
    /// Whether a progress thread runs.
    const AUTO: bool;
    /// The AV type (`Map` or `Table`).
    const AV: AvKind;
    /// The endpoint type the suite's nodes use: [`RdmEp`] (paired through AVs) or [`MsgEp`]
    /// (paired by a connection; see [`pair`]).
    type Kind: EpKind;
    /// `Self::Kind`'s endpoint type.
    const EP_TYPE: EpType = <Self::Kind as EpKind>::TYPE;
    /// `fi_getinfo`.
    fn getinfo(hints: &Hints) -> fabric::Result<Vec<Info>>;
    /// `fi_fabric`.
    fn fabric(info: &Info) -> fabric::Result<Self::Fabric>;
    /// `fi_domain`.
    fn domain(fabric: &Self::Fabric, info: &Info) -> fabric::Result<Self::Domain>;
    /// `fi_endpoint`.
    fn endpoint(domain: &Self::Domain, info: &Info) -> fabric::Result<Self::Ep>;
    /// `fi_cq_open`.
    fn cq(domain: &Self::Domain, attr: &CqAttr) -> fabric::Result<Self::Cq>;
    /// `fi_cq_open` in a wait set.
    fn cq_in_set(
        domain: &Self::Domain,
        attr: &CqAttr,
        set: &dyn WaitSetOps,
    ) -> fabric::Result<Self::Cq>;
    /// `fi_cntr_open`.
    fn cntr(domain: &Self::Domain, attr: &CntrAttr) -> fabric::Result<Self::Cntr>;
    /// `fi_av_open`.
    fn av(domain: &Self::Domain, attr: &AvAttr) -> fabric::Result<Self::Av>;
    /// `fi_mr_reg`.
    fn mr_reg<'a>(
        domain: &Self::Domain,
        buf: &'a mut [u8],
        attr: &MrAttr,
    ) -> fabric::Result<Self::Mr<'a>>;
    /// `fi_passive_ep`, `fi_pep_bind(eq)` and `fi_listen`: the listener's name and the
    /// passive endpoint, which must stay open while requests to it are answered.
    fn listen(
        fabric: &Self::Fabric,
        info: &Info,
        eq: &dyn EqOps,
    ) -> fabric::Result<(Vec<u8>, Box<dyn std::any::Any>)>;
    /// `fi_connect`.
    fn connect(ep: &Self::Ep, addr: &[u8], data: &[u8]) -> fabric::Result<()>;
    /// `fi_accept`.
    fn accept(ep: &Self::Ep, data: &[u8]) -> fabric::Result<()>;
}

/// The endpoint type a static instantiation runs its nodes on: [`RdmEp`] or [`MsgEp`].
pub trait EpKind: 'static {
    /// `FI_EP_RDM` or `FI_EP_MSG`.
    const TYPE: EpType;
}

/// Reliable datagram endpoints, paired through AVs.
pub enum RdmEp {}
impl EpKind for RdmEp {
    const TYPE: EpType = EpType::Rdm;
}

/// Connected MSG endpoints, paired by `fi_connect`/`fi_accept`.
pub enum MsgEp {}
impl EpKind for MsgEp {
    const TYPE: EpType = EpType::Msg;
}

/// The static API of stack `S`, its nodes on endpoints of type `E`.
pub struct St<S, E = RdmEp>(PhantomData<(S, E)>);

/// The CQ entry type of stack `S`.
pub type Entry<S> = <<S as Config>::Cq as CqFormat>::Entry;

impl<S: Conf> TestCq for Cq<S> {
    type Entry = Entry<S>;
    fn read(&self, out: &mut [Entry<S>]) -> fabric::Result<usize> {
        Cq::read(self, out)
    }
    fn read_from(&self, out: &mut [Entry<S>], src: &mut [FiAddr]) -> fabric::Result<usize> {
        Cq::read_from(self, out, src)
    }
    fn sread(
        &self,
        out: &mut [Entry<S>],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> fabric::Result<usize> {
        Cq::sread(self, out, threshold, timeout)
    }
    fn is_auto(&self) -> bool {
        is_auto::<S>()
    }
}

impl<S: Conf, E: EpKind> Api for St<S, E> {
    type Fabric = Fabric<S>;
    type Domain = Domain<S>;
    type Ep = Endpoint<S>;
    type Cq = Cq<S>;
    type Cntr = Counter<S>;
    type Av = AddressVector<S>;
    type Mr<'a> = MemoryRegion<'a, S>;
    type Entry = Entry<S>;
    const AUTO: bool = <S::Progress as Progress>::AUTO;
    const AV: AvKind = <S::Av as AvType>::KIND;
    type Kind = E;
    fn getinfo(hints: &Hints) -> fabric::Result<Vec<Info>> {
        getinfo::<S>(Some(hints))
    }
    fn fabric(info: &Info) -> fabric::Result<Fabric<S>> {
        Fabric::open(info)
    }
    fn domain(fabric: &Fabric<S>, info: &Info) -> fabric::Result<Domain<S>> {
        fabric.domain(info)
    }
    fn endpoint(domain: &Domain<S>, info: &Info) -> fabric::Result<Endpoint<S>> {
        domain.endpoint(info)
    }
    fn cq(domain: &Domain<S>, attr: &CqAttr) -> fabric::Result<Cq<S>> {
        domain.cq(attr)
    }
    fn cq_in_set(domain: &Domain<S>, attr: &CqAttr, set: &dyn WaitSetOps) -> fabric::Result<Cq<S>> {
        let set = set
            .as_any()
            .downcast_ref::<WaitSet<S>>()
            .ok_or(Error::Domain)?;
        domain.cq_in_set(attr, set)
    }
    fn cntr(domain: &Domain<S>, attr: &CntrAttr) -> fabric::Result<Counter<S>> {
        domain.cntr(attr)
    }
    fn av(domain: &Domain<S>, attr: &AvAttr) -> fabric::Result<AddressVector<S>> {
        domain.av(attr)
    }
    fn mr_reg<'a>(
        domain: &Domain<S>,
        buf: &'a mut [u8],
        attr: &MrAttr,
    ) -> fabric::Result<MemoryRegion<'a, S>> {
        domain.mr_reg(buf, attr)
    }
    fn listen(
        fabric: &Fabric<S>,
        info: &Info,
        eq: &dyn EqOps,
    ) -> fabric::Result<(Vec<u8>, Box<dyn std::any::Any>)> {
        let eq = eq
            .as_any()
            .downcast_ref::<EventQueue<S>>()
            .ok_or(Error::Inval)?;
        let pep = fabric.passive_ep(info)?;
        pep.bind_eq(eq)?;
        pep.listen()?;
        Ok((pep.name(), Box::new(pep)))
    }
    fn connect(ep: &Endpoint<S>, addr: &[u8], data: &[u8]) -> fabric::Result<()> {
        ep.connect(addr, data)
    }
    fn accept(ep: &Endpoint<S>, data: &[u8]) -> fabric::Result<()> {
        ep.accept(data)
    }
}

/// The provider list of the dyn instantiations: the provider under test alone.
pub type Net = Registry<(Prov,)>;

/// A CQ entry type the dyn CQ reads into, and the format it opens its CQs with.
pub trait DynRead: EntryView + 'static {
    /// The format requested at CQ open (`Unspec`: the default, tagged).
    const FORMAT: CqFormatKind;
    /// `fi_cq_read` through the dyn CQ's conversion.
    fn read(cq: &DynCq, out: &mut [Self]) -> fabric::Result<usize>;
    /// `fi_cq_readfrom`.
    fn read_from(cq: &DynCq, out: &mut [Self], src: &mut [FiAddr]) -> fabric::Result<usize>;
    /// `fi_cq_sread`.
    fn sread(
        cq: &DynCq,
        out: &mut [Self],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> fabric::Result<usize>;
}

macro_rules! dyn_read {
    ($($entry:ty => $format:ident),*) => {$(
        impl DynRead for $entry {
            const FORMAT: CqFormatKind = CqFormatKind::$format;
            fn read(cq: &DynCq, out: &mut [Self]) -> fabric::Result<usize> {
                cq.read(out)
            }
            fn read_from(cq: &DynCq, out: &mut [Self], src: &mut [FiAddr]) -> fabric::Result<usize> {
                cq.read_from(out, src)
            }
            fn sread(
                cq: &DynCq,
                out: &mut [Self],
                threshold: usize,
                timeout: Option<Duration>,
            ) -> fabric::Result<usize> {
                cq.sread(out, threshold, timeout)
            }
        }
    )*};
}
dyn_read!(
    CqEntry => Context,
    CqMsgEntry => Msg,
    CqDataEntry => Data,
    CqTaggedEntry => Tagged,
    DynEntry => Unspec
);

/// A dyn CQ read as entries `E`.
pub struct DCq<E> {
    cq: DynCq,
    auto: bool,
    _entry: PhantomData<E>,
}

impl<E: DynRead> TestCq for DCq<E> {
    type Entry = E;
    fn read(&self, out: &mut [E]) -> fabric::Result<usize> {
        E::read(&self.cq, out)
    }
    fn read_from(&self, out: &mut [E], src: &mut [FiAddr]) -> fabric::Result<usize> {
        E::read_from(&self.cq, out, src)
    }
    fn sread(
        &self,
        out: &mut [E],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> fabric::Result<usize> {
        E::sread(&self.cq, out, threshold, timeout)
    }
    fn is_auto(&self) -> bool {
        self.auto
    }
}

impl<E> Waitable for DCq<E> {
    fn trywait(&self) -> fabric::Result<()> {
        self.cq.trywait()
    }
}

impl<E> CqOps for DCq<E> {
    fn format(&self) -> CqFormatKind {
        CqOps::format(&self.cq)
    }
    fn read_tagged(
        &self,
        out: &mut [CqTaggedEntry],
        src: Option<&mut [FiAddr]>,
    ) -> fabric::Result<usize> {
        self.cq.read_tagged(out, src)
    }
    fn sread_tagged(
        &self,
        out: &mut [CqTaggedEntry],
        src: Option<&mut [FiAddr]>,
        threshold: usize,
        timeout: Option<Duration>,
    ) -> fabric::Result<usize> {
        self.cq.sread_tagged(out, src, threshold, timeout)
    }
    fn read_completions(&self, out: &mut [Completion]) -> fabric::Result<usize> {
        self.cq.read_completions(out)
    }
    fn read_completions_from(
        &self,
        out: &mut [Completion],
        src: &mut [FiAddr],
    ) -> fabric::Result<usize> {
        self.cq.read_completions_from(out, src)
    }
    fn sread_completions(
        &self,
        out: &mut [Completion],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> fabric::Result<usize> {
        self.cq.sread_completions(out, threshold, timeout)
    }
    fn sread_completions_from(
        &self,
        out: &mut [Completion],
        src: &mut [FiAddr],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> fabric::Result<usize> {
        self.cq.sread_completions_from(out, src, threshold, timeout)
    }
    fn read_err(&self) -> fabric::Result<fabric::CqErrEntry> {
        self.cq.read_err()
    }
    fn signal(&self) {
        self.cq.signal()
    }
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.cq.wait_fd()
    }
    fn strerror(&self, e: &fabric::CqErrEntry) -> &'static str {
        self.cq.strerror(e)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self.cq.as_any()
    }
}

/// The run-time choices of one dyn instantiation: what the hints ask for, and the entry
/// type (hence format) of its CQs.
pub trait DynCfg: 'static {
    /// Requested threading level (`Unspec`: the default).
    const THREADING: ThreadingLevel;
    /// Requested progress model (`Unspec`: the default).
    const PROGRESS: ProgressMode;
    /// Requested AV type (`Unspec`: the default).
    const AV: AvKind;
    /// The threading implementation the choice must land on.
    const IMPL: ThreadingLevel;
    /// CQ entries (and format).
    type Entry: DynRead;
}

/// The dyn API with the choices of `C`, over [`Net`].
pub struct Dy<C>(PhantomData<C>);

fn is_auto_info(info: &Info) -> bool {
    info.domain_attr.data_progress == ProgressMode::Auto
        || info.domain_attr.control_progress == ProgressMode::Auto
}

impl<C: DynCfg> Api for Dy<C> {
    type Fabric = DynFabric;
    type Domain = DynDomain;
    type Ep = DynEndpoint;
    type Cq = DCq<C::Entry>;
    type Cntr = DynCntr;
    type Av = DynAv;
    type Mr<'a> = DynMr<'a>;
    type Entry = C::Entry;
    const AUTO: bool = matches!(C::PROGRESS, ProgressMode::Auto);
    const AV: AvKind = match C::AV {
        AvKind::Map => AvKind::Map,
        _ => AvKind::Table,
    };
    type Kind = RdmEp;
    fn getinfo(hints: &Hints) -> fabric::Result<Vec<Info>> {
        let mut h = hints.clone();
        if C::THREADING != ThreadingLevel::Unspec {
            h = h.threading(C::THREADING);
        }
        if C::PROGRESS != ProgressMode::Unspec {
            h = h.data_progress(C::PROGRESS).control_progress(C::PROGRESS);
        }
        if C::AV != AvKind::Unspec {
            h = h.av_type(C::AV);
        }
        Net::getinfo_filtered(Some(&h), &ProviderFilter::All)
    }
    fn fabric(info: &Info) -> fabric::Result<DynFabric> {
        let f = Net::fabric(info)?;
        let c = f.choice();
        // The run-time choice landed on the stack the instantiation asked for.
        assert_eq!(c.provider, <Prov as Provider>::NAME);
        assert_eq!(c.threading, C::IMPL, "threading implementation");
        assert_eq!(c.progress == ProgressMode::Auto, Self::AUTO, "progress");
        assert_eq!(c.av_type, Self::AV, "AV type");
        Ok(f)
    }
    fn domain(fabric: &DynFabric, info: &Info) -> fabric::Result<DynDomain> {
        fabric.domain(info)
    }
    fn endpoint(domain: &DynDomain, info: &Info) -> fabric::Result<DynEndpoint> {
        domain.endpoint(info)
    }
    fn cq(domain: &DynDomain, attr: &CqAttr) -> fabric::Result<DCq<C::Entry>> {
        let cq = domain.cq(&CqAttr {
            format: <C::Entry as DynRead>::FORMAT,
            ..*attr
        })?;
        Ok(DCq {
            cq,
            auto: is_auto_info(domain.info()),
            _entry: PhantomData,
        })
    }
    fn cq_in_set(
        domain: &DynDomain,
        attr: &CqAttr,
        set: &dyn WaitSetOps,
    ) -> fabric::Result<DCq<C::Entry>> {
        let cq = domain.cq_in_set(
            &CqAttr {
                format: <C::Entry as DynRead>::FORMAT,
                ..*attr
            },
            set,
        )?;
        Ok(DCq {
            cq,
            auto: is_auto_info(domain.info()),
            _entry: PhantomData,
        })
    }
    fn cntr(domain: &DynDomain, attr: &CntrAttr) -> fabric::Result<DynCntr> {
        domain.cntr(attr)
    }
    fn av(domain: &DynDomain, attr: &AvAttr) -> fabric::Result<DynAv> {
        domain.av(attr)
    }
    fn mr_reg<'a>(
        domain: &DynDomain,
        buf: &'a mut [u8],
        attr: &MrAttr,
    ) -> fabric::Result<DynMr<'a>> {
        domain.mr_reg(buf, attr)
    }
    // The run-time layer has no connection management calls (it offers no MSG
    // endpoint), so the dyn instantiations run on RDM nodes only.
    fn listen(
        _fabric: &DynFabric,
        _info: &Info,
        _eq: &dyn EqOps,
    ) -> fabric::Result<(Vec<u8>, Box<dyn std::any::Any>)> {
        Err(Error::NotSupported)
    }
    fn connect(_ep: &DynEndpoint, _addr: &[u8], _data: &[u8]) -> fabric::Result<()> {
        Err(Error::NotSupported)
    }
    fn accept(_ep: &DynEndpoint, _data: &[u8]) -> fabric::Result<()> {
        Err(Error::NotSupported)
    }
}

macro_rules! dyn_cfg {
    ($($(#[$m:meta])* $name:ident: $t:ident, $p:ident, $a:ident => $imp:ident, $e:ty;)*) => {$(
        $(#[$m])*
        pub enum $name {}
        impl DynCfg for $name {
            const THREADING: ThreadingLevel = ThreadingLevel::$t;
            const PROGRESS: ProgressMode = ProgressMode::$p;
            const AV: AvKind = AvKind::$a;
            const IMPL: ThreadingLevel = ThreadingLevel::$imp;
            type Entry = $e;
        }
    )*};
}

dyn_cfg! {
    /// Nothing requested: ThreadDomain, Manual, Table; entries read as [`DynEntry`].
    DynDefault: Unspec, Unspec, Unspec => Domain, DynEntry;
    /// `FI_THREAD_SAFE` and `FI_PROGRESS_AUTO`.
    DynSafeAuto: Safe, Auto, Unspec => Safe, CqTaggedEntry;
    /// `FI_THREAD_ENDPOINT` (served by the thread-safe stack) and `FI_AV_MAP`.
    DynEpMap: Endpoint, Manual, Map => Safe, CqTaggedEntry;
    /// Default choices, `FI_CQ_FORMAT_CONTEXT` CQs.
    DynCqContext: Unspec, Unspec, Unspec => Domain, CqEntry;
    /// Default choices, `FI_CQ_FORMAT_MSG` CQs.
    DynCqMsg: Unspec, Unspec, Unspec => Domain, CqMsgEntry;
    /// Default choices, `FI_CQ_FORMAT_DATA` CQs.
    DynCqData: Unspec, Unspec, Unspec => Domain, CqDataEntry;
}

// ---------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------

/// One endpoint with everything bound: CQ (transmit and receive), a transmit-side and a
/// receive-side counter, and an AV (RDM) or an EQ (MSG).
pub struct Node<A: Api> {
    /// The fabric.
    pub fabric: A::Fabric,
    /// The domain (its own; call `domain.progress()` to drive this node by hand).
    pub domain: A::Domain,
    /// CQ bound with `TRANSMIT | RECV`, `wait_obj: Unspec` (so `sread` works).
    pub cq: A::Cq,
    /// An AV of the domain, bound to `ep` if it is an RDM endpoint (an MSG endpoint
    /// binds none).
    pub av: A::Av,
    /// The enabled endpoint.
    pub ep: A::Ep,
    /// Counter bound with `TRANSMIT | WRITE | READ`.
    pub cntr_tx: A::Cntr,
    /// Counter bound with `RECV | REMOTE_WRITE | REMOTE_READ`.
    pub cntr_rx: A::Cntr,
    /// The info everything was opened with (after the tweak).
    pub info: Info,
    /// The EQ bound to an MSG endpoint (its connection events); `None` for RDM.
    pub eq: Option<Box<dyn EqOps>>,
    /// The passive endpoint an accepting MSG node was reached through, kept open for
    /// the node's life.
    pub pep: Option<Box<dyn std::any::Any>>,
}

/// Capabilities the suites ask for: every primary capability of the core (messages,
/// tagged, RMA, atomics, multi-receive, triggered operations, fences, RMA events) plus the
/// secondary ones tests rely on (`FI_SOURCE`, `FI_DIRECTED_RECV`, ...). The provider
/// under test must offer all of them.
pub const TEST_CAPS: Caps = Caps::MSG
    .union(Caps::TAGGED)
    .union(Caps::RMA)
    .union(Caps::ATOMIC)
    .union(Caps::MULTI_RECV)
    .union(Caps::TRIGGER)
    .union(Caps::FENCE)
    .union(Caps::RMA_EVENT)
    .union(Caps::SOURCE)
    .union(Caps::DIRECTED_RECV)
    .union(Caps::NAMED_RX_CTX)
    .union(Caps::SHARED_AV);

/// The capabilities that only make sense with an AV: source addresses, receives
/// filtered by source, named receive contexts, shared AVs. A connection has one peer
/// and no AV, so the MSG half of the suite asks for [`TEST_CAPS`] without them.
pub const AV_CAPS: Caps = Caps::SOURCE
    .union(Caps::DIRECTED_RECV)
    .union(Caps::NAMED_RX_CTX)
    .union(Caps::SHARED_AV);

/// The first RDM info `getinfo` returns for `A` with [`TEST_CAPS`] requested.
pub fn rdm_info<A: Api>() -> Info {
    info_for::<A>(EpType::Rdm)
}

/// The first info of endpoint type `A::EP_TYPE` (what the suite's nodes use).
pub fn suite_info<A: Api>() -> Info {
    info_for::<A>(A::EP_TYPE)
}

/// The first info of endpoint type `ep_type` with [`TEST_CAPS`] requested (less
/// [`AV_CAPS`] for MSG).
pub fn info_for<A: Api>(ep_type: EpType) -> Info {
    let caps = match ep_type {
        EpType::Msg => TEST_CAPS.difference(AV_CAPS),
        _ => TEST_CAPS,
    };
    let hints = Hints::new().caps(caps).ep_type(ep_type);
    let mut infos =
        A::getinfo(&hints).unwrap_or_else(|e| panic!("getinfo({ep_type:?}, {caps:?}) failed: {e}"));
    assert!(!infos.is_empty(), "getinfo returned an empty list");
    let info = infos.remove(0);
    assert_eq!(info.ep_attr.ep_type, ep_type, "getinfo's endpoint type");
    info
}

/// Opens a node on its own fabric and domain from the suite's info
/// ([`suite_info`]), changed by `tweak` before anything is opened. An MSG node is
/// enabled but not connected; [`pair`] connects two.
pub fn node<A: Api>(tweak: impl FnOnce(&mut Info)) -> Node<A> {
    let mut info = suite_info::<A>();
    tweak(&mut info);
    node_from_info(info)
}

/// Opens a node from `info` as it is.
pub fn node_from_info<A: Api>(info: Info) -> Node<A> {
    let fabric = A::fabric(&info).expect("fi_fabric");
    node_in_fabric::<A>(fabric, info)
}

/// The CQ attributes of a default node.
pub const NODE_CQ_ATTR: CqAttr = CqAttr {
    wait_obj: WaitObj::Unspec,
    ..CqAttr::DEFAULT
};

/// Opens a node in a new domain of an existing `fabric`.
pub fn node_in_fabric<A: Api>(fabric: A::Fabric, info: Info) -> Node<A> {
    node_full::<A>(fabric, info, &NODE_CQ_ATTR, BindFlags::empty(), None)
}

/// As [`node`], with the CQ opened with `cq_attr` and bound with
/// `TRANSMIT | RECV | cq_bind` (e.g. `SELECTIVE_COMPLETION`).
pub fn node_with<A: Api>(
    tweak: impl FnOnce(&mut Info),
    cq_attr: &CqAttr,
    cq_bind: BindFlags,
) -> Node<A> {
    let mut info = suite_info::<A>();
    tweak(&mut info);
    let fabric = A::fabric(&info).expect("fi_fabric");
    node_full::<A>(fabric, info, cq_attr, cq_bind, None)
}

/// Opens the node's objects and binds them: the AV to an RDM endpoint, `eq` (or a new
/// EQ of the fabric) to an MSG endpoint.
fn node_full<A: Api>(
    fabric: A::Fabric,
    info: Info,
    cq_attr: &CqAttr,
    cq_bind: BindFlags,
    eq: Option<Box<dyn EqOps>>,
) -> Node<A> {
    let domain = A::domain(&fabric, &info).expect("fi_domain");
    let cq = A::cq(&domain, cq_attr).expect("fi_cq_open");
    let av = A::av(&domain, &AvAttr::DEFAULT).expect("fi_av_open");
    let cntr_tx = A::cntr(&domain, &CntrAttr::DEFAULT).expect("fi_cntr_open (tx)");
    let cntr_rx = A::cntr(&domain, &CntrAttr::DEFAULT).expect("fi_cntr_open (rx)");
    let ep = A::endpoint(&domain, &info).expect("fi_endpoint");
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV | cq_bind)
        .expect("bind cq");
    ep.bind_cntr(
        &cntr_tx,
        BindFlags::TRANSMIT | BindFlags::WRITE | BindFlags::READ,
    )
    .expect("bind tx counter");
    ep.bind_cntr(
        &cntr_rx,
        BindFlags::RECV | BindFlags::REMOTE_WRITE | BindFlags::REMOTE_READ,
    )
    .expect("bind rx counter");
    let eq = if info.ep_attr.ep_type == EpType::Msg {
        let eq = eq.unwrap_or_else(|| fabric.eq(&EqAttr::DEFAULT).expect("fi_eq_open"));
        ep.bind_eq(&*eq).expect("bind eq");
        Some(eq)
    } else {
        ep.bind_av(&av).expect("bind av");
        None
    };
    ep.enable().expect("fi_enable");
    Node {
        fabric,
        domain,
        cq,
        av,
        ep,
        cntr_tx,
        cntr_rx,
        info,
        eq,
        pep: None,
    }
}

/// How [`pair_of`] opens one node: the tweak of its info, its CQ's attributes and the
/// extra flags its CQ is bound with (as [`node_with`]).
pub struct NodeSpec<'a> {
    /// Applied to the node's info before anything is opened.
    pub tweak: &'a dyn Fn(&mut Info),
    /// The CQ's attributes.
    pub cq_attr: &'a CqAttr,
    /// Bound with the CQ besides `TRANSMIT | RECV`.
    pub cq_bind: BindFlags,
}

fn no_tweak(_: &mut Info) {}

impl NodeSpec<'static> {
    /// A default node: no tweak, [`NODE_CQ_ATTR`], no extra bind flags.
    pub const DEFAULT: NodeSpec<'static> = NodeSpec {
        tweak: &no_tweak,
        cq_attr: &NODE_CQ_ATTR,
        cq_bind: BindFlags::empty(),
    };
}

/// Two default nodes in separate domains that reach each other:
/// `(a, b, b as seen from a, a as seen from b)`. RDM nodes have the other in their AV;
/// MSG nodes are connected (`a` connected to a listener of `b`'s fabric, `b` accepted)
/// and both addresses are `FI_ADDR_UNSPEC`, which is what data calls on a connected
/// endpoint take.
pub fn pair<A: Api>() -> (Node<A>, Node<A>, FiAddr, FiAddr) {
    pair_with::<A>(|_| {})
}

/// As [`pair`], with `tweak` applied to both nodes' info.
pub fn pair_with<A: Api>(tweak: impl Fn(&mut Info)) -> (Node<A>, Node<A>, FiAddr, FiAddr) {
    let spec = NodeSpec {
        tweak: &tweak,
        ..NodeSpec::DEFAULT
    };
    pair_of::<A>(&spec, &spec)
}

/// As [`pair`], each node opened as its spec says.
pub fn pair_of<A: Api>(sa: &NodeSpec<'_>, sb: &NodeSpec<'_>) -> (Node<A>, Node<A>, FiAddr, FiAddr) {
    pair_across::<A, A>(sa, sb)
}

/// As [`pair_of`], the nodes of two APIs (two stacks of the provider under test) with
/// the same endpoint type.
pub fn pair_across<A: Api, B: Api>(
    sa: &NodeSpec<'_>,
    sb: &NodeSpec<'_>,
) -> (Node<A>, Node<B>, FiAddr, FiAddr) {
    assert_eq!(A::EP_TYPE, B::EP_TYPE, "a pair has one endpoint type");
    if A::EP_TYPE == EpType::Msg {
        let (a, b) = connect_pair::<A, B>(sa, sb);
        return (a, b, FiAddr::UNSPEC, FiAddr::UNSPEC);
    }
    let a = node_with::<A>(sa.tweak, sa.cq_attr, sa.cq_bind);
    let b = node_with::<B>(sb.tweak, sb.cq_attr, sb.cq_bind);
    let b_at_a = a.av.insert(&b.ep.name()).expect("insert b into a's AV");
    let a_at_b = b.av.insert(&a.ep.name()).expect("insert a into b's AV");
    (a, b, b_at_a, a_at_b)
}

/// The connection data the pair builder's connect and accept carry.
const CONNECT_DATA: &[u8] = b"suite connect";
const ACCEPT_DATA: &[u8] = b"suite accept";

/// Connects a new MSG node `a` to a listener on `b`'s fabric and accepts it with a new
/// node `b` opened from the `FI_CONNREQ` info: `(a, b)` once both EQs reported
/// `FI_CONNECTED`.
fn connect_pair<A: Api, B: Api>(sa: &NodeSpec<'_>, sb: &NodeSpec<'_>) -> (Node<A>, Node<B>) {
    let mut linfo = suite_info::<B>();
    (sb.tweak)(&mut linfo);
    let bfabric = B::fabric(&linfo).expect("fi_fabric (listener)");
    let beq = bfabric.eq(&EqAttr::DEFAULT).expect("fi_eq_open (listener)");
    let (lname, pep) = B::listen(&bfabric, &linfo, &*beq).expect("fi_passive_ep + fi_listen");
    let a = node_with::<A>(sa.tweak, sa.cq_attr, sa.cq_bind);
    A::connect(&a.ep, &lname, CONNECT_DATA).expect("fi_connect");
    let req = expect_cm_event(&*beq, EqEvent::ConnReq, &[&a.domain], "listener");
    assert_eq!(req.info.as_deref(), Some(CONNECT_DATA), "FI_CONNREQ data");
    let mut binfo = *req.conn.expect("FI_CONNREQ carries an info");
    assert!(
        binfo.handle.is_some(),
        "the FI_CONNREQ info names the request"
    );
    assert_eq!(binfo.ep_attr.ep_type, EpType::Msg);
    (sb.tweak)(&mut binfo);
    let mut b = node_full::<B>(bfabric, binfo, sb.cq_attr, sb.cq_bind, Some(beq));
    b.pep = Some(pep);
    B::accept(&b.ep, ACCEPT_DATA).expect("fi_accept");
    let aeq = a.eq.as_deref().expect("an MSG node has an EQ");
    let beq = b.eq.as_deref().expect("an MSG node has an EQ");
    let e = expect_cm_event(
        aeq,
        EqEvent::Connected,
        &[&a.domain, &b.domain],
        "connector",
    );
    assert_eq!(e.info.as_deref(), Some(ACCEPT_DATA), "FI_CONNECTED data");
    expect_cm_event(beq, EqEvent::Connected, &[&a.domain, &b.domain], "acceptor");
    (a, b)
}

/// Reads `eq` until an event, driving progress on `domains` meanwhile; panics on an
/// error event, an event other than `want`, or after [`DEADLINE`].
#[track_caller]
pub fn expect_cm_event(
    eq: &dyn EqOps,
    want: EqEvent,
    domains: &[&dyn DomainOps],
    side: &str,
) -> EqEntry {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match eq.read(false) {
            Ok(e) => {
                assert_eq!(e.event, want, "{side}: unexpected EQ event {e:?}");
                return e;
            }
            Err(Error::Avail) => panic!(
                "{side}: waiting for {want:?}, got error event {:?}",
                eq.read_err(false)
            ),
            Err(Error::Again) => {}
            Err(e) => panic!("{side}: fi_eq_read failed: {e}"),
        }
        progress_all(domains);
        assert!(
            Instant::now() < deadline,
            "{side}: no {want:?} within {DEADLINE:?}"
        );
        pause(any_auto(domains));
    }
}

// ---------------------------------------------------------------------------------------
// Bounded waits
// ---------------------------------------------------------------------------------------

/// Runs one progress pass on each domain (no-op work under auto progress, harmless).
pub fn progress_all(domains: &[&dyn DomainOps]) {
    for d in domains {
        d.progress();
    }
}

/// Whether any of `domains` runs a progress thread.
fn any_auto(domains: &[&dyn DomainOps]) -> bool {
    domains.iter().any(|d| is_auto_info(d.info()))
}

/// Between polls: let a progress thread run (it shares the two cores), or just yield.
fn pause(auto: bool) {
    if auto {
        std::thread::sleep(Duration::from_micros(200));
    } else {
        std::thread::yield_now();
    }
}

/// Reads one entry from `cq`, driving progress on `others` (the peers' domains) between
/// attempts. `Ok(entry)` for a completion, `Err(error entry)` for an error completion.
/// Panics after [`DEADLINE`].
pub fn wait_one<C: TestCq>(cq: &C, others: &[&dyn DomainOps]) -> Result<C::Entry, CqErrEntry> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut e = [C::Entry::default(); 1];
        match cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Ok(n) => panic!("cq.read into a 1-entry buffer returned {n}"),
            Err(Error::Avail) => return Err(cq.read_err().expect("read_err after Avail")),
            Err(Error::Again) => {}
            Err(e) => panic!("cq.read failed: {e}"),
        }
        progress_all(others);
        assert!(
            Instant::now() < deadline,
            "no completion within {DEADLINE:?}"
        );
        pause(cq.is_auto());
    }
}

/// As [`wait_one`], with the source address from `fi_cq_readfrom`.
pub fn wait_one_from<C: TestCq>(
    cq: &C,
    others: &[&dyn DomainOps],
) -> Result<(C::Entry, FiAddr), CqErrEntry> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut e = [C::Entry::default(); 1];
        let mut src = [FiAddr(0xdead); 1];
        match cq.read_from(&mut e, &mut src) {
            Ok(1) => return Ok((e[0], src[0])),
            Ok(n) => panic!("cq.read_from into a 1-entry buffer returned {n}"),
            Err(Error::Avail) => return Err(cq.read_err().expect("read_err after Avail")),
            Err(Error::Again) => {}
            Err(e) => panic!("cq.read_from failed: {e}"),
        }
        progress_all(others);
        assert!(
            Instant::now() < deadline,
            "no completion (readfrom) within {DEADLINE:?}"
        );
        pause(cq.is_auto());
    }
}

/// A successful completion; panics on an error entry or timeout.
#[track_caller]
pub fn wait_ok<C: TestCq>(cq: &C, others: &[&dyn DomainOps]) -> C::Entry {
    match wait_one(cq, others) {
        Ok(e) => e,
        Err(e) => panic!("expected a completion, got error entry {e:?}"),
    }
}

/// An error completion; panics on a successful entry or timeout.
#[track_caller]
pub fn wait_err<C: TestCq>(cq: &C, others: &[&dyn DomainOps]) -> CqErrEntry {
    match wait_one(cq, others) {
        Ok(e) => panic!("expected an error entry, got completion {e:?}"),
        Err(e) => e,
    }
}

/// `n` successful completions, in CQ order.
#[track_caller]
pub fn wait_n<C: TestCq>(cq: &C, others: &[&dyn DomainOps], n: usize) -> Vec<C::Entry> {
    (0..n).map(|_| wait_ok(cq, others)).collect()
}

/// Drives progress on `cq`'s domain (by reading) and `others` for [`QUIET`] and asserts
/// nothing, neither completion nor error, shows up.
#[track_caller]
pub fn assert_cq_empty<C: TestCq>(cq: &C, others: &[&dyn DomainOps]) {
    let end = Instant::now() + QUIET;
    loop {
        let mut e = [C::Entry::default(); 1];
        match cq.read(&mut e) {
            Err(Error::Again) => {}
            Ok(_) => panic!("expected an empty CQ, got {:?}", e[0]),
            Err(Error::Avail) => panic!("expected an empty CQ, got {:?}", cq.read_err()),
            Err(e) => panic!("cq.read failed: {e}"),
        }
        progress_all(others);
        if Instant::now() >= end {
            return;
        }
        pause(cq.is_auto());
    }
}

/// Waits until `cntr` reads at least `value`, driving `others`. Panics after [`DEADLINE`].
#[track_caller]
pub fn wait_cntr(cntr: &dyn CntrOps, value: u64, others: &[&dyn DomainOps]) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let v = cntr.read();
        if v >= value {
            return;
        }
        progress_all(others);
        assert!(
            Instant::now() < deadline,
            "counter stuck at {v}, waited for {value} for {DEADLINE:?}"
        );
        pause(any_auto(others));
    }
}

/// Retries `f` while it returns `Err(Again)`, driving progress on `domains`.
#[track_caller]
pub fn retry<T>(domains: &[&dyn DomainOps], mut f: impl FnMut() -> fabric::Result<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match f() {
            Ok(v) => return v,
            Err(Error::Again) => {}
            Err(e) => panic!("operation failed: {e}"),
        }
        progress_all(domains);
        assert!(
            Instant::now() < deadline,
            "still Err(Again) after {DEADLINE:?}"
        );
        pause(any_auto(domains));
    }
}

/// Asserts the fields of an entry that its format has: context always, then flags
/// (containing `flags`), length, tag and data when present in the format and given.
#[track_caller]
pub fn check_entry<E: EntryView>(
    e: &E,
    ctx: Context,
    flags: CqFlags,
    len: Option<usize>,
    tag: Option<u64>,
    data: Option<u64>,
) {
    assert_eq!(e.context(), ctx, "context of {e:?}");
    if let Some(f) = e.flags() {
        assert!(f.contains(flags), "flags {f:?} of {e:?} lack {flags:?}");
    }
    if let (Some(l), Some(want)) = (e.len(), len) {
        assert_eq!(l, want, "len of {e:?}");
    }
    if let (Some(t), Some(want)) = (e.tag(), tag) {
        assert_eq!(t, want, "tag of {e:?}");
    }
    if let (Some(d), Some(want)) = (e.data(), data) {
        assert_eq!(d, want, "data of {e:?}");
    }
}

/// Instantiates generic test bodies for one API, as module `$m`:
///
/// ```ignore
/// conformance!(default, St<Stack<Prov>>, [msg_send, #[ignore = "why"] tagged_peek]);
/// ```
///
/// Each listed name must be a generic `fn name<A: Api>()` in the including file; the
/// generated `#[test] fn name()` calls `super::name::<$api>()`.
///
/// This macro and [`conformance_matrix`] are textually scoped (`#[macro_use] mod common;`),
/// not `#[macro_export]`ed: the module is declared inside an `include!`d file, and a
/// macro-expanded exported macro cannot be named by a `$crate::` path.
macro_rules! conformance {
    ($m:ident, $api:ty, [$($(#[$attr:meta])* $t:ident),* $(,)?]) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                $(#[$attr])*
                fn $t() {
                    super::$t::<$api>()
                }
            )*
        }
    };
}

/// Instantiates the listed generic tests for the whole matrix: the static stacks (the
/// default stack, each threading level, auto progress, each CQ format and the map AV)
/// and the same choices made at run time through `fabric::dynamic` over
/// `Registry<(Prov,)>`, where `Prov` is the provider alias of the including crate.
///
/// | module          | API                                                             |
/// |-----------------|-----------------------------------------------------------------|
/// | `default`       | `St<Stack<Prov>>` (ThreadDomain, Manual, CqTagged, Table)       |
/// | `safe`          | `St<Stack<Prov, ThreadSafe>>`                                   |
/// | `thread_ep_map` | `St<Stack<Prov, ThreadEndpoint, Manual, CqTagged, Map>>`        |
/// | `completion`    | `St<Stack<Prov, ThreadCompletion, Manual>>`                     |
/// | `safe_auto`     | `St<Stack<Prov, ThreadSafe, Auto>>`                             |
/// | `cq_context`    | `St<Stack<Prov, ThreadDomain, Manual, CqContext>>`              |
/// | `cq_msg`        | `St<Stack<Prov, ThreadDomain, Manual, CqMsg>>`                  |
/// | `cq_data`       | `St<Stack<Prov, ThreadDomain, Manual, CqData>>`                 |
/// | `dyn_default`   | `Dy<DynDefault>`: no hints; CQ entries read as `DynEntry`       |
/// | `dyn_safe_auto` | `Dy<DynSafeAuto>`: `FI_THREAD_SAFE`, `FI_PROGRESS_AUTO`         |
/// | `dyn_ep_map`    | `Dy<DynEpMap>`: `FI_THREAD_ENDPOINT`, `FI_AV_MAP`               |
/// | `dyn_cq_context`| `Dy<DynCqContext>`: `FI_CQ_FORMAT_CONTEXT` through the dyn CQ  |
/// | `dyn_cq_msg`    | `Dy<DynCqMsg>`: `FI_CQ_FORMAT_MSG`                              |
/// | `dyn_cq_data`   | `Dy<DynCqData>`: `FI_CQ_FORMAT_DATA`                            |
macro_rules! conformance_matrix {
    ([$($tests:tt)*]) => {
        conformance!(default, $crate::common::St<fabric::Stack<$crate::Prov>>, [$($tests)*]);
        conformance!(
            safe,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadSafe>>,
            [$($tests)*]
        );
        conformance!(
            thread_ep_map,
            $crate::common::St<
                fabric::Stack<$crate::Prov, fabric::ThreadEndpoint, fabric::Manual, fabric::CqTagged, fabric::Map>,
            >,
            [$($tests)*]
        );
        conformance!(
            completion,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadCompletion, fabric::Manual>>,
            [$($tests)*]
        );
        conformance!(
            safe_auto,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadSafe, fabric::Auto>>,
            [$($tests)*]
        );
        conformance!(
            cq_context,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadDomain, fabric::Manual, fabric::CqContext>>,
            [$($tests)*]
        );
        conformance!(
            cq_msg,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadDomain, fabric::Manual, fabric::CqMsg>>,
            [$($tests)*]
        );
        conformance!(
            cq_data,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadDomain, fabric::Manual, fabric::CqData>>,
            [$($tests)*]
        );
        conformance!(dyn_default, $crate::common::Dy<$crate::common::DynDefault>, [$($tests)*]);
        conformance!(dyn_safe_auto, $crate::common::Dy<$crate::common::DynSafeAuto>, [$($tests)*]);
        conformance!(dyn_ep_map, $crate::common::Dy<$crate::common::DynEpMap>, [$($tests)*]);
        conformance!(dyn_cq_context, $crate::common::Dy<$crate::common::DynCqContext>, [$($tests)*]);
        conformance!(dyn_cq_msg, $crate::common::Dy<$crate::common::DynCqMsg>, [$($tests)*]);
        conformance!(dyn_cq_data, $crate::common::Dy<$crate::common::DynCqData>, [$($tests)*]);
    };
}

/// Instantiates the listed generic tests on connected MSG endpoints for the static
/// stacks of [`conformance_matrix`] (`St<_, MsgEp>`; same module names). The run-time
/// layer has no MSG endpoint (`fabric::dynamic` refuses `FI_EP_MSG`; tested in
/// `tests/conformance_cm.rs`), so there is no dyn half.
macro_rules! conformance_msg_matrix {
    ([$($tests:tt)*]) => {
        conformance!(
            default,
            $crate::common::St<fabric::Stack<$crate::Prov>, $crate::common::MsgEp>,
            [$($tests)*]
        );
        conformance!(
            safe,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadSafe>, $crate::common::MsgEp>,
            [$($tests)*]
        );
        conformance!(
            thread_ep_map,
            $crate::common::St<
                fabric::Stack<$crate::Prov, fabric::ThreadEndpoint, fabric::Manual, fabric::CqTagged, fabric::Map>,
                $crate::common::MsgEp,
            >,
            [$($tests)*]
        );
        conformance!(
            completion,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadCompletion, fabric::Manual>, $crate::common::MsgEp>,
            [$($tests)*]
        );
        conformance!(
            safe_auto,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadSafe, fabric::Auto>, $crate::common::MsgEp>,
            [$($tests)*]
        );
        conformance!(
            cq_context,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadDomain, fabric::Manual, fabric::CqContext>, $crate::common::MsgEp>,
            [$($tests)*]
        );
        conformance!(
            cq_msg,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadDomain, fabric::Manual, fabric::CqMsg>, $crate::common::MsgEp>,
            [$($tests)*]
        );
        conformance!(
            cq_data,
            $crate::common::St<fabric::Stack<$crate::Prov, fabric::ThreadDomain, fabric::Manual, fabric::CqData>, $crate::common::MsgEp>,
            [$($tests)*]
        );
    };
}

/// The two ways a suite file's test lists are instantiated. A suite file ends with
///
/// ```ignore
/// suite_matrix!([tests for every endpoint type], rdm_only: [tests that need an AV]);
/// ```
///
/// where `suite_matrix` is, by default, [`instantiate::rdm_suite`] (glob-imported from
/// this module): everything on RDM endpoints for the whole [`conformance_matrix`]. A
/// crate that runs the suite on connected MSG endpoints says so at its root, next to
/// `Prov`, with an import that shadows the glob one:
///
/// ```ignore
/// type Prov = fabric_loopback::Loopback;
/// use common::msg_suite as suite_matrix;
/// include!("suite/msg.rs");
/// ```
///
/// and gets [`instantiate::msg_suite`]: the first list on MSG endpoints for the static
/// stacks ([`conformance_msg_matrix`]).
pub mod instantiate {
    /// Every listed test, both lists, on RDM endpoints for the whole matrix.
    macro_rules! rdm_suite {
        (
            [$($(#[$a:meta])* $t:ident),* $(,)?],
            rdm_only: [$($(#[$ra:meta])* $r:ident),* $(,)?] $(,)?
        ) => {
            conformance_matrix!([$($(#[$a])* $t,)* $($(#[$ra])* $r,)*]);
        };
    }

    /// The first list on connected MSG endpoints; the `rdm_only` list is not run. Its
    /// bodies are still named here, as function pointers nobody calls, so that they
    /// type-check against the MSG API and are not dead code of this crate.
    macro_rules! msg_suite {
        (
            [$($(#[$a:meta])* $t:ident),* $(,)?],
            rdm_only: [$($(#[$ra:meta])* $r:ident),* $(,)?] $(,)?
        ) => {
            conformance_msg_matrix!([$($(#[$a])* $t,)*]);
            const _: &[fn()] = &[
                $($r::<$crate::common::St<fabric::Stack<$crate::Prov>, $crate::common::MsgEp>>,)*
            ];
        };
    }

    pub(crate) use {msg_suite, rdm_suite};
}

pub(crate) use instantiate::{msg_suite, rdm_suite as suite_matrix};
