//! What every posting call builds its request from.

use crate::engine::endpoint::{RmaIov, TxReq};
use crate::flags::OpFlags;
use crate::mem::RawIov;
use crate::provider::wire::Op;
use crate::types::{Context, FiAddr};

#[inline(always)]
pub(super) fn data_of(flags: OpFlags, d: u64) -> Option<u64> {
    flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(d)
}

#[inline(always)]
pub(super) fn req<'a>(op: Op, iov: &'a [&'a [u8]], dest: FiAddr, ctx: Context) -> TxReq<'a> {
    TxReq {
        op,
        iov,
        compare: &[],
        result: RawIov::EMPTY,
        dest,
        tag: 0,
        data: None,
        rma: RmaIov::default(),
        atomic: (0, 0, 0),
        ctx,
    }
}
