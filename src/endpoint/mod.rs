//! Endpoints (`fi_endpoint`): RDM and DGRAM endpoints, scalable endpoints with transmit
//! and receive contexts, shared contexts, and every data-transfer call.
//!
//! Calls whose buffers the provider reads when the call returns (sends, writes, atomic
//! operands) copy them and are safe. Calls whose buffers are written later (receives,
//! reads, fetching atomics) are `unsafe`: the buffer must stay valid and untouched until
//! the operation completes (success, error or cancel) or its endpoint is dropped.

mod data;
mod owned;
mod rx;
mod state;
mod target;
#[cfg(test)]
mod tests;
mod tx;

use std::sync::Arc;

use crate::attr::EpType;
use crate::av::AddressVector;
use crate::cntr::Counter;
use crate::config::Config;
use crate::config::LockOf;
use crate::cq::{Cq, Reader};
use crate::domain::DomainInner;
use crate::eq::{EqInner, EventQueue};
use crate::error::{Error, Result};
use crate::flags::{BindFlags, Caps, CqFlags, OpFlags};
use crate::info::Info;
use crate::lock::Lock;
use crate::provider::{Payload, Provider, SharedBytes, Sink, Transport};
use crate::ring::CqErrEntry;
use crate::types::Context;
use crate::wire::{Eager, Header, Op, Response};

pub use data::{AtomicMsg, Msg, MsgMut, RmaMsg, RmaMsgMut, TaggedMsg, TaggedMsgMut};
pub use owned::RmaIov;
pub use rx::MAX_UNEXPECTED;
pub use state::UNEXPECTED_BYTES;
pub use state::{DEFAULT_MIN_MULTI_RECV, DEFAULT_QUEUE_SIZE};

pub(crate) use owned::{OwnedTx, RxReq};
use state::{RxCtx, TxCtx};

pub(crate) type TransportOf<S> = <<S as Config>::Provider as Provider>::Transport;
type SenderOf<S> = <TransportOf<S> as Transport>::Sender;
type ReceiverOf<S> = <TransportOf<S> as Transport>::Receiver;

/// The shared core of an endpoint: its transport and its contexts.
pub(crate) struct EpInner<S: Config> {
    pub(crate) domain: Arc<DomainInner<S>>,
    pub(crate) transport: TransportOf<S>,
    /// The transport's sending state, serialized by the stack's lock family (no lock
    /// under `ThreadDomain`). Requests (under a transmit context's state) and
    /// responses (from progress) both send through it.
    pub(crate) sender: LockOf<S, SenderOf<S>>,
    /// The transport's receiving state: one drainer at a time.
    receiver: LockOf<S, ReceiverOf<S>>,
    pub(crate) tx: Vec<Arc<TxCtx<S>>>,
    pub(crate) rx: Vec<Arc<RxCtx<S>>>,
    pub(crate) info: Info,
    pub(crate) eq: LockOf<S, Option<Arc<EqInner<S>>>>,
}

