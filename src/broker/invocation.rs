//! The life of one invocation: journal and socket set-up, the sandboxed spawn, the event loop,
//! and the accounting afterwards (rows, exit code, cleanup). `cmd::invoke` validates the command
//! line into an [`InvokeRequest`]; this module does the rest.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::broker::dispatch::Shared;
use crate::broker::server::{self, LoopInput, LoopOutcome};
use crate::broker::socket;
use crate::exit;
use crate::journal::{BrokerIdentity, Journal, JournalError, kind};
use crate::sandbox::{self, Exit};
use crate::skill::manifest::Manifest;
use crate::skill::policy::Policy;
use crate::telemetry;
use crate::tools::{self, Invocation, ResolvePin};
use crate::util::{self, TraceContext};

/// A validated `skill invoke` request.
pub struct InvokeRequest {
    pub manifest: Manifest,
    /// The bundle directory (absolute) and its `main`.
    pub bundle_dir: PathBuf,
    pub main: PathBuf,
    pub home: PathBuf,
    pub tenant_id: String,
    pub invocation_id: String,
    pub budget: Duration,
    pub sandbox_mode: sandbox::Mode,
    pub audit_required: bool,
    pub resolve: Vec<ResolvePin>,
    pub args: Vec<String>,
    /// The broker's own `$TRACEPARENT`, if valid.
    pub parent_trace: Option<TraceContext>,
    /// `--json`: the summary must end up on a line of its own after the skill's output.
    pub json_summary: bool,
}

/// The `invoke --json` summary, and the exit code.
pub struct Summary {
    pub json: Value,
    pub exit_code: u8,
    /// The skill's output did not end with a newline: print one before the summary.
    pub needs_newline: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("failed to prepare {path}: {source}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("journal unusable and --audit required: {0}")]
    AuditRequired(#[source] JournalError),
    #[error("invocation id {0} was already used; pick a new one")]
    Duplicate(String),
    #[error(transparent)]
    Socket(#[from] socket::SocketError),
    #[error("skill bundle is not readable by the sandbox uid {uid}: {detail}")]
    Unreadable { uid: u32, detail: String },
    #[error("failed to start the sandbox: {0}")]
    Sandbox(#[source] sandbox::SandboxError),
    #[error("failed to set up signal handling: {0}")]
    Signals(#[source] std::io::Error),
    #[error("failed to start a thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("broker event loop failed: {0}")]
    Loop(#[source] std::io::Error),
}

impl InvokeError {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Duplicate(_) => exit::USAGE,
            Self::Unreadable { .. } => exit::NOT_EXECUTABLE,
            _ => exit::BROKER_FAILED,
        }
    }
}

/// Removes the socket and the scratch directory however the invocation ends.
struct Cleanup {
    paths: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for path in &self.paths {
            let result = if path.is_dir() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
            if let Err(e) = result {
                if e.kind() != std::io::ErrorKind::NotFound {
                    eprintln!("cyberos: failed to remove {}: {e}", path.display());
                }
            }
        }
    }
}

/// Would `uid:gid` (no supplementary groups) be allowed `want` (r=4, x=1) on `path`, and search
/// every directory above it? The sandbox builds its mount view as that uid, so this is checked up
/// front to fail with a clear message instead of a mount error.
fn accessible_as(path: &Path, uid: u32, gid: u32, want: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let allowed = |p: &Path, want: u32| -> Result<(), String> {
        let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let mode = meta.mode();
        let bits = if meta.uid() == uid {
            mode >> 6
        } else if meta.gid() == gid {
            mode >> 3
        } else {
            mode
        } & 0o7;
        if bits & want == want {
            Ok(())
        } else {
            Err(format!(
                "{} (mode {:o}, owner {}:{})",
                p.display(),
                mode & 0o7777,
                meta.uid(),
                meta.gid()
            ))
        }
    };
    for dir in path.ancestors().skip(1) {
        allowed(dir, 0o1)?;
    }
    allowed(path, want)
}

/// The `cyberos` binary to expose inside the sandbox. The sandbox mounts it as the sandbox uid, so
/// when that uid cannot reach this binary (a root broker installed under /root), a hard link (or,
/// across filesystems, a copy) in /tmp stands in for it for the length of the invocation.
fn client_binary(
    identity: Option<(u32, u32)>,
    invocation_id: &str,
    cleanup: &mut Cleanup,
) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let Some((uid, gid)) = identity else {
        return Some(exe);
    };
    if accessible_as(&exe, uid, gid, 0o5).is_ok() {
        return Some(exe);
    }
    use std::os::unix::fs::PermissionsExt as _;
    let stand_in = socket::client_path_for(invocation_id);
    // A hard link shares the inode, so it is only enough when the file itself is world-executable.
    let world_rx = std::fs::metadata(&exe).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005);
    let made = if world_rx && std::fs::hard_link(&exe, &stand_in).is_ok() {
        Ok(())
    } else {
        std::fs::copy(&exe, &stand_in).and_then(|_| {
            std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755))
        })
    };
    cleanup.paths.push(stand_in.clone());
    match made {
        Ok(()) => Some(stand_in),
        Err(e) => {
            eprintln!(
                "cyberos: the sandbox uid cannot reach {} and a stand-in failed: {e}",
                exe.display()
            );
            Some(exe)
        }
    }
}

