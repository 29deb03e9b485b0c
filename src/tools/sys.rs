//! The raw file syscalls the tools need (openat2, openat, mkdirat, renameat, unlinkat, fchmod),
//! each wrapped once and returning `io::Result`. Every `unsafe` of the file and memory tools lives
//! here. This module opens what it is told to open; it never decides whether that is allowed.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

/// Turns a raw syscall return into `io::Result`: -1 means "look at errno".
fn cvt<T: PartialEq + From<i8>>(ret: T) -> io::Result<T> {
    if ret == T::from(-1) {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn c_path(path: &OsStr) -> io::Result<CString> {
    CString::new(path.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// False once the kernel (or a seccomp filter around us) said openat2 does not exist.
static OPENAT2_AVAILABLE: AtomicBool = AtomicBool::new(true);

/// Where a relative path starts: the cwd-independent root `/` (for absolute paths) or a directory.
#[derive(Clone, Copy)]
pub enum Base<'a> {
    /// `path` is absolute; no component of it may be a symlink.
    Root,
    /// `path` is relative to this directory, stays beneath it, and no component is a symlink.
    Dir(BorrowedFd<'a>),
}

/// Opens `path` without following a symlink in any component, including the last: openat2 with
/// `RESOLVE_NO_SYMLINKS` (plus `RESOLVE_BENEATH` under [`Base::Dir`]), falling back to a walk of
/// `openat(O_NOFOLLOW)` one component at a time on kernels without openat2. A symlink anywhere is
/// `ELOOP` (or `ENOTDIR` in the walk). `flags` gets `O_CLOEXEC | O_NOFOLLOW` (and `O_NOCTTY`) added.
pub fn open_no_symlinks(base: Base<'_>, path: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    // openat2 refuses (EINVAL) any flag besides these three with O_PATH.
    let extra = if flags & libc::O_PATH != 0 {
        0
    } else {
        libc::O_NOCTTY
    };
    let flags = flags | libc::O_CLOEXEC | libc::O_NOFOLLOW | extra;
    if OPENAT2_AVAILABLE.load(Ordering::Relaxed) {
        match openat2(base, path, flags, mode) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS)) => {
                OPENAT2_AVAILABLE.store(false, Ordering::Relaxed);
            }
            other => return other,
        }
    }
    open_walk(base, path, flags, mode)
}

fn openat2(base: Base<'_>, path: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let (dirfd, resolve) = match base {
        Base::Root => (
            libc::AT_FDCWD,
            libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        ),
        Base::Dir(fd) => (
            fd.as_raw_fd(),
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        ),
    };
    if matches!(base, Base::Root) != path.is_absolute() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let c = c_path(path.as_os_str())?;
    // O_CREAT/O_TMPFILE are the only flags for which the kernel reads `mode`; openat2 rejects a
    // non-zero mode otherwise.
    let mode = if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
        u64::from(mode)
    } else {
        0
    };
    // SAFETY: an all-zero open_how is a valid value (it is plain integers); we then set each field.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.mode = mode;
    how.resolve = resolve;
    // SAFETY: `c` is a NUL-terminated path that outlives the call, `how` is a properly initialised
    // open_how whose exact size we pass, and `dirfd` is AT_FDCWD or a descriptor borrowed for the
    // duration of the call.
    let fd = cvt(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    })?;
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The openat2 fallback: every component opened with `O_PATH | O_NOFOLLOW` relative to the
/// previous one, so a symlink anywhere fails instead of being followed.
fn open_walk(base: Base<'_>, path: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir if matches!(base, Base::Root) => {}
            Component::CurDir => {}
            Component::Normal(name) => names.push(name),
            // `..` or a root under Base::Dir would leave the base: refuse like RESOLVE_BENEATH.
            _ => return Err(io::Error::from_raw_os_error(libc::EXDEV)),
        }
    }
    let Some((last, dirs)) = names.split_last() else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let mut dir = match base {
        Base::Root => openat(None, OsStr::new("/"), libc::O_PATH | libc::O_DIRECTORY, 0)?,
        Base::Dir(fd) => fd.try_clone_to_owned()?,
    };
    for name in dirs {
        dir = openat(
            Some(dir.as_fd()),
            name,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
    }
    openat(Some(dir.as_fd()), last, flags, mode)
}

