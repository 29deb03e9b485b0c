//! `cyberos skill invoke`: turns the command line into a validated [`InvokeRequest`] and runs it.

use std::net::IpAddr;
use std::time::Duration;

use crate::broker::invocation::{self, InvokeRequest};
use crate::cli::{AuditMode, InvokeArgs, SandboxMode};
use crate::exit;
use crate::paths;
use crate::sandbox;
use crate::skill;
use crate::tools::ResolvePin;
use crate::util::{self, TraceContext};

pub fn run(args: InvokeArgs) -> anyhow::Result<u8> {
    let home =
        paths::home(args.home.as_deref()).map_err(|e| exit::coded(exit::USAGE, e.to_string()))?;
    let skills_dirs = paths::skills_dirs(args.skills_dir.as_deref(), &home)
        .map_err(|e| exit::coded(exit::USAGE, e.to_string()))?;
    let tenant_id = paths::tenant(args.tenant.as_deref())
        .map_err(|e| exit::coded(exit::USAGE, e.to_string()))?
        .hyphenated()
        .to_string();
    let invocation_id = match args.invocation_id.as_deref() {
        Some(text) => parse_uuid("--invocation-id", text)?,
        None => uuid::Uuid::new_v4().hyphenated().to_string(),
    };
    let resolve = args
        .resolve
        .iter()
        .map(|r| parse_resolve(r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let timeout = args
        .timeout
        .as_deref()
        .map(|t| {
            util::parse_duration(t).map_err(|e| exit::coded(exit::USAGE, format!("--timeout: {e}")))
        })
        .transpose()?;

    let load = |arg: &str| -> Result<skill::Bundle, skill::LoadError> {
        let dir = skill::resolve_skill(arg, &skills_dirs)?;
        skill::load_bundle(&dir, &skill::broker_version())
    };
    let bundle = load(&args.skill).map_err(|e| exit::coded(e.invoke_exit_code(), e.to_string()))?;
    let budget = Duration::from_secs(u64::from(bundle.manifest.effort_minutes) * 60);
    let budget = match timeout {
        Some(t) if t > budget => {
            return Err(exit::coded(
                exit::USAGE,
                format!(
                    "--timeout {} exceeds the skill's budget of effort_minutes: {}",
                    args.timeout.as_deref().unwrap_or_default(),
                    bundle.manifest.effort_minutes
                ),
            ));
        }
        Some(t) if t.is_zero() => {
            return Err(exit::coded(exit::USAGE, "--timeout must be positive"));
        }
        Some(t) => t,
        None => budget,
    };
    let request = InvokeRequest {
        manifest: bundle.manifest,
        bundle_dir: bundle.dir,
        main: bundle.main_path,
        home,
        tenant_id,
        invocation_id,
        budget,
        sandbox_mode: match args.sandbox {
            SandboxMode::BestEffort => sandbox::Mode::BestEffort,
            SandboxMode::Strict => sandbox::Mode::Strict,
        },
        audit_required: args.audit == AuditMode::Required,
        resolve,
        args: args.args,
        json_summary: args.json,
        parent_trace: std::env::var("TRACEPARENT")
            .ok()
            .as_deref()
            .and_then(TraceContext::parse),
    };
    let summary = invocation::run(request).map_err(|e| {
        let code = e.exit_code();
        exit::coded(code, e.to_string())
    })?;
    if args.json {
        if summary.needs_newline {
            println!();
        }
        println!("{}", summary.json);
    }
    Ok(summary.exit_code)
}

fn parse_uuid(flag: &str, text: &str) -> anyhow::Result<String> {
    uuid::Uuid::parse_str(text)
        .map(|u| u.hyphenated().to_string())
        .map_err(|e| exit::coded(exit::USAGE, format!("{flag} {text:?} is not a UUID: {e}")))
}

/// `HOST:PORT:ADDR`, where ADDR may be a bracketed IPv6 address.
fn parse_resolve(text: &str) -> anyhow::Result<ResolvePin> {
    let usage = |why: &str| {
        exit::coded(
            exit::USAGE,
            format!("--resolve {text:?}: {why} (expected HOST:PORT:ADDR)"),
        )
    };
    let mut parts = text.splitn(3, ':');
    let (Some(host), Some(port), Some(addr)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(usage("missing field"));
    };
    if host.is_empty() {
        return Err(usage("empty host"));
    }
    let port: u16 = port.parse().map_err(|_| usage("invalid port"))?;
    let addr: IpAddr = addr
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| usage("invalid address"))?;
    Ok(ResolvePin {
        host: host.trim_end_matches('.').to_ascii_lowercase(),
        port,
        addr,
    })
}
