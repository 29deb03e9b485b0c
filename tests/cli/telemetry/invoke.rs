//! Telemetry of `skill invoke` (seed acceptance 22 and 23): spans, metrics and journal rows of a
//! fixture run with known successes, denials and a timeout, and the trace context it continues.

use std::time::Duration;

use super::collector::{self, Attr, Collector};
use super::{PROTOCOLS, TRACEPARENT};
use crate::util::{self, World};

/// A skill that makes a known mix of calls over one connection and reports the bytes it sent
/// and received, its own `TRACEPARENT`, and the responses.
const FIXTURE: &str = r#"
SENT = 0
RECEIVED = 0
def rpc(s, req):
    global SENT, RECEIVED
    body = json.dumps(req).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
    SENT += 4 + len(body)
    (n,) = struct.unpack(">I", recv_exact(s, 4))
    data = recv_exact(s, n)
    RECEIVED += 4 + n
    return json.loads(data)
def tool(s, id, name, args, traceparent=None):
    params = {"tool": name, "args": args}
    if traceparent is not None:
        params["traceparent"] = traceparent
    return rpc(s, {"jsonrpc": "2.0", "id": id, "method": "tool.call", "params": params})
s = connect()
r = {}
r["ok-1"] = tool(s, "ok-1", "MemoryRead", {"path": "memories/projects/cyberos/a.md"})
r["7"] = tool(s, 7, "MemoryRead", {"path": "memories/projects/cyberos/a.md"}, traceparent=sys.argv[1])
r["scope"] = tool(s, "scope", "MemoryRead", {"path": "memories/other/secret.md"}, traceparent=os.environ["TRACEPARENT"])
r["write"] = tool(s, "write", "Write", {"path": "/tmp/x", "content": "x"})
r["slow"] = tool(s, "slow", "Bash", {"command": "sleep 5", "timeout_ms": 300})
r["emit"] = tool(s, "emit", "MemoryEmit", {"path": "memories/projects/cyberos/b.md", "payload": {"topic": "t"}})
out("responses", r)
out("traceparent", os.environ["TRACEPARENT"])
out("bytes", {"sent": SENT, "received": RECEIVED})
"#;

/// The traceparent the fixture sends on its second call: a trace of the caller's own.
const CALL_TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

struct FixtureRun {
    out: util::Out,
    invocation_id: String,
    reported: serde_json::Map<String, serde_json::Value>,
}

fn fixture_bundle(world: &World) -> std::path::PathBuf {
    let md = "---\nid: otel-fixture\nversion: 1.2.3\ndescription: telemetry fixture\n\
              allowed_memory_scopes: [\"memories/projects/cyberos/**\"]\n\
              allowed_tools: [MemoryRead, MemoryEmit, Bash]\n---\nbody\n";
    let path = world.home().join("memory/memories/projects/cyberos/a.md");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "hello\n").unwrap();
    world.bundle(
        "otel-fixture",
        md,
        &format!("{}\n{FIXTURE}", crate::invoke::PY_PRELUDE),
    )
}

fn run_fixture(world: &World, bundle: &std::path::Path, env: &[(&str, &str)]) -> FixtureRun {
    let invocation_id = uuid::Uuid::new_v4().to_string();
    let mut cmd = world.cmd([
        "skill",
        "invoke",
        "--json",
        "--invocation-id",
        &invocation_id,
    ]);
    cmd.arg(bundle).args(["--", CALL_TRACEPARENT]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.success();
    let reported = crate::invoke::reported(&out.stdout());
    assert!(reported.contains_key("bytes"), "{}", out.report());
    FixtureRun {
        out,
        invocation_id,
        reported,
    }
}

fn span_by_call<'a>(spans: &'a [collector::Span], call_id: &str) -> &'a collector::Span {
    spans
        .iter()
        .find(|s| {
            s.name == "skill.broker.tool_call"
                && s.attr("gen_ai.tool.call.id").as_deref() == Some(call_id)
        })
        .unwrap_or_else(|| panic!("no tool_call span for {call_id}: {spans:#?}"))
}

