//! The field rules of SKILL.md schema v1 (CONTRACT §3), applied to the frontmatter once it is a
//! JSON value. Every failing rule is collected with its field path and code; a [`Manifest`] (with
//! defaults applied) comes out only when there are none. A present signature is checked first and,
//! when it fails, is the only error reported: nothing else in an unverified file is trusted.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::skill::manifest::{Manifest, Signature, SyncClass, TenantScope};
use crate::skill::policy::compile_glob;
use crate::skill::rules::{self as r, ErrorCode as C, FieldError};
use crate::skill::signature;
use crate::tools::ToolName;

fn regex(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("schema pattern {pattern:?} is invalid: {e}"))
}

static ID: LazyLock<Regex> = LazyLock::new(|| regex(r::ID_PATTERN));
static VERSION: LazyLock<Regex> = LazyLock::new(|| regex(r::VERSION_PATTERN));
static BROKER_VERSION: LazyLock<Regex> = LazyLock::new(|| regex(r::BROKER_VERSION_PATTERN));
static PUBLIC_KEY_HEX: LazyLock<Regex> = LazyLock::new(|| regex(r::PUBLIC_KEY_HEX_PATTERN));
static SIGNATURE_HEX: LazyLock<Regex> = LazyLock::new(|| regex(r::SIGNATURE_HEX_PATTERN));
static HOST_GLOB: LazyLock<Regex> = LazyLock::new(|| regex(r::HOST_GLOB_PATTERN));

/// Validates a frontmatter value against schema v1. `body` is the markdown after the closing
/// fence (needed for the signature); `broker` is the version min/max_broker_version are checked
/// against.
pub fn validate(
    frontmatter: &Value,
    body: &str,
    broker: &semver::Version,
) -> Result<Manifest, Vec<FieldError>> {
    let Some(map) = frontmatter.as_object() else {
        return Err(vec![FieldError::new(
            "",
            C::Type,
            format!(
                "the frontmatter must be a YAML mapping, found {}",
                kind(frontmatter)
            ),
        )]);
    };
    let mut v = Validator {
        map,
        errors: Vec::new(),
    };

    let signature = v.signature(body);
    if !v.errors.is_empty() {
        return Err(v.errors);
    }

    for key in map.keys() {
        if !r::KNOWN_FIELDS.contains(&key.as_str()) && !key.starts_with(r::EXTENSION_PREFIX) {
            v.error(
                key.clone(),
                C::UnknownField,
                format!(
                    "unknown field {key:?} (schema v1 fields: {}; or an x-* extension)",
                    r::KNOWN_FIELDS.join(", ")
                ),
            );
        }
    }
    for field in r::REQUIRED_FIELDS {
        if !map.contains_key(field) {
            v.error(
                field,
                C::Missing,
                format!("the required field {field} is missing"),
            );
        }
    }

    let id = v
        .string("id")
        .map(|s| {
            v.pattern(
                "id",
                s,
                &ID,
                "lowercase letters, digits and dashes, starting with a letter",
            )
        })
        .unwrap_or_default();
    let version = v.version("version", &VERSION, "MAJOR.MINOR.PATCH[-pre]");
    let description = v.string("description").unwrap_or_default().to_owned();
    let len = description.chars().count();
    if matches!(map.get("description"), Some(Value::String(_)))
        && !(r::DESCRIPTION_MIN_CHARS..=r::DESCRIPTION_MAX_CHARS).contains(&len)
    {
        v.error(
            "description",
            C::Length,
            format!(
                "must be {}–{} characters, found {len}",
                r::DESCRIPTION_MIN_CHARS,
                r::DESCRIPTION_MAX_CHARS
            ),
        );
    }
    let allowed_memory_scopes = v.globs("allowed_memory_scopes");
    let allowed_tools = v.tools("allowed_tools");
    let disallowed_tools = v.tools("disallowed_tools");
    let effort_minutes = v.effort();
    let min = v.version("min_broker_version", &BROKER_VERSION, "SemVer");
    let max = v.version("max_broker_version", &BROKER_VERSION, "SemVer");
    v.broker_range(min.as_ref(), max.as_ref(), broker);
    let sync_class = match v.word("sync_class", &r::SYNC_CLASSES) {
        Some("shareable") => SyncClass::Shareable,
        _ => SyncClass::Private,
    };
    let tenant_scope = match v.word("tenant_scope", &r::TENANT_SCOPES) {
        Some("pinned") => TenantScope::Pinned,
        _ => TenantScope::Any,
    };
    let tags = v.tags();

    let extensions: BTreeMap<String, Value> = map
        .iter()
        .filter(|(k, _)| k.starts_with(r::EXTENSION_PREFIX))
        .map(|(k, val)| (k.clone(), val.clone()))
        .collect();
    let allowed_files = v.allowed_files();
    let allowed_domains = v.allowed_domains();

    if !v.errors.is_empty() {
        return Err(v.errors);
    }
    Ok(Manifest {
        id: id.to_owned(),
        // Present and valid: otherwise an error was recorded above.
        version: version.unwrap_or_else(|| semver::Version::new(0, 0, 0)),
        description,
        allowed_memory_scopes,
        allowed_tools,
        disallowed_tools,
        effort_minutes,
        min_broker_version: min,
        max_broker_version: max,
        signature,
        sync_class,
        tenant_scope,
        tags,
        extensions,
        allowed_files,
        allowed_domains,
    })
}

