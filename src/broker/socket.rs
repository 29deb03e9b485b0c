//! The per-invocation socket path (CONTRACT §4): creation with the right owner and mode, and the
//! sweep of sockets left behind by brokers that are gone.

use std::io;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use mio::net::UnixListener;

use crate::journal::Journal;

const DIR: &str = "/tmp";
const PREFIX: &str = "cyberos-skill-broker.";
const SUFFIX: &str = ".sock";
const SCRATCH_PREFIX: &str = "cyberos-scratch.";
const CLIENT_PREFIX: &str = "cyberos-bin.";
/// A socket the journal does not know is removed once older than this.
const UNKNOWN_SOCKET_AGE: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("socket {0} already exists (another invocation with this id?)")]
    Exists(PathBuf),
    #[error("failed to create socket {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// `/tmp/cyberos-skill-broker.<invocation_id>.sock`
pub fn path_for(invocation_id: &str) -> PathBuf {
    Path::new(DIR).join(format!("{PREFIX}{invocation_id}{SUFFIX}"))
}

/// `/tmp/cyberos-scratch.<invocation_id>`: the skill's scratch directory on the host.
pub fn scratch_path_for(invocation_id: &str) -> PathBuf {
    Path::new(DIR).join(format!("{SCRATCH_PREFIX}{invocation_id}"))
}

/// `/tmp/cyberos-bin.<invocation_id>`: a stand-in for the cyberos binary when the sandbox uid
/// cannot reach the real one.
pub fn client_path_for(invocation_id: &str) -> PathBuf {
    Path::new(DIR).join(format!("{CLIENT_PREFIX}{invocation_id}"))
}

/// Binds the socket, mode 0600, owned by `owner` (the uid the skill runs as) when given.
pub fn bind(path: &Path, owner: Option<(u32, u32)>) -> Result<UnixListener, SocketError> {
    if path.symlink_metadata().is_ok() {
        return Err(SocketError::Exists(path.to_owned()));
    }
    let bind_err = |source| SocketError::Bind {
        path: path.to_owned(),
        source,
    };
    // The socket is created under a restrictive umask so it is never connectable by others,
    // not even between bind and chmod.
    // SAFETY: umask only swaps the process file-creation mask; it cannot fail.
    let old = unsafe { libc::umask(0o177) };
    let listener = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let listener = listener.map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            SocketError::Exists(path.to_owned())
        } else {
            bind_err(e)
        }
    })?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(bind_err)?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
    Ok(listener)
}

/// Removes what invocations whose broker is gone left in /tmp (their socket and scratch
/// directory), and unknown ones older than 5 minutes.
pub fn sweep(journal: Option<&Journal>) {
    let Ok(entries) = std::fs::read_dir(DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (id, is_dir) = if let Some(id) = name
            .strip_prefix(PREFIX)
            .and_then(|n| n.strip_suffix(SUFFIX))
        {
            (id, false)
        } else if let Some(id) = name.strip_prefix(SCRATCH_PREFIX) {
            (id, true)
        } else if let Some(id) = name.strip_prefix(CLIENT_PREFIX) {
            (id, false)
        } else {
            continue;
        };
        let path = entry.path();
        let Ok(meta) = path.symlink_metadata() else {
            continue;
        };
        let right_type = if is_dir {
            meta.is_dir()
        } else {
            meta.file_type().is_socket() || meta.is_file()
        };
        if !right_type {
            continue;
        }
        let stale = match journal.map(|j| j.invocation_broker(id)) {
            Some(Ok(Some((broker, completed)))) => completed || !broker.is_alive(),
            // Unknown to the journal (or the journal is unreadable): judge by age.
            _ => SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|now| now.as_secs().saturating_sub(meta.mtime().max(0) as u64))
                .is_ok_and(|age| age > UNKNOWN_SOCKET_AGE.as_secs()),
        };
        if stale {
            let removed = if is_dir {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(e) = removed {
                tracing::warn!("failed to remove stale {}: {e}", path.display());
            }
        }
    }
}
