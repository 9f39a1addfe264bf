//! Why a spec cannot be built: each variant names the cause and, where there is one, the fix.

use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("the xfrm backend needs an encrypting suite, not `none`")]
    Unencrypted,
    #[error("AES-192-GCM is not offered: use aes-128-gcm or aes-256-gcm")]
    Gcm192,
    #[error("chacha20-poly1305 is not offered for ESP in this lab (WireGuard backends carry it)")]
    ChaCha,
    #[error("{what} key is {got} bytes, expected {expected}")]
    KeyLength {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("source and destination are of different address families")]
    MixedFamilies,
    #[error("prefix {addr}/{len} is longer than its address")]
    PrefixLength { addr: IpAddr, len: u8 },
    #[error("a selector port needs a protocol (tcp or udp)")]
    PortWithoutProtocol,
    #[error("an outbound per-CPU SA has no replay window, not {0}: the kernel refuses one")]
    OutboundReplayWindow(u8),
    #[error("the OS random number generator failed: {0}")]
    Rng(String),
}
