//! The broker's side: start the supervisor (only async-signal-safe calls between fork and exec),
//! hand it the spec, collect the layer report, start the program on request, and watch, signal,
//! and reap the whole sandbox.

use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::child::CONTROL_FD;
use super::protocol::{self, Ready, Request, START};
use super::report::{Layer, LayerReport};
use super::{Exit, Mode, SandboxError, Spec, Stdio3, env, sys};

/// A built sandbox: the program runs once [`Sandbox::start`] is called. Dropping it kills and
/// reaps everything still running.
#[derive(Debug)]
pub struct Sandbox {
    supervisor: Child,
    pidfd: OwnedFd,
    ctl: UnixStream,
    report: LayerReport,
    init_pid: i32,
    init_pidfd: Option<OwnedFd>,
    pid_ns: Option<(u64, u64)>,
    started: bool,
    exit: Option<Exit>,
}

fn stdio(fd: Option<OwnedFd>) -> Stdio {
    fd.map_or_else(Stdio::inherit, Stdio::from)
}

/// Builds a sandbox for `spec` and returns once every layer is in place (the program has not
/// started). In [`Mode::Strict`], an incomplete sandbox is torn down and refused.
///
/// Call it from a thread that outlives the sandbox: the supervisor's parent-death signal fires
/// when the spawning *thread* ends.
pub fn spawn(spec: &Spec, stdio3: Stdio3) -> Result<Sandbox, SandboxError> {
    spawn_with_binary(Path::new(SELF_EXE), spec, stdio3)
}

/// The running binary, even if its file has been replaced since it started.
pub(crate) const SELF_EXE: &str = "/proc/self/exe";

/// As [`spawn`], but re-executes `binary` (a `cyberos` binary) as the supervisor instead of the
/// running program: for programs that embed this library without being `cyberos`, like tests.
pub fn spawn_with_binary(
    binary: &Path,
    spec: &Spec,
    stdio3: Stdio3,
) -> Result<Sandbox, SandboxError> {
    env::validate(spec).map_err(SandboxError::InvalidSpec)?;
    let disable = disabled_layers()?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 && matches!(spec.run_as, Some((0, _))) {
        return Err(SandboxError::InvalidSpec(
            "the sandbox never runs programs as uid 0".into(),
        ));
    }
    let (ctl, theirs) = UnixStream::pair().map_err(SandboxError::Spawn)?;
    // Above the stdio range, so that setting up 0-2 in the child cannot clobber it.
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we then own.
    let theirs_fd = sys::cvt(unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) })
        .map_err(SandboxError::Spawn)?;
    // SAFETY: the kernel just returned this descriptor to us.
    let theirs_dup = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(theirs_fd) };
    drop(theirs);

    let parent = std::process::id() as libc::pid_t;
    let mut cmd = Command::new(binary);
    cmd.arg0("cyberos")
        .arg(crate::cli::SANDBOX_CHILD_COMMAND)
        .env_clear()
        .current_dir("/")
        .stdin(stdio(stdio3.stdin))
        .stdout(stdio(stdio3.stdout))
        .stderr(stdio(stdio3.stderr));
    // SAFETY: the closure makes only async-signal-safe system calls (setsid, prctl, getppid, dup2)
    // and touches no memory shared with other threads of the broker.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            ) < 0
            {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if libc::dup2(theirs_fd, CONTROL_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let supervisor = cmd.spawn().map_err(SandboxError::Spawn)?;
    drop(theirs_dup);
    drop(cmd);
    let pidfd = sys::pidfd_open(supervisor.id() as libc::pid_t).map_err(SandboxError::Spawn)?;
    let mut sandbox = Sandbox {
        supervisor,
        pidfd,
        ctl,
        report: LayerReport::new(),
        init_pid: 0,
        init_pidfd: None,
        pid_ns: None,
        started: false,
        exit: None,
    };
    let request = Request {
        spec: spec.clone(),
        disable,
    };
    if let Err(e) = protocol::write_frame(&sandbox.ctl, &request) {
        return Err(sandbox.fail(SandboxError::Control(e)));
    }
    match protocol::read_frame::<_, Ready>(&sandbox.ctl) {
        Ok(Some(Ready::Built {
            report,
            init_pid,
            pid_ns,
        })) => {
            sandbox.report = report;
            sandbox.init_pid = init_pid;
            sandbox.pid_ns = pid_ns;
            // The init cannot exit before it gets the start byte, so this pid is still the init.
            sandbox.init_pidfd = sys::pidfd_open(init_pid).ok();
        }
        Ok(Some(Ready::Failed { error })) => return Err(sandbox.fail(SandboxError::Setup(error))),
        Ok(None) => {
            let status = sandbox.supervisor.wait().map_err(SandboxError::Wait)?;
            sandbox.exit = Some(exit_of(status));
            return Err(SandboxError::Setup(format!(
                "the sandbox supervisor ended during setup ({status})"
            )));
        }
        Err(e) => return Err(sandbox.fail(SandboxError::Control(e))),
    }
    if spec.mode == Mode::Strict && !sandbox.report.is_complete() {
        let report = sandbox.report.clone();
        return Err(sandbox.fail(SandboxError::Incomplete(report)));
    }
    Ok(sandbox)
}

/// The variable an operator sets to switch layers off, to see how a skill fares on a kernel that
/// lacks them (comma-separated layer names).
pub const DISABLE_VAR: &str = "CYBEROS_SANDBOX_DISABLE";

/// Whether `layer` can be switched off: only those a kernel may lack (the namespaces, Landlock,
/// seccomp). The others cost nothing to apply and every kernel has them.
fn disableable(layer: Layer) -> bool {
    !matches!(
        layer,
        Layer::Env
            | Layer::Fds
            | Layer::Limits
            | Layer::Identity
            | Layer::Session
            | Layer::Lifetime
    )
}

fn disabled_layers() -> Result<Vec<Layer>, SandboxError> {
    let Ok(value) = std::env::var(DISABLE_VAR) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match Layer::ALL
            .into_iter()
            .find(|&l| l.name() == name && disableable(l))
        {
            Some(layer) => out.push(layer),
            None => {
                let known: Vec<_> = Layer::ALL
                    .into_iter()
                    .filter(|&l| disableable(l))
                    .map(Layer::name)
                    .collect();
                return Err(SandboxError::InvalidSpec(format!(
                    "{DISABLE_VAR} names {name:?}, which is not one of {}",
                    known.join(", ")
                )));
            }
        }
    }
    Ok(out)
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(crate::exit::BROKER_FAILED.into()),
    }
}

