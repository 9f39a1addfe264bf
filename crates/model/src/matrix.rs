//! The matrix result schema: one row per backend variant, one cell per cipher suite, each
//! cell either measured (median, min–max over the repeats, CPU per side, % of the plain
//! baseline measured in the same environment) or "not run" with the reason. Versioned
//! separately from the single-run schema: scripts parse it, so a field is added, never
//! renamed or re-typed without bumping [`MATRIX_SCHEMA_VERSION`].
//!
//! A row of a UDP packet size (`matrix --packet-sizes`) is a row of its own (its key names
//! the size); its cells carry packets/s and loss ([`PacketRates`]), and with `--latency`
//! every cell its round trips per phase.

mod packets;

pub use packets::{PacketRates, RateFound};

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::env::Environment;
use crate::packets::{LatencyReport, PacketSize};
use crate::plan::CryptoChoice;
use crate::size::ByteSize;
use crate::stats::Summary;
use crate::suite::CipherSuite;

pub const MATRIX_SCHEMA_VERSION: u32 = 1;

/// Key of the host's environment in [`MatrixReport::environments`].
pub const HOST: &str = "host";
/// Key of a VM guest's environment.
pub const VM: &str = "vm";
/// Key of a user-mode Linux guest's environment (`--vm uml`): real speed, not emulated.
pub const UML: &str = "uml";

pub use crate::kernels::{uml_environment, vm_environment};

/// What makes a row different from another row of the same backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum RowVariant {
    /// The backend as it runs by default (kernel picks its drivers, no crypto choice).
    Default,
    /// The userspace backend with this `--crypto` implementation.
    Crypto(CryptoChoice),
    /// The xfrm backend with this kernel `cbc(aes)` driver raised to the top priority.
    KernelDriver(String),
    /// The xfrm backend with ESP encapsulated (`--encap udp`), default drivers.
    Encap(crate::encap::Encap),
    /// The xfrm backend's AES-GCM SAs on a `pcrypt(rfc4106(gcm(aes)))` instance (`--pcrypt`).
    Pcrypt,
    /// The xfrm backend with per-CPU SAs (`--per-cpu-sa`, Linux 6.13+).
    PerCpuSa,
}

/// Identifies a row: backend, variant and where it ran. Two reports' rows are the same row
/// when their keys are equal (what `compare` matches on).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RowKey {
    pub backend: Backend,
    pub variant: RowVariant,
    /// Key into [`MatrixReport::environments`]: [`HOST`] or [`VM`].
    pub environment: String,
    /// Tunnel threads per end (`matrix --threads`); 1, the default, is left out of the JSON
    /// so reports from before read and compare as they were.
    #[serde(default = "one_thread", skip_serializing_if = "is_one_thread")]
    pub tunnel_threads: u16,
    /// The link's netem conditions (`matrix --netem`), in tc's words; None: the bare link
    /// (left out of the JSON, so reports from before read and compare as they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netem: Option<String>,
    /// The inner packet size of a UDP row (`matrix --packet-sizes`); None: the bulk TCP
    /// transfer (left out of the JSON, so reports from before read and compare as they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_size: Option<PacketSize>,
    /// TCP streams per transfer where the sweep has several counts (`matrix -P 1,2,4`: a
    /// row per count, the scaling curve); None: the sweep's one count, in its notes (left
    /// out of the JSON, so reports from before read and compare as they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<u16>,
}

fn one_thread() -> u16 {
    1
}

fn is_one_thread(n: &u16) -> bool {
    *n == 1
}

impl RowKey {
    pub fn new(backend: Backend, variant: RowVariant, environment: &str) -> RowKey {
        RowKey {
            backend,
            variant,
            environment: environment.to_string(),
            tunnel_threads: 1,
            netem: None,
            packet_size: None,
            streams: None,
        }
    }

    /// The same row at `streams` TCP streams per transfer, one count of several (None: the
    /// sweep's one count).
    pub fn with_streams(self, streams: Option<u16>) -> RowKey {
        RowKey { streams, ..self }
    }

