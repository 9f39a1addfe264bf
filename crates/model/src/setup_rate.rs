//! `ipsec-lab setup-rate`: how fast a tunnel's state is set up as it grows, per backend.
//! For `xfrm`: how fast a kernel installs XFRM SAs and policies as its tables grow, what a
//! data packet's lookup costs with them installed, how long a flush takes, and what an SA
//! costs in kernel memory. For `strongswan`: IKE_SAs a responder charon establishes per
//! second. For `wireguard-go`: peers a device takes per second over its UAPI socket and
//! handshakes it completes per second. The request is checked here, before anything starts;
//! the report is what was measured.

use serde::{Deserialize, Serialize};

use crate::{CipherSuite, Environment, Summary};

/// What a setup-rate run sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetupBackend {
    /// XFRM SAs and policies over netlink, in user-mode Linux (the host has no ESP).
    #[default]
    Xfrm,
    /// IKEv2 SAs between two charons in two namespaces of this host.
    Strongswan,
    /// WireGuard peers and handshakes on a wireguard-go device in a namespace of this host.
    WireguardGo,
}

impl SetupBackend {
    pub const ALL: [SetupBackend; 3] = [
        SetupBackend::Xfrm,
        SetupBackend::Strongswan,
        SetupBackend::WireguardGo,
    ];

    /// The setup rate a run backend has, if any.
    pub fn of(backend: crate::Backend) -> Option<SetupBackend> {
        match backend {
            crate::Backend::Xfrm => Some(SetupBackend::Xfrm),
            crate::Backend::Strongswan => Some(SetupBackend::Strongswan),
            crate::Backend::WireguardGo => Some(SetupBackend::WireguardGo),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SetupBackend::Xfrm => "xfrm",
            SetupBackend::Strongswan => "strongswan",
            SetupBackend::WireguardGo => "wireguard-go",
        }
    }

    /// What one unit of `--sizes` counts.
    pub fn unit(self) -> &'static str {
        match self {
            SetupBackend::Xfrm => "SAs",
            SetupBackend::Strongswan => "IKE_SAs",
            SetupBackend::WireguardGo => "peers",
        }
    }

    /// The sizes measured when `--sizes` is not given.
    fn default_sizes(self) -> Vec<TableSize> {
        match self {
            SetupBackend::Xfrm => vec![TableSize(1000), TableSize(10_000), TableSize(100_000)],
            SetupBackend::Strongswan => vec![TableSize(100), TableSize(1000)],
            SetupBackend::WireguardGo => vec![TableSize(1000), TableSize(10_000)],
        }
    }

    /// The largest size: the guest's memory for xfrm; for IKE and WireGuard what a run
    /// finishes in a few minutes here (every IKE_SA costs two MODP-2048 exchanges).
    pub fn max_size(self) -> u32 {
        match self {
            SetupBackend::Xfrm => MAX_TABLE_SIZE,
            SetupBackend::Strongswan => 10_000,
            SetupBackend::WireguardGo => 100_000,
        }
    }

    /// `--window`'s default and largest value: requests per write for xfrm, exchanges in
    /// flight for IKE and WireGuard. wireguard-go treats itself as under load (cookies, then
    /// 20 handshakes/s per source address) from 128 queued handshakes: 64 stays below.
    fn window(self) -> (u32, u32) {
        match self {
            SetupBackend::Xfrm => (256, MAX_WINDOW),
            SetupBackend::Strongswan => (32, 1024),
            SetupBackend::WireguardGo => (64, 1024),
        }
    }
}

impl std::fmt::Display for SetupBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SetupBackend {
    type Err = String;
    fn from_str(text: &str) -> Result<SetupBackend, String> {
        SetupBackend::ALL
            .into_iter()
            .find(|b| b.name() == text)
            .ok_or_else(|| {
                format!("setup-rate backend {text:?}: choose xfrm (SAs and policies), strongswan (IKE_SAs) or wireguard-go (peers and handshakes)")
            })
    }
}

