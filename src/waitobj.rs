//! Wait objects: how a thread blocks until a CQ, counter or EQ has something for it
//! (`FI_WAIT_*`, see `man 3 fi_cq`, `man 3 fi_poll`).
//!
//! A [`Waiter`] is shared (through `Arc`) by the objects that signal it and the
//! threads that wait on it. The protocol is an event count:
//!
//! 1. `let t = waiter.prepare();` (registers the thread as interested and snapshots
//!    the signal sequence number; the registration lasts as long as the token);
//! 2. re-check the condition (e.g. try to read the CQ); return if satisfied;
//! 3. `waiter.wait(t, timeout)` returns at once if [`signal`](Waiter::signal) was
//!    called after step 1, otherwise blocks until it is.
//!
//! [`signal`](Waiter::signal) runs once per completion and once per packet a transport
//! delivers, usually with nobody waiting. It then costs one plain load: it reads the
//! number of live [`WaitToken`]s and, when that is zero, neither bumps the sequence
//! (nobody holds a snapshot to compare it with) nor notifies; for `FI_WAIT_FD` it
//! also loads the fd's "already signaled" flag and writes the pipe only if it is
//! clear. With a registered token it costs one atomic `fetch_add`: the state word
//! packs the sequence number (high 32 bits) with the number of threads blocked on the
//! condition variable (low 32 bits), so that single RMW both publishes the signal and
//! tells whether anyone needs a `notify`.
//!
//! # The one window where a wakeup can be late
//!
//! Skipping the RMW makes the signal side a store (the signaler's condition, e.g. a
//! ring index) followed by a load (the token count), and the wait side an RMW (the
//! registration in `prepare`) followed by a load (the condition). Without a
//! StoreLoad barrier on the signal side the hardware may let the signaler's load
//! complete before its store is visible (x86 store buffering), so a waiter can
//! register, miss the condition, and the signaler can miss the registration: the
//! store-buffer window, tens of nanoseconds wide. No barrier on the wait side can
//! close it (the waiter's condition check has already happened), and a barrier on
//! the signal side is exactly the locked instruction this design removes. The
//! consequence is bounded: the waiter sleeps until the next signal or the end of its
//! timeout, and every blocking wait in the core (`sread`, `fi_cntr_wait`, `fi_wait`,
//! the progress thread) sleeps in slices of at most 5 ms and re-checks. Signalers that
//! publish their condition with a `SeqCst` write or RMW (a locked instruction on x86)
//! are exact: the C++ memory model's single total order over `SeqCst` operations then
//! orders either the registration before the signaler's load or the condition before
//! the waiter's check.
//!
//! Kinds:
//! - `FI_WAIT_MUTEX_COND` (and `FI_WAIT_UNSPEC`, which resolves to it): `Mutex` + `Condvar`.
//! - `FI_WAIT_FD`: a pipe, readable while signaled, for the application's
//!   `epoll`; written at most once per [`clear`](Waiter::clear) cycle. One waiting
//!   thread at a time blocks in `poll(2)` on it and drains it when woken; further
//!   concurrent waiters use a condition variable, because a drain by one poller could
//!   otherwise consume the readiness another poller is about to wait for.
//! - `FI_WAIT_YIELD`: `sched_yield` polling of the sequence number.
//! - `FI_WAIT_NONE`: signals are ignored and waits fail with `FI_ENOSYS`, like
//!   `fi_cq_sread` on a CQ without a wait object.

use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::attr::WaitObj;
use crate::error::{Error, Result};

/// One signal in the state word: the sequence number lives in the high half.
const SEQ_ONE: u64 = 1 << 32;
/// The low half of the state word: threads registered on the condition variable.
const WAITERS_MASK: u64 = SEQ_ONE - 1;

#[inline(always)]
const fn seq_of(state: u64) -> u32 {
    (state >> 32) as u32
}

