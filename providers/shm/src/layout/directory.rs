//! The mapped-segment directory: one per process, an anonymous file (`memfd`, mode
//! 0600, sealed at its size) listing the segments the process published for direct access, by key. Every
//! endpoint region of the process advertises it (`Region::set_directory`); peers map it
//! read-only and never write it. This module owns every access to it.
//!
//! ```text
//! line 0     magic | capacity | pid | start time | epoch (bumped by each publication)
//! line 1+i   entry i: state | key | segment fd | length | base | access | nonce
//! ```
//! Entries form an open-addressing hash table on the key (linear probing). An entry's
//! state word is `generation << 2 | tag` (empty, valid, or removed): the generation
//! grows with every change, so a peer that cached an entry notices any change with one
//! load. Entry fields are written only while the entry is not valid; readers take a
//! consistent snapshot seqlock-style (state, fields, state again).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use fabric::{Error, Result};

use crate::layout::segment::SegFile;
use crate::layout::sys::{self, Mapping, ReadOnlyMapping};

/// Most segments one process can publish at once.
pub const DIR_ENTRIES: usize = 1024;
/// Directory magic, "FABSHMD1".
const MAGIC: u64 = u64::from_le_bytes(*b"FABSHMD1");
const LINE: usize = 64;
const OFF_MAGIC: usize = 0;
const OFF_CAP: usize = 8;
const OFF_PID: usize = 16;
const OFF_START: usize = 24;
const OFF_EPOCH: usize = 32;
/// Bytes of the directory file.
pub const DIR_BYTES: usize = LINE + DIR_ENTRIES * LINE;

const E_STATE: usize = 0;
const E_KEY: usize = 8;
const E_FD: usize = 16;
const E_LEN: usize = 24;
const E_BASE: usize = 32;
const E_ACCESS: usize = 40;
const E_NONCE: usize = 48;

/// Entry tag: never used (ends a probe sequence).
const EMPTY: u64 = 0;
/// Entry tag: a published segment.
pub const VALID: u64 = 1;
/// Entry tag: a withdrawn segment (probe sequences continue past it).
const REMOVED: u64 = 2;
const TAG_MASK: u64 = 3;

/// What a directory entry says about one published segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The MR key peers address it by.
    pub key: u64,
    /// The segment file's descriptor in the publishing process.
    pub fd: u32,
    /// Data bytes.
    pub len: u64,
    /// Remote address of the first data byte (the MR's offset, or its virtual address).
    pub base: u64,
    /// `MrAccess` bits.
    pub access: u64,
    /// The segment's identity (also in its header).
    pub nonce: u64,
}

/// An entry as read at one moment: where it is and its state word then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Entry index.
    pub slot: usize,
    /// State word when read (valid).
    pub state: u64,
    /// The entry.
    pub entry: Entry,
}

/// splitmix64's finalizer: spreads keys over the table.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Memory holding a directory: ours (read-write) or a peer's (read-only).
trait Words {
    fn base(&self) -> *const u8;
    fn size(&self) -> usize;

    #[inline]
    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.size());
        // SAFETY: in bounds of a live mapping and 8-aligned (mappings are
        // page-aligned); directory words are only ever accessed atomically. Through a
        // read-only mapping only loads are issued (the owner's methods store; the
        // peer's never do).
        unsafe { &*self.base().add(off).cast::<AtomicU64>() }
    }

    #[inline]
    fn entry_word(&self, slot: usize, field: usize) -> &AtomicU64 {
        self.word(LINE + slot * LINE + field)
    }

    fn read_entry(&self, slot: usize) -> Entry {
        let w = |f| self.entry_word(slot, f).load(Ordering::Relaxed);
        Entry {
            key: w(E_KEY),
            fd: w(E_FD) as u32,
            len: w(E_LEN),
            base: w(E_BASE),
            access: w(E_ACCESS),
            nonce: w(E_NONCE),
        }
    }
}

impl Words for Mapping {
    fn base(&self) -> *const u8 {
        self.ptr()
    }
    fn size(&self) -> usize {
        self.len()
    }
}