/// "a string", "a list", ... for type errors.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

struct Validator<'a> {
    map: &'a Map<String, Value>,
    errors: Vec<FieldError>,
}

impl<'a> Validator<'a> {
    fn error(&mut self, field: impl Into<String>, code: C, message: impl Into<String>) {
        self.errors.push(FieldError::new(field, code, message));
    }

    fn type_error(&mut self, field: impl Into<String>, expected: &str, found: &Value) {
        self.error(
            field,
            C::Type,
            format!("must be {expected}, found {}", kind(found)),
        );
    }

    /// The string value of an optional field; a type error if present and not a string.
    fn string(&mut self, field: &str) -> Option<&'a str> {
        match self.map.get(field)? {
            Value::String(s) => Some(s),
            other => {
                self.type_error(field, "a string", other);
                None
            }
        }
    }

    fn pattern<'s>(&mut self, field: &str, value: &'s str, re: &Regex, what: &str) -> &'s str {
        if !re.is_match(value) {
            self.error(
                field,
                C::Pattern,
                format!("{value:?} is not valid: {what} ({})", re.as_str()),
            );
        }
        value
    }

    fn version(&mut self, field: &str, re: &Regex, what: &str) -> Option<semver::Version> {
        let text = self.string(field)?;
        let parsed = re
            .is_match(text)
            .then(|| semver::Version::parse(text).ok())
            .flatten();
        if parsed.is_none() {
            self.error(
                field,
                C::Semver,
                format!("{text:?} is not a SemVer version ({what}, e.g. 1.2.3)"),
            );
        }
        parsed
    }

    /// A list of strings; entries that are not strings are type errors at `field[i]`.
    fn string_list(&mut self, field: &str) -> Vec<(usize, &'a str)> {
        match self.map.get(field) {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => out.push((i, s.as_str())),
                        other => self.type_error(format!("{field}[{i}]"), "a string", other),
                    }
                }
                out
            }
            Some(other) => {
                self.type_error(field, "a list", other);
                Vec::new()
            }
        }
    }

    fn glob(&mut self, field: &str, i: usize, pattern: &str) {
        if let Err(e) = compile_glob(pattern) {
            self.error(
                format!("{field}[{i}]"),
                C::Glob,
                format!("{pattern:?} is not a valid glob: {}", e.kind()),
            );
        }
    }

    fn globs(&mut self, field: &str) -> Vec<String> {
        let items = self.string_list(field);
        for &(i, pattern) in &items {
            self.glob(field, i, pattern);
        }
        items.into_iter().map(|(_, s)| s.to_owned()).collect()
    }

    fn tools(&mut self, field: &str) -> Vec<ToolName> {
        let mut out = Vec::new();
        for (i, name) in self.string_list(field) {
            match ToolName::parse(name) {
                Some(tool) => out.push(tool),
                None => {
                    let known: Vec<&str> = ToolName::ALL.iter().map(|t| t.as_str()).collect();
                    self.error(
                        format!("{field}[{i}]"),
                        C::UnknownTool,
                        format!("unknown tool {name:?} (tools: {})", known.join(", ")),
                    );
                }
            }
        }
        out
    }

    fn effort(&mut self) -> u32 {
        let Some(value) = self.map.get("effort_minutes") else {
            return r::DEFAULT_EFFORT_MINUTES;
        };
        // JSON Schema's `integer` also admits 3.0; so does this, to agree with skill.schema.json.
        let n = match value {
            Value::Number(n) => n
                .as_u64()
                .map(|u| u as f64)
                .or_else(|| n.as_i64().map(|i| i as f64))
                .or(n.as_f64()),
            _ => None,
        };
        match n {
            Some(f) if f.fract() == 0.0 => {
                if f < r::EFFORT_MIN as f64 || f > r::EFFORT_MAX as f64 {
                    self.error(
                        "effort_minutes",
                        C::Range,
                        format!(
                            "must be an integer from {} to {}, found {value}",
                            r::EFFORT_MIN,
                            r::EFFORT_MAX
                        ),
                    );
                    r::DEFAULT_EFFORT_MINUTES
                } else {
                    f as u32
                }
            }
            _ => {
                self.type_error("effort_minutes", "an integer (minutes)", value);
                r::DEFAULT_EFFORT_MINUTES
            }
        }
    }

    fn broker_range(
        &mut self,
        min: Option<&semver::Version>,
        max: Option<&semver::Version>,
        broker: &semver::Version,
    ) {
        if let (Some(min), Some(max)) = (min, max) {
            if min > max {
                self.error("max_broker_version", C::BrokerVersion, format!("max_broker_version {max} is lower than min_broker_version {min}: no broker can run this skill"));
                return;
            }
        }
        if let Some(min) = min.filter(|min| broker < *min) {
            self.error(
                "min_broker_version",
                C::BrokerVersion,
                format!("this skill needs cyberos {min} or newer; this is {broker}"),
            );
        }
        if let Some(max) = max.filter(|max| broker > *max) {
            self.error(
                "max_broker_version",
                C::BrokerVersion,
                format!("this skill needs cyberos {max} or older; this is {broker}"),
            );
        }
    }

    fn word(&mut self, field: &str, allowed: &[&'static str]) -> Option<&'static str> {
        let text = self.string(field)?;
        let found = allowed.iter().copied().find(|w| *w == text);
        if found.is_none() {
            self.error(
                field,
                C::Enum,
                format!("{text:?} is not one of: {}", allowed.join(", ")),
            );
        }
        found
    }

    fn tags(&mut self) -> Vec<String> {
        let tags = self.string_list("tags");
        if let Some(Value::Array(all)) = self.map.get("tags") {
            if all.len() > r::TAGS_MAX {
                self.error(
                    "tags",
                    C::TooMany,
                    format!("at most {} tags, found {}", r::TAGS_MAX, all.len()),
                );
            }
        }
        for &(i, tag) in &tags {
            let len = tag.chars().count();
            if len > r::TAG_MAX_CHARS {
                self.error(
                    format!("tags[{i}]"),
                    C::Length,
                    format!(
                        "a tag is at most {} characters, found {len}",
                        r::TAG_MAX_CHARS
                    ),
                );
            }
        }
        tags.into_iter().map(|(_, s)| s.to_owned()).collect()
    }

    fn allowed_files(&mut self) -> Vec<String> {
        let field = r::ALLOWED_FILES;
        let items = self.string_list(field);
        for &(i, pattern) in &items {
            if pattern.starts_with('/') {
                self.glob(field, i, pattern);
            } else {
                self.error(
                    format!("{field}[{i}]"),
                    C::Pattern,
                    format!("{pattern:?} is not an absolute path glob (it must start with /)"),
                );
            }
        }
        items.into_iter().map(|(_, s)| s.to_owned()).collect()
    }

    fn allowed_domains(&mut self) -> Vec<String> {
        let field = r::ALLOWED_DOMAINS;
        let items = self.string_list(field);
        let mut out = Vec::with_capacity(items.len());
        for (i, pattern) in items {
            if HOST_GLOB.is_match(pattern) {
                let host = pattern.trim_end_matches('.').to_ascii_lowercase();
                self.glob(field, i, &host);
                out.push(host);
            } else {
                self.error(
                    format!("{field}[{i}]"),
                    C::Pattern,
                    format!("{pattern:?} is not a host glob (a host name or IP literal, `*` for any labels; no scheme, path, port or spaces)"),
                );
            }
        }
        out
    }

    /// The `signature` block: shape first, then verification over the whole file. Errors here
    /// stop validation.
    fn signature(&mut self, body: &str) -> Option<Signature> {
        let value = self.map.get("signature")?;
        let Value::Object(block) = value else {
            self.type_error(
                "signature",
                "a mapping {algo, public_key_hex, signature_hex}",
                value,
            );
            return None;
        };
        for key in block.keys() {
            if !r::SIGNATURE_FIELDS.contains(&key.as_str()) {
                self.error(
                    format!("signature.{key}"),
                    C::UnknownField,
                    format!(
                        "unknown field {key:?} (signature fields: {})",
                        r::SIGNATURE_FIELDS.join(", ")
                    ),
                );
            }
        }
        let mut field = |name: &str, re: Option<&Regex>| -> Option<String> {
            let path = format!("signature.{name}");
            match block.get(name) {
                None => {
                    self.error(
                        path,
                        C::Missing,
                        format!("the signature field {name} is missing"),
                    );
                    None
                }
                Some(Value::String(s)) => match re {
                    Some(re) if !re.is_match(s) => {
                        self.error(
                            path,
                            C::Pattern,
                            format!("{name} must be hex ({})", re.as_str()),
                        );
                        None
                    }
                    _ => Some(s.clone()),
                },
                Some(other) => {
                    self.type_error(path, "a string", other);
                    None
                }
            }
        };
        let algo = field("algo", None);
        let public_key_hex = field("public_key_hex", Some(&PUBLIC_KEY_HEX));
        let signature_hex = field("signature_hex", Some(&SIGNATURE_HEX));
        if let Some(algo) = algo.as_deref().filter(|a| *a != r::SIGNATURE_ALGO) {
            self.error(
                "signature.algo",
                C::Enum,
                format!("{algo:?} is not supported (only {})", r::SIGNATURE_ALGO),
            );
        }
        let (Some(algo), Some(public_key_hex), Some(signature_hex)) =
            (algo, public_key_hex, signature_hex)
        else {
            return None;
        };
        if !self.errors.is_empty() {
            return None;
        }
        if let Err(e) = signature::verify(self.map, body, &public_key_hex, &signature_hex) {
            self.error("signature", C::Signature, e.to_string());
            return None;
        }
        Some(Signature {
            algo,
            public_key_hex: public_key_hex.to_ascii_lowercase(),
            signature_hex: signature_hex.to_ascii_lowercase(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn broker() -> semver::Version {
        semver::Version::new(1, 0, 0)
    }

    fn minimal() -> Value {
        json!({"id": "a", "version": "1.0.0", "description": "d", "allowed_memory_scopes": [], "allowed_tools": []})
    }

    fn codes(v: &Value) -> Vec<(String, &'static str)> {
        validate(v, "", &broker())
            .unwrap_err()
            .into_iter()
            .map(|e| (e.field, e.code.as_str()))
            .collect()
    }

    #[test]
    fn defaults_are_applied() {
        let m = validate(&minimal(), "", &broker()).unwrap();
        assert_eq!(m.effort_minutes, 30);
        assert_eq!(m.sync_class, SyncClass::Private);
        assert_eq!(m.tenant_scope, TenantScope::Any);
        assert!(m.disallowed_tools.is_empty() && m.tags.is_empty() && m.signature.is_none());
    }

    #[test]
    fn domains_are_lowercased_without_the_trailing_dot() {
        let mut v = minimal();
        v["x-allowed-domains"] = json!(["API.Example.COM.", "*.example.org"]);
        let m = validate(&v, "", &broker()).unwrap();
        assert_eq!(m.allowed_domains, ["api.example.com", "*.example.org"]);
    }

    #[test]
    fn a_failing_signature_hides_every_other_error() {
        let mut v = minimal();
        v["id"] = json!(7);
        v["bogus"] = json!(1);
        v["signature"] = json!({"algo": "ed25519", "public_key_hex": "ab".repeat(32), "signature_hex": "cd".repeat(64)});
        let got = codes(&v);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].1, "signature");
        // Without the signature, the other errors show.
        v.as_object_mut().unwrap().remove("signature");
        assert_eq!(
            codes(&v),
            [
                ("bogus".to_owned(), "unknown_field"),
                ("id".to_owned(), "type")
            ]
        );
    }

    #[test]
    fn list_entries_are_indexed_from_zero() {
        let mut v = minimal();
        v["allowed_tools"] = json!(["Read", 3, "Nope"]);
        assert_eq!(
            codes(&v),
            [
                ("allowed_tools[1]".to_owned(), "type"),
                ("allowed_tools[2]".to_owned(), "unknown_tool")
            ]
        );
    }
}
