//! The rules of SKILL.md schema v1 (CONTRACT §3) as data: field names, patterns, bounds and the
//! stable error codes. The validator (`validate.rs`) and the JSON Schema generator (`schema.rs`)
//! both read them from here, so the two cannot drift apart. Nothing here parses or decides.

use std::fmt;

use serde::Serialize;

/// `id`: lowercase letter first, then lowercase letters, digits and dashes.
pub const ID_PATTERN: &str = "^[a-z][a-z0-9-]*$";

/// `version`: SemVer `MAJOR.MINOR.PATCH[-pre]` (no build metadata), as in semver.org's regex.
pub const VERSION_PATTERN: &str = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-((0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?$";

/// `min_broker_version` / `max_broker_version`: full SemVer 2.0.0 (build metadata allowed).
pub const BROKER_VERSION_PATTERN: &str = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-((0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$";

/// `signature.public_key_hex`: 32 bytes.
pub const PUBLIC_KEY_HEX_PATTERN: &str = "^[0-9a-fA-F]{64}$";

/// `signature.signature_hex`: 64 bytes.
pub const SIGNATURE_HEX_PATTERN: &str = "^[0-9a-fA-F]{128}$";

/// `x-allowed-files` entries are absolute paths.
pub const ABSOLUTE_PATH_PATTERN: &str = "^/";

/// `x-allowed-domains` entries: a host (or IP literal) glob, without scheme, port separator
/// surprises, path, user info or whitespace.
pub const HOST_GLOB_PATTERN: &str = r"^[A-Za-z0-9.*?\[\]{},!:_-]+$";

/// Extension keys: anything starting with `x-`.
pub const EXTENSION_PREFIX: &str = "x-";

pub const DESCRIPTION_MIN_CHARS: usize = 1;
pub const DESCRIPTION_MAX_CHARS: usize = 200;
pub const TAGS_MAX: usize = 10;
pub const TAG_MAX_CHARS: usize = 30;
pub const EFFORT_MIN: u64 = 1;
pub const EFFORT_MAX: u64 = u32::MAX as u64;
pub const DEFAULT_EFFORT_MINUTES: u32 = 30;

pub const SIGNATURE_ALGO: &str = "ed25519";
pub const SYNC_CLASSES: [&str; 2] = ["private", "shareable"];
pub const TENANT_SCOPES: [&str; 2] = ["any", "pinned"];

pub const REQUIRED_FIELDS: [&str; 5] = [
    "id",
    "version",
    "description",
    "allowed_memory_scopes",
    "allowed_tools",
];

/// Every top-level key schema v1 knows, in the order errors are reported.
pub const KNOWN_FIELDS: [&str; 13] = [
    "id",
    "version",
    "description",
    "allowed_memory_scopes",
    "allowed_tools",
    "disallowed_tools",
    "effort_minutes",
    "min_broker_version",
    "max_broker_version",
    "signature",
    "sync_class",
    "tenant_scope",
    "tags",
];

pub const SIGNATURE_FIELDS: [&str; 3] = ["algo", "public_key_hex", "signature_hex"];

pub const ALLOWED_FILES: &str = "x-allowed-files";
pub const ALLOWED_DOMAINS: &str = "x-allowed-domains";

/// The largest SKILL.md read. Real frontmatter is a few hundred bytes; the cap keeps a hostile
/// file from costing more than a bounded read.
pub const MAX_SKILL_MD_BYTES: u64 = 1024 * 1024;

/// One stable code per rule, reported as `code` in `validate --json`. The set is documented in
/// docs/SKILL-FORMAT.md; codes are only ever added, never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// SKILL.md is larger than [`MAX_SKILL_MD_BYTES`].
    TooLarge,
    /// SKILL.md is not UTF-8.
    Encoding,
    /// The opening or closing `---` line is missing.
    Fence,
    /// The frontmatter is not well-formed YAML, or uses something refused (duplicate keys,
    /// aliases past the budget, nesting too deep).
    Yaml,
    /// A present signature does not verify.
    Signature,
    /// A required field is absent.
    Missing,
    /// A value has the wrong type (string, list, mapping, integer).
    Type,
    /// A string does not match the field's pattern.
    Pattern,
    /// A string is too short or too long.
    Length,
    /// A version is not SemVer.
    Semver,
    /// A value is not one of the allowed words.
    Enum,
    /// A number is out of range.
    Range,
    /// A list has too many entries.
    TooMany,
    /// A top-level key is neither a schema v1 field nor `x-*`.
    UnknownField,
    /// A tool name is not one of CONTRACT §5.
    UnknownTool,
    /// A glob does not compile.
    Glob,
    /// This broker's version is outside `min_broker_version`..=`max_broker_version` (or the
    /// range is empty: max < min).
    BrokerVersion,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 17] = [
        Self::TooLarge,
        Self::Encoding,
        Self::Fence,
        Self::Yaml,
        Self::Signature,
        Self::Missing,
        Self::Type,
        Self::Pattern,
        Self::Length,
        Self::Semver,
        Self::Enum,
        Self::Range,
        Self::TooMany,
        Self::UnknownField,
        Self::UnknownTool,
        Self::Glob,
        Self::BrokerVersion,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TooLarge => "too_large",
            Self::Encoding => "encoding",
            Self::Fence => "fence",
            Self::Yaml => "yaml",
            Self::Signature => "signature",
            Self::Missing => "missing",
            Self::Type => "type",
            Self::Pattern => "pattern",
            Self::Length => "length",
            Self::Semver => "semver",
            Self::Enum => "enum",
            Self::Range => "range",
            Self::TooMany => "too_many",
            Self::UnknownField => "unknown_field",
            Self::UnknownTool => "unknown_tool",
            Self::Glob => "glob",
            Self::BrokerVersion => "broker_version",
        }
    }

    /// Whether JSON Schema can express this rule. The others need the file itself (size,
    /// encoding, fences, YAML), a computation (signature, glob compilation) or the broker's
    /// version, so `skill.schema.json` accepts what only they reject.
    pub fn is_structural(self) -> bool {
        !matches!(
            self,
            Self::TooLarge
                | Self::Encoding
                | Self::Fence
                | Self::Yaml
                | Self::Signature
                | Self::Glob
                | Self::BrokerVersion
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validation failure: the field path (`allowed_tools[2]`, `signature.algo`; empty for the
/// file as a whole), the rule's code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    pub code: ErrorCode,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{} [{}]", self.message, self.code)
        } else {
            write!(f, "{}: {} [{}]", self.field, self.message, self.code)
        }
    }
}
