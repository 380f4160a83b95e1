//! Connection management for MSG endpoints (`man 3 fi_cm`): passive endpoints that
//! listen on a TCP socket, connection requests, their answers, and the end of a
//! connection.
//!
//! A passive endpoint ([`TcpListener`]) is a socket bound at `src_addr` (or the
//! provider's interface, any port) that listens from `fi_listen` on. `fi_connect`
//! opens a non-blocking connection to it and sends a request: magic, version, the
//! connecting endpoint's name and the connection data. The listener reads requests
//! only, at most [`MAX_HALF_OPEN`] at once, each within [`REQUEST_TIMEOUT`]; a
//! connection whose bytes fail a check, that ends early or that is late is closed
//! without disturbing the others. A complete request becomes a [`CmRequest`] whose
//! handle owns the socket; accept or reject answers on it (the answer carries the
//! accepting endpoint's name and the connection data) and, after an accept, the very
//! socket becomes the connection of the accepting endpoint. The connecting side reads
//! exactly the answer, so frames the peer sends right behind an accept stay in the
//! socket for the receiver.
//!
//! One socket carries both directions of an MSG connection: the sender writes it as
//! the RDM path writes an outgoing connection and the receiver reads it as an accepted
//! one whose hello passed (`transport`), so framing, flow control, response tracking
//! and every check of the RDM path hold unchanged.
//!
//! The end of a connection: the peer's `fi_shutdown`, or its process closing the
//! socket, is an orderly end of stream, reported as [`CmEvent::Shutdown`]; a reset, an
//! expired keepalive or a write that failed is [`CmEvent::Failed`] with
//! `FI_ECONNRESET`; bytes that fail a check close the connection with `FI_EIO`. The
//! EQ learns it when it is read, from the socket's state, whether or not data
//! progress ran.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use fabric::provider::{CmEvent, CmRequest, ConnectionManager, DEFAULT_CM_DATA_SIZE};
use fabric::{Error, Info, Result};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags, SocketFlags, SocketType};

use crate::name::{self, Name, Raw, NAME4_LEN, NAME6_LEN};
use crate::transport::{errno_to, family, kill, not_yet, tune, Link, Shared, TcpEp};

/// `"FTCM"`: the first bytes of every connection request and answer.
pub const CM_MAGIC: u32 = u32::from_be_bytes(*b"FTCM");
/// Version of the connection messages; another one is dropped.
pub const CM_VERSION: u16 = 1;
/// Connection requests a listener reads at once; further connections are closed as
/// they come until one of these completes or is dropped.
pub const MAX_HALF_OPEN: usize = 64;
/// How long a connection request may take to arrive whole, and how long a connecting
/// endpoint waits for the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes of connection data carried (`FI_OPT_CM_DATA_SIZE`).
pub const CM_DATA_SIZE: usize = DEFAULT_CM_DATA_SIZE;

/// Bytes of a connection message's fixed part: magic, version, kind, name length,
/// data length.
const CM_HDR: usize = 10;
/// Bytes of the longest connection message.
const CM_MAX: usize = CM_HDR + NAME6_LEN + CM_DATA_SIZE;

/// What a connection message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// `fi_connect`: the connector's name and data.
    Request = 1,
    /// `fi_accept`: the accepting endpoint's name and data.
    Accept = 2,
    /// `fi_reject`: data only.
    Reject = 3,
}

/// A connection message as sent.
fn encode(kind: Kind, name: Option<&Name>, data: &[u8]) -> Vec<u8> {
    debug_assert!(data.len() <= CM_DATA_SIZE);
    let raw = name.map(Name::raw);
    let nb = raw.as_ref().map_or(&[][..], Raw::as_bytes);
    let mut b = Vec::with_capacity(CM_HDR + nb.len() + data.len());
    b.extend_from_slice(&CM_MAGIC.to_be_bytes());
    b.extend_from_slice(&CM_VERSION.to_be_bytes());
    b.push(kind as u8);
    b.push(nb.len() as u8);
    b.extend_from_slice(&(data.len() as u16).to_be_bytes());
    b.extend_from_slice(nb);
    b.extend_from_slice(data);
    b
}

