//! The spans of CONTRACT §8 and the guards that end them: `skill.invoke`, one
//! `skill.broker.tool_call` per call, a `skill.tool.<tool>.<op>` child around each tool's work,
//! and `skill.frontmatter.validate`.
//!
//! Every guard is an `Option` that is `None` when telemetry is off, so a hook costs one load and
//! one branch. Ids come from the SDK when traces are exported; a guard never invents a trace id
//! of its own — a span belongs to the trace of the [`TraceContext`] it was started under.

use std::borrow::Cow;
use std::time::Instant;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use serde_json::Value;

use super::metrics::tool_label;
use super::pipeline::Telemetry;
use crate::tools::ToolName;
use crate::util::TraceContext;

pub const INVOKE: &str = "skill.invoke";
pub const TOOL_CALL: &str = "skill.broker.tool_call";
pub const FRONTMATTER_VALIDATE: &str = "skill.frontmatter.validate";

/// Values a skill chooses (tool names, request ids) are cut to this many characters on spans.
const MAX_SKILL_VALUE: usize = 128;

/// The child span around one tool's own work, by tool (the table in docs/TELEMETRY.md).
pub fn tool_span_name(tool: ToolName) -> &'static str {
    match tool {
        ToolName::Read => "skill.tool.file.read",
        ToolName::Write => "skill.tool.file.write",
        ToolName::Edit => "skill.tool.file.edit",
        ToolName::Glob => "skill.tool.file.glob",
        ToolName::Grep => "skill.tool.file.grep",
        ToolName::Bash => "skill.tool.bash.exec",
        ToolName::MemoryRead => "skill.tool.memory.read",
        ToolName::MemorySearch => "skill.tool.memory.search",
        ToolName::MemoryEmit => "skill.tool.memory.emit",
        ToolName::HttpFetch => "skill.tool.http.fetch",
        ToolName::HttpPost => "skill.tool.http.post",
    }
}

/// How a tool call ended: the `outcome` of the span and of `skill_broker_tool_calls_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// The tool ran and failed, or the broker could not audit the call.
    Error,
    /// A policy check refused the call (tool, scope, file or domain), or its arguments were
    /// invalid.
    Denied,
    /// The invocation's deadline or the tool's own timeout ended the call.
    Timeout,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Denied => "denied",
            Self::Timeout => "timeout",
        }
    }
}

/// What the broker knows about a `tool.call` when it starts handling it. Borrowed, so building
/// one costs nothing when telemetry is off.
#[derive(Debug, Clone, Copy)]
pub struct CallInfo<'a> {
    pub invocation_id: &'a str,
    pub skill_id: &'a str,
    /// As the skill sent it (may name no tool at all).
    pub tool_name: &'a str,
    /// The broker's id for the call (`call_id` in the journal, `gen_ai.tool.call.id`).
    pub call_id: &'a str,
    /// The JSON-RPC request id; `None` for a notification.
    pub request_id: Option<&'a Value>,
    /// The call's `args` (their serialised size is measured only when traces are exported).
    pub args: &'a Value,
    /// The call's trace context: its valid `traceparent`, else the invocation's.
    pub trace: TraceContext,
}

/// What the broker knows about an invocation when it starts.
#[derive(Debug, Clone, Copy)]
pub struct InvokeInfo<'a> {
    pub invocation_id: &'a str,
    pub skill_id: &'a str,
    pub skill_version: &'a str,
    pub tenant_id: &'a str,
}

/// How an invocation ended, for the `skill.invoke` span (the `skill.invoked_completed` row's
/// values).
#[derive(Debug, Clone, Copy)]
pub struct InvokeEnd<'a> {
    /// `success`, `failure`, `panic`, `killed`, `timeout` or `interrupted`.
    pub outcome: &'a str,
    pub exit_code: Option<i64>,
    /// The name of the signal the skill died of (`SIGKILL`), if it did.
    pub signal: Option<&'a str>,
    pub tool_calls: u64,
    pub denied: u64,
}

