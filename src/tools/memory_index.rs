//! The full-text index behind `MemorySearch`: a SQLite FTS5 table in
//! `$CYBEROS_HOME/memory-index.db`, beside the memory root (never inside it, so it is not itself
//! a memory document). It is a cache of the store and can always be deleted.
//!
//! Freshness without statting every document on every search: each directory's (mtime, inode) is
//! recorded. Creating, deleting or renaming a document (which is how the store and most editors
//! write) changes its directory's mtime, so an unchanged directory's documents are known
//! unchanged and only changed directories are listed again. A change made in place, which leaves
//! the directory alone, is caught by a full re-stat of every document at most
//! [`FULL_CHECK_MS`] after the previous one. Stamps younger than [`RACY_MS`] are not trusted
//! (a change within the same timestamp tick would be invisible), so they are looked at again.
//! Documents are read only through the memory store's symlink-refusing opener and the walk never
//! follows a symlink. This module must never read or index anything outside the memory root.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use crate::tools::ToolError;
use crate::tools::memory;
use crate::util;

/// Every document is re-statted at least this often (in-place edits are seen within it).
pub const FULL_CHECK_MS: i64 = 5000;
/// A stamp this recent may still change within its timestamp tick: do not trust it.
const RACY_MS: i64 = 2000;
/// Bumped when the schema changes; an index of another version is dropped and rebuilt.
const VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS docs (
    id       INTEGER PRIMARY KEY,
    path     TEXT NOT NULL UNIQUE,
    dir      TEXT NOT NULL,
    mtime_ns INTEGER NOT NULL,
    size     INTEGER NOT NULL,
    ino      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_by_dir ON docs (dir);
CREATE TABLE IF NOT EXISTS dirs (
    path     TEXT PRIMARY KEY,
    mtime_ns INTEGER NOT NULL,
    ino      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
    body, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 0'
);
";

const DROP: &str = "
DROP TABLE IF EXISTS docs; DROP TABLE IF EXISTS dirs; DROP TABLE IF EXISTS meta;
DROP TABLE IF EXISTS docs_fts;
";

fn index_err(e: rusqlite::Error) -> ToolError {
    ToolError::failed("index", format!("failed to use the memory index: {e}"))
}

/// What a stat said of a file or directory: equal stamps mean "unchanged".
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    mtime_ns: i64,
    size: i64,
    ino: i64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata, now_ns: i64) -> Self {
        let mtime_ns = meta
            .mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec());
        // A stamp from the last RACY_MS is stored as "unknown" so that it is examined again.
        let mtime_ns = if now_ns.saturating_sub(mtime_ns) < RACY_MS * 1_000_000 {
            -1
        } else {
            mtime_ns
        };
        Self {
            mtime_ns,
            size: meta.size() as i64,
            ino: meta.ino() as i64,
        }
    }
}

impl Stamp {
    /// Known unchanged: equal, and not racy (a racy stamp is always looked at again).
    fn unchanged(&self, other: &Self) -> bool {
        self == other && self.mtime_ns != -1
    }
}

