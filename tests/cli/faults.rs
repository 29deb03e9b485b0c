//! Faults, through the real binary: a journal on a read-only or full filesystem, a journal
//! locked by another writer, a skill hanging up mid-frame, a skill flooding its own stdout, the
//! broker interrupted with calls in flight, and `/tmp` full when the socket is made.
//!
//! Mounts (tmpfs, read-only binds) are made as root inside a private mount namespace held open
//! by a sleeping `unshare` process, so they vanish with it whatever happens to the test. Without
//! root those tests print why they are skipped; the read-only journal is also tested
//! unprivileged, with file modes instead of a mount.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::invoke::{PY_PRELUDE, reported, rows};
use crate::load::{PY_LOAD, assert_calls_paired, kinds, load_skill, verify};
use crate::util::{self, BIN, Out, World, is_root, wait_for};

/// A private mount namespace, alive while its holder process sleeps.
struct MountNs {
    holder: Child,
}

impl MountNs {
    /// None (with the reason printed) when this machine or user cannot make one.
    fn new(test: &str) -> Option<Self> {
        if !is_root() {
            eprintln!("skipped: {test} needs root to mount a filesystem");
            return None;
        }
        let holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "3600"])
            .stdin(Stdio::null())
            .spawn();
        let Ok(holder) = holder else {
            eprintln!("skipped: {test}: unshare is not available");
            return None;
        };
        let ns = Self { holder };
        // The holder has entered its namespace once its mount namespace differs from ours.
        let ours = std::fs::read_link("/proc/self/ns/mnt").ok();
        let entered = wait_for(Duration::from_secs(10), || {
            let theirs = std::fs::read_link(format!("/proc/{}/ns/mnt", ns.pid())).ok();
            (theirs.is_some() && theirs != ours).then_some(())
        });
        if entered.is_none() {
            eprintln!("skipped: {test}: could not create a mount namespace");
            return None;
        }
        Some(ns)
    }

    fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// A command run inside the namespace.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.pid().to_string(), "-m", "--"])
            .arg(program);
        cmd
    }

    /// Runs a shell script inside the namespace; panics when it fails.
    fn sh(&self, script: &str) {
        let out = self
            .command("sh")
            .args(["-ec", script])
            .output()
            .expect("nsenter");
        assert!(
            out.status.success(),
            "{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `cyberos ARGS` inside the namespace, with the world's home and a clean environment.
    fn cyberos<S: AsRef<std::ffi::OsStr>>(&self, world: &World, args: &[S]) -> Command {
        let mut cmd = self.command(BIN);
        cmd.args(args);
        clean_env(&mut cmd);
        cmd.env("CYBEROS_HOME", world.home());
        cmd
    }
}

impl Drop for MountNs {
    fn drop(&mut self) {
        // Ending the holder ends the namespace and every mount in it.
        if let Err(e) = self.holder.kill() {
            eprintln!("failed to stop the mount namespace holder: {e}");
        }
        let _reaped = self.holder.wait();
    }
}

fn clean_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CYBEROS_") || k.starts_with("OTEL_") || k == "TRACEPARENT" {
            cmd.env_remove(&key);
        }
    }
}

fn run(mut cmd: Command) -> Out {
    let desc = format!("{cmd:?}");
    let started = Instant::now();
    let output = cmd.stdin(Stdio::null()).output().expect("run");
    Out {
        desc,
        output,
        elapsed: started.elapsed(),
    }
}

fn expect_code(out: &Out, code: i32) {
    assert_eq!(out.code(), Some(code), "{}", out.report());
}

/// Lines the broker itself printed about the journal.
fn journal_warnings(out: &Out) -> usize {
    out.stderr()
        .lines()
        .filter(|l| l.starts_with("cyberos: journal"))
        .count()
}

/// A skill that may read memory and write one directory, which runs `body` after the prelude.
fn fault_skill(world: &World, name: &str, body: &str) -> PathBuf {
    let out_dir = world.path().join("out");
    std::fs::create_dir_all(&out_dir).expect("out dir");
    util::set_mode(&out_dir, 0o777);
    let path = world.home().join("memory/memories/x.md");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("memory");
    std::fs::write(&path, "x\n").expect("seed");
    let md = format!(
        "---\nid: {name}\nversion: 1.0.0\ndescription: fault test\nallowed_memory_scopes: [\"memories/**\"]\nallowed_tools: [MemoryRead, MemoryEmit, Write]\nx-allowed-files: [\"{}/**\"]\n---\nbody\n",
        out_dir.display()
    );
    world.bundle(name, &md, &format!("{PY_PRELUDE}{PY_LOAD}\n{body}"))
}

