//! Telemetry of the short commands (`skill validate`): the validation span and counter, the
//! variables, the console exporters, a dead collector, and the dependency tree.

use std::collections::BTreeMap;
use std::time::Duration;

use super::collector::{self, Attr, Collector};
use super::{PROTOCOLS, TRACEPARENT};
use crate::util::{self, World};

pub(super) fn valid_skill(world: &World, name: &str) -> std::path::PathBuf {
    world.bundle(
        name,
        &util::skill_md(name, &["Read"], ""),
        "#!/bin/sh\nexit 0\n",
    )
}

/// `skill validate` exports `skill.frontmatter.validate` and counts
/// `skill_frontmatter_validation_total{outcome}`, in both encodings.
#[test]
fn validate_exports_its_span_and_counter() {
    for protocol in PROTOCOLS {
        let world = World::new();
        let collector = Collector::start(collector::Behaviour::Accept);
        let ok = valid_skill(&world, "good");
        let bad = world.bundle("bad", "---\nid: Bad\n---\n", "#!/bin/sh\n");
        let run = |path: &std::path::Path, code: i32, traceparent: Option<&str>| {
            let mut cmd = world.cmd(["skill", "validate"]);
            cmd.arg(path)
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
                .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
                .env("OTEL_SERVICE_NAME", "validate-test")
                .env(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=ci,team=platform",
                );
            if let Some(tp) = traceparent {
                cmd.env("TRACEPARENT", tp);
            }
            let out = cmd.code(code);
            assert!(
                !out.stderr().contains("telemetry"),
                "{protocol}\n{}",
                out.report()
            );
        };
        run(&ok, 0, Some(TRACEPARENT));
        run(&bad, 6, None);

        let spans = collector::settle(|| {
            let spans = collector.spans();
            (spans.len() >= 2).then_some(spans)
        })
        .unwrap_or_else(|| {
            panic!(
                "{protocol}: spans never arrived: {:?}",
                collector.requests()
            )
        });
        assert_eq!(spans.len(), 2, "{protocol}: {spans:#?}");
        for s in &spans {
            assert_eq!(s.name, "skill.frontmatter.validate");
            assert_eq!(
                s.resource.get("service.name"),
                Some(&Attr::Str("validate-test".into()))
            );
            assert_eq!(
                s.resource.get("deployment.environment"),
                Some(&Attr::Str("ci".into()))
            );
            assert_eq!(s.resource.get("team"), Some(&Attr::Str("platform".into())));
        }
        let good = spans
            .iter()
            .find(|s| s.attr("outcome").as_deref() == Some("ok"))
            .unwrap();
        assert_eq!(good.attr("skill_id").as_deref(), Some("good"));
        // A child of the process's $TRACEPARENT, in its trace.
        assert_eq!(good.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(good.parent_span_id, "00f067aa0ba902b7");
        assert_eq!(good.status_code, 0);
        let bad = spans
            .iter()
            .find(|s| s.attr("outcome").as_deref() == Some("invalid"))
            .unwrap();
        assert_eq!(bad.status_code, 2, "an invalid SKILL.md is an error span");
        assert_eq!(
            bad.attr("error.type").as_deref(),
            Some("invalid_frontmatter")
        );
        assert!(
            bad.parent_span_id.is_empty(),
            "a root without $TRACEPARENT: {bad:?}"
        );
        assert_ne!(bad.trace_id, good.trace_id);

        let counted = collector::settle(|| {
            let ok = collector.counter("skill_frontmatter_validation_total", &[("outcome", "ok")]);
            let invalid = collector.counter(
                "skill_frontmatter_validation_total",
                &[("outcome", "invalid")],
            );
            (ok == 1 && invalid == 1).then_some(())
        });
        assert!(counted.is_some(), "{protocol}: {:#?}", collector.points());
    }
}

/// Nothing configured: nothing is sent, nothing is said.
#[test]
fn without_otel_variables_nothing_is_exported() {
    let world = World::new();
    let collector = Collector::start(collector::Behaviour::Accept);
    let ok = valid_skill(&world, "quiet");
    // The collector exists but no variable names it; a bare service name configures nothing.
    let out = world
        .cmd(["skill", "validate"])
        .arg(&ok)
        .env("OTEL_SERVICE_NAME", "x")
        .success();
    assert!(out.stderr().is_empty(), "{}", out.report());
    assert!(collector.requests().is_empty());
}

/// A collector that is down (closed port) or hangs costs at most 2 s and one warning; the exit
/// code is the command's own.
#[test]
fn a_dead_or_hanging_collector_costs_at_most_two_seconds_and_one_warning() {
    let world = World::new();
    let ok = valid_skill(&world, "slow");
    let usual = world.cmd(["skill", "validate"]).arg(&ok).success().elapsed;

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let hanging = Collector::start(collector::Behaviour::Hang);
    for endpoint in [closed.as_str(), hanging.endpoint.as_str()] {
        let out = world
            .cmd(["skill", "validate"])
            .arg(&ok)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_LOGS_EXPORTER", "otlp")
            .success();
        // 2 s of budget plus process start-up noise on a loaded machine.
        assert!(
            out.elapsed < usual + Duration::from_millis(2500),
            "{}",
            out.report()
        );
        let warnings: Vec<String> = out
            .stderr()
            .lines()
            .filter(|l| l.starts_with("cyberos: telemetry"))
            .map(String::from)
            .collect();
        assert_eq!(warnings.len(), 1, "{}", out.report());
        assert!(
            warnings[0].contains("that telemetry is lost"),
            "{}",
            out.report()
        );
        assert_eq!(
            out.stderr().lines().count(),
            1,
            "nothing else on stderr\n{}",
            out.report()
        );
        assert!(
            out.stdout().starts_with("ok: slow 1.0.0"),
            "{}",
            out.report()
        );
    }
    assert!(
        !hanging.requests().is_empty(),
        "the hanging collector was reached"
    );
}

/// `console` writes OTLP/JSON lines to stderr and leaves stdout alone.
#[test]
fn console_exporters_write_otlp_json_to_stderr_only() {
    let world = World::new();
    let ok = valid_skill(&world, "loud");
    let out = world
        .cmd(["skill", "validate", "--json"])
        .arg(&ok)
        .env("OTEL_TRACES_EXPORTER", "console")
        .env("OTEL_METRICS_EXPORTER", "console")
        .success();
    assert_eq!(out.json()["status"], "ok");
    assert_eq!(
        out.stdout().lines().count(),
        1,
        "stdout is the command's own\n{}",
        out.report()
    );
    let docs: Vec<serde_json::Value> = out
        .stderr()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{}", out.report())))
        .collect();
    let span_names: Vec<&str> = docs
        .iter()
        .flat_map(|d| d["resourceSpans"].as_array().into_iter().flatten())
        .flat_map(|rs| rs["scopeSpans"].as_array().into_iter().flatten())
        .flat_map(|ss| ss["spans"].as_array().into_iter().flatten())
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        span_names,
        ["skill.frontmatter.validate"],
        "{}",
        out.report()
    );
    assert!(
        docs.iter()
            .any(|d| d.to_string().contains("skill_frontmatter_validation_total")),
        "{}",
        out.report()
    );
}