impl<S: Config> EpInner<S> {
    fn open(
        domain: &Arc<DomainInner<S>>,
        info: &Info,
        tx_cnt: usize,
        rx_cnt: usize,
        stx: Option<&SharedTx<S>>,
        srx: Option<&SharedRx<S>>,
    ) -> Result<Arc<Self>> {
        match info.ep_attr.ep_type {
            EpType::Rdm | EpType::Dgram | EpType::Unspec => {}
            EpType::Msg => return Err(Error::NotSupported),
        }
        let caps = if info.caps.is_empty() {
            Caps::PRIMARY
        } else {
            info.caps
        };
        let inject = match info.tx_attr.inject_size {
            0 => S::Provider::INJECT_SIZE,
            n => n.min(S::Provider::INJECT_SIZE),
        };
        let max_msg = match info.ep_attr.max_msg_size {
            0 => S::Provider::MAX_MSG_SIZE,
            n => n.min(S::Provider::MAX_MSG_SIZE),
        };
        let transport = S::Provider::open(info)?;
        let tx = match stx {
            Some(s) => vec![s.ctx.clone()],
            None => (0..tx_cnt)
                .map(|_| TxCtx::new(caps, info.tx_attr.size, inject, max_msg))
                .collect(),
        };
        let rx = match srx {
            Some(s) => vec![s.ctx.clone()],
            None => (0..rx_cnt)
                .map(|_| RxCtx::new(caps, info.rx_attr.size))
                .collect(),
        };
        let inner = Arc::new(EpInner {
            domain: domain.clone(),
            sender: LockOf::<S, _>::new(transport.sender()),
            receiver: LockOf::<S, _>::new(transport.receiver()),
            transport,
            tx,
            rx,
            info: info.clone(),
            eq: LockOf::<S, _>::new(None),
        });
        domain.eps.with(|v| v.push(inner.clone()));
        Ok(inner)
    }

    /// Drains the transport, dispatching every packet. Returns how many were handled.
    /// `rd`: the CQ read this pass runs for, which receives may complete into.
    #[inline]
    pub(crate) fn progress(&self, rd: Option<&mut Reader<'_, S>>) -> usize {
        if self.transport.backlog() {
            self.sender.with(|tx| self.transport.flush(tx));
        }
        self.receiver
            .with(|rx| self.transport.poll_into(rx, Dispatch { ep: self, rd }))
    }

    fn bind_cq(&self, cq: &Cq<S>, flags: BindFlags, txs: &[usize], rxs: &[usize]) -> Result<()> {
        if !Arc::ptr_eq(&cq.inner.domain, &self.domain) {
            return Err(Error::Domain);
        }
        if !flags.intersects(BindFlags::TRANSMIT | BindFlags::RECV) {
            return Err(Error::BadFlags);
        }
        let sel = flags.contains(BindFlags::SELECTIVE_COMPLETION);
        if flags.contains(BindFlags::TRANSMIT) {
            for &i in txs {
                self.tx[i].state.with(|st| {
                    st.bind.cq = Some(cq.inner.clone());
                    st.bind.selective = sel;
                });
            }
        }
        if flags.contains(BindFlags::RECV) {
            for &i in rxs {
                self.rx[i].state.with(|st| {
                    st.bind.cq = Some(cq.inner.clone());
                    st.bind.selective = sel;
                });
            }
        }
        Ok(())
    }

    fn bind_cntr(
        &self,
        c: &Counter<S>,
        flags: BindFlags,
        txs: &[usize],
        rxs: &[usize],
    ) -> Result<()> {
        if flags.is_empty() {
            return Err(Error::BadFlags);
        }
        let c = &c.inner;
        for &i in txs {
            self.tx[i].state.with(|st| {
                if flags.contains(BindFlags::TRANSMIT) {
                    st.cntr_send = Some(c.clone());
                }
                if flags.contains(BindFlags::READ) {
                    st.cntr_read = Some(c.clone());
                }
                if flags.contains(BindFlags::WRITE) {
                    st.cntr_write = Some(c.clone());
                }
            });
        }
        for &i in rxs {
            self.rx[i].state.with(|st| {
                if flags.contains(BindFlags::RECV) {
                    st.cntr_recv = Some(c.clone());
                }
                if flags.contains(BindFlags::REMOTE_READ) {
                    st.cntr_rem_read = Some(c.clone());
                }
                if flags.contains(BindFlags::REMOTE_WRITE) {
                    st.cntr_rem_write = Some(c.clone());
                }
            });
        }
        Ok(())
    }

    fn bind_av(&self, av: &AddressVector<S>) -> Result<()> {
        for t in &self.tx {
            t.state.with(|st| st.av = Some(av.inner.clone()));
        }
        for r in &self.rx {
            r.state.with(|st| st.av = Some(av.inner.clone()));
        }
        Ok(())
    }

