//! Capabilities a transport may offer beyond the base contract, chosen at compile
//! time: each is a trait that a transport implements for itself and names in its
//! [`Transport`] associated type (`type Direct = Self;`), or leaves to [`Absent`],
//! whose implementations do nothing and which the core's tests of
//! [`ENABLED`](DirectAccess::ENABLED) fold away. The base contract is what every
//! provider must supply; these are what only some can.

use crate::atomic::{AtomicClass, AtomicOp, Datatype};
use crate::error::{Error, Result};
use crate::info::Info;

use super::{SharedBytes, Transport};

/// The implementation of every extension for a transport that lacks it. Uninhabited:
/// only its associated functions are ever called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {}

/// Initiator-side access to target memory: RMA and atomics performed by the initiator
/// on memory the target made reachable (for example published in shared memory),
/// without a packet.
pub trait DirectAccess<T: Transport + ?Sized> {
    /// Whether [`direct`](Self::direct) can ever handle an operation. The core tests it
    /// at compile time, so transports without direct access pay nothing.
    const ENABLED: bool = true;

    /// Performs an RMA write, RMA read or atomic request `req` at the initiator, when
    /// the transport can reach the target memory itself, instead of sending it as a
    /// packet. The core offers only requests that need nothing of the target's
    /// endpoint (no remote CQ data).
    ///
    /// [`Direct::Done`]: the operation took effect; read data or the values a fetching
    /// atomic replaced were handed to `out` in order, in one or more pieces that
    /// together make exactly the result (`req.len` bytes): [`SharedBytes`], since read
    /// data comes straight from memory the target process may be writing.
    /// [`Direct::Failed`]: the target's checks refused it, with the error the target would have answered
    /// (`KeyRejected`, `Access`, `Fault`, ...), and target memory is unchanged.
    /// [`Direct::Declined`]: send it as a packet.
    ///
    /// With `hold` set, earlier operations of the transmit context still wait for
    /// responses: nothing may be performed yet (it would overtake them), and the answer
    /// is [`Direct::Held`] if the operation would be handled here, else `Declined`.
    fn direct<F: FnMut(SharedBytes<'_>)>(
        t: &T,
        tx: &mut T::Sender,
        to: &T::Peer,
        req: &DirectReq<'_>,
        hold: bool,
        out: F,
    ) -> Direct;

    /// [`direct`](Self::direct) of an RMA write of `data` to `addr` under `key`, with
    /// nothing in flight (`hold` false): the core's entry for `fi_write` and
    /// `fi_inject_write` of one buffer. The answer is never [`Direct::Held`]. The
    /// default builds the [`DirectReq`] and calls `direct`; a transport whose common
    /// case (the target used last) is cheaper to test without the generic request
    /// overrides it.
    #[inline]
    fn direct_write(
        t: &T,
        tx: &mut T::Sender,
        to: &T::Peer,
        addr: u64,
        key: u64,
        data: &[u8],
    ) -> Direct {
        let payload = [data];
        Self::direct(
            t,
            tx,
            to,
            &DirectReq::write(addr, key, &payload),
            false,
            |_: SharedBytes<'_>| {},
        )
    }
}

impl<T: Transport + ?Sized> DirectAccess<T> for Absent {
    const ENABLED: bool = false;

    #[inline(always)]
    fn direct<F: FnMut(SharedBytes<'_>)>(
        _: &T,
        _: &mut T::Sender,
        _: &T::Peer,
        _: &DirectReq<'_>,
        _: bool,
        _: F,
    ) -> Direct {
        Direct::Declined
    }
}

/// Packets the sender holds back: responses refused by a full peer queue, which must
/// never be dropped, retried by progress.
pub trait HeldBack<T: Transport + ?Sized> {
    /// Whether what the sender holds back may include bytes of sends it accepted
    /// (rather than only responses): with `false` the engine compiles out the
    /// holding of send completions described at [`pending`](Self::pending).
    const HOLDS_SENDS: bool = true;

    /// Whether the sender holds packets it could not hand over yet. Checked on every
    /// progress call, so it should be one load.
    ///
    /// While it does, the engine holds back the completions of the sends that
    /// complete when sent (their bytes may be among what is held) and reports them
    /// once nothing is held any more: a completed send needs no further progress
    /// call to reach the peer.
    fn pending(t: &T) -> bool;

    /// Whether what the sender holds may include bytes of sends (see
    /// [`HOLDS_SENDS`](Self::HOLDS_SENDS)); checked after each such send. A
    /// composition answers for the halves that can hold sends only.
    #[inline]
    fn holds_sends(t: &T) -> bool {
        Self::pending(t)
    }

    /// Retries the held-back packets of `tx`, oldest first. Called by progress while
    /// [`pending`](Self::pending) is true.
    fn flush(t: &T, tx: &mut T::Sender);
}

