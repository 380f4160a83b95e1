//! Fabrics and domains: the roots of the object tree, and the progress engine.

use std::sync::Arc;

use crate::atomic::{AtomicClass, AtomicOp, Datatype};
use crate::attr::WaitObj;
use crate::attr::{AvAttr, CntrAttr, CqAttr, EqAttr, MrAttr, PollAttr, WaitAttr};
use crate::av::AddressVector;
use crate::cntr::Counter;
use crate::config::{Config, Progress, Threading};
use crate::cq::Cq;
use crate::endpoint::{Endpoint, PassiveEndpoint, ScalableEndpoint, SharedRx, SharedTx};
use crate::engine::{DomainInner, FabricInner};
use crate::eq::EventQueue;
use crate::error::{Error, Result};
use crate::flags::InfoFlags;
use crate::info::{self, Hints, Info};
use crate::limits::MAX_ATOMIC_SIZE;
use crate::mr::MemoryRegion;
use crate::provider::Provider;
use crate::wait::{PollSet, WaitSet};

/// `fi_getinfo` for stack `S`: the provider's candidates, specialized to the stack's
/// threading, progress and AV type, filtered by `hints`, best first.
/// `Err(NoData)` when nothing matches.
///
/// ```
/// use fabric::{getinfo, Hints, DefaultStack, flags::Caps, attr::EpType};
/// type Net = DefaultStack<fabric_loopback::Loopback>;
/// let infos = getinfo::<Net>(Some(&Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm))).unwrap();
/// assert_eq!(infos[0].fabric_attr.prov_name, "loopback");
/// ```
pub fn getinfo<S: Config>(hints: Option<&Hints>) -> Result<Vec<Info>> {
    let cands: Vec<Info> = S::Provider::candidates()
        .into_iter()
        .map(|mut i| {
            i.domain_attr.threading = <S::Threading as Threading>::LEVEL;
            i.domain_attr.data_progress = <S::Progress as Progress>::MODE;
            i.domain_attr.control_progress = <S::Progress as Progress>::MODE;
            i.domain_attr.av_type = <S::Av as crate::av_type::AvType>::KIND;
            i
        })
        .collect();
    info::filter(&cands, hints)
}

/// `fi_getinfo` with `node`, `service` and `flags`: [`getinfo`], with the address the
/// provider makes of node and service ([`Provider::name_from_svc`]) in each entry.
///
/// As in libfabric: with [`InfoFlags::SOURCE`], or a service without a node, they name
/// the local address, which goes to `src_addr` (an endpoint opened with the entry binds
/// there; [`Provider::source_from_svc`]); otherwise they name a peer, which goes to
/// `dest_addr` (where [`Endpoint::connect`](crate::Endpoint::connect) may send). With
/// neither, this is [`getinfo`]. Errors are the provider's: `AddrNotAvail` for a node
/// it cannot resolve, `Inval` for a malformed service, `NoSys` for a provider whose
/// addresses do not come from nodes and services.
///
/// ```
/// use fabric::{getinfo_node, DefaultStack, flags::InfoFlags};
/// type Net = DefaultStack<fabric_loopback::Loopback>;
/// let infos = getinfo_node::<Net>(None, Some("7"), InfoFlags::SOURCE, None).unwrap();
/// assert_eq!(infos[0].src_addr.as_deref(), Some(&7u64.to_le_bytes()[..]));
/// ```
pub fn getinfo_node<S: Config>(
    node: Option<&str>,
    service: Option<&str>,
    flags: InfoFlags,
    hints: Option<&Hints>,
) -> Result<Vec<Info>> {
    let mut infos = getinfo::<S>(hints)?;
    if node.is_none() && service.is_none() {
        return Ok(infos);
    }
    let (n, svc) = (node.unwrap_or(""), service.unwrap_or(""));
    if flags.contains(InfoFlags::SOURCE) || node.is_none() {
        let src = S::Provider::source_from_svc(n, svc)?;
        for i in &mut infos {
            i.src_addr = Some(src.clone());
        }
    } else {
        let dest = S::Provider::name_from_svc(n, svc)?;
        for i in &mut infos {
            i.dest_addr = Some(dest.clone());
        }
    }
    Ok(infos)
}