    fn enable(&self, txs: &[usize], rxs: &[usize]) -> Result<()> {
        for &i in txs {
            self.tx[i].state.with(|st| {
                if st.av.is_none() {
                    return Err(Error::NoAv);
                }
                if st.bind.cq.is_none()
                    && st.cntr_send.is_none()
                    && st.cntr_write.is_none()
                    && st.cntr_read.is_none()
                {
                    return Err(Error::NoCq);
                }
                st.enabled = true;
                Ok(())
            })?;
        }
        for &i in rxs {
            self.rx[i].state.with(|st| {
                if st.bind.cq.is_none() && st.cntr_recv.is_none() {
                    return Err(Error::NoCq);
                }
                st.enabled = true;
                Ok(())
            })?;
        }
        self.transport.set_waker(self.domain.doorbell.clone());
        Ok(())
    }

    /// Cancels the operation posted with `ctx`: an `FI_ECANCELED` error entry.
    fn cancel(&self, ctx: Context) -> Result<()> {
        for r in &self.rx {
            let found = r.state.with(|st| {
                let p = st
                    .tagged
                    .cancel_posted(|p| p.ctx == ctx)
                    .map(|p| (p, CqFlags::TAGGED));
                let p = p.or_else(|| {
                    st.msg
                        .cancel_posted(|p| p.ctx == ctx)
                        .map(|p| (p, CqFlags::MSG))
                });
                if let Some((p, f)) = p {
                    if let Some(cq) = &st.bind.cq {
                        let mut e = CqErrEntry::new(p.ctx, Error::Canceled);
                        e.flags = CqFlags::RECV | f;
                        e.prov_errno = Error::Canceled.code();
                        cq.complete_err(e);
                    }
                    true
                } else {
                    false
                }
            });
            if found {
                return Ok(());
            }
        }
        for t in &self.tx {
            let found = t.state.with(|st| {
                let pos = st.fenced.iter().position(|o| o.ctx == ctx)?;
                let o = st.fenced.remove(pos)?;
                if let Some(cq) = &st.bind.cq {
                    let mut e = CqErrEntry::new(o.ctx, Error::Canceled);
                    e.flags = o.completion_flags();
                    cq.complete_err(e);
                }
                Some(())
            });
            if found.is_some() {
                return Ok(());
            }
        }
        Err(Error::NoEnt)
    }

    /// Closes: no more arrivals; every outstanding operation completes with `FI_ECANCELED`.
    fn close(self: &Arc<Self>) {
        self.transport.shutdown();
        self.domain
            .eps
            .with(|v| v.retain(|e| !Arc::ptr_eq(e, self)));
        let shared_rx = |r: &Arc<RxCtx<S>>| Arc::strong_count(r) > 1;
        for r in &self.rx {
            if shared_rx(r) {
                continue;
            }
            r.state.with(|st| {
                let mut all: Vec<(Context, CqFlags)> = st
                    .tagged
                    .drain_posted()
                    .into_iter()
                    .map(|p| (p.ctx, CqFlags::TAGGED))
                    .collect();
                all.extend(
                    st.msg
                        .drain_posted()
                        .into_iter()
                        .map(|p| (p.ctx, CqFlags::MSG)),
                );
                st.enabled = false;
                if let Some(cq) = &st.bind.cq {
                    for (ctx, f) in all {
                        let mut e = CqErrEntry::new(ctx, Error::Canceled);
                        e.flags = CqFlags::RECV | f;
                        cq.complete_err(e);
                    }
                }
            });
        }
        for t in &self.tx {
            if Arc::strong_count(t) > 1 {
                continue;
            }
            t.state.with(|st| {
                st.enabled = false;
                let pend = st.pending.drain();
                let fenced: Vec<OwnedTx> = st.fenced.drain(..).collect();
                if let Some(cq) = &st.bind.cq {
                    for p in pend {
                        let mut e = CqErrEntry::new(p.ctx, Error::Canceled);
                        e.flags = p.flags;
                        cq.complete_err(e);
                    }
                    for o in fenced {
                        let mut e = CqErrEntry::new(o.ctx, Error::Canceled);
                        e.flags = o.completion_flags();
                        cq.complete_err(e);
                    }
                }
            });
        }
    }
}

