//! Layer §6.8: a new session with no controlling terminal, and death with the parent. Every link
//! of the chain broker → supervisor → init carries PR_SET_PDEATHSIG(SIGKILL), re-armed after each
//! credential change (which clears it) and re-checked against the parent, so that a parent dying
//! in between cannot leave an orphan. The init's death then takes the whole pid namespace.

use std::io;

use super::report::LayerState;
use super::sys;

/// Arms SIGKILL-on-parent-death and checks the parent is still `expected_parent` (for a process
/// whose parent is invisible, as pid 1 of a new pid namespace, pass 0).
pub(crate) fn die_with_parent(expected_parent: libc::pid_t) -> io::Result<()> {
    sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)?;
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != expected_parent {
        // The parent died before the signal was armed: nobody will ever wait for us.
        // SAFETY: _exit ends this process immediately.
        unsafe { libc::_exit(125) };
    }
    Ok(())
}

/// Checks what the broker's pre-exec step did: this process leads its own session and has no
/// controlling terminal, and it dies with its parent.
pub(crate) fn verify_session() -> LayerState {
    // SAFETY: getsid(0) and getpid only query.
    let leader = unsafe { libc::getsid(0) == libc::getpid() };
    // SAFETY: the path is a NUL-terminated literal; a returned descriptor is closed right away.
    let tty = unsafe {
        libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if tty >= 0 {
        // SAFETY: we just opened it.
        unsafe { libc::close(tty) };
        return LayerState::unavailable("a controlling terminal is still attached");
    }
    if leader {
        LayerState::applied()
    } else {
        LayerState::unavailable("not a session leader")
    }
}

/// The parent-death signal currently armed.
pub(crate) fn pdeathsig() -> Option<libc::c_int> {
    let mut sig: libc::c_int = 0;
    // SAFETY: PR_GET_PDEATHSIG writes one int through the pointer we pass.
    let ok = unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, &mut sig as *mut libc::c_int) } == 0;
    ok.then_some(sig)
}
