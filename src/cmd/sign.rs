//! `cyberos skill sign <BUNDLE> --key FILE`: signs a SKILL.md in place (CONTRACT §3). The rest of
//! the file is kept byte for byte; only a top-level `signature:` block is replaced (or appended at
//! the end of the frontmatter). The result is re-read and verified before it replaces the file.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::cli::SignArgs;
use crate::exit;
use crate::skill::rules::ErrorCode;
use crate::skill::{self, LoadError, document, signature};

pub fn run(args: SignArgs) -> anyhow::Result<u8> {
    let key = signature::read_signing_key(&args.key).context("failed to load the signing key")?;
    let path = skill_md_path(&args.bundle);
    let bytes = skill::bundle::read_skill_md(&path)
        .map_err(|e| exit::coded(e.validate_exit_code(), e.to_string()))?;
    if bytes.len() as u64 > skill::rules::MAX_SKILL_MD_BYTES {
        return Err(exit::coded(
            exit::INVALID_SKILL,
            format!("failed to sign {}: it is too large", path.display()),
        ));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        exit::coded(
            exit::INVALID_SKILL,
            format!("failed to sign {}: it is not UTF-8", path.display()),
        )
    })?;

    let invalid = |errors: Vec<skill::FieldError>| LoadError::Invalid {
        path: path.clone(),
        errors,
    };
    let mut unsigned = skill::frontmatter_json(text).map_err(|e| coded(invalid(e)))?;
    unsigned.remove("signature");
    let doc = document::split(text).map_err(|e| coded(invalid(vec![e])))?;
    // Everything but the signature must already be valid; the broker version range is the
    // running broker's business, not the signer's.
    if let Err(errors) = skill::validate::validate(
        &serde_json::Value::Object(unsigned.clone()),
        doc.body,
        &skill::broker_version(),
    ) {
        let errors: Vec<_> = errors
            .into_iter()
            .filter(|e| e.code != ErrorCode::BrokerVersion)
            .collect();
        if !errors.is_empty() {
            return Err(coded(invalid(errors)));
        }
    }

    let (public_key_hex, signature_hex) = signature::sign(&key, &unsigned, doc.body);
    let newline = if doc.frontmatter.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let mut frontmatter = without_signature_block(doc.frontmatter);
    if !frontmatter.is_empty() && !frontmatter.ends_with('\n') {
        frontmatter.push_str(newline);
    }
    for line in [
        "signature:".to_owned(),
        format!("  algo: {}", skill::rules::SIGNATURE_ALGO),
        format!("  public_key_hex: {public_key_hex}"),
        format!("  signature_hex: {signature_hex}"),
    ] {
        frontmatter.push_str(&line);
        frontmatter.push_str(newline);
    }
    let signed = format!(
        "{}{}{}",
        &text[..doc.frontmatter_start],
        frontmatter,
        &text[doc.frontmatter_end..]
    );

    // The rewrite must change nothing but the signature, and the signature must verify.
    let reread = skill::frontmatter_json(&signed).ok().map(|mut m| {
        m.remove("signature");
        m
    });
    if reread.as_ref() != Some(&unsigned) {
        anyhow::bail!(
            "failed to sign {}: its `signature` key could not be replaced safely (write it as a plain top-level block, or remove it, and sign again)",
            path.display()
        );
    }
    match skill::parse_document(&signed, &skill::broker_version()) {
        Err(errors) if errors.iter().any(|e| e.code == ErrorCode::Signature) => {
            anyhow::bail!(
                "failed to sign {}: the new signature does not verify",
                path.display()
            )
        }
        _ => {}
    }
    replace_file(&path, signed.as_bytes())?;
    println!("signed {} with key {public_key_hex}", path.display());
    Ok(exit::SUCCESS)
}

fn coded(err: LoadError) -> anyhow::Error {
    exit::coded(err.validate_exit_code(), err.to_string())
}

fn skill_md_path(bundle: &Path) -> PathBuf {
    if bundle.is_dir() {
        bundle.join(skill::bundle::SKILL_MD)
    } else {
        bundle.to_owned()
    }
}

/// The frontmatter text without its top-level `signature:` entry: that line and the indented
/// lines under it.
fn without_signature_block(frontmatter: &str) -> String {
    let mut out = String::with_capacity(frontmatter.len());
    let mut skipping = false;
    for line in frontmatter.split_inclusive('\n') {
        if skipping && line.starts_with([' ', '\t']) {
            continue;
        }
        skipping = line
            .strip_prefix("signature:")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n', '{']));
        if !skipping {
            out.push_str(line);
        }
    }
    out
}

/// Writes `bytes` to a temporary file beside `path` with the same mode, then renames it over
/// `path`: a crash leaves either the old or the new file, never half of one.
fn replace_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let perms = std::fs::metadata(path)
        .with_context(|| format!("failed to stat {}", path.display()))?
        .permissions();
    let mut tmp = tempfile::Builder::new()
        .prefix(".SKILL.md.")
        .tempfile_in(dir)
        .with_context(|| format!("failed to create a temporary file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .context("failed to write the signed SKILL.md")?;
    std::fs::set_permissions(tmp.path(), perms)
        .context("failed to set the signed SKILL.md's mode")?;
    tmp.persist(path)
        .with_context(|| format!("failed to replace {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_top_level_signature_block_is_removed() {
        let fm = "id: a\nsignature:\n  algo: ed25519\n  public_key_hex: x\nx-note:\n  signature: kept\n# c\n";
        assert_eq!(
            without_signature_block(fm),
            "id: a\nx-note:\n  signature: kept\n# c\n"
        );
        assert_eq!(
            without_signature_block("signature: {algo: x}\r\nid: a\r\n"),
            "id: a\r\n"
        );
        assert_eq!(
            without_signature_block("signatures: 1\n"),
            "signatures: 1\n"
        );
    }
}
