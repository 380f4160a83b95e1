//! Closing outgoing connections that went idle, or that are one too many, without
//! losing, reordering or failing anything.
//!
//! **When.** A connection is *quiet* when nothing is queued on it and every request
//! sent on it that waits for a response (a read, an atomic, a write, an acknowledged
//! message) has its response: the sender counts such requests per connection
//! ([`Use`]), the receiver counts the responses it handed to the core
//! ([`LinkIdle`]), and the two counts are equal. Its owner closes a quiet connection
//! that carried nothing for [`IDLE_ENV`] milliseconds, and, before it opens one more
//! than [`MAX_CONNS_ENV`], the least recently used quiet one (if none is quiet, the
//! new connection is opened all the same: a send never fails for this).
//!
//! **How.** The owner writes a goodbye ([`frame::BYE`]) as the last frame and shuts
//! its writing side. The peer's receiver, on the goodbye, has handed everything before
//! it to the core, in order; it closes its side, failing nothing and keeping the
//! owner for alive. The owner keeps the connection *closing* until it sees that end
//! of file, and only then opens a new connection to the peer, so nothing sent on the
//! new one can overtake bytes still unread on the old one. Meanwhile a request to
//! that peer gets `FI_EAGAIN` (progress finishes the close); a response, which must
//! not be refused, is held and goes first on the new connection. A closing
//! connection that breaks instead (reset, keepalive) means the peer is gone, as for
//! any other connection.
//!
//! **Cost.** Nothing on the fast path but a counter increment per tracked request on
//! each side. Use is stamped where the sender switches from one peer to another
//! (`link_slow`), and every scan makes the next send to each peer switch once. The
//! scans run on a timer in the endpoint's epoll set: the receiver's poll sees it
//! expire and asks the sender for a scan through the held-back flag, so a poll pays
//! nothing between expiries, and the timer runs only while there are connections.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fabric::provider::wire::Header;
use fabric::{Error, Result};
use rustix::event::epoll;
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};

use super::live::LIVE_TICK;
use super::{connect, errno_to, kill, write_frame, TcpPeer, TcpRx, TcpTx, TxLink, RX_BUF};
use crate::frame;

/// Environment variable: milliseconds without traffic after which an outgoing
/// connection with nothing in flight is closed (0: never). Read when an endpoint opens.
pub const IDLE_ENV: &str = "FABRIC_TCP_IDLE_MS";
/// Environment variable: outgoing connections an endpoint keeps open before it closes
/// the least recently used quiet one to open another (0: no limit). Read when an
/// endpoint opens.
pub const MAX_CONNS_ENV: &str = "FABRIC_TCP_MAX_CONNS";
/// Idle period when [`IDLE_ENV`] is unset.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30);
/// Outgoing connections per endpoint when [`MAX_CONNS_ENV`] is unset.
pub const DEFAULT_MAX_CONNS: usize = 1024;

/// Token of the timer in the endpoint's epoll set (connection ids count up from 1).
pub(super) const TIMER: u64 = u64::MAX;
/// Scans per idle period, at least: a connection closes between one idle period and a
/// quarter more after its last use.
const TICKS_PER_IDLE: u32 = 4;
/// Scan period when idle closing is off and closing connections wait to be released.
const CLOSING_TICK: Duration = Duration::from_millis(100);
/// The shortest scan period.
const MIN_TICK: Duration = Duration::from_millis(1);

/// What the environment chose.
#[derive(Debug, Clone, Copy)]
pub(super) struct Config {
    idle: Option<Duration>,
    max_conns: usize,
}

