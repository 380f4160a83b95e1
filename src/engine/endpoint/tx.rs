//! The transmit data path: checks, completions, and responses to pending operations.
#![allow(unsafe_code)] // only through `mem`, whose contracts each use states

use std::sync::atomic::Ordering;

use crate::atomic::{AtomicClass, AtomicOp, Datatype};
use crate::config::Config;
use crate::cq_format::Completion;
use crate::engine::cq::CqErrEntry;
use crate::engine::cq::Reader;
use crate::error::{Error, Result};
use crate::flags::{Caps, CqFlags, OpFlags};
use crate::limits::IOV_LIMIT;
use crate::lock::Lock;
use crate::mem::RawIov;
use crate::provider::wire::{
    Eager, Header, Op, Response, HDR_ACK, HDR_COMPARE, HDR_FETCH, HDR_REMOTE_CQ_DATA,
};
use crate::provider::{
    Direct, DirectAccess, DirectOp, DirectReq, HeldBack, Payload, Pull, SharedBytes, Transport,
};
use crate::types::{Context, FiAddr};

use super::owned::{completion_kind, CntrKind, OwnedTx, RmaIov, TxReq};
use super::state::{Pending, Sent, TxState};
use super::{DirectOf, EpInner, HeldBackOf, TransportOf};

impl<S: Config> EpInner<S> {
    /// Posts a transmit operation on transmit context `txi`.
    #[inline]
    pub(crate) fn post_tx(&self, txi: usize, r: &TxReq<'_>, flags: OpFlags) -> Result<()> {
        self.post_tx_sized::<false>(txi, r, flags)
    }

    /// [`Self::post_tx`]; with `FITS` the caller has proven at compile time that the
    /// payload fits the provider's inject size (and so its message size), and the
    /// length tests are compiled out.
    #[inline]
    pub(crate) fn post_tx_sized<const FITS: bool>(
        &self,
        txi: usize,
        r: &TxReq<'_>,
        flags: OpFlags,
    ) -> Result<()> {
        let tx = self.tx.get(txi).ok_or(Error::Inval)?;
        tx.state.with(|st| {
            if !st.enabled {
                return Err(Error::OpBadState);
            }
            let need = match r.op {
                Op::Msg => Caps::MSG,
                Op::Tagged => Caps::TAGGED,
                Op::Write | Op::ReadReq => Caps::RMA,
                Op::Atomic => Caps::ATOMIC,
                _ => return Err(Error::Inval),
            };
            // Atomics with remote CQ data: see `post_amo`.
            if !st.caps.contains(need)
                || (r.op == Op::Atomic && flags.contains(OpFlags::REMOTE_CQ_DATA))
            {
                return Err(Error::OpNotSupp);
            }
            if r.iov.len() > IOV_LIMIT {
                return Err(Error::Inval);
            }
            let len = payload_len(r);
            // A read carries no payload: its size is the remote range's.
            if !FITS
                && (len > st.max_msg_size
                    || (r.op == Op::ReadReq && r.rma.len > st.max_msg_size)
                    || (flags.contains(OpFlags::INJECT) && len > st.inject_size))
            {
                return Err(Error::MsgSize);
            }
            if !st.fenced.is_empty()
                || (flags.contains(OpFlags::FENCE) && st.pending.in_flight() > 0)
            {
                if st.fenced.len() >= st.pending.capacity() {
                    return Err(Error::Again);
                }
                st.fenced.push_back(OwnedTx::from_req(r, flags));
                return Ok(());
            }
            self.transmit(st, txi, r, len, flags)
        })
    }

