//! The connection of an MSG endpoint: the state connection management keeps (the
//! attempt, the connection once up, the events not yet read) and what the data path
//! asks of it: the sender's link to the peer, the receiver's end of the socket, and
//! why the connection ended when the receiver closes it.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use fabric::provider::CmEvent;
use fabric::Error;
use rustix::event::{PollFd, PollFlags};

use crate::cm_wire::Reading;
use crate::name::{Name, Raw};

/// The sender's side of a connection, as the connection state needs it.
pub(crate) trait LinkEnd {
    /// The peer's name.
    fn key(&self) -> Raw;
    /// Ends the connection: the peer sees its end.
    fn end(&self);
}

/// The connection of an MSG endpoint, shared by connection management, the sender
/// and the receiver (`transport::Shared::conn`).
pub(crate) struct Conn<L> {
    st: Mutex<ConnState<L>>,
    /// Set once the connection is up: the hooks on the data path look no further
    /// before.
    up: AtomicBool,
}

/// What [`Conn`] guards.
pub(crate) struct ConnState<L> {
    /// Where the connection is.
    pub(crate) phase: Phase<L>,
    /// Events not yet handed to the core.
    pub(crate) events: VecDeque<CmEvent>,
    /// The receiving end of the connection until the receiver takes it up: its id and
    /// its own descriptor of the socket.
    pub(crate) rx: Option<(u64, OwnedFd, Name)>,
}

impl<L> Default for Conn<L> {
    fn default() -> Self {
        Conn {
            st: Mutex::new(ConnState {
                phase: Phase::Idle,
                events: VecDeque::new(),
                rx: None,
            }),
            up: AtomicBool::new(false),
        }
    }
}

/// Where a connection is.
pub(crate) enum Phase<L> {
    /// Neither connecting nor connected yet.
    Idle,
    /// `fi_connect` under way: the request going out, then the answer coming in.
    Connecting(Box<Connecting>),
    /// Connected: the link the sender writes; `id` names it to the receiver.
    Up {
        /// The connection's id in the endpoint's epoll set.
        id: u64,
        /// The sender's link.
        link: Arc<L>,
    },
    /// Refused, failed, ended or shut down.
    Over,
}

/// A connect under way.
pub(crate) struct Connecting {
    /// The connection to the listener.
    pub(crate) fd: OwnedFd,
    /// The request.
    pub(crate) out: Vec<u8>,
    /// Bytes of `out` written.
    pub(crate) sent: usize,
    /// The answer, read exactly.
    pub(crate) answer: Reading,
    /// When the attempt fails if no answer came.
    pub(crate) deadline: Instant,
}

impl<L: LinkEnd> ConnState<L> {
    /// Ends the connection attempt or the connection with `ev`.
    pub(crate) fn over(&mut self, ev: CmEvent) {
        self.phase = Phase::Over;
        self.events.push_back(ev);
    }

    /// Closes the connection or the attempt from this side.
    pub(crate) fn close(&mut self) {
        match std::mem::replace(&mut self.phase, Phase::Over) {
            Phase::Up { link, .. } => link.end(),
            // The socket closes with the attempt: the listener drops or refuses it.
            Phase::Connecting(_) => {}
            Phase::Idle => self.phase = Phase::Idle,
            Phase::Over => {}
        }
    }
}

impl<L: LinkEnd> Conn<L> {
    /// The state, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ConnState<L>> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the connection up: the data path's hooks look at it from now on.
    pub(crate) fn set_up(&self) {
        self.up.store(true, Ordering::Release);
    }

    /// The link of the connection to `to`, for the sender.
    pub(crate) fn link(&self, to: &Raw) -> Option<Arc<L>> {
        if !self.up.load(Ordering::Acquire) {
            return None;
        }
        match &self.lock().phase {
            Phase::Up { link, .. } if link.key() == *to => Some(link.clone()),
            _ => None,
        }
    }

    /// The receiving end of the connection, when `id` names it and the receiver has
    /// not taken it yet.
    pub(crate) fn take_in(&self, id: u64) -> Option<(OwnedFd, Name)> {
        if !self.up.load(Ordering::Acquire) {
            return None;
        }
        let mut st = self.lock();
        match st.rx.take() {
            Some((i, fd, peer)) if i == id => Some((fd, peer)),
            other => {
                st.rx = other;
                None
            }
        }
    }

    /// The receiver closes connection `id` (`fd` is its descriptor of the socket):
    /// the connection is over, for the reason the socket tells, unless that was
    /// reported.
    pub(crate) fn closing(&self, id: u64, fd: &OwnedFd) {
        let mut st = self.lock();
        if matches!(st.phase, Phase::Up { id: i, .. } if i == id) {
            // Open both ways yet closed by the receiver: bytes that failed its checks.
            let ev = ended(fd).unwrap_or(CmEvent::Failed(Error::Io));
            st.over(ev);
        }
    }

    /// The endpoint closes: its connection, or its attempt, ends.
    pub(crate) fn close(&self) {
        self.lock().close();
    }
}

/// The state of a connection's socket: `Some` once it ended, with how.
pub(crate) fn ended(fd: &OwnedFd) -> Option<CmEvent> {
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