/// A snapshot of a [`Waiter`]'s signal sequence, taken by [`Waiter::prepare`], and a
/// registration: while any token of a waiter lives, its signals bump the sequence
/// (one atomic RMW each); with none alive they are a plain load. Dropping the token
/// (or passing it to [`Waiter::wait`]) ends the registration. `clone` registers again
/// with the same snapshot.
///
/// The sequence wraps after 2^32 signals; a wait is only confused if exactly a
/// multiple of 2^32 signals happen between `prepare` and the start of `wait`.
#[derive(Debug)]
pub struct WaitToken<'a> {
    waiter: &'a Waiter,
    seq: u32,
}

impl WaitToken<'_> {
    /// The sequence number snapshot.
    #[inline]
    pub fn seq(&self) -> u32 {
        self.seq
    }
}

impl Clone for WaitToken<'_> {
    fn clone(&self) -> Self {
        self.waiter.armed.fetch_add(1, SeqCst);
        WaitToken {
            waiter: self.waiter,
            seq: self.seq,
        }
    }
}

impl Drop for WaitToken<'_> {
    #[inline]
    fn drop(&mut self) {
        self.waiter.armed.fetch_sub(1, SeqCst);
    }
}

/// The sequence number inside a wait (the token's registration has ended).
#[derive(Clone, Copy)]
struct Snapshot(u32);

/// `Mutex` + `Condvar` pair; the mutex guards nothing but the check-then-sleep window.
struct Cond {
    lock: Mutex<()>,
    cv: Condvar,
}

impl Cond {
    fn new() -> Self {
        Cond {
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Taking the lock orders this notify after any waiter's check-then-sleep
    /// window, so a waiter that saw the old sequence is already asleep on `cv`.
    fn notify(&self) {
        drop(self.lock.lock().unwrap_or_else(PoisonError::into_inner));
        self.cv.notify_all();
    }
}

/// The byte a peer in another process writes to a waiter's pipe
/// ([`Waiter::remote_signal`]): it ends a [`Waiter::wait`] blocked on the pipe (a
/// spurious wake-up for the caller's loop, which then drives progress), where the byte
/// of a local signal that the sequence number does not show is merely consumed.
pub const REMOTE_WAKE: u8 = 2;

/// The pipe of an `FI_WAIT_FD` waiter: readable while signaled. A pipe rather than an
/// eventfd because peers in other processes can open its write end through
/// `/proc/<pid>/fd/<n>` (an eventfd cannot be reopened that way) to wake a thread
/// that sleeps on the read end ([`Waiter::remote_signal`]).
struct FdSignal {
    /// The read end (closed on drop): what applications poll.
    file: File,
    /// The write end.
    tx: File,
    /// The pipe's inode, which names it to remote signalers.
    ino: u64,
    /// True from the write that made the fd readable until the next drain, so
    /// repeated signals do not repeat the `write` syscall.
    signaled: AtomicBool,
    /// True while one thread blocks in `poll(2)` on the fd (only that thread
    /// drains the fd inside [`Waiter::wait`]).
    poller: AtomicBool,
}

impl FdSignal {
    fn new() -> Result<Self> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill; the flags are
        // valid constants.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: both fds were just returned by pipe2, are valid and owned by nobody
        // else.
        let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let file = File::from(rx);
        let ino = file.metadata()?.ino();
        Ok(FdSignal {
            file,
            tx: File::from(tx),
            ino,
            signaled: AtomicBool::new(false),
            poller: AtomicBool::new(false),
        })
    }

    /// Makes the fd readable unless a previous signal already did.
    #[inline]
    fn raise(&self) {
        // The load keeps the common "already signaled" case free of a locked RMW.
        // Both are SeqCst: a drainer that stores `false` after this load read `true`
        // is then guaranteed to see the sequence increment made before it.
        if !self.signaled.load(SeqCst) && !self.signaled.swap(true, SeqCst) {
            self.write();
        }
    }

    #[cold]
    fn write(&self) {
        loop {
            match (&self.tx).write(&[1]) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // EAGAIN means the pipe is full: the fd is readable anyway.
                _ => return,
            }
        }
    }

