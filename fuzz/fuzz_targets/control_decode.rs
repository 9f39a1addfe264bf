//! The control-message decoder (what runs on every decrypted message): any input must give
//! Ok or Err, never a panic, and whatever decodes must re-encode to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = control::message::decode(data) {
        let again = control::message::encode(&msg).expect("a decoded message encodes");
        assert_eq!(control::message::decode(&again).expect("re-decodes"), msg);
    }
    let _ = control::frame::split(data, control::frame::MAX_FRAME);
});
