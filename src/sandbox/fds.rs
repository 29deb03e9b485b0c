//! Layer §6.2: only fds 0, 1, 2 reach the program. Every descriptor the broker or the supervisor
//! held is closed with `close_range`, or one by one from `/proc/self/fd` on kernels without it.

use std::io;
use std::os::fd::RawFd;

use super::sys;

/// Closes every descriptor `>= first`.
pub(crate) fn close_from(first: RawFd) -> io::Result<()> {
    let first_u =
        libc::c_uint::try_from(first).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    match sys::close_range_from(first_u) {
        Ok(()) => Ok(()),
        Err(e)
            if e.raw_os_error() == Some(libc::ENOSYS) || e.raw_os_error() == Some(libc::EPERM) =>
        {
            close_listed(first)
        }
        Err(e) => Err(e),
    }
}

/// Fallback: the descriptors named in `/proc/self/fd` (collected first, since reading the
/// directory itself uses one).
fn close_listed(first: RawFd) -> io::Result<()> {
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= first)
        .collect();
    for fd in fds {
        // SAFETY: every descriptor >= first belongs to this process and nothing else uses it; the
        // one read_dir used is already closed, so EBADF for it is expected and harmless.
        unsafe { libc::close(fd) };
    }
    Ok(())
}
