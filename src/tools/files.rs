//! The file tools `Read`, `Write` and `Edit` (CONTRACT §5), confined to `x-allowed-files`.
//! Every call canonicalises the path, matches it against the globs, and then opens exactly that
//! path without following a symlink anywhere, so a link swapped in after the check fails the open
//! instead of leading elsewhere. These tools must never read or write a non-regular file.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::fsutil::{self, READ_CAP};
use crate::tools::sys::{self, Base};
use crate::tools::{CallContext, Tool, ToolError, ToolName, encode_body, parse_args};
use crate::util::sha256_hex;

/// Canonicalises `raw` (CONTRACT §5) and checks it against `x-allowed-files`.
pub fn checked_file(ctx: &CallContext<'_>, raw: &str) -> Result<PathBuf, ToolError> {
    let canonical = fsutil::canonical_file_path(raw)?;
    if !ctx.invocation.policy.file_allowed(&canonical) {
        return Err(ToolError::File {
            path: canonical.to_string_lossy().into_owned(),
        });
    }
    Ok(canonical)
}

fn shown(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

pub struct Read;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    /// Lines to skip from the start.
    #[serde(default)]
    offset: u64,
    /// Lines to return at most.
    #[serde(default)]
    limit: Option<u64>,
}

impl Tool for Read {
    fn name(&self) -> ToolName {
        ToolName::Read
    }

    fn description(&self) -> &'static str {
        "Read a regular file under x-allowed-files (10 MiB cap; offset/limit in lines; base64 when not UTF-8)"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "absolute path"},
                "offset": {"type": "integer", "minimum": 0, "description": "lines to skip"},
                "limit": {"type": "integer", "minimum": 0, "description": "lines to return at most"}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        let args: ReadArgs = parse_args(args)?;
        checked_file(ctx, &args.path).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let args: ReadArgs = parse_args(args)?;
        let path = checked_file(ctx, &args.path)?;
        let opened = fsutil::open_regular(Base::Root, &path, &path, Some(&path))?;
        let mut reader = BufReader::with_capacity(64 * 1024, opened.file);
        let (bytes, truncated) = read_lines(&mut reader, args.offset, args.limit, READ_CAP)
            .map_err(|e| ToolError::io(&format!("failed to read {}", path.display()), &e))?;
        let (bytes, body, encoding) = encode_body(bytes, truncated);
        let mut result = json!({
            "path": shown(&path),
            "body": body,
            "content_hash": sha256_hex(&bytes),
            "size": opened.meta.len(),
            "truncated": truncated,
        });
        if let Some(encoding) = encoding {
            result["encoding"] = json!(encoding);
        }
        Ok(result)
    }
}

/// Opens the parent directory of a checked path (creating it when asked), verified to be exactly
/// that directory, and returns it with the file name.
fn parent_dir(path: &Path, create: bool) -> Result<(OwnedFd, &OsStr), ToolError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(ToolError::invalid(format!(
            "{} is not a file path",
            path.display()
        )));
    };
    let dir = fsutil::open_dir(Base::Root, parent, path, create, 0o777).map_err(|e| match e {
        ToolError::Failed {
            kind: "not_found", ..
        } if !create => ToolError::failed(
            "not_found",
            format!(
                "directory {} does not exist (pass create_dirs to create it)",
                parent.display()
            ),
        ),
        other => other,
    })?;
    fsutil::verify_fd_path(dir.as_fd(), parent)?;
    Ok((dir, name))
}

fn write_error(path: &Path, e: &io::Error) -> ToolError {
    if e.raw_os_error() == Some(libc::EISDIR) {
        return ToolError::failed(
            "is_a_directory",
            format!("{} is a directory", path.display()),
        );
    }
    ToolError::io(&format!("failed to write {}", path.display()), e)
}

pub struct Write;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
    #[serde(default)]
    create_dirs: bool,
}

impl Tool for Write {
    fn name(&self) -> ToolName {
        ToolName::Write
    }

