//! One timed operation per suite and direction: what a data path does to one packet.
//!
//! CBC lengths that are not a whole number of blocks (1400) are rounded up to the next block
//! (1408), as a tunnel pads; the payload size, not the padded size, is what is counted.
//! Block-aligned sizes are not padded further, so the CBC rows compare with
//! `openssl speed -evp`, which does not pad either.

use std::hint::black_box;

use crypto::{CbcMessage, CryptoError, Implementation, StreamCipher, AES_BLOCK_LEN, NONCE_LEN};

use crate::af_alg::AfAlgError;
use crate::suite::{CryptoOp, SpeedSuite};

/// Associated data per AEAD packet: as much as ESP's SPI + sequence number.
pub const AEAD_AAD_LEN: usize = 8;

/// Why a timed operation could not be built or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error(transparent)]
    Kernel(#[from] AfAlgError),
    /// [`crate::Mode::Stream`] asked of an operation that starts anew per packet.
    #[error("no stream form: {0}")]
    NoStream(&'static str),
    /// SIGINT or SIGTERM came while the cell was timed ([`crate::stop`]).
    #[error("interrupted")]
    Interrupted,
}

/// A prepared operation on one packet-sized buffer, owned by one thread.
pub struct Op {
    run: Box<dyn FnMut() -> Result<(), OpError> + Send>,
    /// Payload bytes one call processes (the block size asked for).
    pub payload_bytes: usize,
}

impl Op {
    pub fn new(run: Box<dyn FnMut() -> Result<(), OpError> + Send>, payload_bytes: usize) -> Op {
        Op { run, payload_bytes }
    }

    #[inline]
    pub fn run(&mut self) -> Result<(), OpError> {
        (self.run)()
    }
}

pub(crate) fn round_up_to_block(len: usize) -> usize {
    len.div_ceil(AES_BLOCK_LEN) * AES_BLOCK_LEN
}

/// Fixed, non-secret key bytes: a benchmark key.
pub(crate) fn bench_key(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(0x5a))
        .collect()
}

pub(crate) fn counter_iv(counter: u64) -> [u8; AES_BLOCK_LEN] {
    let mut iv = [0x42u8; AES_BLOCK_LEN];
    iv[..8].copy_from_slice(&counter.to_be_bytes());
    iv
}

/// Builds the operation for `suite`/`direction` on `block_bytes`-byte packets. `decrypt`
/// of CBC+HMAC and of the AEADs is what a receiving end does (verify, then decrypt): the
/// speed table times them one way only ([`SpeedSuite::crypto_ops`]), a tunnel's ceiling
/// both ways. CBC `mac` is decrypt; HMAC is the same MAC either way.
pub fn build(
    imp: &Implementation,
    suite: SpeedSuite,
    direction: CryptoOp,
    block_bytes: usize,
) -> Result<Op, CryptoError> {
    let mut counter = 0u64;
    let run: Box<dyn FnMut() -> Result<(), OpError> + Send> = match (suite, direction) {
        (SpeedSuite::AesCbc(bits), CryptoOp::Encrypt) => {
            let cbc = imp.aes_cbc(&bench_key(bits.bytes()))?;
            let mut buf = vec![0u8; round_up_to_block(block_bytes)];
            Box::new(move || {
                counter += 1;
                cbc.encrypt(&counter_iv(counter), &mut buf)?;
                black_box(&buf);
                Ok(())
            })
        }
        (SpeedSuite::AesCbc(bits), CryptoOp::Decrypt | CryptoOp::Mac) => {
            let cbc = imp.aes_cbc(&bench_key(bits.bytes()))?;
            let mut buf = vec![0u8; round_up_to_block(block_bytes)];
            Box::new(move || {
                counter += 1;
                cbc.decrypt(&counter_iv(counter), &mut buf)?;
                black_box(&buf);
                Ok(())
            })
        }
        (SpeedSuite::HmacSha256, _) => {
            let mac = imp.hmac_sha256(&bench_key(32))?;
            let buf = vec![0x33u8; block_bytes];
            Box::new(move || {
                black_box(mac.mac(&[black_box(&buf)]));
                Ok(())
            })
        }
        (SpeedSuite::AesCbcHmacSha256(bits), CryptoOp::Decrypt) => {
            // The receiving end: HMAC over IV || ciphertext (a verify's work; the 16-byte
            // comparison is left out), then CBC decrypt in place.
            let cbc = imp.aes_cbc(&bench_key(bits.bytes()))?;
            let mac = imp.hmac_sha256(&bench_key(32))?;
            let mut buf = vec![0u8; round_up_to_block(block_bytes)];
            Box::new(move || {
                counter += 1;
                let iv = counter_iv(counter);
                black_box(mac.mac(&[&iv, &buf]));
                cbc.decrypt(&iv, &mut buf)?;
                black_box(&buf);
                Ok(())
            })
        }
        (SpeedSuite::AesCbcHmacSha256(bits), _) => {
            let cbc = imp.aes_cbc(&bench_key(bits.bytes()))?;
            let mac = imp.hmac_sha256(&bench_key(32))?;
            let mut buf = vec![0u8; round_up_to_block(block_bytes)];
            Box::new(move || {
                counter += 1;
                let iv = counter_iv(counter);
                cbc.encrypt(&iv, &mut buf)?;
                black_box(mac.mac(&[&iv, &buf]));
                Ok(())
            })
        }
        (SpeedSuite::Aead(alg), CryptoOp::Decrypt) => {
            // Opening in place needs a valid tag every time, without copying the packet
            // back. Both AEADs XOR a keystream, so under one nonce sealing twice gives back
            // the plaintext P with the tag of "ciphertext" P: opening P (tag_p) yields the
            // ciphertext C, opening C (tag_c) yields P again, and so on, each a full open.
            let aead = imp.aead(alg, &bench_key(alg.key_len()))?;
            let mut buf = vec![0x5cu8; block_bytes];
            let aad = [0x17u8; AEAD_AAD_LEN];
            let mut nonce = [0u8; NONCE_LEN];
            nonce[NONCE_LEN - 1] = 1;
            let tag_c = aead.seal(&nonce, &aad, &mut buf)?;
            let tag_p = aead.seal(&nonce, &aad, &mut buf)?;
            let mut holds_c = false;
            Box::new(move || {
                let tag = if holds_c { &tag_c } else { &tag_p };
                aead.open(&nonce, &aad, &mut buf, tag)?;
                holds_c = !holds_c;
                black_box(&buf);
                Ok(())
            })
        }
        (SpeedSuite::Aead(alg), _) => {
            let aead = imp.aead(alg, &bench_key(alg.key_len()))?;
            let mut buf = vec![0u8; block_bytes];
            let aad = [0x17u8; AEAD_AAD_LEN];
            Box::new(move || {
                counter += 1;
                let mut nonce = [0u8; NONCE_LEN];
                nonce[4..].copy_from_slice(&counter.to_be_bytes());
                black_box(aead.seal(&nonce, &aad, &mut buf)?);
                Ok(())
            })
        }
    };
    Ok(Op {
        run,
        payload_bytes: block_bytes,
    })
}

