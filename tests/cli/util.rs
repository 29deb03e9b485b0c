//! Test harness: a builder around the real `cyberos` binary that prints the command, status,
//! stdout and stderr when an expectation fails, and a temporary `CYBEROS_HOME` per test.

#![allow(dead_code)]

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_cyberos");

/// A per-test world: a temporary directory holding the cyberos home and any bundles.
pub struct World {
    pub dir: tempfile::TempDir,
}

impl World {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("cyberos-test-")
            .tempdir()
            .expect("tempdir");
        // The sandboxed skill runs as an unprivileged uid when tests run as root: it must be able
        // to reach bundles created here.
        set_mode(dir.path(), 0o755);
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// `cyberos ARGS` with this world's home and no inherited cyberos/OTel settings.
    pub fn cmd<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut cmd = Cmd::new(args);
        cmd.env("CYBEROS_HOME", self.home());
        cmd
    }

    /// Writes a bundle `<world>/<name>/` with `SKILL.md` and an executable `main`.
    pub fn bundle(&self, name: &str, skill_md: &str, main: &str) -> PathBuf {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir).expect("bundle dir");
        set_mode(&dir, 0o755);
        std::fs::write(dir.join("SKILL.md"), skill_md).expect("SKILL.md");
        set_mode(&dir.join("SKILL.md"), 0o644);
        std::fs::write(dir.join("main"), main).expect("main");
        set_mode(&dir.join("main"), 0o755);
        dir
    }

    /// Copies `examples/skills/<name>` into this world (the checkout may sit where the sandbox uid
    /// cannot reach it) and returns the copy's path.
    pub fn example(&self, name: &str) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/skills")
            .join(name);
        let skill_md = std::fs::read_to_string(src.join("SKILL.md")).expect("example SKILL.md");
        let main = std::fs::read_to_string(src.join("main")).expect("example main");
        self.bundle(name, &skill_md, &main)
    }

    /// Writes a file (creating parents) and returns its path.
    pub fn file(&self, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("parents");
        std::fs::write(&path, contents).expect("write");
        path
    }
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A SKILL.md with the given extra frontmatter lines after the required fields.
pub fn skill_md(id: &str, tools: &[&str], extra: &str) -> String {
    format!(
        "---\nid: {id}\nversion: 1.0.0\ndescription: test skill {id}\nallowed_memory_scopes: []\nallowed_tools: [{}]\n{extra}---\nA test skill.\n",
        tools.join(", ")
    )
}

pub struct Cmd {
    cmd: Command,
    stdin: Option<Vec<u8>>,
}

impl Cmd {
    pub fn new<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut cmd = Command::new(BIN);
        cmd.args(args.into_iter().map(Into::into));
        for (key, _) in std::env::vars_os() {
            let key_str = key.to_string_lossy();
            if key_str.starts_with("CYBEROS_")
                || key_str.starts_with("OTEL_")
                || key_str == "TRACEPARENT"
                || key_str == "XDG_DATA_HOME"
            {
                cmd.env_remove(&key);
            }
        }
        Self { cmd, stdin: None }
    }

    pub fn env(
        &mut self,
        key: impl AsRef<std::ffi::OsStr>,
        val: impl AsRef<std::ffi::OsStr>,
    ) -> &mut Self {
        self.cmd.env(key, val);
        self
    }

    pub fn arg(&mut self, arg: impl AsRef<std::ffi::OsStr>) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn stdin(&mut self, data: impl Into<Vec<u8>>) -> &mut Self {
        self.stdin = Some(data.into());
        self
    }

    /// Runs the command under `setpriv` as uid/gid 65534 with no supplementary groups.
    pub fn unprivileged(mut self) -> Self {
        let program = self.cmd.get_program().to_owned();
        let args: Vec<OsString> = self.cmd.get_args().map(ToOwned::to_owned).collect();
        let envs: Vec<(OsString, Option<OsString>)> = self
            .cmd
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
            .collect();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(program)
            .args(args);
        for (k, v) in envs {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        self.cmd = cmd;
        self
    }

    pub fn describe(&self) -> String {
        let mut s = format!("{}", self.cmd.get_program().to_string_lossy());
        for a in self.cmd.get_args() {
            s.push(' ');
            s.push_str(&format!("{:?}", a.to_string_lossy()));
        }
        s
    }

    pub fn spawn(&mut self) -> std::process::Child {
        self.cmd
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = self
            .cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.describe()));
        if let Some(data) = self.stdin.take() {
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(&data).expect("write stdin");
        }
        child
    }

    /// Spawns with piped output, killed if dropped while still running.
    pub fn start(&mut self) -> Running {
        Running(Some(self.spawn()))
    }

    pub fn output(&mut self) -> Out {
        let started = Instant::now();
        let child = self.spawn();
        let output = child.wait_with_output().expect("wait");
        Out {
            desc: self.describe(),
            output,
            elapsed: started.elapsed(),
        }
    }

    /// Runs and asserts the exit code.
    pub fn code(&mut self, expected: i32) -> Out {
        let out = self.output();
        if out.output.status.code() != Some(expected) {
            panic!("expected exit {expected}\n{}", out.report());
        }
        out
    }

    pub fn success(&mut self) -> Out {
        self.code(0)
    }
}

/// A spawned child killed (SIGKILL) and reaped if the test ends before it does, so a failing
/// test never leaves a broker running.
pub struct Running(pub Option<std::process::Child>);

impl Running {
    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    pub fn wait(&mut self) -> std::process::ExitStatus {
        let status = self.0.as_mut().expect("running").wait().expect("wait");
        self.0 = None;
        status
    }

    pub fn wait_with_output(mut self) -> Output {
        self.0
            .take()
            .expect("running")
            .wait_with_output()
            .expect("wait")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub struct Out {
    pub desc: String,
    pub output: Output,
    pub elapsed: Duration,
}

impl Out {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub fn report(&self) -> String {
        format!(
            "command: {}\nstatus: {:?}\nelapsed: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.desc,
            self.output.status,
            self.elapsed,
            self.stdout(),
            self.stderr()
        )
    }

    /// The stdout parsed as one JSON value (or its last line, for `invoke --json`).
    pub fn json(&self) -> serde_json::Value {
        let text = self.stdout();
        serde_json::from_str(text.trim())
            .or_else(|_| serde_json::from_str(text.trim().lines().last().unwrap_or("")))
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{}", self.report()))
    }

    pub fn assert_stderr_contains(&self, needle: &str) -> &Self {
        assert!(
            self.stderr().contains(needle),
            "stderr lacks {needle:?}\n{}",
            self.report()
        );
        self
    }

    pub fn assert_stdout_contains(&self, needle: &str) -> &Self {
        assert!(
            self.stdout().contains(needle),
            "stdout lacks {needle:?}\n{}",
            self.report()
        );
        self
    }
}

/// Polls `f` until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
