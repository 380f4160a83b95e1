//! Bootstrap for the processes of a fabric job: each learns its rank and the job's size
//! from the launcher that started it, and the processes exchange small values (endpoint
//! names) through it.
//!
//! ```no_run
//! use fabric_boot::Boot;
//!
//! let mut boot = Boot::init()?; // the first launcher found in the environment
//! boot.put("ep", b"my endpoint name")?;
//! boot.commit()?;
//! boot.fence()?; // collective: every rank's committed values are now visible
//! for peer in 0..boot.size() {
//!     let name = boot.get(peer, "ep")?;
//!     assert!(!name.is_empty());
//! }
//! boot.finalize()?;
//! # Ok::<(), fabric_boot::BootError>(())
//! ```
//!
//! Three launchers, tried in this order:
//!
//! | kind | started by | found through |
//! |---|---|---|
//! | [`Kind::Pmix`] | Open MPI's `mpirun`, `srun --mpi=pmix` | `PMIX_RANK`, `PMIX_NAMESPACE`, `PMIX_SERVER_URI*`; the system's `libpmix.so.2` loaded at run time |
//! | [`Kind::Pmi2`] | `srun --mpi=pmi2` (and other PMI-2 servers) | `PMI_FD`, `PMI_RANK`, `PMI_SIZE`; the PMI-2 wire protocol on the inherited socket |
//! | [`Kind::Tcp`] | nothing: tests and ad-hoc runs | `FABRIC_BOOT_ADDR` (`host:port`), `FABRIC_BOOT_RANK`, `FABRIC_BOOT_SIZE`; rank 0 serves the exchange there |
//!
//! `FABRIC_BOOT_KIND` (`pmix`, `pmi2` or `tcp`) forces one, like [`Boot::with`]. Every
//! wait is bounded by `FABRIC_BOOT_TIMEOUT` seconds (default 60); a launcher that is
//! detected but cannot be used (no `libpmix` on the machine, say) is skipped in favour of
//! the next one found, and when none works the error says what was tried.
//!
//! Keys are 1 to [`MAX_KEY_LEN`] characters of `[A-Za-z0-9_.-]`, the same for every
//! launcher; values are bytes, up to [`MAX_VALUE_LEN`].

#![deny(unsafe_code)]

mod error;
mod fd;
mod pmi2;
mod pmix;
mod tcp;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

pub use error::BootError;

/// The longest key, in bytes.
pub const MAX_KEY_LEN: usize = 32;

/// The largest value, in bytes.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// The wait bound when `FABRIC_BOOT_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The launcher a [`Boot`] talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// PMIx, served by Open MPI's `mpirun` and Slurm's `srun --mpi=pmix`.
    Pmix,
    /// The PMI-2 wire protocol, served by Slurm's `srun --mpi=pmi2`.
    Pmi2,
    /// No launcher: rank 0 serves the exchange over TCP at `FABRIC_BOOT_ADDR`.
    Tcp,
}

impl Kind {
    /// All kinds, in the order [`Boot::init`] tries them.
    pub const ALL: [Kind; 3] = [Kind::Pmix, Kind::Pmi2, Kind::Tcp];

    /// The environment variables whose presence selects this kind, as shown in errors.
    pub fn variables(self) -> &'static str {
        match self {
            Kind::Pmix => "PMIX_RANK, PMIX_NAMESPACE or PMIX_SERVER_URI*",
            Kind::Pmi2 => "PMI_FD (with PMI_RANK, PMI_SIZE)",
            Kind::Tcp => "FABRIC_BOOT_ADDR (with FABRIC_BOOT_RANK, FABRIC_BOOT_SIZE)",
        }
    }

    /// Whether the environment carries this launcher's variables.
    pub fn detected(self) -> bool {
        match self {
            Kind::Pmix => std::env::vars_os().any(|(k, _)| {
                k.to_str().is_some_and(|k| {
                    k == "PMIX_RANK" || k == "PMIX_NAMESPACE" || k.starts_with("PMIX_SERVER_URI")
                })
            }),
            Kind::Pmi2 => std::env::var_os("PMI_FD").is_some(),
            Kind::Tcp => std::env::var_os("FABRIC_BOOT_ADDR").is_some(),
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        match s.to_ascii_lowercase().as_str() {
            "pmix" => Some(Kind::Pmix),
            "pmi2" | "pmi-2" => Some(Kind::Pmi2),
            "tcp" => Some(Kind::Tcp),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Pmix => "PMIx",
            Kind::Pmi2 => "PMI-2",
            Kind::Tcp => "TCP fallback",
        })
    }
}

