//! The composed transport: both halves' transports side by side, each peer sent to
//! through the half it was resolved to.
//!
//! **Sending** is one match on the peer ([`Peer`]): the half's own send, with its own
//! fast paths, follows. **Responses** go back the way their request came: the source
//! address a half hands on with a packet is that half's name of the sender
//! ([`Half::owns`] tells which), so a reply needs no table.
//!
//! **Polling.** The local half is polled every time. The remote half costs a system
//! call per poll (tcp's `epoll_wait`), several times a shared-memory poll, so it is
//! polled every time only while it is *hot*: for [`HOT_POLLS`] polls of it after it
//! last delivered a packet or after this endpoint sent something through it. Cold, it
//! is polled once every [`COLD_STRIDE`] polls, which bounds how late the first packet
//! of a new remote peer, or a broken connection, is noticed; and at the first poll
//! after a thread armed the endpoint before sleeping ([`RemoteWake`]), so that what
//! woke it is seen.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use fabric::provider::wire::{Eager, Header, Response};
use fabric::provider::{Absent, Claim, Direct, DirectAccess, DirectReq, HeldBack, RemoteWake};
use fabric::waitobj::Waiter;
use fabric::{NoPull, Payload, Provider, Result, SharedBytes, Sink, Transport};

use crate::Half;

/// Polls the remote half stays polled every time after it was last active.
pub const HOT_POLLS: u32 = 1 << 16;
/// While cold, the remote half is polled once every this many polls.
pub const COLD_STRIDE: u32 = 1024;

/// [`HybridEp::kick`]: look at the remote half at the next poll.
const LOOK: u8 = 1;
/// [`HybridEp::kick`]: look at the remote half at the next polls, as after an arrival.
const HEAT: u8 = 2;

/// A peer resolved at AV insert: through which half it is reached.
#[derive(Debug, Clone)]
pub enum Peer<A, B> {
    /// On this node: the local half.
    Local(A),
    /// Elsewhere: the remote half.
    Remote(B),
}

impl<A, B> Peer<A, B> {
    /// Whether the peer is reached through the local half.
    pub fn is_local(&self) -> bool {
        matches!(self, Peer::Local(_))
    }
}

type TransportOf<P> = <P as Provider>::Transport;
type SenderOf<P> = <TransportOf<P> as Transport>::Sender;
type ReceiverOf<P> = <TransportOf<P> as Transport>::Receiver;
type PullOf<P> = <TransportOf<P> as Transport>::Pull;
type DirectOf<P> = <TransportOf<P> as Transport>::Direct;
type HeldBackOf<P> = <TransportOf<P> as Transport>::HeldBack;
type RemoteWakeOf<P> = <TransportOf<P> as Transport>::RemoteWake;

/// The transport of one endpoint: the local half's and the remote half's.
pub struct HybridEp<L: Half, R: Half> {
    pub(crate) local: L::Transport,
    pub(crate) remote: R::Transport,
    name: Box<[u8]>,
    /// Set when the remote half may have news soon: the next poll looks at it, and
    /// keeps looking ([`HEAT`]: a request went out through it, its response comes
    /// that way) or looks once ([`LOOK`]: a thread armed the endpoint before sleeping,
    /// and whatever wakes it is to be seen).
    kick: AtomicU8,
}

impl<L: Half, R: Half> HybridEp<L, R> {
    pub(crate) fn new(local: L::Transport, remote: R::Transport, name: Vec<u8>) -> Self {
        HybridEp {
            local,
            remote,
            name: name.into_boxed_slice(),
            kick: AtomicU8::new(0),
        }
    }

    /// The local half's transport.
    pub fn local(&self) -> &L::Transport {
        &self.local
    }

    /// The remote half's transport.
    pub fn remote(&self) -> &R::Transport {
        &self.remote
    }
}

/// The sending state of an endpoint: both halves'.
pub struct HybridTx<L: Half, R: Half> {
    local: SenderOf<L>,
    remote: SenderOf<R>,
}

/// The receiving state of an endpoint: both halves', and when to poll the remote one.
pub struct HybridRx<L: Half, R: Half> {
    local: ReceiverOf<L>,
    remote: ReceiverOf<R>,
    /// Polls of the remote half left in which it is polled every time.
    hot: u32,
    /// Polls left until the remote half is polled: 1 while it is hot.
    due: u32,
}

