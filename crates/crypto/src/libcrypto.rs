//! OpenSSL's libcrypto, loaded at run time: the library `openssl speed`, OpenVPN and
//! strongSwan's openssl plugin compute with, so `--crypto libcrypto` times the very code
//! those tools time. Loaded with `dlopen` rather than linked: the lab builds (the arm64
//! cross build too) without libssl-dev, a machine without libcrypto refuses only this
//! choice, with the reason; and [`LIBCRYPTO_ENV`] can point at another OpenSSL build
//! (`/opt/openssl-3.5/lib64/libcrypto.so.3`), which is how two releases are compared on one
//! machine. Leaves out everything but the ciphers: no TLS, no providers of its own.
//!
//! Only the EVP cipher interface and `HMAC_*` are used, which OpenSSL 1.1 and every 3.x
//! export with the same signatures. One `EVP_CIPHER_CTX` per key and direction is set up
//! once and then re-initialised with each packet's IV (`EVP_CipherInit_ex` with no cipher
//! and no key, as OpenVPN does). OpenSSL cleanses key schedules when a context is freed.
//!
//! Whether hardware AES is in use cannot be asked of OpenSSL 3 (its capability vector is
//! not exported); [`hardware_aes`] reads the CPU's flags and applies `OPENSSL_ia32cap` the
//! way OpenSSL's start-up code does.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::ptr::{null, null_mut, NonNull};
use std::sync::{Mutex, OnceLock};

use model::KeyBits;

use crate::primitives::{
    check_blocks, Aead, AeadAlgorithm, AesCbc, CipherStream, CryptoError, HmacSha256, Library, StreamCipher,
    AES_BLOCK_LEN, HMAC_SHA256_LEN, NONCE_LEN, TAG_LEN,
};

/// A path to the libcrypto to load instead of the system's `libcrypto.so.3` (or `.so.1.1`).
pub const LIBCRYPTO_ENV: &str = "IPSEC_LAB_LIBCRYPTO";
const SONAMES: [&str; 2] = ["libcrypto.so.3", "libcrypto.so.1.1"];

const EVP_CTRL_AEAD_GET_TAG: c_int = 0x10;
const EVP_CTRL_AEAD_SET_TAG: c_int = 0x11;

type Ctx = c_void;
type Cipher = c_void;

/// The entry points the lab calls, resolved once.
struct Api {
    version: String,
    path: String,
    cipherbyname: unsafe extern "C" fn(*const c_char) -> *const Cipher,
    ctx_new: unsafe extern "C" fn() -> *mut Ctx,
    ctx_free: unsafe extern "C" fn(*mut Ctx),
    init: unsafe extern "C" fn(*mut Ctx, *const Cipher, *mut c_void, *const u8, *const u8, c_int) -> c_int,
    set_padding: unsafe extern "C" fn(*mut Ctx, c_int) -> c_int,
    update: unsafe extern "C" fn(*mut Ctx, *mut u8, *mut c_int, *const u8, c_int) -> c_int,
    finish: unsafe extern "C" fn(*mut Ctx, *mut u8, *mut c_int) -> c_int,
    ctrl: unsafe extern "C" fn(*mut Ctx, c_int, c_int, *mut c_void) -> c_int,
    sha256: unsafe extern "C" fn() -> *const c_void,
    hmac_new: unsafe extern "C" fn() -> *mut c_void,
    hmac_free: unsafe extern "C" fn(*mut c_void),
    hmac_init: unsafe extern "C" fn(*mut c_void, *const u8, c_int, *const c_void, *mut c_void) -> c_int,
    hmac_update: unsafe extern "C" fn(*mut c_void, *const u8, usize) -> c_int,
    hmac_final: unsafe extern "C" fn(*mut c_void, *mut u8, *mut c_uint) -> c_int,
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

fn load() -> Result<Api, String> {
    let candidates: Vec<String> = match std::env::var(LIBCRYPTO_ENV) {
        Ok(path) if !path.is_empty() => vec![path],
        _ => SONAMES.iter().map(|s| s.to_string()).collect(),
    };
    let mut why = Vec::new();
    for name in &candidates {
        // SAFETY: loading libcrypto runs its constructors (CPU detection), nothing else.
        match unsafe { libloading::Library::new(name) } {
            // The library stays loaded for the life of the process: contexts outlive any scope.
            Ok(lib) => return resolve(Box::leak(Box::new(lib)), name),
            Err(e) => why.push(e.to_string()),
        }
    }
    Err(format!(
        "cannot load OpenSSL's libcrypto ({}): {}; install libssl3 (apt-get install libssl3) or set {LIBCRYPTO_ENV} to a libcrypto.so",
        candidates.join(", "),
        why.join("; ")
    ))
}

fn resolve(lib: &'static libloading::Library, name: &str) -> Result<Api, String> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the declared type is the function's signature in OpenSSL 1.1 and 3.x.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{name} has no {}: {e}", $name))?
        };
    }
    let version: unsafe extern "C" fn(c_int) -> *const c_char = sym!("OpenSSL_version");
    // SAFETY: OpenSSL_version(OPENSSL_VERSION) returns a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(version(0)) }
        .to_string_lossy()
        .into_owned();
    Ok(Api {
        version,
        path: name.to_string(),
        cipherbyname: sym!("EVP_get_cipherbyname"),
        ctx_new: sym!("EVP_CIPHER_CTX_new"),
        ctx_free: sym!("EVP_CIPHER_CTX_free"),
        init: sym!("EVP_CipherInit_ex"),
        set_padding: sym!("EVP_CIPHER_CTX_set_padding"),
        update: sym!("EVP_CipherUpdate"),
        finish: sym!("EVP_CipherFinal_ex"),
        ctrl: sym!("EVP_CIPHER_CTX_ctrl"),
        sha256: sym!("EVP_sha256"),
        hmac_new: sym!("HMAC_CTX_new"),
        hmac_free: sym!("HMAC_CTX_free"),
        hmac_init: sym!("HMAC_Init_ex"),
        hmac_update: sym!("HMAC_Update"),
        hmac_final: sym!("HMAC_Final"),
    })
}

