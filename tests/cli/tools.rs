//! The native tools end to end: a skill run by `cyberos skill invoke` calls them with `cyberos
//! tool call` (or the raw protocol, for the race loop), and each bypass of issue-level acceptance
//! is refused (seed acceptance 6, 7, 18 and 19 of TASK-SKILL-104 included).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::invoke::{PY_PRELUDE, reported, rows};
use crate::util::{Out, World, is_root, set_mode};

/// A shell line calling one tool and printing `{"KEY": <result or error object>}`.
fn call(key: &str, tool: &str, args: &str) -> String {
    assert!(!args.contains('\''), "args are single-quoted in the skill");
    format!("printf '{{\"{key}\":%s}}\\n' \"$(cyberos tool call {tool} '{args}' 2>&1)\"\n")
}

/// A shell skill with this frontmatter tail running `lines`.
fn shell_skill(world: &World, id: &str, tools: &str, extra: &str, lines: &str) -> PathBuf {
    let md = format!(
        "---\nid: {id}\nversion: 1.0.0\ndescription: tools test\nallowed_memory_scopes: [\"memories/projects/cyberos/**\"]\nallowed_tools: [{tools}]\n{extra}---\nbody\n"
    );
    world.bundle(id, &md, &format!("#!/bin/sh\n{lines}"))
}

fn invoke(world: &World, bundle: &Path, extra: &[&str]) -> (Out, serde_json::Map<String, Value>) {
    let out = world
        .cmd(["skill", "invoke", "--json"])
        .args(extra)
        .arg(bundle)
        .output();
    let map = reported(&out.stdout());
    (out, map)
}

