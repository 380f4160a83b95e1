//! `fabric-loopback`: the in-process provider, and the reference semantics the other
//! providers are tested against.
//!
//! Every ordered pair (sending endpoint, receiving endpoint) has its own channel: a
//! bounded single-producer/single-consumer ring (see `ring.rs`). The sender keeps the
//! producer ends of its channels in its [`LoopbackTx`], the receiver the consumer
//! ends in its [`LoopbackRx`]; the core holds both behind the stack's lock family, so
//! under `ThreadDomain` a send is a few plain loads and stores and no locked
//! instruction (the receiver, possibly in another thread, synchronizes through the
//! ring's Acquire/Release indices). The first send to a new peer creates the channel
//! and hands the consumer end to the peer's [`Inbox`] under a mutex, off the fast path;
//! the peer's next poll adopts it. Everything above the transport (matching, RMA,
//! atomics, completions) is the core's.
//!
//! Flow control: a channel takes at most [`INBOX_DEPTH`] requests, then the sender
//! gets `FI_EAGAIN`. Responses (`Ack`, `ReadResp`, `AtomicResp`) are never refused:
//! they may use the whole ring ([`CHANNEL_SLOTS`], twice the request depth) and, when
//! even that is full, a locked spill queue behind it, which keeps them in order and
//! makes further requests wait. Responses are bounded by the initiator's own transmit
//! queues, so the spill queue stays short and is normally never used.
//!
//! Connection management (MSG endpoints) is in-process too: a listener is registered
//! by name, a connect queues a request with it, and accept and reject answer that
//! request by queueing an event with each side ([`CmSide`]); the core turns those into
//! EQ events when the application reads its EQ.
//!
//! ```
//! use fabric::prelude::*;
//! use fabric_loopback::Loopback;
//! let infos = getinfo::<Stack<Loopback>>(None).unwrap();
//! assert!(infos.iter().all(|i| i.fabric_attr.prov_name == "loopback"));
//! ```
#![deny(unsafe_code)]

mod ring;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use fabric::attr::EpType;
use fabric::flags::Caps;
use fabric::provider::wire::{Header, Op};
use fabric::provider::{Absent, CmEvent, CmRequest, ConnectionManager};
use fabric::waitobj::Waiter;
use fabric::{Error, Info, NoPull, Payload, Provider, Result, Transport};

use ring::{Consumer, Drained, Producer};

/// Largest `inject` payload, as a type ([`Provider::InjectSize`]).
pub type InjectSize = fabric::typenum::U4096;
/// Largest `inject` payload.
pub const INJECT_SIZE: usize = <InjectSize as fabric::typenum::Unsigned>::USIZE;
/// Largest message.
pub const MAX_MSG_SIZE: usize = 64 << 20;
/// Requests one sending endpoint may have queued at one receiving endpoint before it
/// sees `FI_EAGAIN`.
pub const INBOX_DEPTH: usize = 1024;
/// Slots of one channel: requests use up to [`INBOX_DEPTH`], responses all of them.
pub const CHANNEL_SLOTS: usize = 2 * INBOX_DEPTH;
/// Bytes of a loopback address.
pub const NAME_LEN: usize = 8;

/// The loopback provider marker.
pub enum Loopback {}

/// An endpoint's receiving side as its peers see it (the resolved peer).
pub struct Inbox {
    id: u64,
    waker: OnceLock<Arc<Waiter>>,
    /// Set by `shutdown`; checked (one load) by every send.
    closed: AtomicBool,
    /// Consumer ends of channels opened by new senders, not yet adopted by a poll.
    fresh: Mutex<Vec<Consumer>>,
    /// `fresh.len()`, so a poll learns about new channels with one load.
    nfresh: AtomicUsize,
}

