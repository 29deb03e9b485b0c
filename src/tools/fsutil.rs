//! Safe filesystem access shared by the file and memory tools: the path canonicalisation of
//! CONTRACT §5, opening an already-checked path with no window for a symlink swap (the opened
//! descriptor is verified, not the name), reading with a cap, and atomic replacement (temp file in
//! the same directory + rename). Callers decide policy; this module must never follow a symlink
//! after a check has been made.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use crate::tools::ToolError;
use crate::tools::sys::{self, Base};

/// What Read returns at most, and the largest file Edit or MemoryRead will load.
pub const READ_CAP: u64 = 10 * 1024 * 1024;

/// CONTRACT §5: the path must be absolute; symlinks are resolved in the longest existing prefix,
/// the non-existent rest is appended as written (where `..` is refused, since nothing on disk
/// says what it would mean). The result is what the policy globs are matched against.
pub fn canonical_file_path(raw: &str) -> Result<PathBuf, ToolError> {
    if raw.contains('\0') {
        return Err(ToolError::invalid("path contains NUL"));
    }
    let path = Path::new(raw);
    if !path.is_absolute() {
        return Err(ToolError::invalid(format!("path {raw:?} is not absolute")));
    }
    canonicalise(raw, path.to_path_buf(), 0)
}

/// Links followed by hand (dangling ones) before giving up, as the kernel's MAXSYMLINKS.
const MAX_LINKS: u32 = 40;

fn canonicalise(raw: &str, path: PathBuf, links: u32) -> Result<PathBuf, ToolError> {
    let components: Vec<Component<'_>> = path.components().collect();
    // The longest prefix that exists; `/` always does.
    for end in (1..=components.len()).rev() {
        let prefix: PathBuf = components[..end].iter().collect();
        let rest = &components[end..];
        match std::fs::canonicalize(&prefix) {
            Ok(mut canonical) => {
                if rest.contains(&Component::ParentDir) {
                    return Err(ToolError::invalid(format!(
                        "path {raw:?}: `..` after {} which does not exist",
                        prefix.join(rest[0]).display()
                    )));
                }
                canonical.extend(rest);
                return Ok(canonical);
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                // A dangling symlink exists as a name: writing to it would create its target,
                // so its target is what must be checked.
                if let Ok(target) = std::fs::read_link(&prefix) {
                    if links >= MAX_LINKS {
                        return Err(ToolError::failed(
                            "symlink",
                            format!("too many symbolic links in {raw}"),
                        ));
                    }
                    let base = prefix.parent().unwrap_or(Path::new("/"));
                    let mut next = base.join(target);
                    next.extend(rest);
                    return canonicalise(raw, next, links + 1);
                }
            }
            Err(e) => return Err(ToolError::io(&format!("failed to resolve {raw}"), &e)),
        }
    }
    Err(ToolError::failed(
        "io",
        format!("failed to resolve {raw}: / does not exist"),
    ))
}

/// Maps an open/walk error on `shown` to a tool error; a symlink met on the way is reported as such.
pub fn open_error(shown: &Path, err: &io::Error) -> ToolError {
    match err.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::EXDEV) => ToolError::failed(
            "symlink",
            format!(
                "refused to follow a symbolic link on the way to {}",
                shown.display()
            ),
        ),
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => {
            ToolError::failed("not_found", format!("{} does not exist", shown.display()))
        }
        _ => ToolError::io(&format!("failed to open {}", shown.display()), err),
    }
}

/// A regular file opened for reading, with its metadata.
pub struct Opened {
    pub file: File,
    pub meta: Metadata,
}

/// Opens `path` (absolute under [`Base::Root`], relative under [`Base::Dir`]) for reading
/// without following any symlink, refusing anything but a regular file *before* opening it for
/// reading (so a FIFO cannot block and a device sees no open), and, when `expect` is given,
/// checking that the kernel's name for the descriptor is exactly the path that was checked.
pub fn open_regular(
    base: Base<'_>,
    path: &Path,
    shown: &Path,
    expect: Option<&Path>,
) -> Result<Opened, ToolError> {
    let handle =
        sys::open_no_symlinks(base, path, libc::O_PATH, 0).map_err(|e| open_error(shown, &e))?;
    let meta = File::from(
        handle
            .try_clone()
            .map_err(|e| ToolError::io("failed to dup", &e))?,
    )
    .metadata()
    .map_err(|e| ToolError::io(&format!("failed to stat {}", shown.display()), &e))?;
    if !meta.file_type().is_file() {
        return Err(not_regular(shown, &meta));
    }
    if let Some(expect) = expect {
        verify_fd_path(handle.as_fd(), expect)?;
    }
    let file = sys::reopen_read(handle.as_fd())
        .map_err(|e| ToolError::io(&format!("failed to open {}", shown.display()), &e))?;
    Ok(Opened { file, meta })
}

