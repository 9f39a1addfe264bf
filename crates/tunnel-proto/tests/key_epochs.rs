//! Key epochs, sans IO: two endpoints rekey while packets are in flight both ways. Nothing is
//! lost across a switch, the old epoch is accepted until it is retired and refused after, each
//! epoch judges replays with its own window, and the steps refuse to run out of order.

use std::collections::BTreeMap;

use model::{CipherSuite, CryptoChoice, Hmac, KeyBits};
use tunnel_proto::{
    DropCounters, DropReason, EncapError, Endpoint, Epochs, Implementation, KeyDirection, RekeyError,
    StaticKey, HEADROOM, TAILROOM, WINDOW,
};

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

fn implementations() -> Vec<Implementation> {
    [CryptoChoice::Rustcrypto, CryptoChoice::AwsLc]
        .into_iter()
        .map(|c| Implementation::new(c).unwrap())
        .collect()
}

fn auto() -> Implementation {
    Implementation::new(CryptoChoice::Auto).unwrap()
}

fn pair(suite: CipherSuite, imp: Implementation) -> (Endpoint, Endpoint) {
    let key = StaticKey::generate().unwrap();
    (
        Endpoint::new(suite, imp, &key, KeyDirection::Normal).unwrap(),
        Endpoint::new(suite, imp, &key, KeyDirection::Inverse).unwrap(),
    )
}

fn seal(ep: &mut Endpoint, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADROOM + payload.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + payload.len()].copy_from_slice(payload);
    let r = ep.encap(&mut buf, payload.len()).unwrap();
    buf[r].to_vec()
}

fn open(ep: &mut Endpoint, datagram: &[u8]) -> Result<Vec<u8>, DropReason> {
    let mut buf = datagram.to_vec();
    let r = ep.decap(&mut buf)?;
    Ok(buf[r].to_vec())
}

/// The epoch a datagram was sealed under: the packet id's second byte.
fn epoch_of(datagram: &[u8]) -> u8 {
    datagram[1]
}

/// Both ends install the same fresh key, then switch, as a caller does once each has the
/// other's confirmation. Returns the new epoch.
fn install_and_switch(a: &mut Endpoint, b: &mut Endpoint) -> u8 {
    let key = StaticKey::generate().unwrap();
    let na = a.install_next(&key).unwrap();
    let nb = b.install_next(&key).unwrap();
    assert_eq!(na, nb);
    assert_eq!(a.switch_send().unwrap(), na);
    assert_eq!(b.switch_send().unwrap(), nb);
    na
}

/// A deterministic source of delays (xorshift), so failures replay.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One direction of the network: every datagram arrives 1 to `DELAY` steps after it was
/// sent, so packets sealed just before a switch arrive after packets sealed just after it.
struct Wire {
    in_flight: Vec<(usize, u32, Vec<u8>)>,
    rng: Rng,
}

const DELAY: usize = 24;

impl Wire {
    fn new(seed: u64) -> Wire {
        Wire {
            in_flight: Vec::new(),
            rng: Rng(seed),
        }
    }

    fn send(&mut self, now: usize, seq: u32, datagram: Vec<u8>) {
        let at = now + 1 + (self.rng.next() as usize % DELAY);
        self.in_flight.push((at, seq, datagram));
    }

    /// What arrives at step `now`, in the order it was sent.
    fn arriving(&mut self, now: usize) -> Vec<(u32, Vec<u8>)> {
        let (due, later) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|(at, _, _)| *at <= now);
        self.in_flight = later;
        due.into_iter().map(|(_, seq, d)| (seq, d)).collect()
    }
}

/// What one receiving end saw.
#[derive(Default)]
struct Received {
    delivered: Vec<u32>,
    by_epoch: BTreeMap<u8, u64>,
    /// Packets of an older epoch delivered after one of a newer epoch had arrived: the
    /// overlap this test is about.
    late_old_epoch: u64,
    newest_seen: Option<u8>,
    drops: DropCounters,
}

