//! Encryption of saved secret values at rest (XChaCha20-Poly1305).
//!
//! A sealed value is the string `enc:v1:<base64(nonce ‖ ciphertext)>`; the owner and
//! the field name are bound in as associated data, so a sealed value copied to another
//! user's row or field does not open.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use serde_json::Value;

const PREFIX: &str = "enc:v1:";
const NONCE_LEN: usize = 24;

pub struct Vault {
    cipher: XChaCha20Poly1305,
}

#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("sealed value is malformed")]
    Malformed,
    #[error("sealed value does not open with this key (was TOOLGATE_SECRET_KEY changed?)")]
    WrongKey,
}

impl Vault {
    pub fn new(key: &[u8; 32]) -> Self {
        Vault {
            cipher: XChaCha20Poly1305::new(key.into()),
        }
    }

    /// Seals `value` for `owner`'s field `name`.
    pub fn seal(&self, owner: &str, name: &str, value: &Value) -> Value {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let plaintext = value.to_string();
        let aad = associated_data(owner, name);
        // Encryption with a fresh nonce and an in-memory buffer cannot fail.
        let ciphertext = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &aad,
                },
            )
            .unwrap_or_default();
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&ciphertext);
        Value::String(format!("{PREFIX}{}", STANDARD.encode(sealed)))
    }

    /// Opens a value sealed by [`Vault::seal`] with the same owner and name.
    pub fn open(&self, owner: &str, name: &str, sealed: &Value) -> Result<Value, VaultError> {
        let text = sealed
            .as_str()
            .and_then(|s| s.strip_prefix(PREFIX))
            .ok_or(VaultError::Malformed)?;
        let bytes = STANDARD.decode(text).map_err(|_| VaultError::Malformed)?;
        if bytes.len() <= NONCE_LEN {
            return Err(VaultError::Malformed);
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let aad = associated_data(owner, name);
        let plaintext = self
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| VaultError::WrongKey)?;
        serde_json::from_slice(&plaintext).map_err(|_| VaultError::Malformed)
    }
}

fn associated_data(owner: &str, name: &str) -> Vec<u8> {
    format!("{}:{owner}\u{0}{name}", owner.len()).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sealed_values_open_only_for_their_owner_and_name() {
        let vault = Vault::new(&[7; 32]);
        let sealed = vault.seal("alice", "api_key", &json!("sk-123"));
        assert!(!sealed.to_string().contains("sk-123"));
        assert_eq!(
            vault.open("alice", "api_key", &sealed).ok(),
            Some(json!("sk-123"))
        );
        assert!(vault.open("bob", "api_key", &sealed).is_err());
        assert!(vault.open("alice", "other", &sealed).is_err());
        assert!(
            Vault::new(&[8; 32])
                .open("alice", "api_key", &sealed)
                .is_err()
        );
        assert!(vault.open("alice", "api_key", &json!("plain")).is_err());
    }
}
