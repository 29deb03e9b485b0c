//! The native tools of CONTRACT §5 behind one [`Tool`] trait, and the registry the broker
//! dispatches through. Tools know nothing of sockets or JSON-RPC: they take parsed arguments and a
//! [`CallContext`], and return a JSON result or a [`ToolError`].

pub mod bash;
pub mod files;
mod fsutil;
pub mod http;
mod http_guard;
#[cfg(test)]
mod http_tests;
pub mod memory;
mod memory_index;
pub mod memory_search;
pub mod search;
mod sys;
#[cfg(test)]
mod testutil;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::journal::Journal;
use crate::skill::policy::Policy;
use crate::util::TraceContext;

/// Every tool name of CONTRACT §5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ToolName {
    Read,
    Write,
    Edit,
    Glob,
    Grep,
    Bash,
    MemoryRead,
    MemorySearch,
    MemoryEmit,
    HttpFetch,
    HttpPost,
}

impl ToolName {
    pub const ALL: [ToolName; 11] = [
        Self::Read,
        Self::Write,
        Self::Edit,
        Self::Glob,
        Self::Grep,
        Self::Bash,
        Self::MemoryRead,
        Self::MemorySearch,
        Self::MemoryEmit,
        Self::HttpFetch,
        Self::HttpPost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "Read",
            Self::Write => "Write",
            Self::Edit => "Edit",
            Self::Glob => "Glob",
            Self::Grep => "Grep",
            Self::Bash => "Bash",
            Self::MemoryRead => "MemoryRead",
            Self::MemorySearch => "MemorySearch",
            Self::MemoryEmit => "MemoryEmit",
            Self::HttpFetch => "HttpFetch",
            Self::HttpPost => "HttpPost",
        }
    }

    /// The tool with exactly this name (names are case-sensitive).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `--resolve HOST:PORT:ADDR` pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvePin {
    pub host: String,
    pub port: u16,
    pub addr: std::net::IpAddr,
}

/// What every tool call of one invocation shares. Built once by the broker.
pub struct Invocation {
    pub invocation_id: String,
    pub skill_id: String,
    pub tenant_id: String,
    pub sync_class: &'static str,
    /// `$CYBEROS_HOME/memory`, created before the skill starts.
    pub memory_root: PathBuf,
    /// The skill's scratch directory on the host (its HOME and TMPDIR inside the sandbox).
    pub scratch_dir: PathBuf,
    pub resolve: Vec<ResolvePin>,
    pub policy: Arc<Policy>,
    /// The journal, when it could be opened (MemoryEmit appends to it).
    pub journal: Option<Arc<Journal>>,
    /// When the invocation's budget runs out (100 %).
    pub deadline: Instant,
    /// `--sandbox`: the Bash tool's sandbox is held to the same standard as the skill's.
    pub sandbox_mode: crate::sandbox::Mode,
}

impl Invocation {
    /// An invocation outside a broker (tests, benchmarks, fuzz targets): a fixed id, the nil
    /// tenant, private sync class, no `--resolve` pins, no journal, best-effort sandboxing and an
    /// hour to run. The fields are public: set whatever differs.
    pub fn standalone(
        skill_id: impl Into<String>,
        policy: Arc<Policy>,
        memory_root: PathBuf,
        scratch_dir: PathBuf,
    ) -> Self {
        Self {
            invocation_id: "00000000-0000-4000-8000-000000000001".into(),
            skill_id: skill_id.into(),
            tenant_id: "00000000-0000-0000-0000-000000000000".into(),
            sync_class: "private",
            memory_root,
            scratch_dir,
            resolve: Vec::new(),
            policy,
            journal: None,
            deadline: Instant::now() + Duration::from_secs(3600),
            sandbox_mode: crate::sandbox::Mode::BestEffort,
        }
    }
}

/// One `tool.call` as a tool sees it.
pub struct CallContext<'a> {
    pub invocation: &'a Invocation,
    /// The broker's id for this call (`call_id` in the journal).
    pub call_id: &'a str,
    /// The call's trace context (from its `traceparent`, else the invocation's).
    pub trace: TraceContext,
}

