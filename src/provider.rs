//! What a provider supplies: a transport that moves [`Header`]-framed packets between
//! endpoints, plus address handling and a description of its capabilities.
//!
//! Everything else (matching, RMA and atomics against the MR table, completions,
//! counters, acknowledgements, triggered operations, cancel) lives in the core and is
//! shared by every provider, so a provider is mostly its transport.

use std::sync::Arc;

use typenum::{Const, IsLessOrEqual, LeEq, ToUInt, True, Unsigned, U};

use crate::atomic::{AtomicClass, AtomicOp, Datatype};
use crate::error::{Error, Result};
use crate::info::Info;
use crate::waitobj::Waiter;
use crate::wire::{Eager, Header, Response};

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
    /// Payloads this transport leaves with the sender ([`Payload::Remote`]); the core
    /// copies them straight into their destination. [`NoPull`] for a transport whose
    /// payloads are always in the packet.
    type Pull: Pull;
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
    /// [`MAX_ATOMIC_SIZE`](crate::domain::MAX_ATOMIC_SIZE) bytes of operands) are always
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
    /// Whether the sender holds packets it could not hand over yet (responses refused
    /// by a full peer queue, which must never be dropped). Checked on every progress
    /// call, so it should be one load; the default (none ever) compiles away.
    #[inline]
    fn backlog(&self) -> bool {
        false
    }
    /// Retries the held-back packets of `tx`, oldest first. Called by progress while
    /// [`backlog`](Self::backlog) is true.
    #[inline]
    fn flush(&self, tx: &mut Self::Sender) {
        let _ = tx;
    }
    /// Whether [`direct`](Self::direct) can ever handle an operation. The core tests
    /// it at compile time, so transports that leave the default `false` pay nothing.
    const DIRECT: bool = false;
    /// Performs an RMA write, RMA read or atomic request `req` at the initiator, when
    /// the transport can reach the target memory itself (for example memory the target
    /// process published in shared memory), instead of sending it as a packet. The
    /// core offers only requests that need nothing of the target's endpoint (no remote
    /// CQ data).
    ///
    /// [`Direct::Done`]: the operation took effect; read data or the values a fetching
    /// atomic replaced were handed to `out` in order, in one or more pieces that
    /// together make exactly the result (`req.len` bytes): [`SharedBytes`], since read
    /// data comes straight from memory the target process may be writing. [`Direct::Failed`]: the
    /// target's checks refused it, with the error the target would have answered
    /// (`KeyRejected`, `Access`, `Fault`, ...), and target memory is unchanged.
    /// [`Direct::Declined`]: send it as a packet.
    ///
    /// With `hold` set, earlier operations of the transmit context still wait for
    /// responses: nothing may be performed yet (it would overtake them), and the answer
    /// is [`Direct::Held`] if the operation would be handled here, else `Declined`.
    /// Only called when [`DIRECT`](Self::DIRECT) is true.
    #[inline]
    fn direct<F: FnMut(SharedBytes<'_>)>(
        &self,
        tx: &mut Self::Sender,
        to: &Self::Peer,
        req: &DirectReq<'_>,
        hold: bool,
        out: F,
    ) -> Direct {
        let _ = (tx, to, req, hold, out);
        Direct::Declined
    }
    /// [`direct`](Self::direct) of an RMA write of `data` to `addr` under `key`, with
    /// nothing in flight (`hold` false): the core's entry for `fi_write` and
    /// `fi_inject_write` of one buffer. The answer is never [`Direct::Held`]. The
    /// default builds the [`DirectReq`] and calls `direct`; a transport whose common
    /// case (the target used last) is cheaper to test without the generic request
    /// overrides it. Only called when [`DIRECT`](Self::DIRECT) is true.
    #[inline]
    fn direct_write(
        &self,
        tx: &mut Self::Sender,
        to: &Self::Peer,
        addr: u64,
        key: u64,
        data: &[u8],
    ) -> Direct {
        let payload = [data];
        self.direct(
            tx,
            to,
            &DirectReq::write(addr, key, &payload),
            false,
            |_: SharedBytes<'_>| {},
        )
    }
    /// Installs the waiter to signal when a packet arrives (for blocking waits).
    fn set_waker(&self, waker: Arc<Waiter>);

    /// Arms cross-process wake-ups before an application sleeps on an `FI_WAIT_FD`
    /// completion queue under manual progress (`Cq::trywait` calls it, then checks for
    /// work one last time): the next packet a peer in another process sends to this
    /// endpoint should make the pipe `target` (its write end in this process and its
    /// inode, [`Waiter::remote_signal`]) readable. When this returns, a packet published
    /// before the call must be visible to the check that follows. Peers in this process
    /// ring the domain's waiter instead, so the default does nothing.
    #[inline]
    fn arm_wake(&self, target: (std::os::fd::RawFd, u64)) {
        let _ = target;
    }
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