impl Words for ReadOnlyMapping {
    fn base(&self) -> *const u8 {
        self.ptr()
    }
    fn size(&self) -> usize {
        self.len()
    }
}

/// This process's directory.
pub struct Directory {
    map: Mapping,
    fd: OwnedFd,
    /// Serializes publishers (the only writers).
    lock: Mutex<()>,
}

impl Directory {
    /// The process's directory, created on first use.
    pub fn global() -> Result<&'static Directory> {
        static DIR: OnceLock<Result<Directory>> = OnceLock::new();
        DIR.get_or_init(Directory::create).as_ref().map_err(|e| *e)
    }

    fn create() -> Result<Directory> {
        let fd = sys::memfd(DIR_BYTES)?;
        let map = Mapping::new(&fd, DIR_BYTES)?;
        let pid = sys::getpid();
        let start = sys::start_time(pid).ok_or(Error::Io)?;
        map.word(OFF_CAP)
            .store(DIR_ENTRIES as u64, Ordering::Relaxed);
        map.word(OFF_PID).store(u64::from(pid), Ordering::Relaxed);
        map.word(OFF_START).store(start, Ordering::Relaxed);
        map.word(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(Directory {
            map,
            fd,
            lock: Mutex::new(()),
        })
    }

    /// The descriptor peers open through `/proc`.
    pub fn fd(&self) -> u32 {
        self.fd.as_raw_fd() as u32
    }

    /// Bytes of the directory file.
    pub fn bytes(&self) -> u64 {
        DIR_BYTES as u64
    }

    /// The state word of entry `slot`.
    #[inline]
    pub fn state(&self, slot: usize) -> &AtomicU64 {
        self.map.entry_word(slot, E_STATE)
    }

    /// Publishes `e`: returns its slot and state word. `Err(KeyRejected)` when the key
    /// is already published, `Err(NoMem)` when the directory is full.
    pub fn publish(&self, e: &Entry) -> Result<(usize, u64)> {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mask = DIR_ENTRIES - 1;
        let h = mix(e.key) as usize;
        let mut free = None;
        for i in 0..DIR_ENTRIES {
            let slot = (h + i) & mask;
            let st = self.state(slot).load(Ordering::Relaxed);
            match st & TAG_MASK {
                EMPTY => {
                    free.get_or_insert(slot);
                    break;
                }
                VALID if self.map.entry_word(slot, E_KEY).load(Ordering::Relaxed) == e.key => {
                    return Err(Error::KeyRejected);
                }
                VALID => {}
                _ => {
                    free.get_or_insert(slot);
                }
            }
        }
        let slot = free.ok_or(Error::NoMem)?;
        let state = self.state(slot);
        let gen = state.load(Ordering::Relaxed) >> 2;
        // Readers that saw this entry valid under an older generation and read fields
        // written below see the state changed when they recheck it.
        fence(Ordering::Release);
        let w = |f, v| self.map.entry_word(slot, f).store(v, Ordering::Relaxed);
        w(E_KEY, e.key);
        w(E_FD, u64::from(e.fd));
        w(E_LEN, e.len);
        w(E_BASE, e.base);
        w(E_ACCESS, e.access);
        w(E_NONCE, e.nonce);
        let valid = ((gen + 1) << 2) | VALID;
        state.store(valid, Ordering::SeqCst);
        // After the entry: a peer that sees the new epoch finds the entry.
        self.map.word(OFF_EPOCH).fetch_add(1, Ordering::Release);
        Ok((slot, valid))
    }

    /// Withdraws the entry published as (`slot`, `state`); nothing if it changed since.
    /// Sequentially consistent, for the busy-count handshake of `mapped`: a peer
    /// either sees the entry gone or is seen busy.
    pub fn unpublish(&self, slot: usize, state: u64) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if slot >= DIR_ENTRIES {
            return;
        }
        let s = self.state(slot);
        if s.load(Ordering::Relaxed) == state {
            s.store((((state >> 2) + 1) << 2) | REMOVED, Ordering::SeqCst);
        }
    }
}

/// A peer process's directory, mapped read-only.
pub struct PeerDirectory {
    map: ReadOnlyMapping,
}

