//! The HTTP client the OTLP exporters send through: `ureq`, blocking, behind the SDK's async
//! [`HttpClient`] trait.
//!
//! The SDK's batch span processor, batch log processor and periodic metric reader each run on
//! their own std thread and drive the exporter's future there with `futures_executor::block_on`,
//! so doing blocking I/O inside the future is exactly right: no async runtime exists in this
//! process. The client also remembers the last failure, so that the end of a command can say in
//! one line why telemetry was lost. It must never be used to talk to anything but a collector.

use std::sync::Mutex;
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response, ResponseBodyTooLarge};

/// A collector's reply is an `Export*ServiceResponse`: small. Anything bigger is refused.
const MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug)]
pub struct UreqClient {
    agent: ureq::Agent,
    last_failure: Mutex<Option<String>>,
}

impl UreqClient {
    /// A client whose every request (connect, send, receive) ends within `timeout`.
    pub fn new(timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            // The OTLP exporter reads the status itself (retryable 429/502/503/504, throttling).
            .http_status_as_error(false)
            // A collector does not redirect; following one could send telemetry elsewhere.
            .max_redirects(0)
            .user_agent(concat!("cyberos/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Self {
            agent,
            last_failure: Mutex::new(None),
        }
    }

    /// Why the most recent failed request failed (transport error or non-2xx status), if any did.
    pub fn last_failure(&self) -> Option<String> {
        self.lock_failure().clone()
    }

    fn lock_failure(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // The guarded value is a plain message: a panic elsewhere cannot leave it half-written.
        self.last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn note_failure(&self, uri: &str, what: String) {
        *self.lock_failure() = Some(format!("{uri}: {what}"));
    }

    /// The request, sent and answered synchronously.
    fn send_blocking(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let uri = request.uri().to_string();
        let (parts, body) = request.into_parts();
        let request = ureq::http::Request::from_parts(parts, body.to_vec());
        let response = self.agent.run(request).map_err(|err| {
            self.note_failure(&uri, err.to_string());
            Box::new(err) as HttpError
        })?;
        let (parts, mut body) = response.into_parts();
        let bytes = body
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|err| {
                if matches!(err, ureq::Error::BodyExceedsLimit(_)) {
                    self.note_failure(&uri, "response body larger than 4 MiB".to_owned());
                    return Box::new(ResponseBodyTooLarge::new()) as HttpError;
                }
                self.note_failure(&uri, err.to_string());
                Box::new(err) as HttpError
            })?;
        if !parts.status.is_success() {
            self.note_failure(&uri, format!("HTTP status {}", parts.status));
        }
        Ok(Response::from_parts(parts, Bytes::from(bytes)))
    }
}

#[async_trait::async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        self.send_blocking(request)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::net::TcpListener;

    use super::*;

    /// A one-shot HTTP/1.1 server answering `status` and returning what it received.
    fn serve_once(status: &str) -> (String, std::thread::JoinHandle<(String, Vec<u8>)>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let status = status.to_owned();
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
            )
            .unwrap();
            (head, body)
        });
        (url, handle)
    }

    fn post(
        client: &UreqClient,
        url: &str,
        body: &'static [u8],
    ) -> Result<Response<Bytes>, HttpError> {
        let request = Request::builder()
            .method("POST")
            .uri(url)
            .header("content-type", "application/x-protobuf")
            .body(Bytes::from_static(body))
            .unwrap();
        futures_executor::block_on(client.send_bytes(request))
    }

    #[test]
    fn posts_the_body_and_returns_the_response() {
        let (url, server) = serve_once("200 OK");
        let client = UreqClient::new(Duration::from_secs(5));
        let response = post(&client, &url, b"\x0a\x00payload").unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.body().as_ref(), b"ok");
        let (head, body) = server.join().unwrap();
        assert!(head.starts_with("POST /v1/traces HTTP/1.1\r\n"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/x-protobuf"),
            "{head}"
        );
        assert_eq!(body, b"\x0a\x00payload");
        assert_eq!(client.last_failure(), None);
    }

    #[test]
    fn error_statuses_are_responses_and_remembered() {
        let (url, server) = serve_once("503 Service Unavailable");
        let client = UreqClient::new(Duration::from_secs(5));
        let response = post(&client, &url, b"x").unwrap();
        assert_eq!(response.status(), 503);
        server.join().unwrap();
        let failure = client.last_failure().unwrap();
        assert!(
            failure.contains("/v1/traces") && failure.contains("503"),
            "{failure}"
        );
    }

    #[test]
    fn a_closed_port_fails_fast() {
        // Bind then drop: the port is free and nothing listens on it.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = UreqClient::new(Duration::from_secs(5));
        let started = std::time::Instant::now();
        assert!(post(&client, &format!("http://127.0.0.1:{port}/v1/logs"), b"x").is_err());
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(client.last_failure().unwrap().contains("/v1/logs"));
    }
}
