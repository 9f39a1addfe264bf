//! Data-channel tests: known answers, round trips, tampering, replays, and two peers talking
//! through an unreliable in-memory network.

use model::{CipherSuite, CryptoChoice, Hmac, KeyBits};
use tunnel_proto::{
    DropCounters, DropReason, Endpoint, Implementation, KeyDirection, StaticKey, HEADROOM, STATIC_KEY_LEN,
    TAILROOM, WINDOW,
};

const PAYLOAD: &[u8] = b"The quick brown fox jumps over the lazy dog";
const IV: [u8; 16] = [
    0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
];

/// Expected first datagram (packet id 1) from the `Normal` end for [`PAYLOAD`] and [`IV`],
/// with key bytes 0, 1, 2, ... 255. Computed by `tests/kat-vectors.sh` with
/// `openssl enc -aes-N-cbc -K 0001..  -iv a0a1..` and `openssl dgst -sha256 -mac HMAC -macopt
/// hexkey:4041..5f` over id‖iv‖ct, and Python `cryptography`'s AESGCM and ChaCha20Poly1305
/// with nonce 40414243‖id and the id as AAD; not by this crate's code.
const KAT: &[(&str, &str)] = &[
    ("none", "000000000000000154686520717569636b2062726f776e20666f78206a756d7073206f76657220746865206c617a7920646f67"),
    ("aes-128-cbc", "0000000000000001a0a1a2a3a4a5a6a7a8a9aaabacadaeaf66c79eeb9465863ede43c216978135de45de5a6a4c003c3a2acf0dc47b07b0da59766c539cdf0ae0ff6c02eddeb1b61a"),
    ("aes-128-cbc-hmac-sha256", "0000000000000001a0a1a2a3a4a5a6a7a8a9aaabacadaeaf66c79eeb9465863ede43c216978135de45de5a6a4c003c3a2acf0dc47b07b0da59766c539cdf0ae0ff6c02eddeb1b61aab0f6d6d1d00188c865ba24f0e1cf1219cdad515c7d55b0729cc1d9b0d490173"),
    ("aes-192-cbc", "0000000000000001a0a1a2a3a4a5a6a7a8a9aaabacadaeaf2c7e989df3c67fdb9a87927ed5aca4ef1c6185fd243a2cb2cef94eacb55594a7b56af73b8224c58c83a4d4d0740f102e"),
    ("aes-192-cbc-hmac-sha256", "0000000000000001a0a1a2a3a4a5a6a7a8a9aaabacadaeaf2c7e989df3c67fdb9a87927ed5aca4ef1c6185fd243a2cb2cef94eacb55594a7b56af73b8224c58c83a4d4d0740f102ef1ba5adb1515c8c4466297a4384e4dd7c5da282fc0f1478c70220ef53c19cb0f"),
    ("aes-256-cbc", "0000000000000001a0a1a2a3a4a5a6a7a8a9aaabacadaeaf64bac78bf92341822f9cb229d5199006d90c3bab4f7eaa663a51e8c75086e82cabdf122926fa3b24d4f3c9bafa5236b6"),
    ("aes-256-cbc-hmac-sha256", "0000000000000001a0a1a2a3a4a5a6a7a8a9aaabacadaeaf64bac78bf92341822f9cb229d5199006d90c3bab4f7eaa663a51e8c75086e82cabdf122926fa3b24d4f3c9bafa5236b6d1d51fb2dcde3d18c6c10586e5a2badf1a33d883242512f39723360d511a4c8f"),
    ("aes-128-gcm", "0000000000000001e90d197b214bc651b779aa4a84b699c151d52b2ce6f28be0a2d215251552a20b6743e87764d44f038ba4fe9ff5984a06bbb8d9734ab44463e415dc"),
    ("aes-256-gcm", "000000000000000157ca5da3f2c171a9f7d3808c612eb995f3f09d3c6f384c9622dc786ebd7ec166834f8b6ff9ce304358c678a1b421635508ecb8a90b7d2526c4b8e4"),
    ("chacha20-poly1305", "0000000000000001c5b88ab19e05ec702688b0058c578956ea00193c5e6b3f11c9e3781900d82e0062e27434ae07729b37f55de2ad12bfb4f4f10cfbcf948b24428cac"),
];

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn counting_key() -> StaticKey {
    let mut bytes = [0u8; STATIC_KEY_LEN];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = i as u8;
    }
    StaticKey::from_bytes(bytes)
}

