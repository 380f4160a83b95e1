//! The operating-system calls the provider needs, each wrapped once: anonymous shared
//! files (`memfd_create`), mappings, opening a peer's descriptor through `/proc`,
//! process identity (pid plus start time, `pidfd`), and cross-memory attach
//! (`process_vm_readv`/`process_vm_writev`).
//!
//! Every file peers map is sealed against resizing (`F_SEAL_SHRINK | F_SEAL_GROW`):
//! any process of the user can open it through `/proc/<pid>/fd/<n>`, and one that
//! truncated it would turn the next access of every mapping into `SIGBUS`. A peer's
//! file is mapped only once [`require_sealed`] says its owner cannot shrink it either.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use fabric::{Error, Result, SharedBytes};

fn last_os_error() -> Error {
    errno_error(io::Error::last_os_error().raw_os_error())
}

fn errno_error(errno: Option<i32>) -> Error {
    match errno {
        Some(libc::EAGAIN) => Error::Again,
        Some(libc::ENOMEM) | Some(libc::ENOSPC) => Error::NoMem,
        // Out of descriptors (ours or the system's): the caller may close some and
        // retry, which `FI_ENOMEM` would not suggest.
        Some(libc::EMFILE) | Some(libc::ENFILE) => Error::MFile,
        Some(libc::EACCES) | Some(libc::EPERM) => Error::Access,
        Some(libc::ENOENT) | Some(libc::ESRCH) => Error::AddrNotAvail,
        _ => Error::Io,
    }
}

/// The seals every file peers map carries: nobody, its owner included, can change its
/// size any more (nor the seals).
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// An anonymous shared file of `len` bytes, readable and writable by its owner only,
/// sealed at that size (see the module doc). It has no name in any file system: it
/// disappears with the last descriptor and mapping, whatever way the process ends.
/// A large `len` costs nothing until pages are written (the file is sparse).
pub fn memfd(len: usize) -> Result<OwnedFd> {
    let len = libc::off_t::try_from(len).map_err(|_| Error::NoMem)?;
    let name = CString::new("fabric-shm").map_err(|_| Error::Inval)?;
    // SAFETY: `name` is a valid NUL-terminated string; the call has no other inputs.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscalls on a descriptor we own.
    let ok = unsafe {
        libc::fchmod(fd.as_raw_fd(), 0o600) == 0
            && libc::ftruncate(fd.as_raw_fd(), len) == 0
            && libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) == 0
    };
    if !ok {
        return Err(last_os_error());
    }
    Ok(fd)
}

/// `Ok` if the file behind `fd` can no longer shrink (`F_SEAL_SHRINK`), whoever holds
/// it: a peer's file must pass this before it is mapped, or its owner (or any process
/// of the user) could truncate it under our mapping. `Err(AddrNotAvail)` for a file
/// without the seal: not one this provider made.
pub fn require_sealed(fd: &OwnedFd) -> Result<()> {
    // SAFETY: F_GET_SEALS takes no argument; `fd` is a valid descriptor.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        // EINVAL: not a file that takes seals at all.
        return Err(Error::AddrNotAvail);
    }
    if seals & libc::F_SEAL_SHRINK == 0 {
        return Err(Error::AddrNotAvail);
    }
    Ok(())
}

/// Gives the pages of `off..off + len` of `fd` back to the system (they read as zeros
/// afterwards); the file keeps its size. Best effort: on failure the pages stay.
pub fn punch_hole(fd: &OwnedFd, off: usize, len: usize) {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(off), libc::off_t::try_from(len)) else {
        return;
    };
    // SAFETY: a plain syscall on a descriptor we own; the size seals allow it.
    unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    };
}

/// Opens descriptor `fd` of process `pid` (same user) through `/proc`, read-write.
pub fn open_peer_fd(pid: u32, fd: u32) -> Result<OwnedFd> {
    open_proc_fd(pid, fd, libc::O_RDWR)
}

/// Opens descriptor `fd` of process `pid` (same user) through `/proc`, read-only: for
/// files the peer writes and we must never write (its mapped-segment directory).
pub fn open_peer_fd_read_only(pid: u32, fd: u32) -> Result<OwnedFd> {
    open_proc_fd(pid, fd, libc::O_RDONLY)
}

