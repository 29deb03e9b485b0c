//! `cyberos skill list`: the bundles of the skills directories, in search order.

use crate::util::{self, World};

#[test]
fn list_shows_valid_and_invalid_skills_in_json() {
    let world = World::new();
    let skills = world.path().join("skills");
    std::fs::create_dir(&skills).unwrap();
    world.bundle(
        "skills/beta",
        &util::skill_md("beta", &["Read"], ""),
        "#!/bin/sh\n",
    );
    world.bundle(
        "skills/alpha",
        &util::skill_md("alpha", &[], ""),
        "#!/bin/sh\n",
    );
    world.bundle(
        "skills/broken",
        &util::skill_md("broken", &["Nope"], ""),
        "#!/bin/sh\n",
    );
    std::fs::create_dir(skills.join("not-a-bundle")).unwrap();
    let r = world
        .cmd(["skill", "list", "--json", "--skills-dir"])
        .arg(&skills)
        .success()
        .json();
    let list = r["skills"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha", "beta", "broken"]);
    assert_eq!(list[0]["status"], "ok");
    assert_eq!(list[0]["version"], "1.0.0");
    assert_eq!(list[2]["status"], "invalid");
    assert_eq!(list[2]["errors"][0]["code"], "unknown_tool");

    let human = world
        .cmd(["skill", "list", "--skills-dir"])
        .arg(&skills)
        .success();
    human.assert_stdout_contains("alpha");
    human.assert_stdout_contains("INVALID");
}

#[test]
fn list_searches_the_env_dir_then_the_home() {
    let world = World::new();
    let env_dir = world.path().join("env-skills");
    std::fs::create_dir(&env_dir).unwrap();
    world.bundle(
        "env-skills/from-env",
        &util::skill_md("from-env", &[], ""),
        "#!/bin/sh\n",
    );
    let r = world
        .cmd(["skill", "list", "--json"])
        .env("CYBEROS_SKILLS_DIR", &env_dir)
        .success()
        .json();
    assert_eq!(r["skills"][0]["name"], "from-env");
    assert_eq!(r["skills_dirs"], serde_json::json!([env_dir]));

    // Without the flag or variable: <home>/skills, then the system directory.
    world.bundle(
        "home/skills/from-home",
        &util::skill_md("from-home", &[], ""),
        "#!/bin/sh\n",
    );
    let r = world.cmd(["skill", "list", "--json"]).success().json();
    assert_eq!(
        r["skills_dirs"][0],
        serde_json::json!(world.home().join("skills"))
    );
    assert_eq!(r["skills_dirs"][1], "/opt/cyberos/skills");
    assert!(
        r["skills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "from-home")
    );
}

#[test]
fn list_of_a_missing_directory_is_an_error() {
    let world = World::new();
    world
        .cmd(["skill", "list", "--skills-dir"])
        .arg(world.path().join("nope"))
        .code(1);
}
