//! File paths: the tools' canonicaliser against a reference resolver that walks one component
//! at a time as the kernel does (`lstat`, `readlink`, `..` on the real directory), on a tree full
//! of symlinks that point in, out, nowhere and at themselves. Then the property that matters: a
//! path the globs allow is exactly where the kernel would take it, so Write and Read through the
//! real tools land inside the allowed tree and never change anything outside it.
//!
//! As in the dispatch target, paths are confined lexically to the fixture and its symlinks never
//! point shallower than they sit, so a broken canonicaliser still cannot reach outside the
//! fixture's temporary directory.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use cyberos::skill::policy::Policy;
use cyberos::tools::{self, CallContext, Invocation, ToolError, ToolName};
use cyberos::util::TraceContext;
use serde_json::json;

use super::fixture::{self, Recycled, Snapshot};

const NAMES: &[&str] = &[
    "t",
    "in",
    "a.txt",
    "sub",
    "b.txt",
    "deeper",
    "link_out",
    "rel_out",
    "link_in",
    "dangling",
    "dangling_in",
    "dangling_dir",
    "loop",
    "chain",
    "file_link",
    "dd",
    "x",
    "y",
    "out",
    "secret",
    "new.txt",
    "new",
];

/// Globs below `<base>/t/in/` (the allowed tree).
const GLOBS: &[&str] = &[
    "**",
    "*.txt",
    "sub/**",
    "{a.txt,sub/*}",
    "*",
    "new*",
    "**/new*",
];

#[derive(Debug, Arbitrary)]
enum Seg {
    Name(u8),
    Dot,
    DotDot,
    Empty,
    Raw(String),
}

#[derive(Debug, Arbitrary)]
enum GlobSel {
    Known(u8),
    Raw(String),
}

#[derive(Debug, Arbitrary)]
pub enum Action {
    None,
    Read,
    Write { content: String, create_dirs: bool },
}

#[derive(Debug, Arbitrary)]
struct Input {
    segs: Vec<Seg>,
    globs: Vec<GlobSel>,
    action: Action,
}

pub(crate) struct Tree {
    _dir: tempfile::TempDir,
    base: PathBuf,
    allowed: PathBuf,
    outside: PathBuf,
    before_out: Snapshot,
}

fn build() -> Tree {
    let (dir, base) = fixture::tempdir("cyberos-fuzz-file-");
    let allowed = base.join("t/in");
    let outside = base.join("x/y/out");
    let b = |p: &Path| p.to_str().expect("utf-8").to_owned();
    fixture::write(&allowed.join("a.txt"), "a\n");
    fixture::write(&allowed.join("sub/b.txt"), "b\n");
    std::fs::create_dir_all(allowed.join("sub/deeper")).expect("deeper");
    fixture::write(&outside.join("secret"), "secret\n");
    std::fs::create_dir_all(outside.join("d")).expect("d");
    fixture::symlink(&b(&outside), &allowed.join("link_out"));
    fixture::symlink("../../x/y/out", &allowed.join("rel_out"));
    fixture::symlink("sub", &allowed.join("link_in"));
    fixture::symlink(&b(&outside.join("new.txt")), &allowed.join("dangling"));
    fixture::symlink(
        &b(&allowed.join("new_in.txt")),
        &allowed.join("dangling_in"),
    );
    fixture::symlink(&b(&outside.join("nodir/f")), &allowed.join("dangling_dir"));
    fixture::symlink("loop", &allowed.join("loop"));
    fixture::symlink("link_in", &allowed.join("chain"));
    fixture::symlink("a.txt", &allowed.join("file_link"));
    fixture::symlink("missing/../a.txt", &allowed.join("dd"));
    let before_out = fixture::snapshot(&outside);
    Tree {
        _dir: dir,
        base,
        allowed,
        outside,
        before_out,
    }
}

static TREE: Recycled<Tree> = Recycled::new(u32::MAX);

/// The kernel's walk, by hand: Ok(the path the name leads to), with a non-existent rest
/// appended as written; Err when `..` follows something that does not exist, a loop, or an
/// error other than "not there".
pub fn reference(raw: &str) -> Result<PathBuf, String> {
    if raw.contains('\0') || !raw.starts_with('/') {
        return Err("not an absolute path without NUL".into());
    }
    let mut todo: VecDeque<String> = raw.split('/').map(str::to_owned).collect();
    let mut cur = PathBuf::from("/");
    let mut links = 0;
    while let Some(seg) = todo.pop_front() {
        if seg.is_empty() || seg == "." {
            continue;
        }
        let is_dir = std::fs::metadata(&cur).is_ok_and(|m| m.is_dir());
        let missing = |seg: String, todo: VecDeque<String>, mut cur: PathBuf| {
            let rest: Vec<String> = std::iter::once(seg)
                .chain(todo)
                .filter(|s| !s.is_empty() && s != ".")
                .collect();
            if rest.iter().any(|s| s == "..") {
                return Err(format!("`..` after {} which does not exist", cur.display()));
            }
            cur.extend(rest);
            Ok(cur)
        };
        if !is_dir {
            // Nothing can be below a file: the rest does not exist.
            return missing(seg, todo, cur);
        }
        if seg == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&seg);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    return Err("too many links".into());
                }
                let target = std::fs::read_link(&next).map_err(|e| e.to_string())?;
                let target = target.to_str().expect("fixture targets are UTF-8");
                if target.starts_with('/') {
                    cur = PathBuf::from("/");
                }
                for (i, s) in target.split('/').enumerate() {
                    todo.insert(i, s.to_owned());
                }
            }
            Ok(_) => cur = next,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return missing(seg, todo, cur);
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(cur)
}

