//! What a server does with the first bytes of an unauthenticated peer: the handshake's
//! first message, and (for a session with a fixed key) an arbitrary transport frame.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let psk = control::Psk::from_bytes([7; 32]);
    let _ = control::Responder::respond(&psk, data);
    let (init, first) = control::Initiator::start(&psk).expect("initiator");
    let (mut server, answer) = control::Responder::respond(&psk, &first).expect("responder");
    let _client = init.finish(&answer).expect("handshake");
    assert!(server.open(data).is_err() || data.len() > 16);
});
