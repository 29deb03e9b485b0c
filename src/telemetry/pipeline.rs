//! Building the OpenTelemetry providers a [`Config`] asks for, and shutting them down within a
//! fixed budget.
//!
//! Every provider exports from its own std thread (batch span processor, periodic metric reader,
//! batch log processor), so a slow or dead collector never blocks the broker's loop or a tool
//! call. Only the end of a command waits, and never longer than the budget. Nothing here decides
//! what is recorded: that is `spans`, `metrics` and `logs`.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opentelemetry::logs::LoggerProvider as _;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::resource::{
    EnvResourceDetector, ResourceDetector as _, TelemetryResourceDetector,
};
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider};

use super::config::{Config, Otlp, Protocol, Signal};
use super::console::{ConsoleLogExporter, ConsoleMetricExporter, ConsoleSpanExporter};
use super::http::UreqClient;
use super::metrics::Instruments;

/// The instrumentation scope every span, metric and log record is reported under.
const SCOPE: &str = "cyberos";

/// The live providers. Exists only when at least one exporter was asked for.
#[derive(Debug)]
pub(crate) struct Telemetry {
    pub(crate) tracer: Option<SdkTracer>,
    pub(crate) instruments: Option<Instruments>,
    pub(crate) logger: Option<SdkLogger>,
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    logger_provider: Option<SdkLoggerProvider>,
    /// The OTLP clients, asked at the end why an export failed.
    clients: Vec<Arc<UreqClient>>,
}

impl Telemetry {
    /// Builds what `config` enables. A signal whose exporter cannot be built is left off and
    /// reported in the returned warnings; the others still work.
    pub(crate) fn build(config: &Config) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        let resource = resource();
        let scope = InstrumentationScope::builder(SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let mut clients = Vec::new();
        let mut client_for = |otlp: &Otlp| {
            let client = Arc::new(UreqClient::new(otlp.timeout));
            clients.push(client.clone());
            client
        };

        let tracer_provider = config.traces.is_enabled().then(|| {
            // Every call is recorded whatever the sampled flag of the skill's traceparent says:
            // an untrusted skill must not be able to hide its calls from the operator.
            let mut builder = SdkTracerProvider::builder()
                .with_resource(resource.clone())
                .with_sampler(Sampler::AlwaysOn);
            if let Some(otlp) = &config.traces.otlp {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_shared_http_client(client_for(otlp))
                    .with_endpoint(otlp.endpoint.clone())
                    .with_protocol(protocol(otlp.protocol))
                    .with_timeout(otlp.timeout)
                    .build();
                match exporter {
                    Ok(exporter) => {
                        builder = builder
                            .with_span_processor(BatchSpanProcessor::builder(exporter).build())
                    }
                    Err(e) => warnings.push(format!("failed to set up the traces exporter: {e}")),
                }
            }
            if config.traces.console {
                builder = builder.with_span_processor(
                    BatchSpanProcessor::builder(ConsoleSpanExporter::default()).build(),
                );
            }
            builder.build()
        });

        let meter_provider = config.metrics.is_enabled().then(|| {
            let mut builder = SdkMeterProvider::builder().with_resource(resource.clone());
            if let Some(otlp) = &config.metrics.otlp {
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_shared_http_client(client_for(otlp))
                    .with_endpoint(otlp.endpoint.clone())
                    .with_protocol(protocol(otlp.protocol))
                    .with_timeout(otlp.timeout)
                    .build();
                match exporter {
                    Ok(exporter) => {
                        builder = builder.with_reader(PeriodicReader::builder(exporter).build())
                    }
                    Err(e) => warnings.push(format!("failed to set up the metrics exporter: {e}")),
                }
            }
            if config.metrics.console {
                builder =
                    builder.with_reader(PeriodicReader::builder(ConsoleMetricExporter).build());
            }
            builder.build()
        });

        let logger_provider = config.logs.is_enabled().then(|| {
            let mut builder = SdkLoggerProvider::builder().with_resource(resource.clone());
            if let Some(otlp) = &config.logs.otlp {
                let exporter = opentelemetry_otlp::LogExporter::builder()
                    .with_http()
                    .with_shared_http_client(client_for(otlp))
                    .with_endpoint(otlp.endpoint.clone())
                    .with_protocol(protocol(otlp.protocol))
                    .with_timeout(otlp.timeout)
                    .build();
                match exporter {
                    Ok(exporter) => builder = builder.with_batch_exporter(exporter),
                    Err(e) => warnings.push(format!("failed to set up the logs exporter: {e}")),
                }
            }
            if config.logs.console {
                builder = builder.with_batch_exporter(ConsoleLogExporter::default());
            }
            builder.build()
        });

        let telemetry = Telemetry {
            tracer: tracer_provider
                .as_ref()
                .map(|p| p.tracer_with_scope(scope.clone())),
            instruments: meter_provider
                .as_ref()
                .map(|p| Instruments::new(&p.meter_with_scope(scope.clone()))),
            logger: logger_provider
                .as_ref()
                .map(|p| p.logger_with_scope(scope.clone())),
            tracer_provider,
            meter_provider,
            logger_provider,
            clients,
        };
        (telemetry, warnings)
    }

