//! How ESP travels between the two ends: as IP protocol 50 (the default) or encapsulated
//! in UDP (RFC 3948, NAT traversal), as IPsec between real sites usually runs.
//!
//! Only the choice and its wire cost; the SAs and sockets that realise it are the xfrm
//! crate's and the lab's xfrm backend's.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The IKE NAT-T port (RFC 3948): where ESP-in-UDP travels unless `--encap-port` says
/// otherwise.
pub const NATT_PORT: u16 = 4500;

/// Bytes the UDP header adds to every ESP packet (RFC 768).
pub const UDP_HEADER_LEN: usize = 8;

/// `--encap`: the encapsulation asked for (only UDP exists today).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncapKind {
    Udp,
}

/// `--encap`/`--encap-port` values that name no encapsulation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncapError {
    #[error("unknown encapsulation {0:?}: use udp (ESP in UDP, RFC 3948)")]
    Unknown(String),
    #[error("--encap-port {0} is not a port: use 1 to 65535 (default 4500)")]
    Port(u16),
}

impl FromStr for EncapKind {
    type Err = EncapError;
    fn from_str(s: &str) -> Result<Self, EncapError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "udp" => Ok(EncapKind::Udp),
            _ => Err(EncapError::Unknown(s.to_string())),
        }
    }
}

/// A run's ESP encapsulation, as the plan and the report record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Encap {
    /// ESP in UDP (`UDP_ENCAP_ESPINUDP`), both ends using `port` as source and destination.
    EspInUdp { port: u16 },
}

impl Encap {
    /// The plan's encapsulation from `--encap`/`--encap-port`; port 0 is refused.
    pub fn from_args(kind: EncapKind, port: Option<u16>) -> Result<Encap, EncapError> {
        match kind {
            EncapKind::Udp => match port.unwrap_or(NATT_PORT) {
                0 => Err(EncapError::Port(0)),
                port => Ok(Encap::EspInUdp { port }),
            },
        }
    }

    /// Bytes the encapsulation adds to every ESP packet.
    pub fn overhead(&self) -> usize {
        match self {
            Encap::EspInUdp { .. } => UDP_HEADER_LEN,
        }
    }
}

impl Encap {
    /// Short form for row labels: `esp-in-udp 4500`.
    pub fn short_label(&self) -> String {
        match self {
            Encap::EspInUdp { port } => format!("esp-in-udp {port}"),
        }
    }
}

impl fmt::Display for Encap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Encap::EspInUdp { port } => write!(f, "ESP in UDP port {port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_defaults_to_the_nat_t_port_and_refuses_port_zero() {
        assert_eq!("UDP".parse::<EncapKind>().unwrap(), EncapKind::Udp);
        assert!("tcp".parse::<EncapKind>().is_err());
        assert_eq!(
            Encap::from_args(EncapKind::Udp, None).unwrap(),
            Encap::EspInUdp { port: 4500 }
        );
        assert_eq!(
            Encap::from_args(EncapKind::Udp, Some(14500)).unwrap(),
            Encap::EspInUdp { port: 14500 }
        );
        assert!(Encap::from_args(EncapKind::Udp, Some(0)).is_err());
        let e = Encap::EspInUdp { port: 4500 };
        assert_eq!(e.overhead(), 8);
        assert_eq!(e.to_string(), "ESP in UDP port 4500");
        assert_eq!(
            serde_json::to_value(e).unwrap(),
            serde_json::json!({"kind": "esp-in-udp", "port": 4500})
        );
    }

    #[test]
    fn plans_take_encap_only_for_xfrm_on_a_real_port() {
        use crate::plan::{PlanError, RunRequest};
        use crate::Backend;
        let req = |backend, encap, encap_port| RunRequest {
            backend,
            encap,
            encap_port,
            ..Default::default()
        };
        let plan = req(Backend::Xfrm, Some(EncapKind::Udp), None).validate().unwrap();
        assert_eq!(plan.encap(), Some(Encap::EspInUdp { port: NATT_PORT }));
        assert_eq!(req(Backend::Xfrm, None, None).validate().unwrap().encap(), None);
        for backend in [
            Backend::Plain,
            Backend::Userspace,
            Backend::Openvpn,
            Backend::Strongswan,
        ] {
            let e = req(backend, Some(EncapKind::Udp), None).validate().unwrap_err();
            assert!(matches!(e, PlanError::EncapBackend(b) if b == backend), "{e}");
        }
        assert!(matches!(
            req(Backend::Xfrm, Some(EncapKind::Udp), Some(0)).validate(),
            Err(PlanError::Encap(EncapError::Port(0)))
        ));
        let peer = RunRequest {
            peer: Some("192.0.2.1".into()),
            ..req(Backend::Xfrm, Some(EncapKind::Udp), None)
        };
        assert_eq!(
            peer.clone().validate().unwrap().encap(),
            Some(Encap::EspInUdp { port: NATT_PORT })
        );
        let low = RunRequest {
            encap_port: Some(500),
            ..peer
        };
        assert!(matches!(low.validate(), Err(PlanError::EncapPeer(500))));
        let stray = req(Backend::Xfrm, None, Some(4501)).validate().unwrap();
        assert!(
            stray.ignored().iter().any(|i| i.contains("--encap-port")),
            "{:?}",
            stray.ignored()
        );
    }
}