/// The lighter opener for a file a directory walk just saw as regular (Grep): the canonical
/// absolute `path` is opened for reading with `RESOLVE_NO_SYMLINKS` (so no symlink swapped into
/// any component is followed and the file opened is the one at that path) and `O_NONBLOCK` (so a
/// FIFO swapped in cannot block), then must still be a regular file. Unlike [`open_regular`] it
/// does not avoid opening a device node swapped in since the walk: creating one in an allowed
/// tree takes CAP_MKNOD on the host, which no skill has, and the per-file `/proc` round trips
/// would make Grep several times slower than `rg`.
pub fn open_walked_file(path: &Path) -> io::Result<File> {
    let file = File::from(sys::open_no_symlinks(
        Base::Root,
        path,
        libc::O_RDONLY | libc::O_NONBLOCK,
        0,
    )?);
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(file)
}

fn not_regular(shown: &Path, meta: &Metadata) -> ToolError {
    let ft = meta.file_type();
    if ft.is_symlink() {
        // O_PATH | O_NOFOLLOW opens a final symlink itself instead of failing.
        return open_error(shown, &io::Error::from_raw_os_error(libc::ELOOP));
    }
    let what = if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    ToolError::failed(
        "not_regular_file",
        format!("{} is {what}; only regular files are read", shown.display()),
    )
}

/// The descriptor must name exactly `expect` (not a path reached some other way).
pub fn verify_fd_path(fd: BorrowedFd<'_>, expect: &Path) -> Result<(), ToolError> {
    let actual = sys::fd_path(fd).map_err(|e| ToolError::io("failed to read /proc/self/fd", &e))?;
    if actual != expect {
        return Err(ToolError::failed(
            "symlink",
            format!(
                "{} resolved to {} while it was opened",
                expect.display(),
                actual.display()
            ),
        ));
    }
    Ok(())
}

/// Opens the directory `path` (absolute under [`Base::Root`], relative under [`Base::Dir`]) as
/// an `O_PATH` descriptor one component at a time with `O_NOFOLLOW`, creating missing components
/// with `mode` when `create` is set.
pub fn open_dir(
    base: Base<'_>,
    path: &Path,
    shown: &Path,
    create: bool,
    mode: u32,
) -> Result<OwnedFd, ToolError> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let mut dir = match base {
        Base::Root => sys::openat(None, OsStr::new("/"), flags, 0),
        Base::Dir(fd) => fd.try_clone_to_owned(),
    }
    .map_err(|e| open_error(shown, &e))?;
    for component in path.components() {
        let name = match component {
            Component::RootDir | Component::CurDir => continue,
            Component::Normal(name) => name,
            _ => {
                return Err(ToolError::invalid(format!(
                    "{} leaves its base directory",
                    shown.display()
                )));
            }
        };
        let next = match sys::openat(Some(dir.as_fd()), name, flags, 0) {
            Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                match sys::mkdirat(dir.as_fd(), name, mode) {
                    Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                        return Err(ToolError::io(
                            &format!("failed to create a directory in {}", shown.display()),
                            &e,
                        ));
                    }
                    _ => sys::openat(Some(dir.as_fd()), name, flags, 0),
                }
            }
            other => other,
        };
        dir = next.map_err(|e| dir_error(dir.as_fd(), name, shown, &e))?;
    }
    Ok(dir)
}

/// `O_DIRECTORY | O_NOFOLLOW` on a symlink fails with ENOTDIR: say it was a symlink.
fn dir_error(parent: BorrowedFd<'_>, name: &OsStr, shown: &Path, err: &io::Error) -> ToolError {
    if err.raw_os_error() == Some(libc::ENOTDIR) {
        if let Ok(Some(st)) = sys::lstatat(parent, name) {
            if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
                return open_error(shown, &io::Error::from_raw_os_error(libc::ELOOP));
            }
        }
    }
    open_error(shown, err)
}