/// What every launcher's session provides; [`Boot`] adds the staging of puts and the
/// argument checks on top.
trait Backend: Send {
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    fn local(&self) -> Option<(u32, u32)>;
    /// Makes these entries part of the data the next fence exchanges.
    fn publish(&mut self, entries: &BTreeMap<String, Vec<u8>>) -> Result<(), BootError>;
    fn fence(&mut self) -> Result<(), BootError>;
    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, BootError>;
    fn barrier(&mut self) -> Result<(), BootError>;
    fn finalize(&mut self) -> Result<(), BootError>;
}

/// A process's session with its launcher.
///
/// `put` stages a value, `commit` hands the staged values to the launcher, and `fence`
/// (collective over all ranks) makes every rank's committed values visible to `get`.
/// Dropping a `Boot` finalizes it; [`Boot::finalize`] does the same and reports errors.
pub struct Boot {
    kind: Kind,
    backend: Box<dyn Backend>,
    staged: BTreeMap<String, Vec<u8>>,
    committed: BTreeSet<String>,
    finalized: bool,
}

impl fmt::Debug for Boot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Boot")
            .field("kind", &self.kind)
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

/// The wait bound: `FABRIC_BOOT_TIMEOUT` seconds, or [`DEFAULT_TIMEOUT`].
pub fn timeout_from_env() -> Result<Duration, BootError> {
    match std::env::var("FABRIC_BOOT_TIMEOUT") {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(s) => match s.trim().parse::<f64>() {
            Ok(secs) if secs > 0.0 && secs <= 1e6 => Ok(Duration::from_secs_f64(secs)),
            _ => Err(BootError::Env {
                var: "FABRIC_BOOT_TIMEOUT",
                reason: format!("{s:?} is not a number of seconds in (0, 1e6]"),
            }),
        },
    }
}

/// Reads a variable that must hold a `u32`.
pub(crate) fn env_u32(var: &'static str) -> Result<u32, BootError> {
    let s = std::env::var(var).map_err(|_| BootError::Env {
        var,
        reason: "not set (or not UTF-8)".into(),
    })?;
    s.trim().parse::<u32>().map_err(|_| BootError::Env {
        var,
        reason: format!("{s:?} is not a non-negative 32-bit integer"),
    })
}

/// Checks a rank/size pair read from a launcher.
pub(crate) fn check_rank_size(rank: u32, size: u32, what: &str) -> Result<(), BootError> {
    if size == 0 || rank >= size {
        return Err(BootError::Protocol(format!(
            "{what} gave rank {rank} in a job of size {size}"
        )));
    }
    Ok(())
}

/// Checks a key against the rules shared by every launcher.
pub(crate) fn check_key(key: &str) -> Result<(), BootError> {
    let ok = !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(BootError::Invalid(format!(
            "key {key:?}: keys are 1 to {MAX_KEY_LEN} characters of [A-Za-z0-9_.-]"
        )))
    }
}

