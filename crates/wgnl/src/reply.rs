//! What a device says about its peers: the last handshake and the bytes each way, as
//! `wg show` prints them (from a generic netlink get reply, or the UAPI `get=1` reply).

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use netlink_packet_wireguard::{WireguardAttribute, WireguardMessage, WireguardPeerAttribute};

use crate::key::PublicKey;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStats {
    pub public_key: PublicKey,
    pub endpoint: Option<SocketAddr>,
    /// None: no handshake yet (the kernel reports 0 seconds).
    pub last_handshake: Option<SystemTime>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// The peers in one get reply message (a dump may spread peers over several messages).
pub fn peers(message: &WireguardMessage) -> Vec<PeerStats> {
    let mut out = Vec::new();
    for attr in &message.attributes {
        let WireguardAttribute::Peers(peers) = attr else {
            continue;
        };
        for peer in peers {
            let mut stats = PeerStats {
                public_key: PublicKey([0; 32]),
                endpoint: None,
                last_handshake: None,
                rx_bytes: 0,
                tx_bytes: 0,
            };
            for a in peer.iter() {
                match a {
                    WireguardPeerAttribute::PublicKey(k) => stats.public_key = PublicKey(*k),
                    WireguardPeerAttribute::Endpoint(e) => stats.endpoint = Some(*e),
                    WireguardPeerAttribute::LastHandshake(t) => {
                        stats.last_handshake = handshake_time(t.seconds, t.nano_seconds)
                    }
                    WireguardPeerAttribute::RxBytes(n) => stats.rx_bytes = *n,
                    WireguardPeerAttribute::TxBytes(n) => stats.tx_bytes = *n,
                    _ => {}
                }
            }
            out.push(stats);
        }
    }
    out
}

/// A handshake time as both interfaces give it; (0, 0) means none yet.
pub(crate) fn handshake_time(seconds: i64, nanos: i64) -> Option<SystemTime> {
    if seconds <= 0 && nanos <= 0 {
        return None;
    }
    let d =
        Duration::from_secs(seconds.max(0) as u64) + Duration::from_nanos(nanos.clamp(0, 999_999_999) as u64);
    Some(SystemTime::UNIX_EPOCH + d)
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{Emitable, ParseableParametrized};
    use netlink_packet_generic::GenlHeader;
    use netlink_packet_wireguard::{WireguardCmd, WireguardPeer, WireguardTimeSpec};

    use super::*;

    #[test]
    fn counters_and_handshake_survive_the_wire_format() {
        let reply = WireguardMessage {
            cmd: WireguardCmd::GetDevice,
            attributes: vec![
                WireguardAttribute::IfName("ipl-wg-a".into()),
                WireguardAttribute::Peers(vec![
                    WireguardPeer(vec![
                        WireguardPeerAttribute::PublicKey([7; 32]),
                        WireguardPeerAttribute::LastHandshake(WireguardTimeSpec {
                            seconds: 1_700_000_000,
                            nano_seconds: 5,
                        }),
                        WireguardPeerAttribute::RxBytes(1234),
                        WireguardPeerAttribute::TxBytes(5678),
                    ]),
                    WireguardPeer(vec![
                        WireguardPeerAttribute::PublicKey([8; 32]),
                        WireguardPeerAttribute::LastHandshake(WireguardTimeSpec::default()),
                    ]),
                ]),
            ],
        };
        let mut buf = vec![0u8; reply.buffer_len()];
        reply.emit(&mut buf);
        let header = GenlHeader { cmd: 0, version: 1 };
        let parsed = WireguardMessage::parse_with_param(&buf[..], header).unwrap();
        let p = peers(&parsed);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].rx_bytes, p[0].tx_bytes), (1234, 5678));
        assert_eq!(
            p[0].last_handshake,
            Some(SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5))
        );
        assert_eq!(p[1].public_key, PublicKey([8; 32]));
        assert_eq!(p[1].last_handshake, None, "0 s is 'no handshake yet'");
    }
}
