//! What a run shows happened, beyond its figures: per backend, the SAs and their counters,
//! the tunnel threads' counts, the daemons' CPU, what IKE negotiated. These are the report's
//! `backend_details`, typed both ways: the lab writes them, a two-host client reads its
//! server's end over the control channel, and a report read back (from a VM guest) has them
//! typed again. Their sentences for the report's notes are their own `lines()`.
//!
//! Each backend's evidence is its own module ([`xfrm`], [`userspace`], [`openvpn`],
//! [`strongswan`], [`wireguard`]); the small data types the measuring crates fill in are in
//! [`common`]. Here: what a run's report carries under the backend's name ([`Evidence`]),
//! one end's ([`EndEvidence`]), and the whole `backend_details`. Leaves out how any of it is
//! measured.

pub mod common;
pub mod openvpn;
pub mod strongswan;
pub mod userspace;
pub mod wireguard;
pub mod xfrm;

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;

pub use common::{Batching, Flow, ImplementationInfo, IoErrors, Library, SaCounters, ThreadTime};
pub use openvpn::{DcoProof, OpenvpnEvidence, OpenvpnProcess};
pub use strongswan::{Algorithm, CharonRekeys, NegotiatedSa, StrongswanEvidence};
pub use userspace::{
    CryptoReference, Efficiency, Encrypting, TunnelEnd, UserspaceEndEvidence, UserspaceEvidence,
};
pub use wireguard::{GoProgram, WireguardEnd, WireguardEvidence};
pub use xfrm::{PcryptEvidence, SaEvidence, XfrmEvidence, OVERHEAD_REFERENCE_LEN};

/// A report's `backend_details`: the backend's evidence under its name, and for a two-host
/// run the path between the hosts under `remote`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendDetails {
    #[serde(flatten)]
    pub evidence: BTreeMap<Backend, Evidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<TwoHostsPath>,
}

impl BackendDetails {
    pub fn is_empty(&self) -> bool {
        self.evidence.is_empty() && self.remote.is_none()
    }
}

/// The path a two-host run crossed, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwoHostsPath {
    /// `HOST:PORT` of the server, as given to `--peer`.
    pub peer: String,
    pub client_address: IpAddr,
    pub server_address: IpAddr,
    pub sender: IpAddr,
    pub receiver: IpAddr,
    pub link_mtu: u32,
    /// The userspace tunnel's inner addresses, which the server chose; None for the others.
    pub tunnel: Option<TunnelPair>,
}

/// A tunnel's two inner addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelPair {
    pub client: IpAddr,
    pub server: IpAddr,
}

/// One end's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EndEvidence {
    None,
    Xfrm(XfrmEvidence),
    Userspace(Box<UserspaceEndEvidence>),
    Openvpn(OpenvpnProcess),
    Strongswan(StrongswanEvidence),
    Wireguard(WireguardEnd),
}

/// A run's evidence, as its report carries it under the backend's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Evidence {
    None,
    /// The local lab's xfrm run: end a's view (it sees both SAs' counters).
    Xfrm(XfrmEvidence),
    Userspace(Box<UserspaceEvidence>),
    Openvpn(OpenvpnEvidence),
    /// The local lab's strongSwan run: end a's view of what charon negotiated.
    Strongswan(StrongswanEvidence),
    Wireguard(WireguardEvidence),
    /// A two-host run: this host's end and what the server reported of its own.
    TwoHosts {
        client: Box<EndEvidence>,
        server: Box<EndEvidence>,
    },
}

/// Where a kernel tunnel's CPU goes: no process of its own to read it from.
const KERNEL_TUNNEL_CPU: &str =
    "tunnel CPU: ESP runs in the kernel (softirq, charged to no process; part of it \
     shows in the sender's and receiver's system time), so no figure of its own";

