//! RMA (`man 3 fi_rma`): write, inject_write, writedata and read, with their vector
//! and message forms.
#![allow(unsafe_code)] // only the `unsafe` posting calls, whose contracts the callers keep

use crate::config::Config;
use crate::engine::endpoint::RmaIov;
use crate::error::{Error, Result};
use crate::flags::OpFlags;
use crate::mem::RawIov;
use crate::provider::wire::Op;
use crate::types::{Context, FiAddr, MrKey};

use super::request::{data_of, req};
use super::{Endpoint, TxContext};

/// `struct fi_msg_rma` for writes.
#[derive(Debug, Clone, Copy)]
pub struct RmaMsg<'a> {
    /// Local gather list.
    pub iov: &'a [&'a [u8]],
    /// Target.
    pub addr: FiAddr,
    /// Remote segment (one: `rma_iov_limit` is 1).
    pub rma_iov: RmaIov,
    /// Operation context.
    pub context: Context,
    /// Remote CQ data (with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
}

/// `struct fi_msg_rma` for reads.
#[derive(Debug)]
pub struct RmaMsgMut<'a> {
    /// Local scatter list.
    pub iov: &'a mut [&'a mut [u8]],
    /// Target.
    pub addr: FiAddr,
    /// Remote segment.
    pub rma_iov: RmaIov,
    /// Operation context.
    pub context: Context,
}

macro_rules! rma_tx {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// `fi_write`: the local buffer is copied before the call returns; completion
            /// (or an error entry for a bad key, range or permission) follows the target's
            /// acknowledgement.
            #[inline]
            pub fn write(
                &self,
                buf: &[u8],
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let rma = RmaIov {
                    addr,
                    len: buf.len(),
                    key,
                };
                self.ep()
                    .post_write::<false>(self.txi(), buf, dest, rma, context, self.tx_flags)
            }
            /// `fi_writev`.
            #[inline]
            pub fn writev(
                &self,
                iov: &[&[u8]],
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let mut r = req(Op::Write, iov, dest, context);
                r.rma = RmaIov {
                    addr,
                    len: iov.iter().map(|s| s.len()).sum(),
                    key,
                };
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_writemsg`.
            #[inline]
            pub fn writemsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
                let mut r = req(Op::Write, msg.iov, msg.addr, msg.context);
                r.rma = msg.rma_iov;
                r.data = data_of(flags, msg.data);
                self.ep().post_tx(self.txi(), &r, flags)
            }
            /// `fi_inject_write`: no completion on success; a failure at the target is
            /// reported as an error entry with a null context.
            #[inline]
            pub fn inject_write(
                &self,
                buf: &[u8],
                dest: FiAddr,
                addr: u64,
                key: MrKey,
            ) -> Result<()> {
                let rma = RmaIov {
                    addr,
                    len: buf.len(),
                    key,
                };
                self.ep().post_write::<true>(
                    self.txi(),
                    buf,
                    dest,
                    rma,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_writedata`: the target gets a CQ entry with `data`.
            #[inline]
            pub fn writedata(
                &self,
                buf: &[u8],
                data: u64,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let b = [buf];
                let mut r = req(Op::Write, &b, dest, context);
                r.rma = RmaIov {
                    addr,
                    len: buf.len(),
                    key,
                };
                r.data = Some(data);
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_inject_writedata`.
            #[inline]
            pub fn inject_writedata(
                &self,
                buf: &[u8],
                data: u64,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
            ) -> Result<()> {
                let b = [buf];
                let mut r = req(Op::Write, &b, dest, Context::NULL);
                r.rma = RmaIov {
                    addr,
                    len: buf.len(),
                    key,
                };
                r.data = Some(data);
                self.ep()
                    .post_tx(self.txi(), &r, self.tx_flags | OpFlags::INJECT_CALL)
            }
            /// `fi_read`.
            ///
            /// # Safety
            /// `buf` must stay valid and must not be read or written until the operation
            /// completes (success, error or cancel) or the endpoint is dropped.
            #[inline]
            pub unsafe fn read(
                &self,
                buf: &mut [u8],
                src: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let len = buf.len();
                let mut r = req(Op::ReadReq, &[], src, context);
                r.result = RawIov::one(buf);
                r.rma = RmaIov { addr, len, key };
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_readv`.
            ///
            /// # Safety
            /// As [`Self::read`], for every buffer.
            #[inline]
            pub unsafe fn readv(
                &self,
                iov: &mut [&mut [u8]],
                src: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let mut r = req(Op::ReadReq, &[], src, context);
                r.result = RawIov::many(iov)?;
                r.rma = RmaIov {
                    addr,
                    len: r.result.len(),
                    key,
                };
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_readmsg`.
            ///
            /// # Safety
            /// As [`Self::read`], for every buffer.
            #[inline]
            pub unsafe fn readmsg(&self, msg: &mut RmaMsgMut<'_>, flags: OpFlags) -> Result<()> {
                let mut r = req(Op::ReadReq, &[], msg.addr, msg.context);
                r.result = RawIov::many(msg.iov)?;
                if r.result.len() != msg.rma_iov.len {
                    return Err(Error::Inval);
                }
                r.rma = msg.rma_iov;
                self.ep().post_tx(self.txi(), &r, flags)
            }
        }
    };
}

rma_tx!(Endpoint);
rma_tx!(TxContext);
