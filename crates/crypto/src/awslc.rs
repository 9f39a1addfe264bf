//! aws-lc-rs backend. AWS-LC chooses AES-NI/VAES/SHA-NI code at initialisation from CPUID,
//! masked by `OPENSSL_ia32cap` (see [`crate::soft`]). aws-lc-rs zeroises its key schedules on
//! drop (`SymmetricCipherKey`, `LcHmacCtx`, and AWS-LC's `EVP_AEAD_CTX_cleanup`); the ECB
//! context CBC batches use goes through `EVP_CIPHER_CTX_free`, which cleanses it too.

use std::ffi::c_int;
use std::ptr::{null, null_mut, NonNull};
use std::sync::Mutex;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::{
    DecryptingKey, DecryptionContext, EncryptingKey, EncryptionContext, UnboundCipherKey,
};
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;

use model::KeyBits;

use crate::interleave;
use crate::primitives::{
    check_blocks, Aead, AeadAlgorithm, AesCbc, CbcMessage, CipherStream, CryptoError, HmacSha256, Library,
    StreamCipher, AES_BLOCK_LEN, HMAC_SHA256_LEN, NONCE_LEN, TAG_LEN,
};

fn library_error(operation: &'static str) -> CryptoError {
    CryptoError::Library {
        library: Library::AwsLc,
        operation,
    }
}

/// What AWS-LC itself decided at initialisation: AES instructions and carry-less multiply
/// both usable (`EVP_has_aes_hardware`). This is the library's own answer, so it also
/// proves that an `OPENSSL_ia32cap` mask took effect.
pub(crate) fn hardware_aes() -> bool {
    aws_lc_rs::init();
    // SAFETY: a pure query of capability flags that `init` has set; no arguments.
    unsafe { aws_lc_sys::EVP_has_aes_hardware() == 1 }
}

struct Cbc {
    bits: KeyBits,
    enc: EncryptingKey,
    dec: DecryptingKey,
    /// For batches; locked once per batch (one tunnel thread owns each key, so never waited on).
    ecb: Mutex<EvpContext>,
}

/// An AWS-LC `EVP_CIPHER_CTX`, set up once and then updated in place: the interface
/// `openssl speed -evp` times. CBC batches use it in ECB mode (one call encrypts many
/// independent blocks with its AES-NI/VAES code, several in flight; aws-lc-rs's own ECB mode
/// goes a block per call, no faster than a CBC chain); [`CipherStream`]s in CBC, GCM or
/// ChaCha20-Poly1305 mode.
struct EvpContext(NonNull<aws_lc_sys::EVP_CIPHER_CTX>);

// SAFETY: the context is owned by this value alone and used only through `&mut self`;
// AWS-LC contexts are not tied to the thread that made them.
unsafe impl Send for EvpContext {}

impl EvpContext {
    /// `cipher` keyed with `key` from `iv` (none for ECB), to encrypt or to decrypt, padding
    /// off: an update of whole blocks writes exactly its length (GCM and ChaCha20-Poly1305
    /// write every byte they are given).
    fn new(
        cipher: *const aws_lc_sys::EVP_CIPHER,
        key: &[u8],
        iv: Option<&[u8]>,
        encrypt: bool,
        what: &'static str,
    ) -> Result<EvpContext, CryptoError> {
        // SAFETY: reads the lengths of a static cipher table.
        let (key_len, iv_len) = unsafe {
            (
                aws_lc_sys::EVP_CIPHER_key_length(cipher) as usize,
                aws_lc_sys::EVP_CIPHER_iv_length(cipher) as usize,
            )
        };
        if key.len() != key_len || iv.map_or(0, <[u8]>::len) != iv_len {
            return Err(library_error(what));
        }
        // SAFETY: allocates a fresh context, or returns null.
        let ctx =
            NonNull::new(unsafe { aws_lc_sys::EVP_CIPHER_CTX_new() }).ok_or_else(|| library_error(what))?;
        // Owned from here, so an error below frees it.
        let owned = EvpContext(ctx);
        let iv = iv.map_or(null(), <[u8]>::as_ptr);
        // SAFETY: a valid context; `key` and `iv` hold the cipher's lengths (checked above).
        let ready = unsafe {
            aws_lc_sys::EVP_CipherInit_ex(
                ctx.as_ptr(),
                cipher,
                null_mut(),
                key.as_ptr(),
                iv,
                c_int::from(encrypt),
            ) == 1
                && aws_lc_sys::EVP_CIPHER_CTX_set_padding(ctx.as_ptr(), 0) == 1
        };
        if ready {
            Ok(owned)
        } else {
            Err(library_error(what))
        }
    }