/// Why a tool call did not produce a result. The broker maps each variant to its JSON-RPC error
/// (CONTRACT §4); the first four are policy denials, journalled as `skill.tool_denied` when
/// raised by [`Tool::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The arguments do not fit the tool's input schema: JSON-RPC -32602.
    InvalidArgs(String),
    /// A memory path outside `allowed_memory_scopes` (the canonical path).
    Scope { path: String },
    /// A file path outside `x-allowed-files` (the canonical path).
    File { path: String },
    /// A host outside `x-allowed-domains`, a refused address or a refused redirect hop.
    Domain { host: String, detail: String },
    /// The tool ran and failed: `kind` is `not_found`, `io`, `timeout`, `http`, ...
    Failed { kind: &'static str, detail: String },
    /// The invocation's deadline passed while the call ran.
    Deadline,
}

impl ToolError {
    pub fn failed(kind: &'static str, detail: impl Into<String>) -> Self {
        Self::Failed {
            kind,
            detail: detail.into(),
        }
    }

    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::InvalidArgs(detail.into())
    }

    /// An I/O error as `tool_error`, `not_found` for ENOENT.
    pub fn io(context: &str, err: &std::io::Error) -> Self {
        let kind = if err.kind() == std::io::ErrorKind::NotFound {
            "not_found"
        } else {
            "io"
        };
        Self::failed(kind, format!("{context}: {err}"))
    }

    /// True for the policy denials (scope, file, domain).
    pub fn is_denial(&self) -> bool {
        matches!(
            self,
            Self::Scope { .. } | Self::File { .. } | Self::Domain { .. }
        )
    }
}

/// A native tool.
pub trait Tool: Send + Sync {
    fn name(&self) -> ToolName;
    /// One line for `tool.list`.
    fn description(&self) -> &'static str;
    /// JSON Schema (2020-12) of the arguments object.
    fn input_schema(&self) -> Value;
    /// Parses the arguments and checks them against the policy, without side effects. Runs before
    /// the `skill.tool_call_started` row; an error here is a denial or invalid params.
    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError>;
    /// Runs the call. Must re-check anything that can change between `check` and use (paths are
    /// re-resolved at open time, every redirect hop and every search result is filtered).
    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError>;
}

/// Parses a tool's arguments object into its typed form, mapping serde's message to -32602.
pub fn parse_args<T: serde::de::DeserializeOwned>(args: &Value) -> Result<T, ToolError> {
    if !args.is_object() {
        return Err(ToolError::invalid("args must be a JSON object"));
    }
    T::deserialize(args).map_err(|e| ToolError::invalid(e.to_string()))
}

/// A body as JSON: the text when it is UTF-8, else base64 with `"base64"` as its encoding. When
/// `truncated`, a multi-byte character cut by the cap is dropped rather than forcing base64.
/// Returns the bytes actually represented (what `content_hash` covers), the string and the encoding.
pub(crate) fn encode_body(
    mut bytes: Vec<u8>,
    truncated: bool,
) -> (Vec<u8>, String, Option<&'static str>) {
    use base64::Engine as _;
    let valid = match std::str::from_utf8(&bytes) {
        Ok(_) => Some(bytes.len()),
        Err(e) if truncated && e.error_len().is_none() => Some(e.valid_up_to()),
        Err(_) => None,
    };
    match valid {
        Some(len) => {
            bytes.truncate(len);
            // Lossless: the first `len` bytes are valid UTF-8.
            let text = String::from_utf8_lossy(&bytes).into_owned();
            (bytes, text, None)
        }
        None => {
            let text = base64::engine::general_purpose::STANDARD.encode(&bytes);
            (bytes, text, Some("base64"))
        }
    }
}

/// Every native tool, by name. Built once; the tools are stateless, so looking one up is a map
/// lookup and calling it borrows nothing mutable.
pub fn registry() -> &'static BTreeMap<ToolName, Box<dyn Tool>> {
    static REGISTRY: OnceLock<BTreeMap<ToolName, Box<dyn Tool>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let tools: Vec<Box<dyn Tool>> = vec![
            Box::new(files::Read),
            Box::new(files::Write),
            Box::new(files::Edit),
            Box::new(search::Glob),
            Box::new(search::Grep),
            Box::new(bash::Bash),
            Box::new(memory::MemoryRead),
            Box::new(memory_search::MemorySearch),
            Box::new(memory::MemoryEmit),
            Box::new(http::HttpFetch),
            Box::new(http::HttpPost),
        ];
        tools.into_iter().map(|t| (t.name(), t)).collect()
    })
}

/// The registered tool of this name, if any.
pub fn tool(name: ToolName) -> Option<&'static dyn Tool> {
    registry().get(&name).map(|t| t.as_ref())
}