/// The largest table a step may build: `mem` of [`guest_memory_mib`] grows with it, and
/// this keeps the guest within a few GiB of the host's memory.
pub const MAX_TABLE_SIZE: u32 = 200_000;
/// The most requests in one socket write (the socket's buffers grow with the window).
pub const MAX_WINDOW: u32 = 4096;
/// The longest flow per lookup trial.
pub const MAX_FLOW_SECONDS: f64 = 60.0;
/// The shortest: a trial must see enough packets to be worth a ratio.
pub const MIN_FLOW_SECONDS: f64 = 0.05;
/// Flows per phase of the lookup comparison (alone before, loaded, alone after).
pub const TRIALS: usize = 3;

/// Guest memory for the largest of `sizes`: 1 GiB for the system and the flow, and 16 KiB
/// per SA-and-policy (an SA took 7 KiB of kernel memory in user-mode Linux 6.1; the rest
/// is the policy, the userspace specs and room).
pub fn guest_memory_mib(sizes: &[TableSize]) -> u64 {
    let largest = sizes.iter().map(|s| u64::from(s.0)).max().unwrap_or(0);
    1024 + (largest * 16).div_ceil(1024)
}

/// How many SAs (and as many policies) one step installs: `1000`, `1k`, `10k`, `0.1m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSize(pub u32);

impl std::str::FromStr for TableSize {
    type Err = String;
    fn from_str(text: &str) -> Result<TableSize, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, suffix) = t.split_at(split);
        let scale = match suffix.to_ascii_lowercase().as_str() {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            _ => {
                return Err(format!(
                    "table size {text:?}: unknown suffix {suffix:?} (a count of SAs: 1000, 10k, 0.1m)"
                ))
            }
        };
        let count = number
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map(|n| n * scale)
            .ok_or_else(|| format!("table size {text:?}: not a count of SAs (e.g. 1k, 10k, 100k)"))?;
        if count.fract() != 0.0 {
            return Err(format!("table size {text:?}: not a whole number of SAs"));
        }
        if count < 1.0 {
            return Err(format!("table size {text:?} must be at least 1 SA, e.g. 1k"));
        }
        if count > f64::from(MAX_TABLE_SIZE) {
            return Err(format!(
                "table size {text:?} is above {MAX_TABLE_SIZE} SAs, the most the guest's memory is sized for"
            ));
        }
        Ok(TableSize(count as u32))
    }
}

impl std::fmt::Display for TableSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            n if n >= 1000 && n % 1000 == 0 => write!(f, "{}k", n / 1000),
            n => write!(f, "{n}"),
        }
    }
}

/// What a setup-rate run measures, validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupRatePlan {
    #[serde(default)]
    pub backend: SetupBackend,
    pub sizes: Vec<TableSize>,
    /// Every SA's suite (xfrm only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<CipherSuite>,
    /// xfrm: requests per socket write in the batched installs; strongswan and
    /// wireguard-go: exchanges in flight.
    pub window: u32,
    /// Each lookup trial's flow length (xfrm only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_seconds: Option<f64>,
}

/// The values as given: None where the user left the default.
#[derive(Debug, Clone, Default)]
pub struct SetupRateRequest {
    pub backend: SetupBackend,
    pub sizes: Option<Vec<TableSize>>,
    pub suite: Option<CipherSuite>,
    pub window: Option<u32>,
    pub flow_seconds: Option<f64>,
}

