//! What a provider supplies: a transport that moves [`Header`]-framed packets between
//! endpoints, plus address handling and a description of its capabilities.
//!
//! Everything else (matching, RMA and atomics against the MR table, completions,
//! counters, acknowledgements, triggered operations, cancel) lives in the core and is
//! shared by every provider, so a provider is mostly its transport.

mod claim;
mod ext;
pub mod wire;

pub use claim::Claim;

pub use ext::{
    Absent, CmEvent, CmRequest, ConnectionManager, Direct, DirectAccess, DirectOp, DirectReq,
    HeldBack, RemoteWake, DEFAULT_CM_DATA_SIZE,
};

use std::sync::Arc;

use typenum::{Const, IsLessOrEqual, LeEq, ToUInt, True, Unsigned, U};

use crate::error::{Error, Result};
use crate::info::Info;
use crate::waitobj::Waiter;
use wire::{Eager, Header, Response};

/// A fabric provider (loopback, shm, tcp, udp, ...). Open: providers live in their own crates.
pub trait Provider: Sized + Send + Sync + 'static {
    /// Provider name as in `FI_PROVIDER` and `fi_info -p`.
    const NAME: &'static str;
    /// Provider version (`FI_VERSION(major, minor)` layout).
    const VERSION: u32;
    /// Largest payload of `inject` calls, as a type: the array injects
    /// ([`Endpoint::tinject_array`](crate::Endpoint::tinject_array), ...) are bounded by
    /// it at compile time and carry no run-time length test.
    type InjectSize: Unsigned;
    /// Largest payload of `inject` calls, the value of [`Provider::InjectSize`]. Leave
    /// the default: the core relies on the two agreeing (and checks it at compile time
    /// when a fabric of the provider is opened).
    const INJECT_SIZE: usize = <Self::InjectSize as Unsigned>::USIZE;
    /// Largest message.
    const MAX_MSG_SIZE: usize;

    /// A peer resolved at AV-insert time, stored in the AV entry and used on every send.
    type Peer: Send + Sync + 'static;
    /// The per-endpoint transport.
    type Transport: Transport<Peer = Self::Peer>;

    /// What the provider can do, best first: candidates that `getinfo` filters by hints.
    fn candidates() -> Vec<Info>;
    /// Opens the transport of a new endpoint described by `info`.
    fn open(info: &Info) -> Result<Self::Transport>;
    /// Resolves a peer's raw address (`fi_av_insert`). Malformed or unknown addresses
    /// fail with [`Error::AddrNotAvail`] or `Inval`.
    fn resolve(name: &[u8]) -> Result<Self::Peer>;
    /// The other raw addresses under which packets from the peer named `name` arrive:
    /// the source addresses [`Transport::poll`] hands on with them where those are not
    /// `name` itself (a composed provider, whose parts each name the peer their own
    /// way). The AV maps each back to the peer, for `FI_SOURCE` and directed receives.
    /// Called when a peer is inserted, never on the data path. The default: none.
    fn aliases(name: &[u8]) -> Vec<Box<[u8]>> {
        let _ = name;
        Vec::new()
    }
    /// The raw address of `node`/`service` (`fi_av_insertsvc`).
    fn name_from_svc(node: &str, service: &str) -> Result<Vec<u8>>;
    /// The raw source address of `node`/`service` (`fi_getinfo` with `FI_SOURCE`, or a
    /// service without a node): what an endpoint opened with it as `src_addr` binds to.
    /// Unlike a peer's name it may leave parts to the provider (an empty or `"0"`
    /// service: any port). The default is [`name_from_svc`](Self::name_from_svc).
    fn source_from_svc(node: &str, service: &str) -> Result<Vec<u8>> {
        Self::name_from_svc(node, service)
    }
    /// A printable form of a raw address (`fi_av_straddr`).
    fn straddr(name: &[u8]) -> String;
}

