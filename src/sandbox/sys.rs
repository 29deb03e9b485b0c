//! Thin wrappers over the raw system calls the sandbox needs and `std` does not offer: each one
//! turns the C return convention into an `io::Result` exactly once. Nothing here decides policy.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::path::Path;

/// `-1` means "look at errno"; anything else is the result.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// [`cvt`] for calls made through `libc::syscall`, which return a `c_long`.
pub(crate) fn cvt_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A path as a C string; a path containing NUL cannot name a file.
pub(crate) fn cpath(path: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt as _;
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("path {} contains NUL", path.display()),
        )
    })
}

/// `pidfd_open(2)`: a descriptor that becomes readable when `pid` exits.
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new descriptor or -1.
    let fd = cvt_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel just returned this descriptor to us and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_send_signal(2)`: signals exactly the process the descriptor refers to, even if its pid
/// number has been reused since.
pub(crate) fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: the descriptor is valid for the duration of the call; a null siginfo means "as kill(2)".
    cvt_long(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(drop)
}

/// `close_range(first, ~0, 0)`: closes every descriptor from `first` up.
pub(crate) fn close_range_from(first: libc::c_uint) -> io::Result<()> {
    // SAFETY: close_range only closes descriptors of this process; callers own every fd >= first.
    cvt_long(unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) }).map(drop)
}

/// `prctl(2)` with integer arguments.
pub(crate) fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: every option used by this crate takes integer arguments only.
    cvt(unsafe {
        libc::prctl(
            option,
            arg2,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
}

/// The calling thread's errno as an `io::Error`, for calls made where allocation must be avoided.
pub(crate) fn errno() -> libc::c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