impl Received {
    fn take(&mut self, end: &mut Endpoint, seq: u32, datagram: &[u8]) {
        match open(end, datagram) {
            Ok(p) => {
                assert_eq!(p, seq.to_be_bytes());
                self.delivered.push(seq);
                let e = epoch_of(datagram);
                *self.by_epoch.entry(e).or_default() += 1;
                match self.newest_seen {
                    Some(n) if e < n => self.late_old_epoch += 1,
                    _ => self.newest_seen = Some(e),
                }
            }
            Err(r) => self.drops.count(r),
        }
    }
}

/// Packets flow both ways every step while the ends rekey three times, each end a few steps
/// apart from the other: install, then (after both have installed) switch, then (after the
/// grace time) retire. Every packet is delivered exactly once, none is dropped, and each
/// epoch carried exactly the packets sent between its switches.
#[test]
fn a_stream_across_epoch_switches_loses_nothing_in_either_direction() {
    const STEPS: usize = 1000;
    const CYCLE: usize = 300;
    for imp in implementations() {
        for suite in all_suites() {
            let (mut a, mut b) = pair(suite, imp);
            let (mut to_b, mut to_a) = (Wire::new(0x9e37_79b9_7f4a_7c15), Wire::new(0x2545_f491_4f6c_dd1d));
            let (mut at_a, mut at_b) = (Received::default(), Received::default());
            let mut key = None;
            for now in 0..STEPS + DELAY + 1 {
                // The schedule of each rekey, relative to its cycle's start (step 100 + 300c):
                // a installs at +0, b at +7; a switches at +20, b at +27 (each has heard the
                // other installed); a retires at +60, b at +65, past the last old-epoch packet.
                if (100..100 + 3 * CYCLE).contains(&now) {
                    match (now - 100) % CYCLE {
                        0 => {
                            key = Some(StaticKey::generate().unwrap());
                            a.install_next(key.as_ref().unwrap()).unwrap();
                        }
                        7 => {
                            b.install_next(key.as_ref().unwrap()).unwrap();
                        }
                        20 => {
                            a.switch_send().unwrap();
                        }
                        27 => {
                            b.switch_send().unwrap();
                        }
                        60 => {
                            a.retire_previous().unwrap();
                        }
                        65 => {
                            b.retire_previous().unwrap();
                        }
                        _ => {}
                    }
                }
                if now < STEPS {
                    let seq = now as u32;
                    to_b.send(now, seq, seal(&mut a, &seq.to_be_bytes()));
                    to_a.send(now, seq, seal(&mut b, &seq.to_be_bytes()));
                }
                for (seq, d) in to_b.arriving(now) {
                    at_b.take(&mut b, seq, &d);
                }
                for (seq, d) in to_a.arriving(now) {
                    at_a.take(&mut a, seq, &d);
                }
            }
            assert!(to_b.in_flight.is_empty() && to_a.in_flight.is_empty());
            let all: Vec<u32> = (0..STEPS as u32).collect();
            for (name, got, expected) in [
                // a switched at steps 120, 420, 720; b at 127, 427, 727.
                ("a->b", &mut at_b, [120, 300, 300, 280]),
                ("b->a", &mut at_a, [127, 300, 300, 273]),
            ] {
                assert_eq!(got.drops, DropCounters::default(), "{suite} {name} with {imp}");
                got.delivered.sort_unstable();
                assert_eq!(got.delivered, all, "{suite} {name} with {imp}");
                let by_epoch: Vec<u64> = got.by_epoch.values().copied().collect();
                assert_eq!(got.by_epoch.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
                assert_eq!(by_epoch, expected, "{suite} {name} with {imp}");
                assert!(
                    got.late_old_epoch > 0,
                    "{suite} {name}: no packet crossed a switch"
                );
            }
            let steady = Epochs {
                send: 3,
                newest: 3,
                previous: None,
            };
            assert_eq!((a.epochs(), b.epochs()), (steady, steady), "{suite}");
        }
    }
}

/// Between the switch and the retirement the old epoch is still accepted; after it, its
/// packets (fresh ones and replays alike) are dropped as UnknownEpoch and counted.
#[test]
fn old_epoch_packets_are_accepted_until_retired_then_unknown() {
    for suite in all_suites() {
        let (mut a, mut b) = pair(suite, auto());
        let old: Vec<Vec<u8>> = (0..4u8).map(|i| seal(&mut a, &[i])).collect();
        assert_eq!(open(&mut b, &old[0]).unwrap(), [0], "{suite}");
        assert_eq!(install_and_switch(&mut a, &mut b), 1);
        let new = seal(&mut a, b"new");
        assert_eq!(epoch_of(&new), 1, "{suite}");
        assert_eq!(open(&mut b, &new).unwrap(), b"new", "{suite}");
        // In flight under epoch 0, arriving after the switch: accepted.
        assert_eq!(open(&mut b, &old[1]).unwrap(), [1], "{suite}");
        assert_eq!(
            b.epochs(),
            Epochs {
                send: 1,
                newest: 1,
                previous: Some(0)
            }
        );
        assert_eq!(b.retire_previous().unwrap(), 0, "{suite}");
        assert_eq!(
            b.epochs(),
            Epochs {
                send: 1,
                newest: 1,
                previous: None
            }
        );
        let mut drops = DropCounters::default();
        for d in [&old[2], &old[3], &old[0]] {
            let got = open(&mut b, d);
            assert_eq!(got, Err(DropReason::UnknownEpoch), "{suite}");
            drops.count(got.unwrap_err());
        }
        assert_eq!(drops.unknown_epoch, 3, "{suite}");
        assert_eq!(drops.total(), 3, "{suite}");
        // The new epoch carries on.
        assert_eq!(open(&mut b, &seal(&mut a, b"more")).unwrap(), b"more", "{suite}");
    }
}

/// A packet of an epoch the receiver has not installed yet (the peer switched before the
/// confirmation) is UnknownEpoch, not a MAC failure, and does not disturb anything.
#[test]
fn a_packet_of_an_epoch_not_yet_installed_is_unknown() {
    for suite in all_suites() {
        let (mut a, mut b) = pair(suite, auto());
        let key = StaticKey::generate().unwrap();
        a.install_next(&key).unwrap();
        a.switch_send().unwrap();
        let early = seal(&mut a, b"early");
        assert_eq!(open(&mut b, &early), Err(DropReason::UnknownEpoch), "{suite}");
        b.install_next(&key).unwrap();
        // Once b has installed it, the same datagram is accepted: nothing was recorded.
        assert_eq!(open(&mut b, &early).unwrap(), b"early", "{suite}");
    }
}

/// During the overlap an old-epoch packet that was already delivered is still a replay, and
/// so is a new-epoch one.
#[test]
fn a_replay_of_an_old_epoch_packet_during_the_overlap_is_dropped_as_a_replay() {
    for suite in all_suites() {
        let (mut a, mut b) = pair(suite, auto());
        let old = seal(&mut a, b"old");
        assert_eq!(open(&mut b, &old).unwrap(), b"old", "{suite}");
        install_and_switch(&mut a, &mut b);
        let new = seal(&mut a, b"new");
        assert_eq!(open(&mut b, &new).unwrap(), b"new", "{suite}");
        let mut drops = DropCounters::default();
        for d in [&old, &new, &old] {
            let got = open(&mut b, d);
            assert_eq!(got, Err(DropReason::Replay), "{suite}");
            drops.count(got.unwrap_err());
        }
        assert_eq!(drops.replay, 3, "{suite}");
        assert_eq!(drops.total(), 3, "{suite}");
    }
}

/// The same counter in two epochs is two packets, each accepted once; a new epoch moving
/// far ahead does not push the old epoch's window (its in-flight packets are not TooOld),
/// and batches after a switch use the new epoch.
#[test]
fn replay_windows_are_independent_per_epoch() {
    for suite in all_suites() {
        let (mut a, mut b) = pair(suite, auto());
        let old: Vec<Vec<u8>> = (0..5u8).map(|i| seal(&mut a, &[i])).collect();
        install_and_switch(&mut a, &mut b);
        let new_first = seal(&mut a, b"first of 1");
        // Counter 1 in both epochs: the ids differ only in the epoch byte.
        assert_eq!(old[0][..8], [0, 0, 0, 0, 0, 0, 0, 1], "{suite}");
        assert_eq!(new_first[..8], [0, 1, 0, 0, 0, 0, 0, 1], "{suite}");
        assert_eq!(open(&mut b, &new_first).unwrap(), b"first of 1", "{suite}");
        assert_eq!(open(&mut b, &old[0]).unwrap(), [0], "{suite}");
        assert_eq!(open(&mut b, &new_first), Err(DropReason::Replay), "{suite}");
        assert_eq!(open(&mut b, &old[0]), Err(DropReason::Replay), "{suite}");
        // Epoch 1 runs far past a window's length, sent as one batch.
        let n = WINDOW as usize + 10;
        let mut bufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; HEADROOM + 2 + TAILROOM]).collect();
        let lens = vec![2; n];
        let mut sealed: Vec<Result<std::ops::Range<usize>, EncapError>> = vec![Ok(0..0); n];
        a.encap_batch(&mut bufs, &lens, &mut sealed);
        let mut delivered = 0;
        for (buf, r) in bufs.iter().zip(sealed) {
            let d = &buf[r.unwrap()];
            assert_eq!(epoch_of(d), 1, "{suite}");
            open(&mut b, d).unwrap();
            delivered += 1;
        }
        assert_eq!(delivered, n, "{suite}");
        // Epoch 0's window did not move: its stragglers are fresh, and each only once.
        for (i, d) in old.iter().enumerate().skip(1) {
            assert_eq!(open(&mut b, d).unwrap(), [i as u8], "{suite}");
            assert_eq!(open(&mut b, d), Err(DropReason::Replay), "{suite}");
        }
    }
}