fn confine(raw: &str, base: &Path) -> String {
    let mut depth = 0usize;
    let mut out = base.to_str().expect("utf-8").to_owned();
    for seg in raw.split('/') {
        match seg {
            ".." if depth == 0 => continue,
            ".." => depth -= 1,
            "" | "." => {}
            _ => depth += 1,
        }
        out.push('/');
        out.push_str(seg);
    }
    out
}

pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let tail: Vec<String> = input
        .segs
        .iter()
        .map(|s| match s {
            Seg::Name(i) => NAMES[usize::from(*i) % NAMES.len()].to_owned(),
            Seg::Dot => ".".to_owned(),
            Seg::DotDot => "..".to_owned(),
            Seg::Empty => String::new(),
            Seg::Raw(r) => r.clone(),
        })
        .collect();
    let globs: Vec<String> = input
        .globs
        .iter()
        .map(|g| match g {
            GlobSel::Known(i) => GLOBS[usize::from(*i) % GLOBS.len()].to_owned(),
            GlobSel::Raw(r) => r.clone(),
        })
        .collect();
    check(&tail.join("/"), &globs, &input.action);
}

/// The whole oracle for one path below the fixture (`tail` is appended to its base), globs
/// below the allowed tree, and what to do with the path when they allow it.
pub fn check(tail: &str, globs: &[String], action: &Action) {
    let wrote = TREE.with(build, |tree| check_in(tail, globs, action, tree));
    if wrote {
        TREE.discard();
    }
}

fn check_in(tail: &str, glob_tails: &[String], action: &Action, tree: &Tree) -> bool {
    let raw = confine(tail, &tree.base);
    // The kernel refuses over-long names before anything else; not this oracle's business.
    if raw.len() > 3000 || raw.split('/').any(|s| s.len() > 255) {
        return false;
    }
    let globs: Vec<String> = glob_tails
        .iter()
        .map(|tail| format!("{}/{tail}", tree.allowed.display()))
        .filter(|g| cyberos::skill::policy::compile_glob(g).is_ok())
        .collect();
    let mut manifest = super::dispatch::base_manifest();
    manifest.allowed_tools = vec![ToolName::Read, ToolName::Write];
    manifest.allowed_files = globs;
    let policy = Policy::from_manifest(&manifest).expect("globs compile");
    let inv = Invocation::standalone(
        manifest.id.clone(),
        Arc::new(policy),
        tree.base.join("memory"),
        tree.base.join("scratch"),
    );
    let ctx = CallContext {
        invocation: &inv,
        call_id: "call-1",
        trace: TraceContext::new_root(),
    };

    let (canonical, allowed) = match tools::files::checked_file(&ctx, &raw) {
        Ok(c) => (Ok(c), true),
        Err(ToolError::File { path }) => (Ok(PathBuf::from(path)), false),
        Err(e) => (Err(e), false),
    };
    let expected = reference(&raw);
    match (&canonical, &expected) {
        (Ok(c), Ok(r)) => assert_eq!(c, r, "raw {raw:?}"),
        (Err(_), Err(_)) => return false,
        (c, r) => panic!("raw {raw:?}: canonicaliser {c:?}, reference {r:?}"),
    }
    let canonical = canonical.expect("compared above");
    assert!(canonical.is_absolute());
    assert!(
        canonical.components().all(|c| matches!(
            c,
            std::path::Component::RootDir | std::path::Component::Normal(_)
        )),
        "{canonical:?} is not normal"
    );
    if !allowed {
        return false;
    }
    // Allowed: it lies in the allowed tree, and where the name exists the kernel agrees.
    assert!(
        canonical.starts_with(&tree.allowed),
        "{canonical:?} allowed"
    );
    if let Ok(kernel) = std::fs::canonicalize(&raw) {
        assert_eq!(kernel, canonical, "the kernel resolves {raw:?} elsewhere");
    }

    let mut wrote = false;
    match action {
        Action::None => {}
        Action::Read => {
            let tool = tools::tool(ToolName::Read).expect("Read");
            let args = json!({"path": raw});
            if let Ok(result) = tool
                .check(&ctx, &args)
                .and_then(|()| tool.call(&ctx, &args))
            {
                let on_disk = std::fs::read(&canonical).expect("read what Read read");
                if result["encoding"].is_null() {
                    assert_eq!(
                        result["body"].as_str().map(str::as_bytes),
                        Some(&on_disk[..])
                    );
                }
            }
        }
        Action::Write {
            content,
            create_dirs,
        } => {
            wrote = true;
            let tool = tools::tool(ToolName::Write).expect("Write");
            let args = json!({"path": raw, "content": content, "create_dirs": create_dirs});
            if tool
                .check(&ctx, &args)
                .and_then(|()| tool.call(&ctx, &args))
                .is_ok()
            {
                let meta = std::fs::symlink_metadata(&canonical).expect("written file");
                assert!(meta.is_file(), "{canonical:?}");
                assert_eq!(std::fs::read(&canonical).expect("read"), content.as_bytes());
            }
        }
    }
    assert_eq!(
        fixture::snapshot(&tree.outside),
        tree.before_out,
        "outside changed after {raw:?}"
    );
    wrote
}
