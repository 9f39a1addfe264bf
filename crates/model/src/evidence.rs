//! What a run shows happened, beyond its figures: per backend, the SAs and their counters,
//! the tunnel threads' counts, the daemons' CPU, what IKE negotiated. These are the report's
//! `backend_details`, typed both ways: the lab writes them, a two-host client reads its
//! server's end over the control channel, and a report read back (from a VM guest) has them
//! typed again. Their sentences for the report's notes are their own `lines()`.
//!
//! Also the small data types the measuring crates fill in and the report shows as they are:
//! [`SaCounters`] (xfrm), [`Flow`], [`IoErrors`], [`Batching`] (tunnel), [`Library`] and
//! [`ImplementationInfo`] (crypto). Leaves out how any of it is measured.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::plan::CryptoChoice;
use crate::suite::CipherSuite;
use crate::transfer::CpuUsage;

/// A library that computes the ciphers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Library {
    /// RustCrypto crates: aes, cbc, hmac, sha2, aes-gcm, chacha20poly1305.
    RustCrypto,
    /// aws-lc-rs over AWS-LC.
    AwsLc,
}

impl Library {
    pub fn name(self) -> &'static str {
        match self {
            Library::RustCrypto => "rustcrypto",
            Library::AwsLc => "aws-lc-rs",
        }
    }
}

impl fmt::Display for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a report says about the implementation that produced a number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImplementationInfo {
    /// The `--crypto` value: auto, soft, rustcrypto, aws-lc.
    pub choice: CryptoChoice,
    pub library: Library,
    /// Whether the library used the CPU's AES instructions in the process that measured.
    pub hardware_aes: bool,
    /// Human label, e.g. `auto (aws-lc-rs, AES-NI)`.
    pub label: String,
}

/// How datagrams leave and arrive.
/// Ordered from the least batching to the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Batching {
    /// `sendmmsg`/`recvmmsg`: one system call per batch, one trip through the stack per datagram.
    Mmsg,
    /// UDP GSO/GRO: one system call and one trip through the stack per batch of equal-sized
    /// datagrams. Falls back to [`Batching::Mmsg`] where the kernel refuses it.
    Gso,
    /// [`Batching::Gso`] plus TUN offload: TCP super-packets from the TUN device, segmented
    /// (and each segment encrypted) by the tunnel; decrypted segments joined before the TUN
    /// write. Falls back to [`Batching::Gso`] where the kernel refuses it.
    Offload,
}

/// Payload packets and bytes that went one way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    pub packets: u64,
    pub bytes: u64,
}

impl Flow {
    pub fn add(&mut self, packets: usize, bytes: usize) {
        self.packets += packets as u64;
        self.bytes += bytes as u64;
    }
}

/// Per-packet failures that are not a [`tunnel_proto::DropReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoErrors {
    /// Packets read from TUN that could not be encrypted.
    pub encap: u64,
    /// Batches (or the rest of one) the socket refused.
    pub send: u64,
    /// Decrypted packets the TUN device refused.
    pub tun_write: u64,
    /// Packets from TUN (offload) that could not be segmented or checksummed.
    pub offload: u64,
    /// Packets (with offload, super-packets) from TUN not from this end's inner address to
    /// the peer's: not sent, as the peer would drop them (an IPv6 router solicitation from
    /// the device's link-local address, or a route someone pointed into the tunnel).
    pub not_to_peer: u64,
}

/// Packets and bytes an SA has processed (`ip -s xfrm state`: the "current" lifetime),
/// and the packets it dropped. Serialised as the lab's report shows them, these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SaCounters {
    pub packets: u64,
    pub bytes: u64,
    pub replay_drops: u32,
    pub integrity_failures: u32,
}

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

