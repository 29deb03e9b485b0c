//! The SKILL.md fixtures in tests/fixtures/skills/ and what `validate` must say about each: the
//! exact field and code of the one expected error, or `None` for a valid file. Shared by the CLI
//! tests and the JSON Schema agreement test.

use std::path::PathBuf;

/// (fixture directory, expected (field, code) or None when valid).
pub const FIXTURES: &[(&str, Option<(&str, &str)>)] = &[
    ("valid-minimal", None),
    ("valid-full", None),
    ("valid-crlf", None),
    ("valid-yaml12-strings", None),
    ("x-field-kept", None),
    ("signed", None),
    ("missing-open-fence", Some(("", "fence"))),
    ("missing-close-fence", Some(("", "fence"))),
    ("missing-id", Some(("id", "missing"))),
    ("missing-allowed-tools", Some(("allowed_tools", "missing"))),
    (
        "missing-memory-scopes",
        Some(("allowed_memory_scopes", "missing")),
    ),
    ("bad-id", Some(("id", "pattern"))),
    ("non-string-id", Some(("id", "type"))),
    ("bad-version", Some(("version", "semver"))),
    ("version-build-metadata", Some(("version", "semver"))),
    ("description-empty", Some(("description", "length"))),
    ("description-too-long", Some(("description", "length"))),
    (
        "bad-memory-glob",
        Some(("allowed_memory_scopes[1]", "glob")),
    ),
    ("unknown-tool", Some(("allowed_tools[2]", "unknown_tool"))),
    (
        "unknown-disallowed-tool",
        Some(("disallowed_tools[0]", "unknown_tool")),
    ),
    ("tools-not-a-list", Some(("allowed_tools", "type"))),
    ("tool-not-a-string", Some(("allowed_tools[0]", "type"))),
    ("unknown-field", Some(("alowed_tools", "unknown_field"))),
    ("effort-zero", Some(("effort_minutes", "range"))),
    ("effort-not-integer", Some(("effort_minutes", "type"))),
    ("bad-sync-class", Some(("sync_class", "enum"))),
    ("bad-tenant-scope", Some(("tenant_scope", "enum"))),
    ("too-many-tags", Some(("tags", "too_many"))),
    ("tag-too-long", Some(("tags[1]", "length"))),
    (
        "files-not-absolute",
        Some(("x-allowed-files[0]", "pattern")),
    ),
    ("files-bad-glob", Some(("x-allowed-files[1]", "glob"))),
    (
        "domains-with-scheme",
        Some(("x-allowed-domains[0]", "pattern")),
    ),
    ("domains-bad-glob", Some(("x-allowed-domains[1]", "glob"))),
    (
        "broker-too-old",
        Some(("min_broker_version", "broker_version")),
    ),
    (
        "broker-too-new",
        Some(("max_broker_version", "broker_version")),
    ),
    (
        "broker-range-inverted",
        Some(("max_broker_version", "broker_version")),
    ),
    (
        "broker-version-not-semver",
        Some(("min_broker_version", "semver")),
    ),
    ("signature-bad-algo", Some(("signature.algo", "enum"))),
    (
        "signature-short-key",
        Some(("signature.public_key_hex", "pattern")),
    ),
    (
        "signature-unknown-key",
        Some(("signature.comment", "unknown_field")),
    ),
    ("signed-tampered-body", Some(("signature", "signature"))),
    // The tampering also adds an unknown tool and a bad sync_class: an unverified file's other
    // fields are not even looked at.
    ("signed-tampered-field", Some(("signature", "signature"))),
    ("frontmatter-not-a-mapping", Some(("", "type"))),
    ("yaml-syntax-error", Some(("", "yaml"))),
    ("duplicate-keys", Some(("", "yaml"))),
    ("merge-key", Some(("", "yaml"))),
    ("alias-bomb", Some(("", "yaml"))),
    ("deep-nesting", Some(("", "yaml"))),
    ("deep-block-nesting", Some(("", "yaml"))),
    ("invalid-utf8", Some(("", "encoding"))),
];

/// Fixtures with more than one expected error, checked by their own tests.
pub const MULTI_ERROR_FIXTURES: &[&str] = &["multiple-errors"];

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills")
}

pub fn path(name: &str) -> PathBuf {
    dir().join(name)
}
