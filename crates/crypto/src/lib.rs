//! The lab's cipher implementations, in one place: AES-CBC, HMAC-SHA256, AES-GCM and
//! ChaCha20-Poly1305 from RustCrypto and from aws-lc-rs, plus aws-lc-rs with hardware AES
//! masked ("soft", the AES-NI-off row). The speed benchmark and the userspace tunnel both
//! build their ciphers here, so the two always measure the same code.
//!
//! The API is per operation on caller-owned buffers: CBC encrypt/decrypt in place with a
//! given IV (no padding: the caller pads), HMAC-SHA256 over several slices (the caller
//! truncates), AEAD seal/open in place with a detached 16-byte tag. Every cipher is checked
//! against published vectors by [`self_test`] before anyone should trust it.
//!
//! Leaves out packet formats, padding, nonce and IV policy and replay protection
//! (`tunnel-proto`), and timing (`speed`).
//!
//! How `--crypto` maps to code ([`Implementation::new`]):
//! * `auto` → aws-lc-rs. A rule, not a measurement: AWS-LC carries hand-written AES-NI/VAES
//!   and SHA-NI assembly (the same as OpenSSL) for every mode the lab uses, and on x86-64 it
//!   is never slower than RustCrypto (whose CBC and SHA-256 are intrinsics-based); on CPUs
//!   without AES instructions it falls back to constant-time vector-permute AES.
//! * `aws-lc` → aws-lc-rs; `rustcrypto` → RustCrypto (hardware AES detected at run time).
//! * `soft` → aws-lc-rs in a process started with `OPENSSL_ia32cap` masking AES-NI and
//!   PCLMULQDQ. AWS-LC reads that variable once, when it initialises, so it must be in the
//!   environment before the process starts: see [`soft`] for the re-exec helpers.
//!   RustCrypto's `aes` can only switch to software AES at compile time, which is why soft
//!   AES is aws-lc-rs.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use model::{CryptoChoice, KeyBits};

mod awslc;
pub mod kat;
mod rustcrypto;
pub mod soft;

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

/// A library that computes the ciphers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Library {
    /// RustCrypto crates: aes, cbc, hmac, sha2, aes-gcm, chacha20poly1305.
    RustCrypto,
    /// aws-lc-rs over AWS-LC.
    AwsLc,
}

impl Library {
    pub fn name(self) -> &'static str {
        match self {
            Library::RustCrypto => "rustcrypto",
            Library::AwsLc => "aws-lc-rs",
        }
    }

    /// Whether this library, in this process, uses the CPU's AES instructions.
    pub fn hardware_aes(self) -> bool {
        match self {
            Library::RustCrypto => rustcrypto::hardware_aes(),
            Library::AwsLc => awslc::hardware_aes(),
        }
    }
}

impl fmt::Display for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
    #[error("{library}: {operation} failed inside the library")]
    Library {
        library: Library,
        operation: &'static str,
    },
    #[error(
        "--crypto soft needs hardware AES masked before AWS-LC starts, but this process was not started with {var}={mask}; start it through crypto::soft::command() or crypto::soft::reexec_if_needed()",
        var = soft::ENV_VAR,
        mask = soft::MASK_HARDWARE_AES
    )]
    SoftNotActive,
}

/// AES-CBC with a fixed key (128, 192 or 256 bits, from the key length).
pub trait AesCbc: Send + Sync {
    fn key_bits(&self) -> KeyBits;
    /// Encrypts `buf` in place; `buf.len()` must be a multiple of 16.
    fn encrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError>;
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

/// A resolved `--crypto` choice: which library computes, and how it was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Implementation {
    choice: CryptoChoice,
    library: Library,
}

/// What a report says about the implementation that produced a number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImplementationInfo {
    /// The `--crypto` value: auto, soft, rustcrypto, aws-lc.
    pub choice: CryptoChoice,
    pub library: Library,
    /// Whether the library used the CPU's AES instructions in the process that measured.
    pub hardware_aes: bool,
    /// Human label, e.g. `auto (aws-lc-rs, AES-NI)`.
    pub label: String,
}

impl Implementation {
    /// Resolves a `--crypto` choice. `soft` is refused unless this process runs with hardware
    /// AES masked (see [`soft`]); the other choices always succeed.
    pub fn new(choice: CryptoChoice) -> Result<Implementation, CryptoError> {
        let library = match choice {
            CryptoChoice::Auto | CryptoChoice::AwsLc | CryptoChoice::Soft => Library::AwsLc,
            CryptoChoice::Rustcrypto => Library::RustCrypto,
        };
        if choice == CryptoChoice::Soft && awslc::hardware_aes() {
            return Err(CryptoError::SoftNotActive);
        }
        Ok(Implementation { choice, library })
    }

    pub fn choice(&self) -> CryptoChoice {
        self.choice
    }

    pub fn library(&self) -> Library {
        self.library
    }

    /// Whether this implementation uses hardware AES in this process.
    pub fn hardware_aes(&self) -> bool {
        self.library.hardware_aes()
    }

    pub fn info(&self) -> ImplementationInfo {
        let hardware_aes = self.hardware_aes();
        let aes = if hardware_aes {
            "hardware AES"
        } else {
            "software AES"
        };
        ImplementationInfo {
            choice: self.choice,
            library: self.library,
            hardware_aes,
            label: format!("{} ({}, {aes})", self.choice, self.library),
        }
    }

    /// AES-CBC; the key length (16, 24 or 32 bytes) picks AES-128/192/256.
    pub fn aes_cbc(&self, key: &[u8]) -> Result<Box<dyn AesCbc>, CryptoError> {
        let bits = aes_key_bits(key)?;
        match self.library {
            Library::RustCrypto => rustcrypto::aes_cbc(bits, key),
            Library::AwsLc => awslc::aes_cbc(bits, key),
        }
    }

    /// HMAC-SHA256; any key length (RFC 2104).
    pub fn hmac_sha256(&self, key: &[u8]) -> Result<Box<dyn HmacSha256>, CryptoError> {
        match self.library {
            Library::RustCrypto => rustcrypto::hmac_sha256(key),
            Library::AwsLc => awslc::hmac_sha256(key),
        }
    }

    pub fn aead(&self, algorithm: AeadAlgorithm, key: &[u8]) -> Result<Box<dyn Aead>, CryptoError> {
        if key.len() != algorithm.key_len() {
            return Err(CryptoError::KeyLength {
                algorithm: algorithm.name(),
                expected: if algorithm.key_len() == 16 { "16" } else { "32" },
                got: key.len(),
            });
        }
        match self.library {
            Library::RustCrypto => rustcrypto::aead(algorithm, key),
            Library::AwsLc => awslc::aead(algorithm, key),
        }
    }
}

impl fmt::Display for Implementation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.info().label)
    }
}

fn aes_key_bits(key: &[u8]) -> Result<KeyBits, CryptoError> {
    match key.len() {
        16 => Ok(KeyBits::Aes128),
        24 => Ok(KeyBits::Aes192),
        32 => Ok(KeyBits::Aes256),
        got => Err(CryptoError::KeyLength {
            algorithm: "AES-CBC",
            expected: "16, 24 or 32",
            got,
        }),
    }
}

fn check_blocks(buf: &[u8]) -> Result<(), CryptoError> {
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

/// Runs every known-answer test ([`kat`]) on `implementation`. Nothing should be timed or
/// trusted with a key until this passed.
pub fn self_test(implementation: &Implementation) -> Result<(), SelfTestError> {
    kat::run_all(implementation)
}
