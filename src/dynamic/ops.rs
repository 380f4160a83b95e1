//! The object-safe traits of the run-time dispatch layer, and their blanket
//! implementations for the static objects of every stack `S: Config`.
//!
//! Each trait mirrors the inherent methods of one static object with the same names and
//! signatures, except that
//!
//! * objects passed as arguments are trait objects (`&dyn CqOps` where the static method
//!   takes `&Cq<S>`); the implementation downcasts them to the static type of its own
//!   stack and fails with [`Error::Domain`] when they belong to another stack (objects of
//!   different stacks never share a domain);
//! * objects returned are boxed trait objects (`Box<dyn EndpointOps>`);
//! * CQ reads are format independent: entries come back as [`Completion`]s
//!   ([`CqOps::read_completions`]) or as tagged entries ([`CqOps::read_tagged`], the
//!   fast read, since the dynamic layer's stacks store tagged entries), holding the
//!   fields the CQ's format has.
//!
//! `unsafe` calls stay `unsafe fn` with the contracts of the static calls, which the
//! implementations forward unchanged.
#![allow(unsafe_code)] // forwarding of the `unsafe fn` data calls, contracts unchanged
#![allow(clippy::too_many_arguments)] // the signatures are libfabric's

use std::any::Any;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::atomic::{AtomicClass, AtomicOp, Datatype};
use crate::attr::{
    AvAttr, CntrAttr, CqAttr, CqFormatKind, EpType, EqAttr, MrAttr, PollAttr, WaitAttr,
};
use crate::av::AddressVector;
use crate::cntr::Counter;
use crate::config::Config;
use crate::cq::Cq;
use crate::cq::CqErrEntry;
use crate::cq_format::{Completion, CqFormat, CqTagged, CqTaggedEntry};
use crate::domain::{Domain, Fabric};
use crate::endpoint::{
    AtomicMsg, Endpoint, EpOpt, EpOptName, Msg, MsgMut, RmaMsg, RmaMsgMut, RxContext,
    ScalableEndpoint, SharedRx, SharedTx, TaggedMsg, TaggedMsgMut, TxContext,
};
use crate::eq::EventQueue;
use crate::eq::{EqEntry, EqErrEntry};
use crate::error::{Error, Result};
use crate::flags::{BindFlags, MrAccess, OpFlags};
use crate::info::Info;
use crate::mr::{MemoryRegion, MrDesc};
use crate::types::{Context, FiAddr, MrKey};
use crate::wait::{PollSet, WaitSet, Waitable};

use super::cast::same_slice_mut;

/// The static object of type `T` behind a trait object, or `Err(Domain)` when it belongs
/// to another stack.
#[inline]
pub(crate) fn downcast<T: 'static>(any: &dyn Any) -> Result<&T> {
    any.downcast_ref::<T>().ok_or(Error::Domain)
}

/// Entries a format-erased CQ read moves per call into a stack buffer.
pub(crate) const CHUNK: usize = 16;

/// What a blocking read waits for: the threshold and the timeout of `fi_cq_sread`.
pub(crate) type Block = Option<(usize, Option<Duration>)>;

/// Runs `step(offset, count, first)` over `cap` entries in chunks of at most [`CHUNK`]
/// until a step returns fewer than asked, fails, or `cap` is reached. An error after some
/// entries were read ends the read with those entries (the next read reports it).
fn chunked(cap: usize, mut step: impl FnMut(usize, usize, bool) -> Result<usize>) -> Result<usize> {
    let mut done = 0;
    loop {
        let want = (cap - done).min(CHUNK);
        match step(done, want, done == 0) {
            Ok(n) => {
                done += n;
                if n < want || done >= cap {
                    return Ok(done);
                }
            }
            Err(_) if done > 0 => return Ok(done),
            Err(e) => return Err(e),
        }
    }
}

/// A converting read of up to `cap` entries (at most `src.len()` with source addresses)
/// through a stack buffer of `T`s, in chunks (see [`chunked`]): `read(buf, src, first)`
/// fills the buffer and the chunk's source addresses, and `put(index, entry)` stores the
/// read's entry `index` in the caller's format.
pub(crate) fn through<T: Copy + Default>(
    cap: usize,
    mut src: Option<&mut [FiAddr]>,
    mut read: impl FnMut(&mut [T], Option<&mut [FiAddr]>, bool) -> Result<usize>,
    mut put: impl FnMut(usize, &T),
) -> Result<usize> {
    let cap = src.as_ref().map_or(cap, |s| cap.min(s.len()));
    let mut tmp = [T::default(); CHUNK];
    chunked(cap, |at, want, first| {
        let src = src.as_deref_mut().map(|s| &mut s[at..at + want]);
        let n = read(&mut tmp[..want], src, first)?;
        for (i, e) in tmp[..n].iter().enumerate() {
            put(at + i, e);
        }
        Ok(n)
    })
}