/// Both libraries with hardware AES as detected (soft needs a process started with the mask).
fn implementations() -> Vec<Implementation> {
    [CryptoChoice::Rustcrypto, CryptoChoice::AwsLc]
        .into_iter()
        .map(|c| Implementation::new(c).unwrap())
        .collect()
}

fn all_suites() -> Vec<CipherSuite> {
    let mut v = vec![CipherSuite::None];
    v.extend(CipherSuite::classic_six());
    v.push(CipherSuite::AesGcm { key: KeyBits::Aes128 });
    v.push(CipherSuite::AesGcm { key: KeyBits::Aes256 });
    v.push(CipherSuite::ChaCha20Poly1305);
    v
}

fn authenticated(suite: CipherSuite) -> bool {
    matches!(
        suite,
        CipherSuite::AesGcm { .. }
            | CipherSuite::ChaCha20Poly1305
            | CipherSuite::AesCbc {
                hmac: Hmac::Sha256,
                ..
            }
    )
}

fn pair(suite: CipherSuite, imp: Implementation, key: &StaticKey) -> (Endpoint, Endpoint) {
    (
        Endpoint::new(suite, imp, key, KeyDirection::Normal).unwrap(),
        Endpoint::new(suite, imp, key, KeyDirection::Inverse).unwrap(),
    )
}

/// A buffer holding `payload` where encap expects it.
fn staged(payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADROOM + payload.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + payload.len()].copy_from_slice(payload);
    buf
}

fn seal(ep: &mut Endpoint, payload: &[u8]) -> Vec<u8> {
    let mut buf = staged(payload);
    let r = ep.encap(&mut buf, payload.len()).unwrap();
    buf[r].to_vec()
}

fn open(ep: &mut Endpoint, datagram: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut buf = datagram.to_vec();
    let r = ep.decap(&mut buf)?;
    Ok(buf[r].to_vec())
}

#[test]
fn known_answers_for_every_suite_and_library() {
    let key = counting_key();
    assert_eq!(KAT.len(), all_suites().len());
    for imp in implementations() {
        for (name, expected) in KAT {
            let suite: CipherSuite = name.parse().unwrap();
            let (mut a, mut b) = pair(suite, imp, &key);
            let mut buf = staged(PAYLOAD);
            let r = a.encap_with_iv(&mut buf, PAYLOAD.len(), &IV).unwrap();
            assert_eq!(buf[r.clone()], hex(expected)[..], "{name} with {imp}");
            assert_eq!(open(&mut b, &buf[r]).unwrap(), PAYLOAD, "{name} with {imp}");
        }
    }
}

#[test]
fn libraries_interoperate() {
    let key = StaticKey::generate().unwrap();
    let imps = implementations();
    for suite in all_suites() {
        let mut a = Endpoint::new(suite, imps[0], &key, KeyDirection::Normal).unwrap();
        let mut b = Endpoint::new(suite, imps[1], &key, KeyDirection::Inverse).unwrap();
        for len in [0, 1, 15, 16, 17, 1400] {
            let p: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            assert_eq!(open(&mut b, &seal(&mut a, &p)).unwrap(), p, "{suite} len {len}");
            assert_eq!(open(&mut a, &seal(&mut b, &p)).unwrap(), p, "{suite} len {len}");
        }
    }
}

#[test]
fn round_trip_every_length_both_directions() {
    let key = StaticKey::generate().unwrap();
    for imp in implementations() {
        for suite in all_suites() {
            let (mut a, mut b) = pair(suite, imp, &key);
            for len in (0..=70).chain([255, 256, 1000, 1399, 1400, 1448, 9000]) {
                let p: Vec<u8> = (0..len).map(|i| (i ^ len) as u8).collect();
                let d = seal(&mut a, &p);
                assert!(
                    d.len() <= p.len() + Endpoint::max_overhead(suite),
                    "{suite} len {len}"
                );
                assert_eq!(open(&mut b, &d).unwrap(), p, "{suite} len {len}");
                assert_eq!(open(&mut a, &seal(&mut b, &p)).unwrap(), p, "{suite} len {len}");
            }
        }
    }
}

#[test]
fn ciphertext_hides_the_payload_and_ivs_differ() {
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    for suite in all_suites().into_iter().filter(|s| s.is_encrypted()) {
        let (mut a, _) = pair(suite, imp, &key);
        let p = [0x55u8; 64];
        let d1 = seal(&mut a, &p);
        let d2 = seal(&mut a, &p);
        assert!(!d1.windows(16).any(|w| w == &p[..16]), "{suite}: payload visible");
        assert_ne!(d1[8..], d2[8..], "{suite}: two packets encrypt alike");
    }
}

