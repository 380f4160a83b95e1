//! `fabric-shm`: the shared-memory provider, between threads of one process and
//! between processes of one user on one host.
//!
//! Every endpoint owns a region of shared memory: an anonymous file (`memfd`, mode
//! 0600) that peers open through `/proc/<pid>/fd/<n>` and map. Nothing is ever
//! created in `/dev/shm` or elsewhere in the file system, so a process that dies, even
//! by `SIGKILL`, leaves nothing behind: the memory goes with the last mapping.
//!
//! The region holds one receive channel per sending peer: a ring of 64-byte cells in
//! which a packet's first cell carries a control word (ready stamp, kind, length), the
//! header fields the packet needs and the start of the payload, so a tagged message of
//! up to 48 bytes is one cache line. The receiver polls only the next cell of each of
//! its channels. Payloads up to [`INLINE_MAX`] bytes travel in the ring. From
//! [`RNDV_MIN`] bytes on, where cross-memory attach works, a message or RMA write is a
//! synchronous rendezvous: the receiver copies it with `process_vm_readv` straight
//! from the caller's buffer into its destination (one copy) while the send call waits;
//! if the receiver does not take it within a bound (tens of microseconds plus about a
//! copy's time), the sender stages it after all and returns (see `rndv`). Other large
//! payloads are staged once by the sender and copied by the receiver straight into
//! their destination: up to 1 MiB from a small staging file the receiver maps, beyond
//! that with `process_vm_readv` from the sender's private memory (or, where the kernel
//! refuses it or `FABRIC_SHM_CMA=0` asks, from a large sparse staging file). The
//! kernel's ptrace policy (Yama) may refuse a peer the reads our own probe was allowed:
//! such a refusal is learned per peer, and that peer's payloads then go through the
//! sender's shared files, a rendezvous too (see `rndv`), so no message fails for it. A sender
//! writes its staging files with non-temporal stores instead of ordinary ones while
//! its own copies show that the receiver's core does not share its cache (cores on two
//! dies): the receiver then streams the payload from memory instead of pulling every
//! line from the other die's cache, which is several times slower. Matching,
//! RMA and atomics against the MR table (checked on the target), completions and
//! counters are the core's.
//!
//! Beyond libfabric, for SHMEM/PGAS: memory allocated as a [`MappedSegment`] and
//! registered with [`MappedSegment::register`] is published in a per-process directory
//! that peers map read-only; RMA and atomics into it are then performed by the
//! initiator itself (copies and CPU atomics, checked against the published key, bounds
//! and rights) and complete at once, with no progress by the target. See [`mapped`].
//!
//! An address ([`NAME_LEN`] bytes) names the owner process by pid *and* start time, so
//! a reused pid is never mistaken for the peer. Whether a peer process lives is one
//! load from its lifeline, a page the kernel updates when the process ends (see
//! `peer`), so no check costs a system call however many peers there are: a send or
//! direct access issued after the peer's threads ended (before it can be reaped)
//! fails with `FI_EHOSTUNREACH`, and every operation waiting on it completes with
//! `FI_EHOSTUNREACH` within about 10 ms of progress.
//!
//! Environment: `FABRIC_SHM_CMA=0` forces the bounce-buffer path for large payloads
//! (and so turns rendezvous off); `FABRIC_SHM_RNDV_MIN` (bytes, default [`RNDV_MIN`])
//! is the smallest rendezvous payload; `FABRIC_SHM_RNDV_WAIT_US` (default 30) the
//! fixed part of a rendezvous sender's wait;
//! `FABRIC_SHM_CHANNELS` (sending peers at once, by default 1024 or four per processor
//! where that is more, at most 65536) and
//! `FABRIC_SHM_CELLS` (default 256, a power of two, at least 256) size each
//! endpoint's region, a sparse file of [`DEFAULT_REGION_BYTES`] (about 17 MiB) by
//! default of which only the header and the rings of the peers sending to it take
//! memory ([`PEER_BYTES`], 16 KiB, each); with the 2.5 MiB near staging file an
//! endpoint shares [`DEFAULT_FOOTPRINT_BYTES`] (about 2.5 MiB) plus 16 KiB per
//! sending peer.
//! A value these variables cannot take makes endpoint open fail with `FI_EINVAL` and
//! a message on stderr naming it. `FABRIC_SHM_TEST_CMA_DENY` is a test hook: `others`
//! (or a list of pids) makes cross-memory attach to those processes fail as a ptrace
//! policy refusing it would.
//!
//! ```
//! use fabric::prelude::*;
//! use fabric_shm::Shm;
//! let infos = getinfo::<Stack<Shm>>(None).unwrap();
//! assert!(infos.iter().all(|i| i.fabric_attr.prov_name == "shm"));
//! ```
#![deny(unsafe_code)]

