//! The file tools `Read`, `Write` and `Edit` (CONTRACT §5), confined to `x-allowed-files`.
//! Every call canonicalises the path, matches it against the globs, and then opens exactly that
//! path without following a symlink anywhere, so a link swapped in after the check fails the open
//! instead of leading elsewhere. These tools must never read or write a non-regular file.

use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::fsutil::{self, READ_CAP};
use crate::tools::sys::Base;
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
