//! Which telemetry to build, decided from the standard OpenTelemetry variables alone (CONTRACT §8).
//!
//! Pure: it reads variables through a lookup function, so tests never touch the process
//! environment, and it builds nothing. With no variable set, every signal is off and the caller
//! builds no exporter, no provider and no thread.

use std::time::Duration;

/// The default OTLP/HTTP collector of the specification, used when a signal's exporter is set to
/// `otlp` explicitly but no endpoint is given.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// `OTEL_EXPORTER_OTLP_TIMEOUT`'s default, in the specification.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One of the three OpenTelemetry signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Metrics,
    Logs,
}

impl Signal {
    pub const ALL: [Signal; 3] = [Signal::Traces, Signal::Metrics, Signal::Logs];

    pub fn name(self) -> &'static str {
        match self {
            Self::Traces => "traces",
            Self::Metrics => "metrics",
            Self::Logs => "logs",
        }
    }

    fn upper(self) -> &'static str {
        match self {
            Self::Traces => "TRACES",
            Self::Metrics => "METRICS",
            Self::Logs => "LOGS",
        }
    }
}

/// The OTLP/HTTP encodings (`OTEL_EXPORTER_OTLP_PROTOCOL`). gRPC is not offered: it would need an
/// async runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    HttpProtobuf,
    HttpJson,
}

/// Where and how one signal goes over OTLP/HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Otlp {
    /// The full URL requests are POSTed to (`.../v1/traces` and so on).
    pub endpoint: String,
    pub protocol: Protocol,
    /// Per-request timeout (`OTEL_EXPORTER_OTLP[_SIGNAL]_TIMEOUT`, milliseconds).
    pub timeout: Duration,
}

/// The exporters of one signal. Both may be on (`OTEL_TRACES_EXPORTER=otlp,console`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignalConfig {
    pub otlp: Option<Otlp>,
    /// Write OTLP/JSON lines to stderr (stdout belongs to the skill).
    pub console: bool,
}

impl SignalConfig {
    pub fn is_enabled(&self) -> bool {
        self.otlp.is_some() || self.console
    }
}

/// Everything the variables ask for, plus the problems found in them (each becomes one
/// `cyberos: telemetry: ...` warning; a bad variable never stops a command).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    pub traces: SignalConfig,
    pub metrics: SignalConfig,
    pub logs: SignalConfig,
    pub warnings: Vec<String>,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `get`. An empty value counts as unset, as the specification says.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| {
            get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut config = Config::default();
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return config;
        }
        for signal in Signal::ALL {
            let built = signal_config(signal, &get, &mut config.warnings);
            match signal {
                Signal::Traces => config.traces = built,
                Signal::Metrics => config.metrics = built,
                Signal::Logs => config.logs = built,
            }
        }
        config
    }

    pub fn signal(&self, signal: Signal) -> &SignalConfig {
        match signal {
            Signal::Traces => &self.traces,
            Signal::Metrics => &self.metrics,
            Signal::Logs => &self.logs,
        }
    }

    /// True when at least one exporter is to be built.
    pub fn any_enabled(&self) -> bool {
        Signal::ALL.into_iter().any(|s| self.signal(s).is_enabled())
    }
}

