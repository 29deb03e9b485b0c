//! Case 7a: the broker's peak resident memory (VmHWM of the `cyberos skill invoke` process)
//! while its skill makes 10,000 audited MemoryReads, against the same broker whose skill makes
//! none. The client holds the invocation open until the figures are read.

use std::io::{BufRead as _, BufReader};
use std::process::Stdio;

use crate::common::Workspace;
use crate::report::{Row, Target, Unit};
use crate::rpc::RpcSkill;
use crate::stats::Summary;

fn status_kib(pid: u32, field: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} missing"))
}

/// Peak RSS in MiB of a broker whose skill made `calls` calls.
fn peak(skill: &RpcSkill, calls: usize) -> f64 {
    let mut child = skill
        .command(&["hold".into(), calls.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the invocation");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("the client's line");
    assert!(
        line.contains("\"calls\""),
        "unexpected client output {line:?}"
    );
    let hwm = status_kib(child.id(), "VmHWM:") / 1024.0;
    drop(child.stdin.take());
    let status = child.wait().expect("wait");
    assert!(status.success(), "invocation failed: {status}");
    hwm
}

pub fn run(ws: &Workspace, rounds: usize, calls: usize) -> Vec<Row> {
    let skill = RpcSkill::new(ws, "home-memory");
    let (mut busy, mut idle) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        busy.push(peak(&skill, calls));
        idle.push(peak(&skill, 0));
    }
    vec![
        Row::new(
            "7. memory and startup",
            format!("broker peak RSS during {calls} audited calls"),
            Unit::MiB,
            Summary::of(&busy),
        )
        .baseline("the same broker, no calls", Summary::of(&idle))
        .target(Target::AtMost(20.0)),
    ]
}
