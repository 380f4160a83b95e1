//! Endpoints (`fi_endpoint`): RDM and DGRAM endpoints, MSG endpoints and passive
//! endpoints with connection management (`cm`), scalable endpoints with transmit and
//! receive contexts, shared contexts; the data-transfer calls are in one module per man
//! page (`msg`, `tagged`, `rma`, `atomic`, `trigger`).
//!
//! Calls whose buffers the provider reads when the call returns (sends, writes, atomic
//! operands) copy them and are safe. Calls whose buffers are written later (receives,
//! reads, fetching atomics) are `unsafe`: the buffer must stay valid and untouched until
//! the operation completes (success, error or cancel) or its endpoint is dropped.

mod atomic;
mod cm;
mod msg;
mod request;
mod rma;
mod tagged;
#[cfg(test)]
mod tests;
mod trigger;

use std::sync::Arc;

use crate::av::AddressVector;
use crate::cntr::Counter;
use crate::config::Config;
use crate::cq::Cq;
use crate::engine::endpoint::{EpInner, RxCtx, TxCtx};
use crate::engine::DomainInner;
use crate::eq::EventQueue;
use crate::error::{Error, Result};
use crate::flags::{BindFlags, Caps, OpFlags};
use crate::info::Info;
use crate::lock::Lock;
use crate::provider::{Provider, Transport};
use crate::types::Context;

pub use crate::engine::endpoint::{
    RmaIov, DEFAULT_MIN_MULTI_RECV, DEFAULT_QUEUE_SIZE, MAX_UNEXPECTED, UNEXPECTED_BYTES,
};
pub use atomic::AtomicMsg;
pub use cm::PassiveEndpoint;
pub use msg::{Msg, MsgMut};
pub use rma::{RmaMsg, RmaMsgMut};
pub use tagged::{TaggedMsg, TaggedMsgMut};

/// Owns the endpoint core while it is registered with its domain's progress; the last
/// handle (aliases included) closes it.
pub(crate) struct EpHandle<S: Config> {
    pub(crate) inner: Arc<EpInner<S>>,
    domain: Arc<DomainInner<S>>,
}

impl<S: Config> EpHandle<S> {
    fn open(
        domain: &Arc<DomainInner<S>>,
        info: &Info,
        counts: (usize, usize),
        stx: Option<&SharedTx<S>>,
        srx: Option<&SharedRx<S>>,
    ) -> Result<Arc<Self>> {
        let inner = EpInner::open(
            &domain.shared,
            info,
            counts.0,
            counts.1,
            stx.map(|s| &s.ctx),
            srx.map(|s| &s.ctx),
        )?;
        domain.add_ep(&inner);
        Ok(Arc::new(EpHandle {
            inner,
            domain: domain.clone(),
        }))
    }
}

impl<S: Config> Drop for EpHandle<S> {
    fn drop(&mut self) {
        self.domain.remove_ep(&self.inner);
        self.inner.close();
    }
}

/// An endpoint option (`fi_getopt` / `fi_setopt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpOpt {
    /// `FI_OPT_MIN_MULTI_RECV`: a multi-receive buffer is released when less than this
    /// many bytes remain.
    MinMultiRecv(usize),
    /// `FI_OPT_CM_DATA_SIZE`: the most connection data `connect`, `accept` and
    /// `reject` carry (0 on RDM and DGRAM endpoints, which have no connection).
    CmDataSize(usize),
}

/// Which option to read with [`Endpoint::getopt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpOptName {
    /// `FI_OPT_MIN_MULTI_RECV`.
    MinMultiRecv,
    /// `FI_OPT_CM_DATA_SIZE`.
    CmDataSize,
}

/// An endpoint: RDM, DGRAM, or MSG (connected: see [`PassiveEndpoint`]).
pub struct Endpoint<S: Config> {
    pub(crate) h: Arc<EpHandle<S>>,
    pub(crate) tx_flags: OpFlags,
    pub(crate) rx_flags: OpFlags,
}

impl<S: Config> Endpoint<S> {
    pub(crate) fn open(domain: &Arc<DomainInner<S>>, info: &Info) -> Result<Self> {
        Self::open_with(domain, info, None, None)
    }

    pub(crate) fn open_with(
        domain: &Arc<DomainInner<S>>,
        info: &Info,
        stx: Option<&SharedTx<S>>,
        srx: Option<&SharedRx<S>>,
    ) -> Result<Self> {
        Ok(Endpoint {
            h: EpHandle::open(domain, info, (1, 1), stx, srx)?,
            tx_flags: info.tx_attr.op_flags,
            rx_flags: info.rx_attr.op_flags,
        })
    }

    #[inline(always)]
    pub(crate) fn ep(&self) -> &EpInner<S> {
        &self.h.inner
    }

