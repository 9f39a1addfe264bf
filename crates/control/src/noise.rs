//! The handshake and the session, sans-IO: the caller moves the bytes. It deals in bytes
//! only; what they mean is [`crate::message`]'s business, joined to this in [`crate::channel`].
//!
//! Pattern `Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s`, chosen because:
//! * the two hosts share only the pre-shared key (no static key pairs to distribute), and
//!   NN*psk* is the Noise pattern for exactly that;
//! * `psk0` mixes the key in before the first message, whose (empty) payload is then
//!   encrypted and tagged under it: a responder refuses a wrong key on the first message,
//!   before anything else the peer sends is read, and an initiator refuses a responder
//!   without the key on the second;
//! * fresh ephemeral keys on both sides give each connection its own session keys (forward
//!   secrecy for the SA keys sent inside), and a replayed first message yields nothing: the
//!   replayer cannot compute the session keys without the initiator's ephemeral secret.
//!
//! The prologue names the protocol, so a handshake with a different program fails too.

use snow::{Builder, HandshakeState, TransportState};
use zeroize::Zeroizing;

use crate::frame::MAX_FRAME;
use crate::{ControlError, Psk};

pub const PATTERN: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
const PROLOGUE: &[u8] = b"ipsec-lab control channel";
/// Bytes each encrypted message carries besides its plaintext (the Poly1305 tag).
pub const TAG_LEN: usize = 16;
/// Largest plaintext one sealed message may carry: a frame's worth less the tag.
pub const MAX_PLAINTEXT: usize = MAX_FRAME - TAG_LEN;
/// Length of either handshake message: an X25519 ephemeral key and the tag of the empty payload.
pub const HANDSHAKE_MESSAGE_LEN: usize = 32 + TAG_LEN;

fn builder(psk: &Psk) -> Result<Builder<'_>, ControlError> {
    let params = PATTERN.parse().map_err(ControlError::Noise)?;
    Builder::new(params)
        .prologue(PROLOGUE)
        .map_err(ControlError::Noise)?
        .psk(0, psk.as_bytes())
        .map_err(ControlError::Noise)
}

/// The connecting side, between its first message and the responder's answer.
pub struct Initiator {
    state: HandshakeState,
}

impl Initiator {
    /// Starts a handshake; returns the first message to send.
    pub fn start(psk: &Psk) -> Result<(Initiator, Vec<u8>), ControlError> {
        let mut state = builder(psk)?.build_initiator().map_err(ControlError::Noise)?;
        let mut out = vec![0u8; 256];
        let n = state.write_message(&[], &mut out).map_err(ControlError::Noise)?;
        out.truncate(n);
        Ok((Initiator { state }, out))
    }

    /// Reads the responder's answer. Fails with [`ControlError::Authentication`] when the
    /// responder does not hold the same key.
    pub fn finish(mut self, answer: &[u8]) -> Result<Session, ControlError> {
        let mut payload = [0u8; 64];
        // Both handshake messages are one ephemeral key and a tag: an answer of another length
        // comes from another program (or another protocol version).
        if answer.len() != HANDSHAKE_MESSAGE_LEN {
            return Err(ControlError::NotIpsecLab);
        }
        self.state
            .read_message(answer, &mut payload)
            .map_err(|_| ControlError::Authentication)?;
        Session::from_handshake(self.state)
    }
}

/// The accepting side.
pub struct Responder;

impl Responder {
    /// Reads the initiator's first message and returns the session and the answer to send.
    /// A wrong key fails here, on the first message: nothing else from the peer is read.
    pub fn respond(psk: &Psk, first: &[u8]) -> Result<(Session, Vec<u8>), ControlError> {
        let mut state = builder(psk)?.build_responder().map_err(ControlError::Noise)?;
        let mut payload = [0u8; 64];
        state
            .read_message(first, &mut payload)
            .map_err(|_| ControlError::Authentication)?;
        let mut out = vec![0u8; 256];
        let n = state.write_message(&[], &mut out).map_err(ControlError::Noise)?;
        out.truncate(n);
        Ok((Session::from_handshake(state)?, out))
    }
}

/// An established session: seals and opens messages in order (TCP keeps the order; the
/// Noise nonce makes a replayed, dropped or reordered message fail to open).
pub struct Session {
    transport: TransportState,
}

impl Session {
    fn from_handshake(state: HandshakeState) -> Result<Session, ControlError> {
        if !state.is_handshake_finished() {
            return Err(ControlError::Authentication);
        }
        Ok(Session {
            transport: state.into_transport_mode().map_err(ControlError::Noise)?,
        })
    }

