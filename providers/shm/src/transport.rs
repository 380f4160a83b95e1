//! The per-endpoint transport: sending into peers' channels, polling our own.
//!
//! Each sending endpoint claims one channel in each receiver's region, so every
//! channel has one producer (the sender's [`ShmTx`], which the core serializes) and
//! one consumer (the receiver's [`ShmRx`]): no locked instruction on the message path.
//! The producer keeps its tail and a cached copy of the consumer's head privately and
//! rereads the shared head only when the ring looks full; the consumer publishes its
//! head once per poll that consumed something.
//!
//! Requests may fill a channel up to a quarter ([`RESERVE_DIV`]) short of full; the reserve is
//! for responses, which are never refused: past it they wait in a private spill queue
//! that every later send and every progress call retries first, in order.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::provider::wire::{Eager, Header, Op, Response, HDR_ACK, HDR_COMPARE, HDR_FETCH};
use fabric::provider::{Direct, DirectAccess, DirectReq, HeldBack, RemoteWake};
use fabric::waitobj::Waiter;
use fabric::{Error, Payload, Pull, Result, SharedBytes, Sink, Transport};
use rustc_hash::FxHashMap;
use zerocopy::IntoBytes;

use crate::cell::{self, Parsed};
use crate::direct::{self, TxDirect};
use crate::layout::bypass::Stores;
use crate::layout::region::{CellAt, Chan, Region, CELL, CH_CLOSING};
use crate::layout::sys;
use crate::name::{Name, NAME_LEN};
use crate::peer::{self, Local, PeerRegion};
use crate::rndv;
use crate::stage::{self, Stage, Staged};
use crate::track::{Track, Tracked};

/// Fraction of a channel's cells kept free of requests, for responses: one in
/// `RESERVE_DIV`.
pub const RESERVE_DIV: u64 = 4;
// Every packet fits an empty ring of the fewest cells beside the requests' reserve
// (`claim` writes a skip marker on its own first, so the packet needs no more).
static_assertions::const_assert!(
    (cell::BODY_OFF + crate::INLINE_MAX).div_ceil(CELL)
        + crate::layout::region::MIN_CELLS / RESERVE_DIV as usize
        <= crate::layout::region::MIN_CELLS
);
/// How often, at most, a poll checks whether peers with operations pending are alive.
const LIVENESS_PERIOD: Duration = Duration::from_millis(10);
/// Every how many liveness rounds the sender is asked to let go of departed peers'
/// channels (and so of its hold on their mappings).
const SWEEP_EVERY: u32 = 10;
/// Smallest message streamed through the ring ([`cell::STREAM`]): below it, copying in
/// before publishing costs less than the receiver waiting on progress words.
pub const STREAM_MIN: usize = 2048;
/// Payload bytes of a stream packet written before it is published.
///
/// Few, large pieces: every progress store takes the packet's first line from the
/// receiver, which is polling it. In interleaved pingpong runs on 2026-11-26, 2 KiB
/// then 4 KiB pieces took 0.89x the one-way time of 1 KiB pieces at 4 KiB and 0.85x
/// at 8 KiB (medians of 8 rounds); publishing only after the whole copy, 1.0x.
const STREAM_FIRST: usize = 2048;
/// Payload bytes written between two progress stores of a stream packet.
const STREAM_CHUNK: usize = 4096;

/// Tuning of one endpoint, from the environment at open.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Largest payload carried in the ring; larger ones are staged.
    pub inline_max: usize,
    /// Whether large payloads use cross-memory attach.
    pub cma: bool,
    /// Smallest payload of a request sent by rendezvous (with `cma` only): the
    /// receiver copies it straight from the caller's buffer while the send waits.
    pub rndv_min: usize,
    /// Fixed part of a rendezvous sender's wait for its receiver, before it stages the
    /// payload after all (plus `rndv::WAIT_PER_MIB` per MiB).
    pub rndv_wait: Duration,
}

/// State shared by an endpoint's transport, sender and receiver.
pub(crate) struct EpShared {
    region: Region,
    name: Name,
    raw: [u8; NAME_LEN],
    local: Arc<Local>,
    tuning: Tuning,
    /// Requests we sent that wait for a response: the peer they went to and the
    /// response op, so a dead peer's share can be failed.
    track: Track,
    /// [`SPILLED`] and [`SWEEP`]: what the sender's next flush has to do. One word, so
    /// progress asks whether there is anything with one load.
    backlog: AtomicU8,
}

/// [`EpShared::backlog`]: set while some channel of the sender has spilled responses.
const SPILLED: u8 = 1;
/// [`EpShared::backlog`]: set by the receiver's housekeeping every [`SWEEP_EVERY`]th
/// round; the sender's next flush lets go of the channels of peers that are gone.
const SWEEP: u8 = 2;

impl EpShared {
    /// Whether some channel of the sender has spilled responses.
    #[inline(always)]
    fn spilled(&self) -> bool {
        self.backlog.load(Ordering::Relaxed) & SPILLED != 0
    }

    /// Records whether spilled responses are left. Rare (a full peer ring), so an
    /// atomic read-modify-write: the receiver may be setting [`SWEEP`] meanwhile.
    fn set_spilled(&self, left: bool) {
        if left {
            self.backlog.fetch_or(SPILLED, Ordering::Relaxed);
        } else {
            self.backlog.fetch_and(!SPILLED, Ordering::Relaxed);
        }
    }
    /// The endpoint's own region.
    #[inline]
    pub(crate) fn region(&self) -> &Region {
        &self.region
    }
}

/// The per-endpoint transport of the shm provider.
pub struct ShmEp {
    shared: Arc<EpShared>,
}

impl ShmEp {
    /// Creates an endpoint's region with `geo` and `tuning`.
    pub fn open(geo: crate::layout::region::Geometry, tuning: Tuning) -> Result<ShmEp> {
        let nonce = crate::fresh_nonce();
        let (region, name) = Region::create(geo, nonce)?;
        // Peers find the segments this process publishes through any of its regions.
        if let Ok(dir) = crate::layout::directory::Directory::global() {
            region.set_directory(dir.fd(), dir.bytes());
        }
        let local = Arc::new(Local::default());
        peer::register_local(nonce, &local);
        // Registered before any send, so receivers that arm their wake-up can flush
        // this process's stores (see `ring`).
        sys::membarrier_registered();
        Ok(ShmEp {
            shared: Arc::new(EpShared {
                region,
                raw: name.encode(),
                name,
                local,
                tuning,
                track: Track::default(),
                backlog: AtomicU8::new(0),
            }),
        })
    }

    /// Bytes of this endpoint's shared region.
    pub fn region_bytes(&self) -> usize {
        self.shared.region.len()
    }

    /// This endpoint's shared region (for tests of the parts that take one).
    #[cfg(test)]
    pub(crate) fn region(&self) -> &Region {
        &self.shared.region
    }
}

struct TxChan {
    peer: Arc<PeerRegion>,
    c: usize,
    tail: u64,
    head: u64,
    cells: u64,
    /// The channel's first cell, counted in cells from the start of the peer's
    /// region (`cell_off(c, 0) / CELL`, which the layout keeps exact): kept in cells
    /// so that a cell's offset is visibly a multiple of [`CELL`], and packets need no
    /// alignment test.
    first_cell: usize,
    /// Cells that requests may hold: `cells` less the reserve for responses.
    req_room: u64,
    /// Ring position up to which a request may be written without a skip marker or
    /// rereading the head: the lesser of the end of the lap that held the tail and
    /// the head plus `req_room`, both as of the last [`claim`] (then still a bound;
    /// see [`claim_fast`]).
    limit: u64,
    spill: VecDeque<(Header, Vec<u8>)>,
}

impl TxChan {
    /// Byte offset of ring position `pos` ([`Region::cell_off`] of this channel).
    #[inline(always)]
    fn cell_off(&self, pos: u64) -> usize {
        (self.first_cell + (pos & (self.cells - 1)) as usize) * CELL
    }
}

