//! The dyn wrapper objects: thin structs around a boxed trait object of [`ops`](super::ops).
//!
//! Each wrapper implements the trait it wraps by forwarding (so it can be passed wherever
//! a `&dyn XxxOps` is expected, and binding it binds the static object inside), and has
//! inherent methods for what it opens, returning wrappers. Data calls come from the
//! traits: `use fabric::dynamic::prelude::*`.
//!
//! The wrappers are neither `Send` nor `Sync`: the threading level is a run-time value
//! here, so the compiler cannot check a promise about threads. Programs that share
//! objects between threads use a static `ThreadSafe` stack.
#![allow(unsafe_code)] // forwarding of the `unsafe fn` data calls, contracts unchanged
#![allow(clippy::too_many_arguments)] // the signatures are libfabric's

use std::any::Any;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::atomic::{AtomicClass, AtomicOp, Datatype};
use crate::attr::{AvAttr, CntrAttr, CqAttr, EqAttr, MrAttr, PollAttr, WaitAttr};
use crate::endpoint::{
    AtomicMsg, EpOpt, EpOptName, Msg, MsgMut, RmaMsg, RmaMsgMut, TaggedMsg, TaggedMsgMut,
};
use crate::eq::{EqEntry, EqErrEntry};
use crate::error::Result;
use crate::flags::{BindFlags, MrAccess, OpFlags};
use crate::info::Info;
use crate::mr::MrDesc;
use crate::types::{Context, FiAddr, MrKey};
use crate::wait::Waitable;

use super::choice::Choice;
use super::cq::DynCq;
use super::ops::*;

/// A fabric opened from an [`Info`] of [`Registry::getinfo`](super::Registry::getinfo),
/// backed by the stack the info selects.
pub struct DynFabric {
    inner: Box<dyn FabricOps>,
    choice: Choice,
}

impl DynFabric {
    pub(crate) fn new(inner: Box<dyn FabricOps>, choice: Choice) -> Self {
        DynFabric { inner, choice }
    }

    /// The provider and stack parameters this fabric runs on.
    pub fn choice(&self) -> Choice {
        self.choice
    }

    /// `fi_domain`.
    pub fn domain(&self, info: &Info) -> Result<DynDomain> {
        Ok(DynDomain {
            inner: self.inner.domain(info)?,
        })
    }

    /// `fi_eq_open` on the fabric.
    pub fn eq(&self, attr: &EqAttr) -> Result<DynEq> {
        Ok(DynEq {
            inner: self.inner.eq(attr)?,
        })
    }

    /// `fi_wait_open`.
    pub fn wait_set(&self, attr: &WaitAttr) -> Result<DynWaitSet> {
        Ok(DynWaitSet {
            inner: self.inner.wait_set(attr)?,
        })
    }

    /// The info the fabric was opened with.
    pub fn info(&self) -> &Info {
        self.inner.info()
    }
}

impl FabricOps for DynFabric {
    fn domain(&self, info: &Info) -> Result<Box<dyn DomainOps>> {
        Ok(Box::new(DynFabric::domain(self, info)?))
    }
    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EqOps>> {
        Ok(Box::new(DynFabric::eq(self, attr)?))
    }
    fn wait_set(&self, attr: &WaitAttr) -> Result<Box<dyn WaitSetOps>> {
        Ok(Box::new(DynFabric::wait_set(self, attr)?))
    }
    fn info(&self) -> &Info {
        self.inner.info()
    }
}

/// A domain: opens every other object.
pub struct DynDomain {
    inner: Box<dyn DomainOps>,
}

impl DynDomain {
    /// The info the domain was opened with.
    pub fn info(&self) -> &Info {
        self.inner.info()
    }

    /// `fi_endpoint`.
    pub fn endpoint(&self, info: &Info) -> Result<DynEndpoint> {
        Ok(DynEndpoint {
            inner: self.inner.endpoint(info)?,
        })
    }

    /// `fi_scalable_ep`.
    pub fn scalable_endpoint(&self, info: &Info) -> Result<DynScalableEndpoint> {
        Ok(DynScalableEndpoint {
            inner: self.inner.scalable_endpoint(info)?,
        })
    }

    /// `fi_stx_context`.
    pub fn shared_tx(&self, info: &Info) -> Result<DynSharedTx> {
        Ok(DynSharedTx {
            inner: self.inner.shared_tx(info)?,
        })
    }

