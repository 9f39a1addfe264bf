//! The kernel's crypto API as an implementation, reached through AF_ALG ([`crate::af_alg`])
//! the way a user program reaches it, and named by the driver /proc/crypto says serves it
//! (`cbc-aes-aesni`, `cbc(aes-generic)`, …).
//!
//! Every algorithm passes known-answer tests through the same sockets before it is timed;
//! one that fails is reported and never produces a number. Where the kernel has no AF_ALG
//! (this lab's host kernel), [`probe`] says why and the kernel rows are skipped.
//!
//! What a kernel row costs is the algorithm *plus* AF_ALG's two system calls and copies per
//! packet (sendmsg, read); the in-kernel ESP path pays neither. So small blocks understate
//! what the kernel's drivers can do for ESP; large blocks approach it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crypto::{kat, AeadAlgorithm, CryptoChoice, Implementation, AES_BLOCK_LEN, NONCE_LEN, TAG_LEN};
use model::env::{parse_proc_crypto, preferred_drivers};

use crate::af_alg::{self, AfAlgError, AlgType, CipherOp, Session, Transform};
use crate::ops::{self, Op, OpError, AEAD_AAD_LEN};
use crate::suite::{CryptoOp, SpeedSuite};

/// HMAC-SHA256 tag length of the CBC+HMAC suite in the kernel: 128 bits, as ESP truncates
/// it (RFC 4868). Truncation copies fewer bytes; the hash computed is the same.
pub const AUTHENC_TAG_LEN: usize = 16;
/// Modules a stock kernel needs for every kernel row (loaded in the lab's VM).
pub const MODULES: &str = "af_alg algif_skcipher algif_hash algif_aead aesni_intel sha256_ssse3 authenc gcm chacha20poly1305 chacha_x86_64 poly1305_x86_64";

/// How a suite is reached in the kernel crypto API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelAlgorithm {
    pub kind: AlgType,
    /// The crypto API name bound (`salg_name`); the kernel picks the driver.
    pub name: &'static str,
}

impl KernelAlgorithm {
    pub fn of(suite: SpeedSuite) -> KernelAlgorithm {
        let (kind, name) = match suite {
            SpeedSuite::AesCbc(_) => (AlgType::Skcipher, "cbc(aes)"),
            SpeedSuite::HmacSha256 => (AlgType::Hash, "hmac(sha256)"),
            SpeedSuite::AesCbcHmacSha256(_) => (AlgType::Aead, "authenc(hmac(sha256),cbc(aes))"),
            SpeedSuite::Aead(AeadAlgorithm::Aes128Gcm | AeadAlgorithm::Aes256Gcm) => {
                (AlgType::Aead, "gcm(aes)")
            }
            SpeedSuite::Aead(AeadAlgorithm::ChaCha20Poly1305) => {
                (AlgType::Aead, "rfc7539(chacha20,poly1305)")
            }
        };
        KernelAlgorithm { kind, name }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error(transparent)]
    AfAlg(#[from] AfAlgError),
    #[error("{} ({}) fails {}: {} is {}, expected {}", .0.algorithm, .0.driver, .0.vector, .0.what, .0.got, .0.expected)]
    KnownAnswer(Box<Mismatch>),
    #[error("{algorithm} ({driver}) accepted {vector} with an altered tag")]
    TamperAccepted {
        algorithm: &'static str,
        driver: String,
        vector: String,
    },
    #[error("{algorithm} ({driver}) {vector}: {source}")]
    Operation {
        algorithm: &'static str,
        driver: String,
        vector: String,
        #[source]
        source: AfAlgError,
    },
    #[error("cannot compute the reference CBC+HMAC answer in userspace: {0}")]
    Reference(String),
}

/// A known-answer test's wrong result, in hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub algorithm: &'static str,
    pub driver: String,
    pub vector: String,
    pub what: &'static str,
    pub got: String,
    pub expected: String,
}

/// The driver /proc/crypto names for `algorithm`: the highest priority that passed its
/// self-test, which is the one the kernel instantiates. Read after binding, when the
/// algorithm (and any template instance such as `hmac(sha256-ni)`) exists.
pub fn driver(algorithm: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/crypto").ok()?;
    preferred_drivers(&parse_proc_crypto(&text), &[algorithm]).remove(algorithm)
}

