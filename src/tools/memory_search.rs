//! `MemorySearch` (CONTRACT §5): full-text search over the memory store, every query term
//! required, ranked by BM25 (term frequency with a document-length norm).
//!
//! The index ([`memory_index`](super::memory_index)) is brought up to date for the searched part
//! of the tree before each search; documents are read only through the same symlink-refusing
//! opener as `MemoryRead`, each result is read again before it is returned, and every result is
//! filtered by `allowed_memory_scopes` (and the `path` prefix).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::memory::{self, checked_memory_path};
use crate::tools::memory_index::Index;
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
        index.sync(root, req.prefix.as_deref().unwrap_or(""))?;
        let policy = &ctx.invocation.policy;
        let under = |path: &str| match &req.prefix {
            None => true,
            Some(p) => path
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
        };
        let mut results = Vec::new();
        let mut truncated = false;
        index.query(&req.terms, |path, score| {
            if !under(path) || !policy.memory_allowed(path) {
                return true;
            }
            // The document is read again through the safe opener; one that vanished or became a
            // symlink since the index saw it is not a result.
            let Ok(body) = memory::read_document(root, path) else {
                return true;
            };
            if results.len() == req.limit {
                truncated = true;
                return false;
            }
            let (line, snippet) = locate(&body, &req.terms);
            results.push(json!({"path": path, "score": score, "line": line, "snippet": snippet}));
            true
        })?;
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

    /// Measurement, not a pass/fail timing:
    /// `cargo test --release --lib memory_search_scale -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn memory_search_scale() {
        use crate::tools::memory_index::Index;
        use std::time::{Duration, Instant, SystemTime};
        let fx = Fixture::new(Allow {
            memory: &["memories/**"],
            ..Default::default()
        });
        let words = [
            "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
        ];
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let t = Instant::now();
        let mut x = 88172645463325252u64;
        for i in 0..100_000usize {
            let dir = fx.memory().join(format!("memories/d{}", i % 100));
            if i < 100 {
                std::fs::create_dir_all(&dir).unwrap();
            }
            // 200 words from a xorshift stream: each document holds a given word with p ≈ 1-0.9^200.
            let body: String = (0..200)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    words[(x % 10) as usize]
                })
                .collect::<Vec<_>>()
                .join(" ");
            let path = dir.join(format!("n{i}.md"));
            std::fs::write(&path, format!("note {i}\n{body}\nunique{i}\n")).unwrap();
            // An existing store, not one written this second.
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
        for d in 0..100 {
            let dir = fx.memory().join(format!("memories/d{d}"));
            std::fs::File::open(&dir)
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
        eprintln!("wrote 100k documents in {:?}", t.elapsed());
        let db = index_path(fx.memory());
        let root = fx.memory().to_path_buf();
        let set_full = |ms: i64| {
            let c = rusqlite::Connection::open(&db).unwrap();
            c.execute("UPDATE meta SET value = ?1", rusqlite::params![ms])
                .unwrap();
        };
        let time = |label: &str, f: &mut dyn FnMut()| {
            let t = Instant::now();
            f();
            eprintln!("{label}: {:?}", t.elapsed());
        };
        time("first search, builds the index", &mut || {
            fx.run(&MemorySearch, json!({"query": "alpha gamma"}))
                .unwrap();
        });
        let index = Index::open(&db).unwrap();
        set_full(0);
        time("sync with a full re-stat of 100k documents", &mut || {
            index.sync(&root, "").unwrap()
        });
        set_full(crate::util::now_ms());
        time("sync, nothing changed (directory stamps only)", &mut || {
            index.sync(&root, "").unwrap()
        });
        fx.run(
            &crate::tools::memory::MemoryEmit,
            json!({"path": "memories/d3/new.md", "body": "zebra crossing"}),
        )
        .unwrap();
        set_full(crate::util::now_ms());
        time("sync after a MemoryEmit", &mut || {
            index.sync(&root, "").unwrap()
        });
        for (label, terms) in [
            ("query, 1 match", vec!["zebra"]),
            ("query, ~100k matches", vec!["alpha", "gamma"]),
        ] {
            let terms: Vec<String> = terms.into_iter().map(str::to_owned).collect();
            time(label, &mut || {
                let mut n = 0;
                index
                    .query(&terms, |_, _| {
                        n += 1;
                        n <= 20
                    })
                    .unwrap();
            });
        }
        set_full(crate::util::now_ms());
        time(
            "whole MemorySearch call, rare term, no full check due",
            &mut || {
                fx.run(&MemorySearch, json!({"query": "unique4242"}))
                    .unwrap();
            },
        );
        set_full(crate::util::now_ms());
        time(
            "whole MemorySearch call, common terms, no full check due",
            &mut || {
                fx.run(&MemorySearch, json!({"query": "alpha gamma"}))
                    .unwrap();
            },
        );
        set_full(crate::util::now_ms());
        time(
            "whole MemorySearch call under one directory (1k docs)",
            &mut || {
                fx.run(
                    &MemorySearch,
                    json!({"query": "alpha", "path": "memories/d7"}),
                )
                .unwrap();
            },
        );
    }
}
