//! What protects an SA's packets: the algorithms by their kernel names, key lengths per
//! suite, and keys that are wiped on drop and never shown by `Debug`.

use std::fmt;

use model::{CipherSuite, Hmac, KeyBits};
use zeroize::Zeroizing;

use super::error::SpecError;

/// Length of the rfc4106 salt appended to the AES-GCM key (RFC 4106 §8.1).
pub const GCM_SALT_BYTES: usize = 4;
/// HMAC-SHA256 key length used by the lab: the hash's output length (RFC 4868 §2.1.1).
pub const HMAC_SHA256_KEY_BYTES: usize = 32;
/// ICV length of AES-GCM in ESP: 16 bytes (RFC 4106 allows 8/12/16; 16 is the norm).
pub const GCM_ICV_BITS: u32 = 128;

/// Key bytes that are wiped when dropped and never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    /// Fresh bytes from the OS RNG.
    pub fn random(len: usize) -> Result<Secret, SpecError> {
        let mut bytes = Zeroizing::new(vec![0u8; len]);
        getrandom::fill(&mut bytes).map_err(|e| SpecError::Rng(e.to_string()))?;
        Ok(Secret(bytes))
    }

    pub fn from_bytes(bytes: &[u8]) -> Secret {
        Secret(Zeroizing::new(bytes.to_vec()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn expose(&self) -> &[u8] {
        &self.0
    }

    /// `0x…` as iproute2 takes it. Only for `--show-keys` and for programming a peer with
    /// `ip xfrm`; the caller decides that showing it is wanted.
    pub fn to_hex(&self) -> Zeroizing<String> {
        let mut s = Zeroizing::new(String::with_capacity(2 + 2 * self.0.len()));
        s.push_str("0x");
        for b in self.0.iter() {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} secret bytes>", self.0.len())
    }
}

/// HMAC-SHA256 ICV length carried in each packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AuthTrunc {
    /// 128 bits, what RFC 4868 specifies for HMAC-SHA-256-128 in ESP.
    #[default]
    Bits128,
    /// 96 bits, what old setkey configurations used (not interoperable with RFC 4868 peers).
    Bits96,
}

impl AuthTrunc {
    pub fn bits(self) -> u32 {
        match self {
            AuthTrunc::Bits128 => 128,
            AuthTrunc::Bits96 => 96,
        }
    }
}

/// Crypto algorithms, by the names the kernel's crypto API knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelAlgorithm {
    CbcAes,
    HmacSha256,
    Rfc4106GcmAes,
}

impl KernelAlgorithm {
    pub const ALL: [KernelAlgorithm; 3] = [
        KernelAlgorithm::CbcAes,
        KernelAlgorithm::HmacSha256,
        KernelAlgorithm::Rfc4106GcmAes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            KernelAlgorithm::CbcAes => "cbc(aes)",
            KernelAlgorithm::HmacSha256 => "hmac(sha256)",
            KernelAlgorithm::Rfc4106GcmAes => "rfc4106(gcm(aes))",
        }
    }
}

impl fmt::Display for KernelAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Integrity protection added to AES-CBC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HmacSha256 {
    pub key: Secret,
    pub trunc: AuthTrunc,
}

/// What protects an SA's packets, keys included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// `enc cbc(aes)` with an optional `auth-trunc hmac(sha256)`.
    AesCbc { key: Secret, auth: Option<HmacSha256> },
    /// `aead rfc4106(gcm(aes))`: `key` is the AES key followed by the 4-byte salt.
    AesGcm { key: Secret },
}

/// Key bytes supplied by the caller instead of generated (interop with a peer, fixtures).
#[derive(Debug, Clone, Copy)]
pub struct KeyInput<'a> {
    /// AES key; for GCM the AES key followed by the 4-byte salt.
    pub enc: &'a [u8],
    /// HMAC key, exactly when the suite has HMAC.
    pub auth: Option<&'a [u8]>,
}

