//! RustCrypto backend: `aes` (AES-NI detected at run time), `cbc`, `hmac` + `sha2`,
//! `aes-gcm`, `chacha20poly1305`. Keys are zeroised on drop by the crates' `zeroize` feature.

use aes::cipher::array::Array;
use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, BlockModeDecrypt, BlockModeEncrypt};
use aes::cipher::{BlockSizeUser, InnerIvInit, KeyInit};
use aes_gcm::{AeadInOut, Aes128Gcm, Aes256Gcm};
use chacha20poly1305::ChaCha20Poly1305;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use model::KeyBits;

use crate::primitives::{
    check_blocks, Aead, AeadAlgorithm, AesCbc, CipherStream, CryptoError, HmacSha256, Library, StreamCipher,
    AES_BLOCK_LEN, HMAC_SHA256_LEN, NONCE_LEN, TAG_LEN,
};

type U16 = aes::cipher::consts::U16;

pub(crate) fn hardware_aes() -> bool {
    if cfg!(aes_backend = "soft") {
        return false;
    }
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        std::arch::is_x86_feature_detected!("aes")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

fn library_error(operation: &'static str) -> CryptoError {
    CryptoError::Library {
        library: Library::RustCrypto,
        operation,
    }
}

/// The expanded encryption and decryption key schedules; cloned into a CBC mode object per
/// call (a copy of a few hundred bytes, no key expansion). Batches go message by message
/// (the trait's default): `aes` takes its parallel path only for as many blocks as its
/// widest backend holds (64 with VAES-512) and does fewer one at a time, so interleaving a
/// batch's lanes through it was slower here than the plain chains.
struct Cbc<E, D> {
    bits: KeyBits,
    enc: E,
    dec: D,
}

pub(crate) fn aes_cbc(bits: KeyBits, key: &[u8]) -> Result<Box<dyn AesCbc>, CryptoError> {
    fn build<E, D>(bits: KeyBits, key: &[u8]) -> Result<Box<dyn AesCbc>, CryptoError>
    where
        E: KeyInit + BlockCipherEncrypt + BlockSizeUser<BlockSize = U16> + Clone + Send + Sync + 'static,
        D: KeyInit + BlockCipherDecrypt + BlockSizeUser<BlockSize = U16> + Clone + Send + Sync + 'static,
    {
        let enc = E::new_from_slice(key).map_err(|_| library_error("AES key setup"))?;
        let dec = D::new_from_slice(key).map_err(|_| library_error("AES key setup"))?;
        Ok(Box::new(Cbc { bits, enc, dec }))
    }
    match bits {
        KeyBits::Aes128 => build::<aes::Aes128Enc, aes::Aes128Dec>(bits, key),
        KeyBits::Aes192 => build::<aes::Aes192Enc, aes::Aes192Dec>(bits, key),
        KeyBits::Aes256 => build::<aes::Aes256Enc, aes::Aes256Dec>(bits, key),
    }
}

impl<E, D> AesCbc for Cbc<E, D>
where
    E: BlockCipherEncrypt + BlockSizeUser<BlockSize = U16> + Clone + Send + Sync,
    D: BlockCipherDecrypt + BlockSizeUser<BlockSize = U16> + Clone + Send + Sync,
{
    fn key_bits(&self) -> KeyBits {
        self.bits
    }

    fn encrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError> {
        check_blocks(buf)?;
        let (blocks, _) = Array::<u8, U16>::slice_as_chunks_mut(buf);
        cbc::Encryptor::<E>::inner_iv_init(self.enc.clone(), &Array::from(*iv)).encrypt_blocks(blocks);
        Ok(())
    }

    fn decrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError> {
        check_blocks(buf)?;
        let (blocks, _) = Array::<u8, U16>::slice_as_chunks_mut(buf);
        cbc::Decryptor::<D>::inner_iv_init(self.dec.clone(), &Array::from(*iv)).decrypt_blocks(blocks);
        Ok(())
    }
}

/// A CBC chain kept across updates; each update encrypts (or decrypts) the next blocks.
struct CbcStream<M>(M);

impl<M: Send> CipherStream for CbcStream<cbc::Encryptor<M>>
where
    M: BlockCipherEncrypt + BlockSizeUser<BlockSize = U16>,
{
    fn update(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        check_blocks(buf)?;
        self.0
            .encrypt_blocks(Array::<u8, U16>::slice_as_chunks_mut(buf).0);
        Ok(())
    }
}

impl<M: Send> CipherStream for CbcStream<cbc::Decryptor<M>>
where
    M: BlockCipherDecrypt + BlockSizeUser<BlockSize = U16>,
{
    fn update(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        check_blocks(buf)?;
        self.0
            .decrypt_blocks(Array::<u8, U16>::slice_as_chunks_mut(buf).0);
        Ok(())
    }
}

/// CBC only: RustCrypto's `aes-gcm` and `chacha20poly1305` seal and open whole messages.
pub(crate) fn cipher_stream(
    kind: StreamCipher,
    key: &[u8],
    iv: &[u8],
) -> Result<Box<dyn CipherStream>, CryptoError> {
    fn build<E, D>(
        kind: StreamCipher,
        key: &[u8],
        iv: &[u8; AES_BLOCK_LEN],
    ) -> Result<Box<dyn CipherStream>, CryptoError>
    where
        E: KeyInit + BlockCipherEncrypt + BlockSizeUser<BlockSize = U16> + Send + 'static,
        D: KeyInit + BlockCipherDecrypt + BlockSizeUser<BlockSize = U16> + Send + 'static,
    {
        let iv = Array::from(*iv);
        let err = |_| library_error("AES key setup");
        Ok(if kind == StreamCipher::AesCbcDecrypt {
            Box::new(CbcStream(cbc::Decryptor::<D>::inner_iv_init(
                D::new_from_slice(key).map_err(err)?,
                &iv,
            )))
        } else {
            Box::new(CbcStream(cbc::Encryptor::<E>::inner_iv_init(
                E::new_from_slice(key).map_err(err)?,
                &iv,
            )))
        })
    }
    if let StreamCipher::Aead(alg) = kind {
        return Err(CryptoError::NoStream {
            library: Library::RustCrypto,
            algorithm: alg.name(),
        });
    }
    let iv = iv.try_into().map_err(|_| library_error("AES-CBC IV setup"))?;
    match key.len() {
        16 => build::<aes::Aes128Enc, aes::Aes128Dec>(kind, key, iv),
        24 => build::<aes::Aes192Enc, aes::Aes192Dec>(kind, key, iv),
        _ => build::<aes::Aes256Enc, aes::Aes256Dec>(kind, key, iv),
    }
}

/// The keyed HMAC state (inner and outer hash after the key block); cloned per message.
struct HmacKey {
    keyed: Hmac<Sha256>,
}

pub(crate) fn hmac_sha256(key: &[u8]) -> Result<Box<dyn HmacSha256>, CryptoError> {
    let keyed =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).map_err(|_| library_error("HMAC key setup"))?;
    Ok(Box::new(HmacKey { keyed }))
}

