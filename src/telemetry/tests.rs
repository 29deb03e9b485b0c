//! The hooks against in-process exporters: span names, attributes, links, metric values and log
//! records, without a collector or the global state.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::Value as AttrValue;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::transform::logs::tonic::group_logs_by_resource_and_scope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogBatch, LogExporter, SdkLoggerProvider};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde_json::{Value, json};

use super::*;
use crate::journal::Row;
use crate::tools::ToolName;

#[derive(Debug, Clone, Default)]
struct Spans(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Spans {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// Captures metric exports as OTLP/JSON documents.
#[derive(Debug, Clone, Default)]
struct Metrics(Arc<Mutex<Vec<Value>>>);

impl PushMetricExporter for Metrics {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let doc = serde_json::to_value(ExportMetricsServiceRequest::from(metrics)).unwrap();
        self.0.lock().unwrap().push(doc);
        Ok(())
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

#[derive(Debug, Clone, Default)]
struct Logs(Arc<Mutex<Vec<Value>>>);

impl LogExporter for Logs {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let resource_logs = group_logs_by_resource_and_scope(&batch, &Default::default());
        let doc = serde_json::to_value(ExportLogsServiceRequest { resource_logs }).unwrap();
        self.0.lock().unwrap().push(doc);
        Ok(())
    }
}

struct Harness {
    telemetry: &'static Telemetry,
    spans: Spans,
    metrics: Metrics,
    logs: Logs,
}

impl Harness {
    fn new() -> Self {
        let (spans, metrics, logs) = (Spans::default(), Metrics::default(), Logs::default());
        let tracer = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let meter = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics.clone()).build())
            .build();
        let logger = SdkLoggerProvider::builder()
            .with_simple_exporter(logs.clone())
            .build();
        let telemetry = Box::leak(Box::new(Telemetry::from_providers(
            Some(tracer),
            Some(meter),
            Some(logger),
        )));
        Self {
            telemetry,
            spans,
            metrics,
            logs,
        }
    }

    fn spans(&self) -> Vec<SpanData> {
        self.spans.0.lock().unwrap().clone()
    }

    /// The data points of metric `name` in the last export, as (attributes, value) pairs.
    fn points(&self, name: &str) -> Vec<(Value, Value)> {
        self.telemetry.flush_metrics();
        let docs = self.metrics.0.lock().unwrap();
        let doc = docs.last().expect("a metrics export");
        let mut out = Vec::new();
        for metric in doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
            .as_array()
            .unwrap()
        {
            if metric["name"] != name {
                continue;
            }
            let data = metric
                .get("sum")
                .or_else(|| metric.get("histogram"))
                .unwrap();
            for p in data["dataPoints"].as_array().unwrap() {
                let attrs: serde_json::Map<String, Value> = p["attributes"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|kv| (kv["key"].as_str().unwrap().to_owned(), kv["value"].clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                let value = p
                    .get("asInt")
                    .or_else(|| p.get("count"))
                    .cloned()
                    .unwrap_or(Value::Null);
                out.push((Value::Object(attrs), value));
            }
        }
        out
    }
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a AttrValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn call_info<'a>(
    tool: &'a str,
    call_id: &'a str,
    trace: TraceContext,
    id: Option<&'a Value>,
) -> CallInfo<'a> {
    CallInfo {
        invocation_id: "inv-1",
        skill_id: "demo",
        tool_name: tool,
        call_id,
        request_id: id,
        args: &ARGS,
        trace,
    }
}

static ARGS: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({"command": "echo hi"}));

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[test]
fn tool_call_span_is_a_child_of_the_skills_traceparent() {
    let h = Harness::new();
    let parent = TraceContext::parse(PARENT).unwrap();
    let id = json!("call-1");
    let span = ToolCallSpan::start(
        Some(h.telemetry),
        &call_info("Bash", "c-1", parent, Some(&id)),
    );
    let own = span.trace_context().unwrap();
    assert_eq!(own.trace_id, parent.trace_id);
    assert_ne!(own.span_id, parent.span_id);

    let child = span.child(tool_span_name(ToolName::Bash));
    let child_ctx = child.trace_context().unwrap();
    assert_eq!(
        child.outgoing(parent),
        child_ctx,
        "with traces on, requests carry the child span"
    );
    child.end(None);
    span.end(
        Outcome::Success,
        Some(&json!({"exit_code": 0, "stdout": "hi\n"})),
        None,
    );

    let spans = h.spans();
    let call = spans.iter().find(|s| s.name == TOOL_CALL).unwrap();
    let exec = spans
        .iter()
        .find(|s| s.name == "skill.tool.bash.exec")
        .unwrap();
    assert_eq!(call.span_context.trace_id().to_bytes(), parent.trace_id);
    assert_eq!(call.parent_span_id.to_bytes(), parent.span_id);
    assert!(call.parent_span_is_remote);
    assert_eq!(call.span_kind, SpanKind::Server);
    assert_eq!(exec.parent_span_id, call.span_context.span_id());
    assert_eq!(exec.span_context.trace_id(), call.span_context.trace_id());
    assert_eq!(exec.span_context.span_id().to_bytes(), child_ctx.span_id);

    for (key, want) in [
        ("skill_id", "demo"),
        ("tool_name", "Bash"),
        ("invocation_id", "inv-1"),
        ("outcome", "success"),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "Bash"),
        ("gen_ai.tool.call.id", "c-1"),
        ("rpc.system.name", "jsonrpc"),
        ("rpc.method", "tool.call"),
        ("jsonrpc.request.id", "call-1"),
    ] {
        assert_eq!(
            attr(call, key).map(|v| v.as_str().into_owned()).as_deref(),
            Some(want),
            "{key}"
        );
    }
    assert_eq!(attr(call, "args_size_bytes"), Some(&AttrValue::I64(21)));
    assert_eq!(attr(call, "result_size_bytes"), Some(&AttrValue::I64(31)));
    assert!(matches!(attr(call, "duration_ms"), Some(AttrValue::I64(ms)) if *ms >= 0));
    assert!(attr(call, "error.type").is_none());
    assert_eq!(call.status, Status::Unset);
}

