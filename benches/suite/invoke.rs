//! Case 1 (invocation overhead) and case 7b (`cyberos --version`): whole processes timed by
//! hyperfine, each against its baselines in the same rounds.

use std::path::Path;

use crate::common::{self, Workspace};
use crate::report::{Row, Target, Unit};
use crate::stats::Summary;

pub fn run(ws: &Workspace, rounds: usize, runs: usize) -> Vec<Row> {
    let noop = common::bundle(
        &ws.path().join("bundles"),
        "bench-noop",
        Path::new("/bin/true"),
        "allowed_memory_scopes: []\nallowed_tools: []\n",
    );
    let home = ws.home("home-invoke");
    let cyberos = common::cyberos();
    let invoke = format!(
        "{cyberos} skill invoke {} --home {}",
        noop.display(),
        home.display()
    );
    // The skill must really run and succeed before its time means anything.
    let check = std::process::Command::new(cyberos)
        .args(["skill", "invoke"])
        .arg(&noop)
        .arg("--home")
        .arg(&home)
        .arg("--json")
        .output()
        .expect("run the no-op skill");
    let summary = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && summary.contains("\"outcome\":\"success\""),
        "the no-op skill failed: {summary} {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let bwrap = common::bwrap_command("/bin/true");
    let version = format!("{cyberos} --version");
    let times = common::hyperfine(
        &[
            ("invoke", invoke),
            ("bwrap", bwrap),
            ("true", "/bin/true".into()),
            ("version", version),
        ],
        rounds,
        runs,
    );
    let [invoke, bwrap, truth, version] = [0, 1, 2, 3].map(|i| Summary::of(&times[i]));
    let case = "1. invocation overhead";
    vec![
        Row::new(
            case,
            "`cyberos skill invoke` of a no-op skill (`main` = /bin/true), full sandbox",
            Unit::Ms,
            invoke,
        )
        .baseline("`bwrap --unshare-all ...` /bin/true", bwrap)
        .target(Target::RatioAtMost(1.0)),
        Row::new(case, "the same invocation", Unit::Ms, invoke).baseline("plain /bin/true", truth),
        Row::new(
            "7. memory and startup",
            "`cyberos --version`",
            Unit::Ms,
            version,
        )
        .baseline("plain /bin/true", truth)
        .target(Target::AtMost(5.0)),
    ]
}