fn api() -> Result<&'static Api, CryptoError> {
    API.get_or_init(load)
        .as_ref()
        .map_err(|_| CryptoError::LibraryMissing {
            library: Library::Libcrypto,
        })
}

/// Why libcrypto could not be loaded, or None when it was.
pub fn load_error() -> Option<String> {
    API.get_or_init(load).as_ref().err().cloned()
}

/// The loaded library's version string and the name it was loaded by, e.g.
/// ("OpenSSL 3.0.19 27 Jan 2026", "libcrypto.so.3").
pub fn version() -> Option<(String, String)> {
    let api = api().ok()?;
    Some((api.version.clone(), api.path.clone()))
}

fn library_error(operation: &'static str) -> CryptoError {
    CryptoError::Library {
        library: Library::Libcrypto,
        operation,
    }
}

/// Whether OpenSSL uses the AES and carry-less multiply instructions in this process: the
/// CPU has them and `OPENSSL_ia32cap` (read by OpenSSL when it loads) does not clear them.
pub(crate) fn hardware_aes() -> bool {
    let mask = std::env::var(model::env::HARDWARE_AES_OFF.var).ok();
    cpu_has_aes() && !openssl_masks_aes(mask.as_deref())
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_aes() -> bool {
    std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
}

#[cfg(target_arch = "aarch64")]
fn cpu_has_aes() -> bool {
    std::arch::is_aarch64_feature_detected!("aes")
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn cpu_has_aes() -> bool {
    false
}

/// Whether OpenSSL 3's start-up reads `value` as turning hardware AES off. x86: `~X` clears
/// the bits of X; a value starting with `:` leaves the first word alone; anything else
/// replaces the CPU's flags with its number (a value that is not a number, or empty, is 0:
/// no features at all). ARM (`OPENSSL_armcap`): the number replaces the flags.
fn openssl_masks_aes(value: Option<&str>) -> bool {
    let Some(value) = value else { return false };
    let aes_bit = model::env::HARDWARE_AES_OFF.aes_bit;
    // The number ends at the first non-digit, so a second word after ':' is never read.
    match value.strip_prefix('~') {
        Some(rest) if cfg!(target_arch = "x86_64") => strtou64(rest) & aes_bit != 0,
        _ if value.starts_with(':') && cfg!(target_arch = "x86_64") => false,
        _ => strtou64(value) & aes_bit == 0,
    }
}

/// `strtoull(s, NULL, 0)`: leading digits in base 16 (`0x`), 8 (`0`) or 10; 0 if none.
fn strtou64(s: &str) -> u64 {
    let s = s.trim_start();
    let (digits, radix) = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (hex, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    let end = digits.find(|c: char| !c.is_digit(radix)).unwrap_or(digits.len());
    u64::from_str_radix(&digits[..end], radix).unwrap_or(0)
}

/// An `EVP_CIPHER_CTX` owned by one value: freed (and its key schedule cleansed) on drop.
struct Context {
    api: &'static Api,
    ctx: NonNull<Ctx>,
}

// SAFETY: the context is owned by this value alone and used only through `&mut self` (or a
// Mutex around it); OpenSSL contexts are not tied to the thread that made them.
unsafe impl Send for Context {}

impl Context {
    /// `name` keyed with `key`, to encrypt or decrypt, padding off; the IV comes per message.
    fn new(name: &CStr, key: &[u8], encrypt: bool, what: &'static str) -> Result<Context, CryptoError> {
        let api = api()?;
        // SAFETY: a NUL-terminated name; returns a static cipher table or null.
        let cipher = unsafe { (api.cipherbyname)(name.as_ptr()) };
        if cipher.is_null() {
            return Err(library_error(what));
        }
        // SAFETY: allocates a fresh context, or returns null.
        let ctx = NonNull::new(unsafe { (api.ctx_new)() }).ok_or_else(|| library_error(what))?;
        let owned = Context { api, ctx };
        // SAFETY: a valid context and cipher; `key` has the cipher's key length (the callers
        // checked it against the algorithm); the IV is set per message.
        let ok = unsafe {
            (api.init)(
                ctx.as_ptr(),
                cipher,
                null_mut(),
                key.as_ptr(),
                null(),
                c_int::from(encrypt),
            ) == 1
                && (api.set_padding)(ctx.as_ptr(), 0) == 1
        };
        if ok {
            Ok(owned)
        } else {
            Err(library_error(what))
        }
    }

    /// Starts a new message from `iv` with the same cipher and key.
    fn restart(&mut self, iv: &[u8], what: &'static str) -> Result<(), CryptoError> {
        // SAFETY: a set-up context; null cipher and key keep the ones it has; `iv` has the
        // cipher's IV length (16 for CBC, 12 for the AEADs' default).
        let ok = unsafe { (self.api.init)(self.ctx.as_ptr(), null(), null_mut(), null(), iv.as_ptr(), -1) };
        if ok == 1 {
            Ok(())
        } else {
            Err(library_error(what))
        }
    }

    /// `EVP_CipherUpdate` in place, writing exactly `data.len()` bytes.
    fn update(&mut self, data: &mut [u8], what: &'static str) -> Result<(), CryptoError> {
        let p = data.as_mut_ptr();
        // SAFETY: in and out are the same bytes, which OpenSSL allows; with padding off and
        // whole blocks (checked by the callers) it writes exactly their length.
        match unsafe { self.raw_update(p, p, data.len()) } {
            Some(written) if written == data.len() => Ok(()),
            _ => Err(library_error(what)),
        }
    }

    /// `EVP_CipherUpdate` with a null output: `aad` is taken as associated data.
    fn aad(&mut self, aad: &[u8]) -> Result<(), CryptoError> {
        // SAFETY: a null output writes nothing.
        if aad.is_empty() || unsafe { self.raw_update(null_mut(), aad.as_ptr(), aad.len()) }.is_some() {
            Ok(())
        } else {
            Err(library_error("AEAD associated data"))
        }
    }

    /// One `EVP_CipherUpdate` of the `len` bytes at `input` into `out`: the bytes written,
    /// or None on failure.
    ///
    /// # Safety
    /// `input` points to `len` readable bytes; `out` is null (associated data) or has room
    /// for what the cipher writes (it may be `input` itself).
    unsafe fn raw_update(&mut self, out: *mut u8, input: *const u8, len: usize) -> Option<usize> {
        let len = c_int::try_from(len).ok()?;
        let mut written: c_int = 0;
        // SAFETY: a set-up context, and the pointers as the caller promised.
        let ok = unsafe { (self.api.update)(self.ctx.as_ptr(), out, &mut written, input, len) };
        (ok == 1).then(|| usize::try_from(written).ok()).flatten()
    }

    /// `EVP_CipherFinal_ex`: for an AEAD opening, the tag check.
    fn finish(&mut self) -> bool {
        let mut block = [0u8; AES_BLOCK_LEN];
        let mut written: c_int = 0;
        // SAFETY: with padding off (or a stream mode) nothing more than a block is written.
        unsafe { (self.api.finish)(self.ctx.as_ptr(), block.as_mut_ptr(), &mut written) == 1 && written == 0 }
    }

    fn tag(&mut self, op: c_int, tag: &mut [u8; TAG_LEN]) -> bool {
        // SAFETY: GET_TAG writes, SET_TAG reads, TAG_LEN bytes.
        unsafe { (self.api.ctrl)(self.ctx.as_ptr(), op, TAG_LEN as c_int, tag.as_mut_ptr().cast()) == 1 }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: owned and freed once.
        unsafe { (self.api.ctx_free)(self.ctx.as_ptr()) };
    }
}

/// The cipher for an AES key of `key_len` bytes; None for any other length (OpenSSL would
/// read past a short key).
fn cbc_name(key_len: usize) -> Option<&'static CStr> {
    match key_len {
        16 => Some(c"AES-128-CBC"),
        24 => Some(c"AES-192-CBC"),
        32 => Some(c"AES-256-CBC"),
        _ => None,
    }
}

fn aead_name(algorithm: AeadAlgorithm) -> &'static CStr {
    match algorithm {
        AeadAlgorithm::Aes128Gcm => c"AES-128-GCM",
        AeadAlgorithm::Aes256Gcm => c"AES-256-GCM",
        AeadAlgorithm::ChaCha20Poly1305 => c"ChaCha20-Poly1305",
    }
}

/// One key, both directions. Each context is locked once per packet: one tunnel thread owns
/// each key, so the lock is never waited on.
struct Cbc {
    bits: KeyBits,
    enc: Mutex<Context>,
    dec: Mutex<Context>,
}

pub(crate) fn aes_cbc(bits: KeyBits, key: &[u8]) -> Result<Box<dyn AesCbc>, CryptoError> {
    let name = cbc_name(key.len()).ok_or_else(|| library_error("AES-CBC key setup"))?;
    Ok(Box::new(Cbc {
        bits,
        enc: Mutex::new(Context::new(name, key, true, "AES-CBC key setup")?),
        dec: Mutex::new(Context::new(name, key, false, "AES-CBC key setup")?),
    }))
}

fn cbc_message(ctx: &Mutex<Context>, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError> {
    check_blocks(buf)?;
    let mut ctx = ctx.lock().map_err(|_| library_error("AES-CBC lock"))?;
    ctx.restart(iv, "AES-CBC IV")?;
    ctx.update(buf, "AES-CBC")
}

impl AesCbc for Cbc {
    fn key_bits(&self) -> KeyBits {
        self.bits
    }

    fn encrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError> {
        cbc_message(&self.enc, iv, buf)
    }

    fn decrypt(&self, iv: &[u8; AES_BLOCK_LEN], buf: &mut [u8]) -> Result<(), CryptoError> {
        cbc_message(&self.dec, iv, buf)
    }
}

/// A keyed `HMAC_CTX`; `HMAC_Init_ex` with no key restarts it from the stored key.
struct Hmac {
    api: &'static Api,
    ctx: Mutex<NonNull<c_void>>,
}

// SAFETY: the HMAC context is only touched under the Mutex.
unsafe impl Send for Hmac {}
// SAFETY: as above.
unsafe impl Sync for Hmac {}

pub(crate) fn hmac_sha256(key: &[u8]) -> Result<Box<dyn HmacSha256>, CryptoError> {
    let api = api()?;
    let len = c_int::try_from(key.len()).map_err(|_| library_error("HMAC key setup"))?;
    // SAFETY: allocates a fresh context, or returns null.
    let ctx = NonNull::new(unsafe { (api.hmac_new)() }).ok_or_else(|| library_error("HMAC key setup"))?;
    let hmac = Hmac {
        api,
        ctx: Mutex::new(ctx),
    };
    // SAFETY: a fresh context and `len` bytes of key.
    let ok = unsafe { (api.hmac_init)(ctx.as_ptr(), key.as_ptr(), len, (api.sha256)(), null_mut()) };
    if ok == 1 {
        Ok(Box::new(hmac))
    } else {
        Err(library_error("HMAC key setup"))
    }
}

impl HmacSha256 for Hmac {
    fn mac(&self, parts: &[&[u8]]) -> [u8; HMAC_SHA256_LEN] {
        let mut out = [0u8; HMAC_SHA256_LEN];
        let ctx = self.ctx.lock().unwrap_or_else(|e| e.into_inner());
        let mut len: c_uint = 0;
        // SAFETY: a keyed context; init with null key and digest restarts it with both.
        let ok = unsafe {
            let mut ok = (self.api.hmac_init)(ctx.as_ptr(), null(), 0, null(), null_mut()) == 1;
            for p in parts {
                ok &= (self.api.hmac_update)(ctx.as_ptr(), p.as_ptr(), p.len()) == 1;
            }
            ok && (self.api.hmac_final)(ctx.as_ptr(), out.as_mut_ptr(), &mut len) == 1
        };
        // The trait has no error path here: a failed MAC is all ones, which no verify accepts
        // against a real tag and the self-test catches.
        if !ok || len as usize != HMAC_SHA256_LEN {
            out = [0xff; HMAC_SHA256_LEN];
        }
        out
    }
}

impl Drop for Hmac {
    fn drop(&mut self) {
        let ctx = self.ctx.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: owned and freed once; OpenSSL cleanses the key.
        unsafe { (self.api.hmac_free)(ctx.as_ptr()) };
    }
}

struct AeadKey {
    algorithm: AeadAlgorithm,
    seal: Mutex<Context>,
    open: Mutex<Context>,
}

pub(crate) fn aead(algorithm: AeadAlgorithm, key: &[u8]) -> Result<Box<dyn Aead>, CryptoError> {
    let name = aead_name(algorithm);
    Ok(Box::new(AeadKey {
        algorithm,
        seal: Mutex::new(Context::new(name, key, true, "AEAD key setup")?),
        open: Mutex::new(Context::new(name, key, false, "AEAD key setup")?),
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
        let mut ctx = self.seal.lock().map_err(|_| library_error("AEAD lock"))?;
        ctx.restart(nonce, "AEAD nonce")?;
        ctx.aad(aad)?;
        ctx.update(buf, "AEAD seal")?;
        let mut tag = [0u8; TAG_LEN];
        if ctx.finish() && ctx.tag(EVP_CTRL_AEAD_GET_TAG, &mut tag) {
            Ok(tag)
        } else {
            Err(library_error("AEAD seal"))
        }
    }

    fn open(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), CryptoError> {
        let mut ctx = self.open.lock().map_err(|_| library_error("AEAD lock"))?;
        ctx.restart(nonce, "AEAD nonce")?;
        let mut tag = *tag;
        if !ctx.tag(EVP_CTRL_AEAD_SET_TAG, &mut tag) {
            return Err(library_error("AEAD open"));
        }
        ctx.aad(aad)?;
        ctx.update(buf, "AEAD open")?;
        if ctx.finish() {
            Ok(())
        } else {
            Err(CryptoError::Authentication)
        }
    }
}

/// A [`CipherStream`] on OpenSSL's EVP interface: exactly the calls `openssl speed -evp`
/// makes (one init, then `EVP_CipherUpdate` per block).
struct Stream {
    ctx: Context,
    cbc: bool,
}

pub(crate) fn cipher_stream(
    kind: StreamCipher,
    key: &[u8],
    iv: &[u8],
) -> Result<Box<dyn CipherStream>, CryptoError> {
    let (name, cbc) = match kind {
        StreamCipher::Aead(algorithm) if key.len() == algorithm.key_len() => {
            (Some(aead_name(algorithm)), false)
        }
        StreamCipher::Aead(_) => (None, false),
        _ => (cbc_name(key.len()), true),
    };
    // A wrong IV length is refused before a context is made (OpenSSL would read past it).
    let name = name
        .filter(|_| iv.len() == kind.iv_len())
        .ok_or_else(|| library_error("cipher stream setup"))?;
    let mut ctx = Context::new(
        name,
        key,
        kind != StreamCipher::AesCbcDecrypt,
        "cipher stream setup",
    )?;
    ctx.restart(iv, "cipher stream setup")?;
    Ok(Box::new(Stream { ctx, cbc }))
}

impl CipherStream for Stream {
    fn update(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        if self.cbc {
            check_blocks(buf)?;
        }
        self.ctx.update(buf, "cipher stream update")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn ia32cap_is_read_as_openssl_reads_it() {
        assert!(!openssl_masks_aes(None));
        assert!(openssl_masks_aes(Some("~0x200000200000000")));
        assert!(openssl_masks_aes(Some("~0x200000000000000:0")));
        assert!(!openssl_masks_aes(Some("~0x200000000")), "only PCLMULQDQ masked");
        assert!(!openssl_masks_aes(Some(":~0x0")), "the first word left alone");
        assert!(openssl_masks_aes(Some("")), "empty replaces the flags with 0");
        assert!(openssl_masks_aes(Some("nonsense")));
        assert!(
            !openssl_masks_aes(Some("0x200000200000000")),
            "a value keeping bit 57"
        );
        assert!(!openssl_masks_aes(Some("0xffffffffffffffff")));
    }

    #[test]
    fn strtou64_reads_leading_digits_like_c() {
        assert_eq!(strtou64("0x1f:5"), 0x1f);
        assert_eq!(strtou64("017"), 0o17);
        assert_eq!(strtou64("42abc"), 42);
        assert_eq!(strtou64(""), 0);
        assert_eq!(strtou64("0"), 0);
        assert_eq!(strtou64("x"), 0);
    }
}