fn open_proc_fd(pid: u32, fd: u32, mode: libc::c_int) -> Result<OwnedFd> {
    let path = CString::new(format!("/proc/{pid}/fd/{fd}")).map_err(|_| Error::Inval)?;
    // SAFETY: `path` is a valid NUL-terminated string.
    let raw = unsafe { libc::open(path.as_ptr(), mode | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(last_os_error());
    }
    // SAFETY: `raw` was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The size of the file behind `fd`.
pub fn file_size(fd: &OwnedFd) -> Result<usize> {
    // SAFETY: `st` is plain old data that fstat fills in.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a valid descriptor and `st` a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(last_os_error());
    }
    usize::try_from(st.st_size).map_err(|_| Error::Io)
}

/// A shared, read-write mapping of a whole file. The memory may be written by other
/// processes at any time: only the modules that define the shared layout access it,
/// through atomics or byte copies.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through atomics or
// through byte copies whose exclusive use the shared protocol establishes.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

/// Maps `len` bytes of `fd` shared with protection `prot`; `flags` adds to
/// `MAP_SHARED`.
fn map_shared(
    fd: &OwnedFd,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
) -> Result<NonNull<u8>> {
    if len == 0 {
        return Err(Error::Inval);
    }
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED | flags,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or(Error::NoMem)
}

impl Mapping {
    /// Maps `len` bytes of `fd` shared and read-write.
    pub fn new(fd: &OwnedFd, len: usize) -> Result<Mapping> {
        let ptr = map_shared(fd, len, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        Ok(Mapping { ptr, len })
    }

    /// [`Mapping::new`] with every page allocated and mapped at once
    /// (`MAP_POPULATE`), so that no first touch of a page in the data path takes a
    /// page fault.
    pub fn new_populated(fd: &OwnedFd, len: usize) -> Result<Mapping> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let ptr = map_shared(fd, len, prot, libc::MAP_POPULATE)?;
        Ok(Mapping { ptr, len })
    }

    /// Maps the pages of the first `len` bytes now, allocating those of the file not
    /// allocated yet (`MADV_POPULATE_WRITE`, Linux 5.14 on), so that no copy through
    /// them takes a page fault later: on a virtual machine whose host backs memory
    /// lazily, a first touch costs far more than the copy. Best effort: on an older
    /// kernel the pages fault in on first use, as without it. Nothing for `len` 0.
    pub fn populate(&self, len: usize) {
        if len == 0 {
            return;
        }
        // SAFETY: advice on a range of this live mapping; populating changes no byte.
        unsafe {
            libc::madvise(
                self.ptr().cast(),
                len.min(self.len),
                libc::MADV_POPULATE_WRITE,
            )
        };
    }

    /// Start of the mapping.
    #[inline]
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes mapped.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Copies `src` into the mapping at `off`.
    #[inline]
    pub fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(off <= self.len && src.len() <= self.len - off);
        // SAFETY: in bounds of a live mapping. The shared protocol gives the writer
        // exclusive use of these bytes until it publishes them; `src` is ordinary
        // memory of ours, so the ranges do not overlap.
        unsafe { fabric::bytes::copy_bytes(src.as_ptr(), self.ptr().add(off), src.len()) };
    }

    /// Copies `src` into the mapping at `off` with stores that bypass this core's cache
    /// where the target has them (see [`crate::layout::bypass`]), fenced before any later store.
    #[inline]
    pub fn copy_in_bypass(&self, off: usize, src: &[u8]) {
        assert!(off <= self.len && src.len() <= self.len - off);
        // SAFETY: as for `copy_in`.
        unsafe { crate::layout::bypass::copy(src.as_ptr(), self.ptr().add(off), src.len()) };
    }

    /// A packet of `len` bytes at `off` (a multiple of 8, `len` at least 8), written
    /// front to back after its first word, which [`Packet::publish`] stores last. The
    /// bounds are checked here once: a packet written in several pieces pays for one
    /// bounds test, not one per piece.
    #[inline]
    pub fn packet(&self, off: usize, len: usize) -> Packet<'_> {
        assert!(off.is_multiple_of(8) && len >= 8 && off <= self.len && len <= self.len - off);
        // SAFETY: `off + 8` is in bounds of the mapping (checked above).
        let first = unsafe { self.ptr().add(off) };
        Packet {
            first,
            // SAFETY: as above.
            at: unsafe { first.add(8) },
            left: len - 8,
            _map: std::marker::PhantomData,
        }
    }

    /// The bytes at `off..off + len`, never as a Rust reference: the shared protocol
    /// hands them to the reader until it releases them, but a misbehaving peer can
    /// still change them, which only changes the values copied out. Callers copy what
    /// they rely on and validate it.
    #[inline]
    pub fn shared(&self, off: usize, len: usize) -> SharedBytes<'_> {
        assert!(off <= self.len && len <= self.len - off);
        // SAFETY: in bounds (asserted) of a mapping that lives as long as `self` and
        // is never shrunk under it (the file is sealed), so not null; `len <=
        // self.len`, which `mmap` bounds by `isize::MAX`.
        unsafe { SharedBytes::new(self.ptr().add(off), len) }
    }

    /// Copies the bytes at `off..off + dst.len()` into `dst` (see [`Mapping::shared`]).
    #[inline]
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off <= self.len && dst.len() <= self.len - off);
        // SAFETY: the source is in bounds of the live mapping (asserted); `dst` is
        // ordinary memory of ours, so the ranges do not overlap; no reference to the
        // shared bytes is formed.
        unsafe { fabric::bytes::copy_bytes(self.ptr().add(off), dst.as_mut_ptr(), dst.len()) };
    }

    /// The 8-byte word at `off` (a multiple of 8), for values shared between processes.
    #[inline]
    pub fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off <= self.len && 8 <= self.len - off);
        // SAFETY: in bounds and 8-aligned (mappings are page-aligned); shared words are
        // only ever accessed atomically by the layouts that place them.
        unsafe { &*self.ptr().add(off).cast::<AtomicU64>() }
    }
}

