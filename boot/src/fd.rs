//! The one place that turns an inherited descriptor number into an owned descriptor.

#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd};

use crate::BootError;

/// A close-on-exec duplicate of descriptor `fd`, which must be a socket. The original
/// is left as it is: it belongs to whoever handed it down (the launcher), and other
/// code in the process may look at it too.
pub(crate) fn dup_socket(fd: i32, var: &'static str) -> Result<OwnedFd, BootError> {
    // SAFETY: F_DUPFD_CLOEXEC reads no memory; on a number that is not an open
    // descriptor it fails with EBADF, which is checked below.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(BootError::Env {
            var,
            reason: format!(
                "descriptor {fd} is not open in this process: {}",
                std::io::Error::last_os_error()
            ),
        });
    }
    // SAFETY: `new` was just returned by fcntl, so it is an open descriptor that no
    // other object owns; the OwnedFd becomes its only owner.
    let owned = unsafe { OwnedFd::from_raw_fd(new) };
    let st = rustix::fs::fstat(&owned).map_err(|e| BootError::Env {
        var,
        reason: format!("descriptor {fd}: fstat: {e}"),
    })?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(BootError::Env {
            var,
            reason: format!("descriptor {fd} is not a socket"),
        });
    }
    Ok(owned)
}
