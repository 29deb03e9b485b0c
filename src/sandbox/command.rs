//! One command run to completion in a sandbox, its output captured: what the Bash tool uses. The
//! same machinery as a skill's sandbox; on timeout the whole sandbox is killed, and when this
//! returns no process of it is left.

use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::time::{Duration, Instant};

use std::path::Path;

use super::spawn::SELF_EXE;
use super::{Exit, SandboxError, Spec, Stdio3, spawn_with_binary, sys};

/// What a finished command produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutput {
    pub exit: Exit,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Output beyond `max_output` (per stream) was discarded.
    pub truncated: bool,
    /// The timeout fired and the sandbox was killed.
    pub timed_out: bool,
    pub duration: Duration,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd as _;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array we own.
    sys::cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors were just created for us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
    let flags = sys::cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    sys::cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) })
        .map(drop)
}

/// Appends what `fd` has to `buf` up to `cap` bytes; returns false at end of file.
fn drain(fd: &OwnedFd, buf: &mut Vec<u8>, cap: usize, truncated: &mut bool) -> io::Result<bool> {
    let mut chunk = [0u8; 16384];
    let mut file = std::fs::File::from(fd.try_clone()?);
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                let room = cap.saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..n.min(room)]);
                if n > room {
                    *truncated = true;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Runs `spec` with `stdin` as its input, capturing stdout and stderr (each capped at
/// `max_output` bytes), killing the whole sandbox after `timeout`.
pub fn run_command(
    spec: &Spec,
    stdin: &[u8],
    timeout: Duration,
    max_output: usize,
) -> Result<CommandOutput, SandboxError> {
    run_command_with_binary(Path::new(SELF_EXE), spec, stdin, timeout, max_output)
}

/// As [`run_command`], re-executing `binary` as the supervisor (see [`super::spawn_with_binary`]).
pub fn run_command_with_binary(
    binary: &Path,
    spec: &Spec,
    stdin: &[u8],
    timeout: Duration,
    max_output: usize,
) -> Result<CommandOutput, SandboxError> {
    let (in_r, in_w) = pipe().map_err(SandboxError::Capture)?;
    let (out_r, out_w) = pipe().map_err(SandboxError::Capture)?;
    let (err_r, err_w) = pipe().map_err(SandboxError::Capture)?;
    let mut sandbox = spawn_with_binary(
        binary,
        spec,
        Stdio3 {
            stdin: Some(in_r),
            stdout: Some(out_w),
            stderr: Some(err_w),
        },
    )?;
    for fd in [&in_w, &out_r, &err_r] {
        set_nonblocking(fd).map_err(SandboxError::Capture)?;
    }
    let started = Instant::now();
    let deadline = started + timeout;
    sandbox.start()?;

    let mut input = Some((std::fs::File::from(in_w), 0usize));
    if stdin.is_empty() {
        input = None;
    }
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (mut out_open, mut err_open) = (true, true);
    let mut truncated = false;
    let mut timed_out = false;
    let mut exited = false;
    while out_open || err_open || !exited {
        let now = Instant::now();
        if !timed_out && now >= deadline {
            timed_out = true;
            sandbox.kill();
        }
        let wait_ms = if timed_out {
            100
        } else {
            (deadline - now).as_millis().clamp(1, 1000) as libc::c_int
        };
        let fd_or_none = |open: bool, fd: &OwnedFd| if open { fd.as_raw_fd() } else { -1 };
        let in_fd = input.as_ref().map_or(-1, |(f, _)| f.as_raw_fd());
        let mut fds = [
            libc::pollfd {
                fd: fd_or_none(out_open, &out_r),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: fd_or_none(err_open, &err_r),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if exited {
                    -1
                } else {
                    sandbox.pidfd().as_raw_fd()
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: in_fd,
                events: libc::POLLOUT,
                revents: 0,
            },
        ];
        // SAFETY: four pollfds we own (negative fds are ignored by poll).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 4, wait_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(SandboxError::Capture(e));
        }
        if fds[0].revents != 0 {
            out_open = drain(&out_r, &mut stdout, max_output, &mut truncated)
                .map_err(SandboxError::Capture)?;
        }
        if fds[1].revents != 0 {
            err_open = drain(&err_r, &mut stderr, max_output, &mut truncated)
                .map_err(SandboxError::Capture)?;
        }
        if fds[2].revents != 0 {
            exited = sandbox.try_wait().map_err(SandboxError::Wait)?.is_some();
        }
        if fds[3].revents != 0 {
            if let Some((file, written)) = input.as_mut() {
                match file.write(&stdin[*written..]) {
                    Ok(n) => *written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // EPIPE: the command does not read its input; that is its business.
                    Err(_) => *written = stdin.len(),
                }
                if *written >= stdin.len() {
                    input = None;
                }
            }
        }
    }
    let exit = sandbox.wait().map_err(SandboxError::Wait)?;
    Ok(CommandOutput {
        exit,
        stdout,
        stderr,
        truncated,
        timed_out,
        duration: started.elapsed(),
    })
}
