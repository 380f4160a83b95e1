//! The receive data path: posting receives, matching arrivals, peek/claim/discard.
#![allow(unsafe_code)] // only through `mem`, whose contracts each use states

use std::sync::Arc;

use crate::config::Config;
use crate::cq_format::Completion;
use crate::engine::cntr::CntrInner;
use crate::engine::cq::CqErrEntry;
use crate::engine::cq::Reader;
use crate::engine::eq::EqErrEntry;
use crate::engine::matching::Matcher;
use crate::error::{Error, Result};
use crate::flags::{Caps, CqFlags, OpFlags};
use crate::lock::Lock;
use crate::provider::wire::{Eager, Header, Op, HDR_ACK, HDR_REMOTE_CQ_DATA};
use crate::provider::{NoPull, Payload, Provider, Pull, SharedBytes, Transport};
use crate::types::{Context, FiAddr};

use super::owned::RxReq;
use super::state::{Bindings, PostedRecv, RxCtx, RxState, Unexp};
use super::EpInner;

/// Most unexpected messages buffered per receive context before arrivals are held back
/// in the transport (which then pushes back on senders).
pub const MAX_UNEXPECTED: usize = 4096;

impl<S: Config> EpInner<S> {
    /// Posts a receive on receive context `rxi`.
    #[inline]
    pub(crate) fn post_rx(&self, rxi: usize, r: &RxReq, flags: OpFlags) -> Result<()> {
        let rx = self.rx.get(rxi).ok_or(Error::Inval)?;
        rx.state.with(|st| {
            if !st.enabled {
                return Err(Error::OpBadState);
            }
            let need = if r.tagged { Caps::TAGGED } else { Caps::MSG };
            if !st.caps.contains(need) {
                return Err(Error::OpNotSupp);
            }
            let src = if st.caps.contains(Caps::DIRECTED_RECV) {
                r.src
            } else {
                FiAddr::UNSPEC
            };
            if flags.intersects(OpFlags::PEEK | OpFlags::CLAIM) {
                if st.unresolved != 0 {
                    resolve_sources(st);
                }
                // A copy, so that `r` never escapes: the request then stays in
                // registers and the receive is built straight into its matcher slot.
                return peek_claim(st, *r, src, flags);
            }
            let want = !st.bind.selective || flags.contains(OpFlags::COMPLETION);
            if let Some(cq) = &st.bind.cq {
                if !cq.has_room() {
                    return Err(Error::Again);
                }
            }
            let multi = flags.contains(OpFlags::MULTI_RECV);
            if multi && r.tagged {
                return Err(Error::BadFlags);
            }
            if st.unresolved != 0 {
                resolve_sources(st);
            }
            let RxState {
                bind,
                cntr_recv,
                tagged,
                msg,
                size,
                min_multi_recv,
                pool,
                ..
            } = st;
            // `rx_attr.size` bounds the context as a whole, as `fi_rx_size_left` reports.
            if tagged.posted_len() + msg.posted_len() >= *size {
                return Err(Error::Again);
            }
            let m = if r.tagged { tagged } else { msg };
            let (tag, ignore) = if r.tagged { (r.tag, r.ignore) } else { (0, 0) };
            let p = PostedRecv {
                iov: r.iov,
                ctx: r.ctx,
                multi,
                consumed: 0,
                want,
            };
            if m.unexpected_len() == 0 {
                // Posted ahead of its message (the common case): built straight into
                // the matcher, without a detour through the loop's copy.
                m.post(tag, ignore, src, p);
                return Ok(());
            }
            let mut p = p;
            while let Some(uid) = m.match_unexpected(tag, ignore, src) {
                let Some(u) = m.remove_unexpected(uid) else {
                    break;
                };
                let done =
                    complete_unexpected(bind, cntr_recv, &mut p, &u, r.tagged, *min_multi_recv);
                pool.recycle(u.buf);
                if done {
                    return Ok(());
                }
            }
            m.post(tag, ignore, src, p);
            Ok(())
        })
    }