    /// Tests build pipelines around their own exporters.
    #[cfg(test)]
    pub(crate) fn from_providers(
        tracer_provider: Option<SdkTracerProvider>,
        meter_provider: Option<SdkMeterProvider>,
        logger_provider: Option<SdkLoggerProvider>,
    ) -> Self {
        let scope = InstrumentationScope::builder(SCOPE).build();
        Telemetry {
            tracer: tracer_provider
                .as_ref()
                .map(|p| p.tracer_with_scope(scope.clone())),
            instruments: meter_provider
                .as_ref()
                .map(|p| Instruments::new(&p.meter_with_scope(scope.clone()))),
            logger: logger_provider
                .as_ref()
                .map(|p| p.logger_with_scope(scope.clone())),
            tracer_provider,
            meter_provider,
            logger_provider,
            clients: Vec::new(),
        }
    }

    /// Makes the periodic reader export now.
    #[cfg(test)]
    pub(crate) fn flush_metrics(&self) {
        if let Some(p) = &self.meter_provider {
            p.force_flush().expect("metrics flush");
        }
    }

    /// Exports what is still buffered and stops the exporter threads, all within `budget`.
    /// Returns why some telemetry was lost, if any was.
    ///
    /// Each provider is flushed on a thread of its own and waited for with one shared deadline,
    /// so the budget holds even if a collector accepts the connection and then never answers:
    /// the process may exit with that thread still blocked.
    pub(crate) fn shutdown(&self, budget: Duration) -> Result<(), String> {
        let deadline = Instant::now() + budget;
        let (tx, rx) = mpsc::channel::<(Signal, Result<(), String>)>();
        let mut pending = Vec::new();
        let mut spawn =
            |signal: Signal, work: Box<dyn FnOnce(Duration) -> Result<(), String> + Send>| {
                let thread_tx = tx.clone();
                let thread = std::thread::Builder::new()
                    .name(format!("otel-shutdown-{}", signal.name()))
                    .spawn(move || {
                        let result = work(deadline.saturating_duration_since(Instant::now()));
                        // The receiver is gone only when the deadline already passed.
                        let _ = thread_tx.send((signal, result));
                    });
                match thread {
                    Ok(_) => pending.push(signal),
                    Err(e) => {
                        let _ = tx.send((
                            signal,
                            Err(format!("failed to start the shutdown thread: {e}")),
                        ));
                        pending.push(signal);
                    }
                }
            };
        if let Some(p) = self.tracer_provider.clone() {
            // The batch span processor's shutdown drops the result of its last export: flush
            // first to learn it.
            spawn(
                Signal::Traces,
                Box::new(move |left| {
                    let flushed = p.force_flush().map_err(|e| e.to_string());
                    let shut = p.shutdown_with_timeout(left).map_err(|e| e.to_string());
                    flushed.and(shut)
                }),
            );
        }
        if let Some(p) = self.meter_provider.clone() {
            // The periodic reader's shutdown collects and exports once more and reports it.
            spawn(
                Signal::Metrics,
                Box::new(move |left| p.shutdown_with_timeout(left).map_err(|e| e.to_string())),
            );
        }
        if let Some(p) = self.logger_provider.clone() {
            spawn(
                Signal::Logs,
                Box::new(move |left| {
                    let flushed = p.force_flush().map_err(|e| e.to_string());
                    let shut = p.shutdown_with_timeout(left).map_err(|e| e.to_string());
                    flushed.and(shut)
                }),
            );
        }
        drop(tx);

        let (mut failed, mut sdk_errors, mut late) = (Vec::new(), Vec::new(), Vec::new());
        while !pending.is_empty() {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((signal, result)) => {
                    pending.retain(|s| *s != signal);
                    if let Err(e) = result {
                        failed.push(signal.name());
                        sdk_errors.push(e);
                    }
                }
                Err(_) => {
                    late = pending.iter().map(|s| s.name()).collect();
                    break;
                }
            }
        }
        if failed.is_empty() && late.is_empty() {
            return Ok(());
        }
        let mut what = Vec::new();
        if !failed.is_empty() {
            what.push(format!("failed to export {}", failed.join(", ")));
        }
        if !late.is_empty() {
            what.push(format!(
                "{} not sent within {} ms",
                late.join(", "),
                budget.as_millis()
            ));
        }
        // The SDK's own errors are generic ("network error"); the client knows the cause.
        let mut causes: Vec<String> = self
            .clients
            .iter()
            .filter_map(|c| c.last_failure())
            .collect();
        if causes.is_empty() {
            causes = sdk_errors;
        }
        let mut message = what.join("; ");
        if !causes.is_empty() {
            message.push_str(&format!(" ({})", causes.join("; ")));
        }
        Err(message)
    }
}

fn protocol(p: Protocol) -> opentelemetry_otlp::Protocol {
    match p {
        Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
        Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
    }
}

/// `service.name` is `OTEL_SERVICE_NAME`, else the one in `OTEL_RESOURCE_ATTRIBUTES`, else
/// `cyberos`; the other attributes of `OTEL_RESOURCE_ATTRIBUTES` are added as given.
fn resource() -> Resource {
    let from_env = EnvResourceDetector::new().detect();
    let service_name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| from_env.get(&"service.name".into()).map(|v| v.to_string()))
        .unwrap_or_else(|| "cyberos".to_owned());
    Resource::builder_empty()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_detectors(&[
            Box::new(TelemetryResourceDetector),
            Box::new(EnvResourceDetector::new()),
        ])
        .with_service_name(service_name)
        .build()
}
