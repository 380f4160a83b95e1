//! Claims ([`Claim`]): payloads a transport receives in pieces straight into their
//! destination, and the operations they complete.
//!
//! A claim is made when the frame's header arrives: a message is matched then (the
//! receive leaves the matcher, so nothing else can take it, and the sender's later
//! messages, which its transport hands over only after this one, match after it); an
//! RMA write's key, range and rights are checked then; a read response takes its read
//! out of the pending table. The destination stays in [`Claims`] until the claim is
//! handed back, which completes the operation once; closing the endpoint completes
//! what is left with `FI_ECANCELED`, and a later hand-back or fill finds nothing.
//!
//! Every write into a destination happens under the table's lock, so a claim the
//! endpoint completed (closing) is never written afterwards; an RMA write's also under
//! the MR table's lock, with the key checked again, so memory deregistered meanwhile
//! is never written (its claim fails with the check's error).
#![allow(unsafe_code)] // only through `mem`, whose contracts each use states

use crate::config::Config;
use crate::cq_format::Completion;
use crate::engine::cq::CqErrEntry;
use crate::error::{Error, Result};
use crate::flags::{BindFlags, Caps, CqFlags, MrAccess};
use crate::lock::Lock;
use crate::mem::{self, RawIov};
use crate::provider::wire::{Header, Op, HDR_ACK, HDR_REMOTE_CQ_DATA};
use crate::provider::Claim;
use crate::types::FiAddr;

use super::state::{Pending, PostedRecv};
use super::EpInner;

/// What a claim fills, and what completes when it is handed back.
enum Target {
    /// A posted receive, taken out of its matcher.
    Recv {
        p: PostedRecv,
        /// The message's header (context, tag, data, acknowledgement asked).
        hdr: Header,
        src: FiAddr,
        src_name: Vec<u8>,
    },
    /// Registered memory of an RMA write: `hdr.key` at `hdr.addr`, checked again on
    /// every fill.
    Write { hdr: Header, src_name: Vec<u8> },
    /// The buffer of a read of transmit context `tx`, out of its pending table.
    Read { tx: u16, p: Pending },
}

struct Entry {
    to: Target,
    /// Why the destination was withdrawn (an RMA write's region went away).
    err: Option<Error>,
}

/// An endpoint's claims in progress, by id: a slot and its generation, so a stale id
/// (a claim completed when the endpoint closed) finds nothing.
#[derive(Default)]
pub(crate) struct Claims {
    slots: Vec<(u32, Option<Entry>)>,
    free: Vec<u32>,
}

impl Claims {
    fn insert(&mut self, e: Entry) -> u64 {
        let i = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push((0, None));
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[i];
        slot.1 = Some(e);
        ((slot.0 as u64) << 32) | i as u64
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Entry> {
        match self.slots.get_mut((id as u32) as usize) {
            Some((g, e)) if *g == (id >> 32) as u32 => e.as_mut(),
            _ => None,
        }
    }

    fn take(&mut self, id: u64) -> Option<Entry> {
        let i = (id as u32) as usize;
        let (g, e) = self.slots.get_mut(i)?;
        if *g != (id >> 32) as u32 {
            return None;
        }
        let e = e.take()?;
        *g = g.wrapping_add(1);
        self.free.push(i as u32);
        Some(e)
    }

    fn drain(&mut self) -> Vec<Entry> {
        let mut all = Vec::new();
        for (i, (g, e)) in self.slots.iter_mut().enumerate() {
            if let Some(e) = e.take() {
                *g = g.wrapping_add(1);
                self.free.push(i as u32);
                all.push(e);
            }
        }
        all
    }
}

impl<S: Config> EpInner<S> {
    /// [`Sink::claim`](crate::provider::Sink::claim): the destination of frame `hdr`'s
    /// payload, or `None`.
    pub(crate) fn claim(&self, hdr: &Header, src_name: &[u8]) -> Option<Claim> {
        let len = usize::try_from(hdr.len).ok()?;
        let (to, room) = match Op::from_raw(hdr.op)? {
            Op::Msg | Op::Tagged => self.claim_recv(hdr, src_name)?,
            Op::Write => self.claim_write(hdr, src_name, len)?,
            Op::ReadResp => self.claim_read(hdr, len)?,
            _ => return None,
        };
        let id = self.claims.with(|t| t.insert(Entry { to, err: None }));
        Some(Claim::new(id, len, room))
    }

