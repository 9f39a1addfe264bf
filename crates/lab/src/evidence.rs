//! What a backend shows happened, typed: the report's `backend_details` are these values
//! serialised, and the human summary is their own [`Evidence::lines`]. Nothing here is read
//! back from JSON (the sweep takes the tunnel's CPU from [`Evidence::tunnel_cpu`]); only a
//! peer's evidence, which arrives as JSON, is carried as it came.

use std::collections::BTreeMap;

use model::{CipherSuite, CpuUsage};
use serde::Serialize;

/// Inner packet size the reported ESP overhead is computed for.
pub const OVERHEAD_REFERENCE_LEN: usize = 1400;

/// One end's evidence.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum EndEvidence {
    None,
    Xfrm(XfrmEvidence),
    Userspace(Box<TunnelEnd>),
    Openvpn(OpenvpnProcess),
    Strongswan(StrongswanEvidence),
    Wireguard(crate::backend::wireguard::WireguardEnd),
}

/// A run's evidence, as its report carries it under the backend's name.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Evidence {
    None,
    /// The local lab's xfrm run: end a's view (it sees both SAs' counters).
    Xfrm(XfrmEvidence),
    Userspace(Box<UserspaceEvidence>),
    Openvpn(OpenvpnEvidence),
    /// The local lab's strongSwan run: end a's view of what charon negotiated.
    Strongswan(StrongswanEvidence),
    Wireguard(crate::backend::wireguard::WireguardEvidence),
    /// A two-host run: this host's end and what the server reported of its own.
    TwoHosts {
        client: EndEvidence,
        server: serde_json::Value,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct XfrmEvidence {
    pub mode: &'static str,
    pub suite: String,
    pub reqid: String,
    pub sas: Vec<SaEvidence>,
    pub esp_overhead_bytes_per_packet: usize,
    /// `ESP in UDP port N` with `--encap udp` (its 8 bytes are in the overhead above).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encap: Option<String>,
    /// Algorithm → the kernel driver /proc/crypto shows serving it, after use.
    pub kernel_drivers: BTreeMap<String, String>,
    /// With `--pcrypt`: the pcrypt instance the SAs ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcrypt: Option<PcryptEvidence>,
}

/// What the report shows of the instance (`backend_details.xfrm.pcrypt`).
#[derive(Debug, Clone, Serialize)]
pub struct PcryptEvidence {
    pub algorithm: &'static str,
    /// The instance's driver, e.g. `pcrypt(rfc4106-gcm-aesni)`.
    pub driver: String,
    /// Its /proc/crypto priority (pcrypt adds 100 to what it wraps, so it serves the SAs).
    pub priority: i32,
    /// Its /proc/crypto reference count while the SAs existed: 1 plus one per SA using it.
    pub refcnt_with_sas: Option<u32>,
    /// Whether this run made it (and so removes it), or found it there.
    pub instantiated_by_run: bool,
}

impl PcryptEvidence {
    pub fn line(&self) -> String {
        let refcnt = self
            .refcnt_with_sas
            .map_or_else(|| "unknown".to_string(), |r| r.to_string());
        format!(
            "pcrypt: {} served by {} (priority {}, refcnt {refcnt} while the SAs existed), {}",
            self.algorithm,
            self.driver,
            self.priority,
            if self.instantiated_by_run {
                "instantiated over NETLINK_CRYPTO for this run and removed after it"
            } else {
                "already present before the run (left in place)"
            }
        )
    }
}

/// An SA after the transfers: which one, and the kernel's counters (their fields follow
/// `pair` in the report, as if they were this row's own).
#[derive(Debug, Clone, Serialize)]
pub struct SaEvidence {
    pub spi: String,
    /// e.g. `a->b (sent by a)`.
    pub direction: String,
    /// With several SA pairs (`--sas N`): which one, 0 to N-1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair: Option<u16>,
    #[serde(flatten)]
    pub counters: xfrm::SaCounters,
}

/// One end of a userspace tunnel: its thread's counters over its life.
#[derive(Debug, Clone, Serialize)]
pub struct TunnelEnd {
    #[serde(skip)]
    pub implementation: crypto::ImplementationInfo,
    #[serde(skip)]
    pub batching: tunnel::Batching,
    pub tun: String,
    pub pinned_cpu: Option<usize>,
    /// The queue this thread served, in a multi-queue end's `queues`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<u16>,
    pub cpu: CpuUsage,
    pub wall_s: f64,
    pub packets_per_s: f64,
    pub sent: tunnel::Flow,
    pub delivered: tunnel::Flow,
    pub datagrams_in: u64,
    /// Drop reason → count, every reason listed.
    pub drops: BTreeMap<String, u64>,
    pub errors: tunnel::IoErrors,
    pub send_calls: u64,
    pub recv_calls: u64,
    pub tun_reads: u64,
    pub tun_writes: u64,
    /// A multi-queue end (`--tunnel-threads N`): each thread's own counts; the fields above
    /// are their sums (CPU added, so above 100 % of a core where threads ran in parallel).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<TunnelEnd>,
    /// A multi-queue end: how flows were spread over its queues: `ports` (the lab's eBPF
    /// program: stream i on queue (port + i) mod N), or `flow hash: WHY` where the kernel
    /// refused the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steering: Option<String>,
}

/// A two-host run's tunnel end, as the report shows it.
#[derive(Debug, Clone, Serialize)]
struct RemoteTunnelEnd<'a> {
    implementation: &'a crypto::ImplementationInfo,
    end: &'a TunnelEnd,
}

