//! `MemorySearch` (CONTRACT §5): full-text search over the memory store, every query term
//! required, ranked by BM25 (term frequency with a document-length norm).
//!
//! The index is a SQLite FTS5 table in `$CYBEROS_HOME/memory-index.db` (beside the memory root,
//! never inside it, so it is not itself a memory document). It is a cache: before each search the
//! part of the tree being searched is walked and any document whose (mtime, size, inode) changed
//! is re-read, so a search always sees the store as it is. Documents are read through the same
//! symlink-refusing opener as `MemoryRead`; the walk never follows a symlink. Every result is
//! filtered by `allowed_memory_scopes` before it is returned. Deleting the index file is always
//! safe: the next search rebuilds it.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::memory::{self, checked_memory_path};
use crate::tools::{CallContext, Tool, ToolError, ToolName, parse_args};

/// Results returned when the call does not say.
const DEFAULT_LIMIT: usize = 20;
/// Results returned at most whatever the call says.
const MAX_LIMIT: usize = 1000;
/// Characters of context in a snippet.
const SNIPPET_CHARS: usize = 200;

pub struct MemorySearch;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

struct Request {
    terms: Vec<String>,
    /// Canonical directory prefix the results must lie under.
    prefix: Option<String>,
    limit: usize,
}

fn request(ctx: &CallContext<'_>, args: &Value) -> Result<Request, ToolError> {
    let args: SearchArgs = parse_args(args)?;
    let terms = terms(&args.query);
    if terms.is_empty() {
        return Err(ToolError::invalid(
            "query has no searchable terms (letters or digits)",
        ));
    }
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ToolError::invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let prefix = match &args.path {
        None => None,
        Some(raw) => Some(checked_prefix(ctx, raw)?),
    };
    Ok(Request {
        terms,
        prefix,
        limit,
    })
}

/// A search prefix is in scope when the scopes allow the path itself or something directly
/// beneath it (`memories/p` under the scope `memories/p/**`); each result is filtered anyway.
fn checked_prefix(ctx: &CallContext<'_>, raw: &str) -> Result<String, ToolError> {
    match checked_memory_path(ctx, raw) {
        Ok(path) => Ok(path),
        Err(ToolError::Scope { path }) => {
            let policy = &ctx.invocation.policy;
            if policy.memory_allowed(&format!("{path}/"))
                || policy.memory_allowed(&format!("{path}/x"))
            {
                Ok(path)
            } else {
                Err(ToolError::Scope { path })
            }
        }
        Err(e) => Err(e),
    }
}

/// The query's terms as the index tokenizes them (unicode61: runs of letters and digits,
/// case-folded), deduplicated.
fn terms(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    tokens(text).filter(|t| seen.insert(t.clone())).collect()
}

fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

impl Tool for MemorySearch {
    fn name(&self) -> ToolName {
        ToolName::MemorySearch
    }

    fn description(&self) -> &'static str {
        "Search memory documents in scope: every term must appear; ranked by BM25"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words; all must appear"},
                "path": {"type": "string", "description": "only documents under this memory directory"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        request(ctx, args).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let req = request(ctx, args)?;
        let root = &ctx.invocation.memory_root;
        let index = Index::open(&index_path(root))?;
        index.sync(root, req.prefix.as_deref())?;
        let policy = &ctx.invocation.policy;
        let under = |path: &str| match &req.prefix {
            None => true,
            Some(p) => path
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
        };
        let mut results = Vec::new();
        let mut truncated = false;
        for (path, score) in index.query(&req.terms)? {
            if !under(&path) || !policy.memory_allowed(&path) {
                continue;
            }
            // The document is read again through the safe opener; one that vanished or became a
            // symlink since the index saw it is not a result.
            let Ok(body) = memory::read_document(root, &path) else {
                continue;
            };
            if results.len() == req.limit {
                truncated = true;
                break;
            }
            let (line, snippet) = locate(&body, &req.terms);
            results.push(json!({"path": path, "score": score, "line": line, "snippet": snippet}));
        }
        Ok(json!({"results": results, "truncated": truncated}))
    }
}

/// `$CYBEROS_HOME/memory-index.db` for the memory root `$CYBEROS_HOME/memory`.
pub fn index_path(memory_root: &Path) -> PathBuf {
    memory_root.with_file_name("memory-index.db")
}

/// The first line holding a query term (1-based), and a snippet of it around that term.
fn locate(body: &str, terms: &[String]) -> (usize, String) {
    for (i, line) in body.lines().enumerate() {
        let lower = line.to_lowercase();
        if tokens(&lower).any(|t| terms.contains(&t)) {
            return (i + 1, snippet(line, terms));
        }
    }
    (1, snippet(body.lines().next().unwrap_or(""), terms))
}