/// A keyed kernel algorithm for one suite, with an operation socket.
struct Keyed {
    /// Kept open: the session's key lives in it.
    _transform: Transform,
    session: Session,
}

fn keyed(alg: KernelAlgorithm, key: &[u8], authsize: Option<usize>) -> Result<Keyed, AfAlgError> {
    let transform = Transform::new(alg.kind, alg.name)?;
    transform.set_key(key)?;
    if let Some(len) = authsize {
        transform.set_aead_authsize(len)?;
    }
    let session = transform.session()?;
    Ok(Keyed {
        _transform: transform,
        session,
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A kernel suite that passed its known-answer tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub suite: SpeedSuite,
    pub algorithm: KernelAlgorithm,
    /// The driver that served it (from /proc/crypto), or `unknown`.
    pub driver: String,
}

/// Known-answer tests of `suite` through AF_ALG; each vector runs twice on one operation
/// socket, because the timing loop reuses its socket.
pub fn self_test(suite: SpeedSuite) -> Result<Verified, KernelError> {
    let alg = KernelAlgorithm::of(suite);
    // Bind once first so that the instance exists when /proc/crypto is read.
    let probe = Transform::new(alg.kind, alg.name)?;
    let driver = driver(alg.name).unwrap_or_else(|| "unknown (not in /proc/crypto)".into());
    drop(probe);
    let t = Tester {
        algorithm: alg.name,
        driver: &driver,
    };
    match suite {
        SpeedSuite::AesCbc(bits) => {
            for v in kat::CBC.iter().filter(|v| kat::hex(v.key).len() == bits.bytes()) {
                let k = keyed(alg, &kat::hex(v.key), None)?;
                let (iv, pt, ct) = (kat::hex(v.iv), kat::hex(v.plaintext), kat::hex(v.ciphertext));
                let mut out = vec![0u8; pt.len()];
                for _ in 0..2 {
                    t.op(v.name, k.session.skcipher(CipherOp::Encrypt, &iv, &pt, &mut out))?;
                    t.same(v.name, "ciphertext", &out, &ct)?;
                    t.op(v.name, k.session.skcipher(CipherOp::Decrypt, &iv, &ct, &mut out))?;
                    t.same(v.name, "plaintext", &out, &pt)?;
                }
            }
        }
        SpeedSuite::HmacSha256 => {
            for v in &kat::HMAC_SHA256 {
                let k = keyed(alg, &kat::hex(v.key), None)?;
                let (data, mac) = (kat::hex(v.data), kat::hex(v.mac));
                for _ in 0..2 {
                    let mut out = vec![0u8; mac.len()];
                    t.op(v.name, k.session.hash(&[&data], &mut out))?;
                    t.same(v.name, "MAC", &out, &mac)?;
                }
            }
        }
        SpeedSuite::AesCbcHmacSha256(bits) => {
            let v = kat::CBC
                .iter()
                .find(|v| kat::hex(v.key).len() == bits.bytes())
                .expect("a CBC vector for every key size");
            let hv = &kat::HMAC_SHA256[1];
            let (key, auth_key) = (kat::hex(v.key), kat::hex(hv.key));
            let (iv, pt, ct) = (kat::hex(v.iv), kat::hex(v.plaintext), kat::hex(v.ciphertext));
            // The expected tag: HMAC-SHA256 over IV || ciphertext, as ESP and the lab's
            // tunnel compute it, from the userspace implementation once it passed its own
            // known-answer tests.
            let reference = Implementation::new(CryptoChoice::Rustcrypto)
                .map_err(|e| KernelError::Reference(e.to_string()))?;
            crypto::self_test(&reference).map_err(|e| KernelError::Reference(e.to_string()))?;
            let tag = reference
                .hmac_sha256(&auth_key)
                .map_err(|e| KernelError::Reference(e.to_string()))?
                .mac(&[&iv, &ct]);
            let tag = &tag[..AUTHENC_TAG_LEN];
            let name = format!(
                "{} + HMAC-SHA256 (key: {}) over IV || ciphertext",
                v.name, hv.name
            );
            let k = keyed(alg, &af_alg::authenc_key(&auth_key, &key), Some(AUTHENC_TAG_LEN))?;
            let expected_sealed = [iv.as_slice(), &ct, tag].concat();
            for _ in 0..2 {
                let mut out = vec![0u8; iv.len() + pt.len() + AUTHENC_TAG_LEN];
                t.op(
                    &name,
                    k.session.aead(CipherOp::Encrypt, &iv, &iv, &[&pt], &mut out),
                )?;
                t.same(&name, "IV || ciphertext || tag", &out, &expected_sealed)?;
                t.open(&k.session, &name, &iv, &iv, &ct, tag, &pt)?;
            }
        }
        SpeedSuite::Aead(algorithm) => {
            for v in kat::AEAD.iter().filter(|v| v.algorithm == algorithm) {
                let k = keyed(alg, &kat::hex(v.key), Some(TAG_LEN))?;
                let (nonce, aad) = (kat::hex(v.nonce), kat::hex(v.aad));
                let (pt, ct, tag) = (kat::hex(v.plaintext), kat::hex(v.ciphertext), kat::hex(v.tag));
                let expected_sealed = [aad.as_slice(), &ct, &tag].concat();
                for _ in 0..2 {
                    let mut out = vec![0u8; aad.len() + pt.len() + TAG_LEN];
                    t.op(
                        v.name,
                        k.session.aead(CipherOp::Encrypt, &nonce, &aad, &[&pt], &mut out),
                    )?;
                    t.same(v.name, "AAD || ciphertext || tag", &out, &expected_sealed)?;
                    t.open(&k.session, v.name, &nonce, &aad, &ct, &tag, &pt)?;
                }
            }
        }
    }
    Ok(Verified {
        suite,
        algorithm: alg,
        driver,
    })
}

/// Compares results and names the failing vector.
struct Tester<'a> {
    algorithm: &'static str,
    driver: &'a str,
}

impl Tester<'_> {
    fn op(&self, vector: &str, r: Result<(), AfAlgError>) -> Result<(), KernelError> {
        r.map_err(|source| KernelError::Operation {
            algorithm: self.algorithm,
            driver: self.driver.to_string(),
            vector: vector.to_string(),
            source,
        })
    }

    fn same(&self, vector: &str, what: &'static str, got: &[u8], expected: &[u8]) -> Result<(), KernelError> {
        if got == expected {
            return Ok(());
        }
        Err(KernelError::KnownAnswer(Box::new(Mismatch {
            algorithm: self.algorithm,
            driver: self.driver.to_string(),
            vector: vector.to_string(),
            what,
            got: hex(got),
            expected: hex(expected),
        })))
    }

    /// Decrypts `ct || tag` and checks the plaintext; then the same with the tag's first
    /// byte altered, which must be refused (EBADMSG).
    #[allow(clippy::too_many_arguments)]
    fn open(
        &self,
        session: &Session,
        vector: &str,
        iv: &[u8],
        aad: &[u8],
        ct: &[u8],
        tag: &[u8],
        pt: &[u8],
    ) -> Result<(), KernelError> {
        let mut out = vec![0u8; aad.len() + ct.len()];
        self.op(
            vector,
            session.aead(CipherOp::Decrypt, iv, aad, &[ct, tag], &mut out),
        )?;
        self.same(vector, "AAD || plaintext", &out, &[aad, pt].concat())?;
        let mut bad = tag.to_vec();
        bad[0] ^= 1;
        match session.aead(CipherOp::Decrypt, iv, aad, &[ct, &bad], &mut out) {
            Err(e) if e.is_authentication_failure() => Ok(()),
            Err(source) => Err(KernelError::Operation {
                algorithm: self.algorithm,
                driver: self.driver.to_string(),
                vector: format!("{vector} (altered tag)"),
                source,
            }),
            Ok(()) => Err(KernelError::TamperAccepted {
                algorithm: self.algorithm,
                driver: self.driver.to_string(),
                vector: vector.to_string(),
            }),
        }
    }
}