/// The error of a failed call: (message, data).
fn error(v: &Value) -> (&str, &Value) {
    (
        v["message"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error: {v}")),
        &v["data"],
    )
}

/// A world directory `allowed/` (mode 0755 for an unprivileged skill) and its glob.
fn allowed_dir(world: &World) -> (PathBuf, String) {
    let dir = std::fs::canonicalize(world.path()).unwrap().join("allowed");
    std::fs::create_dir_all(&dir).unwrap();
    set_mode(&dir, 0o755);
    let glob = format!("{}/**", dir.display());
    (dir, glob)
}

#[test]
fn seed_6_read_inside_tmp_and_refuse_etc_passwd() {
    let world = World::new();
    let mut file = tempfile::Builder::new()
        .prefix("cyberos-x-")
        .suffix(".txt")
        .tempfile_in("/tmp")
        .unwrap();
    file.write_all(b"x marks the spot\n").unwrap();
    let x = file.path().display().to_string();
    let skill = shell_skill(
        &world,
        "reader",
        "Read, Write",
        "x-allowed-files: [\"/tmp/**\"]\n",
        &(call("ok", "Read", &format!(r#"{{"path":"{x}"}}"#))
            + &call("passwd", "Read", r#"{"path":"/etc/passwd"}"#)
            + &call(
                "write_etc",
                "Write",
                r#"{"path":"/tmp/../etc/cyberos-tools-test","content":"x"}"#,
            )),
    );
    let (out, got) = invoke(&world, &skill, &[]);
    assert_eq!(got["ok"]["body"], "x marks the spot\n", "{}", out.report());
    assert_eq!(got["ok"]["size"], 17);
    assert_eq!(got["ok"]["truncated"], false);
    let (msg, data) = error(&got["passwd"]);
    assert_eq!(msg, "file_violation");
    assert_eq!(data["path"], "/etc/passwd");
    let (msg, data) = error(&got["write_etc"]);
    assert_eq!(
        (msg, data["path"].as_str().unwrap()),
        ("file_violation", "/etc/cyberos-tools-test")
    );
    assert!(!Path::new("/etc/cyberos-tools-test").exists());
    let summary = out.json();
    assert_eq!(summary["denied"], 2, "{}", out.report());
}

#[test]
fn file_bypasses_are_refused() {
    let world = World::new();
    let (dir, glob) = allowed_dir(&world);
    let outside = std::fs::canonicalize(world.path()).unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "SECRET").unwrap();
    std::fs::write(dir.join("ok.txt"), "fine").unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), dir.join("link")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("dirlink")).unwrap();
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    let d = dir.display();
    let lines = [
        call(
            "dotdot",
            "Read",
            &format!(r#"{{"path":"{d}/../../../../../../etc/passwd"}}"#),
        ),
        call("link", "Read", &format!(r#"{{"path":"{d}/link"}}"#)),
        call(
            "dirlink",
            "Read",
            &format!(r#"{{"path":"{d}/dirlink/secret"}}"#),
        ),
        call("fifo", "Read", &format!(r#"{{"path":"{d}/fifo"}}"#)),
        call("zero", "Read", r#"{"path":"/dev/zero"}"#),
        call(
            "write_etc",
            "Write",
            r#"{"path":"/tmp/../etc/cyberos-tools-test","content":"x"}"#,
        ),
        call(
            "write_link",
            "Write",
            &format!(r#"{{"path":"{d}/dirlink/new","content":"x","create_dirs":true}}"#),
        ),
        call("glob", "Glob", &format!(r#"{{"pattern":"{d}/**"}}"#)),
        call(
            "grep",
            "Grep",
            &format!(r#"{{"pattern":"SECRET|fine","path":"{d}"}}"#),
        ),
        call(
            "grep_out",
            "Grep",
            &format!(r#"{{"pattern":"x","path":"{}"}}"#, outside.display()),
        ),
    ]
    .concat();
    let skill = shell_skill(
        &world,
        "bypass",
        "Read, Write, Glob, Grep",
        &format!("x-allowed-files: [\"{glob}\", \"/dev/zero\"]\n"),
        &lines,
    );
    let (out, got) = invoke(&world, &skill, &[]);
    let violation = |key: &str, path: String| {
        let (msg, data) = error(&got[key]);
        assert_eq!(
            (msg, data["path"].as_str().unwrap()),
            ("file_violation", path.as_str()),
            "{key}: {}",
            out.report()
        );
    };
    violation("dotdot", "/etc/passwd".into());
    violation("link", outside.join("secret").display().to_string());
    violation("dirlink", outside.join("secret").display().to_string());
    violation("write_link", outside.join("new").display().to_string());
    violation("grep_out", outside.display().to_string());
    for key in ["fifo", "zero"] {
        let (msg, data) = error(&got[key]);
        assert_eq!(
            (msg, data["kind"].as_str().unwrap()),
            ("tool_error", "not_regular_file"),
            "{key}"
        );
    }
    assert!(!outside.join("new").exists());
    let listed: Vec<&str> = got["glob"]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&format!("{d}/ok.txt").as_str()),
        "{listed:?}"
    );
    assert!(!listed.iter().any(|p| p.contains("link")), "{listed:?}");
    let grepped = got["grep"]["matches"].as_array().unwrap();
    assert_eq!(grepped.len(), 1, "{grepped:?}");
    assert_eq!(grepped[0]["line"], "fine");
}

/// A symlink to an outside file is swapped in and out of an allowed path on the host while the
/// skill reads it 1,000 times over one connection: no read may return the outside content.
#[test]
fn a_symlink_swapped_in_during_reads_never_leaks() {
    let world = World::new();
    let (dir, glob) = allowed_dir(&world);
    let outside = std::fs::canonicalize(world.path()).unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "SECRET").unwrap();
    std::fs::write(dir.join("f"), "inside").unwrap();
    let target = dir.join("f");
    let body = format!(
        r#"s = connect()
counts = {{"ok": 0, "leaked": 0, "refused": 0}}
for i in range(1000):
    r = call(s, "Read", {{"path": "{}"}}, id=i)
    if "result" in r:
        counts["leaked" if "SECRET" in r["result"]["body"] else "ok"] += 1
    else:
        counts["refused"] += 1
out("counts", counts)
"#,
        target.display()
    );
    let md = format!(
        "---\nid: racer\nversion: 1.0.0\ndescription: race\nallowed_memory_scopes: []\nallowed_tools: [Read]\nx-allowed-files: [\"{glob}\"]\n---\nbody\n"
    );
    let skill = world.bundle("racer", &md, &format!("{PY_PRELUDE}\n{body}"));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, dir, outside) = (Arc::clone(&stop), dir.clone(), outside.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let tmp = dir.join(format!(".swap{i}"));
                if i % 2 == 0 {
                    std::os::unix::fs::symlink(outside.join("secret"), &tmp).unwrap();
                } else {
                    std::fs::write(&tmp, "inside").unwrap();
                }
                std::fs::rename(&tmp, dir.join("f")).unwrap();
            }
            i
        })
    };
    let (out, got) = invoke(&world, &skill, &[]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    let counts = &got["counts"];
    assert_eq!(counts["leaked"], 0, "{}", out.report());
    assert_eq!(
        counts["ok"].as_u64().unwrap() + counts["refused"].as_u64().unwrap(),
        1000,
        "{}",
        out.report()
    );
    eprintln!("race: {counts} over {swaps} swaps");
}

#[test]
fn write_edit_and_read_round_trip_unprivileged() {
    let world = World::new();
    let (dir, glob) = allowed_dir(&world);
    set_mode(&dir, 0o777);
    let home = world.home();
    std::fs::create_dir_all(&home).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    }
    let d = dir.display();
    let lines = [
        call("write", "Write", &format!(r#"{{"path":"{d}/sub/a.txt","content":"one two two","create_dirs":true}}"#)),
        call("edit_ambiguous", "Edit", &format!(r#"{{"path":"{d}/sub/a.txt","old_string":"two","new_string":"2"}}"#)),
        call("edit", "Edit", &format!(r#"{{"path":"{d}/sub/a.txt","old_string":"two","new_string":"2","replace_all":true}}"#)),
        call("read", "Read", &format!(r#"{{"path":"{d}/sub/a.txt"}}"#)),
        call("bad_args", "Read", &format!(r#"{{"path":"{d}/sub/a.txt","bogus":1}}"#)),
        call("bash", "Bash", r#"{"command":"id -u"}"#),
    ]
    .concat();
    let skill = shell_skill(
        &world,
        "editor",
        "Read, Write, Edit",
        &format!("x-allowed-files: [\"{glob}\"]\n"),
        &lines,
    );
    let mut cmd = world.cmd(["skill", "invoke", "--json"]);
    cmd.arg(&skill);
    let out = if is_root() { cmd.unprivileged() } else { cmd }.output();
    let got = reported(&out.stdout());
    assert_eq!(
        got.get("write").map(|w| &w["bytes_written"]),
        Some(&Value::from(11)),
        "{}",
        out.report()
    );
    assert_eq!(error(&got["edit_ambiguous"]).1["kind"], "ambiguous");
    assert_eq!(got["edit"]["replacements"], 2);
    assert_eq!(got["read"]["body"], "one 2 2");
    assert_eq!(got["read"]["content_hash"], got["edit"]["content_hash"]);
    assert_eq!(got["bad_args"]["code"], -32602, "{}", out.report());
    assert_eq!(
        std::fs::read_to_string(dir.join("sub/a.txt")).unwrap(),
        "one 2 2"
    );
}

#[test]
fn memory_bypasses_are_refused_and_emit_carries_the_trace_id() {
    let world = World::new();
    let memory = world.home().join("memory");
    let outside = world.path().join("outside");
    std::fs::create_dir_all(memory.join("memories/projects/cyberos")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("s.md"), "SECRET").unwrap();
    std::os::unix::fs::symlink(
        outside.join("s.md"),
        memory.join("memories/projects/cyberos/link.md"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, memory.join("memories/projects/cyberos/dir")).unwrap();
    let lines = [
        call("dotdot", "MemoryRead", r#"{"path":"memories/projects/cyberos/../../../../../etc/passwd"}"#),
        call("link", "MemoryRead", r#"{"path":"memories/projects/cyberos/link.md"}"#),
        call("dir", "MemoryRead", r#"{"path":"memories/projects/cyberos/dir/s.md"}"#),
        call("emit", "MemoryEmit", r#"{"path":"memories/projects/cyberos/n.md","body":"rust broker notes","payload":{"topic":"t"}}"#),
        call("read", "MemoryRead", r#"{"path":"memories/projects/cyberos/n.md"}"#),
        call("search", "MemorySearch", r#"{"query":"broker rust"}"#),
        call("search_out", "MemorySearch", r#"{"query":"secret","path":"memories/people"}"#),
        "printf '{\"traceparent\":\"%s\"}\\n' \"$TRACEPARENT\"\n".to_owned(),
    ]
    .concat();
    let skill = shell_skill(
        &world,
        "memo",
        "MemoryRead, MemoryEmit, MemorySearch",
        "",
        &lines,
    );
    let (out, got) = invoke(&world, &skill, &[]);
    let (msg, data) = error(&got["dotdot"]);
    assert_eq!(
        (msg, data["path"].as_str().unwrap()),
        ("scope_violation", "etc/passwd"),
        "{}",
        out.report()
    );
    for key in ["link", "dir"] {
        let (msg, data) = error(&got[key]);
        assert_eq!(
            (msg, data["kind"].as_str().unwrap()),
            ("tool_error", "symlink"),
            "{key}"
        );
    }
    assert_eq!(got["read"]["body"], "rust broker notes");
    assert_eq!(got["emit"]["content_hash"], got["read"]["content_hash"]);
    assert_eq!(
        got["search"]["results"][0]["path"],
        "memories/projects/cyberos/n.md",
        "{}",
        out.report()
    );
    assert_eq!(error(&got["search_out"]).0, "scope_violation");
    // Seed 19: the memory.emitted row carries the call's trace id (the skill's TRACEPARENT).
    let trace_id = got["traceparent"]
        .as_str()
        .unwrap()
        .split('-')
        .nth(1)
        .unwrap()
        .to_owned();
    let id = out.json()["invocation_id"].as_str().unwrap().to_owned();
    let rows = rows(&world, &id);
    let emitted: Vec<&Value> = rows
        .iter()
        .filter(|r| r["kind"] == "memory.emitted")
        .collect();
    assert_eq!(emitted.len(), 1, "{rows:#?}");
    let p = &emitted[0]["payload"];
    assert_eq!(emitted[0]["seq"], got["emit"]["row_seq"]);
    assert_eq!(p["trace_id"], trace_id.as_str());
    assert_eq!(p["path"], "memories/projects/cyberos/n.md");
    assert_eq!(p["topic"], "t");
    assert_eq!(p["skill_id"], "memo");
    assert_eq!(p["invocation_id"], id.as_str());
    assert_eq!(p["sync_class"], "private");
}

/// A one-thread HTTP server on 127.0.0.1 recording requests; `/redirect` points at evil.com.
struct Server {
    port: u16,
    requests: Arc<Seen>,
}

impl Server {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                serve(stream, &seen);
            }
        });
        Self { port, requests }
    }

    fn requests(&self) -> Vec<(String, Vec<(String, String)>)> {
        self.requests.lock().unwrap().clone()
    }
}

/// (path, lowercase headers) of each request.
type Seen = Mutex<Vec<(String, Vec<(String, String)>)>>;

fn serve(stream: TcpStream, seen: &Seen) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let mut headers = Vec::new();
    let mut len = 0;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((n, v)) = h.trim_end().split_once(':') {
            if n.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap_or(());
    seen.lock().unwrap().push((path.clone(), headers));
    let response = if path == "/redirect" {
        "HTTP/1.1 302 Found\r\nLocation: http://evil.com/steal\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned()
    } else {
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Served: yes\r\nConnection: close\r\n\r\nok"
            .to_owned()
    };
    let mut stream = stream;
    stream.write_all(response.as_bytes()).unwrap_or(());
}

#[test]
fn seed_7_and_18_fetch_an_allowed_host_with_the_trace_id_and_refuse_evil_com() {
    let world = World::new();
    let server = Server::start();
    let p = server.port;
    let lines = [
        call(
            "ok",
            "HttpFetch",
            &format!(r#"{{"url":"http://api.example.com:{p}/x"}}"#),
        ),
        call(
            "post",
            "HttpPost",
            &format!(r#"{{"url":"http://api.example.com:{p}/p","body":{{"a":1}}}}"#),
        ),
        call("evil", "HttpFetch", r#"{"url":"https://evil.com/y"}"#),
        "printf '{\"traceparent\":\"%s\"}\\n' \"$TRACEPARENT\"\n".to_owned(),
    ]
    .concat();
    let skill = shell_skill(
        &world,
        "fetcher",
        "HttpFetch, HttpPost",
        "x-allowed-domains: [\"api.example.com\"]\n",
        &lines,
    );
    let pin = format!("api.example.com:{p}:127.0.0.1");
    let (out, got) = invoke(&world, &skill, &["--resolve", &pin]);
    assert_eq!(got["ok"]["status"], 200, "{}", out.report());
    assert_eq!(got["ok"]["body"], "ok");
    assert_eq!(got["ok"]["headers"]["x-served"], "yes");
    assert_eq!(got["post"]["status"], 200);
    let (msg, data) = error(&got["evil"]);
    assert_eq!(
        (msg, data["host"].as_str().unwrap()),
        ("domain_violation", "evil.com")
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "evil.com never reaches any server");
    let traceparent = got["traceparent"].as_str().unwrap();
    for (path, headers) in &reqs {
        let sent = headers
            .iter()
            .find(|(n, _)| n == "traceparent")
            .map(|(_, v)| v.as_str());
        // No exporter configured: the call's traceparent is forwarded unchanged.
        assert_eq!(sent, Some(traceparent), "{path}");
    }
    // The journal's rows for these calls carry the same trace id.
    let trace_id = traceparent.split('-').nth(1).unwrap();
    let id = out.json()["invocation_id"].as_str().unwrap().to_owned();
    let started: Vec<Value> = rows(&world, &id)
        .into_iter()
        .filter(|r| r["kind"] == "skill.tool_call_started")
        .collect();
    assert_eq!(started.len(), 2);
    assert!(started.iter().all(|r| r["payload"]["trace_id"] == trace_id));
}

#[test]
fn http_bypasses_are_refused_and_nothing_is_sent() {
    let world = World::new();
    let server = Server::start();
    let p = server.port;
    let urls = [
        (
            "userinfo",
            format!("http://api.example.com@evil.com:{p}/"),
            "evil.com",
        ),
        (
            "suffix",
            format!("http://api.example.com.evil.com:{p}/"),
            "api.example.com.evil.com",
        ),
        ("upper", format!("http://EVIL.COM:{p}/"), "evil.com"),
        ("dot", format!("http://evil.com.:{p}/"), "evil.com"),
        ("decimal", format!("http://2130706433:{p}/"), "127.0.0.1"),
        ("hex", format!("http://0x7f000001:{p}/"), "127.0.0.1"),
        (
            "metadata",
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "169.254.169.254",
        ),
        (
            "redirect",
            format!("http://api.example.com:{p}/redirect"),
            "evil.com",
        ),
        ("localhost", format!("http://localhost:{p}/"), "localhost"),
        ("file", "file:///etc/passwd".to_owned(), ""),
        (
            "gopher",
            "gopher://api.example.com:70/1".to_owned(),
            "api.example.com",
        ),
    ];
    let mut lines: String = urls
        .iter()
        .map(|(key, url, _)| call(key, "HttpFetch", &format!(r#"{{"url":"{url}"}}"#)))
        .collect();
    lines += &call(
        "allowed_upper",
        "HttpFetch",
        &format!(r#"{{"url":"http://API.EXAMPLE.COM:{p}/u"}}"#),
    );
    lines += &call(
        "allowed_dot",
        "HttpFetch",
        &format!(r#"{{"url":"http://api.example.com.:{p}/d"}}"#),
    );
    let skill = shell_skill(
        &world,
        "tricks",
        "HttpFetch",
        "x-allowed-domains: [\"api.example.com\", \"localhost\"]\n",
        &lines,
    );
    let pins: Vec<String> = ["api.example.com", "evil.com", "api.example.com.evil.com"]
        .iter()
        .map(|h| format!("--resolve={h}:{p}:127.0.0.1"))
        .collect();
    let pin_args: Vec<&str> = pins.iter().map(String::as_str).collect();
    let (out, got) = invoke(&world, &skill, &pin_args);
    for (key, url, host) in &urls {
        let (msg, data) = error(&got[*key]);
        assert_eq!(msg, "domain_violation", "{key} {url}: {}", out.report());
        assert_eq!(data["host"], *host, "{key} {url}");
    }
    assert!(
        error(&got["redirect"]).1["detail"]
            .as_str()
            .unwrap()
            .contains("redirect")
    );
    assert!(
        error(&got["localhost"]).1["detail"]
            .as_str()
            .unwrap()
            .contains("address refused")
    );
    assert_eq!(got["allowed_upper"]["status"], 200, "{}", out.report());
    assert_eq!(got["allowed_dot"]["status"], 200);
    let paths: Vec<String> = server.requests().into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        ["/redirect", "/u", "/d"],
        "only allowed requests reach the server"
    );
}

#[test]
fn bash_runs_sandboxed_in_the_shared_scratch_directory() {
    let world = World::new();
    let (dir, glob) = allowed_dir(&world);
    std::fs::write(dir.join("visible-to-file-tools"), "x").unwrap();
    let server = Server::start();
    let d = dir.display();
    let lines = [
        "echo from-skill > \"$HOME/shared.txt\"\n".to_owned(),
        call("cat", "Bash", r#"{"command":"cat shared.txt; echo err >&2; pwd; exit 3"}"#),
        call("env", "Bash", r#"{"cmd":"env | sort"}"#),
        call("hidden", "Bash", &format!(r#"{{"command":"ls {d} 2>&1; echo rc=$?"}}"#)),
        call("net", "Bash", &format!(r#"{{"command":"echo > /dev/tcp/127.0.0.1/{} && echo connected || echo refused","timeout_ms":10000}}"#, server.port)),
        call("daemon", "Bash", r#"{"command":"(setsid sleep 98765 >/dev/null 2>&1 &); echo started"}"#),
        call("timeout", "Bash", r#"{"command":"sleep 30","timeout_ms":300}"#),
        call("write_back", "Bash", r#"{"command":"echo from-bash > back.txt"}"#),
        "printf '{\"back\":\"%s\"}\\n' \"$(cat \"$HOME/back.txt\")\"\n".to_owned(),
        call("signal", "Bash", r#"{"command":"kill -9 $$"}"#),
        call("big", "Bash", r#"{"command":"head -c 2000000 /dev/zero | tr \"\\\\0\" a"}"#),
    ]
    .concat();
    let skill = shell_skill(
        &world,
        "basher",
        "Bash",
        &format!("x-allowed-files: [\"{glob}\"]\n"),
        &lines,
    );
    let (out, got) = invoke(&world, &skill, &[]);
    let cat = &got["cat"];
    assert_eq!(cat["exit_code"], 3, "{}", out.report());
    assert_eq!(cat["signal"], Value::Null);
    assert_eq!(cat["stdout"], "from-skill\n/tmp/scratch\n");
    assert_eq!(cat["stderr"], "err\n");
    assert_eq!(cat["truncated"], false);
    let env = got["env"]["stdout"].as_str().unwrap();
    assert!(!env.contains("CYBEROS"), "{env}");
    assert!(env.contains("HOME=/tmp/scratch"), "{env}");
    let hidden = got["hidden"]["stdout"].as_str().unwrap();
    assert!(
        hidden.contains("No such file") && hidden.contains("rc=2"),
        "{hidden}"
    );
    assert!(
        got["net"]["stdout"].as_str().unwrap().contains("refused"),
        "{}",
        got["net"]
    );
    assert!(server.requests().is_empty());
    assert_eq!(got["daemon"]["stdout"], "started\n");
    assert_eq!(
        error(&got["timeout"]).1["kind"],
        "timeout",
        "{}",
        out.report()
    );
    assert_eq!(got["back"], "from-bash");
    assert_eq!(got["signal"]["signal"], 9);
    assert_eq!(got["big"]["truncated"], true);
    assert_eq!(got["big"]["stdout"].as_str().unwrap().len(), 1024 * 1024);
    // The daemon did not outlive its call.
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("98765"))
        .collect();
    assert!(survivors.is_empty(), "{survivors:?}");
}

#[test]
fn tool_list_gives_a_schema_for_every_allowed_tool() {
    let world = World::new();
    let skill = shell_skill(
        &world,
        "lister",
        "Read, Write, Edit, Glob, Grep, Bash, MemoryRead, MemorySearch, MemoryEmit, HttpFetch, HttpPost",
        "disallowed_tools: [Bash]\n",
        "printf '{\"list\":%s}\\n' \"$(cyberos tool list)\"\n",
    );
    let (out, got) = invoke(&world, &skill, &[]);
    let tools = got["list"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", out.report()));
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 10, "{names:?}");
    assert!(!names.contains(&"Bash"));
    for tool in tools {
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
        assert_eq!(
            tool["input_schema"]["additionalProperties"], false,
            "{tool}"
        );
        assert!(!tool["description"].as_str().unwrap().is_empty());
    }
}
