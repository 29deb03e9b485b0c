//! Memory paths: `canonical_memory_path` against `std::path`'s own lexical normalisation, every
//! glob that matches a canonical path matching only inside its literal tree, and the memory store
//! never reading or writing through a symlink, so nothing outside the memory root is reached.

use std::path::{Component, Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};
use cyberos::skill::policy::{self, Policy};
use cyberos::tools::memory;

use super::fixture::{self, Recycled, Snapshot};

const NAMES: &[&str] = &[
    "memories", "notes", "link", "link2", "a.md", "file.md", "projects", "x.md", "deep",
];

const GLOBS: &[&str] = &[
    "memories/**",
    "memories/*.md",
    "memories/link/**",
    "**",
    "*",
    "notes/*",
    "memories/projects/**/*.md",
    "link2/**",
    "{memories,notes}/**",
    "memories/file.md/**",
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
struct Input {
    leading_slash: bool,
    segs: Vec<Seg>,
    globs: Vec<GlobSel>,
    /// Written to the path when in scope.
    body: Option<String>,
}

pub(crate) struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    before: Snapshot,
}

/// The memory root with symlinks out of it (relative and absolute) and a regular file where a
/// directory might be expected, beside an `outside` tree nothing may touch.
fn build() -> Tree {
    let (dir, base) = fixture::tempdir("cyberos-fuzz-mem-");
    let root = base.join("memory");
    let outside = base.join("outside");
    fixture::write(&outside.join("secret.md"), "outside\n");
    fixture::write(&root.join("memories/a.md"), "inside\n");
    fixture::write(&root.join("memories/file.md"), "a file\n");
    fixture::write(&root.join("memories/projects/deep/x.md"), "deep\n");
    std::fs::create_dir_all(root.join("notes")).expect("notes");
    fixture::symlink("../../outside", &root.join("memories/link"));
    fixture::symlink(outside.to_str().expect("utf-8"), &root.join("link2"));
    let before = fixture::snapshot(&outside);
    Tree {
        _dir: dir,
        root,
        outside,
        before,
    }
}

static TREE: Recycled<Tree> = Recycled::new(u32::MAX);

/// Lexical normalisation by `std::path`: `.` and empty segments vanish, `..` pops and stops at
/// the root. None when nothing is left.
pub fn reference(raw: &str) -> Option<String> {
    let mut out = PathBuf::new();
    for component in Path::new(raw).components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let text = out.to_str().expect("from a str").to_owned();
    (!text.is_empty()).then_some(text)
}

fn manifest_with_scopes(scopes: Vec<String>) -> cyberos::skill::Manifest {
    let mut m = super::dispatch::base_manifest();
    m.allowed_memory_scopes = scopes;
    m
}

pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut raw = String::new();
    if input.leading_slash {
        raw.push('/');
    }
    let parts: Vec<String> = input
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
    raw.push_str(&parts.join("/"));
    let globs: Vec<String> = input
        .globs
        .iter()
        .map(|sel| match sel {
            GlobSel::Known(i) => GLOBS[usize::from(*i) % GLOBS.len()].to_owned(),
            GlobSel::Raw(r) => r.clone(),
        })
        .collect();
    check(&raw, &globs, input.body.as_deref());
}

/// The whole oracle for one memory path, the scopes' globs, and a body to write when in scope.
pub fn check(raw: &str, globs: &[String], body: Option<&str>) {
    let canonical = match policy::canonical_memory_path(raw) {
        Err(_) => {
            assert!(
                raw.contains('\0') || reference(raw).is_none(),
                "{raw:?} was refused but normalises to {:?}",
                reference(raw)
            );
            return;
        }
        Ok(c) => c,
    };
    assert!(!raw.contains('\0'), "{raw:?} with NUL was accepted");
    assert_eq!(Some(&canonical), reference(raw).as_ref(), "raw {raw:?}");
    assert!(!canonical.starts_with('/'), "{canonical:?} is absolute");
    assert!(
        canonical
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != ".."),
        "{canonical:?} keeps an empty, . or .. segment"
    );
    assert_eq!(
        policy::canonical_memory_path(&canonical).as_deref(),
        Ok(canonical.as_str()),
        "not idempotent"
    );

    // Each glob alone: a match lies in the glob's literal tree.
    let mut compiled_globs = Vec::new();
    for glob in globs {
        let Ok(compiled) = policy::compile_glob(glob) else {
            continue;
        };
        let matched = compiled.compile_matcher().is_match(&canonical);
        if matched {
            let prefix = fixture::literal_segments(glob);
            let segments: Vec<&str> = canonical.split('/').collect();
            assert!(
                segments.starts_with(&prefix),
                "glob {glob:?} matched {canonical:?} outside its tree {prefix:?}"
            );
        }
        compiled_globs.push((glob.clone(), matched));
    }
    let any = compiled_globs.iter().any(|(_, m)| *m);
    let policy = Policy::from_manifest(&manifest_with_scopes(
        compiled_globs.iter().map(|(g, _)| g.clone()).collect(),
    ))
    .expect("globs that compile alone compile together");
    assert_eq!(
        policy.memory_allowed(&canonical),
        any,
        "the policy and its globs disagree on {canonical:?}"
    );
    if !any {
        return;
    }

    let wrote = TREE.with(build, |tree| {
        let rel = Path::new(&canonical);
        if let Ok(body) = memory::read_document(&tree.root, &canonical) {
            let through = fixture::through_symlink(&tree.root, rel);
            assert!(!through, "read {canonical:?} through a symlink: {body:?}");
            let meta = std::fs::symlink_metadata(tree.root.join(rel)).expect("read exists");
            assert!(meta.is_file());
        }
        let mut wrote = false;
        if let Some(body) = body {
            wrote = true;
            let written = memory::write_document(&tree.root, &canonical, body.as_bytes());
            if written.is_ok() {
                // A symlink as the last component is replaced by the rename, never followed;
                // one in a directory component must have stopped the write.
                let through_dir = rel
                    .parent()
                    .is_some_and(|dir| fixture::through_symlink(&tree.root, dir));
                assert!(!through_dir, "wrote {canonical:?} through a symlink");
                let path = tree.root.join(rel);
                assert!(!fixture::through_symlink(&tree.root, rel));
                assert!(std::fs::symlink_metadata(&path).expect("written").is_file());
                assert_eq!(
                    std::fs::read(&path).expect("read back"),
                    body.as_bytes(),
                    "{canonical:?}"
                );
                assert_eq!(
                    memory::read_document(&tree.root, &canonical).as_deref(),
                    Ok(body)
                );
            } else {
                // A refused write leaves no temp file behind.
                if let Some(parent) = tree.root.join(rel).parent() {
                    if let Ok(entries) = std::fs::read_dir(parent) {
                        for e in entries.flatten() {
                            assert!(
                                !memory::is_temp_name(&e.file_name()),
                                "temp file left: {:?}",
                                e.path()
                            );
                        }
                    }
                }
            }
        }
        assert_eq!(
            fixture::snapshot(&tree.outside),
            tree.before,
            "the tree outside the memory root changed ({canonical:?})"
        );
        wrote
    });
    if wrote {
        TREE.discard();
    }
}