/// Moves packets between endpoints. Always thread-safe: peers in other threads (or
/// processes) send into it while its owner polls.
///
/// The state that only one thread may touch at a time (a sender's per-peer queues,
/// a receiver's view of its incoming queues) is not kept inside the transport: the
/// transport hands it out once ([`sender`](Self::sender), [`receiver`](Self::receiver))
/// and the core keeps each behind the lock family of the stack, passing `&mut` to
/// [`send`](Self::send) and [`poll`](Self::poll). Under `ThreadDomain` that lock is an
/// unsynchronized cell, so a provider can run single-producer/single-consumer queues
/// without a locked instruction; under the locked families the core's mutex
/// serializes callers.
pub trait Transport: Send + Sync + 'static {
    /// The resolved peer type of the provider.
    type Peer;
    /// Sending state of one endpoint (e.g. a queue per peer). The core calls
    /// [`sender`](Self::sender) once per endpoint and serializes every `send` on it.
    type Sender: Send + 'static;
    /// Receiving state of one endpoint. The core calls [`receiver`](Self::receiver)
    /// once per endpoint and serializes every `poll` on it, so packets are handled in
    /// order even when several threads progress the endpoint.
    type Receiver: Send + 'static;
    /// Payloads this transport leaves with the sender ([`Payload::Remote`]); the core
    /// copies them straight into their destination. [`NoPull`] for a transport whose
    /// payloads are always in the packet.
    type Pull: Pull;
    /// Initiator-side access to target memory ([`DirectAccess`]): `Self` for a
    /// transport that implements it, [`Absent`] otherwise.
    type Direct: DirectAccess<Self>;
    /// Packets held back by the sender ([`HeldBack`]): `Self` or [`Absent`].
    type HeldBack: HeldBack<Self>;
    /// Wake-ups from peers in other processes ([`RemoteWake`]): `Self` or [`Absent`].
    type RemoteWake: RemoteWake<Self>;
    /// Connection management for MSG endpoints ([`ConnectionManager`]): `Self` or
    /// [`Absent`] (then MSG endpoints are `NotSupported`).
    type Cm: ConnectionManager<Self>;
    /// This endpoint's raw address (`fi_getname`).
    fn name(&self) -> &[u8];
    /// A fresh sending state for this endpoint.
    fn sender(&self) -> Self::Sender;
    /// A fresh receiving state for this endpoint.
    fn receiver(&self) -> Self::Receiver;
    /// Sends one packet made of `hdr` and the concatenation of `payload`.
    /// `Err(Again)` when the peer cannot take a request now (backpressure),
    /// `Err(HostUnreach)` when the peer is gone. Responses (`Ack`, `ReadResp`,
    /// `AtomicResp`) are never refused with `Again`: they are bounded by the
    /// initiator's transmit queue, and refusing one would lose a completion.
    fn send(
        &self,
        tx: &mut Self::Sender,
        to: &Self::Peer,
        hdr: &Header,
        payload: &[&[u8]],
    ) -> Result<()>;
    /// Sends a message that needs no response: exactly [`send`](Self::send) of
    /// `m.header()` and `payload`, which is what the default does. A transport with a
    /// shorter wire form for such messages (the bulk of small-message traffic) writes
    /// it here without building and re-reading the whole header.
    #[inline]
    fn send_eager(
        &self,
        tx: &mut Self::Sender,
        to: &Self::Peer,
        m: &Eager,
        payload: &[&[u8]],
    ) -> Result<()> {
        self.send(tx, to, &m.header(), payload)
    }

    /// Sends response `hdr` (an `Ack`, `ReadResp` or `AtomicResp`, with the
    /// concatenation of `payload`) to the endpoint whose raw address is `to`: the
    /// source address [`poll`](Self::poll) handed on with the request it answers.
    /// Like [`send`](Self::send) of a response, never refused with `Again`.
    ///
    /// The default resolves `to` with `resolve` (the provider's
    /// [`Provider::resolve`]) and sends; a transport that can find the requester from
    /// its address more cheaply (the channel it just sent on, say) overrides it.
    #[inline]
    fn reply<R: FnOnce(&[u8]) -> Result<Self::Peer>>(
        &self,
        tx: &mut Self::Sender,
        to: &[u8],
        hdr: &Header,
        payload: &[&[u8]],
        resolve: R,
    ) -> Result<()> {
        let peer = resolve(to)?;
        self.send(tx, &peer, hdr, payload)
    }

    /// Sends response `r` with its payload `payload` (one piece, possibly empty) to the
    /// endpoint whose raw address is `to`: exactly [`reply`](Self::reply) of
    /// `r.header(payload.len())` and `payload`, which is what the default does. A
    /// transport with a short wire form for responses
    /// ([`Sink::response`]) writes it here without building a [`Header`].
    #[inline]
    fn respond<R: FnOnce(&[u8]) -> Result<Self::Peer>>(
        &self,
        tx: &mut Self::Sender,
        to: &[u8],
        r: &Response,
        payload: &[u8],
        resolve: R,
    ) -> Result<()> {
        let one = [payload];
        let parts: &[&[u8]] = if payload.is_empty() { &[] } else { &one };
        self.reply(tx, to, &r.header(payload.len()), parts, resolve)
    }

    /// Hands received packets to `f` as `(header, source address, payload)`, oldest
    /// first per sender. When `f` returns `false` the packet was not consumed: it
    /// stays first and polling stops. Returns the number of packets consumed.
    ///
    /// A [`Payload::Remote`] is valid for the duration of the call to `f` only: by the
    /// time `f` returns, the core has copied out whatever it needs (into the posted
    /// receive, the registered memory, the read buffer, or its own unexpected-message
    /// buffer), so the transport may release the sender's buffer after a consumed
    /// packet. Its [`len`](Pull::len) equals `hdr.len` for every op that carries a
    /// payload. Atomic requests (at most
    /// [`MAX_ATOMIC_SIZE`](crate::limits::MAX_ATOMIC_SIZE) bytes of operands) are always
    /// sent [`Payload::Inline`]; the core refuses a remote one with `FI_EIO`.
    fn poll<F: FnMut(&Header, &[u8], Payload<'_, Self::Pull>) -> bool>(
        &self,
        rx: &mut Self::Receiver,
        f: F,
    ) -> usize;
    /// [`poll`](Self::poll) into a [`Sink`], which is what the core calls. The default
    /// hands every packet to [`Sink::packet`]. A transport with a short wire form for
    /// messages that need no response (see [`send_eager`](Self::send_eager)) overrides
    /// it and hands those to [`Sink::eager`], without building a [`Header`]: the core
    /// then matches, copies and completes them on a lane of its own.
    #[inline]
    fn poll_into<K: Sink<Self::Pull>>(&self, rx: &mut Self::Receiver, mut sink: K) -> usize {
        self.poll(rx, |hdr, src, payload| sink.packet(hdr, src, payload))
    }
    /// Installs the waiter to signal when a packet arrives (for blocking waits).
    fn set_waker(&self, waker: Arc<Waiter>);
    /// Stops accepting packets: later sends from peers fail with `HostUnreach`.
    fn shutdown(&self);
}

