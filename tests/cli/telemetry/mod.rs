//! OpenTelemetry end to end: the real binary exports to a real OTLP/HTTP receiver on 127.0.0.1,
//! over http/protobuf and http/json, and what arrives is decoded and checked (CONTRACT §8).

mod collector;
mod commands;
mod invoke;

/// Both OTLP/HTTP encodings; the tests that matter run once with each.
const PROTOCOLS: [&str; 2] = ["http/protobuf", "http/json"];
/// A broker-level `$TRACEPARENT`.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
