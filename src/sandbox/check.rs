//! `cyberos sandbox check`: builds a real sandbox (without running anything in it) and returns its
//! report, so that what is printed is what this machine enforces, not what it claims to support.

use std::os::fd::OwnedFd;

use super::report::LayerReport;
use super::{Spec, Stdio3, spawn};

fn dev_null() -> Option<OwnedFd> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .ok()
        .map(OwnedFd::from)
}

/// Every layer's state on this machine, for the current user (and the sandbox uid when root).
pub fn check() -> LayerReport {
    let spec = Spec::new("/bin/true", Vec::new());
    let stdio = Stdio3 {
        stdin: dev_null(),
        stdout: dev_null(),
        stderr: dev_null(),
    };
    match spawn(&spec, stdio) {
        Ok(sandbox) => sandbox.report().clone(),
        Err(e) => {
            let mut report = LayerReport::new();
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                reason.push_str(&format!(": {s}"));
                source = s.source();
            }
            report.complete_with(&reason);
            report
        }
    }
}