/// The steps refuse to run out of order, and leave the endpoint as it was when they do.
#[test]
fn rekey_steps_out_of_order_are_refused() {
    let (mut a, _) = pair(CipherSuite::AesGcm { key: KeyBits::Aes256 }, auto());
    let initial = Epochs {
        send: 0,
        newest: 0,
        previous: None,
    };
    assert_eq!(a.epochs(), initial);
    // switch_send and retire_previous with nothing installed.
    assert!(matches!(
        a.switch_send(),
        Err(RekeyError::NothingToSwitchTo { send: 0 })
    ));
    assert!(matches!(a.retire_previous(), Err(RekeyError::NothingToRetire(0))));
    assert_eq!(a.epochs(), initial);

    assert_eq!(a.install_next(&StaticKey::generate().unwrap()).unwrap(), 1);
    let installed = Epochs {
        send: 0,
        newest: 1,
        previous: Some(0),
    };
    assert_eq!(a.epochs(), installed);
    assert!(installed.switch_pending() && installed.accepts(0) && installed.accepts(1));
    assert!(!installed.accepts(2));
    // A third epoch while two are live; retiring the epoch still sent with.
    assert!(matches!(
        a.install_next(&StaticKey::generate().unwrap()),
        Err(RekeyError::TwoEpochsLive {
            previous: 0,
            newest: 1
        })
    ));
    assert!(matches!(
        a.retire_previous(),
        Err(RekeyError::NotSwitched { send: 0, next: 1 })
    ));
    assert_eq!(a.epochs(), installed);

    assert_eq!(a.switch_send().unwrap(), 1);
    // Switching twice, and a third epoch before the retirement, are refused too.
    assert!(matches!(
        a.switch_send(),
        Err(RekeyError::NothingToSwitchTo { send: 1 })
    ));
    assert!(matches!(
        a.install_next(&StaticKey::generate().unwrap()),
        Err(RekeyError::TwoEpochsLive {
            previous: 0,
            newest: 1
        })
    ));
    let switched = Epochs {
        send: 1,
        newest: 1,
        previous: Some(0),
    };
    assert_eq!(a.epochs(), switched);
    assert!(!switched.switch_pending());

    assert_eq!(a.retire_previous().unwrap(), 0);
    assert!(matches!(a.retire_previous(), Err(RekeyError::NothingToRetire(1))));
    assert_eq!(a.install_next(&StaticKey::generate().unwrap()).unwrap(), 2);
}