    /// The posted receive message `hdr` matches, taken out of its matcher; `None` when
    /// none is posted or the oldest that matches is a multi-receive buffer (whose
    /// consumption the whole-message path does).
    fn claim_recv(&self, hdr: &Header, src_name: &[u8]) -> Option<(Target, usize)> {
        let rx = self.rx.get(hdr.rx_idx as usize)?;
        let tagged = hdr.op == Op::Tagged as u8;
        rx.state.with(|st| {
            let src = if st.caps.intersects(Caps::SOURCE | Caps::DIRECTED_RECV) {
                st.av
                    .as_ref()
                    .map_or(FiAddr::NOTAVAIL, |av| av.reverse(src_name))
            } else {
                FiAddr::NOTAVAIL
            };
            let (m, tag) = if tagged {
                (&mut st.tagged, hdr.tag)
            } else {
                (&mut st.msg, 0)
            };
            let p = m.deliver(tag, src, |p| {
                if p.multi {
                    (false, None)
                } else {
                    (true, Some(*p))
                }
            })??;
            let room = p.iov.len();
            let to = Target::Recv {
                p,
                hdr: *hdr,
                src,
                src_name: src_name.to_vec(),
            };
            Some((to, room))
        })
    }

    /// The target of RMA write `hdr`, when the receive context takes RMA and the key,
    /// range and rights pass; otherwise the whole-frame path answers the error.
    fn claim_write(&self, hdr: &Header, src_name: &[u8], len: usize) -> Option<(Target, usize)> {
        let rx = self.rx.get(hdr.rx_idx as usize)?;
        if !rx.state.with(|st| st.caps.contains(Caps::RMA)) {
            return None;
        }
        self.domain.mr.with(|t| {
            let (_, user) = t
                .check(hdr.key, hdr.addr, len, MrAccess::REMOTE_WRITE)
                .ok()?;
            self.bound_here(user).ok()
        })?;
        let to = Target::Write {
            hdr: *hdr,
            src_name: src_name.to_vec(),
        };
        Some((to, len))
    }

    /// The read a successful response `hdr` of `len` bytes answers, taken out of the
    /// pending table; `None` for anything that is not exactly that (an error, another
    /// kind of operation, a length that is not the read's), which the whole-frame path
    /// then completes as it always does.
    fn claim_read(&self, hdr: &Header, len: usize) -> Option<(Target, usize)> {
        if hdr.status != 0 {
            return None;
        }
        let tx = self.tx.get(hdr.tx_idx as usize)?;
        tx.state.with(|st| {
            let p = st.pending.peek(hdr.req)?;
            let read = CqFlags::READ | CqFlags::RMA;
            if !p.flags.contains(read) || p.result.len() != len {
                return None;
            }
            let p = st.pending.take(hdr.req)?;
            Some((Target::Read { tx: hdr.tx_idx, p }, len))
        })
    }

    /// [`Sink::fill`](crate::provider::Sink::fill) of claim `c`.
    pub(crate) fn claim_fill<E>(
        &self,
        c: &mut Claim,
        f: impl FnOnce(&mut [u8]) -> core::result::Result<usize, E>,
    ) -> core::result::Result<usize, E> {
        if c.room() == 0 {
            return Ok(0);
        }
        self.claims.with(|t| {
            let Some(e) = t.get_mut(c.id()) else {
                // Completed already: the endpoint closed.
                c.withdraw();
                return Ok(0);
            };
            let iov: RawIov = match &e.to {
                Target::Recv { p, .. } => p.iov,
                Target::Read { p, .. } => p.result,
                Target::Write { hdr, .. } => {
                    let (key, addr) = (hdr.key, hdr.addr);
                    return match self.fill_region(key, addr, c, f) {
                        Ok(r) => r,
                        Err(err) => {
                            e.err = Some(err);
                            c.withdraw();
                            Ok(0)
                        }
                    };
                }
            };
            // SAFETY: `iov` was recorded by a posting call (a receive, a read) whose
            // contract keeps its buffers valid and unaliased until the operation
            // completes. It completes only once its entry leaves this table, which
            // the lock held here excludes until the write is done; and only this
            // claim (one per entry, not `Clone`) writes there, one piece at a time.
            let dst = unsafe { iov.piece_mut(c.placed(), c.room()) };
            let n = f(dst)?;
            c.advance(n);
            Ok(n)
        })
    }