impl Inbox {
    fn fresh(&self) -> MutexGuard<'_, Vec<Consumer>> {
        self.fresh.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn is_request(op: u8) -> bool {
    !matches!(
        Op::from_raw(op),
        Some(Op::Ack | Op::ReadResp | Op::AtomicResp)
    )
}

fn registry() -> MutexGuard<'static, HashMap<u64, Weak<Inbox>>> {
    static REG: OnceLock<Mutex<HashMap<u64, Weak<Inbox>>>> = OnceLock::new();
    REG.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The per-endpoint transport of the loopback provider.
pub struct LoopbackEp {
    inbox: Arc<Inbox>,
    name: [u8; NAME_LEN],
    cm: Arc<CmSide>,
}

/// Locks `m`, going on after a panic elsewhere: every queue here stays consistent
/// between operations.
fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An endpoint's side of a connection, as its peer and the listeners see it: the
/// connection events waiting for the core, and the peer once accepted.
pub struct CmSide {
    name: [u8; NAME_LEN],
    events: Mutex<VecDeque<CmEvent>>,
    peer: Mutex<Option<Weak<CmSide>>>,
}

impl CmSide {
    fn push(&self, e: CmEvent) {
        lock(&self.events).push_back(e);
    }

    /// Ends the connection, if any: the peer sees `Shutdown` (once, whichever side
    /// goes first).
    fn disconnect(&self) {
        let Some(peer) = lock(&self.peer).take().and_then(|w| w.upgrade()) else {
            return;
        };
        lock(&peer.peer).take();
        peer.push(CmEvent::Shutdown);
    }
}

/// A connection request queued with a listener ([`ConnectionManager::Request`]).
pub struct LoopbackRequest {
    from: Weak<CmSide>,
    answered: AtomicBool,
}

impl LoopbackRequest {
    /// The connecting side, claimed for an answer: `Err(Inval)` once answered.
    fn claim(&self) -> Result<Option<Arc<CmSide>>> {
        if self.answered.swap(true, Ordering::AcqRel) {
            return Err(Error::Inval);
        }
        Ok(self.from.upgrade())
    }
}

/// What connects reach: a listener's queue of requests.
struct Queue {
    requests: Mutex<VecDeque<CmRequest<LoopbackRequest>>>,
}

/// A passive endpoint's listener ([`ConnectionManager::Listener`]): a name in the
/// listener registry once listening.
pub struct LoopbackListener {
    id: Mutex<u64>,
    queue: Arc<Queue>,
    listening: AtomicBool,
}

fn listeners() -> MutexGuard<'static, HashMap<u64, Weak<Queue>>> {
    static REG: OnceLock<Mutex<HashMap<u64, Weak<Queue>>>> = OnceLock::new();
    lock(REG.get_or_init(Default::default))
}

/// A fresh id for an endpoint or listener: both kinds of names come from one space.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn parse_name(name: &[u8]) -> Result<u64> {
    let id: [u8; NAME_LEN] = name.try_into().map_err(|_| Error::Inval)?;
    Ok(u64::from_le_bytes(id))
}

impl Drop for LoopbackListener {
    fn drop(&mut self) {
        if self.listening.load(Ordering::Acquire) {
            let id = *lock(&self.id);
            let mut reg = listeners();
            if reg
                .get(&id)
                .is_some_and(|q| std::ptr::eq(q.as_ptr(), Arc::as_ptr(&self.queue)))
            {
                reg.remove(&id);
            }
        }
        // Nobody will answer what is still queued.
        for r in lock(&self.queue.requests).drain(..) {
            if let Ok(Some(from)) = r.handle.claim() {
                from.push(CmEvent::Refused { data: Vec::new() });
            }
        }
    }
}

impl ConnectionManager<LoopbackEp> for LoopbackEp {
    type Listener = LoopbackListener;
    type Request = LoopbackRequest;

    fn listener(info: &Info) -> Result<LoopbackListener> {
        let id = match &info.src_addr {
            Some(a) => parse_name(a)?,
            None => next_id(),
        };
        Ok(LoopbackListener {
            id: Mutex::new(id),
            queue: Arc::new(Queue {
                requests: Mutex::new(VecDeque::new()),
            }),
            listening: AtomicBool::new(false),
        })
    }

    fn listener_name(l: &LoopbackListener) -> Vec<u8> {
        lock(&l.id).to_le_bytes().to_vec()
    }

    fn set_listener_name(l: &LoopbackListener, name: &[u8]) -> Result<()> {
        *lock(&l.id) = parse_name(name)?;
        Ok(())
    }