fn signal_config(
    signal: Signal,
    get: &impl Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> SignalConfig {
    let exporter_var = format!("OTEL_{}_EXPORTER", signal.upper());
    let endpoint_var = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.upper());
    let (want_otlp, console) = match get(&exporter_var) {
        Some(list) => parse_exporters(&exporter_var, &list, warnings),
        // The specification defaults every signal to `otlp`; here traces and metrics follow an
        // endpoint only (no endpoint: no cost), and logs — the audit journal's rows — leave the
        // machine only when asked for by name.
        None => {
            let endpoint_set =
                get(&endpoint_var).is_some() || get("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
            (signal != Signal::Logs && endpoint_set, false)
        }
    };
    let otlp = if want_otlp {
        otlp_config(signal, get, warnings)
    } else {
        None
    };
    SignalConfig { otlp, console }
}

/// `otlp`, `console`, `none`, comma-separated. Unknown names are reported and skipped.
fn parse_exporters(var: &str, list: &str, warnings: &mut Vec<String>) -> (bool, bool) {
    let (mut otlp, mut console) = (false, false);
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name.to_ascii_lowercase().as_str() {
            "otlp" => otlp = true,
            "console" => console = true,
            "none" => {}
            _ => warnings.push(format!(
                "{var}: unknown exporter {name:?} ignored (use otlp, console or none)"
            )),
        }
    }
    (otlp, console)
}

fn otlp_config(
    signal: Signal,
    get: &impl Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Option<Otlp> {
    let up = signal.upper();
    let endpoint = resolve_endpoint(signal, get);
    if let Err(problem) = check_endpoint(&endpoint.0) {
        warnings.push(format!(
            "{}: {problem}; {} are not exported over OTLP",
            endpoint.1,
            signal.name()
        ));
        return None;
    }
    let protocol_var = format!("OTEL_EXPORTER_OTLP_{up}_PROTOCOL");
    let (protocol_name, protocol_from) = match get(&protocol_var) {
        Some(p) => (p, protocol_var),
        None => match get("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(p) => (p, "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned()),
            None => ("http/protobuf".to_owned(), String::new()),
        },
    };
    let protocol = match protocol_name.as_str() {
        "http/protobuf" => Protocol::HttpProtobuf,
        "http/json" => Protocol::HttpJson,
        other => {
            warnings.push(format!(
                "{protocol_from}: protocol {other:?} is not supported (use http/protobuf or http/json); {} are not exported over OTLP",
                signal.name()
            ));
            return None;
        }
    };
    let timeout_var = format!("OTEL_EXPORTER_OTLP_{up}_TIMEOUT");
    let timeout = [timeout_var.as_str(), "OTEL_EXPORTER_OTLP_TIMEOUT"]
        .into_iter()
        .find_map(|var| {
            let text = get(var)?;
            match text.parse::<u64>() {
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(_) => {
                    warnings.push(format!(
                        "{var}: {text:?} is not a number of milliseconds; ignored"
                    ));
                    None
                }
            }
        })
        .unwrap_or(DEFAULT_TIMEOUT);
    Some(Otlp {
        endpoint: endpoint.0,
        protocol,
        timeout,
    })
}

/// The URL a signal is sent to, and the variable it came from. A signal-specific endpoint is used
/// as it is; the generic one gets `/v1/<signal>` appended (one slash between), as the OTLP
/// exporter specification requires.
fn resolve_endpoint(signal: Signal, get: &impl Fn(&str) -> Option<String>) -> (String, String) {
    let specific = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.upper());
    if let Some(url) = get(&specific) {
        return (url, specific);
    }
    let (base, from) = match get("OTEL_EXPORTER_OTLP_ENDPOINT") {
        Some(base) => (base, "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned()),
        None => (
            DEFAULT_ENDPOINT.to_owned(),
            format!("OTEL_{}_EXPORTER", signal.upper()),
        ),
    };
    (
        format!("{}/v1/{}", base.trim_end_matches('/'), signal.name()),
        from,
    )
}

fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let url =
        url::Url::parse(endpoint).map_err(|e| format!("invalid endpoint {endpoint:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("endpoint {endpoint:?} is not an http or https URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("endpoint {endpoint:?} has no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn nothing_set_builds_nothing() {
        let c = config(&[]);
        assert!(!c.any_enabled());
        assert!(c.warnings.is_empty());
        // Variables that configure nothing by themselves do not turn anything on.
        let c = config(&[
            ("OTEL_SERVICE_NAME", "x"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ]);
        assert!(!c.any_enabled());
    }

    #[test]
    fn generic_endpoint_appends_signal_paths() {
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]);
        assert_eq!(
            c.traces.otlp.as_ref().unwrap().endpoint,
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            c.metrics.otlp.as_ref().unwrap().endpoint,
            "http://127.0.0.1:4318/v1/metrics"
        );
        assert!(!c.logs.is_enabled(), "logs are opt-in");
        assert_eq!(
            c.traces.otlp.as_ref().unwrap().protocol,
            Protocol::HttpProtobuf
        );
        assert_eq!(
            c.traces.otlp.as_ref().unwrap().timeout,
            Duration::from_secs(10)
        );

        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/base/"),
            ("OTEL_LOGS_EXPORTER", "otlp"),
        ]);
        assert_eq!(
            c.traces.otlp.unwrap().endpoint,
            "http://c:4318/base/v1/traces"
        );
        assert_eq!(c.logs.otlp.unwrap().endpoint, "http://c:4318/base/v1/logs");
    }

    #[test]
    fn signal_endpoint_is_used_as_is_and_wins() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://t.example/custom",
            ),
        ]);
        assert_eq!(c.traces.otlp.unwrap().endpoint, "https://t.example/custom");
        assert_eq!(
            c.metrics.otlp.unwrap().endpoint,
            "http://generic:4318/v1/metrics"
        );

        // Only the metrics endpoint: only metrics are on.
        let c = config(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:1/x")]);
        assert!(!c.traces.is_enabled());
        assert_eq!(c.metrics.otlp.unwrap().endpoint, "http://m:1/x");
    }

    #[test]
    fn exporter_variables() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_METRICS_EXPORTER", "otlp,console"),
            ("OTEL_LOGS_EXPORTER", "console"),
        ]);
        assert!(!c.traces.is_enabled());
        assert!(c.metrics.otlp.is_some() && c.metrics.console);
        assert!(c.logs.otlp.is_none() && c.logs.console);

        // console needs no endpoint; an explicit otlp without one uses the specification's default.
        let c = config(&[
            ("OTEL_TRACES_EXPORTER", "console"),
            ("OTEL_METRICS_EXPORTER", "otlp"),
        ]);
        assert!(c.traces.console && c.traces.otlp.is_none());
        assert_eq!(
            c.metrics.otlp.unwrap().endpoint,
            "http://localhost:4318/v1/metrics"
        );
        assert!(!c.logs.is_enabled());

        let c = config(&[("OTEL_TRACES_EXPORTER", "zipkin,console")]);
        assert!(c.traces.console);
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("OTEL_TRACES_EXPORTER") && c.warnings[0].contains("zipkin"));
    }

    #[test]
    fn protocols() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
        ]);
        assert_eq!(c.traces.otlp.unwrap().protocol, Protocol::HttpJson);
        assert_eq!(c.metrics.otlp.unwrap().protocol, Protocol::HttpProtobuf);

        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        assert!(!c.any_enabled());
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("grpc") && c.warnings[0].contains("not supported"));
    }

    #[test]
    fn bad_endpoints_and_timeouts_are_reported() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://x/y"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ]);
        assert!(!c.any_enabled());
        assert!(
            c.warnings[0].starts_with("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: endpoint \"ftp://x/y\"")
        );

        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")]);
        assert!(!c.any_enabled());
        assert_eq!(c.warnings.len(), 2);

        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "soon"),
        ]);
        assert_eq!(c.traces.otlp.unwrap().timeout, Duration::from_millis(1500));
        assert_eq!(c.metrics.otlp.unwrap().timeout, Duration::from_millis(1500));
        assert_eq!(c.warnings.len(), 1);
    }

    #[test]
    fn sdk_disabled_and_empty_values() {
        let c = config(&[
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        ]);
        assert!(!c.any_enabled());
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
            ("OTEL_TRACES_EXPORTER", " "),
        ]);
        assert!(!c.any_enabled());
    }
}