impl<T: Transport + ?Sized> HeldBack<T> for Absent {
    const HOLDS_SENDS: bool = false;

    #[inline(always)]
    fn pending(_: &T) -> bool {
        false
    }

    #[inline(always)]
    fn flush(_: &T, _: &mut T::Sender) {}
}

/// Wake-ups from peers in other processes, who cannot ring a waiter of this process.
pub trait RemoteWake<T: Transport + ?Sized> {
    /// Arms cross-process wake-ups before an application sleeps on an `FI_WAIT_FD`
    /// completion queue under manual progress (`Cq::trywait` calls it, then checks for
    /// work one last time): the next packet a peer in another process sends to this
    /// endpoint should make the pipe `target` (its write end in this process and its
    /// inode, [`Waiter::remote_signal`](crate::waitobj::Waiter::remote_signal))
    /// readable. When this returns, a packet published before the call must be visible
    /// to the check that follows.
    fn arm(t: &T, target: (std::os::fd::RawFd, u64));
}

impl<T: Transport + ?Sized> RemoteWake<T> for Absent {
    #[inline(always)]
    fn arm(_: &T, _: (std::os::fd::RawFd, u64)) {}
}

/// What an operation offered to [`DirectAccess::direct`] does to target memory.
// An explicit tag: matching it is one comparison (a niche in `class` costs more).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectOp {
    /// RMA write of the payload.
    Write,
    /// RMA read.
    Read,
    /// Atomic operation, valid for its class ([`crate::atomic::is_valid`]).
    Atomic {
        /// The family of calls it was issued through.
        class: AtomicClass,
        /// The operation.
        op: AtomicOp,
        /// The element type.
        dt: Datatype,
    },
}

/// An RMA or atomic request offered to [`DirectAccess::direct`]: the target side of the
/// operation only, as the target's memory-registration checks see it.
#[derive(Debug, Clone, Copy)]
pub struct DirectReq<'a> {
    /// What it does.
    pub op: DirectOp,
    /// Target address (virtual or offset, per the target's MR mode).
    pub addr: u64,
    /// Remote key.
    pub key: u64,
    /// Bytes of target memory accessed: the payload's length for a write, the length
    /// read, an atomic's elements times the datatype's size (a multiple of it, at most
    /// [`MAX_ATOMIC_SIZE`](crate::limits::MAX_ATOMIC_SIZE)).
    pub len: usize,
    /// The write's data or the atomic's operands (`len` bytes together; none for reads
    /// and `FI_ATOMIC_READ`).
    pub payload: &'a [&'a [u8]],
    /// A compare atomic's compare values (`len` bytes); empty otherwise.
    pub compare: &'a [u8],
}

impl<'a> DirectReq<'a> {
    /// An RMA write of `payload` (one slice: `[data]`) to `addr` under `key`.
    #[inline]
    pub fn write(addr: u64, key: u64, payload: &'a [&'a [u8]]) -> DirectReq<'a> {
        DirectReq {
            op: DirectOp::Write,
            addr,
            key,
            len: payload.iter().map(|p| p.len()).sum(),
            payload,
            compare: &[],
        }
    }
}

/// What [`DirectAccess::direct`] did with an RMA or atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direct {
    /// Not handled: the core sends the request as a packet.
    Declined,
    /// Performed at the initiator: the core completes the operation at once.
    Done,
    /// Refused by the target's checks, evaluated at the initiator: the core completes
    /// the operation with this error at once; target memory is unchanged.
    Failed(Error),
    /// Would be handled at the initiator, but earlier operations are in flight: the
    /// core holds it (and everything posted after it) until they complete.
    Held,
}

/// Largest connection data (`FI_OPT_CM_DATA_SIZE`) a transport with connection
/// management carries by default: libfabric's minimum for socket-style providers.
pub const DEFAULT_CM_DATA_SIZE: usize = 256;

/// What connection management reports about one MSG endpoint
/// ([`ConnectionManager::events`]); the core turns each into an EQ event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// The connection is up (`FI_CONNECTED`): `peer` is the raw address data is sent
    /// to (what [`Provider::resolve`](super::Provider::resolve) takes), `data` the
    /// connection data of the peer's accept (empty on the accepting side).
    Connected {
        /// The peer endpoint's raw address.
        peer: Vec<u8>,
        /// The peer's connection data.
        data: Vec<u8>,
    },
    /// The connection request was refused (`FI_ECONNREFUSED`): rejected by the
    /// listener (with its connection data) or nobody listens at the address.
    Refused {
        /// The reject's connection data (empty when nobody answered).
        data: Vec<u8>,
    },
    /// The peer shut the connection down or went away (`FI_SHUTDOWN`).
    Shutdown,
    /// The connection failed (`FI_ETIMEDOUT`, `FI_ECONNRESET`, ...).
    Failed(Error),
}