    fn listen(l: &LoopbackListener) -> Result<()> {
        let id = *lock(&l.id);
        let mut reg = listeners();
        if reg.get(&id).is_some_and(|q| q.strong_count() > 0) {
            return Err(Error::AddrInUse);
        }
        reg.insert(id, Arc::downgrade(&l.queue));
        l.listening.store(true, Ordering::Release);
        Ok(())
    }

    fn requests(l: &LoopbackListener, f: &mut dyn FnMut(CmRequest<LoopbackRequest>)) {
        let arrived: Vec<_> = lock(&l.queue.requests).drain(..).collect();
        arrived.into_iter().for_each(f);
    }

    fn reject(_: &LoopbackListener, req: &LoopbackRequest, data: &[u8]) -> Result<()> {
        if let Some(from) = req.claim()? {
            from.push(CmEvent::Refused {
                data: data.to_vec(),
            });
        }
        Ok(())
    }

    fn connect(t: &LoopbackEp, to: &[u8], data: &[u8]) -> Result<()> {
        let id = parse_name(to)?;
        let queue = listeners().get(&id).and_then(Weak::upgrade);
        match queue {
            Some(q) => lock(&q.requests).push_back(CmRequest {
                handle: LoopbackRequest {
                    from: Arc::downgrade(&t.cm),
                    answered: AtomicBool::new(false),
                },
                peer: t.name.to_vec(),
                data: data.to_vec(),
            }),
            // As a socket connect to a port nobody listens on: refused, reported
            // like any other outcome.
            None => t.cm.push(CmEvent::Refused { data: Vec::new() }),
        }
        Ok(())
    }

    fn accept(t: &LoopbackEp, req: &LoopbackRequest, data: &[u8]) -> Result<()> {
        let from = req.claim()?.ok_or(Error::ConnAborted)?;
        *lock(&t.cm.peer) = Some(Arc::downgrade(&from));
        *lock(&from.peer) = Some(Arc::downgrade(&t.cm));
        from.push(CmEvent::Connected {
            peer: t.name.to_vec(),
            data: data.to_vec(),
        });
        t.cm.push(CmEvent::Connected {
            peer: from.name.to_vec(),
            data: Vec::new(),
        });
        Ok(())
    }

    fn events(t: &LoopbackEp, f: &mut dyn FnMut(CmEvent)) {
        let queued: Vec<_> = lock(&t.cm.events).drain(..).collect();
        queued.into_iter().for_each(f);
    }

    fn disconnect(t: &LoopbackEp) -> Result<()> {
        t.cm.disconnect();
        Ok(())
    }
}

/// The producer ends of an endpoint's channels, one per peer it has sent to
/// ([`Transport::Sender`]).
pub struct LoopbackTx {
    chans: Vec<(u64, Producer)>,
    /// Peer id to index in `chans`, for endpoints talking to many peers.
    index: HashMap<u64, usize>,
    /// Index of the last peer sent to: the common case needs no map lookup.
    last: usize,
}

/// The consumer ends of an endpoint's channels ([`Transport::Receiver`]).
pub struct LoopbackRx {
    chans: Vec<Consumer>,
}

impl LoopbackTx {
    /// The channel to `to`, created and registered with `to` on first use.
    #[inline]
    fn channel(&mut self, me: [u8; NAME_LEN], to: &Inbox) -> Result<&mut Producer> {
        if self.chans.get(self.last).is_some_and(|c| c.0 == to.id) {
            return Ok(&mut self.chans[self.last].1);
        }
        self.channel_slow(me, to)
    }

    #[cold]
    fn channel_slow(&mut self, me: [u8; NAME_LEN], to: &Inbox) -> Result<&mut Producer> {
        let i = match self.index.get(&to.id) {
            Some(&i) => i,
            None => {
                let (p, c) = ring::channel(CHANNEL_SLOTS, me);
                {
                    let mut fresh = to.fresh();
                    // Checked under the lock `shutdown` takes: no channel is left
                    // behind in a closed inbox.
                    if to.closed.load(Ordering::Acquire) {
                        return Err(Error::HostUnreach);
                    }
                    fresh.push(c);
                    to.nfresh.store(fresh.len(), Ordering::Release);
                }
                self.chans.push((to.id, p));
                self.index.insert(to.id, self.chans.len() - 1);
                self.chans.len() - 1
            }
        };
        self.last = i;
        Ok(&mut self.chans[i].1)
    }