    /// Consumes the fd's readiness; returns whether anything was pending.
    ///
    /// Read first, then reset the flag: a signal between the two finds the flag set
    /// and skips its write, but the caller re-checks its condition after the drain,
    /// and the sequence number (incremented before the flag test) shows the signal.
    /// The other order could leave the flag set with the fd unreadable, so no later
    /// signal would ever make it readable again.
    fn drain(&self) -> bool {
        self.drain_seen().0
    }

    /// [`drain`](Self::drain), also telling whether a peer in another process wrote
    /// ([`REMOTE_WAKE`]).
    fn drain_seen(&self) -> (bool, bool) {
        let mut buf = [0u8; 64];
        let (mut consumed, mut remote) = (false, false);
        loop {
            match (&self.file).read(&mut buf) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // Several signalers (remote ones too) may each have written a byte.
                Ok(n) if n > 0 => {
                    consumed = true;
                    remote |= buf[..n].contains(&REMOTE_WAKE);
                }
                _ => break,
            }
        }
        self.signaled.store(false, SeqCst);
        (consumed, remote)
    }

    /// `poll(2)` for readability; `Ok(false)` on timeout or `EINTR` (the caller
    /// re-checks the sequence and the deadline and polls again).
    fn poll(&self, timeout_ms: i32) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid, exclusively borrowed pollfd array of length 1
        // for the duration of the call; the fd stays open while `self` lives.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e.into())
            };
        }
        Ok(n > 0 && pfd.revents & libc::POLLIN != 0)
    }
}

/// Releases the poller role when a polling wait ends, however it ends.
struct PollerRole<'a>(&'a AtomicBool);

impl Drop for PollerRole<'_> {
    fn drop(&mut self) {
        self.0.store(false, SeqCst);
    }
}

/// Removes a condition-variable registration when a wait ends.
struct Registration<'a>(&'a AtomicU64);

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// A wait object (`FI_WAIT_*`): signaled by CQs, counters and EQs, waited on by
/// `sread`, `fi_cntr_wait`, `fi_wait`. `Send + Sync`; share it through `Arc`.
pub struct Waiter {
    /// The resolved kind (never `Unspec` or `Set`).
    kind: WaitObj,
    /// Sequence number (high 32 bits) | condition-variable waiters (low 32 bits).
    state: AtomicU64,
    /// Live [`WaitToken`]s: while zero, `signal` skips its RMW.
    armed: AtomicUsize,
    /// For `MutexCond`, and `Fd` waiters other than the poller.
    cond: Option<Cond>,
    /// For `Fd`.
    fd: Option<FdSignal>,
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.load(SeqCst);
        f.debug_struct("Waiter")
            .field("kind", &self.kind)
            .field("seq", &seq_of(state))
            .field("cond_waiters", &(state & WAITERS_MASK))
            .field("tokens", &self.armed.load(SeqCst))
            .field("fd", &self.fd())
            .finish()
    }
}

impl Waiter {
    /// The wait object of a CQ, counter or EQ opened with `kind`: none for
    /// `FI_WAIT_NONE`, the set's shared waiter for `FI_WAIT_SET` (`Err(Inval)` without a
    /// set), else a new one of that kind.
    pub fn for_object(kind: WaitObj, set: Option<Arc<Waiter>>) -> Result<Option<Arc<Waiter>>> {
        Ok(match kind {
            WaitObj::None => None,
            WaitObj::Set => Some(set.ok_or(Error::Inval)?),
            k => Some(Arc::new(Waiter::new(k)?)),
        })
    }

