//! Packets and latency: the UDP workload (`--udp`, `--packet-size`, `--rate`), the
//! zero-loss search (`--find-ndr`) and round-trip probes (`--latency`), as asked and as
//! measured. Pure data; the sending, receiving and searching are crate `traffic`'s.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::family::Family;
use crate::{CpuUsage, Transfer};

/// Bytes of the lab's datagram header: the sequence number and the send time.
pub const DATAGRAM_HEADER: u32 = 16;
/// UDP's header.
pub const UDP_HEADER: u32 = 8;
/// The largest inner packet `--packet-size` takes (a jumbo frame's).
pub const MAX_PACKET_SIZE: u32 = 9000;
/// IMIX as commonly defined ("simple IMIX"): 7 of 64 bytes, 4 of 576, 1 of 1500 in every 12.
pub const IMIX: [(u32, u32); 3] = [(64, 7), (576, 4), (1500, 1)];

/// Bytes of the IP header an inner packet of `family` carries.
pub fn ip_header(family: Family) -> u32 {
    match family {
        Family::Ipv4 => 20,
        Family::Ipv6 => 40,
    }
}

/// The smallest inner packet that carries the lab's header: IP + UDP + 16 bytes.
pub fn min_packet_size(family: Family) -> u32 {
    ip_header(family) + UDP_HEADER + DATAGRAM_HEADER
}

/// The size of each inner IP packet sent (`--packet-size`): IP and UDP headers included, as
/// RFC 2544 and CSIT count a packet's size (less the Ethernet header).
// Ordered (fixed sizes ascending, IMIX last) so a matrix's rows of one size sort together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PacketSize {
    Fixed(u32),
    /// 64, 576 and 1500 bytes, 7:4:1, interleaved.
    Imix,
}

impl PacketSize {
    /// The sizes in the order the sender cycles through them.
    pub fn cycle(self) -> Vec<u32> {
        match self {
            PacketSize::Fixed(n) => vec![n],
            PacketSize::Imix => {
                // 7:4:1 spread out (not 7 small then 4 medium), so every stretch of the run
                // carries the same mix.
                let mut order = Vec::new();
                let mut left: Vec<(u32, u32)> = IMIX.to_vec();
                while left.iter().any(|(_, n)| *n > 0) {
                    for (size, n) in left.iter_mut() {
                        if *n > 0 {
                            order.push(*size);
                            *n -= 1;
                        }
                    }
                }
                order
            }
        }
    }

    /// The mean inner packet size, for converting packets/s to bits/s.
    pub fn mean(self) -> f64 {
        let c = self.cycle();
        c.iter().map(|&n| f64::from(n)).sum::<f64>() / c.len() as f64
    }

    pub fn largest(self) -> u32 {
        self.cycle().into_iter().max().unwrap_or(0)
    }

    pub fn smallest(self) -> u32 {
        self.cycle().into_iter().min().unwrap_or(0)
    }
}

impl fmt::Display for PacketSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketSize::Fixed(n) => write!(f, "{n} B"),
            PacketSize::Imix => f.write_str("IMIX"),
        }
    }
}

/// Why a `--packet-size` or `--rate` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("invalid packet size {0:?}: use bytes of the inner IP packet (e.g. 64, 512, 1400) or imix")]
    Size(String),
    #[error("invalid rate {0:?}: use packets per second (e.g. 50000, 200kpps, 1Mpps) or bits per second (e.g. 500Mbit, 1Gbit)")]
    Rate(String),
    #[error("invalid loss tolerance {0:?}: use percentages from 0 to 50, e.g. --find-ndr 0,0.5")]
    Tolerance(String),
}

impl FromStr for PacketSize {
    type Err = PacketError;
    fn from_str(s: &str) -> Result<PacketSize, PacketError> {
        let t = s.trim().to_ascii_lowercase();
        if t == "imix" {
            return Ok(PacketSize::Imix);
        }
        let n = t.strip_suffix('b').unwrap_or(&t).trim();
        n.parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .map(PacketSize::Fixed)
            .ok_or_else(|| PacketError::Size(s.to_string()))
    }
}

/// An offered rate (`--rate`), as typed: packets or bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rate {
    PacketsPerSecond(f64),
    /// Of inner IP packets, headers included.
    BitsPerSecond(f64),
}

