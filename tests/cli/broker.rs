//! `skill broker status|tail|replay|verify|prune` over journals built through the library, so
//! every scenario (a broker killed mid-call, a row edited by hand) is exact.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cyberos::journal::{BrokerIdentity, Journal, kind, process_start_time};
use serde_json::{Value, json};

use crate::util::{World, is_root, wait_for};

fn journal(world: &World) -> Journal {
    std::fs::create_dir_all(world.home()).expect("home");
    Journal::open(&world.home()).expect("journal")
}

/// A payload with the three ids every row carries.
fn p(inv: &str, extra: Value) -> Value {
    let mut payload = json!({"invocation_id": inv, "skill_id": format!("skill-{inv}"), "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"});
    if let (Some(map), Value::Object(extra)) = (payload.as_object_mut(), extra) {
        map.extend(extra);
    }
    payload
}

fn started(j: &Journal, inv: &str) {
    j.append(
        kind::INVOKED_STARTED,
        &p(inv, json!({"skill_version": "1.0.0", "tenant_id": "00000000-0000-0000-0000-000000000000", "pid": 1, "deadline_ms": 90000, "sandbox": {}})),
    )
    .expect("append");
}

fn call(j: &Journal, inv: &str, call_id: &str, tool: &str, outcome: Option<&str>) {
    j.append(kind::TOOL_CALL_STARTED, &p(inv, json!({"call_id": call_id, "tool_name": tool, "args_hash": "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"})))
        .expect("append");
    if let Some(outcome) = outcome {
        j.append(
            kind::TOOL_CALL_COMPLETED,
            &p(inv, json!({"call_id": call_id, "tool_name": tool, "outcome": outcome, "duration_ms": 7, "result_hash": "ffee00112233445566778899aabbccddeeff00112233445566778899aabbccdd"})),
        )
        .expect("append");
    }
}

fn denied(j: &Journal, inv: &str, call_id: &str, tool: &str) {
    j.append(
        kind::TOOL_DENIED,
        &p(inv, json!({"call_id": call_id, "tool_name": tool, "reason": "tool_not_in_allowed_tools", "attempted_args_hash": "99aa", "detail": ""})),
    )
    .expect("append");
}

fn completed(j: &Journal, inv: &str, outcome: &str) {
    j.append(
        kind::INVOKED_COMPLETED,
        &p(inv, json!({"outcome": outcome, "exit_code": 0, "signal": null, "duration_ms": 12, "tool_calls": 1, "denied": 0})),
    )
    .expect("append");
}

/// The identity of a broker that was SIGKILLed: a real process, killed and reaped.
fn dead_broker() -> BrokerIdentity {
    let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = child.id() as i32;
    let start_time = process_start_time(pid).expect("start time");
    child.kill().expect("kill");
    child.wait().expect("wait");
    BrokerIdentity { pid, start_time }
}

fn live_broker() -> BrokerIdentity {
    BrokerIdentity::current().expect("this process")
}

fn db(world: &World) -> std::path::PathBuf {
    world.home().join("journal.db")
}

fn sqlite3(world: &World, sql: &str) -> bool {
    match Command::new("sqlite3").arg(db(world)).arg(sql).status() {
        Ok(status) => {
            assert!(status.success(), "sqlite3 {sql:?} failed");
            true
        }
        Err(err) => {
            eprintln!("skipped: the sqlite3 shell is not available ({err})");
            false
        }
    }
}

#[test]
fn status_without_a_journal_is_all_zeros() {
    let world = World::new();
    let out = world.cmd(["skill", "broker", "status"]).success().json();
    assert_eq!(
        out,
        json!({"active_invocations": 0, "tool_calls_today": 0, "denied_today": 0, "timeouts_today": 0,
               "invocations_today": 0, "active": [], "crashed": []})
    );
    assert!(!db(&world).exists(), "status must not create a journal");
}