/// After 255 comes 0: a new key, with its own window, not the run's first key.
#[test]
fn epoch_numbers_wrap_from_255_to_0() {
    for suite in all_suites() {
        let (mut a, mut b) = pair(suite, auto());
        let first_key_packets: Vec<Vec<u8>> = (0..3u8).map(|i| seal(&mut a, &[i])).collect();
        assert_eq!(open(&mut b, &first_key_packets[0]).unwrap(), [0]);
        for expected in 1..=255u8 {
            assert_eq!(install_and_switch(&mut a, &mut b), expected, "{suite}");
            a.retire_previous().unwrap();
            b.retire_previous().unwrap();
        }
        // Epoch 255 runs far ahead; one of its packets stays in flight over the wrap.
        for _ in 0..WINDOW + 10 {
            open(&mut b, &seal(&mut a, b"255")).unwrap();
        }
        let straggler = seal(&mut a, b"straggler");
        assert_eq!(epoch_of(&straggler), 255, "{suite}");
        let key = StaticKey::generate().unwrap();
        assert_eq!(a.install_next(&key).unwrap(), 0, "{suite}");
        assert_eq!(b.install_next(&key).unwrap(), 0, "{suite}");
        assert_eq!(
            b.epochs(),
            Epochs {
                send: 255,
                newest: 0,
                previous: Some(255)
            }
        );
        a.switch_send().unwrap();
        b.switch_send().unwrap();
        // The new epoch 0 starts at counter 1: numerically far below epoch 255's ids, and
        // accepted, as its window is its own.
        let zero = seal(&mut a, b"zero");
        assert_eq!(zero[..8], [0, 0, 0, 0, 0, 0, 0, 1], "{suite}");
        assert_eq!(open(&mut b, &zero).unwrap(), b"zero", "{suite}");
        assert_eq!(open(&mut b, &zero), Err(DropReason::Replay), "{suite}");
        assert_eq!(open(&mut b, &straggler).unwrap(), b"straggler", "{suite}");
        // Sent the other way round too.
        assert_eq!(open(&mut a, &seal(&mut b, b"back")).unwrap(), b"back", "{suite}");
        b.retire_previous().unwrap();
        assert_eq!(open(&mut b, &straggler), Err(DropReason::UnknownEpoch), "{suite}");
        // A packet of the run's first key names epoch 0 but is not of this key.
        if authenticated(suite) {
            assert_eq!(
                open(&mut b, &first_key_packets[2]),
                Err(DropReason::BadMac),
                "{suite}"
            );
        }
    }
}