    /// Forgets the channel to a peer that shut down.
    #[cold]
    fn forget(&mut self, id: u64) {
        if let Some(i) = self.index.remove(&id) {
            self.chans.swap_remove(i);
            if let Some(moved) = self.chans.get(i) {
                self.index.insert(moved.0, i);
            }
        }
    }
}

impl Transport for LoopbackEp {
    type Peer = Arc<Inbox>;
    type Sender = LoopbackTx;
    type Receiver = LoopbackRx;
    type Pull = NoPull;
    type Direct = Absent;
    type HeldBack = Absent;
    type RemoteWake = Absent;
    type Cm = Self;

    fn name(&self) -> &[u8] {
        &self.name
    }

    fn sender(&self) -> LoopbackTx {
        LoopbackTx {
            chans: Vec::new(),
            index: HashMap::new(),
            last: 0,
        }
    }

    fn receiver(&self) -> LoopbackRx {
        LoopbackRx { chans: Vec::new() }
    }

    #[inline]
    fn send(
        &self,
        tx: &mut LoopbackTx,
        to: &Arc<Inbox>,
        hdr: &Header,
        payload: &[&[u8]],
    ) -> Result<()> {
        if to.closed.load(Ordering::Acquire) {
            tx.forget(to.id);
            return Err(Error::HostUnreach);
        }
        let ch = tx.channel(self.name, to)?;
        if is_request(hdr.op) {
            if !ch.push(hdr, payload, INBOX_DEPTH) {
                return Err(Error::Again);
            }
        } else {
            ch.push_always(hdr, payload);
        }
        if let Some(w) = to.waker.get() {
            w.signal();
        }
        Ok(())
    }

    #[inline]
    fn poll<F: FnMut(&Header, &[u8], Payload<'_, NoPull>) -> bool>(
        &self,
        rx: &mut LoopbackRx,
        mut f: F,
    ) -> usize {
        if self.inbox.nfresh.load(Ordering::Acquire) != 0 {
            adopt(&self.inbox, rx);
        }
        let mut n = 0;
        let mut i = 0;
        while i < rx.chans.len() {
            match rx.chans[i].drain(&mut f, &mut n) {
                Drained::Empty => i += 1,
                Drained::Refused => break,
                // The sender is gone and everything it sent was handled.
                Drained::Finished => drop(rx.chans.swap_remove(i)),
            }
        }
        n
    }

    fn set_waker(&self, waker: Arc<Waiter>) {
        let _ = self.inbox.waker.set(waker);
    }

    fn shutdown(&self) {
        {
            // Under the lock new senders check `closed` with: no channel is added
            // after this. Channels already there still deliver what they hold.
            let _fresh = self.inbox.fresh();
            self.inbox.closed.store(true, Ordering::Release);
        }
        registry().remove(&self.inbox.id);
        self.cm.disconnect();
    }
}

/// Takes over the channels new senders opened.
#[cold]
fn adopt(inbox: &Inbox, rx: &mut LoopbackRx) {
    let mut fresh = inbox.fresh();
    rx.chans.append(&mut fresh);
    inbox.nfresh.store(0, Ordering::Release);
}

impl Drop for LoopbackEp {
    fn drop(&mut self) {
        self.shutdown();
        // Peers' AVs may keep the inbox alive: release the rings nobody will read.
        self.inbox.fresh().clear();
        self.inbox.nfresh.store(0, Ordering::Release);
    }
}

fn candidate(ep_type: EpType) -> Info {
    fabric::info::core_candidate(
        "loopback",
        Loopback::VERSION,
        ep_type,
        INJECT_SIZE,
        MAX_MSG_SIZE,
        1 << 16,
    )
}

impl Provider for Loopback {
    const NAME: &'static str = "loopback";
    const VERSION: u32 = 1 << 16;
    type InjectSize = InjectSize;
    const MAX_MSG_SIZE: usize = MAX_MSG_SIZE;