/// Where [`Transport::poll_into`] hands received packets: a packet with its header, or
/// a message that travelled in a short form ([`Eager`]).
///
/// Every `FnMut(&Header, &[u8], Payload<'_, R>) -> bool` closure is a sink whose
/// [`eager`](Sink::eager) builds the header, so [`Transport::poll`] can be written as
/// `poll_into` of its closure.
pub trait Sink<R> {
    /// A packet, with the source address and the payload: as the closure of
    /// [`Transport::poll`], `false` leaves it unconsumed.
    fn packet(&mut self, hdr: &Header, src: &[u8], payload: Payload<'_, R>) -> bool;
    /// A message that needs no response (no acknowledgement asked), described by `m`,
    /// with its `m.len` payload bytes in the packet. Means exactly
    /// `packet(&m.header(), src, Payload::Inline(payload))`, which is what the default
    /// does.
    #[inline]
    fn eager(&mut self, m: &Eager, src: &[u8], payload: SharedBytes<'_>) -> bool {
        self.packet(&m.header(), src, Payload::Inline(payload))
    }
    /// A response to one of this endpoint's requests that travelled in a short form,
    /// described by `r`, with its payload (a read's data, a fetching atomic's old
    /// values) in the packet. Means exactly
    /// `packet(&r.header(payload.len()), src, Payload::Inline(payload))`, which is what
    /// the default does.
    #[inline]
    fn response(&mut self, r: &Response, src: &[u8], payload: SharedBytes<'_>) -> bool {
        self.packet(&r.header(payload.len()), src, Payload::Inline(payload))
    }
    /// The destination of the payload of the frame whose header is `hdr`, from the
    /// endpoint whose raw address is `src`, for a transport that reads the payload in
    /// several steps (see [`Claim`]): the posted receive a message matches (with the
    /// matching done now, so the message is the next of its sender to be matched and
    /// nothing else can take that receive), the registered memory of an RMA write
    /// whose key, range and rights pass, or the buffer of the read a successful read
    /// response answers. `None` (the default) when there is none (an unexpected
    /// message, a multi-receive buffer, a request that fails its checks, an op that is
    /// not claimed): the transport then receives the frame whole and hands it to
    /// [`packet`](Self::packet) as usual.
    ///
    /// Once a claim is made the frame belongs to it: the transport moves its payload
    /// with [`fill`](Self::fill) and [`Claim::skip`] and hands it back with
    /// [`claimed`](Self::claimed); it never hands the frame to `packet`.
    #[inline]
    fn claim(&mut self, hdr: &Header, src: &[u8]) -> Option<Claim> {
        let _ = (hdr, src);
        None
    }
    /// Places payload bytes of `claim`: calls `f` with the next stretch of the
    /// destination (at most [`Claim::room`] bytes, one contiguous piece), which `f`
    /// fills from its start (a socket read straight into it) and returns how many
    /// bytes it wrote, or its error, which is returned as is. `Ok(0)` without calling
    /// `f` when the destination takes nothing more ([`Claim::room`] is 0, or it was
    /// withdrawn meanwhile: then the transport skips the rest).
    ///
    /// The default belongs to sinks that never claim: it withdraws the claim.
    #[inline]
    fn fill<E>(
        &mut self,
        claim: &mut Claim,
        f: impl FnOnce(&mut [u8]) -> core::result::Result<usize, E>,
    ) -> core::result::Result<usize, E> {
        let _ = f;
        claim.withdraw();
        Ok(0)
    }
    /// Hands back a claim: `Ok(())` once its whole payload was moved, or the error that
    /// ended it (the connection broke mid-payload: `Err(HostUnreach)`). The core
    /// completes the operation once: a receive with its data (or `FI_ETRUNC` when the
    /// buffer was shorter), an RMA write with its acknowledgement, a read with its
    /// completion; or in error, with no partial success. Never refused.
    #[inline]
    fn claimed(&mut self, claim: Claim, status: Result<()>) {
        let _ = status;
        debug_assert!(
            false,
            "{claim:?} handed back to a sink that makes no claims"
        );
    }
    /// Whether the CQ read that runs this poll has all the entries it asked for: the
    /// transport may leave the rest of the channel it is draining to the next poll (it
    /// still looks at its other channels, so none starves). The default: never.
    #[inline]
    fn sated(&self) -> bool {
        false
    }
}

impl<R, F: FnMut(&Header, &[u8], Payload<'_, R>) -> bool> Sink<R> for F {
    #[inline(always)]
    fn packet(&mut self, hdr: &Header, src: &[u8], payload: Payload<'_, R>) -> bool {
        self(hdr, src, payload)
    }
}

/// Payload bytes that stay with the sender until the receiver copies them out (for
/// example a large message in another process, read with `process_vm_readv` or from a
/// mapped staging buffer).
pub trait Pull {
    /// Bytes in the payload.
    fn len(&self) -> usize;
    /// Whether the payload is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies payload bytes `off..off + dst.len()` into `dst`. `Err(Error::Io)` (or
    /// another error) when the sender is gone or the range is outside the payload; then
    /// `dst` may hold partial data.
    fn read(&self, off: usize, dst: &mut [u8]) -> Result<()>;
}

/// The [`Pull`] of a transport without remote payloads (uninhabited: such a transport
/// only ever hands out [`Payload::Inline`], and the core's remote paths compile away).
#[derive(Debug)]
pub enum NoPull {}

impl Pull for NoPull {
    #[inline(always)]
    fn len(&self) -> usize {
        match *self {}
    }
    #[inline(always)]
    fn read(&self, _off: usize, _dst: &mut [u8]) -> Result<()> {
        match *self {}
    }
}

pub use crate::bytes::SharedBytes;

/// A received packet's payload: in the packet, or left with the sender.
pub enum Payload<'a, R> {
    /// The bytes are in the packet, which the sender's process may still write (a
    /// misbehaving one): a [`SharedBytes`], copied out, never borrowed.
    Inline(SharedBytes<'a>),
    /// The bytes are with the sender; [`Payload::copy_to`] reads them.
    Remote(&'a R),
}

// Manual impls: a derive would require `R: Clone`/`R: Copy`, but only references are held.
impl<R> Clone for Payload<'_, R> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Payload<'_, R> {}

impl<R: Pull> core::fmt::Debug for Payload<'_, R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Payload::Inline(s) => f.debug_tuple("Inline").field(&s.len()).finish(),
            Payload::Remote(r) => f.debug_tuple("Remote").field(&r.len()).finish(),
        }
    }
}