impl<'a> InvokeEnd<'a> {
    /// From `invoke --json`'s summary object (CONTRACT §2), which holds exactly these values.
    pub fn from_summary(summary: &'a Value) -> Self {
        Self {
            outcome: summary["outcome"].as_str().unwrap_or("failure"),
            exit_code: summary["exit_code"].as_i64(),
            signal: summary["signal"].as_str(),
            tool_calls: summary["tool_calls"].as_u64().unwrap_or(0),
            denied: summary["denied"].as_u64().unwrap_or(0),
        }
    }
}

pub(crate) fn remote_parent(parent: TraceContext) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.span_id),
        TraceFlags::new(parent.flags),
        true,
        TraceState::NONE,
    ))
}

/// The ids of the span a context holds, if it holds a valid one.
pub(crate) fn context_of(cx: &Context) -> Option<TraceContext> {
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| TraceContext {
        trace_id: sc.trace_id().to_bytes(),
        span_id: sc.span_id().to_bytes(),
        flags: sc.trace_flags().to_u8(),
    })
}

fn skill_value(text: &str) -> String {
    match text.char_indices().nth(MAX_SKILL_VALUE) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    }
}

/// `jsonrpc.request.id` as the semantic conventions render it: the id as a string, empty for
/// `null`.
fn request_id_text(id: &Value) -> String {
    match id {
        Value::String(s) => skill_value(s),
        Value::Null => String::new(),
        other => skill_value(&other.to_string()),
    }
}

/// The length of a value's JSON text, counted without building it.
fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail, and a `Value` always serialises.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

fn start(
    telemetry: &Telemetry,
    name: &'static str,
    kind: SpanKind,
    parent: &Context,
    attributes: Vec<KeyValue>,
) -> Option<Context> {
    let tracer = telemetry.tracer.as_ref()?;
    let span = tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(tracer, parent);
    Some(parent.with_span(span))
}

fn fail(cx: &Context, error_type: &str) {
    let span = cx.span();
    span.set_attribute(KeyValue::new("error.type", error_type.to_owned()));
    span.set_status(Status::error(error_type.to_owned()));
}

/// `skill.invoke`, from the start of an invocation to its end. Also keeps
/// `skill_broker_active_invocations` up to date (decremented on drop if never ended).
#[derive(Debug)]
pub struct InvokeSpan {
    trace: TraceContext,
    active: Option<ActiveInvoke>,
}

#[derive(Debug)]
struct ActiveInvoke {
    telemetry: &'static Telemetry,
    cx: Option<Context>,
    started: Instant,
}

impl InvokeSpan {
    pub(crate) fn start(
        telemetry: Option<&'static Telemetry>,
        parent: Option<TraceContext>,
        info: &InvokeInfo<'_>,
    ) -> Self {
        let fallback = || parent.map_or_else(TraceContext::new_root, |p| p.child());
        let Some(telemetry) = telemetry else {
            return Self {
                trace: fallback(),
                active: None,
            };
        };
        let parent_cx = parent.map_or_else(Context::new, remote_parent);
        let cx = start(
            telemetry,
            INVOKE,
            SpanKind::Internal,
            &parent_cx,
            vec![
                KeyValue::new("invocation_id", info.invocation_id.to_owned()),
                KeyValue::new("skill_id", info.skill_id.to_owned()),
                KeyValue::new("skill_version", info.skill_version.to_owned()),
                KeyValue::new("tenant_id", info.tenant_id.to_owned()),
            ],
        );
        if let Some(instruments) = &telemetry.instruments {
            instruments.invocation_started();
        }
        let trace = cx.as_ref().and_then(context_of).unwrap_or_else(fallback);
        Self {
            trace,
            active: Some(ActiveInvoke {
                telemetry,
                cx,
                started: Instant::now(),
            }),
        }
    }

    /// The trace context the invocation runs under: `skill.invoke`'s own ids when traces are
    /// exported, else a child of the broker's `$TRACEPARENT`, else a new root. The skill gets it
    /// as `TRACEPARENT`, and calls without a valid traceparent fall back to it.
    pub fn trace_context(&self) -> TraceContext {
        self.trace
    }