/// A packet being written into a [`Mapping`] ([`Mapping::packet`]).
pub struct Packet<'a> {
    /// The packet's first word, 8-aligned.
    first: *mut u8,
    /// Where the next [`put`](Packet::put) writes.
    at: *mut u8,
    /// Bytes left from `at` to the packet's end.
    left: usize,
    _map: std::marker::PhantomData<&'a Mapping>,
}

impl Packet<'_> {
    /// Copies `src` behind what was written so far (the first word, at the start).
    #[inline(always)]
    pub fn put(&mut self, src: &[u8]) {
        assert!(src.len() <= self.left);
        // SAFETY: `at..at + left` lies in a live mapping (checked by `packet`, kept by
        // every `put`), and `src` fits in it. As for `copy_in`: the shared protocol
        // gives the writer these bytes until it publishes them, and `src` is ordinary
        // memory of ours, so the ranges do not overlap.
        unsafe {
            fabric::bytes::copy_bytes(src.as_ptr(), self.at, src.len());
            self.at = self.at.add(src.len());
        }
        self.left -= src.len();
    }

    /// Stores `word` in the packet's first word with `Release` ordering: what was put
    /// before is visible to whoever reads the word.
    #[inline(always)]
    pub fn publish(self, word: u64) {
        // SAFETY: `first` is 8-aligned and 8 bytes of a live mapping (checked by
        // `packet`); shared words are only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.first.cast::<u64>()) }.store(word, Ordering::Release);
    }
}

impl Mapping {
    /// [`Mapping::populate`] of `len` bytes at `off` (clipped to the mapping): the
    /// pages of one channel, when a sender claims it, rather than the whole region.
    pub fn populate_range(&self, off: usize, len: usize) {
        if off >= self.len || len == 0 {
            return;
        }
        let len = len.min(self.len - off);
        // SAFETY: advice on a range of this live mapping; populating changes no byte.
        unsafe { libc::madvise(self.ptr().add(off).cast(), len, libc::MADV_POPULATE_WRITE) };
    }

    /// Gives the pages of `len` bytes at `off` (page-aligned, clipped to the mapping)
    /// back to the system (`MADV_REMOVE`): they read as zeros from then on, in every
    /// process that maps the file. Best effort: where the kernel refuses, the bytes
    /// are zeroed instead, so readers see the same.
    pub fn discard(&self, off: usize, len: usize) {
        if off >= self.len || len == 0 {
            return;
        }
        let len = len.min(self.len - off);
        assert!(off.is_multiple_of(4096));
        // SAFETY: advice on a range of this live mapping; removal zeroes the pages of
        // a shared file mapping, which every reader of this layout accepts as bytes.
        let r = unsafe { libc::madvise(self.ptr().add(off).cast(), len, libc::MADV_REMOVE) };
        if r != 0 {
            // SAFETY: in bounds (clipped above); shared bytes are written with byte
            // stores only by the layout that owns them, which hands this range to us.
            unsafe { std::ptr::write_bytes(self.ptr().add(off), 0, len) };
        }
    }
}