fn snippet(line: &str, terms: &[String]) -> String {
    let line = line.trim();
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= SNIPPET_CHARS {
        return line.to_owned();
    }
    let lower = line.to_lowercase();
    let hit = terms
        .iter()
        .filter_map(|t| lower.find(t.as_str()))
        .min()
        .unwrap_or(0);
    // Byte offset in the lowercased text ≈ char offset in the original for the snippet window.
    let hit_chars = lower[..hit].chars().count().min(chars.len());
    let start = hit_chars.saturating_sub(SNIPPET_CHARS / 4);
    let end = (start + SNIPPET_CHARS).min(chars.len());
    let mut out: String = chars[start..end].iter().collect();
    if start > 0 {
        out.insert(0, '…');
    }
    if end < chars.len() {
        out.push('…');
    }
    out
}

struct Index {
    conn: Connection,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS docs (
    id       INTEGER PRIMARY KEY,
    path     TEXT NOT NULL UNIQUE,
    mtime_ns INTEGER NOT NULL,
    size     INTEGER NOT NULL,
    ino      INTEGER NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
    body, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 0'
);
";

/// What the walk saw of one document.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    mtime_ns: i64,
    size: i64,
    ino: i64,
}

fn index_err(e: rusqlite::Error) -> ToolError {
    ToolError::failed("index", format!("failed to use the memory index: {e}"))
}