/// The timed operation for a kernel suite: one request through AF_ALG per packet, on this
/// thread's own transform and operation socket, with the same keys, IVs, padding and AAD as
/// the userspace rows ([`crate::ops`]). `decrypt` of CBC+HMAC and the AEADs opens one
/// packet sealed beforehand (tag checked each time), as a receiving end does.
pub fn build(suite: SpeedSuite, direction: CryptoOp, block_bytes: usize) -> Result<Op, OpError> {
    let alg = KernelAlgorithm::of(suite);
    let mut counter = 0u64;
    let run: Box<dyn FnMut() -> Result<(), OpError> + Send> = match (suite, direction) {
        (SpeedSuite::AesCbc(bits), dir) => {
            let k = keyed(alg, &ops::bench_key(bits.bytes()), None)?;
            let op = if dir == CryptoOp::Encrypt {
                CipherOp::Encrypt
            } else {
                CipherOp::Decrypt
            };
            let input = vec![0u8; ops::round_up_to_block(block_bytes)];
            let mut out = input.clone();
            Box::new(move || {
                counter += 1;
                k.session
                    .skcipher(op, &ops::counter_iv(counter), &input, &mut out)?;
                black_box(&out);
                Ok(())
            })
        }
        (SpeedSuite::HmacSha256, _) => {
            let k = keyed(alg, &ops::bench_key(32), None)?;
            let input = vec![0x33u8; block_bytes];
            let mut mac = [0u8; crypto::HMAC_SHA256_LEN];
            Box::new(move || {
                k.session.hash(&[&input], &mut mac)?;
                black_box(&mac);
                Ok(())
            })
        }
        (SpeedSuite::AesCbcHmacSha256(bits), CryptoOp::Decrypt) => {
            // The receiving end: one packet sealed once, verified and decrypted each time.
            let key = af_alg::authenc_key(&ops::bench_key(32), &ops::bench_key(bits.bytes()));
            let k = keyed(alg, &key, Some(AUTHENC_TAG_LEN))?;
            let padded = ops::round_up_to_block(block_bytes);
            let iv = ops::counter_iv(1);
            let mut sealed = vec![0u8; AES_BLOCK_LEN + padded + AUTHENC_TAG_LEN];
            k.session
                .aead(CipherOp::Encrypt, &iv, &iv, &[&vec![0u8; padded]], &mut sealed)?;
            let mut out = vec![0u8; AES_BLOCK_LEN + padded];
            Box::new(move || {
                let (aad, text) = sealed.split_at(AES_BLOCK_LEN);
                k.session.aead(CipherOp::Decrypt, &iv, aad, &[text], &mut out)?;
                black_box(&out);
                Ok(())
            })
        }
        (SpeedSuite::Aead(algorithm), CryptoOp::Decrypt) => {
            let k = keyed(alg, &ops::bench_key(algorithm.key_len()), Some(TAG_LEN))?;
            let aad = [0x17u8; AEAD_AAD_LEN];
            let mut nonce = [0u8; NONCE_LEN];
            nonce[NONCE_LEN - 1] = 1;
            let mut sealed = vec![0u8; AEAD_AAD_LEN + block_bytes + TAG_LEN];
            k.session.aead(
                CipherOp::Encrypt,
                &nonce,
                &aad,
                &[&vec![0u8; block_bytes]],
                &mut sealed,
            )?;
            let mut out = vec![0u8; AEAD_AAD_LEN + block_bytes];
            Box::new(move || {
                let (aad, text) = sealed.split_at(AEAD_AAD_LEN);
                k.session
                    .aead(CipherOp::Decrypt, &nonce, aad, &[text], &mut out)?;
                black_box(&out);
                Ok(())
            })
        }
        (SpeedSuite::AesCbcHmacSha256(bits), _) => {
            let key = af_alg::authenc_key(&ops::bench_key(32), &ops::bench_key(bits.bytes()));
            let k = keyed(alg, &key, Some(AUTHENC_TAG_LEN))?;
            let padded = ops::round_up_to_block(block_bytes);
            let input = vec![0u8; padded];
            let mut out = vec![0u8; AES_BLOCK_LEN + padded + AUTHENC_TAG_LEN];
            Box::new(move || {
                counter += 1;
                let iv = ops::counter_iv(counter);
                // The IV is the associated data: HMAC over IV || ciphertext, as ESP.
                k.session.aead(CipherOp::Encrypt, &iv, &iv, &[&input], &mut out)?;
                black_box(&out);
                Ok(())
            })
        }
        (SpeedSuite::Aead(algorithm), _) => {
            let k = keyed(alg, &ops::bench_key(algorithm.key_len()), Some(TAG_LEN))?;
            let input = vec![0u8; block_bytes];
            let aad = [0x17u8; AEAD_AAD_LEN];
            let mut out = vec![0u8; AEAD_AAD_LEN + block_bytes + TAG_LEN];
            Box::new(move || {
                counter += 1;
                let mut nonce = [0u8; NONCE_LEN];
                nonce[4..].copy_from_slice(&counter.to_be_bytes());
                k.session
                    .aead(CipherOp::Encrypt, &nonce, &aad, &[&input], &mut out)?;
                black_box(&out);
                Ok(())
            })
        }
    };
    Ok(Op::new(run, block_bytes))
}