impl SetupRatePlan {
    /// Every check on the values together; each value alone was parsed already.
    pub fn validate(request: SetupRateRequest) -> Result<SetupRatePlan, String> {
        let backend = request.backend;
        let sizes = request.sizes.unwrap_or_else(|| backend.default_sizes());
        if sizes.is_empty() {
            return Err("--sizes needs at least one size, e.g. 1k,10k".into());
        }
        if let Some(big) = sizes.iter().find(|s| s.0 > backend.max_size()) {
            return Err(format!(
                "--sizes {big}: setup-rate --backend {backend} measures at most {} {}",
                backend.max_size(),
                backend.unit()
            ));
        }
        let (suite, flow_seconds) = match backend {
            SetupBackend::Xfrm => {
                let suite = request.suite.unwrap_or(CipherSuite::AesGcm {
                    key: crate::KeyBits::Aes256,
                });
                if !matches!(suite, CipherSuite::AesCbc { .. } | CipherSuite::AesGcm { .. }) {
                    return Err(format!(
                        "--cipher {suite}: setup-rate installs ESP SAs the lab can key: aes-128-gcm, aes-256-gcm, \
                         aes-256-cbc-hmac-sha256, ..."
                    ));
                }
                let flow_seconds = request.flow_seconds.unwrap_or(0.5);
                if !(MIN_FLOW_SECONDS..=MAX_FLOW_SECONDS).contains(&flow_seconds) {
                    return Err(format!(
                        "--flow-seconds {flow_seconds}: each lookup flow lasts {MIN_FLOW_SECONDS} to {MAX_FLOW_SECONDS} s"
                    ));
                }
                (Some(suite), Some(flow_seconds))
            }
            SetupBackend::Strongswan | SetupBackend::WireguardGo => {
                let what = match backend {
                    SetupBackend::Strongswan => "IKE_SAs carry no ESP SA and no data here",
                    _ => "WireGuard has one suite and no lookup flow here",
                };
                if request.suite.is_some() {
                    return Err(format!("--cipher is for setup-rate --backend xfrm: {what}"));
                }
                if request.flow_seconds.is_some() {
                    return Err(format!("--flow-seconds is for setup-rate --backend xfrm: {what}"));
                }
                (None, None)
            }
        };
        let (default_window, max_window) = backend.window();
        let window = request.window.unwrap_or(default_window);
        if !(1..=max_window).contains(&window) {
            return Err(match backend {
                SetupBackend::Xfrm => {
                    format!(
                        "--window {window}: requests per write must be 1 to {max_window} (1 is one by one)"
                    )
                }
                _ => format!(
                    "--window {window}: {} in flight must be 1 to {max_window} (1 is one by one)",
                    backend.unit()
                ),
            });
        }
        Ok(SetupRatePlan {
            backend,
            sizes,
            suite,
            window,
            flow_seconds,
        })
    }

    /// The xfrm suite (validated: an xfrm plan has one).
    pub fn xfrm_suite(&self) -> CipherSuite {
        self.suite.unwrap_or(CipherSuite::AesGcm {
            key: crate::KeyBits::Aes256,
        })
    }

    /// The xfrm lookup trials' length (validated: an xfrm plan has one).
    pub fn xfrm_flow_seconds(&self) -> f64 {
        self.flow_seconds.unwrap_or(0.5)
    }
}

/// Installs per second, of SAs and of policies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct InstallRate {
    pub sas_per_s: f64,
    pub policies_per_s: f64,
}

/// A data packet's lookup cost with the table full: one UDP flow through one SA, its
/// packets per second alone (before the N are installed and after they are flushed) and
/// with the N installed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LookupCost {
    /// Packets per second of each trial without the N.
    pub alone_pps: Vec<f64>,
    /// Packets per second of each trial with the N installed.
    pub loaded_pps: Vec<f64>,
    /// Median alone over median loaded: how many times a packet costs more with the N
    /// (None where no packet got through alone).
    pub slowdown: Option<f64>,
    /// The alone trials' spread, (max - min) / median: a slowdown within 1 ± this is noise.
    pub noise: f64,
}

impl LookupCost {
    pub fn new(alone_pps: Vec<f64>, loaded_pps: Vec<f64>) -> LookupCost {
        let alone = Summary::of(&alone_pps);
        let loaded = Summary::of(&loaded_pps);
        let slowdown = match (alone, loaded) {
            (Some(a), Some(l)) if a.median > 0.0 && l.median > 0.0 => Some(a.median / l.median),
            _ => None,
        };
        LookupCost {
            alone_pps,
            loaded_pps,
            slowdown,
            noise: alone.map_or(0.0, |a| a.relative_spread()),
        }
    }