impl Rate {
    /// Packets per second at `size`'s mean packet.
    pub fn pps(self, size: PacketSize) -> f64 {
        match self {
            Rate::PacketsPerSecond(p) => p,
            Rate::BitsPerSecond(b) => b / 8.0 / size.mean(),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::PacketsPerSecond(p) => write!(f, "{} pps", si(*p)),
            Rate::BitsPerSecond(b) => write!(f, "{}bit/s", si(*b)),
        }
    }
}

/// 1234567 as "1.23M": the prefixes people type rates with.
pub fn si(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.3}G", v / 1e9),
        v if v >= 1e6 => format!("{:.3}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

impl FromStr for Rate {
    type Err = PacketError;
    fn from_str(s: &str) -> Result<Rate, PacketError> {
        let bad = || PacketError::Rate(s.to_string());
        let t = s.trim().to_ascii_lowercase();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num.parse().map_err(|_| bad())?;
        let (prefix, bits) = match unit.trim() {
            u if u.ends_with("bit") || u.ends_with("bps") || u.ends_with("bit/s") => {
                let p = u
                    .trim_end_matches("/s")
                    .trim_end_matches("bit")
                    .trim_end_matches("bps");
                (p.to_string(), true)
            }
            u => (u.trim_end_matches("pps").to_string(), false),
        };
        let multiplier = match prefix.as_str() {
            "" => 1e0,
            "k" => 1e3,
            "m" => 1e6,
            "g" => 1e9,
            _ => return Err(bad()),
        };
        let v = value * multiplier;
        if !(v.is_finite() && v >= 1.0) {
            return Err(bad());
        }
        Ok(if bits {
            Rate::BitsPerSecond(v)
        } else {
            Rate::PacketsPerSecond(v)
        })
    }
}

/// `--find-ndr`'s loss tolerances in percent, ascending, each once.
#[derive(Debug, Clone, PartialEq)]
pub struct Tolerances(pub Vec<f64>);

impl FromStr for Tolerances {
    type Err = PacketError;
    fn from_str(s: &str) -> Result<Tolerances, PacketError> {
        parse_tolerances(s).map(Tolerances)
    }
}

/// Parses `--find-ndr`'s loss tolerances in percent ("0,0.5"), each from 0 to 50.
pub fn parse_tolerances(s: &str) -> Result<Vec<f64>, PacketError> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let v: f64 = part
            .trim()
            .trim_end_matches('%')
            .parse()
            .map_err(|_| PacketError::Tolerance(s.to_string()))?;
        if !(0.0..=50.0).contains(&v) {
            return Err(PacketError::Tolerance(s.to_string()));
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

/// The UDP workload of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpWorkload {
    pub packet_size: PacketSize,
    /// None: as fast as the sender goes.
    pub rate: Option<Rate>,
    /// Seconds each trial sends (`--time`; NDR's final trials).
    pub seconds: f64,
}

/// `--find-ndr`: the loss tolerances searched for, in percent (0: NDR).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NdrSearch {
    pub tolerances_pct: Vec<f64>,
    /// Seconds of a search trial; the final trials take the workload's seconds.
    pub trial_seconds: f64,
    /// The search stops once its bounds are this close (fraction of the upper bound).
    pub precision: f64,
}

/// What a UDP sender did in one trial; between two hosts it crosses the control channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentDatagrams {
    /// Datagrams the socket took.
    pub sent: u64,
    /// Datagrams the local socket refused (its queue full, an ICMP error queued).
    pub refused: u64,
    /// First send to last.
    pub seconds: f64,
    /// Send system calls.
    pub calls: u64,
    /// The sending thread's CPU time.
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
}

/// What a UDP receiver counted in one trial, apart from its bookkeeping; between two hosts
/// it crosses the control channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceivedDatagrams {
    pub received: u64,
    pub reordered: u64,
    pub duplicates: u64,
    pub corrupted: u64,
    pub payload_bytes: u64,
    pub jitter_ms: f64,
    /// First arrival to last.
    pub receive_seconds: f64,
    /// The receiving thread's CPU time, and the wall time it ran.
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    pub wall_s: f64,
}

/// Whether every figure is a finite, non-negative number: what a report may show.
fn plausible(figures: &[f64]) -> bool {
    figures.iter().all(|f| f.is_finite() && *f >= 0.0)
}

