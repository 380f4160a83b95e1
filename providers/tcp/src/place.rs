//! Large frames received straight into their destination.
//!
//! A frame larger than a connection's receive buffer ([`RX_BUF`](crate::RX_BUF)) whose
//! payload has a destination in the core (the posted receive a message matches, the
//! registered memory of an RMA write, the buffer of the read a response answers) is
//! claimed when its header is read ([`Sink::claim`]) and its payload read from the
//! socket into that destination, over as many polls as it takes: no staging buffer,
//! and no copy after the kernel's. Bytes the destination has no room for (the tail of
//! a truncated receive) are read into the connection's buffer and dropped. A frame
//! without a destination (an unexpected message, a multi-receive buffer, a request
//! that fails its checks) is staged whole as before, within
//! [`STAGE_BUDGET`](crate::STAGE_BUDGET).

use std::convert::Infallible;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use fabric::provider::wire::Op;
use fabric::provider::{Claim, Sink};
use fabric::NoPull;
use rustix::io::Errno;
use rustix::net::RecvFlags;

static PLACED: AtomicU64 = AtomicU64::new(0);
static STAGED: AtomicU64 = AtomicU64::new(0);

/// How the large frames (beyond [`RX_BUF`](crate::RX_BUF)) this process received
/// were taken in, counted since it started over all its endpoints: a diagnostic, for
/// tests and tuning, with no bearing on any operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeRx {
    /// Frames read straight into their destination.
    pub placed: u64,
    /// Frames staged whole in a buffer of the connection, then copied by the core.
    pub staged: u64,
}

/// The counts of large frames received so far (see [`LargeRx`]).
pub fn large_rx() -> LargeRx {
    LargeRx {
        placed: PLACED.load(Ordering::Relaxed),
        staged: STAGED.load(Ordering::Relaxed),
    }
}

/// Counts a frame that was claimed.
pub(crate) fn count_placed() {
    PLACED.fetch_add(1, Ordering::Relaxed);
}

/// Counts a large frame handed over whole after staging.
pub(crate) fn count_staged() {
    STAGED.fetch_add(1, Ordering::Relaxed);
}

/// Whether frames of op `op` may have a destination to claim.
#[inline]
pub(crate) fn claimable(op: u8) -> bool {
    matches!(
        Op::from_raw(op),
        Some(Op::Msg | Op::Tagged | Op::Write | Op::ReadResp)
    )
}

/// Where placing a claimed payload stopped.
pub(crate) enum Step {
    /// The whole payload is in: the claim goes back to the core.
    Done,
    /// The socket has nothing more now.
    Wait,
    /// The connection's reads for this poll are used up.
    Budget,
    /// The connection ended or failed mid-payload.
    Closed,
}

enum Halt {
    Wait,
    Closed,
}

/// One non-blocking read into `dst` (not empty): the bytes read, or why none were.
fn recv_some(fd: &OwnedFd, dst: &mut [u8]) -> Result<usize, Halt> {
    loop {
        match rustix::net::recv(fd, &mut *dst, RecvFlags::DONTWAIT) {
            Ok((0, _)) => return Err(Halt::Closed),
            Ok((k, _)) => return Ok(k),
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => return Err(Halt::Wait),
            Err(_) => return Err(Halt::Closed),
        }
    }
}

/// Moves the start of a claimed payload that was read already (`bytes`, from the
/// connection's buffer) into the claim: what has room is placed, the rest skipped.
pub(crate) fn take<K: Sink<NoPull>>(sink: &mut K, claim: &mut Claim, bytes: &[u8]) {
    let mut rest = &bytes[..bytes.len().min(claim.remaining())];
    while !rest.is_empty() {
        if claim.room() == 0 {
            claim.skip(rest.len());
            return;
        }
        let r = sink.fill(claim, |dst| {
            let k = dst.len().min(rest.len());
            dst[..k].copy_from_slice(&rest[..k]);
            Ok::<_, Infallible>(k)
        });
        let Ok(k) = r;
        rest = &rest[k..];
    }
}