/// Inner packet size the reported ESP overhead is computed for.
pub const OVERHEAD_REFERENCE_LEN: usize = 1400;

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct XfrmEvidence {
    pub mode: String,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PcryptEvidence {
    pub algorithm: String,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaEvidence {
    pub spi: String,
    /// e.g. `a->b (sent by a)`.
    pub direction: String,
    /// With several SA pairs (`--sas N`): which one, 0 to N-1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair: Option<u16>,
    #[serde(flatten)]
    pub counters: SaCounters,
}

/// One end of a userspace tunnel: its thread's counters over its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunnelEnd {
    pub tun: String,
    pub pinned_cpu: Option<usize>,
    /// The queue this thread served, in a multi-queue end's `queues`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<u16>,
    pub cpu: CpuUsage,
    pub wall_s: f64,
    pub packets_per_s: f64,
    pub sent: Flow,
    pub delivered: Flow,
    pub datagrams_in: u64,
    /// Drop reason → count, every reason listed.
    pub drops: BTreeMap<String, u64>,
    pub errors: IoErrors,
    pub send_calls: u64,
    pub recv_calls: u64,
    pub tun_reads: u64,
    pub tun_writes: u64,
    /// Receive buffers the socket filled (with UDP GRO, each holds several datagrams).
    #[serde(default)]
    pub recv_buffers: u64,
    /// Where the thread's wall time went.
    #[serde(default)]
    pub time: ThreadTime,
    /// A multi-queue end (`--tunnel-threads N`): each thread's own counts; the fields above
    /// are their sums (CPU added, so above 100 % of a core where threads ran in parallel).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<TunnelEnd>,
    /// A multi-queue end: how flows were spread over its queues: `ports` (the lab's eBPF
    /// program: stream i on queue (port + i) mod N), or `flow hash: WHY` where the kernel
    /// refused the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steering: Option<String>,
}

/// Where a tunnel thread's wall time went, in seconds. The thread reads the clock at every
/// boundary between phases (a batch at a time, never a packet at a time where a batch
/// exists), so the phases add up to its life. Time runnable but without a CPU falls inside
/// whatever phase it interrupted; `run_queue_s` says how much that was in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadTime {
    /// Reading from the TUN device (a packet, or with offload a super-packet, per call).
    pub tun_read_s: f64,
    /// Cutting super-packets into segments (offload), copying and checking inner packets.
    pub segmenting_s: f64,
    /// Encrypting and decrypting (with the replay and inner-address checks).
    pub crypto_s: f64,
    pub udp_send_s: f64,
    pub udp_recv_s: f64,
    /// Joining decrypted segments into super-packets (offload).
    pub joining_s: f64,
    pub tun_write_s: f64,
    /// Asleep in `poll`: nothing to do either way.
    pub idle_s: f64,
    /// The loop itself and anything between the phases.
    pub other_s: f64,
    /// Runnable but waiting for a CPU (the kernel's `schedstat`); None where not readable.
    #[serde(default)]
    pub run_queue_s: Option<f64>,
}

