//! What the cases share: the binaries under test, a scratch workspace every sandbox uid can
//! read, skill bundles, and hyperfine driven in alternating rounds.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `cyberos` binary cargo built for this bench (the release profile).
pub fn cyberos() -> &'static str {
    env!("CARGO_BIN_EXE_cyberos")
}

/// Where generated data sets are kept between runs (they are deterministic, so a second run
/// reuses them): `target/bench-data`.
pub fn data_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&dir).expect("create target/bench-data");
    dir
}

/// A scratch directory under /tmp, readable (not writable) by everyone: a root broker runs
/// skills as uid 65534, which must be able to reach the bundles in it.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new(label: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("cyberos-bench-{label}-"))
            .tempdir_in("/tmp")
            .expect("create a workspace in /tmp");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod workspace");
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A fresh cyberos home inside the workspace.
    pub fn home(&self, name: &str) -> PathBuf {
        let home = self.path().join(name);
        std::fs::create_dir_all(home.join("memory")).expect("create home");
        home
    }
}

/// Writes a bundle `dir/<id>/` whose `main` is a copy of `main` (an executable), with the given
/// frontmatter lines after the required ones.
pub fn bundle(parent: &Path, id: &str, main: &Path, extra: &str) -> PathBuf {
    let dir = parent.join(id);
    std::fs::create_dir_all(&dir).expect("create bundle");
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nid: {id}\nversion: 1.0.0\ndescription: Benchmark skill {id}.\n{extra}---\n# {id}\n"
        ),
    )
    .expect("write SKILL.md");
    std::fs::copy(main, dir.join("main")).expect("copy main");
    std::fs::set_permissions(dir.join("main"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod main");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod bundle");
    dir
}

/// Runs `commands` (name, command line without shell quoting) through `hyperfine -N` in
/// `rounds` rounds of `runs` each, alternating the order every round so that a change in machine
/// load hits every command alike. Returns each command's wall times in milliseconds.
pub fn hyperfine(commands: &[(&str, String)], rounds: usize, runs: usize) -> Vec<Vec<f64>> {
    let mut times = vec![Vec::new(); commands.len()];
    let out = tempfile::NamedTempFile::new().expect("temp file");
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..commands.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        let mut cmd = Command::new("hyperfine");
        cmd.args(["-N", "--style", "none", "--warmup", "3", "--runs"])
            .arg(runs.to_string())
            .arg("--export-json")
            .arg(out.path());
        for &i in &order {
            cmd.arg(&commands[i].1);
        }
        let status = cmd.status().expect("run hyperfine (is it installed?)");
        assert!(status.success(), "hyperfine failed: {status}");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.path()).expect("read hyperfine json"))
                .expect("hyperfine json");
        for (k, &i) in order.iter().enumerate() {
            let result = &json["results"][k];
            for t in result["times"].as_array().expect("times") {
                times[i].push(t.as_f64().expect("a time") * 1000.0);
            }
        }
    }
    times
}

/// `bwrap` with the namespaces and views of CONTRACT §6.5 that bubblewrap offers, running
/// `program`: /usr read-only, and the merged-/usr links (or read-only binds) for /bin, /lib*,
/// /sbin, as the sandbox itself mirrors them.
pub fn bwrap_command(program: &str) -> String {
    let mut args = vec![
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    for dir in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
        let Ok(meta) = std::fs::symlink_metadata(dir) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(dir).expect("read link");
            args.extend(["--symlink".into(), target.display().to_string(), dir.into()]);
        } else if meta.is_dir() {
            args.extend(["--ro-bind".into(), dir.into(), dir.into()]);
        }
    }
    args.push(program.into());
    args.join(" ")
}

/// The first line of `text` that parses as a JSON object.
pub fn first_json(text: &str) -> Option<serde_json::Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str(l).ok())
}

/// A deterministic xorshift generator, so generated data sets are identical on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// An invocation for calling tools in-process through the `Tool` trait, with a policy allowing
/// `files` (x-allowed-files) and `memory` (allowed_memory_scopes) and every tool.
pub fn invocation(
    files: Vec<String>,
    memory: Vec<String>,
    memory_root: PathBuf,
) -> cyberos::tools::Invocation {
    use cyberos::skill::manifest::{Manifest, SyncClass, TenantScope};
    let manifest = Manifest {
        id: "bench".into(),
        version: semver::Version::new(1, 0, 0),
        description: "bench".into(),
        allowed_memory_scopes: memory,
        allowed_tools: cyberos::tools::ToolName::ALL.to_vec(),
        disallowed_tools: Vec::new(),
        effort_minutes: 60,
        min_broker_version: None,
        max_broker_version: None,
        signature: None,
        sync_class: SyncClass::Private,
        tenant_scope: TenantScope::Any,
        tags: Vec::new(),
        extensions: Default::default(),
        allowed_files: files,
        allowed_domains: Vec::new(),
    };
    let policy = cyberos::skill::policy::Policy::from_manifest(&manifest).expect("policy");
    let scratch_dir = memory_root.with_file_name("scratch");
    cyberos::tools::Invocation::standalone(
        "bench",
        std::sync::Arc::new(policy),
        memory_root,
        scratch_dir,
    )
}

/// Calls `tool` in-process with `args`; returns the result and the wall time in milliseconds.
pub fn call_tool(
    inv: &cyberos::tools::Invocation,
    tool: cyberos::tools::ToolName,
    args: &serde_json::Value,
) -> (serde_json::Value, f64) {
    let tool = cyberos::tools::tool(tool).expect("registered tool");
    let ctx = cyberos::tools::CallContext {
        invocation: inv,
        call_id: "call-1",
        trace: cyberos::util::TraceContext::new_root(),
    };
    let t = std::time::Instant::now();
    tool.check(&ctx, args)
        .unwrap_or_else(|e| panic!("check {args}: {e:?}"));
    let result = tool
        .call(&ctx, args)
        .unwrap_or_else(|e| panic!("call {args}: {e:?}"));
    (result, t.elapsed().as_secs_f64() * 1000.0)
}

/// Runs a command to completion, returning stdout and the wall time in milliseconds.
pub fn timed_output(cmd: &mut Command) -> (Vec<u8>, f64) {
    let t = std::time::Instant::now();
    let out = cmd.output().expect("run a baseline command");
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    assert!(out.status.success(), "{cmd:?} failed: {}", out.status);
    (out.stdout, ms)
}
