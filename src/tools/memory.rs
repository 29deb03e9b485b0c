//! The memory tools `MemoryRead` and `MemoryEmit` (CONTRACT §5) and the document store under
//! `Invocation::memory_root`. Paths are canonicalised lexically and checked against
//! `allowed_memory_scopes` at check time and again at call time; the store then opens them
//! beneath the root without following any symlink, so nothing in the memory tree can lead out of
//! it. This module must never touch a path outside the memory root.

use std::ffi::OsStr;
use std::io::Read as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::journal::kind;
use crate::skill::policy::canonical_memory_path;
use crate::tools::fsutil::{self, READ_CAP};
use crate::tools::sys::{self, Base};
use crate::tools::{CallContext, Tool, ToolError, ToolName, parse_args};
use crate::util::sha256_hex;

/// Canonicalises a memory path and checks it against `allowed_memory_scopes`.
pub fn checked_memory_path(ctx: &CallContext<'_>, raw: &str) -> Result<String, ToolError> {
    let canonical = canonical_memory_path(raw).map_err(ToolError::InvalidArgs)?;
    if !ctx.invocation.policy.memory_allowed(&canonical) {
        return Err(ToolError::Scope { path: canonical });
    }
    Ok(canonical)
}

/// The memory root as an `O_PATH` directory descriptor (the root itself is the operator's choice
/// and may be reached through a symlink; nothing below it may).
pub fn open_root(root: &Path, create: bool) -> Result<OwnedFd, ToolError> {
    if create {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(|e| {
                ToolError::io(
                    &format!("failed to create the memory root {}", root.display()),
                    &e,
                )
            })?;
    }
    sys::openat(None, root.as_os_str(), libc::O_PATH | libc::O_DIRECTORY, 0).map_err(|e| {
        ToolError::io(
            &format!("failed to open the memory root {}", root.display()),
            &e,
        )
    })
}