/// A connection request as a listener received it ([`ConnectionManager::requests`]).
#[derive(Debug)]
pub struct CmRequest<R> {
    /// The provider's handle of the request, answered by
    /// [`accept`](ConnectionManager::accept) or [`reject`](ConnectionManager::reject).
    pub handle: R,
    /// The connecting endpoint's raw address.
    pub peer: Vec<u8>,
    /// The connect's connection data.
    pub data: Vec<u8>,
}

/// Connection management for MSG endpoints (`man 3 fi_cm`): passive endpoints that
/// listen, connection requests answered by accept or reject, shutdown. The core keeps
/// the libfabric semantics (EQ events, the connection's peer standing in for the AV,
/// cleanup when the peer goes); the provider only carries requests, answers and
/// shutdowns. Every call is off the data path.
///
/// Connection data passed in is at most [`CM_DATA_SIZE`](Self::CM_DATA_SIZE) bytes:
/// the core refuses longer data with `Inval` before calling the provider.
pub trait ConnectionManager<T: Transport + ?Sized> {
    /// Whether MSG endpoints exist at all: without, the core answers them with
    /// `NotSupported`.
    const ENABLED: bool = true;
    /// Bytes of connection data the provider carries (`FI_OPT_CM_DATA_SIZE`).
    const CM_DATA_SIZE: usize = DEFAULT_CM_DATA_SIZE;
    /// The listening side of a passive endpoint.
    type Listener: Send + Sync + 'static;
    /// A received connection request, until it is accepted or rejected.
    type Request: Send + Sync + 'static;

    /// `fi_passive_ep`: a listener, not listening yet, at `info.src_addr` when given.
    fn listener(info: &Info) -> Result<Self::Listener>;
    /// `fi_getname` of a passive endpoint: the address connects are sent to.
    fn listener_name(l: &Self::Listener) -> Vec<u8>;
    /// `fi_setname` of a passive endpoint (before [`listen`](Self::listen)).
    fn set_listener_name(l: &Self::Listener, name: &[u8]) -> Result<()>;
    /// `fi_listen`: connects to the listener's name reach it from now on.
    fn listen(l: &Self::Listener) -> Result<()>;
    /// Hands the connection requests that arrived since the last call to `f`.
    fn requests(l: &Self::Listener, f: &mut dyn FnMut(CmRequest<Self::Request>));
    /// `fi_reject`: refuses `req`, sending `data` to the connecting side.
    /// `Err(Inval)` when the request was already answered.
    fn reject(l: &Self::Listener, req: &Self::Request, data: &[u8]) -> Result<()>;
    /// `fi_connect` of endpoint `t` to the listener at `to`, with `data`. The outcome
    /// comes later through [`events`](Self::events).
    fn connect(t: &T, to: &[u8], data: &[u8]) -> Result<()>;
    /// `fi_accept` of `req` on the new endpoint `t`, with `data` for the connecting
    /// side. `Err(Inval)` when the request was already answered; `Err(ConnAborted)`
    /// when the connecting side is gone.
    fn accept(t: &T, req: &Self::Request, data: &[u8]) -> Result<()>;
    /// Hands the connection events of `t` since the last call to `f`, oldest first.
    fn events(t: &T, f: &mut dyn FnMut(CmEvent));
    /// `fi_shutdown`: closes the connection; the peer sees [`CmEvent::Shutdown`].
    fn disconnect(t: &T) -> Result<()>;
}

impl<T: Transport + ?Sized> ConnectionManager<T> for Absent {
    const ENABLED: bool = false;
    const CM_DATA_SIZE: usize = 0;
    type Listener = Absent;
    type Request = Absent;

    fn listener(_: &Info) -> Result<Absent> {
        Err(Error::NotSupported)
    }
    fn listener_name(l: &Absent) -> Vec<u8> {
        match *l {}
    }
    fn set_listener_name(l: &Absent, _: &[u8]) -> Result<()> {
        match *l {}
    }
    fn listen(l: &Absent) -> Result<()> {
        match *l {}
    }
    fn requests(l: &Absent, _: &mut dyn FnMut(CmRequest<Absent>)) {
        match *l {}
    }
    fn reject(l: &Absent, _: &Absent, _: &[u8]) -> Result<()> {
        match *l {}
    }
    fn connect(_: &T, _: &[u8], _: &[u8]) -> Result<()> {
        Err(Error::NotSupported)
    }
    fn accept(_: &T, r: &Absent, _: &[u8]) -> Result<()> {
        match *r {}
    }
    fn events(_: &T, _: &mut dyn FnMut(CmEvent)) {}
    fn disconnect(_: &T) -> Result<()> {
        Err(Error::NotSupported)
    }
}