/// A queue's ids keep its number in the top byte across epochs; another queue's datagram
/// is still WrongQueue, whatever its epoch.
#[test]
fn queues_keep_their_slice_across_epochs() {
    for suite in [CipherSuite::None, CipherSuite::AesGcm { key: KeyBits::Aes128 }] {
        let key = StaticKey::generate().unwrap();
        let imp = auto();
        let mut a3 = Endpoint::for_queue(suite, imp, &key, KeyDirection::Normal, 3).unwrap();
        let mut b3 = Endpoint::for_queue(suite, imp, &key, KeyDirection::Inverse, 3).unwrap();
        let mut b4 = Endpoint::for_queue(suite, imp, &key, KeyDirection::Inverse, 4).unwrap();
        assert_eq!(seal(&mut a3, b"x")[..8], [3, 0, 0, 0, 0, 0, 0, 1]);
        install_and_switch(&mut a3, &mut b3);
        let d = seal(&mut a3, b"y");
        assert_eq!(d[..8], [3, 1, 0, 0, 0, 0, 0, 1], "{suite}");
        assert_eq!(open(&mut b4, &d), Err(DropReason::WrongQueue), "{suite}");
        assert_eq!(open(&mut b3, &d).unwrap(), b"y", "{suite}");
    }
}

#[test]
fn unknown_epoch_is_counted_under_its_own_name() {
    assert!(DropReason::ALL.contains(&DropReason::UnknownEpoch));
    assert_eq!(DropReason::UnknownEpoch.name(), "unknown_epoch");
    let mut drops = DropCounters::default();
    drops.count(DropReason::UnknownEpoch);
    let mut sum = DropCounters::default();
    sum.add(&drops);
    sum.add(&drops);
    assert_eq!(sum.unknown_epoch, 2);
    assert_eq!(sum.get(DropReason::UnknownEpoch), 2);
    assert_eq!(sum.total(), 2);
}
