//! What a provider supplies: a transport that moves [`Header`]-framed packets between
//! endpoints, plus address handling and a description of its capabilities.
//!
//! Everything else (matching, RMA and atomics against the MR table, completions,
//! counters, acknowledgements, triggered operations, cancel) lives in the core and is
//! shared by every provider, so a provider is mostly its transport.

use std::sync::Arc;

use typenum::{Const, IsLessOrEqual, LeEq, ToUInt, True, Unsigned, U};

use crate::error::Result;
use crate::info::Info;
use crate::waitobj::Waiter;
use crate::wire::Header;

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
    /// fail with [`Error::AddrNotAvail`](crate::Error::AddrNotAvail) or `Inval`.
    fn resolve(name: &[u8]) -> Result<Self::Peer>;
    /// The raw address of `node`/`service` (`fi_av_insertsvc`).
    fn name_from_svc(node: &str, service: &str) -> Result<Vec<u8>>;
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
    /// Hands received packets to `f` as `(header, source address, payload)`, oldest
    /// first per sender. When `f` returns `false` the packet was not consumed: it
    /// stays first and polling stops. Returns the number of packets consumed.
    fn poll<F: FnMut(&Header, &[u8], &[u8]) -> bool>(&self, rx: &mut Self::Receiver, f: F)
        -> usize;
    /// Installs the waiter to signal when a packet arrives (for blocking waits).
    fn set_waker(&self, waker: Arc<Waiter>);
    /// Stops accepting packets: later sends from peers fail with `HostUnreach`.
    fn shutdown(&self);
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
