//! Triggered operations (`man 3 fi_trigger`): operations deferred until a counter
//! reaches a threshold.

use std::sync::Arc;

use crate::config::Config;
use crate::flags::OpFlags;
use crate::lock::Lock;

use super::cntr::CntrInner;
use super::cq::CqErrEntry;
use super::endpoint::{EpInner, OwnedTx, RxReq};

/// A triggered operation waiting for its counter.
pub(crate) struct Deferred<S: Config> {
    /// The counter it waits for.
    pub(crate) cntr: Arc<CntrInner<S>>,
    pub(crate) threshold: u64,
    pub(crate) ep: Arc<EpInner<S>>,
    pub(crate) idx: usize,
    pub(crate) op: DeferredOp,
}

pub(crate) enum DeferredOp {
    Tx(OwnedTx),
    Rx(RxReq, OpFlags),
}

impl<S: Config> Deferred<S> {
    /// Posts the operation; a failure becomes an error completion.
    pub(crate) fn run(self) {
        let (res, ctx, cq) = match &self.op {
            DeferredOp::Tx(o) => {
                let iov = [&o.payload[..]];
                let req = o.req(&iov);
                let cq = self
                    .ep
                    .tx
                    .get(self.idx)
                    .and_then(|t| t.state.with(|st| st.bind.cq.clone()));
                (self.ep.post_tx(self.idx, &req, o.flags), o.ctx, cq)
            }
            DeferredOp::Rx(r, f) => {
                let cq = self
                    .ep
                    .rx
                    .get(self.idx)
                    .and_then(|t| t.state.with(|st| st.bind.cq.clone()));
                (self.ep.post_rx(self.idx, r, *f), r.ctx, cq)
            }
        };
        if let (Err(e), Some(cq)) = (res, cq) {
            cq.complete_err(CqErrEntry::new(ctx, e));
        }
    }
}