impl SentDatagrams {
    /// Finite figures (a peer's account is checked before it is used).
    pub fn plausible(&self) -> bool {
        plausible(&[self.seconds, self.cpu_user_s, self.cpu_system_s])
    }
}

impl ReceivedDatagrams {
    /// Finite figures, and no more datagrams counted than `sent` sent.
    pub fn plausible(&self, sent: &SentDatagrams) -> bool {
        plausible(&[
            self.jitter_ms,
            self.receive_seconds,
            self.cpu_user_s,
            self.cpu_system_s,
            self.wall_s,
        ]) && self.received <= sent.sent
            && self.reordered <= self.received
    }

    /// The trial as both ends saw it.
    pub fn trial(&self, sent: &SentDatagrams, offered_pps: Option<f64>, family: Family) -> UdpTrial {
        let overhead = u64::from(ip_header(family) + UDP_HEADER);
        let sent_pps = if sent.seconds > 0.0 {
            sent.sent as f64 / sent.seconds
        } else {
            0.0
        };
        UdpTrial {
            offered_pps,
            send_seconds: sent.seconds,
            sent: sent.sent,
            sent_pps,
            // Within 1 % of the rate asked for (the sender's own refusals count against it).
            kept_rate: offered_pps.map(|p| sent_pps >= 0.99 * p),
            received: self.received,
            lost: sent.sent.saturating_sub(self.received),
            reordered: self.reordered,
            duplicates: self.duplicates,
            corrupted: self.corrupted,
            jitter_ms: self.jitter_ms,
            receive_seconds: self.receive_seconds,
            payload_bytes: self.payload_bytes,
            packet_bytes: self.payload_bytes + self.received * overhead,
            link_bytes: None,
            outside_drops: None,
        }
    }

    /// The trial as a transfer of its delivered payload, for the report's MB/s: timed by
    /// the sender's clock (what was offered in that time and came through), verified when
    /// no datagram failed its check.
    pub fn transfer(&self, sent: &SentDatagrams) -> Transfer {
        Transfer {
            bytes: self.payload_bytes,
            seconds: sent.seconds,
            streams: 1,
            verified: self.corrupted == 0,
            sender_cpu: CpuUsage::new(sent.cpu_user_s, sent.cpu_system_s, sent.seconds),
            receiver_cpu: CpuUsage::new(self.cpu_user_s, self.cpu_system_s, self.wall_s),
            sender_threads: 1,
            receiver_threads: 1,
        }
    }
}

/// What one UDP trial measured: the sender's side and the receiver's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpTrial {
    /// Packets per second asked for; None: unlimited.
    pub offered_pps: Option<f64>,
    /// Sender's clock, first datagram to last.
    pub send_seconds: f64,
    pub sent: u64,
    /// The rate the sender achieved.
    pub sent_pps: f64,
    /// Whether the sender kept the asked rate (within 1 %); None when unlimited.
    pub kept_rate: Option<bool>,
    /// Distinct datagrams delivered whose payload verified.
    pub received: u64,
    /// Sent and never delivered (`sent - received`).
    pub lost: u64,
    /// Delivered after a datagram with a higher sequence number.
    pub reordered: u64,
    pub duplicates: u64,
    /// Delivered with a payload that did not verify, or a sequence number never sent.
    pub corrupted: u64,
    /// RFC 3550 interarrival jitter at the end of the trial, in milliseconds.
    pub jitter_ms: f64,
    /// Receiver's clock, first datagram to last.
    pub receive_seconds: f64,
    /// UDP payload delivered (the lab's header included).
    pub payload_bytes: u64,
    /// Inner IP packets delivered, IP and UDP headers included.
    pub packet_bytes: u64,
    /// Bytes the lab's link carried towards the receiver during the trial, as its
    /// interface counts them (outer packets, after the tunnel); None where not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bytes: Option<u64>,
    /// Datagrams the kernel dropped outside the tunnel during the trial; None where not
    /// counted (between two hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_drops: Option<OutsideDrops>,
}

