//! The sandbox seen from inside: a probe skill tries each forbidden thing and reports what it saw.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cyberos::sandbox::{self, Exit, Spec};
use serde_json::Value;

use crate::util::{self, BIN, World};

const LAYERS: [&str; 14] = [
    "env", "fds", "limits", "identity", "user_ns", "pid_ns", "net_ns", "mount_ns", "ipc_ns",
    "uts_ns", "landlock", "seccomp", "session", "lifetime",
];

/// The kernel's Landlock ABI version (0 without Landlock).
fn landlock_abi() -> i64 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute only returns the version.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    }
}

/// Whether this kernel lets `setpriv`'d uid 65534 create a user namespace.
fn user_ns_works() -> bool {
    std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "unshare",
            "-U",
            "true",
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// Every layer the kernel offers must be reported applied; a missing one must be explained.
fn assert_check_report(json: &Value) {
    let layers = json["layers"].as_object().expect("layers object");
    let mut expected = LAYERS.to_vec();
    expected.sort_unstable();
    assert_eq!(
        layers.keys().map(String::as_str).collect::<Vec<_>>(),
        expected,
        "{json}"
    );
    for (name, state) in layers {
        let status = state["status"].as_str().expect("status");
        assert!(
            ["applied", "degraded", "unavailable"].contains(&status),
            "{name}: {state}"
        );
        if status != "applied" {
            assert!(
                state["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "{name} lacks a reason: {state}"
            );
        }
    }
    let expect_complete = landlock_abi() >= 6 && user_ns_works();
    if expect_complete {
        assert_eq!(
            json["complete"], true,
            "every layer should be applied on this kernel: {json}"
        );
        assert_eq!(
            layers["landlock"]["abi"].as_i64(),
            Some(landlock_abi()),
            "{json}"
        );
    } else {
        eprintln!(
            "skipped: completeness not asserted (Landlock ABI {}, user namespaces {})",
            landlock_abi(),
            user_ns_works()
        );
    }
}

#[test]
fn sandbox_check_json_reports_every_layer_as_root() {
    let world = World::new();
    let out = world.cmd(["sandbox", "check", "--json"]).success();
    assert_check_report(&out.json());
}

#[test]
fn sandbox_check_json_reports_every_layer_unprivileged() {
    let world = World::new();
    let out = world
        .cmd(["sandbox", "check", "--json"])
        .unprivileged()
        .success();
    assert_check_report(&out.json());
}

#[test]
fn sandbox_check_prints_one_line_per_layer() {
    let world = World::new();
    let out = world.cmd(["sandbox", "check"]).success();
    let stdout = out.stdout();
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, LAYERS, "{}", out.report());
    if landlock_abi() >= 6 {
        assert!(
            stdout.contains(&format!("landlock   available (ABI {})", landlock_abi())),
            "{}",
            out.report()
        );
    }
}

#[test]
fn the_hidden_child_refuses_to_run_by_hand() {
    let world = World::new();
    let out = world.cmd([cyberos::cli::SANDBOX_CHILD_COMMAND]).code(2);
    out.assert_stderr_contains("internal");
}

// ---------------------------------------------------------------------------------------------
// The probe, run through the library with the real binary as supervisor.

const PROBE_SKILL: &str = include_str!("../fixtures/sandbox-probe/SKILL.md");
const PROBE_MAIN: &str = include_str!("../fixtures/sandbox-probe/main");

/// What the probe printed: one JSON object per check, by check name.
struct Seen {
    exit: Exit,
    checks: BTreeMap<String, Value>,
    stderr: String,
}

impl Seen {
    fn get(&self, check: &str) -> &Value {
        self.checks.get(check).unwrap_or_else(|| {
            panic!(
                "probe did not report {check}; saw {:?}\nstderr: {}",
                self.checks, self.stderr
            )
        })
    }

    /// Asserts the check's `result` (an errno name, "ok", or an observation).
    fn expect(&self, check: &str, result: &str) -> &Self {
        assert_eq!(
            self.get(check)["result"],
            result,
            "{check}: {}",
            self.get(check)
        );
        self
    }
}

/// A probe bundle and a scratch directory the sandbox uid can use.
fn probe_spec(world: &World, checks: &[&str]) -> Spec {
    let bundle = world.bundle("probe", PROBE_SKILL, PROBE_MAIN);
    let scratch = world.path().join(format!("scratch-{}", rand_suffix()));
    std::fs::create_dir_all(&scratch).unwrap();
    util::set_mode(&scratch, 0o777);
    let mut spec = Spec::new(
        bundle.join("main"),
        checks.iter().map(|s| s.to_string()).collect(),
    );
    spec.ro_binds = vec![bundle];
    spec.scratch = Some(scratch);
    spec.cwd = PathBuf::from(sandbox::SCRATCH_INSIDE);
    spec.client_binary = Some(PathBuf::from(BIN));
    spec.limits.cpu_seconds = 60;
    spec.env = vec![
        ("HOME".into(), sandbox::SCRATCH_INSIDE.into()),
        ("TMPDIR".into(), sandbox::SCRATCH_INSIDE.into()),
        ("PATH".into(), sandbox::INSIDE_PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    spec
}

fn rand_suffix() -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn run_spec(spec: &Spec) -> Seen {
    let out = sandbox::run_command_with_binary(
        Path::new(BIN),
        spec,
        b"",
        Duration::from_secs(60),
        1 << 20,
    )
    .expect("run the probe");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let checks = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| (v["check"].as_str().unwrap_or_default().to_string(), v))
        .collect();
    Seen {
        exit: out.exit,
        checks,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn probe(world: &World, checks: &[&str]) -> Seen {
    run_spec(&probe_spec(world, checks))
}

fn root_only() -> bool {
    if !util::is_root() {
        eprintln!("skipped: the library-driven probe tests need a root test process");
        return false;
    }
    true
}

#[test]
fn probe_cannot_read_host_secrets() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let home = world.home();
    std::fs::create_dir_all(home.join("memory/memories")).unwrap();
    std::fs::write(home.join("journal.db"), "journal").unwrap();
    std::fs::write(home.join("memory/memories/a.md"), "secret").unwrap();
    let user_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let broker_environ = format!("/proc/{}/environ", std::process::id());
    let journal = format!("read:{}", home.join("journal.db").display());
    let memory = format!("read:{}", home.join("memory/memories/a.md").display());
    let user_home = format!("list:{user_home}");
    let broker_environ = format!("read:{broker_environ}");
    let seen = probe(
        &world,
        &[
            "read:/etc/shadow",
            &broker_environ,
            "read:/proc/1/environ",
            &journal,
            &memory,
            &user_home,
            "read:/etc/passwd",
        ],
    );
    seen.expect("read:/etc/shadow", "ENOENT")
        // The broker's pid does not exist in the sandbox's pid namespace, and the init (pid 1) is
        // not dumpable.
        .expect(&broker_environ, "ENOENT")
        .expect("read:/proc/1/environ", "EACCES")
        .expect(&journal, "ENOENT")
        .expect(&memory, "ENOENT")
        .expect(&user_home, "ENOENT")
        .expect("read:/etc/passwd", "ok");
}

#[test]
fn probe_can_write_only_scratch() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let bundle_file = format!("write:{}", world.path().join("probe/x").display());
    let seen = probe(
        &world,
        &[
            "write:/tmp/scratch/x",
            "write:/tmp/x",
            "write:/usr/x",
            "write:/x",
            &bundle_file,
            "write:/dev/x",
            "write:/dev/null",
        ],
    );
    seen.expect("write:/tmp/scratch/x", "ok")
        .expect("write:/tmp/x", "EROFS")
        .expect("write:/usr/x", "EROFS")
        .expect("write:/x", "EROFS")
        .expect(&bundle_file, "EROFS")
        .expect("write:/dev/x", "EROFS")
        .expect("write:/dev/null", "ok");
}

#[test]
fn probe_has_no_network() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let tcp_local = format!("tcp:127.0.0.1:{port}");
    let udp_local = format!("udp:127.0.0.1:{port}");
    let seen = probe(
        &world,
        &[
            &tcp_local,
            &udp_local,
            "tcp:192.0.2.1:80",
            "udp:192.0.2.1:53",
            "tcp6:[::1]:22",
            "netlink",
        ],
    );
    // socket() itself is refused for every family but AF_UNIX.
    for check in [
        &tcp_local,
        &udp_local,
        "tcp:192.0.2.1:80",
        "udp:192.0.2.1:53",
        "tcp6:[::1]:22",
        "netlink",
    ] {
        seen.expect(check, "EPERM");
    }
    assert_eq!(
        listener.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the listener got a connection"
    );
}

#[test]
fn probe_reaches_no_unix_socket_but_its_own() {
    if !root_only() {
        return;
    }
    use std::os::linux::net::SocketAddrExt as _;
    let world = World::new();
    let name = format!("cyberos-test-{}", rand_suffix());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _abstract = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let socks = world.path().join("socks");
    std::fs::create_dir_all(&socks).unwrap();
    util::set_mode(&socks, 0o777);
    let own = socks.join("own.sock");
    let other = socks.join("other.sock");
    let _own = std::os::unix::net::UnixListener::bind(&own).unwrap();
    let _other = std::os::unix::net::UnixListener::bind(&other).unwrap();
    util::set_mode(&own, 0o777);
    let mut spec = probe_spec(
        &world,
        &[
            &format!("abstract:{name}"),
            &format!("unix:{}", own.display()),
            &format!("unix:{}", other.display()),
            "unix:/run/systemd/private",
        ],
    );
    spec.socket = Some(own.clone());
    let seen = run_spec(&spec);
    // The sandbox has its own network namespace, hence its own abstract socket namespace.
    seen.expect(&format!("abstract:{name}"), "ECONNREFUSED")
        .expect(&format!("unix:{}", own.display()), "ok")
        .expect(&format!("unix:{}", other.display()), "ENOENT")
        .expect("unix:/run/systemd/private", "ENOENT");
}

#[test]
fn probe_cannot_use_dangerous_syscalls() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let eperm = [
        "ptrace",
        "process_vm_readv",
        "unshare_user",
        "clone_newuser",
        "io_uring",
        "tiocsti",
        "tioclinux",
        "mount",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "userfaultfd",
        "setns",
        "kexec_load",
        "init_module",
        // x32 numbers match no allowed syscall (a kernel without x32 alone would say ENOSYS).
        "x32",
    ];
    let mut checks = eperm.to_vec();
    checks.extend(["clone3", "i386"]);
    let seen = probe(&world, &checks);
    for check in eperm {
        seen.expect(check, "EPERM");
    }
    seen.expect("clone3", "ENOSYS")
        .expect("i386", "killed:SIGSYS");
}

