//! Wake-ups on arrival for threads that sleep instead of polling.
//!
//! Bytes arriving on a socket ring nobody by themselves: the core's blocking waits
//! (`fi_cq_sread`, a counter wait, the idle progress thread, an application's epoll on
//! a CQ's fd after `fi_trywait`) sleep on a pipe. Before such a sleep the core arms
//! the endpoint ([`fabric::provider::RemoteWake::arm`], with the pipe it will sleep
//! on); a watcher thread per endpoint then waits in `epoll_wait` on the endpoint's
//! sockets and, at the first readiness, writes the wake byte to every armed pipe and
//! signals the endpoint's waker, then disarms. Unarmed, the watcher sleeps on a
//! condition variable and costs nothing: polling threads never pay for it.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use fabric::waitobj::{Waiter, REMOTE_WAKE};
use rustix::event::epoll;

/// How long one `epoll_wait` of an armed watcher lasts before it looks at its state
/// again (a closed endpoint is noticed within this).
const WATCH_SLICE: Duration = Duration::from_millis(100);
/// Pipes remembered at once (a domain's doorbell and a few CQs).
const MAX_TARGETS: usize = 8;

#[derive(Default)]
struct State {
    armed: bool,
    closed: bool,
    /// Pipes to write to: (fd number, inode) as the core named them, and this
    /// process's own descriptor of the same pipe.
    targets: Vec<(RawFd, u64, File)>,
}

/// The wake-up state of one endpoint, shared with its watcher thread.
#[derive(Default)]
pub struct Wake {
    state: Mutex<State>,
    cv: Condvar,
    waker: OnceLock<Arc<Waiter>>,
}

impl Wake {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The waiter to signal on arrival (the domain's doorbell).
    pub fn set_waker(&self, w: Arc<Waiter>) {
        let _ = self.waker.set(w);
    }

    /// Arms the watcher to write to the pipe `target` (write end in this process,
    /// inode) at the next arrival. The pipe is reopened through `/proc/self/fd` and its
    /// inode checked, so a descriptor number reused for something else is never
    /// written to.
    pub fn arm(&self, target: (RawFd, u64)) {
        let mut st = self.lock();
        if !st.targets.iter().any(|t| (t.0, t.1) == target) {
            let Some(f) = open_pipe(target) else {
                return;
            };
            if st.targets.len() == MAX_TARGETS {
                st.targets.remove(0);
            }
            st.targets.push((target.0, target.1, f));
        }
        st.armed = true;
        self.cv.notify_one();
    }

    /// Stops the watcher.
    pub fn close(&self) {
        self.lock().closed = true;
        self.cv.notify_one();
    }

    /// The watcher: sleeps until armed, then waits for readiness on `epoll` and wakes.
    pub fn run(&self, epoll_fd: &OwnedFd) {
        let mut events = [epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        }; 4];
        let slice = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: WATCH_SLICE.as_nanos() as i64,
        };
        loop {
            {
                let mut st = self.lock();
                while !st.armed && !st.closed {
                    st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                if st.closed {
                    return;
                }
            }
            let n = epoll::wait(epoll_fd.as_fd(), &mut events[..], Some(&slice)).unwrap_or(0);
            if n == 0 {
                continue;
            }
            let mut st = self.lock();
            if !st.armed {
                continue;
            }
            st.armed = false;
            for t in &mut st.targets {
                let _ = t.2.write(&[REMOTE_WAKE]);
            }
            drop(st);
            if let Some(w) = self.waker.get() {
                w.signal();
            }
        }
    }
}

/// This process's own descriptor of pipe `(fd, inode)`, if `fd` still is that pipe.
fn open_pipe((fd, ino): (RawFd, u64)) -> Option<File> {
    // Non-blocking: a full pipe already wakes its reader; the watcher never waits.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(format!("/proc/self/fd/{fd}"))
        .ok()?;
    let m = f.metadata().ok()?;
    (m.ino() == ino).then_some(f)
}
