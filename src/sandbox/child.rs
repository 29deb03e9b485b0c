//! The supervisor: `cyberos __sandbox-child`, re-executed by the broker with its policy on fd 3.
//! It enters the user namespace (always) and the other namespaces, sets the limits, forks the init
//! (pid 1 of the new pid namespace), hardens itself, relays the init's report to the broker and
//! the broker's start byte to the init, forwards SIGTERM, and finally exits the way the program
//! did (re-raising its fatal signal), so the broker sees the program's own status.
//!
//! It must never run anything but the init, nor outlive the broker.

use std::io::{self, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;

use super::init::{self, Setup};
use super::protocol::{self, FromInit, Ready, Request, START};
use super::report::{Layer, LayerReport, LayerState};
use super::seccomp::{self, Profile};
use super::{
    DEFAULT_SANDBOX_ID, Spec, env, fds, identity, landlock, lifetime, limits, namespaces, sys,
};

/// The descriptor the broker passes the control socket on.
pub(crate) const CONTROL_FD: i32 = 3;

/// Entry point of the hidden subcommand; returns the exit code (or re-raises the program's signal).
pub fn child_main() -> u8 {
    // SAFETY: getppid has no preconditions.
    let broker = unsafe { libc::getppid() };
    if !is_socket(CONTROL_FD) {
        let _unreported = writeln!(
            io::stderr(),
            "cyberos: {} is internal to `cyberos skill invoke` and cannot be run by hand",
            crate::cli::SANDBOX_CHILD_COMMAND
        );
        return crate::exit::USAGE;
    }
    if fds::close_from(CONTROL_FD + 1).is_err() {
        return crate::exit::BROKER_FAILED;
    }
    // SAFETY: fd 3 is an open socket (checked above) that nothing else in this process owns.
    let mut ctl = UnixStream::from(unsafe { OwnedFd::from_raw_fd(CONTROL_FD) });
    // SAFETY: F_SETFD on a descriptor we own: the init must not inherit it across anything.
    unsafe { libc::fcntl(CONTROL_FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    let request: Request = match protocol::read_frame(&mut ctl) {
        Ok(Some(request)) => request,
        _ => return crate::exit::BROKER_FAILED,
    };
    match build(&request.spec, &request.disable, broker, &mut ctl) {
        Ok(running) => running.supervise(&mut ctl),
        Err(error) => {
            let _unreported = protocol::write_frame(&mut ctl, &Ready::Failed { error });
            crate::exit::BROKER_FAILED
        }
    }
}

fn is_socket(fd: i32) -> bool {
    // SAFETY: fstat writes into the zeroed struct we own; a closed fd just fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    unsafe { libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK }
}

/// A built sandbox waiting for the start byte.
struct Running {
    init: libc::pid_t,
    sock: UnixStream,
    sigfd: OwnedFd,
}

fn state(result: &io::Result<()>) -> LayerState {
    match result {
        Ok(()) => LayerState::applied(),
        Err(e) => LayerState::unavailable(e.to_string()),
    }
}

/// The reason given for a layer the operator switched off.
pub(crate) const DISABLED: &str = "disabled by CYBEROS_SANDBOX_DISABLE";

fn build(
    spec: &Spec,
    disable: &[Layer],
    broker: libc::pid_t,
    ctl: &mut UnixStream,
) -> Result<Running, String> {
    env::validate(spec)?;
    let mut report = LayerReport::new();
    report.set(Layer::Env, LayerState::applied());
    // fds 4+ are closed already; the init closes 3+ before execve and refuses to run otherwise.
    report.set(Layer::Fds, LayerState::applied());
    report.set(Layer::Session, lifetime::verify_session());

    // SAFETY: geteuid/getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let root = euid == 0;
    let (uid, gid) = if root {
        spec.run_as
            .unwrap_or((DEFAULT_SANDBOX_ID, DEFAULT_SANDBOX_ID))
    } else {
        (euid, egid)
    };
    if uid == 0 {
        return Err("refusing to run the program as uid 0".into());
    }
    let fail = |what: &str, e: io::Error| format!("failed to {what}: {e}");

    // The user namespace first: a root supervisor becomes the sandbox uid and enters it like any
    // unprivileged process, unless the kernel refuses that uid a user namespace.
    let user_ns = if disable.contains(&Layer::UserNs) {
        Err(io::Error::other(DISABLED))
    } else if root {
        let entered = namespaces::enter_user_ns_from_root(uid, gid);
        // Credential changes clear the parent-death signal, whether or not the namespace came.
        lifetime::die_with_parent(broker)
            .map_err(|e| format!("failed to re-arm the parent-death signal: {e}"))?;
        entered
    } else {
        namespaces::enter_user_ns(uid, gid)
    };
    // SAFETY: geteuid has no preconditions.
    let still_root = unsafe { libc::geteuid() } == 0;
    report.set(Layer::UserNs, state(&user_ns));
    for layer in disable {
        report.set(*layer, LayerState::unavailable(DISABLED));
    }
    for (layer, result) in namespaces::unshare_others(disable) {
        report.set(layer, state(&result));
    }
    let has = |layer| report.get(layer).is_applied();
    let (pid_ns, mount_ns, uts_ns) = (has(Layer::PidNs), has(Layer::MountNs), has(Layer::UtsNs));
    let pid_ns_id = if pid_ns {
        namespaces::pid_ns_for_children().ok()
    } else {
        None
    };
    report.set(Layer::Limits, limits::apply(&spec.limits, user_ns.is_ok()));
    report.set(
        Layer::Lifetime,
        match (lifetime::pdeathsig(), pid_ns) {
            (Some(libc::SIGKILL), true) => LayerState::applied(),
            (Some(libc::SIGKILL), false) => LayerState::degraded(
                "no pid namespace: the init kills the orphans it inherits as subreaper",
            ),
            _ => LayerState::unavailable("parent-death signal not armed"),
        },
    );

    let handled = init::handled_signals();
    // SAFETY: blocks the handled signals for this single-threaded process; the set is initialised.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &handled, std::ptr::null_mut()) };
    let (sock, init_sock) = UnixStream::pair().map_err(|e| fail("create the init socket", e))?;
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    // SAFETY: this process is single-threaded, so the child may continue running Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(fail("fork the init", io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(sock);
        init::run(Setup {
            spec,
            sock: init_sock.into(),
            supervisor_pid: me,
            pid_ns,
            mount_ns,
            uts_ns,
            uid,
            gid,
            drop_identity: still_root,
            groups_required: root,
            disable,
        });
    }
    drop(init_sock);
    let running = Running {
        init: pid,
        sock,
        sigfd: init::signal_fd().map_err(|e| fail("create the signal descriptor", e))?,
    };
    match harden_self(still_root, uid, gid, broker, disable) {
        Ok(notes) => {
            for (layer, note) in notes {
                report.worsen(layer, LayerState::degraded(format!("supervisor: {note}")));
            }
        }
        Err(e) => {
            running.kill_init();
            return Err(e);
        }
    }
    let mut sock = &running.sock;
    match protocol::read_frame::<_, FromInit>(&mut sock) {
        Ok(Some(FromInit::Built { layers })) => {
            for (layer, state) in layers {
                report.worsen(layer, state);
            }
        }
        Ok(Some(FromInit::Failed { error })) => {
            running.kill_init();
            return Err(error);
        }
        _ => {
            running.kill_init();
            return Err("the sandbox init died while setting up".into());
        }
    }
    report.complete_with("not set up");
    protocol::write_frame(
        &mut *ctl,
        &Ready::Built {
            report,
            init_pid: pid,
            pid_ns: pid_ns_id,
        },
    )
    .map_err(|e| fail("report to the broker", e))?;
    Ok(running)
}

/// The supervisor's own layers, applied once the init is forked (the init needs the privileges
/// the supervisor gives up here). Returns what could not be applied.
fn harden_self(
    still_root: bool,
    uid: u32,
    gid: u32,
    broker: libc::pid_t,
    disable: &[Layer],
) -> Result<Vec<(Layer, String)>, String> {
    let fail = |what: &str, e: io::Error| format!("failed to {what}: {e}");
    if still_root {
        identity::become_user(uid, gid)
            .map_err(|e| fail("drop the supervisor to the sandbox uid", e))?;
        lifetime::die_with_parent(broker).map_err(|e| fail("re-arm the parent-death signal", e))?;
    }
    let mut notes = Vec::new();
    if let Err(e) = identity::drop_capabilities() {
        notes.push((Layer::Identity, format!("failed to drop capabilities: {e}")));
    }
    sys::prctl(libc::PR_SET_DUMPABLE, 0)
        .map_err(|e| fail("make the supervisor non-dumpable", e))?;
    identity::set_no_new_privs().map_err(|e| fail("set no_new_privs", e))?;
    if !disable.contains(&Layer::Landlock) {
        if let Err(e) = landlock::restrict_supervisor() {
            notes.push((Layer::Landlock, e));
        }
    }
    if !disable.contains(&Layer::Seccomp) {
        let seccomp = seccomp::install(Profile::Supervisor);
        if !seccomp.is_applied() {
            notes.push((Layer::Seccomp, seccomp.reason.unwrap_or_default()));
        }
    }
    Ok(notes)
}

impl Running {
    fn kill_init(&self) {
        // SAFETY: kill and waitpid on our own child.
        unsafe {
            libc::kill(self.init, libc::SIGKILL);
            libc::waitpid(self.init, std::ptr::null_mut(), 0);
        }
    }

    /// Relays start and SIGTERM, waits for the init, and ends like the program.
    fn supervise(self, ctl: &mut UnixStream) -> u8 {
        let mut program: Option<i32> = None;
        let mut ctl_open = true;
        let mut sock_open = true;
        let mut started = false;
        let init_status = loop {
            let mut fds = [
                libc::pollfd {
                    fd: if ctl_open { ctl.as_raw_fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if sock_open { self.sock.as_raw_fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.sigfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: three pollfds we own; no timeout.
            if unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) } < 0 {
                continue;
            }
            if fds[0].revents != 0 {
                match protocol::read_byte(&mut *ctl) {
                    Ok(Some(START)) if !started => {
                        started = true;
                        if (&self.sock).write_all(&[START]).is_err() {
                            // The init is gone; its SIGCHLD ends the loop.
                        }
                    }
                    Ok(Some(_)) => {}
                    _ => {
                        ctl_open = false;
                        if !started {
                            // The broker gave up before starting: nothing may run.
                            // SAFETY: kill on our own child.
                            unsafe { libc::kill(self.init, libc::SIGKILL) };
                        }
                    }
                }
            }
            if fds[1].revents != 0 {
                let mut sock = &self.sock;
                match protocol::read_frame::<_, FromInit>(&mut sock) {
                    Ok(Some(FromInit::Exited { status })) => program = Some(status),
                    Ok(Some(_)) => {}
                    _ => sock_open = false,
                }
            }
            if fds[2].revents != 0 {
                match init::read_signal(&self.sigfd) {
                    Some(libc::SIGTERM | libc::SIGINT | libc::SIGHUP) => {
                        // SAFETY: kill on our own child.
                        unsafe { libc::kill(self.init, libc::SIGTERM) };
                    }
                    Some(libc::SIGCHLD) => {
                        let mut status = 0;
                        // SAFETY: non-blocking wait for our own child.
                        if unsafe { libc::waitpid(self.init, &mut status, libc::WNOHANG) }
                            == self.init
                        {
                            break status;
                        }
                    }
                    _ => {}
                }
            }
        };
        if program.is_none() && sock_open {
            // The init wrote the program's status just before exiting; it may still be unread.
            let mut sock = &self.sock;
            if let Ok(Some(FromInit::Exited { status })) =
                protocol::read_frame::<_, FromInit>(&mut sock)
            {
                program = Some(status);
            }
        }
        end_like(program.unwrap_or(init_status))
    }
}

/// Exits with `status`'s code, or dies of its signal.
fn end_like(status: i32) -> u8 {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: default disposition, unblocked, then the signal to ourselves: this process dies
        // of it, as the program did. Only if it was not fatal does execution continue.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
        }
        return (128 + sig).clamp(0, 255) as u8;
    }
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else {
        crate::exit::BROKER_FAILED
    }
}
