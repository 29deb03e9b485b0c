//! `cyberos skill list [--skills-dir DIR] [--json]`: the bundles in the skills directories, each
//! validated. Invalid bundles are listed with their first error; the exit code is 0 either way.

use std::io::Write as _;

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::cli::ListArgs;
use crate::skill::{self, LoadError};
use crate::{exit, paths};

pub fn run(args: ListArgs) -> anyhow::Result<u8> {
    let home = paths::home(None)?;
    let dirs = paths::skills_dirs(args.skills_dir.as_deref(), &home)?;
    if let Some(dir) = args.skills_dir.as_ref().and(dirs.first()) {
        if !dir.is_dir() {
            return Err(exit::coded(
                exit::ERROR,
                format!(
                    "failed to list skills: {} is not a directory",
                    dir.display()
                ),
            ));
        }
    }
    let listed = skill::list_skills(&dirs, &skill::broker_version())
        .map_err(|e| exit::coded(exit::ERROR, format!("failed to list skills: {e}")))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let skills: Vec<Value> = listed.iter().map(entry_json).collect();
        let report = json!({ "skills_dirs": dirs, "skills": skills });
        writeln!(out, "{report}").context("failed to write to stdout")?;
        return Ok(exit::SUCCESS);
    }
    if listed.is_empty() {
        let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        eprintln!("cyberos: no skills in {}", searched.join(", "));
    }
    for l in &listed {
        let line = match &l.result {
            Ok(b) => format!(
                "{:<24} {:<10} {}",
                l.name, b.manifest.version, b.manifest.description
            ),
            Err(e) => format!("{:<24} {:<10} {}", l.name, "INVALID", one_line(e)),
        };
        let shadow = if l.shadowed {
            "  (shadowed by an earlier skills directory)"
        } else {
            ""
        };
        writeln!(out, "{line}{shadow}").context("failed to write to stdout")?;
    }
    Ok(exit::SUCCESS)
}

fn one_line(err: &LoadError) -> String {
    match err {
        LoadError::Invalid { errors, .. } => {
            let first = errors.first().map(ToString::to_string).unwrap_or_default();
            if errors.len() > 1 {
                format!("{first} (+{} more)", errors.len() - 1)
            } else {
                first
            }
        }
        other => other.to_string(),
    }
}

fn entry_json(l: &skill::Listed) -> Value {
    match &l.result {
        Ok(b) => json!({
            "name": l.name,
            "path": l.dir,
            "status": "ok",
            "id": b.manifest.id,
            "version": b.manifest.version.to_string(),
            "description": b.manifest.description,
            "shadowed": l.shadowed,
        }),
        Err(LoadError::Invalid { errors, .. }) => json!({
            "name": l.name, "path": l.dir, "status": "invalid", "errors": errors, "shadowed": l.shadowed,
        }),
        Err(other) => json!({
            "name": l.name, "path": l.dir, "status": "error", "message": other.to_string(), "shadowed": l.shadowed,
        }),
    }
}
