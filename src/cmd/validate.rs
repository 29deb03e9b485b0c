//! `cyberos skill validate <BUNDLE> [--json] [--broker-version SEMVER]`: checks a SKILL.md
//! against schema v1. Exit 0 valid, 6 invalid, 1 not found or unreadable.

use std::io::Write as _;

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::cli::ValidateArgs;
use crate::exit;
use crate::skill::{self, Bundle, LoadError};

pub fn run(args: ValidateArgs) -> anyhow::Result<u8> {
    let broker = match &args.broker_version {
        Some(text) => semver::Version::parse(text).map_err(|e| {
            exit::coded(
                exit::USAGE,
                format!("invalid --broker-version {text:?}: {e}"),
            )
        })?,
        None => skill::broker_version(),
    };
    let result = skill::load_skill_md(&args.bundle, &broker);
    let mut out = std::io::stdout().lock();
    match result {
        Ok(bundle) => {
            if args.json {
                writeln!(out, "{}", ok_json(&bundle))
            } else {
                let m = &bundle.manifest;
                writeln!(
                    out,
                    "ok: {} {} ({})",
                    m.id,
                    m.version,
                    bundle.skill_md_path.display()
                )
            }
            .context("failed to write to stdout")?;
            Ok(exit::SUCCESS)
        }
        Err(LoadError::Invalid { path, errors }) => {
            if args.json {
                let report = json!({ "status": "invalid", "errors": errors });
                writeln!(out, "{report}").context("failed to write to stdout")?;
            } else {
                let mut err = std::io::stderr().lock();
                // Reporting is best effort: the exit code already says invalid.
                let count = match errors.len() {
                    1 => "1 error".to_owned(),
                    n => format!("{n} errors"),
                };
                let _ = writeln!(
                    err,
                    "cyberos: {}: invalid SKILL.md ({count})",
                    path.display()
                );
                for e in &errors {
                    let field = if e.field.is_empty() {
                        "SKILL.md"
                    } else {
                        &e.field
                    };
                    let _ = writeln!(err, "  {field}: {} [{}]", e.message, e.code);
                }
            }
            Ok(exit::INVALID_SKILL)
        }
        Err(other) => {
            let code = other.validate_exit_code();
            Err(exit::coded(code, other.to_string()))
        }
    }
}

/// `{"status":"ok","id","version",...}`: the manifest with defaults applied, plus where it was
/// found and whether it is signed.
fn ok_json(bundle: &Bundle) -> Value {
    let m = &bundle.manifest;
    let mut report = json!({
        "status": "ok",
        "id": m.id,
        "version": m.version.to_string(),
        "description": m.description,
        "path": bundle.skill_md_path,
        "allowed_memory_scopes": m.allowed_memory_scopes,
        "allowed_tools": m.allowed_tools,
        "disallowed_tools": m.disallowed_tools,
        "effort_minutes": m.effort_minutes,
        "min_broker_version": m.min_broker_version.as_ref().map(ToString::to_string),
        "max_broker_version": m.max_broker_version.as_ref().map(ToString::to_string),
        "sync_class": m.sync_class.as_str(),
        "tenant_scope": m.tenant_scope.as_str(),
        "tags": m.tags,
        "signed": m.signature.is_some(),
        "public_key_hex": m.signature.as_ref().map(|s| s.public_key_hex.clone()),
    });
    if let Value::Object(map) = &mut report {
        for (key, value) in &m.extensions {
            map.insert(key.clone(), value.clone());
        }
    }
    report
}