impl Config {
    fn from_env() -> Result<Config> {
        let idle = match env_num(IDLE_ENV)? {
            None => Some(DEFAULT_IDLE),
            Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
        };
        let max_conns = match env_num(MAX_CONNS_ENV)? {
            None => DEFAULT_MAX_CONNS,
            Some(0) => usize::MAX,
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        Ok(Config { idle, max_conns })
    }

    /// The scan period: scans also check the connections' liveness (`live`).
    fn tick(&self) -> Duration {
        self.idle.map_or(CLOSING_TICK, |d| {
            (d / TICKS_PER_IDLE).clamp(MIN_TICK, LIVE_TICK)
        })
    }

    /// Scan periods in one idle period.
    fn idle_ticks(&self) -> u64 {
        self.idle.map_or(u64::MAX, |d| {
            u64::try_from(d.as_nanos().div_ceil(self.tick().as_nanos())).unwrap_or(u64::MAX)
        })
    }
}

/// The value of variable `name`, if set; a value that is not a number fails the open
/// with `FI_EINVAL` (with a message on stderr) rather than be silently ignored.
fn env_num(name: &str) -> Result<Option<u64>> {
    let Ok(v) = std::env::var(name) else {
        return Ok(None);
    };
    v.trim().parse().map(Some).map_err(|_| {
        eprintln!("fabric-tcp: {name}={v:?} is not a number");
        Error::Inval
    })
}

/// The endpoint's scan timer and the receiver's request for a scan ([`Shared`] part).
///
/// [`Shared`]: super::Shared
pub(super) struct Timer {
    fd: OwnedFd,
    scan: AtomicBool,
    cfg: Config,
}

impl Timer {
    /// A disarmed timer in `epoll_fd`'s set, with the environment's settings.
    pub(super) fn open(epoll_fd: &OwnedFd) -> Result<Timer> {
        let cfg = Config::from_env()?;
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .map_err(errno_to)?;
        epoll::add(
            epoll_fd,
            &fd,
            epoll::EventData::new_u64(TIMER),
            epoll::EventFlags::IN,
        )
        .map_err(errno_to)?;
        Ok(Timer {
            fd,
            scan: AtomicBool::new(false),
            cfg,
        })
    }

    /// Whether the receiver asked the sender for a scan that has not run yet. Acquire:
    /// seen raised, the count the tick raised before it is seen too.
    #[inline]
    pub(super) fn scan_requested(&self) -> bool {
        self.scan.load(Ordering::Acquire)
    }

    /// Expires every `period` from now on, or never (`None`).
    fn set(&self, period: Option<Duration>) {
        let t = period
            .and_then(|p| Timespec::try_from(p).ok())
            .unwrap_or(Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            });
        let spec = Itimerspec {
            it_interval: t,
            it_value: t,
        };
        // A timer that cannot be set only delays closes; nothing waits on them.
        let _ = timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec);
    }
}

/// What the receiver and the sender share about one outgoing connection ([`Link`]).
///
/// [`Link`]: super::Link
#[derive(Default)]
pub(super) struct LinkIdle {
    /// The owner wrote the goodbye: the end of the connection is the peer's answer.
    closing: AtomicBool,
    /// The receiver saw that end: a new connection to the peer may open.
    done: AtomicBool,
    /// Responses to requests on this connection handed to the core. Written by the
    /// receiver only.
    answered: AtomicU64,
}

impl LinkIdle {
    /// Counts a response handed to the core.
    #[inline]
    pub(super) fn answered(&self) {
        // One writer: no read-modify-write needed.
        let n = self.answered.load(Ordering::Relaxed);
        self.answered.store(n + 1, Ordering::Release);
    }

    /// Whether the owner closes the connection.
    pub(super) fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }
}

/// The sender's record of one outgoing connection's use ([`TxLink`] part).
#[derive(Default)]
pub(super) struct Use {
    /// Requests announced to the receiver: each gets one response, true or failed.
    asked: u64,
    /// The scan period of the last use.
    tick: u64,
    /// When the sender last switched to this connection (a count of switches): the
    /// least recently used connection has the lowest.
    stamp: u64,
}

impl Use {
    /// Counts a request that waits for a response.
    #[inline]
    pub(super) fn ask(&mut self) {
        self.asked += 1;
    }

    /// Stamps a use of the connection (the sender switched to it).
    #[inline]
    pub(super) fn touch(&mut self, st: &mut TxIdle) {
        st.clock += 1;
        self.stamp = st.clock;
        self.tick = st.tick;
    }
}

/// A connection closed by its owner, until the peer's end of file.
struct Closing {
    tx: TxLink,
    /// The writing side is shut (the goodbye is out).
    shut: bool,
    /// Responses to the peer held for the next connection, as frames.
    next: Vec<u8>,
    /// Counted in the endpoint's held-back count (a goodbye or responses to write).
    counted: bool,
}

impl Closing {
    /// Whether the close ended: the peer answered the goodbye, or the connection broke.
    fn over(&self) -> bool {
        self.tx.link.idle.done.load(Ordering::Acquire) || self.broken()
    }

    fn broken(&self) -> bool {
        self.tx.link.dead.load(Ordering::Acquire)
    }

    /// Shuts the writing side once the goodbye is written, so the peer reads to the end.
    fn shut_if_written(&mut self) {
        if !self.shut && !self.tx.queued() {
            let _ = rustix::net::shutdown(&self.tx.link.fd, rustix::net::Shutdown::Write);
            self.shut = true;
        }
    }
}

