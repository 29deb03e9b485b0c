//! Every input the fuzzers kept (`fuzz/corpus/<target>/`) replayed through the same oracles the
//! fuzz targets run (`fuzz/src/`, compiled in here), so CI checks them without a fuzzer; and the
//! inputs that once found a bug, each as a named test.

use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/lib.rs"]
pub mod fuzzing;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

/// Runs every file of a target's corpus through its oracle; returns how many there were.
fn replay(target: &str) -> usize {
    let (_, run) = fuzzing::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzz target {target}"));
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for file in &files {
        let data = std::fs::read(file).expect("corpus file");
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(
            outcome.is_ok(),
            "{target}: {} fails its oracle",
            file.display()
        );
    }
    files.len()
}

#[test]
fn every_fuzz_target_has_a_committed_corpus() {
    for (target, _) in fuzzing::TARGETS {
        let n = std::fs::read_dir(corpus_dir(target)).map_or(0, |d| d.count());
        assert!(n > 0, "fuzz/corpus/{target} is empty");
    }
}

#[test]
fn the_frame_decoder_corpus_replays_clean() {
    replay("frame_decoder");
}

#[test]
fn the_jsonrpc_dispatch_corpus_replays_clean() {
    replay("jsonrpc_dispatch");
}

#[test]
fn the_skill_parser_corpus_replays_clean() {
    replay("skill_parser");
}

#[test]
fn the_memory_path_corpus_replays_clean() {
    replay("memory_path");
}

#[test]
fn the_file_path_corpus_replays_clean() {
    replay("file_path");
}

#[test]
fn the_domain_corpus_replays_clean() {
    replay("domain");
}

/// Found by the domain oracle: `*` matched an empty label, so `*.example.com` admitted
/// `.example.com` and `..example.com` (the `url` crate accepts both, also percent-encoded).
/// Refused before any lookup, as a denied call.
#[test]
fn a_subdomain_glob_refuses_a_host_with_an_empty_label() {
    use crate::invoke::{PY_PRELUDE, reported, rows};
    let world = crate::util::World::new();
    let bundle = world.bundle(
        "empty-label",
        &crate::util::skill_md(
            "empty-label",
            &["HttpFetch"],
            "x-allowed-domains: [\"*.example.com\"]\n",
        ),
        &format!(
            "{PY_PRELUDE}\ns = connect()\n\
             for i, url in enumerate(['http://.example.com/', 'http://%2e.example.com/', 'http://a..example.com/']):\n    \
             out('r%d' % i, call(s, 'HttpFetch', {{'url': url}}, id=i))\n"
        ),
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    let r = reported(&out.stdout());
    for i in 0..3 {
        let e = &r[&format!("r{i}")]["error"];
        assert_eq!(e["message"], "domain_violation", "{}", out.report());
    }
    let summary = out.json();
    assert_eq!(summary["denied"], 3);
    let rows = rows(&world, summary["invocation_id"].as_str().unwrap());
    let denied: Vec<_> = rows
        .iter()
        .filter(|r| r["kind"] == "skill.tool_denied")
        .collect();
    assert_eq!(denied.len(), 3);
    assert!(
        denied
            .iter()
            .all(|r| r["payload"]["reason"] == "domain_violation")
    );
    assert!(!rows.iter().any(|r| r["kind"] == "skill.tool_call_started"));
}

/// Found by the dispatch oracle: a request id that is a float came back as a different float
/// (`1.317776000454119e-304` as `1.3177760004541191e-304`), because serde_json's default float
/// parser may be off by one unit in the last place. A client matching responses by id would
/// never see its answer. Every id must come back as the same number.
#[test]
fn numeric_ids_come_back_as_the_same_number() {
    use crate::invoke::{PY_PRELUDE, reported};
    let world = crate::util::World::new();
    let bundle = world.bundle(
        "float-ids",
        &crate::util::skill_md("float-ids", &[], ""),
        &format!(
            r#"{PY_PRELUDE}
ids = [1.317776000454119e-304, 0.1, 1e300, 5e-324, 2.2250738585072014e-308,
       123456.789e-10, 9007199254740993, -7, 1.5]
s = connect()
bad = []
for i in ids:
    s.sendall(frame({{"jsonrpc": "2.0", "id": i, "method": "broker.status"}}))
    r = recv(s)
    if r["id"] != i or type(r["id"]) != type(i):
        bad.append([repr(i), repr(r["id"])])
    # Invalid requests echo the id too.
    s.sendall(frame({{"jsonrpc": "1.0", "id": i, "method": "broker.status"}}))
    r = recv(s)
    if r["id"] != i:
        bad.append([repr(i), repr(r["id"])])
out("bad", bad)
"#
        ),
    );
    let out = world.cmd(["skill", "invoke"]).arg(&bundle).success();
    assert_eq!(
        reported(&out.stdout())["bad"],
        serde_json::json!([]),
        "{}",
        out.report()
    );
}

/// Found by the domain oracle: an IPv6 literal was checked in Rust's formatting while the
/// request carried the URL's (`::ffff:127.0.0.1` against `::ffff:7f00:1` for an IPv4-mapped
/// address), so one glob meant two names. Through a real invocation: the dotted form is refused
/// naming the host as the request would carry it, and the hex form gets past both checks (the
/// call then fails to connect to the closed port, as a tool error, not a domain violation).
#[test]
fn an_ipv6_literal_is_checked_as_the_request_carries_it() {
    use crate::invoke::{PY_PRELUDE, reported, rows};
    let world = crate::util::World::new();
    let script = format!(
        "{PY_PRELUDE}\ns = connect()\n\
         out('r', call(s, 'HttpFetch', {{'url': 'http://[::ffff:127.0.0.1]:9/', 'timeout_ms': 2000}}))\n"
    );
    for (glob, allowed) in [("::ffff:127.0.0.1", false), ("::ffff:7f00:1", true)] {
        let name = if allowed { "hex-form" } else { "dotted-form" };
        let bundle = world.bundle(
            name,
            &crate::util::skill_md(
                name,
                &["HttpFetch"],
                &format!("x-allowed-domains: [\"{glob}\"]\n"),
            ),
            &script,
        );
        let out = world
            .cmd(["skill", "invoke", "--json"])
            .arg(&bundle)
            .success();
        let e = &reported(&out.stdout())["r"]["error"];
        let summary = out.json();
        let rows = rows(&world, summary["invocation_id"].as_str().unwrap());
        let started = rows.iter().any(|r| r["kind"] == "skill.tool_call_started");
        if allowed {
            assert_ne!(e["message"], "domain_violation", "{}", out.report());
            assert!(started, "{}", out.report());
        } else {
            assert_eq!(e["message"], "domain_violation", "{}", out.report());
            assert!(e.to_string().contains("::ffff:7f00:1"), "{}", out.report());
            assert_eq!(summary["denied"], 1);
            assert!(!started);
        }
    }
}
