//! Cipher suites the lab measures, shared by every backend.
//!
//! A suite names *what* protects the traffic (AES-CBC with or without HMAC-SHA256, AES-GCM,
//! or nothing); *how* it is computed (kernel driver, library, hardware or software AES) is the
//! backend's business.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// AES key length. Only the three sizes AES defines exist here, so an invalid size cannot
/// reach a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub enum KeyBits {
    Aes128,
    Aes192,
    Aes256,
}

impl KeyBits {
    pub const ALL: [KeyBits; 3] = [KeyBits::Aes128, KeyBits::Aes192, KeyBits::Aes256];

    pub fn bits(self) -> u16 {
        match self {
            KeyBits::Aes128 => 128,
            KeyBits::Aes192 => 192,
            KeyBits::Aes256 => 256,
        }
    }

    pub fn bytes(self) -> usize {
        usize::from(self.bits() / 8)
    }
}

impl TryFrom<u16> for KeyBits {
    type Error = SuiteError;
    fn try_from(bits: u16) -> Result<Self, SuiteError> {
        match bits {
            128 => Ok(KeyBits::Aes128),
            192 => Ok(KeyBits::Aes192),
            256 => Ok(KeyBits::Aes256),
            other => Err(SuiteError::KeyBits(other.to_string())),
        }
    }
}

impl From<KeyBits> for u16 {
    fn from(k: KeyBits) -> u16 {
        k.bits()
    }
}

impl FromStr for KeyBits {
    type Err = SuiteError;
    fn from_str(s: &str) -> Result<Self, SuiteError> {
        s.trim()
            .parse::<u16>()
            .map_err(|_| SuiteError::KeyBits(s.to_string()))
            .and_then(KeyBits::try_from)
    }
}

impl fmt::Display for KeyBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bits())
    }
}

/// Integrity algorithm added to AES-CBC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hmac {
    None,
    Sha256,
}

impl FromStr for Hmac {
    type Err = SuiteError;
    fn from_str(s: &str) -> Result<Self, SuiteError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Hmac::None),
            "sha256" | "sha-256" | "hmac-sha256" => Ok(Hmac::Sha256),
            _ => Err(SuiteError::Hmac(s.to_string())),
        }
    }
}

impl fmt::Display for Hmac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hmac::None => "none",
            Hmac::Sha256 => "sha256",
        })
    }
}

/// What protects the data. Parsed from names such as `aes-256-cbc-hmac-sha256`,
/// `aes-128-cbc`, `aes-256-gcm`, `chacha20-poly1305` and `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum CipherSuite {
    /// No encryption at all: the line-rate baseline.
    None,
    /// AES-CBC, encrypt-then-MAC when `hmac` is set.
    AesCbc { key: KeyBits, hmac: Hmac },
    /// AES-GCM (128 or 256; 192 is valid AES-GCM but no ESP stack or OpenVPN uses it).
    AesGcm { key: KeyBits },
    /// ChaCha20-Poly1305 (256-bit key): WireGuard's only cipher.
    ChaCha20Poly1305,
}

impl CipherSuite {
    /// The six classic CBC configurations, in the column order of the reference table.
    pub fn classic_six() -> Vec<CipherSuite> {
        let mut v = Vec::new();
        for hmac in [Hmac::None, Hmac::Sha256] {
            for key in KeyBits::ALL {
                v.push(CipherSuite::AesCbc { key, hmac });
            }
        }
        v
    }

    /// Builds a suite from `--key-bits` and `--hmac`.
    pub fn cbc(key: KeyBits, hmac: Hmac) -> CipherSuite {
        CipherSuite::AesCbc { key, hmac }
    }

    pub fn name(&self) -> String {
        match self {
            CipherSuite::None => "none".into(),
            CipherSuite::AesCbc {
                key,
                hmac: Hmac::None,
            } => format!("aes-{key}-cbc"),
            CipherSuite::AesCbc {
                key,
                hmac: Hmac::Sha256,
            } => format!("aes-{key}-cbc-hmac-sha256"),
            CipherSuite::AesGcm { key } => format!("aes-{key}-gcm"),
            CipherSuite::ChaCha20Poly1305 => CHACHA20_POLY1305.into(),
        }
    }