#[test]
fn status_counts_are_exact_across_invocations() {
    let world = World::new();
    let j = journal(&world);
    // A: running, 3 allowed calls (one timed out) and 2 denials.
    j.register_invocation("inv-a", "skill-inv-a", live_broker())
        .unwrap();
    started(&j, "inv-a");
    call(&j, "inv-a", "1", "Read", Some("success"));
    call(&j, "inv-a", "2", "Bash", Some("timeout"));
    denied(&j, "inv-a", "3", "HttpFetch");
    call(&j, "inv-a", "4", "Write", Some("error"));
    denied(&j, "inv-a", "5", "Bash");
    // B: finished after its deadline fired: 1 call, 1 denial.
    j.register_invocation("inv-b", "skill-inv-b", dead_broker())
        .unwrap();
    started(&j, "inv-b");
    call(&j, "inv-b", "1", "Read", Some("success"));
    denied(&j, "inv-b", "2", "Bash");
    j.append(
        kind::TIMEOUT,
        &p(
            "inv-b",
            json!({"elapsed_ms": 81000, "last_tool_call": "1", "signal": "SIGTERM"}),
        ),
    )
    .unwrap();
    completed(&j, "inv-b", "timeout");
    // C: its broker was SIGKILLed during a call.
    let dead = dead_broker();
    j.register_invocation("inv-c", "skill-inv-c", dead).unwrap();
    started(&j, "inv-c");
    call(&j, "inv-c", "1", "Grep", None);
    drop(j);
    // Yesterday's counters are not today's.
    let yesterday = cyberos::util::now_ms() / 86_400_000 - 1;
    if !sqlite3(
        &world,
        &format!("INSERT INTO day_counts VALUES ({yesterday}, 'skill.tool_denied', 500)"),
    ) {
        return;
    }

    let out = world.cmd(["skill", "broker", "status"]).success().json();
    assert_eq!(out["tool_calls_today"], 8, "{out}");
    assert_eq!(out["denied_today"], 3, "{out}");
    assert_eq!(out["timeouts_today"], 1, "{out}");
    assert_eq!(out["invocations_today"], 3, "{out}");
    assert_eq!(out["active_invocations"], 1, "{out}");
    let active = &out["active"][0];
    assert_eq!(active["invocation_id"], "inv-a");
    assert_eq!(active["skill_id"], "skill-inv-a");
    assert_eq!(active["pid"], std::process::id());
    assert!(
        active["started_at"].as_str().unwrap().ends_with('Z'),
        "{out}"
    );
    assert_eq!(out["crashed"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(out["crashed"][0]["invocation_id"], "inv-c");
    assert_eq!(out["crashed"][0]["pid"], dead.pid);
}

/// Reads a child's stdout lines on a thread.
fn lines_of(child: &mut Child) -> mpsc::Receiver<(Instant, String)> {
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_line(
    rx: &mpsc::Receiver<(Instant, String)>,
    within: Duration,
) -> Option<(Instant, String)> {
    rx.recv_timeout(within).ok()
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    wait_for(within, || child.try_wait().expect("try_wait")).map(|s| s.code().unwrap_or(-1))
}

#[test]
fn tail_prints_history_then_each_new_row_within_250ms() {
    let world = World::new();
    let j = journal(&world);
    j.register_invocation("live", "skill-live", live_broker())
        .unwrap();
    started(&j, "live");
    call(&j, "live", "1", "Read", Some("success"));
    // Other invocations write at the same time; their rows must not show.
    started(&j, "noise");

    let mut tail = world
        .cmd(["skill", "broker", "tail", "--invocation", "live"])
        .spawn();
    let rx = lines_of(&mut tail);
    let history: Vec<String> = (0..3)
        .map(|_| {
            next_line(&rx, Duration::from_secs(10))
                .expect("history line")
                .1
        })
        .collect();
    assert!(
        history[0].contains("start") && history[0].contains("skill-live"),
        "{history:?}"
    );
    assert!(
        history[1].contains("call")
            && history[1].contains("Read")
            && history[1].contains("args a1b2c3d4e5f6"),
        "{history:?}"
    );
    assert!(
        history[2].contains("success") && history[2].contains("7 ms"),
        "{history:?}"
    );

    let mut worst = Duration::ZERO;
    for n in 2..8 {
        call(&j, "noise", &n.to_string(), "Read", Some("success"));
        let written = Instant::now();
        if n % 2 == 0 {
            denied(&j, "live", &n.to_string(), "Bash");
        } else {
            call(&j, "live", &n.to_string(), "Glob", None);
        }
        let (seen, line) = next_line(&rx, Duration::from_secs(5)).expect("live row shown");
        worst = worst.max(seen - written);
        assert!(
            line.contains(if n % 2 == 0 {
                "tool_not_in_allowed_tools"
            } else {
                "Glob"
            }),
            "{line}"
        );
        assert!(!line.contains("\x1b["), "colour on a pipe: {line:?}");
    }
    assert!(
        worst <= Duration::from_millis(250),
        "a row took {worst:?} to show"
    );
    completed(&j, "live", "success");
    let (_, last) = next_line(&rx, Duration::from_secs(5)).expect("end row");
    assert!(last.contains("end") && last.contains("success"), "{last}");
    assert_eq!(
        wait_exit(&mut tail, Duration::from_secs(5)),
        Some(0),
        "tail ends after completion"
    );
}

#[test]
fn tail_json_prints_rows_and_waits_for_an_invocation_to_appear() {
    let world = World::new();
    let mut tail = world
        .cmd([
            "skill",
            "broker",
            "tail",
            "--invocation",
            "later",
            "--json",
            "--wait",
            "20s",
        ])
        .spawn();
    let rx = lines_of(&mut tail);
    // No journal exists yet; the invocation and the journal appear while tail waits.
    let j = journal(&world);
    started(&j, "later");
    completed(&j, "later", "success");
    let first: Value =
        serde_json::from_str(&next_line(&rx, Duration::from_secs(10)).expect("row").1).unwrap();
    let second: Value =
        serde_json::from_str(&next_line(&rx, Duration::from_secs(10)).expect("row").1).unwrap();
    assert_eq!(first["seq"], 1);
    assert_eq!(first["kind"], kind::INVOKED_STARTED);
    assert_eq!(first["payload"]["invocation_id"], "later");
    assert_eq!(second["kind"], kind::INVOKED_COMPLETED);
    assert!(first["ts"].as_str().unwrap().ends_with('Z'));
    assert_eq!(wait_exit(&mut tail, Duration::from_secs(5)), Some(0));
}

#[test]
fn tail_of_an_unknown_invocation_gives_up_after_wait() {
    let world = World::new();
    journal(&world);
    let out = world
        .cmd([
            "skill",
            "broker",
            "tail",
            "--invocation",
            "nope",
            "--wait",
            "300ms",
        ])
        .code(1);
    assert!(
        out.elapsed >= Duration::from_millis(300),
        "gave up after {:?}",
        out.elapsed
    );
    out.assert_stderr_contains("invocation nope is not in the journal");
    world
        .cmd([
            "skill",
            "broker",
            "tail",
            "--invocation",
            "nope",
            "--wait",
            "soon",
        ])
        .code(2);
}

#[test]
fn tail_ends_when_the_broker_died_without_completing() {
    let world = World::new();
    let j = journal(&world);
    j.register_invocation("gone", "skill-gone", dead_broker())
        .unwrap();
    started(&j, "gone");
    call(&j, "gone", "1", "Bash", None);
    let out = world
        .cmd(["skill", "broker", "tail", "--invocation", "gone"])
        .code(1);
    assert_eq!(out.stdout().lines().count(), 2, "{}", out.report());
    out.assert_stderr_contains("no longer running");
}

#[test]
fn ctrl_c_stops_tail_with_130() {
    let world = World::new();
    let j = journal(&world);
    j.register_invocation("run", "skill-run", live_broker())
        .unwrap();
    started(&j, "run");
    let mut tail = world
        .cmd(["skill", "broker", "tail", "--invocation", "run"])
        .spawn();
    let rx = lines_of(&mut tail);
    next_line(&rx, Duration::from_secs(10)).expect("history shown, so tail is following");
    // SAFETY: kill(2) on our own child's pid; it has not been reaped, so the pid is still ours.
    assert_eq!(unsafe { libc::kill(tail.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(wait_exit(&mut tail, Duration::from_secs(5)), Some(130));
}

#[test]
fn tail_colours_only_a_terminal_without_no_color() {
    let world = World::new();
    let j = journal(&world);
    started(&j, "c");
    call(&j, "c", "1", "Read", Some("success"));
    completed(&j, "c", "success");
    let tail = format!(
        "{} skill broker tail --invocation c --home {}",
        crate::util::BIN,
        world.home().display()
    );
    let with_pty = |no_color: Option<&str>| -> Option<String> {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &tail, "/dev/null"]).stdin(Stdio::null());
        cmd.env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        match cmd.output() {
            Ok(out) if out.status.success() => {
                Some(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Ok(out) => panic!("script failed: {out:?}"),
            Err(err) => {
                eprintln!("skipped: script(1) is not available to provide a terminal ({err})");
                None
            }
        }
    };
    let Some(coloured) = with_pty(None) else {
        return;
    };
    assert!(coloured.contains("\x1b[32msuccess\x1b[0m"), "{coloured:?}");
    let plain = with_pty(Some("1")).expect("script");
    assert!(
        plain.contains("success") && !plain.contains("\x1b["),
        "{plain:?}"
    );
    // An empty NO_COLOR does not count (no-color.org).
    assert!(with_pty(Some("")).expect("script").contains("\x1b["));
    let piped = world
        .cmd(["skill", "broker", "tail", "--invocation", "c"])
        .success();
    assert!(!piped.stdout().contains("\x1b["));
}

#[test]
fn replay_rebuilds_calls_and_names_the_call_a_killed_broker_left_open() {
    let world = World::new();
    let j = journal(&world);
    j.register_invocation("k", "skill-k", dead_broker())
        .unwrap();
    started(&j, "k");
    call(&j, "k", "c1", "Read", Some("success"));
    denied(&j, "k", "c2", "Bash");
    started(&j, "other");
    call(&j, "k", "c3", "HttpFetch", None);
    drop(j);

    let out = world
        .cmd(["skill", "broker", "replay", "--invocation", "k", "--json"])
        .success()
        .json();
    assert_eq!(out["invocation_id"], "k");
    assert_eq!(out["skill_id"], "skill-k");
    assert_eq!(out["outcome"], "incomplete");
    let calls = out["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{out}");
    assert_eq!(
        calls[0],
        json!({"call_id": "c1", "tool_name": "Read", "outcome": "success", "reason": null,
               "started_at": calls[0]["started_at"], "duration_ms": 7,
               "args_hash": "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90",
               "result_hash": "ffee00112233445566778899aabbccddeeff00112233445566778899aabbccdd"})
    );
    assert_eq!(calls[1]["outcome"], "denied");
    assert_eq!(calls[1]["reason"], "tool_not_in_allowed_tools");
    assert_eq!(calls[2]["outcome"], "incomplete");
    assert_eq!(out["rows"].as_array().unwrap().len(), 5);
    assert_eq!(out["integrity"]["ok"], false);
    let problems: Vec<&str> = out["integrity"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("crash during call 3 (call_id c3, HttpFetch)")),
        "{problems:?}"
    );

    let human = world
        .cmd(["skill", "broker", "replay", "--invocation", "k"])
        .success();
    human.assert_stdout_contains("crash during call 3");
    world
        .cmd(["skill", "broker", "replay", "--invocation", "missing"])
        .code(1)
        .assert_stderr_contains("not in the journal");
}

#[test]
fn replay_of_a_clean_and_of_a_running_invocation_is_ok() {
    let world = World::new();
    let j = journal(&world);
    j.register_invocation("run", "skill-run", live_broker())
        .unwrap();
    started(&j, "run");
    call(&j, "run", "1", "Read", None);
    started(&j, "done");
    call(&j, "done", "1", "Read", Some("success"));
    completed(&j, "done", "success");
    let running = world
        .cmd(["skill", "broker", "replay", "--invocation", "run", "--json"])
        .success()
        .json();
    assert_eq!(running["outcome"], "running");
    assert_eq!(running["calls"][0]["outcome"], "in_progress");
    assert_eq!(running["integrity"], json!({"ok": true, "problems": []}));
    let done = world
        .cmd([
            "skill",
            "broker",
            "replay",
            "--invocation",
            "done",
            "--json",
        ])
        .success()
        .json();
    assert_eq!(done["outcome"], "success");
    assert_eq!(done["integrity"], json!({"ok": true, "problems": []}));
}

fn populated(world: &World, rows: usize) {
    let j = journal(world);
    for i in 0..rows / 2 {
        call(
            &j,
            &format!("inv-{}", i % 3),
            &i.to_string(),
            "Read",
            Some("success"),
        );
    }
}

#[test]
fn verify_passes_an_intact_journal_and_names_a_row_edited_by_hand() {
    let world = World::new();
    world
        .cmd(["skill", "broker", "verify"])
        .code(1)
        .assert_stderr_contains("no journal");
    populated(&world, 10);
    world
        .cmd(["skill", "broker", "verify"])
        .success()
        .assert_stdout_contains("journal intact: 10 rows (seq 1..10)");
    if !sqlite3(
        &world,
        "UPDATE rows SET payload = replace(payload, 'Read', 'Bash') WHERE seq = 4",
    ) {
        return;
    }
    let out = world.cmd(["skill", "broker", "verify"]).code(3);
    out.assert_stderr_contains("row 4: its contents do not match its hash");
    let replay = world
        .cmd([
            "skill",
            "broker",
            "replay",
            "--invocation",
            "inv-1",
            "--json",
        ])
        .success()
        .json();
    assert!(
        replay["integrity"]["problems"]
            .to_string()
            .contains("hash chain broken at row 4"),
        "{replay}"
    );
}

#[test]
fn verify_names_a_row_deleted_by_hand_in_the_middle_or_at_the_end() {
    let world = World::new();
    populated(&world, 10);
    if !sqlite3(&world, "DELETE FROM rows WHERE seq = 6") {
        return;
    }
    world
        .cmd(["skill", "broker", "verify"])
        .code(3)
        .assert_stderr_contains("row 7: row 6 before it is missing");

    let world = World::new();
    populated(&world, 10);
    sqlite3(&world, "DELETE FROM rows WHERE seq = 10");
    world
        .cmd(["skill", "broker", "verify"])
        .code(3)
        .assert_stderr_contains("row 10: the last row is missing");
}

#[test]
fn prune_keeps_what_remains_verifiable() {
    let world = World::new();
    let j = journal(&world);
    started(&j, "old");
    call(&j, "old", "1", "Read", Some("success"));
    completed(&j, "old", "success");
    // The cut: strictly after every old row and strictly before every new one.
    let t0 = cyberos::util::now_ms();
    wait_for(Duration::from_secs(1), || {
        (cyberos::util::now_ms() > t0 + 1).then_some(())
    })
    .unwrap();
    let cut = cyberos::util::rfc3339_ms(t0 + 1);
    wait_for(Duration::from_secs(1), || {
        (cyberos::util::now_ms() > t0 + 2).then_some(())
    })
    .unwrap();
    started(&j, "new");
    call(&j, "new", "1", "Read", Some("success"));

    world
        .cmd(["skill", "broker", "prune", "--before", "2000-01-01"])
        .success()
        .assert_stdout_contains("nothing pruned");
    world
        .cmd(["skill", "broker", "prune", "--before", &cut])
        .success()
        .assert_stdout_contains("pruned 4 rows");
    world
        .cmd(["skill", "broker", "verify"])
        .success()
        .assert_stdout_contains("after the checkpoint at seq 4");
    world
        .cmd(["skill", "broker", "replay", "--invocation", "old"])
        .code(1);
    let new = world
        .cmd(["skill", "broker", "replay", "--invocation", "new", "--json"])
        .success()
        .json();
    assert_eq!(
        new["integrity"]["problems"],
        json!([
            "no skill.invoked_completed row, and the broker is no longer running (crashed or killed)"
        ])
    );
    // Writing on after a prune still chains.
    completed(&j, "new", "success");
    world.cmd(["skill", "broker", "verify"]).success();
    // Everything up to now, twice.
    world
        .cmd([
            "skill",
            "broker",
            "prune",
            "--before",
            "2999-01-01T00:00:00Z",
        ])
        .success();
    world.cmd(["skill", "broker", "verify"]).success();
    started(&j, "after");
    world.cmd(["skill", "broker", "verify"]).success();
    world
        .cmd(["skill", "broker", "prune", "--before", "last tuesday"])
        .code(2)
        .assert_stderr_contains("--before");
}

#[test]
fn prune_refuses_a_broken_chain() {
    let world = World::new();
    populated(&world, 6);
    if !sqlite3(&world, "DELETE FROM rows WHERE seq = 2") {
        return;
    }
    world
        .cmd(["skill", "broker", "prune", "--before", "2999-01-01"])
        .code(3)
        .assert_stderr_contains("row 3");
}

#[test]
fn the_operator_commands_work_unprivileged() {
    if !is_root() {
        eprintln!("skipped: needs root to run the commands as another uid");
        return;
    }
    let world = World::new();
    populated(&world, 4);
    let status = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(world.home())
        .status()
        .expect("chown");
    assert!(status.success());
    world
        .cmd(["skill", "broker", "verify"])
        .unprivileged()
        .success();
    let out = world
        .cmd(["skill", "broker", "status"])
        .unprivileged()
        .success()
        .json();
    assert_eq!(out["tool_calls_today"], 2);
    world
        .cmd(["skill", "broker", "replay", "--invocation", "inv-0"])
        .unprivileged()
        .success();
    world
        .cmd(["skill", "broker", "prune", "--before", "2999-01-01"])
        .unprivileged()
        .success();
    world
        .cmd(["skill", "broker", "verify"])
        .unprivileged()
        .success();
}

#[test]
fn every_broker_command_has_an_example_in_its_help() {
    let world = World::new();
    for sub in ["status", "tail", "replay", "verify", "prune"] {
        let out = world.cmd(["skill", "broker", sub, "--help"]).success();
        out.assert_stdout_contains(&format!("cyberos skill broker {sub}"));
    }
}

/// A python skill that talks to the broker directly (see invoke.rs).
fn py_skill(world: &World, name: &str, frontmatter_tools: &str, body: &str) -> std::path::PathBuf {
    let md = format!(
        "---\nid: {name}\nversion: 1.0.0\ndescription: journal test skill {name}\nallowed_memory_scopes: [\"notes/**\"]\n{frontmatter_tools}\n---\nA test skill.\n"
    );
    world.bundle(name, &md, &format!("{}{body}", crate::invoke::PY_PRELUDE))
}

#[test]
fn status_counts_real_invocations_exactly() {
    let world = World::new();
    let worker = py_skill(
        &world,
        "worker",
        "allowed_tools: [MemoryEmit, MemoryRead]\ndisallowed_tools: [Bash]",
        r#"s = connect()
call(s, "MemoryEmit", {"path": "notes/a.md", "body": "a"}, id=1)
call(s, "MemoryRead", {"path": "notes/a.md"}, id=2)
call(s, "Bash", {"command": "id"}, id=3)
call(s, "HttpFetch", {"url": "https://example.com/"}, id=4)
call(s, "MemoryRead", {"path": "secrets/x.md"}, id=5)
"#,
    );
    let sleeper = py_skill(
        &world,
        "sleeper",
        "allowed_tools: [MemoryRead]",
        r#"s = connect()
call(s, "MemoryRead", {"path": "notes/none.md"}, id=1)
while True:
    time.sleep(0.05)
"#,
    );
    let mut expect_calls = 0;
    let mut expect_denied = 0;
    for _ in 0..2 {
        let summary = world
            .cmd(["skill", "invoke", "--json"])
            .arg(&worker)
            .success()
            .json();
        assert_eq!(
            (summary["tool_calls"].as_i64(), summary["denied"].as_i64()),
            (Some(5), Some(3)),
            "{summary}"
        );
        expect_calls += 5;
        expect_denied += 3;
    }
    let summary = world
        .cmd(["skill", "invoke", "--json", "--timeout", "2s"])
        .arg(&sleeper)
        .code(124)
        .json();
    assert_eq!(summary["outcome"], "timeout");
    expect_calls += 1;

    let status = world.cmd(["skill", "broker", "status"]).success().json();
    assert_eq!(status["tool_calls_today"], expect_calls, "{status}");
    assert_eq!(status["denied_today"], expect_denied, "{status}");
    assert_eq!(status["timeouts_today"], 1, "{status}");
    assert_eq!(status["invocations_today"], 3, "{status}");
    assert_eq!(status["active_invocations"], 0, "{status}");
    assert_eq!(status["crashed"], json!([]), "{status}");
    world.cmd(["skill", "broker", "verify"]).success();
}

#[test]
fn tail_follows_a_running_invocation_within_250ms_of_each_row() {
    let world = World::new();
    let id = &uuid::Uuid::new_v4().to_string();
    let bundle = py_skill(
        &world,
        "stepper",
        "allowed_tools: [MemoryEmit, MemoryRead]",
        r#"s = connect()
go = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "go")
for n in range(1, 4):
    call(s, "MemoryEmit", {"path": "notes/%d.md" % n, "body": "x"}, id=n)
    # Wait for the test to say "next", so each row is written while tail is following.
    while not os.path.exists("%s%d" % (go, n)):
        time.sleep(0.01)
call(s, "Bash", {"command": "id"}, id=9)
"#,
    );
    let mut invoke = world
        .cmd(["skill", "invoke", "--invocation-id", id])
        .arg(&bundle)
        .start();
    let mut tail = world
        .cmd([
            "skill",
            "broker",
            "tail",
            "--invocation",
            id,
            "--json",
            "--wait",
            "30s",
        ])
        .spawn();
    let rx = lines_of(&mut tail);
    let mut kinds = Vec::new();
    let mut worst = Duration::ZERO;
    let mut step = 1;
    while let Some((_, line)) = next_line(&rx, Duration::from_secs(30)) {
        let seen_ms = cyberos::util::now_ms();
        let row: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        // The row's own timestamp is taken under the write lock, just before it commits.
        let written_ms = parse_ts(row["ts"].as_str().expect("ts"));
        let kind = row["kind"].as_str().unwrap().to_owned();
        // Every row after the first "go" is written while tail is already following.
        if step > 1 {
            worst = worst.max(Duration::from_millis((seen_ms - written_ms).max(0) as u64));
        }
        if kind == kind::TOOL_CALL_COMPLETED && step <= 3 {
            std::fs::write(bundle.join(format!("go{step}")), "").unwrap();
            step += 1;
        }
        kinds.push(kind);
        if kinds.last().map(String::as_str) == Some(kind::INVOKED_COMPLETED) {
            break;
        }
    }
    assert_eq!(
        wait_exit(&mut tail, Duration::from_secs(10)),
        Some(0),
        "{kinds:?}"
    );
    assert!(invoke.wait().success());
    assert_eq!(
        kinds.first().map(String::as_str),
        Some(kind::INVOKED_STARTED),
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == kind::TOOL_CALL_COMPLETED)
            .count(),
        3,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == kind::TOOL_DENIED).count(),
        1,
        "{kinds:?}"
    );
    assert!(
        worst <= Duration::from_millis(250),
        "a row took {worst:?} to show"
    );
}

/// Milliseconds since the epoch of a journal timestamp (`2026-11-29T08:00:00.123Z`).
fn parse_ts(ts: &str) -> i64 {
    let num = |r: std::ops::Range<usize>| ts[r].parse::<i64>().expect("timestamp");
    let days = cyberos::util::days_from_civil(num(0..4), num(5..7) as u32, num(8..10) as u32);
    days * 86_400_000 + ((num(11..13) * 60 + num(14..16)) * 60 + num(17..19)) * 1000 + num(20..23)
}

#[test]
fn replay_names_the_call_a_sigkilled_broker_was_running() {
    let world = World::new();
    let id = &uuid::Uuid::new_v4().to_string();
    // A Grep over all of /usr for a string that is nowhere: seconds of work, ample time to
    // kill the broker while the call runs.
    let bundle = py_skill(
        &world,
        "grepper",
        "allowed_tools: [MemoryRead, Grep]\nx-allowed-files: [\"/usr/**\"]",
        r#"s = connect()
call(s, "MemoryRead", {"path": "notes/none.md"}, id=1)
call(s, "Grep", {"pattern": "zq-never-in-any-file-[0-9]{40}", "path": "/usr"}, id=2)
"#,
    );
    let mut invoke = world
        .cmd(["skill", "invoke", "--invocation-id", id])
        .arg(&bundle)
        .start();
    let grep_started = |world: &World| {
        Journal::open_existing(&world.home())
            .ok()
            .flatten()
            .and_then(|j| {
                j.rows_for(id, 0)
                    .ok()?
                    .into_iter()
                    .find(|r| r.kind == kind::TOOL_CALL_STARTED && r.payload["tool_name"] == "Grep")
            })
    };
    wait_for(Duration::from_secs(30), || grep_started(&world)).expect("the Grep call started");
    // SAFETY: kill(2) of the broker this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(invoke.id() as i32, libc::SIGKILL) }, 0);
    invoke.wait();
    let j = Journal::open_existing(&world.home()).unwrap().unwrap();
    let rows = j.rows_for(id, 0).unwrap();
    if rows
        .iter()
        .any(|r| r.kind == kind::TOOL_CALL_COMPLETED && r.payload["tool_name"] == "Grep")
    {
        eprintln!("skipped: the Grep call finished before the broker could be killed");
        return;
    }

    let replay = world
        .cmd(["skill", "broker", "replay", "--invocation", id, "--json"])
        .success()
        .json();
    assert_eq!(replay["outcome"], "incomplete", "{replay}");
    // The memory file does not exist: a completed call with outcome error.
    assert_eq!(replay["calls"][0]["outcome"], "error", "{replay}");
    assert_eq!(replay["calls"][1]["tool_name"], "Grep", "{replay}");
    assert_eq!(replay["calls"][1]["outcome"], "incomplete", "{replay}");
    let problems = replay["integrity"]["problems"].to_string();
    assert!(problems.contains("crash during call 2 ("), "{replay}");
    assert!(problems.contains("Grep): started at row"), "{replay}");
    let status = world.cmd(["skill", "broker", "status"]).success().json();
    assert_eq!(status["active_invocations"], 0, "{status}");
    assert_eq!(
        status["crashed"][0]["invocation_id"],
        id.as_str(),
        "{status}"
    );
    world
        .cmd(["skill", "broker", "tail", "--invocation", id])
        .code(1)
        .assert_stderr_contains("no longer running");
    world.cmd(["skill", "broker", "verify"]).success();
    // The killed broker could not remove its socket and scratch directory.
    for leftover in [
        format!("/tmp/cyberos-skill-broker.{id}.sock"),
        format!("/tmp/cyberos-scratch.{id}"),
    ] {
        let path = std::path::Path::new(&leftover);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        if let Err(err) = removed {
            assert_eq!(
                err.kind(),
                std::io::ErrorKind::NotFound,
                "{leftover}: {err}"
            );
        }
    }
}