impl<'a, R: Pull> Payload<'a, R> {
    /// Bytes in the payload.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Payload::Inline(s) => s.len(),
            Payload::Remote(r) => r.len(),
        }
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, if they are in the packet.
    #[inline]
    pub fn inline(&self) -> Option<SharedBytes<'a>> {
        match *self {
            Payload::Inline(s) => Some(s),
            Payload::Remote(_) => None,
        }
    }

    /// Copies payload bytes `off..off + dst.len()` into `dst`: a `memcpy` for an
    /// inline payload, a [`Pull::read`] for a remote one. `Err(Io)` when the range
    /// reaches past the payload (nothing copied) and whatever error the pull reports
    /// (then `dst` may hold partial data). Never panics.
    #[inline]
    pub fn copy_to(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        match *self {
            Payload::Inline(s) => s.copy_to(off, dst),
            // `len` is asked here, inline, rather than in `pull_to`: for `NoPull` it is
            // unreachable, which lets the compiler drop this arm and the variant test.
            Payload::Remote(r) => pull_to(r, r.len(), off, dst),
        }
    }
}

/// The remote arm of [`Payload::copy_to`], kept out of the inline fast path.
#[cold]
#[inline(never)]
fn pull_to<R: Pull>(r: &R, len: usize, off: usize, dst: &mut [u8]) -> Result<()> {
    match off.checked_add(dst.len()) {
        Some(end) if end <= len => r.read(off, dst),
        _ => Err(Error::Io),
    }
}

