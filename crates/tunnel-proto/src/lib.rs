//! The userspace tunnel's data channel, sans-IO: packet format, per-packet crypto, packet ids
//! and the replay window, modelled on OpenVPN's static-key data channel.
//!
//! The caller owns every buffer and every socket: [`Endpoint::encap`] turns a payload in a
//! buffer into a datagram to send, [`Endpoint::decap`] turns a received datagram back into a
//! payload or a [`DropReason`] to count. Keys come from one random [`StaticKey`] per run.
//! New keys can be installed while traffic flows ([`Endpoint::install_next`], then
//! [`Endpoint::switch_send`] and [`Endpoint::retire_previous`]; the order is in [`epoch`]).
//! [`InnerAddresses`] then decides whether a decrypted packet may be delivered (only from the
//! peer's inner address to this end's) and whether a packet from TUN may be sent.
//!
//! Leaves out: all I/O (TUN devices, sockets, threads: the `tunnel` crate) and the cipher
//! implementations themselves (the `crypto` crate; this crate only frames their output).

mod engine;
pub mod epoch;
pub mod inner;
pub mod keys;
pub mod packet;
pub mod replay;

pub use engine::EngineError;
pub use epoch::{Epochs, RekeyError, MAX_COUNTER};
pub use inner::{InnerAddressError, InnerAddresses};
pub use keys::{KeyDirection, KeyError, StaticKey, STATIC_KEY_LEN};
pub use packet::{
    DropCounters, DropReason, EncapError, Endpoint, Implementation, SetupError, HEADROOM, MAX_QUEUES,
    TAILROOM,
};
pub use replay::{ReplayError, ReplayWindow, WINDOW};
