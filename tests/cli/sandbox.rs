//! The sandbox seen from inside: a probe skill tries each forbidden thing and reports what it saw.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cyberos::sandbox::{self, Exit};
use serde_json::Value;

use crate::util::{self, World};

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

#[test]
fn switched_off_layers_are_reported_unavailable_with_the_reason() {
    let world = World::new();
    for unprivileged in [false, true] {
        let mut cmd = world.cmd(["sandbox", "check", "--json"]);
        cmd.env(sandbox::DISABLE_VAR, "user_ns,landlock");
        let out = if unprivileged {
            cmd.unprivileged().success()
        } else {
            cmd.success()
        };
        let json = out.json();
        assert_eq!(json["complete"], false, "{}", out.report());
        for layer in ["user_ns", "landlock"] {
            assert_eq!(
                json["layers"][layer]["status"],
                "unavailable",
                "{}",
                out.report()
            );
            assert_eq!(
                json["layers"][layer]["reason"],
                "disabled by CYBEROS_SANDBOX_DISABLE",
                "{}",
                out.report()
            );
        }
        assert_eq!(
            json["layers"]["seccomp"]["status"],
            "applied",
            "{}",
            out.report()
        );
        // Without its own user namespace the process count would be shared by the whole uid.
        assert_eq!(
            json["layers"]["limits"]["status"],
            "degraded",
            "{}",
            out.report()
        );
        let reason = json["layers"]["limits"]["reason"]
            .as_str()
            .unwrap_or_default();
        assert!(reason.contains("RLIMIT_NPROC"), "{}", out.report());
        // A root broker still gets every other namespace (created as root); an unprivileged one
        // cannot create any without a user namespace, and says so.
        let pid_ns = &json["layers"]["pid_ns"]["status"];
        assert_eq!(
            pid_ns,
            if unprivileged {
                "unavailable"
            } else {
                "applied"
            },
            "{}",
            out.report()
        );
    }
    let mut cmd = world.cmd(["sandbox", "check"]);
    let out = cmd.env(sandbox::DISABLE_VAR, "user_ns,bogus").code(2);
    out.assert_stderr_contains("\"bogus\"");
}

// ---------------------------------------------------------------------------------------------
// The probe skill, run through `cyberos skill invoke` by a root broker and by an unprivileged one.

pub(crate) const PROBE_SKILL: &str = include_str!("../fixtures/sandbox-probe/SKILL.md");
pub(crate) const PROBE_MAIN: &str = include_str!("../fixtures/sandbox-probe/main");

/// Both brokers every acceptance test runs under: root, and uid 65534 through `setpriv`.
const BROKERS: [Broker; 2] = [Broker::Root, Broker::Unprivileged];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Broker {
    Root,
    Unprivileged,
}

/// What the probe printed (one JSON object per check, by check name) and how invoke ended.
pub(crate) struct Seen {
    pub(crate) exit: Exit,
    checks: BTreeMap<String, Value>,
    /// `invoke --json`'s summary line (absent when the probe ran through the library).
    summary: Value,
    report: String,
}

impl Seen {
    pub(crate) fn get(&self, check: &str) -> &Value {
        self.checks
            .get(check)
            .unwrap_or_else(|| panic!("probe did not report {check}\n{}", self.report))
    }

    /// Asserts the check's `result`: an errno name, "ok", or an observation.
    pub(crate) fn expect(&self, check: &str, result: &str) -> &Self {
        assert_eq!(
            self.get(check)["result"],
            result,
            "{check}: {}\n{}",
            self.get(check),
            self.report
        );
        self
    }
}

pub(crate) fn parse(stdout: &str, exit: Exit, report: String) -> Seen {
    let mut checks = BTreeMap::new();
    let mut summary = Value::Null;
    for line in stdout.lines() {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match value["check"].as_str() {
            Some(check) => {
                checks.insert(check.to_string(), value);
            }
            None => summary = value,
        }
    }
    Seen {
        exit,
        checks,
        summary,
        report,
    }
}