/// Checks the fixed part of a message expected to be one of `kinds`; returns the
/// message's whole length. `Err(Io)` for anything else: wrong magic or version,
/// another kind, a name length that is no name's (a reject carries none, the others
/// one), more data than [`CM_DATA_SIZE`].
fn check_head(b: &[u8], kinds: &[Kind]) -> Result<usize> {
    let b: &[u8; CM_HDR] = b.get(..CM_HDR).ok_or(Error::Io)?.try_into().unwrap();
    if u32::from_be_bytes(b[0..4].try_into().unwrap()) != CM_MAGIC
        || u16::from_be_bytes(b[4..6].try_into().unwrap()) != CM_VERSION
    {
        return Err(Error::Io);
    }
    let kind = *kinds.iter().find(|k| **k as u8 == b[6]).ok_or(Error::Io)?;
    let nl = b[7] as usize;
    let named = match kind {
        Kind::Reject => nl == 0,
        Kind::Request | Kind::Accept => nl == NAME4_LEN || nl == NAME6_LEN,
    };
    let dl = u16::from_be_bytes(b[8..10].try_into().unwrap()) as usize;
    if !named || dl > CM_DATA_SIZE {
        return Err(Error::Io);
    }
    Ok(CM_HDR + nl + dl)
}

/// Decodes a whole message whose head passed [`check_head`]: kind, name, data.
fn decode(b: &[u8]) -> Result<(Kind, Option<Name>, Vec<u8>)> {
    let kind = match b[6] {
        1 => Kind::Request,
        2 => Kind::Accept,
        _ => Kind::Reject,
    };
    let nl = b[7] as usize;
    let name = match nl {
        0 => None,
        _ => Some(Name::decode(&b[CM_HDR..CM_HDR + nl]).map_err(|_| Error::Io)?),
    };
    Ok((kind, name, b[CM_HDR + nl..].to_vec()))
}

/// A message being read: exactly its bytes and no more, so what follows it stays in
/// the socket.
struct Reading {
    buf: [u8; CM_MAX],
    got: usize,
    need: usize,
}

impl Reading {
    fn new() -> Reading {
        Reading {
            buf: [0; CM_MAX],
            got: 0,
            need: CM_HDR,
        }
    }

    /// Reads more of a message of one of `kinds` from `fd`: `Ok(true)` once it is
    /// whole, `Ok(false)` while more is to come, `Err(Io)` for bytes that fail the
    /// checks and the socket's error (`Ok(0)`: `Errno::PIPE`) when it failed or ended.
    fn read(&mut self, fd: &OwnedFd, kinds: &[Kind]) -> std::result::Result<bool, ReadErr> {
        loop {
            match rustix::net::recv(fd, &mut self.buf[self.got..self.need], RecvFlags::DONTWAIT) {
                Ok((0, _)) => return Err(ReadErr::Ended(Errno::PIPE)),
                Ok((k, _)) => self.got += k,
                Err(Errno::INTR) => continue,
                Err(e) if not_yet(e) => return Ok(false),
                Err(e) => return Err(ReadErr::Ended(e)),
            }
            if self.got < self.need {
                continue;
            }
            if self.need == CM_HDR {
                self.need = check_head(&self.buf, kinds).map_err(|_| ReadErr::Garbage)?;
                if self.need > CM_HDR {
                    continue;
                }
            }
            return Ok(true);
        }
    }

    fn message(&self) -> &[u8] {
        &self.buf[..self.need]
    }
}

/// Why reading a message stopped.
enum ReadErr {
    /// The bytes are not a message expected here.
    Garbage,
    /// The connection ended or failed (`PIPE` for an end of stream).
    Ended(Errno),
}

/// Sends all of `msg` on a connection that has nothing queued: a connection message
/// is far smaller than any socket buffer. `Err(ConnAborted)` when the connection is
/// gone or takes less.
fn send_all(fd: &OwnedFd, msg: &[u8]) -> Result<()> {
    loop {
        match rustix::net::send(fd, msg, SendFlags::NOSIGNAL | SendFlags::DONTWAIT) {
            Ok(n) if n == msg.len() => return Ok(()),
            Err(Errno::INTR) => {}
            _ => return Err(Error::ConnAborted),
        }
    }
}

