//! The target side of RMA and atomics: every access passes the MR table's check.
#![allow(unsafe_code)] // only through `mem`, whose contracts each use states

use crate::atomic::{AtomicClass, AtomicOp, Datatype};
use crate::config::Config;
use crate::cq_format::Completion;
use crate::error::Error;
use crate::flags::{BindFlags, Caps, CqFlags, MrAccess};
use crate::lock::Lock;
use crate::mem;
use crate::provider::wire::{Header, Op, Response, HDR_COMPARE, HDR_FETCH, HDR_REMOTE_CQ_DATA};
use crate::provider::{Payload, Provider, Pull, SharedBytes, Transport};

use super::EpInner;

/// Most registered segments one read response may gather.
const MAX_CHUNKS: usize = 8;
/// Bytes of the old values an atomic fetches into a buffer on the stack of
/// [`EpInner::on_atomic`] itself.
const SMALL_ATOMIC: usize = 64;

impl<S: Config> EpInner<S> {
    /// A region bound to another endpoint (`FI_MR_ENDPOINT`) is not reachable here.
    pub(super) fn bound_here(&self, user: &crate::engine::mr::MrUser<S>) -> Result<(), Error> {
        match user.ep {
            Some(id) if id != self as *const Self as usize => Err(Error::Access),
            _ => Ok(()),
        }
    }

    /// Applies an RMA write. Returns `false` to hold it back (remote CQ data with a full CQ).
    /// A remote payload is pulled straight into the registered memory; when that fails
    /// (the initiator vanished) the write answers `FI_EIO` and counts nothing.
    pub(crate) fn on_write<R: Pull>(
        &self,
        hdr: &Header,
        src_name: &[u8],
        payload: Payload<'_, R>,
    ) -> bool {
        let Some(rx) = self.rx.get(hdr.rx_idx as usize) else {
            self.reply(hdr, src_name, Op::Ack, Error::NoRx.code() as u32, &[]);
            return true;
        };
        let (caps, cq, cntr) = rx
            .state
            .with(|st| (st.caps, st.bind.cq.clone(), st.cntr_rem_write.clone()));
        let has_data = hdr.flags & HDR_REMOTE_CQ_DATA != 0;
        if has_data {
            if let Some(cq) = &cq {
                if !cq.has_room() {
                    return false;
                }
            }
        }
        let len = payload.len();
        let res = if !caps.contains(Caps::RMA) {
            Err(Error::OpNotSupp)
        } else {
            self.domain.mr.with(|t| {
                let (chunks, user) = t.check(hdr.key, hdr.addr, len, MrAccess::REMOTE_WRITE)?;
                self.bound_here(user)?;
                let mut off = 0usize;
                for c in chunks {
                    // SAFETY: `check` proved the chunk lies in a live registration with
                    // remote-write access; the table lock is held, so the registration
                    // cannot end and local accessors (which take it) cannot race. Not
                    // covered: a segment shm published, which peers' direct path may
                    // write meanwhile (the view should become a raw copy: DESIGN.md).
                    let dst = unsafe { mem::region_mut(c.addr, c.len) };
                    payload.copy_to(off, dst).map_err(|_| Error::Io)?;
                    off = off.checked_add(c.len).ok_or(Error::Io)?;
                }
                Ok(user
                    .cntr
                    .clone()
                    .filter(|_| user.cntr_flags.contains(BindFlags::REMOTE_WRITE)))
            })
        };
        match res {
            Ok(mr_cntr) => {
                if let Some(c) = mr_cntr {
                    c.inc();
                }
                if let Some(c) = &cntr {
                    c.inc();
                }
                if has_data {
                    if let Some(cq) = &cq {
                        let c = Completion {
                            flags: CqFlags::RMA | CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA,
                            len,
                            data: hdr.data,
                            ..Completion::default()
                        };
                        cq.complete(&c);
                    }
                }
                self.reply(hdr, src_name, Op::Ack, 0, &[]);
            }
            Err(e) => self.reply(hdr, src_name, Op::Ack, e.code() as u32, &[]),
        }
        true
    }

