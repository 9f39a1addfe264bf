//! OpenVPN's evidence: its version and configuration, and each end's process and its CPU.

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
            lines.push(format!(
                "openvpn end {side} (pid {}): {:.2} s user + {:.2} s system ({:.0} % of a core)",
                p.pid, p.cpu.user_s, p.cpu.system_s, p.cpu.percent_of_core
            ));
        }
        lines
    }
}
