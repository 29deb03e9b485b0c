//! Case 6: the journal under load. `broker status` over a journal of 1,000,000 rows (against the
//! same counter query run by the sqlite3 shell), and 16 concurrent invocations × 500 audited
//! calls each: throughput, and every row accounted for and the chain intact afterwards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use cyberos::journal::{BrokerIdentity, Journal, kind};
use serde_json::json;

use crate::common::{self, Workspace};
use crate::report::{Row, Target, Unit};
use crate::rpc::RpcSkill;
use crate::stats::Summary;

const CASE: &str = "6. journal";
const ROWS: usize = 1_000_000;
const PER_INVOCATION: usize = 1_000;

/// `target/bench-data/journal-1m-v1`: a home whose journal holds ROWS rows written through the
/// journal's own append path: 1,000 completed invocations of 499 calls each. Generated once.
fn big_journal() -> PathBuf {
    let home = common::data_dir().join("journal-1m-v1");
    let done = common::data_dir().join("journal-1m-v1.complete");
    if done.exists() {
        return home;
    }
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).expect("create journal home");
    let journal = Journal::open(&home).expect("open the journal");
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let hash = "3f2a1b9c44aa00112233445566778899aabbccddeeff00112233445566778899";
    eprintln!("generating a journal of {ROWS} rows (once)...");
    for inv in 0..ROWS / PER_INVOCATION {
        let id = format!("00000000-0000-4000-8000-{inv:012}");
        let base = json!({"invocation_id": id, "skill_id": "memory-capture", "trace_id": trace});
        let with = |extra: serde_json::Value| {
            let mut p = base.clone();
            p.as_object_mut()
                .expect("object")
                .extend(extra.as_object().expect("object").clone());
            p
        };
        journal
            .register_invocation(
                &id,
                "memory-capture",
                BrokerIdentity {
                    pid: 1,
                    start_time: 0,
                },
            )
            .expect("register");
        journal
            .append(kind::INVOKED_STARTED, &with(json!({"skill_version": "1.0.0", "tenant_id": "00000000-0000-0000-0000-000000000000", "pid": 1, "deadline_ms": 60000, "sandbox": {}})))
            .expect("append");
        for call in 1..PER_INVOCATION / 2 {
            let call_id = format!("call-{call}");
            journal
                .append(
                    kind::TOOL_CALL_STARTED,
                    &with(
                        json!({"call_id": call_id, "tool_name": "MemoryRead", "args_hash": hash}),
                    ),
                )
                .expect("append");
            journal
                .append(kind::TOOL_CALL_COMPLETED, &with(json!({"call_id": call_id, "tool_name": "MemoryRead", "outcome": "success", "duration_ms": 0, "result_hash": hash})))
                .expect("append");
        }
        journal
            .append(kind::INVOKED_COMPLETED, &with(json!({"outcome": "success", "exit_code": 0, "signal": null, "duration_ms": 50, "tool_calls": 499, "denied": 0})))
            .expect("append");
    }
    drop(journal);
    std::fs::write(&done, "").expect("mark the journal complete");
    home
}

fn count_rows(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("open journal");
    conn.query_row("SELECT count(*) FROM rows", [], |r| r.get(0))
        .expect("count rows")
}

pub fn status(rounds: usize, runs: usize) -> (Vec<Row>, String) {
    let home = big_journal();
    let db = home.join("journal.db");
    let rows = count_rows(&db);
    assert!(rows >= ROWS as i64, "the journal holds {rows} rows");
    let today = cyberos::util::now_ms().div_euclid(86_400_000);
    let times = common::hyperfine(
        &[
            (
                "status",
                format!(
                    "{} skill broker status --home {}",
                    common::cyberos(),
                    home.display()
                ),
            ),
            (
                "sqlite3",
                format!(
                    "sqlite3 {} 'SELECT kind, n FROM day_counts WHERE day = {today}'",
                    db.display()
                ),
            ),
        ],
        rounds,
        runs,
    );
    (
        vec![
            Row::new(
                CASE,
                format!("`cyberos skill broker status` over {rows} rows"),
                Unit::Ms,
                Summary::of(&times[0]),
            )
            .baseline(
                "`sqlite3` shell, the same counter query",
                Summary::of(&times[1]),
            )
            .target(Target::AtMost(50.0)),
        ],
        format!("journal for status: {rows} rows"),
    )
}

fn spawn(skill: &RpcSkill, calls: usize) -> Child {
    skill
        .command(&["calls".into(), calls.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn an invocation")
}

/// Waits for an invocation; returns its invocation id.
fn finish(child: Child) -> String {
    let out = child.wait_with_output().expect("wait for an invocation");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "invocation failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .expect("summary");
    summary["invocation_id"]
        .as_str()
        .expect("invocation id")
        .to_owned()
}

/// Rows the journal lacks for these invocations: each must have its started and completed rows
/// and a started and completed row per call.
fn lost_rows(home: &Path, ids: &[String], calls: usize) -> usize {
    let journal = Journal::open_existing(home)
        .expect("open journal")
        .expect("journal exists");
    ids.iter()
        .map(|id| {
            let rows = journal.rows_for(id, 0).expect("rows");
            (2 + 2 * calls).saturating_sub(rows.len())
        })
        .sum()
}

pub fn concurrent(ws: &Workspace, rounds: usize, invocations: usize, calls: usize) -> Vec<Row> {
    let skill = RpcSkill::new(ws, "home-concurrent");
    let (mut many, mut one, mut lost) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut single = || {
            let t = Instant::now();
            let id = finish(spawn(&skill, calls));
            one.push(calls as f64 / t.elapsed().as_secs_f64());
            id
        };
        let mut parallel = || {
            let t = Instant::now();
            let children: Vec<Child> = (0..invocations).map(|_| spawn(&skill, calls)).collect();
            let ids: Vec<String> = children.into_iter().map(finish).collect();
            many.push((invocations * calls) as f64 / t.elapsed().as_secs_f64());
            ids
        };
        let ids = if round % 2 == 0 {
            single();
            parallel()
        } else {
            let ids = parallel();
            single();
            ids
        };
        lost.push(lost_rows(&skill.home, &ids, calls) as f64);
    }
    let verify = Command::new(common::cyberos())
        .args(["skill", "broker", "verify", "--home"])
        .arg(&skill.home)
        .output()
        .expect("run broker verify");
    assert!(
        verify.status.success(),
        "the journal's chain is broken after the concurrent run: {}",
        String::from_utf8_lossy(&verify.stdout)
    );
    vec![
        Row::new(
            CASE,
            format!(
                "{invocations} concurrent invocations × {calls} audited MemoryReads: throughput"
            ),
            Unit::PerSec,
            Summary::of(&many),
        )
        .baseline(format!("1 invocation × {calls} calls"), Summary::of(&one)),
        Row::new(
            CASE,
            format!(
                "the same: rows missing afterwards (of {} per round; chain verified)",
                invocations * (2 + 2 * calls)
            ),
            Unit::Count,
            Summary::of(&lost),
        )
        .target(Target::Equals(0.0)),
    ]
}
