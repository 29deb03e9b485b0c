//! The HTTP tools `HttpFetch` and `HttpPost` (CONTRACT §5) on `ureq`: http and https only,
//! redirects followed here (at most 5) with every hop's scheme and host checked against
//! `x-allowed-domains`, the connected address checked by [`http_guard`](super::http_guard), a
//! `traceparent` on every request, a time budget bounded by the invocation's deadline, and a
//! capped body. No proxy from the environment is ever used (it would be the address connected
//! to). These tools must never send a byte to a host or address the policy refused.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use ureq::config::AutoHeaderValue;
use ureq::http::{self, HeaderName, HeaderValue, Method};
use ureq::tls::{RootCerts, TlsConfig};
use ureq::unversioned::transport::DefaultConnector;
use ureq::{Agent, AsSendBody};
use url::Url;

use crate::skill::policy::Policy;
use crate::tools::http_guard::{GuardReport, GuardedResolver, policy_host};
use crate::tools::{CallContext, Tool, ToolError, ToolName, encode_body, parse_args};

/// Body bytes returned when the call does not say, and at most.
const MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Time allowed when the call does not say (still bounded by the invocation's deadline).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_REDIRECTS: usize = 5;

/// Request headers a skill may not set: they would change framing, the connection, or where the
/// request goes.
const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-connection",
];

/// Headers dropped when a redirect leaves the origin (as curl does).
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "cookie", "proxy-authorization"];

pub struct HttpFetch;
pub struct HttpPost;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchArgs {
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    max_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PostArgs {
    url: String,
    body: Value,
    #[serde(default)]
    content_type: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    max_bytes: Option<u64>,
}

/// One call, validated.
struct Call {
    method: Method,
    url: Url,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Option<Vec<u8>>,
    timeout: Duration,
    max_bytes: u64,
}

/// The parts both tools share, as a GET without a body.
fn common(
    url: &str,
    headers: &BTreeMap<String, String>,
    timeout_ms: Option<u64>,
    max_bytes: Option<u64>,
) -> Result<Call, ToolError> {
    let url =
        Url::parse(url).map_err(|e| ToolError::invalid(format!("invalid url {url:?}: {e}")))?;
    let max_bytes = max_bytes.unwrap_or(MAX_BYTES);
    if max_bytes > MAX_BYTES {
        return Err(ToolError::invalid(format!(
            "max_bytes may be at most {MAX_BYTES}"
        )));
    }
    let timeout = match timeout_ms {
        Some(0) => return Err(ToolError::invalid("timeout_ms must be positive")),
        Some(ms) => Duration::from_millis(ms),
        None => DEFAULT_TIMEOUT,
    };
    let mut parsed = Vec::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ToolError::invalid(format!("invalid header name {name:?}")))?;
        if FORBIDDEN_HEADERS.contains(&name.as_str()) {
            return Err(ToolError::invalid(format!("header {name} may not be set")));
        }
        // The call's own trace context is always sent instead.
        if name == "traceparent" {
            continue;
        }
        let value = HeaderValue::from_str(value)
            .map_err(|_| ToolError::invalid(format!("invalid value for header {name}")))?;
        parsed.push((name, value));
    }
    Ok(Call {
        method: Method::GET,
        url,
        headers: parsed,
        body: None,
        timeout,
        max_bytes,
    })
}

fn fetch_call(args: &Value) -> Result<Call, ToolError> {
    let args: FetchArgs = parse_args(args)?;
    common(&args.url, &args.headers, args.timeout_ms, args.max_bytes)
}

fn post_call(args: &Value) -> Result<Call, ToolError> {
    let args: PostArgs = parse_args(args)?;
    let mut call = common(&args.url, &args.headers, args.timeout_ms, args.max_bytes)?;
    // A string is sent as it is; any other JSON value as JSON.
    let (body, default_type) = match args.body {
        Value::String(s) => (s.into_bytes(), "text/plain; charset=utf-8"),
        other => (other.to_string().into_bytes(), "application/json"),
    };
    let content_type = args.content_type.as_deref().unwrap_or(default_type);
    let value = HeaderValue::from_str(content_type)
        .map_err(|_| ToolError::invalid("invalid content_type"))?;
    call.headers
        .retain(|(name, _)| name != http::header::CONTENT_TYPE);
    call.headers.push((http::header::CONTENT_TYPE, value));
    call.method = Method::POST;
    call.body = Some(body);
    Ok(call)
}