    /// The same row sending UDP datagrams of `size` (None: the bulk TCP transfer).
    pub fn with_packet_size(self, size: Option<PacketSize>) -> RowKey {
        RowKey {
            packet_size: size,
            ..self
        }
    }

    /// The row's label without its packet size: what a packets/s chart calls the line
    /// whose points are the sizes.
    pub fn series_label(&self) -> String {
        self.clone().with_packet_size(None).label()
    }

    /// The same row on a link shaped by `netem` (None: the bare link).
    pub fn with_netem(self, netem: Option<&crate::netem::NetemSpec>) -> RowKey {
        RowKey {
            netem: netem.map(|n| n.to_string()),
            ..self
        }
    }

    fn with_netem_text(self, netem: Option<&str>) -> RowKey {
        RowKey {
            netem: netem.map(str::to_string),
            ..self
        }
    }

    /// The same row at `threads` tunnel threads per end.
    pub fn with_threads(self, threads: u16) -> RowKey {
        RowKey {
            tunnel_threads: threads,
            ..self
        }
    }

    /// The label in the style of the classic table: `plain (line rate)`, `userspace [soft]`,
    /// `xfrm [cbc-aes-aesni]`, `userspace [auto] UDP 64 B` for a UDP row, with ` (vm)`
    /// appended for rows measured in a VM guest.
    pub fn label(&self) -> String {
        let base = match (&self.backend, &self.variant) {
            (Backend::Plain, _) => "plain (line rate)".to_string(),
            (b, RowVariant::Default) => b.name().to_string(),
            (b, RowVariant::Crypto(c)) => format!("{b} [{c}]"),
            (b, RowVariant::KernelDriver(d)) => format!("{b} [{d}]"),
            (b, RowVariant::Encap(e)) => format!("{b} [{}]", e.short_label()),
            (b, RowVariant::Pcrypt) => format!("{b} [pcrypt]"),
            (b, RowVariant::PerCpuSa) => format!("{b} [per-CPU SAs]"),
        };
        // The count is tunnel threads, or for kernel ESP SA pairs (one per stream group).
        let base = match (self.tunnel_threads, self.backend) {
            (0 | 1, _) => base,
            (n, Backend::Xfrm) => format!("{base} x{n} SAs"),
            (n, _) => format!("{base} x{n} threads"),
        };
        let base = match self.packet_size {
            Some(size) => format!("{base} UDP {size}"),
            None => base,
        };
        let base = match self.streams {
            Some(n) => format!("{base} -P {n}"),
            None => base,
        };
        let base = if self.environment == HOST {
            base
        } else {
            format!("{base} ({})", self.environment)
        };
        match &self.netem {
            Some(netem) => format!("{base} @ {netem}"),
            None => base,
        }
    }
}

impl fmt::Display for RowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// CPU use of one side over the repeats, in percent of one core.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SideCpu {
    pub sender_percent: Summary,
    pub receiver_percent: Summary,
}

/// CPU of what carries the tunnel itself at each end (the userspace backend's tunnel
/// threads, the openvpn processes), in % of one core over their life: start to stop,
/// all repeats included. Where a backend encrypts in the kernel (xfrm) the transfer's own
/// CPU already holds it, and this is absent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TunnelCpu {
    /// The end that encrypts the payload (a, the sender's side).
    pub a_percent: f64,
    /// The end that decrypts it (b, the receiver's side).
    pub b_percent: f64,
}