    /// A message of one buffer `buf` (`op` [`Op::Msg`] or [`Op::Tagged`], `tag` 0 for
    /// untagged ones): `fi_send`, `fi_tsend`, their `*data` forms (`data`) and, with
    /// `INJECT` true and `flags` holding [`OpFlags::INJECT_CALL`], `fi_inject`,
    /// `fi_tinject` and theirs. `FITS` as in [`Self::post_tx_sized`].
    ///
    /// A message that completes when sent (no `FI_FENCE`, no `FI_DELIVERY_COMPLETE`),
    /// on a context with nothing queued behind a fence, goes straight to
    /// [`Transport::send_eager`] without the generic request and its per-operation
    /// tests ([`Self::eager_direct`]); everything else is [`Self::post_tx_sized`] of the
    /// same request.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn post_eager<const INJECT: bool, const FITS: bool>(
        &self,
        txi: usize,
        op: Op,
        buf: &[u8],
        dest: FiAddr,
        tag: u64,
        data: Option<u64>,
        ctx: Context,
        flags: OpFlags,
    ) -> Result<()> {
        if !flags.intersects(OpFlags::FENCE.union(OpFlags::DELIVERY_COMPLETE)) {
            if let Some(res) =
                self.eager_direct::<INJECT, FITS>(txi, op, buf, dest, tag, data, ctx, flags)
            {
                return res;
            }
        }
        self.post_eager_generic::<FITS>(txi, op, buf, dest, tag, data, ctx, flags)
    }

    /// The generic path of [`Self::post_eager`], out of line so that the direct one
    /// keeps a small frame.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn post_eager_generic<const FITS: bool>(
        &self,
        txi: usize,
        op: Op,
        buf: &[u8],
        dest: FiAddr,
        tag: u64,
        data: Option<u64>,
        ctx: Context,
        flags: OpFlags,
    ) -> Result<()> {
        let b = [buf];
        let r = TxReq {
            op,
            iov: &b,
            compare: &[],
            result: RawIov::EMPTY,
            dest,
            tag,
            data,
            rma: RmaIov::default(),
            atomic: (0, 0, 0),
            ctx,
        };
        self.post_tx_sized::<FITS>(txi, &r, flags)
    }

    /// The direct attempt of [`Self::post_eager`] (whose caller ruled out `FI_FENCE`
    /// and `FI_DELIVERY_COMPLETE`): `None` when a test of the generic prologue
    /// ([`Self::post_tx_sized`], [`Self::transmit_eager`]) would not pass straight
    /// through (an unknown, disabled or fenced context, a missing capability or
    /// address vector, a length over the limits, a full CQ), so that nothing was done
    /// and the generic path answers with its error or queues the message. Otherwise
    /// the message is sent, or refused by the address vector or the transport exactly
    /// as the generic path would be.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn eager_direct<const INJECT: bool, const FITS: bool>(
        &self,
        txi: usize,
        op: Op,
        buf: &[u8],
        dest: FiAddr,
        tag: u64,
        data: Option<u64>,
        ctx: Context,
        flags: OpFlags,
    ) -> Option<Result<()>> {
        let tx = self.tx.get(txi)?;
        // This closure and the two nested in it are forced inline: left to itself, the
        // compiler made each a function of its own in a two-process `pingpong`, and
        // their calls, frames and spills were about 100 of the 1001 instructions of an
        // 8-byte round trip (callgrind).
        tx.state.with(
            #[inline(always)]
            |st| {
                let len = buf.len();
                // `op` is a constant of every caller: one capability test remains.
                let (need, cflags) = if op == Op::Tagged {
                    (Caps::TAGGED, CqFlags::SEND | CqFlags::TAGGED)
                } else {
                    (Caps::MSG, CqFlags::SEND | CqFlags::MSG)
                };
                let want = admit::<S, INJECT, FITS>(st, need, len, flags)?;
                let av = st.av.as_ref()?;
                let sent = av.with_peer(
                    dest,
                    #[inline(always)]
                    |peer, rx| {
                        let m = Eager {
                            op,
                            rx_idx: rx as u16,
                            tag,
                            data,
                            len,
                        };
                        self.sender.with(
                            #[inline(always)]
                            |tx| self.transport.send_eager(tx, peer, &m, &[buf]),
                        )
                    },
                );
                Some(match sent {
                    Ok(()) => {
                        self.sent(st, CntrKind::Send, want, ctx, cflags, len);
                        Ok(())
                    }
                    Err(e) => Err(e),
                })
            },
        )
    }

    /// `fi_write` (`INJECT` false) or `fi_inject_write` (`INJECT` true, `flags` holding
    /// [`OpFlags::INJECT_CALL`]) of one buffer `buf` to `rma` at `dest`.
    ///
    /// On a transport with a direct path, a write that nothing orders behind anything
    /// (no `FI_FENCE`, no `FI_DELIVERY_COMPLETE`, nothing queued or in flight on the
    /// context) goes straight to [`DirectAccess::direct_write`], without the generic
    /// request and its per-operation tests; everything else, and every write on other
    /// transports, is [`Self::post_tx`] of the same request.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn post_write<const INJECT: bool>(
        &self,
        txi: usize,
        buf: &[u8],
        dest: FiAddr,
        rma: RmaIov,
        ctx: Context,
        flags: OpFlags,
    ) -> Result<()> {
        // Compile-time test first: loopback keeps exactly the generic path.
        if <DirectOf<S> as DirectAccess<TransportOf<S>>>::ENABLED
            && !flags.intersects(OpFlags::FENCE.union(OpFlags::DELIVERY_COMPLETE))
        {
            if let Some(res) = self.write_direct::<INJECT>(txi, buf, dest, rma, ctx, flags) {
                return res;
            }
        }
        let b = [buf];
        self.post_tx(txi, &write_req(&b, dest, rma, ctx), flags)
    }

    /// The direct attempt of [`Self::post_write`]: `None` when a test of the generic
    /// prologue ([`Self::post_tx_sized`]) would not pass straight through (a disabled
    /// or fenced context, an operation in flight, a length over the limits, a full
    /// CQ), so that nothing was done and the generic path answers. Otherwise the write
    /// is done: performed at the initiator, failed by the target's checks (an error
    /// entry), or sent as a packet when the transport declines it.
    #[inline]
    fn write_direct<const INJECT: bool>(
        &self,
        txi: usize,
        buf: &[u8],
        dest: FiAddr,
        rma: RmaIov,
        ctx: Context,
        flags: OpFlags,
    ) -> Option<Result<()>> {
        let tx = self.tx.get(txi)?;
        tx.state.with(|st| {
            let len = buf.len();
            // A write may overtake nothing in flight on the context.
            if st.pending.in_flight() > 0 {
                return None;
            }
            let want = admit::<S, INJECT, false>(st, Caps::RMA, len, flags)?;
            let outcome = match &st.av {
                None => Err(Error::NoAv),
                Some(av) => av.with_peer(dest, |peer, _| {
                    Ok(self.sender.with(|tx| {
                        DirectOf::<S>::direct_write(
                            &self.transport,
                            tx,
                            peer,
                            rma.addr,
                            rma.key,
                            buf,
                        )
                    }))
                }),
            };
            let (cflags, ck) = (CqFlags::RMA | CqFlags::WRITE, CntrKind::Write);
            Some(match outcome {
                Err(e) => Err(e),
                Ok(Direct::Done) => {
                    st.succeed(ck, want, ctx, cflags, len);
                    Ok(())
                }
                Ok(Direct::Failed(e)) => {
                    st.fail(ck, ctx, cflags, e, e.code());
                    Ok(())
                }
                Ok(Direct::Declined | Direct::Held) => {
                    self.write_packet(st, txi, buf, dest, rma, ctx, flags, want)
                }
            })
        })
    }

    /// A write [`DirectAccess::direct_write`] did not perform (`Declined`; or `Held`,
    /// which the contract rules out with nothing in flight, and which with nothing in
    /// flight needs no waiting either): sent as a packet.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn write_packet(
        &self,
        st: &mut TxState<S>,
        txi: usize,
        buf: &[u8],
        dest: FiAddr,
        rma: RmaIov,
        ctx: Context,
        flags: OpFlags,
        want: bool,
    ) -> Result<()> {
        let b = [buf];
        let r = write_req(&b, dest, rma, ctx);
        self.transmit_packet(st, txi, &r, buf.len(), flags, want)
    }

    /// The atomics of one target segment and one operand buffer, `BITS` choosing the
    /// kind by its header bits: 0 for `fi_atomic` / `fi_atomicmsg` /
    /// `fi_inject_atomic` (completed by the target's acknowledgement), [`HDR_FETCH`]
    /// for `fi_fetch_atomic` / `fi_fetch_atomicmsg`, [`HDR_COMPARE`] for
    /// `fi_compare_atomic` / `fi_compare_atomicmsg` (`compare` holds as many bytes as
    /// `operand`; empty for the others). `operand` is ignored for `FI_ATOMIC_READ`;
    /// `n` bytes of old values go to `result` (empty for the base kind), at `rma`
    /// (`rma.len` is `n`) of `dest`. The caller validated the operation as
    /// [`crate::atomic::is_valid`] and the sizes `fi_atomic(3)` requires (what the
    /// generic request is built after).
    ///
    /// An atomic that no fence orders goes straight to the transport's direct path and
    /// then to [`Transport::send`] of its packet ([`Self::amo_direct`]), without the
    /// generic request and its per-operation tests; everything else (a fence, a test
    /// of the generic prologue that would not pass straight through) is
    /// [`Self::post_tx`] of the same request.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn post_amo<const BITS: u8>(
        &self,
        txi: usize,
        operand: &[u8],
        compare: &[u8],
        result: RawIov,
        dt: Datatype,
        op: AtomicOp,
        dest: FiAddr,
        rma: RmaIov,
        data: Option<u64>,
        ctx: Context,
        flags: OpFlags,
    ) -> Result<()> {
        // The target has no completion for an atomic to carry remote CQ data in:
        // refused rather than dropped.
        if data.is_some() {
            return Err(Error::OpNotSupp);
        }
        let one = [operand];
        // `FI_ATOMIC_READ` sends no operand (as the generic request).
        let iov: &[&[u8]] = if op == AtomicOp::AtomicRead {
            &[]
        } else {
            &one
        };
        let f = Amo {
            iov,
            compare: if BITS == HDR_COMPARE { compare } else { &[] },
            result: &result,
            dt,
            op,
            dest,
            rma,
            data,
            ctx,
        };
        if !flags.contains(OpFlags::FENCE) {
            if let Some(res) = self.amo_direct::<BITS>(txi, &f, flags) {
                return res;
            }
        }
        self.post_amo_generic::<BITS>(txi, &f, flags)
    }

    /// The generic path of [`Self::post_amo`], out of line so that the direct one
    /// keeps a small frame.
    #[inline(never)]
    fn post_amo_generic<const BITS: u8>(
        &self,
        txi: usize,
        f: &Amo<'_>,
        flags: OpFlags,
    ) -> Result<()> {
        self.post_tx(txi, &f.req::<BITS>(), flags)
    }

    /// The direct attempt of [`Self::post_amo`] (whose caller ruled out `FI_FENCE`):
    /// `None` when a test of the generic prologue ([`Self::post_tx_sized`],
    /// [`Self::transmit`]) would not pass straight through (an unknown, disabled or
    /// fenced context, a missing capability or address vector, a length over the
    /// limits, a full CQ), so that nothing was done and the generic path answers.
    /// Otherwise exactly what [`Self::transmit_direct`] and then
    /// [`Self::transmit_packet`] do with the request: performed or failed at the
    /// initiator by the transport's direct path, held behind the operations in
    /// flight, or sent as a packet awaiting its response (an acknowledgement for the
    /// base kind, the old values for the others).
    #[inline(always)]
    fn amo_direct<const BITS: u8>(
        &self,
        txi: usize,
        f: &Amo<'_>,
        flags: OpFlags,
    ) -> Option<Result<()>> {
        let tx = self.tx.get(txi)?;
        tx.state.with(|st| {
            let len = payload_len_of(f.iov);
            let want = admit::<S, false, false>(st, Caps::ATOMIC, len, flags)?;
            let av = st.av.as_ref()?;
            // As `completion_kind` of the generic request.
            let (cflags, ck) = if BITS == 0 {
                (CqFlags::ATOMIC | CqFlags::WRITE, CntrKind::Write)
            } else {
                (CqFlags::ATOMIC | CqFlags::READ, CntrKind::Read)
            };
            // An operation performed now would overtake those waiting for responses.
            let hold = st.pending.in_flight() > 0;
            let pending = &mut st.pending;
            let outcome = av.with_peer(f.dest, |peer, rx| {
                if <DirectOf<S> as DirectAccess<TransportOf<S>>>::ENABLED {
                    let req = DirectReq {
                        op: DirectOp::Atomic {
                            class: if BITS == HDR_COMPARE {
                                AtomicClass::Compare
                            } else if BITS == HDR_FETCH {
                                AtomicClass::Fetch
                            } else {
                                AtomicClass::Base
                            },
                            op: f.op,
                            dt: f.dt,
                        },
                        addr: f.rma.addr,
                        key: f.rma.key,
                        len: f.rma.len,
                        payload: f.iov,
                        compare: f.compare,
                    };
                    let result = f.result;
                    let mut filled = 0usize;
                    let d = self.sender.with(|tx| {
                        DirectOf::<S>::direct(
                            &self.transport,
                            tx,
                            peer,
                            &req,
                            hold,
                            |b: SharedBytes<'_>| {
                                // SAFETY: as in `transmit_direct`: `result` was recorded by
                                // an `unsafe` fetch call whose contract keeps it valid and
                                // unaliased until completion, which is now; `fill` writes
                                // at most what is left of it after `filled` bytes.
                                filled += unsafe { result.fill_at(filled, b) };
                            },
                        )
                    });
                    match d {
                        Direct::Declined => {}
                        Direct::Held => return Ok(Performed::Held),
                        Direct::Done if filled == result.len() => return Ok(Performed::Done),
                        // A transport handing out the wrong amount of result data.
                        Direct::Done => return Ok(Performed::Failed(Error::Io)),
                        Direct::Failed(e) => return Ok(Performed::Failed(e)),
                    }
                }
                // Written in place: the result list is most of the entry.
                let (id, p) = pending.claim().ok_or(Error::Again)?;
                p.ctx = f.ctx;
                p.flags = cflags;
                p.len = len;
                p.result = *f.result;
                p.want = want;
                p.cntr = ck;
                let mut hdr = Header {
                    op: Op::Atomic as u8,
                    flags: BITS,
                    atomic_op: f.op.as_raw(),
                    datatype: f.dt.as_raw(),
                    rx_idx: rx as u16,
                    tx_idx: txi as u16,
                    aux: f.rma.len as u32,
                    req: id,
                    addr: f.rma.addr,
                    key: f.rma.key,
                    len: if BITS == HDR_COMPARE {
                        (len + f.compare.len()) as u64
                    } else {
                        len as u64
                    },
                    ..Header::default()
                };
                if let Some(d) = f.data {
                    hdr.flags |= HDR_REMOTE_CQ_DATA;
                    hdr.data = d;
                }
                // A compare atomic's packet carries its operands followed by its
                // compare values, as the generic path gathers them; built only for
                // that kind, the others send their operand list as it is.
                let both;
                let wire: &[&[u8]] = if BITS == HDR_COMPARE {
                    both = [f.iov.first().copied().unwrap_or_default(), f.compare];
                    &both
                } else {
                    f.iov
                };
                match self
                    .sender
                    .with(|tx| self.transport.send(tx, peer, &hdr, wire))
                {
                    Ok(()) => Ok(Performed::Sent),
                    Err(e) => {
                        pending.take(id);
                        Err(e)
                    }
                }
            });
            Some(match outcome {
                Ok(Performed::Sent) => Ok(()),
                Ok(Performed::Done) => {
                    st.succeed(ck, want, f.ctx, cflags, len);
                    Ok(())
                }
                Ok(Performed::Failed(e)) => {
                    st.fail(ck, f.ctx, cflags, e, e.code());
                    Ok(())
                }
                Ok(Performed::Held) => {
                    hold_amo::<S, BITS>(st, f, flags);
                    Ok(())
                }
                Err(e) => Err(e),
            })
        })
    }

    /// Sends a checked request carrying `len` payload bytes and completes it at once
    /// unless it waits for a response.
    #[inline]
    fn transmit(
        &self,
        st: &mut TxState<S>,
        txi: usize,
        r: &TxReq<'_>,
        len: usize,
        flags: OpFlags,
    ) -> Result<()> {
        let want = !flags.contains(OpFlags::INJECT_CALL)
            && (!st.bind.selective || flags.contains(OpFlags::COMPLETION));
        if matches!(r.op, Op::Msg | Op::Tagged) && !flags.contains(OpFlags::DELIVERY_COMPLETE) {
            return self.transmit_eager(st, r, want);
        }
        st.room_for(want)?;
        // Compile-time test: transports without a direct path (loopback) keep exactly
        // the packet path below.
        if <DirectOf<S> as DirectAccess<TransportOf<S>>>::ENABLED {
            if let Some(res) = self.transmit_direct(st, r, len, flags, want) {
                return res;
            }
        }
        self.transmit_packet(st, txi, r, len, flags, want)
    }

    /// The packet part of [`Self::transmit`]: sends checked request `r` (not an eager
    /// message, room for its completion checked) as a packet; completes it at once
    /// unless it waits for a response.
    #[inline]
    fn transmit_packet(
        &self,
        st: &mut TxState<S>,
        txi: usize,
        r: &TxReq<'_>,
        len: usize,
        flags: OpFlags,
        want: bool,
    ) -> Result<()> {
        let (cflags, ck) = completion_kind(r);
        let needs_resp =
            !matches!(r.op, Op::Msg | Op::Tagged) || flags.contains(OpFlags::DELIVERY_COMPLETE);
        let mut hdr = Header {
            op: r.op as u8,
            tx_idx: txi as u16,
            tag: r.tag,
            addr: r.rma.addr,
            key: r.rma.key,
            len: (len + r.compare.len()) as u64,
            atomic_op: r.atomic.0,
            datatype: r.atomic.1,
            flags: r.atomic.2,
            ..Header::default()
        };
        if let Some(d) = r.data {
            hdr.flags |= HDR_REMOTE_CQ_DATA;
            hdr.data = d;
        }
        match r.op {
            Op::ReadReq => hdr.len = r.rma.len as u64,
            Op::Atomic => hdr.aux = r.result.len().max(len) as u32,
            _ => {}
        }
        if needs_resp {
            let p = Pending {
                ctx: r.ctx,
                flags: cflags,
                len: if r.op == Op::ReadReq { r.rma.len } else { len },
                result: r.result,
                want,
                cntr: ck,
            };
            hdr.req = st.pending.insert(p).ok_or(Error::Again)?;
            if matches!(r.op, Op::Msg | Op::Tagged) {
                hdr.flags |= HDR_ACK;
            }
        }
        // Only compare atomics append a second buffer: everything else sends its gather
        // list as it is, without building a copy of it.
        let parts;
        let payload = if r.compare.is_empty() {
            r.iov
        } else {
            parts = gather(r);
            &parts.0[..parts.1]
        };
        let res = match &st.av {
            None => Err(Error::NoAv),
            Some(av) => av.with_peer(r.dest, |peer, rx| {
                hdr.rx_idx = rx as u16;
                self.sender
                    .with(|tx| self.transport.send(tx, peer, &hdr, payload))
            }),
        };
        if let Err(e) = res {
            if needs_resp {
                st.pending.take(hdr.req);
            }
            return Err(e);
        }
        if !needs_resp {
            self.sent(st, ck, want, r.ctx, cflags, len);
        }
        Ok(())
    }

    /// Reports a send that completes when sent: at once, unless the transport now
    /// holds bytes back (`HeldBack`), which may be this send's; then once it holds
    /// none (`release_sent`), after the sends held before it.
    #[inline(always)]
    fn sent(
        &self,
        st: &mut TxState<S>,
        ck: CntrKind,
        want: bool,
        ctx: Context,
        flags: CqFlags,
        len: usize,
    ) {
        if HeldBackOf::<S>::HOLDS_SENDS
            && (HeldBackOf::<S>::holds_sends(&self.transport) || !st.sent.is_empty())
        {
            self.hold_sent(
                st,
                Sent {
                    ck,
                    want,
                    ctx,
                    flags,
                    len,
                },
            );
        } else {
            st.succeed(ck, want, ctx, flags, len);
        }
    }

    #[cold]
    fn hold_sent(&self, st: &mut TxState<S>, s: Sent) {
        st.sent.push_back(s);
        self.held_sent.fetch_add(1, Ordering::Release);
    }

    /// Reports the held sends of every transmit context once the transport holds
    /// nothing back; with `force`, whatever it holds (`Err`: the held bytes were
    /// dropped, so the sends fail with it).
    #[cold]
    pub(crate) fn release_sent(&self, force: Option<Error>) {
        if force.is_none() && HeldBackOf::<S>::holds_sends(&self.transport) {
            return;
        }
        for t in &self.tx {
            t.state.with(|st| {
                while let Some(s) = st.sent.pop_front() {
                    self.held_sent.fetch_sub(1, Ordering::Release);
                    match force {
                        Some(e) => st.fail(s.ck, s.ctx, s.flags, e, 0),
                        None => st.succeed(s.ck, s.want, s.ctx, s.flags, s.len),
                    }
                }
            });
        }
    }

    /// [`Self::transmit`] of a message that completes when sent (no delivery-complete
    /// acknowledgement): the transport gets only the fields a message has
    /// ([`Transport::send_eager`]), no pending entry is taken, and the completion
    /// follows the send at once.
    #[inline]
    fn transmit_eager(&self, st: &mut TxState<S>, r: &TxReq<'_>, want: bool) -> Result<()> {
        st.room_for(want)?;
        let len = payload_len(r);
        match &st.av {
            None => return Err(Error::NoAv),
            Some(av) => av.with_peer(r.dest, |peer, rx| {
                let m = Eager {
                    op: r.op,
                    rx_idx: rx as u16,
                    tag: r.tag,
                    data: r.data,
                    len,
                };
                self.sender
                    .with(|tx| self.transport.send_eager(tx, peer, &m, r.iov))
            })?,
        }
        let (flags, ck) = completion_kind(r);
        self.sent(st, ck, want, r.ctx, flags, len);
        Ok(())
    }

    /// Offers an RMA or atomic request carrying `len` payload bytes to the transport's
    /// direct path ([`DirectAccess::direct`]), which performs it at the initiator; then it
    /// completes at once, like a transmit-complete send, and no pending entry is needed.
    /// `None`: not offered (a message, a write with remote CQ data) or declined: send it
    /// as a packet.
    #[inline]
    fn transmit_direct(
        &self,
        st: &mut TxState<S>,
        r: &TxReq<'_>,
        len: usize,
        flags: OpFlags,
        want: bool,
    ) -> Option<Result<()>> {
        // One test of the operation decides everything that depends on it (the
        // completion's kind folds into each arm).
        let (op, target_len, done_len, (cflags, ck)) = match r.op {
            // Remote CQ data needs the target's completion queue: the packet path.
            Op::Write if r.data.is_none() => (DirectOp::Write, len, len, completion_kind(r)),
            Op::ReadReq => (DirectOp::Read, r.rma.len, r.rma.len, completion_kind(r)),
            // The target ignores the data of atomics.
            Op::Atomic => (direct_atomic(r)?, r.rma.len, len, completion_kind(r)),
            _ => return None,
        };
        let req = DirectReq {
            op,
            addr: r.rma.addr,
            key: r.rma.key,
            len: target_len,
            payload: r.iov,
            compare: r.compare,
        };
        // An operation performed now would overtake those still waiting for responses
        // (the target applies them later), breaking the provider's ordering.
        let hold = st.pending.in_flight() > 0;
        let result = &r.result;
        let mut filled = 0usize;
        let outcome = match &st.av {
            None => Err(Error::NoAv),
            Some(av) => av.with_peer(r.dest, |peer, _| {
                Ok(self.sender.with(|tx| {
                    DirectOf::<S>::direct(
                        &self.transport,
                        tx,
                        peer,
                        &req,
                        hold,
                        |b: SharedBytes<'_>| {
                            // SAFETY: `result` was recorded by an `unsafe` read/fetch
                            // call whose contract keeps the buffers valid and unaliased
                            // until completion, which is now; `fill` writes at most
                            // what is left of them after `filled` bytes.
                            filled += unsafe { result.fill_at(filled, b) };
                        },
                    )
                }))
            }),
        };
        let err = match outcome {
            Err(e) => return Some(Err(e)),
            Ok(Direct::Declined) => return None,
            Ok(Direct::Held) => {
                // Queued in front (the queue is empty when posting, and when flushing
                // this operation was just taken from its front), fenced so that it
                // waits until nothing is in flight.
                st.fenced
                    .push_front(OwnedTx::from_req(r, flags | OpFlags::FENCE));
                return Some(Ok(()));
            }
            Ok(Direct::Done) if filled == result.len() => None,
            // A transport handing out the wrong amount of result data.
            Ok(Direct::Done) => Some(Error::Io),
            Ok(Direct::Failed(e)) => Some(e),
        };
        match err {
            None => st.succeed(ck, want, r.ctx, cflags, done_len),
            Some(e) => st.fail(ck, r.ctx, cflags, e, e.code()),
        }
        Some(Ok(()))
    }

    /// Handles response `r` (an `Ack`, `ReadResp` or `AtomicResp`) to one of our
    /// pending operations, with its `payload`. Result data (a read's, a fetching
    /// atomic's) is copied into the result buffers, straight from the target when it is
    /// remote; a response of the wrong kind or size, or one whose data does not arrive,
    /// completes the operation with `FI_EIO`. Unknown or stale ids are ignored. `rd`:
    /// the CQ read under way, if any, which may take a success entry directly.
    #[inline]
    pub(crate) fn on_response<R: Pull>(
        &self,
        r: &Response,
        payload: Payload<'_, R>,
        rd: Option<&mut Reader<'_, S>>,
    ) {
        let Some(tx) = self.tx.get(r.tx_idx as usize) else {
            return;
        };
        tx.state.with(|st| {
            // Unknown or stale ids (a confused or malicious peer) are ignored.
            let Some(i) = st.pending.release(r.req) else {
                return;
            };
            // Read in place: the slot is free but not reused before this returns.
            let p = st.pending.get(i);
            let mut status = r.status;
            if status == 0 {
                let expect = match (
                    p.flags.contains(CqFlags::READ),
                    p.flags.contains(CqFlags::RMA),
                ) {
                    (true, true) => Op::ReadResp,
                    (true, false) => Op::AtomicResp,
                    (false, _) => Op::Ack,
                };
                if r.op != expect {
                    // A success of another kind carries no (or the wrong) result.
                    status = Error::Io.code() as u32;
                } else if expect != Op::Ack {
                    if payload.len() != p.result.len() {
                        status = Error::Io.code() as u32;
                    } else {
                        // SAFETY: `p.result` was recorded by an `unsafe` read/fetch call
                        // whose contract keeps the buffers valid and unaliased until
                        // completion.
                        let (_, copied) = unsafe { p.result.fill_payload(payload) };
                        if copied.is_err() {
                            status = Error::Io.code() as u32;
                        }
                    }
                }
            }
            if status == 0 {
                st.succeed_to(p.cntr, p.want, p.ctx, p.flags, p.len, rd);
            } else {
                let err = Error::from_code(status as i32);
                st.fail(p.cntr, p.ctx, p.flags, err, status as i32);
            }
            if !st.fenced.is_empty() {
                self.flush_fenced(st, r.tx_idx as usize);
            }
        });
    }

    /// Sends operations held back by a fence once nothing before them is in flight.
    pub(crate) fn flush_fenced(&self, st: &mut TxState<S>, txi: usize) {
        while let Some(front) = st.fenced.front() {
            if front.flags.contains(OpFlags::FENCE) && st.pending.in_flight() > 0 {
                return;
            }
            let Some(o) = st.fenced.pop_front() else {
                return;
            };
            let iov = [&o.payload[..]];
            let req = o.req(&iov);
            match self.transmit(st, txi, &req, payload_len(&req), o.flags) {
                Ok(()) => {}
                Err(Error::Again) => {
                    st.fenced.push_front(o);
                    return;
                }
                Err(e) => {
                    let (f, ck) = completion_kind(&req);
                    st.fail(ck, o.ctx, f, e, 0);
                }
            }
        }
    }
}

