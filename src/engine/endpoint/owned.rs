//! Operations kept for later: behind an `FI_FENCE`, or until a trigger counter fires.

use crate::flags::{CqFlags, OpFlags};
use crate::mem::RawIov;
use crate::provider::wire::{Op, HDR_COMPARE, HDR_FETCH};
use crate::types::{Context, FiAddr};

/// One RMA target segment (`struct fi_rma_iov` / `fi_rma_ioc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RmaIov {
    /// Remote address (virtual or offset, per the target's MR mode).
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Remote key.
    pub key: u64,
}

/// A transmit request as the data-path functions see it (borrowed payload).
#[derive(Clone, Copy)]
pub(crate) struct TxReq<'a> {
    pub(crate) op: Op,
    pub(crate) iov: &'a [&'a [u8]],
    pub(crate) compare: &'a [u8],
    pub(crate) result: RawIov,
    pub(crate) dest: FiAddr,
    pub(crate) tag: u64,
    pub(crate) data: Option<u64>,
    pub(crate) rma: RmaIov,
    /// (fi_op, fi_datatype, HDR_FETCH/HDR_COMPARE bits)
    pub(crate) atomic: (u8, u8, u8),
    pub(crate) ctx: Context,
}

/// A transmit request with its payload copied, for deferred execution.
#[derive(Debug, Clone)]
pub(crate) struct OwnedTx {
    pub(crate) op: Op,
    pub(crate) payload: Vec<u8>,
    pub(crate) compare: Vec<u8>,
    pub(crate) result: RawIov,
    pub(crate) dest: FiAddr,
    pub(crate) tag: u64,
    pub(crate) data: Option<u64>,
    pub(crate) rma: RmaIov,
    pub(crate) atomic: (u8, u8, u8),
    pub(crate) ctx: Context,
    pub(crate) flags: OpFlags,
}

impl OwnedTx {
    /// The request, borrowing the copied payload through `iov` (filled by the caller:
    /// `let iov = [&o.payload[..]];`, so the borrow lives in the caller's frame).
    pub(crate) fn req<'a>(&'a self, iov: &'a [&'a [u8]; 1]) -> TxReq<'a> {
        TxReq {
            iov: if self.op == Op::ReadReq { &[] } else { iov },
            ..self.shape()
        }
    }

    /// The request without its payload: enough to classify the operation.
    fn shape(&self) -> TxReq<'_> {
        TxReq {
            op: self.op,
            iov: &[],
            compare: &self.compare,
            result: self.result,
            dest: self.dest,
            tag: self.tag,
            data: self.data,
            rma: self.rma,
            atomic: self.atomic,
            ctx: self.ctx,
        }
    }

    /// The completion flags the operation reports.
    pub(crate) fn completion_flags(&self) -> CqFlags {
        completion_kind(&self.shape()).0
    }

    pub(crate) fn from_req(r: &TxReq<'_>, flags: OpFlags) -> OwnedTx {
        OwnedTx {
            op: r.op,
            payload: r.iov.concat(),
            compare: r.compare.to_vec(),
            result: r.result,
            dest: r.dest,
            tag: r.tag,
            data: r.data,
            rma: r.rma,
            atomic: r.atomic,
            ctx: r.ctx,
            flags,
        }
    }
}

/// A receive request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RxReq {
    pub(crate) iov: RawIov,
    pub(crate) src: FiAddr,
    pub(crate) tag: u64,
    pub(crate) ignore: u64,
    pub(crate) ctx: Context,
    pub(crate) tagged: bool,
}

/// Which transmit counter an operation increments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CntrKind {
    Send,
    Read,
    Write,
}

#[inline]
pub(crate) fn completion_kind(r: &TxReq<'_>) -> (CqFlags, CntrKind) {
    match r.op {
        Op::Tagged => (CqFlags::SEND | CqFlags::TAGGED, CntrKind::Send),
        Op::Write => (CqFlags::RMA | CqFlags::WRITE, CntrKind::Write),
        Op::ReadReq => (CqFlags::RMA | CqFlags::READ, CntrKind::Read),
        Op::Atomic if r.atomic.2 & (HDR_FETCH | HDR_COMPARE) != 0 => {
            (CqFlags::ATOMIC | CqFlags::READ, CntrKind::Read)
        }
        Op::Atomic => (CqFlags::ATOMIC | CqFlags::WRITE, CntrKind::Write),
        _ => (CqFlags::SEND | CqFlags::MSG, CntrKind::Send),
    }
}
