//! The core's fixed limits, which getinfo reports and the provider contract relies on.

/// Most scatter-gather entries per operation (`iov_limit`).
pub const IOV_LIMIT: usize = 4;

/// Largest atomic operation in bytes (`max_atomic_size` reported by the valid queries).
pub const MAX_ATOMIC_SIZE: usize = 4096;