    /// Delivers an arriving message. Returns `false` to leave it in the transport
    /// (resource management: the CQ or the unexpected queue is full). A consumed
    /// message no longer needs its payload: a remote one is copied into the matching
    /// receive or, when none is posted, into a pooled unexpected-message buffer.
    pub(crate) fn on_message<R: Pull>(
        &self,
        hdr: &Header,
        src_name: &[u8],
        payload: Payload<'_, R>,
        rd: Option<&mut Reader<'_, S>>,
    ) -> bool {
        let Some(rx) = self.rx.get(hdr.rx_idx as usize) else {
            self.reply_ack(hdr, src_name, Error::NoRx.code() as u32);
            return true;
        };
        let tagged = hdr.op == Op::Tagged as u8;
        let data = (hdr.flags & HDR_REMOTE_CQ_DATA != 0).then_some(hdr.data);
        let Some(failed) = deliver_msg(rx, tagged, hdr.tag, data, src_name, payload, rd) else {
            return false;
        };
        if hdr.flags & HDR_ACK != 0 {
            let status = if failed { Error::Io.code() as u32 } else { 0 };
            self.reply_ack(hdr, src_name, status);
        }
        true
    }

    /// The lane of a message that needs no response, as a transport hands it over in
    /// short form ([`Sink::eager`](crate::provider::Sink::eager)): [`Self::on_message`]
    /// of `m.header()` without building it, and with nothing to acknowledge.
    #[inline]
    pub(crate) fn on_eager(
        &self,
        m: &Eager,
        src_name: &[u8],
        payload: SharedBytes<'_>,
        rd: Option<&mut Reader<'_, S>>,
    ) -> bool {
        let Some(rx) = self.rx.get(m.rx_idx as usize) else {
            // No such context, and the sender asked for no answer: dropped, as
            // `on_message` does with a message that asked for no acknowledgement.
            return true;
        };
        let payload = Payload::<NoPull>::Inline(payload);
        deliver_msg(rx, m.op == Op::Tagged, m.tag, m.data, src_name, payload, rd).is_some()
    }

    /// Sends an `Ack` with `status` for request `hdr` back to its initiator.
    pub(crate) fn reply_ack(&self, hdr: &Header, src_name: &[u8], status: u32) {
        if hdr.flags & HDR_ACK == 0 && matches!(Op::from_raw(hdr.op), Some(Op::Msg | Op::Tagged)) {
            return;
        }
        self.reply(hdr, src_name, Op::Ack, status, &[]);
    }

    /// Sends a response to the initiator of `req`. Transports accept responses without
    /// flow control: they are bounded by the initiator's transmit queue depth.
    pub(crate) fn reply(
        &self,
        req: &Header,
        src_name: &[u8],
        op: Op,
        status: u32,
        payload: &[&[u8]],
    ) {
        let len: usize = payload.iter().map(|p| p.len()).sum();
        let hdr = Header {
            op: op as u8,
            tx_idx: req.tx_idx,
            req: req.req,
            status,
            len: len as u64,
            ..Header::default()
        };
        let r = self.sender.with(|tx| {
            self.transport
                .reply(tx, src_name, &hdr, payload, S::Provider::resolve)
        });
        self.response_sent(r, req.req);
    }

    /// The outcome of sending a response to request `req`. A peer that vanished cannot
    /// take its answer, and nothing else waits for it; but a transport that refuses a
    /// response breaks its contract (responses are never refused), and the initiator
    /// would wait for ever: a bug, asserted in debug builds and reported as an error
    /// event on the endpoint's EQ otherwise, never dropped in silence.
    #[inline(always)]
    pub(crate) fn response_sent(&self, r: Result<()>, req: u64) {
        match r {
            Ok(()) | Err(Error::HostUnreach | Error::AddrNotAvail) => {}
            Err(e) => self.response_refused(e, req),
        }
    }

    #[cold]
    #[inline(never)]
    fn response_refused(&self, e: Error, req: u64) {
        debug_assert!(false, "the transport refused a response: {e}");
        if let Some(eq) = self.eq.with(|q| q.clone()) {
            eq.post_err(EqErrEntry {
                fid_context: Context(0),
                context: Context(0),
                data: req,
                err: Error::Io,
                prov_errno: e.code(),
                err_data: Vec::new(),
            });
        }
    }
}