/// The state of a connection's socket: `Some` once it ended, with how.
fn ended(fd: &OwnedFd) -> Option<CmEvent> {
    let mut p = [PollFd::new(fd, PollFlags::IN | PollFlags::RDHUP)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut p, Some(&zero)).ok()?;
    let r = p[0].revents();
    if r.intersects(PollFlags::ERR | PollFlags::HUP) {
        // Reset, timed out, or shut down here after a write failed.
        Some(CmEvent::Failed(Error::ConnReset))
    } else if r.contains(PollFlags::RDHUP) {
        Some(CmEvent::Shutdown)
    } else {
        None
    }
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn stream(addr: &SocketAddr) -> Result<OwnedFd> {
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    rustix::net::socket_with(family(addr), SocketType::STREAM, flags, None).map_err(errno_to)
}

// ---------------------------------------------------------------------------------
// Passive endpoints
// ---------------------------------------------------------------------------------

/// A passive endpoint's listening side ([`ConnectionManager::Listener`]).
pub struct TcpListener {
    st: Mutex<ListenState>,
}

struct ListenState {
    sock: OwnedFd,
    name: Name,
    listening: bool,
    /// Accepted connections whose request is still coming.
    half: Vec<HalfOpen>,
    /// Requests handed out and not answered yet: refused when the listener goes.
    handed: Vec<Weak<Mutex<Option<OwnedFd>>>>,
}

struct HalfOpen {
    fd: OwnedFd,
    msg: Box<Reading>,
    deadline: Instant,
}

/// A connection request ([`ConnectionManager::Request`]): the connection it came on,
/// until an answer takes it.
pub struct TcpRequest {
    fd: Arc<Mutex<Option<OwnedFd>>>,
    peer: Name,
}

impl TcpRequest {
    /// The request's connection, claimed for an answer: `Err(Inval)` once answered.
    fn claim(&self) -> Result<OwnedFd> {
        lock(&self.fd).take().ok_or(Error::Inval)
    }
}

/// A socket bound at `addr` (port 0: any), not listening yet. Address reuse lets a
/// passive endpoint take the name of another one that does not listen (`fi_setname`);
/// `listen` still refuses an address where somebody listens.
fn bound(addr: SocketAddr) -> Result<(OwnedFd, SocketAddr)> {
    let sock = stream(&addr)?;
    let _ = rustix::net::sockopt::set_socket_reuseaddr(&sock, true);
    rustix::net::bind(&sock, &addr).map_err(errno_to)?;
    let local = rustix::net::getsockname(&sock).map_err(errno_to)?;
    let mut at = addr;
    at.set_port(SocketAddr::try_from(local).map_err(|_| Error::Io)?.port());
    Ok((sock, at))
}

impl ListenState {
    /// Accepts what waits, within the bound on half-open requests.
    fn accept(&mut self) {
        loop {
            let fd = match rustix::net::accept_with(
                &self.sock,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) => fd,
                Err(Errno::INTR) | Err(Errno::CONNABORTED) => continue,
                Err(_) => return,
            };
            // Beyond the bound the connection is closed at once: a flood of silent
            // connections costs the listener nothing past it, and its connector sees
            // the request refused.
            if self.half.len() < MAX_HALF_OPEN {
                self.half.push(HalfOpen {
                    fd,
                    msg: Box::new(Reading::new()),
                    deadline: Instant::now() + REQUEST_TIMEOUT,
                });
            }
        }
    }

    /// The requests that arrived whole; drops the ones that failed or are late.
    fn complete(&mut self, out: &mut Vec<CmRequest<TcpRequest>>) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.half.len() {
            let h = &mut self.half[i];
            let done = match h.msg.read(&h.fd, &[Kind::Request]) {
                Ok(true) => decode(h.msg.message()).ok(),
                Ok(false) if h.deadline > now => {
                    i += 1;
                    continue;
                }
                _ => None,
            };
            let h = self.half.swap_remove(i);
            if let Some((_, Some(peer), data)) = done {
                let fd = Arc::new(Mutex::new(Some(h.fd)));
                self.handed.push(Arc::downgrade(&fd));
                out.push(CmRequest {
                    handle: TcpRequest { fd, peer },
                    peer: peer.raw().as_bytes().to_vec(),
                    data,
                });
            }
        }
        self.handed.retain(|w| w.strong_count() > 0);
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        // Nobody will answer what was handed out: closing it refuses it.
        for w in lock(&self.st).handed.drain(..) {
            if let Some(fd) = w.upgrade() {
                lock(&fd).take();
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// A connection
// ---------------------------------------------------------------------------------

/// The connection of an MSG endpoint, shared by connection management, the sender
/// and the receiver (`transport::Shared::conn`).
#[derive(Default)]
pub(crate) struct Conn {
    st: Mutex<ConnState>,
    /// Set once the connection is up: the hooks on the data path look no further
    /// before.
    up: AtomicBool,
}

#[derive(Default)]
struct ConnState {
    phase: Phase,
    events: VecDeque<CmEvent>,
    /// The receiving end of the connection until the receiver takes it up: its id and
    /// its own descriptor of the socket.
    rx: Option<(u64, OwnedFd, Name)>,
}

#[derive(Default)]
enum Phase {
    #[default]
    Idle,
    /// `fi_connect` under way: the request going out, then the answer coming in.
    Connecting(Box<Connecting>),
    /// Connected: the link the sender writes; `id` names it to the receiver.
    Up { id: u64, link: Arc<Link> },
    /// Refused, failed, ended or shut down.
    Over,
}

struct Connecting {
    fd: OwnedFd,
    out: Vec<u8>,
    sent: usize,
    answer: Reading,
    deadline: Instant,
}

impl ConnState {
    /// Ends the connection attempt or the connection with `ev`.
    fn over(&mut self, ev: CmEvent) {
        self.phase = Phase::Over;
        self.events.push_back(ev);
    }

    /// Progresses a connect: sends the request, reads the answer, times out.
    fn progress_connect(&mut self, sh: &Shared) {
        let Phase::Connecting(c) = &mut self.phase else {
            return;
        };
        // A connection that failed before an answer: refused when nobody listens or
        // the listener closed it unanswered, failed otherwise.
        let lost = |e: Errno| match e {
            Errno::CONNREFUSED | Errno::CONNRESET | Errno::PIPE => {
                CmEvent::Refused { data: Vec::new() }
            }
            Errno::TIMEDOUT => CmEvent::Failed(Error::TimedOut),
            _ => CmEvent::Failed(Error::HostUnreach),
        };
        while c.sent < c.out.len() {
            match rustix::net::send(&c.fd, &c.out[c.sent..], SendFlags::NOSIGNAL) {
                Ok(n) => c.sent += n,
                Err(Errno::INTR) => {}
                Err(e) if not_yet(e) => break,
                Err(e) => return self.over(lost(e)),
            }
        }
        if c.sent == c.out.len() {
            match c.answer.read(&c.fd, &[Kind::Accept, Kind::Reject]) {
                Ok(true) => {
                    let ev = match decode(c.answer.message()) {
                        Ok((Kind::Reject, _, data)) => CmEvent::Refused { data },
                        Ok((_, Some(peer), data)) => {
                            let Phase::Connecting(c) = std::mem::take(&mut self.phase) else {
                                unreachable!("connecting above");
                            };
                            match self.attach(sh, c.fd, peer) {
                                Ok(()) => CmEvent::Connected {
                                    peer: peer.raw().as_bytes().to_vec(),
                                    data,
                                },
                                Err(e) => {
                                    self.phase = Phase::Over;
                                    CmEvent::Failed(e)
                                }
                            }
                        }
                        _ => CmEvent::Failed(Error::Io),
                    };
                    if matches!(ev, CmEvent::Connected { .. }) {
                        self.events.push_back(ev);
                    } else {
                        self.over(ev);
                    }
                    return;
                }
                Ok(false) => {}
                Err(ReadErr::Garbage) => return self.over(CmEvent::Failed(Error::Io)),
                Err(ReadErr::Ended(e)) => return self.over(lost(e)),
            }
        }
        if let Phase::Connecting(c) = &self.phase {
            if Instant::now() >= c.deadline {
                self.over(CmEvent::Failed(Error::TimedOut));
            }
        }
    }

    /// Makes `fd`, whose handshake passed, the endpoint's connection to `peer`: the
    /// sender's link, and a descriptor of the same socket in the endpoint's epoll set
    /// for the receiver to take up at its first readiness.
    fn attach(&mut self, sh: &Shared, fd: OwnedFd, peer: Name) -> Result<()> {
        tune(&fd);
        let rfd = rustix::io::fcntl_dupfd_cloexec(&fd, 0).map_err(errno_to)?;
        let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
        // Registered under the connection's lock, which the receiver takes to learn
        // what `id` is: it never mistakes the connection for an outgoing RDM one.
        rustix::event::epoll::add(
            &sh.epoll,
            &rfd,
            rustix::event::epoll::EventData::new_u64(id),
            rustix::event::epoll::EventFlags::IN | rustix::event::epoll::EventFlags::RDHUP,
        )
        .map_err(errno_to)?;
        let link = Arc::new(Link {
            id,
            fd,
            peer,
            dead: AtomicBool::new(false),
        });
        {
            let mut f = sh.fresh();
            f.push(link.clone());
            sh.nfresh.store(f.len(), Ordering::Release);
        }
        self.rx = Some((id, rfd, peer));
        self.phase = Phase::Up { id, link };
        sh.conn.up.store(true, Ordering::Release);
        Ok(())
    }

    /// Closes the connection or the attempt from this side.
    fn close(&mut self) {
        match std::mem::replace(&mut self.phase, Phase::Over) {
            Phase::Up { link, .. } => kill(&link),
            // The socket closes with the attempt: the listener drops or refuses it.
            Phase::Connecting(_) => {}
            Phase::Idle => self.phase = Phase::Idle,
            Phase::Over => {}
        }
    }
}

impl Conn {
    fn lock(&self) -> MutexGuard<'_, ConnState> {
        lock(&self.st)
    }
}

/// The link of the connection to `to`, for the sender.
pub(crate) fn link(sh: &Shared, to: &Raw) -> Option<Arc<Link>> {
    if !sh.conn.up.load(Ordering::Acquire) {
        return None;
    }
    match &sh.conn.lock().phase {
        Phase::Up { link, .. } if link.peer.raw() == *to => Some(link.clone()),
        _ => None,
    }
}

/// The receiving end of the connection, when `id` names it and the receiver has not
/// taken it yet.
pub(crate) fn take_in(sh: &Shared, id: u64) -> Option<(OwnedFd, Name)> {
    if !sh.conn.up.load(Ordering::Acquire) {
        return None;
    }
    let mut st = sh.conn.lock();
    match st.rx.take() {
        Some((i, fd, peer)) if i == id => Some((fd, peer)),
        other => {
            st.rx = other;
            None
        }
    }
}

/// The receiver closes connection `id` (`fd` is its descriptor of the socket): the
/// connection is over, for the reason the socket tells, unless that was reported.
pub(crate) fn closing(sh: &Shared, id: u64, fd: &OwnedFd) {
    let mut st = sh.conn.lock();
    if matches!(st.phase, Phase::Up { id: i, .. } if i == id) {
        // Open both ways yet closed by the receiver: bytes that failed its checks.
        let ev = ended(fd).unwrap_or(CmEvent::Failed(Error::Io));
        st.over(ev);
    }
}

/// The endpoint closes: its connection, or its attempt, ends.
pub(crate) fn close(sh: &Shared) {
    sh.conn.lock().close();
}

impl ConnectionManager<TcpEp> for TcpEp {
    const CM_DATA_SIZE: usize = CM_DATA_SIZE;
    type Listener = TcpListener;
    type Request = TcpRequest;

    fn listener(info: &Info) -> Result<TcpListener> {
        let addr = match &info.src_addr {
            Some(src) => name::decode_source(src)?,
            None => SocketAddr::new(crate::local_addr()?, 0),
        };
        let (sock, at) = bound(addr)?;
        Ok(TcpListener {
            st: Mutex::new(ListenState {
                sock,
                name: Name {
                    addr: at,
                    nonce: crate::fresh_nonce(),
                },
                listening: false,
                half: Vec::new(),
                handed: Vec::new(),
            }),
        })
    }

    fn listener_name(l: &TcpListener) -> Vec<u8> {
        lock(&l.st).name.raw().as_bytes().to_vec()
    }

    fn set_listener_name(l: &TcpListener, name: &[u8]) -> Result<()> {
        // A full name keeps its incarnation; an address with port 0 gets a port and a
        // fresh one.
        let (addr, nonce) = match Name::decode(name) {
            Ok(n) if n.nonce != 0 => (n.addr, n.nonce),
            _ => (name::decode_source(name)?, crate::fresh_nonce()),
        };
        let (sock, at) = bound(addr)?;
        let mut st = lock(&l.st);
        if st.listening {
            return Err(Error::OpBadState);
        }
        st.sock = sock;
        st.name = Name { addr: at, nonce };
        Ok(())
    }

    fn listen(l: &TcpListener) -> Result<()> {
        let mut st = lock(&l.st);
        rustix::net::listen(&st.sock, 1024).map_err(errno_to)?;
        st.listening = true;
        Ok(())
    }

    fn requests(l: &TcpListener, f: &mut dyn FnMut(CmRequest<TcpRequest>)) {
        let mut arrived = Vec::new();
        {
            let mut st = lock(&l.st);
            if !st.listening {
                return;
            }
            st.accept();
            st.complete(&mut arrived);
        }
        arrived.into_iter().for_each(f);
    }

    fn reject(_: &TcpListener, req: &TcpRequest, data: &[u8]) -> Result<()> {
        let fd = req.claim()?;
        // A connector already gone has nobody to tell; closing is all there is.
        let _ = send_all(&fd, &encode(Kind::Reject, None, data));
        let _ = rustix::net::shutdown(&fd, rustix::net::Shutdown::Write);
        Ok(())
    }

    fn connect(t: &TcpEp, to: &[u8], data: &[u8]) -> Result<()> {
        let to = Name::decode(to)?;
        let fd = stream(&to.addr)?;
        let mut st = t.sh.conn.lock();
        match rustix::net::connect(&fd, &to.addr) {
            Ok(()) => {}
            Err(e) if not_yet(e) => {}
            // Reported like any other outcome of the attempt.
            Err(Errno::CONNREFUSED) => {
                st.over(CmEvent::Refused { data: Vec::new() });
                return Ok(());
            }
            Err(e) => return Err(errno_to(e)),
        }
        st.phase = Phase::Connecting(Box::new(Connecting {
            fd,
            out: encode(Kind::Request, Some(&t.sh.me), data),
            sent: 0,
            answer: Reading::new(),
            deadline: Instant::now() + REQUEST_TIMEOUT,
        }));
        st.progress_connect(&t.sh);
        Ok(())
    }

    fn accept(t: &TcpEp, req: &TcpRequest, data: &[u8]) -> Result<()> {
        let fd = req.claim()?;
        // The connector says nothing until it has the answer: anything readable on
        // the socket now is its end (or garbage).
        let mut p = [PollFd::new(&fd, PollFlags::IN | PollFlags::RDHUP)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if rustix::event::poll(&mut p, Some(&zero)).map_err(errno_to)? != 0 {
            return Err(Error::ConnAborted);
        }
        send_all(&fd, &encode(Kind::Accept, Some(&t.sh.me), data))?;
        let mut st = t.sh.conn.lock();
        st.attach(&t.sh, fd, req.peer)?;
        st.events.push_back(CmEvent::Connected {
            peer: req.peer.raw().as_bytes().to_vec(),
            data: Vec::new(),
        });
        Ok(())
    }

    fn events(t: &TcpEp, f: &mut dyn FnMut(CmEvent)) {
        let queued: Vec<CmEvent> = {
            let mut st = t.sh.conn.lock();
            match &st.phase {
                Phase::Connecting(_) => st.progress_connect(&t.sh),
                Phase::Up { link, .. } => {
                    if let Some(ev) = ended(&link.fd) {
                        st.over(ev);
                    }
                }
                Phase::Idle | Phase::Over => {}
            }
            st.events.drain(..).collect()
        };
        queued.into_iter().for_each(f);
    }

    fn disconnect(t: &TcpEp) -> Result<()> {
        t.sh.conn.lock().close();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(a: &str, nonce: u64) -> Name {
        Name {
            addr: a.parse().unwrap(),
            nonce,
        }
    }

    #[test]
    fn messages_round_trip_and_refusals() {
        let me = name("127.0.0.1:5000", 9);
        let req = encode(Kind::Request, Some(&me), b"data");
        assert_eq!(check_head(&req, &[Kind::Request]), Ok(req.len()));
        assert_eq!(
            decode(&req),
            Ok((Kind::Request, Some(me), b"data".to_vec()))
        );
        let v6 = encode(Kind::Accept, Some(&name("[::1]:7", 3)), &[1; CM_DATA_SIZE]);
        assert_eq!(check_head(&v6, &[Kind::Accept]), Ok(CM_MAX));
        let rej = encode(Kind::Reject, None, b"no");
        assert_eq!(
            check_head(&rej, &[Kind::Accept, Kind::Reject]),
            Ok(rej.len())
        );
        // A kind not expected here.
        assert_eq!(check_head(&rej, &[Kind::Request]), Err(Error::Io));
        assert_eq!(check_head(&req[..9], &[Kind::Request]), Err(Error::Io));
        // Magic, version, kind, name length, data length.
        for (i, v) in [(0, 0u8), (5, 2), (6, 9), (7, 17), (7, 0), (8, 1), (8, 255)] {
            let mut b = req.clone();
            b[i] = v;
            assert_eq!(check_head(&b, &[Kind::Request]), Err(Error::Io), "byte {i}");
        }
        // A reject carries no name.
        let mut b = rej.clone();
        b[7] = NAME4_LEN as u8;
        assert_eq!(check_head(&b, &[Kind::Reject]), Err(Error::Io));
        // A name that does not decode.
        let mut b = req.clone();
        b[CM_HDR] = 77;
        assert_eq!(decode(&b), Err(Error::Io));
    }
}