/// The core's sink, handed to the local half: everything passes through unchanged;
/// a refused packet is noted, so that polling stops there.
struct Near<'a, K> {
    sink: &'a mut K,
    refused: &'a mut bool,
}

impl<P, K: Sink<P>> Sink<P> for Near<'_, K> {
    #[inline(always)]
    fn packet(&mut self, hdr: &Header, src: &[u8], payload: Payload<'_, P>) -> bool {
        let ok = self.sink.packet(hdr, src, payload);
        *self.refused |= !ok;
        ok
    }
    #[inline(always)]
    fn eager(&mut self, m: &Eager, src: &[u8], payload: SharedBytes<'_>) -> bool {
        let ok = self.sink.eager(m, src, payload);
        *self.refused |= !ok;
        ok
    }
    #[inline(always)]
    fn response(&mut self, r: &Response, src: &[u8], payload: SharedBytes<'_>) -> bool {
        let ok = self.sink.response(r, src, payload);
        *self.refused |= !ok;
        ok
    }
    #[inline(always)]
    fn claim(&mut self, hdr: &Header, src: &[u8]) -> Option<Claim> {
        self.sink.claim(hdr, src)
    }
    #[inline(always)]
    fn fill<E>(
        &mut self,
        claim: &mut Claim,
        f: impl FnOnce(&mut [u8]) -> core::result::Result<usize, E>,
    ) -> core::result::Result<usize, E> {
        self.sink.fill(claim, f)
    }
    #[inline(always)]
    fn claimed(&mut self, claim: Claim, status: Result<()>) {
        self.sink.claimed(claim, status)
    }
    #[inline(always)]
    fn sated(&self) -> bool {
        self.sink.sated()
    }
}

/// The core's sink, handed to the remote half, whose payloads are always in the
/// packet ([`NoPull`]): they pass as the same inline bytes.
struct Far<'a, K, P> {
    sink: &'a mut K,
    pull: PhantomData<fn() -> P>,
}

impl<P, K: Sink<P>> Sink<NoPull> for Far<'_, K, P> {
    #[inline]
    fn packet(&mut self, hdr: &Header, src: &[u8], payload: Payload<'_, NoPull>) -> bool {
        let payload = match payload {
            Payload::Inline(s) => Payload::Inline(s),
            Payload::Remote(never) => match *never {},
        };
        self.sink.packet(hdr, src, payload)
    }
    #[inline]
    fn eager(&mut self, m: &Eager, src: &[u8], payload: SharedBytes<'_>) -> bool {
        self.sink.eager(m, src, payload)
    }
    #[inline]
    fn response(&mut self, r: &Response, src: &[u8], payload: SharedBytes<'_>) -> bool {
        self.sink.response(r, src, payload)
    }
    #[inline]
    fn claim(&mut self, hdr: &Header, src: &[u8]) -> Option<Claim> {
        self.sink.claim(hdr, src)
    }
    #[inline]
    fn fill<E>(
        &mut self,
        claim: &mut Claim,
        f: impl FnOnce(&mut [u8]) -> core::result::Result<usize, E>,
    ) -> core::result::Result<usize, E> {
        self.sink.fill(claim, f)
    }
    #[inline]
    fn claimed(&mut self, claim: Claim, status: Result<()>) {
        self.sink.claimed(claim, status)
    }
    #[inline]
    fn sated(&self) -> bool {
        self.sink.sated()
    }
}