/// Reads the document at canonical path `rel` (UTF-8, at most [`READ_CAP`] bytes).
pub fn read_document(root: &Path, rel: &str) -> Result<String, ToolError> {
    let root_fd = open_root(root, false)?;
    let shown = Path::new(rel);
    let mut opened = fsutil::open_regular(Base::Dir(root_fd.as_fd()), shown, shown, None)?;
    if opened.meta.len() > READ_CAP {
        return Err(ToolError::failed(
            "too_large",
            format!(
                "memory document {rel} is {} bytes; the limit is {READ_CAP}",
                opened.meta.len()
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(opened.meta.len() as usize);
    (&mut opened.file)
        .take(READ_CAP + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::io(&format!("failed to read memory document {rel}"), &e))?;
    String::from_utf8(bytes).map_err(|_| {
        ToolError::failed(
            "invalid_utf8",
            format!("memory document {rel} is not UTF-8"),
        )
    })
}

/// Writes the document at canonical path `rel` atomically, creating its directories.
pub fn write_document(root: &Path, rel: &str, body: &[u8]) -> Result<(), ToolError> {
    let root_fd = open_root(root, true)?;
    let rel_path = Path::new(rel);
    let (Some(parent), Some(name)) = (rel_path.parent(), rel_path.file_name()) else {
        return Err(ToolError::invalid(format!(
            "memory path {rel:?} has no file name"
        )));
    };
    let dir = fsutil::open_dir(Base::Dir(root_fd.as_fd()), parent, rel_path, true, 0o700)?;
    fsutil::write_atomic(dir.as_fd(), name, body, 0o600).map_err(|e| write_error(rel, &e))
}

fn write_error(rel: &str, e: &std::io::Error) -> ToolError {
    ToolError::io(&format!("failed to write memory document {rel}"), e)
}

pub struct MemoryRead;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

impl Tool for MemoryRead {
    fn name(&self) -> ToolName {
        ToolName::MemoryRead
    }

    fn description(&self) -> &'static str {
        "Read a memory document (a relative path under the memory root, within allowed_memory_scopes)"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "memory path, e.g. memories/a/b.md"}},
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        let args: PathArgs = parse_args(args)?;
        checked_memory_path(ctx, &args.path).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let args: PathArgs = parse_args(args)?;
        let path = checked_memory_path(ctx, &args.path)?;
        let body = read_document(&ctx.invocation.memory_root, &path)?;
        Ok(json!({
            "path": path,
            "content_hash": sha256_hex(body.as_bytes()),
            "size": body.len(),
            "body": body,
        }))
    }
}

pub struct MemoryEmit;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmitArgs {
    path: String,
    #[serde(default)]
    payload: Option<Map<String, Value>>,
    #[serde(default)]
    body: Option<String>,
}

impl Tool for MemoryEmit {
    fn name(&self) -> ToolName {
        ToolName::MemoryEmit
    }

    fn description(&self) -> &'static str {
        "Record a memory.emitted journal row for a memory path (with body: also write the document)"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "memory path, e.g. memories/a/b.md"},
                "payload": {"type": "object", "description": "extra fields for the journal row"},
                "body": {"type": "string", "description": "document to write at path"}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        let args: EmitArgs = parse_args(args)?;
        checked_memory_path(ctx, &args.path).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let args: EmitArgs = parse_args(args)?;
        let path = checked_memory_path(ctx, &args.path)?;
        let inv = ctx.invocation;
        // Without a journal the row, which is the point of the call, cannot exist: refuse before
        // writing anything.
        let Some(journal) = &inv.journal else {
            return Err(ToolError::failed(
                "journal_unavailable",
                "the journal is not open; nothing was emitted",
            ));
        };
        let content_hash = match &args.body {
            Some(body) => {
                write_document(&inv.memory_root, &path, body.as_bytes())?;
                Some(sha256_hex(body.as_bytes()))
            }
            None => None,
        };
        // The skill's payload first, then the fields it may not forge.
        let mut row = args.payload.unwrap_or_default();
        row.insert("path".into(), json!(path));
        if let Some(hash) = &content_hash {
            row.insert("content_hash".into(), json!(hash));
        }
        row.insert("trace_id".into(), json!(ctx.trace.trace_id_hex()));
        row.insert("invocation_id".into(), json!(inv.invocation_id));
        row.insert("skill_id".into(), json!(inv.skill_id));
        row.insert("tenant_id".into(), json!(inv.tenant_id));
        row.insert("sync_class".into(), json!(inv.sync_class));
        let seq = journal
            .append(kind::MEMORY_EMITTED, &Value::Object(row))
            .map_err(|e| ToolError::failed("journal", e.to_string()))?;
        crate::telemetry::export_journal_row(journal, &inv.invocation_id, seq, &ctx.trace);
        let mut result = json!({"row_seq": seq});
        if let Some(hash) = content_hash {
            result["content_hash"] = json!(hash);
        }
        Ok(result)
    }
}