    /// Runs `f` on the next stretch of the region an RMA write claim fills, under the
    /// MR table's lock and after its check (the key may have been closed since the
    /// claim): `Err` is the check's verdict, `Ok` is `f`'s.
    fn fill_region<E>(
        &self,
        key: u64,
        addr: u64,
        c: &mut Claim,
        f: impl FnOnce(&mut [u8]) -> core::result::Result<usize, E>,
    ) -> Result<core::result::Result<usize, E>> {
        let at = addr.checked_add(c.placed() as u64).ok_or(Error::Fault)?;
        let r = self
            .domain
            .mr
            .with(|t| -> Result<core::result::Result<usize, E>> {
                let (mut chunks, user) = t.check(key, at, c.room(), MrAccess::REMOTE_WRITE)?;
                self.bound_here(user)?;
                let chunk = chunks.next().ok_or(Error::Fault)?;
                // SAFETY: `check` proved the chunk lies in a live registration with
                // remote-write access, and the table lock, held until `f` returns, keeps
                // it registered and keeps local accessors (which take it) out; `f` holds
                // the view only for its write. Not covered, as in `on_write`: a segment
                // shm published, which peers' direct path may write meanwhile.
                let dst = unsafe { mem::region_mut(chunk.addr, chunk.len) };
                Ok(f(dst))
            })?;
        if let Ok(n) = r {
            c.advance(n);
        }
        Ok(r)
    }

    /// [`Sink::claimed`](crate::provider::Sink::claimed): completes claim `c`'s
    /// operation, with `status` (or the error that withdrew its destination). A claim
    /// the endpoint completed already is ignored.
    pub(crate) fn claimed(&self, c: Claim, status: Result<()>) {
        let Some(e) = self.claims.with(|t| t.take(c.id())) else {
            return;
        };
        let status = match (status, e.err) {
            (Err(x), _) | (Ok(()), Some(x)) => Err(x),
            // A transport that hands back a claim before its payload is in.
            (Ok(()), None) if c.remaining() != 0 => Err(Error::Io),
            (Ok(()), None) => Ok(()),
        };
        self.complete_claim(e.to, c.placed(), c.len(), status);
    }

    /// Completes every claim still outstanding with `err` (the endpoint closes).
    pub(crate) fn fail_claims(&self, err: Error) {
        let all = self.claims.with(|t| t.drain());
        for e in all {
            self.complete_claim(e.to, 0, 0, Err(err));
        }
    }

    /// Completes the operation of a claim whose destination took `placed` of the
    /// payload's `len` bytes.
    fn complete_claim(&self, to: Target, placed: usize, len: usize, status: Result<()>) {
        match to {
            Target::Recv {
                p,
                hdr,
                src,
                src_name,
            } => {
                self.recv_claimed(&p, &hdr, src, placed, len, status);
                if hdr.flags & HDR_ACK != 0 {
                    let code = if status.is_ok() { 0 } else { Error::Io.code() };
                    self.reply_ack(&hdr, &src_name, code as u32);
                }
            }
            Target::Write { hdr, src_name } => self.write_claimed(&hdr, &src_name, len, status),
            Target::Read { tx, p } => {
                let Some(t) = self.tx.get(tx as usize) else {
                    return;
                };
                t.state.with(|st| {
                    match status {
                        Ok(()) => st.succeed_to(p.cntr, p.want, p.ctx, p.flags, p.len, None),
                        Err(e) => st.fail(p.cntr, p.ctx, p.flags, e, e.code()),
                    }
                    if !st.fenced.is_empty() {
                        self.flush_fenced(st, tx as usize);
                    }
                });
            }
        }
    }