impl<L: Half, R: Half> Transport for HybridEp<L, R>
where
    TransportOf<R>: Transport<Pull = NoPull>,
{
    type Peer = Peer<L::Peer, R::Peer>;
    type Sender = HybridTx<L, R>;
    type Receiver = HybridRx<L, R>;
    type Pull = PullOf<L>;
    type Direct = Self;
    type HeldBack = Self;
    type RemoteWake = Self;
    type Cm = Absent;

    fn name(&self) -> &[u8] {
        &self.name
    }

    fn sender(&self) -> HybridTx<L, R> {
        HybridTx {
            local: self.local.sender(),
            remote: self.remote.sender(),
        }
    }

    fn receiver(&self) -> HybridRx<L, R> {
        HybridRx {
            local: self.local.receiver(),
            remote: self.remote.receiver(),
            hot: 0,
            due: 1,
        }
    }

    #[inline]
    fn send(
        &self,
        tx: &mut HybridTx<L, R>,
        to: &Self::Peer,
        hdr: &Header,
        payload: &[&[u8]],
    ) -> Result<()> {
        match to {
            Peer::Local(p) => self.local.send(&mut tx.local, p, hdr, payload),
            Peer::Remote(p) => {
                self.kick.store(HEAT, Ordering::Relaxed);
                self.remote.send(&mut tx.remote, p, hdr, payload)
            }
        }
    }

    #[inline(always)]
    fn send_eager(
        &self,
        tx: &mut HybridTx<L, R>,
        to: &Self::Peer,
        m: &Eager,
        payload: &[&[u8]],
    ) -> Result<()> {
        match to {
            Peer::Local(p) => self.local.send_eager(&mut tx.local, p, m, payload),
            Peer::Remote(p) => {
                self.kick.store(HEAT, Ordering::Relaxed);
                self.remote.send_eager(&mut tx.remote, p, m, payload)
            }
        }
    }

    /// Back through the half the request came through, resolved by that half: `to`
    /// is that half's name of the requester, never a composed one.
    #[inline]
    fn reply<F: FnOnce(&[u8]) -> Result<Self::Peer>>(
        &self,
        tx: &mut HybridTx<L, R>,
        to: &[u8],
        hdr: &Header,
        payload: &[&[u8]],
        _resolve: F,
    ) -> Result<()> {
        if L::owns(to) {
            self.local
                .reply(&mut tx.local, to, hdr, payload, L::resolve)
        } else {
            self.remote
                .reply(&mut tx.remote, to, hdr, payload, R::resolve)
        }
    }

    /// As [`reply`](Transport::reply): through the half the request came through.
    #[inline]
    fn respond<F: FnOnce(&[u8]) -> Result<Self::Peer>>(
        &self,
        tx: &mut HybridTx<L, R>,
        to: &[u8],
        r: &Response,
        payload: &[u8],
        _resolve: F,
    ) -> Result<()> {
        if L::owns(to) {
            self.local
                .respond(&mut tx.local, to, r, payload, L::resolve)
        } else {
            self.remote
                .respond(&mut tx.remote, to, r, payload, R::resolve)
        }
    }

    #[inline]
    fn poll<F: FnMut(&Header, &[u8], Payload<'_, PullOf<L>>) -> bool>(
        &self,
        rx: &mut HybridRx<L, R>,
        f: F,
    ) -> usize {
        self.poll_into(rx, f)
    }

    #[inline]
    fn poll_into<K: Sink<PullOf<L>>>(&self, rx: &mut HybridRx<L, R>, mut sink: K) -> usize {
        let mut refused = false;
        let near = Near {
            sink: &mut sink,
            refused: &mut refused,
        };
        let n = self.local.poll_into(&mut rx.local, near);
        if refused {
            return n;
        }
        // The one test a local poll pays: is the remote half due? (While it is hot,
        // `due` is 1 after every poll of it.)
        rx.due -= 1;
        if rx.due != 0 && self.kick.load(Ordering::Relaxed) == 0 {
            return n;
        }
        n + self.poll_remote(rx, &mut sink)
    }

    fn set_waker(&self, waker: Arc<Waiter>) {
        self.local.set_waker(waker.clone());
        self.remote.set_waker(waker);
    }

    fn shutdown(&self) {
        self.local.shutdown();
        self.remote.shutdown();
    }
}

impl<L: Half, R: Half> HybridEp<L, R>
where
    TransportOf<R>: Transport<Pull = NoPull>,
{
    /// Polls the remote half and updates its temperature. Out of line: the local
    /// poll's path stays short.
    #[inline(never)]
    fn poll_remote<K: Sink<PullOf<L>>>(&self, rx: &mut HybridRx<L, R>, sink: &mut K) -> usize {
        if self.kick.load(Ordering::Relaxed) != 0 && self.kick.swap(0, Ordering::Relaxed) == HEAT {
            rx.hot = HOT_POLLS;
        }
        let far = Far {
            sink,
            pull: PhantomData,
        };
        let m = self.remote.poll_into(&mut rx.remote, far);
        if m != 0 {
            rx.hot = HOT_POLLS;
            crate::REMOTE_PACKETS.fetch_add(m as u64, Ordering::Relaxed);
        } else {
            rx.hot = rx.hot.saturating_sub(1);
        }
        rx.due = if rx.hot != 0 { 1 } else { COLD_STRIDE };
        m
    }
}

