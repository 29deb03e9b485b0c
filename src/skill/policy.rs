//! The enforcer: a skill's frontmatter compiled once per invocation into the checks of CONTRACT §4
//! (tool allow/deny lists, memory-path, file-path and domain globs). Default deny everywhere: an
//! empty list allows nothing. This module decides; it never touches the filesystem or network.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use std::os::unix::ffi::OsStrExt;

use globset::GlobBuilder;
use regex::bytes::{RegexSet, RegexSetBuilder};

use crate::skill::manifest::Manifest;
use crate::tools::ToolName;

/// Why a tool name was refused (`data.reason` of `tool_not_allowed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolDenial {
    InDisallowedTools,
    NotInAllowedTools,
    UnknownTool,
}

impl ToolDenial {
    pub fn reason(self) -> &'static str {
        match self {
            Self::InDisallowedTools => "tool_in_disallowed_tools",
            Self::NotInAllowedTools => "tool_not_in_allowed_tools",
            Self::UnknownTool => "unknown_tool",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("failed to compile {field}[{index}] {pattern:?}: {reason}")]
pub struct GlobError {
    pub field: &'static str,
    pub index: usize,
    pub pattern: String,
    pub reason: String,
}

/// The most memory one list of globs may compile to. A real list compiles to kilobytes; this
/// only stops a frontmatter with thousands of complex globs from taking the broker's memory.
const GLOBS_SIZE_LIMIT: usize = 16 << 20;

/// One list of globs, matched in a single pass: the regular expression of every glob in one
/// automaton. (globset's own `GlobSet` tests globs that share an extension or a suffix one by
/// one, so 100 `/srv/project-N/**/*.md` globs cost it 13 µs a check.)
#[derive(Debug, Clone)]
struct Globs(RegexSet);

impl Globs {
    fn is_match(&self, candidate: &[u8]) -> bool {
        self.0.is_match(candidate)
    }
}

/// The compiled policy of one skill.
#[derive(Debug, Clone)]
pub struct Policy {
    skill_id: String,
    allowed: BTreeSet<ToolName>,
    disallowed: BTreeSet<ToolName>,
    memory: Globs,
    files: Globs,
    domains: Globs,
    file_roots: Vec<PathBuf>,
}

/// Compiles one glob the way every check uses it: `*` stays within a path segment, `**` crosses.
pub fn compile_glob(pattern: &str) -> Result<globset::Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

fn compile_set(field: &'static str, patterns: &[String]) -> Result<Globs, GlobError> {
    let regexes = patterns
        .iter()
        .enumerate()
        .map(|(index, pattern)| match compile_glob(pattern) {
            Ok(glob) => Ok(glob.regex().to_owned()),
            Err(e) => Err(GlobError {
                field,
                index,
                pattern: pattern.clone(),
                reason: e.kind().to_string(),
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The same builder settings as globset's own: `*` and `?` match a newline like any other
    // byte but `/`.
    RegexSetBuilder::new(regexes)
        .dot_matches_new_line(true)
        .size_limit(GLOBS_SIZE_LIMIT)
        .build()
        .map(Globs)
        .map_err(|e| GlobError {
            field,
            index: 0,
            pattern: String::new(),
            reason: match e {
                regex::Error::CompiledTooBig(_) => format!(
                    "the {} globs together compile to more than {} MiB",
                    patterns.len(),
                    GLOBS_SIZE_LIMIT >> 20
                ),
                other => other.to_string(),
            },
        })
}

impl Policy {
    pub fn from_manifest(manifest: &Manifest) -> Result<Self, GlobError> {
        // Domain globs match the lowercased host without a trailing dot; `*` then spans any
        // number of labels (hosts contain no `/`), and `*.example.com` never matches the apex.
        let domains: Vec<String> = manifest
            .allowed_domains
            .iter()
            .map(|d| d.trim_end_matches('.').to_ascii_lowercase())
            .collect();
        Ok(Self {
            skill_id: manifest.id.clone(),
            allowed: manifest.allowed_tools.iter().copied().collect(),
            disallowed: manifest.disallowed_tools.iter().copied().collect(),
            memory: compile_set("allowed_memory_scopes", &manifest.allowed_memory_scopes)?,
            files: compile_set("x-allowed-files", &manifest.allowed_files)?,
            domains: compile_set("x-allowed-domains", &domains)?,
            file_roots: manifest
                .allowed_files
                .iter()
                .map(|p| literal_prefix(p))
                .collect(),
        })
    }

    pub fn skill_id(&self) -> &str {
        &self.skill_id
    }

    /// The first three steps of enforcement: disallowed → allowed → registry.
    pub fn check_tool(&self, name: &str) -> Result<ToolName, ToolDenial> {
        let known = ToolName::parse(name);
        if let Some(tool) = known {
            if self.disallowed.contains(&tool) {
                return Err(ToolDenial::InDisallowedTools);
            }
        }
        match known {
            Some(tool) if self.allowed.contains(&tool) => Ok(tool),
            Some(_) => Err(ToolDenial::NotInAllowedTools),
            // An unknown name can be in neither list: schema validation rejects it there.
            None => Err(ToolDenial::NotInAllowedTools),
        }
    }

    /// The tools this skill may call, in registry order.
    pub fn callable_tools(&self) -> impl Iterator<Item = ToolName> + '_ {
        ToolName::ALL
            .into_iter()
            .filter(|t| self.allowed.contains(t) && !self.disallowed.contains(t))
    }

    /// Is this canonical memory path (see [`canonical_memory_path`]) in scope?
    pub fn memory_allowed(&self, canonical: &str) -> bool {
        self.memory.is_match(canonical.as_bytes())
    }

    /// Is this canonical absolute file path allowed by `x-allowed-files`?
    pub fn file_allowed(&self, canonical: &Path) -> bool {
        self.files.is_match(canonical.as_os_str().as_bytes())
    }

    /// Is this host allowed by `x-allowed-domains`? The host is lowercased and a trailing dot
    /// dropped first, so `API.Example.COM.` is `api.example.com`. A name with an empty label
    /// (`.example.com`, `a..example.com`) is never allowed: `*` would match the empty label and
    /// let it past `*.example.com`, which admits subdomains only.
    pub fn domain_allowed(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        !host.is_empty()
            && !host.split('.').any(str::is_empty)
            && self.domains.is_match(host.as_bytes())
    }

    /// Does any file glob possibly match something under `dir`? Used to refuse a Glob/Grep root
    /// outside every allowed tree.
    pub fn file_tree_allowed(&self, dir: &Path) -> bool {
        self.file_roots()
            .iter()
            .any(|root| root.starts_with(dir) || dir.starts_with(root))
    }

    /// The literal directory prefix of every file glob (the directories before the first segment
    /// holding a glob meta character).
    pub fn file_roots(&self) -> &[PathBuf] {
        &self.file_roots
    }
}

/// `/srv/data/**/*.md` → `/srv/data`; `/tmp/x.txt` → `/tmp/x.txt`.
fn literal_prefix(pattern: &str) -> PathBuf {
    let mut prefix = PathBuf::from("/");
    for segment in pattern.split('/').filter(|s| !s.is_empty()) {
        if segment.contains(['*', '?', '[', ']', '{', '}', '\\']) {
            break;
        }
        prefix.push(segment);
    }
    prefix
}

/// Canonicalises a memory path (CONTRACT §5): `/`-separated and relative; empty and `.` segments
/// dropped, `..` pops (never above the root). NUL is invalid, as is a path that ends up empty.
pub fn canonical_memory_path(path: &str) -> Result<String, String> {
    if path.contains('\0') {
        return Err("memory path contains NUL".to_owned());
    }
    let mut parts: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    if parts.is_empty() {
        return Err(format!("memory path {path:?} names the memory root itself"));
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_paths_canonicalise_without_escaping_the_root() {
        assert_eq!(
            canonical_memory_path("memories/projects/cyberos/../people/y.md").unwrap(),
            "memories/projects/people/y.md"
        );
        assert_eq!(canonical_memory_path("/./a//b/../../../../c").unwrap(), "c");
        assert!(canonical_memory_path("a/\0b").is_err());
        assert!(canonical_memory_path("a/..").is_err());
    }

    #[test]
    fn a_subdomain_glob_refuses_names_with_an_empty_label() {
        let mut m = crate::skill::parse(
            "---\nid: d\nversion: 1.0.0\ndescription: d\nallowed_memory_scopes: []\nallowed_tools: []\n---\n",
            &crate::skill::broker_version(),
        )
        .expect("valid");
        m.allowed_domains = vec!["*.example.com".into()];
        let policy = Policy::from_manifest(&m).expect("compiles");
        assert!(policy.domain_allowed("api.example.com"));
        assert!(policy.domain_allowed("API.Example.COM."));
        for host in [
            ".example.com",
            "..example.com",
            "a..example.com",
            "example.com",
            "api.example.com..",
            "",
            ".",
        ] {
            assert!(!policy.domain_allowed(host), "{host:?} was allowed");
        }
    }

    #[test]
    fn literal_prefix_stops_at_the_first_meta_segment() {
        assert_eq!(
            literal_prefix("/srv/data/**/*.md"),
            PathBuf::from("/srv/data")
        );
        assert_eq!(literal_prefix("/tmp/x.txt"), PathBuf::from("/tmp/x.txt"));
        assert_eq!(literal_prefix("/**"), PathBuf::from("/"));
    }

    #[test]
    fn one_pass_matching_agrees_with_globset_glob_by_glob() {
        let globs: Vec<String> = [
            "/srv/data/**/*.md",
            "/srv/data/project-*/notes/*",
            "/srv/*.txt",
            "/srv/[ab]*/x?y",
            "/srv/{one,two}/**",
            "/srv/lit\\*eral",
            "/srv/data/exact.md",
            "*.example.com",
            "api.*.example.com",
            "memories/**",
            "memories/*/notes/**/*.md",
            "notes/*/x.md",
            "notes/?%/x.md",
            "**",
        ]
        .map(String::from)
        .to_vec();
        let candidates = [
            "/srv/data/a.md",
            "/srv/data/a/b/c.md",
            "/srv/data/a/b/c.mdx",
            "/srv/data/project-1/notes/x",
            "/srv/data/project-1/notes/x/y",
            "/srv/a.txt",
            "/srv/a/b.txt",
            "/srv/ab/xzy",
            "/srv/c/xzy",
            "/srv/one/deep/er",
            "/srv/three/x",
            "/srv/lit*eral",
            "/srv/litXeral",
            "/srv/data/exact.md",
            "api.example.com",
            "example.com",
            "api.eu.example.com",
            "memories",
            "memories/a/notes/b/c.md",
            "memories/a/b/notes/c.md",
            "",
            "a\u{e9}/b",
            "notes/\n%/x.md",
            "/srv/data/a\nb.md",
            "x\n.example.com",
        ];
        for (i, glob) in globs.iter().enumerate() {
            let one = compile_set("x", std::slice::from_ref(glob)).expect("compiles");
            let reference = compile_glob(glob).expect("compiles").compile_matcher();
            for c in candidates {
                assert_eq!(
                    one.is_match(c.as_bytes()),
                    reference.is_match(c),
                    "{glob:?} on {c:?}"
                );
            }
            // In a set, a candidate matches when any of the globs does.
            let set = compile_set("x", &globs[..=i]).expect("compiles");
            for c in candidates {
                let any = globs[..=i].iter().any(|g| {
                    compile_glob(g)
                        .expect("compiles")
                        .compile_matcher()
                        .is_match(c)
                });
                assert_eq!(
                    set.is_match(c.as_bytes()),
                    any,
                    "{:?} on {c:?}",
                    &globs[..=i]
                );
            }
        }
        assert!(
            !compile_set("x", &[])
                .expect("compiles")
                .is_match(b"anything")
        );
    }

    #[test]
    fn a_bad_glob_is_named_with_its_index() {
        let err = compile_set("x-allowed-files", &["/ok/**".into(), "/bad/[".into()])
            .expect_err("unclosed class");
        assert_eq!(
            (err.field, err.index, err.pattern.as_str()),
            ("x-allowed-files", 1, "/bad/[")
        );
        assert!(
            err.to_string()
                .starts_with("failed to compile x-allowed-files[1] \"/bad/[\": ")
        );
    }
}