/// Reads `buf.len()` bytes at `off` of the file behind `fd` without mapping it: what a
/// peer's file claims to be is checked before any of it is mapped.
pub fn pread_exact(fd: &OwnedFd, off: usize, buf: &mut [u8]) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: `buf[done..]` is valid writable memory of the stated length.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                buf[done..].as_mut_ptr().cast(),
                buf.len() - done,
                (off + done) as libc::off_t,
            )
        };
        if n < 0 {
            return Err(last_os_error());
        }
        if n == 0 {
            return Err(Error::AddrNotAvail);
        }
        done += n as usize;
    }
    Ok(())
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and nobody else unmaps.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A shared, read-only mapping of a whole file that another process writes (a peer's
/// mapped-segment directory). The kernel enforces that we never write it; values read
/// may change at any time, so its users read them atomically and validate them.
pub struct ReadOnlyMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: read-only shared memory, read through atomics only.
unsafe impl Send for ReadOnlyMapping {}
// SAFETY: as above.
unsafe impl Sync for ReadOnlyMapping {}

impl ReadOnlyMapping {
    /// Maps `len` bytes of `fd` shared and read-only (`fd` may be opened read-only).
    pub fn new(fd: &OwnedFd, len: usize) -> Result<ReadOnlyMapping> {
        let ptr = map_shared(fd, len, libc::PROT_READ, 0)?;
        Ok(ReadOnlyMapping { ptr, len })
    }

    /// Start of the mapping.
    #[inline]
    pub fn ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Bytes mapped.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Maps the pages of the first `len` bytes now (`MADV_POPULATE_READ`, Linux 5.14
    /// on), so that no copy out of them takes a page fault later. Best effort, as
    /// [`Mapping::populate`].
    pub fn populate(&self, len: usize) {
        if len == 0 {
            return;
        }
        // SAFETY: advice on a range of this live mapping; populating changes no byte.
        unsafe {
            libc::madvise(
                self.ptr.as_ptr().cast(),
                len.min(self.len),
                libc::MADV_POPULATE_READ,
            )
        };
    }

    /// Loads the 8-byte word at `off` (a multiple of 8) with `order`.
    #[inline]
    pub fn load(&self, off: usize, order: Ordering) -> u64 {
        assert!(off.is_multiple_of(8) && off <= self.len && 8 <= self.len - off);
        // SAFETY: in bounds and 8-aligned (mappings are page-aligned); the owner
        // accesses shared words atomically, and a load is all this view issues.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast::<u64>()) }.load(order)
    }

    /// Copies the bytes at `off..off + dst.len()` into `dst`. The owner may be changing
    /// them (a misbehaving one): that changes only the values copied, which callers
    /// validate; no reference to the shared bytes is formed.
    #[inline]
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off <= self.len && dst.len() <= self.len - off);
        // SAFETY: the source is in bounds of a live mapping; `dst` is ordinary memory
        // of ours, so the ranges do not overlap.
        unsafe {
            fabric::bytes::copy_bytes(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
    }
}

impl Drop for ReadOnlyMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and nobody else unmaps.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Registers this process for `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` (once):
/// a receiver arming its wake-up then makes our sends' stores visible with one call,
/// so senders need no fence of their own. Whether it worked (Linux ≥ 4.16). Every send
/// to another process asks, so the answer, once known, is read inline.
#[inline]
pub fn membarrier_registered() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        // SAFETY: membarrier takes no pointers; command and flags are valid constants.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                libc::MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
                0,
                0,
            ) == 0
        }
    })
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`: every thread of every registered
/// process passes a full memory barrier before this returns. `false` if unsupported.
pub fn membarrier_global() -> bool {
    // SAFETY: membarrier takes no pointers; command and flags are valid constants.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            libc::MEMBARRIER_CMD_GLOBAL_EXPEDITED,
            0,
            0,
        ) == 0
    }
}

/// Writes one byte to the pipe `fd` of process `pid` if it still is the pipe with
/// inode `ino` (a descriptor number may have been reused since it was published).
pub fn poke_pipe(pid: u32, fd: u32, ino: u64) {
    let Ok(f) = open_proc_fd(pid, fd, libc::O_WRONLY | libc::O_NONBLOCK) else {
        return;
    };
    let file = std::fs::File::from(f);
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    match file.metadata() {
        Ok(m) if m.file_type().is_fifo() && m.ino() == ino => {}
        _ => return,
    }
    // A full pipe is readable anyway; any other failure leaves the sleeper to its
    // own timeout, as a peer that never sent would.
    let _ = std::io::Write::write(&mut &file, &[fabric::waitobj::REMOTE_WAKE]);
}

pub fn getpid() -> u32 {
    std::process::id()
}

/// The start time of process `pid` in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`): with the pid, it names one process for the life of the host.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// A handle on a peer process that tells whether it is still the same living process.
pub struct ProcessHandle {
    pid: u32,
    start: u64,
    pidfd: Option<OwnedFd>,
}

impl ProcessHandle {
    /// A handle on process `pid` if it is alive and started at `start`.
    pub fn open(pid: u32, start: u64) -> Result<ProcessHandle> {
        // SAFETY: pidfd_open takes a pid and flags; the result is checked.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let pidfd = (raw >= 0).then(|| {
            // SAFETY: a new descriptor returned by the kernel, owned by nobody else.
            unsafe { OwnedFd::from_raw_fd(raw as RawFd) }
        });
        // Checked after the pidfd exists: the pidfd then refers to the process whose
        // start time we read, not to a successor reusing the pid.
        if start_time(pid) != Some(start) {
            return Err(Error::AddrNotAvail);
        }
        Ok(ProcessHandle { pid, start, pidfd })
    }

    /// Whether the process is still alive (a zombie counts as dead).
    pub fn alive(&self) -> bool {
        if let Some(fd) = &self.pidfd {
            // SAFETY: signal 0 only checks for existence; the descriptor is valid.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    0,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            if r != 0 {
                return false;
            }
        }
        // A zombie still accepts signal 0; its stat state is 'Z' (or it is gone).
        match fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(s) => {
                let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else {
                    return false;
                };
                let mut f = rest.split_ascii_whitespace();
                let state = f.next();
                let start = f.nth(18).and_then(|v| v.parse::<u64>().ok());
                !matches!(state, Some("Z") | Some("X")) && start == Some(self.start)
            }
            Err(_) => false,
        }
    }
}

/// The environment variable of the test hook that refuses cross-memory attach to some
/// peers, as a kernel whose ptrace policy forbids it would (Yama's
/// `kernel.yama.ptrace_scope = 1` between sibling processes): `others` refuses every
/// process but our own, a comma-separated list of pids refuses those. Our own process
/// stays allowed, so the start-up probe ([`cma_probe`]) passes as it does there.
pub const CMA_DENY_ENV: &str = "FABRIC_SHM_TEST_CMA_DENY";