#[test]
fn denials_and_failures_are_errors_and_counted() {
    let h = Harness::new();
    let trace = TraceContext::new_root();
    let num = json!(7);
    ToolCallSpan::start(
        Some(h.telemetry),
        &call_info("Read", "c-1", trace, Some(&num)),
    )
    .end(Outcome::Success, None, None);
    ToolCallSpan::start(Some(h.telemetry), &call_info("Read", "c-2", trace, None)).end(
        Outcome::Success,
        None,
        None,
    );
    ToolCallSpan::start(Some(h.telemetry), &call_info("Bash", "c-3", trace, None)).end(
        Outcome::Denied,
        None,
        Some("tool_not_in_allowed_tools"),
    );
    ToolCallSpan::start(Some(h.telemetry), &call_info("Nope", "c-4", trace, None)).end(
        Outcome::Denied,
        None,
        None,
    );
    ToolCallSpan::start(Some(h.telemetry), &call_info("Bash", "c-5", trace, None)).end(
        Outcome::Timeout,
        None,
        Some("deadline"),
    );

    let spans = h.spans();
    let by_call = |id: &str| {
        spans
            .iter()
            .find(|s| {
                attr(s, "gen_ai.tool.call.id")
                    .map(|v| v.as_str().into_owned())
                    .as_deref()
                    == Some(id)
            })
            .unwrap()
    };
    assert_eq!(
        attr(by_call("c-1"), "jsonrpc.request.id").unwrap().as_str(),
        "7"
    );
    assert!(
        attr(by_call("c-2"), "jsonrpc.request.id").is_none(),
        "notifications have no id"
    );
    let denied = by_call("c-3");
    assert_eq!(denied.status, Status::error("tool_not_in_allowed_tools"));
    assert_eq!(
        attr(denied, "error.type").unwrap().as_str(),
        "tool_not_in_allowed_tools"
    );
    assert_eq!(attr(denied, "outcome").unwrap().as_str(), "denied");
    assert_eq!(
        attr(by_call("c-4"), "error.type").unwrap().as_str(),
        "denied"
    );
    assert_eq!(
        attr(by_call("c-5"), "error.type").unwrap().as_str(),
        "deadline"
    );

    let mut calls: Vec<(String, String, i64)> = h
        .points(TOOL_CALLS_TOTAL)
        .into_iter()
        .map(|(a, v)| {
            (
                a["tool_name"]["stringValue"].as_str().unwrap().to_owned(),
                a["outcome"]["stringValue"].as_str().unwrap().to_owned(),
                v.as_str()
                    .map_or_else(|| v.as_i64().unwrap(), |s| s.parse().unwrap()),
            )
        })
        .collect();
    calls.sort();
    assert_eq!(
        calls,
        [
            ("Bash".into(), "denied".into(), 1),
            ("Bash".into(), "timeout".into(), 1),
            ("Read".into(), "success".into(), 2),
            ("unknown".into(), "denied".into(), 1),
        ]
    );
    let durations = h.points(TOOL_DURATION_SECONDS);
    let read = durations
        .iter()
        .find(|(a, _)| a["tool_name"]["stringValue"] == "Read")
        .unwrap();
    assert_eq!(
        read.1
            .as_str()
            .map_or_else(|| read.1.as_u64().unwrap(), |s| s.parse().unwrap()),
        2
    );
}

