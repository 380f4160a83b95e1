//! The per-endpoint transport: connections made on first use, one per direction.
//!
//! Each endpoint listens on one socket. The first packet to a peer opens a connection
//! to it (non-blocking connect, then the hello, then frames); the peer's listener
//! accepts it and reads only the hello until it passed. Traffic from A to B (A's
//! requests and A's responses to B's requests) always goes over the connection A
//! opened, and B never writes to it. So two endpoints that start talking to each other
//! at the same moment do not race for one connection: each keeps its own outgoing one,
//! and nothing has to be torn down or re-sent (the simultaneous-connect problem does
//! not arise). Per-pair order holds because every packet from A to B takes one
//! connection at a time: an idle connection, or the least recently used one when an
//! endpoint has as many as it may keep, is closed by its owner with a goodbye frame,
//! and the next one opens only after the peer has read to the goodbye (`idle`).
//!
//! The sender owns its outgoing connections' write side ([`TcpTx`]); the receiver
//! ([`TcpRx`]) owns the accepted connections and watches the outgoing ones only to
//! learn that they broke. Both sides reach the shared state through one `Arc`, and the
//! core serializes each side with the stack's lock family, so the fast path takes no
//! lock of its own.
//!
//! Requests that wait for a response (reads, atomics, writes and acknowledged messages)
//! are announced to the receiver through a bounded queue before they are written; the
//! receiver keeps them in a table keyed by (transmit context, request id). A response
//! is handed to the core only if it answers a request of that table sent to the
//! endpoint it comes from (anything else is a stranger's or a confused peer's and is
//! dropped). When a connection to or from a peer breaks (reset, end of file, garbage,
//! keepalive, or retransmissions unanswered for [`LIVENESS`]: `live`), every request
//! still in the table for that peer is answered by a synthesized response with status
//! `FI_EHOSTUNREACH`, and later sends to it fail with `HostUnreach`. A connection that ends with a goodbye did not break:
//! the receiver closes its side and fails nothing.
//!
//! Flow control: a request goes out only when the connection has nothing queued; what
//! the kernel does not take at once is queued (so the caller's buffer is free when
//! `send` returns) and later requests get `FI_EAGAIN` until the queue is written out
//! by progress ([`HeldBack`]). While anything is queued the engine holds the
//! completions of sends back, so a send is reported complete only once its bytes
//! are with the kernel, and needs no later progress call to reach the peer. Responses
//! are queued behind it and never refused. A frame of more than [`LARGE_TX`] bytes is written by `send` itself from the
//! caller's buffers, waiting for the socket within a bound, and only what is left
//! then is queued (`large`). On
//! the receiving side each accepted connection has a buffer of [`RX_BUF`] bytes. A
//! frame larger than that is read straight into its destination when the core has one
//! (`place`: a posted receive, an RMA write's region, a read's buffer, claimed when
//! the header arrives); otherwise it is staged whole before it is handed over, within
//! a budget of [`STAGE_BUDGET`] bytes per endpoint: beyond it the receiver stops
//! reading that connection until staged frames were consumed, and TCP's own flow
//! control stops the sender. A receiver that stops polling thus stops its peers' sends
//! with `FI_EAGAIN` after at most a socket buffer plus one message per connection.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric::provider::wire::{Header, Op};
use fabric::provider::{Absent, Claim, HeldBack, RemoteWake, Sink};
use fabric::waitobj::Waiter;
use fabric::{Error, NoPull, Payload, Result, SharedBytes, Transport};
use rustix::event::epoll;
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvFlags, SendAncillaryBuffer, SendFlags, SocketFlags, SocketType,
};

use crate::conn::{Conn, LinkEnd};
use crate::frame::{self, HDR_LEN, HELLO_LEN};
use crate::name::{Name, Raw};
use crate::place::{self, Step};
use crate::wake::Wake;
use crate::MAX_MSG_SIZE;
pub use idle::{DEFAULT_IDLE, DEFAULT_MAX_CONNS, IDLE_ENV, MAX_CONNS_ENV};

mod idle;
mod large;
mod live;
pub use large::{large_tx, tx_bound, LargeTx, LARGE_TX, TX_STALL};
pub use live::LIVENESS;

/// Receive buffer of one accepted connection: frames up to this size are read in
/// place, larger ones into their destination or, without one, staged (see
/// [`STAGE_BUDGET`]).
pub const RX_BUF: usize = 256 << 10;
/// Bytes an endpoint may stage beyond its connections' receive buffers (frames larger
/// than [`RX_BUF`] awaiting their last byte or their consumer).
pub const STAGE_BUDGET: usize = 2 * MAX_MSG_SIZE;
/// A connection's send queue keeps at most this much capacity once it is written
/// out: the rest of a large message's queue is released.
const OUT_KEEP: usize = 256 << 10;
/// Requests awaiting a response announced to the receiver and not yet taken up by it.
const TRACK_QUEUE: usize = 4096;
/// Accepted connections still in their hello at once; more are closed at once.
const MAX_HANDSHAKING: usize = 64;
/// How long an accepted connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Reads from one connection per poll, so one busy peer cannot starve the others.
const READS_PER_POLL: usize = 4;
/// Payload slices written with one `sendmsg` (the core's IOV limit); more are copied.
const MAX_IOV: usize = 8;
/// Keepalive: idle time before the first probe, probe interval, probes: a peer host
/// that vanishes while nothing is in flight is found within about 10 s (with data in
/// flight, `live` finds it).
const KEEPIDLE: Duration = Duration::from_secs(4);
const KEEPINTVL: Duration = Duration::from_secs(1);
const KEEPCNT: u32 = 5;

