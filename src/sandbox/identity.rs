//! Layer §6.4: never root, no supplementary groups (root broker), no capabilities in any set,
//! `no_new_privs`. Also checks the result, so that the report says what really holds.

use std::io;

use super::report::LayerState;
use super::sys::{self, cvt, cvt_long};

const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Becomes `uid:gid` with no supplementary groups (needs CAP_SETUID/CAP_SETGID). The bounding set
/// is emptied first, while CAP_SETPCAP is still there: leaving root clears it.
pub(crate) fn become_user(uid: u32, gid: u32) -> io::Result<()> {
    drop_bounding()?;
    // SAFETY: an empty group list; setgroups only reads `size` entries.
    cvt(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: plain id arguments.
    cvt(unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: plain id arguments.
    cvt(unsafe { libc::setresuid(uid, uid, uid) })?;
    Ok(())
}

/// Empties the bounding set. Without CAP_SETPCAP (an unprivileged process outside any user
/// namespace) it stays as it is: `verify` reports that, and no_new_privs keeps it unusable.
fn drop_bounding() -> io::Result<()> {
    for cap in 0..64 {
        match sys::prctl(libc::PR_CAPBSET_READ, cap) {
            Ok(1) => match sys::prctl(libc::PR_CAPBSET_DROP, cap) {
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Ok(()),
                other => {
                    other?;
                }
            },
            Ok(_) => {}
            // EINVAL: past the last capability this kernel knows.
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

/// Empties the bounding and ambient sets, then the effective, permitted and inheritable sets.
pub(crate) fn drop_capabilities() -> io::Result<()> {
    drop_bounding()?;
    // Ambient capabilities may be unsupported (EINVAL) on old kernels, where there are none to clear.
    match sys::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
    ) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
        Err(e) => return Err(e),
    }
    let header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: header and two data words as _LINUX_CAPABILITY_VERSION_3 requires; the kernel only reads them.
    cvt_long(unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) }).map(drop)
}

/// Effective, permitted and inheritable capability sets of this thread.
fn capabilities() -> io::Result<[u64; 3]> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: the kernel writes two data words, which `data` holds.
    cvt_long(unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) })?;
    let join = |f: fn(&CapData) -> u32| u64::from(f(&data[0])) | (u64::from(f(&data[1])) << 32);
    Ok([
        join(|d| d.effective),
        join(|d| d.permitted),
        join(|d| d.inheritable),
    ])
}

fn bounding_is_empty() -> bool {
    (0..64).all(|cap| !matches!(sys::prctl(libc::PR_CAPBSET_READ, cap), Ok(1)))
}

fn ambient_is_empty() -> bool {
    (0..64).all(|cap: libc::c_ulong| {
        // SAFETY: PR_CAP_AMBIENT_IS_SET only queries; it takes the capability as an integer.
        let set = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_IS_SET as libc::c_ulong,
                cap,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        set != 1
    })
}

pub(crate) fn set_no_new_privs() -> io::Result<()> {
    sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map(drop)
}

/// Checks this process's identity against §6.4. `uid`/`gid` are the ids it should have as seen
/// from inside; `groups_required` is false for an unprivileged broker, which cannot drop the
/// supplementary groups it was started with (they stay unmapped, shown as the overflow gid).
pub(crate) fn verify(uid: u32, gid: u32, groups_required: bool) -> LayerState {
    let mut problems = Vec::new();
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: getresuid writes three ids we own.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    if [r, e, s] != [uid; 3] || uid == 0 {
        problems.push(format!("uid is {r}/{e}/{s}, expected {uid}"));
    }
    let (mut rg, mut eg, mut sg) = (0, 0, 0);
    // SAFETY: getresgid writes three ids we own.
    unsafe { libc::getresgid(&mut rg, &mut eg, &mut sg) };
    if [rg, eg, sg] != [gid; 3] {
        problems.push(format!("gid is {rg}/{eg}/{sg}, expected {gid}"));
    }
    // SAFETY: with size 0, getgroups only returns the count.
    let groups = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut degraded = Vec::new();
    if groups > 0 {
        let msg = format!("{groups} supplementary group(s) kept from the broker");
        if groups_required {
            problems.push(msg)
        } else {
            degraded.push(msg)
        }
    }
    match capabilities() {
        Ok([0, 0, 0]) => {}
        Ok(sets) => problems.push(format!("capabilities left: {sets:x?}")),
        Err(e) => problems.push(format!("capget: {e}")),
    }
    if !bounding_is_empty() {
        degraded.push("bounding capability set not empty".into());
    }
    if !ambient_is_empty() {
        problems.push("ambient capabilities left".into());
    }
    if !matches!(sys::prctl(libc::PR_GET_NO_NEW_PRIVS, 0), Ok(1)) {
        problems.push("no_new_privs not set".into());
    }
    if !problems.is_empty() {
        problems.extend(degraded);
        LayerState::unavailable(problems.join(", "))
    } else if !degraded.is_empty() {
        LayerState::degraded(degraded.join(", "))
    } else {
        LayerState::applied()
    }
}
