//! `skill invoke` end to end: the broker lifecycle, protocol, enforcement, limits and deadline
//! (seed acceptance 1–5, 8–17, 24 of TASK-SKILL-104), through the real binary.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{World, skill_md, wait_for};

/// Python helpers prepended to protocol-level test skills.
pub const PY_PRELUDE: &str = r#"#!/usr/bin/env python3
import json, os, socket, struct, sys, time
SOCK = os.environ["CYBEROS_BROKER_SOCKET"]
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(SOCK)
    return s
def frame(body):
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    return struct.pack(">I", len(body)) + body
def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("closed")
        buf += chunk
    return buf
def recv(s):
    (n,) = struct.unpack(">I", recv_exact(s, 4))
    return json.loads(recv_exact(s, n))
def call(s, tool, args, id=1, **extra):
    params = {"tool": tool, "args": args}
    params.update(extra)
    s.sendall(frame({"jsonrpc": "2.0", "id": id, "method": "tool.call", "params": params}))
    return recv(s)
def out(key, value):
    print(json.dumps({key: value}), flush=True)
"#;

/// The JSON lines a test skill printed, keyed by their single key.
pub fn reported(stdout: &str) -> serde_json::Map<String, Value> {
    let mut map = serde_json::Map::new();
    for line in stdout.lines() {
        if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(line) {
            if obj.len() == 1 {
                map.extend(obj);
            }
        }
    }
    map
}

/// Rows of one invocation, read with the library from the world's journal.
pub fn rows(world: &World, invocation_id: &str) -> Vec<Value> {
    let Some(journal) = cyberos::journal::Journal::open_existing(&world.home()).expect("journal")
    else {
        return Vec::new();
    };
    journal
        .rows_for(invocation_id, 0)
        .expect("rows")
        .iter()
        .map(|r| r.to_json())
        .collect()
}

fn of_kind<'a>(rows: &'a [Value], kind: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["kind"] == kind).collect()
}

fn memory_skill(
    world: &World,
    name: &str,
    tools: &str,
    extra: &str,
    body: &str,
) -> std::path::PathBuf {
    let md = format!(
        "---\nid: {name}\nversion: 1.0.0\ndescription: test\nallowed_memory_scopes: [\"memories/projects/cyberos/**\"]\nallowed_tools: [{tools}]\n{extra}---\nbody\n"
    );
    world.bundle(name, &md, &format!("{PY_PRELUDE}\n{body}"))
}