/// Matches an arriving message on receive context `rx` and delivers it: into the
/// oldest posted receive that accepts it, else onto the unexpected queue. `None`:
/// held back (the CQ or the unexpected queue is full); `Some(failed)`: consumed, and
/// whether the payload was lost. `rd`: the CQ read under way, if any.
#[inline(always)]
fn deliver_msg<S: Config, R: Pull>(
    rx: &RxCtx<S>,
    tagged: bool,
    tag: u64,
    data: Option<u64>,
    src_name: &[u8],
    payload: Payload<'_, R>,
    rd: Option<&mut Reader<'_, S>>,
) -> Option<bool> {
    rx.state.with(|st| {
        if let Some(cq) = &st.bind.cq {
            if !cq.has_room() {
                return None;
            }
        }
        let src = if st.caps.intersects(Caps::SOURCE | Caps::DIRECTED_RECV) {
            st.av
                .as_ref()
                .map_or(FiAddr::NOTAVAIL, |av| av.reverse(src_name))
        } else {
            FiAddr::NOTAVAIL
        };
        let RxState {
            bind,
            cntr_recv,
            tagged: tq,
            msg,
            min_multi_recv,
            pool,
            unresolved,
            av: st_av,
            caps,
            ..
        } = st;
        // Only endpoints that report or match sources name their senders.
        let st_av = st_av
            .as_ref()
            .filter(|_| caps.intersects(Caps::SOURCE | Caps::DIRECTED_RECV));
        let m: &mut Matcher<PostedRecv, Unexp> = if tagged { tq } else { msg };
        let mtag = if tagged { tag } else { 0 };
        let delivered = m.deliver(mtag, src, |p| {
            complete_recv(
                bind,
                cntr_recv,
                p,
                payload,
                tag,
                data,
                src,
                tagged,
                *min_multi_recv,
                rd,
            )
        });
        if let Some(failed) = delivered {
            return Some(failed);
        }
        if m.unexpected_len() >= MAX_UNEXPECTED || !pool.has_room(payload.len()) {
            return None;
        }
        let mut buf = pool.take();
        let failed = !stash(&mut buf, payload, S::Provider::MAX_MSG_SIZE);
        pool.hold(&buf);
        // A sender not in the AV yet: kept by name, looked up again by later receives.
        let src_name = (src == FiAddr::NOTAVAIL && st_av.is_some()).then(|| {
            *unresolved += 1;
            Box::<[u8]>::from(src_name)
        });
        m.push_unexpected(
            mtag,
            src,
            Unexp {
                buf,
                data,
                tag,
                src,
                src_name,
                failed,
            },
        );
        Some(failed)
    })
}

/// Copies an unexpected message's payload into `buf` (a pooled buffer, so no
/// allocation in steady state). Returns whether every byte arrived.
#[inline]
fn stash<R: Pull>(buf: &mut Vec<u8>, payload: Payload<'_, R>, max: usize) -> bool {
    match payload {
        Payload::Inline(s) => {
            buf.clear();
            s.append_to(buf);
            true
        }
        // `len` asked inline: unreachable for `NoPull`, so the arm compiles away.
        Payload::Remote(r) => stash_remote(buf, r, r.len(), max),
    }
}

/// The remote arm of [`stash`]: copied now, at arrival, so the sender can release it.
#[cold]
#[inline(never)]
fn stash_remote<R: Pull>(buf: &mut Vec<u8>, r: &R, len: usize, max: usize) -> bool {
    if len > max {
        // A peer announcing more than any message may hold gets no allocation.
        buf.clear();
        return false;
    }
    // Without a `clear` first, only bytes past the recycled buffer's old length are
    // zeroed; the pull overwrites all of them.
    buf.resize(len, 0);
    Payload::Remote(r).copy_to(0, buf).is_ok()
}

/// The payload of an unexpected message that did not arrive whole: as long as it was
/// announced, and unreadable.
struct Lost(usize);

impl Pull for Lost {
    fn len(&self) -> usize {
        self.0
    }
    fn read(&self, _off: usize, _dst: &mut [u8]) -> Result<()> {
        Err(Error::Io)
    }
}