/// Departed peers a sender remembers (sends to them fail at once). One forgotten costs
/// only a connection attempt: its process is gone, so the attempt is refused or meets
/// another incarnation, whose hello does not match, and the send still fails.
const GONE_KEEP: usize = 4096;

/// Readiness events taken per poll; more wait for the next one.
const EVENTS: usize = 32;
/// Token of the listener in the endpoint's epoll set; connections use their id.
const LISTENER: u64 = 0;

/// A resolved peer: its decoded name and its bytes.
#[derive(Debug, Clone, Copy)]
pub struct TcpPeer {
    pub(crate) name: Name,
    pub(crate) raw: Raw,
}

/// An outgoing connection, shared by the sender (which writes it) and the receiver
/// (which learns when it breaks).
pub(crate) struct Link {
    pub(crate) id: u64,
    pub(crate) fd: OwnedFd,
    pub(crate) peer: Name,
    pub(crate) dead: AtomicBool,
    idle: idle::LinkIdle,
}

impl Link {
    /// A connection to `peer` on `fd`, known to the endpoint's epoll set as `id`.
    pub(crate) fn new(id: u64, fd: OwnedFd, peer: Name) -> Link {
        Link {
            id,
            fd,
            peer,
            dead: AtomicBool::new(false),
            idle: idle::LinkIdle::default(),
        }
    }
}

impl LinkEnd for Link {
    fn key(&self) -> Raw {
        self.peer.raw()
    }

    fn end(&self) {
        kill(self);
    }
}

/// A request announced to the receiver before it is written.
struct Rec {
    tx_idx: u16,
    req: u64,
    op: Op,
    link: u64,
}

pub(crate) struct Shared {
    pub(crate) me: Name,
    listener: OwnedFd,
    pub(crate) epoll: OwnedFd,
    /// Outgoing connections the receiver has not adopted yet.
    pub(crate) fresh: Mutex<Vec<Arc<Link>>>,
    pub(crate) nfresh: AtomicUsize,
    /// Outgoing connections with bytes queued: progress flushes while non-zero.
    held: AtomicUsize,
    /// Records in the track queue, so the sender never blocks on it.
    queued: AtomicUsize,
    pub(crate) next_id: AtomicU64,
    closed: AtomicBool,
    wake: Wake,
    idle: idle::Timer,
    /// An MSG endpoint: it listens nowhere and has at most the one connection that
    /// connection management made.
    pub(crate) msg: bool,
    pub(crate) conn: Conn<Link>,
}

impl Shared {
    pub(crate) fn fresh(&self) -> MutexGuard<'_, Vec<Arc<Link>>> {
        self.fresh.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The two ends of the announce queue, until the sender and the receiver take them.
type Queue = (Option<SyncSender<Rec>>, Option<Receiver<Rec>>);

/// The transport of one tcp endpoint.
pub struct TcpEp {
    pub(crate) sh: Arc<Shared>,
    raw: Raw,
    queue: Mutex<Queue>,
    watcher: Option<JoinHandle<()>>,
}

/// The sending state of an endpoint ([`Transport::Sender`]): its outgoing connections.
pub struct TcpTx {
    sh: Arc<Shared>,
    links: Vec<TxLink>,
    index: HashMap<Raw, usize>,
    last: usize,
    track: Option<SyncSender<Rec>>,
    /// Peers whose connection broke: sends to them fail. Only the name is kept (the
    /// connection and its descriptor are released, see [`TcpTx::reap`]), so a process
    /// that talks to many short-lived peers holds no descriptor per departed one; and
    /// only the last [`GONE_KEEP`] of them, oldest first out (`gone_order`).
    gone: HashSet<Raw>,
    gone_order: VecDeque<Raw>,
    idle: idle::TxIdle,
}

struct TxLink {
    key: Raw,
    link: Arc<Link>,
    /// Bytes the kernel did not take yet, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    idle: idle::Use,
    stall: live::Stall,
}

impl TxLink {
    #[inline]
    fn queued(&self) -> bool {
        self.sent < self.out.len()
    }
}

/// The receiving state of an endpoint ([`Transport::Receiver`]).
pub struct TcpRx {
    sh: Arc<Shared>,
    ins: HashMap<u64, InLink>,
    outs: HashMap<u64, Arc<Link>>,
    track: Option<Receiver<Rec>>,
    tracked: HashMap<(u16, u64), (u64, Op)>,
    /// Synthesized error responses not yet taken by the core.
    failed: VecDeque<(Header, Raw)>,
    /// Claims of connections that broke mid-payload, to hand back failed.
    orphans: VecDeque<Claim>,
    /// Accepted connections that may have bytes to handle.
    busy: Vec<u64>,
    staged: usize,
    handshaking: usize,
}

struct InLink {
    fd: OwnedFd,
    peer: Option<(Name, Raw)>,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    deadline: Instant,
    in_busy: bool,
    /// The frame whose payload is being read straight into its destination.
    placing: Option<Claim>,
}

/// What serving one accepted connection came to.
enum Served {
    /// Nothing more to read now.
    Idle,
    /// More may be there (read budget used, or waiting for staging room).
    More,
    /// The core refused a packet: polling stops.
    Refused,
    /// The connection failed (end of file, error, or bytes that do not pass).
    Closed,
    /// The peer closed the connection with a goodbye, after everything it sent.
    Bye,
}

/// Errors that only mean "not yet" on a non-blocking socket.
#[inline]
pub(crate) fn not_yet(e: Errno) -> bool {
    e == Errno::AGAIN || e == Errno::INPROGRESS || e == Errno::ALREADY || e == Errno::NOTCONN
}

pub(crate) fn family(a: &SocketAddr) -> AddressFamily {
    match a {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    }
}

pub(crate) fn tune(fd: &OwnedFd) {
    use rustix::net::sockopt;
    // Small packets go out at once; the liveness settings bound how long a vanished
    // peer host goes unnoticed. Failures only lose the tuning.
    let _ = sockopt::set_tcp_nodelay(fd, true);
    let _ = sockopt::set_socket_keepalive(fd, true);
    let _ = sockopt::set_tcp_keepidle(fd, KEEPIDLE);
    let _ = sockopt::set_tcp_keepintvl(fd, KEEPINTVL);
    let _ = sockopt::set_tcp_keepcnt(fd, KEEPCNT);
    // No TCP_USER_TIMEOUT: it also breaks a connection whose peer only stopped reading
    // (a zero window for that long); `live` bounds retransmissions instead.
}

pub(crate) fn errno_to(e: Errno) -> Error {
    match e {
        Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM => Error::NoMem,
        Errno::ADDRNOTAVAIL => Error::AddrNotAvail,
        Errno::ADDRINUSE => Error::AddrInUse,
        _ => Error::Io,
    }
}

impl TcpEp {
    /// Opens an endpoint listening on `bind` (port 0: any free port).
    pub fn open(bind: SocketAddr) -> Result<TcpEp> {
        TcpEp::open_with(bind, false)
    }

