//! Messages (`man 3 fi_msg`): send, inject, senddata, injectdata and their vector and
//! message forms, and the receives that match them.
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

/// `struct fi_msg` for sends (`fi_sendmsg`, `fi_tsendmsg` use [`TaggedMsg`](super::TaggedMsg)).
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    /// Gather list.
    pub iov: &'a [&'a [u8]],
    /// Destination.
    pub addr: FiAddr,
    /// Operation context.
    pub context: Context,
    /// Remote CQ data (sent with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
}

/// `struct fi_msg` for receives.
#[derive(Debug)]
pub struct MsgMut<'a> {
    /// Scatter list.
    pub iov: &'a mut [&'a mut [u8]],
    /// Source to accept (`FiAddr::UNSPEC`: any; needs `FI_DIRECTED_RECV`).
    pub addr: FiAddr,
    /// Operation context.
    pub context: Context,
}

macro_rules! msg_tx {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// `fi_send`: the buffer is copied before the call returns.
            #[inline]
            pub fn send(&self, buf: &[u8], dest: FiAddr, context: Context) -> Result<()> {
                self.ep().post_eager::<false, false>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    None,
                    context,
                    self.tx_flags,
                )
            }
            /// `fi_sendv`.
            #[inline]
            pub fn sendv(&self, iov: &[&[u8]], dest: FiAddr, context: Context) -> Result<()> {
                self.ep()
                    .post_tx(self.txi(), &req(Op::Msg, iov, dest, context), self.tx_flags)
            }
            /// `fi_sendmsg` with explicit operation flags.
            #[inline]
            pub fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
                let mut r = req(Op::Msg, msg.iov, msg.addr, msg.context);
                r.data = data_of(flags, msg.data);
                self.ep().post_tx(self.txi(), &r, flags)
            }
            /// `fi_inject`: no completion; at most `inject_size` bytes.
            #[inline]
            pub fn inject(&self, buf: &[u8], dest: FiAddr) -> Result<()> {
                self.ep().post_eager::<true, false>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    None,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_senddata`: with remote CQ data.
            #[inline]
            pub fn senddata(
                &self,
                buf: &[u8],
                data: u64,
                dest: FiAddr,
                context: Context,
            ) -> Result<()> {
                self.ep().post_eager::<false, false>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    Some(data),
                    context,
                    self.tx_flags,
                )
            }
            /// `fi_injectdata`.
            #[inline]
            pub fn injectdata(&self, buf: &[u8], data: u64, dest: FiAddr) -> Result<()> {
                self.ep().post_eager::<true, false>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    Some(data),
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_inject` of a fixed-size array: an array longer than the provider's
            /// [`InjectSize`](crate::Provider::InjectSize) does not compile, and the
            /// posting path carries no length test. Smaller per-endpoint limits requested
            /// through hints (`tx_attr.inject_size`, `max_msg_size`) are not applied: the
            /// provider's limit is what the type proves.
            #[inline]
            pub fn inject_array<const N: usize>(&self, buf: &[u8; N], dest: FiAddr) -> Result<()>
            where
                typenum::Const<N>: InjectFits<<S as Config>::Provider>,
            {
                self.ep().post_eager::<true, true>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    None,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_injectdata` of a fixed-size array, as [`Self::inject_array`].
            #[inline]
            pub fn injectdata_array<const N: usize>(
                &self,
                buf: &[u8; N],
                data: u64,
                dest: FiAddr,
            ) -> Result<()>
            where
                typenum::Const<N>: InjectFits<<S as Config>::Provider>,
            {
                self.ep().post_eager::<true, true>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    Some(data),
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
        }
    };
}

macro_rules! msg_rx {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// `fi_recv`.
            ///
            /// # Safety
            /// `buf` must stay valid and must not be read or written until the receive
            /// completes (success, error or cancel) or the endpoint is dropped.
            #[inline]
            pub unsafe fn recv(&self, buf: &mut [u8], src: FiAddr, context: Context) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::one(buf),
                    src,
                    tag: 0,
                    ignore: 0,
                    ctx: context,
                    tagged: false,
                };
                self.ep().post_rx(self.rxi(), &r, self.rx_flags)
            }
            /// `fi_recvv`.
            ///
            /// # Safety
            /// As [`Self::recv`], for every buffer.
            #[inline]
            pub unsafe fn recvv(
                &self,
                iov: &mut [&mut [u8]],
                src: FiAddr,
                context: Context,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(iov)?,
                    src,
                    tag: 0,
                    ignore: 0,
                    ctx: context,
                    tagged: false,
                };
                self.ep().post_rx(self.rxi(), &r, self.rx_flags)
            }
            /// `fi_recvmsg` (`FI_MULTI_RECV` supported).
            ///
            /// # Safety
            /// As [`Self::recv`], for every buffer.
            #[inline]
            pub unsafe fn recvmsg(&self, msg: &mut MsgMut<'_>, flags: OpFlags) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(msg.iov)?,
                    src: msg.addr,
                    tag: 0,
                    ignore: 0,
                    ctx: msg.context,
                    tagged: false,
                };
                self.ep().post_rx(self.rxi(), &r, flags)
            }
        }
    };
}

msg_tx!(Endpoint);
msg_tx!(TxContext);
msg_rx!(Endpoint);
msg_rx!(RxContext);