/// `a/b` + `c` → `a/b/c`; the root directory is `""`.
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// `a/b/c` → `a/b`; `c` → `""`.
fn parent(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

/// The half-open range of paths strictly below `dir` (`dir/` ≤ p < `dir0`; '0' follows '/').
fn below(dir: &str) -> (String, String) {
    if dir.is_empty() {
        (String::new(), char::MAX.to_string())
    } else {
        (format!("{dir}/"), format!("{dir}0"))
    }
}

/// One directory listed again: its stamp and its documents.
struct Listed {
    dir: String,
    stamp: Stamp,
    docs: Vec<(String, Stamp)>,
}

pub struct Index {
    conn: Connection,
}

impl Index {
    pub fn open(path: &Path) -> Result<Self, ToolError> {
        let conn = Connection::open(path).map_err(index_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(index_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(index_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(index_err)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(index_err)?;
        if version != VERSION {
            let tx = conn.unchecked_transaction().map_err(index_err)?;
            tx.execute_batch(DROP).map_err(index_err)?;
            tx.execute_batch(SCHEMA).map_err(index_err)?;
            tx.pragma_update(None, "user_version", VERSION)
                .map_err(index_err)?;
            tx.commit().map_err(index_err)?;
        }
        Ok(Self { conn })
    }

    fn meta(&self, key: &str) -> Result<i64, ToolError> {
        let value: Option<i64> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(index_err)?;
        Ok(value.unwrap_or(i64::MIN))
    }

    /// Brings the index up to date for the documents under the memory directory `prefix`
    /// (`""`: all of them).
    pub fn sync(&self, root: &Path, prefix: &str) -> Result<(), ToolError> {
        let now_ms = util::now_ms();
        let now_ns = now_ms.saturating_mul(1_000_000);
        let full_key = format!("full:{prefix}");
        let full =
            now_ms.saturating_sub(self.meta(&full_key)?.max(self.meta("full:")?)) >= FULL_CHECK_MS;
        let known = self.known_dirs(prefix)?;
        let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
        for dir in known
            .keys()
            .filter(|d| !d.is_empty() && d.as_str() != prefix)
        {
            children.entry(parent(dir)).or_default().push(dir);
        }
        let mut listed = Vec::new();
        let mut removed = Vec::new();
        let mut stack = vec![prefix.to_owned()];
        while let Some(dir) = stack.pop() {
            let abs = if dir.is_empty() {
                root.to_path_buf()
            } else {
                root.join(&dir)
            };
            let meta = match std::fs::symlink_metadata(&abs) {
                Ok(m) if m.is_dir() => m,
                // Gone, or replaced by a file or a symlink (never followed).
                _ => {
                    removed.push(dir);
                    continue;
                }
            };
            // The directory is stamped before it is listed: a change during the listing moves
            // its mtime past this stamp and is seen next time.
            let stamp = Stamp {
                size: 0,
                ..Stamp::of(&meta, now_ns)
            };
            let known_children = children
                .get(dir.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            if !full && known.get(&dir).is_some_and(|k| k.unchanged(&stamp)) {
                stack.extend(known_children.iter().map(|c| (*c).to_owned()));
                continue;
            }
            let mut docs = Vec::new();
            let mut subdirs = HashSet::new();
            for entry in std::fs::read_dir(&abs).into_iter().flatten().flatten() {
                let (Ok(ft), Some(name)) = (
                    entry.file_type(),
                    entry.file_name().to_str().map(str::to_owned),
                ) else {
                    continue;
                };
                if ft.is_dir() {
                    subdirs.insert(join(&dir, &name));
                } else if ft.is_file() && !memory::is_temp_name(entry.file_name().as_os_str()) {
                    if let Ok(meta) = entry.metadata() {
                        docs.push((join(&dir, &name), Stamp::of(&meta, now_ns)));
                    }
                }
            }
            removed.extend(
                known_children
                    .iter()
                    .filter(|c| !subdirs.contains(**c))
                    .map(|c| (*c).to_owned()),
            );
            stack.extend(subdirs);
            listed.push(Listed { dir, stamp, docs });
        }
        if listed.is_empty() && removed.is_empty() {
            return Ok(());
        }
        let tx = self.conn.unchecked_transaction().map_err(index_err)?;
        for dir in &removed {
            self.forget_dir(dir)?;
        }
        for entry in &listed {
            self.update_dir(root, entry)?;
        }
        if full {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = ?2",
                params![full_key, now_ms],
            )
            .map_err(index_err)?;
        }
        tx.commit().map_err(index_err)
    }

    /// Directories recorded at or below `prefix`.
    fn known_dirs(&self, prefix: &str) -> Result<HashMap<String, Stamp>, ToolError> {
        let (low, high) = below(prefix);
        let mut stmt = self
            .conn
            .prepare_cached("SELECT path, mtime_ns, ino FROM dirs WHERE path = ?1 OR (path >= ?2 AND path < ?3)")
            .map_err(index_err)?;
        let rows = stmt
            .query_map(params![prefix, low, high], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    Stamp {
                        mtime_ns: r.get(1)?,
                        size: 0,
                        ino: r.get(2)?,
                    },
                ))
            })
            .map_err(index_err)?;
        rows.collect::<Result<_, _>>().map_err(index_err)
    }

    /// Drops a directory that is gone, with everything recorded below it.
    fn forget_dir(&self, dir: &str) -> Result<(), ToolError> {
        let (low, high) = below(dir);
        let c = &self.conn;
        c.execute(
            "DELETE FROM docs_fts WHERE rowid IN (SELECT id FROM docs WHERE path >= ?1 AND path < ?2)",
            params![low, high],
        )
        .map_err(index_err)?;
        c.execute(
            "DELETE FROM docs WHERE path >= ?1 AND path < ?2",
            params![low, high],
        )
        .map_err(index_err)?;
        c.execute(
            "DELETE FROM dirs WHERE path = ?1 OR (path >= ?2 AND path < ?3)",
            params![dir, low, high],
        )
        .map_err(index_err)?;
        Ok(())
    }

    /// Re-reads the documents of a listed directory whose stamps changed and drops those gone.
    fn update_dir(&self, root: &Path, listed: &Listed) -> Result<(), ToolError> {
        let c = &self.conn;
        let mut known: HashMap<String, (i64, Stamp)> = HashMap::new();
        {
            let mut stmt = c
                .prepare_cached("SELECT id, path, mtime_ns, size, ino FROM docs WHERE dir = ?1")
                .map_err(index_err)?;
            let rows = stmt
                .query_map(params![listed.dir], |r| {
                    let stamp = Stamp {
                        mtime_ns: r.get(2)?,
                        size: r.get(3)?,
                        ino: r.get(4)?,
                    };
                    Ok((r.get::<_, String>(1)?, (r.get::<_, i64>(0)?, stamp)))
                })
                .map_err(index_err)?;
            for row in rows {
                let (path, entry) = row.map_err(index_err)?;
                known.insert(path, entry);
            }
        }
        let seen: HashSet<&str> = listed.docs.iter().map(|(p, _)| p.as_str()).collect();
        for (path, (id, _)) in &known {
            if !seen.contains(path.as_str()) {
                delete_doc(c, *id)?;
            }
        }
        for (path, stamp) in &listed.docs {
            let old = known.get(path);
            if old.is_some_and(|(_, s)| s.unchanged(stamp)) {
                continue;
            }
            if let Some((id, _)) = old {
                delete_doc(c, *id)?;
            }
            // Unreadable now (raced away, became a symlink, not UTF-8): not indexed, and looked
            // at again when its stamp changes.
            let Ok(body) = memory::read_document(root, path) else {
                continue;
            };
            c.execute(
                "INSERT INTO docs (path, dir, mtime_ns, size, ino) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![path, listed.dir, stamp.mtime_ns, stamp.size, stamp.ino],
            )
            .map_err(index_err)?;
            let id = c.last_insert_rowid();
            c.execute(
                "INSERT INTO docs_fts (rowid, body) VALUES (?1, ?2)",
                params![id, body],
            )
            .map_err(index_err)?;
        }
        c.execute(
            "INSERT INTO dirs (path, mtime_ns, ino) VALUES (?1, ?2, ?3)
             ON CONFLICT (path) DO UPDATE SET mtime_ns = ?2, ino = ?3",
            params![listed.dir, listed.stamp.mtime_ns, listed.stamp.ino],
        )
        .map_err(index_err)?;
        Ok(())
    }

    /// Documents holding every term, best first (positive BM25 score), until `visit` says stop.
    /// Rows are produced lazily: a search that finds its results early reads no further.
    pub fn query(
        &self,
        terms: &[String],
        mut visit: impl FnMut(&str, f64) -> bool,
    ) -> Result<(), ToolError> {
        // Each term quoted, so query syntax in the input is only ever text.
        let query = terms
            .iter()
            .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" ");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT rowid, rank FROM docs_fts WHERE docs_fts MATCH ?1 ORDER BY rank",
            )
            .map_err(index_err)?;
        let mut path_of = self
            .conn
            .prepare_cached("SELECT path FROM docs WHERE id = ?1")
            .map_err(index_err)?;
        let mut rows = stmt.query(params![query]).map_err(index_err)?;
        while let Some(row) = rows.next().map_err(index_err)? {
            let (id, rank): (i64, f64) = (
                row.get(0).map_err(index_err)?,
                row.get(1).map_err(index_err)?,
            );
            let path: Option<String> = path_of
                .query_row(params![id], |r| r.get(0))
                .optional()
                .map_err(index_err)?;
            if let Some(path) = path {
                if !visit(&path, -rank) {
                    break;
                }
            }
        }
        Ok(())
    }
}

