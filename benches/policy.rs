//! Enforcement alone (docs/BENCHMARKS.md, case 3): one check of a skill's policy against 100 globs
//! per kind, as every `tool.call` runs it, on `cyberos::skill::policy::Policy`.
//!
//! `cargo bench --bench policy`. Each check is measured twice: a path the *last* glob allows (every
//! pattern had a chance to match first) and a path no glob allows (the full set is consulted).
//! `scripts/bench` reads criterion's samples from `target/criterion/enforcement/` for the table.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use cyberos::skill::manifest::{Manifest, SyncClass, TenantScope};
use cyberos::skill::policy::{Policy, canonical_memory_path};
use cyberos::tools::{CallContext, Invocation, ToolName};
use cyberos::util::TraceContext;
use serde_json::json;

/// Globs per kind, as the target says.
const GLOBS: usize = 100;

/// A manifest with `GLOBS` memory scopes, file globs and domain globs, shaped like real ones: a
/// literal prefix then `**` or a `*` segment, so the set cannot be reduced to one literal.
fn manifest() -> Manifest {
    let memory = (0..GLOBS)
        .map(|i| format!("memories/team-{i}/projects/*/notes/**"))
        .collect();
    let files = (0..GLOBS)
        .map(|i| format!("/srv/data/project-{i}/**/*.md"))
        .collect();
    let domains: Vec<String> = (0..GLOBS)
        .map(|i| format!("*.svc-{i}.example.com"))
        .collect();
    Manifest {
        id: "enforcement-bench".into(),
        version: semver::Version::new(1, 0, 0),
        description: "policy benchmark".into(),
        allowed_memory_scopes: memory,
        allowed_tools: vec![ToolName::MemoryRead, ToolName::Read, ToolName::HttpFetch],
        disallowed_tools: vec![ToolName::Bash],
        effort_minutes: 30,
        min_broker_version: None,
        max_broker_version: None,
        signature: None,
        sync_class: SyncClass::Private,
        tenant_scope: TenantScope::Any,
        tags: Vec::new(),
        extensions: Default::default(),
        allowed_files: files,
        allowed_domains: domains,
    }
}

fn enforcement(c: &mut Criterion) {
    let policy = Policy::from_manifest(&manifest()).expect("the bench globs compile");
    let last = GLOBS - 1;
    let memory_hit = format!("memories/team-{last}/projects/cyberos/notes/2026/11/29.md");
    let memory_miss = "memories/team-x/projects/cyberos/notes/29.md".to_owned();
    let file_hit = PathBuf::from(format!("/srv/data/project-{last}/a/b/c/readme.md"));
    let file_miss = PathBuf::from("/srv/data/project-x/a/b/c/readme.md");
    let domain_hit = format!("api.eu.svc-{last}.example.com");
    let domain_miss = "api.eu.svc-x.example.com".to_owned();
    // The checks must mean what the table says.
    assert!(policy.memory_allowed(&memory_hit) && !policy.memory_allowed(&memory_miss));
    assert!(policy.file_allowed(&file_hit) && !policy.file_allowed(&file_miss));
    assert!(policy.domain_allowed(&domain_hit) && !policy.domain_allowed(&domain_miss));

    let mut group = c.benchmark_group("enforcement");
    group
        .sample_size(60)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("tool_allowed", |b| {
        b.iter(|| policy.check_tool(black_box("MemoryRead")))
    });
    group.bench_function("tool_disallowed", |b| {
        b.iter(|| policy.check_tool(black_box("Bash")))
    });
    group.bench_function("memory_hit", |b| {
        b.iter(|| {
            let path = canonical_memory_path(black_box(&memory_hit)).expect("valid");
            policy.memory_allowed(&path)
        })
    });
    group.bench_function("memory_miss", |b| {
        b.iter(|| {
            let path = canonical_memory_path(black_box(&memory_miss)).expect("valid");
            policy.memory_allowed(&path)
        })
    });
    group.bench_function("file_hit", |b| {
        b.iter(|| policy.file_allowed(black_box(file_hit.as_path())))
    });
    group.bench_function("file_miss", |b| {
        b.iter(|| policy.file_allowed(black_box(file_miss.as_path())))
    });
    group.bench_function("domain_hit", |b| {
        b.iter(|| policy.domain_allowed(black_box(&domain_hit)))
    });
    group.bench_function("domain_miss", |b| {
        b.iter(|| policy.domain_allowed(black_box(&domain_miss)))
    });

    // The whole pre-dispatch check of one MemoryRead call through the `Tool` trait: argument
    // parsing, canonicalisation and the scope check, as the broker runs it before the started row.
    let invocation = Invocation::standalone(
        "enforcement-bench",
        Arc::new(policy.clone()),
        PathBuf::from("/nonexistent/memory"),
        PathBuf::from("/nonexistent/scratch"),
    );
    let ctx = CallContext {
        invocation: &invocation,
        call_id: "call-1",
        trace: TraceContext::new_root(),
    };
    let tool = cyberos::tools::tool(ToolName::MemoryRead).expect("MemoryRead is registered");
    let args = json!({ "path": memory_hit });
    assert!(tool.check(&ctx, &args).is_ok());
    group.bench_function("memory_read_check", |b| {
        b.iter(|| tool.check(&ctx, black_box(&args)))
    });
    group.finish();

    // Compiling the policy happens once per invocation; recorded for context.
    let manifest = manifest();
    let mut compile = c.benchmark_group("enforcement_compile");
    compile
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    compile.bench_function("policy_from_manifest", |b| {
        b.iter(|| {
            Policy::from_manifest(black_box(&manifest))
                .map(|p| p.file_tree_allowed(Path::new("/srv")))
        })
    });
    compile.finish();
}

criterion_group!(benches, enforcement);
criterion_main!(benches);