    fn description(&self) -> &'static str {
        "Write a file under x-allowed-files atomically (temp file + rename); create_dirs makes missing parents"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "absolute path"},
                "content": {"type": "string"},
                "create_dirs": {"type": "boolean", "default": false}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        let args: WriteArgs = parse_args(args)?;
        checked_file(ctx, &args.path).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let args: WriteArgs = parse_args(args)?;
        let path = checked_file(ctx, &args.path)?;
        let (dir, name) = parent_dir(&path, args.create_dirs)?;
        let bytes = args.content.as_bytes();
        fsutil::write_atomic(dir.as_fd(), name, bytes, 0o666)
            .map_err(|e| write_error(&path, &e))?;
        Ok(
            json!({"path": shown(&path), "bytes_written": bytes.len(), "content_hash": sha256_hex(bytes)}),
        )
    }
}

pub struct Edit;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

impl EditArgs {
    fn validate(self) -> Result<Self, ToolError> {
        if self.old_string.is_empty() {
            return Err(ToolError::invalid("old_string must not be empty"));
        }
        if self.old_string == self.new_string {
            return Err(ToolError::invalid(
                "old_string and new_string are identical",
            ));
        }
        Ok(self)
    }
}

impl Tool for Edit {
    fn name(&self) -> ToolName {
        ToolName::Edit
    }

    fn description(&self) -> &'static str {
        "Replace old_string with new_string in a file under x-allowed-files (exactly one occurrence unless replace_all)"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "absolute path"},
                "old_string": {"type": "string", "minLength": 1},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean", "default": false}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        let args = parse_args::<EditArgs>(args)?.validate()?;
        checked_file(ctx, &args.path).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let args = parse_args::<EditArgs>(args)?.validate()?;
        let path = checked_file(ctx, &args.path)?;
        let mut opened = fsutil::open_regular(Base::Root, &path, &path, Some(&path))?;
        if opened.meta.len() > READ_CAP {
            return Err(ToolError::failed(
                "too_large",
                format!(
                    "{} is {} bytes; Edit handles at most {READ_CAP}",
                    path.display(),
                    opened.meta.len()
                ),
            ));
        }
        let mut text = String::new();
        (&mut opened.file)
            .take(READ_CAP + 1)
            .read_to_string(&mut text)
            .map_err(|e| {
                if e.kind() == io::ErrorKind::InvalidData {
                    ToolError::failed(
                        "invalid_utf8",
                        format!("{} is not UTF-8 text", path.display()),
                    )
                } else {
                    ToolError::io(&format!("failed to read {}", path.display()), &e)
                }
            })?;
        let count = text.matches(&args.old_string).count();
        if count == 0 {
            return Err(ToolError::failed(
                "no_match",
                format!("old_string does not occur in {}", path.display()),
            ));
        }
        if count > 1 && !args.replace_all {
            return Err(ToolError::failed(
                "ambiguous",
                format!(
                    "old_string occurs {count} times in {}; add context to make it unique or pass replace_all",
                    path.display()
                ),
            ));
        }
        let new = if args.replace_all {
            text.replace(&args.old_string, &args.new_string)
        } else {
            text.replacen(&args.old_string, &args.new_string, 1)
        };
        let (dir, name) = parent_dir(&path, false)?;
        // Someone replacing the file between our read and our rename would lose their write.
        let current =
            sys::lstatat(dir.as_fd(), name).map_err(|e| ToolError::io("failed to stat", &e))?;
        if !current
            .is_some_and(|st| st.st_dev == opened.meta.dev() && st.st_ino == opened.meta.ino())
        {
            return Err(ToolError::failed(
                "conflict",
                format!("{} was replaced during the edit", path.display()),
            ));
        }
        fsutil::write_atomic(dir.as_fd(), name, new.as_bytes(), 0o666)
            .map_err(|e| write_error(&path, &e))?;
        Ok(
            json!({"path": shown(&path), "replacements": count, "content_hash": sha256_hex(new.as_bytes())}),
        )
    }
}