/// The crypto API's null algorithm reached the way `kind` is: the same AF_ALG path (its
/// copies, page walks and system calls) with no cipher or hash work, so what a request
/// costs through it is AF_ALG's share of a real request.
pub fn null_algorithm(kind: AlgType) -> KernelAlgorithm {
    let name = match kind {
        AlgType::Skcipher => "ecb(cipher_null)",
        AlgType::Hash => "digest_null",
        AlgType::Aead => "authenc(digest_null,ecb(cipher_null))",
    };
    KernelAlgorithm { kind, name }
}

/// One request of `block_bytes` through `suite`'s null algorithm ([`null_algorithm`]), as
/// [`build`] makes a real one: the same associated data, the same direction.
pub fn build_null(suite: SpeedSuite, direction: CryptoOp, block_bytes: usize) -> Result<Op, OpError> {
    let alg = null_algorithm(KernelAlgorithm::of(suite).kind);
    let op = match direction {
        CryptoOp::Decrypt => CipherOp::Decrypt,
        _ => CipherOp::Encrypt,
    };
    let run: Box<dyn FnMut() -> Result<(), OpError> + Send> = match alg.kind {
        AlgType::Skcipher => {
            let k = keyed(alg, &[], None)?;
            let input = vec![0u8; block_bytes];
            let mut out = input.clone();
            Box::new(move || {
                k.session.skcipher(op, &[], &input, &mut out)?;
                black_box(&out);
                Ok(())
            })
        }
        AlgType::Hash => {
            let k = keyed(alg, &[], None)?;
            let input = vec![0u8; block_bytes];
            Box::new(move || {
                k.session.hash(&[&input], &mut [])?;
                black_box(&input);
                Ok(())
            })
        }
        AlgType::Aead => {
            // No tag (digest_null's is empty), the real suite's associated data.
            let k = keyed(alg, &af_alg::authenc_key(&[], &[]), Some(0))?;
            let aad = vec![0x17u8; aead_aad_len(suite)];
            let input = vec![0u8; block_bytes];
            let mut out = vec![0u8; aad.len() + block_bytes];
            Box::new(move || {
                k.session.aead(op, &[], &aad, &[&input], &mut out)?;
                black_box(&out);
                Ok(())
            })
        }
    };
    Ok(Op::new(run, block_bytes))
}