/// Replaces `dir/name` atomically with `data`: a temp file in the same directory, fsync, rename
/// over `name` (a symlink at `name` is replaced, never followed), fsync of the directory. An
/// existing regular file keeps its permission bits; a new one gets `new_mode` minus the umask.
pub fn write_atomic(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    data: &[u8],
    new_mode: u32,
) -> io::Result<()> {
    let existing = sys::lstatat(dir, name)?;
    if let Some(st) = &existing {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
    }
    let tmp = temp_name(name);
    let fd = sys::openat(
        Some(dir),
        &tmp,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        new_mode,
    )?;
    let mut file = File::from(fd);
    let written = (|| {
        if let Some(st) = existing.filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG) {
            sys::fchmod(&file, st.st_mode & 0o7777)?;
        }
        file.write_all(data)?;
        file.sync_all()?;
        sys::renameat(dir, &tmp, name)
    })();
    if let Err(e) = written {
        // Best effort: the temp file is ours and must not be left behind; the original error is
        // what the caller needs to see.
        if let Err(unlink) = sys::unlinkat(dir, &tmp) {
            tracing::warn!(
                "failed to remove temp file {}: {unlink}",
                Path::new(&tmp).display()
            );
        }
        return Err(e);
    }
    // The rename is durable only once the directory is synced.
    sys::reopen_dir(dir)?.sync_all()
}

fn temp_name(name: &OsStr) -> OsString {
    let mut rnd = [0u8; 6];
    crate::util::fill_random(&mut rnd);
    let mut tmp = OsString::from(".");
    // Keep the temp name short enough for NAME_MAX whatever the target's length.
    let bytes = name.as_bytes();
    tmp.push(OsStr::from_bytes(&bytes[..bytes.len().min(200)]));
    tmp.push(format!(".tmp-{}", hex::encode(rnd)));
    tmp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonicalisation_resolves_the_existing_prefix_only() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(base.join("a")).unwrap();
        std::os::unix::fs::symlink(base.join("a"), base.join("l")).unwrap();
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        assert_eq!(
            canonical_file_path(&s(&base.join("l/new/x"))).unwrap(),
            base.join("a/new/x")
        );
        assert_eq!(
            canonical_file_path(&s(&base.join("a/../a/./y"))).unwrap(),
            base.join("a/y")
        );
        assert!(canonical_file_path(&s(&base.join("a/missing/../../etc"))).is_err());
        assert!(canonical_file_path("relative/x").is_err());
        assert!(canonical_file_path("/tmp/\0x").is_err());
        assert_eq!(
            canonical_file_path("/tmp/../etc/nonexistent-x").unwrap(),
            PathBuf::from("/etc/nonexistent-x")
        );
        assert_eq!(canonical_file_path("/").unwrap(), PathBuf::from("/"));
        std::os::unix::fs::symlink("/nonexistent-dir/x", base.join("dangling")).unwrap();
        assert_eq!(
            canonical_file_path(&s(&base.join("dangling"))).unwrap(),
            PathBuf::from("/nonexistent-dir/x")
        );
        std::os::unix::fs::symlink("loop", base.join("loop")).unwrap();
        assert!(canonical_file_path(&s(&base.join("loop/x"))).is_err());
    }

    #[test]
    fn atomic_write_keeps_mode_and_replaces_symlinks() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"old").unwrap();
        std::fs::set_permissions(dir.path().join("f"), std::fs::Permissions::from_mode(0o640))
            .unwrap();
        std::os::unix::fs::symlink(outside.path().join("o"), dir.path().join("l")).unwrap();
        let d = File::open(dir.path()).unwrap();
        write_atomic(d.as_fd(), OsStr::new("f"), b"new", 0o666).unwrap();
        write_atomic(d.as_fd(), OsStr::new("l"), b"in", 0o666).unwrap();
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"new");
        assert_eq!(
            std::fs::metadata(dir.path().join("f"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o640
        );
        assert!(
            std::fs::symlink_metadata(dir.path().join("l"))
                .unwrap()
                .is_file()
        );
        assert!(!outside.path().join("o").exists());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temp file left: {names:?}");
    }
}
