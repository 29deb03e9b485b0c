//! Bundles on disk: reading a SKILL.md safely (bounded, regular files only), loading a bundle
//! for `invoke` (SKILL.md plus an executable `main`), finding a skill by id in the skills
//! directories, and listing them. This module reads; it never runs or writes anything.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::exit;
use crate::paths::{SkillRef, skill_ref};
use crate::skill::manifest::Manifest;
use crate::skill::rules::{ErrorCode, FieldError, ID_PATTERN, MAX_SKILL_MD_BYTES};
use crate::skill::{Parsed, parse_bytes};

pub const SKILL_MD: &str = "SKILL.md";
pub const MAIN: &str = "main";

/// A loaded, valid bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The bundle directory, absolute with symlinks resolved.
    pub dir: PathBuf,
    pub skill_md_path: PathBuf,
    /// `<dir>/main` (checked to exist and be executable by [`load_bundle`] only).
    pub main_path: PathBuf,
    pub manifest: Manifest,
    /// The frontmatter mapping as written (no defaults), as JSON.
    pub frontmatter_json: Map<String, Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("failed to find {what} {}", path.display())]
    NotFound { what: &'static str, path: PathBuf },
    #[error("failed to find skill {id:?} in {}", searched_list(searched))]
    SkillNotFound { id: String, searched: Vec<PathBuf> },
    #[error(
        "failed to find skill {arg:?}: it is neither a directory nor a skill id (lowercase letters, digits and dashes)"
    )]
    NotAnId { arg: String },
    #[error("failed to read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to validate {}: {}", path.display(), summary(errors))]
    Invalid {
        path: PathBuf,
        errors: Vec<FieldError>,
    },
    #[error("failed to run {}: it is not an executable file", path.display())]
    MainNotExecutable { path: PathBuf },
}

fn searched_list(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn summary(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl LoadError {
    /// The exit code for `skill validate` (CONTRACT §2): 1 not found / I/O, 6 invalid.
    pub fn validate_exit_code(&self) -> u8 {
        match self {
            Self::Invalid { .. } => exit::INVALID_SKILL,
            _ => exit::ERROR,
        }
    }

    /// The exit code for `skill invoke`: 127 skill or `main` not found, 126 `main` not
    /// executable, 6 invalid, 1 I/O.
    pub fn invoke_exit_code(&self) -> u8 {
        match self {
            Self::NotFound { .. } | Self::SkillNotFound { .. } | Self::NotAnId { .. } => {
                exit::NOT_FOUND
            }
            Self::Invalid { .. } => exit::INVALID_SKILL,
            Self::MainNotExecutable { .. } => exit::NOT_EXECUTABLE,
            Self::Io { .. } => exit::ERROR,
        }
    }
}

fn io_error(path: &Path, source: std::io::Error, what: &'static str) -> LoadError {
    if source.kind() == std::io::ErrorKind::NotFound {
        LoadError::NotFound {
            what,
            path: path.to_owned(),
        }
    } else {
        LoadError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Reads at most [`MAX_SKILL_MD_BYTES`] + 1 bytes of a regular file. A FIFO or device is refused
/// before any read could block.
pub fn read_skill_md(path: &Path) -> Result<Vec<u8>, LoadError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io_error(path, e, SKILL_MD))?;
    let meta = file.metadata().map_err(|e| io_error(path, e, SKILL_MD))?;
    if !meta.is_file() {
        return Err(LoadError::Io {
            path: path.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        });
    }
    let mut bytes = Vec::with_capacity(meta.len().min(MAX_SKILL_MD_BYTES + 1) as usize);
    file.take(MAX_SKILL_MD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e, SKILL_MD))?;
    Ok(bytes)
}

/// `path` is a bundle directory or a SKILL.md file: the SKILL.md path and the bundle directory.
fn locate(path: &Path) -> Result<(PathBuf, PathBuf), LoadError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, e, "bundle"))?;
    if meta.is_dir() {
        Ok((path.join(SKILL_MD), path.to_owned()))
    } else {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Ok((path.to_owned(), dir.to_owned()))
    }
}