/// A cell that ran: every repeat verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// MB/s (10^6 bytes per second) over the repeats.
    pub mb_per_s: Summary,
    /// Each repeat's MB/s, in the order measured.
    pub samples: Vec<f64>,
    /// How long each transfer was timed for, where the cell ran for a time rather than
    /// moving the payload (the plain row); absent: each transfer moved the whole payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_s: Option<f64>,
    /// Each repeat's bytes moved, in the order measured (a timed transfer's is what got
    /// through); absent in results made before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bytes: Vec<u64>,
    pub cpu: SideCpu,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel_cpu: Option<TunnelCpu>,
    /// Median over the plain baseline's median in the same environment, in percent; absent
    /// when the baseline was not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent_of_plain: Option<f64>,
    /// The kernel driver that served the SAs, read from /proc/crypto (xfrm only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<String>,
    /// Share of the machine's CPU time the hypervisor stole while the cell ran, in percent
    /// (from /proc/stat); high steal means the speed was the neighbours', not the software's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_steal_percent: Option<f64>,
    /// The suite's crypto speed at the row's packet size, timed right after the cell with
    /// the implementation the row used (absent with `--no-ceiling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<Box<crate::ceiling::Ceiling>>,
    /// Median over the ceiling, in percent; absent where there is no ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent_of_ceiling: Option<f64>,
    /// The single-run report's notes and ignored options, for the reader.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

// A report has tens of cells, built once: their size does not matter, and boxing the
// measurement would touch every place that builds or reads one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum CellOutcome {
    Measured(Measurement),
    /// Could not run here (missing capability), or failed, or was interrupted: never a zero.
    NotRun {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub suite: CipherSuite,
    #[serde(flatten)]
    pub outcome: CellOutcome,
    /// A measured UDP cell's packets/s, loss and rates found (`matrix --packet-sizes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<PacketRates>,
    /// A measured cell's round trips per phase (`matrix --latency`), CDF points included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyReport>,
    /// A measured cell's rekeys (`matrix --rekey-every`): the worst gap around one against
    /// the flow's own, the slowest switch, the datagrams lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rekey: Option<crate::rekey::RekeyCell>,
    /// A measured TCP cell's time to first packet (its setup, then its first byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_packet: Option<crate::startup::FirstPacket>,
}

impl Cell {
    pub fn measurement(&self) -> Option<&Measurement> {
        match &self.outcome {
            CellOutcome::Measured(m) => Some(m),
            CellOutcome::NotRun { .. } => None,
        }
    }

    pub fn not_run(suite: CipherSuite, reason: impl Into<String>) -> Cell {
        Cell {
            suite,
            outcome: CellOutcome::NotRun {
                reason: reason.into(),
            },
            packets: None,
            latency: None,
            rekey: None,
            first_packet: None,
        }
    }

