//! `cyberos skill scaffold <ID> [--dir DIR]`: writes a new bundle `<DIR>/<ID>/` with a commented
//! SKILL.md that validates and an executable `main`. Never overwrites anything.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use anyhow::Context as _;

use crate::cli::ScaffoldArgs;
use crate::exit;
use crate::skill::rules::ID_PATTERN;

pub fn run(args: ScaffoldArgs) -> anyhow::Result<u8> {
    let id_ok = regex::Regex::new(ID_PATTERN).is_ok_and(|re| re.is_match(&args.id));
    if !id_ok {
        return Err(exit::coded(
            exit::USAGE,
            format!(
                "invalid skill id {:?}: use lowercase letters, digits and dashes, starting with a letter",
                args.id
            ),
        ));
    }
    let parent = args.dir.as_deref().unwrap_or(Path::new("."));
    let dir = parent.join(&args.id);
    std::fs::create_dir(&dir).with_context(|| {
        if dir.exists() {
            format!(
                "failed to create {}: it already exists (nothing was changed)",
                dir.display()
            )
        } else {
            format!("failed to create {}", dir.display())
        }
    })?;
    write_new(&dir.join("SKILL.md"), &skill_md(&args.id), 0o644)?;
    write_new(&dir.join("main"), MAIN, 0o755)?;
    println!("created {}", dir.display());
    println!(
        "next: edit {0}/SKILL.md and {0}/main, then `cyberos skill validate {0}`",
        dir.display()
    );
    Ok(exit::SUCCESS)
}

fn write_new(path: &Path, contents: &str, mode: u32) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("failed to create {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("failed to write {}", path.display()))
}

fn skill_md(id: &str) -> String {
    format!(
        r#"---
# SKILL.md schema v1. Run `cyberos skill validate .` after every change.
# Required fields.
# id: lowercase letters, digits, dashes; starts with a letter.
id: {id}
# version: SemVer MAJOR.MINOR.PATCH[-pre].
version: 0.1.0
# description: one line, 1-200 characters.
description: What {id} does, in one line.
# Memory paths (globs, relative to the memory root) the skill may read and emit.
# `*` stays within one path segment, `**` crosses segments. [] means no memory access.
allowed_memory_scopes:
  - "memories/{id}/**"
# Tools the skill may call through the broker ([] means none). Names:
# Read Write Edit Glob Grep Bash MemoryRead MemorySearch MemoryEmit HttpFetch HttpPost
allowed_tools: [MemoryRead, MemorySearch]
# Optional fields (defaults shown):
# disallowed_tools: []        # never allowed, whatever allowed_tools says
# effort_minutes: 30          # time budget; SIGTERM at 90 %, SIGKILL at 100 %
# sync_class: private         # or shareable; recorded on emitted memory rows
# tenant_scope: any           # or pinned
# tags: [example]             # at most 10, each at most 30 characters
# min_broker_version: 0.1.0   # refuse to run on older cyberos
# x-allowed-files: ["/srv/data/**"]        # absolute globs for Read/Write/Edit/Glob/Grep
# x-allowed-domains: ["api.example.com"]   # host globs for HttpFetch/HttpPost
# `cyberos skill sign . --key FILE` adds a `signature:` block; any later edit breaks it.
---
# {id}

Describe here what the skill does, what it reads and what it writes. The body is free markdown;
it is covered by the signature too.
"#
    )
}

const MAIN: &str = r#"#!/bin/sh
# The skill's entry point: it runs in the cyberos sandbox. Arguments after `--` on the
# `cyberos skill invoke` command line arrive here; stdin, stdout and stderr are your own.
# Everything outside the sandbox goes through the broker, for example:
#   cyberos tool call MemoryRead '{"path":"memories/<id>/notes.md"}'
set -eu

echo "tools this skill may call:"
cyberos tool list
"#;