/// The associated data a suite's AEAD requests carry: CBC+HMAC's IV, else the lab's AAD.
fn aead_aad_len(suite: SpeedSuite) -> usize {
    match suite {
        SpeedSuite::AesCbcHmacSha256(_) => AES_BLOCK_LEN,
        _ => AEAD_AAD_LEN,
    }
}

/// The request sizes whose difference times what each further byte costs: large enough
/// that AF_ALG's system calls are a small part of a request, within what one AF_ALG
/// request may carry.
pub const PER_BYTE_SIZES: [usize; 2] = [16 * 1024, 64 * 1024];

/// An upper bound on the rate of a kernel algorithm's own work, from AF_ALG: the time each
/// further byte costs (the slope between two request sizes, so every per-request cost, the
/// system calls above all, drops out), less the same slope through the null algorithm
/// (AF_ALG's copies and page walks, which the real request pays too and ESP does not).
/// What is left is at most the algorithm's per-byte work, and a packet of any size costs
/// that per byte and more besides (its own per-request work): no packet goes faster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerByte {
    /// The bound, 10^6 bytes per second.
    pub mb_per_s: f64,
    /// Nanoseconds each further byte costs through the algorithm and the null one.
    pub algorithm_ns: f64,
    pub null_ns: f64,
}

/// [`PerByte`] of `suite` one way, the two request sizes in turn for `window`. Each size's
/// figure is its fastest single request: whatever else the machine does only ever adds to
/// a request's time, so the fastest is the one least disturbed (a repeat's average, on a
/// loaded 2-core host, once made the slope 2 ns per byte where it is 12). Err where an
/// operation failed, or where the slopes leave no positive per-byte cost to bound.
pub fn per_byte(suite: SpeedSuite, direction: CryptoOp, window: Duration) -> Result<PerByte, String> {
    let [small, large] = PER_BYTE_SIZES;
    // The two sizes in turn through one window, so both see the same machine: a window of
    // one size alone can be slowed throughout (once its fastest 16 KiB request was slower
    // than the fastest 64 KiB one).
    let slope = |build: fn(SpeedSuite, CryptoOp, usize) -> Result<Op, OpError>| -> Result<f64, String> {
        let failed = |e: OpError| format!("{small}- and {large}-byte requests: {e}");
        let mut ops = [build(suite, direction, small), build(suite, direction, large)];
        let mut fastest = [f64::INFINITY; 2];
        let end = Instant::now() + window;
        let mut round = 0;
        while round < 4 || Instant::now() < end {
            for (op, best) in ops.iter_mut().zip(&mut fastest) {
                let op = op.as_mut().map_err(|e| failed(e.clone()))?;
                let t0 = Instant::now();
                op.run().map_err(failed)?;
                // The first rounds warm buffers and the instance, untimed.
                if round >= 3 {
                    *best = best.min(t0.elapsed().as_secs_f64() * 1e9);
                }
            }
            round += 1;
        }
        Ok((fastest[1] - fastest[0]) / (large - small) as f64)
    };
    let algorithm_ns = slope(build)?;
    let null_ns = slope(build_null)
        .map_err(|e| format!("{}: {e}", null_algorithm(KernelAlgorithm::of(suite).kind).name))?
        .max(0.0);
    let own = algorithm_ns - null_ns;
    if !(own.is_finite() && own > 0.0) {
        return Err(format!(
            "{algorithm_ns:.2} ns per further byte through the algorithm, {null_ns:.2} through the null one: \
             the timing left no per-byte cost to bound"
        ));
    }
    Ok(PerByte {
        mb_per_s: 1e3 / own,
        algorithm_ns,
        null_ns,
    })
}