/// Python: waits (bounded) for the file `go` to appear in the bundle, which the test creates
/// on the host once it has set up the fault (the bundle is visible inside, read-only).
const WAIT_GO: &str = r#"
BUNDLE = os.path.dirname(os.path.abspath(sys.argv[0]))
def wait_go():
    out("ready", True)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(BUNDLE, "go")):
        if time.monotonic() > deadline:
            raise SystemExit("no go")
        time.sleep(0.01)
"#;

/// The child's stdout, read up to the skill's `{"ready": true}` line.
struct Ready {
    seen: Vec<u8>,
    rest: BufReader<std::process::ChildStdout>,
}

/// Reads the child's stdout line by line until `{"ready": true}`.
fn wait_ready(child: &mut Child) -> Ready {
    let mut rest = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        let n = rest.read_line(&mut line).expect("read stdout");
        assert!(
            n > 0,
            "the skill ended before it was ready: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(line.as_bytes());
        if line.trim() == r#"{"ready": true}"# {
            return Ready { seen, rest };
        }
    }
}

/// Waits for the child and collects its whole output.
fn finish(mut child: Child, ready: Ready, desc: &str) -> Out {
    let started = Instant::now();
    let Ready {
        seen: mut stdout,
        mut rest,
    } = ready;
    rest.read_to_end(&mut stdout).expect("stdout");
    let mut stderr = Vec::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_end(&mut stderr)
        .expect("stderr");
    let status = child.wait().expect("wait");
    Out {
        desc: desc.to_owned(),
        output: std::process::Output {
            status,
            stdout,
            stderr,
        },
        elapsed: started.elapsed(),
    }
}

fn spawn(mut cmd: Command) -> (Child, String) {
    let desc = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    (child, desc)
}

const READ_SKILL: &str = r#"s = connect()
out("read", call(s, "MemoryRead", {"path": "memories/x.md"}, id=1))
out("emit", call(s, "MemoryEmit", {"path": "memories/x.md"}, id=2))
out("ran", True)
"#;

fn assert_read_only_journal_behaviour(
    world: &World,
    best: &Out,
    required: &Out,
    rows_before: usize,
) {
    // Best effort: the skill ran, its read worked, one warning was printed.
    expect_code(best, 0);
    let r = reported(&best.stdout());
    assert_eq!(r["read"]["result"]["body"], "x\n", "{}", best.report());
    // MemoryEmit's row is the point of the call: without a journal it fails and says why.
    assert!(
        r["emit"]["error"]["data"]["kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("journal")),
        "MemoryEmit emitted without a journal\n{}",
        best.report()
    );
    assert_eq!(journal_warnings(best), 1, "{}", best.report());
    // Required: refused before the skill started.
    expect_code(required, 125);
    assert!(
        !required.stdout().contains("ran"),
        "the skill ran unaudited\n{}",
        required.report()
    );
    required.assert_stderr_contains("cyberos: journal");
    // Nothing reached the journal, and it is intact.
    let journal = cyberos::journal::Journal::open(&world.home()).expect("journal");
    assert_eq!(journal.verify().expect("verify").rows as usize, rows_before);
}

fn journal_rows(world: &World) -> usize {
    let journal = cyberos::journal::Journal::open(&world.home()).expect("journal");
    journal.verify().expect("verify").rows as usize
}

#[test]
fn a_read_only_journal_warns_once_and_audit_required_fails_closed() {
    let Some(ns) = MountNs::new("read-only journal") else {
        return;
    };
    let world = World::new();
    let bundle = fault_skill(&world, "ro", READ_SKILL);
    // A first invocation creates the journal.
    world.cmd(["skill", "invoke"]).arg(&bundle).success();
    let before = journal_rows(&world);
    let home = world.home();
    ns.sh(&format!(
        "mount --bind {h} {h} && mount -o remount,bind,ro {h}",
        h = home.display()
    ));
    let best = run(ns.cyberos(&world, &["skill", "invoke", bundle.to_str().unwrap()]));
    let required = run(ns.cyberos(
        &world,
        &[
            "skill",
            "invoke",
            "--audit",
            "required",
            bundle.to_str().unwrap(),
        ],
    ));
    drop(ns);
    assert_read_only_journal_behaviour(&world, &best, &required, before);
}

#[test]
fn a_read_only_journal_warns_once_unprivileged() {
    let world = World::new();
    let bundle = fault_skill(&world, "ro-unpriv", READ_SKILL);
    let as_user = |args: &[&str]| {
        let mut cmd = world.cmd(args);
        cmd.arg(&bundle);
        if is_root() { cmd.unprivileged() } else { cmd }
    };
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(world.home())
            .status()
            .expect("chown");
        assert!(status.success());
    }
    as_user(&["skill", "invoke"]).success();
    let before = journal_rows(&world);
    // Read-only by mode: the home and every journal file.
    for entry in std::fs::read_dir(world.home()).expect("home") {
        let path = entry.expect("entry").path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("journal.db"))
        {
            util::set_mode(&path, 0o444);
        }
    }
    util::set_mode(&world.home(), 0o555);
    let best = as_user(&["skill", "invoke"]).output();
    let required = as_user(&["skill", "invoke", "--audit", "required"]).output();
    util::set_mode(&world.home(), 0o755);
    assert_read_only_journal_behaviour(&world, &best, &required, before);
}