    /// `fi_srx_context`.
    pub fn shared_rx(&self, info: &Info) -> Result<DynSharedRx> {
        Ok(DynSharedRx {
            inner: self.inner.shared_rx(info)?,
        })
    }

    /// `fi_cq_open`: the CQ's entry format is `attr.format` (`Unspec`: tagged).
    pub fn cq(&self, attr: &CqAttr) -> Result<DynCq> {
        DynCq::new(self.inner.cq(attr)?, attr.format)
    }

    /// `fi_cq_open` with `FI_WAIT_SET`: the CQ signals `set`.
    pub fn cq_in_set(&self, attr: &CqAttr, set: &dyn WaitSetOps) -> Result<DynCq> {
        DynCq::new(self.inner.cq_in_set(attr, set)?, attr.format)
    }

    /// `fi_cntr_open`.
    pub fn cntr(&self, attr: &CntrAttr) -> Result<DynCntr> {
        Ok(DynCntr {
            inner: self.inner.cntr(attr)?,
        })
    }

    /// `fi_cntr_open` with `FI_WAIT_SET`.
    pub fn cntr_in_set(&self, attr: &CntrAttr, set: &dyn WaitSetOps) -> Result<DynCntr> {
        Ok(DynCntr {
            inner: self.inner.cntr_in_set(attr, set)?,
        })
    }

    /// `fi_eq_open` tied to this domain.
    pub fn eq(&self, attr: &EqAttr) -> Result<DynEq> {
        Ok(DynEq {
            inner: self.inner.eq(attr)?,
        })
    }

    /// `fi_av_open`. The AV type is the domain's (`info.domain_attr.av_type`).
    pub fn av(&self, attr: &AvAttr) -> Result<DynAv> {
        Ok(DynAv {
            inner: self.inner.av(attr)?,
        })
    }

    /// `fi_mr_reg`: registers `buf`, borrowed for the region's lifetime.
    pub fn mr_reg<'a>(&self, buf: &'a mut [u8], attr: &MrAttr) -> Result<DynMr<'a>> {
        Ok(DynMr {
            inner: self.inner.mr_reg(buf, attr)?,
        })
    }

    /// `fi_mr_regv`.
    pub fn mr_regv<'a>(&self, bufs: Vec<&'a mut [u8]>, attr: &MrAttr) -> Result<DynMr<'a>> {
        Ok(DynMr {
            inner: self.inner.mr_regv(bufs, attr)?,
        })
    }

    /// `fi_mr_regattr`.
    pub fn mr_regattr<'a>(&self, bufs: Vec<&'a mut [u8]>, attr: &MrAttr) -> Result<DynMr<'a>> {
        Ok(DynMr {
            inner: self.inner.mr_regattr(bufs, attr)?,
        })
    }

    /// `fi_poll_open`.
    pub fn poll_set(&self, attr: &PollAttr) -> Result<DynPollSet> {
        Ok(DynPollSet {
            inner: self.inner.poll_set(attr)?,
        })
    }

    /// `fi_query_atomic`.
    pub fn query_atomic(&self, class: AtomicClass, op: AtomicOp, dt: Datatype) -> Result<usize> {
        self.inner.query_atomic(class, op, dt)
    }

    /// One pass of the progress engine (what CQ reads do under manual progress).
    pub fn progress(&self) -> usize {
        self.inner.progress()
    }
}