    fn ecb(bits: KeyBits, key: &[u8]) -> Result<EvpContext, CryptoError> {
        aws_lc_rs::init();
        // SAFETY: accessors of static cipher tables; no arguments.
        let cipher = unsafe {
            match bits {
                KeyBits::Aes128 => aws_lc_sys::EVP_aes_128_ecb(),
                KeyBits::Aes192 => aws_lc_sys::EVP_aes_192_ecb(),
                KeyBits::Aes256 => aws_lc_sys::EVP_aes_256_ecb(),
            }
        };
        EvpContext::new(cipher, key, None, true, "AES-ECB key setup")
    }

    /// `EVP_CipherUpdate` on `data`, in place.
    fn update(&mut self, data: &mut [u8], what: &'static str) -> Result<(), CryptoError> {
        let len = c_int::try_from(data.len()).map_err(|_| library_error(what))?;
        let data = data.as_mut_ptr();
        let mut written: c_int = 0;
        // SAFETY: in and out are the same `len` bytes, which AWS-LC allows; with padding off
        // and whole blocks (the callers check) it writes `len` bytes and buffers nothing.
        let ok = unsafe { aws_lc_sys::EVP_CipherUpdate(self.0.as_ptr(), data, &mut written, data, len) };
        if ok == 1 && written == len {
            Ok(())
        } else {
            Err(library_error(what))
        }
    }

    fn encrypt_blocks(&mut self, blocks: &mut [[u8; AES_BLOCK_LEN]]) -> Result<(), CryptoError> {
        self.update(blocks.as_flattened_mut(), "AES-ECB encrypt")
    }
}

impl Drop for EvpContext {
    fn drop(&mut self) {
        // SAFETY: owned and freed once; AWS-LC cleanses the key schedule as it frees it.
        unsafe { aws_lc_sys::EVP_CIPHER_CTX_free(self.0.as_ptr()) };
    }
}

/// A [`CipherStream`] on AWS-LC's EVP interface: the calls `openssl speed -evp` makes.
struct EvpStream {
    ctx: EvpContext,
    cbc: bool,
}

pub(crate) fn cipher_stream(
    kind: StreamCipher,
    key: &[u8],
    iv: &[u8],
) -> Result<Box<dyn CipherStream>, CryptoError> {
    aws_lc_rs::init();
    let cbc = matches!(kind, StreamCipher::AesCbcEncrypt | StreamCipher::AesCbcDecrypt);
    // SAFETY: accessors of static cipher tables; no arguments.
    let cipher = unsafe {
        match kind {
            StreamCipher::Aead(AeadAlgorithm::Aes128Gcm) => aws_lc_sys::EVP_aes_128_gcm(),
            StreamCipher::Aead(AeadAlgorithm::Aes256Gcm) => aws_lc_sys::EVP_aes_256_gcm(),
            StreamCipher::Aead(AeadAlgorithm::ChaCha20Poly1305) => aws_lc_sys::EVP_chacha20_poly1305(),
            _ => match key.len() {
                16 => aws_lc_sys::EVP_aes_128_cbc(),
                24 => aws_lc_sys::EVP_aes_192_cbc(),
                _ => aws_lc_sys::EVP_aes_256_cbc(),
            },
        }
    };
    let encrypt = kind != StreamCipher::AesCbcDecrypt;
    let ctx = EvpContext::new(cipher, key, Some(iv), encrypt, "cipher stream setup")?;
    Ok(Box::new(EvpStream { ctx, cbc }))
}