/// A fabric (`fi_fabric`): the provider's network, parent of domains.
pub struct Fabric<S: Config> {
    inner: Arc<FabricInner<S>>,
}

impl<S: Config> Fabric<S> {
    /// `fi_fabric`: opens the fabric an `Info` from [`getinfo`] describes.
    pub fn open(info: &Info) -> Result<Self> {
        // The array injects trust `InjectSize` (and skip the length tests, the message
        // size one included), the slice injects `INJECT_SIZE`: a provider whose limits
        // disagree fails to build here.
        const {
            assert!(
                S::Provider::INJECT_SIZE
                    == <<S::Provider as Provider>::InjectSize as typenum::Unsigned>::USIZE,
                "Provider::INJECT_SIZE must equal Provider::InjectSize"
            );
            assert!(
                S::Provider::INJECT_SIZE <= S::Provider::MAX_MSG_SIZE,
                "Provider::INJECT_SIZE must not exceed Provider::MAX_MSG_SIZE"
            );
        };
        if !info.fabric_attr.prov_name.is_empty() && info.fabric_attr.prov_name != S::Provider::NAME
        {
            return Err(Error::NoDev);
        }
        Ok(Fabric {
            inner: Arc::new(FabricInner::new(info)),
        })
    }

    /// `fi_domain`: opens a domain.
    pub fn domain(&self, info: &Info) -> Result<Domain<S>> {
        Domain::open(&self.inner, info)
    }

    /// `fi_eq_open` on the fabric (for events not tied to a domain).
    pub fn eq(&self, attr: &EqAttr) -> Result<EventQueue<S>> {
        EventQueue::open(attr, None, None)
    }

    /// `fi_eq_open` with `FI_WAIT_SET`: the EQ signals `set`'s wait object, and
    /// [`WaitSet::wait`] returns when it holds an event.
    pub fn eq_in_set(&self, attr: &EqAttr, set: &WaitSet<S>) -> Result<EventQueue<S>> {
        let eq = EventQueue::open(
            &EqAttr {
                wait_obj: WaitObj::Set,
                ..*attr
            },
            None,
            Some(set.waiter().clone()),
        )?;
        set.attach_eq(&eq);
        Ok(eq)
    }

    /// `fi_passive_ep`: a passive endpoint for an MSG `info`, to listen for
    /// connection requests (`NotSupported` on a provider without MSG endpoints).
    pub fn passive_ep(&self, info: &Info) -> Result<PassiveEndpoint<S>> {
        PassiveEndpoint::open(info)
    }

    /// `fi_wait_open`.
    pub fn wait_set(&self, attr: &WaitAttr) -> Result<WaitSet<S>> {
        WaitSet::open(attr)
    }

    /// The info the fabric was opened with.
    pub fn info(&self) -> &Info {
        &self.inner.info
    }
}

/// A domain (`fi_domain`): the parent of endpoints, CQs, counters, AVs and MRs, and the
/// unit of progress.
pub struct Domain<S: Config> {
    pub(crate) inner: Arc<DomainInner<S>>,
}

impl<S: Config> Domain<S> {
    fn open(fabric: &Arc<FabricInner<S>>, info: &Info) -> Result<Self> {
        let inner = DomainInner::open(fabric, info)?;
        Ok(Domain { inner })
    }

    /// The info the domain was opened with.
    pub fn info(&self) -> &Info {
        self.inner.info()
    }

    /// `fi_endpoint`: an RDM or DGRAM endpoint (MSG endpoints come with connection-
    /// oriented providers: `Err(NotSupported)` here).
    pub fn endpoint(&self, info: &Info) -> Result<Endpoint<S>> {
        Endpoint::open(&self.inner, info)
    }

    /// `fi_scalable_ep`: an endpoint with `info.ep_attr.tx_ctx_cnt` transmit and
    /// `rx_ctx_cnt` receive contexts.
    pub fn scalable_endpoint(&self, info: &Info) -> Result<ScalableEndpoint<S>> {
        ScalableEndpoint::open(&self.inner, info)
    }

