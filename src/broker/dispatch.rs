//! Method dispatch and enforcement for one invocation: `tool.call` (disallowed → allowed →
//! registry → arguments, journal rows around the call), `tool.list` and `broker.status`. Runs on
//! worker threads; shares nothing mutable but counters.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde_json::{Value, json};

use crate::broker::jsonrpc::{
    self, INTERNAL_ERROR, Item, METHOD_NOT_FOUND, Message, Request, RpcError,
};
use crate::journal::kind;
use crate::telemetry;
use crate::tools::{CallContext, Invocation, Tool, ToolError, ToolName};
use crate::util::{self, TraceContext};

/// Responses larger than this become `response_too_large` (CONTRACT §4).
pub const MAX_RESPONSE: usize = 16 * 1024 * 1024;
/// Requests larger than this are skipped and answered `request_too_large`.
pub const MAX_REQUEST: usize = 1024 * 1024;

pub type Registry = BTreeMap<ToolName, Box<dyn Tool>>;

/// A journal row could not be written (already reported on stderr).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the journal row could not be written")]
pub struct Unaudited;

/// Everything the dispatcher of one invocation needs, shared by the loop and the workers.
pub struct Shared {
    pub inv: Invocation,
    pub registry: &'static Registry,
    pub audit_required: bool,
    /// The invocation's trace context (from the broker's $TRACEPARENT, else new).
    pub trace: TraceContext,
    pub started_at_ms: i64,
    pub deadline_at_ms: i64,
    pub tool_calls: AtomicU64,
    pub denied: AtomicU64,
    next_call: AtomicU64,
    last_tool_call: Mutex<Option<String>>,
    journal_warned: AtomicBool,
    /// The `tool.list` result, serialised on first use: it cannot change during an invocation.
    tool_list: OnceLock<Vec<u8>>,
}

impl Shared {
    pub fn new(
        inv: Invocation,
        registry: &'static Registry,
        audit_required: bool,
        trace: TraceContext,
        started_at_ms: i64,
        deadline_at_ms: i64,
        journal_warned: bool,
    ) -> Self {
        Self {
            inv,
            registry,
            audit_required,
            trace,
            started_at_ms,
            deadline_at_ms,
            tool_calls: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            next_call: AtomicU64::new(1),
            last_tool_call: Mutex::new(None),
            journal_warned: AtomicBool::new(journal_warned),
            tool_list: OnceLock::new(),
        }
    }