/// Seed acceptance 22 and 23: one `skill.broker.tool_call` span per call with its attributes,
/// in the right trace under the right parent, per-tool children, `skill.invoke`, and the
/// per-outcome counters of a run with known successes, denials and a timeout — over
/// http/protobuf and http/json, with the journal rows as OTLP log records.
#[test]
fn invoke_exports_spans_metrics_and_journal_rows() {
    for protocol in PROTOCOLS {
        let world = World::new();
        let collector = Collector::start(collector::Behaviour::Accept);
        let bundle = fixture_bundle(&world);
        let run = run_fixture(
            &world,
            &bundle,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                ("OTEL_LOGS_EXPORTER", "otlp"),
            ],
        );
        let report = run.out.report();
        assert!(
            !run.out.stderr().contains("cyberos: telemetry"),
            "{protocol}\n{report}"
        );
        let responses = &run.reported["responses"];
        assert!(responses["ok-1"]["result"].is_object(), "{report}");
        assert_eq!(
            responses["scope"]["error"]["message"], "scope_violation",
            "{report}"
        );
        assert_eq!(
            responses["write"]["error"]["message"], "tool_not_allowed",
            "{report}"
        );
        assert_eq!(
            responses["slow"]["error"]["data"]["kind"], "timeout",
            "{report}"
        );
        assert!(responses["emit"]["result"]["row_seq"].is_i64(), "{report}");

        let spans = collector::settle(|| {
            let spans = collector.spans();
            (spans
                .iter()
                .filter(|s| s.name == "skill.broker.tool_call")
                .count()
                >= 6
                && spans.iter().any(|s| s.name == "skill.invoke"))
            .then_some(spans)
        })
        .unwrap_or_else(|| {
            panic!(
                "{protocol}: spans missing: {:#?}\n{report}",
                collector.spans()
            )
        });

        // skill.invoke: a root (no $TRACEPARENT for the broker), and the skill's TRACEPARENT
        // names it.
        let invokes: Vec<_> = spans.iter().filter(|s| s.name == "skill.invoke").collect();
        assert_eq!(invokes.len(), 1, "{protocol}");
        let invoke = invokes[0];
        assert!(invoke.parent_span_id.is_empty(), "{invoke:?}");
        assert_eq!(invoke.attr("skill_id").as_deref(), Some("otel-fixture"));
        assert_eq!(invoke.attr("skill_version").as_deref(), Some("1.2.3"));
        assert_eq!(
            invoke.attr("invocation_id").as_deref(),
            Some(run.invocation_id.as_str())
        );
        assert_eq!(invoke.attr("outcome").as_deref(), Some("success"));
        assert_eq!(invoke.attr("tool_calls").as_deref(), Some("6"));
        assert_eq!(invoke.attr("denied").as_deref(), Some("2"));
        let skill_tp = run.reported["traceparent"].as_str().unwrap();
        assert_eq!(
            skill_tp,
            format!("00-{}-{}-01", invoke.trace_id, invoke.span_id),
            "{protocol}"
        );

        // One tool_call span per call, each with the contract's attributes.
        let calls: Vec<_> = spans
            .iter()
            .filter(|s| s.name == "skill.broker.tool_call")
            .collect();
        assert_eq!(calls.len(), 6, "{protocol}: {calls:#?}");
        let expected = [
            ("call-1", "MemoryRead", "success", "ok-1"),
            ("call-2", "MemoryRead", "success", "7"),
            ("call-3", "MemoryRead", "denied", "scope"),
            ("call-4", "Write", "denied", "write"),
            ("call-5", "Bash", "timeout", "slow"),
            ("call-6", "MemoryEmit", "success", "emit"),
        ];
        for (call_id, tool, outcome, request_id) in expected {
            let s = span_by_call(&spans, call_id);
            let ctx = format!("{protocol} {call_id}: {s:#?}");
            assert_eq!(s.kind, 2, "server span: {ctx}");
            assert_eq!(s.attr("skill_id").as_deref(), Some("otel-fixture"), "{ctx}");
            assert_eq!(s.attr("tool_name").as_deref(), Some(tool), "{ctx}");
            assert_eq!(s.attr("gen_ai.tool.name").as_deref(), Some(tool), "{ctx}");
            assert_eq!(
                s.attr("gen_ai.operation.name").as_deref(),
                Some("execute_tool"),
                "{ctx}"
            );
            assert_eq!(
                s.attr("rpc.system.name").as_deref(),
                Some("jsonrpc"),
                "{ctx}"
            );
            assert_eq!(s.attr("rpc.method").as_deref(), Some("tool.call"), "{ctx}");
            assert_eq!(
                s.attr("jsonrpc.request.id").as_deref(),
                Some(request_id),
                "{ctx}"
            );
            assert_eq!(
                s.attr("invocation_id").as_deref(),
                Some(run.invocation_id.as_str()),
                "{ctx}"
            );
            assert_eq!(s.attr("outcome").as_deref(), Some(outcome), "{ctx}");
            assert!(
                matches!(s.attrs.get("duration_ms"), Some(Attr::Int(ms)) if *ms >= 0),
                "{ctx}"
            );
            assert!(
                matches!(s.attrs.get("args_size_bytes"), Some(Attr::Int(n)) if *n > 2),
                "{ctx}"
            );
            assert!(s.attrs.contains_key("result_size_bytes"), "{ctx}");
            if outcome == "success" {
                assert_eq!(s.status_code, 0, "{ctx}");
                assert!(!s.attrs.contains_key("error.type"), "{ctx}");
            } else {
                assert_eq!(s.status_code, 2, "{ctx}");
            }
        }
        assert_eq!(
            span_by_call(&spans, "call-3").attr("error.type").as_deref(),
            Some("scope_violation")
        );
        assert_eq!(
            span_by_call(&spans, "call-4").attr("error.type").as_deref(),
            Some("tool_not_in_allowed_tools")
        );
        assert_eq!(
            span_by_call(&spans, "call-5").attr("error.type").as_deref(),
            Some("timeout")
        );
        assert_eq!(
            span_by_call(&spans, "call-2")
                .attr("jsonrpc.request.id")
                .as_deref(),
            Some("7")
        );

        // Trace membership and parents: a call without traceparent (and one sending the skill's
        // own TRACEPARENT) is a child of skill.invoke; one with a traceparent of its own is in
        // that trace, under the span id it sent.
        for call_id in ["call-1", "call-3", "call-4", "call-5", "call-6"] {
            let s = span_by_call(&spans, call_id);
            assert_eq!(
                (s.trace_id.as_str(), s.parent_span_id.as_str()),
                (invoke.trace_id.as_str(), invoke.span_id.as_str()),
                "{call_id}"
            );
        }
        let own = span_by_call(&spans, "call-2");
        assert_eq!(own.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(own.parent_span_id, "b7ad6b7169203331");

        // Per-tool children under their tool_call span, for the calls that ran.
        for (call_id, child_name, failed) in [
            ("call-1", "skill.tool.memory.read", false),
            ("call-2", "skill.tool.memory.read", false),
            ("call-5", "skill.tool.bash.exec", true),
            ("call-6", "skill.tool.memory.emit", false),
        ] {
            let parent = span_by_call(&spans, call_id);
            let children: Vec<_> = spans
                .iter()
                .filter(|s| s.parent_span_id == parent.span_id)
                .collect();
            assert_eq!(children.len(), 1, "{call_id}: {children:#?}");
            assert_eq!(children[0].name, child_name);
            assert_eq!(children[0].trace_id, parent.trace_id);
            assert_eq!(
                children[0].status_code,
                if failed { 2 } else { 0 },
                "{children:#?}"
            );
        }
        for denied in ["call-3", "call-4"] {
            let parent = span_by_call(&spans, denied);
            assert!(
                !spans.iter().any(|s| s.parent_span_id == parent.span_id),
                "a denied call runs no tool"
            );
        }

        // Seed 23: per-outcome counters, the histogram, the gauge and the socket bytes.
        let ok = collector::settle(|| {
            (collector.counter(
                "skill_broker_tool_calls_total",
                &[("outcome", "success"), ("tool_name", "MemoryRead")],
            ) == 2)
                .then_some(())
        });
        assert!(ok.is_some(), "{protocol}: {:#?}", collector.points());
        let counter = |tool: &str, outcome: &str| {
            collector.counter(
                "skill_broker_tool_calls_total",
                &[("outcome", outcome), ("tool_name", tool)],
            )
        };
        assert_eq!(counter("MemoryRead", "success"), 2);
        assert_eq!(counter("MemoryRead", "denied"), 1);
        assert_eq!(counter("Write", "denied"), 1);
        assert_eq!(counter("Bash", "timeout"), 1);
        assert_eq!(counter("MemoryEmit", "success"), 1);
        let total: i64 = collector
            .points()
            .iter()
            .filter(|((name, _), _)| name == "skill_broker_tool_calls_total")
            .map(|(_, p)| p.value as i64)
            .sum();
        assert_eq!(total, 6);
        let histogram = |tool: &str| {
            collector.counter("skill_broker_tool_duration_seconds", &[("tool_name", tool)])
        };
        assert_eq!(
            (
                histogram("MemoryRead"),
                histogram("Write"),
                histogram("Bash")
            ),
            (3, 1, 1)
        );
        assert_eq!(
            collector.value("skill_broker_active_invocations", &[]),
            Some(0.0),
            "exported, and back at 0"
        );
        let bytes = &run.reported["bytes"];
        assert_eq!(
            collector.counter("skill_broker_socket_bytes_total", &[("direction", "rx")]),
            bytes["sent"].as_i64().unwrap(),
            "rx = every byte the skill sent"
        );
        assert_eq!(
            collector.counter("skill_broker_socket_bytes_total", &[("direction", "tx")]),
            bytes["received"].as_i64().unwrap(),
            "tx = every byte the skill received"
        );
        assert_eq!(
            collector.counter("skill_frontmatter_validation_total", &[("outcome", "ok")]),
            1
        );

        // One log record per journal row, body = the row, with the ids of the row's call.
        let journal = cyberos::journal::Journal::open_existing(&world.home())
            .unwrap()
            .unwrap();
        let rows = journal.rows_for(&run.invocation_id, 0).unwrap();
        assert!(rows.len() >= 10, "{rows:#?}");
        let logs = collector::settle(|| {
            let logs = collector.logs();
            (logs.len() >= rows.len()).then_some(logs)
        })
        .unwrap_or_else(|| {
            panic!(
                "{protocol}: {} log records for {} rows",
                collector.logs().len(),
                rows.len()
            )
        });
        assert_eq!(logs.len(), rows.len(), "{protocol}");
        for row in &rows {
            let body = row.to_json().to_string();
            let record = logs
                .iter()
                .find(|l| l.body == body)
                .unwrap_or_else(|| panic!("no record for {body}"));
            assert_eq!(record.attrs.get("kind"), Some(&Attr::Str(row.kind.clone())));
            assert_eq!(
                record.attrs.get("invocation_id"),
                Some(&Attr::Str(run.invocation_id.clone()))
            );
            assert_eq!(
                record.attrs.get("skill_id"),
                Some(&Attr::Str("otel-fixture".into()))
            );
            assert_eq!(
                record.trace_id,
                row.payload["trace_id"].as_str().unwrap(),
                "{body}"
            );
            let span_id = match (row.kind.as_str(), row.payload["call_id"].as_str()) {
                ("memory.emitted", _) => {
                    let call = span_by_call(&spans, "call-6");
                    spans
                        .iter()
                        .find(|s| s.parent_span_id == call.span_id)
                        .unwrap()
                        .span_id
                        .clone()
                }
                (_, Some(call_id)) => span_by_call(&spans, call_id).span_id.clone(),
                (_, None) => invoke.span_id.clone(),
            };
            assert_eq!(record.span_id, span_id, "{body}");
        }
    }
}

