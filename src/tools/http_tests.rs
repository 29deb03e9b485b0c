//! Tests of the HTTP tools against tiny servers on 127.0.0.1 started by each test; the
//! allowed name `api.example.com` is pinned to them as `--resolve` would.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use ureq::unversioned::resolver::Resolver as _;

use crate::tools::http::{HttpFetch, HttpPost};
use crate::tools::http_guard::{GuardReport, GuardedResolver};
use crate::tools::testutil::{Allow, Fixture};
use crate::tools::{Tool as _, ToolError};

#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Handler = dyn Fn(&Recorded) -> Option<Vec<u8>> + Send + Sync;

struct Server {
    port: u16,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Server {
    /// Answers every request with `handler`'s raw response (None: hold the connection open
    /// without answering until the client gives up).
    fn start(handler: impl Fn(&Recorded) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, handler) = (Arc::clone(&seen), Arc::clone(&handler));
                std::thread::spawn(move || serve(stream, &seen, &*handler));
            }
        });
        Self { port, requests }
    }

    fn ok(body: &'static [u8]) -> Self {
        Self::start(move |_| Some(response("200 OK", &[("X-Test", "yes")], body)))
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Recorded>>, handler: &Handler) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((n, v)) = h.trim_end().split_once(':') {
            headers.push((n.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let len = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap_or(());
    let req = Recorded {
        method,
        path,
        headers,
        body,
    };
    seen.lock().unwrap().push(req.clone());
    match handler(&req) {
        Some(resp) => {
            let mut stream = stream;
            stream.write_all(&resp).unwrap_or(());
        }
        None => {
            // Hold the connection until the client closes it.
            let mut rest = Vec::new();
            reader.read_to_end(&mut rest).unwrap_or(0);
        }
    }
}

fn response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

fn fixture(domains: &[&str], server: &Server) -> Fixture {
    let mut fx = Fixture::new(Allow {
        domains,
        ..Default::default()
    });
    fx.pin("api.example.com", server.port, "127.0.0.1");
    fx
}

fn domain_violation(r: Result<Value, ToolError>) -> (String, String) {
    match r {
        Err(ToolError::Domain { host, detail }) => (host, detail),
        other => panic!("expected domain_violation, got {other:?}"),
    }
}

#[test]
fn fetch_sends_the_traceparent_and_returns_status_headers_and_body() {
    let server = Server::ok(b"hello");
    let fx = fixture(&["api.example.com"], &server);
    let url = format!("http://api.example.com:{}/x?q=1", server.port);
    let out = fx
        .run(
            &HttpFetch,
            json!({"url": url, "headers": {"X-Skill": "1", "traceparent": "forged"}}),
        )
        .unwrap();
    assert_eq!(out["status"], 200);
    assert_eq!(out["body"], "hello");
    assert_eq!(out["headers"]["x-test"], "yes");
    assert_eq!(out["truncated"], false);
    assert_eq!(out["url"], url);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, "GET");
    assert_eq!(reqs[0].path, "/x?q=1");
    assert_eq!(
        reqs[0].header("traceparent"),
        Some(fx.trace.header().as_str())
    );
    assert!(
        reqs[0]
            .header("traceparent")
            .unwrap()
            .contains(&fx.trace.trace_id_hex())
    );
    assert_eq!(reqs[0].header("x-skill"), Some("1"));
}

#[test]
fn post_sends_the_body_with_its_content_type() {
    let server = Server::start(|req| Some(response("201 Created", &[], &req.body)));
    let fx = fixture(&["api.example.com"], &server);
    let url = format!("http://api.example.com:{}/p", server.port);
    let out = fx
        .run(&HttpPost, json!({"url": url, "body": {"a": 1}}))
        .unwrap();
    assert_eq!(out["status"], 201);
    assert_eq!(out["body"], r#"{"a":1}"#);
    let out = fx
        .run(
            &HttpPost,
            json!({"url": url, "body": "raw", "content_type": "text/x-test"}),
        )
        .unwrap();
    assert_eq!(out["body"], "raw");
    let reqs = server.requests();
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    assert_eq!(reqs[1].header("content-type"), Some("text/x-test"));
    assert_eq!(
        reqs[1].header("traceparent"),
        Some(fx.trace.header().as_str())
    );
}

#[test]
fn disallowed_hosts_and_url_tricks_are_refused_before_anything_is_sent() {
    let server = Server::ok(b"x");
    let mut fx = fixture(&["api.example.com"], &server);
    for name in [
        "evil.com",
        "api.example.com.evil.com",
        "EVIL.COM",
        "evil.com.",
    ] {
        fx.pin(name, server.port, "127.0.0.1");
    }
    let p = server.port;
    for (url, host) in [
        (format!("http://evil.com:{p}/y"), "evil.com"),
        (format!("http://api.example.com@evil.com:{p}/"), "evil.com"),
        (
            format!("http://api.example.com:x@evil.com:{p}/"),
            "evil.com",
        ),
        (
            format!("http://api.example.com.evil.com:{p}/"),
            "api.example.com.evil.com",
        ),
        (format!("http://EVIL.COM:{p}/"), "evil.com"),
        (format!("http://evil.com.:{p}/"), "evil.com"),
        (format!("http://2130706433:{p}/"), "127.0.0.1"),
        (format!("http://0x7f000001:{p}/"), "127.0.0.1"),
        (format!("http://0x7f.1:{p}/"), "127.0.0.1"),
        (format!("http://0177.0.0.1:{p}/"), "127.0.0.1"),
        (format!("http://[::ffff:127.0.0.1]:{p}/"), "::ffff:7f00:1"),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "169.254.169.254",
        ),
    ] {
        let (got, _) = domain_violation(fx.run(&HttpFetch, json!({"url": url})));
        assert_eq!(got, host, "{url}");
        let (got, _) = domain_violation(fx.run(&HttpPost, json!({"url": url, "body": "x"})));
        assert_eq!(got, host, "{url}");
    }
    for url in [
        "file:///etc/passwd",
        "gopher://api.example.com:70/1",
        "ftp://api.example.com/",
    ] {
        let (_, detail) = domain_violation(fx.run(&HttpFetch, json!({"url": url})));
        assert!(detail.contains("scheme"), "{url}: {detail}");
    }
    assert!(server.requests().is_empty(), "nothing may reach the server");
    // The allowed host in upper case or with a trailing dot stays allowed.
    for url in [
        format!("http://API.EXAMPLE.COM:{p}/"),
        format!("http://api.example.com.:{p}/"),
    ] {
        assert_eq!(
            fx.run(&HttpFetch, json!({"url": url})).unwrap()["status"],
            200,
            "{url}"
        );
    }
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn every_redirect_hop_is_checked() {
    let server = Server::start(|req| {
        Some(match req.path.as_str() {
            "/to-evil" => response("302 Found", &[("Location", "http://evil.com/steal")], b""),
            "/to-file" => response("301 Moved", &[("Location", "file:///etc/passwd")], b""),
            "/to-ip" => response("307 Temporary", &[("Location", "http://127.0.0.1/")], b""),
            "/to-ok" => response("303 See Other", &[("Location", "/final")], b""),
            "/loop" => response("302 Found", &[("Location", "/loop")], b""),
            _ => response("200 OK", &[], b"final"),
        })
    });
    let fx = fixture(&["api.example.com"], &server);
    let base = format!("http://api.example.com:{}", server.port);
    let (host, detail) =
        domain_violation(fx.run(&HttpFetch, json!({"url": format!("{base}/to-evil")})));
    assert_eq!(host, "evil.com");
    assert!(detail.contains("redirect hop 1"), "{detail}");
    let (_, detail) =
        domain_violation(fx.run(&HttpFetch, json!({"url": format!("{base}/to-file")})));
    assert!(detail.contains("scheme"), "{detail}");
    let (host, _) = domain_violation(fx.run(&HttpFetch, json!({"url": format!("{base}/to-ip")})));
    assert_eq!(host, "127.0.0.1");
    let out = fx
        .run(
            &HttpPost,
            json!({"url": format!("{base}/to-ok"), "body": "x"}),
        )
        .unwrap();
    assert_eq!(out["body"], "final");
    assert_eq!(out["url"], format!("{base}/final"));
    let reqs = server.requests();
    let last = reqs.last().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("GET", "/final"),
        "303 turns POST into GET"
    );
    assert_eq!(last.header("traceparent"), Some(fx.trace.header().as_str()));
    match fx.run(&HttpFetch, json!({"url": format!("{base}/loop")})) {
        Err(ToolError::Failed {
            kind: "http",
            detail,
        }) => assert!(detail.contains("redirects"), "{detail}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        server
            .requests()
            .iter()
            .filter(|r| r.path == "/loop")
            .count(),
        6,
        "the first request and 5 redirects"
    );
    assert!(!server.requests().iter().any(|r| r.path == "/steal"));
}

#[test]
fn an_allowed_name_resolving_to_a_private_address_is_refused() {
    let server = Server::ok(b"x");
    // `localhost` resolves through the system resolver (/etc/hosts) to a loopback address.
    let fx = Fixture::new(Allow {
        domains: &["localhost"],
        ..Default::default()
    });
    let (host, detail) = domain_violation(fx.run(
        &HttpFetch,
        json!({"url": format!("http://localhost:{}/", server.port)}),
    ));
    assert_eq!(host, "localhost");
    assert!(detail.contains("address refused"), "{detail}");
    assert!(server.requests().is_empty());
    // An IP literal listed in x-allowed-domains is what the author asked for.
    let fx = Fixture::new(Allow {
        domains: &["127.0.0.1"],
        ..Default::default()
    });
    let out = fx
        .run(
            &HttpFetch,
            json!({"url": format!("http://127.0.0.1:{}/", server.port)}),
        )
        .unwrap();
    assert_eq!(out["status"], 200);
}

#[test]
fn the_resolver_connects_only_to_checked_addresses() {
    let fx = Fixture::new(Allow {
        domains: &["metadata.example", "mixed.example"],
        ..Default::default()
    });
    let config = ureq::config::Config::default();
    let timeout = ureq::unversioned::transport::NextTimeout::default;
    fn lookup(
        uri: &ureq::http::Uri,
        _: &ureq::config::Config,
        _: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let mut out = ureq::unversioned::resolver::ResolvedSocketAddrs::from_fn(|_| {
            "0.0.0.0:0".parse().unwrap()
        });
        match uri.host() {
            Some("metadata.example") => out.push("169.254.169.254:80".parse().unwrap()),
            _ => {
                out.push("127.0.0.1:80".parse().unwrap());
                out.push("93.184.216.34:80".parse().unwrap());
                out.push("[::ffff:10.0.0.1]:80".parse().unwrap());
            }
        }
        Ok(out)
    }
    let report = GuardReport::default();
    let resolver = GuardedResolver::with_lookup(fx.inv.policy.clone(), vec![], &report, lookup);
    let uri: ureq::http::Uri = "http://metadata.example/latest".parse().unwrap();
    assert!(resolver.resolve(&uri, &config, timeout()).is_err());
    match report.take_refusal() {
        Some(ToolError::Domain { host, detail }) => {
            assert_eq!(host, "metadata.example");
            assert!(detail.contains("169.254.169.254 (link-local)"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let uri: ureq::http::Uri = "http://mixed.example/".parse().unwrap();
    let addrs = resolver.resolve(&uri, &config, timeout()).unwrap();
    assert_eq!(
        addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        ["93.184.216.34:80"]
    );
    let uri: ureq::http::Uri = "http://other.example/".parse().unwrap();
    assert!(
        resolver.resolve(&uri, &config, timeout()).is_err(),
        "a host the policy never saw"
    );
}

#[test]
fn bodies_are_capped_and_binary_comes_back_base64() {
    let server = Server::start(|req| {
        Some(match req.path.as_str() {
            "/bin" => response("200 OK", &[], &[0xff, 0x00, 0xfe]),
            _ => response("200 OK", &[], &[b'a'; 100]),
        })
    });
    let fx = fixture(&["api.example.com"], &server);
    let base = format!("http://api.example.com:{}", server.port);
    let out = fx
        .run(
            &HttpFetch,
            json!({"url": format!("{base}/big"), "max_bytes": 10}),
        )
        .unwrap();
    assert_eq!(out["body"], "aaaaaaaaaa");
    assert_eq!(out["truncated"], true);
    let out = fx
        .run(&HttpFetch, json!({"url": format!("{base}/bin")}))
        .unwrap();
    assert_eq!(out["encoding"], "base64");
    assert_eq!(out["body"], "/wD+");
    assert!(matches!(
        fx.run(&HttpFetch, json!({"url": base, "max_bytes": 1u64 << 40})),
        Err(ToolError::InvalidArgs(_))
    ));
    assert!(matches!(
        fx.run(&HttpFetch, json!({"url": "not a url"})),
        Err(ToolError::InvalidArgs(_))
    ));
    assert!(matches!(
        fx.run(
            &HttpFetch,
            json!({"url": "http://api.example.com/", "headers": {"Host": "evil.com"}})
        ),
        Err(ToolError::InvalidArgs(_))
    ));
}

#[test]
fn a_silent_server_times_out_and_the_deadline_bounds_the_call() {
    let server = Server::start(|_| None);
    let mut fx = fixture(&["api.example.com"], &server);
    let url = format!("http://api.example.com:{}/", server.port);
    let t = std::time::Instant::now();
    match fx.run(&HttpFetch, json!({"url": url, "timeout_ms": 300})) {
        Err(ToolError::Failed {
            kind: "timeout", ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
    fx.inv.deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
    assert_eq!(
        fx.run(&HttpFetch, json!({"url": url})),
        Err(ToolError::Deadline)
    );
    assert_eq!(
        fx.run(&HttpFetch, json!({"url": url})),
        Err(ToolError::Deadline)
    );
}

#[test]
fn https_to_a_plain_server_fails_cleanly() {
    let server = Server::ok(b"x");
    let fx = fixture(&["api.example.com"], &server);
    match fx.run(
        &HttpFetch,
        json!({"url": format!("https://api.example.com:{}/", server.port), "timeout_ms": 5000}),
    ) {
        Err(ToolError::Failed { kind: "http", .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_ip_literal_is_checked_in_the_form_the_request_carries() {
    // The URL serialises an IPv4-mapped IPv6 address in hex; the call's check and the
    // resolver's second check must both see that form, so one glob means one thing.
    let url = "http://[::FFFF:127.0.0.1]:9/x";
    let sent: ureq::http::Uri = url::Url::parse(url).unwrap().as_str().parse().unwrap();
    assert_eq!(sent.host(), Some("[::ffff:7f00:1]"));
    let config = ureq::config::Config::default();
    let timeout = ureq::unversioned::transport::NextTimeout::default;
    fn no_lookup(
        _: &ureq::http::Uri,
        _: &ureq::config::Config,
        _: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        panic!("an IP literal is never looked up")
    }

    let fx = Fixture::new(Allow {
        domains: &["::ffff:7f00:1"],
        ..Default::default()
    });
    HttpFetch.check(&fx.ctx(), &json!({"url": url})).unwrap();
    let report = GuardReport::default();
    let resolver = GuardedResolver::with_lookup(fx.inv.policy.clone(), vec![], &report, no_lookup);
    assert!(resolver.resolve(&sent, &config, timeout()).is_ok());

    // The dotted form names no host a request is sent to: refused by both checks alike.
    let fx = Fixture::new(Allow {
        domains: &["::ffff:127.0.0.1"],
        ..Default::default()
    });
    let (host, _) = domain_violation(
        HttpFetch
            .check(&fx.ctx(), &json!({"url": url}))
            .map(|()| Value::Null),
    );
    assert_eq!(host, "::ffff:7f00:1");
    let report = GuardReport::default();
    let resolver = GuardedResolver::with_lookup(fx.inv.policy.clone(), vec![], &report, no_lookup);
    assert!(resolver.resolve(&sent, &config, timeout()).is_err());
}
