//! `cyberos skill keygen` and `skill sign`, and interoperability of the signature with an
//! independent computation of the signed message (CONTRACT §3).

use std::collections::BTreeMap;

use ed25519_dalek::{Signer as _, SigningKey, Verifier as _};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::util::{self, World};

/// RFC 8785 for the values these tests use (ASCII strings, integers, lists, mappings): keys
/// sorted, no whitespace, strings as serde_json escapes them.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            let parts: Vec<String> = sorted
                .into_iter()
                .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), canonical(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => serde_json::to_string(other).unwrap(),
    }
}

/// SHA-256(canonical F) || SHA-256(body CRLF→LF, trimmed), computed from scratch.
fn message(frontmatter: &Value, body: &str) -> Vec<u8> {
    let mut m = Sha256::digest(canonical(frontmatter).as_bytes()).to_vec();
    m.extend_from_slice(&Sha256::digest(
        body.replace("\r\n", "\n").trim().as_bytes(),
    ));
    m
}

const FRONTMATTER: &str = "id: interop\nversion: 1.0.0\ndescription: \"Signed elsewhere.\"\nallowed_memory_scopes: [\"memories/interop/**\"]\nallowed_tools: [MemoryRead, Read]\neffort_minutes: 7\nx-allowed-files: [\"/srv/interop/**\"]\nx-meta: {owner: ops, level: 3}\n";
const BODY: &str = "\r\n# Interop\r\n\r\nA body with CRLF line ends.  \r\n\r\n";

fn frontmatter_value() -> Value {
    json!({
        "id": "interop",
        "version": "1.0.0",
        "description": "Signed elsewhere.",
        "allowed_memory_scopes": ["memories/interop/**"],
        "allowed_tools": ["MemoryRead", "Read"],
        "effort_minutes": 7,
        "x-allowed-files": ["/srv/interop/**"],
        "x-meta": {"owner": "ops", "level": 3},
    })
}

#[test]
fn a_signature_made_independently_verifies() {
    let world = World::new();
    let key = SigningKey::from_bytes(&[42u8; 32]);
    let sig = key.sign(&message(&frontmatter_value(), BODY));
    let (pk_hex, sig_hex) = (
        hex::encode(key.verifying_key().as_bytes()),
        hex::encode(sig.to_bytes()),
    );
    let block = format!(
        "signature:\n  algo: ed25519\n  public_key_hex: {pk_hex}\n  signature_hex: {sig_hex}\n"
    );
    let text = format!("---\n{FRONTMATTER}{block}---\n{BODY}");
    let dir = world.bundle("interop", &text, "#!/bin/sh\n");
    let r = world
        .cmd(["skill", "validate", "--json"])
        .arg(&dir)
        .success()
        .json();
    assert_eq!(r["signed"], true);
    assert_eq!(r["public_key_hex"], pk_hex);

    // The signature block may sit anywhere in the frontmatter; upper-case hex is accepted.
    let upper = block
        .replace(&pk_hex, &pk_hex.to_uppercase())
        .replace(&sig_hex, &sig_hex.to_uppercase());
    let moved = format!("---\n{upper}{FRONTMATTER}---\n{BODY}");
    let dir = world.bundle("interop-moved", &moved, "#!/bin/sh\n");
    world.cmd(["skill", "validate"]).arg(&dir).success();

    // One changed character anywhere breaks it.
    for (what, tampered) in [
        ("body", text.replace("A body", "A Body")),
        (
            "field",
            text.replace("effort_minutes: 7", "effort_minutes: 8"),
        ),
        (
            "added field",
            text.replace("effort_minutes: 7\n", "effort_minutes: 7\ntags: [x]\n"),
        ),
        ("extension", text.replace("owner: ops", "owner: dev")),
    ] {
        let dir = world.bundle("tampered", &tampered, "#!/bin/sh\n");
        let r = world
            .cmd(["skill", "validate", "--json"])
            .arg(&dir)
            .code(6)
            .json();
        assert_eq!(
            r["errors"],
            json!([{"field": "signature", "code": "signature", "message": r["errors"][0]["message"]}]),
            "{what}"
        );
    }
    // Whitespace around the body and CRLF are not part of the message.
    let relaxed = text.replace(BODY, "# Interop\n\nA body with CRLF line ends.\n");
    let dir = world.bundle("relaxed", &relaxed, "#!/bin/sh\n");
    world.cmd(["skill", "validate"]).arg(&dir).success();
}

/// `skill keygen --out <world>/k`.
fn keygen(world: &World) -> std::path::PathBuf {
    let key = world.path().join("k");
    world.cmd(["skill", "keygen", "--out"]).arg(&key).success();
    key
}

#[test]
fn keygen_writes_a_private_and_a_public_key_once() {
    use std::os::unix::fs::PermissionsExt as _;
    let world = World::new();
    let key = world.path().join("signing.key");
    world.cmd(["skill", "keygen", "--out"]).arg(&key).success();
    let private = std::fs::read_to_string(&key).unwrap();
    let public = std::fs::read_to_string(world.path().join("signing.key.pub")).unwrap();
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let seed: [u8; 32] = hex::decode(private.trim()).unwrap().try_into().unwrap();
    assert_eq!(
        hex::encode(SigningKey::from_bytes(&seed).verifying_key().as_bytes()),
        public.trim()
    );
    let out = world.cmd(["skill", "keygen", "--out"]).arg(&key).code(1);
    out.assert_stderr_contains("signing.key");
    assert_eq!(
        std::fs::read_to_string(&key).unwrap(),
        private,
        "a key was overwritten"
    );
    // Two keys differ.
    let other = world.path().join("other.key");
    world
        .cmd(["skill", "keygen", "--out"])
        .arg(&other)
        .success();
    assert_ne!(std::fs::read_to_string(&other).unwrap(), private);
}