impl<S: Config> TxState<S> {
    /// `Err(Again)` when a wanted completion would find the bound CQ full (resource
    /// management); checked before anything is sent.
    #[inline(always)]
    fn room_for(&self, want: bool) -> Result<()> {
        match &self.bind.cq {
            Some(cq) if want && !cq.has_room() => Err(Error::Again),
            _ => Ok(()),
        }
    }

    /// Reports an operation that finished successfully: its counter first (an entry
    /// implies the count, as everywhere), then its CQ entry when one is wanted.
    #[inline(always)]
    fn succeed(&self, ck: CntrKind, want: bool, context: Context, flags: CqFlags, len: usize) {
        self.succeed_to(ck, want, context, flags, len, None);
    }

    /// [`Self::succeed`] during the CQ read `rd`, if any: the entry may go straight into
    /// the reader's entries ([`CqInner::complete_to`](crate::engine::cq::CqInner::complete_to)).
    #[inline(always)]
    pub(super) fn succeed_to(
        &self,
        ck: CntrKind,
        want: bool,
        context: Context,
        flags: CqFlags,
        len: usize,
        rd: Option<&mut Reader<'_, S>>,
    ) {
        if let Some(c) = self.cntr(ck) {
            c.inc();
        }
        if want {
            if let Some(cq) = &self.bind.cq {
                cq.complete_to(
                    &Completion {
                        context,
                        flags,
                        len,
                        ..Completion::default()
                    },
                    rd,
                );
            }
        }
    }

