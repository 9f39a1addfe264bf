//! OpenVPN's evidence: its version and configuration, and each end's process, its CPU and
//! the renegotiations its log shows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::transfer::CpuUsage;

/// One openvpn process over its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenvpnProcess {
    #[serde(skip)]
    pub side: String,
    pub pid: u32,
    pub cpu: CpuUsage,
    /// TLS renegotiations of the data channel's key this end's log shows over its life
    /// (handshakes after the first; static-key mode has none). Older reports: 0.
    #[serde(default)]
    pub renegotiations: u32,
    /// With data channel offload (`openvpn-dco`): what shows the kernel carried this end's
    /// data channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dco: Option<DcoProof>,
}

/// The kernel carried an end's data channel: its tunnel device is an `ovpn` link, and its
/// log says it opened the DCO device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DcoProof {
    pub device: String,
    /// The device's link kind as the kernel reports it (`ovpn`).
    pub kind: String,
    /// OpenVPN's own line about it.
    pub log_line: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenvpnEvidence {
    pub version: String,
    pub mode: String,
    pub cipher: String,
    pub auth: String,
    pub tun_mtu: u32,
    pub dco: bool,
    /// `a` and `b`.
    pub ends: BTreeMap<String, OpenvpnProcess>,
}

impl OpenvpnEvidence {
    /// Both processes' share of a core, ends a and b.
    pub fn cpu(&self) -> Option<(f64, f64)> {
        Some((
            self.ends.get("a")?.cpu.percent_of_core,
            self.ends.get("b")?.cpu.percent_of_core,
        ))
    }

    /// The configuration, then each end's process and its CPU.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{}: {} mode, {} with {}, tun MTU {}, data channel offload {}",
            self.version,
            self.mode,
            self.cipher,
            self.auth,
            self.tun_mtu,
            if self.dco { "on" } else { "off" }
        )];
        for (side, p) in &self.ends {
            let renegotiated = match p.renegotiations {
                0 => String::new(),
                n => format!(", {n} renegotiation{}", if n == 1 { "" } else { "s" }),
            };
            let offloaded = match &p.dco {
                Some(d) => format!(
                    "; its data channel in the kernel: {} is an {} link, its log says \"{}\"",
                    d.device, d.kind, d.log_line
                ),
                None => String::new(),
            };
            lines.push(format!(
                "openvpn end {side} (pid {}): {:.2} s user + {:.2} s system ({:.0} % of a core){renegotiated}{offloaded}",
                p.pid, p.cpu.user_s, p.cpu.system_s, p.cpu.percent_of_core
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(renegotiations: u32) -> OpenvpnEvidence {
        let end = OpenvpnProcess {
            side: String::new(),
            pid: 7,
            cpu: CpuUsage::new(1.0, 0.5, 2.0),
            renegotiations,
            dco: None,
        };
        OpenvpnEvidence {
            version: "OpenVPN 2.6.14".into(),
            mode: "tls-p2p".into(),
            cipher: "AES-256-GCM".into(),
            auth: "none (AEAD)".into(),
            tun_mtu: 1400,
            dco: false,
            ends: BTreeMap::from([("a".to_string(), end.clone()), ("b".to_string(), end)]),
        }
    }

    /// The renegotiations are in the JSON and in each end's line; a report from before the
    /// field reads as none, and a run without them says nothing of them.
    #[test]
    fn renegotiations_are_shown_per_end_and_default_to_none() {
        let e = evidence(3);
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["ends"]["a"]["renegotiations"], 3);
        assert!(
            e.lines()[1].ends_with("(75 % of a core), 3 renegotiations"),
            "{:?}",
            e.lines()
        );
        let mut old = json.clone();
        old["ends"]["a"].as_object_mut().unwrap().remove("renegotiations");
        let back: OpenvpnEvidence = serde_json::from_value(old).unwrap();
        assert_eq!(back.ends["a"].renegotiations, 0);
        assert!(
            evidence(0).lines()[1].ends_with("of a core)"),
            "{:?}",
            evidence(0).lines()
        );
    }
}