    /// Short column label in the style of the reference table: `128`, `256+HMAC`, `GCM-128`.
    pub fn short_label(&self) -> String {
        match self {
            CipherSuite::None => "none".into(),
            CipherSuite::AesCbc {
                key,
                hmac: Hmac::None,
            } => format!("{key}"),
            CipherSuite::AesCbc {
                key,
                hmac: Hmac::Sha256,
            } => format!("{key}+HMAC"),
            CipherSuite::AesGcm { key } => format!("GCM-{key}"),
            CipherSuite::ChaCha20Poly1305 => "ChaCha20".into(),
        }
    }

    pub fn key_bits(&self) -> Option<KeyBits> {
        match self {
            CipherSuite::None | CipherSuite::ChaCha20Poly1305 => None,
            CipherSuite::AesCbc { key, .. } | CipherSuite::AesGcm { key } => Some(*key),
        }
    }

    pub fn is_encrypted(&self) -> bool {
        !matches!(self, CipherSuite::None)
    }

    /// Whether every packet carries a tag that a forger cannot make (GCM, CBC with HMAC).
    pub fn authenticates(&self) -> bool {
        matches!(
            self,
            CipherSuite::AesGcm { .. }
                | CipherSuite::ChaCha20Poly1305
                | CipherSuite::AesCbc {
                    hmac: Hmac::Sha256,
                    ..
                }
        )
    }
}

impl fmt::Display for CipherSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for CipherSuite {
    type Err = SuiteError;
    fn from_str(s: &str) -> Result<Self, SuiteError> {
        let lower = s.trim().to_ascii_lowercase();
        if lower == "none" || lower == "null" {
            return Ok(CipherSuite::None);
        }
        if lower == CHACHA20_POLY1305 {
            return Ok(CipherSuite::ChaCha20Poly1305);
        }
        let bad = || SuiteError::Cipher(s.to_string());
        let rest = lower.strip_prefix("aes-").ok_or_else(bad)?;
        let (bits, mode) = rest.split_once('-').ok_or_else(bad)?;
        let key = bits.parse::<KeyBits>().map_err(|_| bad())?;
        match mode {
            "cbc" => Ok(CipherSuite::AesCbc {
                key,
                hmac: Hmac::None,
            }),
            "cbc-hmac-sha256" | "cbc-sha256" => Ok(CipherSuite::AesCbc {
                key,
                hmac: Hmac::Sha256,
            }),
            "gcm" if key != KeyBits::Aes192 => Ok(CipherSuite::AesGcm { key }),
            _ => Err(bad()),
        }
    }
}

impl TryFrom<String> for CipherSuite {
    type Error = SuiteError;
    fn try_from(s: String) -> Result<Self, SuiteError> {
        s.parse()
    }
}

impl From<CipherSuite> for String {
    fn from(c: CipherSuite) -> String {
        c.name()
    }
}

const CHACHA20_POLY1305: &str = "chacha20-poly1305";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuiteError {
    #[error("unsupported key size {0:?}: AES keys are 128, 192 or 256 bits")]
    KeyBits(String),
    #[error("unknown HMAC {0:?}: use none or sha256")]
    Hmac(String),
    #[error(
        "unknown cipher {0:?}: use none, aes-{{128,192,256}}-cbc, aes-{{128,192,256}}-cbc-hmac-sha256, aes-{{128,256}}-gcm or chacha20-poly1305"
    )]
    Cipher(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_name_round_trips() {
        let mut all = CipherSuite::classic_six();
        all.push(CipherSuite::None);
        all.push(CipherSuite::AesGcm { key: KeyBits::Aes128 });
        all.push(CipherSuite::AesGcm { key: KeyBits::Aes256 });
        all.push(CipherSuite::ChaCha20Poly1305);
        for s in all {
            assert_eq!(s.name().parse::<CipherSuite>().unwrap(), s);
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<CipherSuite>(&json).unwrap(), s);
        }
    }

    #[test]
    fn invalid_names_are_refused() {
        for bad in [
            "aes-512-gcm",
            "aes-100-cbc",
            "des-cbc",
            "aes-192-gcm",
            "aes-128",
            "",
        ] {
            assert!(bad.parse::<CipherSuite>().is_err(), "{bad} accepted");
        }
        assert!("100".parse::<KeyBits>().is_err());
        assert!("md5".parse::<Hmac>().is_err());
        assert_eq!("SHA256".parse::<Hmac>().unwrap(), Hmac::Sha256);
    }

    #[test]
    fn classic_six_is_in_reference_column_order() {
        let labels: Vec<_> = CipherSuite::classic_six()
            .iter()
            .map(|s| s.short_label())
            .collect();
        assert_eq!(labels, ["128", "192", "256", "128+HMAC", "192+HMAC", "256+HMAC"]);
    }
}