/// The local lab's userspace tunnel: both ends and how close the encrypting end came to
/// the cipher's own speed.
#[derive(Debug, Clone, Serialize)]
pub struct UserspaceEvidence {
    pub suite: CipherSuite,
    pub implementation: crypto::ImplementationInfo,
    pub inner_mtu: u32,
    pub batching: tunnel::Batching,
    /// `a` encrypts the payload, `b` decrypts it, unless `encrypting` says otherwise.
    pub a: TunnelEnd,
    pub b: TunnelEnd,
    /// The end whose thread encrypts the payload: "a", "b" (`--reverse`) or "both" (`--bidir`).
    pub encrypting: &'static str,
    /// Of the encrypting end (end a's in a two-way run, whose thread also decrypts).
    pub efficiency: Efficiency,
}

/// The encrypting thread's payload MB per CPU-second beside the same implementation's
/// single-core speed, measured in this process after the transfers.
#[derive(Debug, Clone, Serialize)]
pub struct Efficiency {
    pub tunnel_payload_mb_per_cpu_s: f64,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub crypto: Option<CryptoReference>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CryptoReference {
    /// Per CPU-second of the thread that measured it, like the tunnel's figure.
    pub crypto_single_core_mb_per_s: f64,
    pub crypto_wall_mb_per_s: f64,
    /// The share of a core the measuring thread had.
    pub crypto_cpu_share: f64,
    pub packet_bytes: usize,
    /// Tunnel MB per CPU-second over the cipher's.
    pub ratio: f64,
}

/// One openvpn process over its life.
#[derive(Debug, Clone, Serialize)]
pub struct OpenvpnProcess {
    #[serde(skip)]
    pub side: &'static str,
    pub pid: u32,
    pub cpu: CpuUsage,
}

#[derive(Debug, Clone, Serialize)]
pub struct OpenvpnEvidence {
    pub version: String,
    pub mode: &'static str,
    pub cipher: String,
    pub auth: &'static str,
    pub tun_mtu: u32,
    pub dco: bool,
    /// `a` and `b`.
    pub ends: BTreeMap<&'static str, OpenvpnProcess>,
}

/// What strongSwan's charon negotiated over IKEv2 and installed in end a's kernel, beside
/// what the lab's own xfrm backend installs for the same suite.
#[derive(Debug, Clone, Serialize)]
pub struct StrongswanEvidence {
    /// The daemon's version (`swanctl --version --daemon`), e.g. `strongSwan 5.9.8
    /// charon-systemd (Linux, 6.1.0-57-amd64, x86_64)`.
    pub version: String,
    pub ike_version: u8,
    pub ike_proposal: String,
    /// The only ESP proposal both ends offered (the run's suite).
    pub esp_proposal: String,
    pub auth: &'static str,
    /// The ESP SAs between the two ends, read back over netlink after the transfers.
    pub sas: Vec<NegotiatedSa>,
    /// What the lab's xfrm backend installs for this suite (the same attributes it sends,
    /// read the way the SAs above were).
    pub lab_xfrm_installs: Vec<Algorithm>,
    /// How the SAs differ from the lab's; empty when they match.
    pub differences: Vec<String>,
}

/// An SA someone else negotiated, as the kernel reports it.
#[derive(Debug, Clone, Serialize)]
pub struct NegotiatedSa {
    #[serde(flatten)]
    pub sa: SaEvidence,
    pub reqid: u32,
    pub mode: &'static str,
    pub algorithms: Vec<Algorithm>,
}

/// An algorithm as an SA carries it: the kernel's name, key and ICV lengths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Algorithm {
    pub name: String,
    pub key_bits: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icv_bits: Option<u32>,
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}-bit key", self.name, self.key_bits)?;
        match self.icv_bits {
            Some(icv) => write!(f, ", {icv}-bit ICV"),
            None => Ok(()),
        }
    }
}

