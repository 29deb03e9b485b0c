//! Case 3: reads what `cargo bench --bench policy` (criterion) recorded for the enforcement
//! checks; the measuring is done there.

use std::path::{Path, PathBuf};

use crate::report::{Row, Target, Unit};
use crate::stats::Summary;

const CASE: &str = "3. enforcement alone";

fn criterion_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("criterion")
}

/// Per-iteration nanoseconds of every criterion sample of `group/name`.
fn samples(group: &str, name: &str) -> Option<Vec<f64>> {
    let path = criterion_dir()
        .join(group)
        .join(name)
        .join("new/sample.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let iters = json["iters"].as_array()?;
    let times = json["times"].as_array()?;
    Some(
        iters
            .iter()
            .zip(times)
            .filter_map(|(i, t)| Some(t.as_f64()? / i.as_f64()?))
            .collect(),
    )
}

pub fn rows() -> Result<Vec<Row>, String> {
    let checks = [
        ("tool_allowed", "tool allowed (allow/deny lists)"),
        ("memory_hit", "memory path, allowed by the 100th glob"),
        ("memory_miss", "memory path, allowed by none of 100"),
        ("file_hit", "file path, allowed by the 100th glob"),
        ("file_miss", "file path, allowed by none of 100"),
        ("domain_hit", "domain, allowed by the 100th glob"),
        ("domain_miss", "domain, allowed by none of 100"),
        (
            "memory_read_check",
            "whole `MemoryRead` check: args + canonical path + scope",
        ),
    ];
    let mut rows = Vec::new();
    for (name, what) in checks {
        let s = samples("enforcement", name).ok_or_else(|| {
            format!(
                "no criterion samples for enforcement/{name} in {}: run `cargo bench --bench policy` first",
                criterion_dir().display()
            )
        })?;
        rows.push(Row::new(CASE, what, Unit::Ns, Summary::of(&s)).target(Target::AtMost(2_000.0)));
    }
    if let Some(s) = samples("enforcement_compile", "policy_from_manifest") {
        rows.push(Row::new(
            CASE,
            "compiling the 300-glob policy (once per invocation)",
            Unit::Us,
            Summary::of(&s).scaled(1e-3),
        ));
    }
    Ok(rows)
}
