//! A tiny OTLP/HTTP receiver: an HTTP/1.1 server on 127.0.0.1 that records every POST body by
//! path, and decoders for both OTLP encodings into one neutral model, so that every assertion
//! runs against protobuf and JSON alike.

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

    /// The latest value of one series, if it was ever exported.
    pub fn value(&self, metric: &str, attrs: &[(&str, &str)]) -> Option<f64> {
        let mut key: Vec<(String, String)> = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        key.sort();
        self.points()
            .get(&(metric.to_owned(), key))
            .map(|p| p.value)
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
        let req = ExportTraceServiceRequest::decode(&request.body[..]).expect("protobuf traces");
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
        let req = ExportMetricsServiceRequest::decode(&request.body[..]).expect("protobuf metrics");
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