    /// Opens an MSG endpoint at `bind`: its socket is bound, which reserves the
    /// address its name carries, but never listens (connection management makes its
    /// one connection).
    pub fn open_msg(bind: SocketAddr) -> Result<TcpEp> {
        TcpEp::open_with(bind, true)
    }

    fn open_with(bind: SocketAddr, msg: bool) -> Result<TcpEp> {
        use rustix::net::sockopt;
        let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
        let listener = rustix::net::socket_with(family(&bind), SocketType::STREAM, flags, None)
            .map_err(errno_to)?;
        if !msg {
            let _ = sockopt::set_socket_reuseaddr(&listener, true);
        }
        rustix::net::bind(&listener, &bind).map_err(errno_to)?;
        if !msg {
            rustix::net::listen(&listener, 1024).map_err(errno_to)?;
        }
        let local = rustix::net::getsockname(&listener).map_err(errno_to)?;
        let port = SocketAddr::try_from(local).map_err(|_| Error::Io)?.port();
        let mut addr = bind;
        addr.set_port(port);
        let me = Name {
            addr,
            nonce: crate::fresh_nonce(),
        };
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(errno_to)?;
        if !msg {
            epoll::add(
                &epoll,
                &listener,
                epoll::EventData::new_u64(LISTENER),
                epoll::EventFlags::IN,
            )
            .map_err(errno_to)?;
        }
        let idle = idle::Timer::open(&epoll)?;
        let sh = Arc::new(Shared {
            me,
            listener,
            epoll,
            fresh: Mutex::new(Vec::new()),
            nfresh: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            next_id: AtomicU64::new(LISTENER + 1),
            closed: AtomicBool::new(false),
            wake: Wake::default(),
            idle,
            msg,
            conn: Conn::default(),
        });
        let w = sh.clone();
        let watcher = std::thread::Builder::new()
            .name("fabric-tcp-wake".into())
            .spawn(move || w.wake.run(&w.epoll))
            .map_err(|_| Error::NoMem)?;
        let (stx, srx) = sync_channel(TRACK_QUEUE);
        Ok(TcpEp {
            raw: me.raw(),
            sh,
            queue: Mutex::new((Some(stx), Some(srx))),
            watcher: Some(watcher),
        })
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for TcpEp {
    fn drop(&mut self) {
        self.sh.wake.close();
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

impl TcpTx {
    /// The outgoing connection to `to`, opened on first use.
    #[inline]
    fn link(&mut self, to: &TcpPeer) -> Result<usize> {
        if self.links.get(self.last).is_some_and(|l| l.key == to.raw) {
            return Ok(self.last);
        }
        self.link_slow(to)
    }

    #[cold]
    fn link_slow(&mut self, to: &TcpPeer) -> Result<usize> {
        let i = match self.index.get(&to.raw) {
            Some(&i) => i,
            // An MSG endpoint sends only on the connection it made or accepted.
            None if self.sh.msg => {
                let link = self.sh.conn.link(&to.raw).ok_or(Error::HostUnreach)?;
                self.links.push(TxLink {
                    key: to.raw,
                    link,
                    out: Vec::new(),
                    sent: 0,
                    idle: idle::Use::default(),
                    stall: live::Stall::default(),
                });
                self.index.insert(to.raw, self.links.len() - 1);
                self.set_timer(true);
                self.links.len() - 1
            }
            None => {
                if self.gone.contains(&to.raw) {
                    return Err(Error::HostUnreach);
                }
                self.reap();
                let l = self.open(to)?;
                self.links.push(l);
                self.sh.held.fetch_add(1, Ordering::Relaxed);
                self.index.insert(to.raw, self.links.len() - 1);
                self.links.len() - 1
            }
        };
        self.links[i].idle.touch(&mut self.idle);
        self.last = i;
        Ok(i)
    }

    /// Drops the connections that broke, remembering their peers in `gone`. Called
    /// before a connection is opened, so the broken ones do not pile up (each holds a
    /// descriptor) however many peers come and go; the receiver has failed their
    /// requests already, or does so when it learns of the break from its own copy.
    #[cold]
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.links.len() {
            if !self.links[i].link.dead.load(Ordering::Acquire) {
                i += 1;
                continue;
            }
            let l = self.links.swap_remove(i);
            if l.queued() {
                self.sh.held.fetch_sub(1, Ordering::Relaxed);
            }
            self.index.remove(&l.key);
            self.remember_gone(l.key);
            if let Some(moved) = self.links.get(i) {
                self.index.insert(moved.key, i);
            }
        }
    }

    /// Puts `key` in `gone`, forgetting the oldest beyond [`GONE_KEEP`].
    fn remember_gone(&mut self, key: Raw) {
        if self.gone.insert(key) {
            self.gone_order.push_back(key);
        }
        if self.gone_order.len() > GONE_KEEP {
            let old = self.gone_order.pop_front().expect("over the limit");
            self.gone.remove(&old);
        }
    }

    /// Writes out queued bytes of link `i`. Returns whether the queue is empty; a
    /// connection that fails is marked dead (the receiver answers what it tracked).
    fn flush(&mut self, i: usize) -> bool {
        let l = &mut self.links[i];
        if !l.queued() {
            return true;
        }
        if !l.write_out() {
            return false;
        }
        self.sh.held.fetch_sub(1, Ordering::Relaxed);
        true
    }
}

impl TxLink {
    /// Writes out the queued bytes. Returns whether none are left (written, or dropped
    /// with a connection that failed, which is marked dead).
    fn write_out(&mut self) -> bool {
        while self.queued() {
            match rustix::net::send(&self.link.fd, &self.out[self.sent..], SendFlags::NOSIGNAL) {
                Ok(n) => self.sent += n,
                Err(Errno::INTR) => {}
                Err(e) if not_yet(e) => return false,
                Err(_) => {
                    kill(&self.link);
                    break;
                }
            }
        }
        self.out.clear();
        self.sent = 0;
        if self.out.capacity() > OUT_KEEP {
            self.out.shrink_to(OUT_KEEP);
        }
        true
    }
}

/// Marks an outgoing connection broken and shuts it down, so that the receiver's
/// epoll reports it and the peer sees it end.
pub(crate) fn kill(link: &Link) {
    link.dead.store(true, Ordering::Release);
    let _ = rustix::net::shutdown(&link.fd, rustix::net::Shutdown::Both);
}

/// Opens a connection to `to` and queues the hello.
fn connect(sh: &Arc<Shared>, to: &TcpPeer) -> Result<TxLink> {
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    let fd = rustix::net::socket_with(family(&to.name.addr), SocketType::STREAM, flags, None)
        .map_err(|e| match errno_to(e) {
            Error::NoMem => Error::Again,
            _ => Error::HostUnreach,
        })?;
    tune(&fd);
    match rustix::net::connect(&fd, &to.name.addr) {
        Ok(()) => {}
        Err(e) if not_yet(e) => {}
        Err(_) => return Err(Error::HostUnreach),
    }
    let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
    epoll::add(
        &sh.epoll,
        &fd,
        epoll::EventData::new_u64(id),
        epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
    )
    .map_err(|_| Error::Again)?;
    let link = Arc::new(Link::new(id, fd, to.name));
    {
        let mut f = sh.fresh();
        f.push(link.clone());
        sh.nfresh.store(f.len(), Ordering::Release);
    }
    Ok(TxLink {
        key: to.raw,
        link,
        out: frame::hello(&sh.me, &to.name).to_vec(),
        sent: 0,
        idle: idle::Use::default(),
        stall: live::Stall::default(),
    })
}

/// Appends the bytes of `parts` from byte `skip` on to `out`.
fn append(out: &mut Vec<u8>, parts: &[&[u8]], mut skip: usize) {
    for p in parts {
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        out.extend_from_slice(&p[skip..]);
        skip = 0;
    }
}

impl Transport for TcpEp {
    type Peer = TcpPeer;
    type Sender = TcpTx;
    type Receiver = TcpRx;
    type Pull = NoPull;
    type Direct = Absent;
    type HeldBack = TcpEp;
    type RemoteWake = TcpEp;
    type Cm = TcpEp;

    fn name(&self) -> &[u8] {
        self.raw.as_bytes()
    }

    fn sender(&self) -> TcpTx {
        TcpTx {
            sh: self.sh.clone(),
            links: Vec::new(),
            index: HashMap::new(),
            last: 0,
            track: self.queue().0.clone(),
            gone: HashSet::new(),
            gone_order: VecDeque::new(),
            idle: idle::TxIdle::new(&self.sh.idle),
        }
    }

    fn receiver(&self) -> TcpRx {
        TcpRx {
            sh: self.sh.clone(),
            ins: HashMap::new(),
            outs: HashMap::new(),
            track: self.queue().1.take(),
            tracked: HashMap::new(),
            failed: VecDeque::new(),
            orphans: VecDeque::new(),
            busy: Vec::new(),
            staged: 0,
            handshaking: 0,
        }
    }

    fn send(&self, tx: &mut TcpTx, to: &TcpPeer, hdr: &Header, payload: &[&[u8]]) -> Result<()> {
        let i = match tx.link(to) {
            Ok(i) => i,
            Err(e) => return tx.refused(e, to, hdr, payload),
        };
        let response = frame::is_response(hdr.op);
        if tx.links[i].link.dead.load(Ordering::Acquire) {
            return Err(Error::HostUnreach);
        }
        if !response && tx.links[i].queued() && !tx.flush(i) {
            return Err(Error::Again);
        }
        if tx.links[i].link.dead.load(Ordering::Acquire) {
            return Err(Error::HostUnreach);
        }
        let asks = frame::answered_by(hdr).filter(|_| !response);
        if let Some(op) = asks {
            // Announced before it is written: the response cannot overtake it. Once
            // announced the request is answered by the receiver, truly or with an
            // error, so this send no longer fails.
            if self.sh.queued.load(Ordering::Acquire) >= TRACK_QUEUE {
                return Err(Error::Again);
            }
            let rec = Rec {
                tx_idx: hdr.tx_idx,
                req: hdr.req,
                op,
                link: tx.links[i].link.id,
            };
            match tx.track.as_ref().map(|t| t.try_send(rec)) {
                Some(Ok(())) => {
                    self.sh.queued.fetch_add(1, Ordering::AcqRel);
                    tx.links[i].idle.ask();
                }
                _ => return Err(Error::Again),
            }
        }
        let l = &mut tx.links[i];
        let was_queued = l.queued();
        let total = HDR_LEN + payload.iter().map(|p| p.len()).sum::<usize>();
        if total > LARGE_TX {
            return self.send_large(l, hdr, payload, total, asks.is_some() || response);
        }
        if was_queued {
            append(&mut l.out, &[hdr.bytes()], 0);
            append(&mut l.out, payload, 0);
        } else {
            write_frame(l, hdr, payload, total);
            if l.queued() {
                self.sh.held.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn poll<F: FnMut(&Header, &[u8], Payload<'_, NoPull>) -> bool>(
        &self,
        rx: &mut TcpRx,
        f: F,
    ) -> usize {
        self.poll_into(rx, f)
    }

    fn poll_into<K: Sink<NoPull>>(&self, rx: &mut TcpRx, mut sink: K) -> usize {
        rx.poll(&mut sink)
    }

    fn set_waker(&self, waker: Arc<Waiter>) {
        self.sh.wake.set_waker(waker);
    }

    fn shutdown(&self) {
        self.sh.conn.close();
        self.sh.closed.store(true, Ordering::Release);
        let _ = rustix::net::shutdown(&self.sh.listener, rustix::net::Shutdown::Both);
    }
}

/// Writes one frame on an idle connection straight from the caller's buffers; what the
/// kernel does not take is queued. A connection that fails is marked dead.
#[inline]
fn write_frame(l: &mut TxLink, hdr: &Header, payload: &[&[u8]], total: usize) {
    let written = if payload.len() <= MAX_IOV {
        let mut iov = [IoSlice::new(&[]); MAX_IOV + 1];
        iov[0] = IoSlice::new(hdr.bytes());
        for (d, p) in iov[1..].iter_mut().zip(payload) {
            *d = IoSlice::new(p);
        }
        loop {
            match rustix::net::sendmsg(
                &l.link.fd,
                &iov[..payload.len() + 1],
                &mut SendAncillaryBuffer::default(),
                SendFlags::NOSIGNAL,
            ) {
                Ok(n) => break n,
                Err(Errno::INTR) => {}
                Err(e) if not_yet(e) => break 0,
                Err(_) => {
                    kill(&l.link);
                    return;
                }
            }
        }
    } else {
        0
    };
    if written < total {
        append(&mut l.out, &[hdr.bytes()], written);
        append(&mut l.out, payload, written.saturating_sub(HDR_LEN));
    }
}

impl TcpEp {
    /// Sends a frame of more than [`LARGE_TX`] bytes on link `l` from the caller's
    /// buffers (see `large`). A connection that fails meanwhile fails the send, unless
    /// it `must_not_fail`: a response, or a request announced to the receiver, which
    /// answers it with an error instead.
    #[cold]
    fn send_large(
        &self,
        l: &mut TxLink,
        hdr: &Header,
        payload: &[&[u8]],
        total: usize,
        must_not_fail: bool,
    ) -> Result<()> {
        let was_queued = l.queued();
        let broken = matches!(
            l.send_large(hdr.bytes(), payload, total),
            large::Sent::Broken
        );
        if broken {
            kill(&l.link);
            l.out.clear();
            l.sent = 0;
        }
        match (was_queued, l.queued()) {
            (false, true) => {
                self.sh.held.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.sh.held.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        if broken && !must_not_fail {
            return Err(Error::HostUnreach);
        }
        Ok(())
    }
}

impl HeldBack<TcpEp> for TcpEp {
    #[inline]
    fn pending(t: &TcpEp) -> bool {
        t.sh.held.load(Ordering::Relaxed) != 0
    }

    /// Queued bytes only: the held-back count also carries the scan timer's request,
    /// which holds no send. Called on the sender's side, whose flushes and scans do not
    /// run meanwhile; only the receiver's timer tick (count raised, then the flag) can.
    /// The flag is read first: a tick between the loads then counts once too many,
    /// holding a completion until the next progress call, never once too few.
    #[inline]
    fn holds_sends(t: &TcpEp) -> bool {
        let scan = usize::from(t.sh.idle.scan_requested());
        t.sh.held.load(Ordering::Relaxed) > scan
    }

    fn flush(_t: &TcpEp, tx: &mut TcpTx) {
        for i in 0..tx.links.len() {
            tx.flush(i);
        }
        tx.idle_progress();
    }
}

impl RemoteWake<TcpEp> for TcpEp {
    fn arm(t: &TcpEp, target: (std::os::fd::RawFd, u64)) {
        t.sh.wake.arm(target);
    }
}

impl TcpRx {
    fn poll<K: Sink<NoPull>>(&mut self, sink: &mut K) -> usize {
        if self.sh.closed.load(Ordering::Acquire) {
            if !self.ins.is_empty() {
                self.close_all();
            }
            return 0;
        }
        if self.sh.queued.load(Ordering::Acquire) != 0 {
            self.take_records();
        }
        let mut n = 0;
        if (!self.failed.is_empty() || !self.orphans.is_empty())
            && !self.deliver_failed(sink, &mut n)
        {
            return n;
        }
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut events = [epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        }; EVENTS];
        if let Ok(k) = epoll::wait(&self.sh.epoll, &mut events[..], Some(&zero)) {
            for ev in &events[..k] {
                let id = ev.data.u64();
                if id == LISTENER {
                    self.accept();
                } else if let Some(l) = self.ins.get_mut(&id) {
                    if !l.in_busy {
                        l.in_busy = true;
                        self.busy.push(id);
                    }
                } else if id == idle::TIMER {
                    self.tick();
                } else if !(self.sh.msg && self.adopt_conn(id)) {
                    self.check_out(id);
                }
            }
        }
        let mut i = 0;
        while i < self.busy.len() {
            let id = self.busy[i];
            match self.serve(id, sink, &mut n) {
                Served::More => i += 1,
                Served::Idle => {
                    self.busy.swap_remove(i);
                    if let Some(l) = self.ins.get_mut(&id) {
                        l.in_busy = false;
                    }
                }
                Served::Refused => return n,
                Served::Closed => {
                    self.busy.swap_remove(i);
                    self.close_in(id);
                }
                Served::Bye => {
                    self.busy.swap_remove(i);
                    self.finish_in(id);
                }
            }
        }
        if !self.failed.is_empty() || !self.orphans.is_empty() {
            self.deliver_failed(sink, &mut n);
        }
        if self.handshaking != 0 {
            self.expire();
        }
        n
    }

    #[cold]
    fn take_records(&mut self) {
        take_records(
            &self.sh,
            &mut self.track,
            &mut self.tracked,
            &mut self.outs,
            &mut self.failed,
        );
    }

    fn adopt(&mut self) {
        adopt(&self.sh, &mut self.outs);
    }

    /// Takes up the connection `id` of an MSG endpoint, which connection management
    /// made and handed over with its handshake done: read like an accepted connection
    /// whose hello passed, and written by the sender as an outgoing one.
    #[cold]
    fn adopt_conn(&mut self, id: u64) -> bool {
        let Some((fd, peer)) = self.sh.conn.take_in(id) else {
            return false;
        };
        self.adopt();
        self.ins.insert(
            id,
            InLink {
                fd,
                peer: Some((peer, peer.raw())),
                buf: vec![0u8; RX_BUF],
                lo: 0,
                hi: 0,
                deadline: Instant::now(),
                in_busy: true,
                placing: None,
            },
        );
        self.busy.push(id);
        true
    }

    fn deliver_failed<K: Sink<NoPull>>(&mut self, sink: &mut K, n: &mut usize) -> bool {
        // A payload cut short is not partly delivered: its operation fails.
        while let Some(c) = self.orphans.pop_front() {
            sink.claimed(c, Err(Error::HostUnreach));
            *n += 1;
        }
        while let Some((hdr, src)) = self.failed.front() {
            if !sink.packet(
                hdr,
                src.as_bytes(),
                Payload::Inline(SharedBytes::from(&[][..])),
            ) {
                return false;
            }
            self.failed.pop_front();
            *n += 1;
        }
        true
    }

    #[cold]
    fn accept(&mut self) {
        loop {
            let fd = match rustix::net::accept_with(
                &self.sh.listener,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) => fd,
                Err(Errno::INTR) | Err(Errno::CONNABORTED) => continue,
                Err(_) => return,
            };
            if self.handshaking >= MAX_HANDSHAKING {
                continue;
            }
            tune(&fd);
            let id = self.sh.next_id.fetch_add(1, Ordering::Relaxed);
            if epoll::add(
                &self.sh.epoll,
                &fd,
                epoll::EventData::new_u64(id),
                epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
            )
            .is_err()
            {
                continue;
            }
            self.handshaking += 1;
            self.ins.insert(
                id,
                InLink {
                    fd,
                    peer: None,
                    buf: vec![0u8; HELLO_LEN.max(HDR_LEN)],
                    lo: 0,
                    hi: 0,
                    deadline: Instant::now() + HELLO_TIMEOUT,
                    in_busy: true,
                    placing: None,
                },
            );
            self.busy.push(id);
        }
    }

    /// An outgoing connection is readable: its peer never writes to it, so this is
    /// the end of it (or a protocol violation). The end of one we closed with a
    /// goodbye is the peer's answer to it, not a failure.
    #[cold]
    fn check_out(&mut self, id: u64) {
        if !self.outs.contains_key(&id) {
            self.adopt();
        }
        let Some(l) = self.outs.get(&id) else { return };
        let mut b = [0u8; 16];
        match rustix::net::recv(&l.fd, &mut b[..], RecvFlags::DONTWAIT) {
            Err(e) if not_yet(e) || e == Errno::INTR => {}
            Ok((0, _)) if l.idle.closing() => self.finish_out(id),
            _ => self.fail_out(id),
        }
    }

    /// Fails outgoing connection `id`: marks it dead and answers every request tracked
    /// on it with `FI_EHOSTUNREACH`.
    #[cold]
    fn fail_out(&mut self, id: u64) {
        let Some(l) = self.outs.remove(&id) else {
            return;
        };
        kill(&l);
        let _ = epoll::delete(&self.sh.epoll, &l.fd);
        let src = l.peer.raw();
        let failed = &mut self.failed;
        self.tracked.retain(|&(tx_idx, req), &mut (link, op)| {
            if link == id {
                failed.push_back((failure(op, tx_idx, req), src));
                false
            } else {
                true
            }
        });
    }

    /// Closes accepted connection `id`. If it came from a known endpoint, that
    /// endpoint is taken for gone: the connections to it fail too.
    #[cold]
    fn close_in(&mut self, id: u64) {
        let Some(l) = self.ins.remove(&id) else {
            return;
        };
        if self.sh.msg {
            // Why it ended is read off the socket before the teardown below.
            self.sh.conn.closing(id, &l.fd);
        }
        let _ = epoll::delete(&self.sh.epoll, &l.fd);
        self.staged -= l.buf.len().saturating_sub(RX_BUF);
        if let Some(c) = l.placing {
            self.orphans.push_back(c);
        }
        match l.peer {
            None => self.handshaking -= 1,
            Some((peer, _)) => {
                self.adopt();
                let dead: Vec<u64> = self
                    .outs
                    .values()
                    .filter(|o| o.peer.designates(&peer))
                    .map(|o| o.id)
                    .collect();
                for o in dead {
                    self.fail_out(o);
                }
            }
        }
    }

    #[cold]
    fn close_all(&mut self) {
        let ids: Vec<u64> = self.ins.keys().copied().collect();
        for id in ids {
            if let Some(l) = self.ins.remove(&id) {
                let _ = epoll::delete(&self.sh.epoll, &l.fd);
            }
        }
        self.busy.clear();
        self.handshaking = 0;
        self.staged = 0;
    }

    /// Closes accepted connections whose hello is late.
    #[cold]
    fn expire(&mut self) {
        let now = Instant::now();
        let late: Vec<u64> = self
            .ins
            .iter()
            .filter(|(_, l)| l.peer.is_none() && l.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            self.busy.retain(|&b| b != id);
            self.close_in(id);
        }
    }

    /// Hands the complete frames of accepted connection `id` to `sink` and reads more.
    fn serve<K: Sink<NoPull>>(&mut self, id: u64, sink: &mut K, n: &mut usize) -> Served {
        let me = self.sh.me;
        let Some(l) = self.ins.get_mut(&id) else {
            return Served::Idle;
        };
        let mut reads = 0;
        'frames: loop {
            if let Some(c) = l.placing.as_mut() {
                match place::pump(sink, c, &l.fd, &mut l.buf, &mut reads, READS_PER_POLL) {
                    Step::Done => {}
                    Step::Wait => return Served::Idle,
                    Step::Budget => return Served::More,
                    Step::Closed => return Served::Closed,
                }
                if let Some(c) = l.placing.take() {
                    sink.claimed(c, Ok(()));
                    *n += 1;
                }
                if sink.sated() {
                    return Served::More;
                }
            }
            // Every complete frame in the buffer.
            let need = loop {
                let avail = l.hi - l.lo;
                let Some((peer, raw)) = l.peer else {
                    if avail < HELLO_LEN {
                        break HELLO_LEN;
                    }
                    let b: &[u8; HELLO_LEN] = l.buf[l.lo..l.lo + HELLO_LEN].try_into().unwrap();
                    match frame::check_hello(b, &me) {
                        Ok(from) => {
                            l.peer = Some((from, from.raw()));
                            self.handshaking -= 1;
                            l.lo += HELLO_LEN;
                            // Room for full frames from now on.
                            l.buf.resize(RX_BUF, 0);
                            continue;
                        }
                        Err(_) => return Served::Closed,
                    }
                };
                if avail < HDR_LEN {
                    break HDR_LEN;
                }
                let Ok((hdr, plen)) =
                    frame::check_header(&l.buf[l.lo..l.lo + HDR_LEN], MAX_MSG_SIZE)
                else {
                    return Served::Closed;
                };
                let response = frame::is_response(hdr.op);
                if avail < HDR_LEN + plen {
                    // Too large to read in place: straight into its destination if it
                    // has one (a response only if it was asked for), else staged.
                    let link = if response && HDR_LEN + plen > RX_BUF {
                        asked(
                            &self.sh,
                            &mut self.track,
                            &mut self.tracked,
                            &mut self.outs,
                            &mut self.failed,
                            &hdr,
                            &peer,
                        )
                        .cloned()
                    } else {
                        None
                    };
                    if HDR_LEN + plen > RX_BUF
                        && place::claimable(hdr.op)
                        && (!response || link.is_some())
                    {
                        if let Some(mut c) = sink.claim(&hdr, raw.as_bytes()) {
                            if let Some(o) = link {
                                // Taken up: the claim answers the request.
                                o.idle.answered();
                                self.tracked.remove(&(hdr.tx_idx, hdr.req));
                            }
                            place::count_placed();
                            place::take(sink, &mut c, &l.buf[l.lo + HDR_LEN..l.hi]);
                            l.placing = Some(c);
                            l.lo = 0;
                            l.hi = 0;
                            if l.buf.len() > RX_BUF {
                                // Staged in part before the receive was posted.
                                self.staged -= l.buf.len() - RX_BUF;
                                l.buf.truncate(RX_BUF);
                                l.buf.shrink_to_fit();
                            }
                            continue 'frames;
                        }
                    }
                    break HDR_LEN + plen;
                }
                let payload = &l.buf[l.lo + HDR_LEN..l.lo + HDR_LEN + plen];
                if response {
                    let key = (hdr.tx_idx, hdr.req);
                    let asked = asked(
                        &self.sh,
                        &mut self.track,
                        &mut self.tracked,
                        &mut self.outs,
                        &mut self.failed,
                        &hdr,
                        &peer,
                    );
                    // A response nobody here asked that peer for is dropped.
                    if let Some(o) = asked {
                        if !sink.packet(
                            &hdr,
                            raw.as_bytes(),
                            Payload::Inline(SharedBytes::from(payload)),
                        ) {
                            return Served::Refused;
                        }
                        o.idle.answered();
                        self.tracked.remove(&key);
                        *n += 1;
                    }
                } else if hdr.op == frame::BYE {
                    // The owner's last frame: all it sent before was handed over.
                    return if l.hi - l.lo == HDR_LEN {
                        Served::Bye
                    } else {
                        Served::Closed
                    };
                } else {
                    if !sink.packet(
                        &hdr,
                        raw.as_bytes(),
                        Payload::Inline(SharedBytes::from(payload)),
                    ) {
                        return Served::Refused;
                    }
                    *n += 1;
                }
                if HDR_LEN + plen > RX_BUF {
                    place::count_staged();
                }
                l.lo += HDR_LEN + plen;
                if sink.sated() {
                    return Served::More;
                }
            };
            if l.lo == l.hi {
                l.lo = 0;
                l.hi = 0;
                if l.buf.len() > RX_BUF {
                    // A large frame was staged: its memory goes back now.
                    self.staged -= l.buf.len() - RX_BUF;
                    l.buf.truncate(RX_BUF);
                    l.buf.shrink_to_fit();
                }
            }
            if need > l.buf.len() {
                let extra = need - l.buf.len();
                if self.staged + extra > STAGE_BUDGET {
                    // No room to stage it now: leave it in the socket (the sender is
                    // held back by TCP) and try again at the next poll.
                    return Served::More;
                }
                self.staged += extra;
                l.buf.resize(need, 0);
            }
            if l.buf.len() - l.lo < need {
                l.buf.copy_within(l.lo..l.hi, 0);
                l.hi -= l.lo;
                l.lo = 0;
            }
            if reads == READS_PER_POLL {
                return Served::More;
            }
            reads += 1;
            match rustix::net::recv(&l.fd, &mut l.buf[l.hi..], RecvFlags::DONTWAIT) {
                Ok((0, _)) => return Served::Closed,
                Ok((k, _)) => l.hi += k,
                Err(Errno::INTR) => {}
                Err(e) if not_yet(e) => return Served::Idle,
                Err(_) => return Served::Closed,
            }
        }
    }
}

/// The connection a response `hdr` from `peer` answers a request of the table on, if
/// it does. The op is not compared: a base atomic is answered by an `Ack` or an
/// `AtomicResp` as the target sees fit; the core checks the rest. (A free function:
/// `serve` calls it while it holds a connection.)
fn asked<'o>(
    sh: &Shared,
    track: &mut Option<Receiver<Rec>>,
    tracked: &mut HashMap<(u16, u64), (u64, Op)>,
    outs: &'o mut HashMap<u64, Arc<Link>>,
    failed: &mut VecDeque<(Header, Raw)>,
    hdr: &Header,
    peer: &Name,
) -> Option<&'o Arc<Link>> {
    let key = (hdr.tx_idx, hdr.req);
    if !tracked.contains_key(&key) && sh.queued.load(Ordering::Acquire) != 0 {
        // Announced after this poll took the queue up, answered since.
        take_records(sh, track, tracked, outs, failed);
    }
    tracked
        .get(&key)
        .and_then(|&(link, _)| outs.get(&link))
        .filter(|o| o.peer.designates(peer))
}

/// The error response that answers request (`tx_idx`, `req`) whose peer is gone.
fn failure(op: Op, tx_idx: u16, req: u64) -> Header {
    Header {
        op: op as u8,
        tx_idx,
        req,
        status: Error::HostUnreach.code() as u32,
        ..Header::default()
    }
}

/// Takes up announced requests; one for a connection already broken is answered with
/// an error at once. (A free function: `serve` calls it while it holds a connection.)
#[cold]
fn take_records(
    sh: &Shared,
    track: &mut Option<Receiver<Rec>>,
    tracked: &mut HashMap<(u16, u64), (u64, Op)>,
    outs: &mut HashMap<u64, Arc<Link>>,
    failed: &mut VecDeque<(Header, Raw)>,
) {
    let Some(q) = track.as_ref() else { return };
    while let Ok(r) = q.try_recv() {
        sh.queued.fetch_sub(1, Ordering::AcqRel);
        if !outs.contains_key(&r.link) {
            adopt(sh, outs);
        }
        match outs.get(&r.link) {
            Some(_) => {
                tracked.insert((r.tx_idx, r.req), (r.link, r.op));
            }
            // The connection broke before the request was taken up. Its source is
            // not known any more; the core matches responses by request id.
            None => failed.push_back((failure(r.op, r.tx_idx, r.req), sh.me.raw())),
        }
    }
}

/// Takes over the outgoing connections the sender opened since the last call.
#[cold]
fn adopt(sh: &Shared, outs: &mut HashMap<u64, Arc<Link>>) {
    let mut f = sh.fresh();
    for l in f.drain(..) {
        outs.insert(l.id, l);
    }
    sh.nfresh.store(0, Ordering::Release);
}