    /// An identity for the endpoint (its core's address), which aliases share: what a
    /// memory region bound to it (`FI_MR_ENDPOINT`) compares with.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.h.inner) as usize
    }

    /// `fi_ep_bind` of a CQ: `TRANSMIT` and/or `RECV`, optionally `SELECTIVE_COMPLETION`.
    pub fn bind_cq(&self, cq: &Cq<S>, flags: BindFlags) -> Result<()> {
        self.ep().bind_cq(&cq.inner, flags, &[0], &[0])
    }

    /// `fi_ep_bind` of a counter: `TRANSMIT`, `RECV`, `READ`, `WRITE`, `REMOTE_READ`,
    /// `REMOTE_WRITE`.
    pub fn bind_cntr(&self, cntr: &Counter<S>, flags: BindFlags) -> Result<()> {
        self.ep().bind_cntr(&cntr.inner, flags, &[0], &[0])
    }

    /// `fi_ep_bind` of an address vector.
    pub fn bind_av(&self, av: &AddressVector<S>) -> Result<()> {
        self.ep().bind_av(&av.inner)
    }

    /// `fi_ep_bind` of an event queue. An MSG endpoint takes one, which reports its
    /// connection events (`Err(Inval)` for a second).
    pub fn bind_eq(&self, eq: &EventQueue<S>) -> Result<()> {
        if self.ep().conn.is_some() {
            return self.bind_cm_eq(eq);
        }
        self.ep().eq.with(|e| *e = Some(eq.inner.clone()));
        Ok(())
    }

    /// `fi_enable`: `Err(NoAv)` without an AV, `Err(NoCq)` when a direction has neither
    /// a CQ nor a counter.
    pub fn enable(&self) -> Result<()> {
        self.ep().enable(&[0], &[0])
    }

    /// `fi_cancel`: the operation posted with `context` completes with `FI_ECANCELED`;
    /// `Err(NoEnt)` when no such operation is queued.
    pub fn cancel(&self, context: Context) -> Result<()> {
        self.ep().cancel(context)
    }

    /// `fi_ep_alias`: another handle to the same endpoint whose default operation flags
    /// are `flags` (for the directions named by `TRANSMIT`/`RECV` in `bind`).
    pub fn alias(&self, flags: OpFlags, bind: BindFlags) -> Result<Endpoint<S>> {
        if !bind.intersects(BindFlags::TRANSMIT | BindFlags::RECV) {
            return Err(Error::BadFlags);
        }
        Ok(Endpoint {
            h: self.h.clone(),
            tx_flags: if bind.contains(BindFlags::TRANSMIT) {
                flags
            } else {
                self.tx_flags
            },
            rx_flags: if bind.contains(BindFlags::RECV) {
                flags
            } else {
                self.rx_flags
            },
        })
    }

    /// `fi_getopt`.
    pub fn getopt(&self, name: EpOptName) -> Result<EpOpt> {
        Ok(match name {
            EpOptName::MinMultiRecv => {
                EpOpt::MinMultiRecv(self.ep().rx[0].state.with(|st| st.min_multi_recv))
            }
            EpOptName::CmDataSize => EpOpt::CmDataSize(match self.ep().conn {
                Some(_) => crate::engine::cm::cm_data_size::<S>(),
                None => 0,
            }),
        })
    }

    /// `fi_setopt`. `FI_OPT_CM_DATA_SIZE` is read-only here (`Err(NoProtoOpt)`).
    pub fn setopt(&self, opt: EpOpt) -> Result<()> {
        match opt {
            EpOpt::MinMultiRecv(n) => {
                for r in &self.ep().rx {
                    r.state.with(|st| st.min_multi_recv = n);
                }
                Ok(())
            }
            EpOpt::CmDataSize(_) => Err(Error::NoProtoOpt),
        }
    }

    /// `fi_tx_size_left`: operations that can be posted before the queue is full.
    pub fn tx_size_left(&self) -> usize {
        self.ep().tx[0].state.with(|st| {
            st.pending.capacity()
                - st.pending.in_flight()
                - st.fenced
                    .len()
                    .min(st.pending.capacity() - st.pending.in_flight())
        })
    }

    /// `fi_rx_size_left`: receives that can be posted before the queue is full.
    pub fn rx_size_left(&self) -> usize {
        self.ep().rx[0].state.with(|st| {
            st.size
                .saturating_sub(st.tagged.posted_len() + st.msg.posted_len())
        })
    }

    /// `fi_getname`: this endpoint's raw address, to ship to peers.
    pub fn name(&self) -> Vec<u8> {
        self.ep().transport.name().to_vec()
    }

    /// The info the endpoint was opened with.
    pub fn info(&self) -> &Info {
        &self.ep().info
    }
}

