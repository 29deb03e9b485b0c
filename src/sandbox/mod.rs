//! The sandbox (CONTRACT §6): runs one program behind every isolation layer this kernel offers and
//! reports, layer by layer, what was really enforced.
//!
//! Process tree: the broker starts `cyberos __sandbox-child` (the *supervisor*, [`child_main`]) with
//! only async-signal-safe work between fork and exec. The supervisor reads its [`Spec`] from fd 3,
//! enters a user namespace (always, even for a root broker: it makes RLIMIT_NPROC count per
//! invocation), unshares the other namespaces and forks the *init*, pid 1 of the new pid namespace.
//! The init builds the mount view, drops every privilege, applies Landlock and seccomp, reports,
//! and only after [`Sandbox::start`] forks and `execve`s the program. The init forwards SIGTERM,
//! reaps, and exits with the program; its exit kills whatever is left in the namespace.
//!
//! This module must never know about the broker protocol, skills or the journal, and must never
//! start the program before `start`: the broker records the report first.

mod check;
mod child;
mod command;
mod env;
mod fds;
mod identity;
mod init;
mod landlock;
mod lifetime;
mod limits;
mod mounts;
mod namespaces;
mod protocol;
mod report;
mod seccomp;
mod spawn;
mod sys;

use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use check::check;
pub use child::child_main;
pub use command::{CommandOutput, run_command, run_command_with_binary};
pub use report::{Layer, LayerReport, LayerState, Status};
pub use spawn::{DISABLE_VAR, Sandbox, spawn, spawn_with_binary};

/// Where the scratch directory appears inside: the program's `HOME`, `TMPDIR` and usual `cwd`.
pub const SCRATCH_INSIDE: &str = "/tmp/scratch";

/// Directory inside the sandbox holding the read-only `cyberos` client.
pub const CLIENT_PATH_DIR: &str = "/opt/cyberos/bin";

/// The `PATH` a sandboxed program gets: the client first, then the system directories.
pub const INSIDE_PATH: &str =
    "/opt/cyberos/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// The uid and gid a root broker runs programs as unless `$CYBEROS_SANDBOX_UID`/`GID` say otherwise.
pub const DEFAULT_SANDBOX_ID: u32 = 65534;

/// Resource limits (CONTRACT §6.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// RLIMIT_AS, soft and hard.
    pub address_space_bytes: u64,
    /// RLIMIT_CPU, soft and hard: the effective budget.
    pub cpu_seconds: u64,
    /// RLIMIT_NPROC inside the sandbox's own user namespace: processes and threads, the
    /// supervisor and the init included.
    pub max_processes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            address_space_bytes: 512 * 1024 * 1024,
            cpu_seconds: 30 * 60,
            max_processes: 8,
        }
    }
}

/// What the caller will do with a missing layer. The sandbox itself always applies everything it
/// can and reports honestly; in strict mode [`spawn`] refuses an incomplete sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Strict,
    BestEffort,
}

/// Everything the supervisor needs to build one sandbox. Sent over a socketpair, never argv/env.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Absolute path of the program as seen inside (a bundle's `main`, `/bin/bash`).
    pub program: PathBuf,
    /// `argv[1..]`; `argv[0]` is `program`.
    pub args: Vec<String>,
    /// The program's exact environment.
    pub env: Vec<(String, String)>,
    /// Working directory inside (normally [`SCRATCH_INSIDE`]).
    pub cwd: PathBuf,
    /// Host paths bound read-only at the same path inside (the bundle directory).
    pub ro_binds: Vec<PathBuf>,
    /// Host directory bound read-write at [`SCRATCH_INSIDE`].
    pub scratch: Option<PathBuf>,
    /// Host Unix socket bound at the same path inside (under the private `/tmp`).
    pub socket: Option<PathBuf>,
    /// The `cyberos` binary, exposed read-only as `CLIENT_PATH_DIR/cyberos`.
    pub client_binary: Option<PathBuf>,
    pub limits: Limits,
    pub mode: Mode,
    /// Host uid/gid to run as when the broker is root (see [`default_run_as`]). Ignored otherwise:
    /// an unprivileged broker's programs run as the broker's own uid.
    pub run_as: Option<(u32, u32)>,
}

impl Spec {
    /// A spec running `program args` with an empty environment, nothing bound, default limits,
    /// best effort and the default identity for this broker.
    pub fn new(program: impl Into<PathBuf>, args: Vec<String>) -> Self {
        Self {
            program: program.into(),
            args,
            env: Vec::new(),
            cwd: PathBuf::from("/"),
            ro_binds: Vec::new(),
            scratch: None,
            socket: None,
            client_binary: None,
            limits: Limits::default(),
            mode: Mode::BestEffort,
            run_as: default_run_as(),
        }
    }
}

/// The identity a root broker runs programs as: `$CYBEROS_SANDBOX_UID`/`$CYBEROS_SANDBOX_GID`, else
/// 65534:65534. `None` for an unprivileged broker (programs keep the broker's uid, in a user
/// namespace). A value that is not a non-zero number falls back to the default.
pub fn default_run_as() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let id = |var: &str| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|&v| v != 0)
    };
    Some((
        id("CYBEROS_SANDBOX_UID").unwrap_or(DEFAULT_SANDBOX_ID),
        id("CYBEROS_SANDBOX_GID").unwrap_or(DEFAULT_SANDBOX_ID),
    ))
}

/// How the program ended: its own exit code, or the signal that killed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// The program's fds 0, 1, 2: `None` inherits the broker's.
#[derive(Debug, Default)]
pub struct Stdio3 {
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

impl Stdio3 {
    /// The program shares the broker's stdin, stdout and stderr.
    pub fn inherit() -> Self {
        Self::default()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("invalid sandbox spec: {0}")]
    InvalidSpec(String),
    #[error("failed to start the sandbox supervisor")]
    Spawn(#[source] io::Error),
    #[error("failed to talk to the sandbox supervisor")]
    Control(#[source] io::Error),
    #[error("failed to set up the sandbox: {0}")]
    Setup(String),
    #[error("refusing to run with sandbox layers missing (strict mode): {}", describe_missing(.0))]
    Incomplete(LayerReport),
    #[error("failed to wait for the sandbox")]
    Wait(#[source] io::Error),
    #[error("failed to capture the command's output")]
    Capture(#[source] io::Error),
}

fn describe_missing(report: &LayerReport) -> String {
    report
        .missing()
        .iter()
        .map(|(l, s)| format!("{l} {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}