impl Boot {
    /// Connects to the first launcher found in the environment (PMIx, then PMI-2, then
    /// the TCP fallback), or to the one `FABRIC_BOOT_KIND` names.
    pub fn init() -> Result<Boot, BootError> {
        if let Ok(s) = std::env::var("FABRIC_BOOT_KIND") {
            let kind = Kind::parse(&s).ok_or_else(|| BootError::Env {
                var: "FABRIC_BOOT_KIND",
                reason: format!("{s:?} is none of pmix, pmi2, tcp"),
            })?;
            return Boot::with(kind);
        }
        let found: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.detected()).collect();
        if found.is_empty() {
            return Err(BootError::NoLauncher {
                looked_for: Kind::ALL.iter().map(|k| (*k, k.variables())).collect(),
            });
        }
        let mut failures = Vec::new();
        for kind in found {
            match Boot::with(kind) {
                Ok(b) => return Ok(b),
                Err(e) => failures.push((kind, e)),
            }
        }
        if failures.len() == 1 {
            Err(failures.pop().expect("one failure").1)
        } else {
            Err(BootError::AllFailed(failures))
        }
    }

    /// Connects to this launcher, whether or not others are present.
    pub fn with(kind: Kind) -> Result<Boot, BootError> {
        let timeout = timeout_from_env()?;
        let backend: Box<dyn Backend> = match kind {
            Kind::Pmix => Box::new(pmix::Pmix::init(timeout)?),
            Kind::Pmi2 => Box::new(pmi2::Pmi2::from_env(timeout)?),
            Kind::Tcp => Box::new(tcp::Tcp::from_env(timeout)?),
        };
        Ok(Boot {
            kind,
            backend,
            staged: BTreeMap::new(),
            committed: BTreeSet::new(),
            finalized: false,
        })
    }

    /// The launcher in use.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// This process's rank, in `0..size()`.
    pub fn rank(&self) -> u32 {
        self.backend.rank()
    }

    /// The number of processes in the job.
    pub fn size(&self) -> u32 {
        self.backend.size()
    }

    /// This process's rank among the job's processes on the same node, when the
    /// launcher tells it.
    pub fn local_rank(&self) -> Option<u32> {
        self.backend.local().map(|(r, _)| r)
    }

    /// The number of the job's processes on this node, when the launcher tells it.
    pub fn local_size(&self) -> Option<u32> {
        self.backend.local().map(|(_, s)| s)
    }

    /// Stages `value` under `key`; a later put of the same key replaces it. Nothing
    /// leaves the process before [`commit`](Self::commit).
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), BootError> {
        self.live()?;
        check_key(key)?;
        if value.len() > MAX_VALUE_LEN {
            return Err(BootError::Invalid(format!(
                "value of {} bytes under key {key:?}: the limit is {MAX_VALUE_LEN}",
                value.len()
            )));
        }
        self.staged.insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    /// Hands the staged values to the launcher; the next [`fence`](Self::fence)
    /// exchanges them.
    ///
    /// Each key is committed at most once per rank: PMI-2 servers keep the first value
    /// of a key, so a second commit is refused everywhere rather than read back stale
    /// under one launcher.
    pub fn commit(&mut self) -> Result<(), BootError> {
        self.live()?;
        if let Some(k) = self.staged.keys().find(|k| self.committed.contains(*k)) {
            return Err(BootError::Invalid(format!(
                "key {k:?} was already committed by this rank"
            )));
        }
        if self.staged.is_empty() {
            return Ok(());
        }
        self.backend.publish(&self.staged)?;
        self.committed
            .extend(std::mem::take(&mut self.staged).into_keys());
        Ok(())
    }

    /// Collective over all ranks: returns once every rank has called it, after which
    /// every value any rank committed before its fence can be read with
    /// [`get`](Self::get). Values put but not committed are not exchanged.
    pub fn fence(&mut self) -> Result<(), BootError> {
        self.live()?;
        self.backend.fence()
    }

    /// The value `rank` committed under `key` before the last fence.
    pub fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, BootError> {
        self.live()?;
        check_key(key)?;
        if rank >= self.size() {
            return Err(BootError::Invalid(format!(
                "rank {rank} in a job of size {}",
                self.size()
            )));
        }
        self.backend.get(rank, key)
    }

    /// Collective over all ranks: returns once every rank has called it. Exchanges no
    /// data.
    pub fn barrier(&mut self) -> Result<(), BootError> {
        self.live()?;
        self.backend.barrier()
    }

    /// Ends the session with the launcher (which some launchers require before exit).
    pub fn finalize(mut self) -> Result<(), BootError> {
        self.finalized = true;
        self.backend.finalize()
    }

    fn live(&self) -> Result<(), BootError> {
        if self.finalized {
            Err(BootError::Invalid("the session is finalized".into()))
        } else {
            Ok(())
        }
    }
}

impl Drop for Boot {
    fn drop(&mut self) {
        if !self.finalized {
            self.finalized = true;
            // Nobody to report to: an explicit `finalize` is how errors are seen.
            let _ = self.backend.finalize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(check_key("ep").is_ok());
        assert!(check_key("a.b-c_D9").is_ok());
        assert!(check_key(&"k".repeat(MAX_KEY_LEN)).is_ok());
        for bad in ["", "a b", "a;b", "a=b", "é", &"k".repeat(MAX_KEY_LEN + 1)] {
            assert!(
                matches!(check_key(bad), Err(BootError::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn kinds_parse() {
        assert_eq!(Kind::parse("PMIx"), Some(Kind::Pmix));
        assert_eq!(Kind::parse("pmi-2"), Some(Kind::Pmi2));
        assert_eq!(Kind::parse("tcp"), Some(Kind::Tcp));
        assert_eq!(Kind::parse("slurm"), None);
    }
}