impl DomainOps for DynDomain {
    fn info(&self) -> &Info {
        self.inner.info()
    }
    fn endpoint(&self, info: &Info) -> Result<Box<dyn EndpointOps>> {
        Ok(Box::new(DynDomain::endpoint(self, info)?))
    }
    fn scalable_endpoint(&self, info: &Info) -> Result<Box<dyn ScalableEndpointOps>> {
        Ok(Box::new(DynDomain::scalable_endpoint(self, info)?))
    }
    fn shared_tx(&self, info: &Info) -> Result<Box<dyn SharedTxOps>> {
        Ok(Box::new(DynDomain::shared_tx(self, info)?))
    }
    fn shared_rx(&self, info: &Info) -> Result<Box<dyn SharedRxOps>> {
        Ok(Box::new(DynDomain::shared_rx(self, info)?))
    }
    fn cq(&self, attr: &CqAttr) -> Result<Box<dyn CqOps>> {
        Ok(Box::new(DynDomain::cq(self, attr)?))
    }
    fn cq_in_set(&self, attr: &CqAttr, set: &dyn WaitSetOps) -> Result<Box<dyn CqOps>> {
        Ok(Box::new(DynDomain::cq_in_set(self, attr, set)?))
    }
    fn cntr(&self, attr: &CntrAttr) -> Result<Box<dyn CntrOps>> {
        Ok(Box::new(DynDomain::cntr(self, attr)?))
    }
    fn cntr_in_set(&self, attr: &CntrAttr, set: &dyn WaitSetOps) -> Result<Box<dyn CntrOps>> {
        Ok(Box::new(DynDomain::cntr_in_set(self, attr, set)?))
    }
    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EqOps>> {
        Ok(Box::new(DynDomain::eq(self, attr)?))
    }
    fn av(&self, attr: &AvAttr) -> Result<Box<dyn AvOps>> {
        Ok(Box::new(DynDomain::av(self, attr)?))
    }
    fn mr_reg<'a>(&self, buf: &'a mut [u8], attr: &MrAttr) -> Result<Box<dyn MrOps + 'a>> {
        self.inner.mr_reg(buf, attr)
    }
    fn mr_regv<'a>(&self, bufs: Vec<&'a mut [u8]>, attr: &MrAttr) -> Result<Box<dyn MrOps + 'a>> {
        self.inner.mr_regv(bufs, attr)
    }
    fn mr_regattr<'a>(
        &self,
        bufs: Vec<&'a mut [u8]>,
        attr: &MrAttr,
    ) -> Result<Box<dyn MrOps + 'a>> {
        self.inner.mr_regattr(bufs, attr)
    }
    fn poll_set(&self, attr: &PollAttr) -> Result<Box<dyn PollSetOps>> {
        self.inner.poll_set(attr)
    }
    fn query_atomic(&self, class: AtomicClass, op: AtomicOp, dt: Datatype) -> Result<usize> {
        self.inner.query_atomic(class, op, dt)
    }
    fn progress(&self) -> usize {
        self.inner.progress()
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

/// Implements `TxOps` for a wrapper by forwarding to its `inner` field.
macro_rules! tx_forward {
    ($ty:ty) => {
        tx_methods!(ops_forward! {
            (impl TxOps for $ty) => inner {
                fn tsendmsg_triggered(&self, msg: &TaggedMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    self.inner.tsendmsg_triggered(msg, flags, cntr, threshold)
                }
                fn sendmsg_triggered(&self, msg: &Msg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    self.inner.sendmsg_triggered(msg, flags, cntr, threshold)
                }
                fn writemsg_triggered(&self, msg: &RmaMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    self.inner.writemsg_triggered(msg, flags, cntr, threshold)
                }
                fn atomicmsg_triggered(&self, m: &AtomicMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    self.inner.atomicmsg_triggered(m, flags, cntr, threshold)
                }
            }
        });
    };
}

/// Implements `RxOps` for a wrapper by forwarding to its `inner` field.
macro_rules! rx_forward {
    ($ty:ty) => {
        rx_methods!(ops_forward! {
            (impl RxOps for $ty) => inner {
                unsafe fn trecvmsg_triggered(&self, msg: &mut TaggedMsgMut<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    // SAFETY: forwarded contract.
                    unsafe { self.inner.trecvmsg_triggered(msg, flags, cntr, threshold) }
                }
            }
        });
    };
}

/// An RDM or DGRAM endpoint. Data calls: [`TxOps`] and [`RxOps`]; control calls:
/// [`EndpointOps`].
pub struct DynEndpoint {
    inner: Box<dyn EndpointOps>,
}

impl DynEndpoint {
    /// `fi_ep_alias`: another handle to the same endpoint with default operation flags
    /// `flags` for the directions in `bind`.
    pub fn alias(&self, flags: OpFlags, bind: BindFlags) -> Result<DynEndpoint> {
        Ok(DynEndpoint {
            inner: self.inner.alias(flags, bind)?,
        })
    }
}

tx_forward!(DynEndpoint);
rx_forward!(DynEndpoint);

impl EndpointOps for DynEndpoint {
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cq(cq, flags)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cntr(cntr, flags)
    }
    fn bind_av(&self, av: &dyn AvOps) -> Result<()> {
        self.inner.bind_av(av)
    }
    fn bind_eq(&self, eq: &dyn EqOps) -> Result<()> {
        self.inner.bind_eq(eq)
    }
    fn enable(&self) -> Result<()> {
        self.inner.enable()
    }
    fn cancel(&self, context: Context) -> Result<()> {
        self.inner.cancel(context)
    }
    fn alias(&self, flags: OpFlags, bind: BindFlags) -> Result<Box<dyn EndpointOps>> {
        Ok(Box::new(DynEndpoint::alias(self, flags, bind)?))
    }
    fn getopt(&self, name: EpOptName) -> Result<EpOpt> {
        self.inner.getopt(name)
    }
    fn setopt(&self, opt: EpOpt) -> Result<()> {
        self.inner.setopt(opt)
    }
    fn tx_size_left(&self) -> usize {
        self.inner.tx_size_left()
    }
    fn rx_size_left(&self) -> usize {
        self.inner.rx_size_left()
    }
    fn name(&self) -> Vec<u8> {
        self.inner.name()
    }
    fn info(&self) -> &Info {
        self.inner.info()
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

/// A scalable endpoint.
pub struct DynScalableEndpoint {
    inner: Box<dyn ScalableEndpointOps>,
}

impl DynScalableEndpoint {
    /// `fi_tx_context`.
    pub fn tx_context(&self, index: usize) -> Result<DynTxContext> {
        Ok(DynTxContext {
            inner: self.inner.tx_context(index)?,
        })
    }
    /// `fi_rx_context`.
    pub fn rx_context(&self, index: usize) -> Result<DynRxContext> {
        Ok(DynRxContext {
            inner: self.inner.rx_context(index)?,
        })
    }
}

impl ScalableEndpointOps for DynScalableEndpoint {
    fn bind_av(&self, av: &dyn AvOps) -> Result<()> {
        self.inner.bind_av(av)
    }
    fn tx_context(&self, index: usize) -> Result<Box<dyn TxContextOps>> {
        self.inner.tx_context(index)
    }
    fn rx_context(&self, index: usize) -> Result<Box<dyn RxContextOps>> {
        self.inner.rx_context(index)
    }
    fn enable(&self) -> Result<()> {
        self.inner.enable()
    }
    fn name(&self) -> Vec<u8> {
        self.inner.name()
    }
}

/// A transmit context of a scalable endpoint.
pub struct DynTxContext {
    inner: Box<dyn TxContextOps>,
}

tx_forward!(DynTxContext);

impl TxContextOps for DynTxContext {
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cq(cq, flags)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cntr(cntr, flags)
    }
    fn enable(&self) -> Result<()> {
        self.inner.enable()
    }
}

/// A receive context of a scalable endpoint.
pub struct DynRxContext {
    inner: Box<dyn RxContextOps>,
}

rx_forward!(DynRxContext);

impl RxContextOps for DynRxContext {
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cq(cq, flags)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cntr(cntr, flags)
    }
    fn enable(&self) -> Result<()> {
        self.inner.enable()
    }
}

