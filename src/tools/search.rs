//! The file search tools `Glob` and `Grep` (CONTRACT §5) on the ripgrep crates (`ignore` for
//! the walk, `grep-regex` + `grep-searcher` for matching). The walk never follows a symlink and
//! never descends into a directory that no `x-allowed-files` glob could match below; every path
//! is checked against the globs before it is returned, and Grep opens each file with the same
//! symlink-refusing, type-checking opener as Read. No ignore files are honoured: a skill asked
//! for a tree and gets the whole tree it may see. These tools must never return or read a path
//! outside `x-allowed-files`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use globset::GlobMatcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::{DirEntry, WalkBuilder, WalkState};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::skill::policy::{Policy, compile_glob};
use crate::tools::fsutil;
use crate::tools::{CallContext, Tool, ToolError, ToolName, parse_args};

/// Matches returned when the call does not say.
const DEFAULT_LIMIT: usize = 1000;
/// Matches returned at most whatever the call says (results stay far below the 16 MiB frame).
const MAX_LIMIT: usize = 10_000;
/// A matched line longer than this is cut (at a character boundary).
const MAX_LINE_BYTES: usize = 1024;

fn limit(requested: Option<usize>, field: &str) -> Result<usize, ToolError> {
    match requested {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ToolError::invalid(format!(
            "{field} must be between 1 and {MAX_LIMIT}"
        ))),
    }
}

fn shown(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// A canonical search root: refused when no allowed tree lies at or below or above it.
fn checked_root(ctx: &CallContext<'_>, raw: &str) -> Result<PathBuf, ToolError> {
    let root = fsutil::canonical_file_path(raw)?;
    if !ctx.invocation.policy.file_tree_allowed(&root) {
        return Err(ToolError::File { path: shown(&root) });
    }
    Ok(root)
}

/// The walk shared by both tools: no ignore files, no hidden-file filter, no symlinks followed,
/// and no descent into a directory outside every allowed tree.
fn walker(root: &Path, policy: &Arc<Policy>, max_depth: Option<usize>) -> WalkBuilder {
    let mut builder = WalkBuilder::new(root);
    builder
        .standard_filters(false)
        .follow_links(false)
        .max_depth(max_depth);
    let policy = Arc::clone(policy);
    builder.filter_entry(move |entry| {
        !entry.file_type().is_some_and(|ft| ft.is_dir()) || policy.file_tree_allowed(entry.path())
    });
    builder
}

pub struct Glob;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    pattern: String,
    #[serde(default)]
    limit: Option<usize>,
}

struct GlobRequest {
    /// The canonical directory (or file) the pattern's literal prefix names.
    root: PathBuf,
    /// The rest of the pattern, relative to `root` (None: the pattern is a literal path).
    rest: Option<GlobMatcher>,
    depth: Option<usize>,
    limit: usize,
}

fn glob_request(ctx: &CallContext<'_>, args: &Value) -> Result<GlobRequest, ToolError> {
    let args: GlobArgs = parse_args(args)?;
    let limit = limit(args.limit, "limit")?;
    if !args.pattern.starts_with('/') {
        return Err(ToolError::invalid(format!(
            "pattern {:?} is not an absolute glob",
            args.pattern
        )));
    }
    let segments: Vec<&str> = args
        .pattern
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    let literal = segments
        .iter()
        .take_while(|s| !s.contains(['*', '?', '[', ']', '{', '}', '\\']))
        .count();
    let rest = &segments[literal..];
    if rest.contains(&"..") {
        return Err(ToolError::invalid(
            "`..` is not allowed after the first glob segment",
        ));
    }
    let root = checked_root(ctx, &format!("/{}", segments[..literal].join("/")))?;
    let (rest, depth) = if rest.is_empty() {
        (None, Some(0))
    } else {
        let glob = compile_glob(&rest.join("/"))
            .map_err(|e| ToolError::invalid(format!("bad pattern: {e}")))?;
        let depth = if rest.iter().any(|s| s.contains("**")) {
            None
        } else {
            Some(rest.len())
        };
        (Some(glob.compile_matcher()), depth)
    };
    Ok(GlobRequest {
        root,
        rest,
        depth,
        limit,
    })
}

