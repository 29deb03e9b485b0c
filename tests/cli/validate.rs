//! `cyberos skill validate`: every fixture's exact field and code, exit codes, JSON and human
//! output, defaults, hostile input.

use std::time::Duration;

use serde_json::json;

use crate::fixtures::{self, FIXTURES};
use crate::util::{self, World};

/// A hang guard with slack for a loaded machine; the in-process unit tests hold the 1 s bound.
const HOSTILE_BOUND: Duration = Duration::from_secs(3);

#[test]
fn every_fixture_reports_exactly_its_field_and_code() {
    let world = World::new();
    for (name, expected) in FIXTURES {
        let path = fixtures::path(name);
        let out = world
            .cmd(["skill", "validate", "--json"])
            .arg(&path)
            .output();
        let report = out.json();
        match expected {
            None => {
                assert_eq!(out.code(), Some(0), "{name}\n{}", out.report());
                assert_eq!(report["status"], "ok", "{name}");
            }
            Some((field, code)) => {
                assert_eq!(out.code(), Some(6), "{name}\n{}", out.report());
                assert_eq!(report["status"], "invalid", "{name}");
                let errors = report["errors"].as_array().expect("errors");
                let got: Vec<(String, String)> = errors
                    .iter()
                    .map(|e| {
                        (
                            e["field"].as_str().unwrap().to_owned(),
                            e["code"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect();
                assert_eq!(
                    got,
                    vec![(field.to_string(), code.to_string())],
                    "{name}\n{}",
                    out.report()
                );
                assert!(!errors[0]["message"].as_str().unwrap().is_empty(), "{name}");
            }
        }
    }
}

#[test]
fn there_are_enough_fixtures_and_all_are_listed() {
    let on_disk = std::fs::read_dir(fixtures::dir()).unwrap().count();
    assert_eq!(
        on_disk,
        FIXTURES.len() + fixtures::MULTI_ERROR_FIXTURES.len(),
        "a fixture directory is missing from FIXTURES (or vice versa)"
    );
    assert!(FIXTURES.len() >= 25);
}

#[test]
fn valid_json_reports_the_manifest_with_defaults() {
    let world = World::new();
    let out = world
        .cmd(["skill", "validate", "--json"])
        .arg(fixtures::path("valid-minimal"))
        .success();
    let r = out.json();
    assert_eq!(r["status"], "ok");
    assert_eq!(r["id"], "demo");
    assert_eq!(r["version"], "1.2.3");
    assert_eq!(r["effort_minutes"], 30);
    assert_eq!(r["sync_class"], "private");
    assert_eq!(r["tenant_scope"], "any");
    assert_eq!(r["disallowed_tools"], json!([]));
    assert_eq!(r["tags"], json!([]));
    assert_eq!(r["signed"], false);

    let full = world
        .cmd(["skill", "validate", "--json"])
        .arg(fixtures::path("valid-full"))
        .success()
        .json();
    assert_eq!(full["effort_minutes"], 5);
    assert_eq!(full["sync_class"], "shareable");
    assert_eq!(full["tenant_scope"], "pinned");
    assert_eq!(full["disallowed_tools"], json!(["Bash"]));
    assert_eq!(
        full["x-owner"],
        json!({"team": "platform", "on_call": true})
    );
    assert_eq!(
        full["x-allowed-domains"],
        json!(["api.example.com", "*.example.org", "10.0.0.1"])
    );
}

#[test]
fn x_fields_are_kept_as_written() {
    let world = World::new();
    let r = world
        .cmd(["skill", "validate", "--json"])
        .arg(fixtures::path("x-field-kept"))
        .success()
        .json();
    assert_eq!(r["x-review"], json!({"by": "alice", "ticket": 42}));
}

#[test]
fn yaml_12_words_stay_strings() {
    let world = World::new();
    let r = world
        .cmd(["skill", "validate", "--json"])
        .arg(fixtures::path("valid-yaml12-strings"))
        .success()
        .json();
    assert_eq!(r["description"], "yes");
    assert_eq!(r["tags"], json!(["yes", "no", "on", "off"]));
}

#[test]
fn all_errors_are_reported_at_once() {
    let world = World::new();
    let out = world
        .cmd(["skill", "validate", "--json"])
        .arg(fixtures::path("multiple-errors"))
        .code(6);
    let mut got: Vec<(String, String)> = out.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["field"].as_str().unwrap().to_owned(),
                e["code"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, String)> = [
        ("allowed_memory_scopes", "missing"),
        ("allowed_tools[1]", "unknown_tool"),
        ("description", "length"),
        ("extra", "unknown_field"),
        ("id", "pattern"),
        ("version", "semver"),
    ]
    .iter()
    .map(|(f, c)| (f.to_string(), c.to_string()))
    .collect();
    want.sort();
    assert_eq!(got, want, "{}", out.report());
}

#[test]
fn human_output_names_the_fields() {
    let world = World::new();
    let ok = world
        .cmd(["skill", "validate"])
        .arg(fixtures::path("valid-minimal"))
        .success();
    ok.assert_stdout_contains("ok: demo 1.2.3");
    let bad = world
        .cmd(["skill", "validate"])
        .arg(fixtures::path("unknown-tool"))
        .code(6);
    assert!(bad.stdout().is_empty(), "{}", bad.report());
    bad.assert_stderr_contains("cyberos: ");
    bad.assert_stderr_contains("allowed_tools[2]: unknown tool \"Teleport\"");
    bad.assert_stderr_contains("[unknown_tool]");
}

#[test]
fn exit_codes_for_missing_and_unreadable_files() {
    let world = World::new();
    let out = world
        .cmd(["skill", "validate"])
        .arg(world.path().join("nope"))
        .code(1);
    out.assert_stderr_contains("cyberos: failed to find");
    std::fs::create_dir(world.path().join("empty")).unwrap();
    world
        .cmd(["skill", "validate", "--json"])
        .arg(world.path().join("empty"))
        .code(1)
        .assert_stderr_contains("SKILL.md");
    // A FIFO named SKILL.md must not block the read.
    let fifo = world.path().join("fifo");
    std::fs::create_dir(&fifo).unwrap();
    let c = std::ffi::CString::new(fifo.join("SKILL.md").to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let out = world.cmd(["skill", "validate"]).arg(&fifo).code(1);
    out.assert_stderr_contains("not a regular file");
    assert!(out.elapsed < HOSTILE_BOUND);
}

#[test]
fn a_file_path_works_as_well_as_a_bundle_directory() {
    let world = World::new();
    world
        .cmd(["skill", "validate"])
        .arg(fixtures::path("valid-minimal").join("SKILL.md"))
        .success();
}

#[test]
fn unreadable_skill_md_is_an_io_error_for_an_unprivileged_user() {
    if !util::is_root() {
        eprintln!("skipped: needs root to run validate as another uid");
        return;
    }
    let world = World::new();
    let dir = world.bundle("locked", &util::skill_md("locked", &[], ""), "#!/bin/sh\n");
    util::set_mode(&dir.join("SKILL.md"), 0o600);
    let mut cmd = world.cmd(["skill", "validate"]);
    cmd.arg(&dir);
    let out = cmd.unprivileged().code(1);
    out.assert_stderr_contains("Permission denied");
    util::set_mode(&dir.join("SKILL.md"), 0o644);
    let mut cmd = world.cmd(["skill", "validate"]);
    cmd.arg(&dir);
    cmd.unprivileged().success();
}

#[test]
fn broker_version_override() {
    let world = World::new();
    let path = fixtures::path("broker-too-old");
    world
        .cmd(["skill", "validate", "--broker-version", "99.0.0"])
        .arg(&path)
        .success();
    world
        .cmd(["skill", "validate", "--broker-version", "98.9.9"])
        .arg(&path)
        .code(6);
    let newer = fixtures::path("broker-too-new");
    world
        .cmd(["skill", "validate", "--broker-version", "0.0.1"])
        .arg(&newer)
        .success();
    world
        .cmd(["skill", "validate", "--broker-version", "0.0.2"])
        .arg(&newer)
        .code(6);
    // Without the flag, the binary's own version is used.
    let version = env!("CARGO_PKG_VERSION");
    let exact = world.bundle(
        "exact",
        &util::skill_md(
            "exact",
            &[],
            &format!("min_broker_version: {version}\nmax_broker_version: {version}\n"),
        ),
        "#!/bin/sh\n",
    );
    world.cmd(["skill", "validate"]).arg(&exact).success();
    world
        .cmd(["skill", "validate", "--broker-version", "nope"])
        .arg(&exact)
        .code(2);
}

#[test]
fn hostile_input_is_refused_quickly() {
    let world = World::new();
    for name in [
        "alias-bomb",
        "deep-nesting",
        "deep-block-nesting",
        "duplicate-keys",
    ] {
        let out = world
            .cmd(["skill", "validate"])
            .arg(fixtures::path(name))
            .code(6);
        assert!(out.elapsed < HOSTILE_BOUND, "{name}\n{}", out.report());
        out.assert_stderr_contains("[yaml]");
        assert!(!out.stderr().contains("panicked"), "{}", out.report());
    }
    // 10 MB: valid frontmatter, then an endless body.
    let mut big = util::skill_md("big", &[], "").into_bytes();
    big.resize(10 * 1024 * 1024, b'a');
    let dir = world.bundle("big", "", "#!/bin/sh\n");
    std::fs::write(dir.join("SKILL.md"), &big).unwrap();
    let out = world.cmd(["skill", "validate", "--json"]).arg(&dir).code(6);
    assert!(out.elapsed < HOSTILE_BOUND, "{}", out.report());
    assert_eq!(out.json()["errors"][0]["code"], "too_large");
    // 10 MB inside the frontmatter.
    let mut big = b"---\nid: big\nx-pad: ".to_vec();
    big.resize(10 * 1024 * 1024, b'a');
    std::fs::write(dir.join("SKILL.md"), &big).unwrap();
    let out = world.cmd(["skill", "validate", "--json"]).arg(&dir).code(6);
    assert!(out.elapsed < HOSTILE_BOUND, "{}", out.report());
    assert_eq!(out.json()["errors"][0]["code"], "too_large");
    // Invalid UTF-8 is a validation error too.
    let out = world
        .cmd(["skill", "validate"])
        .arg(fixtures::path("invalid-utf8"))
        .code(6);
    out.assert_stderr_contains("UTF-8");
}

#[test]
fn fences_tolerate_crlf_trailing_blanks_and_dashes_in_the_body() {
    let world = World::new();
    let text = "---\t\r\nid: fenced\r\nversion: 1.0.0\r\ndescription: d\r\nallowed_memory_scopes: []\r\nallowed_tools: []\r\n---   \r\nbody\r\n---\r\nmore body\r\n---\r\n";
    let dir = world.bundle("fenced", text, "#!/bin/sh\n");
    let r = world
        .cmd(["skill", "validate", "--json"])
        .arg(&dir)
        .success()
        .json();
    assert_eq!(r["id"], "fenced");
    // A fence with other text on its line is not a fence.
    let dir = world.bundle("notfence", "---\nid: a\n--- x\nbody\n", "#!/bin/sh\n");
    let r = world
        .cmd(["skill", "validate", "--json"])
        .arg(&dir)
        .code(6)
        .json();
    assert_eq!(r["errors"][0]["code"], "fence");
}

#[test]
fn description_bounds_are_inclusive() {
    let world = World::new();
    for (len, ok) in [(1, true), (200, true), (201, false)] {
        let md = util::skill_md("d", &[], "").replace(
            "description: test skill d",
            &format!("description: {}", "é".repeat(len)),
        );
        let dir = world.bundle(&format!("d{len}"), &md, "#!/bin/sh\n");
        world
            .cmd(["skill", "validate"])
            .arg(&dir)
            .code(if ok { 0 } else { 6 });
    }
}

#[test]
fn tag_and_effort_bounds() {
    let world = World::new();
    let cases = [
        ("tags: [a, b, c, d, e, f, g, h, i, j]\n", 0),
        (&*format!("tags: [{}]\n", "t".repeat(30)), 0),
        ("effort_minutes: 1\n", 0),
        ("effort_minutes: 4294967296\n", 6),
        ("effort_minutes: -1\n", 6),
        ("effort_minutes: 1.5\n", 6),
        ("disallowed_tools: Bash\n", 6),
        ("tenant_scope: 1\n", 6),
    ];
    for (i, (extra, code)) in cases.iter().enumerate() {
        let dir = world.bundle(
            &format!("b{i}"),
            &util::skill_md("b", &[], extra),
            "#!/bin/sh\n",
        );
        world.cmd(["skill", "validate"]).arg(&dir).code(*code);
    }
}
