//! The `Bash` tool (CONTRACT §5): `/bin/bash -c command` in a sandbox built by the same
//! machinery as the skill's (`crate::sandbox::run_command`): every layer, no network, a cleared
//! environment, the read-only system view, and read-write only the invocation's scratch
//! directory (its HOME and default cwd, shared with the skill). No `x-allowed-files` path is
//! bound in: files move in and out through the file tools. When the call returns, no process it
//! started is left. This module must never run a command outside the sandbox.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::sandbox::{self, Exit, Limits, Spec};
use crate::tools::{CallContext, Tool, ToolError, ToolName, parse_args};

/// Each of stdout and stderr is cut here.
const MAX_OUTPUT: usize = 1024 * 1024;
/// Time allowed when the call does not say (still bounded by the invocation's deadline).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
const SHELL: &str = "/bin/bash";

pub struct Bash;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BashArgs {
    #[serde(default)]
    command: Option<String>,
    /// `cmd` is accepted as another name for `command`.
    #[serde(default)]
    cmd: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    cwd: Option<String>,
}

struct Request {
    command: String,
    timeout: Duration,
    cwd: PathBuf,
}

fn request(args: &Value) -> Result<Request, ToolError> {
    let args: BashArgs = parse_args(args)?;
    let command = match (args.command, args.cmd) {
        (Some(c), None) | (None, Some(c)) => c,
        (Some(_), Some(_)) => {
            return Err(ToolError::invalid("give either command or cmd, not both"));
        }
        (None, None) => return Err(ToolError::invalid("missing field `command`")),
    };
    if command.contains('\0') {
        return Err(ToolError::invalid("command contains NUL"));
    }
    let timeout = match args.timeout_ms {
        Some(0) => return Err(ToolError::invalid("timeout_ms must be positive")),
        Some(ms) => Duration::from_millis(ms),
        None => DEFAULT_TIMEOUT,
    };
    let cwd = match args.cwd {
        None => PathBuf::from(sandbox::SCRATCH_INSIDE),
        Some(dir) => inside_cwd(&dir)?,
    };
    Ok(Request {
        command,
        timeout,
        cwd,
    })
}

/// A cwd as the sandbox sees it: absolute as given, or relative to the scratch directory.
/// `..` is refused so that a relative cwd cannot climb out of scratch by accident.
fn inside_cwd(dir: &str) -> Result<PathBuf, ToolError> {
    if dir.contains('\0') {
        return Err(ToolError::invalid("cwd contains NUL"));
    }
    let path = Path::new(dir);
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(ToolError::invalid("cwd may not contain `..`"));
    }
    Ok(Path::new(sandbox::SCRATCH_INSIDE).join(path))
}

/// The sandbox for one command: the skill's view, no socket, no client, a cleared environment.
fn spec(ctx: &CallContext<'_>, req: &Request, timeout: Duration) -> Spec {
    let mut spec = Spec::new(SHELL, vec!["-c".to_owned(), req.command.clone()]);
    spec.cwd = req.cwd.clone();
    spec.scratch = Some(ctx.invocation.scratch_dir.clone());
    spec.mode = ctx.invocation.sandbox_mode;
    spec.env = vec![
        (
            "PATH".to_owned(),
            "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".to_owned(),
        ),
        ("HOME".to_owned(), sandbox::SCRATCH_INSIDE.to_owned()),
        ("TMPDIR".to_owned(), sandbox::SCRATCH_INSIDE.to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("TRACEPARENT".to_owned(), ctx.trace.header()),
    ];
    // CPU time cannot exceed wall time; one extra second so the wall-clock kill, which reports
    // a timeout, comes first.
    spec.limits = Limits {
        cpu_seconds: timeout.as_secs() + 1,
        ..Limits::default()
    };
    spec
}

impl Tool for Bash {
    fn name(&self) -> ToolName {
        ToolName::Bash
    }

    fn description(&self) -> &'static str {
        "Run `/bin/bash -c command` in a sandbox: no network, cleared environment, only the scratch directory writable"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "passed to /bin/bash -c"},
                "cmd": {"type": "string", "description": "another name for command"},
                "timeout_ms": {"type": "integer", "minimum": 1, "default": DEFAULT_TIMEOUT.as_millis() as u64},
                "cwd": {"type": "string", "description": "working directory inside the sandbox; relative to the scratch directory (the default)"}
            },
            "oneOf": [{"required": ["command"]}, {"required": ["cmd"]}],
            "additionalProperties": false
        })
    }

    fn check(&self, _ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        request(args).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let req = request(args)?;
        let now = Instant::now();
        let left = ctx.invocation.deadline.saturating_duration_since(now);
        if left.is_zero() {
            return Err(ToolError::Deadline);
        }
        let timeout = req.timeout.min(left);
        let out = sandbox::run_command(&spec(ctx, &req, timeout), b"", timeout, MAX_OUTPUT)
            .map_err(|e| ToolError::failed("sandbox", format!("failed to run the command: {e}")))?;
        if out.timed_out {
            if Instant::now() >= ctx.invocation.deadline {
                return Err(ToolError::Deadline);
            }
            return Err(ToolError::failed(
                "timeout",
                format!("the command was killed after {} ms", timeout.as_millis()),
            ));
        }
        let (exit_code, signal) = match out.exit {
            Exit::Code(code) => (Some(code), None),
            Exit::Signal(sig) => (None, Some(sig)),
        };
        Ok(json!({
            "exit_code": exit_code,
            "signal": signal,
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
            "truncated": out.truncated,
            "duration_ms": out.duration.as_millis() as u64,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_accept_cmd_and_bound_the_cwd() {
        let r = request(&json!({"cmd": "echo hi"})).unwrap();
        assert_eq!(r.command, "echo hi");
        assert_eq!(r.cwd, Path::new(sandbox::SCRATCH_INSIDE));
        assert_eq!(r.timeout, DEFAULT_TIMEOUT);
        let r = request(&json!({"command": "true", "cwd": "sub/dir", "timeout_ms": 5})).unwrap();
        assert_eq!(r.cwd, Path::new(sandbox::SCRATCH_INSIDE).join("sub/dir"));
        assert_eq!(r.timeout, Duration::from_millis(5));
        for bad in [
            json!({}),
            json!({"command": "a", "cmd": "b"}),
            json!({"command": "a", "cwd": "../x"}),
            json!({"command": "a", "timeout_ms": 0}),
            json!({"command": "a", "env": {}}),
            json!({"command": 1}),
        ] {
            assert!(
                matches!(request(&bad), Err(ToolError::InvalidArgs(_))),
                "{bad}"
            );
        }
    }
}
