//! `cyberos skill keygen --out FILE`: a new ed25519 key pair for `skill sign`. FILE holds the
//! secret seed (mode 0600), FILE.pub the public key; each is one line of lowercase hex. Existing
//! files are never overwritten.

use anyhow::Context as _;

use crate::cli::KeygenArgs;
use crate::exit;
use crate::skill::signature;

pub fn run(args: KeygenArgs) -> anyhow::Result<u8> {
    let key = signature::generate_key();
    let public =
        signature::write_key_pair(&args.out, &key).context("failed to write the key pair")?;
    println!("private key: {}", args.out.display());
    println!(
        "public key:  {} ({})",
        public.display(),
        hex::encode(key.verifying_key().as_bytes())
    );
    Ok(exit::SUCCESS)
}