/// Whether the test hook ([`CMA_DENY_ENV`]) refuses cross-memory attach to `pid`.
fn cma_denied(pid: u32) -> bool {
    enum Deny {
        None,
        Others,
        Pids(Vec<u32>),
    }
    static DENY: std::sync::OnceLock<Deny> = std::sync::OnceLock::new();
    let deny = DENY.get_or_init(|| match std::env::var(CMA_DENY_ENV) {
        Err(_) => Deny::None,
        Ok(v) if v == "others" => Deny::Others,
        Ok(v) => Deny::Pids(v.split(',').filter_map(|p| p.trim().parse().ok()).collect()),
    });
    match deny {
        Deny::None => false,
        Deny::Others => pid != getpid(),
        Deny::Pids(p) => p.contains(&pid),
    }
}

/// The error of a failed `process_vm_readv`/`process_vm_writev`: `Access` when the
/// kernel refuses the peer (its ptrace policy: the caller may fall back to shared
/// files), `Io` for anything else (a bad address, a peer gone).
fn cma_error() -> Error {
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => Error::Access,
        _ => Error::Io,
    }
}

/// Bytes of a lifeline file (one page).
pub const LIFELINE_BYTES: usize = 4096;
/// The owner-TID bits of a futex word (`FUTEX_TID_MASK`): the kernel clears them, and
/// sets `FUTEX_OWNER_DIED`, when the owner of a robust mutex dies.
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;

/// This process's lifeline: a one-page anonymous file (mode 0600, sealed against
/// shrinking and growing) holding a process-shared robust mutex that a thread of its
/// own, parked for ever, holds. While the process lives, the mutex's futex word is
/// that thread's id; when the thread ends, which only happens when the process ends
/// (exit, `exec` or any signal, `SIGKILL` included), the kernel's robust-list walk
/// clears the id before the process can be reaped. Peers map the page read-only, so
/// telling whether this process lives costs them one load ([`PeerLifeline::alive`]).
pub struct Lifeline {
    fd: OwnedFd,
    tid: u32,
    /// Keeps the page mapped: the locking thread's robust list points into it.
    _map: Mapping,
}

impl Lifeline {
    /// This process's lifeline, made on first use; `None` where it cannot be made
    /// or the C library's mutex does not keep the owner's id in its first word (peers
    /// then ask the kernel instead, see [`ProcessHandle`]). A child forked from this
    /// process makes its own.
    pub fn own() -> Option<&'static Lifeline> {
        type Own = Option<(u32, Option<&'static Lifeline>)>;
        static OWN: std::sync::Mutex<Own> = std::sync::Mutex::new(None);
        let mut own = OWN.lock().unwrap_or_else(|e| e.into_inner());
        let pid = getpid();
        match *own {
            Some((at, l)) if at == pid => l,
            _ => {
                let l = Lifeline::make().ok();
                *own = Some((pid, l));
                l
            }
        }
    }

    fn make() -> Result<&'static Lifeline> {
        let name = CString::new("fabric-shm-lifeline").map_err(|_| Error::Inval)?;
        // SAFETY: `name` is a valid NUL-terminated string; the call has no other inputs.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(last_os_error());
        }
        // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: plain syscalls on a descriptor we own.
        let ok = unsafe {
            libc::fchmod(fd.as_raw_fd(), 0o600) == 0
                && libc::ftruncate(fd.as_raw_fd(), LIFELINE_BYTES as libc::off_t) == 0
                && libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) == 0
        };
        if !ok {
            return Err(last_os_error());
        }
        let map = Mapping::new(&fd, LIFELINE_BYTES)?;
        let mutex = map.ptr().cast::<libc::pthread_mutex_t>();
        static_assertions::const_assert!(
            std::mem::size_of::<libc::pthread_mutex_t>() <= LIFELINE_BYTES
        );
        // SAFETY: `attr` is initialized by pthread_mutexattr_init before any other use
        // and destroyed after the mutex is; `mutex` points to fresh, page-aligned,
        // zeroed memory of the mapping, large enough (asserted above), that nothing
        // else uses yet.
        let init = unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            let ok = libc::pthread_mutexattr_init(&mut attr) == 0;
            let ok = ok
                && libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED) == 0
                && libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST) == 0
                && libc::pthread_mutex_init(mutex, &attr) == 0;
            libc::pthread_mutexattr_destroy(&mut attr);
            ok
        };
        if !init {
            return Err(Error::Io);
        }
        let at = mutex as usize;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("fabric-shm-lifeline".into())
            .spawn(move || {
                // SAFETY: gettid has no inputs.
                let tid = unsafe { libc::gettid() };
                // SAFETY: `at` is the mutex initialized above, in a mapping that is
                // never unmapped (`Lifeline::own` leaks it); nobody else locks it.
                let locked = unsafe { libc::pthread_mutex_lock(at as *mut libc::pthread_mutex_t) };
                let _ = tx.send((locked == 0).then_some(tid as u32));
                // Holding the mutex is this thread's whole purpose: it ends with the
                // process.
                loop {
                    std::thread::park();
                }
            })
            .map_err(|_| Error::NoMem)?;
        let tid = rx.recv().map_err(|_| Error::Io)?.ok_or(Error::Io)?;
        // Leaked on purpose: the locking thread holds the mutex for the life of the
        // process, and its robust list points into the page, which must stay mapped
        // as long (even when the check below refuses the lifeline).
        let l: &'static Lifeline = Box::leak(Box::new(Lifeline { fd, tid, _map: map }));
        // SAFETY: the first 4 bytes of the live, page-aligned mapping; the mutex's
        // owner writes them atomically (the C library and the kernel), we only load.
        let word = unsafe { &*l._map.ptr().cast::<AtomicU32>() }.load(Ordering::SeqCst);
        // The futex word is the mutex's first in glibc (and musl); a library that
        // keeps it elsewhere cannot be read this way.
        if tid == 0 || tid > FUTEX_TID_MASK || word & FUTEX_TID_MASK != tid {
            return Err(Error::OpNotSupp);
        }
        Ok(l)
    }

    /// The descriptor peers open through `/proc`.
    pub fn fd(&self) -> u32 {
        self.fd.as_raw_fd() as u32
    }

    /// The id of the thread holding the mutex: the futex word while the process lives.
    pub fn tid(&self) -> u32 {
        self.tid
    }
}