/// The sending half ([`Transport::Sender`]): one channel per peer sent to.
pub struct ShmTx {
    shared: Arc<EpShared>,
    /// Largest message [`Transport::send_eager`] writes on its short path: compact,
    /// inline and not streamed.
    small_max: usize,
    chans: Vec<TxChan>,
    index: FxHashMap<u64, usize>,
    last: usize,
    stage: Option<Stage>,
    rndv: rndv::Pool,
    direct: TxDirect,
    /// Responses to peers in whose region no channel could be claimed yet, oldest
    /// first: a response is never refused, so it waits here (and `spilled` is set)
    /// until a channel frees up or the peer is gone.
    orphans: VecDeque<(Arc<PeerRegion>, Header, Vec<u8>)>,
}

struct RxChan {
    c: usize,
    /// The claim this channel was adopted under (the claimer's nonce).
    claim: u64,
    /// Channel `c`'s place in our region, worked out once.
    at: Chan,
    head: u64,
    published: u64,
    src: [u8; NAME_LEN],
    /// The nonce in `src`: a response on this channel answers only requests that went
    /// to this peer.
    nonce: u64,
    broken: bool,
}

/// The receiving half ([`Transport::Receiver`]).
pub struct ShmRx {
    shared: Arc<EpShared>,
    chans: Vec<RxChan>,
    /// Handed to the core for each stream packet in turn.
    ring: ShmPull,
    active: u64,
    polls: u32,
    last_check: Instant,
    /// Liveness rounds so far (see [`SWEEP_EVERY`]).
    rounds: u32,
}

// Tests the raw op against the constants: decoding it first (`Op::from_raw`) cost
// more than the test.
#[inline]
fn response_of(hdr: &Header) -> Option<Op> {
    const WRITE: u8 = Op::Write as u8;
    const READ_REQ: u8 = Op::ReadReq as u8;
    const ATOMIC: u8 = Op::Atomic as u8;
    const MSG: u8 = Op::Msg as u8;
    const TAGGED: u8 = Op::Tagged as u8;
    match hdr.op {
        WRITE => Some(Op::Ack),
        READ_REQ => Some(Op::ReadResp),
        ATOMIC => Some(Op::AtomicResp),
        MSG | TAGGED if hdr.flags & HDR_ACK != 0 => Some(Op::Ack),
        _ => None,
    }
}

#[inline]
fn is_response(op: u8) -> bool {
    matches!(
        Op::from_raw(op),
        Some(Op::Ack | Op::ReadResp | Op::AtomicResp)
    )
}

impl ShmEp {
    /// Sends response `hdr` on channel `i`, whose peer was found alive and after
    /// earlier spills were retried. Never refused: when the ring has no room, or
    /// responses already wait, it joins the channel's spill queue.
    ///
    /// A response carried inline, with nothing spilled before it and room in the ring,
    /// is written here in one step, in the short form ([`write_response`]: a fetching
    /// atomic's answer is one cache line); everything else takes
    /// [`ShmEp::respond_slow`].
    #[inline(always)]
    fn respond_on(&self, tx: &mut ShmTx, i: usize, hdr: &Header, payload: &[&[u8]]) -> Result<()> {
        let len: usize = payload.iter().map(|p| p.len()).sum();
        let ch = &mut tx.chans[i];
        if len <= self.shared.tuning.inline_max.min(cell::COMPACT_MAX) && ch.spill.is_empty() {
            let need = cell::cells_for(cell::RESP_BODY + len) as u64;
            // The request bound of `claim_fast` is stricter than a response's (no
            // reserve), so what it passes fits; otherwise `claim` decides.
            let pos = match claim_fast(ch, need) {
                Some(pos) => Some(pos),
                None => claim(ch, need, 0).ok(),
            };
            if let Some(pos) = pos {
                write_response(
                    ch, pos, need, hdr.op, hdr.tx_idx, hdr.req, hdr.status, payload, len,
                );
                ring(&ch.peer);
                return Ok(());
            }
        }
        self.respond_slow(tx, i, hdr, payload, len)
    }