    /// Reports an operation that failed with `err`: its counter's error count, then an
    /// error entry (always written, whatever the completion flags).
    pub(super) fn fail(
        &self,
        ck: CntrKind,
        context: Context,
        flags: CqFlags,
        err: Error,
        prov_errno: i32,
    ) {
        if let Some(c) = self.cntr(ck) {
            c.inc_err();
        }
        if let Some(cq) = &self.bind.cq {
            let mut e = CqErrEntry::new(context, err);
            e.flags = flags;
            e.prov_errno = prov_errno;
            cq.complete_err(e);
        }
    }

    #[inline]
    pub(crate) fn cntr(
        &self,
        k: CntrKind,
    ) -> Option<&std::sync::Arc<crate::engine::cntr::CntrInner<S>>> {
        match k {
            CntrKind::Send => self.cntr_send.as_ref(),
            CntrKind::Read => self.cntr_read.as_ref(),
            CntrKind::Write => self.cntr_write.as_ref(),
        }
    }
}

/// An atomic of [`EpInner::post_amo`]: the fields of its request that are not
/// constant.
struct Amo<'a> {
    /// The operand list (empty for `FI_ATOMIC_READ`).
    iov: &'a [&'a [u8]],
    /// The compare values (empty unless a compare atomic).
    compare: &'a [u8],
    // By reference: copying the list is most of what building this costs.
    result: &'a RawIov,
    dt: Datatype,
    op: AtomicOp,
    dest: FiAddr,
    rma: RmaIov,
    data: Option<u64>,
    ctx: Context,
}

