//! Known-answer vectors from the standards, and the self-test that runs them.
//!
//! * AES-CBC: NIST SP 800-38A, F.2.1–F.2.6 (AES-128/192/256, encrypt, decrypt and a batch).
//! * HMAC-SHA256: RFC 4231, test cases 1–4, 6, 7 (and 5, truncated to 128 bits).
//! * AES-GCM: the GCM specification (McGrew & Viega), test cases 2–4, 14 and 16.
//! * ChaCha20-Poly1305: RFC 8439 §2.8.2.
//!
//! Public so that other crates (the tunnel's packet format) can test against the same
//! vectors.

use crate::implementation::Implementation;
use crate::primitives::{AeadAlgorithm, CbcMessage, SelfTestError, TAG_LEN};

pub struct CbcVector {
    pub name: &'static str,
    pub key: &'static str,
    pub iv: &'static str,
    pub plaintext: &'static str,
    pub ciphertext: &'static str,
}

pub struct HmacVector {
    pub name: &'static str,
    pub key: &'static str,
    pub data: &'static str,
    /// Full or truncated MAC (test case 5 is 16 bytes).
    pub mac: &'static str,
}

pub struct AeadVector {
    pub name: &'static str,
    pub algorithm: AeadAlgorithm,
    pub key: &'static str,
    pub nonce: &'static str,
    pub aad: &'static str,
    pub plaintext: &'static str,
    pub ciphertext: &'static str,
    pub tag: &'static str,
}

const SP800_38A_PLAIN: &str = "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710";
const SP800_38A_IV: &str = "000102030405060708090a0b0c0d0e0f";

pub const CBC: [CbcVector; 3] = [
    CbcVector {
        name: "SP 800-38A F.2.1/F.2.2 CBC-AES128",
        key: "2b7e151628aed2a6abf7158809cf4f3c",
        iv: SP800_38A_IV,
        plaintext: SP800_38A_PLAIN,
        ciphertext: "7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b273bed6b8e3c1743b7116e69e222295163ff1caa1681fac09120eca307586e1a7",
    },
    CbcVector {
        name: "SP 800-38A F.2.3/F.2.4 CBC-AES192",
        key: "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b",
        iv: SP800_38A_IV,
        plaintext: SP800_38A_PLAIN,
        ciphertext: "4f021db243bc633d7178183a9fa071e8b4d9ada9ad7dedf4e5e738763f69145a571b242012fb7ae07fa9baac3df102e008b0e27988598881d920a9e64f5615cd",
    },
    CbcVector {
        name: "SP 800-38A F.2.5/F.2.6 CBC-AES256",
        key: "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
        iv: SP800_38A_IV,
        plaintext: SP800_38A_PLAIN,
        ciphertext: "f58c4c04d6e5f1ba779eabfb5f7bfbd69cfc4e967edb808d679f777bc6702c7d39f23369a9d9bacfa530e26304231461b2eb05e2c39be9fcda6c19078c6a9d1b",
    },
];

const KEY_AA_131: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

pub const HMAC_SHA256: [HmacVector; 7] = [
    HmacVector {
        name: "RFC 4231 test case 1",
        key: "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b",
        data: "4869205468657265",
        mac: "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
    },
    HmacVector {
        name: "RFC 4231 test case 2",
        key: "4a656665",
        data: "7768617420646f2079612077616e7420666f72206e6f7468696e673f",
        mac: "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
    },
    HmacVector {
        name: "RFC 4231 test case 3",
        key: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        data: "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
        mac: "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
    },
    HmacVector {
        name: "RFC 4231 test case 4",
        key: "0102030405060708090a0b0c0d0e0f10111213141516171819",
        data: "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
        mac: "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
    },
    HmacVector {
        name: "RFC 4231 test case 5 (truncated to 128 bits)",
        key: "0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c",
        data: "546573742057697468205472756e636174696f6e",
        mac: "a3b6167473100ee06e0c796c2955552b",
    },
    HmacVector {
        name: "RFC 4231 test case 6",
        key: KEY_AA_131,
        data: "54657374205573696e67204c6172676572205468616e20426c6f636b2d53697a65204b6579202d2048617368204b6579204669727374",
        mac: "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
    },
    HmacVector {
        name: "RFC 4231 test case 7",
        key: KEY_AA_131,
        data: "5468697320697320612074657374207573696e672061206c6172676572207468616e20626c6f636b2d73697a65206b657920616e642061206c6172676572207468616e20626c6f636b2d73697a6520646174612e20546865206b6579206e6565647320746f20626520686173686564206265666f7265206265696e6720757365642062792074686520484d414320616c676f726974686d2e",
        mac: "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
    },
];