impl Protection {
    /// Fresh keys from the OS RNG for `suite`.
    pub fn generate(suite: CipherSuite, trunc: AuthTrunc) -> Result<Protection, SpecError> {
        let (enc_len, auth_len) = key_lengths(suite)?;
        let enc = Secret::random(enc_len)?;
        let auth = auth_len.map(Secret::random).transpose()?;
        Protection::from_key_secrets(suite, trunc, enc, auth)
    }

    /// The same suite with given keys; lengths are checked.
    pub fn from_keys(
        suite: CipherSuite,
        trunc: AuthTrunc,
        keys: KeyInput<'_>,
    ) -> Result<Protection, SpecError> {
        let (enc_len, auth_len) = key_lengths(suite)?;
        if keys.enc.len() != enc_len {
            return Err(SpecError::KeyLength {
                what: "encryption",
                expected: enc_len,
                got: keys.enc.len(),
            });
        }
        let auth = match (auth_len, keys.auth) {
            (Some(want), Some(k)) if k.len() == want => Some(Secret::from_bytes(k)),
            (Some(want), got) => {
                return Err(SpecError::KeyLength {
                    what: "authentication",
                    expected: want,
                    got: got.map_or(0, <[u8]>::len),
                })
            }
            (None, Some(k)) => {
                return Err(SpecError::KeyLength {
                    what: "authentication",
                    expected: 0,
                    got: k.len(),
                })
            }
            (None, None) => None,
        };
        Protection::from_key_secrets(suite, trunc, Secret::from_bytes(keys.enc), auth)
    }

    fn from_key_secrets(
        suite: CipherSuite,
        trunc: AuthTrunc,
        enc: Secret,
        auth: Option<Secret>,
    ) -> Result<Protection, SpecError> {
        Ok(match suite {
            CipherSuite::AesCbc { .. } => Protection::AesCbc {
                key: enc,
                auth: auth.map(|key| HmacSha256 { key, trunc }),
            },
            CipherSuite::AesGcm { .. } => Protection::AesGcm { key: enc },
            CipherSuite::None => return Err(SpecError::Unencrypted),
            CipherSuite::ChaCha20Poly1305 => return Err(SpecError::ChaCha),
        })
    }

    /// The suite these keys belong to.
    pub fn suite(&self) -> CipherSuite {
        match self {
            Protection::AesCbc { key, auth } => CipherSuite::AesCbc {
                key: aes_bits(key.len()),
                hmac: if auth.is_some() { Hmac::Sha256 } else { Hmac::None },
            },
            Protection::AesGcm { key } => CipherSuite::AesGcm {
                key: aes_bits(key.len() - GCM_SALT_BYTES),
            },
        }
    }

    /// The kernel crypto algorithms an SA with this protection instantiates.
    pub fn algorithms(&self) -> Vec<KernelAlgorithm> {
        match self {
            Protection::AesCbc { auth: None, .. } => vec![KernelAlgorithm::CbcAes],
            Protection::AesCbc { auth: Some(_), .. } => {
                vec![KernelAlgorithm::CbcAes, KernelAlgorithm::HmacSha256]
            }
            Protection::AesGcm { .. } => vec![KernelAlgorithm::Rfc4106GcmAes],
        }
    }

    /// ESP bytes added to a packet of `inner_len` bytes (tunnel mode adds an outer IPv4
    /// header too, counted by the caller): SPI + sequence (8), IV, padding to the block,
    /// pad length and next header (2), ICV.
    pub fn esp_overhead(&self, inner_len: usize) -> usize {
        let (iv, block, icv) = match self {
            Protection::AesCbc { auth, .. } => {
                (16, 16, auth.as_ref().map_or(0, |a| a.trunc.bits() as usize / 8))
            }
            Protection::AesGcm { .. } => (8, 4, GCM_ICV_BITS as usize / 8),
        };
        let padded = (inner_len + 2).div_ceil(block) * block;
        8 + iv + padded - inner_len + icv
    }
}