impl HmacSha256 for HmacKey {
    fn mac(&self, parts: &[&[u8]]) -> [u8; HMAC_SHA256_LEN] {
        let mut m = self.keyed.clone();
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }
}

struct AeadKey<A> {
    algorithm: AeadAlgorithm,
    cipher: A,
}

pub(crate) fn aead(algorithm: AeadAlgorithm, key: &[u8]) -> Result<Box<dyn Aead>, CryptoError> {
    let err = |_| library_error("AEAD key setup");
    Ok(match algorithm {
        AeadAlgorithm::Aes128Gcm => Box::new(AeadKey {
            algorithm,
            cipher: Aes128Gcm::new_from_slice(key).map_err(err)?,
        }),
        AeadAlgorithm::Aes256Gcm => Box::new(AeadKey {
            algorithm,
            cipher: Aes256Gcm::new_from_slice(key).map_err(err)?,
        }),
        AeadAlgorithm::ChaCha20Poly1305 => Box::new(AeadKey {
            algorithm,
            cipher: ChaCha20Poly1305::new_from_slice(key).map_err(err)?,
        }),
    })
}

impl<A> Aead for AeadKey<A>
where
    A: AeadInOut<NonceSize = aes::cipher::consts::U12, TagSize = U16> + Send + Sync,
{
    fn algorithm(&self) -> AeadAlgorithm {
        self.algorithm
    }

    fn seal(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], CryptoError> {
        let tag = self
            .cipher
            .encrypt_inout_detached(&Array::from(*nonce), aad, buf.into())
            .map_err(|_| library_error("AEAD seal"))?;
        Ok(tag.into())
    }

    fn open(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), CryptoError> {
        self.cipher
            .decrypt_inout_detached(&Array::from(*nonce), aad, buf.into(), &Array::from(*tag))
            .map_err(|_| CryptoError::Authentication)
    }
}
