//! The validated, typed form of a SKILL.md frontmatter (schema v1, CONTRACT §3), with defaults
//! applied. Only `skill::parse` constructs it; everything downstream trusts it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::tools::ToolName;

#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    pub id: String,
    pub version: semver::Version,
    pub description: String,
    pub allowed_memory_scopes: Vec<String>,
    pub allowed_tools: Vec<ToolName>,
    pub disallowed_tools: Vec<ToolName>,
    /// Budget in minutes (default 30).
    pub effort_minutes: u32,
    pub min_broker_version: Option<semver::Version>,
    pub max_broker_version: Option<semver::Version>,
    pub signature: Option<Signature>,
    pub sync_class: SyncClass,
    pub tenant_scope: TenantScope,
    pub tags: Vec<String>,
    /// Every `x-*` key as written, including the two below.
    pub extensions: BTreeMap<String, serde_json::Value>,
    /// `x-allowed-files`: absolute-path globs.
    pub allowed_files: Vec<String>,
    /// `x-allowed-domains`: host globs, lowercased.
    pub allowed_domains: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Signature {
    pub algo: String,
    pub public_key_hex: String,
    pub signature_hex: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncClass {
    Private,
    Shareable,
}

impl SyncClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::Shareable => "shareable",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantScope {
    Any,
    Pinned,
}

impl TenantScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::Pinned => "pinned",
        }
    }
}
