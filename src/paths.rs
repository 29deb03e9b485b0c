//! Where things are (CONTRACT §2): the cyberos home, the skills directories, the tenant, and how a
//! `<SKILL>` argument names a bundle. Flags win over environment variables, which win over
//! defaults; an empty variable counts as unset. This module resolves names; it creates nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use uuid::Uuid;

/// The system-wide skills directory, searched after the home's `skills/`.
pub const SYSTEM_SKILLS_DIR: &str = "/opt/cyberos/skills";

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("failed to find a home directory: set --home or CYBEROS_HOME (HOME is unset)")]
    NoHome,
    #[error("failed to resolve {}: {source}", path.display())]
    CurrentDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse tenant {value:?} from {origin}: not a UUID")]
    Tenant { value: String, origin: &'static str },
}

/// The process environment, read through one function so tests can substitute it.
pub trait Env {
    fn var(&self, key: &str) -> Option<OsString>;
}

/// The real environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, key: &str) -> Option<OsString> {
        std::env::var_os(key).filter(|v| !v.is_empty())
    }
}

fn absolute(path: PathBuf) -> Result<PathBuf, PathError> {
    std::path::absolute(&path).map_err(|source| PathError::CurrentDir { path, source })
}

/// The cyberos home: `--home` > `$CYBEROS_HOME` > `$XDG_DATA_HOME/cyberos` >
/// `~/.local/share/cyberos`. Always absolute (a relative flag or variable is taken from the
/// current directory); a relative `$XDG_DATA_HOME` is ignored, as the XDG spec says.
pub fn home(flag: Option<&Path>) -> Result<PathBuf, PathError> {
    home_in(flag, &ProcessEnv)
}

pub fn home_in(flag: Option<&Path>, env: &dyn Env) -> Result<PathBuf, PathError> {
    if let Some(flag) = flag.filter(|p| !p.as_os_str().is_empty()) {
        return absolute(flag.to_owned());
    }
    if let Some(home) = env.var("CYBEROS_HOME") {
        return absolute(PathBuf::from(home));
    }
    if let Some(xdg) = env
        .var("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Ok(xdg.join("cyberos"));
    }
    let user_home = env
        .var("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .ok_or(PathError::NoHome)?;
    Ok(user_home.join(".local/share/cyberos"))
}

/// The skills directories to search, in order: `--skills-dir` alone if given, else
/// `$CYBEROS_SKILLS_DIR` alone if set, else `<home>/skills` then [`SYSTEM_SKILLS_DIR`], where
/// `<home>` is the resolved home (so `--home` and the XDG default count too).
pub fn skills_dirs(flag: Option<&Path>, home: &Path) -> Result<Vec<PathBuf>, PathError> {
    skills_dirs_in(flag, home, &ProcessEnv)
}

pub fn skills_dirs_in(
    flag: Option<&Path>,
    home: &Path,
    env: &dyn Env,
) -> Result<Vec<PathBuf>, PathError> {
    if let Some(flag) = flag.filter(|p| !p.as_os_str().is_empty()) {
        return Ok(vec![absolute(flag.to_owned())?]);
    }
    if let Some(dir) = env.var("CYBEROS_SKILLS_DIR") {
        return Ok(vec![absolute(PathBuf::from(dir))?]);
    }
    Ok(vec![home.join("skills"), PathBuf::from(SYSTEM_SKILLS_DIR)])
}

/// The tenant: `--tenant` > `$CYBEROS_TENANT_ID` > the nil UUID. Any form `uuid` parses is
/// accepted (hyphenated, simple, braced, URN); it is reported hyphenated and lowercase.
pub fn tenant(flag: Option<&str>) -> Result<Uuid, PathError> {
    tenant_in(flag, &ProcessEnv)
}

pub fn tenant_in(flag: Option<&str>, env: &dyn Env) -> Result<Uuid, PathError> {
    let (value, origin) = match (flag, env.var("CYBEROS_TENANT_ID")) {
        (Some(flag), _) => (flag.to_owned(), "--tenant"),
        (None, Some(var)) => (var.to_string_lossy().into_owned(), "CYBEROS_TENANT_ID"),
        (None, None) => return Ok(Uuid::nil()),
    };
    Uuid::try_parse(value.trim()).map_err(|_| PathError::Tenant { value, origin })
}

/// What a `<SKILL>` argument names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillRef {
    /// A bundle directory given by path.
    Path(PathBuf),
    /// A skill id, looked up in the skills directories.
    Id(String),
}

