//! `cyberos skill scaffold`: a starter bundle that validates, with an executable `main`, and
//! never overwrites anything.

use crate::util::World;

#[test]
fn scaffold_creates_a_bundle_that_validates() {
    use std::os::unix::fs::PermissionsExt as _;
    let world = World::new();
    world
        .cmd(["skill", "scaffold", "note-taker", "--dir"])
        .arg(world.path())
        .success();
    let dir = world.path().join("note-taker");
    let r = world
        .cmd(["skill", "validate", "--json"])
        .arg(&dir)
        .success()
        .json();
    assert_eq!(r["id"], "note-taker");
    assert_eq!(r["allowed_memory_scopes"][0], "memories/note-taker/**");
    let skill_md = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    assert!(
        skill_md.lines().filter(|l| l.starts_with('#')).count() >= 5,
        "the starter is commented"
    );
    let main = std::fs::read_to_string(dir.join("main")).unwrap();
    assert!(main.starts_with("#!/bin/sh\n"));
    assert!(main.contains("cyberos tool list"));
    assert_ne!(
        std::fs::metadata(dir.join("main"))
            .unwrap()
            .permissions()
            .mode()
            & 0o111,
        0
    );
    // The main is valid shell.
    let status = std::process::Command::new("sh")
        .arg("-n")
        .arg(dir.join("main"))
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn scaffold_defaults_to_the_current_directory() {
    let world = World::new();
    let status = std::process::Command::new(crate::util::BIN)
        .args(["skill", "scaffold", "here"])
        .current_dir(world.path())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(world.path().join("here/SKILL.md").is_file());
}

#[test]
fn scaffold_refuses_to_overwrite_and_bad_ids() {
    let world = World::new();
    let dir = world.path().join("taken");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), "mine").unwrap();
    let out = world
        .cmd(["skill", "scaffold", "taken", "--dir"])
        .arg(world.path())
        .code(1);
    out.assert_stderr_contains("already exists");
    assert_eq!(
        std::fs::read_to_string(dir.join("SKILL.md")).unwrap(),
        "mine"
    );
    assert!(!dir.join("main").exists());
    for bad in ["Bad", "1abc", "a_b", "../x", ""] {
        world
            .cmd(["skill", "scaffold", bad, "--dir"])
            .arg(world.path())
            .code(2);
    }
    assert_eq!(std::fs::read_dir(world.path()).unwrap().count(), 1);
}