#[test]
fn probe_runs_unprivileged_in_its_own_namespaces() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let seen = probe(&world, &["status", "env", "fds", "cwd", "hostname", "tty"]);
    let status = &seen.expect("status", "ok").get("status").clone();
    assert_eq!(status["NoNewPrivs"], serde_json::json!(["1"]), "{status}");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(
            status[set],
            serde_json::json!(["0000000000000000"]),
            "{set}: {status}"
        );
    }
    // Root broker: uid/gid 65534 inside and out, the only id mapped, no supplementary groups.
    assert_eq!(
        status["Uid"],
        serde_json::json!(["65534", "65534", "65534", "65534"]),
        "{status}"
    );
    assert_eq!(
        status["Gid"],
        serde_json::json!(["65534", "65534", "65534", "65534"]),
        "{status}"
    );
    assert_eq!(
        status["uid_map"],
        serde_json::json!(["65534", "65534", "1"]),
        "{status}"
    );
    assert_eq!(
        status["gid_map"],
        serde_json::json!(["65534", "65534", "1"]),
        "{status}"
    );
    assert_eq!(status["Groups"], serde_json::json!([]), "{status}");
    assert_eq!(status["Seccomp"], serde_json::json!(["2"]), "{status}");
    // Not pid 1: the init is; the program leads its own session.
    assert_ne!(status["pid"], 1, "{status}");
    assert_eq!(status["ppid"], 1, "{status}");
    assert_eq!(status["sid"], status["pid"], "{status}");
    let env = &seen.get("env")["env"];
    assert_eq!(
        env,
        &serde_json::json!({"HOME": "/tmp/scratch", "TMPDIR": "/tmp/scratch", "PATH": sandbox::INSIDE_PATH, "LANG": "C.UTF-8"})
    );
    assert_eq!(seen.get("fds")["fds"], serde_json::json!([0, 1, 2]));
    assert_eq!(seen.get("cwd")["cwd"], "/tmp/scratch");
    assert_eq!(seen.get("hostname")["hostname"], "cyberos");
    seen.expect("tty", "ENOENT");
}