/// A peer process's [`Lifeline`], mapped read-only; its descriptor is closed once
/// mapped.
pub struct PeerLifeline {
    map: ReadOnlyMapping,
    tid: u32,
}

impl PeerLifeline {
    /// Maps lifeline descriptor `fd` of process `pid`, whose mutex thread is `tid`.
    /// `AddrNotAvail` for anything but a sealed page-sized file (a peer that could
    /// shrink it could make our loads fault) or a zero `tid`.
    pub fn open(pid: u32, fd: u32, tid: u32) -> Result<PeerLifeline> {
        if tid == 0 || tid > FUTEX_TID_MASK {
            return Err(Error::AddrNotAvail);
        }
        let fd = open_peer_fd_read_only(pid, fd)?;
        // SAFETY: F_GET_SEALS takes no argument beyond the descriptor we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 || file_size(&fd)? < LIFELINE_BYTES {
            return Err(Error::AddrNotAvail);
        }
        Ok(PeerLifeline {
            map: ReadOnlyMapping::new(&fd, LIFELINE_BYTES)?,
            tid,
        })
    }

    /// Whether the process lives: one load of a line nobody writes while it does.
    /// Turns false once its threads ended, before it can be reaped.
    #[inline]
    pub fn alive(&self) -> bool {
        // SAFETY: the first 4 bytes of a live read-only mapping of a file that cannot
        // shrink (sealed, checked at open), page-aligned; only ever read atomically
        // here (the owner's C library and kernel write it atomically).
        let word = unsafe { &*self.map.ptr().cast::<AtomicU32>() };
        word.load(Ordering::Acquire) & FUTEX_TID_MASK == self.tid
    }
}

/// Copies `dst.len()` bytes from address `addr` of process `pid` (cross-memory attach).
/// `Err(Access)` when the kernel refuses us that process, `Err(Io)` otherwise.
pub fn cma_read(pid: u32, addr: u64, dst: &mut [u8]) -> Result<()> {
    let (ptr, len) = (dst.as_mut_ptr(), dst.len());
    cma_copy(pid, addr, ptr, len, |local, remote| {
        // SAFETY: `local` describes memory we own exclusively (`dst`, borrowed mutably
        // for the call); the kernel checks the remote range against the peer's address
        // space and fails with EFAULT.
        unsafe { libc::process_vm_readv(pid as libc::pid_t, local, 1, remote, 1, 0) }
    })
}

/// Copies `src` to address `addr` of process `pid` (cross-memory attach).
/// `Err(Access)` when the kernel refuses us that process, `Err(Io)` otherwise.
pub fn cma_write(pid: u32, addr: u64, src: &[u8]) -> Result<()> {
    cma_copy(
        pid,
        addr,
        src.as_ptr().cast_mut(),
        src.len(),
        |local, remote| {
            // SAFETY: `local` describes memory we only read (`src`, borrowed for the call);
            // the kernel checks the remote range against the peer's address space and
            // fails with EFAULT. Which of the peer's bytes are written is the peer's choice
            // (it named the range).
            unsafe { libc::process_vm_writev(pid as libc::pid_t, local, 1, remote, 1, 0) }
        },
    )
}