impl StrongswanEvidence {
    /// Each SA's algorithms and counters, then whether they match the lab's own.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{}: IKEv{} ({}, {}) negotiated ESP {}",
            self.version, self.ike_version, self.auth, self.ike_proposal, self.esp_proposal
        )];
        for sa in &self.sas {
            let (id, c) = (&sa.sa, &sa.sa.counters);
            let algorithms: Vec<String> = sa.algorithms.iter().map(|a| a.to_string()).collect();
            lines.push(format!(
                "ESP SA spi {} {} (reqid {}, {} mode): {}; {} packets, {} bytes, {} replay drops, {} integrity failures",
                id.spi,
                id.direction,
                sa.reqid,
                sa.mode,
                algorithms.join(" + "),
                c.packets,
                c.bytes,
                c.replay_drops,
                c.integrity_failures
            ));
        }
        let lab: Vec<String> = self.lab_xfrm_installs.iter().map(|a| a.to_string()).collect();
        lines.push(if self.differences.is_empty() {
            format!("the same as the lab's xfrm backend installs: {}", lab.join(" + "))
        } else {
            format!(
                "differs from the lab's xfrm backend ({}): {}",
                lab.join(" + "),
                self.differences.join("; ")
            )
        });
        lines
    }
}

impl EndEvidence {
    /// As the two-host report shows one end (the server sends this over the channel).
    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            EndEvidence::Userspace(end) => serde_json::to_value(RemoteTunnelEnd {
                implementation: &end.implementation,
                end,
            }),
            other => serde_json::to_value(other),
        };
        value.unwrap_or(serde_json::Value::Null)
    }
}

impl Evidence {
    pub fn is_none(&self) -> bool {
        matches!(self, Evidence::None)
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Evidence::TwoHosts { client, server } => {
                serde_json::json!({ "client": client.to_json(), "server": server })
            }
            other => serde_json::to_value(other).unwrap_or(serde_json::Value::Null),
        }
    }

    /// The tunnel's own CPU at ends a and b (percent of a core), where the backend has a
    /// tunnel of its own: the userspace threads, the openvpn processes.
    pub fn tunnel_cpu(&self) -> Option<(f64, f64)> {
        match self {
            Evidence::Userspace(u) => Some((u.a.cpu.percent_of_core, u.b.cpu.percent_of_core)),
            Evidence::Openvpn(o) => Some((
                o.ends.get("a")?.cpu.percent_of_core,
                o.ends.get("b")?.cpu.percent_of_core,
            )),
            Evidence::Wireguard(w) => w.tunnel_cpu(),
            _ => None,
        }
    }

    /// The evidence in sentences, for the report's notes.
    pub fn lines(&self) -> Vec<String> {
        match self {
            Evidence::Xfrm(x) => x.lines(),
            Evidence::Userspace(u) => u.lines(),
            Evidence::Strongswan(s) => s.lines(),
            Evidence::Wireguard(w) => w.lines(),
            _ => Vec::new(),
        }
    }
}

impl XfrmEvidence {
    /// What each SA carried, the ESP overhead and the kernel drivers that served it.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .sas
            .iter()
            .map(|sa| {
                let c = &sa.counters;
                format!(
                    "ESP SA spi {} {}: {} packets, {} bytes, {} replay drops, {} integrity failures",
                    sa.spi, sa.direction, c.packets, c.bytes, c.replay_drops, c.integrity_failures,
                )
            })
            .collect();
        let drivers: Vec<String> = self
            .kernel_drivers
            .iter()
            .map(|(alg, driver)| format!("{alg}={driver}"))
            .collect();
        let drivers = if drivers.is_empty() {
            "none seen in /proc/crypto".to_string()
        } else {
            drivers.join(", ")
        };
        let encap = match &self.encap {
            Some(e) => format!(
                ", {e} (UDP header {} bytes included)",
                model::encap::UDP_HEADER_LEN
            ),
            None => String::new(),
        };
        lines.push(format!(
            "{} mode{encap}, ESP overhead {} bytes per {OVERHEAD_REFERENCE_LEN}-byte packet, kernel drivers: {drivers}",
            self.mode, self.esp_overhead_bytes_per_packet,
        ));
        if let Some(p) = &self.pcrypt {
            lines.push(p.line());
        }
        lines
    }
}