    /// Serves an RMA read.
    pub(crate) fn on_read(&self, hdr: &Header, src_name: &[u8]) {
        let Some(rx) = self.rx.get(hdr.rx_idx as usize) else {
            self.reply(hdr, src_name, Op::ReadResp, Error::NoRx.code() as u32, &[]);
            return;
        };
        let (caps, cntr) = rx.state.with(|st| (st.caps, st.cntr_rem_read.clone()));
        if !caps.contains(Caps::RMA) {
            self.reply(
                hdr,
                src_name,
                Op::ReadResp,
                Error::OpNotSupp.code() as u32,
                &[],
            );
            return;
        }
        let Ok(len) = usize::try_from(hdr.len) else {
            self.reply(hdr, src_name, Op::ReadResp, Error::Inval.code() as u32, &[]);
            return;
        };
        let res = self.domain.mr.with(|t| {
            let (chunks, user) = t.check(hdr.key, hdr.addr, len, MrAccess::REMOTE_READ)?;
            self.bound_here(user)?;
            let mut parts: [&[u8]; MAX_CHUNKS] = [&[]; MAX_CHUNKS];
            let mut n = 0;
            for c in chunks {
                if n == MAX_CHUNKS {
                    return Err(Error::Fault);
                }
                // SAFETY: checked range of a live registration with remote-read access,
                // read under the table lock (see `on_write`, and its one case not
                // covered).
                parts[n] = unsafe { mem::region(c.addr, c.len) };
                n += 1;
            }
            // The response is sent under the lock so the memory stays registered while
            // the transport copies it.
            self.reply(hdr, src_name, Op::ReadResp, 0, &parts[..n]);
            Ok(user
                .cntr
                .clone()
                .filter(|_| user.cntr_flags.contains(BindFlags::REMOTE_READ)))
        });
        match res {
            Ok(mr_cntr) => {
                if let Some(c) = mr_cntr {
                    c.inc();
                }
                if let Some(c) = cntr {
                    c.inc();
                }
            }
            Err(e) => self.reply(hdr, src_name, Op::ReadResp, e.code() as u32, &[]),
        }
    }

    /// Applies an atomic operation and answers with the old values when asked.
    /// Operands (at most `MAX_ATOMIC_SIZE` bytes) travel in the packet: a remote
    /// payload is answered with `FI_EIO`.
    ///
    /// One or a few elements (at most 64 bytes, almost every atomic) are fetched into
    /// a small buffer on this frame; longer vectors take [`Self::on_atomic_long`],
    /// whose buffer is zeroed only for them.
    #[inline]
    pub(crate) fn on_atomic<R: Pull>(
        &self,
        hdr: &Header,
        src_name: &[u8],
        payload: Payload<'_, R>,
    ) {
        let n = hdr.aux as usize;
        if n > SMALL_ATOMIC {
            return self.on_atomic_long(hdr, src_name, payload);
        }
        let mut small = [0u8; SMALL_ATOMIC];
        self.atomic_serve(hdr, src_name, payload, &mut small[..n]);
    }

    /// [`Self::on_atomic`] of more than [`SMALL_ATOMIC`] bytes.
    #[cold]
    #[inline(never)]
    fn on_atomic_long<R: Pull>(&self, hdr: &Header, src_name: &[u8], payload: Payload<'_, R>) {
        let mut large = [0u8; crate::limits::MAX_ATOMIC_SIZE];
        let n = hdr.aux as usize;
        // Longer than the limit: `atomic_apply` answers `FI_EMSGSIZE` without
        // touching the (then empty) buffer.
        let old: &mut [u8] = if n <= large.len() {
            &mut large[..n]
        } else {
            &mut []
        };
        self.atomic_serve(hdr, src_name, payload, old);
    }

    /// Applies atomic request `hdr` and answers it: with the `old.len()` (`hdr.aux`,
    /// or none past the limit) bytes fetched into `old` when the request fetches.
    #[inline(always)]
    fn atomic_serve<R: Pull>(
        &self,
        hdr: &Header,
        src_name: &[u8],
        payload: Payload<'_, R>,
        old: &mut [u8],
    ) {
        let fetch = hdr.flags & (HDR_FETCH | HDR_COMPARE) != 0;
        let resp = if fetch { Op::AtomicResp } else { Op::Ack };
        let res = match payload.inline() {
            Some(payload) => self.atomic_apply(hdr, payload, fetch, old),
            None => Err(Error::Io),
        };
        match res {
            Ok(()) => self.atomic_reply(hdr, src_name, resp, 0, if fetch { old } else { &[] }),
            Err(e) => self.atomic_reply(hdr, src_name, resp, e.code() as u32, &[]),
        }
    }