impl Index {
    fn open(path: &Path) -> Result<Self, ToolError> {
        let conn = Connection::open(path).map_err(index_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(index_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(index_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(index_err)?;
        conn.execute_batch(SCHEMA).map_err(index_err)?;
        Ok(Self { conn })
    }

    /// Brings the index up to date for the documents under `prefix` (all when `None`).
    fn sync(&self, root: &Path, prefix: Option<&str>) -> Result<(), ToolError> {
        let mut seen: HashMap<String, Stamp> = HashMap::new();
        let start = match prefix {
            Some(p) => root.join(p),
            None => root.to_path_buf(),
        };
        walk(root, &start, &mut seen);
        let mut known: HashMap<String, (i64, Stamp)> = HashMap::new();
        {
            // Paths under `p/` sort between `p/` and `p0` ('0' follows '/').
            let (low, high) = match prefix {
                Some(p) => (format!("{p}/"), format!("{p}0")),
                None => (String::new(), char::MAX.to_string()),
            };
            let mut stmt = self
                .conn
                .prepare_cached(
                    "SELECT id, path, mtime_ns, size, ino FROM docs WHERE path >= ?1 AND path < ?2",
                )
                .map_err(index_err)?;
            let rows = stmt
                .query_map(params![low, high], |r| {
                    Ok((
                        r.get::<_, String>(1)?,
                        (
                            r.get(0)?,
                            Stamp {
                                mtime_ns: r.get(2)?,
                                size: r.get(3)?,
                                ino: r.get(4)?,
                            },
                        ),
                    ))
                })
                .map_err(index_err)?;
            for row in rows {
                let (path, entry) = row.map_err(index_err)?;
                known.insert(path, entry);
            }
        }
        let in_walk = |path: &str| match prefix {
            None => true,
            Some(p) => path
                .strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
        };
        let gone: Vec<i64> = known
            .iter()
            .filter(|(p, _)| in_walk(p) && !seen.contains_key(*p))
            .map(|(_, (id, _))| *id)
            .collect();
        let changed: Vec<(&String, &Stamp)> = seen
            .iter()
            .filter(|(p, stamp)| known.get(*p).is_none_or(|(_, s)| s != *stamp))
            .collect();
        if gone.is_empty() && changed.is_empty() {
            return Ok(());
        }
        let tx = self.conn.unchecked_transaction().map_err(index_err)?;
        for id in gone {
            tx.execute("DELETE FROM docs_fts WHERE rowid = ?1", params![id])
                .map_err(index_err)?;
            tx.execute("DELETE FROM docs WHERE id = ?1", params![id])
                .map_err(index_err)?;
        }
        for (path, stamp) in changed {
            // Another search may have indexed it meanwhile: always replace by path.
            let old: Option<i64> = tx
                .query_row("SELECT id FROM docs WHERE path = ?1", params![path], |r| {
                    r.get(0)
                })
                .ok();
            if let Some(id) = old {
                tx.execute("DELETE FROM docs_fts WHERE rowid = ?1", params![id])
                    .map_err(index_err)?;
                tx.execute("DELETE FROM docs WHERE id = ?1", params![id])
                    .map_err(index_err)?;
            }
            // Unreadable now (raced away, became a symlink, not UTF-8 past repair): not indexed,
            // and picked up again when it changes.
            let Ok(body) = read_for_index(root, path) else {
                continue;
            };
            tx.execute(
                "INSERT INTO docs (path, mtime_ns, size, ino) VALUES (?1, ?2, ?3, ?4)",
                params![path, stamp.mtime_ns, stamp.size, stamp.ino],
            )
            .map_err(index_err)?;
            let id = tx.last_insert_rowid();
            tx.execute(
                "INSERT INTO docs_fts (rowid, body) VALUES (?1, ?2)",
                params![id, body],
            )
            .map_err(index_err)?;
        }
        tx.commit().map_err(index_err)
    }

    /// Every indexed document holding all `terms`, best first, with a positive score.
    fn query(&self, terms: &[String]) -> Result<Vec<(String, f64)>, ToolError> {
        // Each term quoted, so query syntax in the input is only ever text.
        let query = terms
            .iter()
            .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" ");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT d.path, bm25(docs_fts) AS rank FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid
                 WHERE docs_fts MATCH ?1 ORDER BY rank, d.path",
            )
            .map_err(index_err)?;
        let rows = stmt
            .query_map(params![query], |r| {
                Ok((r.get::<_, String>(0)?, -r.get::<_, f64>(1)?))
            })
            .map_err(index_err)?;
        rows.collect::<Result<_, _>>().map_err(index_err)
    }
}

fn read_for_index(root: &Path, path: &str) -> Result<String, ToolError> {
    memory::read_document(root, path)
}

/// Every regular file under `dir` (never through a symlink), by canonical memory path.
fn walk(root: &Path, dir: &Path, out: &mut HashMap<String, Stamp>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        let path = entry.path();
        if ft.is_dir() {
            walk(root, &path, out);
        } else if ft.is_file() && !memory::is_temp_name(&entry.file_name()) {
            let Some(rel) = path.strip_prefix(root).ok().and_then(Path::to_str) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            let mtime_ns = meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec());
            out.insert(
                rel.to_owned(),
                Stamp {
                    mtime_ns,
                    size: meta.size() as i64,
                    ino: meta.ino() as i64,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::memory::MemoryEmit;
    use crate::tools::testutil::{Allow, Fixture, tempdir};

    fn put(fx: &Fixture, path: &str, body: &str) {
        let full = fx.memory().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, body).unwrap();
    }

    fn paths(out: &Value) -> Vec<String> {
        out["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["path"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn all_terms_must_appear_and_results_are_ranked() {
        let fx = Fixture::new(Allow {
            memory: &["memories/**"],
            ..Default::default()
        });
        put(
            &fx,
            "memories/a.md",
            "rust sandbox\nthe broker checks every call\n",
        );
        put(&fx, "memories/b.md", "broker broker broker sandbox\n");
        put(&fx, "memories/c.md", "only the broker\n");
        let out = fx
            .run(&MemorySearch, json!({"query": "Broker SANDBOX"}))
            .unwrap();
        assert_eq!(paths(&out), ["memories/b.md", "memories/a.md"]);
        assert_eq!(out["truncated"], false);
        let a = &out["results"][1];
        assert_eq!(a["line"], 1);
        assert_eq!(a["snippet"], "rust sandbox");
        assert!(out["results"][0]["score"].as_f64().unwrap() > a["score"].as_f64().unwrap());
        let out = fx
            .run(&MemorySearch, json!({"query": "broker", "limit": 2}))
            .unwrap();
        assert_eq!(out["results"].as_array().unwrap().len(), 2);
        assert_eq!(out["truncated"], true);
        // Query syntax is text, not operators.
        let out = fx
            .run(&MemorySearch, json!({"query": "broker OR NOT \"sandbox*"}))
            .unwrap();
        assert!(paths(&out).is_empty());
        assert!(matches!(
            fx.run(&MemorySearch, json!({"query": "  ,. "})),
            Err(ToolError::InvalidArgs(_))
        ));
    }

    #[test]
    fn the_index_follows_changes_on_disk() {
        let fx = Fixture::new(Allow {
            memory: &["memories/**"],
            ..Default::default()
        });
        put(&fx, "memories/a.md", "alpha\n");
        assert_eq!(
            paths(&fx.run(&MemorySearch, json!({"query": "alpha"})).unwrap()),
            ["memories/a.md"]
        );
        put(&fx, "memories/a.md", "beta gamma\n");
        assert!(paths(&fx.run(&MemorySearch, json!({"query": "alpha"})).unwrap()).is_empty());
        fx.run(
            &MemoryEmit,
            json!({"path": "memories/new/n.md", "body": "gamma\n"}),
        )
        .unwrap();
        let mut found = paths(&fx.run(&MemorySearch, json!({"query": "gamma"})).unwrap());
        found.sort();
        assert_eq!(found, ["memories/a.md", "memories/new/n.md"]);
        std::fs::remove_file(fx.memory().join("memories/a.md")).unwrap();
        assert_eq!(
            paths(&fx.run(&MemorySearch, json!({"query": "gamma"})).unwrap()),
            ["memories/new/n.md"]
        );
    }

    #[test]
    fn results_and_the_path_are_filtered_by_scope() {
        let fx = Fixture::new(Allow {
            memory: &["memories/projects/cyberos/**"],
            ..Default::default()
        });
        put(&fx, "memories/projects/cyberos/x.md", "secret plan\n");
        put(&fx, "memories/people/y.md", "secret plan\n");
        let out = fx.run(&MemorySearch, json!({"query": "secret"})).unwrap();
        assert_eq!(paths(&out), ["memories/projects/cyberos/x.md"]);
        let out = fx
            .run(
                &MemorySearch,
                json!({"query": "secret", "path": "memories/projects/cyberos"}),
            )
            .unwrap();
        assert_eq!(paths(&out), ["memories/projects/cyberos/x.md"]);
        for path in [
            "memories/people",
            "memories/projects/cyberos/../../people",
            "memories",
        ] {
            match fx.run(&MemorySearch, json!({"query": "secret", "path": path})) {
                Err(ToolError::Scope { .. }) => {}
                other => panic!("{path}: {other:?}"),
            }
        }
    }

    #[test]
    fn symlinks_in_the_memory_tree_are_not_searched() {
        let fx = Fixture::new(Allow {
            memory: &["memories/**"],
            ..Default::default()
        });
        let (_o, outside) = tempdir();
        std::fs::write(outside.join("s.md"), "topsecret\n").unwrap();
        std::fs::create_dir_all(fx.memory().join("memories")).unwrap();
        std::os::unix::fs::symlink(outside.join("s.md"), fx.memory().join("memories/f.md"))
            .unwrap();
        std::os::unix::fs::symlink(&outside, fx.memory().join("memories/d")).unwrap();
        assert!(
            paths(
                &fx.run(&MemorySearch, json!({"query": "topsecret"}))
                    .unwrap()
            )
            .is_empty()
        );
    }

    /// Measurement, not a pass/fail timing: `cargo test --release --lib memory_search_scale -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn memory_search_scale() {
        let fx = Fixture::new(Allow {
            memory: &["memories/**"],
            ..Default::default()
        });
        let words = [
            "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
        ];
        let t = std::time::Instant::now();
        for i in 0..100_000usize {
            let dir = fx.memory().join(format!("memories/d{}", i % 100));
            if i < 100 {
                std::fs::create_dir_all(&dir).unwrap();
            }
            let body: String = (0..200)
                .map(|j| words[(i * 7 + j * 13 + j * j) % words.len()])
                .collect::<Vec<_>>()
                .join(" ");
            std::fs::write(
                dir.join(format!("n{i}.md")),
                format!("note {i}\n{body}\nunique{i}\n"),
            )
            .unwrap();
        }
        eprintln!("wrote 100k documents in {:?}", t.elapsed());
        for label in [
            "first search (builds the index)",
            "second search",
            "third search",
        ] {
            let t = std::time::Instant::now();
            let out = fx
                .run(&MemorySearch, json!({"query": "alpha gamma"}))
                .unwrap();
            eprintln!(
                "{label}: {:?}, {} results",
                t.elapsed(),
                out["results"].as_array().unwrap().len()
            );
        }
        let t = std::time::Instant::now();
        let out = fx
            .run(&MemorySearch, json!({"query": "unique4242"}))
            .unwrap();
        eprintln!(
            "rare term: {:?} -> {}",
            t.elapsed(),
            out["results"][0]["path"]
        );
        let t = std::time::Instant::now();
        let out = fx
            .run(
                &MemorySearch,
                json!({"query": "alpha", "path": "memories/d7"}),
            )
            .unwrap();
        eprintln!(
            "under one directory (1k docs): {:?}, {} results",
            t.elapsed(),
            out["results"].as_array().unwrap().len()
        );
    }
}
