//! The generic netlink requests, built from the typed configuration with
//! `netlink-packet-wireguard`. They carry what `wg set` sends, attribute for attribute and in
//! its order (checked byte for byte against captures in tests/fixtures/wireguard).

use std::net::IpAddr;

use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_generic::GenlMessage;
use netlink_packet_wireguard::{
    WireguardAddressFamily, WireguardAllowedIp, WireguardAllowedIpAttr, WireguardAttribute, WireguardCmd,
    WireguardMessage, WireguardPeer, WireguardPeerAttribute, WireguardPeerFlags,
};

use crate::config::DeviceConfig;

pub type Request = NetlinkMessage<GenlMessage<WireguardMessage>>;

/// `WG_CMD_SET_DEVICE`: private key, listen port, and the one peer with its endpoint and
/// allowed-ips (replacing any it had). Flags as `wg set`: request and ack.
pub fn set_device(config: &DeviceConfig) -> Request {
    let peer = &config.peer;
    let allowed = peer
        .allowed_ips
        .iter()
        .map(|a| {
            let family = match a.addr {
                IpAddr::V4(_) => WireguardAddressFamily::Ipv4,
                IpAddr::V6(_) => WireguardAddressFamily::Ipv6,
            };
            WireguardAllowedIp(vec![
                WireguardAllowedIpAttr::Family(family),
                WireguardAllowedIpAttr::IpAddr(a.addr),
                WireguardAllowedIpAttr::Cidr(a.prefix_len),
            ])
        })
        .collect();
    let attributes = vec![
        WireguardAttribute::IfName(config.ifname.clone()),
        WireguardAttribute::PrivateKey(*config.key.private()),
        WireguardAttribute::ListenPort(config.listen_port),
        WireguardAttribute::Peers(vec![WireguardPeer(vec![
            WireguardPeerAttribute::PublicKey(peer.public_key.0),
            WireguardPeerAttribute::Endpoint(peer.endpoint),
            WireguardPeerAttribute::Flags(WireguardPeerFlags::ReplaceAllowedIps),
            WireguardPeerAttribute::AllowedIps(allowed),
        ])]),
    ];
    message(WireguardCmd::SetDevice, attributes, NLM_F_REQUEST | NLM_F_ACK)
}

/// `WG_CMD_GET_DEVICE` for `ifname`: a dump, as `wg show` asks for it.
pub fn get_device(ifname: &str) -> Request {
    message(
        WireguardCmd::GetDevice,
        vec![WireguardAttribute::IfName(ifname.to_string())],
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP,
    )
}

fn message(cmd: WireguardCmd, attributes: Vec<WireguardAttribute>, flags: u16) -> Request {
    let mut msg = NetlinkMessage::from(GenlMessage::from_payload(WireguardMessage { cmd, attributes }));
    msg.header.flags = flags;
    msg
}

/// The request's bytes as sent to a kernel whose WireGuard family has id `family_id`.
pub fn to_bytes(mut request: Request, family_id: u16, sequence: u32) -> Vec<u8> {
    if let NetlinkPayload::InnerMessage(genl) = &mut request.payload {
        genl.set_resolved_family_id(family_id);
    }
    request.header.sequence_number = sequence;
    request.finalize();
    let mut buf = vec![0u8; request.header.length as usize];
    request.serialize(&mut buf);
    buf
}

#[cfg(test)]
mod tests {
    //! Against what wireguard-tools v1.0.20210914 (Debian 12) sent to the stock 6.1 kernel,
    //! captured with tests/fixtures/wireguard/capture.sh in the lab's VM. Every byte is
    //! compared except the sequence number (bytes 8..12, from the clock in `wg`); the family
    //! id (bytes 4..6) is the one that kernel gave WireGuard, passed in as genetlink would.
    use super::*;
    use crate::captured;

    fn fixture(name: &str) -> Vec<u8> {
        testcap::hex_fixture("wireguard", name)
    }

    fn same_but_sequence(built: &[u8], captured: &[u8]) {
        assert_eq!(built.len(), captured.len(), "length");
        assert_eq!(&built[..8], &captured[..8], "header before the sequence number");
        for (i, (b, c)) in built.iter().zip(captured).enumerate().skip(12) {
            assert_eq!(b, c, "byte {i}: built {b:#04x}, wg sent {c:#04x}");
        }
    }

    fn family_of(captured: &[u8]) -> u16 {
        u16::from_le_bytes([captured[4], captured[5]])
    }

    #[test]
    fn set_device_is_what_wg_set_sends() {
        let captured = fixture("set_device");
        let config = captured::config();
        let built = to_bytes(set_device(&config), family_of(&captured), 1);
        same_but_sequence(&built, &captured);
    }

    #[test]
    fn get_device_is_what_wg_show_sends() {
        let captured = fixture("get_device");
        let built = to_bytes(get_device("ipl-wg-a"), family_of(&captured), 1);
        same_but_sequence(&built, &captured);
    }
}