    /// The target's checks of atomic request `hdr` with operands (and compare values)
    /// `payload`, then the operation, the old values going to `old` when `fetch`;
    /// counted on success. `old.len()` is `hdr.aux` up to the limit. The operands stay
    /// where the packet put them, which the initiator's process may still write:
    /// [`mem::atomic_shared`] reads each once.
    #[inline(always)]
    fn atomic_apply(
        &self,
        hdr: &Header,
        payload: SharedBytes<'_>,
        fetch: bool,
        old: &mut [u8],
    ) -> Result<(), Error> {
        let rx = self.rx.get(hdr.rx_idx as usize).ok_or(Error::NoRx)?;
        let op = AtomicOp::from_raw(hdr.atomic_op);
        // Counted as the endpoint's counters count it: a read or a write. Only the
        // counter that counts it is taken (a clone of an absent one is one test).
        let read = op == Some(AtomicOp::AtomicRead);
        let (caps, cntr) = rx.state.with(|st| {
            let c = if read {
                &st.cntr_rem_read
            } else {
                &st.cntr_rem_write
            };
            (st.caps, c.clone())
        });
        if !caps.contains(Caps::ATOMIC) {
            return Err(Error::OpNotSupp);
        }
        let (Some(op), Some(dt)) = (op, Datatype::from_raw(hdr.datatype)) else {
            return Err(Error::Inval);
        };
        let class = if hdr.flags & HDR_COMPARE != 0 {
            AtomicClass::Compare
        } else if fetch {
            AtomicClass::Fetch
        } else {
            AtomicClass::Base
        };
        let n = hdr.aux as usize;
        if n > crate::limits::MAX_ATOMIC_SIZE {
            return Err(Error::MsgSize);
        }
        let (operand, compare) = match class {
            // `n <= MAX_ATOMIC_SIZE`: no overflow.
            AtomicClass::Compare => match (payload.get(0, n), payload.get(n, n)) {
                (Some(operand), Some(compare)) if payload.len() == 2 * n => (operand, compare),
                _ => return Err(Error::Inval),
            },
            _ => (payload, SharedBytes::from(&[])),
        };
        let access = match (class, op) {
            (AtomicClass::Base, _) => MrAccess::REMOTE_WRITE,
            (_, AtomicOp::AtomicRead) => MrAccess::REMOTE_READ,
            _ => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        };
        let kind = if read {
            BindFlags::REMOTE_READ
        } else {
            BindFlags::REMOTE_WRITE
        };
        let mr_cntr = self.domain.mr.with(|t| -> Result<_, Error> {
            // An atomic must touch one contiguous piece of memory.
            let (addr, user) = t.check_contiguous(hdr.key, hdr.addr, n, access)?;
            self.bound_here(user)?;
            let fetch_buf = if fetch { Some(&mut *old) } else { None };
            // SAFETY: a checked range of a live registration, which the table lock
            // (held) keeps registered; in this process only holders of that lock touch
            // registered memory through the library. Other processes may update it at
            // the same time only through the direct path of a published segment, one
            // element at a time with CPU atomics of its width (wider elements go
            // through here), which `atomic_shared` is atomic against.
            unsafe { mem::atomic_shared(class, op, dt, addr, n, operand, compare, fetch_buf)? };
            Ok(if user.cntr_flags.contains(kind) {
                user.cntr.clone()
            } else {
                None
            })
        })?;
        if let Some(c) = mr_cntr {
            c.inc();
        }
        if let Some(c) = cntr {
            c.inc();
        }
        Ok(())
    }

    /// Answers atomic request `req` with `op` (`AtomicResp` or `Ack`), `status` and
    /// the old values `out` (empty unless it fetched and succeeded): the response
    /// [`EpInner::reply`] sends, for a payload of at most one piece, through
    /// [`Transport::respond`].
    #[inline(always)]
    fn atomic_reply(&self, req: &Header, src_name: &[u8], op: Op, status: u32, out: &[u8]) {
        let r = Response {
            op,
            tx_idx: req.tx_idx,
            req: req.req,
            status,
        };
        let res = self.sender.with(|tx| {
            self.transport
                .respond(tx, src_name, &r, out, S::Provider::resolve)
        });
        self.response_sent(res, req.req);
    }
}