fn delete_doc(c: &Connection, id: i64) -> Result<(), ToolError> {
    c.execute("DELETE FROM docs_fts WHERE rowid = ?1", params![id])
        .map_err(index_err)?;
    c.execute("DELETE FROM docs WHERE id = ?1", params![id])
        .map_err(index_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matching(index: &Index, term: &str) -> Vec<String> {
        let mut out = Vec::new();
        index
            .query(&[term.to_owned()], |p, _| {
                out.push(p.to_owned());
                true
            })
            .unwrap();
        out.sort();
        out
    }

    /// Sets a file's or directory's mtime an hour back, out of the racy window.
    fn age(path: &Path) {
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::open(path)
            .unwrap()
            .set_modified(past)
            .unwrap();
    }

    fn not_full(index: &Index) {
        index
            .conn
            .execute("UPDATE meta SET value = ?1", params![util::now_ms()])
            .unwrap();
    }

    #[test]
    fn unchanged_directories_are_skipped_until_a_full_check() {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("memory");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/one.md"), "alpha\n").unwrap();
        for p in ["a/b/one.md", "a/b", "a", ""] {
            age(&root.join(p));
        }
        let index = Index::open(&home.path().join("i.db")).unwrap();
        index.sync(&root, "").unwrap();
        assert_eq!(matching(&index, "alpha"), ["a/b/one.md"]);
        // An in-place edit leaves the directory alone: invisible until the next full check.
        std::fs::write(root.join("a/b/one.md"), "gamma\n").unwrap();
        age(&root.join("a/b/one.md"));
        not_full(&index);
        index.sync(&root, "").unwrap();
        assert_eq!(
            matching(&index, "alpha"),
            ["a/b/one.md"],
            "skipped: directory unchanged"
        );
        index.conn.execute("UPDATE meta SET value = 0", []).unwrap();
        index.sync(&root, "").unwrap();
        assert_eq!(matching(&index, "gamma"), ["a/b/one.md"]);
        assert!(matching(&index, "alpha").is_empty());
        // A new document moves its directory's mtime: seen at once, without a full check.
        not_full(&index);
        std::fs::write(root.join("a/b/two.md"), "gamma beta\n").unwrap();
        index.sync(&root, "").unwrap();
        assert_eq!(matching(&index, "gamma"), ["a/b/one.md", "a/b/two.md"]);
        // A removed directory takes its documents with it.
        std::fs::remove_dir_all(root.join("a/b")).unwrap();
        index.sync(&root, "").unwrap();
        assert!(matching(&index, "gamma").is_empty());
        // A directory replaced by a symlink is dropped, never followed.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("s.md"), "gamma\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("a/b")).unwrap();
        index.sync(&root, "").unwrap();
        assert!(matching(&index, "gamma").is_empty());
    }

    #[test]
    fn a_recent_in_place_edit_of_the_same_size_is_seen() {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("memory");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("d.md"), "alpha\n").unwrap();
        let index = Index::open(&home.path().join("i.db")).unwrap();
        index.sync(&root, "").unwrap();
        std::fs::write(root.join("d.md"), "gamma\n").unwrap();
        not_full(&index);
        index.sync(&root, "").unwrap();
        assert_eq!(matching(&index, "gamma"), ["d.md"]);
        assert!(matching(&index, "alpha").is_empty());
    }

    #[test]
    fn an_index_of_another_version_is_rebuilt() {
        let home = tempfile::tempdir().unwrap();
        let db = home.path().join("i.db");
        {
            let c = Connection::open(&db).unwrap();
            c.execute_batch("CREATE TABLE docs (x); PRAGMA user_version = 1;")
                .unwrap();
        }
        let index = Index::open(&db).unwrap();
        let v: i64 = index
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, VERSION);
    }
}
