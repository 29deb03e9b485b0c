//! Layer §6.1: the program's argv and environment, built once as C strings before any fork so that
//! the exec path allocates nothing. The environment is exactly the spec's: nothing of the broker's
//! or the supervisor's leaks in.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use super::{CLIENT_PATH_DIR, SCRATCH_INSIDE, Spec};

/// What `execve` receives.
pub(crate) struct ExecPlan {
    pub program: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
}

fn cstring(what: &str, bytes: &[u8]) -> Result<CString, String> {
    CString::new(bytes).map_err(|_| format!("{what} contains a NUL byte"))
}

/// Checks the parts of a spec that `execve` would otherwise reject in a less readable way.
pub(crate) fn validate(spec: &Spec) -> Result<(), String> {
    if !spec.program.is_absolute() {
        return Err(format!(
            "program {} is not an absolute path",
            spec.program.display()
        ));
    }
    if !spec.cwd.is_absolute() {
        return Err(format!(
            "working directory {} is not an absolute path",
            spec.cwd.display()
        ));
    }
    for (key, value) in &spec.env {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(format!("environment variable name {key:?} is invalid"));
        }
        if value.contains('\0') {
            return Err(format!("environment variable {key} contains a NUL byte"));
        }
    }
    if spec.args.iter().any(|a| a.contains('\0')) {
        return Err("an argument contains a NUL byte".into());
    }
    let paths = spec
        .ro_binds
        .iter()
        .chain(&spec.scratch)
        .chain(&spec.socket)
        .chain(&spec.client_binary);
    for path in paths {
        if !path.is_absolute() {
            return Err(format!("{} is not an absolute path", path.display()));
        }
        if path.as_os_str().as_bytes().contains(&0) {
            return Err(format!("{} contains a NUL byte", path.display()));
        }
    }
    Ok(())
}

/// The argv/envp for the program. `host_view` maps inside paths to host paths when there is no
/// mount namespace to put the scratch directory and the client where the spec says.
pub(crate) fn plan(spec: &Spec, host_view: bool) -> Result<ExecPlan, String> {
    let program = cstring("program path", spec.program.as_os_str().as_bytes())?;
    let mut argv = vec![program.clone()];
    for arg in &spec.args {
        argv.push(cstring("argument", arg.as_bytes())?);
    }
    let mut envp = Vec::with_capacity(spec.env.len());
    for (key, value) in &spec.env {
        let value = if host_view {
            to_host_view(spec, value)
        } else {
            value.clone()
        };
        envp.push(cstring("environment", format!("{key}={value}").as_bytes())?);
    }
    Ok(ExecPlan {
        program,
        argv,
        envp,
    })
}

/// The working directory to use: inside the mount view it is the spec's; on the host view the
/// scratch directory stands in for [`SCRATCH_INSIDE`].
pub(crate) fn cwd(spec: &Spec, host_view: bool) -> std::path::PathBuf {
    if host_view {
        std::path::PathBuf::from(to_host_view(spec, &spec.cwd.to_string_lossy()))
    } else {
        spec.cwd.clone()
    }
}

/// Rewrites `SCRATCH_INSIDE[/...]` to the host scratch path and `CLIENT_PATH_DIR` entries of a
/// `PATH`-like value to the client's host directory.
fn to_host_view(spec: &Spec, value: &str) -> String {
    let scratch = spec.scratch.as_deref().map(Path::to_string_lossy);
    let client_dir = spec
        .client_binary
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_string_lossy);
    value
        .split(':')
        .map(|part| {
            if let Some(s) = &scratch {
                if part == SCRATCH_INSIDE {
                    return s.to_string();
                }
                if let Some(rest) = part
                    .strip_prefix(SCRATCH_INSIDE)
                    .filter(|r| r.starts_with('/'))
                {
                    return format!("{s}{rest}");
                }
            }
            if let Some(c) = &client_dir {
                if part == CLIENT_PATH_DIR {
                    return c.to_string();
                }
            }
            part.to_string()
        })
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        let mut spec = Spec::new("/bin/sh", vec!["-c".into(), "true".into()]);
        spec.scratch = Some("/var/tmp/s1".into());
        spec.client_binary = Some("/usr/local/lib/cyberos/cyberos".into());
        spec.env = vec![
            ("HOME".into(), SCRATCH_INSIDE.into()),
            ("X".into(), format!("{SCRATCH_INSIDE}/a")),
            ("PATH".into(), format!("{CLIENT_PATH_DIR}:/usr/bin")),
            ("Y".into(), format!("{SCRATCH_INSIDE}x")),
        ];
        spec
    }

    #[test]
    fn the_environment_is_exactly_the_spec() {
        let plan = plan(&spec(), false).unwrap();
        let env: Vec<_> = plan
            .envp
            .iter()
            .map(|c| c.to_str().unwrap().to_string())
            .collect();
        assert_eq!(
            env,
            [
                "HOME=/tmp/scratch",
                "X=/tmp/scratch/a",
                "PATH=/opt/cyberos/bin:/usr/bin",
                "Y=/tmp/scratchx"
            ]
        );
        assert_eq!(plan.argv.len(), 3);
        assert_eq!(plan.argv[0].to_str().unwrap(), "/bin/sh");
    }

    #[test]
    fn host_view_maps_scratch_and_client() {
        let plan = plan(&spec(), true).unwrap();
        let env: Vec<_> = plan
            .envp
            .iter()
            .map(|c| c.to_str().unwrap().to_string())
            .collect();
        assert_eq!(
            env,
            [
                "HOME=/var/tmp/s1",
                "X=/var/tmp/s1/a",
                "PATH=/usr/local/lib/cyberos:/usr/bin",
                "Y=/tmp/scratchx"
            ]
        );
    }

    #[test]
    fn invalid_specs_are_named() {
        let mut s = spec();
        s.env.push(("A=B".into(), "x".into()));
        assert!(validate(&s).unwrap_err().contains("A=B"));
        let mut s = spec();
        s.program = "relative".into();
        assert!(validate(&s).unwrap_err().contains("relative"));
        assert!(validate(&spec()).is_ok());
    }
}