/// Skips `offset` lines, then returns up to `limit` lines (all when `None`), never more than
/// `cap` bytes; the flag says whether the cap cut the output. Line terminators are kept, so with
/// neither offset nor limit the bytes are the file's own.
fn read_lines(
    r: &mut impl BufRead,
    offset: u64,
    limit: Option<u64>,
    cap: u64,
) -> io::Result<(Vec<u8>, bool)> {
    let mut skipped = 0;
    while skipped < offset {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((Vec::new(), false));
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                skipped += 1;
            }
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    }
    let mut out = Vec::new();
    let mut lines = 0;
    while limit.is_none_or(|l| lines < l) {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (take, eol) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = (cap as usize).saturating_sub(out.len());
        if take > room {
            out.extend_from_slice(&buf[..room]);
            return Ok((out, true));
        }
        out.extend_from_slice(&buf[..take]);
        r.consume(take);
        lines += u64::from(eol);
    }
    Ok((out, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testutil::{Allow, Fixture, s, tempdir};

    fn fixture(files: &[&str]) -> Fixture {
        Fixture::new(Allow {
            files,
            ..Default::default()
        })
    }

    fn file_violation(r: Result<Value, ToolError>) -> String {
        match r {
            Err(ToolError::File { path }) => path,
            other => panic!("expected file_violation, got {other:?}"),
        }
    }

    #[test]
    fn read_returns_body_hash_and_size() {
        let (_d, dir) = tempdir();
        std::fs::write(dir.join("x.txt"), "hello\nworld\n").unwrap();
        let glob = format!("{}/**", dir.display());
        let fx = fixture(&[&glob]);
        let out = fx
            .run(&Read, json!({"path": s(&dir.join("x.txt"))}))
            .unwrap();
        assert_eq!(out["body"], "hello\nworld\n");
        assert_eq!(out["size"], 12);
        assert_eq!(out["truncated"], false);
        assert_eq!(out["content_hash"], sha256_hex(b"hello\nworld\n"));
        assert!(out.get("encoding").is_none());
        let out = fx
            .run(
                &Read,
                json!({"path": s(&dir.join("x.txt")), "offset": 1, "limit": 1}),
            )
            .unwrap();
        assert_eq!(out["body"], "world\n");
        assert_eq!(out["content_hash"], sha256_hex(b"world\n"));
    }

    #[test]
    fn read_refuses_paths_outside_the_globs() {
        let (_d, dir) = tempdir();
        std::fs::create_dir(dir.join("allowed")).unwrap();
        let glob = format!("{}/allowed/**", dir.display());
        let fx = fixture(&[&glob]);
        let path = file_violation(fx.run(&Read, json!({"path": "/etc/passwd"})));
        assert_eq!(path, "/etc/passwd");
        let sneaky = format!("{}/allowed/../../../../../../etc/passwd", dir.display());
        assert_eq!(
            file_violation(fx.run(&Read, json!({"path": sneaky}))),
            "/etc/passwd"
        );
        assert!(matches!(
            fx.run(&Read, json!({"path": "allowed/x"})),
            Err(ToolError::InvalidArgs(_))
        ));
        assert!(matches!(
            fx.run(
                &Read,
                json!({"path": s(&dir.join("allowed/x")), "bogus": 1})
            ),
            Err(ToolError::InvalidArgs(_))
        ));
    }

    #[test]
    fn read_refuses_symlinks_pointing_out_file_and_directory() {
        let (_d, dir) = tempdir();
        let (_o, outside) = tempdir();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        std::fs::create_dir(dir.join("allowed")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), dir.join("allowed/link")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("allowed/dirlink")).unwrap();
        let glob = format!("{}/allowed/**", dir.display());
        let fx = fixture(&[&glob]);
        let p = file_violation(fx.run(&Read, json!({"path": s(&dir.join("allowed/link"))})));
        assert_eq!(p, s(&outside.join("secret")));
        let p = file_violation(fx.run(
            &Read,
            json!({"path": s(&dir.join("allowed/dirlink/secret"))}),
        ));
        assert_eq!(p, s(&outside.join("secret")));
    }

    #[test]
    fn read_refuses_fifos_and_devices_without_blocking() {
        let (_d, dir) = tempdir();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(s(&fifo)).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let glob = format!("{}/**", dir.display());
        let fx = Fixture::new(Allow {
            files: &[&glob, "/dev/zero"],
            ..Default::default()
        });
        for path in [s(&fifo), "/dev/zero".to_owned()] {
            match fx.run(&Read, json!({"path": path})) {
                Err(ToolError::Failed {
                    kind: "not_regular_file",
                    ..
                }) => {}
                other => panic!("{path}: {other:?}"),
            }
        }
        // A device node inside the allowed tree (needs CAP_MKNOD).
        let dev = dir.join("zero");
        let c = std::ffi::CString::new(s(&dev)).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 5)) } == 0 {
            assert!(matches!(
                fx.run(&Read, json!({"path": s(&dev)})),
                Err(ToolError::Failed {
                    kind: "not_regular_file",
                    ..
                })
            ));
        } else {
            eprintln!("skipped: mknod of a device inside the allowed tree needs CAP_MKNOD");
        }
    }

    #[test]
    fn read_caps_at_ten_mib_and_base64s_binary() {
        let (_d, dir) = tempdir();
        let big = vec![b'a'; READ_CAP as usize + 10];
        std::fs::write(dir.join("big"), &big).unwrap();
        std::fs::write(dir.join("bin"), [0xff, 0x00, 0xfe]).unwrap();
        let glob = format!("{}/**", dir.display());
        let fx = fixture(&[&glob]);
        let out = fx.run(&Read, json!({"path": s(&dir.join("big"))})).unwrap();
        assert_eq!(out["truncated"], true);
        assert_eq!(out["body"].as_str().unwrap().len(), READ_CAP as usize);
        assert_eq!(out["size"], READ_CAP + 10);
        let out = fx.run(&Read, json!({"path": s(&dir.join("bin"))})).unwrap();
        assert_eq!(out["encoding"], "base64");
        assert_eq!(out["body"], "/wD+");
        assert_eq!(out["content_hash"], sha256_hex(&[0xff, 0x00, 0xfe]));
    }

    #[test]
    fn write_is_atomic_and_confined() {
        let (_d, dir) = tempdir();
        let glob = format!("{}/**", dir.display());
        let fx = fixture(&[&glob]);
        let out = fx
            .run(
                &Write,
                json!({"path": s(&dir.join("a.txt")), "content": "one"}),
            )
            .unwrap();
        assert_eq!(
            out,
            json!({"path": s(&dir.join("a.txt")), "bytes_written": 3, "content_hash": sha256_hex(b"one")})
        );
        fx.run(
            &Write,
            json!({"path": s(&dir.join("a.txt")), "content": "two"}),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "two");
        let deep = dir.join("x/y/z.txt");
        match fx.run(&Write, json!({"path": s(&deep), "content": "z"})) {
            Err(ToolError::Failed {
                kind: "not_found",
                detail,
            }) => assert!(detail.contains("create_dirs"), "{detail}"),
            other => panic!("{other:?}"),
        }
        fx.run(
            &Write,
            json!({"path": s(&deep), "content": "z", "create_dirs": true}),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&deep).unwrap(), "z");
        // `/tmp/../etc/...` is /etc/...: outside the glob, and nothing is created there.
        let sneaky = format!("{}/../../../../etc/cyberos-should-not-exist", dir.display());
        assert_eq!(
            file_violation(fx.run(&Write, json!({"path": sneaky, "content": "x"}))),
            "/etc/cyberos-should-not-exist"
        );
        assert!(!Path::new("/etc/cyberos-should-not-exist").exists());
        let dotdot = format!("{}/missing/../../etc/x", dir.display());
        assert!(matches!(
            fx.run(&Write, json!({"path": dotdot, "content": "x"})),
            Err(ToolError::InvalidArgs(_))
        ));
        assert!(matches!(
            fx.run(&Write, json!({"path": s(&dir.join("x")), "content": "z"})),
            Err(ToolError::Failed {
                kind: "is_a_directory",
                ..
            })
        ));
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temp file left behind: {names:?}");
    }

    #[test]
    fn write_through_symlinks_is_refused_or_stays_inside() {
        let (_d, dir) = tempdir();
        let (_o, outside) = tempdir();
        std::fs::create_dir(dir.join("a")).unwrap();
        std::os::unix::fs::symlink(outside.join("new"), dir.join("a/link")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("a/dirlink")).unwrap();
        let glob = format!("{}/a/**", dir.display());
        let fx = fixture(&[&glob]);
        let p = file_violation(fx.run(
            &Write,
            json!({"path": s(&dir.join("a/link")), "content": "x"}),
        ));
        assert_eq!(p, s(&outside.join("new")));
        let p = file_violation(fx.run(
            &Write,
            json!({"path": s(&dir.join("a/dirlink/f")), "content": "x", "create_dirs": true}),
        ));
        assert_eq!(p, s(&outside.join("f")));
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn edit_requires_a_unique_match_unless_replace_all() {
        let (_d, dir) = tempdir();
        let f = dir.join("e.txt");
        std::fs::write(&f, "a b a c").unwrap();
        let glob = format!("{}/**", dir.display());
        let fx = fixture(&[&glob]);
        let edit = |old: &str, new: &str, all: bool| {
            fx.run(
                &Edit,
                json!({"path": s(&f), "old_string": old, "new_string": new, "replace_all": all}),
            )
        };
        assert!(matches!(
            edit("a", "x", false),
            Err(ToolError::Failed {
                kind: "ambiguous",
                ..
            })
        ));
        assert!(matches!(
            edit("zz", "x", false),
            Err(ToolError::Failed {
                kind: "no_match",
                ..
            })
        ));
        assert!(matches!(
            edit("", "x", false),
            Err(ToolError::InvalidArgs(_))
        ));
        let out = edit("b", "B", false).unwrap();
        assert_eq!(out["replacements"], 1);
        assert_eq!(out["content_hash"], sha256_hex(b"a B a c"));
        let out = edit("a", "A", true).unwrap();
        assert_eq!(out["replacements"], 2);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "A B A c");
        assert_eq!(
            file_violation(fx.run(
                &Edit,
                json!({"path": "/etc/passwd", "old_string": "root", "new_string": "x"})
            )),
            "/etc/passwd"
        );
    }

    /// A symlink to an outside file is swapped in and out of an allowed path while Read runs:
    /// no read may ever return the outside content.
    #[test]
    fn read_race_with_symlink_swap_never_leaks() {
        let (_d, dir) = tempdir();
        let (_o, outside) = tempdir();
        std::fs::write(outside.join("secret"), "SECRET").unwrap();
        std::fs::create_dir(outside.join("sub")).unwrap();
        std::fs::write(outside.join("sub/f"), "SECRET").unwrap();
        std::fs::create_dir_all(dir.join("a/sub")).unwrap();
        std::fs::write(dir.join("a/f"), "inside").unwrap();
        std::fs::write(dir.join("a/sub/f"), "inside").unwrap();
        // Prepared swap-ins: a regular file, a symlink to the outside file, a directory and a
        // symlink to the outside directory, each renamed over the target in turn.
        std::fs::create_dir(dir.join("stage")).unwrap();
        let glob = format!("{}/a/**", dir.display());
        let fx = fixture(&[&glob]);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut reads = 0;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let stage = dir.join("stage");
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let (file_src, dir_src) =
                        (stage.join(format!("f{i}")), stage.join(format!("d{i}")));
                    if i % 2 == 0 {
                        std::os::unix::fs::symlink(outside.join("secret"), &file_src).unwrap();
                        std::os::unix::fs::symlink(outside.join("sub"), &dir_src).unwrap();
                    } else {
                        std::fs::write(&file_src, "inside").unwrap();
                        std::fs::create_dir(&dir_src).unwrap();
                        std::fs::write(dir_src.join("f"), "inside").unwrap();
                    }
                    std::fs::rename(&file_src, dir.join("a/f")).unwrap();
                    // A directory cannot be renamed over a non-empty one: move the old aside.
                    let old = stage.join(format!("old{i}"));
                    std::fs::rename(dir.join("a/sub"), &old).unwrap();
                    std::fs::rename(&dir_src, dir.join("a/sub")).unwrap();
                    if std::fs::symlink_metadata(&old).unwrap().is_dir() {
                        std::fs::remove_dir_all(&old).unwrap();
                    } else {
                        std::fs::remove_file(&old).unwrap();
                    }
                }
            });
            for i in 0..1000 {
                let target = if i % 2 == 0 {
                    dir.join("a/f")
                } else {
                    dir.join("a/sub/f")
                };
                if let Ok(out) = fx.run(&Read, json!({"path": s(&target)})) {
                    assert_eq!(out["body"], "inside", "read {i} leaked");
                    reads += 1;
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        eprintln!("race: {reads} of 1000 reads succeeded, none leaked");
    }
}
