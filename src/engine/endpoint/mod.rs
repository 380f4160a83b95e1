//! The core of an endpoint: its transport, its transmit and receive contexts, and the
//! handlers for everything that arrives (`on_message`, `on_write`, ... in the
//! submodules), independent of the handles the API gives out.

mod claim;
mod owned;
mod rx;
mod state;
mod target;
mod tx;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attr::EpType;
use crate::config::{Config, LockOf};
use crate::error::{Error, Result};
use crate::flags::{BindFlags, Caps, CqFlags};
use crate::info::Info;
use crate::lock::Lock;
use crate::provider::wire::{Eager, Header, Op, Response};
use crate::provider::{
    Claim, ConnectionManager, HeldBack, Payload, Provider, SharedBytes, Sink, Transport,
};
use crate::types::Context;

use crate::engine::av::AvInner;
use crate::engine::cntr::CntrInner;
use crate::engine::cq::{CqErrEntry, CqInner, Reader};
use crate::engine::eq::EqInner;
use crate::engine::shared::Shared;

pub use owned::RmaIov;
pub(crate) use owned::{OwnedTx, RxReq, TxReq};
pub use rx::MAX_UNEXPECTED;
pub(crate) use state::{RxCtx, TxCtx};
pub use state::{DEFAULT_MIN_MULTI_RECV, DEFAULT_QUEUE_SIZE, UNEXPECTED_BYTES};

pub(crate) type TransportOf<S> = <<S as Config>::Provider as Provider>::Transport;
type SenderOf<S> = <TransportOf<S> as Transport>::Sender;
type ReceiverOf<S> = <TransportOf<S> as Transport>::Receiver;
/// The transport's direct access ([`Absent`](crate::provider::Absent) without).
pub(crate) type DirectOf<S> = <TransportOf<S> as Transport>::Direct;
pub(crate) type HeldBackOf<S> = <TransportOf<S> as Transport>::HeldBack;

/// How long closing an endpoint (or shutting its connection down) waits for a peer to
/// take what the sender still holds: a peer that reads nothing for this long loses it.
const LINGER: Duration = Duration::from_secs(10);
/// Pause between tries while lingering.
const LINGER_POLL: Duration = Duration::from_micros(200);
/// The transport's connection management ([`Absent`](crate::provider::Absent) without).
pub(crate) type CmOf<S> = <TransportOf<S> as Transport>::Cm;

/// Where an MSG endpoint's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Neither connecting nor connected yet.
    Idle,
    /// `connect` or `accept` was called; `FI_CONNECTED` has not come yet.
    Connecting,
    /// The connection is up: the connection table holds the peer.
    Connected,
    /// Shut down, refused or failed: an endpoint connects once.
    Closed,
}

/// What an MSG endpoint adds: the table that stands in for the AV, holding the
/// connection's peer, and where the connection stands.
pub(crate) struct Conn<S: Config> {
    pub(crate) table: Arc<AvInner<S>>,
    pub(crate) state: LockOf<S, ConnState>,
    /// What this endpoint's connection events report as their `fid`.
    pub(crate) fid_context: std::sync::atomic::AtomicUsize,
}

/// The shared core of an endpoint: its transport and its contexts.
pub(crate) struct EpInner<S: Config> {
    /// What the endpoint shares with its domain (MR table, doorbell).
    pub(crate) domain: Arc<Shared<S>>,
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
    /// The connection of an MSG endpoint (`None` for RDM and DGRAM).
    pub(crate) conn: Option<Conn<S>>,
    /// Payloads the transport is receiving straight into their destination.
    claims: LockOf<S, claim::Claims>,
    /// Sends whose completions wait for the transport to hold nothing back, over all
    /// transmit contexts (`TxState::sent`).
    held_sent: AtomicUsize,
}