impl Tool for Glob {
    fn name(&self) -> ToolName {
        ToolName::Glob
    }

    fn description(&self) -> &'static str {
        "List paths matching an absolute glob (`*` within a segment, `**` across), within x-allowed-files"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "absolute glob, e.g. /srv/data/**/*.md"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        glob_request(ctx, args).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let req = glob_request(ctx, args)?;
        let policy = &ctx.invocation.policy;
        let mut matches = Vec::new();
        let mut truncated = false;
        if std::fs::symlink_metadata(&req.root).is_err() {
            return Ok(json!({"matches": matches, "truncated": false}));
        }
        let mut builder = walker(&req.root, policy, req.depth);
        builder.sort_by_file_name(|a, b| a.cmp(b));
        for entry in builder.build() {
            if Instant::now() >= ctx.invocation.deadline {
                return Err(ToolError::Deadline);
            }
            let Ok(entry) = entry else { continue };
            let matched = match &req.rest {
                None => entry.depth() == 0,
                Some(glob) => {
                    entry.depth() > 0
                        && entry
                            .path()
                            .strip_prefix(&req.root)
                            .is_ok_and(|rel| glob.is_match(rel))
                }
            };
            if !matched || !visible(policy, &entry) {
                continue;
            }
            if matches.len() == req.limit {
                truncated = true;
                break;
            }
            matches.push(shown(entry.path()));
        }
        Ok(json!({"matches": matches, "truncated": truncated}))
    }
}

/// A walked path may be shown when the globs allow it and, for a symlink, its target too.
fn visible(policy: &Policy, entry: &DirEntry) -> bool {
    if !policy.file_allowed(entry.path()) {
        return false;
    }
    if entry.path_is_symlink() {
        return std::fs::canonicalize(entry.path())
            .is_ok_and(|target| policy.file_allowed(&target));
    }
    true
}

pub struct Grep;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    pattern: String,
    path: String,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    max_results: Option<usize>,
}

struct GrepRequest {
    matcher: RegexMatcher,
    root: PathBuf,
    /// File filter: matched against the file name, or the path below `root` when it has a `/`.
    glob: Option<(GlobMatcher, bool)>,
    max_results: usize,
}

fn grep_request(ctx: &CallContext<'_>, args: &Value) -> Result<GrepRequest, ToolError> {
    let args: GrepArgs = parse_args(args)?;
    let max_results = limit(args.max_results, "max_results")?;
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .line_terminator(Some(b'\n'))
        .build(&args.pattern)
        .map_err(|e| ToolError::invalid(format!("bad regex: {e}")))?;
    let root = checked_root(ctx, &args.path)?;
    let glob = match args.glob {
        None => None,
        Some(g) => {
            let by_path = g.contains('/');
            let glob = compile_glob(g.trim_start_matches('/'))
                .map_err(|e| ToolError::invalid(format!("bad glob: {e}")))?;
            Some((glob.compile_matcher(), by_path))
        }
    };
    Ok(GrepRequest {
        matcher,
        root,
        glob,
        max_results,
    })
}

impl Tool for Grep {
    fn name(&self) -> ToolName {
        ToolName::Grep
    }

