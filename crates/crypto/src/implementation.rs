//! A resolved `--crypto` choice ([`Implementation`]): which library computes, whether it
//! uses hardware AES in this process, and the ciphers built from it by the backend it names.

use std::fmt;

use model::{CryptoChoice, KeyBits};

use crate::primitives::{
    Aead, AeadAlgorithm, AesCbc, CipherStream, CryptoError, HmacSha256, Library, StreamCipher,
};
use crate::{awslc, libcrypto, rustcrypto};

pub use model::evidence::ImplementationInfo;

/// Whether `library`, in this process, uses the CPU's AES instructions.
fn library_uses_hardware_aes(library: Library) -> bool {
    match library {
        Library::RustCrypto => rustcrypto::hardware_aes(),
        Library::AwsLc => awslc::hardware_aes(),
        Library::Libcrypto => libcrypto::hardware_aes(),
    }
}

/// A resolved `--crypto` choice: which library computes, and how it was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Implementation {
    choice: CryptoChoice,
    library: Library,
}

impl Implementation {
    /// Resolves a `--crypto` choice. `soft` is refused unless this process runs with hardware
    /// AES masked (see [`crate::soft`]); the other choices always succeed.
    pub fn new(choice: CryptoChoice) -> Result<Implementation, CryptoError> {
        let library = match choice {
            CryptoChoice::Auto | CryptoChoice::AwsLc | CryptoChoice::Soft => Library::AwsLc,
            CryptoChoice::Rustcrypto => Library::RustCrypto,
            CryptoChoice::Libcrypto => Library::Libcrypto,
        };
        if library == Library::Libcrypto && libcrypto::version().is_none() {
            return Err(CryptoError::LibraryMissing { library });
        }
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

    /// The library as a report names it: for libcrypto its version and the file it was
    /// loaded from, e.g. `OpenSSL 3.0.19 27 Jan 2026 (libcrypto.so.3)`.
    pub fn library_text(&self) -> String {
        match self.libcrypto_version() {
            Some((version, path)) => format!("{version} ({path})"),
            None => self.library.to_string(),
        }
    }

    /// libcrypto's version and file, for a libcrypto implementation.
    fn libcrypto_version(&self) -> Option<(String, String)> {
        libcrypto::version().filter(|_| self.library == Library::Libcrypto)
    }

    /// Whether this implementation uses hardware AES in this process.
    pub fn hardware_aes(&self) -> bool {
        library_uses_hardware_aes(self.library)
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
            label: format!(
                "{} ({}, {aes})",
                self.choice,
                self.libcrypto_version()
                    .map_or_else(|| self.library.to_string(), |(version, _)| version)
            ),
        }
    }

    /// AES-CBC; the key length (16, 24 or 32 bytes) picks AES-128/192/256.
    pub fn aes_cbc(&self, key: &[u8]) -> Result<Box<dyn AesCbc>, CryptoError> {
        let bits = aes_key_bits(key)?;
        match self.library {
            Library::RustCrypto => rustcrypto::aes_cbc(bits, key),
            Library::AwsLc => awslc::aes_cbc(bits, key),
            Library::Libcrypto => libcrypto::aes_cbc(bits, key),
        }
    }

    /// HMAC-SHA256; any key length (RFC 2104).
    pub fn hmac_sha256(&self, key: &[u8]) -> Result<Box<dyn HmacSha256>, CryptoError> {
        match self.library {
            Library::RustCrypto => rustcrypto::hmac_sha256(key),
            Library::AwsLc => awslc::hmac_sha256(key),
            Library::Libcrypto => libcrypto::hmac_sha256(key),
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
            Library::Libcrypto => libcrypto::aead(algorithm, key),
        }
    }
}

impl Implementation {
    /// A [`CipherStream`] of `kind` from `iv` (16 bytes for CBC, where the key length picks
    /// AES-128/192/256; a 12-byte nonce for an AEAD). RustCrypto streams CBC only
    /// ([`CryptoError::NoStream`] for its AEADs). A wrong key or IV length is an error.
    pub fn cipher_stream(
        &self,
        kind: StreamCipher,
        key: &[u8],
        iv: &[u8],
    ) -> Result<Box<dyn CipherStream>, CryptoError> {
        match self.library {
            Library::RustCrypto => rustcrypto::cipher_stream(kind, key, iv),
            Library::AwsLc => awslc::cipher_stream(kind, key, iv),
            Library::Libcrypto => libcrypto::cipher_stream(kind, key, iv),
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
