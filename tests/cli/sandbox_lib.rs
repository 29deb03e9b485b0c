//! The sandbox library itself, as the Bash tool uses it: `run_command` and `spawn` with the real
//! binary as supervisor, driven from this (root) test process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cyberos::sandbox::{self, Exit, Spec};

use crate::sandbox::{PROBE_MAIN, PROBE_SKILL, Seen, parse, processes_with, rand_suffix};
use crate::util::{self, BIN, World};

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
        ("PATH".into(), sandbox::INSIDE_PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    spec
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
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    parse(&String::from_utf8_lossy(&out.stdout), out.exit, stderr)
}

/// The library tests spawn sandboxes from the test process itself, which runs as root in CI.
fn root_only() -> bool {
    if !util::is_root() {
        eprintln!("skipped: the library-driven sandbox tests need a root test process");
        return false;
    }
    true
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

#[test]
fn the_program_starts_with_default_signal_dispositions() {
    if !root_only() {
        return;
    }
    // The Rust runtime ignores SIGPIPE, and an ignored signal stays ignored across execve: the
    // program must not inherit that (nor a blocked mask) from the supervisor and init.
    let spec = Spec::new(
        "/bin/grep",
        vec![
            "-E".into(),
            "^Sig(Ign|Blk)".into(),
            "/proc/self/status".into(),
        ],
    );
    let out =
        sandbox::run_command_with_binary(Path::new(BIN), &spec, b"", Duration::from_secs(30), 4096)
            .unwrap();
    assert_eq!(
        out.exit,
        Exit::Code(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
}