    /// Whether the slowdown is within the alone trials' own spread.
    pub fn within_noise(&self) -> bool {
        self.slowdown.is_none_or(|s| (s - 1.0).abs() <= self.noise)
    }
}

/// One table size's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRates {
    pub size: TableSize,
    /// A window of requests per write, the acks collected after each.
    pub batched: InstallRate,
    /// One request, its ack, the next.
    pub one_by_one: InstallRate,
    /// `ip xfrm state flush` of the N SAs, in seconds.
    pub flush_sas_s: f64,
    /// `ip xfrm policy flush` of the N policies, in seconds.
    pub flush_policies_s: f64,
    /// The drop in the kernel's free memory (MemFree) per SA installed; None where the
    /// guest's free memory did not drop (another allocation freed more meanwhile).
    pub kernel_bytes_per_sa: Option<f64>,
    pub lookup: LookupCost,
}

/// One size's IKE figures: N IKE_SAs initiated by one charon, established by the other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IkeRates {
    pub size: TableSize,
    /// IKE_SAs per second with the plan's window of initiations in flight.
    pub windowed_per_s: f64,
    /// IKE_SAs per second, each initiated when the one before was up.
    pub one_by_one_per_s: f64,
    /// The responder charon's resident memory grown per IKE_SA (None where it did not grow).
    pub responder_bytes_per_sa: Option<f64>,
}

/// One size's WireGuard figures on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerRates {
    pub size: TableSize,
    /// Peers per second, all N in one UAPI `set`.
    pub added_per_s: f64,
    /// Peers per second, one UAPI `set` each.
    pub added_one_by_one_per_s: f64,
    /// How many of the N peers handshook (at most 10,000).
    pub handshakes: u32,
    /// Handshakes the device completed per second, the plan's window of initiations in
    /// flight, each initiator one of its peers.
    pub handshakes_per_s: f64,
    /// The device process's resident memory grown per peer (None where it did not grow).
    pub process_bytes_per_peer: Option<f64>,
}

/// `ipsec-lab setup-rate --json`: `tables` for xfrm, `ike` for strongswan, `peers` for
/// wireguard-go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupRateReport {
    /// Where it was measured: the guest's kernel, CPU and virtualisation.
    pub environment: Environment,
    pub plan: SetupRatePlan,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<TableRates>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ike: Vec<IkeRates>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerRates>,
    /// What implementation answered (charon's or wireguard-go's version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    pub notes: Vec<String>,
}

/// `matrix --setup-rate N`: one backend's setup rates at one size, beside its rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupRateCell {
    pub backend: SetupBackend,
    pub size: TableSize,
    /// Where it was measured: `host`, or the guest's virtualisation.
    pub measured_in: String,
    /// What was measured, per second (empty where it did not run).
    pub figures: Vec<RateFigure>,
    /// Why it did not run, or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

/// One rate: what is counted and how, and how many per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateFigure {
    /// `sas_batched`, `ike_sas_windowed`, `handshakes`, ...
    pub name: String,
    pub per_s: f64,
}