/// Reads the rest of a claimed payload from `fd` into its destination (the bytes
/// without room into `scratch`, not empty, and dropped), counting each read in
/// `reads` up to `limit`.
pub(crate) fn pump<K: Sink<NoPull>>(
    sink: &mut K,
    claim: &mut Claim,
    fd: &OwnedFd,
    scratch: &mut [u8],
    reads: &mut usize,
    limit: usize,
) -> Step {
    while claim.remaining() > 0 {
        if *reads >= limit {
            return Step::Budget;
        }
        *reads += 1;
        let r = if claim.room() > 0 {
            sink.fill(claim, |dst| recv_some(fd, dst))
        } else {
            let k = claim.remaining().min(scratch.len());
            recv_some(fd, &mut scratch[..k]).inspect(|&n| claim.skip(n))
        };
        match r {
            Ok(_) => {}
            Err(Halt::Wait) => return Step::Wait,
            Err(Halt::Closed) => return Step::Closed,
        }
    }
    Step::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::provider::wire::Header;
    use fabric::provider::Payload;

    /// A sink whose claims fill a buffer of its own (the core's part, in small).
    struct Buf {
        dst: Vec<u8>,
        back: Vec<bool>,
    }

    impl Sink<NoPull> for Buf {
        fn packet(&mut self, _: &Header, _: &[u8], _: Payload<'_, NoPull>) -> bool {
            panic!("no whole frames here")
        }
        fn fill<E>(
            &mut self,
            claim: &mut Claim,
            f: impl FnOnce(&mut [u8]) -> Result<usize, E>,
        ) -> Result<usize, E> {
            let at = claim.placed();
            let end = at + claim.room().min(3);
            let n = f(&mut self.dst[at..end])?;
            claim.advance(n);
            Ok(n)
        }
        fn claimed(&mut self, claim: Claim, status: fabric::Result<()>) {
            assert_eq!(claim.remaining(), 0);
            self.back.push(status.is_ok());
        }
    }

    #[test]
    fn buffered_bytes_are_placed_then_skipped() {
        let mut s = Buf {
            dst: vec![0; 5],
            back: Vec::new(),
        };
        let mut c = Claim::new(1, 8, 5);
        take(&mut s, &mut c, b"abcdefghij");
        assert_eq!((c.placed(), c.remaining()), (5, 0));
        assert_eq!(&s.dst, b"abcde");
        s.claimed(c, Ok(()));
        assert_eq!(s.back, [true]);
    }

    #[test]
    fn socket_bytes_are_placed_and_truncation_skipped() {
        let (a, b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::NONBLOCK,
            None,
        )
        .unwrap();
        rustix::io::write(&a, b"0123456789").unwrap();
        let mut s = Buf {
            dst: vec![0; 6],
            back: Vec::new(),
        };
        let mut c = Claim::new(1, 12, 6);
        let mut scratch = [0u8; 4];
        let mut reads = 0;
        // Two reads of three bytes allowed, then the budget.
        assert!(matches!(
            pump(&mut s, &mut c, &b, &mut scratch, &mut reads, 2),
            Step::Budget
        ));
        assert_eq!(&s.dst, b"012345");
        assert!(matches!(
            pump(&mut s, &mut c, &b, &mut scratch, &mut reads, 100),
            Step::Wait
        ));
        assert_eq!(c.remaining(), 2);
        rustix::io::write(&a, b"ab").unwrap();
        assert!(matches!(
            pump(&mut s, &mut c, &b, &mut scratch, &mut reads, 100),
            Step::Done
        ));
        // A connection that ends mid-payload.
        let mut c = Claim::new(2, 4, 4);
        s.dst = vec![0; 4];
        rustix::io::write(&a, b"xy").unwrap();
        drop(a);
        assert!(matches!(
            pump(&mut s, &mut c, &b, &mut scratch, &mut reads, 100),
            Step::Closed
        ));
        assert_eq!((c.placed(), &s.dst[..2]), (2, &b"xy"[..]));
    }
}