/// `openat(dir or AT_FDCWD, name, flags | O_CLOEXEC, mode)`.
pub fn openat(
    dir: Option<BorrowedFd<'_>>,
    name: &OsStr,
    flags: i32,
    mode: u32,
) -> io::Result<OwnedFd> {
    let c = c_path(name)?;
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `c` is NUL-terminated and outlives the call; `dirfd` is AT_FDCWD or borrowed for the
    // call; the mode argument is read only with O_CREAT and is passed as the promoted c_uint.
    let fd = cvt(unsafe {
        libc::openat(
            dirfd,
            c.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdirat(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    let c = c_path(name)?;
    // SAFETY: `c` is NUL-terminated and outlives the call; `dir` is a live borrowed descriptor.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) })?;
    Ok(())
}

/// `renameat(dir, from, dir, to)`: replaces `to` atomically (a symlink at `to` is replaced, not
/// followed).
pub fn renameat(dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (f, t) = (c_path(from)?, c_path(to)?);
    // SAFETY: both paths are NUL-terminated and outlive the call; `dir` is a live borrowed
    // descriptor used for both ends.
    cvt(unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) })?;
    Ok(())
}

/// `unlinkat(dir, name, 0)`.
pub fn unlinkat(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let c = c_path(name)?;
    // SAFETY: `c` is NUL-terminated and outlives the call; `dir` is a live borrowed descriptor.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) })?;
    Ok(())
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: what is at `name` itself, `None` if nothing.
pub fn lstatat(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c = c_path(name)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `c` is NUL-terminated, `st` points to writable memory of the right size, and `dir`
    // is a live borrowed descriptor.
    let ret = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    match cvt(ret) {
        // SAFETY: fstatat returned 0, so it filled in the whole struct.
        Ok(_) => Ok(Some(unsafe { st.assume_init() })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `fchmod(fd, mode)`.
pub fn fchmod(file: &File, mode: u32) -> io::Result<()> {
    // SAFETY: `file` owns a live descriptor for the duration of the call.
    cvt(unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) })?;
    Ok(())
}

/// The path the kernel has for an open descriptor (`/proc/self/fd/N`).
pub fn fd_path(fd: BorrowedFd<'_>) -> io::Result<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Opens the very file an `O_PATH` descriptor refers to, for reading (`O_NONBLOCK` so that even
/// a FIFO could not block; callers check the type before this anyway).
pub fn reopen_read(fd: BorrowedFd<'_>) -> io::Result<File> {
    reopen(fd, libc::O_RDONLY | libc::O_NONBLOCK)
}

/// Opens the directory an `O_PATH` descriptor refers to, for fsync.
pub fn reopen_dir(fd: BorrowedFd<'_>) -> io::Result<File> {
    reopen(fd, libc::O_RDONLY | libc::O_DIRECTORY)
}

fn reopen(fd: BorrowedFd<'_>, flags: i32) -> io::Result<File> {
    // The magic link refers to the open file itself, not to a path: no name lookup can be raced.
    let owned = openat(
        None,
        OsStr::new(&format!("/proc/self/fd/{}", fd.as_raw_fd())),
        flags | libc::O_NOCTTY,
        0,
    )?;
    Ok(File::from(owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_are_refused_in_every_component() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/f"), b"x").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("real/lf")).unwrap();
        let ok = open_no_symlinks(Base::Root, &dir.path().join("real/f"), libc::O_RDONLY, 0);
        assert!(ok.is_ok());
        for bad in ["link/f", "real/lf"] {
            let err =
                open_no_symlinks(Base::Root, &dir.path().join(bad), libc::O_RDONLY, 0).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{bad}");
            let walk = open_walk(
                Base::Root,
                &dir.path().join(bad),
                libc::O_RDONLY | libc::O_NOFOLLOW,
                0,
            );
            assert!(walk.is_err(), "{bad}");
        }
        let root = File::open(dir.path()).unwrap();
        assert!(
            open_no_symlinks(
                Base::Dir(root.as_fd()),
                Path::new("real/f"),
                libc::O_RDONLY,
                0
            )
            .is_ok()
        );
        for bad in ["../x", "link/f", "/etc/passwd"] {
            assert!(
                open_no_symlinks(Base::Dir(root.as_fd()), Path::new(bad), libc::O_RDONLY, 0)
                    .is_err()
            );
            assert!(open_walk(Base::Dir(root.as_fd()), Path::new(bad), libc::O_RDONLY, 0).is_err());
        }
        assert!(
            open_walk(
                Base::Dir(root.as_fd()),
                Path::new("real/f"),
                libc::O_RDONLY,
                0
            )
            .is_ok()
        );
    }
}