/// Loads and validates the SKILL.md of `path` (a bundle directory or the SKILL.md itself),
/// without looking at `main`: what `skill validate` checks.
pub fn load_skill_md(path: &Path, broker: &semver::Version) -> Result<Bundle, LoadError> {
    let (skill_md_path, dir) = locate(path)?;
    let dir = std::fs::canonicalize(&dir).map_err(|e| io_error(&dir, e, "bundle"))?;
    let skill_md_path = match skill_md_path.file_name() {
        Some(name) => dir.join(name),
        None => skill_md_path,
    };
    let bytes = read_skill_md(&skill_md_path)?;
    let validation = crate::telemetry::frontmatter_validate();
    let parsed = parse_bytes(&bytes, broker);
    let errors = parsed.as_ref().map_or_else(Vec::len, |_| 0);
    validation.end(errors, parsed.as_ref().ok().map(|p| p.manifest.id.as_str()));
    let Parsed {
        manifest,
        frontmatter,
        ..
    } = parsed.map_err(|errors| LoadError::Invalid {
        path: skill_md_path.clone(),
        errors,
    })?;
    Ok(Bundle {
        main_path: dir.join(MAIN),
        dir,
        skill_md_path,
        manifest,
        frontmatter_json: frontmatter,
    })
}

/// Loads a bundle for `invoke`: a valid SKILL.md and a `main` that is a regular file with an
/// execute bit. Whether the sandbox's uid can read it is the caller's check.
pub fn load_bundle(dir: &Path, broker: &semver::Version) -> Result<Bundle, LoadError> {
    let meta = std::fs::metadata(dir).map_err(|e| io_error(dir, e, "bundle"))?;
    if !meta.is_dir() {
        return Err(LoadError::NotFound {
            what: "bundle directory",
            path: dir.to_owned(),
        });
    }
    let bundle = load_skill_md(dir, broker)?;
    let main =
        std::fs::metadata(&bundle.main_path).map_err(|e| io_error(&bundle.main_path, e, MAIN))?;
    use std::os::unix::fs::PermissionsExt as _;
    if !main.is_file() || main.permissions().mode() & 0o111 == 0 {
        return Err(LoadError::MainNotExecutable {
            path: bundle.main_path,
        });
    }
    Ok(bundle)
}

/// Resolves a `<SKILL>` argument (CONTRACT §2) to a bundle directory: a path as given, or
/// `<dir>/<id>/` in the first of `skills_dirs` that has it.
pub fn resolve_skill(arg: &str, skills_dirs: &[PathBuf]) -> Result<PathBuf, LoadError> {
    match skill_ref(arg) {
        SkillRef::Path(path) => Ok(path),
        SkillRef::Id(id) => find_skill(&id, skills_dirs),
    }
}

/// `<dir>/<id>/` in the first of `skills_dirs` where it is a directory.
pub fn find_skill(id: &str, skills_dirs: &[PathBuf]) -> Result<PathBuf, LoadError> {
    if !regex::Regex::new(ID_PATTERN).is_ok_and(|re| re.is_match(id)) {
        return Err(LoadError::NotAnId { arg: id.to_owned() });
    }
    for dir in skills_dirs {
        let candidate = dir.join(id);
        if candidate.is_dir() {
            return Ok(candidate);
        }
    }
    Err(LoadError::SkillNotFound {
        id: id.to_owned(),
        searched: skills_dirs.to_vec(),
    })
}

/// One entry of `skill list`.
#[derive(Debug)]
pub struct Listed {
    /// The directory name (the id the skill is invoked by).
    pub name: String,
    pub dir: PathBuf,
    pub result: Result<Bundle, LoadError>,
    /// An earlier skills directory has a bundle of the same name, which wins.
    pub shadowed: bool,
}

