//! WireGuard backends: the same protocol (Noise IK handshake, ChaCha20-Poly1305 data) from
//! two implementations, each end a device in its namespace with the other end as its one
//! peer, the payload flowing between the inner addresses.
//!
//! * [`kernel`] (`--backend wireguard`): the kernel's module; link over rtnetlink, keys and
//!   peer over generic netlink (crate `wgnl`).
//! * [`go`] (`--backend wireguard-go`): wireguard-go (Debian 13's build where
//!   `lab/wireguard-go.sh` installed it), one process per end, configured over its UAPI
//!   socket.
//! * [`boring`] (`--backend boringtun`): the `boringtun` crate's device in this process,
//!   one per end, configured over the same UAPI.
//!
//! Both ends' x25519 key pairs are fresh per run ([`Keys`], in the run's secrets). The end
//! started second (b) sends one datagram through its device, which starts the handshake,
//! and waits for it: a run whose ends cannot agree (wrong key) fails there (exit 1) with
//! nothing left, instead of timing out in the transfer. Between two hosts they are refused:
//! the public keys would have to cross the control channel (not built yet).
//!
//! Evidence (`backend_details.wireguard` / `backend_details.wireguard-go`,
//! [`WireguardEvidence`]): `implementation`, `cipher`, `listen_port`, `mtu`, `handshake_s`
//! (from b's first datagram to the handshake b's device reports), and per end the peer's
//! `rx_bytes`/`tx_bytes` as the device counts them after the transfers, and for wireguard-go
//! its process's `cpu` (all its threads), for boringtun its device threads' `cpu`; for
//! wireguard-go also `program` (the binary's path, `--version`, package, note).

pub mod boring;
mod evidence;
pub mod go;
pub mod kernel;
pub mod rate;
pub mod rekey;
mod uapi;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

pub use evidence::local_evidence;
pub use model::evidence::{WireguardEnd, WireguardEvidence};
use model::RunPlan;
use wgnl::{AllowedIp, DeviceConfig, KeyPair, PeerConfig, PeerStats};

use super::site::{Side, Site};
use crate::error::{LabError, LabResult};

/// WireGuard's customary port, on both outer addresses.
pub const PORT: u16 = 51820;
/// Outer IPv4 (20) + UDP (8) + WireGuard's data header (16) and tag (16).
pub const OVERHEAD: u32 = 60;
/// Long enough for a TCG-emulated VM, where one handshake takes a while.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);

/// Both ends' key pairs, made once per run.
pub struct Keys {
    pub a: KeyPair,
    pub b: KeyPair,
}

impl Keys {
    pub fn generate() -> LabResult<Keys> {
        let pair = || KeyPair::generate().map_err(LabError::failed);
        Ok(Keys {
            a: pair()?,
            b: pair()?,
        })
    }

    fn of(&self, side: Side) -> &KeyPair {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }
}

/// The inner MTU: the link's less WireGuard's overhead, so packets are never fragmented.
pub fn inner_mtu(plan: &RunPlan) -> u32 {
    // OVERHEAD counts IPv4's 20-byte header; IPv6's is 20 bytes longer.
    let ipv6 = (plan.link().addressing.family() == model::Family::Ipv6) as u32 * 20;
    plan.link().mtu - OVERHEAD - ipv6
}

/// An end's device name. wireguard-go's UAPI socket (/var/run/wireguard/NAME.sock) is not
/// namespaced, so the name carries this process's id (15 characters at most).
pub fn ifname(side: Side) -> String {
    format!("ipl-wg{}-{}", std::process::id() % 10_000_000, side.name())
}

/// What `site`'s device is told: its key, the port, the other end as its one peer.
pub fn device_config(plan: &RunPlan, keys: &Keys, site: &Site<'_>, ifname: &str) -> DeviceConfig {
    let other = site.side.other();
    DeviceConfig {
        ifname: ifname.to_string(),
        key: keys.of(site.side).clone(),
        listen_port: PORT,
        peer: PeerConfig {
            public_key: keys.of(other).public,
            endpoint: SocketAddr::new(site.hosts.of(other), PORT),
            allowed_ips: peer_allowed_ips(plan, site.side),
        },
    }
}