    pub fn end(mut self, end: &InvokeEnd<'_>) {
        let Some(active) = self.active.take() else {
            return;
        };
        if let Some(cx) = &active.cx {
            let span = cx.span();
            span.set_attributes([
                KeyValue::new("outcome", end.outcome.to_owned()),
                KeyValue::new("duration_ms", active.started.elapsed().as_millis() as i64),
                KeyValue::new("tool_calls", end.tool_calls as i64),
                KeyValue::new("denied", end.denied as i64),
            ]);
            if let Some(code) = end.exit_code {
                span.set_attribute(KeyValue::new("exit_code", code));
            }
            if let Some(signal) = end.signal {
                span.set_attribute(KeyValue::new("signal", signal.to_owned()));
            }
            if end.outcome != "success" {
                fail(cx, end.outcome);
            }
            span.end();
        }
        active.finish();
    }
}

impl ActiveInvoke {
    fn finish(self) {
        if let Some(instruments) = &self.telemetry.instruments {
            instruments.invocation_ended();
        }
    }
}

impl Drop for InvokeSpan {
    /// Dropped without [`InvokeSpan::end`]: the invocation failed before it could finish (a
    /// refused id, a sandbox that could not start). The span says so.
    fn drop(&mut self) {
        if let Some(active) = self.active.take() {
            if let Some(cx) = &active.cx {
                fail(cx, "invocation_failed");
                cx.span().end();
            }
            active.finish();
        }
    }
}

/// `skill.broker.tool_call`, from the moment the broker reads a `tool.call` to its response.
/// Ending it also counts the call in `skill_broker_tool_calls_total` and
/// `skill_broker_tool_duration_seconds`.
#[derive(Debug)]
#[must_use = "end the span with its outcome"]
pub struct ToolCallSpan {
    // Boxed so that the disabled guard is one null pointer moved around.
    active: Option<Box<ActiveCall>>,
}

#[derive(Debug)]
struct ActiveCall {
    telemetry: &'static Telemetry,
    started: Instant,
    tool_label: &'static str,
    cx: Option<Context>,
}

// The hooks are split into an inlined check and an out-of-line body, so that with telemetry off
// a tool call pays for a few branches and nothing else (benches/telemetry_overhead.rs).
impl ToolCallSpan {
    #[inline]
    pub(crate) fn start(telemetry: Option<&'static Telemetry>, info: &CallInfo<'_>) -> Self {
        Self {
            active: telemetry.map(|t| ActiveCall::start(t, info)),
        }
    }

    /// The ids of this span when traces are exported: journal rows of the call are exported as
    /// log records carrying them.
    #[inline]
    pub fn trace_context(&self) -> Option<TraceContext> {
        self.active.as_ref()?.cx.as_ref().and_then(context_of)
    }

    /// A child span around the tool's own work (see [`tool_span_name`]).
    #[inline]
    pub fn child(&self, name: &'static str) -> ChildSpan {
        ChildSpan {
            cx: self.active.as_ref().and_then(|a| a.child(name)),
        }
    }

    /// Ends the span. `result` is the tool's result (its size is measured only when traced);
    /// `error_type` names the failure for `error.type` (the JSON-RPC error's `data.reason` or
    /// the tool error's `kind`) and defaults to the outcome.
    #[inline]
    pub fn end(mut self, outcome: Outcome, result: Option<&Value>, error_type: Option<&str>) {
        if let Some(active) = self.active.take() {
            active.end(outcome, result, error_type);
        }
    }
}