/// The skill: one Write, then (after the test filled the disk) another Write and a status.
fn disk_full_skill(world: &World, name: &str) -> PathBuf {
    let out_dir = world.path().join("out");
    fault_skill(
        world,
        name,
        &format!(
            "{WAIT_GO}\ns = connect()\nout('before', call(s, 'Write', {{'path': '{o}/before.txt', 'content': 'b'}}, id=1))\n\
             wait_go()\nout('after', call(s, 'Write', {{'path': '{o}/after.txt', 'content': 'a'}}, id=2))\n\
             out('read', call(s, 'MemoryRead', {{'path': 'memories/x.md'}}, id=3))\n",
            o = out_dir.display()
        ),
    )
}

/// Mounts a 4 MiB tmpfs as the home (with the seeded memory), runs `invoke` with `extra`
/// arguments, and fills the tmpfs once the skill is ready.
fn invoke_until_disk_full(ns: &MountNs, world: &World, bundle: &Path, extra: &[&str]) -> Out {
    let home = world.home();
    let mut args = vec!["skill", "invoke", "--json"];
    args.extend_from_slice(extra);
    args.push(bundle.to_str().expect("utf-8"));
    let (mut child, desc) = spawn(ns.cyberos(world, &args));
    let rest = wait_ready(&mut child);
    // Fill it: dd stops at ENOSPC.
    ns.sh(&format!(
        "dd if=/dev/zero of={}/fill bs=64k 2>/dev/null || true",
        home.display()
    ));
    std::fs::write(bundle.join("go"), "").expect("go");
    finish(child, rest, &desc)
}

fn mount_home_tmpfs(ns: &MountNs, world: &World) {
    let home = world.home();
    ns.sh(&format!(
        "mount -t tmpfs -o size=4m,mode=0755 cyberos-test {h} && mkdir -p {h}/memory/memories && printf 'x\\n' > {h}/memory/memories/x.md",
        h = home.display()
    ));
}

#[test]
fn a_full_journal_disk_warns_once_and_the_calls_complete() {
    let Some(ns) = MountNs::new("full journal disk") else {
        return;
    };
    let world = World::new();
    let bundle = disk_full_skill(&world, "full");
    std::fs::create_dir_all(world.home()).expect("home");
    mount_home_tmpfs(&ns, &world);
    let out = invoke_until_disk_full(&ns, &world, &bundle, &[]);
    expect_code(&out, 0);
    let r = reported(&out.stdout());
    assert!(r["before"]["result"].is_object(), "{}", out.report());
    assert!(r["after"]["result"].is_object(), "{}", out.report());
    assert_eq!(r["read"]["result"]["body"], "x\n");
    assert!(world.path().join("out/after.txt").exists());
    assert_eq!(journal_warnings(&out), 1, "{}", out.report());
    // With the space back, what was written is an intact chain, and no call is half-recorded.
    let id = out.json()["invocation_id"].as_str().unwrap().to_owned();
    ns.sh(&format!("rm {}/fill", world.home().display()));
    let verify = run(ns.cyberos(&world, &["skill", "broker", "verify"]));
    expect_code(&verify, 0);
    let replay = run(ns.cyberos(
        &world,
        &["skill", "broker", "replay", "--invocation", &id, "--json"],
    ));
    expect_code(&replay, 0);
    let replay: Value = serde_json::from_str(replay.stdout().trim()).expect("replay json");
    let rows: Vec<Value> = replay["rows"].as_array().expect("rows").clone();
    let started = kinds(&rows).get("skill.tool_call_started").copied();
    assert_eq!(
        started,
        Some(1),
        "only the call before the fault: {rows:#?}"
    );
    assert_calls_paired(&rows);
}

