//! The init: pid 1 of the sandbox's pid namespace (or, without one, a child subreaper). It finishes
//! the sandbox from the inside (mount view, identity, Landlock, seccomp), reports, waits for the
//! start byte, then forks the program (which is never pid 1) and `execve`s it with exactly the
//! spec's environment and only fds 0–2. It forwards SIGTERM to every process of the sandbox, reaps
//! everything, and ends as soon as the program ends: its exit makes the kernel kill whatever is
//! left in the namespace, daemons that `setsid` and double-forked included.
//!
//! It must never run the program before the start byte, nor outlive its supervisor.

use std::io::Write as _;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;

use super::Spec;
use super::env::{self, ExecPlan};
use super::identity;
use super::landlock;
use super::lifetime;
use super::mounts;
use super::protocol::{self, FromInit, START};
use super::report::{Layer, LayerState, Status};
use super::seccomp::{self, Profile};
use super::sys;

/// What the supervisor learned before forking the init.
pub(crate) struct Setup<'a> {
    pub spec: &'a Spec,
    /// The init's end of the supervisor socket; also its lifeline (EOF = supervisor gone).
    pub sock: OwnedFd,
    pub supervisor_pid: libc::pid_t,
    pub pid_ns: bool,
    pub mount_ns: bool,
    pub uts_ns: bool,
    /// The uid/gid the program runs as, seen from inside.
    pub uid: u32,
    pub gid: u32,
    /// Root broker without a user namespace: the init drops to `uid:gid` itself after mounting.
    pub drop_identity: bool,
    /// Whether supplementary groups must be gone (they cannot be for an unprivileged broker).
    pub groups_required: bool,
    /// Layers the operator switched off.
    pub disable: &'a [Layer],
}

/// Signals the init and the supervisor handle through a signalfd; blocked before the fork so that
/// none is lost, unblocked again in the program.
pub(crate) fn handled_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set we own; sigaddset only sets bits in it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// A signalfd for [`handled_signals`] (which must already be blocked).
pub(crate) fn signal_fd() -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd as _;
    let set = handled_signals();
    // SAFETY: -1 asks for a new descriptor; the set is initialised.
    let fd = sys::cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) })?;
    // SAFETY: the descriptor was just created for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one signal number from a signalfd.
pub(crate) fn read_signal(fd: &OwnedFd) -> Option<i32> {
    // SAFETY: a zeroed siginfo is a valid buffer for the kernel to fill.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reading at most `size` bytes into `info`, which is exactly that big.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut info as *mut libc::signalfd_siginfo).cast(),
            size,
        )
    };
    (n == size as isize).then_some(info.ssi_signo as i32)
}

/// Runs the init; never returns.
pub(crate) fn run(setup: Setup<'_>) -> ! {
    let mut sock = UnixStream::from(setup.sock.try_clone().unwrap_or_else(|_| exit(125)));
    match prepare(&setup) {
        Ok((layers, plan, sigfd)) => {
            if protocol::write_frame(&mut sock, &FromInit::Built { layers }).is_err() {
                exit(125);
            }
            supervise_program(&setup, &mut sock, &plan, &sigfd)
        }
        Err(error) => {
            // If even this fails the supervisor sees EOF and reports that instead.
            let _unreported = protocol::write_frame(&mut sock, &FromInit::Failed { error });
            exit(125)
        }
    }
}

fn exit(code: i32) -> ! {
    // SAFETY: _exit ends the process without running the parent's copied destructors.
    unsafe { libc::_exit(code) }
}

