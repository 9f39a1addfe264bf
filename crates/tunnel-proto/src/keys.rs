//! The run's key schedule: one random static key per run, in OpenVPN's static-key layout, so
//! the lab's tunnel and real OpenVPN can be keyed from the same material.
//!
//! Layout (OpenVPN `key2`, 256 bytes): two key slots of `cipher[64] | hmac[64]`. The end with
//! key direction 0 ([`KeyDirection::Normal`]) sends with slot 0 and receives with slot 1; the end
//! with direction 1 ([`KeyDirection::Inverse`]) the other way round. A cipher uses the first bytes
//! of its slot's cipher half; HMAC-SHA256 the first 32 bytes of the hmac half; AES-GCM takes
//! its 4-byte implicit nonce salt from the start of the hmac half (as OpenVPN takes its
//! implicit IV from there).

use std::fmt::Write as _;

use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

pub const STATIC_KEY_LEN: usize = 256;
const SLOT_LEN: usize = 128;
const HALF: usize = 64;

/// Which way an end uses the two key slots (OpenVPN `--secret file 0|1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyDirection {
    /// Key direction 0: send with slot 0, receive with slot 1.
    Normal,
    /// Key direction 1: send with slot 1, receive with slot 0.
    Inverse,
}

impl KeyDirection {
    /// The number OpenVPN expects after `--secret FILE`.
    pub fn openvpn_number(self) -> u8 {
        match self {
            KeyDirection::Normal => 0,
            KeyDirection::Inverse => 1,
        }
    }

    pub fn peer(self) -> KeyDirection {
        match self {
            KeyDirection::Normal => KeyDirection::Inverse,
            KeyDirection::Inverse => KeyDirection::Normal,
        }
    }

    fn send_slot(self) -> usize {
        match self {
            KeyDirection::Normal => 0,
            KeyDirection::Inverse => 1,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading {len} random bytes from the operating system: {source}")]
    Random { len: usize, source: getrandom::Error },
}

/// 256 bytes of random key material, zeroised on drop.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct StaticKey {
    bytes: [u8; STATIC_KEY_LEN],
}

impl std::fmt::Debug for StaticKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StaticKey(<redacted>)")
    }
}

/// The keys one end uses for one direction of traffic: views into a [`StaticKey`] slot.
#[derive(Clone, Copy)]
pub struct SlotKeys<'a> {
    /// 64 bytes; a cipher uses its key length from the start.
    pub cipher: &'a [u8; HALF],
    /// 64 bytes; HMAC-SHA256 uses the first 32, AES-GCM the first 4 as its nonce salt.
    pub hmac: &'a [u8; HALF],
}

impl StaticKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Result<StaticKey, KeyError> {
        let mut bytes = [0u8; STATIC_KEY_LEN];
        getrandom::fill(&mut bytes).map_err(|source| KeyError::Random {
            len: STATIC_KEY_LEN,
            source,
        })?;
        Ok(StaticKey { bytes })
    }

    /// A key from given bytes (known-answer tests, or a key shared with another program).
    pub fn from_bytes(bytes: [u8; STATIC_KEY_LEN]) -> StaticKey {
        StaticKey { bytes }
    }

    fn slot(&self, index: usize) -> SlotKeys<'_> {
        let s = &self.bytes[index * SLOT_LEN..(index + 1) * SLOT_LEN];
        SlotKeys {
            cipher: s[..HALF].try_into().expect("slot half is 64 bytes"),
            hmac: s[HALF..].try_into().expect("slot half is 64 bytes"),
        }
    }

    /// Keys this end sends with.
    pub fn send(&self, dir: KeyDirection) -> SlotKeys<'_> {
        self.slot(dir.send_slot())
    }

    /// Keys this end receives with (the peer's send keys).
    pub fn receive(&self, dir: KeyDirection) -> SlotKeys<'_> {
        self.slot(dir.peer().send_slot())
    }

    /// The key in OpenVPN's static key file format (`openvpn --genkey secret` output).
    pub fn to_openvpn_file(&self) -> Zeroizing<String> {
        let mut out = Zeroizing::new(String::with_capacity(700));
        out.push_str("-----BEGIN OpenVPN Static key V1-----\n");
        for line in self.bytes.chunks(16) {
            for b in line {
                let _ = write!(out, "{b:02x}");
            }
            out.push('\n');
        }
        out.push_str("-----END OpenVPN Static key V1-----\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_mirror_each_other() {
        let mut bytes = [0u8; STATIC_KEY_LEN];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = i as u8;
        }
        let k = StaticKey::from_bytes(bytes);
        assert_eq!(k.send(KeyDirection::Normal).cipher[0], 0);
        assert_eq!(k.send(KeyDirection::Normal).hmac[0], 64);
        assert_eq!(k.send(KeyDirection::Inverse).cipher[0], 128);
        assert_eq!(
            k.receive(KeyDirection::Inverse).cipher,
            k.send(KeyDirection::Normal).cipher
        );
        assert_eq!(
            k.receive(KeyDirection::Normal).hmac,
            k.send(KeyDirection::Inverse).hmac
        );
    }

    #[test]
    fn openvpn_file_has_sixteen_hex_lines() {
        let k = StaticKey::from_bytes([0xab; STATIC_KEY_LEN]);
        let text = k.to_openvpn_file();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 18);
        assert_eq!(lines[1], "abababababababababababababababab");
        assert!(lines[17].starts_with("-----END"));
    }

    #[test]
    fn generated_keys_differ() {
        let a = StaticKey::generate().unwrap();
        let b = StaticKey::generate().unwrap();
        assert_ne!(a.bytes, b.bytes);
    }
}