/// Proof that an inject payload of `N` bytes fits provider `P`'s
/// [`InjectSize`](Provider::InjectSize): implemented for `typenum::Const<N>` exactly when
/// `N <= P::InjectSize`. It bounds the array injects
/// ([`Endpoint::tinject_array`](crate::Endpoint::tinject_array), ...), so an oversized
/// array does not compile and a fitting one needs no run-time length test.
///
/// `N` goes through typenum's const-generic bridge (`Const<N>: ToUInt`), which covers
/// `0..=1024` and the powers of two (and powers of two minus one) above; other
/// lengths use the slice calls.
#[diagnostic::on_unimplemented(
    message = "an inject of `{Self}` bytes: typenum cannot express this length",
    label = "no `typenum::ToUInt` for this array length",
    note = "the array injects take lengths 0..=1024, powers of two and powers of two minus one; use the slice call (`tinject`, `inject`, ...) for other lengths"
)]
pub trait InjectFits<P: Provider> {}

impl<P: Provider, const N: usize> InjectFits<P> for Const<N>
where
    Const<N>: ToUInt,
    U<N>: IsLessOrEqual<P::InjectSize>,
    LeEq<U<N>, P::InjectSize>: Fits,
{
}

/// The outcome of the comparison behind [`InjectFits`]: implemented by `typenum::True`
/// only, so an oversized array is reported as such.
#[diagnostic::on_unimplemented(
    message = "the array is longer than the provider's inject size (`Provider::InjectSize`)",
    label = "this array does not fit one inject",
    note = "use the slice call (`tinject`, `inject`, ...), which fails with `Error::MsgSize` at run time, or `tsend`/`send`"
)]
pub trait Fits {}

