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

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use fabric::provider::{CmEvent, CmRequest, ConnectionManager};
use fabric::{Error, Info, Result};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{SendFlags, SocketFlags, SocketType};

use crate::cm_wire::{decode, encode, Kind, ReadErr, Reading};
pub use crate::cm_wire::{CM_DATA_SIZE, CM_MAGIC, CM_VERSION};
use crate::conn::{ended, ConnState, Connecting, Phase};
use crate::name::{self, Name};
use crate::transport::{errno_to, family, not_yet, tune, Link, Shared, TcpEp};

/// Connection requests a listener reads at once; further connections are closed as
/// they come until one of these completes or is dropped.
pub const MAX_HALF_OPEN: usize = 64;
/// How long a connection request may take to arrive whole, and how long a connecting
/// endpoint waits for the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Progresses a connect: sends the request, reads the answer, times out.
fn progress_connect(st: &mut ConnState<Link>, sh: &Shared) {
    let Phase::Connecting(c) = &mut st.phase else {
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
            Err(e) => return st.over(lost(e)),
        }
    }
    if c.sent == c.out.len() {
        match c.answer.read(&c.fd, &[Kind::Accept, Kind::Reject]) {
            Ok(true) => {
                let ev = match decode(c.answer.message()) {
                    Ok((Kind::Reject, _, data)) => CmEvent::Refused { data },
                    Ok((_, Some(peer), data)) => {
                        let Phase::Connecting(c) = std::mem::replace(&mut st.phase, Phase::Idle)
                        else {
                            unreachable!("connecting above");
                        };
                        match attach(st, sh, c.fd, peer) {
                            Ok(()) => CmEvent::Connected {
                                peer: peer.raw().as_bytes().to_vec(),
                                data,
                            },
                            Err(e) => {
                                st.phase = Phase::Over;
                                CmEvent::Failed(e)
                            }
                        }
                    }
                    _ => CmEvent::Failed(Error::Io),
                };
                if matches!(ev, CmEvent::Connected { .. }) {
                    st.events.push_back(ev);
                } else {
                    st.over(ev);
                }
                return;
            }
            Ok(false) => {}
            Err(ReadErr::Garbage) => return st.over(CmEvent::Failed(Error::Io)),
            Err(ReadErr::Ended(e)) => return st.over(lost(e)),
        }
    }
    if let Phase::Connecting(c) = &st.phase {
        if Instant::now() >= c.deadline {
            st.over(CmEvent::Failed(Error::TimedOut));
        }
    }
}

/// Makes `fd`, whose handshake passed, the endpoint's connection to `peer`: the
/// sender's link, and a descriptor of the same socket in the endpoint's epoll set
/// for the receiver to take up at its first readiness.
fn attach(st: &mut ConnState<Link>, sh: &Shared, fd: OwnedFd, peer: Name) -> Result<()> {
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
    let link = Arc::new(Link::new(id, fd, peer));
    {
        let mut f = sh.fresh();
        f.push(link.clone());
        sh.nfresh.store(f.len(), Ordering::Release);
    }
    st.rx = Some((id, rfd, peer));
    st.phase = Phase::Up { id, link };
    sh.conn.set_up();
    Ok(())
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
        progress_connect(&mut st, &t.sh);
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
        attach(&mut st, &t.sh, fd, req.peer)?;
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
                Phase::Connecting(_) => progress_connect(&mut st, &t.sh),
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