impl<S: Config> EpInner<S> {
    /// Opens the transport and the contexts: `tx_cnt` and `rx_cnt` of them, or the
    /// shared ones given.
    pub(crate) fn open(
        domain: &Arc<Shared<S>>,
        info: &Info,
        tx_cnt: usize,
        rx_cnt: usize,
        stx: Option<&Arc<TxCtx<S>>>,
        srx: Option<&Arc<RxCtx<S>>>,
    ) -> Result<Arc<Self>> {
        let msg = match info.ep_attr.ep_type {
            EpType::Rdm | EpType::Dgram | EpType::Unspec => false,
            EpType::Msg if <CmOf<S> as ConnectionManager<TransportOf<S>>>::ENABLED => true,
            EpType::Msg => return Err(Error::NotSupported),
        };
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
            Some(s) => vec![s.clone()],
            None => (0..tx_cnt)
                .map(|_| TxCtx::new(caps, info.tx_attr.size, inject, max_msg))
                .collect(),
        };
        let rx = match srx {
            Some(s) => vec![s.clone()],
            None => (0..rx_cnt)
                .map(|_| RxCtx::new(caps, info.rx_attr.size))
                .collect(),
        };
        // The connection's table is every context's AV, bound for good: data
        // transfer needs no AV and the fast path resolves the peer as through one.
        let conn = msg.then(|| Conn {
            table: Arc::new(AvInner::connection()),
            state: LockOf::<S, _>::new(ConnState::Idle),
            fid_context: std::sync::atomic::AtomicUsize::new(0),
        });
        if let Some(c) = &conn {
            for t in &tx {
                t.state.with(|st| st.av = Some(c.table.clone()));
            }
            for r in &rx {
                r.state.with(|st| st.av = Some(c.table.clone()));
            }
        }
        Ok(Arc::new(EpInner {
            conn,
            domain: domain.clone(),
            sender: LockOf::<S, _>::new(transport.sender()),
            receiver: LockOf::<S, _>::new(transport.receiver()),
            transport,
            tx,
            rx,
            info: info.clone(),
            eq: LockOf::<S, _>::new(None),
            claims: LockOf::<S, _>::new(claim::Claims::default()),
            held_sent: AtomicUsize::new(0),
        }))
    }

    /// Drains the transport, dispatching every packet. Returns how many were handled.
    /// `rd`: the CQ read this pass runs for, which receives may complete into.
    #[inline]
    pub(crate) fn progress(&self, rd: Option<&mut Reader<'_, S>>) -> usize {
        if HeldBackOf::<S>::pending(&self.transport) {
            self.sender
                .with(|tx| HeldBackOf::<S>::flush(&self.transport, tx));
        }
        if HeldBackOf::<S>::HOLDS_SENDS && self.held_sent.load(Ordering::Acquire) != 0 {
            self.release_sent(None);
        }
        self.receiver
            .with(|rx| self.transport.poll_into(rx, Dispatch { ep: self, rd }))
    }

    pub(crate) fn bind_cq(
        &self,
        cq: &Arc<CqInner<S>>,
        flags: BindFlags,
        txs: &[usize],
        rxs: &[usize],
    ) -> Result<()> {
        if !Arc::ptr_eq(&cq.shared, &self.domain) {
            return Err(Error::Domain);
        }
        if !flags.intersects(BindFlags::TRANSMIT | BindFlags::RECV) {
            return Err(Error::BadFlags);
        }
        let sel = flags.contains(BindFlags::SELECTIVE_COMPLETION);
        if flags.contains(BindFlags::TRANSMIT) {
            for &i in txs {
                self.tx[i].state.with(|st| {
                    st.bind.cq = Some(cq.clone());
                    st.bind.selective = sel;
                });
            }
        }
        if flags.contains(BindFlags::RECV) {
            for &i in rxs {
                self.rx[i].state.with(|st| {
                    st.bind.cq = Some(cq.clone());
                    st.bind.selective = sel;
                });
            }
        }
        Ok(())
    }

    pub(crate) fn bind_cntr(
        &self,
        c: &Arc<CntrInner<S>>,
        flags: BindFlags,
        txs: &[usize],
        rxs: &[usize],
    ) -> Result<()> {
        if flags.is_empty() {
            return Err(Error::BadFlags);
        }
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

    pub(crate) fn bind_av(&self, av: &Arc<AvInner<S>>) -> Result<()> {
        // A connected endpoint's destination is its peer (`fi_endpoint(3)`).
        if self.conn.is_some() {
            return Err(Error::Inval);
        }
        for t in &self.tx {
            t.state.with(|st| st.av = Some(av.clone()));
        }
        for r in &self.rx {
            r.state.with(|st| st.av = Some(av.clone()));
        }
        Ok(())
    }

    pub(crate) fn enable(&self, txs: &[usize], rxs: &[usize]) -> Result<()> {
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
    pub(crate) fn cancel(&self, ctx: Context) -> Result<()> {
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
    /// What the sender still holds goes out first ([`linger`](Self::linger)).
    pub(crate) fn close(self: &Arc<Self>) {
        self.linger();
        self.release_held(Error::Canceled);
        self.transport.shutdown();
        self.flush(Error::Canceled, true);
    }

    /// Hands the transport what its sender still holds back, within [`LINGER`]: the
    /// bytes of sends that completed when the transport queued them. A close or a
    /// shutdown right after such a completion would otherwise lose them.
    pub(crate) fn linger(&self) {
        let end = Instant::now() + LINGER;
        while HeldBackOf::<S>::pending(&self.transport) && Instant::now() < end {
            self.sender
                .with(|tx| HeldBackOf::<S>::flush(&self.transport, tx));
            if HeldBackOf::<S>::pending(&self.transport) {
                // The peer reads at its own pace; its reading frees the socket.
                std::thread::sleep(LINGER_POLL);
            }
        }
    }

    /// Reports the held sends (`release_sent`) now: as sent if the transport holds
    /// nothing back any more, else failed with `err`.
    pub(crate) fn release_held(&self, err: Error) {
        if HeldBackOf::<S>::HOLDS_SENDS && self.held_sent.load(Ordering::Acquire) != 0 {
            let dropped = HeldBackOf::<S>::holds_sends(&self.transport);
            self.release_sent(dropped.then_some(err));
        }
    }

    /// Completes every operation still outstanding on the endpoint's own contexts
    /// (posted receives, operations waiting for the target or behind a fence) with
    /// `err`; `disable` also refuses further posts on them.
    pub(crate) fn flush(&self, err: Error, disable: bool) {
        self.fail_claims(err);
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
                if disable {
                    st.enabled = false;
                }
                if let Some(cq) = &st.bind.cq {
                    for (ctx, f) in all {
                        let mut e = CqErrEntry::new(ctx, err);
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
                if disable {
                    st.enabled = false;
                }
                let pend = st.pending.drain();
                let fenced: Vec<OwnedTx> = st.fenced.drain(..).collect();
                if let Some(cq) = &st.bind.cq {
                    for p in pend {
                        let mut e = CqErrEntry::new(p.ctx, err);
                        e.flags = p.flags;
                        cq.complete_err(e);
                    }
                    for o in fenced {
                        let mut e = CqErrEntry::new(o.ctx, err);
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

    fn claim(&mut self, hdr: &Header, src: &[u8]) -> Option<Claim> {
        self.ep.claim(hdr, src)
    }

    fn fill<E>(
        &mut self,
        claim: &mut Claim,
        f: impl FnOnce(&mut [u8]) -> core::result::Result<usize, E>,
    ) -> core::result::Result<usize, E> {
        self.ep.claim_fill(claim, f)
    }

    fn claimed(&mut self, claim: Claim, status: Result<()>) {
        self.ep.claimed(claim, status)
    }
}
