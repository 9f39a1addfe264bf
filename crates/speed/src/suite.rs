//! What the benchmark measures: suites (an algorithm as a tunnel uses it) and the crypto
//! operation timed ([`CryptoOp`]: encrypt, decrypt or mac; `direction` in records and JSON).

use std::fmt;
use std::str::FromStr;

use crypto::AeadAlgorithm;
use model::{CipherSuite, Hmac, KeyBits};
use serde::{Deserialize, Serialize};

/// One algorithm, as a per-packet data path computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpeedSuite {
    /// AES-CBC alone (no padding at block-aligned sizes; see [`crate::ops`]).
    AesCbc(KeyBits),
    /// HMAC-SHA256 over the block.
    HmacSha256,
    /// AES-CBC then HMAC-SHA256 over IV + ciphertext, per packet (ESP, OpenVPN).
    AesCbcHmacSha256(KeyBits),
    /// An AEAD: AES-GCM or ChaCha20-Poly1305, 8 bytes of associated data, tag per packet.
    Aead(AeadAlgorithm),
}

impl SpeedSuite {
    /// Every suite, in table order.
    pub fn all() -> Vec<SpeedSuite> {
        let mut v: Vec<SpeedSuite> = KeyBits::ALL.into_iter().map(SpeedSuite::AesCbc).collect();
        v.push(SpeedSuite::HmacSha256);
        v.extend(KeyBits::ALL.into_iter().map(SpeedSuite::AesCbcHmacSha256));
        v.extend(AeadAlgorithm::ALL.into_iter().map(SpeedSuite::Aead));
        v
    }

    pub fn name(&self) -> String {
        match self {
            SpeedSuite::AesCbc(k) => format!("aes-{k}-cbc"),
            SpeedSuite::HmacSha256 => "hmac-sha256".into(),
            SpeedSuite::AesCbcHmacSha256(k) => format!("aes-{k}-cbc-hmac-sha256"),
            SpeedSuite::Aead(a) => a.name().into(),
        }
    }

    /// Operations worth timing: CBC decrypt parallelises and is much faster than encrypt,
    /// so both are shown; the others are timed in the direction a sender computes.
    pub fn crypto_ops(&self) -> &'static [CryptoOp] {
        match self {
            SpeedSuite::AesCbc(_) => &[CryptoOp::Encrypt, CryptoOp::Decrypt],
            SpeedSuite::HmacSha256 => &[CryptoOp::Mac],
            SpeedSuite::AesCbcHmacSha256(_) | SpeedSuite::Aead(_) => &[CryptoOp::Encrypt],
        }
    }

    /// The benchmark suite for a tunnel's cipher suite (None for `none`, which has no crypto).
    pub fn from_cipher_suite(suite: &CipherSuite) -> Option<SpeedSuite> {
        match *suite {
            CipherSuite::None => None,
            CipherSuite::AesCbc {
                key,
                hmac: Hmac::None,
            } => Some(SpeedSuite::AesCbc(key)),
            CipherSuite::AesCbc {
                key,
                hmac: Hmac::Sha256,
            } => Some(SpeedSuite::AesCbcHmacSha256(key)),
            CipherSuite::AesGcm { key } => AeadAlgorithm::aes_gcm(key).map(SpeedSuite::Aead),
            CipherSuite::ChaCha20Poly1305 => Some(SpeedSuite::Aead(AeadAlgorithm::ChaCha20Poly1305)),
        }
    }
}

impl fmt::Display for SpeedSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown suite {given:?}: use one of {known}")]
pub struct UnknownSuite {
    pub given: String,
    pub known: String,
}

impl FromStr for SpeedSuite {
    type Err = UnknownSuite;
    fn from_str(s: &str) -> Result<Self, UnknownSuite> {
        let t = s.trim().to_ascii_lowercase();
        let t = match t.as_str() {
            "chacha20poly1305" => "chacha20-poly1305",
            "hmac" | "sha256" | "hmac(sha256)" => "hmac-sha256",
            other => other,
        };
        SpeedSuite::all()
            .into_iter()
            .find(|suite| suite.name() == t)
            .ok_or_else(|| UnknownSuite {
                given: s.to_string(),
                known: SpeedSuite::all()
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// The crypto operation a cell times: what one end of a tunnel does to each packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CryptoOp {
    Encrypt,
    Decrypt,
    /// HMAC alone: neither encrypts.
    Mac,
}

impl CryptoOp {
    pub fn name(self) -> &'static str {
        match self {
            CryptoOp::Encrypt => "encrypt",
            CryptoOp::Decrypt => "decrypt",
            CryptoOp::Mac => "mac",
        }
    }
}

impl fmt::Display for CryptoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_name_parses_back() {
        let all = SpeedSuite::all();
        assert_eq!(all.len(), 10);
        for s in all {
            assert_eq!(s.name().parse::<SpeedSuite>().unwrap(), s);
        }
        assert_eq!("HMAC".parse::<SpeedSuite>().unwrap(), SpeedSuite::HmacSha256);
    }

    #[test]
    fn unknown_suite_lists_the_known_ones() {
        let e = "aes-512-gcm".parse::<SpeedSuite>().unwrap_err();
        assert!(e.to_string().contains("aes-256-cbc-hmac-sha256"), "{e}");
        assert!("aes-192-gcm".parse::<SpeedSuite>().is_err());
    }

    #[test]
    fn tunnel_suites_map_to_benchmark_suites() {
        let s: CipherSuite = "aes-256-cbc-hmac-sha256".parse().unwrap();
        assert_eq!(
            SpeedSuite::from_cipher_suite(&s),
            Some(SpeedSuite::AesCbcHmacSha256(KeyBits::Aes256))
        );
        let g: CipherSuite = "aes-256-gcm".parse().unwrap();
        assert_eq!(
            SpeedSuite::from_cipher_suite(&g),
            Some(SpeedSuite::Aead(AeadAlgorithm::Aes256Gcm))
        );
        assert_eq!(SpeedSuite::from_cipher_suite(&CipherSuite::None), None);
    }
}