pub mod cell;
mod direct;
mod layout;
pub mod mapped;
pub mod name;
mod peer;
mod remote;
mod rndv;
mod stage;
#[cfg(test)]
mod tests;
mod track;
mod transport;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use fabric::attr::EpType;
use fabric::{Error, Info, Provider, Result};

pub use layout::directory::DIR_ENTRIES;
pub use layout::region::{Geometry, RNDV_RECORDS};
pub use mapped::{quarantined, DirectMr, MappedSegment, UNPUBLISH_WAIT};
pub use name::NAME_LEN;
pub use peer::PeerRegion;
pub use remote::RemoteKey;
pub use rndv::RNDV_MIN;
pub use transport::{ShmEp, ShmPull, ShmRx, ShmTx, Tuning};

/// Largest `inject` payload, as a type ([`Provider::InjectSize`]).
pub type InjectSize = fabric::typenum::U4096;
/// Largest `inject` payload.
pub const INJECT_SIZE: usize = <InjectSize as fabric::typenum::Unsigned>::USIZE;
/// Largest payload carried inside the ring; larger payloads are staged.
pub const INLINE_MAX: usize = 8192;
/// Largest message.
pub const MAX_MSG_SIZE: usize = 64 << 20;
/// Fewest channels per endpoint region by default (sending peers at once; see
/// [`default_channels`]). Unclaimed channels cost address space, not memory: the
/// region is a sparse file whose ring pages are allocated by the sender that claims
/// one and freed when it leaves.
pub const DEFAULT_CHANNELS: usize = 1024;
/// Default cells per channel: the fewest allowed. A ring of 16 KiB that the traffic
/// laps often stays in the caches of both sides: in interleaved pingpong runs on
/// 2026-11-26 it took 0.80x the one-way time of 1024 cells at 4 KiB and 0.84x at
/// 8 KiB (0.95x at 1 KiB, level at 8 bytes and 64 KiB), and carried 1.6x the 4 KiB
/// messages per second at window 64 (medians of 8 rounds).
pub const DEFAULT_CELLS: usize = layout::region::MIN_CELLS;
/// Bytes of an endpoint's shared region with [`DEFAULT_CHANNELS`] channels: its size
/// as a file and in address space (about 17 MiB), most of it never allocated.
pub const DEFAULT_REGION_BYTES: usize =
    4096 + DEFAULT_CHANNELS * 128 + DEFAULT_CHANNELS * DEFAULT_CELLS * 64;
/// Shared memory one sending peer takes in a receiver's region by default: its ring
/// (16 KiB), allocated while it holds the channel.
pub const PEER_BYTES: usize = DEFAULT_CELLS * 64;
/// Shared memory of one endpoint by default with no peer sending to it: the header
/// page plus the near staging file (about 2.5 MiB).
pub const DEFAULT_FOOTPRINT_BYTES: usize = 4096 + stage::NEAR_BYTES;
// The promise of the README: at most 4 MiB of shared memory per endpoint by default,
// plus a ring per sending peer.
static_assertions::const_assert!(DEFAULT_FOOTPRINT_BYTES <= 4 << 20);

/// The shm provider marker.
pub enum Shm {}

/// A nonce unique on this host for the life of this process (pid in the high bits).
fn fresh_nonce() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 32) | (NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff)
}

/// Whether cross-memory attach is used for large payloads: the environment may
/// refuse it (`FABRIC_SHM_CMA=0`), else a real call at first use decides. Each peer
/// may still be refused it; the provider learns that per peer (see `rndv`).
pub fn cma_enabled() -> bool {
    static CMA: OnceLock<bool> = OnceLock::new();
    *CMA.get_or_init(|| {
        std::env::var("FABRIC_SHM_CMA").map_or(true, |v| v != "0") && layout::sys::cma_probe()
    })
}