    /// A wait object of `kind`.
    ///
    /// `WaitObj::Unspec` resolves to `MutexCond` (what [`kind`](Self::kind) then
    /// reports). `WaitObj::Set` is `Err(Error::Inval)`: a wait set owns a `Waiter`
    /// rather than being one. `Fd` may fail with the `pipe2(2)` error (e.g.
    /// `Error::MFile`).
    pub fn new(kind: WaitObj) -> Result<Self> {
        let (kind, cond, fd) = match kind {
            WaitObj::None => (WaitObj::None, None, None),
            WaitObj::Unspec | WaitObj::MutexCond => (WaitObj::MutexCond, Some(Cond::new()), None),
            WaitObj::Fd => (WaitObj::Fd, Some(Cond::new()), Some(FdSignal::new()?)),
            WaitObj::Yield => (WaitObj::Yield, None, None),
            WaitObj::Set => return Err(Error::Inval),
        };
        Ok(Waiter {
            kind,
            state: AtomicU64::new(0),
            armed: AtomicUsize::new(0),
            cond,
            fd,
        })
    }

    /// The kind of wait object (`Unspec` was resolved to `MutexCond`).
    #[inline]
    pub fn kind(&self) -> WaitObj {
        self.kind
    }

    #[inline(always)]
    fn seq(&self) -> u32 {
        seq_of(self.state.load(SeqCst))
    }