fn supervisor_gone(sock: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd we own, zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

type Prepared = (Vec<(Layer, LayerState)>, ExecPlan, OwnedFd);

fn prepare(setup: &Setup<'_>) -> Result<Prepared, String> {
    let spec = setup.spec;
    let fail = |what: &str, e: std::io::Error| format!("failed to {what}: {e}");
    // Pid 1 of a new namespace sees its parent as pid 0; without one the supervisor is visible.
    let parent = if setup.pid_ns {
        0
    } else {
        setup.supervisor_pid
    };
    lifetime::die_with_parent(parent).map_err(|e| fail("arm the parent-death signal", e))?;
    if supervisor_gone(&setup.sock) {
        exit(125);
    }
    let mut layers = Vec::new();
    let host_view = !setup.mount_ns;
    if setup.mount_ns {
        match mounts::build(spec)? {
            notes if notes.is_empty() => layers.push((Layer::MountNs, LayerState::applied())),
            notes => layers.push((Layer::MountNs, LayerState::degraded(notes.join(", ")))),
        }
    }
    if setup.uts_ns {
        // SAFETY: a literal name and its length; only this uts namespace changes.
        sys::cvt(unsafe { libc::sethostname(c"cyberos".as_ptr(), 7) })
            .map_err(|e| fail("set the hostname", e))?;
    }
    let cwd = env::cwd(spec, host_view);
    std::env::set_current_dir(&cwd)
        .map_err(|e| format!("failed to enter {}: {e}", cwd.display()))?;
    if setup.drop_identity {
        identity::become_user(setup.uid, setup.gid)
            .map_err(|e| fail("drop to the sandbox uid", e))?;
        lifetime::die_with_parent(parent).map_err(|e| fail("re-arm the parent-death signal", e))?;
    }
    let caps = identity::drop_capabilities();
    // The init is not dumpable: nothing inside may read its memory or environment. The program
    // becomes dumpable again at execve, so the broker can still check its peers.
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| fail("make the init non-dumpable", e))?;
    identity::set_no_new_privs().map_err(|e| fail("set no_new_privs", e))?;
    if !setup.disable.contains(&Layer::Landlock) {
        layers.push((
            Layer::Landlock,
            landlock::restrict_sandbox(spec, host_view, true),
        ));
    }
    let plan = env::plan(spec, host_view)?;
    let sigfd = signal_fd().map_err(|e| fail("create the signal descriptor", e))?;
    if !setup.pid_ns {
        // Without a pid namespace, orphans come to the init, which kills them at the end.
        sys::prctl(libc::PR_SET_CHILD_SUBREAPER, 1).map_err(|e| fail("become a subreaper", e))?;
    }
    if !setup.disable.contains(&Layer::Seccomp) {
        layers.push((Layer::Seccomp, seccomp::install(Profile::Sandbox)));
    }
    let mut identity = identity::verify(setup.uid, setup.gid, setup.groups_required);
    if let Err(e) = caps {
        identity = LayerState::unavailable(format!("failed to drop capabilities: {e}"));
    }
    layers.push((Layer::Identity, identity));
    Ok((layers, plan, sigfd))
}

fn wait_for_start(sock: &mut UnixStream, sigfd: &OwnedFd) {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sigfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds we own; no timeout.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            continue;
        }
        if fds[1].revents != 0 {
            if let Some(libc::SIGTERM | libc::SIGINT | libc::SIGHUP) = read_signal(sigfd) {
                exit(128 + libc::SIGTERM);
            }
        }
        if fds[0].revents != 0 {
            match protocol::read_byte(&mut *sock) {
                Ok(Some(START)) => return,
                _ => exit(125),
            }
        }
    }
}

fn supervise_program(
    setup: &Setup<'_>,
    sock: &mut UnixStream,
    plan: &ExecPlan,
    sigfd: &OwnedFd,
) -> ! {
    wait_for_start(sock, sigfd);
    // SAFETY: the init is single-threaded, so the child may do anything the parent could.
    let program = unsafe { libc::fork() };
    if program < 0 {
        let _unreported = writeln!(
            std::io::stderr(),
            "cyberos: failed to start the program: {}",
            std::io::Error::last_os_error()
        );
        exit(125);
    }
    if program == 0 {
        exec_program(setup, plan);
    }
    let mut status = None;
    while status.is_none() {
        match read_signal(sigfd) {
            Some(libc::SIGTERM | libc::SIGINT | libc::SIGHUP) => forward_term(setup.pid_ns),
            Some(libc::SIGCHLD) => status = reap(program),
            _ => {}
        }
    }
    if !setup.pid_ns {
        kill_descendants_until_none();
    }
    let status = status.unwrap_or(0);
    let _unreported = protocol::write_frame(&mut *sock, &FromInit::Exited { status });
    exit(0)
}