/// What an operation offered to [`Transport::direct`] does to target memory.
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

/// An RMA or atomic request offered to [`Transport::direct`]: the target side of the
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
    /// [`MAX_ATOMIC_SIZE`](crate::domain::MAX_ATOMIC_SIZE)).
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

/// What [`Transport::direct`] did with an RMA or atomic operation.
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

pub use shared::SharedBytes;

/// The one view of memory another process may write while we read it.
mod shared {
    // `unsafe` here only: the view reads bytes through raw pointers, never through a
    // Rust reference, whose immutability a writing peer would break.
    #![allow(unsafe_code)]

    use core::marker::PhantomData;
    use core::mem::MaybeUninit;
    use core::ptr::NonNull;

    use crate::error::{Error, Result};

    /// `len` bytes that stay readable for `'a` but that another process (or another
    /// thread) may change at any time: a packet in a shared-memory ring, a peer's
    /// published segment. Unlike `&'a [u8]`, holding one asserts nothing about the
    /// bytes staying unchanged, so a peer writing them while we hold it breaks no rule
    /// of the language: they are only ever copied out ([`copy_to`](Self::copy_to),
    /// [`read`](Self::read), ...), and what was copied is then checked like any other
    /// input from a peer.
    ///
    /// There is deliberately no way back to a slice. Safe code builds one from a slice
    /// (`From<&[u8]>`, ordinary memory a borrow keeps unchanged); a provider builds one
    /// over shared memory with [`SharedBytes::new`], whose contract it upholds.
    #[derive(Clone, Copy)]
    pub struct SharedBytes<'a> {
        // Non-null, like a slice's: `Payload` keeps its niche and stays two words.
        ptr: NonNull<u8>,
        len: usize,
        _life: PhantomData<&'a [u8]>,
    }

    impl<'a> SharedBytes<'a> {
        /// A view of the `len` bytes at `ptr`.
        ///
        /// # Safety
        /// `ptr` must be non-null and `ptr..ptr + len` readable memory, and stay so
        /// for `'a` (a mapping that is not unmapped, shrunk or made inaccessible while
        /// `'a` lasts), with `len <= isize::MAX`. Its bytes may change at any time:
        /// nothing else is required of them.
        #[inline(always)]
        pub unsafe fn new(ptr: *const u8, len: usize) -> SharedBytes<'a> {
            SharedBytes {
                // SAFETY: non-null, by the caller's contract.
                ptr: unsafe { NonNull::new_unchecked(ptr.cast_mut()) },
                len,
                _life: PhantomData,
            }
        }

        /// Bytes in view.
        #[inline(always)]
        pub fn len(&self) -> usize {
            self.len
        }

        /// Whether the view is empty.
        #[inline(always)]
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// Address of the first byte: `len()` bytes there are readable for `'a` (they
        /// may change at any time, so they must be read through raw pointers only).
        #[inline(always)]
        pub fn as_ptr(&self) -> *const u8 {
            self.ptr.as_ptr()
        }

        /// The bytes `off..off + len` of the view, if it has them.
        #[inline(always)]
        pub fn get(&self, off: usize, len: usize) -> Option<SharedBytes<'a>> {
            match off.checked_add(len) {
                Some(end) if end <= self.len => {}
                _ => return None,
            }
            // SAFETY: a sub-range (checked above) of a range readable for `'a`.
            Some(unsafe { SharedBytes::new(self.as_ptr().add(off), len) })
        }

        /// Copies bytes `off..off + dst.len()` into `dst`; `Err(Io)` when the view does
        /// not have them (nothing copied). Never panics.
        #[inline(always)]
        pub fn copy_to(&self, off: usize, dst: &mut [u8]) -> Result<()> {
            match off.checked_add(dst.len()) {
                Some(end) if end <= self.len => {}
                _ => return Err(Error::Io),
            }
            // SAFETY: the source is in the view (checked above), readable for `'a`;
            // `dst` is memory of ours that no one else can reach while we hold it
            // mutably, so the ranges do not overlap. Bytes changed by a peer during the
            // copy only change the values copied.
            unsafe { crate::mem::copy_bytes(self.as_ptr().add(off), dst.as_mut_ptr(), dst.len()) };
            Ok(())
        }

        /// The `N` bytes at `off`, copied out (a field of a header in shared memory,
        /// parsed from the copy), if the view has them.
        #[inline(always)]
        pub fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
            let mut b = [0u8; N];
            self.copy_to(off, &mut b).ok()?;
            Some(b)
        }

        /// Copies the whole view into the start of `buf` and returns that copy; `None`
        /// (nothing copied) when `buf` is shorter. `buf` need not be initialized: a
        /// caller with a large stack buffer of which only a few bytes are used pays
        /// for no zeroing.
        #[inline(always)]
        pub fn read_into<'b>(&self, buf: &'b mut [MaybeUninit<u8>]) -> Option<&'b [u8]> {
            let dst = buf.get_mut(..self.len)?;
            // SAFETY: `dst` is `len` writable bytes of ours, the source `len` readable
            // bytes of the view, not overlapping (as in `copy_to`); once written, all
            // `len` bytes of `dst` are initialized, so they can be read as `[u8]`.
            unsafe {
                crate::mem::copy_bytes(self.as_ptr(), dst.as_mut_ptr().cast(), self.len);
                Some(core::slice::from_raw_parts(dst.as_ptr().cast(), self.len))
            }
        }

        /// Appends the bytes to `v` (allocating only if `v` lacks the capacity).
        #[inline]
        pub fn append_to(&self, v: &mut Vec<u8>) {
            v.reserve(self.len);
            let at = v.len();
            // SAFETY: `reserve` left room for `len` bytes past `at`; the source is the
            // view, which `v`'s own memory does not overlap (a view over `v` would be
            // a borrow of it, and `v` is borrowed mutably). After the copy those bytes
            // are initialized, so the length may cover them.
            unsafe {
                crate::mem::copy_bytes(self.as_ptr(), v.as_mut_ptr().add(at), self.len);
                v.set_len(at + self.len);
            }
        }

        /// The bytes, copied into a new vector.
        pub fn to_vec(&self) -> Vec<u8> {
            let mut v = Vec::new();
            self.append_to(&mut v);
            v
        }
    }

    impl<'a> From<&'a [u8]> for SharedBytes<'a> {
        #[inline(always)]
        fn from(s: &'a [u8]) -> SharedBytes<'a> {
            // SAFETY: a slice's pointer is non-null and its bytes readable for its
            // lifetime, and `len <= isize::MAX`.
            unsafe { SharedBytes::new(s.as_ptr(), s.len()) }
        }
    }

    impl<'a, const N: usize> From<&'a [u8; N]> for SharedBytes<'a> {
        #[inline(always)]
        fn from(s: &'a [u8; N]) -> SharedBytes<'a> {
            SharedBytes::from(&s[..])
        }
    }

    impl core::fmt::Debug for SharedBytes<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("SharedBytes")
                .field("len", &self.len)
                .finish_non_exhaustive()
        }
    }
}

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