/// What `side`'s device accepts from its one peer: the peer's inner address as a host
/// (/32, /128), nothing wider. WireGuard drops a decrypted packet from any other inner
/// source; it does not check the destination (docs/two-hosts.md, "What a key holder can
/// reach").
pub fn peer_allowed_ips(plan: &RunPlan, side: Side) -> Vec<AllowedIp> {
    let (_, peer_inner) = inner_addrs(plan, side);
    vec![AllowedIp {
        addr: peer_inner,
        prefix_len: if peer_inner.is_ipv4() { 32 } else { 128 },
    }]
}

/// This end's inner address and the peer's.
pub fn inner_addrs(plan: &RunPlan, side: Side) -> (IpAddr, IpAddr) {
    let ad = plan.link().addressing;
    match side {
        Side::A => (ad.inner_a, ad.inner_b),
        Side::B => (ad.inner_b, ad.inner_a),
    }
}

/// How often an end asks its device whether the handshake happened.
pub const POLL: Duration = Duration::from_millis(20);

/// Sends one datagram to the peer's inner address from inside `site`'s namespace: the
/// device starts a handshake for it. Returns when it was sent.
pub fn start_handshake(plan: &RunPlan, site: &Site<'_>, what: &str) -> LabResult<Instant> {
    let (_, peer_inner) = inner_addrs(plan, site.side);
    let started = Instant::now();
    site.namespace
        .run(move || {
            let any = model::Family::of(peer_inner).unspecified();
            let s = std::net::UdpSocket::bind((any, 0))?;
            // The discard port: nothing needs to answer, the handshake is the point.
            s.send_to(b"ipsec-lab: start the handshake", (peer_inner, 9))
        })?
        .map_err(|e| LabError::failed(anyhow::anyhow!("{what}: send the first datagram: {e}")))?;
    Ok(started)
}

/// Some(time taken) once the device reports a handshake with its peer; an error past the
/// timeout (the ends' keys do not match, or a packet cannot pass).
pub fn handshake_done(started: Instant, peers: &[PeerStats], what: &str) -> LabResult<Option<Duration>> {
    if peers.iter().any(|p| p.last_handshake.is_some()) {
        return Ok(Some(started.elapsed()));
    }
    if started.elapsed() > HANDSHAKE_TIMEOUT {
        return Err(LabError::failed(anyhow::anyhow!(
            "{what}: no WireGuard handshake between the ends within {HANDSHAKE_TIMEOUT:?}: do their keys \
             match (each end's peer key must be the other end's public key)?"
        )));
    }
    Ok(None)
}

/// One end's evidence from its device's peer counters.
pub fn end_from_stats(side: Side, interface: &str, peers: &[PeerStats]) -> LabResult<WireguardEnd> {
    let p = peers
        .first()
        .ok_or_else(|| LabError::failed(anyhow::anyhow!("WireGuard device {interface} reports no peer")))?;
    Ok(WireguardEnd {
        side: side.name().to_string(),
        interface: interface.to_string(),
        rx_bytes: p.rx_bytes,
        tx_bytes: p.tx_bytes,
        last_handshake_age_s: p.last_handshake.map(wgnl::uapi::since),
        cpu: None,
        handshake_s: None,
    })
}

/// Both ends' counters as one local run's evidence.
pub fn new_evidence(plan: &RunPlan, implementation: String, ends: [WireguardEnd; 2]) -> WireguardEvidence {
    WireguardEvidence {
        implementation,
        cipher: "chacha20-poly1305".into(),
        listen_port: PORT,
        mtu: inner_mtu(plan),
        handshake_s: ends.iter().find_map(|e| e.handshake_s),
        ends: ends.into_iter().map(|e| (e.side.clone(), e)).collect(),
        program: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each end accepts exactly the other end's inner address, IPv4 and IPv6: a wider
    /// allowed-ips would let the peer's key pose as other sources (issue 22).
    #[test]
    fn allowed_ips_are_the_peers_inner_host_address_only() {
        for family in [model::Family::Ipv4, model::Family::Ipv6] {
            let plan = model::RunRequest {
                backend: model::Backend::Wireguard,
                family,
                ..Default::default()
            }
            .validate()
            .unwrap();
            let ad = plan.link().addressing;
            let host = if family == model::Family::Ipv4 { 32 } else { 128 };
            for (side, peer) in [(Side::A, ad.inner_b), (Side::B, ad.inner_a)] {
                let allowed = peer_allowed_ips(&plan, side);
                assert_eq!(allowed.len(), 1, "{family} {side:?}");
                assert_eq!(
                    (allowed[0].addr, allowed[0].prefix_len),
                    (peer, host),
                    "{family} {side:?}"
                );
            }
        }
    }
}