/// Hands every polled packet to the endpoint's handler for its op; messages may
/// complete into the CQ read `rd` under way.
struct Dispatch<'a, 'r, S: Config> {
    ep: &'a EpInner<S>,
    rd: Option<&'a mut Reader<'r, S>>,
}

impl<S: Config> Sink<<TransportOf<S> as Transport>::Pull> for Dispatch<'_, '_, S> {
    #[inline(always)]
    fn packet(
        &mut self,
        hdr: &Header,
        src: &[u8],
        payload: Payload<'_, <TransportOf<S> as Transport>::Pull>,
    ) -> bool {
        let ep = self.ep;
        match Op::from_raw(hdr.op) {
            Some(Op::Msg | Op::Tagged) => ep.on_message(hdr, src, payload, self.rd.as_deref_mut()),
            Some(Op::Write) => ep.on_write(hdr, src, payload),
            Some(Op::ReadReq) => {
                ep.on_read(hdr, src);
                true
            }
            Some(Op::Atomic) => {
                ep.on_atomic(hdr, src, payload);
                true
            }
            Some(op @ (Op::Ack | Op::ReadResp | Op::AtomicResp)) => {
                let r = Response {
                    op,
                    tx_idx: hdr.tx_idx,
                    req: hdr.req,
                    status: hdr.status,
                };
                ep.on_response(&r, payload, self.rd.as_deref_mut());
                true
            }
            // Garbage from a peer is dropped, never trusted (a remote payload is
            // released unread).
            None => true,
        }
    }

    #[inline(always)]
    fn eager(&mut self, m: &Eager, src: &[u8], payload: SharedBytes<'_>) -> bool {
        self.ep.on_eager(m, src, payload, self.rd.as_deref_mut())
    }

    #[inline(always)]
    fn response(&mut self, r: &Response, _src: &[u8], payload: SharedBytes<'_>) -> bool {
        // `NoPull`: an inline payload only, so the remote arms compile away.
        self.ep.on_response(
            r,
            Payload::<crate::provider::NoPull>::Inline(payload),
            self.rd.as_deref_mut(),
        );
        true
    }

    #[inline(always)]
    fn sated(&self) -> bool {
        self.rd.as_ref().is_some_and(|rd| rd.full())
    }
}

/// Owns the endpoint core; the last handle (including aliases) closes it.
pub(crate) struct EpHandle<S: Config> {
    pub(crate) inner: Arc<EpInner<S>>,
}

impl<S: Config> Drop for EpHandle<S> {
    fn drop(&mut self) {
        self.inner.close();
    }
}

/// An endpoint option (`fi_getopt` / `fi_setopt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpOpt {
    /// `FI_OPT_MIN_MULTI_RECV`: a multi-receive buffer is released when less than this
    /// many bytes remain.
    MinMultiRecv(usize),
    /// `FI_OPT_CM_DATA_SIZE`: connection data size (0: no connection management here).
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