impl SetupRateCell {
    /// The cell of a setup-rate run's first size.
    pub fn from_report(report: &SetupRateReport) -> Option<SetupRateCell> {
        let figure = |name: &str, per_s: f64| RateFigure {
            name: name.into(),
            per_s,
        };
        let (size, figures) = match report.plan.backend {
            SetupBackend::Xfrm => report.tables.first().map(|t| {
                (
                    t.size,
                    vec![
                        figure("sas_batched", t.batched.sas_per_s),
                        figure("sas_one_by_one", t.one_by_one.sas_per_s),
                        figure("policies_batched", t.batched.policies_per_s),
                    ],
                )
            })?,
            SetupBackend::Strongswan => report.ike.first().map(|r| {
                (
                    r.size,
                    vec![
                        figure("ike_sas_windowed", r.windowed_per_s),
                        figure("ike_sas_one_by_one", r.one_by_one_per_s),
                    ],
                )
            })?,
            SetupBackend::WireguardGo => report.peers.first().map(|r| {
                (
                    r.size,
                    vec![
                        figure("peers_one_set", r.added_per_s),
                        figure("peers_one_by_one", r.added_one_by_one_per_s),
                        figure("handshakes", r.handshakes_per_s),
                    ],
                )
            })?,
        };
        Some(SetupRateCell {
            backend: report.plan.backend,
            size,
            measured_in: report.environment.virtualization.clone(),
            figures,
            not_run: None,
        })
    }

    /// A backend whose rate could not be measured, and why.
    pub fn not_run(backend: SetupBackend, size: TableSize, reason: impl Into<String>) -> SetupRateCell {
        SetupRateCell {
            backend,
            size,
            measured_in: String::new(),
            figures: Vec::new(),
            not_run: Some(reason.into()),
        }
    }

    /// The figures in words: `12,345 SAs/s batched · 4,001 SAs/s 1-by-1 · ...`, or why none.
    pub fn text(&self) -> String {
        if let Some(reason) = &self.not_run {
            return format!("not run: {reason}");
        }
        self.figures
            .iter()
            .map(|f| format!("{} {}", thousands(f.per_s), figure_label(&f.name)))
            .collect::<Vec<_>>()
            .join(" · ")
    }

