//! SKILL.md: the schema-v1 frontmatter (CONTRACT §3), its parser and validator, signatures, and
//! the policy compiled from it.
//!
//! Entry points: [`parse`] / [`parse_bytes`] for text, [`load_skill_md`] for `skill validate`,
//! [`load_bundle`] for `skill invoke`, [`resolve_skill`] for a `<SKILL>` argument. Nothing in
//! this module runs a skill.

pub mod bundle;
pub mod document;
pub mod manifest;
pub mod policy;
pub mod rules;
pub mod schema;
pub mod signature;
pub mod validate;
pub mod yaml;

use serde_json::{Map, Value};

pub use bundle::{
    Bundle, Listed, LoadError, find_skill, list_skills, load_bundle, load_skill_md, resolve_skill,
};
pub use manifest::Manifest;
pub use rules::{ErrorCode, FieldError};

use rules::MAX_SKILL_MD_BYTES;

/// This binary's version: what `min_broker_version` / `max_broker_version` are checked against
/// unless `validate --broker-version` says otherwise.
pub fn broker_version() -> semver::Version {
    semver::Version::parse(env!("CARGO_PKG_VERSION"))
        .unwrap_or_else(|e| panic!("the package version is not SemVer: {e}"))
}

/// A valid SKILL.md, with what it was made from.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub manifest: Manifest,
    /// The frontmatter mapping as written (no defaults), as JSON.
    pub frontmatter: Map<String, Value>,
    /// The markdown after the closing fence, as written.
    pub body: String,
}

/// Parses and validates a SKILL.md's text. All errors are returned at once.
pub fn parse(text: &str, broker: &semver::Version) -> Result<Manifest, Vec<FieldError>> {
    parse_document(text, broker).map(|p| p.manifest)
}

/// [`parse`], keeping the frontmatter JSON and the body.
pub fn parse_document(text: &str, broker: &semver::Version) -> Result<Parsed, Vec<FieldError>> {
    let _span = tracing::info_span!("skill.frontmatter.validate").entered();
    let frontmatter = frontmatter_json(text)?;
    let body = document::split(text).map_err(|e| vec![e])?.body;
    let manifest = validate::validate(&Value::Object(frontmatter.clone()), body, broker)?;
    Ok(Parsed {
        manifest,
        frontmatter,
        body: body.to_owned(),
    })
}

/// [`parse_document`] for a file's bytes: refuses more than [`MAX_SKILL_MD_BYTES`] and non-UTF-8.
pub fn parse_bytes(bytes: &[u8], broker: &semver::Version) -> Result<Parsed, Vec<FieldError>> {
    if bytes.len() as u64 > MAX_SKILL_MD_BYTES {
        return Err(vec![FieldError::new(
            "",
            ErrorCode::TooLarge,
            format!("SKILL.md is larger than {MAX_SKILL_MD_BYTES} bytes"),
        )]);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| vec![bundle::encoding_error(&e)])?;
    parse_document(text, broker)
}

/// The frontmatter of a SKILL.md as a JSON mapping, before any schema rule: fences and YAML only.
/// An error here is a file-level `fence`, `yaml` or `type` error.
pub fn frontmatter_json(text: &str) -> Result<Map<String, Value>, Vec<FieldError>> {
    let doc = document::split(text).map_err(|e| vec![e])?;
    match yaml::to_json(doc.frontmatter) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(vec![FieldError::new(
            "",
            ErrorCode::Type,
            format!(
                "the frontmatter must be a YAML mapping, found {}",
                validate::kind(&other)
            ),
        )]),
        Err(message) => Err(vec![FieldError::new(
            "",
            ErrorCode::Yaml,
            format!("the frontmatter is not acceptable YAML: {message}"),
        )]),
    }
}
