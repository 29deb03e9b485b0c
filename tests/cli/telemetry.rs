//! OpenTelemetry end to end: the real binary exports to a real OTLP/HTTP receiver on 127.0.0.1,
//! over http/protobuf and http/json, and what arrives is decoded and checked (CONTRACT §8).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::util::{self, World};

use collector::{Attr, Collector};

/// A tiny OTLP/HTTP receiver: an HTTP/1.1 server on 127.0.0.1 that records every POST body by
/// path, and decoders for both OTLP encodings into one neutral model, so that every assertion
/// runs against protobuf and JSON alike.
pub mod collector {
    use std::collections::BTreeMap;
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
    use prost::Message as _;
    use serde_json::Value;

    #[derive(Debug, Clone)]
    pub struct Request {
        pub path: String,
        pub content_type: String,
        /// The `traceparent` header, if sent (when this server stands in for a web service).
        pub traceparent: Option<String>,
        pub body: Vec<u8>,
    }

    /// What the receiver does with a request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Behaviour {
        /// Answer 200 with an empty export response.
        Accept,
        /// Read the request and never answer: a collector that hangs.
        Hang,
    }

    pub struct Collector {
        pub endpoint: String,
        requests: Arc<Mutex<Vec<Request>>>,
    }

    impl Collector {
        pub fn start(behaviour: Behaviour) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
            let endpoint = format!("http://{}", listener.local_addr().unwrap());
            let requests = Arc::new(Mutex::new(Vec::new()));
            let shared = requests.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { return };
                    let shared = shared.clone();
                    std::thread::spawn(move || serve(stream, &shared, behaviour));
                }
            });
            Self { endpoint, requests }
        }

        pub fn requests(&self) -> Vec<Request> {
            self.requests.lock().unwrap().clone()
        }

        fn bodies(&self, path: &str) -> Vec<Request> {
            self.requests()
                .into_iter()
                .filter(|r| r.path == path)
                .collect()
        }

        /// Every span received, in arrival order.
        pub fn spans(&self) -> Vec<Span> {
            self.bodies("/v1/traces")
                .iter()
                .flat_map(decode_spans)
                .collect()
        }

        /// The latest value of every metric series (cumulative temporality: the last export
        /// holds the totals).
        pub fn points(&self) -> BTreeMap<(String, Vec<(String, String)>), Point> {
            let mut latest = BTreeMap::new();
            for request in self.bodies("/v1/metrics") {
                for point in decode_points(&request) {
                    let key: Vec<(String, String)> = point
                        .attrs
                        .iter()
                        .map(|(k, v)| (k.clone(), v.text()))
                        .collect();
                    latest.insert((point.metric.clone(), key), point);
                }
            }
            latest
        }

        /// The latest value of one series of a sum metric, 0 if never exported.
        pub fn counter(&self, metric: &str, attrs: &[(&str, &str)]) -> i64 {
            let mut key: Vec<(String, String)> = attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            key.sort();
            self.points()
                .get(&(metric.to_owned(), key))
                .map_or(0, |p| p.value as i64)
        }

        pub fn logs(&self) -> Vec<LogRecord> {
            self.bodies("/v1/logs")
                .iter()
                .flat_map(decode_logs)
                .collect()
        }
    }

    fn serve(stream: TcpStream, requests: &Mutex<Vec<Request>>, behaviour: Behaviour) {
        let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
        let mut writer = stream;
        // Keep-alive: one connection may carry many exports.
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                return;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_owned();
            let (mut length, mut content_type, mut traceparent) = (0usize, String::new(), None);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    match name.trim().to_ascii_lowercase().as_str() {
                        "content-length" => length = value.trim().parse().unwrap_or(0),
                        "content-type" => content_type = value.trim().to_owned(),
                        "traceparent" => traceparent = Some(value.trim().to_owned()),
                        _ => {}
                    }
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            requests.lock().unwrap().push(Request {
                path,
                content_type: content_type.clone(),
                traceparent,
                body,
            });
            if behaviour == Behaviour::Hang {
                // Hold the connection open without answering until the client gives up.
                let _ = reader.read(&mut [0u8; 1]);
                return;
            }
            let reply = if content_type.contains("json") {
                "{}"
            } else {
                ""
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{reply}",
                reply.len()
            );
            if writer.write_all(head.as_bytes()).is_err() {
                return;
            }
        }
    }

    /// An attribute value, whichever encoding carried it.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Attr {
        Str(String),
        Int(i64),
        Double(f64),
        Bool(bool),
        Other,
    }

    impl Attr {
        pub fn text(&self) -> String {
            match self {
                Attr::Str(s) => s.clone(),
                Attr::Int(i) => i.to_string(),
                Attr::Double(d) => d.to_string(),
                Attr::Bool(b) => b.to_string(),
                Attr::Other => "?".into(),
            }
        }
    }

    #[derive(Debug, Clone)]
    pub struct Span {
        pub name: String,
        pub trace_id: String,
        pub span_id: String,
        /// Empty for a root span.
        pub parent_span_id: String,
        pub kind: i64,
        /// 0 unset, 1 ok, 2 error.
        pub status_code: i64,
        pub attrs: BTreeMap<String, Attr>,
        pub resource: BTreeMap<String, Attr>,
    }

    impl Span {
        pub fn attr(&self, key: &str) -> Option<String> {
            self.attrs.get(key).map(Attr::text)
        }
    }

    #[derive(Debug, Clone)]
    pub struct Point {
        pub metric: String,
        pub attrs: BTreeMap<String, Attr>,
        /// A sum's value, or a histogram's count.
        pub value: f64,
    }

    #[derive(Debug, Clone)]
    pub struct LogRecord {
        pub body: String,
        pub trace_id: String,
        pub span_id: String,
        pub attrs: BTreeMap<String, Attr>,
    }

    fn is_json(request: &Request) -> bool {
        if request.content_type == "application/json" {
            return true;
        }
        assert_eq!(
            request.content_type, "application/x-protobuf",
            "{}",
            request.path
        );
        false
    }

    fn proto_attr(value: Option<&AnyValue>) -> Attr {
        match value.and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => Attr::Str(s.clone()),
            Some(any_value::Value::IntValue(i)) => Attr::Int(*i),
            Some(any_value::Value::DoubleValue(d)) => Attr::Double(*d),
            Some(any_value::Value::BoolValue(b)) => Attr::Bool(*b),
            _ => Attr::Other,
        }
    }

    fn proto_attrs(kvs: &[KeyValue]) -> BTreeMap<String, Attr> {
        kvs.iter()
            .map(|kv| (kv.key.clone(), proto_attr(kv.value.as_ref())))
            .collect()
    }

    /// OTLP/JSON (proto3 JSON mapping): 64-bit integers may come as strings.
    fn json_int(v: &Value) -> Option<i64> {
        v.as_i64().or_else(|| v.as_str()?.parse().ok())
    }

    fn json_attr(v: &Value) -> Attr {
        if let Some(s) = v.get("stringValue").and_then(Value::as_str) {
            Attr::Str(s.to_owned())
        } else if let Some(i) = v.get("intValue").and_then(json_int) {
            Attr::Int(i)
        } else if let Some(d) = v.get("doubleValue").and_then(Value::as_f64) {
            Attr::Double(d)
        } else if let Some(b) = v.get("boolValue").and_then(Value::as_bool) {
            Attr::Bool(b)
        } else {
            Attr::Other
        }
    }

    fn json_attrs(v: &Value) -> BTreeMap<String, Attr> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|kv| {
                        (
                            kv["key"].as_str().unwrap().to_owned(),
                            json_attr(&kv["value"]),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn json_list<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
        v.get(key).and_then(Value::as_array).into_iter().flatten()
    }

    /// A JSON id: OTLP/JSON requires lowercase hex (not base64 as plain proto3 JSON would).
    fn json_id(v: &Value) -> String {
        let id = v.as_str().unwrap_or("").to_owned();
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "id {id:?}"
        );
        id
    }

    fn parse_json(request: &Request) -> Value {
        serde_json::from_slice(&request.body).expect("an OTLP/JSON body")
    }

    pub fn decode_spans(request: &Request) -> Vec<Span> {
        let mut out = Vec::new();
        if is_json(request) {
            let doc = parse_json(request);
            for rs in json_list(&doc, "resourceSpans") {
                let resource = json_attrs(&rs["resource"]["attributes"]);
                for ss in json_list(rs, "scopeSpans") {
                    for s in json_list(ss, "spans") {
                        out.push(Span {
                            name: s["name"].as_str().unwrap().to_owned(),
                            trace_id: json_id(&s["traceId"]),
                            span_id: json_id(&s["spanId"]),
                            parent_span_id: json_id(&s["parentSpanId"]),
                            kind: json_int(&s["kind"]).unwrap_or(0),
                            status_code: s
                                .get("status")
                                .and_then(|st| json_int(&st["code"]))
                                .unwrap_or(0),
                            attrs: json_attrs(&s["attributes"]),
                            resource: resource.clone(),
                        });
                    }
                }
            }
        } else {
            let req =
                ExportTraceServiceRequest::decode(&request.body[..]).expect("protobuf traces");
            for rs in req.resource_spans {
                let resource = rs
                    .resource
                    .map(|r| proto_attrs(&r.attributes))
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        out.push(Span {
                            name: s.name,
                            trace_id: hex::encode(s.trace_id),
                            span_id: hex::encode(s.span_id),
                            parent_span_id: hex::encode(s.parent_span_id),
                            kind: i64::from(s.kind),
                            status_code: s.status.map_or(0, |st| i64::from(st.code)),
                            attrs: proto_attrs(&s.attributes),
                            resource: resource.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    pub fn decode_points(request: &Request) -> Vec<Point> {
        let mut out = Vec::new();
        if is_json(request) {
            let doc = parse_json(request);
            for rm in json_list(&doc, "resourceMetrics") {
                for sm in json_list(rm, "scopeMetrics") {
                    for m in json_list(sm, "metrics") {
                        let name = m["name"].as_str().unwrap().to_owned();
                        for p in json_list(&m["sum"], "dataPoints") {
                            let value = json_int(&p["asInt"])
                                .map(|i| i as f64)
                                .or_else(|| p["asDouble"].as_f64())
                                .unwrap();
                            out.push(Point {
                                metric: name.clone(),
                                attrs: json_attrs(&p["attributes"]),
                                value,
                            });
                        }
                        for p in json_list(&m["histogram"], "dataPoints") {
                            let value = json_int(&p["count"]).unwrap() as f64;
                            out.push(Point {
                                metric: name.clone(),
                                attrs: json_attrs(&p["attributes"]),
                                value,
                            });
                        }
                    }
                }
            }
        } else {
            let req =
                ExportMetricsServiceRequest::decode(&request.body[..]).expect("protobuf metrics");
            for rm in req.resource_metrics {
                for sm in rm.scope_metrics {
                    for m in sm.metrics {
                        match m.data {
                            Some(metric::Data::Sum(sum)) => {
                                for p in sum.data_points {
                                    let value = match p.value {
                                        Some(number_data_point::Value::AsInt(i)) => i as f64,
                                        Some(number_data_point::Value::AsDouble(d)) => d,
                                        None => f64::NAN,
                                    };
                                    out.push(Point {
                                        metric: m.name.clone(),
                                        attrs: proto_attrs(&p.attributes),
                                        value,
                                    });
                                }
                            }
                            Some(metric::Data::Histogram(h)) => {
                                for p in h.data_points {
                                    out.push(Point {
                                        metric: m.name.clone(),
                                        attrs: proto_attrs(&p.attributes),
                                        value: p.count as f64,
                                    });
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        out
    }

    pub fn decode_logs(request: &Request) -> Vec<LogRecord> {
        let mut out = Vec::new();
        if is_json(request) {
            let doc = parse_json(request);
            for rl in json_list(&doc, "resourceLogs") {
                for sl in json_list(rl, "scopeLogs") {
                    for r in json_list(sl, "logRecords") {
                        out.push(LogRecord {
                            body: r["body"]["stringValue"].as_str().unwrap_or("").to_owned(),
                            trace_id: json_id(&r["traceId"]),
                            span_id: json_id(&r["spanId"]),
                            attrs: json_attrs(&r["attributes"]),
                        });
                    }
                }
            }
        } else {
            let req = ExportLogsServiceRequest::decode(&request.body[..]).expect("protobuf logs");
            for rl in req.resource_logs {
                for sl in rl.scope_logs {
                    for r in sl.log_records {
                        let body = match proto_attr(r.body.as_ref()) {
                            Attr::Str(s) => s,
                            _ => String::new(),
                        };
                        out.push(LogRecord {
                            body,
                            trace_id: hex::encode(r.trace_id),
                            span_id: hex::encode(r.span_id),
                            attrs: proto_attrs(&r.attributes),
                        });
                    }
                }
            }
        }
        out
    }

    /// Waits until `f` holds on what has arrived. The binary flushes before it exits, so this
    /// only covers the receiver threads still storing the last request.
    pub fn settle<T>(f: impl FnMut() -> Option<T>) -> Option<T> {
        crate::util::wait_for(Duration::from_secs(5), f)
    }
}

const PROTOCOLS: [&str; 2] = ["http/protobuf", "http/json"];
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn valid_skill(world: &World, name: &str) -> std::path::PathBuf {
    world.bundle(
        name,
        &util::skill_md(name, &["Read"], ""),
        "#!/bin/sh\nexit 0\n",
    )
}

/// `skill validate` exports `skill.frontmatter.validate` and counts
/// `skill_frontmatter_validation_total{outcome}`, in both encodings.
#[test]
fn validate_exports_its_span_and_counter() {
    for protocol in PROTOCOLS {
        let world = World::new();
        let collector = Collector::start(collector::Behaviour::Accept);
        let ok = valid_skill(&world, "good");
        let bad = world.bundle("bad", "---\nid: Bad\n---\n", "#!/bin/sh\n");
        let run = |path: &std::path::Path, code: i32, traceparent: Option<&str>| {
            let mut cmd = world.cmd(["skill", "validate"]);
            cmd.arg(path)
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
                .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
                .env("OTEL_SERVICE_NAME", "validate-test")
                .env(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=ci,team=platform",
                );
            if let Some(tp) = traceparent {
                cmd.env("TRACEPARENT", tp);
            }
            let out = cmd.code(code);
            assert!(
                !out.stderr().contains("telemetry"),
                "{protocol}\n{}",
                out.report()
            );
        };
        run(&ok, 0, Some(TRACEPARENT));
        run(&bad, 6, None);

        let spans = collector::settle(|| {
            let spans = collector.spans();
            (spans.len() >= 2).then_some(spans)
        })
        .unwrap_or_else(|| {
            panic!(
                "{protocol}: spans never arrived: {:?}",
                collector.requests()
            )
        });
        assert_eq!(spans.len(), 2, "{protocol}: {spans:#?}");
        for s in &spans {
            assert_eq!(s.name, "skill.frontmatter.validate");
            assert_eq!(
                s.resource.get("service.name"),
                Some(&Attr::Str("validate-test".into()))
            );
            assert_eq!(
                s.resource.get("deployment.environment"),
                Some(&Attr::Str("ci".into()))
            );
            assert_eq!(s.resource.get("team"), Some(&Attr::Str("platform".into())));
        }
        let good = spans
            .iter()
            .find(|s| s.attr("outcome").as_deref() == Some("ok"))
            .unwrap();
        assert_eq!(good.attr("skill_id").as_deref(), Some("good"));
        // A child of the process's $TRACEPARENT, in its trace.
        assert_eq!(good.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(good.parent_span_id, "00f067aa0ba902b7");
        assert_eq!(good.status_code, 0);
        let bad = spans
            .iter()
            .find(|s| s.attr("outcome").as_deref() == Some("invalid"))
            .unwrap();
        assert_eq!(bad.status_code, 2, "an invalid SKILL.md is an error span");
        assert_eq!(
            bad.attr("error.type").as_deref(),
            Some("invalid_frontmatter")
        );
        assert!(
            bad.parent_span_id.is_empty(),
            "a root without $TRACEPARENT: {bad:?}"
        );
        assert_ne!(bad.trace_id, good.trace_id);

        let counted = collector::settle(|| {
            let ok = collector.counter("skill_frontmatter_validation_total", &[("outcome", "ok")]);
            let invalid = collector.counter(
                "skill_frontmatter_validation_total",
                &[("outcome", "invalid")],
            );
            (ok == 1 && invalid == 1).then_some(())
        });
        assert!(counted.is_some(), "{protocol}: {:#?}", collector.points());
    }
}

/// Nothing configured: nothing is sent, nothing is said.
#[test]
fn without_otel_variables_nothing_is_exported() {
    let world = World::new();
    let collector = Collector::start(collector::Behaviour::Accept);
    let ok = valid_skill(&world, "quiet");
    // The collector exists but no variable names it; a bare service name configures nothing.
    let out = world
        .cmd(["skill", "validate"])
        .arg(&ok)
        .env("OTEL_SERVICE_NAME", "x")
        .success();
    assert!(out.stderr().is_empty(), "{}", out.report());
    assert!(collector.requests().is_empty());
}

/// A collector that is down (closed port) or hangs costs at most 2 s and one warning; the exit
/// code is the command's own.
#[test]
fn a_dead_or_hanging_collector_costs_at_most_two_seconds_and_one_warning() {
    let world = World::new();
    let ok = valid_skill(&world, "slow");
    let usual = world.cmd(["skill", "validate"]).arg(&ok).success().elapsed;

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let hanging = Collector::start(collector::Behaviour::Hang);
    for endpoint in [closed.as_str(), hanging.endpoint.as_str()] {
        let out = world
            .cmd(["skill", "validate"])
            .arg(&ok)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_LOGS_EXPORTER", "otlp")
            .success();
        // 2 s of budget plus process start-up noise on a loaded machine.
        assert!(
            out.elapsed < usual + Duration::from_millis(2500),
            "{}",
            out.report()
        );
        let warnings: Vec<String> = out
            .stderr()
            .lines()
            .filter(|l| l.starts_with("cyberos: telemetry"))
            .map(String::from)
            .collect();
        assert_eq!(warnings.len(), 1, "{}", out.report());
        assert!(
            warnings[0].contains("that telemetry is lost"),
            "{}",
            out.report()
        );
        assert_eq!(
            out.stderr().lines().count(),
            1,
            "nothing else on stderr\n{}",
            out.report()
        );
        assert!(
            out.stdout().starts_with("ok: slow 1.0.0"),
            "{}",
            out.report()
        );
    }
    assert!(
        !hanging.requests().is_empty(),
        "the hanging collector was reached"
    );
}

/// `console` writes OTLP/JSON lines to stderr and leaves stdout alone.
#[test]
fn console_exporters_write_otlp_json_to_stderr_only() {
    let world = World::new();
    let ok = valid_skill(&world, "loud");
    let out = world
        .cmd(["skill", "validate", "--json"])
        .arg(&ok)
        .env("OTEL_TRACES_EXPORTER", "console")
        .env("OTEL_METRICS_EXPORTER", "console")
        .success();
    assert_eq!(out.json()["status"], "ok");
    assert_eq!(
        out.stdout().lines().count(),
        1,
        "stdout is the command's own\n{}",
        out.report()
    );
    let docs: Vec<serde_json::Value> = out
        .stderr()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{}", out.report())))
        .collect();
    let span_names: Vec<&str> = docs
        .iter()
        .flat_map(|d| d["resourceSpans"].as_array().into_iter().flatten())
        .flat_map(|rs| rs["scopeSpans"].as_array().into_iter().flatten())
        .flat_map(|ss| ss["spans"].as_array().into_iter().flatten())
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        span_names,
        ["skill.frontmatter.validate"],
        "{}",
        out.report()
    );
    assert!(
        docs.iter()
            .any(|d| d.to_string().contains("skill_frontmatter_validation_total")),
        "{}",
        out.report()
    );
}

/// Unsupported settings are reported once each and never fail the command.
#[test]
fn bad_settings_are_warnings() {
    let world = World::new();
    let ok = valid_skill(&world, "odd");
    let out = world
        .cmd(["skill", "validate"])
        .arg(&ok)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_LOGS_EXPORTER", "kafka")
        .success();
    let stderr = out.stderr();
    assert!(
        stderr.contains(
            "cyberos: telemetry: OTEL_EXPORTER_OTLP_PROTOCOL: protocol \"grpc\" is not supported"
        ),
        "{}",
        out.report()
    );
    assert!(
        stderr.contains("cyberos: telemetry: OTEL_LOGS_EXPORTER: unknown exporter \"kafka\""),
        "{}",
        out.report()
    );
    assert!(
        !stderr.contains("export failed"),
        "nothing was built, so nothing failed\n{}",
        out.report()
    );
}

/// No async runtime and no second HTTP stack in the shipped binary's dependency tree.
#[test]
fn no_tokio_reqwest_hyper_or_tonic_in_the_dependency_tree() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = std::process::Command::new(&cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--manifest-path",
            manifest,
        ])
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            eprintln!("skipped: cannot run {cargo} tree: {e}");
            return;
        }
    };
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        tree.lines().any(|l| l.starts_with("opentelemetry-otlp ")),
        "{tree}"
    );
    let banned: BTreeMap<&str, Vec<&str>> =
        ["tokio", "reqwest", "hyper", "hyper-util", "tonic", "h2"]
            .into_iter()
            .map(|name| {
                let hits = tree
                    .lines()
                    .filter(|l| l.split_whitespace().next() == Some(name))
                    .collect();
                (name, hits)
            })
            .collect();
    assert!(banned.values().all(Vec::is_empty), "{banned:#?}");
}

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
        assert_eq!(collector.counter("skill_broker_active_invocations", &[]), 0);
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