/// A shared transmit context.
pub struct DynSharedTx {
    inner: Box<dyn SharedTxOps>,
}

impl DynSharedTx {
    /// Opens an endpoint transmitting through this context (and receiving through `srx`).
    pub fn endpoint(&self, info: &Info, srx: Option<&dyn SharedRxOps>) -> Result<DynEndpoint> {
        Ok(DynEndpoint {
            inner: self.inner.endpoint(info, srx)?,
        })
    }
}

impl SharedTxOps for DynSharedTx {
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cq(cq, flags)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cntr(cntr, flags)
    }
    fn endpoint(&self, info: &Info, srx: Option<&dyn SharedRxOps>) -> Result<Box<dyn EndpointOps>> {
        Ok(Box::new(DynSharedTx::endpoint(self, info, srx)?))
    }
}

/// A shared receive context.
pub struct DynSharedRx {
    inner: Box<dyn SharedRxOps>,
}

impl DynSharedRx {
    /// Opens an endpoint receiving through this context.
    pub fn endpoint(&self, info: &Info) -> Result<DynEndpoint> {
        Ok(DynEndpoint {
            inner: self.inner.endpoint(info)?,
        })
    }
}

impl SharedRxOps for DynSharedRx {
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cq(cq, flags)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cntr(cntr, flags)
    }
    fn endpoint(&self, info: &Info) -> Result<Box<dyn EndpointOps>> {
        Ok(Box::new(DynSharedRx::endpoint(self, info)?))
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

/// A completion counter ([`CntrOps`]).
pub struct DynCntr {
    inner: Box<dyn CntrOps>,
}

impl Waitable for DynCntr {
    fn trywait(&self) -> Result<()> {
        self.inner.trywait()
    }
}

impl CntrOps for DynCntr {
    fn read(&self) -> u64 {
        self.inner.read()
    }
    fn read_err(&self) -> u64 {
        self.inner.read_err()
    }
    fn add(&self, v: u64) {
        self.inner.add(v)
    }
    fn set(&self, v: u64) {
        self.inner.set(v)
    }
    fn add_err(&self, v: u64) {
        self.inner.add_err(v)
    }
    fn set_err(&self, v: u64) {
        self.inner.set_err(v)
    }
    fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        self.inner.wait(threshold, timeout)
    }
    fn wait_fd(&self) -> Option<RawFd> {
        self.inner.wait_fd()
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

/// An event queue ([`EqOps`]).
pub struct DynEq {
    inner: Box<dyn EqOps>,
}

impl Waitable for DynEq {
    fn trywait(&self) -> Result<()> {
        self.inner.trywait()
    }
}

impl EqOps for DynEq {
    fn read(&self, peek: bool) -> Result<EqEntry> {
        self.inner.read(peek)
    }
    fn read_err(&self, peek: bool) -> Result<EqErrEntry> {
        self.inner.read_err(peek)
    }
    fn sread(&self, peek: bool, timeout: Option<Duration>) -> Result<EqEntry> {
        self.inner.sread(peek, timeout)
    }
    fn write(&self, e: EqEntry) -> Result<()> {
        self.inner.write(e)
    }
    fn wait_fd(&self) -> Option<RawFd> {
        self.inner.wait_fd()
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

/// An address vector ([`AvOps`]).
pub struct DynAv {
    inner: Box<dyn AvOps>,
}

impl AvOps for DynAv {
    fn bind_eq(&self, eq: &dyn EqOps) -> Result<()> {
        self.inner.bind_eq(eq)
    }
    fn insert(&self, name: &[u8]) -> Result<FiAddr> {
        self.inner.insert(name)
    }
    fn insert_many(&self, names: &[&[u8]], flags: u64, context: Context) -> Result<Vec<FiAddr>> {
        self.inner.insert_many(names, flags, context)
    }
    fn insert_svc(&self, node: &str, service: &str) -> Result<FiAddr> {
        self.inner.insert_svc(node, service)
    }
    fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        self.inner.remove(addrs)
    }
    fn lookup(&self, addr: FiAddr) -> Result<Vec<u8>> {
        self.inner.lookup(addr)
    }
    fn straddr(&self, name: &[u8]) -> String {
        self.inner.straddr(name)
    }
    fn rx_addr(&self, addr: FiAddr, rx_index: u32) -> FiAddr {
        self.inner.rx_addr(addr, rx_index)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
    fn name(&self) -> Option<&str> {
        self.inner.name()
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

/// A registered memory region borrowing its memory for `'a` ([`MrOps`]).
pub struct DynMr<'a> {
    inner: Box<dyn MrOps + 'a>,
}

impl MrOps for DynMr<'_> {
    fn key(&self) -> MrKey {
        self.inner.key()
    }
    fn desc(&self) -> MrDesc {
        self.inner.desc()
    }
    fn remote_addr(&self) -> u64 {
        self.inner.remote_addr()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        self.inner.bind_cntr(cntr, flags)
    }
    fn bind_ep(&self, ep: &dyn EndpointOps) -> Result<()> {
        self.inner.bind_ep(ep)
    }
    fn enable(&self) -> Result<()> {
        self.inner.enable()
    }
    fn refresh(&self) -> Result<()> {
        self.inner.refresh()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.inner.read(offset, out)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.inner.write(offset, data)
    }
    fn access(&self) -> MrAccess {
        self.inner.access()
    }
}

/// A wait set ([`WaitSetOps`]).
pub struct DynWaitSet {
    inner: Box<dyn WaitSetOps>,
}

impl WaitSetOps for DynWaitSet {
    fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        self.inner.wait(timeout)
    }
    fn fd(&self) -> Option<RawFd> {
        self.inner.fd()
    }
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }
}

/// A poll set ([`PollSetOps`]).
pub struct DynPollSet {
    inner: Box<dyn PollSetOps>,
}

impl PollSetOps for DynPollSet {
    fn add_cq(&self, cq: &dyn CqOps, context: Context) -> Result<()> {
        self.inner.add_cq(cq, context)
    }
    fn add_cntr(&self, cntr: &dyn CntrOps, context: Context) -> Result<()> {
        self.inner.add_cntr(cntr, context)
    }
    fn del(&self, context: Context) -> Result<()> {
        self.inner.del(context)
    }
    fn poll(&self, out: &mut [Context]) -> Result<usize> {
        self.inner.poll(out)
    }
}