/// [`complete_recv`] of a buffered unexpected message. Returns whether the receive is
/// finished.
fn complete_unexpected<S: Config>(
    bind: &Bindings<S>,
    cntr: &Option<Arc<CntrInner<S>>>,
    p: &mut PostedRecv,
    u: &Unexp,
    tagged: bool,
    min_multi: usize,
) -> bool {
    let (done, _) = if u.failed {
        let lost = Lost(u.buf.len());
        let payload = Payload::Remote(&lost);
        complete_recv(
            bind, cntr, p, payload, u.tag, u.data, u.src, tagged, min_multi, None,
        )
    } else {
        let payload = Payload::<NoPull>::Inline(u.buf[..].into());
        complete_recv(
            bind, cntr, p, payload, u.tag, u.data, u.src, tagged, min_multi, None,
        )
    };
    done
}

/// Copies an arrival into a posted receive and reports it: a success, `FI_ETRUNC` when
/// the buffer is too short, `FI_EIO` when the payload does not arrive. Returns whether
/// the receive is finished (a multi-receive buffer stays posted while it has room) and
/// whether the payload was lost.
///
/// A lost payload reports (and, in a multi-receive buffer, consumes) the bytes it
/// would have occupied: they may hold partial data.
#[allow(clippy::too_many_arguments)]
#[inline]
fn complete_recv<S: Config, R: Pull>(
    bind: &Bindings<S>,
    cntr: &Option<Arc<CntrInner<S>>>,
    p: &mut PostedRecv,
    payload: Payload<'_, R>,
    tag: u64,
    data: Option<u64>,
    src: FiAddr,
    tagged: bool,
    min_multi: usize,
    rd: Option<&mut Reader<'_, S>>,
) -> (bool, bool) {
    // By reference: a single-shot receive copies no `RawIov`.
    let advanced;
    let dst = if p.consumed > 0 {
        advanced = p.iov.advance(p.consumed);
        &advanced
    } else {
        &p.iov
    };
    // SAFETY: `dst` comes from a receive posted through an `unsafe` call whose contract
    // keeps the buffers valid and unaliased until the receive completes.
    let (n, copied) = unsafe { dst.fill_payload(payload) };
    let len = payload.len();
    let mut flags = CqFlags::RECV
        | if tagged {
            CqFlags::TAGGED
        } else {
            CqFlags::MSG
        };
    if data.is_some() {
        flags |= CqFlags::REMOTE_CQ_DATA;
    }
    if !p.multi && n == len && copied.is_ok() {
        // The lane: a single-shot receive that took the whole message.
        if let Some(c) = cntr {
            c.inc();
        }
        if p.want {
            if let Some(cq) = &bind.cq {
                cq.complete_to(
                    &Completion {
                        context: p.ctx,
                        flags,
                        len: n,
                        buf: dst.base(),
                        data: data.unwrap_or(0),
                        tag,
                        src,
                    },
                    rd,
                );
            }
        }
        return (true, false);
    }
    let base = dst.base();
    finish_recv(
        bind, cntr, p, base, n, copied, len, flags, tag, data, src, min_multi,
    )
}

/// The rest of [`complete_recv`] once `n` of the `len` payload bytes were copied to
/// `base` (`copied` says whether the copy failed): multi-receive buffers, truncation
/// and lost payloads.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn finish_recv<S: Config>(
    bind: &Bindings<S>,
    cntr: &Option<Arc<CntrInner<S>>>,
    p: &mut PostedRecv,
    base: usize,
    n: usize,
    copied: Result<()>,
    len: usize,
    mut flags: CqFlags,
    tag: u64,
    data: Option<u64>,
    src: FiAddr,
    min_multi: usize,
) -> (bool, bool) {
    p.consumed += n;
    let failed = copied.is_err();
    let truncated = n < len;
    let finished = truncated || !p.multi || p.iov.len() - p.consumed < min_multi;
    if finished && p.multi {
        flags |= CqFlags::MULTI_RECV;
    }
    let c = Completion {
        context: p.ctx,
        flags,
        len: n,
        buf: base,
        data: data.unwrap_or(0),
        tag,
        src,
    };
    // Counters first: whoever sees the CQ entry also sees the count (with auto progress
    // the application reads both while the progress thread writes them).
    if failed || truncated {
        // A lost payload outranks a short buffer: the bytes are not there to truncate.
        let (err, olen) = if failed {
            (Error::Io, 0)
        } else {
            (Error::Trunc, len - n)
        };
        if let Some(c) = cntr {
            c.inc_err();
        }
        if let Some(cq) = &bind.cq {
            cq.complete_err(CqErrEntry {
                context: c.context,
                flags,
                len: n,
                buf: c.buf,
                data: c.data,
                tag,
                olen,
                err,
                prov_errno: err.code(),
                src,
            });
        }
    } else {
        if let Some(c) = cntr {
            c.inc();
        }
        if p.want {
            if let Some(cq) = &bind.cq {
                cq.complete(&c);
            }
        }
    }
    (finished, failed)
}