#[test]
fn a_full_journal_disk_with_audit_required_runs_no_call_unaudited() {
    let Some(ns) = MountNs::new("full journal disk, audit required") else {
        return;
    };
    let world = World::new();
    let bundle = disk_full_skill(&world, "full-req");
    std::fs::create_dir_all(world.home()).expect("home");
    mount_home_tmpfs(&ns, &world);
    let out = invoke_until_disk_full(&ns, &world, &bundle, &["--audit", "required"]);
    // The skill itself exits 0; its call after the fault was refused and did not run.
    expect_code(&out, 0);
    let r = reported(&out.stdout());
    assert!(r["before"]["result"].is_object(), "{}", out.report());
    assert_eq!(
        r["after"]["error"]["message"],
        "audit_unavailable",
        "{}",
        out.report()
    );
    assert_eq!(r["after"]["error"]["code"], -32603);
    assert_eq!(r["read"]["error"]["message"], "audit_unavailable");
    assert!(
        !world.path().join("out/after.txt").exists(),
        "a call ran unaudited"
    );
    assert!(world.path().join("out/before.txt").exists());

    // Full before the invocation starts: exit 125 and the skill never runs.
    let started = run(ns.cyberos(
        &world,
        &[
            "skill",
            "invoke",
            "--audit",
            "required",
            bundle.to_str().unwrap(),
        ],
    ));
    expect_code(&started, 125);
    assert!(!started.stdout().contains("ready"), "{}", started.report());
    started.assert_stderr_contains("cyberos: journal");
    ns.sh(&format!("rm {}/fill", world.home().display()));
    expect_code(&run(ns.cyberos(&world, &["skill", "broker", "verify"])), 0);
}

#[test]
fn a_journal_locked_by_another_writer_for_five_seconds_loses_no_row() {
    let world = World::new();
    let n = 20;
    let bundle = fault_skill(
        &world,
        "locked",
        &format!(
            "{WAIT_GO}\ns = connect()\nout('warm', call(s, 'MemoryRead', {{'path': 'memories/x.md'}}, id=0))\nwait_go()\n\
             t0 = time.monotonic()\nfirst = None\nok = 0\n\
             for i in range({n}):\n    r = call(s, 'MemoryRead', {{'path': 'memories/x.md'}}, id=i + 1)\n    ok += 'result' in r\n    first = first or time.monotonic() - t0\n\
             out('ok', ok)\nout('first', first)\n"
        ),
    );
    let mut cmd = world.cmd(["skill", "invoke", "--json"]);
    cmd.arg(&bundle);
    let desc = cmd.describe();
    let mut child = cmd.spawn();
    let rest = wait_ready(&mut child);
    let conn = rusqlite::Connection::open(world.home().join("journal.db")).expect("open");
    conn.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    std::fs::write(bundle.join("go"), "").expect("go");
    let locked = Instant::now();
    // The fault is the lock held for five seconds, not a wait for anything.
    std::thread::sleep(Duration::from_secs(5));
    conn.execute_batch("COMMIT").expect("unlock");
    let held = locked.elapsed();
    let out = finish(child, rest, &desc);
    expect_code(&out, 0);
    let r = reported(&out.stdout());
    assert_eq!(r["ok"], n, "{}", out.report());
    let first = r["first"].as_f64().expect("first");
    assert!(
        first > 3.0 && first < held.as_secs_f64() + 5.0,
        "the first call took {first:.2} s with the journal locked for {held:?}"
    );
    assert_eq!(journal_warnings(&out), 0, "{}", out.report());
    crate::load::assert_exact_rows(&world, out.json()["invocation_id"].as_str().unwrap(), n + 1);
    verify(&world);
}