#[test]
fn every_flipped_byte_is_rejected_by_authenticated_suites() {
    let key = StaticKey::generate().unwrap();
    for imp in implementations() {
        for suite in all_suites().into_iter().filter(|s| authenticated(*s)) {
            let (mut a, mut b) = pair(suite, imp, &key);
            let d = seal(&mut a, &[0x42; 100]);
            for i in 0..d.len() {
                for bit in [0x01u8, 0x80] {
                    let mut t = d.clone();
                    t[i] ^= bit;
                    let got = open(&mut b, &t);
                    if i == 1 {
                        // The epoch byte: only epoch 0 is installed.
                        assert_eq!(got, Err(DropReason::UnknownEpoch), "{suite} epoch byte");
                    } else if i >= 8 {
                        assert_eq!(got, Err(DropReason::BadMac), "{suite} byte {i}");
                    } else {
                        // A flipped id is refused as counter 0 or by the MAC, which covers it.
                        assert!(
                            matches!(got, Err(DropReason::BadMac | DropReason::BadPacketId)),
                            "{suite} id byte {i}: {got:?}"
                        );
                    }
                }
            }
            // Rejected packets did not move the window: the original still goes through once.
            assert_eq!(open(&mut b, &d).unwrap(), [0x42; 100]);
            assert_eq!(open(&mut b, &d), Err(DropReason::Replay));
        }
    }
}

#[test]
fn truncated_packets_are_short_or_bad_length() {
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    for suite in all_suites() {
        let (mut a, mut b) = pair(suite, imp, &key);
        let d = seal(&mut a, &[]);
        for len in 0..d.len() {
            let got = open(&mut b, &d[..len]);
            assert!(
                matches!(
                    got,
                    Err(DropReason::ShortPacket
                        | DropReason::BadLength
                        | DropReason::BadMac
                        | DropReason::BadPadding)
                ) || (suite == CipherSuite::None && len >= 8),
                "{suite} truncated to {len}: {got:?}"
            );
        }
        assert_eq!(open(&mut b, &d[..7]), Err(DropReason::ShortPacket), "{suite}");
    }
    // CBC without a MAC: a cut that leaves a partial block is seen as such.
    let suite = CipherSuite::cbc(KeyBits::Aes128, Hmac::None);
    let (mut a, mut b) = pair(suite, imp, &key);
    let d = seal(&mut a, &[1; 40]);
    assert_eq!(open(&mut b, &d[..d.len() - 1]), Err(DropReason::BadLength));
}

#[test]
fn wrong_key_direction_fails_authentication() {
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    for suite in all_suites().into_iter().filter(|s| authenticated(*s)) {
        let mut a = Endpoint::new(suite, imp, &key, KeyDirection::Normal).unwrap();
        let mut also_a = Endpoint::new(suite, imp, &key, KeyDirection::Normal).unwrap();
        let d = seal(&mut a, b"hello");
        assert_eq!(open(&mut also_a, &d), Err(DropReason::BadMac), "{suite}");
    }
}

#[test]
fn replays_old_and_far_future_packets() {
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    for suite in all_suites() {
        let (mut a, mut b) = pair(suite, imp, &key);
        let first = seal(&mut a, b"first");
        let mut later: Vec<Vec<u8>> = (0..WINDOW + 10).map(|i| seal(&mut a, &i.to_be_bytes())).collect();
        // Out of order within the window is fine; a duplicate is not.
        let last = later.pop().unwrap();
        assert_eq!(open(&mut b, &last).unwrap(), (WINDOW + 9).to_be_bytes());
        assert_eq!(open(&mut b, &later[100]).unwrap(), 100u64.to_be_bytes());
        assert_eq!(open(&mut b, &later[100]), Err(DropReason::Replay), "{suite}");
        assert_eq!(open(&mut b, &last), Err(DropReason::Replay), "{suite}");
        // Packet id 1 is now more than WINDOW behind.
        assert_eq!(open(&mut b, &first), Err(DropReason::TooOld), "{suite}");
        // A far jump ahead is accepted and slides the window past everything before it.
        for _ in 0..5000 {
            seal(&mut a, b"skipped");
        }
        let far = seal(&mut a, b"far");
        assert_eq!(open(&mut b, &far).unwrap(), b"far");
        assert_eq!(
            open(&mut b, &later[WINDOW as usize]),
            Err(DropReason::TooOld),
            "{suite}"
        );
    }
}

