//! x25519 key pairs (WireGuard's static keys), made from the OS RNG with `x25519-dalek`.

use std::fmt;

use zeroize::Zeroizing;

use crate::WgError;

pub const KEY_LEN: usize = 32;

/// A public key; printed as WireGuard prints keys (base64 is not needed here: hex).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(pub [u8; KEY_LEN]);

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl PublicKey {
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

/// A private key (wiped on drop, never printed) and its public key.
#[derive(Clone)]
pub struct KeyPair {
    private: Zeroizing<[u8; KEY_LEN]>,
    pub public: PublicKey,
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyPair {{ public: {:?}, private: <secret> }}", self.public)
    }
}

impl KeyPair {
    /// A fresh pair.
    pub fn generate() -> Result<KeyPair, WgError> {
        let mut private = Zeroizing::new([0u8; KEY_LEN]);
        getrandom::fill(&mut *private).map_err(|e| WgError::Random(e.to_string()))?;
        Ok(KeyPair::from_private(*private))
    }

    /// The pair of a given private key (fixtures, interop).
    pub fn from_private(private: [u8; KEY_LEN]) -> KeyPair {
        let secret = x25519_dalek::StaticSecret::from(private);
        let public = x25519_dalek::PublicKey::from(&secret);
        KeyPair {
            private: Zeroizing::new(private),
            public: PublicKey(public.to_bytes()),
        }
    }

    pub fn private(&self) -> &[u8; KEY_LEN] {
        &self.private
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_key_matches_rfc7748_vector() {
        // RFC 7748 section 6.1: Alice's private and public keys.
        let private: [u8; 32] = parse("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let pair = KeyPair::from_private(private);
        assert_eq!(
            pair.public.hex(),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
    }

    #[test]
    fn generated_pairs_differ() {
        let (a, b) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
        assert_ne!(a.public, b.public);
        assert!(!format!("{a:?}").contains(&hex(a.private())));
    }

    fn parse(s: &str) -> [u8; 32] {
        let v: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect();
        v.try_into().unwrap()
    }
}
