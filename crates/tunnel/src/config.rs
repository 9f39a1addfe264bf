//! Where one end of the tunnel sits, how it batches its I/O, and what can go wrong.

use std::io;
use std::net::{IpAddr, SocketAddr};

use model::CipherSuite;
use netns::NetnsError;
use tunnel_proto::Endpoint;

pub use model::evidence::Batching;

/// Datagrams the send path gathers into one batch, at most.
pub const BATCH: usize = 64;

/// Packets of `payload` bytes the send path encrypts together at most: a batch ends when
/// its slots are full or the next datagram would not fit one GSO send. What a crypto
/// ceiling times CBC encryption in, so that it bounds the tunnel.
pub fn largest_batch(suite: CipherSuite, payload: usize) -> usize {
    let datagram = payload + Endpoint::max_overhead(suite);
    (udpbatch::GSO_MAX_BYTES / datagram.max(1)).clamp(1, BATCH)
}

/// Largest inner (TUN) MTU whose datagrams fit a link of `link_mtu` without fragmenting:
/// link MTU less IPv4 (20) and UDP (8) headers less the suite's overhead. CBC rounds up to
/// whole blocks with at least one byte of padding, so its room is counted in blocks.
pub fn inner_mtu(link_mtu: u32, suite: CipherSuite) -> u32 {
    inner_mtu_over(link_mtu, suite, model::Family::Ipv4)
}

/// [`inner_mtu`] with the datagrams carried over `outer` (IPv6's header is 40 bytes).
pub fn inner_mtu_over(link_mtu: u32, suite: CipherSuite, outer: model::Family) -> u32 {
    let room = link_mtu.saturating_sub(outer.ip_header_len() as u32 + 8);
    match suite {
        CipherSuite::AesCbc { hmac, .. } => {
            let mac = if hmac == model::Hmac::Sha256 { 32 } else { 0 };
            let ct = room.saturating_sub(8 + 16 + mac);
            (ct / 16 * 16).saturating_sub(1)
        }
        _ => room.saturating_sub(Endpoint::max_overhead(suite) as u32),
    }
}

/// Where one end of the tunnel sits.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// TUN device name (at most 15 bytes; the lab's start with `ipl`).
    pub tun_name: String,
    /// Outer address the UDP socket binds (on the veth), IPv4 or IPv6.
    pub local: SocketAddr,
    /// The other end's outer address (the same family as `local`).
    pub peer: SocketAddr,
    /// Inner address of the TUN device, and its prefix (the kernel routes the prefix into it).
    pub inner: IpAddr,
    pub prefix_len: u8,
    /// The peer's inner address: the only source this end delivers decrypted packets from
    /// and the only destination it sends to ([`tunnel_proto::InnerAddresses`]).
    pub peer_inner: IpAddr,
    pub inner_mtu: u32,
    /// Core to pin the thread to; None leaves it to the scheduler (it is still one thread).
    pub cpu: Option<usize>,
    pub batching: Batching,
    /// None: a single-queue TUN device of its own. Some(i): queue i of a multi-queue device
    /// (see [`crate::MultiQueue`]); queue 0 creates and configures it, the others attach.
    pub queue: Option<u16>,
}

impl TunnelConfig {
    /// The thread's name: the TUN device's, with `/i` for queue i of a multi-queue device.
    pub fn thread_name(&self) -> String {
        match self.queue {
            None => self.tun_name.clone(),
            Some(i) => format!("{}/{i}", self.tun_name),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error(transparent)]
    Namespace(#[from] NetnsError),
    #[error("{step} for tunnel {tun}: {source}")]
    Setup {
        step: String,
        tun: String,
        #[source]
        source: io::Error,
    },
    #[error("tunnel {tun}: {during}: {source}")]
    Io {
        during: &'static str,
        tun: String,
        #[source]
        source: io::Error,
    },
    #[error("tunnel {tun}: {source}")]
    InnerAddresses {
        tun: String,
        #[source]
        source: tunnel_proto::InnerAddressError,
    },
    #[error("tunnel thread {tun} panicked")]
    Panicked { tun: String },
}