    /// The call id of the most recent `tool.call`, if any.
    pub fn last_tool_call(&self) -> Option<String> {
        self.last_tool_call
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Appends a journal row, stamping invocation_id, skill_id and trace_id. A failure is reported
    /// once per invocation on stderr and returned, so `--audit required` can refuse the call.
    pub fn record(
        &self,
        kind: &str,
        trace: &TraceContext,
        mut payload: Value,
    ) -> Result<i64, Unaudited> {
        if let Value::Object(obj) = &mut payload {
            obj.insert("invocation_id".into(), json!(self.inv.invocation_id));
            obj.insert("skill_id".into(), json!(self.inv.skill_id));
            obj.insert("trace_id".into(), json!(trace.trace_id_hex()));
        }
        let Some(journal) = &self.inv.journal else {
            return Err(Unaudited);
        };
        let seq = journal.append(kind, &payload).map_err(|err| {
            self.warn_journal(&err.to_string());
            Unaudited
        })?;
        telemetry::export_journal_row(journal, &self.inv.invocation_id, seq, trace);
        Ok(seq)
    }

    /// The once-per-invocation journal warning (CONTRACT §7).
    pub fn warn_journal(&self, detail: &str) {
        if !self.journal_warned.swap(true, Ordering::Relaxed) {
            eprintln!("cyberos: journal unavailable, tool calls continue unaudited: {detail}");
        }
    }

    fn status(&self) -> Value {
        let now = util::now_ms();
        json!({
            "invocation_id": self.inv.invocation_id,
            "skill_id": self.inv.skill_id,
            "tenant_id": self.inv.tenant_id,
            "started_at": util::rfc3339_ms(self.started_at_ms),
            "deadline_at": util::rfc3339_ms(self.deadline_at_ms),
            "remaining_ms": (self.deadline_at_ms - now).max(0),
            "tool_calls": self.tool_calls.load(Ordering::Relaxed),
            "denied": self.denied.load(Ordering::Relaxed),
        })
    }

    fn tool_list(&self) -> &[u8] {
        self.tool_list
            .get_or_init(|| to_vec(&self.build_tool_list()))
    }

    fn build_tool_list(&self) -> Value {
        let tools: Vec<Value> = self
            .inv
            .policy
            .callable_tools()
            .filter_map(|name| self.registry.get(&name))
            .map(|tool| {
                json!({
                    "name": tool.name().as_str(),
                    "description": tool.description(),
                    "input_schema": tool.input_schema(),
                })
            })
            .collect();
        json!({ "tools": tools })
    }
}

/// True when handling `message` may block (it contains a `tool.call`), so it belongs on a worker
/// rather than the event loop.
pub fn needs_worker(message: &Message) -> bool {
    let is_call = |item: &Item| matches!(item, Item::Call(r) if r.method == "tool.call");
    match message {
        Message::Single(item) => is_call(item),
        Message::Batch(items) => items.iter().any(is_call),
        Message::Error(_) => false,
    }
}

/// Handles a parsed frame and returns the response body, or None when nothing is to be sent
/// (notifications only).
pub fn handle(shared: &Shared, message: Message) -> Option<Vec<u8>> {
    match message {
        Message::Error(err) => Some(to_vec(&err)),
        Message::Single(item) => handle_item(shared, item).map(|a| a.body),
        Message::Batch(items) => {
            let answers: Vec<Answer> = items
                .into_iter()
                .filter_map(|item| handle_item(shared, item))
                .collect();
            if answers.is_empty() {
                return None;
            }
            // The array is the items' own bytes joined: each was serialised exactly once.
            let size = answers.iter().map(|a| a.body.len() + 1).sum::<usize>() + 1;
            if size <= MAX_RESPONSE {
                let mut body = Vec::with_capacity(size);
                body.push(b'[');
                for (i, answer) in answers.iter().enumerate() {
                    if i > 0 {
                        body.push(b',');
                    }
                    body.extend_from_slice(&answer.body);
                }
                body.push(b']');
                return Some(body);
            }
            // Each item's own cap was applied in `handle_item`, so this is a batch whose sum is
            // too large: answer each id with the error.
            let err = too_large_error("response_too_large", size, MAX_RESPONSE);
            let replaced: Vec<Value> = answers
                .iter()
                .map(|a| jsonrpc::error_response(&a.id, &err))
                .collect();
            Some(to_vec(&Value::Array(replaced)))
        }
    }
}

fn to_vec(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// One item's response, serialised, with its id (needed if the whole batch is too large).
struct Answer {
    id: Value,
    body: Vec<u8>,
}

/// A method's result: a value, or bytes serialised once per invocation (`tool.list`).
enum Reply<'a> {
    Value(Value),
    Raw(&'a [u8]),
}

/// `{"id":ID,"jsonrpc":"2.0","result":RESULT}`, written directly (the key order serde_json
/// gives the equivalent object) so that a large result is serialised once.
fn success_body(id: &Value, reply: &Reply<'_>) -> Vec<u8> {
    let mut body = Vec::with_capacity(64);
    body.extend_from_slice(b"{\"id\":");
    // Writing JSON values into a Vec cannot fail.
    let _infallible = serde_json::to_writer(&mut body, id);
    body.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":");
    match reply {
        Reply::Value(value) => {
            let _infallible = serde_json::to_writer(&mut body, value);
        }
        Reply::Raw(bytes) => body.extend_from_slice(bytes),
    }
    body.push(b'}');
    body
}

/// The error answered for a frame or response over its cap.
pub fn too_large_error(reason: &str, size: usize, limit: usize) -> RpcError {
    RpcError::new(
        INTERNAL_ERROR,
        reason,
        Some(json!({"reason": reason, "size": size, "limit": limit})),
    )
}

/// The response to a request frame that was skipped for being too large.
pub fn request_too_large(len: u32) -> Vec<u8> {
    let err = too_large_error("request_too_large", len as usize, MAX_REQUEST);
    serde_json::to_vec(&jsonrpc::error_response(&Value::Null, &err)).unwrap_or_default()
}

fn handle_item(shared: &Shared, item: Item) -> Option<Answer> {
    let request = match item {
        Item::Invalid(err) => {
            let id = err.get("id").cloned().unwrap_or(Value::Null);
            return Some(Answer {
                id,
                body: to_vec(&err),
            });
        }
        Item::Call(request) => request,
    };
    let Request { id, method, params } = request;
    let outcome = match method.as_str() {
        "tool.call" => observed_tool_call(shared, &params, id.as_ref()).map(Reply::Value),
        "tool.list" => Ok(Reply::Raw(shared.tool_list())),
        "broker.status" => Ok(Reply::Value(shared.status())),
        other => Err(RpcError::new(
            METHOD_NOT_FOUND,
            "Method not found",
            Some(json!({"method": other})),
        )),
    };
    // A notification gets no response, whatever happened.
    let id = id?;
    let body = match outcome {
        Ok(reply) => {
            let body = success_body(&id, &reply);
            if body.len() > MAX_RESPONSE {
                to_vec(&jsonrpc::error_response(
                    &id,
                    &too_large_error("response_too_large", body.len(), MAX_RESPONSE),
                ))
            } else {
                body
            }
        }
        Err(err) => to_vec(&jsonrpc::error_response(&id, &err)),
    };
    Some(Answer { id, body })
}

struct CallParams {
    tool: String,
    args: Value,
    trace: TraceContext,
}

fn call_params(shared: &Shared, params: &Value) -> Result<CallParams, RpcError> {
    let Value::Object(obj) = params else {
        return Err(RpcError::invalid_params(
            "tool.call params must be an object {tool, args}",
        ));
    };
    let tool = match obj.get("tool") {
        Some(Value::String(t)) => t.clone(),
        _ => return Err(RpcError::invalid_params("tool.call needs a string `tool`")),
    };
    let args = match obj.get("args") {
        None | Some(Value::Null) => json!({}),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "tool.call `args` must be an object",
            ));
        }
    };
    // A missing or invalid traceparent falls back to the invocation's context (CONTRACT §4).
    let trace = obj
        .get("traceparent")
        .and_then(Value::as_str)
        .and_then(TraceContext::parse)
        .unwrap_or(shared.trace);
    Ok(CallParams { tool, args, trace })
}