pub(crate) fn rand_suffix() -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `cyberos skill invoke <probe> --json [EXTRA] -- CHECKS` as `broker`, with a home that broker can
/// write. Returns the command, ready to run or spawn.
fn probe_cmd(world: &World, broker: Broker, extra: &[&str], checks: &[&str]) -> util::Cmd {
    let bundle = world.bundle("probe", PROBE_SKILL, PROBE_MAIN);
    let home = world.path().join(format!("home-{broker:?}"));
    std::fs::create_dir_all(&home).unwrap();
    util::set_mode(&home, 0o777);
    let mut cmd = world.cmd(["skill", "invoke"]);
    cmd.arg(&bundle)
        .arg("--json")
        .args(extra)
        .arg("--")
        .args(checks);
    cmd.env("CYBEROS_HOME", &home);
    match broker {
        Broker::Root => cmd,
        Broker::Unprivileged => cmd.unprivileged(),
    }
}

fn exit_of(out: &util::Out) -> Exit {
    use std::os::unix::process::ExitStatusExt as _;
    match (out.output.status.code(), out.output.status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => unreachable!("a process ends with a code or a signal"),
    }
}

fn invoke_probe(world: &World, broker: Broker, checks: &[&str]) -> Seen {
    let out = probe_cmd(world, broker, &[], checks).output();
    parse(&out.stdout(), exit_of(&out), out.report())
}