/// Unsupported settings are reported once each and never fail the command.
#[test]
fn bad_settings_are_warnings() {
    let world = World::new();
    let ok = valid_skill(&world, "odd");
    let out = world
        .cmd(["skill", "validate"])
        .arg(&ok)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_LOGS_EXPORTER", "kafka")
        .success();
    let stderr = out.stderr();
    assert!(
        stderr.contains(
            "cyberos: telemetry: OTEL_EXPORTER_OTLP_PROTOCOL: protocol \"grpc\" is not supported"
        ),
        "{}",
        out.report()
    );
    assert!(
        stderr.contains("cyberos: telemetry: OTEL_LOGS_EXPORTER: unknown exporter \"kafka\""),
        "{}",
        out.report()
    );
    assert!(
        !stderr.contains("export failed"),
        "nothing was built, so nothing failed\n{}",
        out.report()
    );
}

/// No async runtime and no second HTTP stack in the shipped binary's dependency tree.
#[test]
fn no_tokio_reqwest_hyper_or_tonic_in_the_dependency_tree() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = std::process::Command::new(&cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--manifest-path",
            manifest,
        ])
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            eprintln!("skipped: cannot run {cargo} tree: {e}");
            return;
        }
    };
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        tree.lines().any(|l| l.starts_with("opentelemetry-otlp ")),
        "{tree}"
    );
    let banned: BTreeMap<&str, Vec<&str>> =
        ["tokio", "reqwest", "hyper", "hyper-util", "tonic", "h2"]
            .into_iter()
            .map(|name| {
                let hits = tree
                    .lines()
                    .filter(|l| l.split_whitespace().next() == Some(name))
                    .collect();
                (name, hits)
            })
            .collect();
    assert!(banned.values().all(Vec::is_empty), "{banned:#?}");
}

/// Exporting needs no privilege: the same export works as an unprivileged user.
#[test]
fn an_unprivileged_user_exports_too() {
    if !util::is_root() {
        eprintln!("skipped: needs root to run the command as another uid");
        return;
    }
    let world = World::new();
    let collector = Collector::start(collector::Behaviour::Accept);
    let ok = valid_skill(&world, "nobody");
    let mut cmd = world.cmd(["skill", "validate"]);
    cmd.arg(&ok)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    let out = cmd.unprivileged().success();
    assert!(!out.stderr().contains("telemetry"), "{}", out.report());
    let spans = collector::settle(|| {
        let spans = collector.spans();
        (!spans.is_empty()).then_some(spans)
    })
    .expect("the span arrives");
    assert_eq!(spans[0].name, "skill.frontmatter.validate");
    assert_eq!(spans[0].attr("skill_id").as_deref(), Some("nobody"));
}