/// Why there are no kernel rows here, with the driver the kernel would use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelProbe {
    /// `cbc(aes)` driver from /proc/crypto (`cbc-aes-aesni`, `cbc(aes-generic)`, …), if the
    /// kernel has instantiated it.
    pub cbc_aes_driver: Option<String>,
    pub af_alg: Result<(), String>,
}

impl KernelProbe {
    /// The line printed (and recorded) when the kernel rows are skipped.
    pub fn skip_reason(&self) -> String {
        let driver = match &self.cbc_aes_driver {
            Some(d) => format!("/proc/crypto: cbc(aes) is served by {d}"),
            None => "/proc/crypto lists no cbc(aes) driver".into(),
        };
        match &self.af_alg {
            Err(why) => format!("{why}; {driver}; `--vm` runs the kernel rows in a stock kernel"),
            Ok(()) => format!("AF_ALG is available; {driver}"),
        }
    }
}

pub fn probe() -> KernelProbe {
    KernelProbe {
        cbc_aes_driver: driver("cbc(aes)"),
        af_alg: af_alg::available().map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn af_alg_or_skip() -> bool {
        match af_alg::available() {
            Ok(()) => true,
            Err(e) => {
                eprintln!("skipped: {e}");
                false
            }
        }
    }

    #[test]
    fn skip_reason_names_the_cause_and_driver() {
        let p = KernelProbe {
            cbc_aes_driver: Some("cbc-aes-aesni".into()),
            af_alg: Err(AfAlgError::Socket(nix::errno::Errno::EAFNOSUPPORT).to_string()),
        };
        let r = p.skip_reason();
        assert!(
            r.contains("no AF_ALG") && r.contains("cbc-aes-aesni") && r.contains("--vm"),
            "{r}"
        );
    }

    #[test]
    fn probe_on_this_kernel_gives_a_reason() {
        let r = probe().skip_reason();
        eprintln!("kernel probe: {r}");
        assert!(r.contains("AF_ALG"), "{r}");
    }

    #[test]
    fn every_suite_maps_to_a_kernel_algorithm() {
        for suite in SpeedSuite::all() {
            let a = KernelAlgorithm::of(suite);
            assert!(a.name.contains('('), "{suite}: {a:?}");
        }
        assert_eq!(
            KernelAlgorithm::of("aes-256-cbc-hmac-sha256".parse().unwrap()).name,
            "authenc(hmac(sha256),cbc(aes))"
        );
    }

    /// Known-answer tests of every kernel algorithm through AF_ALG (in the lab's VM; on a
    /// kernel without AF_ALG this says so and checks nothing).
    #[test]
    fn kernel_algorithms_pass_known_answer_tests() {
        if !af_alg_or_skip() {
            return;
        }
        for suite in SpeedSuite::all() {
            let v = self_test(suite).unwrap_or_else(|e| panic!("{suite}: {e}"));
            eprintln!("{suite}: {} served by {}", v.algorithm.name, v.driver);
            assert!(!v.driver.is_empty());
        }
    }

    #[test]
    fn kernel_ops_run_at_every_size() {
        if !af_alg_or_skip() {
            return;
        }
        for suite in SpeedSuite::all() {
            for &dir in suite.crypto_ops() {
                for size in crate::BLOCK_SIZES {
                    let mut op = build(suite, dir, size).unwrap_or_else(|e| panic!("{suite}: {e}"));
                    op.run().unwrap();
                    op.run().unwrap();
                }
            }
        }
    }

    /// The per-byte bound's requests, real and null, run for every suite both ways at
    /// both sizes (where this kernel has AF_ALG: the lab's VM and user-mode Linux).
    #[test]
    fn per_byte_requests_run_through_the_algorithm_and_the_null_one() {
        if !af_alg_or_skip() {
            return;
        }
        for suite in SpeedSuite::all() {
            for &dir in suite.crypto_ops() {
                for size in PER_BYTE_SIZES {
                    for make in [build, build_null] {
                        let mut op =
                            make(suite, dir, size).unwrap_or_else(|e| panic!("{suite} {dir} {size}: {e}"));
                        assert_eq!(op.payload_bytes, size);
                        op.run().unwrap();
                        op.run().unwrap();
                    }
                }
            }
        }
        assert_eq!(
            null_algorithm(AlgType::Aead).name,
            "authenc(digest_null,ecb(cipher_null))"
        );
    }

    #[test]
    fn a_wrong_key_is_caught_by_the_known_answer_check() {
        if !af_alg_or_skip() {
            return;
        }
        // The kernel must not agree with SP 800-38A under a different key: proves `same`
        // compares what the kernel computed.
        let alg = KernelAlgorithm::of(SpeedSuite::AesCbc(model::KeyBits::Aes128));
        let v = &kat::CBC[0];
        let k = keyed(alg, &[0u8; 16], None).unwrap();
        let pt = kat::hex(v.plaintext);
        let mut out = vec![0u8; pt.len()];
        k.session
            .skcipher(CipherOp::Encrypt, &kat::hex(v.iv), &pt, &mut out)
            .unwrap();
        let t = Tester {
            algorithm: alg.name,
            driver: "test",
        };
        let e = t
            .same(v.name, "ciphertext", &out, &kat::hex(v.ciphertext))
            .unwrap_err();
        assert!(matches!(e, KernelError::KnownAnswer(_)), "{e}");
        assert!(e.to_string().contains("fails SP 800-38A"), "{e}");
    }
}