impl<'a> Amo<'a> {
    /// The generic request of the same operation, of kind `BITS` (as
    /// [`EpInner::post_amo`]).
    #[inline]
    fn req<const BITS: u8>(&self) -> TxReq<'a> {
        TxReq {
            op: Op::Atomic,
            iov: self.iov,
            compare: self.compare,
            result: *self.result,
            dest: self.dest,
            tag: 0,
            data: self.data,
            rma: self.rma,
            atomic: (self.op.as_raw(), self.dt.as_raw(), BITS),
            ctx: self.ctx,
        }
    }
}

/// What [`EpInner::amo_direct`] did with an atomic the address vector resolved.
enum Performed {
    /// Sent as a packet; its response completes it.
    Sent,
    /// Performed at the initiator.
    Done,
    /// Refused by the target's checks at the initiator.
    Failed(Error),
    /// To be performed at the initiator once the operations in flight completed.
    Held,
}

/// An atomic the transport's direct path holds ([`Direct::Held`]): queued in front,
/// fenced, as [`EpInner::transmit_direct`] queues it.
#[cold]
#[inline(never)]
fn hold_amo<S: Config, const BITS: u8>(st: &mut TxState<S>, f: &Amo<'_>, flags: OpFlags) {
    st.fenced
        .push_front(OwnedTx::from_req(&f.req::<BITS>(), flags | OpFlags::FENCE));
}