#[test]
fn buffer_too_small_is_an_error_not_a_panic() {
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    let (mut a, _) = pair(CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256), imp, &key);
    let mut buf = vec![0u8; HEADROOM + 100];
    assert!(a.encap(&mut buf, 100).is_err());
}

/// A batch gives the datagrams `encap_with_iv` gives one at a time with the same IVs, for
/// every suite and library: 70 packets (more than the 64 a CBC batch interleaves), of lengths
/// that end in different blocks, and the peer opens each.
#[test]
fn a_batch_seals_what_single_packets_seal() {
    let key = StaticKey::generate().unwrap();
    let lens: Vec<usize> = (0..70).map(|i| [1400, 1400, 0, 17, 1399, 64][i % 6]).collect();
    let ivs: Vec<[u8; 16]> = (0..lens.len()).map(|i| [i as u8 ^ 0x5a; 16]).collect();
    for imp in implementations() {
        for suite in all_suites() {
            let payload = |i: usize| -> Vec<u8> { (0..lens[i]).map(|b| (b * 3 + i) as u8).collect() };
            let (mut single, _) = pair(suite, imp, &key);
            let alone: Vec<Vec<u8>> = (0..lens.len())
                .map(|i| {
                    let mut buf = staged(&payload(i));
                    let r = single.encap_with_iv(&mut buf, lens[i], &ivs[i]).unwrap();
                    buf[r].to_vec()
                })
                .collect();
            let (mut batcher, mut peer) = pair(suite, imp, &key);
            let mut bufs: Vec<Vec<u8>> = (0..lens.len()).map(|i| staged(&payload(i))).collect();
            let mut sealed: Vec<_> = lens.iter().map(|_| Ok(0..0)).collect();
            batcher.encap_batch_with_ivs(&mut bufs, &lens, &ivs, &mut sealed);
            for (i, (buf, r)) in bufs.iter().zip(sealed).enumerate() {
                let datagram = &buf[r.unwrap()];
                assert_eq!(datagram, &alone[i][..], "{suite} with {imp}, packet {i}");
                assert_eq!(
                    open(&mut peer, datagram).unwrap(),
                    payload(i),
                    "{suite} packet {i}"
                );
            }
        }
    }
}

/// A packet of a batch that cannot be sealed gets its error; the others are sealed as usual.
#[test]
fn a_batch_refuses_only_the_packet_that_does_not_fit() {
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    let (mut a, mut b) = pair(CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256), imp, &key);
    let mut bufs = vec![staged(&[7; 100]), vec![0u8; HEADROOM + 100], staged(&[9; 100])];
    let mut sealed: Vec<_> = bufs.iter().map(|_| Ok(0..0)).collect();
    a.encap_batch(&mut bufs, &[100, 100, 100], &mut sealed);
    assert!(matches!(
        sealed[1],
        Err(tunnel_proto::EncapError::BufferTooSmall { .. })
    ));
    for (i, fill) in [(0, 7u8), (2, 9)] {
        let r = sealed[i].clone().unwrap();
        assert_eq!(open(&mut b, &bufs[i][r]).unwrap(), [fill; 100]);
    }
}