#[test]
fn probe_sees_only_the_minimal_view() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let absent = [
        "/run",
        "/root",
        "/home",
        "/var",
        "/sys",
        "/etc/shadow",
        "/etc/hostname",
        "/dev/tty",
        "/dev/pts",
        "/dev/shm",
        "/boot",
    ];
    let present = [
        "/usr/bin/python3",
        "/bin/sh",
        "/etc/passwd",
        "/dev/null",
        "/dev/urandom",
        "/proc/self/status",
        "/opt/cyberos/bin/cyberos",
        "/tmp/scratch",
    ];
    let checks: Vec<String> = absent
        .iter()
        .chain(&present)
        .map(|p| format!("exists:{p}"))
        .collect();
    let refs: Vec<&str> = checks.iter().map(String::as_str).collect();
    let seen = probe(&world, &refs);
    for path in absent {
        seen.expect(&format!("exists:{path}"), "ENOENT");
    }
    for path in present {
        seen.expect(&format!("exists:{path}"), "ok");
    }
}

#[test]
fn probe_limits_are_set_and_a_fork_bomb_stops_at_eight() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let mut spec = probe_spec(&world, &["rlimits", "forkbomb"]);
    spec.limits.cpu_seconds = 42;
    let seen = run_spec(&spec);
    let limits = &seen.expect("rlimits", "ok").get("rlimits").clone();
    assert_eq!(
        limits["RLIMIT_AS"],
        serde_json::json!([536870912, 536870912])
    );
    assert_eq!(limits["RLIMIT_CPU"], serde_json::json!([42, 42]));
    assert_eq!(limits["RLIMIT_NPROC"], serde_json::json!([8, 8]));
    assert_eq!(limits["RLIMIT_CORE"], serde_json::json!([0, 0]));
    // Eight processes in all: the supervisor, the init, the probe and five children.
    seen.expect("forkbomb", "EAGAIN");
    assert_eq!(
        seen.get("forkbomb")["forked"],
        5,
        "{}",
        seen.get("forkbomb")
    );
}