/// The number the environment variable `name` holds, or `default` when it is unset.
/// A value that is not a number is refused (`Inval`) with a message on stderr naming
/// the variable and the value: ignoring it would run with a setting nobody asked for.
fn env_usize(name: &str, default: usize) -> Result<usize> {
    parse_usize(name, std::env::var(name).ok().as_deref(), default)
}

fn parse_usize(name: &str, value: Option<&str>, default: usize) -> Result<usize> {
    match value {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| {
            eprintln!("fabric-shm: {name}={v:?} is not a number of the kind it takes");
            Error::Inval
        }),
    }
}

/// `FABRIC_SHM_CMA`, if set, is `0` or `1`; anything else is refused as
/// [`env_usize`] refuses a bad number.
fn check_cma_env() -> Result<()> {
    match std::env::var("FABRIC_SHM_CMA").ok().as_deref() {
        None | Some("0") | Some("1") => Ok(()),
        Some(v) => {
            eprintln!("fabric-shm: FABRIC_SHM_CMA={v:?} is neither 0 nor 1");
            Err(Error::Inval)
        }
    }
}

/// The region geometry the environment asks for. `Err(Inval)` (with a message on
/// stderr) for a value that is not a number or a geometry out of bounds.
pub fn geometry() -> Result<Geometry> {
    let (nchan, cells) = (
        env_usize("FABRIC_SHM_CHANNELS", default_channels())?,
        env_usize("FABRIC_SHM_CELLS", DEFAULT_CELLS)?,
    );
    Geometry::new(nchan, cells).inspect_err(|_| {
        eprintln!(
            "fabric-shm: FABRIC_SHM_CHANNELS={nchan} FABRIC_SHM_CELLS={cells} is no \
             geometry (channels 1 to {}, cells a power of two from 256 to 1048576)",
            layout::region::MAX_CHANNELS
        )
    })
}

/// Channels of a region unless the environment says otherwise: [`DEFAULT_CHANNELS`],
/// or four per processor this process may run on where that is more, so that a job
/// running even four processes per core on the node finds a channel for every peer.
pub fn default_channels() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.saturating_mul(4)
        .clamp(DEFAULT_CHANNELS, layout::region::MAX_CHANNELS)
}

fn candidate(ep_type: EpType) -> Info {
    fabric::info::core_candidate(
        "shm",
        Shm::VERSION,
        ep_type,
        INJECT_SIZE,
        MAX_MSG_SIZE,
        1 << 12,
    )
}

impl Provider for Shm {
    const NAME: &'static str = "shm";
    const VERSION: u32 = 1 << 16;
    type InjectSize = InjectSize;
    const MAX_MSG_SIZE: usize = MAX_MSG_SIZE;

    type Peer = Arc<PeerRegion>;
    type Transport = ShmEp;

    fn candidates() -> Vec<Info> {
        vec![candidate(EpType::Rdm), candidate(EpType::Dgram)]
    }

    fn open(_info: &Info) -> Result<ShmEp> {
        // Every variable is checked before anything is made.
        let geo = geometry()?;
        check_cma_env()?;
        let rndv_min = env_usize("FABRIC_SHM_RNDV_MIN", RNDV_MIN)?.max(INLINE_MAX + 1);
        let wait_us = env_usize(
            "FABRIC_SHM_RNDV_WAIT_US",
            rndv::WAIT_BASE.as_micros() as usize,
        )?;
        ShmEp::open(
            geo,
            Tuning {
                inline_max: INLINE_MAX,
                cma: cma_enabled(),
                rndv_min,
                rndv_wait: std::time::Duration::from_micros(wait_us as u64),
            },
        )
    }

    fn resolve(name: &[u8]) -> Result<Arc<PeerRegion>> {
        peer::resolve(name)
    }

    fn name_from_svc(_node: &str, _service: &str) -> Result<Vec<u8>> {
        // shm addresses are opaque (pid, start time, descriptor, nonce): they come from
        // `fi_getname` and travel out of band, never from a node/service pair.
        Err(Error::NoSys)
    }

    fn straddr(name: &[u8]) -> String {
        match name::Name::decode(name) {
            Ok(n) => n.to_url(),
            Err(_) => format!("fi_shm://invalid({} bytes)", name.len()),
        }
    }
}