/// A deterministic shuffle source (xorshift), so failures replay.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Two peers exchange traffic through a network that drops, duplicates, reorders (within
/// the window) and corrupts. Every intact first copy is delivered exactly once; everything
/// else is dropped and counted under the right reason.
#[test]
fn two_peers_over_an_unreliable_network() {
    let key = StaticKey::generate().unwrap();
    for imp in implementations() {
        for suite in all_suites().into_iter().filter(|s| authenticated(*s)) {
            let (mut a, mut b) = pair(suite, imp, &key);
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            for (sender, receiver) in [(&mut a, &mut b)] {
                let mut wire: Vec<(u32, Vec<u8>, bool)> = Vec::new(); // (seq, datagram, corrupted)
                let mut expected_dups = 0;
                let mut expected_corrupt = 0;
                for seq in 0..2000u32 {
                    let d = seal(sender, &seq.to_be_bytes());
                    match rng.next() % 20 {
                        0 => {} // lost
                        1 => {
                            wire.push((seq, d.clone(), false));
                            wire.push((seq, d, false));
                            expected_dups += 1;
                        }
                        2 => {
                            let mut t = d.clone();
                            let i = 8 + (rng.next() as usize % (t.len() - 8));
                            t[i] ^= 0x10;
                            wire.push((seq, t, true));
                            expected_corrupt += 1;
                        }
                        _ => wire.push((seq, d, false)),
                    }
                }
                // Reorder by swapping neighbours within a short distance.
                for i in 0..wire.len() {
                    let j = (i + (rng.next() as usize % 8)).min(wire.len() - 1);
                    wire.swap(i, j);
                }
                let mut delivered = std::collections::BTreeSet::new();
                let mut drops = DropCounters::default();
                for (seq, d, corrupted) in wire {
                    match open(receiver, &d) {
                        Ok(p) => {
                            assert!(!corrupted, "{suite}: corrupted packet {seq} delivered");
                            assert_eq!(p, seq.to_be_bytes());
                            assert!(delivered.insert(seq), "{suite}: {seq} delivered twice");
                        }
                        Err(r) => drops.count(r),
                    }
                }
                assert_eq!(drops.bad_mac, expected_corrupt, "{suite}");
                assert_eq!(drops.replay, expected_dups, "{suite}");
                assert_eq!(drops.total(), drops.bad_mac + drops.replay, "{suite}: {drops:?}");
                assert!(delivered.len() > 1500, "{suite}");
            }
        }
    }
}

/// Queue `q` of both ends of a multi-queue tunnel.
fn queue_pair(suite: CipherSuite, imp: Implementation, key: &StaticKey, q: u8) -> (Endpoint, Endpoint) {
    (
        Endpoint::for_queue(suite, imp, key, KeyDirection::Normal, q).unwrap(),
        Endpoint::for_queue(suite, imp, key, KeyDirection::Inverse, q).unwrap(),
    )
}

#[test]
fn queues_send_from_disjoint_id_spaces_and_refuse_each_others_datagrams() {
    let key = StaticKey::generate().unwrap();
    let imp = Implementation::new(CryptoChoice::Auto).unwrap();
    for suite in all_suites() {
        let (mut a0, mut b0) = queue_pair(suite, imp, &key, 0);
        let (mut a1, mut b1) = queue_pair(suite, imp, &key, 1);
        let (mut a255, mut b255) = queue_pair(suite, imp, &key, 255);
        let d0 = seal(&mut a0, b"zero");
        let d1 = seal(&mut a1, b"one");
        let d255 = seal(&mut a255, b"last");
        // The first id of each queue: its number in the top byte, 1 below (queue 0 as today).
        assert_eq!(d0[..8], 1u64.to_be_bytes(), "{suite}");
        assert_eq!(d1[..8], ((1u64 << 56) | 1).to_be_bytes(), "{suite}");
        assert_eq!(d255[..8], ((255u64 << 56) | 1).to_be_bytes(), "{suite}");
        // Carried to the other queue's socket: refused before the window, which stays put.
        assert_eq!(open(&mut b0, &d1), Err(DropReason::WrongQueue), "{suite}");
        assert_eq!(open(&mut b1, &d0), Err(DropReason::WrongQueue), "{suite}");
        assert_eq!(open(&mut b1, &d255), Err(DropReason::WrongQueue), "{suite}");
        assert_eq!(open(&mut b0, &d0).unwrap(), b"zero", "{suite}");
        assert_eq!(open(&mut b1, &d1).unwrap(), b"one", "{suite}");
        assert_eq!(open(&mut b255, &d255).unwrap(), b"last", "{suite}");
        // Each queue keeps its own replay window.
        assert_eq!(open(&mut b1, &d1), Err(DropReason::Replay), "{suite}");
        let next0 = seal(&mut a0, b"zero again");
        assert_eq!(open(&mut b0, &next0).unwrap(), b"zero again", "{suite}");
        // A single-queue end accepts any id, as before.
        let (_, mut whole) = pair(suite, imp, &key);
        assert_eq!(open(&mut whole, &d255).unwrap(), b"last", "{suite}");
    }
}

#[test]
fn wrong_queue_is_counted_under_its_own_name() {
    let mut drops = DropCounters::default();
    drops.count(DropReason::WrongQueue);
    let mut sum = DropCounters::default();
    sum.add(&drops);
    sum.add(&drops);
    assert_eq!(sum.wrong_queue, 2);
    assert_eq!(sum.total(), 2);
    assert_eq!(DropReason::WrongQueue.name(), "wrong_queue");
}