    /// `fi_stx_context`: a transmit context endpoints can share.
    pub fn shared_tx(&self, info: &Info) -> Result<SharedTx<S>> {
        SharedTx::open(&self.inner, info)
    }

    /// `fi_srx_context`: a receive context endpoints can share.
    pub fn shared_rx(&self, info: &Info) -> Result<SharedRx<S>> {
        SharedRx::open(&self.inner, info)
    }

    /// `fi_cq_open`.
    pub fn cq(&self, attr: &CqAttr) -> Result<Cq<S>> {
        Cq::open(&self.inner, attr, None)
    }

    /// `fi_cq_open` with `FI_WAIT_SET`: the CQ signals `set`.
    pub fn cq_in_set(&self, attr: &CqAttr, set: &WaitSet<S>) -> Result<Cq<S>> {
        let cq = Cq::open(
            &self.inner,
            &CqAttr {
                wait_obj: WaitObj::Set,
                ..*attr
            },
            Some(set.waiter().clone()),
        )?;
        set.attach_cq(&cq);
        Ok(cq)
    }

    /// `fi_cntr_open`.
    pub fn cntr(&self, attr: &CntrAttr) -> Result<Counter<S>> {
        Counter::open(&self.inner, attr, None)
    }

    /// `fi_cntr_open` with `FI_WAIT_SET`.
    pub fn cntr_in_set(&self, attr: &CntrAttr, set: &WaitSet<S>) -> Result<Counter<S>> {
        let c = Counter::open(
            &self.inner,
            &CntrAttr {
                wait_obj: WaitObj::Set,
                ..*attr
            },
            Some(set.waiter().clone()),
        )?;
        set.attach_cntr(&c);
        Ok(c)
    }

    /// `fi_eq_open` tied to this domain (reads progress it under manual progress).
    pub fn eq(&self, attr: &EqAttr) -> Result<EventQueue<S>> {
        EventQueue::open(attr, Some(self.inner.clone()), None)
    }

    /// `fi_av_open`.
    pub fn av(&self, attr: &AvAttr) -> Result<AddressVector<S>> {
        AddressVector::open(&self.inner, attr)
    }

    /// `fi_mr_reg`: registers `buf` with `attr.access`, `attr.offset` and
    /// `attr.requested_key` (used unless the domain is `FI_MR_PROV_KEY`).
    pub fn mr_reg<'a>(&self, buf: &'a mut [u8], attr: &MrAttr) -> Result<MemoryRegion<'a, S>> {
        MemoryRegion::register(&self.inner.shared, vec![buf], attr)
    }

    /// `fi_mr_regv`: registers several buffers as one region.
    pub fn mr_regv<'a>(
        &self,
        bufs: Vec<&'a mut [u8]>,
        attr: &MrAttr,
    ) -> Result<MemoryRegion<'a, S>> {
        MemoryRegion::register(&self.inner.shared, bufs, attr)
    }

    /// `fi_mr_regattr`.
    pub fn mr_regattr<'a>(
        &self,
        bufs: Vec<&'a mut [u8]>,
        attr: &MrAttr,
    ) -> Result<MemoryRegion<'a, S>> {
        MemoryRegion::register(&self.inner.shared, bufs, attr)
    }

    /// `fi_poll_open`.
    pub fn poll_set(&self, _attr: &PollAttr) -> Result<PollSet<S>> {
        Ok(PollSet::new(self.inner.clone()))
    }

    /// `fi_query_atomic`: the most elements of `dt` one `op` may carry, or an error
    /// when the combination is not supported.
    pub fn query_atomic(&self, class: AtomicClass, op: AtomicOp, dt: Datatype) -> Result<usize> {
        crate::atomic::valid_count(class, op, dt, MAX_ATOMIC_SIZE)
    }

    /// Runs one pass of the progress engine by hand (what CQ reads do under manual
    /// progress). Returns the number of packets handled.
    pub fn progress(&self) -> usize {
        self.inner.progress()
    }
}