    /// Encrypts a plaintext of at most [`MAX_PLAINTEXT`] bytes into a frame body.
    pub fn seal(&mut self, plain: &[u8]) -> Result<Vec<u8>, ControlError> {
        if plain.len() > MAX_PLAINTEXT {
            return Err(ControlError::Oversized {
                len: plain.len(),
                max: MAX_PLAINTEXT,
            });
        }
        let mut out = vec![0u8; plain.len() + TAG_LEN];
        let n = self
            .transport
            .write_message(plain, &mut out)
            .map_err(ControlError::Noise)?;
        out.truncate(n);
        debug_assert!(out.len() <= MAX_FRAME);
        Ok(out)
    }

    /// Decrypts a frame body. The plaintext (which may hold keys) is wiped when dropped.
    pub fn open(&mut self, body: &[u8]) -> Result<Zeroizing<Vec<u8>>, ControlError> {
        if body.len() > MAX_FRAME {
            return Err(ControlError::Oversized {
                len: body.len(),
                max: MAX_FRAME,
            });
        }
        let mut plain = Zeroizing::new(vec![0u8; body.len()]);
        let n = self
            .transport
            .read_message(body, &mut plain)
            .map_err(|_| ControlError::Decrypt)?;
        plain.truncate(n);
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: &Psk, b: &Psk) -> Result<(Session, Session), ControlError> {
        let (init, first) = Initiator::start(a)?;
        let (resp, answer) = Responder::respond(b, &first)?;
        Ok((init.finish(&answer)?, resp))
    }

    #[test]
    fn same_key_gives_a_working_session_both_ways() {
        let k = Psk::generate().unwrap();
        let (mut c, mut s) = pair(&k, &k).unwrap();
        for _ in 0..3 {
            let body = c.seal(b"finish").unwrap();
            assert_eq!(body.len(), 6 + TAG_LEN);
            assert_eq!(&s.open(&body).unwrap()[..], b"finish");
            let body = s.seal(b"busy").unwrap();
            assert_eq!(&c.open(&body).unwrap()[..], b"busy");
        }
    }

    #[test]
    fn plaintexts_up_to_a_frame_less_the_tag_are_sealed() {
        let k = Psk::generate().unwrap();
        let (mut c, mut s) = pair(&k, &k).unwrap();
        let body = c.seal(&vec![7; MAX_PLAINTEXT]).unwrap();
        assert_eq!(body.len(), MAX_FRAME);
        assert_eq!(s.open(&body).unwrap().len(), MAX_PLAINTEXT);
        assert!(matches!(
            c.seal(&vec![7; MAX_PLAINTEXT + 1]),
            Err(ControlError::Oversized { .. })
        ));
    }

    #[test]
    fn wrong_key_is_refused_on_the_first_message() {
        let (a, b) = (Psk::generate().unwrap(), Psk::generate().unwrap());
        let (_init, first) = Initiator::start(&a).unwrap();
        assert_eq!(first.len(), 48);
        assert!(matches!(
            Responder::respond(&b, &first),
            Err(ControlError::Authentication)
        ));
    }

    #[test]
    fn initiator_refuses_a_responder_without_the_key() {
        // A responder that knows another key cannot produce an answer the initiator accepts,
        // even when it ignores the failure of the first message.
        let (a, b) = (Psk::generate().unwrap(), Psk::generate().unwrap());
        let (init, _first) = Initiator::start(&a).unwrap();
        let (_other, foreign_first) = Initiator::start(&b).unwrap();
        let (_s, foreign_answer) = Responder::respond(&b, &foreign_first).unwrap();
        assert!(matches!(
            init.finish(&foreign_answer),
            Err(ControlError::Authentication)
        ));
    }

    #[test]
    fn tampered_replayed_or_reordered_messages_fail_to_open() {
        let k = Psk::generate().unwrap();
        let (mut c, mut s) = pair(&k, &k).unwrap();
        let mut body = c.seal(b"finish").unwrap();
        body[3] ^= 1;
        assert!(matches!(s.open(&body), Err(ControlError::Decrypt)));

        let (mut c, mut s) = pair(&k, &k).unwrap();
        let first = c.seal(b"first").unwrap();
        let second = c.seal(b"second").unwrap();
        assert!(matches!(s.open(&second), Err(ControlError::Decrypt)));
        let (mut c2, mut s2) = pair(&k, &k).unwrap();
        let b1 = c2.seal(b"once").unwrap();
        s2.open(&b1).unwrap();
        assert!(matches!(s2.open(&b1), Err(ControlError::Decrypt)), "replay");
        drop((first, s));
    }

    #[test]
    fn garbage_first_messages_are_refused_without_panic() {
        let k = Psk::generate().unwrap();
        for len in [0usize, 1, 31, 32, 47, 48, 49, 200] {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert!(Responder::respond(&k, &junk).is_err(), "len {len}");
        }
    }
}
