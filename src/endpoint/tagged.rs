//! Tagged messages (`man 3 fi_tagged`): tsend, tinject, tsenddata, tinjectdata and
//! their vector and message forms, and the tagged receives (peek, claim, discard).
#![allow(unsafe_code)] // only the `unsafe` posting calls, whose contracts the callers keep

use crate::config::Config;
use crate::engine::endpoint::RxReq;
use crate::error::Result;
use crate::flags::OpFlags;
use crate::mem::RawIov;
use crate::provider::wire::Op;
use crate::provider::InjectFits;
use crate::types::{Context, FiAddr};

use super::request::{data_of, req};
use super::{Endpoint, RxContext, TxContext};

/// `struct fi_msg_tagged` for sends.
#[derive(Debug, Clone, Copy)]
pub struct TaggedMsg<'a> {
    /// Gather list.
    pub iov: &'a [&'a [u8]],
    /// Destination.
    pub addr: FiAddr,
    /// Tag.
    pub tag: u64,
    /// Operation context.
    pub context: Context,
    /// Remote CQ data (with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
}

/// `struct fi_msg_tagged` for receives.
#[derive(Debug)]
pub struct TaggedMsgMut<'a> {
    /// Scatter list.
    pub iov: &'a mut [&'a mut [u8]],
    /// Source to accept.
    pub addr: FiAddr,
    /// Tag.
    pub tag: u64,
    /// Bits of the tag to ignore.
    pub ignore: u64,
    /// Operation context (with `FI_CLAIM`: the context used at `FI_PEEK | FI_CLAIM`).
    pub context: Context,
}

macro_rules! tagged_tx {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// `fi_tsend`.
            #[inline]
            pub fn tsend(
                &self,
                buf: &[u8],
                dest: FiAddr,
                tag: u64,
                context: Context,
            ) -> Result<()> {
                self.ep().post_eager::<false, false>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    None,
                    context,
                    self.tx_flags,
                )
            }
            /// `fi_tsendv`.
            #[inline]
            pub fn tsendv(
                &self,
                iov: &[&[u8]],
                dest: FiAddr,
                tag: u64,
                context: Context,
            ) -> Result<()> {
                let mut r = req(Op::Tagged, iov, dest, context);
                r.tag = tag;
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_tsendmsg`.
            #[inline]
            pub fn tsendmsg(&self, msg: &TaggedMsg<'_>, flags: OpFlags) -> Result<()> {
                let mut r = req(Op::Tagged, msg.iov, msg.addr, msg.context);
                r.tag = msg.tag;
                r.data = data_of(flags, msg.data);
                self.ep().post_tx(self.txi(), &r, flags)
            }
            /// `fi_tinject`.
            #[inline]
            pub fn tinject(&self, buf: &[u8], dest: FiAddr, tag: u64) -> Result<()> {
                self.ep().post_eager::<true, false>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    None,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_tinject` of a fixed-size array, as [`Self::inject_array`]:
            ///
            /// ```compile_fail
            /// # use fabric::prelude::*;
            /// # fn f(ep: &Endpoint<Stack<fabric_loopback::Loopback>>, to: FiAddr) {
            /// ep.tinject_array(&[0u8; 8192], to, 7); // Loopback::InjectSize is 4096
            /// # }
            /// ```
            #[inline]
            pub fn tinject_array<const N: usize>(
                &self,
                buf: &[u8; N],
                dest: FiAddr,
                tag: u64,
            ) -> Result<()>
            where
                typenum::Const<N>: InjectFits<<S as Config>::Provider>,
            {
                self.ep().post_eager::<true, true>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    None,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_tinjectdata` of a fixed-size array, as [`Self::inject_array`].
            #[inline]
            pub fn tinjectdata_array<const N: usize>(
                &self,
                buf: &[u8; N],
                data: u64,
                dest: FiAddr,
                tag: u64,
            ) -> Result<()>
            where
                typenum::Const<N>: InjectFits<<S as Config>::Provider>,
            {
                self.ep().post_eager::<true, true>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    Some(data),
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_tsenddata`.
            #[inline]
            pub fn tsenddata(
                &self,
                buf: &[u8],
                data: u64,
                dest: FiAddr,
                tag: u64,
                context: Context,
            ) -> Result<()> {
                self.ep().post_eager::<false, false>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    Some(data),
                    context,
                    self.tx_flags,
                )
            }
            /// `fi_tinjectdata`.
            #[inline]
            pub fn tinjectdata(&self, buf: &[u8], data: u64, dest: FiAddr, tag: u64) -> Result<()> {
                self.ep().post_eager::<true, false>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    Some(data),
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
        }
    };
}

macro_rules! tagged_rx {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// `fi_trecv`: accepts tags equal to `tag` outside the `ignore` bits.
            ///
            /// # Safety
            /// As [`Self::recv`].
            #[inline]
            pub unsafe fn trecv(
                &self,
                buf: &mut [u8],
                src: FiAddr,
                tag: u64,
                ignore: u64,
                context: Context,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::one(buf),
                    src,
                    tag,
                    ignore,
                    ctx: context,
                    tagged: true,
                };
                self.ep().post_rx(self.rxi(), &r, self.rx_flags)
            }
            /// `fi_trecvv`.
            ///
            /// # Safety
            /// As [`Self::recv`], for every buffer.
            #[inline]
            pub unsafe fn trecvv(
                &self,
                iov: &mut [&mut [u8]],
                src: FiAddr,
                tag: u64,
                ignore: u64,
                context: Context,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(iov)?,
                    src,
                    tag,
                    ignore,
                    ctx: context,
                    tagged: true,
                };
                self.ep().post_rx(self.rxi(), &r, self.rx_flags)
            }
            /// `fi_trecvmsg`, with `FI_PEEK`, `FI_CLAIM`, `FI_DISCARD`.
            ///
            /// # Safety
            /// As [`Self::recv`], for every buffer (none are touched by a plain peek).
            #[inline]
            pub unsafe fn trecvmsg(
                &self,
                msg: &mut TaggedMsgMut<'_>,
                flags: OpFlags,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(msg.iov)?,
                    src: msg.addr,
                    tag: msg.tag,
                    ignore: msg.ignore,
                    ctx: msg.context,
                    tagged: true,
                };
                self.ep().post_rx(self.rxi(), &r, flags)
            }
        }
    };
}

tagged_tx!(Endpoint);
tagged_tx!(TxContext);
tagged_rx!(Endpoint);
tagged_rx!(RxContext);