    type Peer = Arc<Inbox>;
    type Transport = LoopbackEp;

    fn candidates() -> Vec<Info> {
        // MSG last: the first info, what applications without hints take, stays RDM.
        let mut msg = candidate(EpType::Msg);
        // A connection has one peer and no AV: no source addresses to report, no
        // receive filtered by source, no receive contexts or AVs to name or share.
        let no_av = Caps::SOURCE | Caps::DIRECTED_RECV | Caps::NAMED_RX_CTX | Caps::SHARED_AV;
        msg.caps.remove(no_av);
        msg.tx_attr.caps.remove(no_av);
        msg.rx_attr.caps.remove(no_av);
        vec![candidate(EpType::Rdm), candidate(EpType::Dgram), msg]
    }

    fn open(_info: &Info) -> Result<LoopbackEp> {
        let id = next_id();
        let inbox = Arc::new(Inbox {
            id,
            waker: OnceLock::new(),
            closed: AtomicBool::new(false),
            fresh: Mutex::new(Vec::new()),
            nfresh: AtomicUsize::new(0),
        });
        registry().insert(id, Arc::downgrade(&inbox));
        let name = id.to_le_bytes();
        Ok(LoopbackEp {
            inbox,
            name,
            cm: Arc::new(CmSide {
                name,
                events: Mutex::new(VecDeque::new()),
                peer: Mutex::new(None),
            }),
        })
    }

    fn resolve(name: &[u8]) -> Result<Arc<Inbox>> {
        let id: [u8; NAME_LEN] = name.try_into().map_err(|_| Error::Inval)?;
        registry()
            .get(&u64::from_le_bytes(id))
            .and_then(Weak::upgrade)
            .ok_or(Error::AddrNotAvail)
    }

    fn name_from_svc(node: &str, service: &str) -> Result<Vec<u8>> {
        if !matches!(node, "" | "loopback" | "localhost") {
            return Err(Error::AddrNotAvail);
        }
        let id: u64 = service.parse().map_err(|_| Error::Inval)?;
        Ok(id.to_le_bytes().to_vec())
    }