/// Every bundle directory (a subdirectory holding a SKILL.md) in `skills_dirs`, each validated,
/// sorted by name within each directory. Missing skills directories are skipped.
pub fn list_skills(
    skills_dirs: &[PathBuf],
    broker: &semver::Version,
) -> Result<Vec<Listed>, LoadError> {
    let mut out: Vec<Listed> = Vec::new();
    for dir in skills_dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(LoadError::Io {
                    path: dir.clone(),
                    source,
                });
            }
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| LoadError::Io {
                path: dir.clone(),
                source,
            })?;
            let path = entry.path();
            if path.is_dir() && path.join(SKILL_MD).exists() {
                found.push((entry.file_name().to_string_lossy().into_owned(), path));
            }
        }
        found.sort();
        for (name, path) in found {
            let shadowed = out.iter().any(|l| l.name == name);
            let result = load_skill_md(&path, broker);
            out.push(Listed {
                name,
                dir: path,
                result,
                shadowed,
            });
        }
    }
    Ok(out)
}

/// A file-level error for a SKILL.md that is not UTF-8.
pub(crate) fn encoding_error(err: &std::str::Utf8Error) -> FieldError {
    FieldError::new(
        "",
        ErrorCode::Encoding,
        format!(
            "SKILL.md is not valid UTF-8 (invalid byte at offset {})",
            err.valid_up_to()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    const SKILL: &str = "---\nid: s\nversion: 1.0.0\ndescription: d\nallowed_memory_scopes: []\nallowed_tools: []\n---\n";

    fn bundle(dir: &Path, main_mode: Option<u32>) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(SKILL_MD), SKILL).unwrap();
        if let Some(mode) = main_mode {
            std::fs::write(dir.join(MAIN), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(dir.join(MAIN), std::fs::Permissions::from_mode(mode))
                .unwrap();
        }
    }

    #[test]
    fn load_bundle_exit_codes() {
        let tmp = tempfile::tempdir().unwrap();
        let v = semver::Version::new(0, 1, 0);
        let ok = tmp.path().join("ok");
        bundle(&ok, Some(0o755));
        let b = load_bundle(&ok, &v).unwrap();
        assert_eq!(b.dir, std::fs::canonicalize(&ok).unwrap());
        assert_eq!(b.main_path, b.dir.join(MAIN));
        assert_eq!(b.frontmatter_json["id"], "s");

        let no_main = tmp.path().join("no-main");
        bundle(&no_main, None);
        assert_eq!(
            load_bundle(&no_main, &v).unwrap_err().invoke_exit_code(),
            exit::NOT_FOUND
        );
        // validate does not look at main.
        load_skill_md(&no_main, &v).unwrap();

        let not_exec = tmp.path().join("not-exec");
        bundle(&not_exec, Some(0o644));
        assert_eq!(
            load_bundle(&not_exec, &v).unwrap_err().invoke_exit_code(),
            exit::NOT_EXECUTABLE
        );

        let missing = load_bundle(&tmp.path().join("nope"), &v).unwrap_err();
        assert_eq!(
            (missing.invoke_exit_code(), missing.validate_exit_code()),
            (exit::NOT_FOUND, exit::ERROR)
        );
    }

    #[test]
    fn skills_are_found_in_search_order() {
        let tmp = tempfile::tempdir().unwrap();
        let (first, second) = (tmp.path().join("a"), tmp.path().join("b"));
        bundle(&second.join("s"), Some(0o755));
        bundle(&second.join("t"), Some(0o755));
        bundle(&first.join("t"), Some(0o755));
        let dirs = [first.clone(), second.clone(), tmp.path().join("missing")];
        assert_eq!(find_skill("s", &dirs).unwrap(), second.join("s"));
        assert_eq!(find_skill("t", &dirs).unwrap(), first.join("t"));
        assert!(matches!(
            find_skill("u", &dirs),
            Err(LoadError::SkillNotFound { .. })
        ));
        // A name that is not an id never reaches the filesystem.
        assert!(matches!(
            find_skill("..", &dirs),
            Err(LoadError::NotAnId { .. })
        ));
        assert_eq!(resolve_skill("./x", &dirs).unwrap(), PathBuf::from("./x"));

        let listed = list_skills(&dirs, &semver::Version::new(0, 1, 0)).unwrap();
        let names: Vec<(&str, bool)> = listed
            .iter()
            .map(|l| (l.name.as_str(), l.shadowed))
            .collect();
        assert_eq!(names, [("t", false), ("s", false), ("t", true)]);
    }
}
