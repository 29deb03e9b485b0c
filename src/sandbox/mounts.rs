//! Layer §6.5 (the mount view): a fresh tmpfs becomes `/` (pivot_root), holding read-only binds of
//! the system directories, a few `/etc` entries, the bundle at its own path and the client; a
//! fresh `/proc` of the new pid namespace; a minimal `/dev`; a private `/tmp` with only the broker
//! socket and the scratch directory (read-write). The host's `/` is then detached, and everything
//! but scratch is read-only. Runs in the init, in the new mount namespace, before privileges go.
//!
//! Nothing of the host may appear inside except what is listed here.

use std::ffi::CString;
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _};
use std::path::{Path, PathBuf};

use super::sys::{cpath, cvt};
use super::{CLIENT_PATH_DIR, SCRATCH_INSIDE, Spec};

/// System directories bound read-only (or recreated as the same symlink, on merged-/usr systems).
const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];
/// The only parts of `/etc` programs need to start.
pub(crate) const ETC_ENTRIES: [&str; 9] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/ssl/certs",
];
/// Device nodes bound from the host's `/dev`.
pub(crate) const DEVICES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];
/// Where the host's root is reachable between pivot_root and its detachment.
const OLD_ROOT: &str = "/.oldroot";

/// A mount-view step that failed, with what it was doing.
fn step(what: &str, path: &Path, e: io::Error) -> String {
    format!("failed to {what} {}: {e}", path.display())
}

fn mount(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = src.map(cpath).transpose()?;
    let dst = cpath(dst)?;
    let fstype = fstype.map(|s| CString::new(s).expect("literal without NUL"));
    let data = data.map(|s| CString::new(s).expect("literal without NUL"));
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is either null or a NUL-terminated string that outlives the call.
    cvt(unsafe {
        libc::mount(
            ptr(&src),
            dst.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    })
    .map(drop)
}

/// Per-mount flags the kernel locks on mounts inherited from a more privileged namespace: a
/// remount must repeat them or it fails with EPERM.
fn locked_flags(path: &Path) -> io::Result<libc::c_ulong> {
    let c = cpath(path)?;
    // SAFETY: statvfs writes into the zeroed struct we own.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is writable.
    cvt(unsafe { libc::statvfs(c.as_ptr(), &mut st) })?;
    let map = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(map
        .iter()
        .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | ms))
}

/// Binds `src` onto `dst` and remounts it with `flags` added to what is locked.
fn bind(src: &Path, dst: &Path, flags: libc::c_ulong) -> Result<(), String> {
    mount(Some(src), dst, None, libc::MS_BIND | libc::MS_REC, None)
        .map_err(|e| step("bind", src, e))?;
    let locked = locked_flags(dst).map_err(|e| step("inspect", dst, e))?;
    mount(
        None,
        dst,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | flags | locked,
        None,
    )
    .map_err(|e| step("restrict the bind of", src, e))
}

const READ_ONLY: libc::c_ulong = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;

fn mkdir_p(path: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(|e| step("create", path, e))
}

fn touch(path: &Path) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        mkdir_p(parent)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map(drop)
        .map_err(|e| step("create", path, e))
}

fn old(path: &Path) -> PathBuf {
    Path::new(OLD_ROOT).join(path.strip_prefix("/").unwrap_or(path))
}

/// Mirrors host `path` at the same place inside, read-only: a symlink stays a symlink, a missing
/// path stays missing.
fn mirror(path: &Path) -> Result<(), String> {
    let src = old(path);
    let meta = match std::fs::symlink_metadata(&src) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(step("inspect", path, e)),
    };
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&src).map_err(|e| step("read link", path, e))?;
        if let Some(parent) = path.parent() {
            mkdir_p(parent)?;
        }
        return std::os::unix::fs::symlink(&target, path).map_err(|e| step("create link", path, e));
    }
    if meta.is_dir() {
        mkdir_p(path)?
    } else {
        touch(path)?
    }
    bind(&src, path, READ_ONLY)
}

