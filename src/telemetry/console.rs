//! The `console` exporters (`OTEL_*_EXPORTER=console`): every export becomes one line of OTLP/JSON
//! — the very document an OTLP/HTTP collector would receive — on stderr.
//!
//! Never stdout: during `skill invoke` stdout is the skill's own, and `invoke --json` promises its
//! summary as the last stdout line. The line format lets `2>&1 | grep resourceSpans | jq` work.

use std::io::Write as _;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::logs::tonic::group_logs_by_resource_and_scope;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// Writes one serialised request as one stderr line.
fn write_line(request: &impl serde::Serialize) -> OTelSdkResult {
    let mut line = serde_json::to_vec(request).map_err(|e| {
        OTelSdkError::InternalFailure(format!("failed to serialise OTLP/JSON: {e}"))
    })?;
    line.push(b'\n');
    // One write of the whole line, so lines from the exporter threads never interleave.
    std::io::stderr()
        .lock()
        .write_all(&line)
        .map_err(|e| OTelSdkError::InternalFailure(format!("failed to write to stderr: {e}")))
}

#[derive(Debug, Default)]
pub struct ConsoleSpanExporter {
    resource: ResourceAttributesWithSchema,
}

impl SpanExporter for ConsoleSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let resource_spans = group_spans_by_resource_and_scope(batch, &self.resource);
        write_line(&ExportTraceServiceRequest { resource_spans })
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

#[derive(Debug, Default)]
pub struct ConsoleLogExporter {
    resource: ResourceAttributesWithSchema,
}

impl LogExporter for ConsoleLogExporter {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let resource_logs = group_logs_by_resource_and_scope(&batch, &self.resource);
        write_line(&ExportLogsServiceRequest { resource_logs })
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

#[derive(Debug, Default)]
pub struct ConsoleMetricExporter;

impl PushMetricExporter for ConsoleMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        write_line(&ExportMetricsServiceRequest::from(metrics))
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}