impl ThreadTime {
    /// The phases by name, in the order a packet meets them.
    pub fn phases(&self) -> [(&'static str, f64); 9] {
        [
            ("TUN read", self.tun_read_s),
            ("segmenting", self.segmenting_s),
            ("crypto", self.crypto_s),
            ("UDP send", self.udp_send_s),
            ("UDP receive", self.udp_recv_s),
            ("joining", self.joining_s),
            ("TUN write", self.tun_write_s),
            ("idle", self.idle_s),
            ("other", self.other_s),
        ]
    }

    pub fn total_s(&self) -> f64 {
        self.phases().iter().map(|(_, s)| s).sum()
    }

    /// Two threads' times added (a multi-queue end's sum).
    pub fn plus(&self, other: &ThreadTime) -> ThreadTime {
        ThreadTime {
            tun_read_s: self.tun_read_s + other.tun_read_s,
            segmenting_s: self.segmenting_s + other.segmenting_s,
            crypto_s: self.crypto_s + other.crypto_s,
            udp_send_s: self.udp_send_s + other.udp_send_s,
            udp_recv_s: self.udp_recv_s + other.udp_recv_s,
            joining_s: self.joining_s + other.joining_s,
            tun_write_s: self.tun_write_s + other.tun_write_s,
            idle_s: self.idle_s + other.idle_s,
            other_s: self.other_s + other.other_s,
            run_queue_s: self.run_queue_s.zip(other.run_queue_s).map(|(a, b)| a + b),
        }
    }

    /// e.g. `crypto 41 %, UDP send 28 %, …, waiting for a CPU 12 %`: the phases above 0.5 %
    /// of the total, largest first.
    pub fn line(&self) -> String {
        let total = self.total_s();
        if total <= 0.0 {
            return "not timed".into();
        }
        let mut phases: Vec<(&str, f64)> = self
            .phases()
            .into_iter()
            .filter(|(_, s)| s / total >= 0.005)
            .collect();
        phases.sort_by(|x, y| y.1.total_cmp(&x.1));
        let mut parts: Vec<String> = phases
            .iter()
            .map(|(name, s)| format!("{name} {:.0} %", s / total * 100.0))
            .collect();
        if let Some(q) = self.run_queue_s {
            parts.push(format!(
                "of all that, waiting for a CPU {:.0} %",
                (q / total * 100.0).min(100.0)
            ));
        }
        parts.join(", ")
    }
}

/// One end of a userspace tunnel as it reports itself (a two-host report shows each end so):
/// the implementation it encrypted with, how it batched, and its threads' counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserspaceEndEvidence {
    pub implementation: ImplementationInfo,
    pub batching: Batching,
    pub end: TunnelEnd,
}

/// The local lab's userspace tunnel: both ends and how close the encrypting end came to
/// the cipher's own speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserspaceEvidence {
    pub suite: CipherSuite,
    pub implementation: ImplementationInfo,
    pub inner_mtu: u32,
    pub batching: Batching,
    /// `a` encrypts the payload, `b` decrypts it, unless `encrypting` says otherwise.
    pub a: TunnelEnd,
    pub b: TunnelEnd,
    /// The end whose thread encrypts the payload: a, b (`--reverse`) or both (`--bidir`).
    pub encrypting: Encrypting,
    /// Of the encrypting end (end a's in a two-way run, whose thread also decrypts).
    pub efficiency: Efficiency,
}

/// Which end's thread encrypts the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encrypting {
    A,
    B,
    Both,
}

/// The encrypting thread's payload MB per CPU-second beside the same implementation's
/// single-core speed, measured in this process after the transfers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Efficiency {
    pub tunnel_payload_mb_per_cpu_s: f64,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub crypto: Option<CryptoReference>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// What strongSwan's charon negotiated over IKEv2 and installed in end a's kernel, beside
/// what the lab's own xfrm backend installs for the same suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StrongswanEvidence {
    /// The daemon's version (`swanctl --version --daemon`), e.g. `strongSwan 5.9.8
    /// charon-systemd (Linux, 6.1.0-57-amd64, x86_64)`.
    pub version: String,
    pub ike_version: u8,
    pub ike_proposal: String,
    /// The only ESP proposal both ends offered (the run's suite).
    pub esp_proposal: String,
    pub auth: String,
    /// The ESP SAs between the two ends, read back over netlink after the transfers.
    pub sas: Vec<NegotiatedSa>,
    /// What the lab's xfrm backend installs for this suite (the same attributes it sends,
    /// read the way the SAs above were).
    pub lab_xfrm_installs: Vec<Algorithm>,
    /// How the SAs differ from the lab's; empty when they match.
    pub differences: Vec<String>,
}

/// An SA someone else negotiated, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NegotiatedSa {
    #[serde(flatten)]
    pub sa: SaEvidence,
    pub reqid: u32,
    pub mode: String,
    pub algorithms: Vec<Algorithm>,
}

