//! The ciphers one direction of a tunnel uses, built from the `crypto` crate (the one place
//! cipher implementations live) with key bytes from a [`SlotKeys`].

use crypto::{Aead, AeadAlgorithm, AesCbc, CbcMessage, CryptoError, HmacSha256, NONCE_LEN, TAG_LEN};
use model::{CipherSuite, Hmac};
use zeroize::Zeroizing;

pub use crypto::Implementation;

use crate::keys::SlotKeys;

const SALT_LEN: usize = 4;
const HMAC_KEY_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("building {what} for suite {suite} with {implementation}: {source}")]
    Build {
        what: &'static str,
        suite: CipherSuite,
        implementation: String,
        source: CryptoError,
    },
    #[error("suite {0} has no AES-GCM variant in the crypto crate (use aes-128-gcm or aes-256-gcm)")]
    NoAead(CipherSuite),
}

pub(crate) enum Engine {
    None,
    Cbc {
        cipher: Box<dyn AesCbc>,
        mac: Option<Box<dyn HmacSha256>>,
    },
    Gcm {
        aead: Box<dyn Aead>,
        salt: [u8; SALT_LEN],
    },
}

impl Engine {
    pub(crate) fn new(
        suite: CipherSuite,
        implementation: Implementation,
        keys: SlotKeys<'_>,
    ) -> Result<Engine, EngineError> {
        let build = |what, source| EngineError::Build {
            what,
            suite,
            implementation: implementation.to_string(),
            source,
        };
        Ok(match suite {
            CipherSuite::None => Engine::None,
            CipherSuite::AesCbc { key, hmac } => Engine::Cbc {
                cipher: implementation
                    .aes_cbc(&keys.cipher[..key.bytes()])
                    .map_err(|e| build("AES-CBC", e))?,
                mac: match hmac {
                    Hmac::None => None,
                    Hmac::Sha256 => Some(
                        implementation
                            .hmac_sha256(&keys.hmac[..HMAC_KEY_LEN])
                            .map_err(|e| build("HMAC-SHA256", e))?,
                    ),
                },
            },
            CipherSuite::AesGcm { key } => {
                let algorithm = AeadAlgorithm::aes_gcm(key).ok_or(EngineError::NoAead(suite))?;
                Engine::Gcm {
                    aead: implementation
                        .aead(algorithm, &keys.cipher[..key.bytes()])
                        .map_err(|e| build("AES-GCM", e))?,
                    salt: keys.hmac[..SALT_LEN].try_into().expect("4 bytes"),
                }
            }
            // Same framing as GCM: a 96-bit nonce of salt and packet id, a 16-byte tag.
            CipherSuite::ChaCha20Poly1305 => {
                let algorithm = AeadAlgorithm::ChaCha20Poly1305;
                Engine::Gcm {
                    aead: implementation
                        .aead(algorithm, &keys.cipher[..algorithm.key_len()])
                        .map_err(|e| build("ChaCha20-Poly1305", e))?,
                    salt: keys.hmac[..SALT_LEN].try_into().expect("4 bytes"),
                }
            }
        })
    }

    pub(crate) fn cbc_encrypt(&self, iv: &[u8; 16], buf: &mut [u8]) -> Result<(), CryptoError> {
        match self {
            Engine::Cbc { cipher, .. } => cipher.encrypt(iv, buf),
            _ => unreachable!("CBC framing with a non-CBC engine"),
        }
    }

    pub(crate) fn cbc_encrypt_batch(&self, messages: &mut [CbcMessage<'_>]) -> Result<(), CryptoError> {
        match self {
            Engine::Cbc { cipher, .. } => cipher.encrypt_batch(messages),
            _ => unreachable!("CBC framing with a non-CBC engine"),
        }
    }

    pub(crate) fn cbc_decrypt(&self, iv: &[u8; 16], buf: &mut [u8]) -> Result<(), CryptoError> {
        match self {
            Engine::Cbc { cipher, .. } => cipher.decrypt(iv, buf),
            _ => unreachable!("CBC framing with a non-CBC engine"),
        }
    }

    pub(crate) fn mac(&self, data: &[u8]) -> [u8; 32] {
        match self {
            Engine::Cbc { mac: Some(mac), .. } => mac.mac(&[data]),
            _ => unreachable!("HMAC framing without an HMAC key"),
        }
    }

    pub(crate) fn verify_mac(&self, data: &[u8], tag: &[u8; 32]) -> bool {
        match self {
            Engine::Cbc { mac: Some(mac), .. } => mac.verify(&[data], tag).is_ok(),
            _ => unreachable!("HMAC framing without an HMAC key"),
        }
    }

    fn nonce(salt: &[u8; SALT_LEN], id: &[u8; 8]) -> Zeroizing<[u8; NONCE_LEN]> {
        let mut n = Zeroizing::new([0u8; NONCE_LEN]);
        n[..SALT_LEN].copy_from_slice(salt);
        n[SALT_LEN..].copy_from_slice(id);
        n
    }

    /// Seals `body` in place with nonce `salt ‖ id` and the id as AAD; returns the tag.
    pub(crate) fn gcm_seal(&self, id: &[u8; 8], body: &mut [u8]) -> Result<[u8; TAG_LEN], CryptoError> {
        match self {
            Engine::Gcm { aead, salt } => aead.seal(&Self::nonce(salt, id), id, body),
            _ => unreachable!("GCM framing with a non-GCM engine"),
        }
    }

    pub(crate) fn gcm_open(&self, id: &[u8; 8], body: &mut [u8], tag: &[u8; TAG_LEN]) -> bool {
        match self {
            Engine::Gcm { aead, salt } => aead.open(&Self::nonce(salt, id), id, body, tag).is_ok(),
            _ => unreachable!("GCM framing with a non-GCM engine"),
        }
    }
}