impl ActiveCall {
    fn start(telemetry: &'static Telemetry, info: &CallInfo<'_>) -> Box<Self> {
        let cx = telemetry.tracer.as_ref().and_then(|_| {
            let tool = skill_value(info.tool_name);
            let mut attributes = vec![
                KeyValue::new("skill_id", info.skill_id.to_owned()),
                KeyValue::new("tool_name", tool.clone()),
                KeyValue::new("invocation_id", info.invocation_id.to_owned()),
                KeyValue::new("args_size_bytes", json_size(info.args) as i64),
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool),
                KeyValue::new("gen_ai.tool.call.id", info.call_id.to_owned()),
                KeyValue::new("rpc.system.name", "jsonrpc"),
                KeyValue::new("rpc.method", "tool.call"),
            ];
            if let Some(id) = info.request_id {
                attributes.push(KeyValue::new("jsonrpc.request.id", request_id_text(id)));
            }
            // The broker serves a request from another process: a server span whose parent is
            // the span id the skill sent.
            start(
                telemetry,
                TOOL_CALL,
                SpanKind::Server,
                &remote_parent(info.trace),
                attributes,
            )
        });
        Box::new(ActiveCall {
            telemetry,
            started: Instant::now(),
            tool_label: tool_label(info.tool_name),
            cx,
        })
    }

    fn child(&self, name: &'static str) -> Option<Context> {
        let parent = self.cx.as_ref()?;
        let kind = if name.starts_with("skill.tool.http.") {
            SpanKind::Client
        } else {
            SpanKind::Internal
        };
        start(self.telemetry, name, kind, parent, Vec::new())
    }

    fn end(self: Box<Self>, outcome: Outcome, result: Option<&Value>, error_type: Option<&str>) {
        let active = self;
        let elapsed = active.started.elapsed();
        if let Some(instruments) = &active.telemetry.instruments {
            instruments.tool_call(active.tool_label, outcome.as_str(), elapsed.as_secs_f64());
        }
        if let Some(cx) = &active.cx {
            let span = cx.span();
            span.set_attributes([
                KeyValue::new("outcome", outcome.as_str()),
                KeyValue::new("duration_ms", elapsed.as_millis() as i64),
                KeyValue::new("result_size_bytes", result.map_or(0, json_size) as i64),
            ]);
            if outcome != Outcome::Success {
                fail(cx, error_type.unwrap_or(outcome.as_str()));
            }
            span.end();
        }
    }
}

/// A `skill.tool.<tool>.<op>` span. Ends when dropped if not ended explicitly.
#[derive(Debug)]
pub struct ChildSpan {
    cx: Option<Context>,
}

impl ChildSpan {
    /// The ids of this span when traces are exported.
    #[inline]
    pub fn trace_context(&self) -> Option<TraceContext> {
        self.cx.as_ref().and_then(context_of)
    }

    /// The trace context an outgoing request made under this span carries (CONTRACT §5): this
    /// span as the parent when traces are exported, otherwise the call's own, unchanged.
    #[inline]
    pub fn outgoing(&self, call: TraceContext) -> TraceContext {
        self.trace_context().unwrap_or(call)
    }

    /// Ends the span, marking it failed with `error_type` if given.
    #[inline]
    pub fn end(self, error_type: Option<&str>) {
        if let Some(cx) = &self.cx {
            end_child(cx, error_type);
        }
    }
}

fn end_child(cx: &Context, error_type: Option<&str>) {
    if let Some(error_type) = error_type {
        fail(cx, error_type);
    }
    cx.span().end();
}

/// `skill.frontmatter.validate`; ending it counts `skill_frontmatter_validation_total`.
#[derive(Debug)]
pub struct ValidateSpan {
    active: Option<(&'static Telemetry, Option<Context>)>,
}

impl ValidateSpan {
    pub(crate) fn start(
        telemetry: Option<&'static Telemetry>,
        parent: Option<TraceContext>,
    ) -> Self {
        let Some(telemetry) = telemetry else {
            return Self { active: None };
        };
        let parent_cx = parent.map_or_else(Context::new, remote_parent);
        let cx = start(
            telemetry,
            FRONTMATTER_VALIDATE,
            SpanKind::Internal,
            &parent_cx,
            Vec::new(),
        );
        Self {
            active: Some((telemetry, cx)),
        }
    }

    /// `errors` is the number of problems found (0: valid). `skill_id` when it could be read.
    pub fn end(mut self, errors: usize, skill_id: Option<&str>) {
        let Some((telemetry, cx)) = self.active.take() else {
            return;
        };
        let outcome = if errors == 0 { "ok" } else { "invalid" };
        if let Some(instruments) = &telemetry.instruments {
            instruments.validation(outcome);
        }
        if let Some(cx) = &cx {
            let span = cx.span();
            span.set_attribute(KeyValue::new("outcome", outcome));
            span.set_attribute(KeyValue::new("error_count", errors as i64));
            if let Some(id) = skill_id {
                span.set_attribute(KeyValue::new("skill_id", Cow::Owned(skill_value(id))));
            }
            if errors > 0 {
                fail(cx, "invalid_frontmatter");
            }
            span.end();
        }
    }
}
