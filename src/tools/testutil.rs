//! Unit-test fixtures: an [`Invocation`] built from a frontmatter policy, with its own home.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::journal::Journal;
use crate::skill::manifest::{Manifest, SyncClass, TenantScope};
use crate::skill::policy::Policy;
use crate::tools::{CallContext, Invocation, ResolvePin, Tool, ToolError, ToolName};
use crate::util::TraceContext;

/// What the skill's frontmatter allows.
#[derive(Default)]
pub struct Allow<'a> {
    pub memory: &'a [&'a str],
    pub files: &'a [&'a str],
    pub domains: &'a [&'a str],
}

pub struct Fixture {
    pub home: tempfile::TempDir,
    pub inv: Invocation,
    pub trace: TraceContext,
}

impl Fixture {
    pub fn new(allow: Allow<'_>) -> Self {
        let home = tempfile::tempdir().expect("tempdir");
        let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let manifest = Manifest {
            id: "test-skill".into(),
            version: semver::Version::new(1, 0, 0),
            description: "test".into(),
            allowed_memory_scopes: strings(allow.memory),
            allowed_tools: ToolName::ALL.to_vec(),
            disallowed_tools: vec![],
            effort_minutes: 1,
            min_broker_version: None,
            max_broker_version: None,
            signature: None,
            sync_class: SyncClass::Private,
            tenant_scope: TenantScope::Any,
            tags: vec![],
            extensions: Default::default(),
            allowed_files: strings(allow.files),
            allowed_domains: strings(allow.domains),
        };
        let memory_root = home.path().join("memory");
        let scratch_dir = home.path().join("scratch");
        std::fs::create_dir_all(&memory_root).expect("memory root");
        std::fs::create_dir_all(&scratch_dir).expect("scratch");
        let journal = Journal::open(home.path()).expect("journal");
        let policy = Arc::new(Policy::from_manifest(&manifest).expect("policy"));
        let mut inv = Invocation::standalone("test-skill", policy, memory_root, scratch_dir);
        inv.journal = Some(Arc::new(journal));
        Self {
            home,
            inv,
            trace: TraceContext::new_root(),
        }
    }

    pub fn pin(&mut self, host: &str, port: u16, addr: &str) {
        self.inv.resolve.push(ResolvePin {
            host: host.into(),
            port,
            addr: addr.parse().expect("addr"),
        });
    }

    pub fn ctx(&self) -> CallContext<'_> {
        CallContext {
            invocation: &self.inv,
            call_id: "call-1",
            trace: self.trace,
        }
    }

    pub fn memory(&self) -> &Path {
        &self.inv.memory_root
    }

    /// `check` then `call`, as the broker runs them.
    pub fn run(&self, tool: &dyn Tool, args: Value) -> Result<Value, ToolError> {
        let ctx = self.ctx();
        tool.check(&ctx, &args)?;
        tool.call(&ctx, &args)
    }
}

/// A canonical temporary directory (tests compare canonical paths).
pub fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::fs::canonicalize(dir.path()).expect("canonical");
    (dir, path)
}

pub fn s(path: &Path) -> String {
    path.to_str().expect("utf-8 path").to_owned()
}