/// Creates `path` (which must not exist) with mode 0700, owned by `owner` when given.
fn create_private_dir(path: &Path, owner: Option<(u32, u32)>) -> Result<(), InvokeError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let err = |source| InvokeError::Prepare {
        path: path.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(err)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(err)?;
    }
    Ok(())
}

/// Creates `path` and its parents if missing (new directories get `mode`); an existing directory
/// is left as the operator set it up.
fn prepare_dir(path: &Path, mode: u32) -> Result<(), InvokeError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|source| InvokeError::Prepare {
            path: path.to_owned(),
            source,
        })
}

/// Runs one invocation to its end.
pub fn run(req: InvokeRequest) -> Result<Summary, InvokeError> {
    let started = Instant::now();
    let started_ms = util::now_ms();
    let invoke_span = telemetry::invoke_span(
        req.parent_trace,
        &telemetry::InvokeInfo {
            invocation_id: &req.invocation_id,
            skill_id: &req.manifest.id,
            skill_version: &req.manifest.version.to_string(),
            tenant_id: &req.tenant_id,
        },
    );
    let identity = sandbox::default_run_as();
    if let Some((uid, gid)) = identity {
        accessible_as(&req.bundle_dir, uid, gid, 0o5)
            .and_then(|()| accessible_as(&req.main, uid, gid, 0o5))
            .map_err(|detail| InvokeError::Unreadable { uid, detail })?;
    }

    prepare_dir(&req.home, 0o700)?;
    let memory_root = req.home.join("memory");
    prepare_dir(&memory_root, 0o700)?;

    let mut journal_warned = false;
    let journal = match Journal::open(&req.home) {
        Ok(j) => Some(Arc::new(j)),
        Err(e) if req.audit_required => return Err(InvokeError::AuditRequired(e)),
        Err(e) => {
            eprintln!("cyberos: journal unavailable, tool calls continue unaudited: {e}");
            journal_warned = true;
            None
        }
    };
    if let Some(j) = &journal {
        let me = BrokerIdentity::current().unwrap_or(BrokerIdentity {
            pid: std::process::id() as i32,
            start_time: 0,
        });
        match j.register_invocation(&req.invocation_id, &req.manifest.id, me) {
            Ok(()) => {}
            Err(JournalError::DuplicateInvocation(id)) => return Err(InvokeError::Duplicate(id)),
            Err(e) if req.audit_required => return Err(InvokeError::AuditRequired(e)),
            Err(e) => {
                eprintln!("cyberos: journal unavailable, tool calls continue unaudited: {e}");
                journal_warned = true;
            }
        }
    }
    // What dead brokers left in /tmp is swept while the sandbox is built, not before: a busy
    // /tmp can take milliseconds to list. Our own socket, registered and alive, is never swept.
    let sweeping = {
        let journal = journal.clone();
        std::thread::Builder::new()
            .name("cyberos-sweep".into())
            .spawn(move || socket::sweep(journal.as_deref()))
            .map_err(InvokeError::Thread)?
    };

    // Scratch lives beside the socket in /tmp, not in the home: the sandbox mounts it as the
    // sandbox uid, which cannot reach a root broker's home. mkdir refuses an existing path (or a
    // planted symlink), and the directory is 0700 for the sandbox uid alone.
    let scratch = socket::scratch_path_for(&req.invocation_id);
    let socket_path = socket::path_for(&req.invocation_id);
    let listener = socket::bind(&socket_path, identity)?;
    let mut cleanup = Cleanup {
        paths: vec![socket_path.clone()],
    };
    create_private_dir(&scratch, identity)?;
    cleanup.paths.push(scratch.clone());

    // `skill.invoke`'s context: a child of $TRACEPARENT, else a new root.
    let trace = invoke_span.trace_context();
    let deadline = started + req.budget;
    let deadline_ms = started_ms + req.budget.as_millis() as i64;
    let policy = Policy::from_manifest(&req.manifest).map_err(|e| InvokeError::Prepare {
        path: req.bundle_dir.join("SKILL.md"),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
    })?;
    let invocation = Invocation {
        invocation_id: req.invocation_id.clone(),
        skill_id: req.manifest.id.clone(),
        tenant_id: req.tenant_id.clone(),
        sync_class: req.manifest.sync_class.as_str(),
        memory_root,
        scratch_dir: scratch.clone(),
        resolve: req.resolve.clone(),
        policy: Arc::new(policy),
        journal,
        deadline,
        sandbox_mode: req.sandbox_mode,
    };
    let shared = Arc::new(Shared::new(
        invocation,
        tools::registry(),
        req.audit_required,
        trace,
        started_ms,
        deadline_ms,
        journal_warned,
    ));

    // The broker's own SIGINT/SIGTERM become readable pipes in the event loop from here on.
    let (sigint, sigterm) = signal_pipes().map_err(InvokeError::Signals)?;

    let env = vec![
        (
            "CYBEROS_BROKER_SOCKET".to_owned(),
            socket_path.display().to_string(),
        ),
        ("CYBEROS_SKILL_ID".to_owned(), req.manifest.id.clone()),
        (
            "CYBEROS_INVOCATION_ID".to_owned(),
            req.invocation_id.clone(),
        ),
        ("CYBEROS_TENANT_ID".to_owned(), req.tenant_id.clone()),
        ("RUST_LOG".to_owned(), "warn".to_owned()),
        ("PATH".to_owned(), sandbox::INSIDE_PATH.to_owned()),
        ("HOME".to_owned(), sandbox::SCRATCH_INSIDE.to_owned()),
        ("TMPDIR".to_owned(), sandbox::SCRATCH_INSIDE.to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("TRACEPARENT".to_owned(), trace.header()),
    ];
    let spec = sandbox::Spec {
        program: req.main.clone(),
        args: req.args.clone(),
        env,
        cwd: PathBuf::from(sandbox::SCRATCH_INSIDE),
        ro_binds: vec![req.bundle_dir.clone()],
        scratch: Some(scratch),
        socket: Some(socket_path.clone()),
        client_binary: client_binary(identity, &req.invocation_id, &mut cleanup),
        limits: sandbox::Limits {
            address_space_bytes: 512 * 1024 * 1024,
            cpu_seconds: req.budget.as_secs().max(1),
            max_processes: 8,
        },
        mode: req.sandbox_mode,
        run_as: identity,
    };
    // With --json the summary must be the last line, on a line of its own: the skill's stdout then
    // passes through a pipe so the broker knows whether it ended with a newline.
    let (stdio, relay) = if req.json_summary {
        let (read, write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| InvokeError::Prepare {
                path: PathBuf::from("stdout pipe"),
                source: e.into(),
            })?;
        let stdio = sandbox::Stdio3 {
            stdout: Some(write),
            ..sandbox::Stdio3::inherit()
        };
        (stdio, Some(relay_stdout(read)))
    } else {
        (sandbox::Stdio3::inherit(), None)
    };
    let mut sandbox = sandbox::spawn(&spec, stdio).map_err(InvokeError::Sandbox)?;
    let report = serde_json::to_value(sandbox.report()).unwrap_or(Value::Null);
    // Strict mode never gets here with a layer missing: `spawn` refuses it.
    for (layer, state) in sandbox.report().missing() {
        eprintln!("cyberos: sandbox layer {layer} {state}; continuing (--sandbox best-effort)");
    }
    let _unaudited = shared.record(
        kind::INVOKED_STARTED,
        &trace,
        json!({
            "skill_version": req.manifest.version.to_string(),
            "tenant_id": req.tenant_id,
            "pid": std::process::id(),
            "deadline_ms": req.budget.as_millis() as u64,
            "sandbox": report,
        }),
    );
    sandbox.start().map_err(InvokeError::Sandbox)?;

    let input = LoopInput {
        listener,
        sandbox,
        started,
        term_at: started + req.budget.mul_f64(0.9),
        kill_at: deadline,
        sigint,
        sigterm,
    };
    let outcome = server::run(Arc::clone(&shared), input).map_err(InvokeError::Loop)?;
    // Nothing of the sandbox is left: remove its socket and scratch directory while the last
    // rows are written (directory operations in a busy /tmp can take milliseconds).
    let removing = std::thread::Builder::new()
        .name("cyberos-cleanup".into())
        .spawn(move || drop(cleanup));
    let mut summary = finish(&shared, &req, &outcome, started, report);
    // Every writer of the pipe was in the sandbox, which is gone: the relay sees EOF.
    summary.needs_newline = relay.is_some_and(|r| r.join().unwrap_or(false));
    invoke_span.end(&telemetry::InvokeEnd::from_summary(&summary.json));
    if let Ok(removing) = removing {
        let _removed = removing.join();
    }
    let _swept = sweeping.join();
    Ok(summary)
}

fn finish(
    shared: &Shared,
    req: &InvokeRequest,
    outcome: &LoopOutcome,
    started: Instant,
    sandbox: Value,
) -> Summary {
    let duration_ms = started.elapsed().as_millis() as u64;
    let (signal, code) = match outcome.exit {
        Exit::Code(c) => (None, u8::try_from(c).unwrap_or(exit::ERROR)),
        Exit::Signal(s) => (Some(s), 128u8.saturating_add(s as u8)),
    };
    let (outcome_name, exit_code) = if let Some(sig) = outcome.interrupted {
        (
            "interrupted",
            if sig == libc::SIGINT {
                exit::INTERRUPTED
            } else {
                exit::TERMINATED
            },
        )
    } else if outcome.deadline_fired.is_some() {
        ("timeout", exit::DEADLINE)
    } else if let Some(sig) = signal {
        let killed = matches!(
            sig,
            libc::SIGKILL | libc::SIGTERM | libc::SIGINT | libc::SIGHUP | libc::SIGXCPU
        );
        (if killed { "killed" } else { "panic" }, code)
    } else if code == 0 {
        ("success", 0)
    } else {
        ("failure", code)
    };
    if let Some(elapsed) = outcome.deadline_fired {
        let _unaudited = shared.record(
            kind::TIMEOUT,
            &shared.trace,
            json!({
                "elapsed_ms": elapsed.as_millis() as u64,
                "last_tool_call": shared.last_tool_call(),
                "signal": if outcome.deadline_killed { "SIGKILL" } else { "SIGTERM" },
            }),
        );
    }
    let tool_calls = shared.tool_calls.load(std::sync::atomic::Ordering::Relaxed);
    let denied = shared.denied.load(std::sync::atomic::Ordering::Relaxed);
    let signal_name = signal.map(signal_name);
    let completed = shared.record(
        kind::INVOKED_COMPLETED,
        &shared.trace,
        json!({
            "outcome": outcome_name,
            "exit_code": exit_code,
            "signal": signal_name,
            "duration_ms": duration_ms,
            "tool_calls": tool_calls,
            "denied": denied,
        }),
    );
    if let Some(journal) = &shared.inv.journal {
        // The completed row marks the invocation completed in its own transaction; only
        // without that row is the mark written on its own.
        if completed.is_err() {
            if let Err(e) = journal.complete_invocation(&req.invocation_id) {
                shared.warn_journal(&e.to_string());
            }
        }
        // Our last row is written: keep the log short for whoever opens the journal next.
        journal.trim_log();
    }
    Summary {
        json: json!({
            "invocation_id": req.invocation_id,
            "skill_id": req.manifest.id,
            "outcome": outcome_name,
            "exit_code": exit_code,
            "signal": signal_name,
            "duration_ms": duration_ms,
            "tool_calls": tool_calls,
            "denied": denied,
            "sandbox": sandbox,
        }),
        exit_code,
        needs_newline: false,
    }
}

/// Copies the skill's stdout to ours until EOF; returns whether the last byte was not a newline.
fn relay_stdout(read: std::os::fd::OwnedFd) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        let mut from = std::fs::File::from(read);
        let mut out = std::io::stdout().lock();
        let mut buf = vec![0u8; 64 * 1024];
        let mut last = b'\n';
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    last = buf[n - 1];
                    if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                        // Our stdout is gone; keep draining so the skill never blocks on it.
                        continue;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        last != b'\n'
    })
}

/// `SIGKILL`-style name of a signal number.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map_or_else(|_| format!("SIG{sig}"), |s| s.as_str().to_owned())
}

/// Self-pipes for SIGINT and SIGTERM: signal-hook writes a byte to the write end from the
/// handler; the read ends go into the event loop.
fn signal_pipes() -> std::io::Result<(mio::net::UnixStream, mio::net::UnixStream)> {
    let pipe = |sig: i32| -> std::io::Result<mio::net::UnixStream> {
        let (read, write) = StdUnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        signal_hook::low_level::pipe::register(sig, write)?;
        Ok(mio::net::UnixStream::from_std(read))
    };
    Ok((pipe(libc::SIGINT)?, pipe(libc::SIGTERM)?))
}