/// [`tool_call`] with its `skill.broker.tool_call` span and tool-call metrics (CONTRACT §8),
/// ended here from the response alone.
fn observed_tool_call(
    shared: &Shared,
    params: &Value,
    request_id: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut span = None;
    let response = tool_call(shared, params, request_id, &mut span);
    if let Some(span) = span {
        let (outcome, error_type) = call_outcome(&response);
        span.end(outcome, response.as_ref().ok(), error_type);
    }
    response
}

/// The telemetry outcome of a call and its `error.type`: a policy refusal or invalid arguments
/// is `denied`, the deadline or a tool's own timeout is `timeout`, anything else failing `error`.
fn call_outcome(response: &Result<Value, RpcError>) -> (telemetry::Outcome, Option<&str>) {
    let Err(err) = response else {
        return (telemetry::Outcome::Success, None);
    };
    let data = |key: &str| {
        err.data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
    };
    let reason = data("reason").unwrap_or(err.message.as_str());
    match err.message.as_str() {
        _ if err.code == jsonrpc::INVALID_PARAMS => (telemetry::Outcome::Denied, Some(reason)),
        "tool_not_allowed" | "scope_violation" | "file_violation" | "domain_violation" => {
            (telemetry::Outcome::Denied, Some(reason))
        }
        "deadline" => (telemetry::Outcome::Timeout, Some(reason)),
        "tool_error" if data("kind") == Some("timeout") => {
            (telemetry::Outcome::Timeout, Some("timeout"))
        }
        "tool_error" => (telemetry::Outcome::Error, data("kind").or(Some(reason))),
        _ => (telemetry::Outcome::Error, Some(reason)),
    }
}

/// `error.type` of a tool's own span: the failure kind, else the denial reason.
fn tool_error_type(err: &ToolError) -> &'static str {
    match err {
        ToolError::Failed { kind, .. } => kind,
        other => error_reason(other).0,
    }
}