impl CipherStream for EvpStream {
    fn update(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        if self.cbc {
            check_blocks(buf)?;
        }
        self.ctx.update(buf, "cipher stream update")
    }
}

pub(crate) fn aes_cbc(bits: KeyBits, key: &[u8]) -> Result<Box<dyn AesCbc>, CryptoError> {
    let alg = match bits {
        KeyBits::Aes128 => &aws_lc_rs::cipher::AES_128,
        KeyBits::Aes192 => &aws_lc_rs::cipher::AES_192,
        KeyBits::Aes256 => &aws_lc_rs::cipher::AES_256,
    };
    let unbound = || UnboundCipherKey::new(alg, key).map_err(|_| library_error("AES key setup"));
    let enc = EncryptingKey::cbc(unbound()?).map_err(|_| library_error("AES-CBC key setup"))?;
    let dec = DecryptingKey::cbc(unbound()?).map_err(|_| library_error("AES-CBC key setup"))?;
    let ecb = Mutex::new(EvpContext::ecb(bits, key)?);
    Ok(Box::new(Cbc { bits, enc, dec, ecb }))
}

impl AesCbc for Cbc {
    fn key_bits(&self) -> KeyBits {
        self.bits
    }

    fn encrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError> {
        check_blocks(buf)?;
        self.enc
            .less_safe_encrypt(buf, EncryptionContext::Iv128(FixedLength::from(iv)))
            .map_err(|_| library_error("AES-CBC encrypt"))?;
        Ok(())
    }

    fn encrypt_batch(&self, messages: &mut [CbcMessage<'_>]) -> Result<(), CryptoError> {
        let mut ecb = self.ecb.lock().map_err(|_| library_error("AES-ECB lock"))?;
        interleave::cbc_encrypt_batch(messages, |blocks| ecb.encrypt_blocks(blocks))
    }

    fn decrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError> {
        check_blocks(buf)?;
        self.dec
            .decrypt(buf, DecryptionContext::Iv128(FixedLength::from(iv)))
            .map_err(|_| library_error("AES-CBC decrypt"))?;
        Ok(())
    }
}

struct HmacKey {
    key: hmac::Key,
}

pub(crate) fn hmac_sha256(key: &[u8]) -> Result<Box<dyn HmacSha256>, CryptoError> {
    Ok(Box::new(HmacKey {
        key: hmac::Key::new(hmac::HMAC_SHA256, key),
    }))
}

impl HmacSha256 for HmacKey {
    fn mac(&self, parts: &[&[u8]]) -> [u8; HMAC_SHA256_LEN] {
        let mut ctx = hmac::Context::with_key(&self.key);
        for p in parts {
            ctx.update(p);
        }
        let tag = ctx.sign();
        let mut out = [0u8; HMAC_SHA256_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }
}

struct AeadKey {
    algorithm: AeadAlgorithm,
    key: LessSafeKey,
}

pub(crate) fn aead(algorithm: AeadAlgorithm, key: &[u8]) -> Result<Box<dyn Aead>, CryptoError> {
    let alg = match algorithm {
        AeadAlgorithm::Aes128Gcm => &aead::AES_128_GCM,
        AeadAlgorithm::Aes256Gcm => &aead::AES_256_GCM,
        AeadAlgorithm::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
    };
    let unbound = UnboundKey::new(alg, key).map_err(|_| library_error("AEAD key setup"))?;
    Ok(Box::new(AeadKey {
        algorithm,
        key: LessSafeKey::new(unbound),
    }))
}

impl Aead for AeadKey {
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
            .key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(*nonce), Aad::from(aad), buf)
            .map_err(|_| library_error("AEAD seal"))?;
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        Ok(out)
    }

    fn open(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), CryptoError> {
        self.key
            .open_in_place_separate_tag(Nonce::assume_unique_for_key(*nonce), Aad::from(aad), tag, buf)
            .map_err(|_| CryptoError::Authentication)?;
        Ok(())
    }
}