#[test]
fn invoke_span_is_root_or_child_of_traceparent_and_tracks_active_invocations() {
    let h = Harness::new();
    let info = InvokeInfo {
        invocation_id: "inv-9",
        skill_id: "demo",
        skill_version: "1.0.0",
        tenant_id: "t",
    };
    let parent = TraceContext::parse(PARENT).unwrap();
    let child = InvokeSpan::start(Some(h.telemetry), Some(parent), &info);
    let root = InvokeSpan::start(Some(h.telemetry), None, &info);
    assert_eq!(child.trace_context().trace_id, parent.trace_id);
    assert_ne!(root.trace_context().trace_id, parent.trace_id);
    let summary =
        json!({"outcome": "success", "exit_code": 0, "signal": null, "tool_calls": 3, "denied": 1});
    child.end(&InvokeEnd::from_summary(&summary));
    let spans = h.spans();
    let s = spans.iter().find(|s| s.name == INVOKE).unwrap();
    assert_eq!(s.parent_span_id.to_bytes(), parent.span_id);
    assert_eq!(attr(s, "tool_calls"), Some(&AttrValue::I64(3)));
    assert_eq!(attr(s, "exit_code"), Some(&AttrValue::I64(0)));
    // `root` is still running.
    let active = h.points(ACTIVE_INVOCATIONS);
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].1, json!("1"), "{active:?}");
    drop(root);
    let root_span = h
        .spans()
        .into_iter()
        .find(|s| s.name == INVOKE && s.parent_span_id.to_bytes() == [0; 8]);
    let root_span = root_span.expect("a root skill.invoke span");
    assert_eq!(
        root_span.status,
        Status::error("invocation_failed"),
        "dropped without end"
    );
}

