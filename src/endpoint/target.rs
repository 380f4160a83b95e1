//! The target side of RMA and atomics: every access passes the MR table's check.
#![allow(unsafe_code)] // only through `mem`, whose contracts each use states

use crate::atomic::{self, AtomicClass, AtomicOp, Datatype};
use crate::config::Config;
use crate::cq_format::Completion;
use crate::error::Error;
use crate::flags::{BindFlags, Caps, CqFlags, MrAccess};
use crate::lock::Lock;
use crate::mem;
use crate::provider::{Payload, Pull};
use crate::wire::{Header, Op, HDR_COMPARE, HDR_FETCH, HDR_REMOTE_CQ_DATA};

use super::EpInner;

/// Most registered segments one read response may gather.
const MAX_CHUNKS: usize = 8;

impl<S: Config> EpInner<S> {
    /// A region bound to another endpoint (`FI_MR_ENDPOINT`) is not reachable here.
    fn bound_here(&self, user: &crate::mr::MrUser<S>) -> Result<(), Error> {
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
                    // cannot end and local accessors (which take it) cannot race.
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
                // read under the table lock (see `on_write`).
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
    pub(crate) fn on_atomic<R: Pull>(
        &self,
        hdr: &Header,
        src_name: &[u8],
        payload: Payload<'_, R>,
    ) {
        let fetch = hdr.flags & (HDR_FETCH | HDR_COMPARE) != 0;
        let resp = if fetch { Op::AtomicResp } else { Op::Ack };
        let fail = |e: Error| self.reply(hdr, src_name, resp, e.code() as u32, &[]);
        let Some(payload) = payload.inline() else {
            return fail(Error::Io);
        };
        let Some(rx) = self.rx.get(hdr.rx_idx as usize) else {
            return fail(Error::NoRx);
        };
        let (caps, cntr_w, cntr_r) = rx
            .state
            .with(|st| (st.caps, st.cntr_rem_write.clone(), st.cntr_rem_read.clone()));
        if !caps.contains(Caps::ATOMIC) {
            return fail(Error::OpNotSupp);
        }
        let (Some(op), Some(dt)) = (
            AtomicOp::from_raw(hdr.atomic_op),
            Datatype::from_raw(hdr.datatype),
        ) else {
            return fail(Error::Inval);
        };
        let class = if hdr.flags & HDR_COMPARE != 0 {
            AtomicClass::Compare
        } else if hdr.flags & HDR_FETCH != 0 {
            AtomicClass::Fetch
        } else {
            AtomicClass::Base
        };
        let n = hdr.aux as usize;
        if n > crate::domain::MAX_ATOMIC_SIZE {
            return fail(Error::MsgSize);
        }
        let (operand, compare) = match class {
            // `n <= MAX_ATOMIC_SIZE`: no overflow.
            AtomicClass::Compare if payload.len() == 2 * n => payload.split_at(n),
            AtomicClass::Compare => return fail(Error::Inval),
            _ => (payload, &[][..]),
        };
        let access = match (class, op) {
            (AtomicClass::Base, _) => MrAccess::REMOTE_WRITE,
            (_, AtomicOp::AtomicRead) => MrAccess::REMOTE_READ,
            _ => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        };
        // The fetched old value: one or a few elements almost always, so a small buffer
        // serves them and the 4 KiB one is zeroed only for the rare long vector (zeroing
        // it for every atomic cost more than the whole operation).
        let mut small = [0u8; 64];
        let mut large;
        let old: &mut [u8] = if n <= small.len() {
            &mut small[..n]
        } else {
            large = [0u8; crate::domain::MAX_ATOMIC_SIZE];
            &mut large[..n]
        };
        let res = self.domain.mr.with(|t| {
            let (mut chunks, user) = t.check(hdr.key, hdr.addr, n, access)?;
            self.bound_here(user)?;
            let c = chunks.next().ok_or(Error::Fault)?;
            if c.len != n || chunks.next().is_some() {
                // An atomic must touch one contiguous piece of memory.
                return Err(Error::Fault);
            }
            // SAFETY: checked, live, exclusively accessed under the table lock.
            let target = unsafe { mem::region_mut(c.addr, c.len) };
            let fetch_buf = if fetch { Some(&mut *old) } else { None };
            atomic::apply(class, op, dt, target, operand, compare, fetch_buf)?;
            // Counted as the endpoint's counters count it: a read or a write.
            let kind = if op == AtomicOp::AtomicRead {
                BindFlags::REMOTE_READ
            } else {
                BindFlags::REMOTE_WRITE
            };
            Ok(user.cntr.clone().filter(|_| user.cntr_flags.contains(kind)))
        });
        match res {
            Ok(mr_cntr) => {
                if let Some(c) = mr_cntr {
                    c.inc();
                }
                if op == AtomicOp::AtomicRead {
                    if let Some(c) = cntr_r {
                        c.inc();
                    }
                } else if let Some(c) = cntr_w {
                    c.inc();
                }
                let out: &[&[u8]] = if fetch { &[&*old] } else { &[] };
                self.reply(hdr, src_name, resp, 0, out);
            }
            Err(e) => fail(e),
        }
    }
}