/// `skill.invoke` is a child of the broker's own `$TRACEPARENT`, and the skill's calls stay in
/// that trace.
#[test]
fn invoke_continues_the_brokers_traceparent() {
    let world = World::new();
    let collector = Collector::start(collector::Behaviour::Accept);
    let bundle = fixture_bundle(&world);
    let run = run_fixture(
        &world,
        &bundle,
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{}/v1/traces", collector.endpoint),
            ),
            ("TRACEPARENT", TRACEPARENT),
        ],
    );
    let spans = collector::settle(|| {
        let spans = collector.spans();
        spans
            .iter()
            .any(|s| s.name == "skill.invoke")
            .then_some(spans)
    })
    .expect("spans");
    let invoke = spans.iter().find(|s| s.name == "skill.invoke").unwrap();
    assert_eq!(invoke.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(invoke.parent_span_id, "00f067aa0ba902b7");
    let validate = spans
        .iter()
        .find(|s| s.name == "skill.frontmatter.validate")
        .unwrap();
    assert_eq!(validate.parent_span_id, "00f067aa0ba902b7");
    assert_eq!(span_by_call(&spans, "call-1").trace_id, invoke.trace_id);
    assert_eq!(
        span_by_call(&spans, "call-1").parent_span_id,
        invoke.span_id
    );
    // Only the traces endpoint was given: nothing else was sent.
    assert!(
        collector.requests().iter().all(|r| r.path == "/v1/traces"),
        "{:?}",
        collector.requests()
    );
    let tp = run.reported["traceparent"].as_str().unwrap();
    assert!(
        tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{tp}"
    );
}

