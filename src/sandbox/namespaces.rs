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

/// Whether `uid:gid` could create a user namespace, asked of a throwaway child so that a root
/// supervisor can still fall back to namespaces without one when the answer is no.
pub(crate) fn probe_user_ns(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: the supervisor is single-threaded; the child only makes raw system calls and _exits.
    let pid = cvt(unsafe { libc::fork() })?;
    if pid == 0 {
        let code = match super::identity::become_user(uid, gid)
            .and_then(|()| unshare(libc::CLONE_NEWUSER))
        {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(libc::EPERM).clamp(1, 255),
        };
        // SAFETY: _exit never returns and runs no destructors of the copied parent state.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child we just forked.
    cvt(unsafe { libc::waitpid(pid, &mut status, 0) })?;
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, errno) => Err(io::Error::from_raw_os_error(errno)),
        _ => Err(io::Error::other("user namespace probe died")),
    }
}

/// Enters a new user namespace mapping only `uid` and `gid` to themselves.
pub(crate) fn enter_user_ns(uid: u32, gid: u32) -> io::Result<()> {
    unshare(libc::CLONE_NEWUSER)?;
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