    /// A measured cell (its packets and latency, where it has them, set apart).
    pub fn measured(suite: CipherSuite, measurement: Measurement) -> Cell {
        Cell {
            suite,
            outcome: CellOutcome::Measured(measurement),
            packets: None,
            latency: None,
            rekey: None,
            first_packet: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub key: RowKey,
    /// The plain row has one cell (suite `none`); every other row one per column.
    pub cells: Vec<Cell>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Row {
    pub fn label(&self) -> String {
        self.key.label()
    }

    pub fn cell(&self, suite: CipherSuite) -> Option<&Cell> {
        self.cells.iter().find(|c| c.suite == suite)
    }

    /// The plain baseline's single cell, wherever its suite.
    pub fn is_baseline(&self) -> bool {
        self.key.backend == Backend::Plain
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixReport {
    pub schema_version: u32,
    /// Column order: the cipher suites of the sweep.
    pub suites: Vec<CipherSuite>,
    /// Bytes per transfer of the host's rows (and of every row unless
    /// [`MatrixReport::payload_by_environment`] says otherwise).
    pub payload: ByteSize,
    /// Environments whose rows used another payload (a VM under TCG gets a smaller one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub payload_by_environment: BTreeMap<String, ByteSize>,
    pub repeat: u32,
    pub rows: Vec<Row>,
    /// Where rows ran, keyed by [`RowKey::environment`] ([`HOST`], [`VM`]).
    pub environments: BTreeMap<String, Environment>,
    /// Unix seconds when the sweep started.
    pub started_unix_s: u64,
    /// True when Ctrl-C stopped the sweep: the cells measured before are kept, the others
    /// say "not run: interrupted".
    #[serde(default)]
    pub interrupted: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The address family of every row's links and tunnels (`-6`); sweeps before it were IPv4.
    #[serde(default)]
    pub family: crate::Family,
    /// `--setup-rate N`: each backend's setup rates at N, where it has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup_rates: Vec<crate::setup_rate::SetupRateCell>,
}

impl MatrixReport {
    pub fn new(
        suites: Vec<CipherSuite>,
        payload: ByteSize,
        repeat: u32,
        started_unix_s: u64,
    ) -> MatrixReport {
        MatrixReport {
            schema_version: MATRIX_SCHEMA_VERSION,
            suites,
            payload,
            payload_by_environment: BTreeMap::new(),
            repeat,
            rows: Vec::new(),
            environments: BTreeMap::new(),
            started_unix_s,
            interrupted: false,
            family: crate::Family::Ipv4,
            notes: Vec::new(),
            setup_rates: Vec::new(),
        }
    }

    pub fn row(&self, key: &RowKey) -> Option<&Row> {
        self.rows.iter().find(|r| &r.key == key)
    }

    /// Bytes per transfer of the rows measured in `environment`.
    pub fn payload_of(&self, environment: &str) -> ByteSize {
        self.payload_by_environment
            .get(environment)
            .copied()
            .unwrap_or(self.payload)
    }

    /// The plain baseline's median MB/s in `environment` on the bare link, if it was measured.
    pub fn baseline(&self, environment: &str) -> Option<f64> {
        self.baseline_under(environment, None)
    }

    /// The plain baseline's median MB/s in `environment` on a link shaped by `netem`.
    pub fn baseline_under(&self, environment: &str, netem: Option<&str>) -> Option<f64> {
        self.baseline_row_of(
            &RowKey::new(Backend::Plain, RowVariant::Default, environment).with_netem_text(netem),
        )
    }

    /// The median MB/s of the plain row that `key`'s row is measured against: the same
    /// environment, link conditions and workload (TCP at the same stream count, or UDP at
    /// the same packet size).
    fn baseline_row_of(&self, key: &RowKey) -> Option<f64> {
        self.rows
            .iter()
            .filter(|r| {
                r.is_baseline()
                    && r.key.environment == key.environment
                    && r.key.netem == key.netem
                    && r.key.packet_size == key.packet_size
                    && r.key.streams == key.streams
            })
            .flat_map(|r| r.cells.iter())
            .find_map(|c| c.measurement().map(|m| m.mb_per_s.median))
    }

    /// Fills `percent_of_plain` of every measured cell from its environment's baseline on
    /// the same link conditions (a UDP row's: at its packet size), and `percent_of_ceiling`
    /// from the cell's own ceiling.
    pub fn compute_percent_of_plain(&mut self) {
        let baselines: Vec<Option<f64>> = self.rows.iter().map(|r| self.baseline_row_of(&r.key)).collect();
        for (row, base) in self.rows.iter_mut().zip(baselines) {
            for cell in &mut row.cells {
                if let CellOutcome::Measured(m) = &mut cell.outcome {
                    m.percent_of_plain = base.and_then(|b| crate::ceiling::percent(m.mb_per_s.median, b));
                    m.percent_of_ceiling = m
                        .ceiling
                        .as_ref()
                        .and_then(|c| c.mb_per_s())
                        .and_then(|c| crate::ceiling::share_of_bound(m.mb_per_s.median, c));
                }
            }
        }
    }

    /// Adds the rows and environments of `other` (a sweep run elsewhere, e.g. in a VM).
    pub fn merge(&mut self, other: MatrixReport) {
        if other.payload != self.payload {
            for env in other.environments.keys() {
                self.payload_by_environment.insert(env.clone(), other.payload);
            }
        }
        self.payload_by_environment.extend(other.payload_by_environment);
        self.environments.extend(other.environments);
        self.rows.extend(other.rows);
        // A guest's sweep notes what the host's does (its stream counts): once is enough.
        for note in other.notes {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        self.interrupted |= other.interrupted;
        for s in other.suites {
            if !self.suites.contains(&s) {
                self.suites.push(s);
            }
        }
    }

    /// Counts of cells measured and not run (the plain baseline included).
    pub fn counts(&self) -> CellCounts {
        let cells = self.rows.iter().flat_map(|r| r.cells.iter());
        let (measured, not_run): (Vec<_>, Vec<_>) = cells.partition(|c| c.measurement().is_some());
        CellCounts {
            measured: measured.len(),
            not_run: not_run.len(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellCounts {
    pub measured: usize,
    pub not_run: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::{Hmac, KeyBits};

    fn measured(median: f64) -> CellOutcome {
        let s = Summary::of(&[median * 0.9, median, median * 1.1]).unwrap();
        CellOutcome::Measured(Measurement {
            mb_per_s: s,
            samples: vec![median * 0.9, median, median * 1.1],
            timed_s: None,
            bytes: vec![],
            cpu: SideCpu {
                sender_percent: Summary::of(&[50.0]).unwrap(),
                receiver_percent: Summary::of(&[40.0]).unwrap(),
            },
            tunnel_cpu: None,
            percent_of_plain: None,
            served_by: None,
            cpu_steal_percent: None,
            ceiling: None,
            percent_of_ceiling: None,
            notes: vec![],
        })
    }

    fn cell(suite: CipherSuite, outcome: CellOutcome) -> Cell {
        Cell {
            suite,
            outcome,
            packets: None,
            latency: None,
            rekey: None,
            first_packet: None,
        }
    }

    fn sample() -> MatrixReport {
        let suite = CipherSuite::cbc(KeyBits::Aes128, Hmac::None);
        let mut r = MatrixReport::new(vec![suite], ByteSize(1_000_000), 3, 0);
        r.environments.insert(HOST.into(), Environment::detect());
        r.rows.push(Row {
            key: RowKey::new(Backend::Plain, RowVariant::Default, HOST),
            cells: vec![cell(CipherSuite::None, measured(1000.0))],
            notes: vec![],
        });
        r.rows.push(Row {
            key: RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Soft), HOST),
            cells: vec![cell(suite, measured(250.0))],
            notes: vec![],
        });
        r.rows.push(Row {
            key: RowKey::new(
                Backend::Xfrm,
                RowVariant::KernelDriver("cbc-aes-aesni".into()),
                VM,
            ),
            cells: vec![Cell::not_run(suite, "no ESP in this kernel")],
            notes: vec![],
        });
        r
    }

    #[test]
    fn a_thread_count_is_part_of_the_key_and_label_and_one_is_left_out() {
        let one = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST);
        let two = one.clone().with_threads(2);
        assert_ne!(one, two);
        assert_eq!(two.label(), "userspace [auto] x2 threads");
        assert_eq!(one.label(), "userspace [auto]");
        let json = serde_json::to_value(&one).unwrap();
        assert!(json.get("tunnel_threads").is_none(), "{json}");
        assert_eq!(serde_json::from_value::<RowKey>(json).unwrap(), one);
        let json = serde_json::to_value(&two).unwrap();
        assert_eq!(json["tunnel_threads"], 2);
        assert_eq!(serde_json::from_value::<RowKey>(json).unwrap(), two);
    }

    #[test]
    fn xfrm_counts_are_sa_pairs_and_the_pcrypt_row_says_so() {
        let two = RowKey::new(Backend::Xfrm, RowVariant::Default, VM).with_threads(2);
        assert_eq!(two.label(), "xfrm x2 SAs (vm)");
        let pcrypt = RowKey::new(Backend::Xfrm, RowVariant::Pcrypt, VM);
        assert_eq!(pcrypt.label(), "xfrm [pcrypt] (vm)");
        let json = serde_json::to_value(&pcrypt).unwrap();
        assert_eq!(json["variant"]["kind"], "pcrypt", "{json}");
        assert_eq!(serde_json::from_value::<RowKey>(json).unwrap(), pcrypt);
        let per_cpu = RowKey::new(Backend::Xfrm, RowVariant::PerCpuSa, VM);
        assert_eq!(per_cpu.label(), "xfrm [per-CPU SAs] (vm)");
        let json = serde_json::to_value(&per_cpu).unwrap();
        assert_eq!(json["variant"]["kind"], "per_cpu_sa", "{json}");
        assert_eq!(serde_json::from_value::<RowKey>(json).unwrap(), per_cpu);
    }

    #[test]
    fn the_encap_row_is_labelled_with_its_port() {
        let key = RowKey::new(
            Backend::Xfrm,
            RowVariant::Encap(crate::encap::Encap::EspInUdp { port: 4500 }),
            VM,
        );
        assert_eq!(key.label(), "xfrm [esp-in-udp 4500] (vm)");
    }

    #[test]
    fn labels_follow_the_classic_table() {
        let r = sample();
        let labels: Vec<String> = r.rows.iter().map(Row::label).collect();
        assert_eq!(
            labels,
            [
                "plain (line rate)",
                "userspace [soft]",
                "xfrm [cbc-aes-aesni] (vm)"
            ]
        );
    }

    #[test]
    fn percent_of_plain_uses_the_same_environment_only() {
        let mut r = sample();
        r.compute_percent_of_plain();
        let soft = r.rows[1].cells[0].measurement().unwrap();
        assert!((soft.percent_of_plain.unwrap() - 25.0).abs() < 1e-9);
        assert_eq!(r.baseline(VM), None);
        assert_eq!(
            r.counts(),
            CellCounts {
                measured: 2,
                not_run: 1
            }
        );
    }

    #[test]
    fn percent_of_ceiling_comes_from_the_cells_own_ceiling_and_round_trips() {
        use crate::ceiling::{Ceiling, CeilingOutcome, CryptoSpeed};
        let mut r = sample();
        if let CellOutcome::Measured(m) = &mut r.rows[1].cells[0].outcome {
            m.ceiling = Some(Box::new(Ceiling {
                packet_bytes: 1407,
                packet_source: "test".into(),
                outcome: CeilingOutcome::Measured(
                    CryptoSpeed::new("soft".into(), "aes-128-cbc".into(), 500.0, 2000.0).unwrap(),
                ),
            }));
        }
        r.rows[0].cells[0].outcome = measured(1000.0);
        r.compute_percent_of_plain();
        let soft = r.rows[1].cells[0].measurement().unwrap();
        assert_eq!(soft.percent_of_ceiling, Some(50.0));
        // The baseline has no ceiling, so no share of one.
        assert_eq!(r.rows[0].cells[0].measurement().unwrap().percent_of_ceiling, None);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["rows"][1]["cells"][0]["ceiling"]["status"], "measured");
        assert_eq!(json["rows"][1]["cells"][0]["percent_of_ceiling"], 50.0);
        assert!(json["rows"][0]["cells"][0].get("ceiling").is_none());
        assert_eq!(serde_json::from_value::<MatrixReport>(json).unwrap(), r);
    }

    #[test]
    fn round_trips_through_json_with_tagged_outcomes() {
        let mut r = sample();
        r.compute_percent_of_plain();
        let json = serde_json::to_string_pretty(&r).unwrap();
        let back: MatrixReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["schema_version"], MATRIX_SCHEMA_VERSION);
        assert_eq!(v["rows"][2]["cells"][0]["status"], "not_run");
        assert_eq!(v["rows"][2]["cells"][0]["reason"], "no ESP in this kernel");
        assert_eq!(v["rows"][1]["key"]["variant"]["value"], "soft");
        assert_eq!(v["rows"][1]["cells"][0]["status"], "measured");
    }

    #[test]
    fn merge_keeps_both_environments_and_rows() {
        let mut host = sample();
        host.rows.truncate(2);
        let mut vm = sample();
        vm.environments.clear();
        vm.environments.insert(VM.into(), Environment::detect());
        vm.rows.drain(..2);
        vm.payload = ByteSize(500_000);
        host.notes = vec!["TCP rows at 1, 2 streams per transfer".into()];
        vm.notes = vec![host.notes[0].clone(), "(vm) rows: one boot".into()];
        host.merge(vm);
        assert_eq!(
            host.notes,
            ["TCP rows at 1, 2 streams per transfer", "(vm) rows: one boot"]
        );
        assert_eq!(host.rows.len(), 3);
        assert_eq!(host.payload_of(VM), ByteSize(500_000));
        assert_eq!(host.payload_of(HOST), ByteSize(1_000_000));
        assert!(host.environments.contains_key(VM) && host.environments.contains_key(HOST));
    }

    #[test]
    fn a_packet_size_is_part_of_the_key_and_label_and_tcp_rows_leave_it_out() {
        let tcp = RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), VM);
        let udp = tcp.clone().with_packet_size(Some(PacketSize::Fixed(64)));
        assert_ne!(tcp, udp);
        assert_eq!(udp.label(), "userspace [auto] UDP 64 B (vm)");
        assert_eq!(udp.series_label(), tcp.label());
        let imix =
            RowKey::new(Backend::Plain, RowVariant::Default, HOST).with_packet_size(Some(PacketSize::Imix));
        assert_eq!(imix.label(), "plain (line rate) UDP IMIX");
        assert!(serde_json::to_value(&tcp).unwrap().get("packet_size").is_none());
        let json = serde_json::to_value(&udp).unwrap();
        assert_eq!(json["packet_size"]["fixed"], 64, "{json}");
        assert_eq!(serde_json::from_value::<RowKey>(json).unwrap(), udp);
        // Sizes sort ascending, IMIX after the fixed ones.
        assert!(
            PacketSize::Fixed(64) < PacketSize::Fixed(1400) && PacketSize::Fixed(9000) < PacketSize::Imix
        );
    }

    #[test]
    fn a_udp_row_is_measured_against_the_plain_row_of_its_packet_size() {
        let mut r = sample();
        let size = |n| Some(PacketSize::Fixed(n));
        let mut udp_row = |backend, size, mb: f64| {
            let variant = match backend {
                Backend::Plain => RowVariant::Default,
                _ => RowVariant::Crypto(CryptoChoice::Auto),
            };
            let suite = match backend {
                Backend::Plain => CipherSuite::None,
                _ => r.suites[0],
            };
            r.rows.push(Row {
                key: RowKey::new(backend, variant, HOST).with_packet_size(size),
                cells: vec![cell(suite, measured(mb))],
                notes: vec![],
            });
        };
        udp_row(Backend::Plain, size(64), 20.0);
        udp_row(Backend::Userspace, size(64), 5.0);
        udp_row(Backend::Userspace, size(1400), 100.0);
        r.compute_percent_of_plain();
        let percent = |row: usize| r.rows[row].cells[0].measurement().unwrap().percent_of_plain;
        // TCP against the TCP baseline (1000), 64 B against plain at 64 B (20).
        assert_eq!(percent(1), Some(25.0));
        assert_eq!(percent(4), Some(25.0));
        assert_eq!(percent(5), None, "no plain row at 1400 B");
        assert_eq!(r.baseline(HOST), Some(1000.0));
    }

    /// `matrix -P 1,4`: a row per stream count, labelled with it and measured against the
    /// plain row at the same count; a sweep with one count keeps the key and JSON of before.
    #[test]
    fn a_stream_count_is_part_of_the_key_label_and_baseline() {
        let mut r = sample();
        let per_cpu = RowKey::new(Backend::Xfrm, RowVariant::PerCpuSa, HOST).with_threads(1);
        assert_eq!(
            per_cpu.clone().with_streams(Some(4)).label(),
            "xfrm [per-CPU SAs] -P 4"
        );
        assert_eq!(
            RowKey::new(Backend::Xfrm, RowVariant::Default, VM)
                .with_threads(2)
                .with_streams(Some(2))
                .label(),
            "xfrm x2 SAs -P 2 (vm)"
        );
        let json = serde_json::to_value(&per_cpu).unwrap();
        assert!(json.get("streams").is_none(), "{json}");
        let four = per_cpu.clone().with_streams(Some(4));
        let json = serde_json::to_value(&four).unwrap();
        assert_eq!(json["streams"], 4);
        assert_eq!(serde_json::from_value::<RowKey>(json).unwrap(), four);

        r.rows.truncate(1);
        let mut push = |key: RowKey, suite, mb: f64| {
            r.rows.push(Row {
                key,
                cells: vec![cell(suite, measured(mb))],
                notes: vec![],
            })
        };
        let plain = RowKey::new(Backend::Plain, RowVariant::Default, HOST);
        let suite = r.suites[0];
        push(plain.clone().with_streams(Some(1)), CipherSuite::None, 500.0);
        push(plain.with_streams(Some(4)), CipherSuite::None, 2000.0);
        push(per_cpu.clone().with_streams(Some(1)), suite, 100.0);
        push(four, suite, 400.0);
        push(per_cpu.with_streams(Some(8)), suite, 400.0);
        r.compute_percent_of_plain();
        let percent = |row: usize| r.rows[row].cells[0].measurement().unwrap().percent_of_plain;
        assert_eq!(percent(3), Some(20.0), "-P 1 against plain -P 1");
        assert_eq!(percent(4), Some(20.0), "-P 4 against plain -P 4");
        assert_eq!(percent(5), None, "no plain row at -P 8");
    }

    #[test]
    fn a_cells_packets_and_latency_round_trip_and_are_left_out_where_absent() {
        use crate::packets::{LatencyPhase, LatencyReport, UdpReport};
        let mut r = sample();
        let udp = UdpReport {
            packet_size: PacketSize::Fixed(64),
            trials: vec![packets::tests::trial(None, 100_000, 10)],
            ndr: None,
            baseline: None,
        };
        let phase = LatencyPhase {
            name: "idle".into(),
            load_pps: None,
            probes_sent: 1000,
            probes_received: 1000,
            min_ms: 0.02,
            p50_ms: 0.04,
            p90_ms: 0.05,
            p99_ms: 0.09,
            p999_ms: 0.2,
            max_ms: 0.3,
            mean_ms: 0.045,
            cdf: vec![(0.0, 0.02), (0.5, 0.04), (1.0, 0.3)],
        };
        r.rows[1].key = r.rows[1]
            .key
            .clone()
            .with_packet_size(Some(PacketSize::Fixed(64)));
        r.rows[1].cells[0].packets = PacketRates::of(&udp);
        r.rows[1].cells[0].latency = Some(LatencyReport {
            probe_interval_ms: 1.0,
            phases: vec![phase],
        });
        let json = serde_json::to_value(&r).unwrap();
        let cell = &json["rows"][1]["cells"][0];
        assert_eq!(cell["status"], "measured");
        assert_eq!(cell["packets"]["received_pps"]["median"], 49_995.0);
        assert_eq!(cell["latency"]["phases"][0]["p99_ms"], 0.09);
        assert_eq!(
            cell["latency"]["phases"][0]["cdf"][1],
            serde_json::json!([0.5, 0.04])
        );
        for absent in ["packets", "latency"] {
            assert!(json["rows"][0]["cells"][0].get(absent).is_none());
            assert!(json["rows"][2]["cells"][0].get(absent).is_none());
        }
        assert_eq!(serde_json::from_value::<MatrixReport>(json).unwrap(), r);
    }

    /// A report written before packet sizes and latency (tests/fixtures/matrix/): it reads,
    /// its rows are TCP rows, and written again it has none of the new fields.
    #[test]
    fn a_report_from_before_packet_sizes_reads_and_writes_back_unchanged() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/matrix/schema1-before-packets.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let old: MatrixReport = serde_json::from_str(&text).unwrap();
        assert_eq!(old.schema_version, MATRIX_SCHEMA_VERSION);
        assert!(old.rows.iter().all(|r| r.key.packet_size.is_none()));
        assert!(old
            .rows
            .iter()
            .flat_map(|r| &r.cells)
            .all(|c| c.packets.is_none() && c.latency.is_none()));
        let again = serde_json::to_value(&old).unwrap();
        let before: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(again, before);
    }
}