#[test]
fn socket_bytes_and_validation_counters() {
    let h = Harness::new();
    let instruments = h.telemetry.instruments.as_ref().unwrap();
    instruments.socket_bytes(Direction::Rx, 100);
    instruments.socket_bytes(Direction::Rx, 20);
    instruments.socket_bytes(Direction::Tx, 7);
    ValidateSpan::start(Some(h.telemetry), None).end(0, Some("demo"));
    ValidateSpan::start(Some(h.telemetry), None).end(2, None);
    let spans = h.spans();
    let invalid = spans.iter().find(|s| {
        s.name == FRONTMATTER_VALIDATE && attr(s, "outcome").unwrap().as_str() == "invalid"
    });
    assert_eq!(
        invalid.unwrap().status,
        Status::error("invalid_frontmatter")
    );

    let bytes = h.points(SOCKET_BYTES_TOTAL);
    let rx = bytes
        .iter()
        .find(|(a, _)| a["direction"]["stringValue"] == "rx")
        .unwrap();
    let tx = bytes
        .iter()
        .find(|(a, _)| a["direction"]["stringValue"] == "tx")
        .unwrap();
    assert_eq!((rx.1.clone(), tx.1.clone()), (json!("120"), json!("7")));
    let validations = h.points(FRONTMATTER_VALIDATION_TOTAL);
    assert_eq!(validations.len(), 2);
}

#[test]
fn journal_rows_become_log_records() {
    let h = Harness::new();
    let trace = TraceContext::parse(PARENT).unwrap();
    let row = Row {
        seq: 12,
        ts: "2026-11-29T08:00:00.123Z".into(),
        kind: "skill.tool_denied".into(),
        payload: json!({"invocation_id": "inv-1", "skill_id": "demo", "trace_id": trace.trace_id_hex()}),
    };
    logs::export_row(h.telemetry, &row, Some(trace));
    let docs = h.logs.0.lock().unwrap();
    let record = &docs[0]["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
    assert_eq!(
        record["body"]["stringValue"].as_str().unwrap(),
        row.to_json().to_string()
    );
    assert_eq!(record["traceId"], trace.trace_id_hex());
    assert_eq!(record["spanId"], trace.span_id_hex());
    assert_eq!(record["eventName"], JOURNAL_ROW_EVENT);
    let attrs: Vec<(&str, &Value)> = record["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| (kv["key"].as_str().unwrap(), &kv["value"]))
        .collect();
    assert!(
        attrs.contains(&("kind", &json!({"stringValue": "skill.tool_denied"}))),
        "{attrs:?}"
    );
    assert!(attrs.contains(&("invocation_id", &json!({"stringValue": "inv-1"}))));
    assert!(attrs.contains(&("skill_id", &json!({"stringValue": "demo"}))));
    assert_eq!(record["timeUnixNano"], json!("1795939200123000000"));
}

#[test]
fn everything_is_a_no_op_without_telemetry() {
    let trace = TraceContext::parse(PARENT).unwrap();
    let span = ToolCallSpan::start(None, &call_info("Bash", "c", trace, None));
    assert!(span.trace_context().is_none());
    let child = span.child("skill.tool.http.fetch");
    assert_eq!(
        child.outgoing(trace),
        trace,
        "without traces the call's traceparent is forwarded unchanged"
    );
    child.end(Some("x"));
    span.end(Outcome::Error, None, None);
    let info = InvokeInfo {
        invocation_id: "i",
        skill_id: "s",
        skill_version: "1.0.0",
        tenant_id: "t",
    };
    let invoke = InvokeSpan::start(None, Some(trace), &info);
    assert_eq!(invoke.trace_context().trace_id, trace.trace_id);
    assert_ne!(invoke.trace_context().span_id, trace.span_id);
    assert_ne!(
        InvokeSpan::start(None, None, &info)
            .trace_context()
            .trace_id,
        trace.trace_id
    );
}

#[test]
fn every_tool_has_a_child_span_name() {
    let names: Vec<&str> = ToolName::ALL.into_iter().map(tool_span_name).collect();
    for name in &names {
        let parts: Vec<&str> = name.split('.').collect();
        assert!(
            parts.len() == 4 && parts[0] == "skill" && parts[1] == "tool",
            "{name}"
        );
    }
    let unique: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
}