/// Scheme and host of one hop against the policy. `hop` 0 is the URL the skill gave.
fn check_hop(policy: &Policy, url: &Url, hop: usize) -> Result<(), ToolError> {
    // The host exactly as the request will carry it: the request is built from the URL's
    // serialisation, and the resolver checks that host again. (Rust's own formatting of an
    // IPv4-mapped IPv6 address, `::ffff:127.0.0.1`, differs from the URL's, `::ffff:7f00:1`.)
    let host = url.host_str().map(policy_host).unwrap_or_default();
    let via = if hop == 0 {
        String::new()
    } else {
        format!("redirect hop {hop}: ")
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::Domain {
            host,
            detail: format!(
                "{via}scheme {:?} refused: only http and https",
                url.scheme()
            ),
        });
    }
    if host.is_empty() || !policy.domain_allowed(&host) {
        return Err(ToolError::Domain {
            detail: format!("{via}host {host:?} is not in x-allowed-domains"),
            host,
        });
    }
    Ok(())
}

/// The system's trust anchors (the distribution's CA bundle, or `$SSL_CERT_FILE`), loaded once;
/// the Mozilla roots compiled into webpki-roots only when the system has none.
fn root_certs() -> RootCerts {
    static ROOTS: OnceLock<RootCerts> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let candidates = std::env::var_os("SSL_CERT_FILE")
                .into_iter()
                .map(Into::into)
                .chain(
                    [
                        "/etc/ssl/certs/ca-certificates.crt",
                        "/etc/pki/tls/certs/ca-bundle.crt",
                        "/etc/ssl/ca-bundle.pem",
                        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
                        "/etc/ssl/cert.pem",
                    ]
                    .into_iter()
                    .map(std::path::PathBuf::from),
                );
            for path in candidates {
                let Ok(pem) = std::fs::read(&path) else {
                    continue;
                };
                let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                    .filter_map(|item| match item {
                        Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert),
                        _ => None,
                    })
                    .collect();
                if !certs.is_empty() {
                    return RootCerts::new_with_certs(&certs);
                }
            }
            tracing::warn!("no system CA bundle found; using the compiled-in Mozilla roots");
            RootCerts::WebPki
        })
        .clone()
}

fn agent(ctx: &CallContext<'_>, report: &GuardReport) -> Agent {
    let inv = ctx.invocation;
    let config = Agent::config_builder()
        .proxy(None)
        .max_redirects(0)
        .http_status_as_error(false)
        .user_agent(format!("cyberos/{}", env!("CARGO_PKG_VERSION")))
        .accept_encoding(AutoHeaderValue::None)
        .tls_config(TlsConfig::builder().root_certs(root_certs()).build())
        .build();
    let resolver = GuardedResolver::new(Arc::clone(&inv.policy), inv.resolve.clone(), report);
    Agent::with_parts(config, DefaultConnector::new(), resolver)
}