impl EndEvidence {
    /// Whether this is evidence a `backend` end gives (a server's end is checked so). Every
    /// backend is named: a new one says which end evidence is its own.
    pub fn fits(&self, backend: Backend) -> bool {
        match backend {
            Backend::Plain => matches!(self, EndEvidence::None),
            Backend::Xfrm => matches!(self, EndEvidence::Xfrm(_)),
            Backend::Userspace => matches!(self, EndEvidence::Userspace(_)),
            Backend::Openvpn | Backend::OpenvpnDco => matches!(self, EndEvidence::Openvpn(_)),
            Backend::Strongswan => matches!(self, EndEvidence::Strongswan(_)),
            Backend::Wireguard | Backend::WireguardGo | Backend::Boringtun => {
                matches!(self, EndEvidence::Wireguard(_))
            }
        }
    }
}

impl Evidence {
    pub fn is_none(&self) -> bool {
        matches!(self, Evidence::None)
    }

    /// The tunnel's own CPU at ends a and b (percent of a core), where the backend has a
    /// tunnel of its own: the userspace threads, the openvpn processes.
    pub fn tunnel_cpu(&self) -> Option<(f64, f64)> {
        match self {
            Evidence::Userspace(u) => Some((u.a.cpu.percent_of_core, u.b.cpu.percent_of_core)),
            // With DCO the kernel carries the tunnel; the processes hold its control channel.
            Evidence::Openvpn(o) if o.dco => None,
            Evidence::Openvpn(o) => o.cpu(),
            Evidence::Wireguard(w) => w.tunnel_cpu(),
            // The kernel's tunnels are no process; plain and a two-host summary have none.
            Evidence::Xfrm(_) | Evidence::Strongswan(_) | Evidence::None | Evidence::TwoHosts { .. } => None,
        }
    }

    /// The tunnel's own CPU, one line in the same words for every backend: the share of a
    /// core at each end where the tunnel is a thread or process of its own, else where its
    /// work is done and why no figure is given. None where there is no tunnel (plain, or a
    /// two-host run's summary, whose ends speak for themselves).
    pub fn tunnel_cpu_line(&self) -> Option<String> {
        let whose = match self {
            Evidence::Userspace(_) => "the lab's tunnel threads, over their lifetime".to_string(),
            Evidence::Openvpn(o) if o.dco => {
                let (a, b) = o.cpu()?;
                return Some(format!(
                    "tunnel CPU: OpenVPN's data channel runs in the kernel (ovpn: softirq, charged to no process), \
                     so no figure of its own; the openvpn processes, which hold only its control channel, used \
                     end a {a:.0} % of a core, end b {b:.0} % from the moment they were up"
                ));
            }
            Evidence::Openvpn(_) => "the openvpn processes, from the moment they were up".to_string(),
            Evidence::Wireguard(w) => match w.tunnel_cpu() {
                Some(_) => format!("{}'s tunnel, over their lifetime", w.implementation),
                None if w.implementation.starts_with("kernel ") => {
                    return Some(KERNEL_TUNNEL_CPU.replace("ESP", "WireGuard"))
                }
                None => return Some(format!("tunnel CPU: not read for {}", w.implementation)),
            },
            Evidence::Xfrm(_) => return Some(KERNEL_TUNNEL_CPU.into()),
            Evidence::Strongswan(s) => {
                let when = match s.rekeys {
                    Some(_) => "before the transfer and at each rekey during it (its CPU is not counted)",
                    None => "before the transfer",
                };
                return Some(format!(
                    "{KERNEL_TUNNEL_CPU}; charon only negotiated the SAs (IKE), {when}"
                ));
            }
            Evidence::None | Evidence::TwoHosts { .. } => return None,
        };
        let (a, b) = self.tunnel_cpu()?;
        Some(format!(
            "tunnel CPU: end a {a:.0} % of a core, end b {b:.0} % ({whose})"
        ))
    }