/// Reaps every exited child; returns the program's wait status once it has ended.
fn reap(program: libc::pid_t) -> Option<i32> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waiting for any child without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == program {
            found = Some(status);
        }
    }
}

fn forward_term(pid_ns: bool) {
    if pid_ns {
        // From pid 1, -1 means every other process of this namespace.
        // SAFETY: kill with plain integers.
        unsafe { libc::kill(-1, libc::SIGTERM) };
    } else {
        signal_descendants(libc::SIGTERM);
    }
}

/// The pids of this process's children, from `/proc` (only used without a pid namespace).
fn children_of(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<libc::pid_t>().ok()),
            );
        }
    }
    out
}

fn signal_descendants(sig: libc::c_int) -> usize {
    // SAFETY: getpid has no preconditions.
    let mut queue = vec![unsafe { libc::getpid() }];
    let mut count = 0;
    while let Some(pid) = queue.pop() {
        for child in children_of(pid) {
            // SAFETY: kill with plain integers; the child is ours or a descendant of ours.
            unsafe { libc::kill(child, sig) };
            count += 1;
            queue.push(child);
        }
    }
    count
}

fn kill_descendants_until_none() {
    loop {
        signal_descendants(libc::SIGKILL);
        let mut status = 0;
        // SAFETY: blocking wait for any child; ECHILD ends the loop.
        if unsafe { libc::waitpid(-1, &mut status, 0) } < 0 && sys::errno() == libc::ECHILD {
            return;
        }
    }
}

/// The program's side of the fork: a clean signal state, its own session, fds 0–2 only, then
/// `execve`. Never returns.
fn exec_program(setup: &Setup<'_>, plan: &ExecPlan) -> ! {
    // Every disposition back to default (the Rust runtime ignores SIGPIPE, and an ignored signal
    // stays ignored across execve), then an empty mask, then a session of its own.
    // The raw system call, because libc refuses to touch the signals it reserves (32, 33), which an
    // ignoring parent may also have passed down.
    // SAFETY: rt_sigaction with a zeroed kernel sigaction (SIG_DFL, no flags, empty mask) and no
    // old-action pointer only changes this process's dispositions; SIGKILL/SIGSTOP fail with EINVAL.
    // sigprocmask with an initialised empty set only changes this process's mask.
    unsafe {
        let default = [0u64; 4];
        for sig in 1..=64 {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                default.as_ptr(),
                std::ptr::null_mut::<u8>(),
                8usize,
            );
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::setsid();
    }
    if !setup.pid_ns {
        // No namespace to die with: die with the init instead.
        if sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong).is_err() {
            exit(125);
        }
        // The init's domain still reads the host's /proc to find orphans; the program's does not.
        let landlock_wanted =
            !setup.disable.contains(&Layer::Landlock) && landlock::kernel_abi() > 0;
        if landlock_wanted
            && landlock::restrict_sandbox(setup.spec, true, false).status == Status::Unavailable
        {
            let _unreported = writeln!(
                std::io::stderr(),
                "cyberos: failed to restrict the program with Landlock"
            );
            exit(125);
        }
    }
    if super::fds::close_from(3).is_err() {
        exit(125);
    }
    let argv: Vec<*const libc::c_char> = plan
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let envp: Vec<*const libc::c_char> = plan
        .envp
        .iter()
        .map(|e| e.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    // SAFETY: program, argv and envp are NUL-terminated strings in null-terminated arrays that
    // live until execve replaces the process.
    unsafe { libc::execve(plan.program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    let err = std::io::Error::last_os_error();
    let code = if err.raw_os_error() == Some(libc::ENOENT) {
        127
    } else {
        126
    };
    let _unreported = writeln!(
        std::io::stderr(),
        "cyberos: failed to execute {}: {err}",
        plan.program.to_string_lossy()
    );
    exit(code)
}