/// A scalable endpoint (`fi_scalable_ep`): one address, several transmit and receive
/// contexts; peers reach receive context `i` through `fi_rx_addr`.
pub struct ScalableEndpoint<S: Config> {
    h: Arc<EpHandle<S>>,
    tx_flags: OpFlags,
    rx_flags: OpFlags,
}

impl<S: Config> ScalableEndpoint<S> {
    pub(crate) fn open(domain: &Arc<DomainInner<S>>, info: &Info) -> Result<Self> {
        let t = info.ep_attr.tx_ctx_cnt.max(1);
        let r = info.ep_attr.rx_ctx_cnt.max(1);
        let (mt, mr) = (
            info.domain_attr.max_ep_tx_ctx.max(1),
            info.domain_attr.max_ep_rx_ctx.max(1),
        );
        if t > mt || r > mr {
            return Err(Error::Inval);
        }
        Ok(ScalableEndpoint {
            h: EpHandle::open(domain, info, (t, r), None, None)?,
            tx_flags: info.tx_attr.op_flags,
            rx_flags: info.rx_attr.op_flags,
        })
    }

    /// `fi_scalable_ep_bind` of the address vector (shared by all contexts).
    pub fn bind_av(&self, av: &AddressVector<S>) -> Result<()> {
        self.h.inner.bind_av(&av.inner)
    }

    /// `fi_tx_context`: transmit context `index`.
    pub fn tx_context(&self, index: usize) -> Result<TxContext<S>> {
        if index >= self.h.inner.tx.len() {
            return Err(Error::Inval);
        }
        Ok(TxContext {
            h: self.h.clone(),
            idx: index,
            tx_flags: self.tx_flags,
        })
    }

    /// `fi_rx_context`: receive context `index`.
    pub fn rx_context(&self, index: usize) -> Result<RxContext<S>> {
        if index >= self.h.inner.rx.len() {
            return Err(Error::Inval);
        }
        Ok(RxContext {
            h: self.h.clone(),
            idx: index,
            rx_flags: self.rx_flags,
        })
    }

    /// `fi_enable` of the scalable endpoint itself (contexts are enabled one by one).
    pub fn enable(&self) -> Result<()> {
        self.h
            .inner
            .transport
            .set_waker(self.h.inner.domain.doorbell.clone());
        Ok(())
    }

    /// `fi_getname`.
    pub fn name(&self) -> Vec<u8> {
        self.h.inner.transport.name().to_vec()
    }
}

/// A transmit context of a scalable endpoint.
pub struct TxContext<S: Config> {
    h: Arc<EpHandle<S>>,
    idx: usize,
    tx_flags: OpFlags,
}

impl<S: Config> TxContext<S> {
    /// Binds a CQ (`TRANSMIT`, optionally `SELECTIVE_COMPLETION`).
    pub fn bind_cq(&self, cq: &Cq<S>, flags: BindFlags) -> Result<()> {
        self.h
            .inner
            .bind_cq(&cq.inner, flags & !BindFlags::RECV, &[self.idx], &[])
    }
    /// Binds a counter.
    pub fn bind_cntr(&self, cntr: &Counter<S>, flags: BindFlags) -> Result<()> {
        self.h.inner.bind_cntr(&cntr.inner, flags, &[self.idx], &[])
    }
    /// `fi_enable`.
    pub fn enable(&self) -> Result<()> {
        self.h.inner.enable(&[self.idx], &[])
    }
    #[inline(always)]
    pub(crate) fn ep(&self) -> &EpInner<S> {
        &self.h.inner
    }
}

/// A receive context of a scalable endpoint.
pub struct RxContext<S: Config> {
    h: Arc<EpHandle<S>>,
    idx: usize,
    rx_flags: OpFlags,
}

impl<S: Config> RxContext<S> {
    /// Binds a CQ (`RECV`, optionally `SELECTIVE_COMPLETION`).
    pub fn bind_cq(&self, cq: &Cq<S>, flags: BindFlags) -> Result<()> {
        self.h
            .inner
            .bind_cq(&cq.inner, flags & !BindFlags::TRANSMIT, &[], &[self.idx])
    }
    /// Binds a counter.
    pub fn bind_cntr(&self, cntr: &Counter<S>, flags: BindFlags) -> Result<()> {
        self.h.inner.bind_cntr(&cntr.inner, flags, &[], &[self.idx])
    }
    /// `fi_enable`.
    pub fn enable(&self) -> Result<()> {
        self.h.inner.enable(&[], &[self.idx])
    }
    #[inline(always)]
    pub(crate) fn ep(&self) -> &EpInner<S> {
        &self.h.inner
    }
}

/// A shared transmit context (`fi_stx_context`): endpoints opened with it send through
/// one queue; bind its CQ and counters here.
pub struct SharedTx<S: Config> {
    pub(crate) ctx: Arc<TxCtx<S>>,
    domain: Arc<DomainInner<S>>,
}

