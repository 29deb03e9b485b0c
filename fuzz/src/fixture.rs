//! Temporary directory trees shared by the oracles: built once, rebuilt every so many runs so
//! that what the tools write cannot pile up, and snapshots to prove a tree was not touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A fixture rebuilt after `every` uses (and after a panic, which may have left it half-changed).
pub struct Recycled<T> {
    slot: Mutex<Option<(T, u32)>>,
    every: u32,
}

impl<T> Recycled<T> {
    pub const fn new(every: u32) -> Self {
        Self {
            slot: Mutex::new(None),
            every,
        }
    }

    /// Runs `f` on the fixture, building it with `build` first when needed.
    pub fn with<R>(&self, build: impl FnOnce() -> T, f: impl FnOnce(&mut T) -> R) -> R {
        let mut slot = self.slot.lock().unwrap_or_else(|poisoned| {
            let mut slot = poisoned.into_inner();
            *slot = None;
            slot
        });
        if slot.as_ref().is_none_or(|(_, uses)| *uses >= self.every) {
            // Drop the old tree before building the new one.
            *slot = None;
            *slot = Some((build(), 0));
        }
        let (value, uses) = slot.as_mut().expect("just built");
        *uses += 1;
        f(value)
    }

    /// Drops the fixture, so the next run starts from a fresh one (after a run changed it).
    pub fn discard(&self) {
        *self
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// A fresh temporary directory and its canonical path (the oracles compare canonical paths).
pub fn tempdir(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("tempdir");
    let path = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
    (dir, path)
}

pub fn write(path: &Path, contents: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, contents).expect("write fixture file");
}

pub fn symlink(target: &str, link: &Path) {
    std::fs::create_dir_all(link.parent().expect("parent")).expect("mkdir");
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

/// What a tree holds, without following symlinks: every entry's relative path and its kind and
/// contents (a file's bytes, a link's target).
pub type Snapshot = BTreeMap<PathBuf, String>;

pub fn snapshot(root: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let rel = path.strip_prefix(root).expect("under root").to_path_buf();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let ft = meta.file_type();
        let what = if ft.is_symlink() {
            format!("link {:?}", std::fs::read_link(&path).ok())
        } else if ft.is_dir() {
            walk(root, &path, out);
            "dir".to_owned()
        } else if ft.is_file() {
            format!("file {:?}", std::fs::read(&path).ok())
        } else {
            "other".to_owned()
        };
        out.insert(rel, what);
    }
}

/// Does the relative path `rel` pass through a symlink below `root` (its final component
/// included)? `lstat` of every prefix, so the answer is what is on disk now.
pub fn through_symlink(root: &Path, rel: &Path) -> bool {
    let mut path = root.to_path_buf();
    for component in rel.components() {
        path.push(component);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

/// The directory segments of a glob before its first segment holding a meta character: every
/// path the glob matches lies in that tree.
pub fn literal_segments(glob: &str) -> Vec<&str> {
    glob.split('/')
        .take_while(|s| !s.contains(['*', '?', '[', ']', '{', '}', '\\']))
        .collect()
}