    fn description(&self) -> &'static str {
        "Search regular files under a path for a regex (ripgrep engine), within x-allowed-files"
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "regular expression (Rust regex syntax)"},
                "path": {"type": "string", "description": "absolute file or directory"},
                "glob": {"type": "string", "description": "only files whose name (or path below `path`, if it has a /) matches"},
                "case_insensitive": {"type": "boolean", "default": false},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}
            },
            "required": ["pattern", "path"],
            "additionalProperties": false
        })
    }

    fn check(&self, ctx: &CallContext<'_>, args: &Value) -> Result<(), ToolError> {
        grep_request(ctx, args).map(drop)
    }

    fn call(&self, ctx: &CallContext<'_>, args: &Value) -> Result<Value, ToolError> {
        let req = grep_request(ctx, args)?;
        let policy = &ctx.invocation.policy;
        let meta = std::fs::symlink_metadata(&req.root)
            .map_err(|e| ToolError::io(&format!("failed to stat {}", req.root.display()), &e))?;
        if !meta.is_dir() && !policy.file_allowed(&req.root) {
            return Err(ToolError::File {
                path: shown(&req.root),
            });
        }
        let found = Mutex::new(Vec::new());
        let full = AtomicBool::new(false);
        let searcher = SearcherBuilder::new()
            .line_number(true)
            .binary_detection(BinaryDetection::quit(0))
            .build();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8);
        let deadline = ctx.invocation.deadline;
        let late = AtomicBool::new(false);
        let mut builder = walker(&req.root, policy, None);
        builder.threads(threads);
        builder.build_parallel().run(|| {
            let mut searcher = searcher.clone();
            let (req, found, full, late) = (&req, &found, &full, &late);
            Box::new(move |entry| {
                if full.load(Ordering::Relaxed) {
                    return WalkState::Quit;
                }
                if Instant::now() >= deadline {
                    late.store(true, Ordering::Relaxed);
                    return WalkState::Quit;
                }
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                // Regular files only: symlinks are never followed, FIFOs, devices and sockets
                // never opened.
                if !entry.file_type().is_some_and(|ft| ft.is_file())
                    || !policy.file_allowed(entry.path())
                {
                    return WalkState::Continue;
                }
                if let Some((glob, by_path)) = &req.glob {
                    let subject = if *by_path {
                        entry.path().strip_prefix(&req.root).unwrap_or(entry.path())
                    } else {
                        Path::new(entry.file_name())
                    };
                    if !glob.is_match(subject) {
                        return WalkState::Continue;
                    }
                }
                search_file(&mut searcher, req, entry.path(), found, full);
                if full.load(Ordering::Relaxed) {
                    WalkState::Quit
                } else {
                    WalkState::Continue
                }
            })
        });
        if late.into_inner() {
            return Err(ToolError::Deadline);
        }
        let mut matches = found
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        matches.sort_by(|a: &Match, b| (&a.path, a.line_number).cmp(&(&b.path, b.line_number)));
        let truncated = matches.len() > req.max_results;
        matches.truncate(req.max_results);
        let matches: Vec<Value> = matches
            .into_iter()
            .map(|m| json!({"path": shown(&m.path), "line_number": m.line_number, "line": m.line}))
            .collect();
        Ok(json!({"matches": matches, "truncated": truncated}))
    }
}

struct Match {
    path: PathBuf,
    line_number: u64,
    line: String,
}

/// Searches one file opened through the checked opener; an unreadable file is skipped, as rg
/// skips it.
fn search_file(
    searcher: &mut Searcher,
    req: &GrepRequest,
    path: &Path,
    found: &Mutex<Vec<Match>>,
    full: &AtomicBool,
) {
    let Ok(file) = fsutil::open_walked_file(path) else {
        return;
    };
    let mut sink = Collect {
        path,
        req,
        found,
        full,
        local: Vec::new(),
    };
    if let Err(e) = searcher.search_file(&req.matcher, &file, &mut sink) {
        tracing::debug!("grep: skipped {}: {e}", path.display());
    }
    sink.flush();
}

struct Collect<'a> {
    path: &'a Path,
    req: &'a GrepRequest,
    found: &'a Mutex<Vec<Match>>,
    full: &'a AtomicBool,
    local: Vec<Match>,
}