/// An algorithm as an SA carries it: the kernel's name, key and ICV lengths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// Where a kernel tunnel's CPU goes: no process of its own to read it from.
const KERNEL_TUNNEL_CPU: &str =
    "tunnel CPU: ESP runs in the kernel (softirq, charged to no process; part of it \
     shows in the sender's and receiver's system time), so no figure of its own";

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
    /// Whether this is evidence a `backend` end gives (a server's end is checked so).
    pub fn fits(&self, backend: Backend) -> bool {
        match self {
            EndEvidence::None => backend == Backend::Plain,
            EndEvidence::Xfrm(_) => backend == Backend::Xfrm,
            EndEvidence::Userspace(_) => backend == Backend::Userspace,
            EndEvidence::Openvpn(_) => backend == Backend::Openvpn,
            EndEvidence::Strongswan(_) => backend == Backend::Strongswan,
            EndEvidence::Wireguard(_) => backend.is_wireguard(),
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
            Evidence::Openvpn(o) => Some((
                o.ends.get("a")?.cpu.percent_of_core,
                o.ends.get("b")?.cpu.percent_of_core,
            )),
            Evidence::Wireguard(w) => w.tunnel_cpu(),
            _ => None,
        }
    }

    /// The tunnel's own CPU, one line in the same words for every backend: the share of a
    /// core at each end where the tunnel is a thread or process of its own, else where its
    /// work is done and why no figure is given. None where there is no tunnel (plain, or a
    /// two-host run's summary, whose ends speak for themselves).
    pub fn tunnel_cpu_line(&self) -> Option<String> {
        let whose = match self {
            Evidence::Userspace(_) => "the lab's tunnel threads".to_string(),
            Evidence::Openvpn(_) => "the openvpn processes".to_string(),
            Evidence::Wireguard(w) => match w.tunnel_cpu() {
                Some(_) => format!("{}'s tunnel", w.implementation),
                None if w.implementation.starts_with("kernel ") => {
                    return Some(KERNEL_TUNNEL_CPU.replace("ESP", "WireGuard"))
                }
                None => return Some(format!("tunnel CPU: not read for {}", w.implementation)),
            },
            Evidence::Xfrm(_) => return Some(KERNEL_TUNNEL_CPU.into()),
            Evidence::Strongswan(_) => {
                return Some(format!(
                    "{KERNEL_TUNNEL_CPU}; charon only negotiated the SAs (IKE), before the transfer"
                ))
            }
            Evidence::None | Evidence::TwoHosts { .. } => return None,
        };
        let (a, b) = self.tunnel_cpu()?;
        Some(format!(
            "tunnel CPU: end a {a:.0} % of a core, end b {b:.0} % ({whose}, over their lifetime)"
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
            _ => Vec::new(),
        };
        self.tunnel_cpu_line().into_iter().chain(details).collect()
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
                crate::encap::UDP_HEADER_LEN
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
    pub fn lines(&self) -> Vec<String> {
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
            Encrypting::Both => ("encrypting and decrypting", "encrypting and decrypting"),
            Encrypting::B => ("decrypting", "encrypting"),
            Encrypting::A => ("encrypting", "decrypting"),
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
            notes.push(format!(
                "  its time: {}; out {} packets per TUN read and {} per UDP send, in {} datagrams per receive buffer and {} packets per TUN write",
                s.time.line(),
                per_call(s.sent.packets, s.tun_reads),
                per_call(s.sent.packets, s.send_calls),
                per_call(s.datagrams_in, s.recv_buffers),
                per_call(s.delivered.packets, s.tun_writes),
            ));
        }
        notes
    }
}

