//! Every provider against the standards' vectors, against each other, and against bad input.

use crypto::{kat, AeadAlgorithm, CryptoChoice, CryptoError, Implementation, Library, AES_BLOCK_LEN};

/// Every choice that can run in this (unmasked) test process.
fn hardware_choices() -> Vec<Implementation> {
    [CryptoChoice::Auto, CryptoChoice::AwsLc, CryptoChoice::Rustcrypto]
        .into_iter()
        .map(|c| Implementation::new(c).expect("non-soft choices always resolve"))
        .collect()
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
    let rc = Implementation::new(CryptoChoice::Rustcrypto).unwrap();
    let lc = Implementation::new(CryptoChoice::AwsLc).unwrap();
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
            assert_eq!(a, b, "AES-CBC {key_len}-byte key, {cbc_len} bytes");
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
            assert_eq!((a.clone(), ta), (b, tb), "{alg} {len} bytes");
            // Opened by the other library: interoperable, not merely self-consistent.
            lc.aead(alg, &key)
                .unwrap()
                .open(&nonce, b"hdr", &mut a, &ta)
                .unwrap();
            assert_eq!(a, pattern(len, 6));
        }
    }
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
