//! The domain check against the `url` crate's parse: the host `url` extracts from a fuzzed URL
//! is what `Policy::domain_allowed` judges, and that judgement agrees with a small reference
//! matcher of CONTRACT §3's domain globs (`*` spans labels, exact otherwise, lowercase, no
//! trailing dot, no empty label), is blind to case and a trailing dot, and never lets
//! `*.example.com` reach the apex or a look-alike such as `evilexample.com` or `.example.com`.
//!
//! The HTTP tools' own check (`HttpFetch::check`, no network) must agree, and the host the
//! request then goes out with (the `http` crate's parse of the URL, which the resolver checks
//! again) must be the host that was checked.

use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use cyberos::skill::policy::Policy;
use cyberos::tools::{self, CallContext, Invocation, ToolError, ToolName};
use cyberos::util::TraceContext;
use serde_json::json;

const HOSTS: &[&str] = &[
    "example.com",
    "api.example.com",
    "API.Example.COM.",
    "evilexample.com",
    "a.b.example.com",
    "example.com.evil.net",
    "127.0.0.1",
    "0x7f.1",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "xn--nxasmq6b.example.com",
    "ëxample.com",
    "localhost",
    "%61pi.example.com",
    "api.example.com%2f.evil.net",
    "",
];

const GLOBS: &[&str] = &[
    "api.example.com",
    "*.example.com",
    "example.com",
    "127.0.0.1",
    "*",
    "*.com",
    "a.*.example.com",
    "::1",
    "[::1]",
    "xn--nxasmq6b.example.com",
];

#[derive(Debug, Arbitrary)]
enum Sel {
    Known(u8),
    Raw(String),
}

#[derive(Debug, Arbitrary)]
enum Url {
    /// scheme://[user@]host[:port]/path
    Parts {
        https: bool,
        user: Option<String>,
        host: Sel,
        port: Option<u16>,
        path: String,
    },
    Raw(String),
}

#[derive(Debug, Arbitrary)]
struct Input {
    globs: Vec<Sel>,
    url: Url,
}

fn pick(list: &[&str], s: &Sel) -> String {
    match s {
        Sel::Known(i) => list[usize::from(*i) % list.len()].to_owned(),
        Sel::Raw(r) => r.clone(),
    }
}

/// CONTRACT §3 for globs made of host characters and `*` only: `*` matches any run of
/// characters (dots included), everything else itself.
fn reference_match(glob: &str, host: &str) -> bool {
    let (g, h) = (glob.as_bytes(), host.as_bytes());
    // Classic wildcard matching with backtracking to the last star.
    let (mut gi, mut hi, mut star, mut mark) = (0, 0, None, 0);
    while hi < h.len() {
        if gi < g.len() && g[gi] == b'*' {
            star = Some(gi);
            mark = hi;
            gi += 1;
        } else if gi < g.len() && g[gi] == h[hi] {
            gi += 1;
            hi += 1;
        } else if let Some(s) = star {
            gi = s + 1;
            mark += 1;
            hi = mark;
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
}

fn simple(glob: &str) -> bool {
    glob.bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b'*' | b':'))
}

pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    // As validation stores them: lowercased, without the trailing dot.
    let globs: Vec<String> = input
        .globs
        .iter()
        .map(|s| pick(GLOBS, s).trim_end_matches('.').to_ascii_lowercase())
        .filter(|g| !g.is_empty() && cyberos::skill::policy::compile_glob(g).is_ok())
        .collect();
    let mut manifest = super::dispatch::base_manifest();
    manifest.allowed_domains = globs.clone();
    let policy = Policy::from_manifest(&manifest).expect("globs compile");

    let text = match &input.url {
        Url::Parts {
            https,
            user,
            host,
            port,
            path,
        } => {
            let mut s = String::from(if *https { "https://" } else { "http://" });
            if let Some(u) = user {
                s.push_str(u);
                s.push('@');
            }
            s.push_str(&pick(HOSTS, host));
            if let Some(p) = port {
                s.push_str(&format!(":{p}"));
            }
            s.push('/');
            s.push_str(path);
            s
        }
        Url::Raw(r) => r.clone(),
    };
    let policy = Arc::new(policy);
    check_http_tool(&policy, &text);
    let Ok(url) = url::Url::parse(&text) else {
        return;
    };
    let Some(host) = url.host_str() else {
        return;
    };
    let allowed = policy.domain_allowed(host);

    // Case and one trailing dot make no difference.
    assert_eq!(
        policy.domain_allowed(&host.to_ascii_uppercase()),
        allowed,
        "{host:?}"
    );
    if !host.ends_with('.') {
        assert_eq!(
            policy.domain_allowed(&format!("{host}.")),
            allowed,
            "{host:?}"
        );
    }
    let normal = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    // A name with an empty label is no host (and `*` would match the empty label).
    let empty_label = normal.is_empty() || normal.split('.').any(str::is_empty);
    if allowed {
        assert!(!empty_label, "{host:?}, with an empty label, was allowed");
    }
    if globs.iter().all(|g| simple(g)) {
        let want = !empty_label && globs.iter().any(|g| reference_match(g, &normal));
        assert_eq!(allowed, want, "host {host:?} ({text:?}) against {globs:?}");
    }
    // A glob `*.<domain>` alone never admits the apex or a look-alike.
    for g in &globs {
        if let Some(apex) = g
            .strip_prefix("*.")
            .filter(|a| !a.contains(['*', '?', '[', '{']))
        {
            let only = {
                let mut m = super::dispatch::base_manifest();
                m.allowed_domains = vec![g.clone()];
                Policy::from_manifest(&m).expect("compiles")
            };
            if only.domain_allowed(host) {
                assert!(
                    normal.ends_with(&format!(".{apex}")) && normal.len() > apex.len() + 1,
                    "{g:?} admitted {host:?}"
                );
            }
        }
    }
}

/// The host as the HTTP tools hand it to the policy: lowercase, no trailing dot, IPv6 without
/// brackets.
fn policy_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

fn check_http_tool(policy: &Arc<Policy>, text: &str) {
    let inv = Invocation::standalone(
        "fuzz-skill",
        Arc::clone(policy),
        "/nonexistent/memory".into(),
        "/nonexistent/scratch".into(),
    );
    let ctx = CallContext {
        invocation: &inv,
        call_id: "call-1",
        trace: TraceContext::new_root(),
    };
    let tool = tools::tool(ToolName::HttpFetch).expect("HttpFetch");
    // `check` parses and judges; it never touches the network.
    let checked = tool.check(&ctx, &json!({"url": text}));
    let Ok(url) = url::Url::parse(text) else {
        assert!(
            matches!(checked, Err(ToolError::InvalidArgs(_))),
            "{text:?}: {checked:?}"
        );
        return;
    };
    // The host as the URL serialises it (what the request will carry): lowercased, IPv4 in
    // dotted form, IPv6 compressed in hex (an IPv4-mapped address too), without brackets.
    let host = url.host_str().map(policy_host).unwrap_or_default();
    let want = matches!(url.scheme(), "http" | "https")
        && !host.is_empty()
        && policy.domain_allowed(&host);
    match &checked {
        Ok(()) => assert!(want, "{text:?} passed the HTTP check; host {host:?}"),
        Err(ToolError::Domain { .. }) => assert!(!want, "{text:?} refused; host {host:?}"),
        Err(e) => panic!("{text:?}: unexpected {e:?}"),
    }
    if checked.is_err() {
        return;
    }
    // What goes out: the request is built from the URL's serialisation, and the resolver
    // checks that parse's host. It must be the host that was checked.
    // (A URL the request cannot be built from fails the call before any connection.)
    if let Ok(uri) = url.as_str().parse::<ureq::http::Uri>() {
        let sent = uri.host().map(policy_host).unwrap_or_default();
        assert_eq!(sent, host, "{text:?}: checked {host:?}, sent to {sent:?}");
        assert!(policy.domain_allowed(&sent));
    }
}
