//! Large payloads. A payload too big for the ring is copied once, at post time, into
//! a staging slot of the sender (the core promises callers that send buffers are
//! theirs again when the call returns), and the receiver copies it from there straight
//! into its destination:
//! - cross-memory attach (the default when the start-up probe works): the slot is
//!   private memory of the sender and the receiver reads it with `process_vm_readv`,
//!   so large data never occupies shared memory;
//! - bounce-buffer fallback (`FABRIC_SHM_CMA=0`, or when the kernel refuses the
//!   probe): the slot is an extent of the sender's staging file, which the receiver
//!   maps on first use.
//!
//! The receiver writes the slot's generation into the sender's release word once it
//! has copied the payload; the sender reuses released slots, and slots whose receiver
//! died.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fabric::{Error, Pull, Result};

use crate::cell::Desc;
use crate::peer::PeerRegion;
use crate::region::{Region, STAGE_SLOTS};
use crate::sys::{self, Mapping};

/// Bytes of the staging file of the bounce-buffer fallback (sparse: only extents in
/// use take memory).
pub const STAGE_FILE_BYTES: usize = 256 << 20;
/// Most bytes staged privately at once (cross-memory attach) before sends see EAGAIN.
pub const STAGE_PRIVATE_BYTES: usize = 512 << 20;

struct Slot {
    gen: u64,
    busy: bool,
    /// Private buffer (cross-memory attach).
    buf: Vec<u8>,
    /// Extent of the staging file (bounce buffers).
    off: usize,
    len: usize,
    peer: Option<Arc<PeerRegion>>,
}

enum Mode {
    Cma,
    Mapped { map: Mapping, _fd: OwnedFd },
}

/// A sender's staging slots.
pub struct Stage {
    mode: Mode,
    slots: Vec<Slot>,
    used: usize,
}

impl Stage {
    /// Staging for an endpoint whose region is `own`: private with cross-memory attach,
    /// else a staging file published in `own`'s header.
    pub fn new(own: &Region, cma: bool) -> Result<Stage> {
        let mode = if cma {
            Mode::Cma
        } else {
            let fd = sys::memfd(STAGE_FILE_BYTES)?;
            let map = Mapping::new(&fd, STAGE_FILE_BYTES)?;
            own.set_stage(fd.as_raw_fd() as u32, STAGE_FILE_BYTES as u64);
            Mode::Mapped { map, _fd: fd }
        };
        let slots = (0..STAGE_SLOTS)
            .map(|_| Slot {
                gen: 0,
                busy: false,
                buf: Vec::new(),
                off: 0,
                len: 0,
                peer: None,
            })
            .collect();
        Ok(Stage {
            mode,
            slots,
            used: 0,
        })
    }

    /// Copies `parts` (`len` bytes in all) into a free slot for `peer` and describes it.
    /// `Again` while every slot (or the byte budget) is in use.
    pub fn stage(
        &mut self,
        own: &Region,
        peer: &Arc<PeerRegion>,
        parts: &[&[u8]],
        len: usize,
    ) -> Result<Desc> {
        self.reclaim(own, false);
        let s = match self.free_slot(len) {
            Some(s) => s,
            None => {
                self.reclaim(own, true);
                self.free_slot(len).ok_or(Error::Again)?
            }
        };
        let mode;
        let addr;
        match &self.mode {
            Mode::Cma => {
                let slot = &mut self.slots[s];
                slot.buf.clear();
                slot.buf.reserve(len);
                for p in parts {
                    slot.buf.extend_from_slice(p);
                }
                addr = slot.buf.as_ptr() as u64;
                mode = Desc::CMA;
                slot.len = len;
            }
            Mode::Mapped { map, .. } => {
                let off = self.extent(len, map.len()).ok_or(Error::Again)?;
                let mut o = off;
                for p in parts {
                    map.copy_in(o, p);
                    o += p.len();
                }
                let slot = &mut self.slots[s];
                slot.off = off;
                slot.len = len;
                addr = off as u64;
                mode = Desc::MAPPED;
            }
        }
        let slot = &mut self.slots[s];
        slot.gen += 1;
        slot.busy = true;
        slot.peer = Some(peer.clone());
        self.used += len;
        Ok(Desc {
            addr,
            len: len as u64,
            slot: s as u32,
            mode,
            gen: slot.gen,
        })
    }