/// An RDM or DGRAM endpoint.
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
        let inner = EpInner::open(domain, info, 1, 1, stx, srx)?;
        Ok(Endpoint {
            h: Arc::new(EpHandle { inner }),
            tx_flags: info.tx_attr.op_flags,
            rx_flags: info.rx_attr.op_flags,
        })
    }

    #[inline(always)]
    pub(crate) fn ep(&self) -> &EpInner<S> {
        &self.h.inner
    }

    /// `fi_ep_bind` of a CQ: `TRANSMIT` and/or `RECV`, optionally `SELECTIVE_COMPLETION`.
    pub fn bind_cq(&self, cq: &Cq<S>, flags: BindFlags) -> Result<()> {
        self.ep().bind_cq(cq, flags, &[0], &[0])
    }

    /// `fi_ep_bind` of a counter: `TRANSMIT`, `RECV`, `READ`, `WRITE`, `REMOTE_READ`,
    /// `REMOTE_WRITE`.
    pub fn bind_cntr(&self, cntr: &Counter<S>, flags: BindFlags) -> Result<()> {
        self.ep().bind_cntr(cntr, flags, &[0], &[0])
    }

    /// `fi_ep_bind` of an address vector.
    pub fn bind_av(&self, av: &AddressVector<S>) -> Result<()> {
        self.ep().bind_av(av)
    }

    /// `fi_ep_bind` of an event queue.
    pub fn bind_eq(&self, eq: &EventQueue<S>) -> Result<()> {
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
            EpOptName::CmDataSize => EpOpt::CmDataSize(0),
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
        let inner = EpInner::open(domain, info, t, r, None, None)?;
        Ok(ScalableEndpoint {
            h: Arc::new(EpHandle { inner }),
            tx_flags: info.tx_attr.op_flags,
            rx_flags: info.rx_attr.op_flags,
        })
    }

    /// `fi_scalable_ep_bind` of the address vector (shared by all contexts).
    pub fn bind_av(&self, av: &AddressVector<S>) -> Result<()> {
        self.h.inner.bind_av(av)
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
            .bind_cq(cq, flags & !BindFlags::RECV, &[self.idx], &[])
    }
    /// Binds a counter.
    pub fn bind_cntr(&self, cntr: &Counter<S>, flags: BindFlags) -> Result<()> {
        self.h.inner.bind_cntr(cntr, flags, &[self.idx], &[])
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
            .bind_cq(cq, flags & !BindFlags::TRANSMIT, &[], &[self.idx])
    }
    /// Binds a counter.
    pub fn bind_cntr(&self, cntr: &Counter<S>, flags: BindFlags) -> Result<()> {
        self.h.inner.bind_cntr(cntr, flags, &[], &[self.idx])
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
        if !Arc::ptr_eq(&cq.inner.domain, &self.domain) {
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
        if !Arc::ptr_eq(&cq.inner.domain, &self.domain) {
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

/// A triggered operation waiting for its counter.
pub(crate) struct Deferred<S: Config> {
    pub(crate) threshold: u64,
    pub(crate) ep: Arc<EpInner<S>>,
    pub(crate) idx: usize,
    pub(crate) op: DeferredOp,
}

pub(crate) enum DeferredOp {
    Tx(OwnedTx),
    Rx(RxReq, OpFlags),
}

impl<S: Config> Deferred<S> {
    /// Posts the operation; a failure becomes an error completion.
    pub(crate) fn run(self) {
        let (res, ctx, cq) = match &self.op {
            DeferredOp::Tx(o) => {
                let iov = [&o.payload[..]];
                let req = o.req(&iov);
                let cq = self
                    .ep
                    .tx
                    .get(self.idx)
                    .and_then(|t| t.state.with(|st| st.bind.cq.clone()));
                (self.ep.post_tx(self.idx, &req, o.flags), o.ctx, cq)
            }
            DeferredOp::Rx(r, f) => {
                let cq = self
                    .ep
                    .rx
                    .get(self.idx)
                    .and_then(|t| t.state.with(|st| st.bind.cq.clone()));
                (self.ep.post_rx(self.idx, r, *f), r.ctx, cq)
            }
        };
        if let (Err(e), Some(cq)) = (res, cq) {
            cq.complete_err(CqErrEntry::new(ctx, e));
        }
    }
}

#[doc(hidden)]
pub fn _header_size() -> usize {
    core::mem::size_of::<Header>()
}
