//! Large frames sent straight from the caller's buffers: a bounded synchronous send.
//!
//! The send API lends the payload only for the duration of the call, so whatever the
//! kernel does not take before `send` returns must be copied aside (the connection's
//! queue). For a small frame that copy is cheap and rare; for a large one it is a
//! second pass over the whole payload whenever the receiver is a little behind. So a
//! frame of more than [`LARGE_TX`] bytes is written by the call itself, with vectored
//! writes from the header and the caller's slices, waiting (in `poll`, not spinning)
//! for the socket to become writable whenever it is full: with a receiver that
//! polls, the payload goes from the caller's memory into the kernel and nothing else
//! copies it.
//!
//! The wait is bounded, as in shm's rendezvous, because the receiver may not be
//! polling at all (a busy process, a receiver on the sender's own thread, two
//! endpoints sending large messages to each other before either receives): the call
//! stops waiting when the socket has taken nothing for [`TX_STALL`] or when the whole
//! frame has taken longer than [`tx_bound`] of its size, and only the part still
//! unwritten then is copied into the connection's queue, which progress writes out
//! later as before. A send of `len` bytes therefore returns within `tx_bound(len)`
//! plus the time of one copy of what is left, whatever the peer does.
//!
//! Order holds: bytes already queued on the connection (earlier frames, a hello) are
//! written out first within the same bound, and if they cannot be, the whole frame
//! is queued behind them. A connection that fails while the call writes is marked
//! dead like any other (`kill`), and the caller reports it.

use std::io::IoSlice;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{SendAncillaryBuffer, SendFlags};

use super::{append, not_yet, TxLink, OUT_KEEP};
use crate::frame::HDR_LEN;

/// Frames (header and payload) larger than this are sent by the call itself from the
/// caller's buffers. The receiver's threshold for reading a payload straight into
/// its destination ([`RX_BUF`](crate::RX_BUF)): a frame either side treats as large,
/// both do.
pub const LARGE_TX: usize = crate::RX_BUF;
/// A large send stops waiting once its socket took nothing for this long: a receiver
/// that polls at least this often keeps the payload out of the queue.
pub const TX_STALL: Duration = Duration::from_millis(5);
/// Fixed part of [`tx_bound`].
const BOUND_BASE: Duration = Duration::from_millis(10);
/// Size-proportional part of [`tx_bound`], per MiB: a link slower than about
/// 500 MB/s has the rest of a large frame copied rather than hold the caller.
const BOUND_PER_MIB: Duration = Duration::from_millis(2);
/// Slices (header included) given to one `sendmsg`; longer gather lists take more
/// calls.
const IOV: usize = 16;

static DIRECT: AtomicU64 = AtomicU64::new(0);
static COPIED: AtomicU64 = AtomicU64::new(0);

/// How the payload bytes of large frames ([`LARGE_TX`]) this process sent left the
/// caller's buffers, counted since it started over all its endpoints: a diagnostic,
/// for tests and tuning, with no bearing on any operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeTx {
    /// Payload bytes the kernel took straight from the caller's buffers.
    pub direct: u64,
    /// Payload bytes copied into a connection's queue because the send's wait was
    /// over ([`TX_STALL`], [`tx_bound`]) or bytes queued before could not be written.
    pub copied: u64,
}

/// The counts so far (see [`LargeTx`]).
pub fn large_tx() -> LargeTx {
    LargeTx {
        direct: DIRECT.load(Ordering::Relaxed),
        copied: COPIED.load(Ordering::Relaxed),
    }
}

/// The longest a send of a `len`-byte payload waits for its socket before it copies
/// what is left: 10 ms plus 2 ms per MiB (besides, it stops after [`TX_STALL`]
/// without progress).
pub fn tx_bound(len: usize) -> Duration {
    BOUND_BASE + BOUND_PER_MIB * (len >> 20) as u32
}

/// What a large send came to.
pub(super) enum Sent {
    /// The whole frame is with the kernel, or in part in the queue after it.
    Done,
    /// The connection failed (it was marked dead); the frame may be cut short.
    Broken,
}

