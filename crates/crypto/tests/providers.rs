//! Every provider against the standards' vectors, against each other, and against bad input.

use crypto::{
    kat, AeadAlgorithm, CryptoChoice, CryptoError, Implementation, Library, StreamCipher, AES_BLOCK_LEN,
};

/// Every choice that can run in this (unmasked) test process: OpenSSL's libcrypto where it
/// loads (a missing one is skipped with the reason, and under CI=true fails).
fn hardware_choices() -> Vec<Implementation> {
    let mut choices: Vec<Implementation> =
        [CryptoChoice::Auto, CryptoChoice::AwsLc, CryptoChoice::Rustcrypto]
            .into_iter()
            .map(|c| Implementation::new(c).expect("non-soft choices always resolve"))
            .collect();
    choices.extend(libcrypto());
    choices
}

fn libcrypto() -> Option<Implementation> {
    match crypto::libcrypto::load_error() {
        None => Some(Implementation::new(CryptoChoice::Libcrypto).expect("libcrypto loaded")),
        Some(why) => {
            testcap::skip("libcrypto rows", &why);
            None
        }
    }
}

#[test]
fn every_provider_passes_the_known_answer_tests() {
    for imp in hardware_choices() {
        crypto::self_test(&imp).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn auto_is_aws_lc_and_rustcrypto_is_rustcrypto() {
    assert_eq!(
        Implementation::new(CryptoChoice::Auto).unwrap().library(),
        Library::AwsLc
    );
    assert_eq!(
        Implementation::new(CryptoChoice::Rustcrypto).unwrap().library(),
        Library::RustCrypto
    );
}

#[test]
fn soft_is_refused_in_a_process_with_hardware_aes() {
    if crypto::soft::active() {
        eprintln!("skipped: this process already runs without hardware AES");
        return;
    }
    assert_eq!(
        Implementation::new(CryptoChoice::Soft),
        Err(CryptoError::SoftNotActive)
    );
}

/// Deterministic filler so failures reproduce.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn providers_agree_on_every_length_the_benchmark_and_tunnel_use() {
    let lc = Implementation::new(CryptoChoice::AwsLc).unwrap();
    let mut others = vec![Implementation::new(CryptoChoice::Rustcrypto).unwrap()];
    others.extend(libcrypto());
    for rc in &others {
        agree_with(rc, &lc);
    }
}

fn agree_with(rc: &Implementation, lc: &Implementation) {
    let iv = [7u8; 16];
    let nonce = [9u8; 12];
    for len in [16usize, 64, 256, 1024, 1392, 1400, 8192, 16384] {
        for key_len in [16, 24, 32] {
            let key = pattern(key_len, 1);
            let cbc_len = len - len % AES_BLOCK_LEN;
            let mut a = pattern(cbc_len, 3);
            let mut b = a.clone();
            rc.aes_cbc(&key).unwrap().encrypt(&iv, &mut a).unwrap();
            lc.aes_cbc(&key).unwrap().encrypt(&iv, &mut b).unwrap();
            assert_eq!(a, b, "{rc}: AES-CBC {key_len}-byte key, {cbc_len} bytes");
            rc.aes_cbc(&key).unwrap().decrypt(&iv, &mut a).unwrap();
            assert_eq!(a, pattern(cbc_len, 3));
        }
        let data = pattern(len, 5);
        let key = pattern(32, 2);
        assert_eq!(
            rc.hmac_sha256(&key).unwrap().mac(&[&data]),
            lc.hmac_sha256(&key).unwrap().mac(&[&data])
        );
        for alg in AeadAlgorithm::ALL {
            let key = pattern(alg.key_len(), 4);
            let mut a = pattern(len, 6);
            let mut b = a.clone();
            let ta = rc.aead(alg, &key).unwrap().seal(&nonce, b"hdr", &mut a).unwrap();
            let tb = lc.aead(alg, &key).unwrap().seal(&nonce, b"hdr", &mut b).unwrap();
            assert_eq!((a.clone(), ta), (b, tb), "{rc}: {alg} {len} bytes");
            // Opened by the other library: interoperable, not merely self-consistent.
            lc.aead(alg, &key)
                .unwrap()
                .open(&nonce, b"hdr", &mut a, &ta)
                .unwrap();
            assert_eq!(a, pattern(len, 6));
        }
    }
}

/// A stream fed block by block gives the bytes of one message: the same as encrypting (or
/// decrypting) the blocks joined, in one call of the per-message API, with the same IV or
/// nonce. So stream mode times the real cipher, its chain or counter going on between blocks.
#[test]
fn a_stream_fed_block_by_block_equals_one_message_of_the_blocks_joined() {
    let iv = [7u8; 16];
    let nonce = [9u8; 12];
    for imp in hardware_choices() {
        for block in [16usize, 64, 1408] {
            let message = pattern(block * 5, 3);
            let streamed = |kind: StreamCipher, key: &[u8], iv: &[u8], input: &[u8]| {
                let mut stream = imp.cipher_stream(kind, key, iv).unwrap();
                let mut out = input.to_vec();
                for chunk in out.chunks_mut(block) {
                    stream.update(chunk).unwrap();
                }
                out
            };
            for key_len in [16, 24, 32] {
                let key = pattern(key_len, 1);
                let cbc = imp.aes_cbc(&key).unwrap();
                let mut whole = message.clone();
                cbc.encrypt(&iv, &mut whole).unwrap();
                let ct = streamed(StreamCipher::AesCbcEncrypt, &key, &iv, &message);
                assert_eq!(ct, whole, "{imp} CBC-{key_len} encrypt, {block} B blocks");
                let pt = streamed(StreamCipher::AesCbcDecrypt, &key, &iv, &ct);
                assert_eq!(pt, message, "{imp} CBC-{key_len} decrypt, {block} B blocks");
            }
            for alg in AeadAlgorithm::ALL {
                let key = pattern(alg.key_len(), 2);
                let kind = StreamCipher::Aead(alg);
                if imp.library() == Library::RustCrypto {
                    assert!(matches!(
                        imp.cipher_stream(kind, &key, &nonce).err(),
                        Some(CryptoError::NoStream { .. })
                    ));
                    continue;
                }
                let mut whole = message.clone();
                imp.aead(alg, &key)
                    .unwrap()
                    .seal(&nonce, &[], &mut whole)
                    .unwrap();
                let ct = streamed(kind, &key, &nonce, &message);
                assert_eq!(ct, whole, "{imp} {alg}, {block} B blocks");
                assert_ne!(ct, message, "{imp} {alg} changed nothing");
            }
        }
    }
}

#[test]
fn streams_refuse_a_wrong_key_or_iv_length_and_cbc_a_partial_block() {
    for imp in hardware_choices() {
        assert!(imp
            .cipher_stream(StreamCipher::AesCbcEncrypt, &[0; 20], &[0; 16])
            .is_err());
        assert!(imp
            .cipher_stream(StreamCipher::AesCbcEncrypt, &[0; 16], &[0; 12])
            .is_err());
        let mut s = imp
            .cipher_stream(StreamCipher::AesCbcEncrypt, &[0; 16], &[0; 16])
            .unwrap();
        assert_eq!(
            s.update(&mut [0; 20]),
            Err(CryptoError::NotBlockAligned { len: 20 })
        );
    }
    let lc = Implementation::new(CryptoChoice::AwsLc).unwrap();
    let gcm = StreamCipher::Aead(AeadAlgorithm::Aes256Gcm);
    assert!(lc.cipher_stream(gcm, &[0; 16], &[0; 12]).is_err());
    assert!(lc.cipher_stream(gcm, &[0; 32], &[0; 16]).is_err());
}

#[test]
fn tampering_is_detected_by_every_aead() {
    for imp in hardware_choices() {
        for alg in AeadAlgorithm::ALL {
            let key = imp.aead(alg, &pattern(alg.key_len(), 8)).unwrap();
            let nonce = [1u8; 12];
            let mut buf = pattern(100, 0);
            let tag = key.seal(&nonce, b"aad", &mut buf).unwrap();
            let mut flipped = buf.clone();
            flipped[50] ^= 1;
            assert_eq!(
                key.open(&nonce, b"aad", &mut flipped, &tag),
                Err(CryptoError::Authentication)
            );
            let mut copy = buf.clone();
            assert_eq!(
                key.open(&nonce, b"AAD", &mut copy, &tag),
                Err(CryptoError::Authentication),
                "{imp} {alg}: AAD not authenticated"
            );
            let mut other_nonce = [1u8; 12];
            other_nonce[0] = 2;
            assert_eq!(
                key.open(&other_nonce, b"aad", &mut buf, &tag),
                Err(CryptoError::Authentication)
            );
        }
    }
}

#[test]
fn bad_keys_and_lengths_are_refused_with_their_reason() {
    for imp in hardware_choices() {
        assert!(matches!(
            imp.aes_cbc(&[0u8; 20]).err(),
            Some(CryptoError::KeyLength { got: 20, .. })
        ));
        assert!(matches!(
            imp.aead(AeadAlgorithm::Aes256Gcm, &[0u8; 16]).err(),
            Some(CryptoError::KeyLength { got: 16, .. })
        ));
        let cbc = imp.aes_cbc(&[0u8; 16]).unwrap();
        let mut odd = [0u8; 17];
        assert_eq!(
            cbc.encrypt(&[0; 16], &mut odd),
            Err(CryptoError::NotBlockAligned { len: 17 })
        );
        assert_eq!(
            cbc.decrypt(&[0; 16], &mut odd[..15]),
            Err(CryptoError::NotBlockAligned { len: 15 })
        );
        let mac = imp.hmac_sha256(b"k").unwrap();
        assert_eq!(
            mac.verify(&[b"x"], &[0u8; 8]),
            Err(CryptoError::TagLength { len: 8 })
        );
    }
}

#[test]
fn info_names_library_and_hardware_aes() {
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    let info = imp.info();
    assert_eq!(info.library, Library::AwsLc);
    assert!(info.label.starts_with("auto (aws-lc-rs, "), "{}", info.label);
    let json = serde_json::to_string(&info).unwrap();
    assert!(json.contains("\"choice\":\"auto\""), "{json}");
    assert!(json.contains("\"library\":\"aws-lc\""), "{json}");
}

#[test]
fn vectors_decode_to_the_lengths_their_standards_give() {
    assert_eq!(kat::hex(kat::CBC[0].plaintext).len(), 64);
    assert_eq!(kat::hex(kat::AEAD[5].plaintext).len(), 114);
    assert_eq!(kat::hex(kat::HMAC_SHA256[5].key).len(), 131);
}

/// Runs in a child of this test binary started with the mask: AWS-LC must report hardware
/// AES off, `soft` must resolve, and it must still pass every vector.
#[test]
fn soft_takes_effect_in_a_child_started_with_the_mask() {
    if std::env::var_os("CRYPTO_TEST_SOFT_CHILD").is_some() {
        assert!(crypto::soft::mask_requested());
        assert!(crypto::soft::active(), "AWS-LC ignored {}", crypto::soft::ENV_VAR);
        let soft = Implementation::new(CryptoChoice::Soft).expect("soft resolves when masked");
        assert!(!soft.hardware_aes());
        assert!(
            soft.info().label.contains("software AES"),
            "{}",
            soft.info().label
        );
        crypto::self_test(&soft).unwrap_or_else(|e| panic!("{e}"));
        // OpenSSL reads the same variable when it loads: its rows are software AES too.
        if let Some(libcrypto) = libcrypto() {
            assert!(!libcrypto.hardware_aes(), "{}", libcrypto.info().label);
            crypto::self_test(&libcrypto).unwrap_or_else(|e| panic!("{e}"));
        }
        return;
    }
    let out = crypto::soft::command()
        .unwrap()
        .args([
            "--exact",
            "soft_takes_effect_in_a_child_started_with_the_mask",
            "--nocapture",
        ])
        .env("CRYPTO_TEST_SOFT_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "child ran no test:\n{text}");
}

/// `IPSEC_LAB_LIBCRYPTO` naming a file that is not there: `libcrypto` is refused with what to
/// do, and the other choices are untouched (in a child: the library is loaded once per
/// process).
#[test]
fn a_missing_libcrypto_is_refused_with_what_to_do() {
    if std::env::var_os("CRYPTO_TEST_NO_LIBCRYPTO_CHILD").is_some() {
        let err = Implementation::new(CryptoChoice::Libcrypto).unwrap_err();
        assert_eq!(
            err,
            CryptoError::LibraryMissing {
                library: Library::Libcrypto
            }
        );
        assert!(err.to_string().contains("apt-get install libssl3"), "{err}");
        let why = crypto::libcrypto::load_error().expect("not loaded");
        assert!(why.contains("/nonexistent/libcrypto.so.3"), "{why}");
        Implementation::new(CryptoChoice::Auto).unwrap();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_missing_libcrypto_is_refused_with_what_to_do",
            "--nocapture",
        ])
        .env("CRYPTO_TEST_NO_LIBCRYPTO_CHILD", "1")
        .env(crypto::libcrypto::LIBCRYPTO_ENV, "/nonexistent/libcrypto.so.3")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "child ran no test:\n{text}");
}