/// The gather list followed by the compare values of a compare atomic, and how many
/// buffers that is (`r.iov` holds at most `IOV_LIMIT` buffers: checked when posting).
#[cold]
fn gather<'a>(r: &TxReq<'a>) -> ([&'a [u8]; IOV_LIMIT + 1], usize) {
    let mut parts: [&[u8]; IOV_LIMIT + 1] = [&[]; IOV_LIMIT + 1];
    let n = r.iov.len().min(IOV_LIMIT);
    parts[..n].copy_from_slice(&r.iov[..n]);
    parts[n] = r.compare;
    (parts, n + 1)
}

/// The direct form of atomic request `r` (whose operation and datatype were checked
/// when posting).
#[inline]
fn direct_atomic(r: &TxReq<'_>) -> Option<DirectOp> {
    Some(DirectOp::Atomic {
        class: if r.atomic.2 & HDR_COMPARE != 0 {
            AtomicClass::Compare
        } else if r.atomic.2 & HDR_FETCH != 0 {
            AtomicClass::Fetch
        } else {
            AtomicClass::Base
        },
        op: AtomicOp::from_raw(r.atomic.0)?,
        dt: Datatype::from_raw(r.atomic.1)?,
    })
}

/// The request of an RMA write of the one buffer in `b`.
#[inline]
fn write_req<'a>(b: &'a [&'a [u8]; 1], dest: FiAddr, rma: RmaIov, ctx: Context) -> TxReq<'a> {
    TxReq {
        op: Op::Write,
        iov: b,
        compare: &[],
        result: RawIov::EMPTY,
        dest,
        tag: 0,
        data: None,
        rma,
        atomic: (0, 0, 0),
        ctx,
    }
}

#[inline]
fn payload_len(r: &TxReq<'_>) -> usize {
    payload_len_of(r.iov)
}

#[inline]
fn payload_len_of(iov: &[&[u8]]) -> usize {
    match iov {
        [] => 0,
        [one] => one.len(),
        many => many.iter().map(|s| s.len()).sum(),
    }
}

/// The tests of the generic prologue ([`EpInner::post_tx_sized`]) that the direct
/// entries ([`EpInner::post_eager`], [`EpInner::post_write`]) make before doing
/// anything: `Some(want)` (whether the operation writes a completion entry) when a
/// `len`-byte operation needing `need` on an enabled, unfenced context with room in
/// its CQ would pass them straight through; `None` hands it to the generic path.
/// `INJECT` folds the inject call's size and completion tests at compile time, and
/// `FITS` (a length proven at compile time) the size tests; `flags` may still add
/// `FI_INJECT` to a plain call (an endpoint default).
#[inline(always)]
fn admit<S: Config, const INJECT: bool, const FITS: bool>(
    st: &TxState<S>,
    need: Caps,
    len: usize,
    flags: OpFlags,
) -> Option<bool> {
    if !st.enabled
        || !st.caps.contains(need)
        || !st.fenced.is_empty()
        || (!FITS
            && (len > st.max_msg_size
                || ((INJECT || flags.contains(OpFlags::INJECT)) && len > st.inject_size)))
    {
        return None;
    }
    let want = !(INJECT || flags.contains(OpFlags::INJECT_CALL))
        && (!st.bind.selective || flags.contains(OpFlags::COMPLETION));
    st.room_for(want).ok()?;
    Some(want)
}
