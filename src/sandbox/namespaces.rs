//! Layer §6.5 (the namespaces themselves): user, then pid, net, mount, ipc and uts. The user
//! namespace maps exactly one id, the program's own (`U U 1`): nobody is root inside, and the
//! processes of this invocation get their own RLIMIT_NPROC count.

use std::io;
use std::os::unix::fs::MetadataExt as _;

use super::report::Layer;
use super::sys::{self, cvt};

/// Namespaces unshared after the user namespace, with the layer each one is reported as.
pub(crate) const OTHERS: [(libc::c_int, Layer); 5] = [
    (libc::CLONE_NEWPID, Layer::PidNs),
    (libc::CLONE_NEWNET, Layer::NetNs),
    (libc::CLONE_NEWNS, Layer::MountNs),
    (libc::CLONE_NEWIPC, Layer::IpcNs),
    (libc::CLONE_NEWUTS, Layer::UtsNs),
];

fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare only changes this (single-threaded) process's namespaces.
    cvt(unsafe { libc::unshare(flags) }).map(drop)
}

/// For a root supervisor: becomes `uid:gid` (no supplementary groups) and enters a user
/// namespace mapping only them. The saved set-user-ID stays 0 until the namespace exists, so
/// that when the kernel refuses that uid a namespace, the process returns to root and can fall
/// back to namespaces without one (the init then drops to `uid:gid` itself). Asking first in a
/// throwaway child would cost a fork and a wait on every invocation.
///
/// The parent-death signal is cleared by these credential changes: the caller re-arms it.
pub(crate) fn enter_user_ns_from_root(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: an empty group list; setgroups only reads `size` entries.
    cvt(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: plain id arguments.
    cvt(unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: plain id arguments; the saved uid stays root for the fallback below.
    cvt(unsafe { libc::setresuid(uid, uid, 0) })?;
    if let Err(e) = unshare(libc::CLONE_NEWUSER) {
        // SAFETY: plain id arguments. Returning to the saved uid 0 is always allowed, and it
        // restores the permitted capabilities needed to restore the gid.
        cvt(unsafe { libc::setresuid(0, 0, 0) })?;
        // SAFETY: plain id arguments.
        cvt(unsafe { libc::setresgid(0, 0, 0) })?;
        return Err(e);
    }
    write_maps(uid, gid)?;
    // Host root cannot even be named inside the namespace; drop it from the saved uid anyway.
    // SAFETY: plain id arguments, mapped by the line just written.
    cvt(unsafe { libc::setresuid(uid, uid, uid) }).map(drop)
}

/// Enters a new user namespace mapping only `uid` and `gid` to themselves.
pub(crate) fn enter_user_ns(uid: u32, gid: u32) -> io::Result<()> {
    unshare(libc::CLONE_NEWUSER)?;
    write_maps(uid, gid)
}

/// Writes this process's new user namespace's maps: `uid` and `gid` to themselves, nothing else.
fn write_maps(uid: u32, gid: u32) -> io::Result<()> {
    // A setuid() from root made this process non-dumpable, which makes its /proc files root-owned
    // and the maps unwritable; the supervisor turns this off again once set up.
    sys::prctl(libc::PR_SET_DUMPABLE, 1)?;
    match std::fs::write("/proc/self/setgroups", "deny") {
        Ok(()) => {}
        // Kernels before 3.19 have no setgroups file and need none.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(with_context(e, "/proc/self/setgroups")),
    }
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))
        .map_err(|e| with_context(e, "uid_map"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
        .map_err(|e| with_context(e, "gid_map"))?;
    Ok(())
}

fn with_context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("failed to write {what}: {e}"))
}

/// Unshares the other namespaces but those in `skip`, all at once when possible, else one by one
/// so that the report says which are missing.
pub(crate) fn unshare_others(skip: &[Layer]) -> Vec<(Layer, io::Result<()>)> {
    let wanted: Vec<(libc::c_int, Layer)> = OTHERS
        .iter()
        .copied()
        .filter(|(_, layer)| !skip.contains(layer))
        .collect();
    let all = wanted.iter().fold(0, |acc, (flag, _)| acc | flag);
    if unshare(all).is_ok() {
        return wanted.iter().map(|&(_, layer)| (layer, Ok(()))).collect();
    }
    wanted
        .iter()
        .map(|&(flag, layer)| (layer, unshare(flag)))
        .collect()
}

/// `(st_dev, st_ino)` of the pid namespace this process's children will be born in.
pub(crate) fn pid_ns_for_children() -> io::Result<(u64, u64)> {
    let meta = std::fs::metadata("/proc/self/ns/pid_for_children")?;
    Ok((meta.dev(), meta.ino()))
}