impl Fits for True {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remote payload that counts the reads reaching it.
    struct Counted {
        data: Vec<u8>,
        reads: core::cell::Cell<usize>,
    }

    impl Pull for Counted {
        fn len(&self) -> usize {
            self.data.len()
        }
        fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
            self.reads.set(self.reads.get() + 1);
            dst.copy_from_slice(&self.data[off..off + dst.len()]);
            Ok(())
        }
    }

    #[test]
    fn copy_to_is_bounds_checked_for_both_kinds() {
        let r = Counted {
            data: b"0123456789".to_vec(),
            reads: Default::default(),
        };
        let inline = Payload::<Counted>::Inline(b"0123456789".into());
        let remote = Payload::Remote(&r);
        for p in [inline, remote] {
            assert_eq!((p.len(), p.is_empty()), (10, false));
            let mut d = [0u8; 4];
            p.copy_to(3, &mut d).unwrap();
            assert_eq!(&d, b"3456");
            p.copy_to(10, &mut []).unwrap();
            // Past the end, or overflowing: an error, never a panic or a pull.
            assert_eq!(p.copy_to(7, &mut d), Err(Error::Io));
            assert_eq!(p.copy_to(usize::MAX, &mut d), Err(Error::Io));
            assert_eq!(p.copy_to(11, &mut []), Err(Error::Io));
        }
        assert_eq!(r.reads.get(), 2);
        assert_eq!(
            inline.inline().map(|s| s.to_vec()),
            Some(b"0123456789".to_vec())
        );
        assert!(remote.inline().is_none());
        assert_eq!(format!("{remote:?}"), "Remote(10)");
        let none = Payload::<NoPull>::Inline(b"".into());
        assert!(none.is_empty());
        assert_eq!(none.inline().map(|s| s.len()), Some(0));
    }

    /// Shared bytes are only ever copied out, bounds checked.
    #[test]
    fn shared_bytes_copy_out_within_bounds() {
        let data = *b"0123456789";
        let s = SharedBytes::from(&data);
        assert_eq!(
            (s.len(), s.is_empty(), s.as_ptr()),
            (10, false, data.as_ptr())
        );
        assert_eq!(s.read::<4>(6), Some(*b"6789"));
        assert_eq!(s.read::<4>(7), None);
        assert_eq!(s.read::<0>(10), Some([]));
        let sub = s.get(2, 5).unwrap();
        assert_eq!(sub.to_vec(), b"23456");
        assert!(s.get(2, 9).is_none() && s.get(11, 0).is_none());
        assert!(s.get(10, 0).unwrap().is_empty());
        let mut d = [0u8; 3];
        assert_eq!(sub.copy_to(2, &mut d), Ok(()));
        assert_eq!(&d, b"456");
        assert_eq!(sub.copy_to(3, &mut d), Err(Error::Io));
        assert_eq!(sub.copy_to(usize::MAX, &mut d), Err(Error::Io));
        let mut buf = [core::mem::MaybeUninit::<u8>::uninit(); 8];
        assert_eq!(sub.read_into(&mut buf), Some(&b"23456"[..]));
        assert_eq!(s.read_into(&mut buf), None);
        let mut v = b"ab".to_vec();
        sub.append_to(&mut v);
        assert_eq!(v, b"ab23456");
        assert_eq!(format!("{sub:?}"), "SharedBytes { len: 5, .. }");
        // As small as the slice it replaced: the payload's tag hides in the pointer.
        assert_eq!(
            core::mem::size_of::<Payload<'_, NoPull>>(),
            core::mem::size_of::<&[u8]>()
        );
    }
}
