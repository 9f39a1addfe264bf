//! The control channel between two ipsec-lab hosts: `ipsec-lab serve` on one machine and
//! `ipsec-lab run --peer` on the other agree on a run over it.
//!
//! * [`psk`]: the pre-shared key, its file format and the permission check on that file.
//! * [`noise`]: the handshake and the encrypted session, sans-IO and bytes only. Noise
//!   `NNpsk0_25519_ChaChaPoly_BLAKE2s` (via `snow`): the key is mixed into the very first
//!   message, so a peer without it is refused on that message, before anything else it
//!   sends is read; the ephemeral-ephemeral DH gives each run fresh session keys.
//! * [`message`]: the versioned messages and their bounded encoding.
//! * [`request`]: what a client may ask for, the server's limits, and the end the server
//!   decides for itself (pure checks, no IO).
//! * [`frame`]: the length prefix on the wire, checked before a body is buffered.
//! * [`text`]: text from the wire made safe for logs and terminals.
//! * [`channel`]: a small tokio layer that runs the above over a byte stream, with timeouts;
//!   it is where messages are encoded before sealing and decoded after opening.
//!
//! Leaves out: what the messages make the hosts do (crate `lab`'s `remote::server` and
//! `remote::client`), sockets and listening, and the access list.

pub mod channel;
pub mod frame;
pub mod message;
pub mod noise;
pub mod psk;
pub mod request;
pub mod text;

pub use channel::{turned_away_frame, Channel, SEND_TIMEOUT, TURNED_AWAY};
pub use message::{Envelope, KeyMaterial, Message, RefusalKind, RunKeys, XfrmKeys, VERSION};
pub use noise::{Initiator, Responder, Session};
pub use psk::{Psk, PskError};
pub use request::{
    Cidr, PeerRequest, PortRange, RequestError, ServerEnd, ServerLimits, TrialRequest, TunnelAddresses,
};

use std::time::Duration;

/// TCP port `ipsec-lab serve` listens on when `--listen` names none.
pub const DEFAULT_PORT: u16 = 5299;

/// Longest time a peer may take to complete the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the channel failed. Each variant is one cause; none carries key material.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{during}: {source}")]
    Io {
        during: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{during}: the peer closed the connection")]
    Closed { during: &'static str },
    #[error("{during}: nothing came for {seconds} s")]
    Timeout { during: &'static str, seconds: u64 },
    /// The peer took none of a message for this long: it stopped reading.
    #[error("{during}: the peer took nothing for {seconds} s (it stopped reading)")]
    Stalled { during: &'static str, seconds: u64 },
    /// The channel's deadline ([`Channel::set_deadline`]) came first.
    #[error("{during}: the run's time limit came")]
    Deadline { during: &'static str },
    #[error("a frame of {len} bytes announced, more than the limit of {max}")]
    Oversized { len: usize, max: usize },
    #[error("handshake failed: the peer does not hold the same pre-shared key (or is not ipsec-lab)")]
    Authentication,
    /// The answer to the first handshake message is not one: another program listens there.
    #[error("the peer is not an ipsec-lab server (or runs another version)")]
    NotIpsecLab,
    #[error("a message failed authentication: corrupted or forged")]
    Decrypt,
    /// `reason` may quote the peer's input (serde_json names unknown fields): it is made
    /// printable with [`text::untrusted`] where it is created.
    #[error("malformed message: {reason}")]
    Malformed { reason: String },
    /// The server turned the connection away before the handshake, and said why (a hint
    /// only: nothing authenticates it).
    #[error("the server turned this connection away before the handshake: {reason}")]
    TurnedAway { reason: String },
    #[error("protocol version {got} from the peer; this ipsec-lab speaks version {supported}: use the same release on both hosts")]
    Version { got: u16, supported: u16 },
    #[error("noise protocol: {0}")]
    Noise(#[source] snow::Error),
}