    fn straddr(name: &[u8]) -> String {
        match <[u8; NAME_LEN]>::try_from(name) {
            Ok(b) => format!("fi_loopback://{}", u64::from_le_bytes(b)),
            Err(_) => format!("fi_loopback://invalid({} bytes)", name.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn open() -> (LoopbackEp, LoopbackTx, LoopbackRx) {
        let info = Loopback::candidates().remove(0);
        let ep = Loopback::open(&info).unwrap();
        let (tx, rx) = (ep.sender(), ep.receiver());
        (ep, tx, rx)
    }

    fn req(tag: u64) -> Header {
        Header {
            op: Op::Tagged as u8,
            tag,
            ..Header::default()
        }
    }

    fn resp(tag: u64) -> Header {
        Header {
            op: Op::Ack as u8,
            tag,
            ..Header::default()
        }
    }

    /// Drains `ep`, returning `(source id, tag)` per packet.
    fn drain(ep: &LoopbackEp, rx: &mut LoopbackRx) -> Vec<(u64, u64)> {
        let mut out = vec![];
        ep.poll(rx, |h, src, p| {
            assert_eq!(
                p.inline().map(|s| s.to_vec()),
                Some(h.tag.to_le_bytes().to_vec())
            );
            out.push((u64::from_le_bytes(src.try_into().unwrap()), h.tag));
            true
        });
        out
    }

    #[test]
    fn request_backpressure_but_responses_always_accepted() {
        let (a, mut atx, _arx) = open();
        let (b, _btx, mut brx) = open();
        let to_b = Loopback::resolve(b.name()).unwrap();
        for i in 0..INBOX_DEPTH as u64 {
            a.send(&mut atx, &to_b, &req(i), &[&i.to_le_bytes()])
                .unwrap();
        }
        let x = u64::MAX.to_le_bytes();
        assert_eq!(
            a.send(&mut atx, &to_b, &req(u64::MAX), &[&x]),
            Err(Error::Again)
        );
        // Responses fill the ring, then spill, and are never refused.
        let extra = (CHANNEL_SLOTS + 10) as u64;
        for i in INBOX_DEPTH as u64..INBOX_DEPTH as u64 + extra {
            a.send(&mut atx, &to_b, &resp(i), &[&i.to_le_bytes()])
                .unwrap();
        }
        // While responses are spilled a request would overtake them: refused.
        assert_eq!(
            a.send(&mut atx, &to_b, &req(u64::MAX), &[&x]),
            Err(Error::Again)
        );
        let got = drain(&b, &mut brx);
        let a_id = u64::from_le_bytes(a.name().try_into().unwrap());
        let want: Vec<_> = (0..INBOX_DEPTH as u64 + extra).map(|i| (a_id, i)).collect();
        assert_eq!(got, want);
        // Drained: requests flow again.
        a.send(&mut atx, &to_b, &req(7), &[&7u64.to_le_bytes()])
            .unwrap();
        assert_eq!(drain(&b, &mut brx), [(a_id, 7)]);
    }

    #[test]
    fn host_unreach_after_shutdown_and_channel_forgotten() {
        let (a, mut atx, _arx) = open();
        let (b, _btx, mut brx) = open();
        let to_b = Loopback::resolve(b.name()).unwrap();
        a.send(&mut atx, &to_b, &req(1), &[&1u64.to_le_bytes()])
            .unwrap();
        assert_eq!(atx.chans.len(), 1);
        b.shutdown();
        assert_eq!(
            a.send(&mut atx, &to_b, &req(2), &[&2u64.to_le_bytes()]),
            Err(Error::HostUnreach)
        );
        assert!(atx.chans.is_empty());
        // What arrived before the shutdown is still delivered.
        assert_eq!(drain(&b, &mut brx).len(), 1);
        assert_eq!(Loopback::resolve(b.name()).err(), Some(Error::AddrNotAvail));
        // A sender that never talked to it gets the same answer.
        let (c, mut ctx, _crx) = open();
        assert_eq!(
            c.send(&mut ctx, &to_b, &req(3), &[&3u64.to_le_bytes()]),
            Err(Error::HostUnreach)
        );
    }

    #[test]
    fn finished_channels_are_dropped_by_the_receiver() {
        let (b, _btx, mut brx) = open();
        let to_b = Loopback::resolve(b.name()).unwrap();
        {
            let (a, mut atx, _arx) = open();
            a.send(&mut atx, &to_b, &req(1), &[&1u64.to_le_bytes()])
                .unwrap();
        }
        assert_eq!(drain(&b, &mut brx).len(), 1);
        assert!(brx.chans.is_empty());
    }

    /// Several sender threads (one endpoint each) and one receiver: every packet
    /// arrives once, in order per sender, with backpressure along the way.
    #[test]
    fn per_sender_fifo_across_threads() {
        const SENDERS: usize = 3;
        const N: u64 = 20_000;
        let (b, _btx, mut brx) = open();
        let name = b.name().to_vec();
        let senders: Vec<_> = (0..SENDERS)
            .map(|_| {
                let name = name.clone();
                thread::spawn(move || {
                    let (a, mut atx, _arx) = open();
                    let to = Loopback::resolve(&name).unwrap();
                    let mut i = 0;
                    while i < N {
                        match a.send(&mut atx, &to, &req(i), &[&i.to_le_bytes()]) {
                            Ok(()) => i += 1,
                            Err(Error::Again) => thread::yield_now(),
                            Err(e) => panic!("send: {e}"),
                        }
                    }
                    // Keep the endpoint (its address) alive until everything is read.
                    (u64::from_le_bytes(a.name().try_into().unwrap()), a)
                })
            })
            .collect();
        let mut next: HashMap<u64, u64> = HashMap::new();
        let mut total = 0;
        while total < SENDERS as u64 * N {
            for (src, tag) in drain(&b, &mut brx) {
                let e = next.entry(src).or_default();
                assert_eq!(tag, *e);
                *e += 1;
                total += 1;
            }
            thread::yield_now();
        }
        for s in senders {
            let (id, _ep) = s.join().unwrap();
            assert_eq!(next[&id], N);
        }
    }
}
