//! Layer §6.6: Landlock. The program may read and execute only the system directories, the few
//! `/etc` entries, the bundle and the client; write only the scratch directory (and the harmless
//! devices); with ABI ≥ 4 it may neither bind nor connect TCP; with ABI ≥ 6 it can reach no
//! abstract socket and signal no process outside its own domain.
//!
//! The requested rights are exactly those of ABI 6, so a kernel with ABI ≥ 6 enforces the ruleset
//! fully; an older one enforces part of it, which is reported as degraded with what is missing.

use std::path::{Path, PathBuf};

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, Ruleset, RulesetAttr as _, RulesetCreatedAttr as _,
    RulesetError, RulesetStatus, Scope, make_bitflags, path_beneath_rules,
};

use super::mounts::{DEVICES, ETC_ENTRIES};
use super::report::LayerState;
use super::{CLIENT_PATH_DIR, SCRATCH_INSIDE, Spec};

const TARGET: ABI = ABI::V6;

/// The kernel's Landlock ABI version (0 when Landlock is missing or disabled).
pub(crate) fn kernel_abi() -> u32 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute only returns the version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// What ABI `abi` lacks of what this sandbox asks for.
fn missing_features(abi: u32) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if abi < 2 {
        missing.push("cross-directory renames (ABI 2)");
    }
    if abi < 3 {
        missing.push("truncation (ABI 3)");
    }
    if abi < 4 {
        missing.push("TCP bind/connect (ABI 4)");
    }
    if abi < 5 {
        missing.push("device ioctls (ABI 5)");
    }
    if abi < 6 {
        missing.push("abstract-socket and signal scoping (ABI 6)");
    }
    missing
}

/// Paths the sandboxed program may read and execute.
fn readable(spec: &Spec, host_view: bool, for_init: bool) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = [
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    paths.extend(ETC_ENTRIES.iter().map(PathBuf::from));
    paths.extend(spec.ro_binds.iter().cloned());
    if host_view {
        paths.extend(spec.client_binary.iter().cloned());
        // On the host view /proc is the host's: only the init reads it, to find orphans.
        if for_init {
            paths.push(PathBuf::from("/proc"));
        }
    } else {
        paths.push(PathBuf::from(CLIENT_PATH_DIR));
        paths.push(PathBuf::from("/proc"));
    }
    paths
}

fn apply(spec: &Spec, host_view: bool, for_init: bool) -> Result<RulesetStatus, RulesetError> {
    let all = AccessFs::from_all(TARGET);
    let read = AccessFs::from_read(TARGET);
    let device: BitFlags<AccessFs> = make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate});
    let scratch: Vec<PathBuf> = match (&spec.scratch, host_view) {
        (Some(host), true) => vec![host.clone()],
        (Some(_), false) => vec![PathBuf::from(SCRATCH_INSIDE)],
        (None, _) => Vec::new(),
    };
    let devices = DEVICES.iter().map(|d| Path::new("/dev").join(d));
    let status = Ruleset::default()
        .handle_access(all)?
        .handle_access(AccessNet::from_all(TARGET))?
        .scope(Scope::from_all(TARGET))?
        .create()?
        .add_rules(path_beneath_rules(
            readable(spec, host_view, for_init),
            read,
        ))?
        .add_rules(path_beneath_rules(devices, device))?
        .add_rules(path_beneath_rules(scratch, all))?
        .restrict_self()?;
    Ok(status.ruleset)
}

/// Restricts this process (and everything it starts) as the program's domain. `for_init` adds the
/// host's `/proc` on the host view (no mount namespace), which the program then loses again.
pub(crate) fn restrict_sandbox(spec: &Spec, host_view: bool, for_init: bool) -> LayerState {
    let abi = kernel_abi();
    if abi == 0 {
        return LayerState::unavailable("Landlock is not supported or not enabled by this kernel");
    }
    match apply(spec, host_view, for_init) {
        Ok(RulesetStatus::FullyEnforced) => LayerState::applied().with_abi(abi),
        Ok(RulesetStatus::PartiallyEnforced) => LayerState::degraded(format!(
            "partially enforced, kernel lacks: {}",
            missing_features(abi).join(", ")
        ))
        .with_abi(abi),
        Ok(RulesetStatus::NotEnforced) => {
            LayerState::unavailable("ruleset not enforced").with_abi(abi)
        }
        Err(e) => LayerState::unavailable(format!("failed to restrict: {e}")).with_abi(abi),
    }
}

/// The supervisor's own domain: no file access at all, no TCP, no abstract sockets. Signals stay
/// unscoped, since it must forward SIGTERM to the init, which lives in a sibling domain.
pub(crate) fn restrict_supervisor() -> Result<(), String> {
    if kernel_abi() == 0 {
        return Ok(());
    }
    let run = || -> Result<RulesetStatus, RulesetError> {
        Ok(Ruleset::default()
            .handle_access(AccessFs::from_all(TARGET))?
            .handle_access(AccessNet::from_all(TARGET))?
            .scope(Scope::AbstractUnixSocket)?
            .create()?
            .restrict_self()?
            .ruleset)
    };
    match run() {
        Ok(RulesetStatus::FullyEnforced) => Ok(()),
        Ok(other) => Err(format!("supervisor ruleset {other:?}")),
        Err(e) => Err(format!("supervisor: {e}")),
    }
}