const GCM_KEY: &str = "feffe9928665731c6d6a8f9467308308";
const GCM_IV: &str = "cafebabefacedbaddecaf888";
const GCM_AAD: &str = "feedfacedeadbeeffeedfacedeadbeefabaddad2";
const GCM_PLAIN_64: &str = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";
const GCM_PLAIN_60: &str = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39";

pub const AEAD: [AeadVector; 6] = [
    AeadVector {
        name: "GCM spec test case 2 (AES-128)",
        algorithm: AeadAlgorithm::Aes128Gcm,
        key: "00000000000000000000000000000000",
        nonce: "000000000000000000000000",
        aad: "",
        plaintext: "00000000000000000000000000000000",
        ciphertext: "0388dace60b6a392f328c2b971b2fe78",
        tag: "ab6e47d42cec13bdf53a67b21257bddf",
    },
    AeadVector {
        name: "GCM spec test case 3 (AES-128)",
        algorithm: AeadAlgorithm::Aes128Gcm,
        key: GCM_KEY,
        nonce: GCM_IV,
        aad: "",
        plaintext: GCM_PLAIN_64,
        ciphertext: "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985",
        tag: "4d5c2af327cd64a62cf35abd2ba6fab4",
    },
    AeadVector {
        name: "GCM spec test case 4 (AES-128, AAD)",
        algorithm: AeadAlgorithm::Aes128Gcm,
        key: GCM_KEY,
        nonce: GCM_IV,
        aad: GCM_AAD,
        plaintext: GCM_PLAIN_60,
        ciphertext: "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
        tag: "5bc94fbc3221a5db94fae95ae7121a47",
    },
    AeadVector {
        name: "GCM spec test case 14 (AES-256)",
        algorithm: AeadAlgorithm::Aes256Gcm,
        key: "0000000000000000000000000000000000000000000000000000000000000000",
        nonce: "000000000000000000000000",
        aad: "",
        plaintext: "00000000000000000000000000000000",
        ciphertext: "cea7403d4d606b6e074ec5d3baf39d18",
        tag: "d0d1c8a799996bf0265b98b5d48ab919",
    },
    AeadVector {
        name: "GCM spec test case 16 (AES-256, AAD)",
        algorithm: AeadAlgorithm::Aes256Gcm,
        key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
        nonce: GCM_IV,
        aad: GCM_AAD,
        plaintext: GCM_PLAIN_60,
        ciphertext: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
        tag: "76fc6ece0f4e1768cddf8853bb2d551b",
    },
    AeadVector {
        name: "RFC 8439 2.8.2 ChaCha20-Poly1305",
        algorithm: AeadAlgorithm::ChaCha20Poly1305,
        key: "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f",
        nonce: "070000004041424344454647",
        aad: "50515253c0c1c2c3c4c5c6c7",
        plaintext: "4c616469657320616e642047656e746c656d656e206f662074686520636c617373206f66202739393a204966204920636f756c64206f6666657220796f75206f6e6c79206f6e652074697020666f7220746865206675747572652c2073756e73637265656e20776f756c642062652069742e",
        ciphertext: "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116",
        tag: "1ae10b594f09e26a7e902ecbd0600691",
    },
];

/// Decodes a hex vector; vectors are constants, so bad hex is a bug here.
pub fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd-length hex vector");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex vector"))
        .collect()
}

fn array<const N: usize>(s: &str) -> [u8; N] {
    hex(s).try_into().expect("vector of the right length")
}