impl PeerDirectory {
    /// Maps directory descriptor `fd` (of `len` bytes) of process `pid` started at
    /// `start`, and checks it is one.
    pub fn open(pid: u32, start: u64, fd: u32, len: u64) -> Result<PeerDirectory> {
        if len != DIR_BYTES as u64 {
            return Err(Error::AddrNotAvail);
        }
        let fd = sys::open_peer_fd_read_only(pid, fd)?;
        // Checked before the size: a file that could still shrink has no size to trust.
        sys::require_sealed(&fd)?;
        if sys::file_size(&fd)? != DIR_BYTES {
            return Err(Error::AddrNotAvail);
        }
        let map = ReadOnlyMapping::new(&fd, DIR_BYTES)?;
        let ok = map.word(OFF_MAGIC).load(Ordering::Acquire) == MAGIC
            && map.word(OFF_CAP).load(Ordering::Relaxed) == DIR_ENTRIES as u64
            && map.word(OFF_PID).load(Ordering::Relaxed) == u64::from(pid)
            && map.word(OFF_START).load(Ordering::Relaxed) == start;
        if !ok {
            return Err(Error::AddrNotAvail);
        }
        Ok(PeerDirectory { map })
    }

    /// The publication count: a key found absent stays absent while it is unchanged.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.map.word(OFF_EPOCH).load(Ordering::Acquire)
    }

    /// The state word of entry `slot` (`slot < DIR_ENTRIES`).
    #[inline]
    pub fn state(&self, slot: usize) -> &AtomicU64 {
        self.map.entry_word(slot, E_STATE)
    }

    /// The valid entry for `key`, read consistently, if there is one now.
    pub fn lookup(&self, key: u64) -> Option<Snapshot> {
        let mask = DIR_ENTRIES - 1;
        let h = mix(key) as usize;
        for i in 0..DIR_ENTRIES {
            let slot = (h + i) & mask;
            // A few attempts per entry: a consistent read fails only while the owner
            // rewrites that very entry.
            for _ in 0..4 {
                let s1 = self.state(slot).load(Ordering::Acquire);
                match s1 & TAG_MASK {
                    EMPTY => return None,
                    VALID => {}
                    _ => break,
                }
                let entry = self.map.read_entry(slot);
                fence(Ordering::Acquire);
                if self.state(slot).load(Ordering::Relaxed) != s1 {
                    continue;
                }
                if entry.key != key {
                    break;
                }
                return Some(Snapshot {
                    slot,
                    state: s1,
                    entry,
                });
            }
        }
        None
    }
}

/// A peer process's directory and the segments mapped from it, shared by every
/// endpoint of this process that talks to it.
pub struct PeerDir {
    /// The directory, mapped read-only.
    pub(crate) dir: PeerDirectory,
    pid: u32,
    segs: Mutex<HashMap<u64, Weak<SegFile>>>,
}

/// Peer directories by process (pid, start time).
type Procs = HashMap<(u32, u64), Weak<PeerDir>>;

fn procs() -> MutexGuard<'static, Procs> {
    static PROCS: OnceLock<Mutex<Procs>> = OnceLock::new();
    PROCS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

impl PeerDir {
    /// The directory of process `pid` (started at `start`), advertised as descriptor
    /// `fd` of `len` bytes, mapped on first use.
    pub(crate) fn get(pid: u32, start: u64, fd: u32, len: u64) -> Result<Arc<PeerDir>> {
        let mut map = procs();
        if let Some(d) = map.get(&(pid, start)).and_then(Weak::upgrade) {
            return Ok(d);
        }
        let d = Arc::new(PeerDir {
            dir: PeerDirectory::open(pid, start, fd, len)?,
            pid,
            segs: Mutex::new(HashMap::new()),
        });
        map.retain(|_, w| w.strong_count() > 0);
        map.insert((pid, start), Arc::downgrade(&d));
        Ok(d)
    }

