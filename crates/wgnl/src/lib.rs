//! WireGuard configuration for the lab, with no IO in the protocol parts.
//!
//! * [`key`]: x25519 key pairs, fresh per run.
//! * [`config`]: one typed device configuration (our key, port, one peer).
//! * [`request`]: that configuration as the generic netlink `WG_CMD_SET_DEVICE` request the
//!   kernel takes, and the `WG_CMD_GET_DEVICE` dump request; built with
//!   `netlink-packet-wireguard` and tested byte for byte against what `wg set` / `wg show`
//!   send (tests/fixtures/wireguard).
//! * [`reply`]: the peers' handshake time and rx/tx counters from a get reply.
//! * [`uapi`]: the same configuration as the cross-platform UAPI text protocol that
//!   wireguard-go serves on its socket, and that protocol's `get` reply parsed.
//! * [`handle`]: a generic netlink connection (crate `genetlink`) that sends the requests.
//!   The socket belongs to the namespace of the thread that opens it.
//!
//! Leaves out: creating the link (rtnetlink, the caller's) and which peer is which.

pub mod config;
pub mod handle;
pub mod key;
pub mod reply;
pub mod request;
pub mod uapi;

pub use config::{AllowedIp, DeviceConfig, PeerConfig};
pub use handle::WgHandle;
pub use key::{KeyPair, PublicKey};
pub use reply::PeerStats;

#[derive(Debug, thiserror::Error)]
pub enum WgError {
    #[error("random key: {0}")]
    Random(String),
    #[error("open a generic netlink socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error(
        "the kernel has no WireGuard generic netlink family (module wireguard not loaded or not built): {0}"
    )]
    NoFamily(String),
    #[error("{what}: {source}")]
    Kernel {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {detail}")]
    Protocol { what: String, detail: String },
}

/// The one `wg set` command both captured fixtures (netlink and UAPI) were taken from.
#[cfg(test)]
pub(crate) mod captured {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    use crate::{AllowedIp, DeviceConfig, KeyPair, PeerConfig, PublicKey};

    /// 32 bytes counting up from `start`: the fixtures' keys.
    pub fn pattern(start: u8) -> [u8; 32] {
        std::array::from_fn(|i| start + i as u8)
    }

    /// `wg set ipl-wg-a private-key (pattern 0) listen-port 51820 peer (pattern 0x20)
    /// endpoint 198.18.0.2:51820 allowed-ips 198.19.0.2/32`.
    pub fn config() -> DeviceConfig {
        DeviceConfig {
            ifname: "ipl-wg-a".into(),
            key: KeyPair::from_private(pattern(0x00)),
            listen_port: 51820,
            peer: PeerConfig {
                public_key: PublicKey(pattern(0x20)),
                endpoint: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)), 51820),
                allowed_ips: vec![AllowedIp {
                    addr: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
                    prefix_len: 32,
                }],
            },
        }
    }
}