impl Collect<'_> {
    /// Moves this file's matches into the shared list; true while more are wanted.
    fn flush(&mut self) -> bool {
        let mut found = self
            .found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        found.append(&mut self.local);
        // One more than asked for, to know the result was truncated.
        let wanted = found.len() <= self.req.max_results;
        if !wanted {
            self.full.store(true, Ordering::Relaxed);
        }
        wanted
    }
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let mut bytes = mat.bytes();
        while let [rest @ .., b'\n' | b'\r'] = bytes {
            bytes = rest;
        }
        let line = if bytes.len() > MAX_LINE_BYTES {
            let cut = String::from_utf8_lossy(&bytes[..MAX_LINE_BYTES]).into_owned();
            cut.trim_end_matches('\u{fffd}').to_owned()
        } else {
            String::from_utf8_lossy(bytes).into_owned()
        };
        self.local.push(Match {
            path: self.path.to_path_buf(),
            line_number: mat.line_number().unwrap_or(0),
            line,
        });
        if self.local.len() >= 256 {
            return Ok(self.flush());
        }
        Ok(!self.full.load(Ordering::Relaxed))
    }
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

    fn list(out: &Value, key: &str) -> Vec<String> {
        out["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                if key.is_empty() {
                    m.as_str().unwrap().to_owned()
                } else {
                    m[key].as_str().unwrap().to_owned()
                }
            })
            .collect()
    }

    /// dir/allowed/{a.md, b.txt, sub/c.md, link.md -> outside/secret.md, dirlink -> outside},
    /// dir/other/d.md; outside/{secret.md, deep/e.md}.
    fn tree() -> (tempfile::TempDir, PathBuf, tempfile::TempDir, PathBuf) {
        let (d, dir) = tempdir();
        let (o, outside) = tempdir();
        std::fs::create_dir_all(dir.join("allowed/sub")).unwrap();
        std::fs::create_dir_all(dir.join("other")).unwrap();
        std::fs::create_dir_all(outside.join("deep")).unwrap();
        std::fs::write(dir.join("allowed/a.md"), "needle one\nhay\n").unwrap();
        std::fs::write(dir.join("allowed/b.txt"), "needle two\n").unwrap();
        std::fs::write(dir.join("allowed/sub/c.md"), "hay\nNEEDLE three\n").unwrap();
        std::fs::write(dir.join("other/d.md"), "needle other\n").unwrap();
        std::fs::write(outside.join("secret.md"), "needle secret\n").unwrap();
        std::fs::write(outside.join("deep/e.md"), "needle deep\n").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.md"), dir.join("allowed/link.md")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("allowed/dirlink")).unwrap();
        (d, dir, o, outside)
    }

    #[test]
    fn glob_lists_only_allowed_paths_and_never_follows_symlinks() {
        let (_d, dir, _o, _outside) = tree();
        let allowed = format!("{}/allowed/**", dir.display());
        let fx = fixture(&[&allowed]);
        let out = fx
            .run(
                &Glob,
                json!({"pattern": format!("{}/allowed/**/*.md", dir.display())}),
            )
            .unwrap();
        assert_eq!(
            list(&out, ""),
            [
                s(&dir.join("allowed/a.md")),
                s(&dir.join("allowed/sub/c.md"))
            ]
        );
        assert_eq!(out["truncated"], false);
        let out = fx
            .run(
                &Glob,
                json!({"pattern": format!("{}/allowed/*", dir.display())}),
            )
            .unwrap();
        let got = list(&out, "");
        assert!(
            got.contains(&s(&dir.join("allowed/b.txt")))
                && got.contains(&s(&dir.join("allowed/sub"))),
            "{got:?}"
        );
        assert!(
            !got.iter().any(|p| p.contains("link")),
            "symlinks out are not listed: {got:?}"
        );
        // A wider pattern is narrowed to what the globs allow.
        let out = fx
            .run(
                &Glob,
                json!({"pattern": format!("{}/**/*.md", dir.display())}),
            )
            .unwrap();
        assert_eq!(list(&out, "").len(), 2);
        let out = fx
            .run(
                &Glob,
                json!({"pattern": format!("{}/allowed/**", dir.display()), "limit": 2}),
            )
            .unwrap();
        assert_eq!(list(&out, "").len(), 2);
        assert_eq!(out["truncated"], true);
        match fx.run(
            &Glob,
            json!({"pattern": format!("{}/other/*.md", dir.display())}),
        ) {
            Err(ToolError::File { path }) => assert_eq!(path, s(&dir.join("other"))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            fx.run(&Glob, json!({"pattern": "/etc/*"})),
            Err(ToolError::File { .. })
        ));
        let through = format!("{}/allowed/../other/*", dir.display());
        assert!(matches!(
            fx.run(&Glob, json!({"pattern": through})),
            Err(ToolError::File { .. })
        ));
        assert!(matches!(
            fx.run(&Glob, json!({"pattern": "*.md"})),
            Err(ToolError::InvalidArgs(_))
        ));
    }

    #[test]
    fn glob_lists_a_symlink_whose_target_is_allowed() {
        let (_d, dir) = tempdir();
        std::fs::create_dir(dir.join("a")).unwrap();
        std::fs::write(dir.join("a/real"), "x").unwrap();
        std::os::unix::fs::symlink(dir.join("a/real"), dir.join("a/alias")).unwrap();
        let allowed = format!("{}/a/*", dir.display());
        let fx = fixture(&[&allowed]);
        let out = fx.run(&Glob, json!({"pattern": allowed})).unwrap();
        assert_eq!(
            list(&out, ""),
            [s(&dir.join("a/alias")), s(&dir.join("a/real"))]
        );
    }

    #[test]
    fn grep_reads_only_allowed_regular_files() {
        let (_d, dir, _o, _outside) = tree();
        let fifo = dir.join("allowed/fifo.md");
        let c = std::ffi::CString::new(s(&fifo)).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let allowed = format!("{}/allowed/**", dir.display());
        let fx = fixture(&[&allowed]);
        let out = fx
            .run(&Grep, json!({"pattern": "needle", "path": s(&dir)}))
            .unwrap();
        assert_eq!(
            list(&out, "path"),
            [s(&dir.join("allowed/a.md")), s(&dir.join("allowed/b.txt"))]
        );
        assert_eq!(out["matches"][0]["line_number"], 1);
        assert_eq!(out["matches"][0]["line"], "needle one");
        let out = fx.run(&Grep, json!({"pattern": "needle", "path": s(&dir.join("allowed")), "case_insensitive": true, "glob": "*.md"})).unwrap();
        assert_eq!(
            list(&out, "path"),
            [
                s(&dir.join("allowed/a.md")),
                s(&dir.join("allowed/sub/c.md"))
            ]
        );
        assert_eq!(out["matches"][1]["line_number"], 2);
        let out = fx.run(&Grep, json!({"pattern": "needle", "path": s(&dir.join("allowed")), "glob": "sub/*.md", "case_insensitive": true})).unwrap();
        assert_eq!(list(&out, "path"), [s(&dir.join("allowed/sub/c.md"))]);
        let out = fx
            .run(
                &Grep,
                json!({"pattern": "needle", "path": s(&dir.join("allowed")), "max_results": 1}),
            )
            .unwrap();
        assert_eq!(list(&out, "path").len(), 1);
        assert_eq!(out["truncated"], true);
        assert!(matches!(
            fx.run(
                &Grep,
                json!({"pattern": "needle", "path": s(&dir.join("other"))})
            ),
            Err(ToolError::File { .. })
        ));
        assert!(matches!(
            fx.run(&Grep, json!({"pattern": "x", "path": "/etc/passwd"})),
            Err(ToolError::File { .. })
        ));
        // A symlinked root resolves to its target, which is outside.
        assert!(matches!(
            fx.run(
                &Grep,
                json!({"pattern": "x", "path": s(&dir.join("allowed/dirlink"))})
            ),
            Err(ToolError::File { .. })
        ));
        assert!(matches!(
            fx.run(&Grep, json!({"pattern": "(", "path": s(&dir)})),
            Err(ToolError::InvalidArgs(_))
        ));
        // A single allowed file.
        let out = fx
            .run(
                &Grep,
                json!({"pattern": "two", "path": s(&dir.join("allowed/b.txt"))}),
            )
            .unwrap();
        assert_eq!(list(&out, "line"), ["needle two"]);
    }

    #[test]
    fn a_passed_deadline_stops_the_walk() {
        let (_d, dir) = tempdir();
        std::fs::write(dir.join("f"), "needle\n").unwrap();
        let allowed = format!("{}/**", dir.display());
        let mut fx = fixture(&[&allowed]);
        fx.inv.deadline = std::time::Instant::now();
        let grep = fx.run(&Grep, json!({"pattern": "needle", "path": s(&dir)}));
        assert_eq!(grep, Err(ToolError::Deadline));
        let glob = fx.run(&Glob, json!({"pattern": allowed}));
        assert_eq!(glob, Err(ToolError::Deadline));
    }

    #[test]
    fn grep_skips_binary_files() {
        let (_d, dir) = tempdir();
        std::fs::write(dir.join("bin"), b"needle\0\x01\x02").unwrap();
        std::fs::write(dir.join("txt"), b"needle\n").unwrap();
        let allowed = format!("{}/**", dir.display());
        let fx = fixture(&[&allowed]);
        let out = fx
            .run(&Grep, json!({"pattern": "needle", "path": s(&dir)}))
            .unwrap();
        assert_eq!(list(&out, "path"), [s(&dir.join("txt"))]);
    }

    /// Measurement, not a pass/fail timing: Grep against `rg -n` over a 100 MB tree.
    /// `cargo test --release --lib grep_scale -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn grep_scale() {
        use std::time::{Duration, Instant};
        let (_d, dir) = tempdir();
        let line =
            "the quick brown fox jumps over the lazy dog while the broker audits every call\n";
        let mut total = 0usize;
        for i in 0..2000 {
            let sub = dir.join(format!("d{}", i % 40));
            std::fs::create_dir_all(&sub).unwrap();
            let mut text = String::with_capacity(51_000);
            for j in 0..640 {
                if (i * 640 + j) % 9973 == 0 {
                    text.push_str(&format!("needle{i}x{j} found here\n"));
                } else {
                    text.push_str(line);
                }
            }
            total += text.len();
            std::fs::write(sub.join(format!("f{i}.txt")), text).unwrap();
        }
        eprintln!("tree: 2000 files, {} MB", total / 1_000_000);
        let glob = format!("{}/**", dir.display());
        let fx = fixture(&[&glob]);
        let args = json!({"pattern": "needle[0-9]+x[0-9]+", "path": s(&dir), "max_results": 10000});
        let (mut ours, mut theirs) = (Duration::MAX, Duration::MAX);
        let mut counts = (0, 0);
        for _ in 0..5 {
            let t = Instant::now();
            let out = fx.run(&Grep, args.clone()).unwrap();
            ours = ours.min(t.elapsed());
            counts.0 = out["matches"].as_array().unwrap().len();
            let t = Instant::now();
            let rg = std::process::Command::new("rg")
                .args(["-n", "needle[0-9]+x[0-9]+"])
                .arg(&dir)
                .output();
            theirs = theirs.min(t.elapsed());
            match rg {
                Ok(rg) => {
                    counts.1 = rg
                        .stdout
                        .split(|&b| b == b'\n')
                        .filter(|l| !l.is_empty())
                        .count()
                }
                Err(e) => {
                    eprintln!("skipped: rg not runnable: {e}");
                    return;
                }
            }
        }
        assert_eq!(counts.0, counts.1, "same matches");
        eprintln!(
            "Grep {ours:?} vs rg -n {theirs:?} ({} matches): ratio {:.2}",
            counts.0,
            ours.as_secs_f64() / theirs.as_secs_f64()
        );
    }
}