    /// [`Self::respond_on`] of a response that is staged, waits behind spilled ones or
    /// finds the ring full.
    #[cold]
    #[inline(never)]
    fn respond_slow(
        &self,
        tx: &mut ShmTx,
        i: usize,
        hdr: &Header,
        payload: &[&[u8]],
        len: usize,
    ) -> Result<()> {
        if !tx.chans[i].spill.is_empty() {
            tx.chans[i].spill.push_back((*hdr, payload.concat()));
            return Ok(());
        }
        match tx.put(i, hdr, payload, len, 0) {
            Ok(()) => {
                ring(&tx.chans[i].peer);
                Ok(())
            }
            Err(Error::Again) => {
                tx.chans[i].spill.push_back((*hdr, payload.concat()));
                self.shared.set_spilled(true);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl ShmEp {
    /// [`Transport::send_eager`] past its short path: a message for another receive
    /// context, too long to be compact, inline and not streamed, to a peer that may be
    /// gone, behind spilled responses, on another channel than the last one or one
    /// whose ring looks full.
    #[inline(never)]
    fn send_eager_slow(
        &self,
        tx: &mut ShmTx,
        to: &Arc<PeerRegion>,
        m: Eager,
        payload: &[&[u8]],
    ) -> Result<()> {
        let m = &m;
        let sh = &*self.shared;
        if m.rx_idx != 0
            || m.len > sh.tuning.inline_max.min(cell::COMPACT_MAX)
            || to.known_dead()
            || to.region.closed()
            || sh.spilled()
        {
            return self.send(tx, to, &m.header(), payload);
        }
        let i = tx.channel(to)?;
        let ch = &mut tx.chans[i];
        if !ch.spill.is_empty() {
            return Err(Error::Again);
        }
        let reserve = ch.cells / RESERVE_DIV;
        let res = write_compact(ch, m, payload, reserve);
        tx.refused(i, to, res)?;
        ring(to);
        Ok(())
    }
}

impl ShmEp {
    /// [`Transport::send`] of any packet: a request (tracked until its response
    /// arrives, when it needs one) or a response.
    #[inline(never)]
    fn send_packet(
        &self,
        tx: &mut ShmTx,
        to: &Arc<PeerRegion>,
        hdr: &Header,
        payload: &[&[u8]],
    ) -> Result<()> {
        if to.known_dead() || to.region.closed() {
            if let Some(&i) = tx.index.get(&to.name.nonce) {
                tx.forget(i);
            }
            return Err(Error::HostUnreach);
        }
        if self.shared.spilled() {
            tx.flush_spills();
        }
        let i = match tx.channel(to) {
            Ok(i) => i,
            Err(Error::Again) if is_response(hdr.op) => {
                tx.orphans.push_back((to.clone(), *hdr, payload.concat()));
                self.shared.set_spilled(true);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if is_response(hdr.op) {
            return self.respond_on(tx, i, hdr, payload);
        }
        let ch = &tx.chans[i];
        if !ch.spill.is_empty() {
            return Err(Error::Again);
        }
        let reserve = ch.cells / RESERVE_DIV;
        let len: usize = payload.iter().map(|p| p.len()).sum();
        // Tracked before the packet is visible: the response may be polled by another
        // thread as soon as it is.
        let resp = response_of(hdr);
        if let Some(op) = resp {
            self.shared
                .track
                .track(hdr.tx_idx, hdr.req, to.name.nonce, op);
        }
        let res = tx.put(i, hdr, payload, len, reserve);
        if let Err(e) = tx.refused(i, to, res) {
            if resp.is_some() {
                self.shared
                    .track
                    .untrack(hdr.tx_idx, hdr.req, to.name.nonce);
            }
            return Err(e);
        }
        ring(to);
        Ok(())
    }

    /// The short path of [`Transport::send`] for atomic request `hdr` (`hdr.op` is
    /// [`Op::Atomic`]): `true` when it was written, tracked and announced; `false`
    /// when nothing was done and [`ShmEp::send_packet`] decides.
    #[inline(always)]
    fn send_atomic(
        &self,
        tx: &mut ShmTx,
        to: &Arc<PeerRegion>,
        hdr: &Header,
        payload: &[&[u8]],
    ) -> bool {
        let len = match payload {
            [] => 0,
            [one] => one.len(),
            many => many.iter().map(|p| p.len()).sum(),
        };
        if !cell::atomic_ok(hdr, len)
            || to.known_dead()
            || to.region.closed()
            || self.shared.spilled()
        {
            return false;
        }
        // No spill queue holds anything while `spilled` is clear (see `send_eager`).
        let Some(ch) = tx.chans.get_mut(tx.last) else {
            return false;
        };
        if !Arc::ptr_eq(&ch.peer, to) {
            return false;
        }
        let need = cell::cells_for(cell::ATOMIC_BODY + len) as u64;
        let Some(pos) = claim_fast(ch, need) else {
            return false;
        };
        let op = if hdr.flags & (HDR_FETCH | HDR_COMPARE) != 0 {
            Op::AtomicResp
        } else {
            Op::Ack
        };
        // Tracked before the packet is visible (see `send_packet`).
        self.shared
            .track
            .track(hdr.tx_idx, hdr.req, to.name.nonce, op);
        write_atomic_at(ch, pos, need, hdr, payload);
        ring(to);
        true
    }
}

impl ShmTx {
    /// The outcome of a request written to channel `i` of `to`: a full ring whose
    /// receiver is gone is not backpressure but a dead peer (`HostUnreach`), and its
    /// channel is dropped. Whether it is gone is asked of the kernel once per
    /// [`peer::ASK_PERIOD`] at most ([`PeerRegion::gone_lately`]).
    #[inline]
    fn refused(&mut self, i: usize, to: &PeerRegion, res: Result<()>) -> Result<()> {
        match res {
            Err(Error::Again) if to.gone_lately() => {
                self.forget(i);
                Err(Error::HostUnreach)
            }
            r => r,
        }
    }

    /// Whether the target has taken every packet this sender put in its channel to
    /// `to` (there is none: trivially). A direct access performed before then would
    /// overtake them: a write made visible, or a read done, before a message sent
    /// earlier was processed, against the message ordering the provider advertises
    /// (`FI_ORDER_WAS`, `RAS`, ...); it takes the packet path instead, behind them.
    /// One comparison when the cached head says so; else one load of the head the
    /// target published.
    #[inline]
    fn drained(&mut self, to: &Arc<PeerRegion>) -> bool {
        let i = match self.chans.get(self.last) {
            Some(ch) if Arc::ptr_eq(&ch.peer, to) => self.last,
            _ => match self.index.get(&to.name.nonce) {
                Some(&i) if Arc::ptr_eq(&self.chans[i].peer, to) => i,
                _ => return true,
            },
        };
        let ch = &mut self.chans[i];
        ch.head == ch.tail || drained_now(ch)
    }

    /// The channel to the endpoint whose raw address is `to`, if there is one.
    #[inline]
    fn find(&self, to: &[u8]) -> Option<usize> {
        let to: &[u8; NAME_LEN] = to.try_into().ok()?;
        match self.chans.get(self.last) {
            Some(ch) if ch.peer.raw == *to => Some(self.last),
            _ => self.find_slow(to),
        }
    }

    #[cold]
    #[inline(never)]
    fn find_slow(&self, to: &[u8; NAME_LEN]) -> Option<usize> {
        let nonce = Name::decode(to).ok()?.nonce;
        let &i = self.index.get(&nonce)?;
        (self.chans[i].peer.raw == *to).then_some(i)
    }

    #[inline]
    fn channel(&mut self, to: &Arc<PeerRegion>) -> Result<usize> {
        if let Some(ch) = self.chans.get(self.last) {
            if Arc::ptr_eq(&ch.peer, to) {
                return Ok(self.last);
            }
        }
        self.channel_slow(to)
    }

    #[cold]
    fn channel_slow(&mut self, to: &Arc<PeerRegion>) -> Result<usize> {
        let i = match self.index.get(&to.name.nonce) {
            Some(&i) if Arc::ptr_eq(&self.chans[i].peer, to) => i,
            found => {
                if let Some(&i) = found {
                    // A stale resolution of the same endpoint: start over.
                    self.forget(i);
                }
                let c = to
                    .region
                    .claim(&self.shared.raw, self.shared.name.nonce)
                    .ok_or(Error::Again)?;
                let head = to.region.chan_head(c).load(Ordering::Acquire);
                let cells = to.region.geometry().cells as u64;
                let mut ch = TxChan {
                    peer: to.clone(),
                    c,
                    tail: head,
                    head,
                    cells,
                    first_cell: to.region.cell_off(c, 0) / CELL,
                    req_room: cells - cells / RESERVE_DIV,
                    limit: 0,
                    spill: VecDeque::new(),
                };
                ch.limit = fast_limit(&ch);
                self.chans.push(ch);
                self.index.insert(to.name.nonce, self.chans.len() - 1);
                self.chans.len() - 1
            }
        };
        self.last = i;
        Ok(i)
    }

    fn forget(&mut self, i: usize) {
        let ch = self.chans.swap_remove(i);
        ch.peer
            .region
            .chan_state(ch.c)
            .store(CH_CLOSING, Ordering::Release);
        self.index.remove(&ch.peer.name.nonce);
        if let Some(moved) = self.chans.get(i) {
            self.index.insert(moved.peer.name.nonce, i);
        }
        self.last = 0;
    }

    /// Drops the channels of peers that are gone (a few loads each): nothing can be
    /// sent to them any more, and the channel held their region mapped.
    #[cold]
    fn let_go_of_departed(&mut self) {
        let mut i = self.chans.len();
        while i > 0 {
            i -= 1;
            if self.chans[i].peer.gone() {
                self.forget(i);
            }
        }
    }

    /// Retries spilled responses of every channel, oldest first, after handing the
    /// responses that waited for a channel to the channels that can now be claimed.
    fn flush_spills(&mut self) {
        let mut left = false;
        let mut waiting = std::mem::take(&mut self.orphans);
        while let Some((peer, hdr, body)) = waiting.pop_front() {
            if peer.gone_lately() {
                continue;
            }
            match self.channel(&peer) {
                Ok(i) => self.chans[i].spill.push_back((hdr, body)),
                Err(_) => self.orphans.push_back((peer, hdr, body)),
            }
        }
        left |= !self.orphans.is_empty();
        for i in 0..self.chans.len() {
            while let Some((hdr, body)) = self.chans[i].spill.pop_front() {
                match self.put(i, &hdr, &[&body], body.len(), 0) {
                    Ok(()) => ring(&self.chans[i].peer),
                    Err(_) if self.chans[i].peer.known_dead() => self.chans[i].spill.clear(),
                    Err(_) => {
                        self.chans[i].spill.push_front((hdr, body));
                        break;
                    }
                }
            }
            left |= !self.chans[i].spill.is_empty();
        }
        self.shared.set_spilled(left);
    }

    /// Writes one packet of `len` payload bytes into channel `i`: in the ring when it
    /// fits [`Tuning::inline_max`], else staged with a descriptor in the ring.
    #[inline(always)]
    fn put(
        &mut self,
        i: usize,
        hdr: &Header,
        parts: &[&[u8]],
        len: usize,
        reserve: u64,
    ) -> Result<()> {
        let tuning = &self.shared.tuning;
        if len <= tuning.inline_max {
            return write_packet(&mut self.chans[i], hdr, parts, len, reserve, None);
        }
        if tuning.cma && len >= tuning.rndv_min && !is_response(hdr.op) {
            if let Some(buf) = single(parts) {
                if let Some((r, gen)) = self.rndv.post(&self.shared.region, len) {
                    return self.rendezvous(i, hdr, buf, reserve, r, gen);
                }
            }
        }
        let stage = self.stage.as_mut().ok_or(Error::NoMem)?;
        let (d, rest) = stage.stage(&self.shared.region, &self.chans[i].peer, parts, len)?;
        let r = write_packet(&mut self.chans[i], hdr, parts, len, reserve, Some(&d));
        match (&r, rest) {
            (Ok(()), Some(rest)) => stage.fill(rest, parts),
            (Ok(()), None) => {}
            // Not sent: the slot goes back as if released.
            (Err(_), _) => self
                .shared
                .region
                .release(d.slot as usize)
                .store(d.gen, Ordering::Release),
        }
        r
    }
}

impl ShmTx {
    /// How many rendezvous payloads this sender staged after all (their receiver did
    /// not take them within the bound).
    pub fn rndv_withdrawn(&self) -> u64 {
        self.rndv.withdrawn()
    }

    /// Sends `buf` by rendezvous in record `r` (posted at `gen`): the packet names the
    /// caller's buffer, and the call returns once the receiver copied it or the sender
    /// staged it (see [`rndv`]).
    #[cold]
    #[inline(never)]
    fn rendezvous(
        &mut self,
        i: usize,
        hdr: &Header,
        buf: &[u8],
        reserve: u64,
        r: usize,
        gen: u64,
    ) -> Result<()> {
        let own = &self.shared.region;
        let d = cell::Desc {
            addr: buf.as_ptr() as u64,
            len: buf.len() as u64,
            slot: r as u32,
            mode: cell::Desc::RNDV,
            gen,
        };
        let ch = &mut self.chans[i];
        if let Err(e) = write_packet(ch, hdr, &[], buf.len(), reserve, Some(&d)) {
            self.rndv.cancel(own, r);
            return Err(e);
        }
        // The receiver may be asleep: it must poll for us to go on.
        ring(&ch.peer);
        let bound = rndv::bound(self.shared.tuning.rndv_wait, buf.len());
        self.rndv.wait(own, &ch.peer, r, gen, buf, bound)
    }
}

/// The one non-empty part of `parts`, if there is exactly one: what a rendezvous
/// descriptor can name.
#[inline]
fn single<'a>(parts: &[&'a [u8]]) -> Option<&'a [u8]> {
    let mut it = parts.iter().filter(|p| !p.is_empty());
    let one = it.next()?;
    it.next().is_none().then_some(*one)
}

/// How long a closing endpoint waits for receivers to copy its staged payloads.
const LINGER: Duration = Duration::from_secs(5);

impl Drop for ShmTx {
    fn drop(&mut self) {
        if let Some(stage) = &mut self.stage {
            stage.drain(&self.shared.region, LINGER);
        }
        self.rndv.drain(&self.shared.region, LINGER);
        for ch in &self.chans {
            ch.peer
                .region
                .chan_state(ch.c)
                .store(CH_CLOSING, Ordering::Release);
        }
    }
}

/// Writes one packet into `ch`, keeping `reserve` cells free: compact when the header
/// allows it, else the full header followed by the inline payload or, with `desc`,
/// by the descriptor of a staged one. `Err(Again)` when the ring lacks room.
fn write_packet(
    ch: &mut TxChan,
    hdr: &Header,
    parts: &[&[u8]],
    len: usize,
    reserve: u64,
    desc: Option<&cell::Desc>,
) -> Result<()> {
    if desc.is_none() && cell::atomic_ok(hdr, len) {
        return write_atomic(ch, hdr, parts, len, reserve);
    }
    if desc.is_none() && cell::compact_ok(hdr, len) {
        let m = Eager {
            op: if hdr.op == Op::Tagged as u8 {
                Op::Tagged
            } else {
                Op::Msg
            },
            rx_idx: 0,
            tag: hdr.tag,
            data: (hdr.flags & fabric::provider::wire::HDR_REMOTE_CQ_DATA != 0).then_some(hdr.data),
            len,
        };
        return write_compact(ch, &m, parts, reserve);
    }
    let bytes = match desc {
        Some(_) => cell::BODY_OFF + cell::DESC_LEN,
        None => cell::BODY_OFF + len,
    };
    let need = cell::cells_for(bytes) as u64;
    let pos = claim(ch, need, reserve)?;
    let r = &ch.peer.region;
    let off = r.cell_off(ch.c, pos);
    r.copy_in(off + cell::HDR_OFF, hdr.as_bytes());
    let w = match desc {
        Some(d) => {
            r.copy_in(off + cell::BODY_OFF, &d.encode());
            cell::word(pos, cell::LARGE)
        }
        None => {
            let mut o = off + cell::BODY_OFF;
            for p in parts {
                r.copy_in(o, p);
                o += p.len();
            }
            cell::word(pos, cell::FULL)
        }
    };
    r.cell_word(off).store(w, Ordering::Release);
    ch.tail = pos + need;
    Ok(())
}

/// Writes atomic request `hdr` (which [`cell::atomic_ok`] passed with `len`) with its
/// operands `parts` into `ch` in the short form ([`cell::ATOMIC`]), keeping `reserve`
/// cells free. `Err(Again)` when the ring lacks room.
#[inline]
fn write_atomic(
    ch: &mut TxChan,
    hdr: &Header,
    parts: &[&[u8]],
    len: usize,
    reserve: u64,
) -> Result<()> {
    let need = cell::cells_for(cell::ATOMIC_BODY + len) as u64;
    let pos = claim(ch, need, reserve)?;
    write_atomic_at(ch, pos, need, hdr, parts);
    Ok(())
}

/// [`write_atomic`] at position `pos` (`need` cells) that [`claim_fast`] or [`claim`]
/// returned: a fetch-add of one `u64` is one cache line.
#[inline(always)]
fn write_atomic_at(ch: &mut TxChan, pos: u64, need: u64, hdr: &Header, parts: &[&[u8]]) {
    let mut pkt = ch
        .peer
        .region
        .packet(ch.cell_off(pos), need as usize * CELL);
    pkt.put(&cell::atomic_fields(hdr));
    for p in parts {
        pkt.put(p);
    }
    pkt.publish(cell::word_atomic(pos, hdr.len as usize));
    ch.tail = pos + need;
}

/// Writes a response (`op`, which [`is_response`] passes, to request `req` of transmit
/// context `tx_idx`, with `status`) with its inline payload `parts` (`len` bytes, at
/// most [`cell::COMPACT_MAX`]; `need` cells together) at position `pos` of `ch`, which
/// [`claim_fast`] or [`claim`] returned, in the short form ([`cell::RESPONSE`]): only
/// the fields a response has.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn write_response(
    ch: &mut TxChan,
    pos: u64,
    need: u64,
    op: u8,
    tx_idx: u16,
    req: u64,
    status: u32,
    parts: &[&[u8]],
    len: usize,
) {
    let mut pkt = ch
        .peer
        .region
        .packet(ch.cell_off(pos), need as usize * CELL);
    let mut fields = [0u8; cell::RESP_BODY - cell::WORD];
    fields[..8].copy_from_slice(&req.to_le_bytes());
    fields[8..12].copy_from_slice(&status.to_le_bytes());
    fields[12..14].copy_from_slice(&tx_idx.to_le_bytes());
    pkt.put(&fields);
    for p in parts {
        pkt.put(p);
    }
    pkt.publish(cell::word_response(pos, op, len));
    ch.tail = pos + need;
}

/// Writes message `m` (payload `parts`, `m.len` bytes, no receive context but the
/// first) as a compact packet into `ch`, keeping `reserve` cells free.
#[inline]
fn write_compact(ch: &mut TxChan, m: &Eager, parts: &[&[u8]], reserve: u64) -> Result<()> {
    if m.len >= STREAM_MIN {
        return write_stream(ch, m, parts, reserve);
    }
    let need = cell::cells_for(cell::compact_prefix(m.data.is_some()) + m.len) as u64;
    let pos = claim(ch, need, reserve)?;
    let r = &ch.peer.region;
    let off = r.cell_off(ch.c, pos);
    r.copy_in(off + cell::WORD, &m.tag.to_le_bytes());
    let mut o = off + cell::WORD + 8;
    if let Some(d) = m.data {
        r.copy_in(o, &d.to_le_bytes());
        o += 8;
    }
    for p in parts {
        r.copy_in(o, p);
        o += p.len();
    }
    let w = cell::word_compact(pos, m.op, m.data.is_some(), m.len);
    r.cell_word(off).store(w, Ordering::Release);
    ch.tail = pos + need;
    Ok(())
}

/// Writes message `m` like [`write_compact`], as a stream packet: published after its
/// first [`STREAM_FIRST`] payload bytes, the rest copied behind it a [`STREAM_CHUNK`] at
/// a time, each piece announced in the packet's progress word.
#[inline(never)]
fn write_stream(ch: &mut TxChan, m: &Eager, parts: &[&[u8]], reserve: u64) -> Result<()> {
    let need = cell::cells_for(cell::STREAM_BODY + m.len) as u64;
    let pos = claim(ch, need, reserve)?;
    let r = &ch.peer.region;
    let off = r.cell_off(ch.c, pos);
    r.copy_in(off + cell::WORD, &m.tag.to_le_bytes());
    r.copy_in(off + cell::WORD + 8, &m.data.unwrap_or(0).to_le_bytes());
    let body = off + cell::STREAM_BODY;
    let progress = r.cell_word(off + cell::STREAM_PROGRESS);
    let first = STREAM_FIRST.min(m.len);
    crate::stage::copy_range(r.mapping(), body, parts, 0, first, Stores::Plain);
    progress.store(first as u64, Ordering::Relaxed);
    let w = cell::word_stream(pos, m.op, m.data.is_some(), m.len);
    r.cell_word(off).store(w, Ordering::Release);
    ch.tail = pos + need;
    let mut done = first;
    while done < m.len {
        let next = (done + STREAM_CHUNK).min(m.len);
        crate::stage::copy_range(r.mapping(), body, parts, done, next, Stores::Plain);
        progress.store(next as u64, Ordering::Release);
        done = next;
    }
    Ok(())
}

/// [`claim`] of `need` cells for a request, when that is plain: the packet ends
/// before the ring wraps and fits beside the reserve by the head last read. `None`
/// when it does not (a skip marker, a head to reread, a full ring): [`claim`]
/// decides then.
///
/// `ch.limit` was computed by the last [`claim`] (or when the channel was made), and
/// stays a sound bound as the tail moves on: the cached head changes only in
/// [`claim`], which computes the bound again, and once the tail reaches the end of that lap the
/// bound is the tail itself or less, so nothing passes until [`claim`] computes it
/// again.
#[inline(always)]
fn claim_fast(ch: &TxChan, need: u64) -> Option<u64> {
    (ch.tail + need <= ch.limit).then_some(ch.tail)
}

/// [`TxChan::limit`] for the channel's current tail and cached head.
#[inline]
fn fast_limit(ch: &TxChan) -> u64 {
    let lap_end = (ch.tail | (ch.cells - 1)) + 1;
    lap_end.min(ch.head + ch.req_room)
}

/// [`write_compact`] of message `m` (at most [`ShmTx::small_max`] bytes, `need`
/// cells) at position `pos` that [`claim_fast`] returned.
#[inline(always)]
fn write_small(ch: &mut TxChan, pos: u64, need: u64, m: &Eager, parts: &[&[u8]]) {
    let mut pkt = ch
        .peer
        .region
        .packet(ch.cell_off(pos), need as usize * CELL);
    pkt.put(&m.tag.to_le_bytes());
    if let Some(d) = m.data {
        pkt.put(&d.to_le_bytes());
    }
    for p in parts {
        pkt.put(p);
    }
    pkt.publish(cell::word_compact(pos, m.op, m.data.is_some(), m.len));
    ch.tail = pos + need;
}

/// Finds room for a packet of `need` cells in `ch` with `reserve` more to spare, and
/// returns its ring position. A packet never wraps: when it would, the rest of the
/// ring is filled with a skip marker first, as soon as that alone fits, so that the
/// packet then needs at most `need + reserve` cells (which every packet fits in an
/// empty ring: see [`crate::layout::region::MIN_CELLS`]). `Err(Again)` when the ring lacks
/// room (a skip marker may have been written all the same).
#[inline]
fn claim(ch: &mut TxChan, need: u64, mut reserve: u64) -> Result<u64> {
    let to_end = ch.cells - (ch.tail & (ch.cells - 1));
    if need > to_end {
        room(ch, to_end)?;
        let r = &ch.peer.region;
        let off = r.cell_off(ch.c, ch.tail);
        r.cell_word(off)
            .store(cell::word(ch.tail, cell::SKIP), Ordering::Release);
        ch.tail += to_end;
        // The skipped cells come free as soon as the receiver passes them, which takes
        // nothing from it: they stand in for as much of the reserve (responses that
        // find no room wait in the spill queue, never in the ring). Otherwise a large
        // packet behind a skip in a drained ring would wait for the receiver to pass
        // the marker, through a refused send.
        reserve = reserve.saturating_sub(to_end);
    }
    // `room` recomputes `ch.limit` whenever it rereads the head, which it does before
    // any refusal; a claim that passes on the cached head (the tail perhaps past a
    // skip) recomputes it here.
    room(ch, need + reserve)?;
    ch.limit = fast_limit(ch);
    Ok(ch.tail)
}

/// [`ShmTx::drained`] past the cached head: rereads the head the target published.
#[cold]
#[inline(never)]
fn drained_now(ch: &mut TxChan) -> bool {
    reread_head(ch) && ch.head == ch.tail
}

/// `Ok` when `n` cells past the tail of `ch` are free, by the cached head or else by
/// the head the receiver published (then cached).
#[inline]
fn room(ch: &mut TxChan, n: u64) -> Result<()> {
    if ch.tail + n - ch.head <= ch.cells {
        return Ok(());
    }
    // A head outside the window is a peer's garbage: the channel counts as full.
    if !reread_head(ch) || ch.tail + n - ch.head > ch.cells {
        return Err(Error::Again);
    }
    Ok(())
}

/// Caches the head the receiver published (and the bound that follows from it);
/// `false`, the cache kept, for a head outside `tail - cells ..= tail` (a peer's
/// garbage), which keeps the cached head in that window (what `claim_fast` relies on).
#[inline]
fn reread_head(ch: &mut TxChan) -> bool {
    let head = ch.peer.region.chan_head(ch.c).load(Ordering::Acquire);
    if head > ch.tail || ch.tail - head > ch.cells {
        return false;
    }
    ch.head = head;
    ch.limit = fast_limit(ch);
    true
}

impl Transport for ShmEp {
    type Peer = Arc<PeerRegion>;
    type Sender = ShmTx;
    type Receiver = ShmRx;
    type Pull = ShmPull;
    type Direct = Self;
    type HeldBack = Self;
    type RemoteWake = Self;
    type Cm = fabric::provider::Absent;

    fn name(&self) -> &[u8] {
        &self.shared.raw
    }

    fn sender(&self) -> ShmTx {
        let stage = Stage::new(&self.shared.region, self.shared.tuning.cma).ok();
        let small_max = self
            .shared
            .tuning
            .inline_max
            .min(cell::COMPACT_MAX)
            .min(STREAM_MIN - 1);
        ShmTx {
            shared: self.shared.clone(),
            small_max,
            chans: Vec::new(),
            index: FxHashMap::default(),
            last: 0,
            stage,
            rndv: rndv::Pool::default(),
            direct: TxDirect::default(),
            orphans: VecDeque::new(),
        }
    }

    fn receiver(&self) -> ShmRx {
        ShmRx {
            shared: self.shared.clone(),
            chans: Vec::new(),
            ring: ShmPull::ring(self.shared.clone()),
            active: 0,
            polls: 0,
            last_check: Instant::now(),
            rounds: 0,
        }
    }

    /// An atomic request in the short form ([`cell::ATOMIC`]) to a live peer, on the
    /// channel last sent on, with no spilled responses to flush first and room in the
    /// ring without rereading its head, is written here in one step
    /// (`ShmEp::send_atomic`); everything else takes `ShmEp::send_packet`.
    #[inline]
    fn send(
        &self,
        tx: &mut ShmTx,
        to: &Arc<PeerRegion>,
        hdr: &Header,
        payload: &[&[u8]],
    ) -> Result<()> {
        if hdr.op == Op::Atomic as u8 && self.send_atomic(tx, to, hdr, payload) {
            return Ok(());
        }
        self.send_packet(tx, to, hdr, payload)
    }

    /// A message small enough to travel compact and inline and not streamed, to a
    /// live peer, on the channel last sent on, with no spilled responses to flush
    /// first and room in the ring without rereading its head, is written here in one
    /// step; everything else takes `ShmEp::send_eager_slow`, which decides
    /// exactly as before.
    #[inline(always)]
    fn send_eager(
        &self,
        tx: &mut ShmTx,
        to: &Arc<PeerRegion>,
        m: &Eager,
        payload: &[&[u8]],
    ) -> Result<()> {
        if m.rx_idx == 0
            && m.len <= tx.small_max
            && !to.known_dead()
            && !to.region.closed()
            && !self.shared.spilled()
        {
            // No spill queue holds anything while `spilled` is clear (every push sets
            // it, and flushing clears it only with all queues empty), so the channel's
            // own queue needs no test.
            if let Some(ch) = tx.chans.get_mut(tx.last) {
                if Arc::ptr_eq(&ch.peer, to) {
                    let need = cell::cells_for(cell::compact_prefix(m.data.is_some()) + m.len);
                    if let Some(pos) = claim_fast(ch, need as u64) {
                        write_small(ch, pos, need as u64, m, payload);
                        ring(to);
                        return Ok(());
                    }
                }
            }
        }
        self.send_eager_slow(tx, to, *m, payload)
    }

    /// A target answers the requester it just heard from, which is usually the peer
    /// it last sent to: found among the channels by its address, not resolved again.
    #[inline]
    fn reply<R: FnOnce(&[u8]) -> Result<Arc<PeerRegion>>>(
        &self,
        tx: &mut ShmTx,
        to: &[u8],
        hdr: &Header,
        payload: &[&[u8]],
        resolve: R,
    ) -> Result<()> {
        let found = if is_response(hdr.op) {
            tx.find(to)
        } else {
            None
        };
        let Some(i) = found else {
            return self.send(tx, &resolve(to)?, hdr, payload);
        };
        let peer = &tx.chans[i].peer;
        if peer.known_dead() || peer.region.closed() {
            tx.forget(i);
            return Err(Error::HostUnreach);
        }
        if self.shared.spilled() {
            tx.flush_spills();
        }
        tx.last = i;
        self.respond_on(tx, i, hdr, payload)
    }

    /// A response to the requester on the channel last used, live, with nothing
    /// spilled and room in the ring without rereading its head, is written here in one
    /// step, in the short form; everything else is [`Transport::reply`] of its header.
    #[inline]
    fn respond<R: FnOnce(&[u8]) -> Result<Arc<PeerRegion>>>(
        &self,
        tx: &mut ShmTx,
        to: &[u8],
        r: &Response,
        payload: &[u8],
        resolve: R,
    ) -> Result<()> {
        let sh = &*self.shared;
        let len = payload.len();
        if let Some(i) = tx.find(to) {
            let ch = &mut tx.chans[i];
            if len <= sh.tuning.inline_max.min(cell::COMPACT_MAX)
                && !ch.peer.known_dead()
                && !ch.peer.region.closed()
                && !sh.spilled()
            {
                let need = cell::cells_for(cell::RESP_BODY + len) as u64;
                // The request bound is stricter than a response's: what passes fits.
                if let Some(pos) = claim_fast(ch, need) {
                    write_response(
                        ch,
                        pos,
                        need,
                        r.op as u8,
                        r.tx_idx,
                        r.req,
                        r.status,
                        &[payload],
                        len,
                    );
                    ring(&ch.peer);
                    tx.last = i;
                    return Ok(());
                }
            }
        }
        let one = [payload];
        let parts: &[&[u8]] = if payload.is_empty() { &[] } else { &one };
        self.reply(tx, to, &r.header(len), parts, resolve)
    }

    #[inline]
    fn poll<F: FnMut(&Header, &[u8], Payload<'_, ShmPull>) -> bool>(
        &self,
        rx: &mut ShmRx,
        f: F,
    ) -> usize {
        self.poll_into(rx, f)
    }

    /// Compact packets (messages that need no response) go to [`Sink::eager`]
    /// straight from their control word and tag: no [`Header`] is built.
    #[inline]
    fn poll_into<K: Sink<ShmPull>>(&self, rx: &mut ShmRx, mut f: K) -> usize {
        let sh = &*self.shared;
        let r = &sh.region;
        let active = r.active();
        if active != rx.active {
            rx.adopt(active);
        }
        let mut n = 0;
        let mut stop = false;
        let ring = &rx.ring;
        // A packet of `$k` cells is done with (delivered, or dropped as unsolicited):
        // past it, and on to the next one unless the CQ read running this poll has all
        // the entries it asked for (`Sink::sated`: the rest of this ring waits for the
        // next poll, the other channels are still looked at).
        macro_rules! done_with {
            ($ch:ident, $k:expr) => {{
                $ch.head += $k as u64;
                n += 1;
                if f.sated() {
                    break;
                }
                continue;
            }};
        }
        for ch in rx.chans.iter_mut() {
            if ch.broken {
                continue;
            }
            loop {
                let CellAt { off, word, avail } = r.cell_at(&ch.at, ch.head);
                // Before the load, which would make the compiler read the position
                // again and recompute the address it shares with `cell_at`.
                r.prefetch_next(&ch.at, ch.head);
                let w = word.load(Ordering::Acquire);
                if w as u32 != cell::stamp(ch.head) {
                    break;
                }
                if cell::is_compact(w) {
                    // The lane of small messages.
                    let Ok((m, payload, k)) = cell::compact(w, avail) else {
                        ch.broken = true;
                        break;
                    };
                    if !f.eager(&m, &ch.src, payload) {
                        stop = true;
                        break;
                    }
                    done_with!(ch, k);
                }
                let kind = cell::kind(w);
                if kind == cell::RESPONSE {
                    // The lane of responses: no header either.
                    let Ok((resp, payload, k)) = cell::response(w, avail) else {
                        ch.broken = true;
                        break;
                    };
                    if solicited(sh, ch, resp.tx_idx, resp.req)
                        && !f.response(&resp, &ch.src, payload)
                    {
                        stop = true;
                        break;
                    }
                    done_with!(ch, k);
                }
                // Packets with their payload in the ring are handed on below: atomic
                // requests without the generic parse, the rest through it.
                let (hdr, payload, k) = if kind == cell::ATOMIC {
                    match cell::atomic(w, avail) {
                        Ok(a) => a,
                        Err(_) => {
                            ch.broken = true;
                            break;
                        }
                    }
                } else {
                    match cell::parse(w, avail, sh.tuning.inline_max) {
                        Ok(Parsed::Skip) => {
                            ch.head += (avail.len() / CELL) as u64;
                            continue;
                        }
                        Ok(Parsed::Inline {
                            hdr,
                            off: o,
                            len,
                            cells: k,
                        }) => match avail.get(o, len) {
                            Some(payload) => (hdr, payload, k),
                            // `parse` keeps it within `avail`: never taken.
                            None => {
                                ch.broken = true;
                                break;
                            }
                        },
                        Ok(Parsed::Stream { hdr, len, cells: k }) => {
                            ring.point(off, len, &ch.src);
                            if !f.packet(&hdr, &ch.src, Payload::Remote(ring)) {
                                stop = true;
                                break;
                            }
                            done_with!(ch, k);
                        }
                        Ok(Parsed::Large {
                            hdr,
                            desc,
                            cells: k,
                        }) => {
                            let Ok(peer) = peer::resolve(&ch.src) else {
                                ch.broken = true;
                                break;
                            };
                            if is_response(hdr.op) && !solicited(sh, ch, hdr.tx_idx, hdr.req) {
                                // Dropped unread; the sender's slot or record goes back
                                // as if it had been read.
                                match ShmPull::new(peer.clone(), &desc) {
                                    Ok(pull) => pull.finish(),
                                    Err(_) if desc.mode != cell::Desc::RNDV => peer
                                        .region
                                        .release(desc.slot as usize)
                                        .store(desc.gen, Ordering::Release),
                                    Err(_) => {}
                                }
                                done_with!(ch, k);
                            }
                            let consumed = match ShmPull::new(peer.clone(), &desc) {
                                Ok(pull) => {
                                    let c = f.packet(&hdr, &ch.src, Payload::Remote(&pull));
                                    if c {
                                        pull.finish();
                                    }
                                    c
                                }
                                // Bad descriptor, or the sender's files are gone: a
                                // payload of the announced length that cannot be read,
                                // so the core fails the receive or answers the request
                                // with an error.
                                Err(_) => {
                                    let lost = ShmPull::lost(desc.len as usize);
                                    let c = f.packet(&hdr, &ch.src, Payload::Remote(&lost));
                                    if c && desc.mode != cell::Desc::RNDV {
                                        // The slot is of no use to anyone: back to the sender.
                                        peer.region
                                            .release(desc.slot as usize)
                                            .store(desc.gen, Ordering::Release);
                                    }
                                    c
                                }
                            };
                            if !consumed {
                                stop = true;
                                break;
                            }
                            done_with!(ch, k);
                        }
                        Err(_) => {
                            ch.broken = true;
                            break;
                        }
                    }
                };
                // A response nobody here asked that peer for is dropped (`solicited`).
                let wanted = !is_response(hdr.op) || solicited(sh, ch, hdr.tx_idx, hdr.req);
                if wanted && !f.packet(&hdr, &ch.src, Payload::Inline(payload)) {
                    stop = true;
                    break;
                }
                done_with!(ch, k);
            }
            if ch.head != ch.published {
                r.head_of(&ch.at).store(ch.head, Ordering::Release);
                ch.published = ch.head;
            }
            if stop {
                break;
            }
        }
        rx.polls = rx.polls.wrapping_add(1);
        if rx.polls.is_multiple_of(64) {
            rx.housekeeping(&mut f);
        }
        n
    }

    fn set_waker(&self, waker: Arc<Waiter>) {
        let _ = self.shared.local.waker.set(waker);
    }

    fn shutdown(&self) {
        self.shared.region.set_closed();
    }
}

/// Responses refused by a full peer queue wait in the sender (`flush_spills`); the
/// same flag asks the sender to let go of departed peers' channels.
impl HeldBack<ShmEp> for ShmEp {
    // Only responses are held: a send is in the ring or refused.
    const HOLDS_SENDS: bool = false;

    #[inline]
    fn pending(t: &ShmEp) -> bool {
        t.shared.backlog.load(Ordering::Relaxed) != 0
    }

    fn flush(t: &ShmEp, tx: &mut ShmTx) {
        if t.shared.backlog.fetch_and(!SWEEP, Ordering::Relaxed) & SWEEP != 0 {
            tx.let_go_of_departed();
        }
        if t.shared.spilled() {
            tx.flush_spills();
        }
    }
}

/// RMA and atomics into segments the target process published
/// ([`crate::MappedSegment`]) are done here, by the initiator.
impl DirectAccess<ShmEp> for ShmEp {
    #[inline]
    fn direct<F: FnMut(SharedBytes<'_>)>(
        _: &ShmEp,
        tx: &mut ShmTx,
        to: &Arc<PeerRegion>,
        req: &DirectReq<'_>,
        hold: bool,
        out: F,
    ) -> Direct {
        // RMA and atomics into ordinary registrations: the packet path at once; and
        // behind packets the target has not taken yet (see `ShmTx::drained`).
        // (A held access is offered again once nothing is in flight: checked then.)
        if tx.direct.known_absent(to, req.key) || (!hold && !tx.drained(to)) {
            return Direct::Declined;
        }
        direct::run(&mut tx.direct, to, req, hold, out)
    }

    /// The write of [`direct`](DirectAccess::direct) with its common case (the segment
    /// written last) inline (`direct::write`).
    // Always inlined: the call's frame cost a fifth of an 8-byte put.
    #[inline(always)]
    fn direct_write(
        _: &ShmEp,
        tx: &mut ShmTx,
        to: &Arc<PeerRegion>,
        addr: u64,
        key: u64,
        data: &[u8],
    ) -> Direct {
        if !tx.drained(to) {
            return Direct::Declined;
        }
        direct::write(&mut tx.direct, to, addr, key, data)
    }
}

/// Peers write to the pipe the region's wake word names once it is armed.
impl RemoteWake<ShmEp> for ShmEp {
    fn arm(t: &ShmEp, target: (std::os::fd::RawFd, u64)) {
        let Ok(fd) = u32::try_from(target.0) else {
            return;
        };
        t.shared.region.arm_wake(fd, target.1);
        // Every registered sender passes a full barrier: a packet it published before
        // reading the (then unarmed) wake word is visible to the caller's last check.
        sys::membarrier_global();
    }
}

impl Drop for ShmEp {
    fn drop(&mut self) {
        self.shared.region.set_closed();
        peer::unregister_local(self.shared.name.nonce);
    }
}

/// Wakes `peer` after a packet was published to it: the domain waiter of a peer in
/// this process, and a peer in another process only if it armed its wake-up (about to
/// sleep on a pipe, [`RemoteWake::arm`]).
///
/// The wake word is read after the packet's stamp was stored. The receiver arms, then
/// issues `membarrier(GLOBAL_EXPEDITED)` before its last look at the rings, which
/// stands in for the store-load fence this side would otherwise need on every send:
/// either the receiver sees the packet or this side sees the request. Without
/// membarrier the fence is real.
#[inline(always)]
fn ring(peer: &PeerRegion) {
    match &peer.local {
        Some(l) => {
            if let Some(w) = l.waker.get() {
                w.signal();
            }
        }
        None => {
            if sys::membarrier_registered() {
                std::sync::atomic::compiler_fence(Ordering::SeqCst);
            } else {
                std::sync::atomic::fence(Ordering::SeqCst);
            }
            if peer.region.wake_armed() {
                wake_remote(peer);
            }
        }
    }
}

#[cold]
fn wake_remote(peer: &PeerRegion) {
    if let Some((fd, ino)) = peer.region.take_wake() {
        sys::poke_pipe(peer.name.pid, fd, ino);
    }
}

#[cfg(test)]
impl ShmEp {
    /// Tracks request (`tx_idx`, `req`) as sent to the endpoint named `to`, as a send
    /// of it does, so that a test may answer it with a hand-made response.
    pub(crate) fn expect_response(&self, to: &[u8], tx_idx: u16, req: u64, op: Op) {
        let nonce = Name::decode(to).map_or(0, |n| n.nonce);
        self.shared.track.track(tx_idx, req, nonce, op);
    }
}

/// Whether a response on channel `ch` answers a request this endpoint sent to that
/// channel's peer; if so the request is no longer tracked. Anything else (a late
/// answer to a request already failed, a forged or garbled id, an id of a request to
/// another peer) is dropped by the caller, so no peer can complete an operation it
/// was not asked for. Every request that expects a response is tracked before it is
/// sent, and the core consumes every response it is handed.
#[inline]
fn solicited(sh: &EpShared, ch: &RxChan, tx_idx: u16, req: u64) -> bool {
    sh.track.used() && sh.track.untrack(tx_idx, req, ch.nonce)
}

impl ShmRx {
    /// Follows changes of the channel table (its generation is `active`): adopts new
    /// channels, drops freed ones. A look at every channel's claim, but only when a
    /// sender came or went.
    #[cold]
    fn adopt(&mut self, active: u64) {
        let r = &self.shared.region;
        // A channel freed and claimed again since is another sender's: dropped here,
        // adopted afresh below.
        self.chans.retain(|ch| r.claimed(ch.c) == ch.claim);
        let mut have = vec![false; r.hwm()];
        for ch in &self.chans {
            if let Some(h) = have.get_mut(ch.c) {
                *h = true;
            }
        }
        for (c, had) in have.into_iter().enumerate() {
            let claim = r.claimed(c);
            if !had && claim != 0 {
                let head = r.chan_head(c).load(Ordering::Acquire);
                self.chans.push(RxChan {
                    c,
                    claim,
                    at: r.chan(c),
                    head,
                    published: head,
                    src: r.chan_name(c),
                    nonce: Name::decode(&r.chan_name(c)).map_or(0, |n| n.nonce),
                    broken: Name::decode(&r.chan_name(c)).is_err(),
                });
            }
        }
        self.active = active;
    }

    /// Frees drained channels of senders that left, and fails requests pending on
    /// peers that died.
    #[cold]
    fn housekeeping<K: Sink<ShmPull>>(&mut self, f: &mut K) {
        let now = Instant::now();
        if now.duration_since(self.last_check) < LIVENESS_PERIOD {
            return;
        }
        self.last_check = now;
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds.is_multiple_of(SWEEP_EVERY) {
            self.shared.backlog.fetch_or(SWEEP, Ordering::Relaxed);
        }
        let r = &self.shared.region;
        let mut freed = false;
        self.chans.retain(|ch| {
            let closing = r.chan_state(ch.c).load(Ordering::Acquire) == CH_CLOSING;
            // Only a sender known to be gone loses its channel: one that cannot be
            // resolved for another reason (out of descriptors, say) may still be
            // writing to it.
            let sender_gone = closing
                || ch.broken
                || match peer::resolve(&ch.src) {
                    Ok(p) => p.gone(),
                    Err(e) => e == Error::AddrNotAvail,
                };
            if !sender_gone {
                return true;
            }
            let off = r.cell_off(ch.c, ch.head);
            let ready = r.cell_word(off).load(Ordering::Acquire) as u32 == cell::stamp(ch.head);
            if ready && !ch.broken {
                return true;
            }
            r.unclaim(ch.c);
            freed = true;
            false
        });
        if freed {
            let active = r.active();
            self.adopt(active);
            // A sender that left is resolved by nobody any more: its mappings go now.
            peer::sweep();
        }
        if !self.shared.track.used() {
            return;
        }
        // Without allocating (this runs every round): requests wait mostly on a few
        // peers, so the last answer is kept.
        let mut last = (0u64, false);
        let mut dead = |nonce: u64| {
            if nonce != last.0 {
                last = (nonce, peer::cached(nonce).is_none_or(|p| p.gone()));
            }
            last.1
        };
        if !self.shared.track.any(&mut dead) {
            return;
        }
        let failed = self.shared.track.take_if(dead);
        for Tracked {
            tx_idx,
            req,
            nonce,
            op,
        } in failed
        {
            let hdr = Header {
                op: op as u8,
                tx_idx,
                req,
                status: Error::HostUnreach.code() as u32,
                ..Header::default()
            };
            let src = peer::cached(nonce).map_or([0u8; NAME_LEN], |p| p.raw);
            f.packet(&hdr, &src, Payload::Inline(SharedBytes::from(&[])));
        }
    }
}

/// A payload the receiver copies out of the sender's reach ([`fabric::Pull`]): a large
/// one staged by the sender or (rendezvous) still in the sender's buffer, or a medium
/// one the sender is still streaming into our ring.
pub struct ShmPull(Src);

enum Src {
    Staged(Staged),
    Ring(RingPull),
    /// A payload of this many bytes that cannot be read (its descriptor is bad, or its
    /// sender's files are gone with it).
    Lost(usize),
}

/// A stream packet's payload in our own ring (see [`crate::cell::STREAM`]): one per
/// receiver, pointed at each stream packet in turn while the core consumes it.
struct RingPull {
    own: Arc<EpShared>,
    /// Offset in our region of the packet's first cell.
    at: Cell<usize>,
    len: Cell<usize>,
    /// The sender's name, resolved only to ask whether it lives when it falls behind.
    src: Cell<[u8; NAME_LEN]>,
}

impl ShmPull {
    /// The payload `desc` describes, staged by `peer`. `Err(Io)` when the descriptor
    /// points outside what the peer published.
    pub fn new(peer: Arc<PeerRegion>, desc: &cell::Desc) -> Result<ShmPull> {
        Staged::new(peer, desc).map(|s| ShmPull(Src::Staged(s)))
    }

    /// The receiver `own`'s pull for stream packets, pointed at one with
    /// [`Self::point`].
    pub(crate) fn ring(own: Arc<EpShared>) -> ShmPull {
        ShmPull(Src::Ring(RingPull {
            own,
            at: Cell::new(0),
            len: Cell::new(0),
            src: Cell::new([0; NAME_LEN]),
        }))
    }

    /// Points a ring pull at the stream packet whose first cell is at `at` in our
    /// region, with `len` payload bytes (checked by the parser to lie in the ring),
    /// sent by `src`.
    #[inline]
    pub(crate) fn point(&self, at: usize, len: usize, src: &[u8; NAME_LEN]) {
        if let Src::Ring(r) = &self.0 {
            r.at.set(at);
            r.len.set(len);
            r.src.set(*src);
        }
    }

    /// A payload of `len` bytes of which nothing can be read: a message whose staged
    /// payload is out of reach still fails its receive (`FI_EIO`), never completing
    /// it as an empty success.
    pub fn lost(len: usize) -> ShmPull {
        ShmPull(Src::Lost(len))
    }

    /// The packet was consumed: hands the staging slot or the rendezvous record back
    /// to the sender (nothing to do for a ring payload).
    #[inline]
    pub fn finish(&self) {
        if let Src::Staged(s) = &self.0 {
            s.finish();
        }
    }
}

impl RingPull {
    fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        let (at, len) = (self.at.get(), self.len.get());
        if off > len || dst.len() > len - off {
            return Err(Error::Io);
        }
        let r = self.own.region();
        let progress = r.cell_word(at + cell::STREAM_PROGRESS);
        let body = at + cell::STREAM_BODY;
        let end = off + dst.len();
        let mut done = off;
        while done < end {
            let ready = stage::wait_ready(
                || progress.load(Ordering::Acquire),
                done,
                len,
                || crate::peer::resolve(&self.src.get()).map_or(true, |p| p.process_gone()),
            )?
            .min(end);
            r.copy_out(body + done, &mut dst[done - off..ready - off]);
            done = ready;
        }
        Ok(())
    }
}

impl Pull for ShmPull {
    #[inline]
    fn len(&self) -> usize {
        match &self.0 {
            Src::Staged(s) => s.len(),
            Src::Ring(r) => r.len.get(),
            Src::Lost(len) => *len,
        }
    }

    fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        match &self.0 {
            Src::Staged(s) => s.read(off, dst),
            Src::Ring(r) => r.read(off, dst),
            Src::Lost(_) => Err(Error::Io),
        }
    }
}
