//! What a WireGuard device is told: its private key, its UDP port, and its one peer.

use std::net::{IpAddr, SocketAddr};

use crate::key::{KeyPair, PublicKey};

/// An allowed-ips entry: traffic to (and from) this prefix belongs to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowedIp {
    pub addr: IpAddr,
    pub prefix_len: u8,
}

#[derive(Debug, Clone)]
pub struct PeerConfig {
    pub public_key: PublicKey,
    pub endpoint: SocketAddr,
    /// Replaces the peer's allowed-ips, as `wg set ... allowed-ips` does.
    pub allowed_ips: Vec<AllowedIp>,
}

/// A device's configuration, as `wg set IFNAME listen-port P private-key K peer ...` gives it.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub ifname: String,
    pub key: KeyPair,
    pub listen_port: u16,
    pub peer: PeerConfig,
}
