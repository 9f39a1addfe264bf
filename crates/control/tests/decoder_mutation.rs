//! The CI-run stand-in for the cargo-fuzz target (`fuzz/`): the control-message decoder,
//! the frame splitter and the session's `open` get many random and mutated inputs from a
//! fixed seed. Each must return (Ok or Err) without panicking, and nothing that decodes may
//! re-encode to something that decodes differently.

use control::message::{decode, encode};
use control::{frame, Initiator, KeyMaterial, Message, Psk, Responder, RunKeys, XfrmKeys};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

fn seeds() -> Vec<Vec<u8>> {
    let request = control::PeerRequest {
        backend: model::Backend::Xfrm,
        suite: model::CipherSuite::AesGcm {
            key: model::KeyBits::Aes128,
        },
        crypto: model::CryptoChoice::Auto,
        bytes: 1_000_000,
        streams: 1,
        repeat: 1,
        reverse: false,
        data_port: 5201,
        seed: 1,
        link_mtu: 1500,
        tunnel_threads: 1,
        family: model::Family::Ipv6,
        encap: None,
        udp: Some(model::packets::PacketSize::Imix),
        latency: true,
    };
    [
        Message::Hello {
            request,
            keys: RunKeys {
                xfrm: Some(XfrmKeys {
                    reqid: 1,
                    spi_a_to_b: 2,
                    spi_b_to_a: 3,
                    enc: KeyMaterial::new(&[1; 32]),
                    auth: None,
                }),
                tunnel: None,
            },
        },
        Message::Receive { attempt: 3 },
        Message::ReceiveDatagrams {
            trial: control::TrialRequest {
                number: 2,
                pps: Some(1.5e5),
                seconds: 0.5,
            },
        },
        Message::DatagramsSent {
            sent: model::packets::SentDatagrams {
                sent: 10,
                refused: 0,
                seconds: 0.5,
                calls: 2,
                cpu_user_s: 0.1,
                cpu_system_s: 0.2,
            },
        },
        Message::DatagramsReceived {
            received: model::packets::ReceivedDatagrams {
                received: 9,
                reordered: 1,
                duplicates: 0,
                corrupted: 0,
                payload_bytes: 9000,
                jitter_ms: 0.01,
                receive_seconds: 0.5,
                cpu_user_s: 0.1,
                cpu_system_s: 0.1,
                wall_s: 0.7,
            },
        },
        Message::Finished {
            details: model::evidence::EndEvidence::Openvpn(model::evidence::OpenvpnProcess {
                side: "a".into(),
                pid: 7,
                cpu: model::CpuUsage::new(0.1, 0.2, 1.0),
                renegotiations: 0,
                dco: None,
            }),
        },
        Message::Busy,
    ]
    .iter()
    .map(|m| encode(m).unwrap().to_vec())
    .collect()
}

fn mutate(rng: &mut Xoshiro256PlusPlus, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..rng.random_range(1..8) {
        match rng.random_range(0..5) {
            0 if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                v[i] = rng.random();
            }
            1 if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                v.truncate(i);
            }
            2 => {
                let i = rng.random_range(0..=v.len());
                v.insert(i, *b"{}[]\":,0-9e".get(rng.random_range(0..11)).unwrap());
            }
            3 if v.len() > 2 => {
                let (a, b) = (rng.random_range(0..v.len()), rng.random_range(0..v.len()));
                v.swap(a, b);
            }
            _ => v.extend_from_slice(b"\"v\":1"),
        }
    }
    v
}

#[test]
fn decoder_survives_random_and_mutated_input() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x1a5_c0de);
    let seeds = seeds();
    let mut decoded = 0;
    for round in 0..30_000 {
        let input = if round % 4 == 0 {
            let len = rng.random_range(0..300);
            (0..len).map(|_| rng.random()).collect()
        } else {
            mutate(&mut rng, &seeds[round % seeds.len()])
        };
        if let Ok(msg) = decode(&input) {
            decoded += 1;
            let again = encode(&msg).unwrap();
            assert_eq!(decode(&again).unwrap(), msg);
        }
        let _ = frame::split(&input, frame::MAX_FRAME);
    }
    // The mutations must reach the decoder's accepting paths too, not only its refusals.
    assert!(decoded > 50, "only {decoded} mutated inputs decoded");
}

#[test]
fn session_open_survives_random_and_mutated_ciphertext() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let k = Psk::generate().unwrap();
    let (init, first) = Initiator::start(&k).unwrap();
    let (mut server, answer) = Responder::respond(&k, &first).unwrap();
    let mut client = init.finish(&answer).unwrap();
    let genuine = client.seal(&encode(&Message::Finish).unwrap()).unwrap();
    for _ in 0..5_000 {
        let input = mutate(&mut rng, &genuine);
        assert!(input == genuine || server.open(&input).is_err());
        let _ = Responder::respond(&k, &input);
    }
}