impl Sandbox {
    /// Kills and reaps everything, then hands back `err`.
    fn fail(mut self, err: SandboxError) -> SandboxError {
        self.kill();
        // The wait result does not matter any more: the error being returned says what happened.
        let _reaped = self.wait();
        err
    }

    /// Host pid of the supervisor.
    pub fn pid(&self) -> i32 {
        self.supervisor.id() as i32
    }

    /// Host pid of the init (pid 1 inside, when there is a pid namespace).
    pub fn init_pid(&self) -> i32 {
        self.init_pid
    }

    /// What every layer's state is.
    pub fn report(&self) -> &LayerReport {
        &self.report
    }

    /// Lets the init start the program. Only the first call does anything.
    pub fn start(&mut self) -> Result<(), SandboxError> {
        if self.started {
            return Ok(());
        }
        io::Write::write_all(&mut &self.ctl, &[START]).map_err(SandboxError::Control)?;
        self.started = true;
        Ok(())
    }

    /// SIGTERM, which the supervisor forwards to the init and the init to every process inside.
    pub fn terminate(&self) {
        if self.exit.is_none() {
            // ESRCH: it has exited already, which is what terminate is after.
            let _gone = sys::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGTERM);
        }
    }

    /// SIGKILL of the whole sandbox: the init (whose death empties its pid namespace) and the
    /// supervisor.
    pub fn kill(&self) {
        if let Some(fd) = &self.init_pidfd {
            let _gone = sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
        }
        if self.exit.is_none() {
            let _gone = sys::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        }
    }

    /// A descriptor that becomes readable when the supervisor exits (for an event loop).
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// True when `pid` (a host pid, e.g. from SO_PEERCRED) runs inside this sandbox: in its pid
    /// namespace or one below it; without a pid namespace, a descendant of the init.
    pub fn contains_peer(&self, pid: i32) -> bool {
        if pid <= 0 {
            return false;
        }
        match self.pid_ns {
            Some(ns) => in_pid_ns(pid, ns),
            None => descends_from(pid, self.init_pid),
        }
    }

    /// The program's status once the sandbox has ended, without blocking. When it reports an exit,
    /// no process of the sandbox is left.
    pub fn try_wait(&mut self) -> io::Result<Option<Exit>> {
        if let Some(exit) = self.exit {
            return Ok(Some(exit));
        }
        match self.supervisor.try_wait()? {
            None => Ok(None),
            Some(status) => {
                self.reap_init();
                let exit = exit_of(status);
                self.exit = Some(exit);
                Ok(Some(exit))
            }
        }
    }

    /// Blocks until the sandbox has ended.
    pub fn wait(&mut self) -> io::Result<Exit> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        let status = self.supervisor.wait()?;
        self.reap_init();
        let exit = exit_of(status);
        self.exit = Some(exit);
        Ok(exit)
    }

    /// Makes sure the init (and with it its pid namespace) is gone once the supervisor is: after a
    /// normal end it already is; after the supervisor was killed it dies of its parent-death
    /// signal, and gets a SIGKILL here too in case that signal was never armed.
    fn reap_init(&mut self) {
        let Some(fd) = self.init_pidfd.take() else {
            return;
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own, zero timeout.
        if unsafe { libc::poll(&mut pfd, 1, 0) } == 1 {
            return;
        }
        let _gone = sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
        let deadline = Duration::from_secs(5).as_millis() as libc::c_int;
        // SAFETY: as above, bounded wait: the kernel empties the namespace before the init exits.
        unsafe { libc::poll(&mut pfd, 1, deadline) };
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.exit.is_none() {
            self.kill();
            let _reaped = self.wait();
        }
    }
}

/// Whether `pid`'s pid namespace is `ns` or a namespace nested in it.
fn in_pid_ns(pid: i32, ns: (u64, u64)) -> bool {
    let Ok(mut file) = std::fs::File::open(format!("/proc/{pid}/ns/pid")) else {
        return false;
    };
    for _ in 0..33 {
        let Ok(meta) = file.metadata() else {
            return false;
        };
        if (meta.dev(), meta.ino()) == ns {
            return true;
        }
        // SAFETY: NS_GET_PARENT on a namespace descriptor returns a new descriptor or -1.
        let parent = unsafe { libc::ioctl(file.as_raw_fd(), libc::NS_GET_PARENT) };
        if parent < 0 {
            return false;
        }
        // SAFETY: the kernel just returned this descriptor to us.
        file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(parent) };
    }
    false
}

/// Whether `ancestor` is `pid` or one of its ancestors (by walking `/proc/<pid>/stat`).
fn descends_from(mut pid: i32, ancestor: i32) -> bool {
    for _ in 0..4096 {
        if pid == ancestor {
            return true;
        }
        if pid <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // The command name may contain spaces and parentheses: the ppid follows the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            return false;
        };
        let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) else {
            return false;
        };
        pid = ppid;
    }
    false
}