/// The stream-mode operation ([`crate::Mode::Stream`]): one cipher context set up once (key,
/// IV or nonce), then each call one update of `block_bytes` that continues it, as `openssl
/// speed -evp` loops `EVP_EncryptUpdate` (CBC sizes that are not whole blocks are padded as in
/// [`build`]). HMAC is [`build`]'s whole MAC per block, which is what `openssl speed -hmac`
/// times too. Encrypt-then-MAC and the AEADs' receiving side start a new MAC per packet:
/// they have no stream form.
pub fn build_stream(
    imp: &Implementation,
    suite: SpeedSuite,
    direction: CryptoOp,
    block_bytes: usize,
) -> Result<Op, OpError> {
    let (kind, key, iv) = match (suite, direction) {
        (SpeedSuite::HmacSha256, _) => return Ok(build(imp, suite, direction, block_bytes)?),
        (SpeedSuite::AesCbc(bits), CryptoOp::Encrypt) => (
            StreamCipher::AesCbcEncrypt,
            bench_key(bits.bytes()),
            counter_iv(0).to_vec(),
        ),
        (SpeedSuite::AesCbc(bits), _) => (
            StreamCipher::AesCbcDecrypt,
            bench_key(bits.bytes()),
            counter_iv(0).to_vec(),
        ),
        (SpeedSuite::Aead(alg), CryptoOp::Encrypt) => (
            StreamCipher::Aead(alg),
            bench_key(alg.key_len()),
            vec![1u8; NONCE_LEN],
        ),
        _ => {
            return Err(OpError::NoStream(
                "encrypt-then-MAC and an AEAD's open compute a new MAC per packet",
            ))
        }
    };
    let mut stream = imp.cipher_stream(kind, &key, &iv)?;
    let len = match kind {
        StreamCipher::Aead(_) => block_bytes,
        _ => round_up_to_block(block_bytes),
    };
    let mut buf = vec![0u8; len];
    Ok(Op::new(
        Box::new(move || {
            for _ in 0..STREAM_UPDATES_PER_CALL {
                stream.update(&mut buf)?;
            }
            black_box(&buf);
            Ok(())
        }),
        block_bytes * STREAM_UPDATES_PER_CALL,
    ))
}

/// Updates per timed call in stream mode: each is its own library call, as openssl makes
/// them, but the timing loop's own step (a call through the operation and its result) is
/// paid once per 16, not once per update, where at 16 B it was a tenth of the time.
const STREAM_UPDATES_PER_CALL: usize = 16;