/// Runs every vector on `imp`: encrypt and decrypt, MAC whole and split into parts, seal and
/// open, and one altered tag per AEAD that must be refused.
pub fn run_all(imp: &Implementation) -> Result<(), SelfTestError> {
    let fail = |case: &str, what: String| SelfTestError {
        implementation: imp.to_string(),
        case: case.to_string(),
        what,
    };

    for v in &CBC {
        let cbc = imp
            .aes_cbc(&hex(v.key))
            .map_err(|e| fail(v.name, e.to_string()))?;
        let iv = array::<16>(v.iv);
        let mut buf = hex(v.plaintext);
        cbc.encrypt(&iv, &mut buf)
            .map_err(|e| fail(v.name, e.to_string()))?;
        if buf != hex(v.ciphertext) {
            return Err(fail(v.name, "wrong ciphertext".into()));
        }
        cbc.decrypt(&iv, &mut buf)
            .map_err(|e| fail(v.name, e.to_string()))?;
        if buf != hex(v.plaintext) {
            return Err(fail(v.name, "decryption did not give the plaintext".into()));
        }
        // The batch path the tunnel sends with: the vector twice and its first block alone,
        // lanes of different lengths, each giving the vector's ciphertext.
        let (mut whole, mut first, mut again) = (buf.clone(), buf[..16].to_vec(), buf.clone());
        let mut batch = [&mut whole, &mut first, &mut again].map(|buf| CbcMessage { iv, buf });
        cbc.encrypt_batch(&mut batch)
            .map_err(|e| fail(v.name, e.to_string()))?;
        let want = hex(v.ciphertext);
        if whole != want || again != want || first[..] != want[..16] {
            return Err(fail(v.name, "wrong ciphertext from a batch".into()));
        }
    }

    for v in &HMAC_SHA256 {
        let mac = imp
            .hmac_sha256(&hex(v.key))
            .map_err(|e| fail(v.name, e.to_string()))?;
        let data = hex(v.data);
        let want = hex(v.mac);
        let whole = mac.mac(&[&data]);
        if whole[..want.len()] != want[..] {
            return Err(fail(v.name, "wrong MAC".into()));
        }
        // The tunnel MACs header and ciphertext as separate slices.
        let (a, b) = data.split_at(data.len() / 3);
        if mac.mac(&[a, &[], b]) != whole {
            return Err(fail(v.name, "MAC over split input differs".into()));
        }
        mac.verify(&[&data], &want)
            .map_err(|e| fail(v.name, format!("verify refused the right tag: {e}")))?;
        let mut bad = want.clone();
        bad[0] ^= 1;
        if mac.verify(&[&data], &bad).is_ok() {
            return Err(fail(v.name, "verify accepted an altered tag".into()));
        }
    }

    for v in &AEAD {
        let key = imp
            .aead(v.algorithm, &hex(v.key))
            .map_err(|e| fail(v.name, e.to_string()))?;
        let nonce = array::<12>(v.nonce);
        let aad = hex(v.aad);
        let mut buf = hex(v.plaintext);
        let tag = key
            .seal(&nonce, &aad, &mut buf)
            .map_err(|e| fail(v.name, e.to_string()))?;
        if buf != hex(v.ciphertext) {
            return Err(fail(v.name, "wrong ciphertext".into()));
        }
        if tag != array::<TAG_LEN>(v.tag) {
            return Err(fail(v.name, "wrong tag".into()));
        }
        let mut bad_tag = tag;
        bad_tag[TAG_LEN - 1] ^= 0x80;
        let mut copy = buf.clone();
        if key.open(&nonce, &aad, &mut copy, &bad_tag).is_ok() {
            return Err(fail(v.name, "open accepted an altered tag".into()));
        }
        key.open(&nonce, &aad, &mut buf, &tag)
            .map_err(|e| fail(v.name, format!("open refused the right tag: {e}")))?;
        if buf != hex(v.plaintext) {
            return Err(fail(v.name, "open did not give the plaintext".into()));
        }
    }
    Ok(())
}