/// `items` per call to one decimal, or `-` where no call was made.
fn per_call(items: u64, calls: u64) -> String {
    if calls == 0 {
        "-".into()
    } else {
        format!("{:.1}", items as f64 / calls as f64)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xfrm_evidence_reads_as_sentences() {
        let e = XfrmEvidence {
            mode: "tunnel".into(),
            suite: "aes-256-cbc-hmac-sha256".into(),
            reqid: "0x1a5abc".into(),
            sas: vec![SaEvidence {
                spi: "0x1a500101".into(),
                direction: "a->b (sent by a)".into(),
                pair: None,
                counters: SaCounters {
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
        let json = serde_json::to_value(Evidence::Xfrm(e)).unwrap();
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
            counters: SaCounters {
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
            mode: "tunnel".into(),
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

    fn tunnel_end(tun: &str) -> TunnelEnd {
        TunnelEnd {
            tun: tun.into(),
            pinned_cpu: Some(1),
            queue: None,
            cpu: CpuUsage::new(0.5, 0.25, 1.0),
            wall_s: 1.0,
            packets_per_s: 70_000.5,
            sent: Flow {
                packets: 70_000,
                bytes: 100_000_000,
            },
            delivered: Flow {
                packets: 3,
                bytes: 180,
            },
            datagrams_in: 3,
            drops: BTreeMap::from([("replay".to_string(), 0)]),
            errors: IoErrors::default(),
            send_calls: 1100,
            recv_calls: 3,
            tun_reads: 900,
            tun_writes: 3,
            recv_buffers: 2,
            time: ThreadTime {
                crypto_s: 0.5,
                udp_send_s: 0.3,
                tun_read_s: 0.15,
                other_s: 0.05,
                run_queue_s: Some(0.1),
                ..ThreadTime::default()
            },
            queues: Vec::new(),
            steering: None,
        }
    }

    fn implementation() -> ImplementationInfo {
        ImplementationInfo {
            choice: CryptoChoice::Auto,
            library: Library::AwsLc,
            hardware_aes: true,
            label: "auto (aws-lc-rs, AES-NI)".into(),
        }
    }

    #[test]
    fn a_threads_time_reads_largest_phase_first_with_its_wait_for_a_cpu() {
        let t = tunnel_end("ipl-tun-a").time;
        assert_eq!(
            t.line(),
            "crypto 50 %, UDP send 30 %, TUN read 15 %, other 5 %, of all that, waiting for a CPU 10 %"
        );
        let summed = t.plus(&ThreadTime {
            idle_s: 1.0,
            run_queue_s: None,
            ..ThreadTime::default()
        });
        assert_eq!(summed.total_s(), 2.0);
        // One thread without schedstat: the sum cannot say how long both waited.
        assert_eq!(
            summed.line(),
            "idle 50 %, crypto 25 %, UDP send 15 %, TUN read 8 %, other 2 %"
        );
        assert_eq!(ThreadTime::default().line(), "not timed");
    }

    #[test]
    fn a_userspace_end_says_where_its_time_went_and_its_batch_sizes() {
        let e = UserspaceEvidence {
            suite: CipherSuite::ChaCha20Poly1305,
            implementation: implementation(),
            inner_mtu: 1418,
            batching: Batching::Offload,
            a: tunnel_end("ipl-tun-a"),
            b: TunnelEnd {
                tun_writes: 0,
                ..tunnel_end("ipl-tun-b")
            },
            encrypting: Encrypting::A,
            efficiency: Efficiency {
                tunnel_payload_mb_per_cpu_s: 133.3,
                crypto: None,
            },
        };
        let lines = e.lines();
        assert_eq!(
            lines[2],
            "  its time: crypto 50 %, UDP send 30 %, TUN read 15 %, other 5 %, of all that, waiting for a CPU 10 %; \
             out 77.8 packets per TUN read and 63.6 per UDP send, in 1.5 datagrams per receive buffer and 1.0 packets per TUN write"
        );
        assert!(
            lines[4].ends_with("in 1.5 datagrams per receive buffer and - packets per TUN write"),
            "{}",
            lines[4]
        );
    }

    /// Every backend's evidence comes back from a report's JSON as what was written, under
    /// its backend's name: a VM guest's report and a server's end are read so.
    #[test]
    fn every_kind_of_evidence_reads_back_as_written() {
        let sa = SaEvidence {
            spi: "0x1".into(),
            direction: "a->b (sent by a)".into(),
            pair: None,
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
                    "tunnel CPU: end a 75 % of a core, end b 75 % (the openvpn processes, over their lifetime)"
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