/// [`build`] for a batch of `batch` packets per call, as a tunnel's send path encrypts: CBC
/// encryption goes through [`crypto::AesCbc::encrypt_batch`], the packets side by side (then
/// each one's MAC, for CBC+HMAC). Everything else is per packet whatever the batch, so it is
/// [`build`]'s operation.
pub fn build_batch(
    imp: &Implementation,
    suite: SpeedSuite,
    direction: CryptoOp,
    block_bytes: usize,
    batch: usize,
) -> Result<Op, CryptoError> {
    let (bits, hmac) = match (suite, direction) {
        (SpeedSuite::AesCbc(bits), CryptoOp::Encrypt) if batch > 1 => (bits, false),
        (SpeedSuite::AesCbcHmacSha256(bits), CryptoOp::Encrypt) if batch > 1 => (bits, true),
        _ => return build(imp, suite, direction, block_bytes),
    };
    let cbc = imp.aes_cbc(&bench_key(bits.bytes()))?;
    let mac = if hmac {
        Some(imp.hmac_sha256(&bench_key(32))?)
    } else {
        None
    };
    let mut bufs = vec![vec![0u8; round_up_to_block(block_bytes)]; batch];
    let mut counter = 0u64;
    Ok(Op {
        run: Box::new(move || {
            let mut messages: Vec<CbcMessage> = bufs
                .iter_mut()
                .map(|buf| {
                    counter += 1;
                    CbcMessage {
                        iv: counter_iv(counter),
                        buf,
                    }
                })
                .collect();
            cbc.encrypt_batch(&mut messages)?;
            if let Some(mac) = &mac {
                for m in &messages {
                    black_box(mac.mac(&[&m.iv, m.buf]));
                }
            }
            black_box(&messages);
            Ok(())
        }),
        payload_bytes: block_bytes * batch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crypto::CryptoChoice;

    #[test]
    fn every_suite_and_direction_builds_and_runs_at_every_size() {
        let imp = Implementation::new(CryptoChoice::Rustcrypto).unwrap();
        for suite in SpeedSuite::all() {
            for &dir in suite.crypto_ops() {
                for size in crate::BLOCK_SIZES {
                    let mut op = build(&imp, suite, dir, size).unwrap();
                    op.run().unwrap();
                    op.run().unwrap();
                    assert_eq!(op.payload_bytes, size);
                }
            }
        }
    }

    #[test]
    fn the_receiving_directions_open_valid_packets_every_time() {
        // An open that failed its tag check would return an error here, not a speed.
        for choice in [CryptoChoice::Rustcrypto, CryptoChoice::Auto] {
            let imp = Implementation::new(choice).unwrap();
            for suite in [
                "aes-256-gcm",
                "aes-128-gcm",
                "chacha20-poly1305",
                "aes-256-cbc-hmac-sha256",
            ] {
                let suite: SpeedSuite = suite.parse().unwrap();
                for size in [64, 1407, 1420] {
                    let mut op = build(&imp, suite, CryptoOp::Decrypt, size).unwrap();
                    for _ in 0..5 {
                        op.run().unwrap();
                    }
                }
            }
        }
    }

    /// Only CBC encryption takes its batch's packets together; a call counts all of them.
    #[test]
    fn a_batch_counts_every_packet_it_encrypts() {
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        for suite in SpeedSuite::all() {
            for &dir in suite.crypto_ops() {
                let mut op = build_batch(&imp, suite, dir, 1407, 43).unwrap();
                op.run().unwrap();
                let cbc_encrypt = dir == CryptoOp::Encrypt
                    && matches!(suite, SpeedSuite::AesCbc(_) | SpeedSuite::AesCbcHmacSha256(_));
                let packets = if cbc_encrypt { 43 } else { 1 };
                assert_eq!(op.payload_bytes, 1407 * packets, "{suite} {dir}");
            }
        }
    }

    /// Stream mode builds what openssl speed -evp can time, for every size, and refuses only
    /// what starts anew per packet (and RustCrypto's AEADs, which have no stream API).
    #[test]
    fn stream_ops_run_or_say_why_they_cannot() {
        for choice in [CryptoChoice::Auto, CryptoChoice::Rustcrypto] {
            let imp = Implementation::new(choice).unwrap();
            for suite in SpeedSuite::all() {
                for &dir in suite.crypto_ops() {
                    for size in crate::BLOCK_SIZES {
                        match build_stream(&imp, suite, dir, size) {
                            Ok(mut op) => {
                                op.run().unwrap();
                                op.run().unwrap();
                                // HMAC is the packet op, a whole MAC per call.
                                let updates = match suite {
                                    SpeedSuite::HmacSha256 => 1,
                                    _ => STREAM_UPDATES_PER_CALL,
                                };
                                assert_eq!(op.payload_bytes, size * updates);
                            }
                            Err(OpError::NoStream(_)) => {
                                assert!(matches!(suite, SpeedSuite::AesCbcHmacSha256(_)), "{suite}")
                            }
                            Err(OpError::Crypto(CryptoError::NoStream { .. })) => assert!(
                                choice == CryptoChoice::Rustcrypto && matches!(suite, SpeedSuite::Aead(_)),
                                "{choice} {suite}"
                            ),
                            Err(e) => panic!("{choice} {suite} {dir} {size}: {e}"),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn cbc_pads_only_unaligned_sizes() {
        assert_eq!(round_up_to_block(1400), 1408);
        assert_eq!(round_up_to_block(16), 16);
        assert_eq!(round_up_to_block(8192), 8192);
    }
}
