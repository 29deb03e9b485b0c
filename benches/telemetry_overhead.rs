//! What the telemetry hooks cost a tool call when no `OTEL_*` variable is set (CONTRACT §8: no
//! endpoint, no cost). Compares every per-call hook the broker runs — `tool_call`, the per-tool
//! child span, both ends, and the socket byte counters — against doing nothing with the same
//! inputs. `telemetry::init` is never called, exactly as in a process without `OTEL_*` variables.
//! Results: docs/BENCHMARKS.md, "Telemetry".

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use cyberos::telemetry::{self, CallInfo, Direction, Outcome, tool_span_name};
use cyberos::tools::ToolName;
use cyberos::util::TraceContext;

fn hooks(c: &mut Criterion) {
    let trace = TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .expect("a valid traceparent");
    let request_id = serde_json::json!("call-1");
    let args = serde_json::json!({"command": "echo hi", "timeout_ms": 1000});
    let result = serde_json::json!({"exit_code": 0, "stdout": "hi\n", "stderr": ""});
    let info = CallInfo {
        invocation_id: "5f0c7c1e-8a43-4a55-9c1c-3f0b7f7f2b7d",
        skill_id: "memory-capture",
        tool_name: "Bash",
        call_id: "c-1",
        request_id: Some(&request_id),
        args: &args,
        trace,
    };
    assert!(!telemetry::enabled(), "the bench measures telemetry off");

    let mut group = c.benchmark_group("telemetry_per_tool_call");
    group.bench_function("baseline_nothing", |b| {
        b.iter(|| {
            black_box(&info);
            black_box(trace);
            black_box(&result);
            black_box(100usize);
        })
    });
    group.bench_function("hooks_telemetry_off", |b| {
        b.iter(|| {
            let call = telemetry::tool_call(black_box(&info));
            let child = call.child(tool_span_name(ToolName::Bash));
            black_box(child.outgoing(black_box(trace)));
            child.end(None);
            telemetry::socket_bytes(Direction::Rx, black_box(100));
            telemetry::socket_bytes(Direction::Tx, black_box(100));
            call.end(Outcome::Success, Some(black_box(&result)), None);
        })
    });
    group.finish();
}

criterion_group!(benches, hooks);
criterion_main!(benches);
