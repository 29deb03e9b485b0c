//! SKILL.md signatures (CONTRACT §3): ed25519 over `SHA-256(F) || SHA-256(B)`, where F is the
//! canonical JSON (RFC 8785) of the frontmatter mapping as written, without `signature`, and B is
//! the body with CRLF → LF, trimmed. Also the key files of `skill keygen`: one line of lowercase
//! hex each (the 32-byte secret seed in FILE, the 32-byte public key in FILE.pub).
//!
//! This module computes and checks signatures; it never decides whether a skill may run.

use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::skill::document;

/// The 64-byte message that is signed.
pub fn message(frontmatter: &Map<String, Value>, body: &str) -> [u8; 64] {
    let mut unsigned = frontmatter.clone();
    unsigned.remove("signature");
    let f = crate::util::canonical_json(&Value::Object(unsigned));
    let b = document::normalised_body(body);
    let mut out = [0u8; 64];
    out[..32].copy_from_slice(&Sha256::digest(f.as_bytes()));
    out[32..].copy_from_slice(&Sha256::digest(b.as_bytes()));
    out
}

#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error("failed to decode {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    #[error(
        "the signature does not verify: the frontmatter or body changed since signing, or the key is wrong"
    )]
    Mismatch,
}

/// Verifies hex `signature_hex` by hex `public_key_hex` over [`message`].
pub fn verify(
    frontmatter: &Map<String, Value>,
    body: &str,
    public_key_hex: &str,
    signature_hex: &str,
) -> Result<(), SignatureError> {
    let key_bytes: [u8; 32] = decode_hex(public_key_hex, "public_key_hex")?;
    let sig_bytes: [u8; 64] = decode_hex(signature_hex, "signature_hex")?;
    let key = VerifyingKey::from_bytes(&key_bytes).map_err(|e| SignatureError::Malformed {
        what: "public_key_hex",
        detail: e.to_string(),
    })?;
    let sig = ed25519_dalek::Signature::from_bytes(&sig_bytes);
    // Strict verification refuses weak keys and malleable signatures, which a signer following
    // RFC 8032 never produces.
    key.verify_strict(&message(frontmatter, body), &sig)
        .map_err(|_| SignatureError::Mismatch)
}

fn decode_hex<const N: usize>(text: &str, what: &'static str) -> Result<[u8; N], SignatureError> {
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).map_err(|e| SignatureError::Malformed {
        what,
        detail: e.to_string(),
    })?;
    Ok(out)
}

/// The signature block's values for a signing key: `(public_key_hex, signature_hex)`.
pub fn sign(key: &SigningKey, frontmatter: &Map<String, Value>, body: &str) -> (String, String) {
    let sig = key.sign(&message(frontmatter, body));
    (
        hex::encode(key.verifying_key().as_bytes()),
        hex::encode(sig.to_bytes()),
    )
}

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("failed to write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse key file {}: expected one line of 64 hex digits (a file written by `cyberos skill keygen`)", path.display())]
    Format { path: PathBuf },
}

/// A fresh signing key from the kernel's CSPRNG.
pub fn generate_key() -> SigningKey {
    let mut seed = [0u8; 32];
    crate::util::fill_random(&mut seed);
    SigningKey::from_bytes(&seed)
}

/// `FILE.pub` for a private key file `FILE`.
pub fn public_key_path(private: &Path) -> PathBuf {
    let mut name = private.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Writes FILE (mode 0600) and FILE.pub (0644). Neither may exist already: a key is never
/// overwritten.
pub fn write_key_pair(private: &Path, key: &SigningKey) -> Result<PathBuf, KeyFileError> {
    let public = public_key_path(private);
    write_new(
        private,
        &format!("{}\n", hex::encode(key.to_bytes())),
        0o600,
    )?;
    if let Err(err) = write_new(
        &public,
        &format!("{}\n", hex::encode(key.verifying_key().as_bytes())),
        0o644,
    ) {
        // Leave no private key behind whose public half was never written.
        if let Err(rm) = std::fs::remove_file(private) {
            tracing::warn!(
                "failed to remove {} after an error: {rm}",
                private.display()
            );
        }
        return Err(err);
    }
    Ok(public)
}

fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), KeyFileError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let write_err = |source| KeyFileError::Write {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(write_err)?;
    file.write_all(contents.as_bytes()).map_err(write_err)?;
    file.sync_all().map_err(write_err)
}

/// Reads a private key file written by [`write_key_pair`].
pub fn read_signing_key(path: &Path) -> Result<SigningKey, KeyFileError> {
    let text = read_small(path)?;
    let seed: [u8; 32] = decode_hex(text.trim(), "key").map_err(|_| KeyFileError::Format {
        path: path.to_owned(),
    })?;
    Ok(SigningKey::from_bytes(&seed))
}

fn read_small(path: &Path) -> Result<String, KeyFileError> {
    use std::io::Read as _;
    let read_err = |source| KeyFileError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    // A key file is one line; reading a little more than that is enough to reject anything else.
    file.take(1024)
        .read_to_string(&mut text)
        .map_err(|_| KeyFileError::Format {
            path: path.to_owned(),
        })?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sign_then_verify_and_tampering_fails() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let fm = json!({"id": "a", "version": "1.0.0"});
        let fm = fm.as_object().unwrap();
        let (pk, sig) = sign(&key, fm, "\r\nbody\r\n");
        verify(fm, "body", &pk, &sig).unwrap();
        assert!(matches!(
            verify(fm, "body!", &pk, &sig),
            Err(SignatureError::Mismatch)
        ));
        let mut other = fm.clone();
        other.insert("id".into(), json!("b"));
        assert!(matches!(
            verify(&other, "body", &pk, &sig),
            Err(SignatureError::Mismatch)
        ));
        // The signature block itself is not part of the message.
        other = fm.clone();
        other.insert("signature".into(), json!({"algo": "ed25519"}));
        verify(&other, "body", &pk, &sig).unwrap();
    }

    #[test]
    fn key_files_round_trip_and_are_never_overwritten() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let key = generate_key();
        let public = write_key_pair(&path, &key).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read_signing_key(&path).unwrap().to_bytes(), key.to_bytes());
        assert_eq!(
            std::fs::read_to_string(public).unwrap().trim(),
            hex::encode(key.verifying_key().as_bytes())
        );
        assert!(write_key_pair(&path, &generate_key()).is_err());
        assert_eq!(read_signing_key(&path).unwrap().to_bytes(), key.to_bytes());
    }
}
