//! The SKILL.md parser on arbitrary bytes: never a panic or a hang (libFuzzer's timeout), every
//! refusal names at least one error, and what it accepts keeps the schema's promises: a valid
//! id, bounded description and tags, absolute file globs, globs the policy compiles, and the
//! same manifest again when its frontmatter is written back out as JSON (a YAML subset).

use cyberos::skill::policy::Policy;
use cyberos::skill::{self, Parsed};

fn id_ok(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn check_accepted(parsed: &Parsed) {
    let m = &parsed.manifest;
    assert!(id_ok(&m.id), "id {:?}", m.id);
    let chars = m.description.chars().count();
    assert!((1..=200).contains(&chars), "description of {chars} chars");
    assert!(m.tags.len() <= 10 && m.tags.iter().all(|t| t.chars().count() <= 30));
    assert!(m.effort_minutes >= 1);
    assert!(m.allowed_files.iter().all(|f| f.starts_with('/')));
    assert!(
        m.allowed_domains
            .iter()
            .all(|d| !d.ends_with('.') && *d == d.to_ascii_lowercase()),
        "{:?}",
        m.allowed_domains
    );
    if let Err(e) = Policy::from_manifest(m) {
        panic!("validation accepted globs the policy cannot compile: {e}");
    }
    for key in parsed.frontmatter.keys() {
        assert!(
            key.starts_with("x-") || skill::rules::KNOWN_FIELDS.contains(&key.as_str()),
            "unknown key {key:?} accepted"
        );
    }
}

pub fn run(data: &[u8]) {
    let broker = skill::broker_version();
    let first = skill::parse_bytes(data, &broker);
    let again = skill::parse_bytes(data, &broker);
    match (&first, &again) {
        (Ok(a), Ok(b)) => assert_eq!(
            serde_json::to_value(&a.manifest).expect("serialise"),
            serde_json::to_value(&b.manifest).expect("serialise"),
            "parsing is not deterministic"
        ),
        (Err(a), Err(b)) => assert_eq!(a, b, "parsing is not deterministic"),
        _ => panic!("parsing is not deterministic"),
    }
    let parsed = match first {
        Ok(parsed) => parsed,
        Err(errors) => {
            assert!(!errors.is_empty(), "refused without an error");
            for e in &errors {
                assert!(!e.message.is_empty(), "an error without a message: {e:?}");
            }
            serde_json::to_string(&errors).expect("errors serialise for validate --json");
            return;
        }
    };
    check_accepted(&parsed);

    // The mapping written back as JSON flow YAML, with the same body, is the same skill. (YAML
    // caps implicit keys at 1024 characters, so longer keys cannot be written this way.)
    if parsed.frontmatter.keys().any(|k| k.chars().count() > 1000) {
        return;
    }
    let json = serde_json::to_string(&parsed.frontmatter).expect("serialise");
    let text = format!("---\n{json}\n---\n{}", parsed.body);
    match skill::parse(&text, &broker) {
        Ok(again) => assert_eq!(
            serde_json::to_value(&parsed.manifest).expect("serialise"),
            serde_json::to_value(&again).expect("serialise"),
            "the JSON form of the frontmatter is a different skill:\n{text}"
        ),
        Err(errors) => {
            panic!("the JSON form of an accepted frontmatter is refused: {errors:?}\n{text}")
        }
    }
}