impl UserspaceEvidence {
    fn lines(&self) -> Vec<String> {
        let mut notes = vec![format!(
            "userspace tunnel: {}, inner MTU {}, {:?} batching",
            self.implementation.label, self.inner_mtu, self.batching
        )];
        let threads = |end: &'_ TunnelEnd| -> Vec<TunnelEnd> {
            if end.queues.is_empty() {
                vec![end.clone()]
            } else {
                end.queues.clone()
            }
        };
        let (a, b) = (threads(&self.a), threads(&self.b));
        for (end, s) in [("a", &self.a), ("b", &self.b)] {
            if let Some(steering) = &s.steering {
                notes.push(format!(
                    "end {end}: {} tunnel threads, flows spread by {steering}",
                    s.queues.len()
                ));
            }
        }
        let (role_a, role_b) = match self.encrypting {
            "both" => ("encrypting and decrypting", "encrypting and decrypting"),
            "b" => ("decrypting", "encrypting"),
            _ => ("encrypting", "decrypting"),
        };
        let roles = a.iter().map(|s| (role_a, s)).chain(b.iter().map(|s| (role_b, s)));
        for (role, s) in roles {
            let drops: Vec<String> = s
                .drops
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(reason, n)| format!("{reason} {n}"))
                .collect();
            let queue = s.queue.map(|q| format!("/{q}")).unwrap_or_default();
            notes.push(format!(
                "{role} thread {}{queue}: {:.2} s user + {:.2} s system ({:.0} % of a core), {:.0} packets/s ({} sent, {} delivered), drops: {}",
                s.tun,
                s.cpu.user_s,
                s.cpu.system_s,
                (s.cpu.user_s + s.cpu.system_s) / s.wall_s.max(1e-9) * 100.0,
                s.packets_per_s,
                s.sent.packets,
                s.delivered.packets,
                if drops.is_empty() { "none".into() } else { drops.join(", ") }
            ));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xfrm_evidence_reads_as_sentences() {
        let e = XfrmEvidence {
            mode: "tunnel",
            suite: "aes-256-cbc-hmac-sha256".into(),
            reqid: "0x1a5abc".into(),
            sas: vec![SaEvidence {
                spi: "0x1a500101".into(),
                direction: "a->b (sent by a)".into(),
                pair: None,
                counters: xfrm::SaCounters {
                    packets: 2952,
                    bytes: 4232538,
                    replay_drops: 0,
                    integrity_failures: 0,
                },
            }],
            esp_overhead_bytes_per_packet: 68,
            encap: None,
            kernel_drivers: [("cbc(aes)".to_string(), "cbc-aes-aesni".to_string())].into(),
            pcrypt: None,
        };
        assert_eq!(
            e.lines(),
            [
                "ESP SA spi 0x1a500101 a->b (sent by a): 2952 packets, 4232538 bytes, 0 replay drops, 0 integrity failures",
                "tunnel mode, ESP overhead 68 bytes per 1400-byte packet, kernel drivers: cbc(aes)=cbc-aes-aesni",
            ]
        );
        let json = Evidence::Xfrm(e).to_json();
        assert_eq!(json["sas"][0]["packets"], 2952);
        assert_eq!(json["kernel_drivers"]["cbc(aes)"], "cbc-aes-aesni");
    }

    /// An SA's row in the report, byte for byte: its fields' names and order.
    #[test]
    fn sa_rows_keep_their_json() {
        let row = |pair| SaEvidence {
            spi: "0x1".into(),
            direction: "a->b (sent by a)".into(),
            pair,
            counters: xfrm::SaCounters {
                packets: 2,
                bytes: 300,
                replay_drops: 4,
                integrity_failures: 5,
            },
        };
        fn json(v: &impl Serialize) -> String {
            serde_json::to_string(v).unwrap()
        }
        assert_eq!(
            json(&row(None)),
            r#"{"spi":"0x1","direction":"a->b (sent by a)","packets":2,"bytes":300,"replay_drops":4,"integrity_failures":5}"#
        );
        assert_eq!(
            json(&row(Some(1))),
            r#"{"spi":"0x1","direction":"a->b (sent by a)","pair":1,"packets":2,"bytes":300,"replay_drops":4,"integrity_failures":5}"#
        );
        let negotiated = NegotiatedSa {
            sa: row(None),
            reqid: 7,
            mode: "tunnel",
            algorithms: vec![Algorithm {
                name: "rfc4106(gcm(aes))".into(),
                key_bits: 288,
                icv_bits: Some(128),
            }],
        };
        assert_eq!(
            json(&negotiated),
            r#"{"spi":"0x1","direction":"a->b (sent by a)","packets":2,"bytes":300,"replay_drops":4,"integrity_failures":5,"reqid":7,"mode":"tunnel","algorithms":[{"name":"rfc4106(gcm(aes))","key_bits":288,"icv_bits":128}]}"#
        );
    }
}
