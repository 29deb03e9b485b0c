//! `skill.schema.json`: regenerated from the Rust rules and compared with the committed file
//! (`CYBEROS_BLESS=1` rewrites it), and checked to accept and reject the same fixtures as the
//! validator, using an independent JSON Schema 2020-12 implementation (boon).

use std::path::PathBuf;

use cyberos::skill::{self, ErrorCode, FieldError};
use serde_json::Value;

use crate::fixtures::{self, FIXTURES, MULTI_ERROR_FIXTURES};

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("skill.schema.json")
}

pub fn blessing() -> bool {
    std::env::var_os("CYBEROS_BLESS").is_some_and(|v| v == "1")
}

#[test]
fn committed_schema_is_current() {
    let generated = skill::schema::render();
    let path = committed_path();
    if blessing() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "skill.schema.json is stale: run `CYBEROS_BLESS=1 cargo test --test cli schema` and commit it"
    );
}

fn compile() -> (boon::Schemas, boon::SchemaIndex) {
    let text = std::fs::read_to_string(committed_path()).expect("skill.schema.json");
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler
        .add_resource("file:///skill.schema.json", schema)
        .unwrap();
    let index = compiler
        .compile("file:///skill.schema.json", &mut schemas)
        .expect("the schema compiles");
    (schemas, index)
}

/// Whether the validator finds a rule the schema expresses broken. A failed signature hides every
/// other error from the validator's report, so the rest is checked without the signature.
fn rust_structurally_invalid(frontmatter: &Value, body: &str) -> bool {
    let broker = skill::broker_version();
    let structural = |errors: &[FieldError]| errors.iter().any(|e| e.code.is_structural());
    match skill::validate::validate(frontmatter, body, &broker) {
        Ok(_) => false,
        Err(errors) if errors.iter().all(|e| e.code == ErrorCode::Signature) => {
            let mut unsigned = frontmatter.clone();
            unsigned.as_object_mut().unwrap().remove("signature");
            skill::validate::validate(&unsigned, body, &broker)
                .err()
                .is_some_and(|e| structural(&e))
        }
        Err(errors) => structural(&errors),
    }
}

/// The frontmatter of a fixture as JSON and its body, or None when the file has no YAML to
/// compare (encoding, fences, YAML errors).
fn frontmatter(name: &str) -> Option<(Value, String)> {
    let bytes = std::fs::read(fixtures::path(name).join("SKILL.md")).unwrap();
    let text = std::str::from_utf8(&bytes).ok()?;
    let doc = skill::document::split(text).ok()?;
    let value = skill::yaml::to_json(doc.frontmatter).ok()?;
    Some((value, doc.body.to_owned()))
}

#[test]
fn schema_and_validator_agree_on_every_fixture() {
    let (schemas, index) = compile();
    let names = FIXTURES
        .iter()
        .map(|(n, _)| *n)
        .chain(MULTI_ERROR_FIXTURES.iter().copied());
    let mut compared = 0;
    for name in names {
        let Some((frontmatter, body)) = frontmatter(name) else {
            continue;
        };
        let schema_ok = schemas.validate(&frontmatter, index).is_ok();
        let rust_bad = rust_structurally_invalid(&frontmatter, &body);
        assert_eq!(
            schema_ok,
            !rust_bad,
            "{name}: schema {} but the validator {}",
            if schema_ok { "accepts" } else { "rejects" },
            if rust_bad { "rejects" } else { "accepts" }
        );
        compared += 1;
    }
    assert!(compared >= 35, "only {compared} fixtures compared");
}

#[test]
fn the_schema_rejects_what_each_structural_fixture_breaks() {
    let (schemas, index) = compile();
    for (name, expected) in FIXTURES {
        let Some((_, code)) = expected else { continue };
        let code_is_structural = ErrorCode::ALL
            .iter()
            .any(|c| c.as_str() == *code && c.is_structural());
        if !code_is_structural {
            continue;
        }
        let (frontmatter, _) = frontmatter(name).expect("a structural fixture has YAML");
        assert!(
            schemas.validate(&frontmatter, index).is_err(),
            "{name}: the schema accepts it"
        );
    }
}
