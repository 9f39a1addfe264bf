//! The vocabulary the backends and every caller share, below all of them: buffer sizes, the
//! libraries and AEAD algorithms by name, the errors, and the three primitive traits each
//! backend implements. Imports no other file of this crate.

use std::fmt;

use model::KeyBits;
use serde::{Deserialize, Serialize};

/// AES block size; CBC buffers are a whole number of these.
pub const AES_BLOCK_LEN: usize = 16;
/// AEAD tag length for every AEAD here.
pub const TAG_LEN: usize = 16;
/// AEAD nonce length for every AEAD here.
pub const NONCE_LEN: usize = 12;
/// Full HMAC-SHA256 output length.
pub const HMAC_SHA256_LEN: usize = 32;
/// Shortest HMAC-SHA256 tag [`HmacSha256::verify`] accepts (RFC 2104 §5: at least half).
pub const MIN_HMAC_TAG_LEN: usize = 16;

pub use model::evidence::Library;

/// The AEAD algorithms the lab uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AeadAlgorithm {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20Poly1305,
}

impl AeadAlgorithm {
    pub const ALL: [AeadAlgorithm; 3] = [
        AeadAlgorithm::Aes128Gcm,
        AeadAlgorithm::Aes256Gcm,
        AeadAlgorithm::ChaCha20Poly1305,
    ];

    pub fn key_len(self) -> usize {
        match self {
            AeadAlgorithm::Aes128Gcm => 16,
            AeadAlgorithm::Aes256Gcm | AeadAlgorithm::ChaCha20Poly1305 => 32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AeadAlgorithm::Aes128Gcm => "aes-128-gcm",
            AeadAlgorithm::Aes256Gcm => "aes-256-gcm",
            AeadAlgorithm::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }

    /// The AES-GCM algorithm for a key size; None for 192 (valid AES-GCM that no library
    /// here offers and no tunnel uses).
    pub fn aes_gcm(key: KeyBits) -> Option<AeadAlgorithm> {
        match key {
            KeyBits::Aes128 => Some(AeadAlgorithm::Aes128Gcm),
            KeyBits::Aes192 => None,
            KeyBits::Aes256 => Some(AeadAlgorithm::Aes256Gcm),
        }
    }
}

impl fmt::Display for AeadAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a cipher could not be built or an operation failed. `Copy` and cheap: a tunnel counts
/// per-packet failures by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    #[error("{algorithm}: key is {got} bytes, expected {expected}")]
    KeyLength {
        algorithm: &'static str,
        expected: &'static str,
        got: usize,
    },
    #[error("AES-CBC: {len} bytes is not a whole number of 16-byte blocks (the caller pads)")]
    NotBlockAligned { len: usize },
    #[error("HMAC-SHA256: a tag of {len} bytes cannot be checked (16 to 32 bytes)")]
    TagLength { len: usize },
    #[error("authentication failed: the data or its tag was altered, or the key/nonce differ")]
    Authentication,
    #[error(
        "{library} could not be loaded: install libssl3 (apt-get install libssl3), or set IPSEC_LAB_LIBCRYPTO to a libcrypto.so"
    )]
    LibraryMissing { library: Library },
    #[error("{library}: {operation} failed inside the library")]
    Library {
        library: Library,
        operation: &'static str,
    },
    #[error(
        "--crypto soft needs hardware AES masked before AWS-LC starts, but this process was not started with {}={}; start it through crypto::soft::command() or crypto::soft::reexec_if_needed()",
        model::env::HARDWARE_AES_OFF.var,
        model::env::HARDWARE_AES_OFF.mask
    )]
    SoftNotActive,
    #[error("{library} has no stream form of {algorithm}: its API seals or opens whole messages")]
    NoStream {
        library: Library,
        algorithm: &'static str,
    },
}

/// One message of a CBC batch ([`AesCbc::encrypt_batch`]): encrypted in place under its IV.
pub struct CbcMessage<'a> {
    pub iv: [u8; AES_BLOCK_LEN],
    pub buf: &'a mut [u8],
}