impl<S: Config> SharedTx<S> {
    pub(crate) fn open(domain: &Arc<DomainInner<S>>, info: &Info) -> Result<Self> {
        let caps = if info.caps.is_empty() {
            Caps::PRIMARY
        } else {
            info.caps
        };
        let inject = info.tx_attr.inject_size.min(S::Provider::INJECT_SIZE).max(
            if info.tx_attr.inject_size == 0 {
                S::Provider::INJECT_SIZE
            } else {
                0
            },
        );
        Ok(SharedTx {
            ctx: TxCtx::new(caps, info.tx_attr.size, inject, S::Provider::MAX_MSG_SIZE),
            domain: domain.clone(),
        })
    }
    /// Binds the CQ that all sharing endpoints' transmits complete to.
    pub fn bind_cq(&self, cq: &Cq<S>, flags: BindFlags) -> Result<()> {
        if !Arc::ptr_eq(&cq.inner.shared, &self.domain.shared) {
            return Err(Error::Domain);
        }
        self.ctx.state.with(|st| {
            st.bind.cq = Some(cq.inner.clone());
            st.bind.selective = flags.contains(BindFlags::SELECTIVE_COMPLETION);
        });
        Ok(())
    }
    /// Binds a transmit counter.
    pub fn bind_cntr(&self, c: &Counter<S>, flags: BindFlags) -> Result<()> {
        self.ctx.state.with(|st| {
            if flags.contains(BindFlags::TRANSMIT) {
                st.cntr_send = Some(c.inner.clone());
            }
            if flags.contains(BindFlags::READ) {
                st.cntr_read = Some(c.inner.clone());
            }
            if flags.contains(BindFlags::WRITE) {
                st.cntr_write = Some(c.inner.clone());
            }
        });
        Ok(())
    }
    /// Opens an endpoint that transmits through this context (and receives through
    /// `srx` when given).
    pub fn endpoint(&self, info: &Info, srx: Option<&SharedRx<S>>) -> Result<Endpoint<S>> {
        Endpoint::open_with(&self.domain, info, Some(self), srx)
    }
}

/// A shared receive context (`fi_srx_context`): messages to any endpoint opened with it
/// match one queue of posted receives.
pub struct SharedRx<S: Config> {
    pub(crate) ctx: Arc<RxCtx<S>>,
    domain: Arc<DomainInner<S>>,
}

impl<S: Config> SharedRx<S> {
    pub(crate) fn open(domain: &Arc<DomainInner<S>>, info: &Info) -> Result<Self> {
        let caps = if info.caps.is_empty() {
            Caps::PRIMARY
        } else {
            info.caps
        };
        Ok(SharedRx {
            ctx: RxCtx::new(caps, info.rx_attr.size),
            domain: domain.clone(),
        })
    }
    /// Binds the CQ receives complete to.
    pub fn bind_cq(&self, cq: &Cq<S>, flags: BindFlags) -> Result<()> {
        if !Arc::ptr_eq(&cq.inner.shared, &self.domain.shared) {
            return Err(Error::Domain);
        }
        self.ctx.state.with(|st| {
            st.bind.cq = Some(cq.inner.clone());
            st.bind.selective = flags.contains(BindFlags::SELECTIVE_COMPLETION);
        });
        Ok(())
    }
    /// Binds a receive counter.
    pub fn bind_cntr(&self, c: &Counter<S>, flags: BindFlags) -> Result<()> {
        self.ctx.state.with(|st| {
            if flags.contains(BindFlags::RECV) {
                st.cntr_recv = Some(c.inner.clone());
            }
        });
        Ok(())
    }
    /// Opens an endpoint that receives through this context.
    pub fn endpoint(&self, info: &Info) -> Result<Endpoint<S>> {
        Endpoint::open_with(&self.domain, info, None, Some(self))
    }
}

// What the calls of each family (`msg`, `tagged`, `rma`, `atomic`, `trigger`) need of
// a handle: which context it posts to, and the endpoint core to defer operations on.
impl<S: Config> Endpoint<S> {
    #[inline(always)]
    fn txi(&self) -> usize {
        0
    }
    #[inline(always)]
    fn rxi(&self) -> usize {
        0
    }
    fn arc(&self) -> Arc<EpInner<S>> {
        self.h.inner.clone()
    }
}
impl<S: Config> TxContext<S> {
    #[inline(always)]
    fn txi(&self) -> usize {
        self.idx
    }
    fn arc(&self) -> Arc<EpInner<S>> {
        self.h.inner.clone()
    }
}
impl<S: Config> RxContext<S> {
    #[inline(always)]
    fn rxi(&self) -> usize {
        self.idx
    }
    fn arc(&self) -> Arc<EpInner<S>> {
        self.h.inner.clone()
    }
}
