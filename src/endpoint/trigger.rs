//! Triggered operations (`man 3 fi_trigger`): the message forms of sends, writes,
//! atomics and tagged receives, deferred until a counter reaches a threshold.
#![allow(unsafe_code)] // only the `unsafe` posting calls, whose contracts the callers keep

use crate::atomic::AtomicClass;
use crate::cntr::Counter;
use crate::config::Config;
use crate::engine::endpoint::{OwnedTx, RxReq, TxReq};
use crate::engine::trigger::{Deferred, DeferredOp};
use crate::error::{Error, Result};
use crate::flags::OpFlags;
use crate::mem::RawIov;
use crate::provider::wire::Op;

use super::atomic::{atomic_req, AtomicMsg};
use super::msg::Msg;
use super::request::{data_of, req};
use super::rma::RmaMsg;
use super::tagged::{TaggedMsg, TaggedMsgMut};
use super::{Endpoint, RxContext, TxContext};

macro_rules! trigger_tx {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// A triggered send (`fi_tsendmsg`/`fi_sendmsg` with `FI_TRIGGER`): the
            /// message is copied now and sent once `cntr` reaches `threshold`.
            pub fn tsendmsg_triggered(
                &self,
                msg: &TaggedMsg<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let mut r = req(Op::Tagged, msg.iov, msg.addr, msg.context);
                r.tag = msg.tag;
                r.data = data_of(flags, msg.data);
                self.defer_tx(&r, flags, cntr, threshold)
            }
            /// A triggered untagged send.
            pub fn sendmsg_triggered(
                &self,
                msg: &Msg<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let mut r = req(Op::Msg, msg.iov, msg.addr, msg.context);
                r.data = data_of(flags, msg.data);
                self.defer_tx(&r, flags, cntr, threshold)
            }
            /// A triggered RMA write.
            pub fn writemsg_triggered(
                &self,
                msg: &RmaMsg<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let mut r = req(Op::Write, msg.iov, msg.addr, msg.context);
                r.rma = msg.rma_iov;
                r.data = data_of(flags, msg.data);
                self.defer_tx(&r, flags, cntr, threshold)
            }
            /// A triggered base atomic.
            pub fn atomicmsg_triggered(
                &self,
                m: &AtomicMsg<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                // As `fi_atomicmsg`: no remote CQ data on atomics.
                if flags.contains(OpFlags::REMOTE_CQ_DATA) {
                    return Err(Error::OpNotSupp);
                }
                let iov = [m.operand];
                let r = atomic_req(AtomicClass::Base, &iov, &[], RawIov::EMPTY, m)?;
                self.defer_tx(&r, flags, cntr, threshold)
            }
            fn defer_tx(
                &self,
                r: &TxReq<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let ep = self.arc();
                if !std::sync::Arc::ptr_eq(&ep.domain, &cntr.domain.shared) {
                    return Err(Error::Domain);
                }
                let d = Deferred {
                    cntr: cntr.inner.clone(),
                    threshold,
                    ep,
                    idx: self.txi(),
                    op: DeferredOp::Tx(OwnedTx::from_req(r, flags & !OpFlags::TRIGGER)),
                };
                cntr.domain.defer(d);
                Ok(())
            }
        }
    };
}

macro_rules! trigger_rx {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// A triggered tagged receive, posted once `cntr` reaches `threshold`.
            ///
            /// # Safety
            /// As [`Self::recv`]; the buffer must stay valid from now on.
            pub unsafe fn trecvmsg_triggered(
                &self,
                msg: &mut TaggedMsgMut<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(msg.iov)?,
                    src: msg.addr,
                    tag: msg.tag,
                    ignore: msg.ignore,
                    ctx: msg.context,
                    tagged: true,
                };
                let ep = self.arc();
                let d = Deferred {
                    cntr: cntr.inner.clone(),
                    threshold,
                    ep,
                    idx: self.rxi(),
                    op: DeferredOp::Rx(r, flags & !OpFlags::TRIGGER),
                };
                cntr.domain.defer(d);
                Ok(())
            }
        }
    };
}

trigger_tx!(Endpoint);
trigger_tx!(TxContext);
trigger_rx!(Endpoint);
trigger_rx!(RxContext);