/// Builds the view and returns what could not be provided (degradations), or the fatal error.
pub(crate) fn build(spec: &Spec) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .map_err(|e| step("make private", Path::new("/"), e))?;
    // A fresh tmpfs mounted on /tmp becomes the new root; pivot_root moves it away from /tmp, so
    // the host's /tmp (bundles, sockets) is reachable again under the old root.
    let base = Path::new("/tmp");
    mount(
        Some(Path::new("tmpfs")),
        base,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755,size=4m"),
    )
    .map_err(|e| step("mount the new root on", base, e))?;
    let put_old = base.join(OLD_ROOT.trim_start_matches('/'));
    mkdir_p(&put_old)?;
    pivot_root(base, &put_old).map_err(|e| step("pivot_root to", base, e))?;
    std::env::set_current_dir("/").map_err(|e| step("enter", Path::new("/"), e))?;

    for dir in SYSTEM_DIRS {
        mirror(Path::new(dir))?;
    }
    for entry in ETC_ENTRIES {
        mirror(Path::new(entry))?;
    }
    mkdir_p(Path::new("/etc"))?;

    mkdir_p(Path::new("/proc"))?;
    if let Err(e) = mount(
        Some(Path::new("proc")),
        Path::new("/proc"),
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    ) {
        notes.push(format!("no /proc inside: {e}"));
    }

    build_dev(&mut notes)?;
    build_tmp(spec)?;

    for path in &spec.ro_binds {
        let src = old(path);
        let is_dir = std::fs::metadata(&src)
            .map_err(|e| step("inspect", path, e))?
            .is_dir();
        if is_dir {
            mkdir_p(path)?
        } else {
            touch(path)?
        }
        bind(&src, path, READ_ONLY)?;
    }
    if let Some(client) = &spec.client_binary {
        let inside = Path::new(CLIENT_PATH_DIR).join("cyberos");
        touch(&inside)?;
        bind(&old(client), &inside, READ_ONLY).map_err(|e| {
            format!("{e} (the cyberos client must be reachable by the sandbox's uid)")
        })?;
    }

    let old_root = Path::new(OLD_ROOT);
    let c = cpath(old_root).map_err(|e| step("detach", old_root, e))?;
    // SAFETY: `c` is NUL-terminated; MNT_DETACH lazily unmounts the whole old tree.
    cvt(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) })
        .map_err(|e| step("detach", old_root, e))?;
    std::fs::remove_dir(old_root).map_err(|e| step("remove", old_root, e))?;
    for ro in ["/tmp", "/"] {
        let p = Path::new(ro);
        let locked = locked_flags(p).map_err(|e| step("inspect", p, e))?;
        mount(
            None,
            p,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | READ_ONLY | locked,
            None,
        )
        .map_err(|e| step("make read-only", p, e))?;
    }
    Ok(notes)
}

fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let new_root = cpath(new_root)?;
    let put_old = cpath(put_old)?;
    // SAFETY: both are NUL-terminated paths; pivot_root only changes this mount namespace.
    super::sys::cvt_long(unsafe {
        libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr())
    })
    .map(drop)
}

/// `/dev` with only the harmless devices and the `/proc/self/fd` links shells expect; no tty, no
/// pts, no shm.
fn build_dev(notes: &mut Vec<String>) -> Result<(), String> {
    let dev = Path::new("/dev");
    mkdir_p(dev)?;
    mount(
        Some(Path::new("tmpfs")),
        dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )
    .map_err(|e| step("mount", dev, e))?;
    for name in DEVICES {
        let inside = dev.join(name);
        let src = old(&inside);
        match std::fs::metadata(&src) {
            Ok(m) if m.file_type().is_char_device() => {}
            _ => {
                notes.push(format!("no {} on the host", inside.display()));
                continue;
            }
        }
        touch(&inside)?;
        // Device nodes stay writable (writes go to the device, not the filesystem).
        bind(&src, &inside, libc::MS_NOSUID | libc::MS_NOEXEC)?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let link = dev.join(name);
        std::os::unix::fs::symlink(target, &link).map_err(|e| step("create link", &link, e))?;
    }
    let locked = locked_flags(dev).map_err(|e| step("inspect", dev, e))?;
    mount(
        None,
        dev,
        None,
        libc::MS_REMOUNT
            | libc::MS_BIND
            | libc::MS_RDONLY
            | libc::MS_NOSUID
            | libc::MS_NOEXEC
            | locked,
        None,
    )
    .map_err(|e| step("make read-only", dev, e))
}

/// The private `/tmp`: the scratch directory (read-write) and this invocation's socket only.
fn build_tmp(spec: &Spec) -> Result<(), String> {
    let tmp = Path::new("/tmp");
    mkdir_p(tmp)?;
    mount(
        Some(Path::new("tmpfs")),
        tmp,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755,size=4m"),
    )
    .map_err(|e| step("mount", tmp, e))?;
    if let Some(scratch) = &spec.scratch {
        let inside = Path::new(SCRATCH_INSIDE);
        mkdir_p(inside)?;
        bind(&old(scratch), inside, libc::MS_NOSUID | libc::MS_NODEV)?;
    }
    if let Some(socket) = &spec.socket {
        let src = old(socket);
        let meta = std::fs::metadata(&src).map_err(|e| step("inspect", socket, e))?;
        if !meta.file_type().is_socket() {
            return Err(format!("{} is not a socket", socket.display()));
        }
        touch(socket)?;
        bind(&src, socket, READ_ONLY)?;
    }
    Ok(())
}