/// Held-back packets of either half.
impl<L: Half, R: Half> HeldBack<HybridEp<L, R>> for HybridEp<L, R>
where
    TransportOf<R>: Transport<Pull = NoPull>,
{
    const HOLDS_SENDS: bool = <HeldBackOf<L> as HeldBack<TransportOf<L>>>::HOLDS_SENDS
        || <HeldBackOf<R> as HeldBack<TransportOf<R>>>::HOLDS_SENDS;

    #[inline]
    fn pending(t: &Self) -> bool {
        <HeldBackOf<L> as HeldBack<TransportOf<L>>>::pending(&t.local)
            || <HeldBackOf<R> as HeldBack<TransportOf<R>>>::pending(&t.remote)
    }

    #[inline]
    fn holds_sends(t: &Self) -> bool {
        (<HeldBackOf<L> as HeldBack<TransportOf<L>>>::HOLDS_SENDS
            && <HeldBackOf<L> as HeldBack<TransportOf<L>>>::holds_sends(&t.local))
            || (<HeldBackOf<R> as HeldBack<TransportOf<R>>>::HOLDS_SENDS
                && <HeldBackOf<R> as HeldBack<TransportOf<R>>>::holds_sends(&t.remote))
    }

    fn flush(t: &Self, tx: &mut HybridTx<L, R>) {
        if <HeldBackOf<L> as HeldBack<TransportOf<L>>>::pending(&t.local) {
            <HeldBackOf<L> as HeldBack<TransportOf<L>>>::flush(&t.local, &mut tx.local);
        }
        if <HeldBackOf<R> as HeldBack<TransportOf<R>>>::pending(&t.remote) {
            <HeldBackOf<R> as HeldBack<TransportOf<R>>>::flush(&t.remote, &mut tx.remote);
        }
    }
}

/// Direct access wherever the peer's half has it.
impl<L: Half, R: Half> DirectAccess<HybridEp<L, R>> for HybridEp<L, R>
where
    TransportOf<R>: Transport<Pull = NoPull>,
{
    const ENABLED: bool = <DirectOf<L> as DirectAccess<TransportOf<L>>>::ENABLED
        || <DirectOf<R> as DirectAccess<TransportOf<R>>>::ENABLED;

    #[inline]
    fn direct<F: FnMut(SharedBytes<'_>)>(
        t: &Self,
        tx: &mut HybridTx<L, R>,
        to: &Peer<L::Peer, R::Peer>,
        req: &DirectReq<'_>,
        hold: bool,
        out: F,
    ) -> Direct {
        match to {
            Peer::Local(p) => <DirectOf<L> as DirectAccess<TransportOf<L>>>::direct(
                &t.local,
                &mut tx.local,
                p,
                req,
                hold,
                out,
            ),
            Peer::Remote(p) => <DirectOf<R> as DirectAccess<TransportOf<R>>>::direct(
                &t.remote,
                &mut tx.remote,
                p,
                req,
                hold,
                out,
            ),
        }
    }

    #[inline(always)]
    fn direct_write(
        t: &Self,
        tx: &mut HybridTx<L, R>,
        to: &Peer<L::Peer, R::Peer>,
        addr: u64,
        key: u64,
        data: &[u8],
    ) -> Direct {
        match to {
            Peer::Local(p) => <DirectOf<L> as DirectAccess<TransportOf<L>>>::direct_write(
                &t.local,
                &mut tx.local,
                p,
                addr,
                key,
                data,
            ),
            Peer::Remote(p) => <DirectOf<R> as DirectAccess<TransportOf<R>>>::direct_write(
                &t.remote,
                &mut tx.remote,
                p,
                addr,
                key,
                data,
            ),
        }
    }
}

/// Both halves wake the sleeper; and the next polls look at the remote half, whose
/// arrival may be what woke it.
impl<L: Half, R: Half> RemoteWake<HybridEp<L, R>> for HybridEp<L, R>
where
    TransportOf<R>: Transport<Pull = NoPull>,
{
    fn arm(t: &Self, target: (std::os::fd::RawFd, u64)) {
        t.kick.fetch_max(LOOK, Ordering::Relaxed);
        <RemoteWakeOf<L> as RemoteWake<TransportOf<L>>>::arm(&t.local, target);
        <RemoteWakeOf<R> as RemoteWake<TransportOf<R>>>::arm(&t.remote, target);
    }
}