fn seed_memory(world: &World, rel: &str, text: &str) {
    let path = world.home().join("memory").join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn allowed_call_succeeds_and_is_audited_as_a_started_completed_pair() {
    let world = World::new();
    seed_memory(
        &world,
        "memories/projects/cyberos/notes/x.md",
        "design notes\n",
    );
    let bundle = memory_skill(
        &world,
        "mem-read",
        "MemoryRead",
        "",
        r#"s = connect()
r = call(s, "MemoryRead", {"path": "memories/projects/cyberos/notes/x.md"}, id="call-1")
out("resp", r)
"#,
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    let resp = &reported(&out.stdout())["resp"];
    assert_eq!(resp["id"], "call-1", "{}", out.report());
    assert_eq!(resp["result"]["body"], "design notes\n", "{}", out.report());
    let summary = out.json();
    assert_eq!(summary["outcome"], "success");
    assert_eq!(summary["tool_calls"], 1);
    assert_eq!(summary["denied"], 0);
    let id = summary["invocation_id"].as_str().unwrap();
    let rows = rows(&world, id);
    let started = of_kind(&rows, "skill.tool_call_started");
    let completed = of_kind(&rows, "skill.tool_call_completed");
    assert_eq!((started.len(), completed.len()), (1, 1), "{rows:#?}");
    assert_eq!(
        started[0]["payload"]["call_id"],
        completed[0]["payload"]["call_id"]
    );
    assert_eq!(
        started[0]["payload"]["trace_id"],
        completed[0]["payload"]["trace_id"]
    );
    assert_eq!(started[0]["payload"]["invocation_id"], id);
    assert_eq!(completed[0]["payload"]["outcome"], "success");
    assert!(started[0]["seq"].as_i64() < completed[0]["seq"].as_i64());
    // Raw arguments never reach the journal, only their hash.
    let all = serde_json::to_string(&rows).unwrap();
    assert!(
        !all.contains("notes/x.md"),
        "raw args leaked into the journal"
    );
    assert_eq!(of_kind(&rows, "skill.invoked_started").len(), 1);
    assert_eq!(
        of_kind(&rows, "skill.invoked_completed")[0]["payload"]["outcome"],
        "success"
    );
}

#[test]
fn tools_outside_the_allowlist_and_in_the_denylist_are_refused_with_a_denied_row() {
    let world = World::new();
    let bundle = memory_skill(
        &world,
        "mem-deny",
        "MemoryRead, Read",
        "disallowed_tools: [Read]\n",
        r#"s = connect()
out("bash", call(s, "Bash", {"cmd": "ls"}, id="call-1"))
out("read", call(s, "Read", {"path": "/etc/hostname"}, id="call-2"))
out("nosuch", call(s, "NoSuchTool", {}, id="call-3"))
"#,
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    let r = reported(&out.stdout());
    assert_eq!(
        r["bash"]["error"],
        json!({"code": -32603, "message": "tool_not_allowed",
               "data": {"reason": "tool_not_in_allowed_tools", "tool": "Bash", "skill_id": "mem-deny"}}),
        "{}",
        out.report()
    );
    assert_eq!(
        r["read"]["error"]["data"]["reason"],
        "tool_in_disallowed_tools"
    );
    assert_eq!(r["read"]["error"]["code"], -32603);
    assert_eq!(r["nosuch"]["error"]["message"], "tool_not_allowed");
    let summary = out.json();
    assert_eq!(
        (summary["tool_calls"].as_u64(), summary["denied"].as_u64()),
        (Some(3), Some(3))
    );
    let rows = rows(&world, summary["invocation_id"].as_str().unwrap());
    let denied = of_kind(&rows, "skill.tool_denied");
    assert_eq!(denied.len(), 3);
    assert_eq!(denied[0]["payload"]["reason"], "tool_not_in_allowed_tools");
    assert_eq!(denied[0]["payload"]["tool_name"], "Bash");
    assert_eq!(
        denied[0]["payload"]["attempted_args_hash"],
        cyberos::util::canonical_hash(&json!({"cmd": "ls"}))
    );
    assert!(
        denied[0]["payload"]["trace_id"]
            .as_str()
            .is_some_and(|t| t.len() == 32)
    );
    assert!(of_kind(&rows, "skill.tool_call_started").is_empty());
}

#[test]
fn memory_scopes_are_checked_after_canonicalisation() {
    let world = World::new();
    seed_memory(&world, "memories/projects/cyberos/x.md", "ok\n");
    seed_memory(&world, "memories/people/y.md", "secret\n");
    let bundle = memory_skill(
        &world,
        "mem-scope",
        "MemoryRead",
        "",
        r#"s = connect()
out("inside", call(s, "MemoryRead", {"path": "memories/projects/cyberos/x.md"}))
out("outside", call(s, "MemoryRead", {"path": "memories/people/y.md"}))
out("dotdot", call(s, "MemoryRead", {"path": "memories/projects/cyberos/../../people/y.md"}))
"#,
    );
    let out = world.cmd(["skill", "invoke"]).arg(&bundle).success();
    let r = reported(&out.stdout());
    assert_eq!(r["inside"]["result"]["body"], "ok\n", "{}", out.report());
    assert_eq!(r["outside"]["error"]["message"], "scope_violation");
    assert_eq!(
        r["outside"]["error"]["data"]["path"],
        "memories/people/y.md"
    );
    assert_eq!(r["dotdot"]["error"]["message"], "scope_violation");
    assert_eq!(r["dotdot"]["error"]["data"]["path"], "memories/people/y.md");
    assert_eq!(r["dotdot"]["error"]["code"], -32603);
}

#[test]
fn the_skill_sees_exactly_the_contract_environment_and_only_fds_0_to_2() {
    let world = World::new();
    let bundle = world.bundle(
        "env-probe",
        &skill_md("env-probe", &[], ""),
        r#"#!/usr/bin/env python3
import json, os
print(json.dumps({"env": dict(os.environ)}))
print(json.dumps({"fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))}))
"#,
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .env("JWT_SECRET", "hunter2")
        .env("AWS_SECRET_ACCESS_KEY", "x")
        .success();
    let r = reported(&out.stdout());
    let env = r["env"].as_object().expect("env");
    let mut keys: Vec<&str> = env.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "CYBEROS_BROKER_SOCKET",
            "CYBEROS_INVOCATION_ID",
            "CYBEROS_SKILL_ID",
            "CYBEROS_TENANT_ID",
            "HOME",
            "LANG",
            "PATH",
            "RUST_LOG",
            "TMPDIR",
            "TRACEPARENT"
        ],
        "{}",
        out.report()
    );
    let summary = out.json();
    assert_eq!(env["CYBEROS_INVOCATION_ID"], summary["invocation_id"]);
    assert_eq!(env["CYBEROS_SKILL_ID"], "env-probe");
    assert_eq!(
        env["CYBEROS_TENANT_ID"],
        "00000000-0000-0000-0000-000000000000"
    );
    assert_eq!(env["RUST_LOG"], "warn");
    assert_eq!(env["LANG"], "C.UTF-8");
    assert!(cyberos::util::TraceContext::parse(env["TRACEPARENT"].as_str().unwrap()).is_some());
    assert_eq!(
        env["CYBEROS_BROKER_SOCKET"],
        format!(
            "/tmp/cyberos-skill-broker.{}.sock",
            summary["invocation_id"].as_str().unwrap()
        )
    );
    // Python itself opens the listing directory: what it lists beyond 0-2 is that fd alone.
    let fds: Vec<i64> = r["fds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(&fds[..3], &[0, 1, 2], "{}", out.report());
    assert!(fds.len() <= 4, "leaked fds: {fds:?}");
}

#[test]
fn a_one_gigabyte_allocation_fails_under_the_address_space_limit() {
    let world = World::new();
    let bundle = world.bundle(
        "alloc",
        &skill_md("alloc", &[], ""),
        r#"#!/usr/bin/env python3
import json
try:
    b = bytearray(1 << 30)
    print(json.dumps({"alloc": "succeeded"}))
except MemoryError:
    print(json.dumps({"alloc": "MemoryError"}))
"#,
    );
    let out = world.cmd(["skill", "invoke"]).arg(&bundle).success();
    assert_eq!(
        reported(&out.stdout())["alloc"],
        "MemoryError",
        "{}",
        out.report()
    );
}

#[test]
fn the_ninth_process_cannot_be_forked_even_when_the_broker_is_root() {
    let world = World::new();
    let bundle = world.bundle(
        "forker",
        &skill_md("forker", &[], ""),
        r#"#!/usr/bin/env python3
import json, os, time
pids, error = [], None
for i in range(16):
    try:
        pid = os.fork()
    except OSError as e:
        error = e.errno
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    pids.append(pid)
print(json.dumps({"forked": len(pids)}))
print(json.dumps({"errno": error}))
for p in pids:
    os.kill(p, 9)
"#,
    );
    let out = world.cmd(["skill", "invoke"]).arg(&bundle).success();
    let r = reported(&out.stdout());
    assert_eq!(r["errno"], libc::EAGAIN, "{}", out.report());
    let forked = r["forked"].as_u64().unwrap();
    // 8 processes in all: the skill itself plus at most 7 children (the sandbox's own init may
    // count against the same limit).
    assert!(
        (5..=7).contains(&forked),
        "forked {forked}\n{}",
        out.report()
    );
}

#[test]
fn the_deadline_sends_sigterm_at_90_percent_then_sigkill_at_100() {
    let world = World::new();
    let bundle = world.bundle(
        "sleeper",
        &skill_md("sleeper", &[], ""),
        r#"#!/usr/bin/env python3
import signal, sys, time
def on_term(sig, frame):
    print("TERM at %.3f" % time.time(), flush=True)
signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(0.05)
"#,
    );
    let started = Instant::now();
    let wall_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let out = world
        .cmd(["skill", "invoke", "--timeout", "3s", "--json"])
        .arg(&bundle)
        .code(124);
    let elapsed = started.elapsed();
    let term_wall: f64 = out
        .stdout()
        .lines()
        .find_map(|l| l.strip_prefix("TERM at "))
        .unwrap_or_else(|| panic!("no SIGTERM seen\n{}", out.report()))
        .parse()
        .unwrap();
    // Measured from before the broker started, so the SIGTERM (at 90 % = 2.7 s after the broker
    // started) cannot come earlier than 2.7 s; slack above for a loaded machine.
    let term_at = term_wall - wall_start;
    assert!(
        (2.65..3.0).contains(&term_at),
        "SIGTERM at {term_at:.3}s (want 2.7s)\n{}",
        out.report()
    );
    assert!(
        elapsed >= Duration::from_millis(2900),
        "ended after {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(8), "ended after {elapsed:?}");
    let summary = out.json();
    assert_eq!(summary["outcome"], "timeout");
    assert_eq!(summary["exit_code"], 124);
    let rows = rows(&world, summary["invocation_id"].as_str().unwrap());
    let timeout = of_kind(&rows, "skill.timeout");
    assert_eq!(timeout.len(), 1, "{rows:#?}");
    assert_eq!(timeout[0]["payload"]["signal"], "SIGKILL");
    assert_eq!(timeout[0]["payload"]["skill_id"], "sleeper");
    let completed = of_kind(&rows, "skill.invoked_completed");
    assert_eq!(completed[0]["payload"]["outcome"], "timeout");
}

#[test]
fn a_skill_that_exits_on_sigterm_still_exits_124() {
    let world = World::new();
    let bundle = world.bundle(
        "polite",
        &skill_md("polite", &[], ""),
        "#!/bin/sh\nexec sleep 30\n",
    );
    let started = Instant::now();
    let out = world
        .cmd(["skill", "invoke", "--timeout", "2s", "--json"])
        .arg(&bundle)
        .code(124);
    assert!(
        started.elapsed() < Duration::from_millis(1990),
        "{}",
        out.report()
    );
    let rows = rows(&world, out.json()["invocation_id"].as_str().unwrap());
    assert_eq!(
        of_kind(&rows, "skill.timeout")[0]["payload"]["signal"],
        "SIGTERM"
    );
}

#[test]
fn a_timeout_longer_than_the_budget_is_a_usage_error() {
    let world = World::new();
    let bundle = world.bundle(
        "short",
        &skill_md("short", &[], "effort_minutes: 1\n"),
        "#!/bin/sh\nexit 0\n",
    );
    world
        .cmd(["skill", "invoke", "--timeout", "2m"])
        .arg(&bundle)
        .code(2)
        .assert_stderr_contains("cyberos:");
    world
        .cmd(["skill", "invoke", "--timeout", "soon"])
        .arg(&bundle)
        .code(2);
}

#[test]
fn the_skills_exit_code_and_signal_death_are_passed_through() {
    let world = World::new();
    let seven = world.bundle("seven", &skill_md("seven", &[], ""), "#!/bin/sh\nexit 7\n");
    let out = world.cmd(["skill", "invoke", "--json"]).arg(&seven).code(7);
    assert_eq!(out.json()["outcome"], "failure");
    let segv = world.bundle(
        "segv",
        &skill_md("segv", &[], ""),
        "#!/bin/sh\nkill -SEGV $$\n",
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&segv)
        .code(128 + 11);
    assert_eq!(out.json()["outcome"], "panic");
    assert_eq!(out.json()["signal"], "SIGSEGV");
}

#[test]
fn an_oversized_request_is_refused_and_the_connection_keeps_working() {
    let world = World::new();
    seed_memory(&world, "memories/projects/cyberos/x.md", "ok\n");
    let bundle = memory_skill(
        &world,
        "big",
        "MemoryRead",
        "",
        r#"s = connect()
s.sendall(frame(b"x" * (2 * 1024 * 1024)))
out("big", recv(s))
out("next", call(s, "MemoryRead", {"path": "memories/projects/cyberos/x.md"}, id=2))
"#,
    );
    let out = world.cmd(["skill", "invoke"]).arg(&bundle).success();
    let r = reported(&out.stdout());
    assert_eq!(r["big"]["error"]["code"], -32603, "{}", out.report());
    assert_eq!(r["big"]["error"]["message"], "request_too_large");
    assert!(r["big"]["id"].is_null());
    assert_eq!(r["next"]["result"]["body"], "ok\n");
}

#[test]
fn json_rpc_edge_cases_behave_as_the_specification_says() {
    let world = World::new();
    let bundle = memory_skill(
        &world,
        "rpc",
        "MemoryRead",
        "",
        r#"s = connect()
s.sendall(frame(b'{"jsonrpc":"2.0","method":"foobar,"params":"bar","baz]'))
out("parse", recv(s))
s.sendall(frame(b'[]'))
out("empty", recv(s))
s.sendall(frame(b'[1,2,3]'))
out("invalid_batch", recv(s))
s.sendall(frame({"jsonrpc": "2.0", "method": "nope", "id": "m"}))
out("nomethod", recv(s))
s.sendall(frame({"jsonrpc": "2.0", "method": "tool.call", "params": {"args": {}}, "id": 5}))
out("badparams", recv(s))
s.sendall(frame(b''))
out("zero", recv(s))
s.sendall(frame(b'\xff\xfe'))
out("utf8", recv(s))
s.sendall(frame(b'[' * 100000))
out("deep", recv(s))
# notifications: no response at all, also for an all-notification batch
s.sendall(frame({"jsonrpc": "2.0", "method": "tool.list"}))
s.sendall(frame([{"jsonrpc": "2.0", "method": "tool.list"}, {"jsonrpc": "2.0", "method": "broker.status"}]))
s.sendall(frame([{"jsonrpc": "2.0", "method": "tool.list", "id": "a"}, {"jsonrpc": "2.0", "method": "tool.list"}, {"foo": "boo"}, {"jsonrpc": "2.0", "method": "broker.status", "id": "b"}]))
out("mixed", recv(s))
s.sendall(frame({"jsonrpc": "2.0", "method": "broker.status", "id": 9}))
out("status", recv(s))
"#,
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    let r = reported(&out.stdout());
    let code = |k: &str| r[k]["error"]["code"].as_i64();
    assert_eq!(code("parse"), Some(-32700), "{}", out.report());
    assert_eq!(code("empty"), Some(-32600));
    let batch = r["invalid_batch"].as_array().expect("batch response");
    assert_eq!(batch.len(), 3);
    assert!(
        batch
            .iter()
            .all(|e| e["error"]["code"] == -32600 && e["id"].is_null())
    );
    assert_eq!(code("nomethod"), Some(-32601));
    assert_eq!(r["nomethod"]["id"], "m");
    assert_eq!(code("badparams"), Some(-32602));
    assert_eq!(r["badparams"]["id"], 5);
    assert_eq!(code("zero"), Some(-32700));
    assert_eq!(code("utf8"), Some(-32700));
    assert_eq!(code("deep"), Some(-32700));
    let mixed = r["mixed"].as_array().expect("mixed batch");
    assert_eq!(mixed.len(), 3, "{mixed:#?}");
    assert_eq!(mixed[0]["id"], "a");
    assert!(mixed[0]["result"]["tools"].is_array());
    assert_eq!(mixed[1]["error"]["code"], -32600);
    assert_eq!(mixed[2]["id"], "b");
    let status = &r["status"]["result"];
    assert_eq!(status["skill_id"], "rpc");
    assert_eq!(status["invocation_id"], out.json()["invocation_id"]);
    assert!(status["remaining_ms"].as_i64().unwrap() > 0);
    for key in [
        "tenant_id",
        "started_at",
        "deadline_at",
        "tool_calls",
        "denied",
    ] {
        assert!(status.get(key).is_some(), "broker.status lacks {key}");
    }
}

#[test]
fn a_thousand_pipelined_calls_are_all_answered_and_audited() {
    let world = World::new();
    seed_memory(&world, "memories/projects/cyberos/x.md", "ok\n");
    let bundle = memory_skill(
        &world,
        "pipeline",
        "MemoryRead",
        "",
        r#"s = connect()
req = b"".join(frame({"jsonrpc": "2.0", "id": i, "method": "tool.call",
                      "params": {"tool": "MemoryRead", "args": {"path": "memories/projects/cyberos/x.md"}}})
               for i in range(1000))
s.sendall(req)
ids = set()
for _ in range(1000):
    r = recv(s)
    if r.get("result", {}).get("body") == "ok\n":
        ids.add(r["id"])
out("answered", len(ids))
"#,
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    assert_eq!(
        reported(&out.stdout())["answered"],
        1000,
        "{}",
        out.report()
    );
    let rows = rows(&world, out.json()["invocation_id"].as_str().unwrap());
    assert_eq!(of_kind(&rows, "skill.tool_call_started").len(), 1000);
    assert_eq!(of_kind(&rows, "skill.tool_call_completed").len(), 1000);
}

#[test]
fn concurrent_invocations_have_distinct_sockets_and_cannot_reach_each_other() {
    let world = World::new();
    let a_id = "0e3b1a2c-4f5d-4789-abcd-ef0123456789";
    let b_id = "1e3b1a2c-4f5d-4789-abcd-ef0123456789";
    let waiter = world.bundle(
        "waiter",
        &skill_md("waiter", &[], ""),
        &format!("{PY_PRELUDE}\nout('sock', SOCK)\ntime.sleep(3)\n"),
    );
    let prober = world.bundle(
        "prober",
        &skill_md("prober", &["MemoryRead"], ""),
        &format!(
            "{PY_PRELUDE}\nout('sock', SOCK)\nother = '/tmp/cyberos-skill-broker.{a_id}.sock'\n\
             try:\n    s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(other)\n    \
             s.sendall(frame({{'jsonrpc':'2.0','id':1,'method':'broker.status'}}))\n    out('other', recv(s))\n\
             except Exception as e:\n    out('other', type(e).__name__)\n"
        ),
    );
    let a = world
        .cmd(["skill", "invoke", "--invocation-id", a_id])
        .arg(&waiter)
        .start();
    let a_sock = format!("/tmp/cyberos-skill-broker.{a_id}.sock");
    wait_for(Duration::from_secs(10), || {
        std::path::Path::new(&a_sock).exists().then_some(())
    })
    .expect("first invocation's socket");
    let out = world
        .cmd(["skill", "invoke", "--invocation-id", b_id])
        .arg(&prober)
        .success();
    let r = reported(&out.stdout());
    assert_eq!(r["sock"], format!("/tmp/cyberos-skill-broker.{b_id}.sock"));
    // Either the path is not there at all inside B's sandbox, or A's broker refuses B's peer.
    assert!(
        matches!(
            r["other"].as_str(),
            Some(
                "FileNotFoundError"
                    | "EOFError"
                    | "ConnectionRefusedError"
                    | "ConnectionResetError"
                    | "PermissionError"
            )
        ),
        "B reached A's broker: {}\n{}",
        r["other"],
        out.report()
    );
    let a_out = a.wait_with_output();
    assert!(a_out.status.success());
    assert!(
        !std::path::Path::new(&a_sock).exists(),
        "socket left behind"
    );
}

#[test]
fn a_connection_from_outside_the_sandbox_is_refused_and_journalled() {
    let world = World::new();
    let id = "2e3b1a2c-4f5d-4789-abcd-ef0123456789";
    let bundle = world.bundle("idle", &skill_md("idle", &[], ""), "#!/bin/sh\nsleep 3\n");
    let mut child = world
        .cmd(["skill", "invoke", "--invocation-id", id])
        .arg(&bundle)
        .start();
    let path = format!("/tmp/cyberos-skill-broker.{id}.sock");
    wait_for(Duration::from_secs(10), || {
        std::path::Path::new(&path).exists().then_some(())
    })
    .expect("socket");
    let mut stream = std::os::unix::net::UnixStream::connect(&path).expect("connect (as root)");
    use std::io::{Read as _, Write as _};
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"broker.status"}"#;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    let _ = stream.write_all(&frame);
    let mut buf = Vec::new();
    let n = stream.read_to_end(&mut buf).unwrap_or(0);
    assert_eq!(
        n,
        0,
        "an outsider got an answer: {:?}",
        String::from_utf8_lossy(&buf)
    );
    assert!(child.wait().success());
    let rows = rows(&world, id);
    assert_eq!(
        of_kind(&rows, "skill.connection_refused").len(),
        1,
        "{rows:#?}"
    );
}

#[test]
fn a_duplicate_invocation_id_and_an_existing_socket_are_refused() {
    let world = World::new();
    let bundle = world.bundle("quick", &skill_md("quick", &[], ""), "#!/bin/sh\nexit 0\n");
    let id = "3e3b1a2c-4f5d-4789-abcd-ef0123456789";
    world
        .cmd(["skill", "invoke", "--invocation-id", id])
        .arg(&bundle)
        .success();
    world
        .cmd(["skill", "invoke", "--invocation-id", id])
        .arg(&bundle)
        .code(2)
        .assert_stderr_contains("already");
    let id2 = "4e3b1a2c-4f5d-4789-abcd-ef0123456789";
    let path = format!("/tmp/cyberos-skill-broker.{id2}.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    world
        .cmd(["skill", "invoke", "--invocation-id", id2])
        .arg(&bundle)
        .code(125);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn broker_sigkill_takes_the_skill_with_it_and_the_next_invoke_sweeps_the_socket() {
    let world = World::new();
    let id = "5e3b1a2c-4f5d-4789-abcd-ef0123456789";
    let bundle = world.bundle(
        "victim",
        &skill_md("victim", &[], ""),
        "#!/bin/sh\nwhile true; do sleep 0.1; done\n",
    );
    let mut child = world
        .cmd(["skill", "invoke", "--invocation-id", id])
        .arg(&bundle)
        .start();
    let path = format!("/tmp/cyberos-skill-broker.{id}.sock");
    wait_for(Duration::from_secs(10), || {
        std::path::Path::new(&path).exists().then_some(())
    })
    .expect("socket");
    // Find the skill's processes (children of the broker, transitively) before killing it.
    let broker = child.id() as i32;
    let descendants = wait_for(Duration::from_secs(5), || {
        let d = descendants_of(broker);
        (d.len() >= 2).then_some(d)
    })
    .expect("sandbox processes");
    // SAFETY: plain kill(2) of a child this test spawned.
    unsafe { libc::kill(broker, libc::SIGKILL) };
    child.wait();
    let gone = wait_for(Duration::from_secs(5), || {
        descendants
            .iter()
            .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
            .then_some(())
    });
    assert!(
        gone.is_some(),
        "sandbox processes outlived the broker: {descendants:?}"
    );
    assert!(
        std::path::Path::new(&path).exists(),
        "the dead broker's socket should still be there"
    );
    let quick = world.bundle(
        "quick2",
        &skill_md("quick2", &[], ""),
        "#!/bin/sh\nexit 0\n",
    );
    world.cmd(["skill", "invoke"]).arg(&quick).success();
    assert!(
        !std::path::Path::new(&path).exists(),
        "the stale socket was not swept"
    );
}

fn descendants_of(root: i32) -> Vec<i32> {
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        if let Ok(children) =
            std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        {
            found.extend(
                children
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
        i += 1;
    }
    found.remove(0);
    found
}

#[test]
fn the_examples_run_end_to_end() {
    let world = World::new();
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(world.example("hello-shell"))
        .args(["--", "tester"])
        .success();
    out.assert_stdout_contains("hello, tester")
        .assert_stdout_contains("Bash was refused");
    assert_eq!(out.json()["tool_calls"], 3);
    assert_eq!(out.json()["denied"], 1);
    let out = world
        .cmd(["skill", "invoke"])
        .arg(world.example("notes-python"))
        .args(["--", "hi"])
        .success();
    out.assert_stdout_contains("scope_violation");
}

fn signal_broker(sig: i32, skill: &str) -> (crate::util::Out, Duration) {
    let world = World::new();
    let id = uuid_for(sig);
    let bundle = world.bundle("interrupted", &skill_md("interrupted", &[], ""), skill);
    let mut cmd = world.cmd(["skill", "invoke", "--json", "--invocation-id", &id]);
    cmd.arg(&bundle);
    let child = cmd.start();
    let path = format!("/tmp/cyberos-skill-broker.{id}.sock");
    let rows_ready = wait_for(Duration::from_secs(10), || {
        let started = rows(&world, &id)
            .iter()
            .any(|r| r["kind"] == "skill.invoked_started");
        (started && std::path::Path::new(&path).exists()).then_some(())
    });
    rows_ready.expect("invocation started");
    // Give the skill a moment to install its trap: poll for its marker line is not possible on a
    // piped stdout, so wait until a process of the sandbox runs the skill's shell.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    // SAFETY: plain kill(2) of a child this test spawned.
    unsafe { libc::kill(child.id() as i32, sig) };
    let output = child.wait_with_output();
    let elapsed = sent.elapsed();
    assert!(!std::path::Path::new(&path).exists(), "socket left behind");
    let rows = rows(&world, &id);
    let completed: Vec<&Value> = rows
        .iter()
        .filter(|r| r["kind"] == "skill.invoked_completed")
        .collect();
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["payload"]["outcome"], "interrupted");
    (
        crate::util::Out {
            desc: cmd.describe(),
            output,
            elapsed,
        },
        elapsed,
    )
}

fn uuid_for(n: i32) -> String {
    format!("6e3b1a2c-4f5d-4789-abcd-{:012}", n)
}

#[test]
fn sigint_to_the_broker_forwards_sigterm_and_exits_130() {
    let (out, elapsed) = signal_broker(
        libc::SIGINT,
        "#!/bin/sh\ntrap 'echo got-TERM; exit 0' TERM\nwhile true; do sleep 0.1; done\n",
    );
    assert_eq!(out.code(), Some(130), "{}", out.report());
    out.assert_stdout_contains("got-TERM");
    assert!(elapsed < Duration::from_secs(5), "{}", out.report());
    assert_eq!(out.json()["outcome"], "interrupted");
}

#[test]
fn sigterm_to_the_broker_kills_a_skill_that_ignores_it_after_the_grace_period() {
    let (out, elapsed) = signal_broker(
        libc::SIGTERM,
        "#!/bin/sh\ntrap '' TERM\nwhile true; do sleep 0.1; done\n",
    );
    assert_eq!(out.code(), Some(143), "{}", out.report());
    assert!(
        elapsed >= Duration::from_millis(9500),
        "killed after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(14),
        "killed after {elapsed:?}"
    );
}

#[test]
fn a_skill_that_never_connects_gets_a_no_connect_row_and_keeps_running() {
    let world = World::new();
    let bundle = world.bundle(
        "loner",
        &skill_md("loner", &[], ""),
        "#!/bin/sh\nsleep 62\necho still-running\n",
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    out.assert_stdout_contains("still-running");
    let rows = rows(&world, out.json()["invocation_id"].as_str().unwrap());
    let no_connect = of_kind(&rows, "skill.no_connect");
    assert_eq!(no_connect.len(), 1, "{rows:#?}");
    assert_eq!(no_connect[0]["payload"]["waited_ms"], 60_000);
}

#[test]
fn an_unprivileged_broker_runs_skills_in_a_user_namespace() {
    let world = World::new();
    let home = world.home();
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    let bundle = world.bundle(
        "unpriv",
        &skill_md("unpriv", &["MemoryRead"], ""),
        &format!(
            "{PY_PRELUDE}\nout('uid', os.getuid())\ns = connect()\n\
             out('status', call(s, 'Bash', {{}}))\n"
        ),
    );
    let mut cmd = world.cmd(["skill", "invoke", "--json"]);
    cmd.arg(&bundle);
    let out = cmd.unprivileged().success();
    let r = reported(&out.stdout());
    assert_eq!(r["uid"], 65534, "{}", out.report());
    assert_eq!(
        r["status"]["error"]["data"]["reason"],
        "tool_not_in_allowed_tools"
    );
    let summary = out.json();
    assert_eq!(
        summary["sandbox"]["user_ns"]["status"],
        "applied",
        "{}",
        out.report()
    );
    assert_eq!(summary["tool_calls"], 1);
}

#[test]
fn the_json_summary_is_on_a_line_of_its_own_after_output_without_a_newline() {
    let world = World::new();
    let bundle = world.bundle(
        "nonl",
        &skill_md("nonl", &[], ""),
        "#!/bin/sh\nprintf 'partial line'\n",
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    let stdout = out.stdout();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.report());
    assert_eq!(lines[0], "partial line");
    let summary: Value = serde_json::from_str(lines[1]).expect("summary line");
    assert_eq!(summary["outcome"], "success");
    // Without --json, nothing of the broker's own reaches stdout.
    let out = world.cmd(["skill", "invoke"]).arg(&bundle).success();
    assert_eq!(out.stdout(), "partial line");
}

#[test]
fn a_root_broker_installed_where_the_sandbox_uid_cannot_reach_still_serves_the_client() {
    if !crate::util::is_root() {
        eprintln!("skipped: needs a root broker (the sandbox uid differs from the broker's)");
        return;
    }
    let world = World::new();
    let private = world.path().join("private");
    std::fs::create_dir(&private).unwrap();
    crate::util::set_mode(&private, 0o700);
    let binary = private.join("cyberos");
    std::fs::copy(crate::util::BIN, &binary).unwrap();
    let bundle = world.example("hello-shell");
    let out = std::process::Command::new(&binary)
        .args(["skill", "invoke", "--json"])
        .arg(&bundle)
        .env("CYBEROS_HOME", world.home())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("hello, world"), "{stdout}");
    let id =
        serde_json::from_str::<Value>(stdout.lines().last().unwrap()).unwrap()["invocation_id"]
            .as_str()
            .unwrap()
            .to_owned();
    assert!(
        !std::path::Path::new(&format!("/tmp/cyberos-bin.{id}")).exists(),
        "stand-in left behind"
    );
}
