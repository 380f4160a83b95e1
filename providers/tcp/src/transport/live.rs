//! Telling a peer host that vanished from a peer that is only not reading.
//!
//! Keepalive finds a vanished host while a connection carries nothing; with data in
//! flight the kernel retransmits, and without a bound it would go on for many
//! minutes. `TCP_USER_TIMEOUT` bounds that, but it also breaks a connection whose
//! peer advertises a zero window for as long, and a peer process that does not poll
//! (a rank in a long computation) keeps its window shut without being gone: its
//! messages would be lost. So the bound is kept here instead, from `TCP_INFO`: a
//! connection is *stalled* while the kernel retransmits unacknowledged data on a
//! timeout, or while zero-window probes go unanswered; a live peer's kernel answers
//! probes even when its process never reads. A connection stalled at every scan for
//! [`LIVENESS`], with no acknowledgement in that time, is broken like one the peer
//! reset.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long a connection stays stalled before its peer is taken for gone.
pub const LIVENESS: Duration = Duration::from_secs(10);
/// The longest scan period while there are connections: a vanished peer is found
/// within [`LIVENESS`] plus this.
pub(super) const LIVE_TICK: Duration = Duration::from_secs(1);
/// Zero-window probes outstanding at once that mean no answer came: a live peer
/// answers each within a round trip, and the kernel spaces probes by at least its
/// retransmission timeout.
const PROBES_UNANSWERED: u8 = 2;

/// One connection's stall, kept by its sender across scans.
#[derive(Debug, Default)]
pub(super) struct Stall {
    since: Option<Instant>,
}

impl Stall {
    /// Scans connection `fd` at `now`: whether its peer is to be taken for gone.
    pub(super) fn gone(&mut self, fd: &OwnedFd, now: Instant) -> bool {
        let Some(i) = info::read(fd) else {
            // A socket the kernel describes no more is broken already; its own error
            // reaches the receiver.
            self.since = None;
            return false;
        };
        if !stalled(&i) {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(now);
        now.duration_since(since) >= LIVENESS
            && Duration::from_millis(u64::from(i.last_ack_recv_ms)) >= LIVENESS
    }
}

/// The fields of `TCP_INFO` the decision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Info {
    /// Consecutive retransmission timeouts without progress.
    retransmits: u8,
    /// Zero-window probes sent and not answered.
    probes: u8,
    /// Segments sent and not acknowledged.
    unacked: u32,
    /// Milliseconds since the last acknowledgement arrived.
    last_ack_recv_ms: u32,
}

fn stalled(i: &Info) -> bool {
    (i.unacked > 0 && i.retransmits > 0) || i.probes >= PROBES_UNANSWERED
}

#[allow(unsafe_code)]
mod info {
    use super::*;

    /// `TCP_INFO` of `fd`, or `None` when the kernel does not give it.
    pub(super) fn read(fd: &OwnedFd) -> Option<Info> {
        let mut t = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `t` is a writable `tcp_info` of `len` bytes, and the kernel writes at
        // most `len` bytes into it and stores the count in `len`; `fd` is an open
        // socket for the duration of the call.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                t.as_mut_ptr().cast(),
                &mut len,
            )
        };
        // The fields read here are in the first 104 bytes, which every kernel since
        // 2.6 fills.
        if r != 0 || (len as usize) < 104 {
            return None;
        }
        // SAFETY: zero-initialised, then partly written by the kernel: every byte is
        // initialised, and `tcp_info` is plain integers, valid for any bytes.
        let t = unsafe { t.assume_init() };
        Some(Info {
            retransmits: t.tcpi_retransmits,
            probes: t.tcpi_probes,
            unacked: t.tcpi_unacked,
            last_ack_recv_ms: t.tcpi_last_ack_recv,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn stalled_only_on_timeouts_or_unanswered_probes() {
        let base = Info {
            retransmits: 0,
            probes: 0,
            unacked: 0,
            last_ack_recv_ms: 60_000,
        };
        assert!(!stalled(&base), "idle");
        assert!(!stalled(&Info { unacked: 5, ..base }), "in flight");
        assert!(
            !stalled(&Info {
                retransmits: 1,
                ..base
            }),
            "nothing in flight"
        );
        assert!(stalled(&Info {
            unacked: 5,
            retransmits: 1,
            ..base
        }));
        assert!(!stalled(&Info { probes: 1, ..base }), "a probe on its way");
        assert!(stalled(&Info { probes: 2, ..base }));
    }

    /// A peer that does not read: its window shuts, its kernel answers the probes,
    /// and the connection is not stalled however long that lasts.
    #[test]
    fn a_peer_that_does_not_read_is_not_stalled() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_peer, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let chunk = vec![7u8; 1 << 16];
        let mut sent = 0usize;
        loop {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        assert!(sent > 0);
        let fd: OwnedFd = s.into();
        let mut stall = Stall::default();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            let i = info::read(&fd).expect("TCP_INFO");
            assert!(!stalled(&i), "{i:?}");
            assert!(!stall.gone(&fd, Instant::now() + LIVENESS * 2));
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
