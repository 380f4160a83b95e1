//! Claims: a large payload received straight into its destination, over several polls.
//!
//! A byte-stream transport learns a frame's header long before its payload is in: a
//! 64 MiB message takes many reads. Rather than staging the payload whole and handing
//! it over at the end (a copy of every byte, and memory the size of the message), it
//! asks the core, on seeing the header, for the payload's destination
//! ([`Sink::claim`](super::Sink::claim)): the posted receive the message matches, the
//! registered memory an RMA write targets, or the buffer of the read a response
//! answers. A [`Claim`] is the transport's handle on that destination. The transport
//! then moves bytes into it as they arrive ([`Sink::fill`](super::Sink::fill), called
//! with the socket read), throws away what does not fit ([`Claim::skip`]: a truncated
//! receive) and, with the last byte or when the connection breaks, hands it back
//! ([`Sink::claimed`](super::Sink::claimed)), which completes the operation once.
//!
//! The bytes themselves never pass through the claim: the core writes the destination
//! (it owns the `unsafe` of application buffers and the lock that keeps registered
//! memory registered), so a claim is plain numbers and a transport needs no `unsafe`.

/// A transport's handle on the destination of one payload (see the [module](self)).
///
/// Not `Clone`: each claim is handed back exactly once, with
/// [`Sink::claimed`](super::Sink::claimed); the core completes its operation then (or
/// when the endpoint closes first, with `FI_ECANCELED`, after which a late hand-back
/// is ignored).
#[must_use = "a claim must be handed back with Sink::claimed"]
#[derive(Debug, PartialEq, Eq)]
pub struct Claim {
    id: u64,
    len: usize,
    done: usize,
    placed: usize,
    room: usize,
}

impl Claim {
    /// A claim on a destination of `room` bytes for a payload of `len` bytes, under the
    /// sink's id `id`. Made by sinks ([`Sink::claim`](super::Sink::claim)), not by
    /// transports.
    pub fn new(id: u64, len: usize, room: usize) -> Claim {
        Claim {
            id,
            len,
            done: 0,
            placed: 0,
            room: room.min(len),
        }
    }

    /// The sink's id of this claim.
    #[inline]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Payload bytes of the frame.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Payload bytes not yet moved (placed or skipped): what the transport still reads.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.len - self.done
    }

    /// Payload bytes the destination still takes, in order, from the next one: 0 once
    /// it is full (the rest of a truncated message) or was withdrawn. Then the
    /// transport reads the rest into a buffer of its own and [`skip`](Self::skip)s it.
    #[inline]
    pub fn room(&self) -> usize {
        self.room - self.placed
    }

    /// Payload bytes placed in the destination so far.
    #[inline]
    pub fn placed(&self) -> usize {
        self.placed
    }

    /// Records `n` payload bytes the transport read and discarded: only bytes with no
    /// room left. More than [`remaining`](Self::remaining) is a transport bug, counted
    /// as the remaining bytes (a debug assertion says so).
    #[inline]
    pub fn skip(&mut self, n: usize) {
        debug_assert!(self.room() == 0, "skipped bytes that had room");
        debug_assert!(n <= self.remaining(), "skipped past the payload");
        self.done += n.min(self.remaining());
    }

    /// Records `n` bytes placed in the destination (by the sink). At most
    /// [`room`](Self::room) count.
    #[inline]
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.room());
        self.placed += n;
        self.done += n;
    }

    /// Withdraws the rest of the destination (by the sink, when it can no longer be
    /// written): the remaining bytes are skipped, and the sink reports the failure
    /// when the claim is handed back.
    #[inline]
    pub fn withdraw(&mut self) {
        self.room = self.placed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_placed_and_skipped_bytes() {
        let mut c = Claim::new(7, 10, 6);
        assert_eq!((c.id(), c.len(), c.remaining(), c.room()), (7, 10, 10, 6));
        c.advance(4);
        assert_eq!((c.placed(), c.remaining(), c.room()), (4, 6, 2));
        // More than the room counts as the room.
        c.advance(5);
        assert_eq!((c.placed(), c.remaining(), c.room()), (6, 4, 0));
        c.skip(4);
        assert_eq!(c.remaining(), 0);
        // A destination larger than the payload is filled to the payload.
        let c = Claim::new(1, 3, 100);
        assert_eq!(c.room(), 3);
        assert!(!c.is_empty() && Claim::new(1, 0, 5).is_empty());
    }

    #[test]
    fn withdrawn_destination_takes_nothing_more() {
        let mut c = Claim::new(1, 10, 10);
        c.advance(3);
        c.withdraw();
        assert_eq!((c.room(), c.remaining(), c.placed()), (0, 7, 3));
        c.skip(7);
        assert_eq!(c.remaining(), 0);
    }
}