/// With the collector's port closed, invoke still succeeds, returns within its usual time +
/// 2 s, and says so in one warning.
#[test]
fn invoke_with_a_closed_collector_port_succeeds_within_two_extra_seconds() {
    let world = World::new();
    let md = util::skill_md("plain", &["MemoryRead"], "");
    let bundle = world.bundle("plain", &md, "#!/bin/sh\necho hi\n");
    let usual = world
        .cmd(["skill", "invoke"])
        .arg(&bundle)
        .success()
        .elapsed;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &closed)
        .env("OTEL_LOGS_EXPORTER", "otlp")
        .success();
    assert!(
        out.elapsed < usual + Duration::from_millis(2500),
        "usual {usual:?}\n{}",
        out.report()
    );
    assert_eq!(out.json()["outcome"], "success");
    let warnings = out
        .stderr()
        .lines()
        .filter(|l| l.starts_with("cyberos: telemetry"))
        .count();
    assert_eq!(warnings, 1, "{}", out.report());
}

/// CONTRACT §5: with a traces exporter, an HTTP tool's request carries the call's trace id and
/// the `skill.tool.http.*` span's id as its parent-id.
#[test]
fn http_requests_carry_the_http_spans_id_when_traced() {
    let world = World::new();
    let collector = Collector::start(collector::Behaviour::Accept);
    let web = Collector::start(collector::Behaviour::Accept);
    let port = web.endpoint.rsplit(':').next().unwrap().to_owned();
    let md = "---\nid: fetcher\nversion: 1.0.0\ndescription: d\nallowed_memory_scopes: []\n\
              allowed_tools: [HttpFetch, HttpPost]\nx-allowed-domains: [\"web.test\"]\n---\n";
    let body = format!(
        "s = connect()\n\
         out(\"fetch\", call(s, \"HttpFetch\", {{\"url\": \"http://web.test:{port}/fetch\"}}, id=1, traceparent=\"{CALL_TRACEPARENT}\"))\n\
         out(\"post\", call(s, \"HttpPost\", {{\"url\": \"http://web.test:{port}/post\", \"body\": \"x\"}}, id=2))\n"
    );
    let bundle = world.bundle(
        "fetcher",
        md,
        &format!("{}\n{body}", crate::invoke::PY_PRELUDE),
    );
    let out = world
        .cmd(["skill", "invoke"])
        .arg(&bundle)
        .args(["--resolve", &format!("web.test:{port}:127.0.0.1")])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
        .success();
    let got = crate::invoke::reported(&out.stdout());
    assert_eq!(got["fetch"]["result"]["status"], 200, "{}", out.report());
    assert_eq!(got["post"]["result"]["status"], 200, "{}", out.report());

    let spans = collector::settle(|| {
        let spans = collector.spans();
        (spans
            .iter()
            .filter(|s| s.name.starts_with("skill.tool.http."))
            .count()
            == 2)
            .then_some(spans)
    })
    .unwrap_or_else(|| panic!("{:#?}", collector.spans()));
    for (path, child_name, call_id) in [
        ("/fetch", "skill.tool.http.fetch", "call-1"),
        ("/post", "skill.tool.http.post", "call-2"),
    ] {
        let call = span_by_call(&spans, call_id);
        let child = spans.iter().find(|s| s.name == child_name).unwrap();
        assert_eq!(child.parent_span_id, call.span_id);
        assert_eq!(child.kind, 3, "an HTTP tool span is a client span");
        let request = web
            .requests()
            .into_iter()
            .find(|r| r.path == path)
            .expect("the request");
        let sent = request.traceparent.expect("a traceparent header");
        assert_eq!(
            sent,
            format!("00-{}-{}-01", call.trace_id, child.span_id),
            "{path}"
        );
    }
    // The first call sent a traceparent of its own: its request continues that trace.
    assert_eq!(
        span_by_call(&spans, "call-1").trace_id,
        "0af7651916cd43dd8448eb211c80319c"
    );
}