#[test]
fn concurrent_sandboxes_do_not_share_the_process_limit() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let shared = world.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    util::set_mode(&shared, 0o777);
    let spec = |me: &str, other: &str| {
        let mut spec = probe_spec(
            &world,
            &[&format!("forkbomb:/tmp/scratch/{me},/tmp/scratch/{other}")],
        );
        spec.scratch = Some(shared.clone());
        spec
    };
    let (a, b) = (spec("a", "b"), spec("b", "a"));
    let (seen_a, seen_b) = std::thread::scope(|s| {
        let ta = s.spawn(|| run_spec(&a));
        let tb = s.spawn(|| run_spec(&b));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    // Both bombs held their children at the same moment, and each still got its own five.
    for (seen, check) in [
        (&seen_a, "forkbomb:/tmp/scratch/a,/tmp/scratch/b"),
        (&seen_b, "forkbomb:/tmp/scratch/b,/tmp/scratch/a"),
    ] {
        seen.expect(check, "EAGAIN");
        assert_eq!(seen.get(check)["forked"], 5, "{}", seen.get(check));
        assert_eq!(seen.get(check)["synced"], true, "{}", seen.get(check));
    }
}

/// Host pids of processes whose command line contains `token`.
fn processes_with(token: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(token) {
                pids.push(pid);
            }
        }
    }
    pids
}