/// Host pids of processes whose command line contains `token`.
pub(crate) fn processes_with(token: &str) -> Vec<u32> {
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
fn the_skill_cannot_read_host_secrets() {
    for broker in BROKERS {
        let world = World::new();
        let home = world.path().join(format!("home-{broker:?}"));
        std::fs::create_dir_all(home.join("memory/memories")).unwrap();
        std::fs::write(home.join("memory/memories/a.md"), "secret").unwrap();
        let journal = format!("read:{}", home.join("journal.db").display());
        let memory = format!("read:{}", home.join("memory/memories/a.md").display());
        let memory_root = format!("list:{}", home.join("memory").display());
        // The invoking user's home, and a host process's environment (this test's own).
        let user_home = format!(
            "list:{}",
            std::env::var("HOME").unwrap_or_else(|_| "/root".into())
        );
        let host_environ = format!("read:/proc/{}/environ", std::process::id());
        let seen = invoke_probe(
            &world,
            broker,
            &[
                "read:/etc/shadow",
                &journal,
                &memory,
                &memory_root,
                &user_home,
                "list:/root",
                &host_environ,
                "read:/proc/1/environ",
                "pids",
                "read:/etc/passwd",
            ],
        );
        seen.expect("read:/etc/shadow", "ENOENT")
            .expect(&journal, "ENOENT")
            .expect(&memory, "ENOENT")
            .expect(&memory_root, "ENOENT")
            .expect(&user_home, "ENOENT")
            .expect("list:/root", "ENOENT")
            // No host pid exists in the sandbox's pid namespace; its pid 1 (the init) is not
            // dumpable, so not even its environment can be read.
            .expect(&host_environ, "ENOENT")
            .expect("read:/proc/1/environ", "EACCES")
            .expect("read:/etc/passwd", "ok");
        // The only processes the skill can see are the init and itself: never the broker.
        let pids = &seen.get("pids")["pids"];
        assert_eq!(
            pids,
            &serde_json::json!([1, 2]),
            "{broker:?}: {}",
            seen.report
        );
    }
}

#[test]
fn the_skill_can_write_only_its_scratch_directory() {
    for broker in BROKERS {
        let world = World::new();
        let bundle_file = format!("write:{}", world.path().join("probe/x").display());
        let seen = invoke_probe(
            &world,
            broker,
            &[
                "write:/tmp/scratch/x",
                "write:/tmp/x",
                "write:/usr/x",
                "write:/x",
                &bundle_file,
                "write:/dev/x",
                "write:/opt/cyberos/bin/x",
                "write:/dev/null",
            ],
        );
        seen.expect("write:/tmp/scratch/x", "ok")
            .expect("write:/tmp/x", "EROFS")
            .expect("write:/usr/x", "EROFS")
            .expect("write:/x", "EROFS")
            .expect(&bundle_file, "EROFS")
            .expect("write:/dev/x", "EROFS")
            .expect("write:/opt/cyberos/bin/x", "EROFS")
            .expect("write:/dev/null", "ok");
    }
}

#[test]
fn the_skill_has_no_network() {
    for broker in BROKERS {
        let world = World::new();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let tcp_local = format!("tcp:127.0.0.1:{port}");
        let udp_local = format!("udp:127.0.0.1:{}", udp.local_addr().unwrap().port());
        let checks = [
            tcp_local.as_str(),
            udp_local.as_str(),
            "tcp:192.0.2.1:80",
            "udp:192.0.2.1:53",
            "tcp6:[::1]:22",
            "netlink",
        ];
        let seen = invoke_probe(&world, broker, &checks);
        // socket() itself is refused for every family but AF_UNIX.
        for check in checks {
            seen.expect(check, "EPERM");
        }
        assert_eq!(
            listener.accept().unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
        assert_eq!(
            udp.recv(&mut [0u8; 16]).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
    }
}

#[test]
fn the_skill_reaches_no_unix_socket_but_its_own_broker() {
    use std::os::linux::net::SocketAddrExt as _;
    for broker in BROKERS {
        let world = World::new();
        let name = format!("cyberos-test-{}", rand_suffix());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let _abstract = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        let path = world.path().join("host.sock");
        let _path = std::os::unix::net::UnixListener::bind(&path).unwrap();
        util::set_mode(&path, 0o777);
        let abstract_check = format!("abstract:{name}");
        let path_check = format!("unix:{}", path.display());
        let seen = invoke_probe(
            &world,
            broker,
            &[
                &abstract_check,
                &path_check,
                "unix:/run/systemd/private",
                "unix:",
            ],
        );
        // Its own network namespace has its own abstract socket namespace.
        seen.expect(&abstract_check, "ECONNREFUSED")
            .expect(&path_check, "ENOENT")
            .expect("unix:/run/systemd/private", "ENOENT")
            // `unix:` alone connects to $CYBEROS_BROKER_SOCKET.
            .expect("unix:", "ok");
    }
}

#[test]
fn another_concurrent_invocations_socket_is_unreachable() {
    for broker in BROKERS {
        let world = World::new();
        let id = uuid::Uuid::new_v4().to_string();
        let other = format!("/tmp/cyberos-skill-broker.{id}.sock");
        let mut first = probe_cmd(&world, broker, &["--invocation-id", &id], &["hang"]).spawn();
        util::wait_for(Duration::from_secs(10), || {
            Path::new(&other).exists().then_some(())
        })
        .expect("the first invocation's socket");
        let check = format!("unix:{other}");
        let seen = invoke_probe(&world, broker, &[&check]);
        // SAFETY: plain kill(2) of the invoke this test spawned.
        unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
        first.wait().unwrap();
        seen.expect(&check, "ENOENT");
    }
}

#[test]
fn dangerous_system_calls_fail_with_the_documented_errno() {
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
    for broker in BROKERS {
        let world = World::new();
        let mut checks = eperm.to_vec();
        checks.extend(["clone3", "i386"]);
        let seen = invoke_probe(&world, broker, &checks);
        for check in eperm {
            seen.expect(check, "EPERM");
        }
        // clone3 says ENOSYS so that libc falls back to clone; the i386 ABI is killed outright.
        seen.expect("clone3", "ENOSYS")
            .expect("i386", "killed:SIGSYS");
    }
}

#[test]
fn the_skill_runs_without_privileges_in_its_own_namespaces() {
    for broker in BROKERS {
        let world = World::new();
        let seen = invoke_probe(&world, broker, &["status", "cwd", "hostname", "tty"]);
        let status = seen.expect("status", "ok").get("status").clone();
        let ctx = format!("{broker:?}: {}", seen.report);
        assert_eq!(status["NoNewPrivs"], serde_json::json!(["1"]), "{ctx}");
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(
                status[set],
                serde_json::json!(["0000000000000000"]),
                "{set}: {ctx}"
            );
        }
        // uid/gid 65534 inside, the only id mapped, and 65534 outside too: never 0 anywhere.
        let nobody = serde_json::json!(["65534", "65534", "65534", "65534"]);
        assert_eq!(status["Uid"], nobody, "{ctx}");
        assert_eq!(status["Gid"], nobody, "{ctx}");
        assert_eq!(
            status["uid_map"],
            serde_json::json!(["65534", "65534", "1"]),
            "{ctx}"
        );
        assert_eq!(
            status["gid_map"],
            serde_json::json!(["65534", "65534", "1"]),
            "{ctx}"
        );
        assert_eq!(status["Groups"], serde_json::json!([]), "{ctx}");
        assert_eq!(status["Seccomp"], serde_json::json!(["2"]), "{ctx}");
        // Not pid 1 (the init is); its own session, without a terminal.
        assert_eq!(status["pid"], 2, "{ctx}");
        assert_eq!(status["ppid"], 1, "{ctx}");
        assert_eq!(status["sid"], status["pid"], "{ctx}");
        seen.expect("tty", "ENOENT");
        assert_eq!(seen.get("cwd")["cwd"], "/tmp/scratch", "{ctx}");
        assert_eq!(seen.get("hostname")["hostname"], "cyberos", "{ctx}");
        // What invoke --json reports is what the kernel enforced.
        let sandbox = &seen.summary["sandbox"];
        if landlock_abi() >= 6 && user_ns_works() {
            for layer in LAYERS {
                assert_eq!(sandbox[layer]["status"], "applied", "{layer}: {ctx}");
            }
        } else {
            eprintln!("skipped: not every layer is available on this kernel");
        }
    }
}

#[test]
fn the_skill_sees_only_the_minimal_mount_view() {
    let absent = [
        "/run",
        "/root",
        "/home",
        "/var",
        "/sys",
        "/boot",
        "/etc/shadow",
        "/etc/hostname",
        "/etc/resolv.conf",
        "/dev/tty",
        "/dev/pts",
        "/dev/shm",
        "/dev/sda",
    ];
    let present = [
        "/usr/bin/python3",
        "/bin/sh",
        "/etc/passwd",
        "/etc/ld.so.cache",
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/proc/self/status",
        "/opt/cyberos/bin/cyberos",
        "/tmp/scratch",
    ];
    for broker in BROKERS {
        let world = World::new();
        let bundle = world.path().join("probe");
        let mut checks: Vec<String> = absent
            .iter()
            .chain(&present)
            .map(|p| format!("exists:{p}"))
            .collect();
        checks.push(format!("exists:{}", bundle.join("main").display()));
        // Beside the bundle in the host's directory: not in the view.
        checks.push(format!(
            "exists:{}",
            world.path().join(format!("home-{broker:?}")).display()
        ));
        let refs: Vec<&str> = checks.iter().map(String::as_str).collect();
        let seen = invoke_probe(&world, broker, &refs);
        for path in absent {
            seen.expect(&format!("exists:{path}"), "ENOENT");
        }
        for path in present {
            seen.expect(&format!("exists:{path}"), "ok");
        }
        seen.expect(&checks[checks.len() - 2], "ok");
        seen.expect(&checks[checks.len() - 1], "ENOENT");
    }
}

#[test]
fn limits_are_set_and_a_fork_bomb_stops_at_eight_processes() {
    for broker in BROKERS {
        let world = World::new();
        let out = probe_cmd(
            &world,
            broker,
            &["--timeout", "42s"],
            &["rlimits", "forkbomb"],
        )
        .output();
        let seen = parse(&out.stdout(), exit_of(&out), out.report());
        let limits = seen.expect("rlimits", "ok").get("rlimits").clone();
        assert_eq!(
            limits["RLIMIT_AS"],
            serde_json::json!([536870912, 536870912])
        );
        assert_eq!(limits["RLIMIT_CPU"], serde_json::json!([42, 42]));
        assert_eq!(limits["RLIMIT_NPROC"], serde_json::json!([8, 8]));
        assert_eq!(limits["RLIMIT_CORE"], serde_json::json!([0, 0]));
        // Eight processes in all: the supervisor, the init, the probe and five children.
        seen.expect("forkbomb", "EAGAIN");
        assert_eq!(seen.get("forkbomb")["forked"], 5, "{}", seen.report);
    }
}

#[test]
fn a_setsid_double_forked_daemon_is_gone_when_invoke_returns() {
    for broker in BROKERS {
        let world = World::new();
        let token = format!("cyberos-daemon-{}", rand_suffix());
        let daemon = format!("daemon:{token}");
        let seen = invoke_probe(&world, broker, &[&daemon, "exit:7"]);
        seen.expect(&daemon, "ok");
        assert_eq!(seen.exit, Exit::Code(7), "{}", seen.report);
        assert_eq!(
            processes_with(&token),
            Vec::<u32>::new(),
            "the daemon outlived invoke"
        );
    }
}

#[test]
fn sigkill_of_the_broker_takes_the_whole_sandbox_with_it() {
    for broker in BROKERS {
        let world = World::new();
        let token = format!("cyberos-orphan-{}", rand_suffix());
        let mut invoke =
            probe_cmd(&world, broker, &[], &[&format!("daemon:{token}"), "hang"]).spawn();
        // The daemon and the probe (whose argv holds the token too) are running.
        util::wait_for(Duration::from_secs(10), || {
            (processes_with(&token).len() >= 2).then_some(())
        })
        .expect("the sandbox's processes");
        // SAFETY: plain kill(2) of the invoke this test spawned (setpriv execs cyberos in place).
        unsafe { libc::kill(invoke.id() as i32, libc::SIGKILL) };
        invoke.wait().unwrap();
        let gone = util::wait_for(Duration::from_secs(10), || {
            processes_with(&token).is_empty().then_some(())
        });
        assert!(
            gone.is_some(),
            "{broker:?}: sandbox processes outlived the broker: {:?}",
            processes_with(&token)
        );
    }
}

#[test]
fn a_switched_off_layer_is_a_warning_in_best_effort_and_refused_in_strict_mode() {
    for broker in BROKERS {
        let world = World::new();
        let mut cmd = probe_cmd(&world, broker, &["--sandbox", "strict"], &["exit:0"]);
        cmd.env(sandbox::DISABLE_VAR, "landlock");
        let out = cmd.code(125);
        assert!(
            !out.stdout().contains("\"check\""),
            "the skill ran: {}",
            out.report()
        );
        out.assert_stderr_contains("landlock");

        let mut cmd = probe_cmd(&world, broker, &[], &["write:/tmp/scratch/x"]);
        cmd.env(sandbox::DISABLE_VAR, "landlock");
        let out = cmd.success();
        let seen = parse(&out.stdout(), exit_of(&out), out.report());
        seen.expect("write:/tmp/scratch/x", "ok");
        assert_eq!(
            seen.summary["sandbox"]["landlock"]["status"],
            "unavailable",
            "{}",
            out.report()
        );
        assert_eq!(
            out.stderr().matches("landlock").count(),
            1,
            "one warning for the missing layer: {}",
            out.report()
        );
    }
}

#[test]
fn without_a_user_namespace_an_unprivileged_broker_still_confines_the_skill() {
    // No namespaces at all: the skill sees the host's file system, and only Landlock, seccomp,
    // the limits and the init's subreaper duty stand between it and the world.
    let world = World::new();
    let token = format!("cyberos-nons-{}", rand_suffix());
    let daemon = format!("daemon:{token}");
    let outside = format!("write:{}", world.path().join("outside").display());
    let mut cmd = probe_cmd(
        &world,
        Broker::Unprivileged,
        &[],
        &[
            "read:/etc/shadow",
            "list:/proc/1",
            &outside,
            "tcp:127.0.0.1:9",
            "ptrace",
            "cwd",
            &daemon,
        ],
    );
    cmd.env(sandbox::DISABLE_VAR, "user_ns");
    let out = cmd.success();
    let seen = parse(&out.stdout(), exit_of(&out), out.report());
    seen.expect("read:/etc/shadow", "EACCES")
        .expect("list:/proc/1", "EACCES")
        .expect(&outside, "EACCES")
        .expect("tcp:127.0.0.1:9", "EPERM")
        .expect("ptrace", "EPERM")
        .expect(&daemon, "ok");
    // The scratch directory's host path stands in for /tmp/scratch.
    let cwd = seen.get("cwd")["cwd"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        cwd.starts_with("/tmp/cyberos-") && cwd != "/tmp/scratch",
        "{}",
        out.report()
    );
    assert_eq!(
        processes_with(&token),
        Vec::<u32>::new(),
        "the daemon outlived invoke"
    );
    let sandbox = &seen.summary["sandbox"];
    for layer in [
        "user_ns", "pid_ns", "net_ns", "mount_ns", "ipc_ns", "uts_ns",
    ] {
        assert_eq!(
            sandbox[layer]["status"],
            "unavailable",
            "{layer}: {}",
            out.report()
        );
    }
    assert_eq!(
        sandbox["lifetime"]["status"],
        "degraded",
        "{}",
        out.report()
    );
    assert_eq!(sandbox["limits"]["status"], "degraded", "{}", out.report());
}
