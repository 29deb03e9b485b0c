//! Load: one skill making calls as fast as it can, many invocations at once over several
//! connections each, and a slow-loris connection beside a normal one. Afterwards the journal
//! holds exactly the expected rows and its hash chain verifies.
//!
//! The full sizes of the reliability plan (100,000 calls; 16 × 2,000 calls; one byte a second)
//! take minutes and run with `CYBEROS_LONG_TESTS=1`; without it each test runs a smaller version
//! of the same scenario, so CI always exercises it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::invoke::{PY_PRELUDE, reported, rows};
use crate::util::World;

/// True when the long versions were asked for.
pub fn long_tests() -> bool {
    std::env::var("CYBEROS_LONG_TESTS").is_ok_and(|v| v == "1")
}

/// Says which version of a test runs.
pub fn announce(test: &str, long: bool, what: &str) {
    if long {
        eprintln!("{test}: long version ({what})");
    } else {
        eprintln!("{test}: short version ({what}); CYBEROS_LONG_TESTS=1 runs the full size");
    }
}

/// Python helpers for load skills: a buffered reader and a windowed call loop.
pub const PY_LOAD: &str = r#"
def reader(s):
    return s.makefile("rb", buffering=1 << 16)
def read_frame(rf):
    head = rf.read(4)
    if len(head) < 4:
        raise EOFError("closed")
    (n,) = struct.unpack(">I", head)
    return json.loads(rf.read(n))
def request(i, tool, args):
    return frame({"jsonrpc": "2.0", "id": i, "method": "tool.call",
                  "params": {"tool": tool, "args": args}})
def hammer(s, n, tool, args, window=64, first_id=0):
    """n calls on one connection with up to `window` in flight; returns (ok, first errors)."""
    rf = reader(s)
    sent = ok = 0
    bad = []
    while sent < min(window, n):
        s.sendall(request(first_id + sent, tool, args)); sent += 1
    for _ in range(n):
        r = read_frame(rf)
        if "result" in r:
            ok += 1
        elif len(bad) < 3:
            bad.append(r)
        if sent < n:
            s.sendall(request(first_id + sent, tool, args)); sent += 1
    return ok, bad
"#;

pub const MEMORY_DOC: &str = "memories/load/doc.md";

/// A bundle whose skill may read `memories/**`, with the document it reads seeded.
pub fn load_skill(world: &World, name: &str, body: &str) -> std::path::PathBuf {
    let path = world.home().join("memory").join(MEMORY_DOC);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("memory dir");
    std::fs::write(&path, "load\n").expect("seed");
    let md = format!(
        "---\nid: {name}\nversion: 1.0.0\ndescription: load test\nallowed_memory_scopes: [\"memories/**\"]\nallowed_tools: [MemoryRead]\n---\nbody\n"
    );
    world.bundle(name, &md, &format!("{PY_PRELUDE}{PY_LOAD}\n{body}"))
}