#[test]
fn a_skill_hanging_up_mid_frame_leaves_the_broker_serving() {
    let world = World::new();
    let bundle = fault_skill(
        &world,
        "hangup",
        r#"s = connect()
# A header promising 100 bytes, then ten of them, then gone.
s.sendall(struct.pack(">I", 100) + b'{"jsonrpc"')
s.close()
# Half a header, then gone.
s = connect()
s.sendall(b"\x00\x00")
s.close()
# A whole request, then gone before the answer.
s = connect()
s.sendall(frame({"jsonrpc": "2.0", "id": 1, "method": "tool.call",
                 "params": {"tool": "MemoryRead", "args": {"path": "memories/x.md"}}}))
s.close()
# A request pipelined behind one the peer will never read in full.
s = connect()
s.sendall(frame({"jsonrpc": "2.0", "id": 2, "method": "tool.call",
                 "params": {"tool": "MemoryRead", "args": {"path": "memories/x.md"}}}) + struct.pack(">I", 50))
s.shutdown(socket.SHUT_WR)
s.close()
# The broker still serves, and counted both abandoned calls.
s = connect()
out("after", call(s, "MemoryRead", {"path": "memories/x.md"}, id=3))
deadline = time.monotonic() + 10
while True:
    s.sendall(frame({"jsonrpc": "2.0", "id": 4, "method": "broker.status"}))
    st = recv(s)["result"]
    if st["tool_calls"] >= 3 or time.monotonic() > deadline:
        break
    time.sleep(0.01)
out("status", st)
"#,
    );
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .arg(&bundle)
        .success();
    let r = reported(&out.stdout());
    assert_eq!(r["after"]["result"]["body"], "x\n", "{}", out.report());
    assert_eq!(r["status"]["tool_calls"], 3, "{}", out.report());
    let summary = out.json();
    assert_eq!(summary["tool_calls"], 3);
    crate::load::assert_exact_rows(&world, summary["invocation_id"].as_str().unwrap(), 3);
}

#[test]
fn a_skill_writing_a_gigabyte_to_stdout_is_not_buffered_by_the_broker() {
    let world = World::new();
    let gib: u64 = 1 << 30;
    let bundle = fault_skill(
        &world,
        "flood",
        &format!(
            "chunk = b'x' * (1 << 20)\nfor _ in range({}):\n    sys.stdout.buffer.write(chunk)\nsys.stdout.buffer.flush()\n\
             print()\nout('after', call(connect(), 'MemoryRead', {{'path': 'memories/x.md'}}))\n",
            gib >> 20
        ),
    );
    let mut cmd = world.cmd(["skill", "invoke", "--json"]);
    cmd.arg(&bundle);
    let mut child = cmd.spawn();
    let mut stdout = child.stdout.take().expect("stdout");
    // Count the flood without keeping it; keep only the tail, where the JSON lines are.
    let counter = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let n = stdout.read(&mut buf).expect("read");
            if n == 0 {
                return (total, tail);
            }
            total += n as u64;
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 1 << 17 {
                tail.drain(..tail.len() - (1 << 16));
            }
        }
    });
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    let (status, maxrss_kib) = wait_with_rusage(child);
    let (total, tail) = counter.join().expect("counter");
    let tail = String::from_utf8_lossy(&tail).into_owned();
    assert_eq!(status, 0, "exit status\n{stderr}\n{tail}");
    assert!(total > gib, "only {total} bytes arrived");
    let r = reported(&tail);
    assert_eq!(r["after"]["result"]["body"], "x\n", "{tail}");
    // The broker and everything it waited for stayed small: nothing held the gigabyte.
    assert!(
        maxrss_kib < 200 * 1024,
        "peak RSS {maxrss_kib} KiB while 1 GiB went through stdout"
    );
}

/// Waits for `child` with wait4, returning its exit code and the peak RSS (KiB) of it and the
/// descendants it waited for.
fn wait_with_rusage(child: Child) -> (i32, i64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own unreaped child; `status` and `usage` are valid for writes.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4: {}", std::io::Error::last_os_error());
    // The child is reaped: forget the handle without waiting again.
    std::mem::forget(child);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
}

