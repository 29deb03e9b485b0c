//! Case 2: tool-call round trips on one connection, measured by the client inside a real
//! invocation (full sandbox, the broker's event loop, worker pool, enforcement and journal),
//! against the floor: a trivial blocking echo server on a Unix socket with the same framing,
//! driven by the same client code. Rounds alternate echo and broker so load changes hit both.

use std::io::{Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::client::DOC_PATH;
use crate::common::{self, Workspace};
use crate::report::{Row, Target, Unit};
use crate::stats::Summary;

const CASE: &str = "2. tool-call round trip";

/// A bundle whose `main` is this very binary (it dispatches on `__client`), allowed MemoryRead
/// under `bench/**`, and a home holding the 1 KiB document it reads.
pub struct RpcSkill {
    pub bundle: PathBuf,
    pub home: PathBuf,
}

impl RpcSkill {
    pub fn new(ws: &Workspace, home: &str) -> Self {
        let me = std::env::current_exe().expect("the suite's own path");
        let bundle = ws.path().join("bundles");
        let bundle = if bundle.join("bench-rpc").exists() {
            bundle.join("bench-rpc")
        } else {
            common::bundle(
                &bundle,
                "bench-rpc",
                &me,
                "allowed_memory_scopes: [\"bench/**\"]\nallowed_tools: [MemoryRead]\neffort_minutes: 20\n",
            )
        };
        let home = ws.home(home);
        let doc = home.join("memory").join(DOC_PATH);
        std::fs::create_dir_all(doc.parent().expect("parent")).expect("create memory dir");
        let line = "The quick brown fox jumps over the lazy dog; a memory of 1 KiB.\n";
        let body: String = line.repeat(1024 / line.len() + 1)[..1024].to_owned();
        std::fs::write(&doc, body).expect("write the 1 KiB document");
        Self { bundle, home }
    }

    /// `cyberos skill invoke <bundle> --home H --json -- __client ARGS...`
    pub fn command(&self, client_args: &[String]) -> Command {
        let mut cmd = Command::new(common::cyberos());
        cmd.args(["skill", "invoke"])
            .arg(&self.bundle)
            .arg("--home")
            .arg(&self.home)
            .args(["--json", "--", "__client"])
            .args(client_args);
        cmd
    }

    /// Runs one invocation to its end; returns the client's JSON line and the summary.
    pub fn run(&self, client_args: &[String]) -> (serde_json::Value, serde_json::Value) {
        let out = self
            .command(client_args)
            .stdin(Stdio::null())
            .output()
            .expect("run cyberos skill invoke");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "invocation failed ({}): {stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let client = common::first_json(&stdout).expect("the client's JSON line");
        let summary: serde_json::Value = stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .expect("the invoke --json summary");
        (client, summary)
    }
}

/// Echoes every frame back on the connection it came from, one thread per connection.
fn echo_server(path: &Path) {
    let listener = UnixListener::bind(path).expect("bind the echo socket");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut frame = Vec::with_capacity(4096);
                loop {
                    let mut len = [0u8; 4];
                    if stream.read_exact(&mut len).is_err() {
                        return;
                    }
                    let n = u32::from_be_bytes(len) as usize;
                    frame.clear();
                    frame.extend_from_slice(&len);
                    frame.resize(4 + n, 0);
                    if stream.read_exact(&mut frame[4..]).is_err()
                        || stream.write_all(&frame).is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    // The listener thread owns the socket; the file goes with the workspace.
    let _check = UnixStream::connect(path).expect("the echo server answers");
}

fn floats(v: &serde_json::Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

pub fn run(ws: &Workspace, rounds: usize, n: usize, pipelined: usize, window: usize) -> Vec<Row> {
    let skill = RpcSkill::new(ws, "home-rpc");
    let echo_path = ws.path().join("echo.sock");
    echo_server(&echo_path);
    let me = std::env::current_exe().expect("own path");
    let (mut echo, mut list, mut read, mut rate) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let echo_run = || {
            let out = Command::new(&me)
                .args(["__client", "echo"])
                .arg(&echo_path)
                .arg(n.to_string())
                .output()
                .expect("run the echo client");
            assert!(out.status.success(), "echo client failed");
            common::first_json(&String::from_utf8_lossy(&out.stdout)).expect("echo JSON")
        };
        let broker_run = || {
            skill
                .run(&[
                    "rpc".into(),
                    n.to_string(),
                    pipelined.to_string(),
                    window.to_string(),
                ])
                .0
        };
        let (e, b) = if round % 2 == 0 {
            let e = echo_run();
            (e, broker_run())
        } else {
            let b = broker_run();
            (echo_run(), b)
        };
        echo.extend(floats(&e, "echo_us"));
        list.extend(floats(&b, "tool_list_us"));
        read.extend(floats(&b, "memory_read_us"));
        rate.push(
            b["pipelined_calls"].as_f64().expect("calls")
                / b["pipelined_secs"].as_f64().expect("secs"),
        );
    }
    let echo = Summary::of(&echo);
    vec![
        Row::new(
            CASE,
            "`tool.list`, one connection",
            Unit::Us,
            Summary::of(&list),
        )
        .baseline("raw echo, same framing", echo)
        .target(Target::RatioAtMost(2.0)),
        Row::new(
            CASE,
            "audited `MemoryRead` of 1 KiB, one connection",
            Unit::Us,
            Summary::of(&read),
        )
        .baseline("raw echo, same framing", echo)
        .target(Target::AtMost(60.0)),
        Row::new(
            CASE,
            format!("audited `MemoryRead`, sustained ({window} in flight on one connection)"),
            Unit::PerSec,
            Summary::of(&rate),
        )
        .target(Target::AtLeast(15_000.0)),
    ]
}