#[test]
fn a_setsid_double_forked_daemon_is_gone_when_the_sandbox_returns() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let token = format!("cyberos-daemon-{}", rand_suffix());
    let seen = probe(&world, &[&format!("daemon:{token}"), "exit:7"]);
    seen.expect(&format!("daemon:{token}"), "ok");
    assert_eq!(seen.exit, Exit::Code(7));
    assert_eq!(
        processes_with(&token),
        Vec::<u32>::new(),
        "the daemon outlived the sandbox"
    );
}

#[test]
fn the_programs_exit_code_and_signal_come_back() {
    if !root_only() {
        return;
    }
    let world = World::new();
    assert_eq!(probe(&world, &["exit:3"]).exit, Exit::Code(3));
    assert_eq!(
        probe(&world, &["signal:SIGSEGV"]).exit,
        Exit::Signal(libc::SIGSEGV)
    );
    assert_eq!(
        probe(&world, &["signal:SIGTERM"]).exit,
        Exit::Signal(libc::SIGTERM)
    );
}

#[test]
fn run_command_kills_the_sandbox_at_the_timeout_and_caps_output() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let token = format!("cyberos-timeout-{}", rand_suffix());
    let spec = probe_spec(&world, &[&format!("daemon:{token}"), "hang"]);
    let out = sandbox::run_command_with_binary(
        Path::new(BIN),
        &spec,
        b"",
        Duration::from_millis(1500),
        1 << 20,
    )
    .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.exit, Exit::Signal(libc::SIGKILL));
    assert!(
        out.duration >= Duration::from_millis(1500) && out.duration < Duration::from_secs(10),
        "{:?}",
        out.duration
    );
    assert_eq!(
        processes_with(&token),
        Vec::<u32>::new(),
        "a process outlived the timeout"
    );

    let spec = Spec::new(
        "/bin/sh",
        vec![
            "-c".into(),
            "head -c 100000 /dev/zero; head -c 10 /dev/zero >&2; cat".into(),
        ],
    );
    let out = sandbox::run_command_with_binary(
        Path::new(BIN),
        &spec,
        b"from stdin",
        Duration::from_secs(30),
        4096,
    )
    .unwrap();
    assert_eq!(out.exit, Exit::Code(0));
    assert!(out.truncated && !out.timed_out);
    assert_eq!(out.stdout.len(), 4096);
    assert_eq!(out.stderr.len(), 10);
}

#[test]
fn contains_peer_knows_the_sandbox_pid_namespace() {
    if !root_only() {
        return;
    }
    let world = World::new();
    let token = format!("cyberos-peer-{}", rand_suffix());
    let mut spec = probe_spec(&world, &["hang", &token]);
    spec.limits.cpu_seconds = 30;
    let mut sb =
        sandbox::spawn_with_binary(Path::new(BIN), &spec, sandbox::Stdio3::default()).unwrap();
    sb.start().unwrap();
    let pid = util::wait_for(Duration::from_secs(10), || {
        processes_with(&token).first().copied()
    })
    .expect("probe running");
    assert!(sb.contains_peer(pid as i32));
    assert!(!sb.contains_peer(std::process::id() as i32));
    assert!(
        !sb.contains_peer(sb.pid()),
        "the supervisor is outside the sandbox's pid namespace"
    );
    sb.terminate();
    let exit = sb.wait().unwrap();
    assert_eq!(exit, Exit::Signal(libc::SIGTERM));
    assert_eq!(processes_with(&token), Vec::<u32>::new());
}