/// Looks up again the senders of unexpected messages that arrived before their sender
/// was in the AV, and gives those now inserted their address, for matching and for
/// `FI_SOURCE`; counts those still unknown.
#[cold]
#[inline(never)]
fn resolve_sources<S: Config>(st: &mut RxState<S>) {
    let Some(av) = st.av.as_ref() else {
        st.unresolved = 0;
        return;
    };
    let mut left = 0;
    let mut resolve = |u: &mut Unexp| {
        let a = av.reverse(u.src_name.as_deref()?);
        if a == FiAddr::NOTAVAIL {
            left += 1;
            return None;
        }
        u.src = a;
        u.src_name = None;
        Some(a)
    };
    st.tagged.resolve_unexpected(&mut resolve);
    st.msg.resolve_unexpected(&mut resolve);
    st.unresolved = left;
}

/// `FI_PEEK`, `FI_CLAIM` and `FI_DISCARD` on tagged receives.
#[cold]
#[inline(never)]
fn peek_claim<S: Config>(st: &mut RxState<S>, r: RxReq, src: FiAddr, flags: OpFlags) -> Result<()> {
    if !r.tagged {
        return Err(Error::BadFlags);
    }
    let report = |st: &RxState<S>, u: &Unexp, len: usize| {
        if let Some(cq) = &st.bind.cq {
            let mut f = CqFlags::RECV | CqFlags::TAGGED;
            if u.data.is_some() {
                f |= CqFlags::REMOTE_CQ_DATA;
            }
            cq.complete(&Completion {
                context: r.ctx,
                flags: f,
                len,
                buf: 0,
                data: u.data.unwrap_or(0),
                tag: u.tag,
                src: u.src,
            });
        }
    };
    if flags.contains(OpFlags::PEEK) {
        let Some(uid) = st.tagged.match_unexpected(r.tag, r.ignore, src) else {
            if let Some(cq) = &st.bind.cq {
                let mut e = CqErrEntry::new(r.ctx, Error::NoMsg);
                e.flags = CqFlags::RECV | CqFlags::TAGGED;
                e.tag = r.tag;
                cq.complete_err(e);
            }
            return Ok(());
        };
        if flags.contains(OpFlags::CLAIM) || flags.contains(OpFlags::DISCARD) {
            let Some(u) = st.tagged.remove_unexpected(uid) else {
                return Err(Error::NoMsg);
            };
            report(st, &u, u.buf.len());
            if flags.contains(OpFlags::CLAIM) {
                st.claimed.push((r.ctx, u));
            } else {
                st.pool.recycle(u.buf);
            }
        } else if let Some(u) = st.tagged.unexpected(uid) {
            report(st, u, u.buf.len());
        }
        return Ok(());
    }
    // FI_CLAIM without FI_PEEK: receive (or discard) the message claimed with this context.
    let pos = st
        .claimed
        .iter()
        .position(|(c, _)| *c == r.ctx)
        .ok_or(Error::NoMsg)?;
    let (_, u) = st.claimed.remove(pos);
    if flags.contains(OpFlags::DISCARD) {
        report(st, &u, 0);
        st.pool.recycle(u.buf);
        return Ok(());
    }
    let mut p = PostedRecv {
        iov: r.iov,
        ctx: r.ctx,
        multi: false,
        consumed: 0,
        want: true,
    };
    let RxState {
        bind,
        cntr_recv,
        min_multi_recv,
        pool,
        ..
    } = st;
    complete_unexpected(bind, cntr_recv, &mut p, &u, true, *min_multi_recv);
    pool.recycle(u.buf);
    Ok(())
}
