//! `cyberos sandbox check [--json]`: which sandbox layers this machine really enforces, found by
//! building a sandbox. Exit 0 whenever the check ran; `complete` says whether every layer is in.

use serde::Serialize;

use crate::cli::{SandboxCheckArgs, SandboxCommand};
use crate::sandbox::{self, LayerReport, Status};

/// The `--json` object: layers in report order.
#[derive(Serialize)]
struct CheckJson<'a> {
    complete: bool,
    layers: &'a LayerReport,
}

pub fn run(command: SandboxCommand) -> anyhow::Result<u8> {
    match command {
        SandboxCommand::Check(args) => check(&args),
    }
}

fn check(args: &SandboxCheckArgs) -> anyhow::Result<u8> {
    let report =
        sandbox::check().map_err(|e| crate::exit::coded(crate::exit::USAGE, e.to_string()))?;
    if args.json {
        let json = serde_json::to_string(&CheckJson {
            complete: report.is_complete(),
            layers: &report,
        })?;
        println!("{json}");
        return Ok(crate::exit::SUCCESS);
    }
    for (layer, state) in report.layers() {
        let word = match state.status {
            Status::Applied => "available",
            Status::Degraded => "degraded",
            Status::Unavailable => "unavailable",
        };
        let mut line = format!("{:<10} {word}", layer.name());
        if let Some(abi) = state.abi {
            line.push_str(&format!(" (ABI {abi})"));
        }
        if let Some(reason) = &state.reason {
            line.push_str(&format!(": {reason}"));
        }
        println!("{line}");
    }
    Ok(crate::exit::SUCCESS)
}