    /// The evidence in sentences, for the report's notes: the tunnel's CPU first.
    pub fn lines(&self) -> Vec<String> {
        let details = match self {
            Evidence::Xfrm(x) => x.lines(),
            Evidence::Userspace(u) => u.lines(),
            Evidence::Openvpn(o) => o.lines(),
            Evidence::Strongswan(s) => s.lines(),
            Evidence::Wireguard(w) => w.lines(),
            // Plain has no evidence; a two-host run's two ends are not put into sentences here.
            Evidence::None | Evidence::TwoHosts { .. } => Vec::new(),
        };
        self.tunnel_cpu_line().into_iter().chain(details).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::CipherSuite;
    use crate::transfer::CpuUsage;
    use userspace::tests::{implementation, tunnel_end};

    /// Every backend's evidence comes back from a report's JSON as what was written, under
    /// its backend's name: a VM guest's report and a server's end are read so.
    #[test]
    fn every_kind_of_evidence_reads_back_as_written() {
        let sa = SaEvidence {
            spi: "0x1".into(),
            direction: "a->b (sent by a)".into(),
            pair: None,
            cpu: None,
            counters: SaCounters {
                packets: 5,
                bytes: 500,
                replay_drops: 0,
                integrity_failures: 0,
            },
        };
        let xfrm = XfrmEvidence {
            mode: "transport".into(),
            suite: "aes-256-gcm".into(),
            reqid: "0x2".into(),
            sas: vec![sa.clone()],
            esp_overhead_bytes_per_packet: 38,
            encap: None,
            kernel_drivers: BTreeMap::from([("gcm(aes)".to_string(), "generic-gcm-aesni".to_string())]),
            pcrypt: None,
        };
        let userspace = UserspaceEvidence {
            suite: CipherSuite::ChaCha20Poly1305,
            implementation: implementation(),
            inner_mtu: 1418,
            batching: Batching::Offload,
            a: TunnelEnd {
                queues: vec![tunnel_end("ipl-tun-a"), tunnel_end("ipl-tun-a")],
                steering: Some("ports".into()),
                ..tunnel_end("ipl-tun-a")
            },
            b: tunnel_end("ipl-tun-b"),
            encrypting: Encrypting::B,
            efficiency: Efficiency {
                tunnel_payload_mb_per_cpu_s: 133.3,
                crypto: Some(CryptoReference {
                    crypto_single_core_mb_per_s: 1000.0,
                    crypto_wall_mb_per_s: 900.0,
                    crypto_cpu_share: 0.9,
                    packet_bytes: 1400,
                    ratio: 0.13,
                }),
            },
        };
        let process = OpenvpnProcess {
            side: String::new(),
            pid: 42,
            cpu: CpuUsage::new(1.0, 0.5, 2.0),
            renegotiations: 0,
            dco: None,
        };
        let openvpn = OpenvpnEvidence {
            version: "OpenVPN 2.6.3".into(),
            mode: "static-key".into(),
            cipher: "AES-256-CBC".into(),
            auth: "SHA256".into(),
            tun_mtu: 1500,
            dco: false,
            ends: BTreeMap::from([
                ("a".to_string(), process.clone()),
                ("b".to_string(), process.clone()),
            ]),
        };
        let algorithm = Algorithm {
            name: "rfc4106(gcm(aes))".into(),
            key_bits: 288,
            icv_bits: Some(128),
        };
        let strongswan = StrongswanEvidence {
            version: "strongSwan 5.9.8".into(),
            ike_version: 2,
            ike_proposal: "aes256-sha256-modp2048".into(),
            esp_proposal: "aes256gcm16".into(),
            auth: "psk".into(),
            sas: vec![NegotiatedSa {
                sa: sa.clone(),
                reqid: 1,
                mode: "tunnel".into(),
                algorithms: vec![algorithm.clone()],
            }],
            lab_xfrm_installs: vec![algorithm],
            differences: vec![],
            rekeys: None,
            per_cpu_sas: false,
        };
        let wg_end = WireguardEnd {
            side: String::new(),
            interface: "ipl-wg-a".into(),
            rx_bytes: 1,
            tx_bytes: 2,
            last_handshake_age_s: Some(0.5),
            cpu: None,
            handshake_s: None,
        };
        let wireguard = WireguardEvidence {
            implementation: "wireguard-go 0.0.20231211".into(),
            cipher: "chacha20-poly1305".into(),
            listen_port: 51820,
            mtu: 1420,
            handshake_s: Some(0.01),
            ends: BTreeMap::from([
                ("a".to_string(), wg_end.clone()),
                ("b".to_string(), wg_end.clone()),
            ]),
            program: Some(GoProgram {
                path: "/var/lib/ipsec-lab/wireguard-go/wireguard-go".into(),
                version: "wireguard-go v0.0.20230223".into(),
                package: Some("0.0.20231211-1".into()),
                note: None,
            }),
        };
        let two_hosts = Evidence::TwoHosts {
            client: Box::new(EndEvidence::Userspace(Box::new(UserspaceEndEvidence {
                implementation: implementation(),
                batching: Batching::Gso,
                end: tunnel_end("ipl-tun-c"),
            }))),
            server: Box::new(EndEvidence::Xfrm(xfrm.clone())),
        };
        let cases = [
            (Backend::Xfrm, Evidence::Xfrm(xfrm)),
            (Backend::Userspace, Evidence::Userspace(Box::new(userspace))),
            (Backend::Openvpn, Evidence::Openvpn(openvpn)),
            (Backend::Strongswan, Evidence::Strongswan(strongswan)),
            (Backend::WireguardGo, Evidence::Wireguard(wireguard)),
            (Backend::Plain, two_hosts),
        ];
        for (backend, evidence) in cases {
            // Issue 43: every backend's summary says its tunnel's CPU, in the same words.
            let lines = evidence.lines();
            match backend {
                Backend::Plain => assert!(evidence.tunnel_cpu_line().is_none()),
                _ => assert!(lines[0].starts_with("tunnel CPU: "), "{backend}: {lines:?}"),
            }
            if backend == Backend::Openvpn {
                assert_eq!(
                    lines[0],
                    "tunnel CPU: end a 75 % of a core, end b 75 % (the openvpn processes, from the moment they were up)"
                );
                assert!(lines.contains(
                    &"openvpn end a (pid 42): 1.00 s user + 0.50 s system (75 % of a core)".to_string()
                ));
            }
            let details = BackendDetails {
                evidence: BTreeMap::from([(backend, evidence)]),
                remote: Some(TwoHostsPath {
                    peer: "192.0.2.2:5299".into(),
                    client_address: "192.0.2.1".parse().unwrap(),
                    server_address: "192.0.2.2".parse().unwrap(),
                    sender: "192.0.2.1".parse().unwrap(),
                    receiver: "192.0.2.2".parse().unwrap(),
                    link_mtu: 1500,
                    tunnel: None,
                }),
            };
            let json = serde_json::to_value(&details).unwrap();
            assert!(json[backend.name()].is_object(), "{json}");
            assert_eq!(json["remote"]["receiver"], "192.0.2.2");
            let back: BackendDetails =
                serde_json::from_value(json.clone()).unwrap_or_else(|e| panic!("{backend}: {e}: {json}"));
            assert_eq!(back, details, "{json}");
        }
        // A server's end crosses the control channel alone, and is told apart by its fields.
        for end in [
            EndEvidence::None,
            EndEvidence::Openvpn(process),
            EndEvidence::Wireguard(wg_end),
        ] {
            let back: EndEvidence = serde_json::from_value(serde_json::to_value(&end).unwrap()).unwrap();
            assert_eq!(back, end);
        }
        assert!(EndEvidence::None.fits(Backend::Plain) && !EndEvidence::None.fits(Backend::Xfrm));
    }
}
