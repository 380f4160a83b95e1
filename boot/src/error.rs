//! The one error type of the crate.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::Kind;

/// Why a bootstrap call failed.
///
/// Every variant's `Display` says what was being done and, where a peer is at fault,
/// which ranks, so that a job that fails at start-up says why in one line.
#[derive(Debug)]
#[non_exhaustive]
pub enum BootError {
    /// No launcher left its variables in the environment. `looked_for` lists, per
    /// launcher, the variables that were checked.
    NoLauncher {
        /// `(launcher, variables)` pairs, in the order they were tried.
        looked_for: Vec<(Kind, &'static str)>,
    },
    /// Every launcher that was detected failed to start; one error per attempt.
    AllFailed(Vec<(Kind, BootError)>),
    /// A launcher variable is present but unusable (not a number, out of range, ...).
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The PMIx library could not be loaded or lacks a function.
    Library(String),
    /// A PMIx call returned an error status.
    Pmix {
        /// The function that failed.
        call: &'static str,
        /// Its `pmix_status_t`.
        status: i32,
        /// The library's text for that status.
        text: String,
    },
    /// The launcher or the exchange server said something that does not follow the
    /// protocol (garbled, oversized or unexpected bytes).
    Protocol(String),
    /// The launcher or the exchange server reported a failure.
    Remote(String),
    /// A socket operation failed.
    Io {
        /// What was being done.
        during: &'static str,
        /// The system error.
        source: io::Error,
    },
    /// A collective operation did not complete in time.
    Timeout {
        /// The operation.
        during: &'static str,
        /// How long it waited.
        after: Duration,
        /// Ranks that had not arrived, where known (empty when only the server knows).
        missing: Vec<u32>,
    },
    /// Ranks closed their connection (exited or were killed) during an operation.
    PeerGone {
        /// The operation.
        during: &'static str,
        /// The ranks that went away.
        ranks: Vec<u32>,
    },
    /// No value was committed under this key by this rank before the last fence.
    NotFound {
        /// The rank asked for.
        rank: u32,
        /// The key asked for.
        key: String,
    },
    /// A caller-side argument is out of bounds (key syntax, value size, rank).
    Invalid(String),
}

impl BootError {
    pub(crate) fn io(during: &'static str, source: io::Error) -> Self {
        BootError::Io { during, source }
    }
}

fn ranks(list: &[u32]) -> String {
    const SHOWN: usize = 32;
    let mut s: Vec<String> = list.iter().take(SHOWN).map(u32::to_string).collect();
    if list.len() > SHOWN {
        s.push(format!("... ({} in all)", list.len()));
    }
    s.join(", ")
}

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootError::NoLauncher { looked_for } => {
                write!(f, "no launcher found: looked for ")?;
                for (i, (kind, vars)) in looked_for.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{kind}: {vars}")?;
                }
                write!(
                    f,
                    " (start the program with mpirun, srun --mpi=pmix or --mpi=pmi2, \
                     or set the fallback's variables)"
                )
            }
            BootError::AllFailed(list) => {
                write!(f, "no launcher could be used:")?;
                for (kind, e) in list {
                    write!(f, " [{kind}: {e}]")?;
                }
                Ok(())
            }
            BootError::Env { var, reason } => write!(f, "environment variable {var}: {reason}"),
            BootError::Library(s) => write!(f, "PMIx library: {s}"),
            BootError::Pmix { call, status, text } => {
                write!(f, "{call} failed with status {status} ({text})")
            }
            BootError::Protocol(s) => write!(f, "protocol error: {s}"),
            BootError::Remote(s) => write!(f, "reported by the launcher or exchange server: {s}"),
            BootError::Io { during, source } => write!(f, "{during}: {source}"),
            BootError::Timeout {
                during,
                after,
                missing,
            } => {
                write!(f, "{during} timed out after {:.1} s", after.as_secs_f64())?;
                if !missing.is_empty() {
                    write!(f, " waiting for rank(s) {}", ranks(missing))?;
                }
                Ok(())
            }
            BootError::PeerGone { during, ranks: r } => {
                write!(
                    f,
                    "{during}: rank(s) {} closed their connection (exited or killed)",
                    ranks(r)
                )
            }
            BootError::NotFound { rank, key } => {
                write!(
                    f,
                    "rank {rank} committed no value under key {key:?} before the last fence"
                )
            }
            BootError::Invalid(s) => write!(f, "invalid argument: {s}"),
        }
    }
}

impl std::error::Error for BootError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BootError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