/// The sender's idle state ([`TcpTx`] part).
pub(super) struct TxIdle {
    cfg: Config,
    /// Scans so far.
    tick: u64,
    /// Switches between connections so far.
    clock: u64,
    armed: bool,
    closing: Vec<Closing>,
    /// When scans check liveness next.
    next_live: Instant,
}

impl TxIdle {
    pub(super) fn new(timer: &Timer) -> TxIdle {
        TxIdle {
            cfg: timer.cfg,
            tick: 0,
            clock: 0,
            armed: false,
            closing: Vec::new(),
            next_live: Instant::now(),
        }
    }
}

impl TcpTx {
    /// Opens the connection to `to`: after the close of the last one, if one is
    /// closing (`Err(Again)` until then), and after closing the least recently used
    /// quiet one if the endpoint has as many as it may keep. Responses held during
    /// the close go first.
    #[cold]
    pub(super) fn open(&mut self, to: &TcpPeer) -> Result<TxLink> {
        let held = match self.idle.closing.iter().position(|c| c.tx.key == to.raw) {
            None => None,
            Some(k) if self.idle.closing[k].broken() => {
                self.release(k);
                self.remember_gone(to.raw);
                return Err(Error::HostUnreach);
            }
            Some(k) if !self.idle.closing[k].over() => return Err(Error::Again),
            Some(k) => Some(k),
        };
        if self.links.len() >= self.idle.cfg.max_conns {
            let lru = (0..self.links.len())
                .filter(|&i| self.quiet(i))
                .min_by_key(|&i| self.links[i].idle.stamp);
            if let Some(i) = lru {
                self.close(i);
            }
        }
        let mut l = match connect(&self.sh, to) {
            Ok(l) => l,
            Err(e) => {
                // Held responses wait for another try unless the peer is unreachable.
                if let Some(k) = held.filter(|_| e != Error::Again) {
                    self.release(k);
                }
                return Err(e);
            }
        };
        if let Some(k) = held {
            let c = self.release(k);
            l.out.extend_from_slice(&c.next);
        }
        self.set_timer(true);
        Ok(l)
    }

    /// A send to `to` failed with `e` before it found a connection: a response to a
    /// peer whose connection is closing is held for the next one; anything else
    /// fails.
    #[cold]
    pub(super) fn refused(
        &mut self,
        e: Error,
        to: &TcpPeer,
        hdr: &Header,
        payload: &[&[u8]],
    ) -> Result<()> {
        if e != Error::Again || !frame::is_response(hdr.op) {
            return Err(e);
        }
        let Some(k) = self.idle.closing.iter().position(|c| c.tx.key == to.raw) else {
            return Err(e);
        };
        let c = &mut self.idle.closing[k];
        c.next.extend_from_slice(hdr.bytes());
        for p in payload {
            c.next.extend_from_slice(p);
        }
        self.recount(k);
        Ok(())
    }

    /// Held-back work of the idle machinery: a scan the timer asked for, goodbyes to
    /// write, held responses to send once their connection's close is over.
    #[cold]
    pub(super) fn idle_progress(&mut self) {
        if self.sh.idle.scan.swap(false, Ordering::AcqRel) {
            self.sh.held.fetch_sub(1, Ordering::Relaxed);
            self.scan();
        }
        let mut k = 0;
        while k < self.idle.closing.len() {
            let c = &mut self.idle.closing[k];
            if c.tx.queued() {
                c.tx.write_out();
            }
            c.shut_if_written();
            if !c.next.is_empty() && c.over() {
                let peer = TcpPeer {
                    name: c.tx.link.peer,
                    raw: c.tx.key,
                };
                // Opens the next connection with the held responses (or drops them
                // with a peer that is gone); either way the entry leaves `closing`.
                let _ = self.link_slow(&peer);
                if self
                    .idle
                    .closing
                    .get(k)
                    .is_some_and(|c| c.tx.key == peer.raw)
                {
                    self.recount(k);
                    k += 1;
                }
                continue;
            }
            self.recount(k);
            k += 1;
        }
    }

    /// Closes the connections idle for the idle period, releases those whose close
    /// is over, and keeps the timer running while there is anything to scan.
    fn scan(&mut self) {
        self.idle.tick += 1;
        // The next send to each peer stamps its connection in `link_slow`.
        self.last = usize::MAX;
        let mut k = 0;
        while k < self.idle.closing.len() {
            let c = &self.idle.closing[k];
            if c.next.is_empty() && c.over() {
                let c = self.release(k);
                if c.broken() {
                    self.remember_gone(c.tx.key);
                }
            } else {
                k += 1;
            }
        }
        if self.idle.cfg.idle.is_some() {
            // Used in period `t`, a connection has been idle for a whole idle period
            // once `idle_ticks` later periods have begun and ended.
            let ticks = self.idle.cfg.idle_ticks();
            for i in (0..self.links.len()).rev() {
                if self.idle.tick - self.links[i].idle.tick > ticks && self.quiet(i) {
                    self.close(i);
                }
            }
        }
        self.check_live();
        let want = !self.links.is_empty() || !self.idle.closing.is_empty();
        self.set_timer(want);
    }