fn tool_call(
    shared: &Shared,
    params: &Value,
    request_id: Option<&Value>,
    span: &mut Option<telemetry::ToolCallSpan>,
) -> Result<Value, RpcError> {
    let CallParams {
        tool: tool_name,
        args,
        trace,
    } = call_params(shared, params)?;
    let call_id = format!("call-{}", shared.next_call.fetch_add(1, Ordering::Relaxed));
    shared.tool_calls.fetch_add(1, Ordering::Relaxed);
    *shared
        .last_tool_call
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(call_id.clone());
    let skill_id = shared.inv.skill_id.as_str();
    let args_hash = util::canonical_hash(&args);
    let span = span.insert(telemetry::tool_call(&telemetry::CallInfo {
        invocation_id: &shared.inv.invocation_id,
        skill_id,
        tool_name: &tool_name,
        call_id: &call_id,
        request_id,
        args: &args,
        trace,
    }));
    // Traced, the call's rows and its tool run under the tool_call span (same trace id).
    let trace = span.trace_context().unwrap_or(trace);

    let deny = |reason: &str, detail: Value, err: RpcError| {
        shared.denied.fetch_add(1, Ordering::Relaxed);
        // A denial is final whether or not the row could be written.
        let _unaudited = shared.record(
            kind::TOOL_DENIED,
            &trace,
            json!({"call_id": call_id, "tool_name": tool_name, "reason": reason,
                   "attempted_args_hash": args_hash, "detail": detail}),
        );
        err
    };

    let name = match shared.inv.policy.check_tool(&tool_name) {
        Ok(name) => name,
        Err(denial) => {
            let reason = denial.reason();
            return Err(deny(
                reason,
                Value::Null,
                tool_not_allowed(reason, &tool_name, skill_id),
            ));
        }
    };
    let Some(tool) = shared.registry.get(&name) else {
        let reason = "unknown_tool";
        return Err(deny(
            reason,
            Value::Null,
            tool_not_allowed(reason, &tool_name, skill_id),
        ));
    };
    let ctx = CallContext {
        invocation: &shared.inv,
        call_id: &call_id,
        trace,
    };
    if let Err(err) = tool.check(&ctx, &args) {
        let (reason, detail) = error_reason(&err);
        return Err(deny(reason, detail, tool_error(&err, &tool_name, skill_id)));
    }

    let started = shared.record(
        kind::TOOL_CALL_STARTED,
        &trace,
        json!({"call_id": call_id, "tool_name": tool_name, "args_hash": args_hash}),
    );
    if started.is_err() && shared.audit_required {
        return Err(RpcError::new(
            INTERNAL_ERROR,
            "audit_unavailable",
            Some(json!({"reason": "audit_unavailable", "tool": tool_name, "skill_id": skill_id})),
        ));
    }

    let clock = Instant::now();
    // The tool's own span; an HTTP tool's outgoing traceparent names it (CONTRACT §5).
    let tool_span = span.child(telemetry::tool_span_name(name));
    let ctx = CallContext {
        trace: tool_span.outgoing(ctx.trace),
        ..ctx
    };
    let mut result = tool.call(&ctx, &args);
    tool_span.end(result.as_ref().err().map(tool_error_type));
    if result.is_ok() && Instant::now() > shared.inv.deadline {
        result = Err(ToolError::Deadline);
    }
    let duration_ms = clock.elapsed().as_millis() as u64;
    let (outcome, response) = match result {
        Ok(value) => ("success", Ok(value)),
        Err(err) => {
            let outcome = match &err {
                ToolError::Deadline
                | ToolError::Failed {
                    kind: "timeout", ..
                } => "timeout",
                _ => "error",
            };
            (outcome, Err(tool_error(&err, &tool_name, skill_id)))
        }
    };
    let result_hash = match &response {
        Ok(value) => util::canonical_hash(value),
        Err(err) => util::canonical_hash(
            &json!({"code": err.code, "message": err.message, "data": err.data}),
        ),
    };
    let _unaudited = shared.record(
        kind::TOOL_CALL_COMPLETED,
        &trace,
        json!({"call_id": call_id, "tool_name": tool_name, "outcome": outcome,
               "duration_ms": duration_ms, "result_hash": result_hash}),
    );
    response
}

fn tool_not_allowed(reason: &str, tool: &str, skill_id: &str) -> RpcError {
    RpcError::new(
        INTERNAL_ERROR,
        "tool_not_allowed",
        Some(json!({"reason": reason, "tool": tool, "skill_id": skill_id})),
    )
}

/// The journal `reason` and `detail` of a tool error.
fn error_reason(err: &ToolError) -> (&'static str, Value) {
    match err {
        ToolError::InvalidArgs(detail) => ("invalid_args", json!(detail)),
        ToolError::Scope { path } => ("scope_violation", json!({"path": path})),
        ToolError::File { path } => ("file_violation", json!({"path": path})),
        ToolError::Domain { host, detail } => {
            ("domain_violation", json!({"host": host, "detail": detail}))
        }
        ToolError::Failed { kind, detail } => {
            ("tool_error", json!({"kind": kind, "detail": detail}))
        }
        ToolError::Deadline => ("deadline", Value::Null),
    }
}

/// The JSON-RPC error for a tool error (CONTRACT §4's table).
fn tool_error(err: &ToolError, tool: &str, skill_id: &str) -> RpcError {
    let (message, data) = match err {
        ToolError::InvalidArgs(detail) => return RpcError::invalid_params(detail.clone()),
        ToolError::Scope { path } => (
            "scope_violation",
            json!({"reason": "scope_violation", "path": path, "tool": tool, "skill_id": skill_id}),
        ),
        ToolError::File { path } => (
            "file_violation",
            json!({"reason": "file_violation", "path": path, "tool": tool, "skill_id": skill_id}),
        ),
        ToolError::Domain { host, detail } => (
            "domain_violation",
            json!({"reason": "domain_violation", "host": host, "detail": detail, "tool": tool,
                   "skill_id": skill_id}),
        ),
        ToolError::Failed { kind, detail } => (
            "tool_error",
            json!({"reason": "tool_error", "kind": kind, "detail": detail, "tool": tool}),
        ),
        ToolError::Deadline => ("deadline", json!({"reason": "deadline", "tool": tool})),
    };
    RpcError::new(INTERNAL_ERROR, message, Some(data))
}