/// Declares the methods of a method list (see [`tx_methods`]) in a trait.
macro_rules! ops_trait {
    (
        ($(#[$tm:meta])* pub trait $Trait:ident) { $($extra:tt)* }
        safe { $( $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty; )* }
        unsafe { $( $(#[$um:meta])* fn $uname:ident($($uarg:ident: $uty:ty),* $(,)?) -> $uret:ty; )* }
    ) => {
        $(#[$tm])*
        pub trait $Trait {
            $( $(#[$m])* fn $name(&self, $($arg: $ty),*) -> $ret; )*
            $( $(#[$um])* unsafe fn $uname(&self, $($uarg: $uty),*) -> $uret; )*
            $($extra)*
        }
    };
}

/// Implements the methods of a method list by calling the inherent methods of `Self`.
macro_rules! ops_static {
    (
        ($($hdr:tt)*) { $($extra:tt)* }
        safe { $( $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty; )* }
        unsafe { $( $(#[$um:meta])* fn $uname:ident($($uarg:ident: $uty:ty),* $(,)?) -> $uret:ty; )* }
    ) => {
        $($hdr)* {
            $(
                #[inline]
                fn $name(&self, $($arg: $ty),*) -> $ret {
                    Self::$name(self, $($arg),*)
                }
            )*
            $(
                #[inline]
                unsafe fn $uname(&self, $($uarg: $uty),*) -> $uret {
                    // SAFETY: the caller upholds the contract of the trait method, which is
                    // the contract of the inherent method.
                    unsafe { Self::$uname(self, $($uarg),*) }
                }
            )*
            $($extra)*
        }
    };
}

/// Implements the methods of a method list by forwarding to the trait object in field
/// `$field` (used by the dyn wrappers).
macro_rules! ops_forward {
    (
        ($($hdr:tt)*) => $field:ident { $($extra:tt)* }
        safe { $( $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty; )* }
        unsafe { $( $(#[$um:meta])* fn $uname:ident($($uarg:ident: $uty:ty),* $(,)?) -> $uret:ty; )* }
    ) => {
        $($hdr)* {
            $(
                #[inline]
                fn $name(&self, $($arg: $ty),*) -> $ret {
                    self.$field.$name($($arg),*)
                }
            )*
            $(
                #[inline]
                unsafe fn $uname(&self, $($uarg: $uty),*) -> $uret {
                    // SAFETY: forwarded contract.
                    unsafe { self.$field.$uname($($uarg),*) }
                }
            )*
            $($extra)*
        }
    };
}

/// The transmit calls shared by endpoints and transmit contexts, as a method list handed
/// to `$cb` (one of the macros above) after the tokens `$pre`.
macro_rules! tx_methods {
    ($cb:ident! { $($pre:tt)* }) => {
        $cb! {
            $($pre)*
            safe {
                /// `fi_send`: the buffer is copied before the call returns.
                fn send(buf: &[u8], dest: FiAddr, context: Context) -> Result<()>;
                /// `fi_sendv`.
                fn sendv(iov: &[&[u8]], dest: FiAddr, context: Context) -> Result<()>;
                /// `fi_sendmsg` with explicit operation flags.
                fn sendmsg(msg: &Msg<'_>, flags: OpFlags) -> Result<()>;
                /// `fi_inject`: no completion; at most `inject_size` bytes.
                fn inject(buf: &[u8], dest: FiAddr) -> Result<()>;
                /// `fi_senddata`: with remote CQ data.
                fn senddata(buf: &[u8], data: u64, dest: FiAddr, context: Context) -> Result<()>;
                /// `fi_injectdata`.
                fn injectdata(buf: &[u8], data: u64, dest: FiAddr) -> Result<()>;
                /// `fi_tsend`.
                fn tsend(buf: &[u8], dest: FiAddr, tag: u64, context: Context) -> Result<()>;
                /// `fi_tsendv`.
                fn tsendv(iov: &[&[u8]], dest: FiAddr, tag: u64, context: Context) -> Result<()>;
                /// `fi_tsendmsg`.
                fn tsendmsg(msg: &TaggedMsg<'_>, flags: OpFlags) -> Result<()>;
                /// `fi_tinject`.
                fn tinject(buf: &[u8], dest: FiAddr, tag: u64) -> Result<()>;
                /// `fi_tsenddata`.
                fn tsenddata(buf: &[u8], data: u64, dest: FiAddr, tag: u64, context: Context) -> Result<()>;
                /// `fi_tinjectdata`.
                fn tinjectdata(buf: &[u8], data: u64, dest: FiAddr, tag: u64) -> Result<()>;
                /// `fi_write`: the local buffer is copied before the call returns.
                fn write(buf: &[u8], dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_writev`.
                fn writev(iov: &[&[u8]], dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_writemsg`.
                fn writemsg(msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()>;
                /// `fi_inject_write`.
                fn inject_write(buf: &[u8], dest: FiAddr, addr: u64, key: MrKey) -> Result<()>;
                /// `fi_writedata`: the target gets a CQ entry with `data`.
                fn writedata(buf: &[u8], data: u64, dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_inject_writedata`.
                fn inject_writedata(buf: &[u8], data: u64, dest: FiAddr, addr: u64, key: MrKey) -> Result<()>;
                /// `fi_atomic`: `operand` holds `count` values of `datatype`.
                fn atomic(operand: &[u8], datatype: Datatype, op: AtomicOp, dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_inject_atomic`.
                fn inject_atomic(operand: &[u8], datatype: Datatype, op: AtomicOp, dest: FiAddr, addr: u64, key: MrKey) -> Result<()>;
                /// `fi_atomicmsg`.
                fn atomicmsg(m: &AtomicMsg<'_>, flags: OpFlags) -> Result<()>;
                /// `fi_atomicv`: the operand gathered from several buffers.
                fn atomicv(operand: &[&[u8]], datatype: Datatype, op: AtomicOp, dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_atomicvalid`: the most elements one base atomic may carry.
                fn atomicvalid(datatype: Datatype, op: AtomicOp) -> Result<usize>;
                /// `fi_fetch_atomicvalid`.
                fn fetch_atomicvalid(datatype: Datatype, op: AtomicOp) -> Result<usize>;
                /// `fi_compare_atomicvalid`.
                fn compare_atomicvalid(datatype: Datatype, op: AtomicOp) -> Result<usize>;
            }
            unsafe {
                /// `fi_read`.
                ///
                /// # Safety
                /// `buf` must stay valid and must not be read or written until the operation
                /// completes (success, error or cancel) or the endpoint is dropped.
                fn read(buf: &mut [u8], src: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_readv`.
                ///
                /// # Safety
                /// As [`Self::read`], for every buffer.
                fn readv(iov: &mut [&mut [u8]], src: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_readmsg`.
                ///
                /// # Safety
                /// As [`Self::read`], for every buffer.
                fn readmsg(msg: &mut RmaMsgMut<'_>, flags: OpFlags) -> Result<()>;
                /// `fi_fetch_atomic`: `result` receives the target's previous values.
                ///
                /// # Safety
                /// `result` must stay valid and untouched until the operation completes or
                /// the endpoint is dropped.
                fn fetch_atomic(operand: &[u8], result: &mut [u8], datatype: Datatype, op: AtomicOp, dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_fetch_atomicmsg`.
                ///
                /// # Safety
                /// As [`Self::fetch_atomic`].
                fn fetch_atomicmsg(m: &AtomicMsg<'_>, result: &mut [u8], flags: OpFlags) -> Result<()>;
                /// `fi_compare_atomic`.
                ///
                /// # Safety
                /// As [`Self::fetch_atomic`].
                fn compare_atomic(operand: &[u8], compare: &[u8], result: &mut [u8], datatype: Datatype, op: AtomicOp, dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_compare_atomicmsg`.
                ///
                /// # Safety
                /// As [`Self::fetch_atomic`].
                fn compare_atomicmsg(m: &AtomicMsg<'_>, compare: &[u8], result: &mut [u8], flags: OpFlags) -> Result<()>;
                /// `fi_fetch_atomicv`.
                ///
                /// # Safety
                /// As [`Self::fetch_atomic`], for every result buffer.
                fn fetch_atomicv(operand: &[&[u8]], result: &mut [&mut [u8]], datatype: Datatype, op: AtomicOp, dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
                /// `fi_compare_atomicv`.
                ///
                /// # Safety
                /// As [`Self::fetch_atomic`], for every result buffer.
                fn compare_atomicv(operand: &[&[u8]], compare: &[u8], result: &mut [&mut [u8]], datatype: Datatype, op: AtomicOp, dest: FiAddr, addr: u64, key: MrKey, context: Context) -> Result<()>;
            }
        }
    };
}

/// The receive calls shared by endpoints and receive contexts (see [`tx_methods`]).
macro_rules! rx_methods {
    ($cb:ident! { $($pre:tt)* }) => {
        $cb! {
            $($pre)*
            safe {}
            unsafe {
                /// `fi_recv`.
                ///
                /// # Safety
                /// `buf` must stay valid and must not be read or written until the receive
                /// completes (success, error or cancel) or the endpoint is dropped.
                fn recv(buf: &mut [u8], src: FiAddr, context: Context) -> Result<()>;
                /// `fi_recvv`.
                ///
                /// # Safety
                /// As [`Self::recv`], for every buffer.
                fn recvv(iov: &mut [&mut [u8]], src: FiAddr, context: Context) -> Result<()>;
                /// `fi_recvmsg` (`FI_MULTI_RECV` supported).
                ///
                /// # Safety
                /// As [`Self::recv`], for every buffer.
                fn recvmsg(msg: &mut MsgMut<'_>, flags: OpFlags) -> Result<()>;
                /// `fi_trecv`: accepts tags equal to `tag` outside the `ignore` bits.
                ///
                /// # Safety
                /// As [`Self::recv`].
                fn trecv(buf: &mut [u8], src: FiAddr, tag: u64, ignore: u64, context: Context) -> Result<()>;
                /// `fi_trecvv`.
                ///
                /// # Safety
                /// As [`Self::recv`], for every buffer.
                fn trecvv(iov: &mut [&mut [u8]], src: FiAddr, tag: u64, ignore: u64, context: Context) -> Result<()>;
                /// `fi_trecvmsg`, with `FI_PEEK`, `FI_CLAIM`, `FI_DISCARD`.
                ///
                /// # Safety
                /// As [`Self::recv`], for every buffer (none are touched by a plain peek).
                fn trecvmsg(msg: &mut TaggedMsgMut<'_>, flags: OpFlags) -> Result<()>;
            }
        }
    };
}

pub(crate) use {ops_forward, rx_methods, tx_methods};

tx_methods!(ops_trait! {
    (
        /// The transmit data calls (`fi_msg`, `fi_tagged`, `fi_rma`, `fi_atomic`,
        /// `fi_trigger`) of an endpoint or transmit context.
        pub trait TxOps
    ) {
        /// A triggered tagged send: copied now, sent once `cntr` reaches `threshold`.
        fn tsendmsg_triggered(&self, msg: &TaggedMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()>;
        /// A triggered untagged send.
        fn sendmsg_triggered(&self, msg: &Msg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()>;
        /// A triggered RMA write.
        fn writemsg_triggered(&self, msg: &RmaMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()>;
        /// A triggered base atomic.
        fn atomicmsg_triggered(&self, m: &AtomicMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()>;
    }
});

rx_methods!(ops_trait! {
    (
        /// The receive data calls of an endpoint or receive context.
        pub trait RxOps
    ) {
        /// A triggered tagged receive, posted once `cntr` reaches `threshold`.
        ///
        /// # Safety
        /// As [`Self::recv`]; the buffer must stay valid from now on.
        unsafe fn trecvmsg_triggered(&self, msg: &mut TaggedMsgMut<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()>;
    }
});

/// Implements [`TxOps`] for a static transmit object.
macro_rules! tx_static {
    ($ty:ident) => {
        tx_methods!(ops_static! {
            (impl<S: Config> TxOps for $ty<S>) {
                fn tsendmsg_triggered(&self, msg: &TaggedMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    Self::tsendmsg_triggered(self, msg, flags, downcast::<Counter<S>>(cntr.as_any())?, threshold)
                }
                fn sendmsg_triggered(&self, msg: &Msg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    Self::sendmsg_triggered(self, msg, flags, downcast::<Counter<S>>(cntr.as_any())?, threshold)
                }
                fn writemsg_triggered(&self, msg: &RmaMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    Self::writemsg_triggered(self, msg, flags, downcast::<Counter<S>>(cntr.as_any())?, threshold)
                }
                fn atomicmsg_triggered(&self, m: &AtomicMsg<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    Self::atomicmsg_triggered(self, m, flags, downcast::<Counter<S>>(cntr.as_any())?, threshold)
                }
            }
        });
    };
}

/// Implements [`RxOps`] for a static receive object.
macro_rules! rx_static {
    ($ty:ident) => {
        rx_methods!(ops_static! {
            (impl<S: Config> RxOps for $ty<S>) {
                unsafe fn trecvmsg_triggered(&self, msg: &mut TaggedMsgMut<'_>, flags: OpFlags, cntr: &dyn CntrOps, threshold: u64) -> Result<()> {
                    let cntr = downcast::<Counter<S>>(cntr.as_any())?;
                    // SAFETY: forwarded contract.
                    unsafe { Self::trecvmsg_triggered(self, msg, flags, cntr, threshold) }
                }
            }
        });
    };
}

tx_static!(Endpoint);
tx_static!(TxContext);
rx_static!(Endpoint);
rx_static!(RxContext);

/// An RDM or DGRAM endpoint (`fid_ep`): every data call ([`TxOps`], [`RxOps`]) and the
/// control calls.
pub trait EndpointOps: TxOps + RxOps {
    /// `fi_ep_bind` of a CQ: `TRANSMIT` and/or `RECV`, optionally `SELECTIVE_COMPLETION`.
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()>;
    /// `fi_ep_bind` of a counter.
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()>;
    /// `fi_ep_bind` of an address vector.
    fn bind_av(&self, av: &dyn AvOps) -> Result<()>;
    /// `fi_ep_bind` of an event queue.
    fn bind_eq(&self, eq: &dyn EqOps) -> Result<()>;
    /// `fi_enable`.
    fn enable(&self) -> Result<()>;
    /// `fi_cancel`.
    fn cancel(&self, context: Context) -> Result<()>;
    /// `fi_ep_alias`: another handle with default operation flags `flags`.
    fn alias(&self, flags: OpFlags, bind: BindFlags) -> Result<Box<dyn EndpointOps>>;
    /// `fi_getopt`.
    fn getopt(&self, name: EpOptName) -> Result<EpOpt>;
    /// `fi_setopt`.
    fn setopt(&self, opt: EpOpt) -> Result<()>;
    /// `fi_tx_size_left`.
    fn tx_size_left(&self) -> usize;
    /// `fi_rx_size_left`.
    fn rx_size_left(&self) -> usize;
    /// `fi_getname`.
    fn name(&self) -> Vec<u8>;
    /// The info the endpoint was opened with.
    fn info(&self) -> &Info;
    /// The static object, for downcasting.
    fn as_any(&self) -> &dyn Any;
}

impl<S: Config> EndpointOps for Endpoint<S> {
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
        Self::bind_cq(self, downcast(cq.as_any())?, flags)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        Self::bind_cntr(self, downcast(cntr.as_any())?, flags)
    }
    fn bind_av(&self, av: &dyn AvOps) -> Result<()> {
        Self::bind_av(self, downcast(av.as_any())?)
    }
    fn bind_eq(&self, eq: &dyn EqOps) -> Result<()> {
        Self::bind_eq(self, downcast(eq.as_any())?)
    }
    fn enable(&self) -> Result<()> {
        Self::enable(self)
    }
    fn cancel(&self, context: Context) -> Result<()> {
        Self::cancel(self, context)
    }
    fn alias(&self, flags: OpFlags, bind: BindFlags) -> Result<Box<dyn EndpointOps>> {
        Ok(Box::new(Self::alias(self, flags, bind)?))
    }
    fn getopt(&self, name: EpOptName) -> Result<EpOpt> {
        Self::getopt(self, name)
    }
    fn setopt(&self, opt: EpOpt) -> Result<()> {
        Self::setopt(self, opt)
    }
    fn tx_size_left(&self) -> usize {
        Self::tx_size_left(self)
    }
    fn rx_size_left(&self) -> usize {
        Self::rx_size_left(self)
    }
    fn name(&self) -> Vec<u8> {
        Self::name(self)
    }
    fn info(&self) -> &Info {
        Self::info(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A transmit context of a scalable endpoint.
pub trait TxContextOps: TxOps {
    /// Binds a CQ (`TRANSMIT`, optionally `SELECTIVE_COMPLETION`).
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()>;
    /// Binds a counter.
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()>;
    /// `fi_enable`.
    fn enable(&self) -> Result<()>;
}

/// A receive context of a scalable endpoint.
pub trait RxContextOps: RxOps {
    /// Binds a CQ (`RECV`, optionally `SELECTIVE_COMPLETION`).
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()>;
    /// Binds a counter.
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()>;
    /// `fi_enable`.
    fn enable(&self) -> Result<()>;
}

macro_rules! ctx_static {
    ($Trait:ident for $ty:ident) => {
        impl<S: Config> $Trait for $ty<S> {
            fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
                Self::bind_cq(self, downcast(cq.as_any())?, flags)
            }
            fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
                Self::bind_cntr(self, downcast(cntr.as_any())?, flags)
            }
            fn enable(&self) -> Result<()> {
                Self::enable(self)
            }
        }
    };
}
ctx_static!(TxContextOps for TxContext);
ctx_static!(RxContextOps for RxContext);

/// A scalable endpoint (`fi_scalable_ep`).
pub trait ScalableEndpointOps {
    /// `fi_scalable_ep_bind` of the address vector.
    fn bind_av(&self, av: &dyn AvOps) -> Result<()>;
    /// `fi_tx_context`.
    fn tx_context(&self, index: usize) -> Result<Box<dyn TxContextOps>>;
    /// `fi_rx_context`.
    fn rx_context(&self, index: usize) -> Result<Box<dyn RxContextOps>>;
    /// `fi_enable`.
    fn enable(&self) -> Result<()>;
    /// `fi_getname`.
    fn name(&self) -> Vec<u8>;
}

impl<S: Config> ScalableEndpointOps for ScalableEndpoint<S> {
    fn bind_av(&self, av: &dyn AvOps) -> Result<()> {
        Self::bind_av(self, downcast(av.as_any())?)
    }
    fn tx_context(&self, index: usize) -> Result<Box<dyn TxContextOps>> {
        Ok(Box::new(Self::tx_context(self, index)?))
    }
    fn rx_context(&self, index: usize) -> Result<Box<dyn RxContextOps>> {
        Ok(Box::new(Self::rx_context(self, index)?))
    }
    fn enable(&self) -> Result<()> {
        Self::enable(self)
    }
    fn name(&self) -> Vec<u8> {
        Self::name(self)
    }
}

/// A shared transmit context (`fi_stx_context`).
pub trait SharedTxOps {
    /// Binds the CQ all sharing endpoints' transmits complete to.
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()>;
    /// Binds a transmit counter.
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()>;
    /// Opens an endpoint transmitting through this context (and receiving through `srx`).
    fn endpoint(&self, info: &Info, srx: Option<&dyn SharedRxOps>) -> Result<Box<dyn EndpointOps>>;
}

impl<S: Config> SharedTxOps for SharedTx<S> {
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
        Self::bind_cq(self, downcast(cq.as_any())?, flags)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        Self::bind_cntr(self, downcast(cntr.as_any())?, flags)
    }
    fn endpoint(&self, info: &Info, srx: Option<&dyn SharedRxOps>) -> Result<Box<dyn EndpointOps>> {
        let srx = match srx {
            Some(s) => Some(downcast::<SharedRx<S>>(s.as_any())?),
            None => None,
        };
        Ok(Box::new(Self::endpoint(self, info, srx)?))
    }
}

/// A shared receive context (`fi_srx_context`).
pub trait SharedRxOps {
    /// Binds the CQ receives complete to.
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()>;
    /// Binds a receive counter.
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()>;
    /// Opens an endpoint receiving through this context.
    fn endpoint(&self, info: &Info) -> Result<Box<dyn EndpointOps>>;
    /// The static object, for downcasting.
    fn as_any(&self) -> &dyn Any;
}

impl<S: Config> SharedRxOps for SharedRx<S> {
    fn bind_cq(&self, cq: &dyn CqOps, flags: BindFlags) -> Result<()> {
        Self::bind_cq(self, downcast(cq.as_any())?, flags)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        Self::bind_cntr(self, downcast(cntr.as_any())?, flags)
    }
    fn endpoint(&self, info: &Info) -> Result<Box<dyn EndpointOps>> {
        Ok(Box::new(Self::endpoint(self, info)?))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A completion queue (`fid_cq`), read format independently.
///
/// `fi_trywait` is [`Waitable::trywait`].
pub trait CqOps: Waitable {
    /// The CQ's entry format.
    fn format(&self) -> CqFormatKind;
    /// `fi_cq_read` into tagged entries (with `src`: `fi_cq_readfrom`), the fields the
    /// CQ's format lacks zero. `Err(Again)` when none, `Err(Avail)` when an error entry
    /// waits. The stacks of [`Registry`](super::Registry) store tagged entries: their
    /// reads land in `out` with no intermediate copy, which makes this the fast read.
    fn read_tagged(&self, out: &mut [CqTaggedEntry], src: Option<&mut [FiAddr]>) -> Result<usize>;
    /// `fi_cq_sread` (with `src`: `fi_cq_sreadfrom`) into tagged entries.
    fn sread_tagged(
        &self,
        out: &mut [CqTaggedEntry],
        src: Option<&mut [FiAddr]>,
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize>;
    /// `fi_cq_read` into format-independent completions: the fields the CQ's format lacks
    /// are zero. `Err(Again)` when none, `Err(Avail)` when an error entry waits.
    fn read_completions(&self, out: &mut [Completion]) -> Result<usize>;
    /// `fi_cq_readfrom`: as [`Self::read_completions`], with source addresses.
    fn read_completions_from(&self, out: &mut [Completion], src: &mut [FiAddr]) -> Result<usize>;
    /// `fi_cq_sread`.
    fn sread_completions(
        &self,
        out: &mut [Completion],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize>;
    /// `fi_cq_sreadfrom`.
    fn sread_completions_from(
        &self,
        out: &mut [Completion],
        src: &mut [FiAddr],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize>;
    /// `fi_cq_readerr`.
    fn read_err(&self) -> Result<CqErrEntry>;
    /// `fi_cq_signal`.
    fn signal(&self);
    /// The `FI_WAIT_FD` descriptor, if any.
    fn wait_fd(&self) -> Option<RawFd>;
    /// `fi_cq_strerror`.
    fn strerror(&self, e: &CqErrEntry) -> &'static str;
    /// The static object, for downcasting.
    fn as_any(&self) -> &dyn Any;
}

type EntryOf<S> = <<S as Config>::Cq as CqFormat>::Entry;

/// The static read of `cq` that `src` (readfrom) and `block` (sread) select, into the
/// stack's own entries.
#[inline(always)]
fn read_native<S: Config>(
    cq: &Cq<S>,
    out: &mut [EntryOf<S>],
    src: Option<&mut [FiAddr]>,
    block: Block,
) -> Result<usize> {
    match (src, block) {
        (None, None) => cq.read(out),
        (Some(s), None) => cq.read_from(out, s),
        (None, Some((threshold, timeout))) => cq.sread(out, threshold, timeout),
        (Some(s), Some((threshold, timeout))) => cq.sread_from(out, s, threshold, timeout),
    }
}

/// A read of `cq` converted entry by entry (`put`), blocking in the first chunk only.
fn read_converted<S: Config>(
    cq: &Cq<S>,
    cap: usize,
    src: Option<&mut [FiAddr]>,
    block: Block,
    put: impl FnMut(usize, &EntryOf<S>),
) -> Result<usize> {
    through(
        cap,
        src,
        |t, s, first| read_native(cq, t, s, block.filter(|_| first)),
        put,
    )
}

/// [`CqOps::read_tagged`] and [`CqOps::sread_tagged`] of a static CQ: the caller's
/// entries are the stack's own when it stores tagged entries (every stack of
/// [`Registry`](super::Registry)), converted otherwise.
#[inline(always)]
fn read_tagged<S: Config>(
    cq: &Cq<S>,
    out: &mut [CqTaggedEntry],
    src: Option<&mut [FiAddr]>,
    block: Block,
) -> Result<usize> {
    if let Some(native) = same_slice_mut::<CqTaggedEntry, EntryOf<S>>(out) {
        return read_native(cq, native, src, block);
    }
    read_converted(cq, out.len(), src, block, |i, e| {
        out[i] = CqTagged::make(&<S::Cq as CqFormat>::completion(e))
    })
}

/// [`CqOps::read_completions`] and its variants on a static CQ.
fn read_completions<S: Config>(
    cq: &Cq<S>,
    out: &mut [Completion],
    src: Option<&mut [FiAddr]>,
    block: Block,
) -> Result<usize> {
    read_converted(cq, out.len(), src, block, |i, e| {
        out[i] = <S::Cq as CqFormat>::completion(e)
    })
}

impl<S: Config> CqOps for Cq<S> {
    fn format(&self) -> CqFormatKind {
        <S::Cq as CqFormat>::KIND
    }
    fn read_tagged(&self, out: &mut [CqTaggedEntry], src: Option<&mut [FiAddr]>) -> Result<usize> {
        read_tagged(self, out, src, None)
    }
    fn sread_tagged(
        &self,
        out: &mut [CqTaggedEntry],
        src: Option<&mut [FiAddr]>,
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        read_tagged(self, out, src, Some((threshold, timeout)))
    }
    fn read_completions(&self, out: &mut [Completion]) -> Result<usize> {
        read_completions(self, out, None, None)
    }
    fn read_completions_from(&self, out: &mut [Completion], src: &mut [FiAddr]) -> Result<usize> {
        read_completions(self, out, Some(src), None)
    }
    fn sread_completions(
        &self,
        out: &mut [Completion],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        read_completions(self, out, None, Some((threshold, timeout)))
    }
    fn sread_completions_from(
        &self,
        out: &mut [Completion],
        src: &mut [FiAddr],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        read_completions(self, out, Some(src), Some((threshold, timeout)))
    }
    fn read_err(&self) -> Result<CqErrEntry> {
        Self::read_err(self)
    }
    fn signal(&self) {
        Self::signal(self)
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Self::wait_fd(self)
    }
    fn strerror(&self, e: &CqErrEntry) -> &'static str {
        Self::strerror(self, e)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A completion counter (`fid_cntr`). `fi_trywait` is [`Waitable::trywait`].
pub trait CntrOps: Waitable {
    /// `fi_cntr_read`.
    fn read(&self) -> u64;
    /// `fi_cntr_readerr`.
    fn read_err(&self) -> u64;
    /// `fi_cntr_add`.
    fn add(&self, v: u64);
    /// `fi_cntr_set`.
    fn set(&self, v: u64);
    /// `fi_cntr_adderr`.
    fn add_err(&self, v: u64);
    /// `fi_cntr_seterr`.
    fn set_err(&self, v: u64);
    /// `fi_cntr_wait`.
    fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()>;
    /// The `FI_WAIT_FD` descriptor, if any.
    fn wait_fd(&self) -> Option<RawFd>;
    /// The static object, for downcasting.
    fn as_any(&self) -> &dyn Any;
}

impl<S: Config> CntrOps for Counter<S> {
    fn read(&self) -> u64 {
        Self::read(self)
    }
    fn read_err(&self) -> u64 {
        Self::read_err(self)
    }
    fn add(&self, v: u64) {
        Self::add(self, v)
    }
    fn set(&self, v: u64) {
        Self::set(self, v)
    }
    fn add_err(&self, v: u64) {
        Self::add_err(self, v)
    }
    fn set_err(&self, v: u64) {
        Self::set_err(self, v)
    }
    fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        Self::wait(self, threshold, timeout)
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Self::wait_fd(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An event queue (`fid_eq`). `fi_trywait` is [`Waitable::trywait`].
pub trait EqOps: Waitable {
    /// `fi_eq_read`; `peek` leaves the event queued.
    fn read(&self, peek: bool) -> Result<EqEntry>;
    /// `fi_eq_readerr`.
    fn read_err(&self, peek: bool) -> Result<EqErrEntry>;
    /// `fi_eq_sread`.
    fn sread(&self, peek: bool, timeout: Option<Duration>) -> Result<EqEntry>;
    /// `fi_eq_write`.
    fn write(&self, e: EqEntry) -> Result<()>;
    /// The `FI_WAIT_FD` descriptor, if any.
    fn wait_fd(&self) -> Option<RawFd>;
    /// The static object, for downcasting.
    fn as_any(&self) -> &dyn Any;
}

impl<S: Config> EqOps for EventQueue<S> {
    fn read(&self, peek: bool) -> Result<EqEntry> {
        Self::read(self, peek)
    }
    fn read_err(&self, peek: bool) -> Result<EqErrEntry> {
        Self::read_err(self, peek)
    }
    fn sread(&self, peek: bool, timeout: Option<Duration>) -> Result<EqEntry> {
        Self::sread(self, peek, timeout)
    }
    fn write(&self, e: EqEntry) -> Result<()> {
        Self::write(self, e)
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Self::wait_fd(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An address vector (`fid_av`).
pub trait AvOps {
    /// `fi_av_bind` of an EQ for asynchronous inserts.
    fn bind_eq(&self, eq: &dyn EqOps) -> Result<()>;
    /// Inserts one peer by its raw address.
    fn insert(&self, name: &[u8]) -> Result<FiAddr>;
    /// `fi_av_insert` of several peers.
    fn insert_many(&self, names: &[&[u8]], flags: u64, context: Context) -> Result<Vec<FiAddr>>;
    /// `fi_av_insertsvc`.
    fn insert_svc(&self, node: &str, service: &str) -> Result<FiAddr>;
    /// `fi_av_remove`.
    fn remove(&self, addrs: &[FiAddr]) -> Result<()>;
    /// `fi_av_lookup`.
    fn lookup(&self, addr: FiAddr) -> Result<Vec<u8>>;
    /// `fi_av_straddr`.
    fn straddr(&self, name: &[u8]) -> String;
    /// `fi_rx_addr` for this AV's `rx_ctx_bits`.
    fn rx_addr(&self, addr: FiAddr, rx_index: u32) -> FiAddr;
    /// Number of valid addresses.
    fn len(&self) -> usize;
    /// Whether the AV holds no address.
    fn is_empty(&self) -> bool;
    /// The name of a shared AV.
    fn name(&self) -> Option<&str>;
    /// The static object, for downcasting.
    fn as_any(&self) -> &dyn Any;
}

impl<S: Config> AvOps for AddressVector<S> {
    fn bind_eq(&self, eq: &dyn EqOps) -> Result<()> {
        Self::bind_eq(self, downcast(eq.as_any())?)
    }
    fn insert(&self, name: &[u8]) -> Result<FiAddr> {
        Self::insert(self, name)
    }
    fn insert_many(&self, names: &[&[u8]], flags: u64, context: Context) -> Result<Vec<FiAddr>> {
        Self::insert_many(self, names, flags, context)
    }
    fn insert_svc(&self, node: &str, service: &str) -> Result<FiAddr> {
        Self::insert_svc(self, node, service)
    }
    fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        Self::remove(self, addrs)
    }
    fn lookup(&self, addr: FiAddr) -> Result<Vec<u8>> {
        Self::lookup(self, addr)
    }
    fn straddr(&self, name: &[u8]) -> String {
        Self::straddr(self, name)
    }
    fn rx_addr(&self, addr: FiAddr, rx_index: u32) -> FiAddr {
        Self::rx_addr(self, addr, rx_index)
    }
    fn len(&self) -> usize {
        Self::len(self)
    }
    fn is_empty(&self) -> bool {
        Self::is_empty(self)
    }
    fn name(&self) -> Option<&str> {
        Self::name(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A registered memory region (`fid_mr`); it borrows its memory for as long as the
/// trait object lives.
pub trait MrOps {
    /// `fi_mr_key`.
    fn key(&self) -> MrKey;
    /// `fi_mr_desc`.
    fn desc(&self) -> MrDesc;
    /// The remote address of the first byte.
    fn remote_addr(&self) -> u64;
    /// Registered length in bytes.
    fn len(&self) -> usize;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool;
    /// `fi_mr_bind` to a counter (`REMOTE_WRITE` / `REMOTE_READ`).
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()>;
    /// `fi_mr_bind` to an endpoint (`FI_MR_ENDPOINT` domains).
    fn bind_ep(&self, ep: &dyn EndpointOps) -> Result<()>;
    /// `fi_mr_enable`.
    fn enable(&self) -> Result<()>;
    /// `fi_mr_refresh`.
    fn refresh(&self) -> Result<()>;
    /// Copies bytes out of the region, serialized with remote accesses.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Copies bytes into the region, serialized with remote accesses.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// Access rights of the region.
    fn access(&self) -> MrAccess;
}

impl<S: Config> MrOps for MemoryRegion<'_, S> {
    fn key(&self) -> MrKey {
        Self::key(self)
    }
    fn desc(&self) -> MrDesc {
        Self::desc(self)
    }
    fn remote_addr(&self) -> u64 {
        Self::remote_addr(self)
    }
    fn len(&self) -> usize {
        Self::len(self)
    }
    fn is_empty(&self) -> bool {
        Self::is_empty(self)
    }
    fn bind_cntr(&self, cntr: &dyn CntrOps, flags: BindFlags) -> Result<()> {
        Self::bind_cntr(self, downcast(cntr.as_any())?, flags)
    }
    fn bind_ep(&self, ep: &dyn EndpointOps) -> Result<()> {
        Self::bind_ep(self, downcast(ep.as_any())?)
    }
    fn enable(&self) -> Result<()> {
        Self::enable(self)
    }
    fn refresh(&self) -> Result<()> {
        Self::refresh(self)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        Self::read(self, offset, out)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        Self::write(self, offset, data)
    }
    fn access(&self) -> MrAccess {
        Self::access(self)
    }
}

/// A wait set (`fi_wait_open`).
pub trait WaitSetOps {
    /// `fi_wait`.
    fn wait(&self, timeout: Option<Duration>) -> Result<()>;
    /// The set's file descriptor (`FI_WAIT_FD` sets).
    fn fd(&self) -> Option<RawFd>;
    /// The static object, for downcasting.
    fn as_any(&self) -> &dyn Any;
}

impl<S: Config> WaitSetOps for WaitSet<S> {
    fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        Self::wait(self, timeout)
    }
    fn fd(&self) -> Option<RawFd> {
        Self::fd(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A poll set (`fi_poll_open`). Adding an object of another stack fails with
/// `Err(Domain)`.
pub trait PollSetOps {
    /// `fi_poll_add` of a CQ.
    fn add_cq(&self, cq: &dyn CqOps, context: Context) -> Result<()>;
    /// `fi_poll_add` of a counter.
    fn add_cntr(&self, cntr: &dyn CntrOps, context: Context) -> Result<()>;
    /// `fi_poll_del`.
    fn del(&self, context: Context) -> Result<()>;
    /// `fi_poll`.
    fn poll(&self, out: &mut [Context]) -> Result<usize>;
}

impl<S: Config> PollSetOps for PollSet<S> {
    fn add_cq(&self, cq: &dyn CqOps, context: Context) -> Result<()> {
        Self::add_cq(self, downcast(cq.as_any())?, context);
        Ok(())
    }
    fn add_cntr(&self, cntr: &dyn CntrOps, context: Context) -> Result<()> {
        Self::add_cntr(self, downcast(cntr.as_any())?, context);
        Ok(())
    }
    fn del(&self, context: Context) -> Result<()> {
        Self::del(self, context)
    }
    fn poll(&self, out: &mut [Context]) -> Result<usize> {
        Self::poll(self, out)
    }
}

/// A fabric (`fid_fabric`).
pub trait FabricOps {
    /// `fi_domain`.
    fn domain(&self, info: &Info) -> Result<Box<dyn DomainOps>>;
    /// `fi_eq_open` on the fabric.
    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EqOps>>;
    /// `fi_wait_open`.
    fn wait_set(&self, attr: &WaitAttr) -> Result<Box<dyn WaitSetOps>>;
    /// The info the fabric was opened with.
    fn info(&self) -> &Info;
}

impl<S: Config> FabricOps for Fabric<S> {
    fn domain(&self, info: &Info) -> Result<Box<dyn DomainOps>> {
        Ok(Box::new(Self::domain(self, info)?))
    }
    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EqOps>> {
        Ok(Box::new(Self::eq(self, attr)?))
    }
    fn wait_set(&self, attr: &WaitAttr) -> Result<Box<dyn WaitSetOps>> {
        Ok(Box::new(Self::wait_set(self, attr)?))
    }
    fn info(&self) -> &Info {
        Self::info(self)
    }
}

/// A domain (`fid_domain`): opens every other object.
pub trait DomainOps {
    /// The info the domain was opened with.
    fn info(&self) -> &Info;
    /// `fi_endpoint`.
    fn endpoint(&self, info: &Info) -> Result<Box<dyn EndpointOps>>;
    /// `fi_scalable_ep`.
    fn scalable_endpoint(&self, info: &Info) -> Result<Box<dyn ScalableEndpointOps>>;
    /// `fi_stx_context`.
    fn shared_tx(&self, info: &Info) -> Result<Box<dyn SharedTxOps>>;
    /// `fi_srx_context`.
    fn shared_rx(&self, info: &Info) -> Result<Box<dyn SharedRxOps>>;
    /// `fi_cq_open`. The static implementation has its stack's fixed format and ignores
    /// `attr.format`; the dyn domain honours it.
    fn cq(&self, attr: &CqAttr) -> Result<Box<dyn CqOps>>;
    /// `fi_cq_open` with `FI_WAIT_SET`.
    fn cq_in_set(&self, attr: &CqAttr, set: &dyn WaitSetOps) -> Result<Box<dyn CqOps>>;
    /// `fi_cntr_open`.
    fn cntr(&self, attr: &CntrAttr) -> Result<Box<dyn CntrOps>>;
    /// `fi_cntr_open` with `FI_WAIT_SET`.
    fn cntr_in_set(&self, attr: &CntrAttr, set: &dyn WaitSetOps) -> Result<Box<dyn CntrOps>>;
    /// `fi_eq_open` tied to this domain.
    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EqOps>>;
    /// `fi_av_open`.
    fn av(&self, attr: &AvAttr) -> Result<Box<dyn AvOps>>;
    /// `fi_mr_reg`.
    fn mr_reg<'a>(&self, buf: &'a mut [u8], attr: &MrAttr) -> Result<Box<dyn MrOps + 'a>>;
    /// `fi_mr_regv`.
    fn mr_regv<'a>(&self, bufs: Vec<&'a mut [u8]>, attr: &MrAttr) -> Result<Box<dyn MrOps + 'a>>;
    /// `fi_mr_regattr`.
    fn mr_regattr<'a>(&self, bufs: Vec<&'a mut [u8]>, attr: &MrAttr)
        -> Result<Box<dyn MrOps + 'a>>;
    /// `fi_poll_open`.
    fn poll_set(&self, attr: &PollAttr) -> Result<Box<dyn PollSetOps>>;
    /// `fi_query_atomic`.
    fn query_atomic(&self, class: AtomicClass, op: AtomicOp, dt: Datatype) -> Result<usize>;
    /// One pass of the progress engine; the number of packets handled.
    fn progress(&self) -> usize;
    /// The static object, for downcasting.
    fn as_any(&self) -> &dyn Any;
}

impl<S: Config> DomainOps for Domain<S> {
    fn info(&self) -> &Info {
        Self::info(self)
    }
    fn endpoint(&self, info: &Info) -> Result<Box<dyn EndpointOps>> {
        // The run-time layer has no connection management calls: an MSG endpoint
        // could never connect.
        if info.ep_attr.ep_type == EpType::Msg {
            return Err(Error::NotSupported);
        }
        Ok(Box::new(Self::endpoint(self, info)?))
    }
    fn scalable_endpoint(&self, info: &Info) -> Result<Box<dyn ScalableEndpointOps>> {
        Ok(Box::new(Self::scalable_endpoint(self, info)?))
    }
    fn shared_tx(&self, info: &Info) -> Result<Box<dyn SharedTxOps>> {
        Ok(Box::new(Self::shared_tx(self, info)?))
    }
    fn shared_rx(&self, info: &Info) -> Result<Box<dyn SharedRxOps>> {
        Ok(Box::new(Self::shared_rx(self, info)?))
    }
    fn cq(&self, attr: &CqAttr) -> Result<Box<dyn CqOps>> {
        Ok(Box::new(Self::cq(self, attr)?))
    }
    fn cq_in_set(&self, attr: &CqAttr, set: &dyn WaitSetOps) -> Result<Box<dyn CqOps>> {
        Ok(Box::new(Self::cq_in_set(
            self,
            attr,
            downcast(set.as_any())?,
        )?))
    }
    fn cntr(&self, attr: &CntrAttr) -> Result<Box<dyn CntrOps>> {
        Ok(Box::new(Self::cntr(self, attr)?))
    }
    fn cntr_in_set(&self, attr: &CntrAttr, set: &dyn WaitSetOps) -> Result<Box<dyn CntrOps>> {
        Ok(Box::new(Self::cntr_in_set(
            self,
            attr,
            downcast(set.as_any())?,
        )?))
    }
    fn eq(&self, attr: &EqAttr) -> Result<Box<dyn EqOps>> {
        Ok(Box::new(Self::eq(self, attr)?))
    }
    fn av(&self, attr: &AvAttr) -> Result<Box<dyn AvOps>> {
        Ok(Box::new(Self::av(self, attr)?))
    }
    fn mr_reg<'a>(&self, buf: &'a mut [u8], attr: &MrAttr) -> Result<Box<dyn MrOps + 'a>> {
        Ok(Box::new(Self::mr_reg(self, buf, attr)?))
    }
    fn mr_regv<'a>(&self, bufs: Vec<&'a mut [u8]>, attr: &MrAttr) -> Result<Box<dyn MrOps + 'a>> {
        Ok(Box::new(Self::mr_regv(self, bufs, attr)?))
    }
    fn mr_regattr<'a>(
        &self,
        bufs: Vec<&'a mut [u8]>,
        attr: &MrAttr,
    ) -> Result<Box<dyn MrOps + 'a>> {
        Ok(Box::new(Self::mr_regattr(self, bufs, attr)?))
    }
    fn poll_set(&self, attr: &PollAttr) -> Result<Box<dyn PollSetOps>> {
        Ok(Box::new(Self::poll_set(self, attr)?))
    }
    fn query_atomic(&self, class: AtomicClass, op: AtomicOp, dt: Datatype) -> Result<usize> {
        Self::query_atomic(self, class, op, dt)
    }
    fn progress(&self) -> usize {
        Self::progress(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