    /// Breaks the connections whose peer is gone though they did not end (`live`),
    /// once per [`LIVE_TICK`] at most: the receiver then fails what waits on them.
    fn check_live(&mut self) {
        let now = Instant::now();
        if now < self.idle.next_live {
            return;
        }
        self.idle.next_live = now + LIVE_TICK;
        let links = self.links.iter_mut();
        for l in links.chain(self.idle.closing.iter_mut().map(|c| &mut c.tx)) {
            if !l.link.dead.load(Ordering::Acquire) && l.stall.gone(&l.link.fd, now) {
                kill(&l.link);
            }
        }
    }

    /// Whether connection `i` may be closed: it has nothing queued and nothing awaiting
    /// a response.
    fn quiet(&self, i: usize) -> bool {
        let l = &self.links[i];
        // An MSG endpoint's one connection is the user's: only `fi_shutdown` ends it.
        !self.sh.msg
            && !l.queued()
            && !l.link.dead.load(Ordering::Acquire)
            && l.idle.asked == l.link.idle.answered.load(Ordering::Acquire)
    }

    /// Closes connection `i` (quiet): the goodbye, then it waits in `closing`.
    fn close(&mut self, i: usize) {
        let mut l = self.links.swap_remove(i);
        self.index.remove(&l.key);
        if let Some(moved) = self.links.get(i) {
            self.index.insert(moved.key, i);
        }
        self.last = usize::MAX;
        l.link.idle.closing.store(true, Ordering::Release);
        write_frame(&mut l, &frame::bye(), &[], frame::HDR_LEN);
        let mut c = Closing {
            tx: l,
            shut: false,
            next: Vec::new(),
            counted: false,
        };
        c.shut_if_written();
        self.idle.closing.push(c);
        self.recount(self.idle.closing.len() - 1);
        self.set_timer(true);
    }

    /// Takes closing entry `k` out, with its share of the held-back count.
    fn release(&mut self, k: usize) -> Closing {
        let c = self.idle.closing.swap_remove(k);
        if c.counted {
            self.sh.held.fetch_sub(1, Ordering::Relaxed);
        }
        c
    }

    /// Counts closing entry `k` in the held-back count while it has bytes to write or
    /// responses to send, so progress comes back to it.
    fn recount(&mut self, k: usize) {
        let c = &mut self.idle.closing[k];
        let want = c.tx.queued() || !c.next.is_empty();
        if want != c.counted {
            c.counted = want;
            if want {
                self.sh.held.fetch_add(1, Ordering::Relaxed);
            } else {
                self.sh.held.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    pub(super) fn set_timer(&mut self, on: bool) {
        if on != self.idle.armed {
            self.idle.armed = on;
            self.sh.idle.set(on.then(|| self.idle.cfg.tick()));
        }
    }
}

impl TcpRx {
    /// The scan timer expired: asks the sender for a scan (through the held-back
    /// count, which progress checks anyway).
    #[cold]
    pub(super) fn tick(&mut self) {
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.sh.idle.fd, &mut b);
        // Added before the flag is raised, so the sender's decrement never comes first.
        self.sh.held.fetch_add(1, Ordering::Relaxed);
        if self.sh.idle.scan.swap(true, Ordering::AcqRel) {
            self.sh.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The peer answered the goodbye on outgoing connection `id` by closing its side.
    #[cold]
    pub(super) fn finish_out(&mut self, id: u64) {
        let Some(l) = self.outs.remove(&id) else {
            return;
        };
        let _ = epoll::delete(&self.sh.epoll, &l.fd);
        // Closed only when quiet: no request on it waits for a response.
        debug_assert!(self.tracked.values().all(|&(link, _)| link != id));
        l.idle.done.store(true, Ordering::Release);
    }

    /// Accepted connection `id` ended with a goodbye: closes it, the peer stays.
    #[cold]
    pub(super) fn finish_in(&mut self, id: u64) {
        let Some(l) = self.ins.remove(&id) else {
            return;
        };
        let _ = epoll::delete(&self.sh.epoll, &l.fd);
        self.staged -= l.buf.len().saturating_sub(RX_BUF);
    }
}