fn aes_bits(bytes: usize) -> KeyBits {
    match bytes {
        16 => KeyBits::Aes128,
        24 => KeyBits::Aes192,
        _ => KeyBits::Aes256,
    }
}

/// (encryption key bytes, HMAC key bytes) for a suite.
fn key_lengths(suite: CipherSuite) -> Result<(usize, Option<usize>), SpecError> {
    match suite {
        CipherSuite::None => Err(SpecError::Unencrypted),
        CipherSuite::AesCbc { key, hmac } => Ok((
            key.bytes(),
            (hmac == Hmac::Sha256).then_some(HMAC_SHA256_KEY_BYTES),
        )),
        CipherSuite::AesGcm { key: KeyBits::Aes192 } => Err(SpecError::Gcm192),
        CipherSuite::AesGcm { key } => Ok((key.bytes() + GCM_SALT_BYTES, None)),
        CipherSuite::ChaCha20Poly1305 => Err(SpecError::ChaCha),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_suite_lengths_and_differ() {
        for suite in CipherSuite::classic_six().into_iter().chain([
            CipherSuite::AesGcm { key: KeyBits::Aes128 },
            CipherSuite::AesGcm { key: KeyBits::Aes256 },
        ]) {
            let a = Protection::generate(suite, AuthTrunc::Bits128).unwrap();
            let b = Protection::generate(suite, AuthTrunc::Bits128).unwrap();
            assert_eq!(a.suite(), suite);
            assert_ne!(a, b, "two runs got the same keys for {suite}");
        }
    }

    #[test]
    fn debug_never_shows_key_bytes() {
        let keys = KeyInput {
            enc: &[0xAB; 32],
            auth: Some(&[0xCD; 32]),
        };
        let p = Protection::from_keys(
            CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256),
            AuthTrunc::Bits128,
            keys,
        )
        .unwrap();
        let shown = format!("{p:?}");
        assert!(
            !shown.to_lowercase().contains("ab, ") && !shown.contains("171"),
            "{shown}"
        );
        assert!(shown.contains("<32 secret bytes>"), "{shown}");
    }

    #[test]
    fn wrong_key_lengths_and_suites_are_refused() {
        let suite = CipherSuite::cbc(KeyBits::Aes128, Hmac::None);
        let short = KeyInput {
            enc: &[0; 15],
            auth: None,
        };
        assert!(matches!(
            Protection::from_keys(suite, AuthTrunc::Bits128, short),
            Err(SpecError::KeyLength {
                expected: 16,
                got: 15,
                ..
            })
        ));
        let extra_auth = KeyInput {
            enc: &[0; 16],
            auth: Some(&[0; 32]),
        };
        assert!(Protection::from_keys(suite, AuthTrunc::Bits128, extra_auth).is_err());
        assert_eq!(
            Protection::generate(CipherSuite::None, AuthTrunc::Bits128),
            Err(SpecError::Unencrypted)
        );
        assert_eq!(
            Protection::generate(CipherSuite::AesGcm { key: KeyBits::Aes192 }, AuthTrunc::Bits128),
            Err(SpecError::Gcm192)
        );
    }

    #[test]
    fn esp_overhead_counts_header_iv_padding_and_icv() {
        let cbc_hmac = Protection::generate(
            CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256),
            AuthTrunc::Bits128,
        )
        .unwrap();
        // 1400 + 2 trailer = 1402 → padded to 1408; 8 + 16 + 8 + 16 = 48.
        assert_eq!(cbc_hmac.esp_overhead(1400), 48);
        let gcm =
            Protection::generate(CipherSuite::AesGcm { key: KeyBits::Aes128 }, AuthTrunc::Bits128).unwrap();
        // 1402 → 1404 (4-byte alignment); 8 + 8 + 4 + 16 = 36.
        assert_eq!(gcm.esp_overhead(1400), 36);
    }
}