/// How many rows of each kind.
pub fn kinds(rows: &[Value]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rows {
        *out.entry(r["kind"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    out
}

/// Every call id has exactly one started and one completed row (started first), and the ids
/// are call-1..call-N.
pub fn assert_calls_paired(rows: &[Value]) {
    let mut seen: BTreeMap<String, Vec<(&str, i64)>> = BTreeMap::new();
    for r in rows {
        let kind = r["kind"].as_str().unwrap_or("");
        if matches!(
            kind,
            "skill.tool_call_started" | "skill.tool_call_completed" | "skill.tool_denied"
        ) {
            let id = r["payload"]["call_id"]
                .as_str()
                .expect("call_id")
                .to_owned();
            seen.entry(id)
                .or_default()
                .push((kind, r["seq"].as_i64().expect("seq")));
        }
    }
    for (id, marks) in &seen {
        let kinds: Vec<&str> = marks.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            ["skill.tool_call_started", "skill.tool_call_completed"],
            "{id}: {marks:?}"
        );
    }
    let want: BTreeSet<String> = (1..=seen.len()).map(|n| format!("call-{n}")).collect();
    let have: BTreeSet<String> = seen.keys().cloned().collect();
    assert_eq!(have, want, "call ids are not call-1..call-{}", seen.len());
}

/// Exactly `calls` started/completed pairs and the invocation's two rows, nothing else.
pub fn assert_exact_rows(world: &World, invocation_id: &str, calls: usize) {
    let rows = rows(world, invocation_id);
    let kinds = kinds(&rows);
    let want: BTreeMap<String, usize> = [
        ("skill.invoked_started", 1),
        ("skill.invoked_completed", 1),
        ("skill.tool_call_started", calls),
        ("skill.tool_call_completed", calls),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| (k.to_owned(), n))
    .collect();
    assert_eq!(kinds, want, "rows of {invocation_id}");
    assert_calls_paired(&rows);
    assert!(
        rows.iter()
            .filter(|r| r["kind"] == "skill.tool_call_completed")
            .all(|r| r["payload"]["outcome"] == "success"),
        "a call did not succeed"
    );
}

pub fn verify(world: &World) {
    world.cmd(["skill", "broker", "verify"]).success();
}

#[test]
fn one_skill_making_calls_as_fast_as_it_can_loses_no_row() {
    let long = long_tests();
    let n = if long { 100_000 } else { 5_000 };
    announce("fast calls", long, &format!("{n} calls"));
    let world = World::new();
    let bundle = load_skill(
        &world,
        "hammer",
        &format!(
            "t0 = time.monotonic()\nok, bad = hammer(connect(), {n}, 'MemoryRead', {{'path': '{MEMORY_DOC}'}})\n\
             out('ok', ok)\nout('bad', bad)\nout('seconds', time.monotonic() - t0)\n"
        ),
    );
    let started = Instant::now();
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    let r = reported(&out.stdout());
    assert_eq!(r["ok"], n, "{}", out.report());
    eprintln!(
        "fast calls: {n} calls in {:.1} s inside the skill ({:?} in all)",
        r["seconds"].as_f64().unwrap_or(0.0),
        started.elapsed()
    );
    let summary = out.json();
    assert_eq!(summary["tool_calls"], n);
    assert_eq!(summary["denied"], 0);
    assert_exact_rows(&world, summary["invocation_id"].as_str().unwrap(), n);
    verify(&world);
}

#[test]
fn concurrent_invocations_over_several_connections_each_lose_no_row() {
    let long = long_tests();
    let (invocations, per_conn, conns) = if long { (16, 500, 4) } else { (16, 25, 4) };
    let calls = per_conn * conns;
    announce(
        "concurrent invocations",
        long,
        &format!("{invocations} invocations x {calls} calls over {conns} connections"),
    );
    let world = World::new();
    let body = format!(
        "import threading\nresults = [None] * {conns}\n\
         def worker(k):\n    results[k] = hammer(connect(), {per_conn}, 'MemoryRead', {{'path': '{MEMORY_DOC}'}}, window=16, first_id=k * 1000000)\n\
         threads = [threading.Thread(target=worker, args=(k,)) for k in range({conns})]\n\
         [t.start() for t in threads]\n[t.join() for t in threads]\n\
         out('ok', sum(r[0] for r in results))\nout('bad', [r[1] for r in results])\n"
    );
    let bundle = load_skill(&world, "crowd", &body);
    let children: Vec<_> = (0..invocations)
        .map(|_| {
            let mut cmd = world.cmd(["skill", "invoke", "--json"]);
            cmd.arg(&bundle);
            let child = cmd.spawn();
            (cmd.describe(), child)
        })
        .collect();
    let mut ids = BTreeSet::new();
    for (desc, child) in children {
        let output = child.wait_with_output().expect("wait");
        let out = crate::util::Out {
            desc,
            output,
            elapsed: Duration::ZERO,
        };
        assert_eq!(out.code(), Some(0), "{}", out.report());
        assert_eq!(reported(&out.stdout())["ok"], calls, "{}", out.report());
        let summary = out.json();
        assert_eq!(summary["tool_calls"], calls);
        ids.insert(summary["invocation_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), invocations);
    for id in &ids {
        assert_exact_rows(&world, id, calls);
    }
    verify(&world);
}

#[test]
fn a_slow_loris_connection_does_not_slow_another_connection_down() {
    let long = long_tests();
    let interval = if long { 1.0 } else { 0.05 };
    announce("slow loris", long, &format!("one byte every {interval} s"));
    let world = World::new();
    let body = format!(
        r#"import threading
INTERVAL = {interval}
loris_result = {{}}
def loris():
    s = connect()
    data = frame({{"jsonrpc": "2.0", "id": "loris", "method": "broker.status"}})
    for i in range(len(data)):
        s.sendall(data[i:i + 1])
        time.sleep(INTERVAL)
    loris_result["r"] = recv(s)
t = threading.Thread(target=loris)
t.start()
s = connect()
rf = reader(s)
latencies, ok, i = [], 0, 0
while t.is_alive():
    t0 = time.monotonic()
    s.sendall(request(i, "MemoryRead", {{"path": "{MEMORY_DOC}"}}))
    r = read_frame(rf)
    latencies.append(time.monotonic() - t0)
    ok += "result" in r
    i += 1
t.join()
out("calls", i)
out("ok", ok)
out("max_latency", max(latencies))
out("loris", loris_result.get("r"))
"#
    );
    let bundle = load_skill(&world, "loris", &body);
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    let r = reported(&out.stdout());
    let calls = r["calls"].as_u64().expect("calls");
    assert_eq!(r["ok"], calls, "{}", out.report());
    assert!(
        calls >= 10,
        "only {calls} calls were served\n{}",
        out.report()
    );
    let max = r["max_latency"].as_f64().expect("latency");
    assert!(
        max < 2.0,
        "a call waited {max:.2} s behind the slow connection"
    );
    assert_eq!(r["loris"]["id"], "loris", "{}", out.report());
    assert!(r["loris"]["result"]["skill_id"] == "loris");
    let summary = out.json();
    assert_exact_rows(
        &world,
        summary["invocation_id"].as_str().unwrap(),
        calls as usize,
    );
    verify(&world);
}