impl TxLink {
    /// Sends the frame `hdr` + `payload` (`total` bytes) from the caller's buffers,
    /// after the bytes already queued, waiting for the socket within the bounds of
    /// the module doc; what is left when they pass is queued.
    pub(super) fn send_large(&mut self, hdr: &[u8], payload: &[&[u8]], total: usize) -> Sent {
        let deadline = Instant::now() + tx_bound(total - HDR_LEN);
        while self.queued() {
            match rustix::net::send(&self.link.fd, &self.out[self.sent..], SendFlags::NOSIGNAL) {
                Ok(n) => self.sent += n,
                Err(Errno::INTR) => {}
                Err(e) if not_yet(e) => {
                    if !writable(&self.link.fd, deadline) {
                        // The earlier bytes are still in the way: this frame waits
                        // behind them, copied.
                        append(&mut self.out, &[hdr], 0);
                        append(&mut self.out, payload, 0);
                        COPIED.fetch_add((total - HDR_LEN) as u64, Ordering::Relaxed);
                        return Sent::Done;
                    }
                }
                Err(_) => return Sent::Broken,
            }
        }
        self.out.clear();
        self.sent = 0;
        if self.out.capacity() > OUT_KEEP {
            self.out.shrink_to(OUT_KEEP);
        }
        let mut written = 0;
        while written < total {
            let mut iov = [IoSlice::new(&[]); IOV];
            let k = gather(&mut iov, hdr, payload, written);
            match rustix::net::sendmsg(
                &self.link.fd,
                &iov[..k],
                &mut SendAncillaryBuffer::default(),
                SendFlags::NOSIGNAL,
            ) {
                Ok(n) => {
                    let body =
                        (written + n).saturating_sub(HDR_LEN) - written.saturating_sub(HDR_LEN);
                    DIRECT.fetch_add(body as u64, Ordering::Relaxed);
                    written += n;
                }
                Err(Errno::INTR) => {}
                Err(e) if not_yet(e) => {
                    if !writable(&self.link.fd, deadline) {
                        append(&mut self.out, &[hdr], written);
                        append(&mut self.out, payload, written.saturating_sub(HDR_LEN));
                        let left = total - written.max(HDR_LEN);
                        COPIED.fetch_add(left as u64, Ordering::Relaxed);
                        return Sent::Done;
                    }
                }
                Err(_) => return Sent::Broken,
            }
        }
        Sent::Done
    }
}

/// Fills `iov` with the bytes of `hdr` then `payload` from byte `skip` on, as many
/// slices as fit; returns how many it filled.
fn gather<'a>(
    iov: &mut [IoSlice<'a>; IOV],
    hdr: &'a [u8],
    payload: &[&'a [u8]],
    mut skip: usize,
) -> usize {
    let mut k = 0;
    for p in std::iter::once(&hdr).chain(payload) {
        if k == IOV {
            break;
        }
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        iov[k] = IoSlice::new(&p[skip..]);
        skip = 0;
        k += 1;
    }
    k
}

/// Waits until `fd` can take more bytes, at most [`TX_STALL`] and not past
/// `deadline`. Returns false if it cannot by then. An error or hang-up on the socket
/// counts as writable: the next write reports it.
fn writable(fd: &OwnedFd, deadline: Instant) -> bool {
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .min(TX_STALL);
        if left.is_zero() {
            return false;
        }
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(fd, PollFlags::OUT)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(Errno::INTR) => {}
            // Cannot wait: write no more here, the queue takes the rest.
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_skips_written_bytes_and_stops_at_the_iov_limit() {
        let h = [1u8; HDR_LEN];
        let a = [2u8; 10];
        let b = [3u8; 5];
        let mut iov = [IoSlice::new(&[]); IOV];
        assert_eq!(gather(&mut iov, &h, &[&a, &b], 0), 3);
        assert_eq!(iov[0].len(), HDR_LEN);
        assert_eq!(gather(&mut iov, &h, &[&a, &b], HDR_LEN + 4), 2);
        assert_eq!((&iov[0][..], &iov[1][..]), (&a[4..], &b[..]));
        assert_eq!(gather(&mut iov, &h, &[&a, &b], HDR_LEN + 15), 0);
        let many = vec![&a[..]; 40];
        assert_eq!(gather(&mut iov, &h, &many, 0), IOV);
    }

    #[test]
    fn the_bound_grows_with_the_size() {
        assert_eq!(tx_bound(0), BOUND_BASE);
        assert_eq!(tx_bound(64 << 20), BOUND_BASE + 64 * BOUND_PER_MIB);
    }
}