    /// The segment `snap` names, mapped on first use.
    pub(crate) fn segment(&self, snap: &Snapshot) -> Result<Arc<SegFile>> {
        let e = &snap.entry;
        let len = usize::try_from(e.len).map_err(|_| Error::AddrNotAvail)?;
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = segs.get(&e.nonce).and_then(Weak::upgrade) {
            if s.len() == len {
                return Ok(s);
            }
        }
        let s = Arc::new(SegFile::open(self.pid, e.fd, len, e.nonce)?);
        segs.retain(|_, w| w.strong_count() > 0);
        segs.insert(e.nonce, Arc::downgrade(&s));
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: u64) -> Entry {
        Entry {
            key,
            fd: 7,
            len: 4096,
            base: 0x1000,
            access: 3 << 12,
            nonce: key ^ 0x55,
        }
    }

    fn peer(d: &Directory) -> PeerDirectory {
        let pid = sys::getpid();
        PeerDirectory::open(pid, sys::start_time(pid).unwrap(), d.fd(), d.bytes()).unwrap()
    }

    #[test]
    fn publish_lookup_unpublish() {
        let d = Directory::global().unwrap();
        let p = peer(d);
        let key = 0xd1_0000_0001;
        assert!(p.lookup(key).is_none());
        let e0 = p.epoch();
        let (slot, state) = d.publish(&entry(key)).unwrap();
        assert!(p.epoch() > e0);
        let snap = p.lookup(key).unwrap();
        assert_eq!(snap.slot, slot);
        assert_eq!(snap.state, state);
        assert_eq!(snap.entry, entry(key));
        // Keys are unique in the directory.
        assert_eq!(d.publish(&entry(key)), Err(Error::KeyRejected));
        d.unpublish(slot, state);
        assert_ne!(p.state(slot).load(Ordering::SeqCst), state);
        assert!(p.lookup(key).is_none());
        // Unpublishing a stale state changes nothing.
        let (slot2, state2) = d.publish(&entry(key)).unwrap();
        d.unpublish(slot, state);
        assert_eq!(p.lookup(key).unwrap().state, state2);
        d.unpublish(slot2, state2);
    }

    #[test]
    fn colliding_keys_probe_past_removed_entries() {
        let d = Directory::global().unwrap();
        let p = peer(d);
        // Many keys: some share probe sequences.
        let keys: Vec<u64> = (0..300).map(|i| 0xd2_0000_0000 + i).collect();
        let pubs: Vec<_> = keys
            .iter()
            .map(|&k| d.publish(&entry(k)).unwrap())
            .collect();
        for (k, (slot, st)) in keys.iter().zip(&pubs) {
            let s = p.lookup(*k).unwrap();
            assert_eq!((s.slot, s.state, s.entry.key), (*slot, *st, *k));
        }
        // Remove every other one: the rest stay reachable.
        for (i, (slot, st)) in pubs.iter().enumerate() {
            if i % 2 == 0 {
                d.unpublish(*slot, *st);
            }
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(p.lookup(*k).is_some(), i % 2 == 1, "key {k:#x}");
        }
        for (i, (slot, st)) in pubs.iter().enumerate() {
            if i % 2 == 1 {
                d.unpublish(*slot, *st);
            }
        }
        assert!(keys.iter().all(|k| p.lookup(*k).is_none()));
    }

    #[test]
    fn peers_map_it_read_only() {
        let d = Directory::global().unwrap();
        let fd = sys::open_peer_fd_read_only(sys::getpid(), d.fd()).unwrap();
        // The kernel refuses a writable shared mapping of a read-only descriptor.
        assert_eq!(Mapping::new(&fd, DIR_BYTES).err(), Some(Error::Access));
        let pid = sys::getpid();
        let start = sys::start_time(pid).unwrap();
        assert!(PeerDirectory::open(pid, start + 1, d.fd(), d.bytes()).is_err());
        assert!(PeerDirectory::open(pid, start, d.fd(), d.bytes() - 64).is_err());
    }

    #[test]
    fn it_cannot_be_truncated() {
        let d = Directory::global().unwrap();
        let fd = sys::open_peer_fd(sys::getpid(), d.fd()).unwrap();
        assert_eq!(sys::tests::truncate(fd.as_raw_fd(), 0), Err(libc::EPERM));
        assert_eq!(sys::tests::truncate(d.fd() as i32, 0), Err(libc::EPERM));
    }
}