/// Where a trial's datagrams were dropped outside the tunnel, by the kernel's own counters:
/// loss the tunnel's own drop counters cannot show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutsideDrops {
    /// Dropped at the receiving socket, its receive buffer full: the receiver fell behind
    /// (the socket's `drops` in /proc/net/udp).
    pub receiver_socket: u64,
    /// Dropped by the lab's link: the sending veth's transmit drops and the receiving
    /// veth's receive drops (/proc/net/dev).
    pub link: u64,
    /// Dropped by the namespaces' other devices (a TUN device's queue full before the
    /// tunnel read it, the kernel's tunnel devices).
    #[serde(default)]
    pub tunnel_devices: u64,
}

impl OutsideDrops {
    /// `9812 at the receiving socket (its buffer full), 0 on the link, 0 in the tunnel
    /// devices' queues (before the tunnel read them)`.
    pub fn line(&self) -> String {
        format!(
            "{} at the receiving socket (its buffer full), {} on the link, {} in the tunnel devices' queues \
             (before the tunnel read them)",
            self.receiver_socket, self.link, self.tunnel_devices
        )
    }
}

impl UdpTrial {
    /// Lost datagrams as a share of those sent, in percent.
    pub fn loss_pct(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.lost as f64 * 100.0 / self.sent as f64
        }
    }

    /// Delivered packets per second, over the sender's duration (what was offered in that
    /// time and came through); 0 for a trial that sent nothing.
    pub fn received_pps(&self) -> f64 {
        ratio(self.received as f64, self.send_seconds)
    }

    /// Delivered UDP payload, MB/s over the sender's duration.
    pub fn payload_mb_per_s(&self) -> f64 {
        ratio(self.payload_bytes as f64 / 1e6, self.send_seconds)
    }

    /// Delivered inner packets, Mbit/s over the sender's duration.
    pub fn packet_mbit_per_s(&self) -> f64 {
        ratio(self.packet_bytes as f64 * 8.0 / 1e6, self.send_seconds)
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 && a.is_finite() {
        a / b
    } else {
        0.0
    }
}

/// One rate found by `--find-ndr`: the highest offered rate whose final trial lost no
/// more than the tolerance, and the trials that bound it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NdrBound {
    /// "NDR" for a tolerance of 0, "PDR" otherwise.
    pub name: String,
    pub tolerance_pct: f64,
    /// The rate `lower` put on the path, packets/s: its offered rate, or the rate its
    /// sender reached where that was lower (or unlimited); 0 where no rate passed.
    pub pps: f64,
    /// `pps` as inner packet bits per second, Mbit/s.
    pub mbit_per_s: f64,
    /// The final, full-length trial at `pps`, within the tolerance.
    pub lower: Option<UdpTrial>,
    /// The lowest offered rate above `pps` that lost more; None where even the sender's
    /// highest rate passed (the generator, not the path, set the bound).
    pub upper: Option<UdpTrial>,
}

/// `--find-ndr`'s outcome for one packet size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NdrReport {
    pub packet_size: PacketSize,
    /// The unlimited trial the search starts from: the sender's highest rate.
    pub max_rate: UdpTrial,
    pub bounds: Vec<NdrBound>,
    /// Every trial, in the order run (search and final).
    pub trials: Vec<UdpTrial>,
}

/// The UDP part of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpReport {
    pub packet_size: PacketSize,
    /// One per `--repeat` (absent with `--find-ndr`, whose trials are in `ndr`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trials: Vec<UdpTrial>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ndr: Option<NdrReport>,
    /// The same search over the bare link, before an encrypting backend's: where it finds
    /// no more than the tunnel's, the generator (not the tunnel) was the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<NdrReport>,
}

/// The quantiles every latency summary carries, and the CDF points a plot draws.
pub const CDF_QUANTILES: [f64; 14] = [
    0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99999, 1.0,
];

/// Round trips measured under one condition, from an HDR histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyPhase {
    /// "idle", "under TCP load", "at 50 % of PDR", ...
    pub name: String,
    /// The load's offered rate, where the phase had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_pps: Option<f64>,
    pub probes_sent: u64,
    pub probes_received: u64,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// (quantile, ms) at [`CDF_QUANTILES`].
    pub cdf: Vec<(f64, f64)>,
}

/// `--latency`: probes through the data path, one per interval, echoed by the far end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    pub probe_interval_ms: f64,
    pub phases: Vec<LatencyPhase>,
}