    /// `name=per_s;...` for a CSV field.
    pub fn field(&self) -> String {
        self.figures
            .iter()
            .filter(|f| f.per_s.is_finite())
            .map(|f| format!("{}={:.1}", f.name, f.per_s))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// A figure's name as the tables print it.
fn figure_label(name: &str) -> &str {
    match name {
        "sas_batched" => "SAs/s batched",
        "sas_one_by_one" => "SAs/s 1-by-1",
        "policies_batched" => "policies/s batched",
        "ike_sas_windowed" => "IKE_SAs/s windowed",
        "ike_sas_one_by_one" => "IKE_SAs/s 1-by-1",
        "peers_one_set" => "peers/s in one set",
        "peers_one_by_one" => "peers/s 1-by-1",
        "handshakes" => "handshakes/s",
        other => other,
    }
}

/// A rate as a whole number with thousands separators ("—" if not finite).
pub fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let digits = format!("{v:.0}");
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `count` per `seconds`, never infinite: a step too fast for the clock counts as 1 ns.
pub fn per_second(count: usize, seconds: f64) -> f64 {
    count as f64 / seconds.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_k_and_m_and_refuse_the_rest() {
        let ok = |t: &str| t.parse::<TableSize>().unwrap().0;
        assert_eq!(
            (ok("1k"), ok("10K"), ok("100k"), ok("2500"), ok("0.1m")),
            (1000, 10_000, 100_000, 2500, 100_000)
        );
        for (bad, says) in [
            ("1x", "unknown suffix \"x\""),
            ("0", "at least 1 SA"),
            ("0k", "at least 1 SA"),
            ("1.5", "whole number"),
            ("k", "not a count"),
            ("", "not a count"),
            ("300k", "above 200000 SAs"),
            ("1kb", "unknown suffix"),
        ] {
            let e = bad.parse::<TableSize>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(TableSize(10_000).to_string(), "10k");
        assert_eq!(TableSize(2500).to_string(), "2500");
    }

    fn xfrm(window: u32, flow: f64) -> Result<SetupRatePlan, String> {
        SetupRatePlan::validate(SetupRateRequest {
            sizes: Some(vec![TableSize(1000)]),
            window: Some(window),
            flow_seconds: Some(flow),
            ..SetupRateRequest::default()
        })
    }

    #[test]
    fn the_plan_refuses_a_bad_window_and_flow() {
        assert!(xfrm(0, 1.0).unwrap_err().contains("--window 0"));
        assert!(xfrm(5000, 1.0).is_err());
        assert!(xfrm(64, 0.0).unwrap_err().contains("--flow-seconds"));
        assert!(xfrm(64, f64::NAN).is_err());
        let empty = SetupRateRequest {
            sizes: Some(vec![]),
            ..SetupRateRequest::default()
        };
        assert!(SetupRatePlan::validate(empty).is_err());
        let none = SetupRateRequest {
            suite: Some("none".parse().unwrap()),
            ..SetupRateRequest::default()
        };
        assert!(SetupRatePlan::validate(none)
            .unwrap_err()
            .contains("--cipher none"));
        assert!(xfrm(64, 1.0).is_ok());
    }

    #[test]
    fn each_backend_has_its_defaults_and_refuses_what_is_not_its_own() {
        let plan = |backend, f: fn(&mut SetupRateRequest)| {
            let mut r = SetupRateRequest {
                backend,
                ..SetupRateRequest::default()
            };
            f(&mut r);
            SetupRatePlan::validate(r)
        };
        let x = plan(SetupBackend::Xfrm, |_| {}).unwrap();
        assert_eq!((x.sizes.len(), x.window, x.flow_seconds), (3, 256, Some(0.5)));
        assert_eq!(x.xfrm_suite().to_string(), "aes-256-gcm");
        let s = plan(SetupBackend::Strongswan, |_| {}).unwrap();
        assert_eq!(
            (s.sizes, s.window, s.suite),
            (vec![TableSize(100), TableSize(1000)], 32, None)
        );
        let w = plan(SetupBackend::WireguardGo, |_| {}).unwrap();
        assert_eq!(w.window, 64);
        let e = plan(SetupBackend::Strongswan, |r| {
            r.suite = Some("aes-128-gcm".parse().unwrap())
        });
        assert!(e
            .unwrap_err()
            .contains("--cipher is for setup-rate --backend xfrm"));
        let e = plan(SetupBackend::WireguardGo, |r| r.flow_seconds = Some(1.0));
        assert!(e.unwrap_err().contains("--flow-seconds is for"));
        let e = plan(SetupBackend::Strongswan, |r| {
            r.sizes = Some(vec![TableSize(20_000)])
        });
        assert!(e.unwrap_err().contains("at most 10000 IKE_SAs"));
        let e = plan(SetupBackend::WireguardGo, |r| r.window = Some(2000));
        assert!(e.unwrap_err().contains("peers in flight must be 1 to 1024"));
        assert_eq!(
            "wireguard-go".parse::<SetupBackend>(),
            Ok(SetupBackend::WireguardGo)
        );
        assert!("openvpn"
            .parse::<SetupBackend>()
            .unwrap_err()
            .contains("choose xfrm"));
    }

    #[test]
    fn the_guest_grows_with_the_largest_table() {
        assert_eq!(guest_memory_mib(&[TableSize(1000)]), 1040);
        assert_eq!(
            guest_memory_mib(&[TableSize(1000), TableSize(MAX_TABLE_SIZE)]),
            1024 + 3125
        );
    }

    #[test]
    fn the_slowdown_is_judged_against_the_alone_spread() {
        let c = LookupCost::new(vec![100.0, 110.0, 90.0], vec![50.0, 50.0, 50.0]);
        assert_eq!(c.slowdown, Some(2.0));
        assert!((c.noise - 0.2).abs() < 1e-9);
        assert!(!c.within_noise());
        let c = LookupCost::new(vec![100.0, 110.0, 90.0], vec![95.0, 95.0, 95.0]);
        assert!(c.within_noise());
        let none = LookupCost::new(vec![0.0; 3], vec![1.0; 3]);
        assert_eq!(none.slowdown, None);
        assert!(per_second(5, 0.0).is_finite());
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(f64::NAN), "—");
    }
}