/// An invocation refused before its skill runs (a duplicate id) still ends `skill.invoke`, as an
/// error, and brings the active-invocations gauge back to 0.
#[test]
fn a_refused_invocation_ends_its_span_as_an_error() {
    let world = World::new();
    let md = util::skill_md("twice", &[], "");
    let bundle = world.bundle("twice", &md, "#!/bin/sh\nexit 0\n");
    let id = uuid::Uuid::new_v4().to_string();
    world
        .cmd(["skill", "invoke", "--invocation-id", &id])
        .arg(&bundle)
        .success();
    let collector = Collector::start(collector::Behaviour::Accept);
    let out = world
        .cmd(["skill", "invoke", "--invocation-id", &id])
        .arg(&bundle)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
        .output();
    assert_ne!(out.code(), Some(0), "{}", out.report());
    let invoke = collector::settle(|| {
        collector
            .spans()
            .into_iter()
            .find(|s| s.name == "skill.invoke")
    })
    .unwrap_or_else(|| panic!("no skill.invoke span\n{}", out.report()));
    assert_eq!(invoke.status_code, 2);
    assert_eq!(
        invoke.attr("error.type").as_deref(),
        Some("invocation_failed")
    );
    assert_eq!(
        collector.value("skill_broker_active_invocations", &[]),
        Some(0.0),
        "exported, and back at 0"
    );
}
