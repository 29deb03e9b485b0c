//! `cyberos sandbox check`: builds a real sandbox (without running anything in it) and returns its
//! report, so that what is printed is what this machine enforces, not what it claims to support.

use std::os::fd::OwnedFd;

use super::report::LayerReport;
use super::{SandboxError, Spec, Stdio3, spawn};

fn dev_null() -> Option<OwnedFd> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .ok()
        .map(OwnedFd::from)
}

/// Every layer's state on this machine, for the current user (and the sandbox uid when root).
/// A sandbox that cannot be built at all is a report with every layer unavailable and the reason;
/// only a bad configuration (`$CYBEROS_SANDBOX_DISABLE`) is an error.
pub fn check() -> Result<LayerReport, SandboxError> {
    let spec = Spec::new("/bin/true", Vec::new());
    let stdio = Stdio3 {
        stdin: dev_null(),
        stdout: dev_null(),
        stderr: dev_null(),
    };
    match spawn(&spec, stdio) {
        Ok(sandbox) => Ok(sandbox.report().clone()),
        Err(e @ SandboxError::InvalidSpec(_)) => Err(e),
        Err(e) => {
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                reason.push_str(&format!(": {s}"));
                source = s.source();
            }
            let mut report = LayerReport::new();
            report.complete_with(&reason);
            Ok(report)
        }
    }
}