/// The loop of [`cma_read`] and [`cma_write`]: `call` moves what it can of the `len`
/// bytes between `local` (from `base`) and the peer's `addr`, until all have moved.
fn cma_copy(
    pid: u32,
    addr: u64,
    base: *mut u8,
    len: usize,
    mut call: impl FnMut(&libc::iovec, &libc::iovec) -> isize,
) -> Result<()> {
    if cma_denied(pid) {
        return Err(Error::Access);
    }
    let mut done = 0usize;
    while done < len {
        let local = libc::iovec {
            iov_base: base.wrapping_add(done).cast(),
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let n = call(&local, &remote);
        if n < 0 {
            return Err(cma_error());
        }
        if n == 0 {
            return Err(Error::Io);
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether cross-memory attach works here at all: a real `process_vm_readv` of our own
/// memory. Kernels built without it, seccomp filters and container policies refuse
/// it. Reading our own memory is always allowed where it works, so this says nothing
/// about peers: a ptrace policy (Yama) may still refuse each of them, which the
/// provider learns per peer (see `rndv`).
pub fn cma_probe() -> bool {
    let src = *b"fabric-shm cma probe";
    let mut dst = [0u8; 20];
    cma_read(getpid(), src.as_ptr() as u64, &mut dst).is_ok() && dst == src
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn memfd_is_private_and_sized() {
        let fd = memfd(8192).unwrap();
        assert_eq!(file_size(&fd).unwrap(), 8192);
        // SAFETY: test: fstat into a zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and out-pointer.
        assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
        assert_eq!(st.st_mode & 0o777, 0o600);
    }

    /// `ftruncate(fd, len)`: the errno when it fails.
    pub(crate) fn truncate(fd: RawFd, len: usize) -> std::result::Result<(), i32> {
        // SAFETY: test: a plain syscall on a descriptor number.
        match unsafe { libc::ftruncate(fd, len as libc::off_t) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error().raw_os_error().unwrap_or(0)),
        }
    }

    /// Truncating a file peers map fails with `EPERM`, through our descriptor or
    /// through `/proc` (as any process of the user could), and so does growing it.
    #[test]
    fn memfd_is_sealed_against_resizing() {
        let fd = memfd(8192).unwrap();
        assert_eq!(truncate(fd.as_raw_fd(), 0), Err(libc::EPERM));
        assert_eq!(truncate(fd.as_raw_fd(), 4096), Err(libc::EPERM));
        assert_eq!(truncate(fd.as_raw_fd(), 1 << 20), Err(libc::EPERM));
        let other = open_peer_fd(getpid(), fd.as_raw_fd() as u32).unwrap();
        assert_eq!(truncate(other.as_raw_fd(), 0), Err(libc::EPERM));
        assert_eq!(file_size(&fd).unwrap(), 8192);
        // Nor can the seals be taken off or changed.
        // SAFETY: test: fcntl on a valid descriptor.
        let r = unsafe { libc::fcntl(other.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
        assert_eq!(r, -1);
        assert_eq!(require_sealed(&other), Ok(()));
    }

    /// A file without the seals is refused before it is mapped.
    #[test]
    fn unsealed_files_are_refused() {
        let name = CString::new("unsealed").unwrap();
        // SAFETY: test: a valid name; the descriptor is owned at once.
        let fd =
            unsafe { OwnedFd::from_raw_fd(libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC)) };
        assert_eq!(require_sealed(&fd), Err(Error::AddrNotAvail));
        // Sealing allowed, but only against growth: shrinking, the hazard, stays open.
        // SAFETY: test: as above.
        let fd = unsafe {
            OwnedFd::from_raw_fd(libc::memfd_create(
                name.as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            ))
        };
        // SAFETY: test: fcntl on a valid descriptor.
        assert_eq!(
            unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_GROW) },
            0
        );
        assert_eq!(require_sealed(&fd), Err(Error::AddrNotAvail));
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(
            require_sealed(&OwnedFd::from(file)),
            Err(Error::AddrNotAvail)
        );
    }

    #[test]
    fn out_of_descriptors_is_emfile_not_nomem() {
        assert_eq!(errno_error(Some(libc::EMFILE)), Error::MFile);
        assert_eq!(errno_error(Some(libc::ENFILE)), Error::MFile);
        assert_eq!(errno_error(Some(libc::ENOMEM)), Error::NoMem);
        assert_eq!(Error::MFile.code(), libc::EMFILE);
    }

    /// Pages of `m`'s file in memory (`mincore`; for a memfd, the pages allocated).
    fn resident_pages(m: &Mapping) -> usize {
        let page = 4096;
        let mut v = vec![0u8; m.len().div_ceil(page)];
        // SAFETY: test: `mincore` over a live mapping into a vector of one byte per page.
        let r = unsafe { libc::mincore(m.ptr().cast(), m.len(), v.as_mut_ptr()) };
        assert_eq!(r, 0);
        v.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn populated_mappings_start_resident() {
        let len = 16 * 4096;
        let lazy = Mapping::new(&memfd(len).unwrap(), len).unwrap();
        assert_eq!(resident_pages(&lazy), 0, "a fresh file has no pages yet");
        let own = Mapping::new_populated(&memfd(len).unwrap(), len).unwrap();
        assert_eq!(
            resident_pages(&own),
            16,
            "every page allocated at the mapping"
        );
    }

    #[test]
    fn peer_fd_maps_the_same_memory() {
        let fd = memfd(4096).unwrap();
        let a = Mapping::new(&fd, 4096).unwrap();
        let fd2 = open_peer_fd(getpid(), fd.as_raw_fd() as u32).unwrap();
        let b = Mapping::new(&fd2, 4096).unwrap();
        // SAFETY: test: both mappings are 4096 bytes of the same file.
        unsafe {
            a.ptr().add(100).write_volatile(42);
            assert_eq!(b.ptr().add(100).read_volatile(), 42);
        }
    }

    #[test]
    fn identity_and_liveness() {
        let me = getpid();
        let st = start_time(me).unwrap();
        let h = ProcessHandle::open(me, st).unwrap();
        assert!(h.alive());
        assert!(ProcessHandle::open(me, st + 1).is_err());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let cst = start_time(pid);
        child.wait().unwrap();
        if let Some(cst) = cst {
            // Reaped: gone, or (extremely unlikely) reused with another start time.
            assert!(ProcessHandle::open(pid, cst)
                .map(|h| !h.alive())
                .unwrap_or(true));
        }
    }

    /// Set in the child of `a_killed_processs_lifeline_reads_dead`.
    const LIFELINE_CHILD: &str = "FABRIC_SHM_LIFELINE_CHILD";

    #[test]
    fn own_lifeline_reads_alive() {
        let l = Lifeline::own();
        if cfg!(target_env = "gnu") {
            assert!(l.is_some(), "glibc keeps the owner's id in the futex word");
        }
        let Some(l) = l else { return };
        assert!(std::ptr::eq(l, Lifeline::own().unwrap()), "one per process");
        assert_ne!(l.tid(), 0);
        let peer = PeerLifeline::open(getpid(), l.fd(), l.tid()).unwrap();
        assert!(peer.alive());
        // Another thread's id is not the lifeline's: reads dead.
        let other = PeerLifeline::open(getpid(), l.fd(), l.tid() + 1).unwrap();
        assert!(!other.alive());
        assert!(PeerLifeline::open(getpid(), l.fd(), 0).is_err());
        // An unsealed file is refused: its owner could shrink it under our loads.
        let name = CString::new("unsealed").unwrap();
        // SAFETY: test: a valid name; the descriptor is owned at once.
        let plain =
            unsafe { OwnedFd::from_raw_fd(libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC)) };
        // SAFETY: test: ftruncate on a valid descriptor.
        assert_eq!(
            unsafe { libc::ftruncate(plain.as_raw_fd(), LIFELINE_BYTES as libc::off_t) },
            0
        );
        assert_eq!(
            PeerLifeline::open(getpid(), plain.as_raw_fd() as u32, l.tid()).err(),
            Some(Error::AddrNotAvail)
        );
    }

    /// A process's lifeline, mapped by another, reads alive while it runs and dead
    /// once it was killed (`SIGKILL`) and reaped, with no system call to tell.
    #[test]
    fn a_killed_processs_lifeline_reads_dead() {
        if Lifeline::own().is_none() {
            return;
        }
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "layout::sys::tests::lifeline_child",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env(LIFELINE_CHILD, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let line = out
            .lines()
            .map_while(|l| l.ok())
            .find_map(|l| l.split_once("@@ ").map(|(_, r)| r.to_string()))
            .expect("the child reports its lifeline");
        let v: Vec<u32> = line.split(' ').map(|w| w.parse().unwrap()).collect();
        let (pid, fd, tid) = (v[0], v[1], v[2]);
        assert_eq!(pid, child.id());
        let l = PeerLifeline::open(pid, fd, tid).unwrap();
        for _ in 0..1000 {
            assert!(l.alive());
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            !l.alive(),
            "the lifeline of a killed, reaped process reads alive"
        );
    }

    /// The child of `a_killed_processs_lifeline_reads_dead`: reports its lifeline
    /// ("@@ pid fd tid"), then waits to be killed.
    #[test]
    #[ignore = "child process of a_killed_processs_lifeline_reads_dead"]
    fn lifeline_child() {
        if std::env::var(LIFELINE_CHILD).is_err() {
            return;
        }
        let l = Lifeline::own().unwrap();
        println!("@@ {} {} {}", getpid(), l.fd(), l.tid());
        use std::io::Write;
        std::io::stdout().flush().unwrap();
        // Until killed: the parent never writes, nor closes its end first.
        let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
    }

    #[test]
    fn cma_roundtrip_on_self() {
        let src = [7u8; 1000];
        let mut dst = [0u8; 1000];
        // Some kernels and sandboxes refuse cross-memory attach: then every read fails
        // and the provider stages through files instead.
        let works = cma_probe();
        assert_eq!(
            cma_read(getpid(), src.as_ptr() as u64, &mut dst).is_ok(),
            works
        );
        if works {
            assert_eq!(src, dst);
        }
        assert_eq!(cma_read(getpid(), 8, &mut dst[..8]), Err(Error::Io));
        let mut back = [0u8; 1000];
        assert_eq!(
            cma_write(getpid(), back.as_mut_ptr() as u64, &src).is_ok(),
            works
        );
        if works {
            assert_eq!(back, src);
        }
        assert_eq!(cma_write(getpid(), 8, &src[..8]), Err(Error::Io));
    }
}
