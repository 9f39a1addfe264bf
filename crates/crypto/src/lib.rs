//! The lab's cipher implementations, in one place: AES-CBC, HMAC-SHA256, AES-GCM and
//! ChaCha20-Poly1305 from RustCrypto, from aws-lc-rs and from OpenSSL's libcrypto (loaded at
//! run time), plus aws-lc-rs with hardware AES masked ("soft", the AES-NI-off row). The speed benchmark and the userspace tunnel both
//! build their ciphers here, so the two always measure the same code.
//!
//! The API is per operation on caller-owned buffers: CBC encrypt/decrypt in place with a
//! given IV (no padding: the caller pads; a batch of independent messages encrypted side by
//! side, see `interleave`), HMAC-SHA256 over several slices (the caller
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
//! * `libcrypto` → OpenSSL's libcrypto, loaded at run time ([`libcrypto`]): the code `openssl
//!   speed` and OpenVPN time, so the lab can be checked against them library for library.
//! * `soft` → aws-lc-rs in a process started with `OPENSSL_ia32cap` masking AES-NI and
//!   PCLMULQDQ. AWS-LC reads that variable once, when it initialises, so it must be in the
//!   environment before the process starts: see [`soft`] for the re-exec helpers.
//!   RustCrypto's `aes` can only switch to software AES at compile time, which is why soft
//!   AES is aws-lc-rs.
//!
//! Layout, bottom up: `primitives` (sizes, names, errors, the traits), `interleave` (CBC
//! batches), the backends
//! `rustcrypto`, `awslc` and [`libcrypto`], [`soft`] (the mask), `implementation` (a `--crypto` choice
//! resolved to a backend), [`kat`] (the known-answer tests run on an implementation).

pub use model::{CryptoChoice, KeyBits};

mod awslc;
mod implementation;
mod interleave;
pub mod kat;
pub mod libcrypto;
mod primitives;
mod rustcrypto;
pub mod soft;

pub use implementation::{Implementation, ImplementationInfo};
pub use primitives::{
    Aead, AeadAlgorithm, AesCbc, CbcMessage, CipherStream, CryptoError, HmacSha256, Library, SelfTestError,
    StreamCipher, AES_BLOCK_LEN, HMAC_SHA256_LEN, MIN_HMAC_TAG_LEN, NONCE_LEN, TAG_LEN,
};

/// Runs every known-answer test ([`kat`]) on `implementation`. Nothing should be timed or
/// trusted with a key until this passed.
///
/// The tests run in a thread of their own, so that the register state their code leaves
/// dies with it: OpenSSL 3.0's AVX-512 ChaCha20-Poly1305 leaves the upper vector registers
/// in use, and a thread that ran it (or was started from one that had) then decrypts
/// AES-CBC with AES-NI a fifth slower. The threads that time or tunnel start clean.
pub fn self_test(implementation: &Implementation) -> Result<(), SelfTestError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| kat::run_all(implementation))
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
