//! The one error type of the library, mapped 1:1 onto libfabric's `FI_E*` values.
//!
//! Every variant carries the positive errno value libfabric uses (`FI_EAGAIN` is
//! `EAGAIN`, `FI_ETRUNC` is 265, ...). [`Error::code`] returns it, [`Error::from_code`]
//! maps it back, so error entries in CQs and EQs translate to and from C without loss.

use core::fmt;

/// Offset of the libfabric-specific error numbers (`FI_ERRNO_OFFSET`).
pub const FI_ERRNO_OFFSET: i32 = 256;

macro_rules! errors {
    ($( $(#[$doc:meta])* $name:ident = $code:expr, $text:literal; )*) => {
        /// A libfabric error (`FI_E*`). The discriminant-free enum maps 1:1 to the codes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Error {
            $( $(#[$doc])* $name, )*
        }

        impl Error {
            /// The positive libfabric error number (`FI_E*`).
            #[inline]
            pub const fn code(self) -> i32 {
                match self { $( Error::$name => $code, )* }
            }

            /// Maps a positive or negative libfabric error number back to an [`Error`].
            /// Unknown numbers become [`Error::Other`].
            pub const fn from_code(code: i32) -> Error {
                let c = if code < 0 { -code } else { code };
                $( if c == $code { return Error::$name; } )*
                Error::Other
            }

            /// The text `fi_strerror` gives for this error.
            pub const fn as_str(self) -> &'static str {
                match self { $( Error::$name => $text, )* }
            }
        }
    };
}

errors! {
    /// `FI_EPERM`: operation not permitted.
    Perm = libc::EPERM, "Operation not permitted";
    /// `FI_ENOENT`: no such entry.
    NoEnt = libc::ENOENT, "No such file or directory";
    /// `FI_EINTR`: interrupted.
    Intr = libc::EINTR, "Interrupted system call";
    /// `FI_EIO`: I/O error.
    Io = libc::EIO, "Input/output error";
    /// `FI_E2BIG`: argument list too long.
    TooBig = libc::E2BIG, "Argument list too long";
    /// `FI_EBADF`: bad file descriptor.
    BadF = libc::EBADF, "Bad file descriptor";
    /// `FI_EAGAIN`: resource temporarily unavailable; try again (a queue is full or empty).
    Again = libc::EAGAIN, "Resource temporarily unavailable";
    /// `FI_ENOMEM`: out of memory.
    NoMem = libc::ENOMEM, "Cannot allocate memory";
    /// `FI_EACCES`: permission denied (e.g. remote access without the MR access right).
    Access = libc::EACCES, "Permission denied";
    /// `FI_EFAULT`: bad address (e.g. RMA outside the registered region).
    Fault = libc::EFAULT, "Bad address";
    /// `FI_EBUSY`: resource busy.
    Busy = libc::EBUSY, "Device or resource busy";
    /// `FI_ENODEV`: no such device.
    NoDev = libc::ENODEV, "No such device";
    /// `FI_EINVAL`: invalid argument.
    Inval = libc::EINVAL, "Invalid argument";
    /// `FI_EMFILE`: too many open files.
    MFile = libc::EMFILE, "Too many open files";
    /// `FI_ENOSPC`: no space left.
    NoSpc = libc::ENOSPC, "No space left on device";
    /// `FI_ENOSYS`: function not implemented.
    NoSys = libc::ENOSYS, "Function not implemented";
    /// `FI_ENOMSG`: no message of the desired type.
    NoMsg = libc::ENOMSG, "No message of desired type";
    /// `FI_ENODATA`: no data available (e.g. an `FI_PEEK` found nothing).
    NoData = libc::ENODATA, "No data available";
    /// `FI_EOVERFLOW`: value too large.
    Overflow = libc::EOVERFLOW, "Value too large for defined data type";
    /// `FI_EMSGSIZE`: message too long for the endpoint.
    MsgSize = libc::EMSGSIZE, "Message too long";
    /// `FI_ENOPROTOOPT`: option not available.
    NoProtoOpt = libc::ENOPROTOOPT, "Protocol not available";
    /// `FI_EOPNOTSUPP`: operation not supported (this is what unsupported features return).
    OpNotSupp = libc::EOPNOTSUPP, "Operation not supported";
    /// `FI_EADDRINUSE`: address already in use.
    AddrInUse = libc::EADDRINUSE, "Address already in use";
    /// `FI_EADDRNOTAVAIL`: address not available (unknown or removed peer).
    AddrNotAvail = libc::EADDRNOTAVAIL, "Cannot assign requested address";
    /// `FI_ENETDOWN`: network is down.
    NetDown = libc::ENETDOWN, "Network is down";
    /// `FI_ENETUNREACH`: network unreachable.
    NetUnreach = libc::ENETUNREACH, "Network is unreachable";
    /// `FI_ECONNABORTED`: connection aborted.
    ConnAborted = libc::ECONNABORTED, "Software caused connection abort";
    /// `FI_ECONNRESET`: connection reset by peer.
    ConnReset = libc::ECONNRESET, "Connection reset by peer";
    /// `FI_ENOBUFS`: no buffer space.
    NoBufs = libc::ENOBUFS, "No buffer space available";
    /// `FI_EISCONN`: already connected.
    IsConn = libc::EISCONN, "Transport endpoint is already connected";
    /// `FI_ENOTCONN`: not connected.
    NotConn = libc::ENOTCONN, "Transport endpoint is not connected";
    /// `FI_ESHUTDOWN`: endpoint shut down.
    Shutdown = libc::ESHUTDOWN, "Cannot send after transport endpoint shutdown";
    /// `FI_ETIMEDOUT`: timed out.
    TimedOut = libc::ETIMEDOUT, "Connection timed out";
    /// `FI_ECONNREFUSED`: connection refused.
    ConnRefused = libc::ECONNREFUSED, "Connection refused";
    /// `FI_EHOSTDOWN`: host down.
    HostDown = libc::EHOSTDOWN, "Host is down";
    /// `FI_EHOSTUNREACH`: host unreachable (the peer went away).
    HostUnreach = libc::EHOSTUNREACH, "No route to host";
    /// `FI_EALREADY`: already in progress.
    Already = libc::EALREADY, "Operation already in progress";
    /// `FI_EINPROGRESS`: in progress.
    InProgress = libc::EINPROGRESS, "Operation now in progress";
    /// `FI_EREMOTEIO`: remote I/O error.
    RemoteIo = libc::EREMOTEIO, "Remote I/O error";
    /// `FI_ECANCELED`: the operation was canceled.
    Canceled = libc::ECANCELED, "Operation canceled";
    /// `FI_EKEYREJECTED`: the (remote or requested) key was rejected.
    KeyRejected = libc::EKEYREJECTED, "Key was rejected by service";
    /// `FI_EOTHER`: unspecified error.
    Other = FI_ERRNO_OFFSET, "Unspecified error";
    /// `FI_ETOOSMALL`: the provided buffer is too small.
    TooSmall = 257, "Provided buffer is too small";
    /// `FI_EOPBADSTATE`: operation not permitted in the current state.
    OpBadState = 258, "Operation not permitted in current state";
    /// `FI_EAVAIL`: an error entry is available (read it with `readerr`).
    Avail = 259, "Error available";
    /// `FI_EBADFLAGS`: flags not supported.
    BadFlags = 260, "Flags not supported";
    /// `FI_ENOEQ`: missing or unavailable event queue.
    NoEq = 261, "Missing or unavailable event queue";
    /// `FI_EDOMAIN`: invalid resource domain.
    Domain = 262, "Invalid resource domain";
    /// `FI_ENOCQ`: missing or unavailable completion queue.
    NoCq = 263, "Missing or unavailable completion queue";
    /// `FI_ECRC`: CRC error.
    Crc = 264, "CRC error";
    /// `FI_ETRUNC`: truncation (the message was longer than the receive buffer).
    Trunc = 265, "Truncation error";
    /// `FI_ENOKEY`: required key not available.
    NoKey = 266, "Required key not available";
    /// `FI_ENOAV`: missing or unavailable address vector.
    NoAv = 267, "Missing or unavailable address vector";
    /// `FI_EOVERRUN`: the queue has been overrun.
    Overrun = 268, "Queue has been overrun";
    /// `FI_ENORX`: receiver not ready.
    NoRx = 269, "Receiver not ready, no receive buffers available";
}

impl Error {
    /// Libfabric's name for `NotSupported`: unsupported features return this
    /// (`-FI_ENOSYS`), never a silent wrong answer.
    #[allow(non_upper_case_globals)]
    pub const NotSupported: Error = Error::NoSys;

    /// Maps an OS errno (as from `std::io::Error::raw_os_error`) to an [`Error`].
    pub fn from_errno(errno: i32) -> Error {
        Error::from_code(errno)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (FI_E{})", self.as_str(), self.code())
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        match e.raw_os_error() {
            Some(c) => Error::from_errno(c),
            None => Error::Io,
        }
    }
}

/// The library's result type.
pub type Result<T> = core::result::Result<T, Error>;

/// `fi_strerror`: the text for a (positive or negative) libfabric error number.
pub fn strerror(code: i32) -> &'static str {
    if code == 0 {
        "Success"
    } else {
        Error::from_code(code).as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for e in [
            Error::Again,
            Error::Trunc,
            Error::Canceled,
            Error::NoRx,
            Error::Avail,
            Error::Access,
        ] {
            assert_eq!(Error::from_code(e.code()), e);
            assert_eq!(Error::from_code(-e.code()), e);
        }
        assert_eq!(Error::Again.code(), 11);
        assert_eq!(Error::Trunc.code(), 265);
        assert_eq!(Error::Canceled.code(), 125);
        assert_eq!(Error::NotSupported.code(), 38);
        assert_eq!(Error::from_code(9999), Error::Other);
        assert_eq!(strerror(-265), "Truncation error");
    }
}