#[test]
fn sigint_with_calls_in_flight_exits_130_and_every_started_call_completes() {
    let world = World::new();
    let bundle = load_skill(
        &world,
        "busy",
        &format!(
            "import threading\n\
             def worker(k):\n    try:\n        hammer(connect(), 10 ** 9, 'MemoryRead', {{'path': '{}'}}, window=8, first_id=k * 10 ** 9)\n    except Exception:\n        pass\n\
             threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]\n\
             [t.start() for t in threads]\n[t.join() for t in threads]\n",
            crate::load::MEMORY_DOC
        ),
    );
    let id = "6e3b1a2c-4f5d-4789-abcd-ef0123456789";
    let mut cmd = world.cmd(["skill", "invoke", "--json", "--invocation-id", id]);
    cmd.arg(&bundle);
    let desc = cmd.describe();
    let child = cmd.spawn();
    let journal_path = world.home().join("journal.db");
    let busy = wait_for(Duration::from_secs(30), || {
        if !journal_path.exists() {
            return None;
        }
        let started = rows(&world, id)
            .iter()
            .filter(|r| r["kind"] == "skill.tool_call_started")
            .count();
        (started >= 200).then_some(())
    });
    assert!(busy.is_some(), "the skill never got busy");
    let interrupted = Instant::now();
    // SAFETY: plain kill(2) of the broker this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().expect("wait");
    let out = Out {
        desc,
        output,
        elapsed: interrupted.elapsed(),
    };
    expect_code(&out, 130);
    assert!(
        out.elapsed < Duration::from_secs(12),
        "took {:?} to stop",
        out.elapsed
    );
    assert_eq!(out.json()["outcome"], "interrupted");
    let all = rows(&world, id);
    assert_calls_paired(&all);
    let k = kinds(&all);
    assert_eq!(k.get("skill.invoked_completed"), Some(&1), "{k:?}");
    let calls = k.get("skill.tool_call_started").copied().unwrap_or(0);
    assert!(calls >= 200);
    assert_eq!(out.json()["tool_calls"], calls);
    let replay = world
        .cmd(["skill", "broker", "replay", "--invocation", id, "--json"])
        .success()
        .json();
    assert_eq!(replay["integrity"]["ok"], true, "{:#}", replay["integrity"]);
    assert_eq!(replay["outcome"], "interrupted");
    verify(&world);
}

#[test]
fn tmp_full_when_the_socket_is_created_is_exit_125_and_leaves_nothing_behind() {
    let Some(ns) = MountNs::new("/tmp full") else {
        return;
    };
    let world = World::new();
    let bundle = fault_skill(&world, "tmpfull", "out('ran', True)\n");
    // The world (and the binary, when the checkout itself is under /tmp) lives in /tmp: park
    // the real /tmp on /mnt inside the namespace, put a tmpfs with a handful of inodes over
    // /tmp, bind back what the test needs, and use the remaining inodes up.
    let park = Path::new("/mnt");
    if !park.is_dir() {
        eprintln!("skipped: /tmp full: no /mnt to park the real /tmp on inside the namespace");
        return;
    }
    let binaries = Path::new(BIN).parent().expect("the binary's directory");
    let mut script = String::from(
        "mount --bind /tmp /mnt\n\
         mount -t tmpfs -o size=1m,nr_inodes=32,mode=1777 cyberos-test /tmp\n",
    );
    for needed in [world.path(), binaries] {
        if let Ok(rel) = needed.strip_prefix("/tmp") {
            let (at, from) = (needed.display(), park.join(rel));
            script += &format!("mkdir -p {at}\nmount --bind {} {at}\n", from.display());
        }
    }
    script += "i=0; while touch /tmp/fill.$i 2>/dev/null; do i=$((i+1)); done";
    ns.sh(&script);
    let id = "7e3b1a2c-4f5d-4789-abcd-ef0123456789";
    let out = run(ns.cyberos(
        &world,
        &[
            "skill",
            "invoke",
            "--invocation-id",
            id,
            bundle.to_str().unwrap(),
        ],
    ));
    expect_code(&out, 125);
    out.assert_stderr_contains("cyberos: ")
        .assert_stderr_contains("No space left on device");
    assert!(!out.stdout().contains("ran"), "{}", out.report());
    // Inside the namespace: nothing of the invocation was left in /tmp.
    let leftovers = ns
        .command("sh")
        .args(["-c", &format!("ls -d /tmp/*{id}* 2>/dev/null || true")])
        .output()
        .expect("ls");
    assert!(
        leftovers.stdout.is_empty(),
        "left behind: {}",
        String::from_utf8_lossy(&leftovers.stdout)
    );
    drop(ns);
    let status = world.cmd(["skill", "broker", "status"]).success().json();
    assert_eq!(status["active_invocations"], 0);
}