    /// Reports a claimed receive: a success, `FI_ETRUNC` when the buffer took less than
    /// the message, or the error that ended it.
    fn recv_claimed(
        &self,
        p: &PostedRecv,
        hdr: &Header,
        src: FiAddr,
        placed: usize,
        len: usize,
        status: Result<()>,
    ) {
        let Some(rx) = self.rx.get(hdr.rx_idx as usize) else {
            return;
        };
        let mut flags = CqFlags::RECV;
        flags |= if hdr.op == Op::Tagged as u8 {
            CqFlags::TAGGED
        } else {
            CqFlags::MSG
        };
        let has_data = hdr.flags & HDR_REMOTE_CQ_DATA != 0;
        if has_data {
            flags |= CqFlags::REMOTE_CQ_DATA;
        }
        let data = if has_data { hdr.data } else { 0 };
        let err = match status {
            Err(e) => Some((e, 0)),
            Ok(()) if placed < len => Some((Error::Trunc, len - placed)),
            Ok(()) => None,
        };
        rx.state.with(|st| {
            // Counters first: whoever sees the CQ entry also sees the count.
            match err {
                None => {
                    if let Some(c) = &st.cntr_recv {
                        c.inc();
                    }
                    if p.want {
                        if let Some(cq) = &st.bind.cq {
                            cq.complete(&Completion {
                                context: p.ctx,
                                flags,
                                len: placed,
                                buf: p.iov.base(),
                                data,
                                tag: hdr.tag,
                                src,
                            });
                        }
                    }
                }
                Some((err, olen)) => {
                    if let Some(c) = &st.cntr_recv {
                        c.inc_err();
                    }
                    if let Some(cq) = &st.bind.cq {
                        cq.complete_err(CqErrEntry {
                            context: p.ctx,
                            flags,
                            len: placed,
                            buf: p.iov.base(),
                            data,
                            tag: hdr.tag,
                            olen,
                            err,
                            prov_errno: err.code(),
                            src,
                        });
                    }
                }
            }
        });
    }

    /// Answers a claimed RMA write `hdr` of `len` bytes, counting it (and reporting its
    /// remote CQ data) when it succeeded.
    fn write_claimed(&self, hdr: &Header, src_name: &[u8], len: usize, status: Result<()>) {
        if let Err(e) = status {
            self.reply(hdr, src_name, Op::Ack, e.code() as u32, &[]);
            return;
        }
        let Some(rx) = self.rx.get(hdr.rx_idx as usize) else {
            return;
        };
        let mr_cntr = self.domain.mr.with(|t| {
            let user = t.get(hdr.key)?.user();
            user.cntr
                .clone()
                .filter(|_| user.cntr_flags.contains(BindFlags::REMOTE_WRITE))
        });
        if let Some(c) = mr_cntr {
            c.inc();
        }
        let (cq, cntr) = rx
            .state
            .with(|st| (st.bind.cq.clone(), st.cntr_rem_write.clone()));
        if let Some(c) = &cntr {
            c.inc();
        }
        if hdr.flags & HDR_REMOTE_CQ_DATA != 0 {
            if let Some(cq) = &cq {
                cq.complete(&Completion {
                    flags: CqFlags::RMA | CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA,
                    len,
                    data: hdr.data,
                    ..Completion::default()
                });
            }
        }
        self.reply(hdr, src_name, Op::Ack, 0, &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            to: Target::Write {
                hdr: Header::default(),
                src_name: Vec::new(),
            },
            err: None,
        }
    }

    #[test]
    fn ids_are_single_use() {
        let mut t = Claims::default();
        let a = t.insert(entry());
        let b = t.insert(entry());
        assert_ne!(a, b);
        assert!(t.get_mut(a).is_some());
        assert!(t.take(a).is_some());
        // Taken: stale, also once its slot is reused.
        assert!(t.take(a).is_none() && t.get_mut(a).is_none());
        let c = t.insert(entry());
        assert_eq!(c as u32, a as u32);
        assert!(t.take(a).is_none());
        assert_eq!(t.drain().len(), 2);
        assert!(t.take(b).is_none() && t.take(c).is_none());
        assert!(t.drain().is_empty());
    }
}