    /// Takes a token before re-checking the wait condition; pass it to
    /// [`wait`](Self::wait). The token registers the caller until it is dropped.
    #[inline]
    pub fn prepare(&self) -> WaitToken<'_> {
        // Register before the snapshot (both SeqCst): a signal that misses the
        // registration is then ordered before the snapshot and the caller's check,
        // up to the store-buffer window described in the module docs.
        self.armed.fetch_add(1, SeqCst);
        WaitToken {
            waiter: self,
            seq: self.seq(),
        }
    }

    /// Blocks until [`signal`](Self::signal) has been called after the
    /// [`prepare`](Self::prepare) that returned `token`, or until `timeout`
    /// (`None`: forever).
    ///
    /// `Ok(())` when signaled (immediately if the signal already happened),
    /// `Err(Error::Again)` on timeout (as `sread` returns `-FI_EAGAIN`),
    /// `Err(Error::NoSys)` for `FI_WAIT_NONE`. Interrupted system calls are retried.
    /// Spurious `Ok` returns are possible (e.g. a signal for another condition), so
    /// callers loop: prepare, check, wait. A token of another waiter is
    /// `Err(Error::Inval)`.
    pub fn wait(&self, token: WaitToken<'_>, timeout: Option<Duration>) -> Result<()> {
        if !std::ptr::eq(token.waiter, self) {
            return Err(Error::Inval);
        }
        // The registration stays for the whole wait: signals must keep bumping the
        // sequence while this thread sleeps.
        let (token, _registered) = (Snapshot(token.seq), token);
        // A timeout too large to represent is as good as forever.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        match (&self.kind, &self.fd, &self.cond) {
            (WaitObj::None, _, _) => Err(Error::NoSys),
            (WaitObj::Yield, _, _) => self.wait_yield(token, deadline),
            (_, Some(fd), _) if !fd.poller.swap(true, SeqCst) => {
                let _role = PollerRole(&fd.poller);
                self.wait_poll(fd, token, deadline)
            }
            (_, _, Some(cond)) => self.wait_cond(cond, token, deadline),
            // Unreachable by construction; still no panic.
            _ => Err(Error::NoSys),
        }
    }

    fn wait_yield(&self, token: Snapshot, deadline: Option<Instant>) -> Result<()> {
        loop {
            if self.seq() != token.0 {
                return Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::Again);
            }
            // sched_yield(2).
            std::thread::yield_now();
        }
    }

    fn wait_cond(&self, cond: &Cond, token: Snapshot, deadline: Option<Instant>) -> Result<()> {
        // Register before the check: a signal ordered after this RMW sees the count
        // and notifies; one ordered before it is visible in `prev`.
        let prev = self.state.fetch_add(1, SeqCst);
        let _reg = Registration(&self.state);
        if seq_of(prev) != token.0 {
            return Ok(());
        }
        let mut guard = cond.lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.seq() != token.0 {
                return Ok(());
            }
            guard = match deadline {
                None => cond.cv.wait(guard).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Again);
                    }
                    cond.cv
                        .wait_timeout(guard, d - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    fn wait_poll(&self, fd: &FdSignal, token: Snapshot, deadline: Option<Instant>) -> Result<()> {
        loop {
            if self.seq() != token.0 {
                return Ok(());
            }
            let timeout_ms = match deadline {
                None => -1,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Again);
                    }
                    // Round up so poll never returns before the deadline.
                    let ns = (d - now).as_nanos().div_ceil(1_000_000);
                    i32::try_from(ns).unwrap_or(i32::MAX)
                }
            };
            if fd.poll(timeout_ms)? {
                // Either our signal (seen by the next check) or a stale one from
                // before `prepare`; consuming it lets the next poll block. A peer in
                // another process has no sequence to bump: its byte ends the wait.
                if fd.drain_seen().1 {
                    return Ok(());
                }
            }
        }
    }

    /// Wakes all threads waiting with tokens taken before this call.
    ///
    /// With no live token it is one load (no atomic RMW), plus for `FI_WAIT_FD` one
    /// load of the fd flag and a pipe write only if the fd is not already
    /// signaled; with tokens alive, one atomic `fetch_add`. See the module docs for
    /// the store-buffer window. A no-op for `FI_WAIT_NONE`.
    // Forced inline: a transport rings the doorbell on every send, and the call cost
    // more than the few loads of the common case.
    #[inline(always)]
    pub fn signal(&self) {
        if self.kind == WaitObj::None {
            return;
        }
        // A SeqCst load is a plain `mov` on x86 (the stores carry the fence).
        if self.armed.load(SeqCst) == 0 {
            if let Some(fd) = &self.fd {
                fd.raise();
            }
            return;
        }
        self.signal_registered();
    }

    #[inline(never)]
    fn signal_registered(&self) {
        let prev = self.state.fetch_add(SEQ_ONE, SeqCst);
        if let Some(fd) = &self.fd {
            fd.raise();
        }
        if prev & WAITERS_MASK != 0 {
            self.notify_waiters();
        }
    }

    #[cold]
    fn notify_waiters(&self) {
        if let Some(cond) = &self.cond {
            cond.notify();
        }
    }

    /// For `FI_WAIT_FD`: the pipe's read end, readable while signaled (to add to the
    /// application's `epoll`/`poll` set). `None` for other kinds.
    ///
    /// The protocol for the application is `clear()`, then check the queue, then
    /// `epoll_wait`. A thread blocked in [`wait`](Self::wait) also consumes the
    /// fd's readiness, as `fi_cq_sread` does in libfabric.
    #[inline]
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.file.as_raw_fd())
    }

    /// For `FI_WAIT_FD`: the write end of the pipe behind [`fd`](Self::fd), as (fd
    /// number in this process, inode), for providers whose peers in other processes
    /// wake a sleeper by writing a byte to it (opened through `/proc/<pid>/fd/<n>`,
    /// after checking the inode) the byte [`REMOTE_WAKE`]. `None` for other kinds.
    pub fn remote_signal(&self) -> Option<(RawFd, u64)> {
        self.fd.as_ref().map(|f| (f.tx.as_raw_fd(), f.ino))
    }

    /// Consumes a pending fd signal (a non-blocking drain of the pipe), so the fd
    /// is readable again only after the next [`signal`](Self::signal). Signals that
    /// race with `clear` may be consumed: check the condition after clearing.
    /// A no-op for other kinds.
    pub fn clear(&self) {
        if let Some(fd) = &self.fd {
            // A thread blocked in `wait` may be about to poll for the readiness just
            // consumed; give it back so that thread re-checks its sequence.
            if fd.drain() && fd.poller.load(SeqCst) {
                fd.write();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Barrier};
    use std::thread;

    const KINDS: [WaitObj; 4] = [
        WaitObj::Unspec,
        WaitObj::MutexCond,
        WaitObj::Fd,
        WaitObj::Yield,
    ];
    /// Long enough never to expire in a passing test; a lost wakeup shows up as `Again`.
    const LONG: Duration = Duration::from_secs(30);

    fn readable(fd: RawFd) -> bool {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd array of length 1; timeout 0 never blocks.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        assert!(n >= 0);
        n == 1 && pfd.revents & libc::POLLIN != 0
    }

    #[test]
    fn construction_and_kinds() {
        assert_eq!(Waiter::new(WaitObj::Set).unwrap_err(), Error::Inval);
        assert_eq!(
            Waiter::new(WaitObj::Unspec).unwrap().kind(),
            WaitObj::MutexCond
        );
        for k in [
            WaitObj::None,
            WaitObj::MutexCond,
            WaitObj::Fd,
            WaitObj::Yield,
        ] {
            let w = Waiter::new(k).unwrap();
            assert_eq!(w.kind(), k);
            assert_eq!(w.fd().is_some(), k == WaitObj::Fd);
            w.clear();
            assert!(format!("{w:?}").contains("Waiter"));
        }
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Waiter>();
    }

    #[test]
    fn wait_none_rejected() {
        let w = Waiter::new(WaitObj::None).unwrap();
        let t = w.prepare();
        w.signal();
        assert_eq!(w.wait(t.clone(), None), Err(Error::NoSys));
        assert_eq!(w.wait(t, Some(Duration::ZERO)), Err(Error::NoSys));
    }

    #[test]
    fn signal_before_wait_returns_immediately() {
        for k in KINDS {
            let w = Waiter::new(k).unwrap();
            let t = w.prepare();
            w.signal();
            assert_eq!(w.wait(t.clone(), Some(Duration::ZERO)), Ok(()), "{k:?}");
            // Would hang if the signal were lost.
            assert_eq!(w.wait(t, None), Ok(()), "{k:?}");
        }
    }

    #[test]
    fn timeout_returns_again() {
        for k in KINDS {
            let w = Waiter::new(k).unwrap();
            let t = w.prepare();
            assert_eq!(
                w.wait(t.clone(), Some(Duration::ZERO)),
                Err(Error::Again),
                "{k:?}"
            );
            assert_eq!(
                w.wait(t, Some(Duration::from_millis(20))),
                Err(Error::Again),
                "{k:?}"
            );
            // A signal from before `prepare` does not satisfy a later token.
            w.signal();
            let t = w.prepare();
            assert_eq!(
                w.wait(t, Some(Duration::from_millis(5))),
                Err(Error::Again),
                "{k:?}"
            );
        }
    }

    #[test]
    fn huge_timeout_is_forever_not_panic() {
        for k in KINDS {
            let w = Waiter::new(k).unwrap();
            let t = w.prepare();
            w.signal();
            assert_eq!(w.wait(t, Some(Duration::MAX)), Ok(()), "{k:?}");
        }
    }

    #[test]
    fn cross_thread_wake() {
        for k in KINDS {
            let w = Arc::new(Waiter::new(k).unwrap());
            let ready = Arc::new(AtomicBool::new(false));
            let (w2, r2) = (w.clone(), ready.clone());
            let h = thread::spawn(move || -> Result<()> {
                loop {
                    let t = w2.prepare();
                    if r2.load(SeqCst) {
                        return Ok(());
                    }
                    w2.wait(t, Some(LONG))?;
                }
            });
            thread::sleep(Duration::from_millis(20));
            ready.store(true, SeqCst);
            w.signal();
            assert_eq!(h.join().unwrap(), Ok(()), "{k:?}");
        }
    }

    #[test]
    fn one_signal_wakes_all_waiters() {
        for k in KINDS {
            let w = Arc::new(Waiter::new(k).unwrap());
            let n = 4;
            let barrier = Arc::new(Barrier::new(n + 1));
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let (w, b) = (w.clone(), barrier.clone());
                    thread::spawn(move || {
                        let t = w.prepare();
                        b.wait();
                        w.wait(t, Some(LONG))
                    })
                })
                .collect();
            barrier.wait();
            thread::sleep(Duration::from_millis(20));
            w.signal();
            for h in handles {
                assert_eq!(h.join().unwrap(), Ok(()), "{k:?}");
            }
        }
    }

    /// Producer/consumer stress: every item is eventually seen without any wait
    /// running into its (long) timeout, i.e. no lost wakeups.
    #[test]
    fn no_lost_wakeups_under_stress() {
        const ITEMS: usize = 20_000;
        for k in KINDS {
            let w = Arc::new(Waiter::new(k).unwrap());
            let produced = Arc::new(AtomicUsize::new(0));
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    let (w, p) = (w.clone(), produced.clone());
                    thread::spawn(move || -> Result<usize> {
                        let mut waits = 0usize;
                        loop {
                            let t = w.prepare();
                            if p.load(SeqCst) >= ITEMS {
                                return Ok(waits);
                            }
                            w.wait(t, Some(LONG))?;
                            waits += 1;
                        }
                    })
                })
                .collect();
            for i in 0..ITEMS {
                produced.fetch_add(1, SeqCst);
                w.signal();
                if i % 1000 == 0 {
                    thread::yield_now();
                }
            }
            for h in consumers {
                assert!(h.join().unwrap().is_ok(), "{k:?}");
            }
        }
    }

    #[test]
    fn fd_readable_after_signal_not_after_clear() {
        let w = Waiter::new(WaitObj::Fd).unwrap();
        let fd = w.fd().unwrap();
        assert!(!readable(fd));
        w.signal();
        assert!(readable(fd));
        w.signal();
        assert!(readable(fd));
        w.clear();
        assert!(!readable(fd));
        // The next clear cycle signals again.
        w.signal();
        assert!(readable(fd));
        w.clear();
        assert!(!readable(fd));
    }

    #[test]
    fn fd_written_once_per_clear_cycle() {
        let w = Waiter::new(WaitObj::Fd).unwrap();
        for _ in 0..1000 {
            w.signal();
        }
        // One byte in the pipe: the other 999 signals found the fd readable already.
        let mut buf = [0u8; 8];
        let f = &w.fd.as_ref().unwrap().file;
        assert_eq!((&*f).read(&mut buf).unwrap(), 1);
    }

    /// The write end handed to remote signalers reopens through `/proc` (what a peer
    /// process does) with the advertised inode, and its byte makes the fd readable
    /// until `clear`.
    #[test]
    fn remote_signal_reopens_through_proc() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let w = Waiter::new(WaitObj::Fd).unwrap();
        let (fd, ino) = w.remote_signal().unwrap();
        let path = format!("/proc/{}/fd/{fd}", std::process::id());
        let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        let m = f.metadata().unwrap();
        assert!(m.file_type().is_fifo());
        assert_eq!(m.ino(), ino);
        assert!(!readable(w.fd().unwrap()));
        f.write_all(&[1]).unwrap();
        f.write_all(&[1]).unwrap();
        assert!(readable(w.fd().unwrap()));
        w.clear();
        assert!(!readable(w.fd().unwrap()), "clear drains every byte");
        assert_eq!(
            Waiter::new(WaitObj::MutexCond).unwrap().remote_signal(),
            None
        );
    }

    /// A remote signaler's byte ends a wait that has no timeout (nothing else could),
    /// while a stale local byte is only consumed.
    #[test]
    fn remote_byte_ends_a_wait() {
        let w = Waiter::new(WaitObj::Fd).unwrap();
        let (fd, _) = w.remote_signal().unwrap();
        let path = format!("/proc/{}/fd/{fd}", std::process::id());
        let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        w.signal();
        let t = w.prepare();
        assert_eq!(
            w.wait(t, Some(Duration::from_millis(10))),
            Err(Error::Again),
            "a stale local byte does not end the wait"
        );
        thread::scope(|s| {
            let t = w.prepare();
            let h = s.spawn(|| w.wait(t, None));
            thread::sleep(Duration::from_millis(20));
            f.write_all(&[REMOTE_WAKE]).unwrap();
            assert_eq!(h.join().unwrap(), Ok(()));
        });
    }

    #[test]
    fn fd_wait_drains() {
        let w = Arc::new(Waiter::new(WaitObj::Fd).unwrap());
        let fd = w.fd().unwrap();
        let t = w.prepare();
        thread::scope(|s| {
            let h = s.spawn(|| w.wait(t, Some(LONG)));
            thread::sleep(Duration::from_millis(20));
            w.signal();
            assert_eq!(h.join().unwrap(), Ok(()));
        });
        // The poller consumed the readiness: the fd does not stay readable.
        assert!(!readable(fd));
        // A stale readiness does not make a later wait spin or succeed falsely.
        w.signal();
        let t = w.prepare();
        assert_eq!(
            w.wait(t, Some(Duration::from_millis(10))),
            Err(Error::Again)
        );
        assert!(!readable(fd));
    }

    #[test]
    fn fd_clear_racing_with_waiter_loses_nothing() {
        for _ in 0..50 {
            let w = Arc::new(Waiter::new(WaitObj::Fd).unwrap());
            let t = w.prepare();
            thread::scope(|s| {
                let h = s.spawn(|| w.wait(t, Some(LONG)));
                thread::yield_now();
                w.signal();
                w.clear();
                assert_eq!(h.join().unwrap(), Ok(()));
            });
        }
    }

    /// With no live token a signal only loads: the sequence stays, and a token taken
    /// afterwards is not satisfied by it. A live token (also one held by a clone)
    /// makes signals count.
    #[test]
    fn signals_count_only_while_a_token_lives() {
        for k in KINDS {
            let w = Waiter::new(k).unwrap();
            let seq0 = w.prepare().seq();
            w.signal();
            assert_eq!(w.armed.load(SeqCst), 0, "{k:?}");
            assert_eq!(w.prepare().seq(), seq0, "{k:?}");
            let t = w.prepare();
            let t2 = t.clone();
            drop(t);
            assert_eq!(w.armed.load(SeqCst), 1, "{k:?}");
            w.signal();
            assert_eq!(w.wait(t2, Some(Duration::ZERO)), Ok(()), "{k:?}");
            assert_eq!(w.armed.load(SeqCst), 0, "{k:?}");
            assert_ne!(w.prepare().seq(), seq0, "{k:?}");
        }
    }

    #[test]
    fn foreign_token_rejected() {
        let a = Waiter::new(WaitObj::MutexCond).unwrap();
        let b = Waiter::new(WaitObj::MutexCond).unwrap();
        assert_eq!(a.wait(b.prepare(), Some(Duration::ZERO)), Err(Error::Inval));
        assert_eq!(b.armed.load(SeqCst), 0);
    }

    /// The FD kind still raises the fd with no token alive (an application's epoll
    /// holds no token).
    #[test]
    fn fd_raised_without_tokens() {
        let w = Waiter::new(WaitObj::Fd).unwrap();
        w.signal();
        assert!(readable(w.fd().unwrap()));
    }

    #[test]
    fn many_signals_without_waiters_do_not_block() {
        for k in [
            WaitObj::None,
            WaitObj::MutexCond,
            WaitObj::Fd,
            WaitObj::Yield,
        ] {
            let w = Waiter::new(k).unwrap();
            for _ in 0..1_000_000 {
                w.signal();
            }
            // Nobody held a token: no signal needed to count.
            assert_eq!(w.prepare().seq(), 0);
        }
    }
}