/// True when `name` is a document name the store writes (temp files are hidden).
pub fn is_temp_name(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with('.') && name.contains(".tmp-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testutil::{Allow, Fixture, tempdir};

    fn fixture() -> Fixture {
        Fixture::new(Allow {
            memory: &["memories/projects/cyberos/**"],
            ..Default::default()
        })
    }

    #[test]
    fn memory_read_returns_a_document_in_scope() {
        let fx = fixture();
        let doc = fx.memory().join("memories/projects/cyberos/notes");
        std::fs::create_dir_all(&doc).unwrap();
        std::fs::write(doc.join("x.md"), "# note\n").unwrap();
        let out = fx
            .run(
                &MemoryRead,
                json!({"path": "memories/projects/cyberos/notes/x.md"}),
            )
            .unwrap();
        assert_eq!(
            out,
            json!({"path": "memories/projects/cyberos/notes/x.md", "body": "# note\n",
                   "content_hash": sha256_hex(b"# note\n"), "size": 7})
        );
        let out = fx
            .run(
                &MemoryRead,
                json!({"path": "/memories//projects/./cyberos/notes/x.md"}),
            )
            .unwrap();
        assert_eq!(out["path"], "memories/projects/cyberos/notes/x.md");
    }

    #[test]
    fn memory_scope_is_checked_on_the_canonical_path() {
        let fx = fixture();
        for (raw, canonical) in [
            ("memories/people/y.md", "memories/people/y.md"),
            (
                "memories/projects/cyberos/../people/y.md",
                "memories/projects/people/y.md",
            ),
            ("../../../../etc/passwd", "etc/passwd"),
            (
                "memories/projects/cyberos/../../../../../etc/passwd",
                "etc/passwd",
            ),
        ] {
            match fx.run(&MemoryRead, json!({"path": raw})) {
                Err(ToolError::Scope { path }) => assert_eq!(path, canonical, "{raw}"),
                other => panic!("{raw}: {other:?}"),
            }
        }
        assert!(matches!(
            fx.run(&MemoryRead, json!({"path": 7})),
            Err(ToolError::InvalidArgs(_))
        ));
        assert!(matches!(
            fx.run(&MemoryRead, json!({"path": "a\u{0}b"})),
            Err(ToolError::InvalidArgs(_))
        ));
    }

    #[test]
    fn memory_symlinks_never_lead_out_of_the_root() {
        let fx = fixture();
        let (_o, outside) = tempdir();
        std::fs::write(outside.join("secret.md"), "SECRET").unwrap();
        let scope = fx.memory().join("memories/projects/cyberos");
        std::fs::create_dir_all(&scope).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.md"), scope.join("file.md")).unwrap();
        std::os::unix::fs::symlink(&outside, scope.join("dir")).unwrap();
        for path in [
            "memories/projects/cyberos/file.md",
            "memories/projects/cyberos/dir/secret.md",
        ] {
            match fx.run(&MemoryRead, json!({"path": path})) {
                Err(ToolError::Failed {
                    kind: "symlink", ..
                }) => {}
                other => panic!("{path}: {other:?}"),
            }
        }
        // Writing through a symlinked directory is refused too, and nothing lands outside.
        let r = fx.run(
            &MemoryEmit,
            json!({"path": "memories/projects/cyberos/dir/new.md", "body": "x"}),
        );
        assert!(
            matches!(
                r,
                Err(ToolError::Failed {
                    kind: "symlink",
                    ..
                })
            ),
            "{r:?}"
        );
        assert!(!outside.join("new.md").exists());
        // Replacing a symlinked document replaces the link, never its target.
        fx.run(
            &MemoryEmit,
            json!({"path": "memories/projects/cyberos/file.md", "body": "mine"}),
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.join("secret.md")).unwrap(),
            "SECRET"
        );
    }

    #[test]
    fn memory_emit_writes_the_row_and_the_document() {
        let fx = fixture();
        let out = fx
            .run(
                &MemoryEmit,
                json!({"path": "memories/projects/cyberos/a/b.md", "body": "hello",
                       "payload": {"topic": "t", "trace_id": "forged", "skill_id": "forged"}}),
            )
            .unwrap();
        assert_eq!(out["content_hash"], sha256_hex(b"hello"));
        let seq = out["row_seq"].as_i64().unwrap();
        let rows = fx
            .inv
            .journal
            .as_ref()
            .unwrap()
            .rows_for(&fx.inv.invocation_id, 0)
            .unwrap();
        let row = rows.iter().find(|r| r.seq == seq).unwrap();
        assert_eq!(row.kind, "memory.emitted");
        let p = &row.payload;
        assert_eq!(p["path"], "memories/projects/cyberos/a/b.md");
        assert_eq!(p["topic"], "t");
        assert_eq!(p["trace_id"], fx.trace.trace_id_hex());
        assert_eq!(p["skill_id"], "test-skill");
        assert_eq!(p["invocation_id"], fx.inv.invocation_id);
        assert_eq!(p["tenant_id"], fx.inv.tenant_id);
        assert_eq!(p["sync_class"], "private");
        let read = fx
            .run(
                &MemoryRead,
                json!({"path": "memories/projects/cyberos/a/b.md"}),
            )
            .unwrap();
        assert_eq!(read["body"], "hello");
        assert_eq!(read["content_hash"], out["content_hash"]);
        // Without a body only the row is written.
        let out = fx
            .run(
                &MemoryEmit,
                json!({"path": "memories/projects/cyberos/c.md"}),
            )
            .unwrap();
        assert!(out.get("content_hash").is_none());
        assert!(!fx.memory().join("memories/projects/cyberos/c.md").exists());
        let denied = fx.run(
            &MemoryEmit,
            json!({"path": "memories/other/c.md", "body": "x"}),
        );
        assert!(matches!(denied, Err(ToolError::Scope { .. })));
        assert!(!fx.memory().join("memories/other").exists());
        assert!(matches!(
            fx.run(
                &MemoryEmit,
                json!({"path": "memories/projects/cyberos/c.md", "payload": [1]})
            ),
            Err(ToolError::InvalidArgs(_))
        ));
    }
}