fn run(ctx: &CallContext<'_>, call: Call) -> Result<Value, ToolError> {
    let inv = ctx.invocation;
    let start = Instant::now();
    if start >= inv.deadline {
        return Err(ToolError::Deadline);
    }
    let until = (start + call.timeout).min(inv.deadline);
    let report = GuardReport::default();
    let agent = agent(ctx, &report);
    let traceparent = HeaderValue::from_str(&ctx.trace.header())
        .map_err(|_| ToolError::failed("http", "bad traceparent"))?;
    let Call {
        mut method,
        mut url,
        mut headers,
        mut body,
        max_bytes,
        ..
    } = call;
    for hop in 0..=MAX_REDIRECTS {
        check_hop(&inv.policy, &url, hop)?;
        let mut builder = http::Request::builder()
            .method(method.clone())
            .uri(url.as_str());
        for (name, value) in &headers {
            builder = builder.header(name, value);
        }
        builder = builder.header("traceparent", &traceparent);
        let left = until.saturating_duration_since(Instant::now());
        let sent = match &body {
            Some(bytes) => send(&agent, builder.body(bytes.as_slice()), left),
            None => send(&agent, builder.body(()), left),
        };
        let response = match sent {
            Ok(r) => r,
            Err(e) => {
                return Err(report
                    .take_refusal()
                    .unwrap_or_else(|| http_error(inv.deadline, &url, &e)));
            }
        };
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get(http::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let (true, Some(location)) = (matches!(status, 301 | 302 | 303 | 307 | 308), location) {
            if hop == MAX_REDIRECTS {
                return Err(ToolError::failed(
                    "http",
                    format!("too many redirects (at most {MAX_REDIRECTS})"),
                ));
            }
            let next = url.join(&location).map_err(|e| {
                ToolError::failed("http", format!("bad redirect location {location:?}: {e}"))
            })?;
            // 303, and 301/302 after a POST, become a GET without a body (as browsers do).
            if status == 303 || (matches!(status, 301 | 302) && method == Method::POST) {
                method = Method::GET;
                body = None;
                headers.retain(|(name, _)| name != http::header::CONTENT_TYPE);
            }
            if next.origin() != url.origin() {
                headers.retain(|(name, _)| !CREDENTIAL_HEADERS.contains(&name.as_str()));
            }
            url = next;
            continue;
        }
        return read_response(response, &url, max_bytes, inv.deadline);
    }
    Err(ToolError::failed(
        "http",
        format!("too many redirects (at most {MAX_REDIRECTS})"),
    ))
}

fn send<B: AsSendBody>(
    agent: &Agent,
    request: Result<http::Request<B>, http::Error>,
    left: Duration,
) -> Result<http::Response<ureq::Body>, ureq::Error> {
    let request = request.map_err(ureq::Error::Http)?;
    let request = agent
        .configure_request(request)
        .timeout_global(Some(left))
        .build();
    agent.run(request)
}

fn http_error(deadline: Instant, url: &Url, e: &ureq::Error) -> ToolError {
    let timed_out = matches!(e, ureq::Error::Timeout(_))
        || matches!(e, ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut);
    if timed_out && Instant::now() >= deadline {
        return ToolError::Deadline;
    }
    if timed_out {
        return ToolError::failed("timeout", format!("request to {url} timed out"));
    }
    ToolError::failed("http", format!("request to {url} failed: {e}"))
}

fn read_response(
    response: http::Response<ureq::Body>,
    url: &Url,
    max_bytes: u64,
    deadline: Instant,
) -> Result<Value, ToolError> {
    let (parts, body) = response.into_parts();
    let mut headers = Map::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    let mut bytes = Vec::new();
    body.into_reader()
        .take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                if Instant::now() >= deadline {
                    ToolError::Deadline
                } else {
                    ToolError::failed("timeout", format!("reading the body of {url} timed out"))
                }
            } else {
                ToolError::failed("http", format!("failed to read the body of {url}: {e}"))
            }
        })?;
    let truncated = bytes.len() as u64 > max_bytes;
    bytes.truncate(max_bytes as usize);
    let (_, body, encoding) = encode_body(bytes, truncated);
    let mut result = json!({
        "status": parts.status.as_u16(),
        "headers": headers,
        "body": body,
        "truncated": truncated,
        "url": url.as_str(),
    });
    if let Some(encoding) = encoding {
        result["encoding"] = json!(encoding);
    }
    Ok(result)
}

fn headers_schema() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}, "description": "request headers"})
}

impl Tool for HttpFetch {
    fn name(&self) -> ToolName {
        ToolName::HttpFetch
    }

    fn description(&self) -> &'static str {
        "GET an http(s) URL on a host in x-allowed-domains (redirects re-checked, private addresses refused)"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "http or https URL"},
                "headers": headers_schema(),
                "timeout_ms": {"type": "integer", "minimum": 1, "default": DEFAULT_TIMEOUT.as_millis() as u64},
                "max_bytes": {"type": "integer", "minimum": 0, "maximum": MAX_BYTES, "default": MAX_BYTES}
            },
            "required": ["url"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        let call = fetch_call(args)?;
        check_hop(&ctx.invocation.policy, &call.url, 0)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        run(ctx, fetch_call(args)?)
    }
}

impl Tool for HttpPost {
    fn name(&self) -> ToolName {
        ToolName::HttpPost
    }

    fn description(&self) -> &'static str {
        "POST to an http(s) URL on a host in x-allowed-domains (redirects re-checked, private addresses refused)"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "http or https URL"},
                "body": {"description": "a string is sent as is; any other JSON value as JSON"},
                "content_type": {"type": "string"},
                "headers": headers_schema(),
                "timeout_ms": {"type": "integer", "minimum": 1, "default": DEFAULT_TIMEOUT.as_millis() as u64},
                "max_bytes": {"type": "integer", "minimum": 0, "maximum": MAX_BYTES, "default": MAX_BYTES}
            },
            "required": ["url", "body"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        let call = post_call(args)?;
        check_hop(&ctx.invocation.policy, &call.url, 0)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        run(ctx, post_call(args)?)
    }
}