#[test]
fn sign_writes_a_block_that_verifies_independently_and_keeps_the_rest() {
    let world = World::new();
    let key = keygen(&world);
    let original = format!("---\n# a comment that must survive\n{FRONTMATTER}---\n{BODY}");
    let dir = world.bundle("to-sign", &original, "#!/bin/sh\n");
    world
        .cmd(["skill", "sign"])
        .arg(&dir)
        .arg("--key")
        .arg(&key)
        .success();
    let signed = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    let (head, block) = signed.split_once("signature:\n").expect("signature block");
    assert_eq!(
        head,
        format!("---\n# a comment that must survive\n{FRONTMATTER}")
    );
    assert!(signed.ends_with(&format!("---\n{BODY}")));

    // Verify with ed25519-dalek over the message computed here.
    let field = |name: &str| {
        block
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix(&format!("{name}: "))
                    .map(str::to_owned)
            })
            .unwrap()
    };
    assert_eq!(field("algo"), "ed25519");
    let pk: [u8; 32] = hex::decode(field("public_key_hex"))
        .unwrap()
        .try_into()
        .unwrap();
    let sig: [u8; 64] = hex::decode(field("signature_hex"))
        .unwrap()
        .try_into()
        .unwrap();
    let vk = ed25519_dalek::VerifyingKey::from_bytes(&pk).unwrap();
    vk.verify(
        &message(&frontmatter_value(), BODY),
        &ed25519_dalek::Signature::from_bytes(&sig),
    )
    .unwrap();
    let public = std::fs::read_to_string(world.path().join("k.pub")).unwrap();
    assert_eq!(field("public_key_hex"), public.trim());

    world.cmd(["skill", "validate"]).arg(&dir).success();

    // Editing breaks it; signing again replaces the block rather than adding a second one.
    let edited = signed.replace("effort_minutes: 7", "effort_minutes: 9");
    std::fs::write(dir.join("SKILL.md"), &edited).unwrap();
    world.cmd(["skill", "validate"]).arg(&dir).code(6);
    world
        .cmd(["skill", "sign"])
        .arg(&dir)
        .arg("--key")
        .arg(&key)
        .success();
    let resigned = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    assert_eq!(resigned.matches("signature:").count(), 1, "{resigned}");
    assert!(resigned.contains("effort_minutes: 9"));
    world.cmd(["skill", "validate"]).arg(&dir).success();
}

#[test]
fn sign_keeps_crlf_line_ends() {
    let world = World::new();
    let key = keygen(&world);
    let text = util::skill_md("crlf", &["Read"], "").replace('\n', "\r\n");
    let dir = world.bundle("crlf", &text, "#!/bin/sh\n");
    world
        .cmd(["skill", "sign"])
        .arg(&dir)
        .arg("--key")
        .arg(&key)
        .success();
    let signed = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    assert!(!signed.replace("\r\n", "").contains('\n'), "{signed:?}");
    world.cmd(["skill", "validate"]).arg(&dir).success();
}

#[test]
fn sign_refuses_an_invalid_skill_or_a_bad_key() {
    let world = World::new();
    let key = keygen(&world);
    let text = util::skill_md("bad", &["Teleport"], "");
    let dir = world.bundle("bad", &text, "#!/bin/sh\n");
    let out = world
        .cmd(["skill", "sign"])
        .arg(&dir)
        .arg("--key")
        .arg(&key)
        .code(6);
    out.assert_stderr_contains("allowed_tools[0]");
    assert_eq!(std::fs::read_to_string(dir.join("SKILL.md")).unwrap(), text);

    let good = world.bundle("good", &util::skill_md("good", &[], ""), "#!/bin/sh\n");
    let junk = world.file("junk.key", "not a key\n");
    world
        .cmd(["skill", "sign"])
        .arg(&good)
        .arg("--key")
        .arg(&junk)
        .code(1)
        .assert_stderr_contains("64 hex digits");
    world
        .cmd(["skill", "sign"])
        .arg(&good)
        .arg("--key")
        .arg(world.path().join("missing.key"))
        .code(1);
    world
        .cmd(["skill", "sign"])
        .arg(world.path().join("nowhere"))
        .arg("--key")
        .arg(&key)
        .code(1);
    // A skill for a future broker can still be signed.
    let future = world.bundle(
        "future",
        &util::skill_md("future", &[], "min_broker_version: 99.0.0\n"),
        "#!/bin/sh\n",
    );
    world
        .cmd(["skill", "sign"])
        .arg(&future)
        .arg("--key")
        .arg(&key)
        .success();
    world
        .cmd(["skill", "validate", "--broker-version", "99.0.0"])
        .arg(&future)
        .success();
}