/// AES-CBC with a fixed key (128, 192 or 256 bits, from the key length).
pub trait AesCbc: Send + Sync {
    fn key_bits(&self) -> KeyBits;
    /// Encrypts `buf` in place; `buf.len()` must be a multiple of 16.
    fn encrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError>;
    /// Encrypts each message in place under its own IV: the same bytes as
    /// [`encrypt`](Self::encrypt) on each. One message's blocks form a chain, so alone it runs
    /// at the AES instructions' latency; different messages' blocks do not depend on each
    /// other, so a backend that can give its AES code several at once overrides this. Every
    /// length is checked before any message is touched.
    fn encrypt_batch(&self, messages: &mut [CbcMessage<'_>]) -> Result<(), CryptoError> {
        for m in messages.iter() {
            check_blocks(m.buf)?;
        }
        for m in messages {
            self.encrypt(&m.iv, m.buf)?;
        }
        Ok(())
    }
    /// Decrypts `buf` in place; `buf.len()` must be a multiple of 16.
    fn decrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError>;
}

/// HMAC-SHA256 with a fixed key.
pub trait HmacSha256: Send + Sync {
    /// The MAC of the concatenation of `parts`.
    fn mac(&self, parts: &[&[u8]]) -> [u8; HMAC_SHA256_LEN];

    /// Checks `tag`, the first `tag.len()` bytes (16..=32) of the MAC of `parts`, in
    /// constant time.
    fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> Result<(), CryptoError> {
        if !(MIN_HMAC_TAG_LEN..=HMAC_SHA256_LEN).contains(&tag.len()) {
            return Err(CryptoError::TagLength { len: tag.len() });
        }
        let full = self.mac(parts);
        let diff = full.iter().zip(tag).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        // black_box keeps the comparison from being turned into an early-exit loop.
        if std::hint::black_box(diff) == 0 {
            Ok(())
        } else {
            Err(CryptoError::Authentication)
        }
    }
}

/// An AEAD with a fixed key: 12-byte nonce, 16-byte detached tag.
pub trait Aead: Send + Sync {
    fn algorithm(&self) -> AeadAlgorithm;
    /// Encrypts `buf` in place and returns the tag.
    fn seal(&self, nonce: &[u8; NONCE_LEN], aad: &[u8], buf: &mut [u8])
        -> Result<[u8; TAG_LEN], CryptoError>;
    /// Checks `tag` and decrypts `buf` in place. On error `buf` holds garbage.
    fn open(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), CryptoError>;
}

/// What a [`CipherStream`] computes: AES-CBC either way (the key length picks 128/192/256)
/// or an AEAD's encryption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCipher {
    AesCbcEncrypt,
    AesCbcDecrypt,
    Aead(AeadAlgorithm),
}

impl StreamCipher {
    /// Bytes of IV (CBC) or nonce (AEAD) the stream starts from.
    pub fn iv_len(self) -> usize {
        match self {
            StreamCipher::AesCbcEncrypt | StreamCipher::AesCbcDecrypt => AES_BLOCK_LEN,
            StreamCipher::Aead(_) => NONCE_LEN,
        }
    }
}

/// One cipher context set up once with a key and an IV or nonce, then fed piece by piece:
/// each [`update`](Self::update) continues where the last one stopped (the CBC chain goes
/// on, the AEAD's counter and MAC go on), so the pieces together are one message. This is
/// how `openssl speed -evp` times a cipher (`EVP_EncryptUpdate` per block); a tunnel instead
/// starts a new message per packet. The AEAD's tag is never computed: nothing here finishes.
pub trait CipherStream: Send {
    /// Processes `buf` in place; for CBC, `buf.len()` must be a multiple of 16.
    fn update(&mut self, buf: &mut [u8]) -> Result<(), CryptoError>;
}

pub(crate) fn check_blocks(buf: &[u8]) -> Result<(), CryptoError> {
    if buf.len() % AES_BLOCK_LEN == 0 {
        Ok(())
    } else {
        Err(CryptoError::NotBlockAligned { len: buf.len() })
    }
}

/// A known-answer test that failed: which implementation, which vector, what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("self-test of {implementation} failed on {case}: {what}")]
pub struct SelfTestError {
    pub implementation: String,
    pub case: String,
    pub what: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_not_active_names_the_variable_and_mask_soft_sets() {
        let text = CryptoError::SoftNotActive.to_string();
        let wanted = format!("{}={}", crate::soft::ENV_VAR, crate::soft::MASK_HARDWARE_AES);
        assert!(text.contains(&wanted), "{text}");
    }
}