    /// Waits, up to `linger`, until every staged payload was copied by its receiver
    /// (or the receiver is gone): an endpoint closing right after a large send (a
    /// process about to exit, say) still delivers it.
    pub fn drain(&mut self, own: &Region, linger: std::time::Duration) {
        let deadline = std::time::Instant::now() + linger;
        loop {
            self.reclaim(own, true);
            if self.slots.iter().all(|s| !s.busy) || std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    fn free_slot(&self, len: usize) -> Option<usize> {
        if matches!(self.mode, Mode::Cma) && self.used + len > STAGE_PRIVATE_BYTES && self.used > 0
        {
            return None;
        }
        self.slots.iter().position(|s| !s.busy)
    }

    /// First fit in the staging file, avoiding extents in use.
    fn extent(&self, len: usize, cap: usize) -> Option<usize> {
        let mut busy: Vec<(usize, usize)> = self
            .slots
            .iter()
            .filter(|s| s.busy)
            .map(|s| (s.off, s.off + s.len))
            .collect();
        busy.sort_unstable();
        let mut at = 0usize;
        for (b, e) in busy {
            if b >= at + len {
                break;
            }
            at = at.max(e.next_multiple_of(64));
        }
        (at + len <= cap).then_some(at)
    }

    /// Frees released slots; with `sweep`, also slots whose receiver is gone.
    fn reclaim(&mut self, own: &Region, sweep: bool) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if !s.busy {
                continue;
            }
            let released = own.release(i).load(Ordering::Acquire) == s.gen;
            if released || (sweep && s.peer.as_ref().is_some_and(|p| p.gone())) {
                s.busy = false;
                s.peer = None;
                self.used -= s.len;
                if s.buf.capacity() > (64 << 20) {
                    s.buf = Vec::new();
                }
            }
        }
    }
}

/// A sender's staging file mapped by a receiver.
pub struct StageMap {
    map: Mapping,
}

impl StageMap {
    /// Maps the staging file `peer` published.
    pub fn open(peer: &PeerRegion) -> Result<StageMap> {
        let (fd, len) = peer.region.stage().ok_or(Error::Io)?;
        let fd = sys::open_peer_fd(peer.name.pid, fd)?;
        let len = usize::try_from(len).map_err(|_| Error::Io)?;
        if sys::file_size(&fd)? < len {
            return Err(Error::Io);
        }
        Ok(StageMap {
            map: Mapping::new(&fd, len)?,
        })
    }
}

/// A staged payload as the receiver sees it ([`fabric::Pull`]).
pub struct ShmPull {
    peer: Arc<PeerRegion>,
    desc: Desc,
    len: usize,
}

impl ShmPull {
    /// The payload `desc` describes, staged by `peer`. `Err(Io)` when the descriptor
    /// points outside what the peer published.
    pub fn new(peer: Arc<PeerRegion>, desc: &Desc) -> Result<ShmPull> {
        let len = usize::try_from(desc.len).map_err(|_| Error::Io)?;
        if desc.mode == Desc::MAPPED {
            let map = Self::map(&peer)?;
            let off = usize::try_from(desc.addr).map_err(|_| Error::Io)?;
            if off > map.map.len() || len > map.map.len() - off {
                return Err(Error::Io);
            }
        }
        Ok(ShmPull {
            peer,
            desc: *desc,
            len,
        })
    }

    fn map(peer: &PeerRegion) -> Result<&StageMap> {
        peer.stage
            .get_or_init(|| StageMap::open(peer))
            .as_ref()
            .map_err(|e| *e)
    }
}

impl Pull for ShmPull {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        if off > self.len || dst.len() > self.len - off {
            return Err(Error::Io);
        }
        let at = self.desc.addr.wrapping_add(off as u64);
        if self.desc.mode == Desc::CMA {
            return sys::cma_read(self.peer.name.pid, at, dst);
        }
        // Bounds were checked against the mapping in `new`.
        let b = Self::map(&self.peer)?.map.bytes(at as usize, dst.len());
        dst.copy_from_slice(b);
        Ok(())
    }
}
