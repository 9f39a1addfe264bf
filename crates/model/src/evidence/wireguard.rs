//! The WireGuard backends' evidence (kernel, wireguard-go, boringtun): each end's peer
//! counters, the handshake, the tunnel's CPU where it is a process or threads of its own,
//! and for wireguard-go the binary that ran.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::transfer::CpuUsage;

/// One end, after the transfers: its peer as its device counts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireguardEnd {
    #[serde(skip)]
    pub side: String,
    pub interface: String,
    /// Bytes received from / sent to the peer (WireGuard's own counters, with its framing).
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Seconds since the last handshake, when the evidence was read.
    pub last_handshake_age_s: Option<f64>,
    /// The wireguard-go process (all threads), or boringtun's device threads, since the
    /// handshake; None for the kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUsage>,
    /// Time to the handshake, measured by the end that started it (b).
    #[serde(skip)]
    pub handshake_s: Option<f64>,
}

/// A local WireGuard run's evidence: both ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireguardEvidence {
    pub implementation: String,
    pub cipher: String,
    pub listen_port: u16,
    pub mtu: u32,
    pub handshake_s: Option<f64>,
    pub ends: BTreeMap<String, WireguardEnd>,
    /// wireguard-go only: which binary ran, its version, and a note where it is not the
    /// offload-era build.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<GoProgram>,
}

impl WireguardEvidence {
    /// The tunnel's CPU per end, where it is a process of its own (wireguard-go).
    pub fn tunnel_cpu(&self) -> Option<(f64, f64)> {
        Some((
            self.ends.get("a")?.cpu?.percent_of_core,
            self.ends.get("b")?.cpu?.percent_of_core,
        ))
    }

    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{}: chacha20-poly1305, inner MTU {}, handshake {}",
            self.implementation,
            self.mtu,
            match self.handshake_s {
                Some(s) => format!("in {:.3} s", s),
                None => "not timed".into(),
            }
        )];
        for (side, e) in &self.ends {
            let cpu = e.cpu.map_or(String::new(), |c| {
                format!(
                    "; tunnel CPU {:.2} s user + {:.2} s system ({:.0} % of a core)",
                    c.user_s, c.system_s, c.percent_of_core
                )
            });
            lines.push(format!(
                "WireGuard end {side} ({}): peer rx {} bytes, tx {} bytes{cpu}",
                e.interface, e.rx_bytes, e.tx_bytes
            ));
        }
        if let Some(note) = self.program.as_ref().and_then(|p| p.note.clone()) {
            lines.push(note);
        }
        lines
    }
}

/// The wireguard-go binary a run starts, and what it says it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoProgram {
    pub path: PathBuf,
    /// The first line of its `--version`.
    pub version: String,
    /// The Debian package version, for the lab's build (from `lab/wireguard-go.sh`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// Why a figure from this binary may not be wireguard-go at its best; None for the
    /// lab's build.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl GoProgram {
    /// What the report names: the package version where known (`--version` understates
    /// 0.0.20231211), else `--version`.
    pub fn implementation(&self) -> String {
        match &self.package {
            Some(p) => format!("wireguard-go {p}"),
            None => self.version.clone(),
        }
    }
}