/// CONTRACT §2: a path if it contains `/` or names an existing directory, else an id.
pub fn skill_ref(arg: &str) -> SkillRef {
    if arg.contains('/') || Path::new(arg).is_dir() {
        SkillRef::Path(PathBuf::from(arg))
    } else {
        SkillRef::Id(arg.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct FakeEnv(HashMap<&'static str, &'static str>);

    impl Env for FakeEnv {
        fn var(&self, key: &str) -> Option<OsString> {
            self.0
                .get(key)
                .filter(|v| !v.is_empty())
                .map(OsString::from)
        }
    }

    fn env(pairs: &[(&'static str, &'static str)]) -> FakeEnv {
        FakeEnv(pairs.iter().copied().collect())
    }

    #[test]
    fn home_precedence() {
        let all = env(&[
            ("CYBEROS_HOME", "/c"),
            ("XDG_DATA_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(
            home_in(Some(Path::new("/f")), &all).unwrap(),
            PathBuf::from("/f")
        );
        assert_eq!(home_in(None, &all).unwrap(), PathBuf::from("/c"));
        let no_c = env(&[
            ("CYBEROS_HOME", ""),
            ("XDG_DATA_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(home_in(None, &no_c).unwrap(), PathBuf::from("/x/cyberos"));
        let rel_xdg = env(&[("XDG_DATA_HOME", "x"), ("HOME", "/h")]);
        assert_eq!(
            home_in(None, &rel_xdg).unwrap(),
            PathBuf::from("/h/.local/share/cyberos")
        );
        assert!(matches!(home_in(None, &env(&[])), Err(PathError::NoHome)));
        assert!(home_in(Some(Path::new("rel")), &all).unwrap().is_absolute());
    }

    #[test]
    fn skills_dir_precedence() {
        let e = env(&[("CYBEROS_SKILLS_DIR", "/s")]);
        let home = Path::new("/home/cy");
        assert_eq!(
            skills_dirs_in(Some(Path::new("/f")), home, &e).unwrap(),
            vec![PathBuf::from("/f")]
        );
        assert_eq!(
            skills_dirs_in(None, home, &e).unwrap(),
            vec![PathBuf::from("/s")]
        );
        assert_eq!(
            skills_dirs_in(None, home, &env(&[])).unwrap(),
            vec![
                PathBuf::from("/home/cy/skills"),
                PathBuf::from(SYSTEM_SKILLS_DIR)
            ]
        );
    }

    #[test]
    fn tenant_precedence_and_validation() {
        let e = env(&[("CYBEROS_TENANT_ID", "6F9619FF-8B86-D011-B42D-00C04FC964FF")]);
        assert_eq!(tenant_in(None, &env(&[])).unwrap(), Uuid::nil());
        assert_eq!(
            tenant_in(None, &e).unwrap().to_string(),
            "6f9619ff-8b86-d011-b42d-00c04fc964ff"
        );
        assert_eq!(
            tenant_in(Some("00000000-0000-0000-0000-000000000001"), &e)
                .unwrap()
                .to_string(),
            "00000000-0000-0000-0000-000000000001"
        );
        assert!(matches!(
            tenant_in(Some("nope"), &e),
            Err(PathError::Tenant {
                origin: "--tenant",
                ..
            })
        ));
        let bad = env(&[("CYBEROS_TENANT_ID", "x")]);
        assert!(matches!(
            tenant_in(None, &bad),
            Err(PathError::Tenant {
                origin: "CYBEROS_TENANT_ID",
                ..
            })
        ));
    }

    #[test]
    fn skill_arguments() {
        assert_eq!(skill_ref("./a"), SkillRef::Path(PathBuf::from("./a")));
        assert_eq!(skill_ref("a/b"), SkillRef::Path(PathBuf::from("a/b")));
        assert_eq!(
            skill_ref("memory-capture"),
            SkillRef::Id("memory-capture".into())
        );
        // Tests run from the package root, where `src` is a directory.
        assert_eq!(skill_ref("src"), SkillRef::Path(PathBuf::from("src")));
        let dir = tempfile::tempdir().unwrap();
        let abs = dir.path().to_str().unwrap();
        assert_eq!(skill_ref(abs), SkillRef::Path(PathBuf::from(abs)));
    }
}
