//! Telemetry: diagnostics logs through `tracing` on stderr, and OpenTelemetry traces, metrics and
//! journal-row logs over OTLP/HTTP (CONTRACT §8, docs/TELEMETRY.md).
//!
//! [`init`] runs once at the start of a command and returns a [`Guard`] whose
//! [`Guard::shutdown`] flushes within [`SHUTDOWN_BUDGET`]. Configuration comes only from the
//! standard `OTEL_*` variables; with none set nothing is built — no exporter, no provider, no
//! thread — and every hook below is a load of an empty cell and a branch.
//!
//! Telemetry must never change what a command does: an export failure is one warning on stderr,
//! never an error exit, and nothing here writes to stdout (stdout is the skill's). No async
//! runtime: exporters run on the SDK's own std threads and send through `ureq`.

mod config;
mod console;
mod http;
mod logs;
mod metrics;
mod pipeline;
mod spans;

use std::sync::OnceLock;
use std::time::Duration;

pub use config::{Config, Otlp, Protocol, Signal, SignalConfig};
pub use logs::JOURNAL_ROW_EVENT;
pub use metrics::{
    ACTIVE_INVOCATIONS, Direction, FRONTMATTER_VALIDATION_TOTAL, SOCKET_BYTES_TOTAL,
    TOOL_CALLS_TOTAL, TOOL_DURATION_SECONDS,
};
pub use spans::{
    CallInfo, ChildSpan, FRONTMATTER_VALIDATE, INVOKE, InvokeEnd, InvokeInfo, InvokeSpan, Outcome,
    TOOL_CALL, ToolCallSpan, ValidateSpan, tool_span_name,
};

use crate::journal::Journal;
use crate::util::TraceContext;
use pipeline::Telemetry;

/// The most the end of a command waits for telemetry to be sent.
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(2);

/// The process's providers, set once by [`init`]; empty when telemetry is off.
static TELEMETRY: OnceLock<Telemetry> = OnceLock::new();

#[inline]
fn get() -> Option<&'static Telemetry> {
    TELEMETRY.get()
}

/// What [`init`] sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Diagnostics on stderr and, when the `OTEL_*` variables ask for it, OpenTelemetry export.
    Export,
    /// Diagnostics on stderr only. For processes that must not start threads or open
    /// connections: the sandbox child (threads would break its namespace setup) and the client
    /// run inside a sandbox (no network there).
    DiagnosticsOnly,
}

/// Ends telemetry at the end of a command. Dropping it shuts down too, but only
/// [`Guard::shutdown`] is called where the command's own work is done.
#[derive(Debug)]
#[must_use = "call shutdown() when the command is done"]
pub struct Guard {
    done: bool,
}

/// Sets up `tracing` diagnostics on stderr (`RUST_LOG`, default `warn`) and, in
/// [`Mode::Export`], the exporters the `OTEL_*` variables ask for. Problems with the variables
/// are warnings; this never fails. A second call only returns another guard.
pub fn init(mode: Mode) -> Guard {
    init_diagnostics();
    if mode == Mode::Export && get().is_none() {
        let config = Config::from_env();
        let mut warnings = config.warnings.clone();
        if config.any_enabled() {
            let (telemetry, build_warnings) = Telemetry::build(&config);
            warnings.extend(build_warnings);
            // Only a racing second init could find the cell full; its providers then stay unused.
            let _ = TELEMETRY.set(telemetry);
        }
        for warning in warnings {
            eprintln!("cyberos: telemetry: {warning}");
        }
    }
    Guard { done: false }
}

fn init_diagnostics() {
    use std::io::IsTerminal as _;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(&spec)
            .unwrap_or_else(|e| {
                eprintln!("cyberos: RUST_LOG {spec:?} is invalid ({e}); using warn");
                tracing_subscriber::EnvFilter::new("warn")
            }),
        _ => tracing_subscriber::EnvFilter::new("warn"),
    };
    // Fails only when a subscriber is already installed (a second init in one process).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

impl Guard {
    /// Sends what is still buffered and stops the exporters, in at most [`SHUTDOWN_BUDGET`].
    /// A failure is one `cyberos: telemetry: ...` warning on stderr; the command's exit code is
    /// never affected.
    pub fn shutdown(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        if let Some(Err(problem)) = get().map(|t| t.shutdown(SHUTDOWN_BUDGET)) {
            eprintln!("cyberos: telemetry: {problem}; that telemetry is lost");
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.finish();
    }
}

/// True when any exporter was built. Hooks need not check it.
pub fn enabled() -> bool {
    get().is_some()
}

/// Starts `skill.invoke`: a child of the broker's `$TRACEPARENT` when there is one, else a root.
pub fn invoke_span(parent: Option<TraceContext>, info: &InvokeInfo<'_>) -> InvokeSpan {
    InvokeSpan::start(get(), parent, info)
}

/// Starts `skill.broker.tool_call` in the trace of `info.trace`, its parent being the span id
/// the skill sent.
#[inline]
pub fn tool_call(info: &CallInfo<'_>) -> ToolCallSpan {
    ToolCallSpan::start(get(), info)
}

/// Starts `skill.frontmatter.validate`: a child of the process's `$TRACEPARENT` when it has a
/// valid one, else a root (validation runs before an invocation, and so before `skill.invoke`).
pub fn frontmatter_validate() -> ValidateSpan {
    let telemetry = get();
    let parent = telemetry.and_then(|_| env_traceparent());
    ValidateSpan::start(telemetry, parent)
}

/// The process's own `$TRACEPARENT`, if valid (`skill invoke` reads it the same way).
fn env_traceparent() -> Option<TraceContext> {
    std::env::var("TRACEPARENT")
        .ok()
        .and_then(|v| TraceContext::parse(&v))
}

/// Counts bytes read from or written to a broker socket.
#[inline]
pub fn socket_bytes(direction: Direction, bytes: usize) {
    if let Some(instruments) = get().and_then(|t| t.instruments.as_ref()) {
        instruments.socket_bytes(direction, bytes as u64);
    }
}

/// Exports the journal row `seq` of `invocation_id`, just appended, as a log record carrying
/// `trace` (the ids of the row's call, or of the invocation for its own rows). Reads the row
/// back (for its `ts`) only when logs are exported; otherwise does nothing.
pub fn export_journal_row(journal: &Journal, invocation_id: &str, seq: i64, trace: &TraceContext) {
    let Some(telemetry) = get().filter(|t| t.logger.is_some()) else {
        return;
    };
    match journal.rows_for(invocation_id, seq - 1) {
        Ok(rows) => {
            if let Some(row) = rows.iter().find(|r| r.seq == seq) {
                logs::export_row(telemetry, row, Some(*trace));
            }
        }
        Err(e) => tracing::warn!("failed to read back journal row {seq} for export: {e}"),
    }
}

#[cfg(test)]
mod tests;
