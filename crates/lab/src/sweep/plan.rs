//! A validated sweep: which backends, suites and implementations, how much data, and each
//! cell's own run plan; everything checked before anything is created.

use model::backend::{OwnOptions, Threads};
use model::packets::PacketSize;
use model::{Backend, ByteSize, CipherSuite, CryptoChoice, ModesRequest, PacketsRequest, RunRequest};
use serde::{Deserialize, Serialize};

use crate::error::{LabError, LabResult};
use crate::vm;

/// A validated sweep: what `ipsec-lab matrix` measures. A child sweep gets its own as JSON
/// (`matrix --plan-file`, [`SweepPlan::read`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPlan {
    /// Backends to sweep; the plain baseline is measured whatever this says (unless
    /// `baseline` is off, for the child sweeps a sweep starts itself).
    pub backends: Vec<Backend>,
    /// The columns: encrypting suites, without repeats.
    pub suites: Vec<CipherSuite>,
    /// Crypto implementations of the userspace backend, one row each.
    pub crypto: Vec<CryptoChoice>,
    /// Tunnel threads per end (`--threads`): the userspace rows once per count, the xfrm
    /// rows once per count as SA pairs (`run --sas`); the other backends' rows at counts
    /// above 1 say why they have none.
    pub threads: Vec<u16>,
    /// TCP streams per transfer (`-P 1,2,4`): every TCP row once per count, the scaling
    /// curve (several tunnel threads or SA pairs need at least as many streams to have
    /// work each); a UDP row is one flow. Empty: the largest `threads` count.
    pub parallel: Vec<u16>,
    /// Payload of each TCP transfer, where the transfers are not timed (`time_s`).
    pub bytes: ByteSize,
    /// Payload of the VM rows (TCG moves a few MB/s).
    pub vm_bytes: ByteSize,
    /// `--time`: each TCP transfer of a tunnel cell sends for this many seconds, so every
    /// cell is long enough to time and for `compare` to judge, whatever its speed (None:
    /// `--bytes` each). The plain row is timed whatever this says.
    #[serde(default)]
    pub time_s: Option<f64>,
    pub repeat: u32,
    pub mtu: u32,
    pub port: u16,
    /// `--vm [KERNEL[,KERNEL…]]`: the kernel rows in one VM boot per kernel (`Some("")`:
    /// the stock kernel in /boot).
    pub vm: Option<String>,
    pub baseline: bool,
    /// `--encap udp`: one more xfrm row with ESP in UDP.
    pub encap: Option<model::Encap>,
    /// `--pcrypt`: one more xfrm row, its AES-GCM SAs on a pcrypt instance.
    pub pcrypt: bool,
    /// `--per-cpu-sa`: one more xfrm row, with per-CPU SAs.
    #[serde(default)]
    pub per_cpu_sa: bool,
    /// `-6`: every row over IPv6; rows of backends without it say why they are not run.
    pub family: model::Family,
    /// `--netem "SPEC;SPEC"`: the link conditions, every row once per condition (None: the
    /// bare link); empty means the bare link only.
    pub netem: Vec<Option<model::NetemSpec>>,
    /// `--packet-sizes tcp,64,imix`: the workloads, every row once per workload: None the
    /// bulk TCP transfer, a size UDP datagrams of it (a row of its own); empty means TCP only.
    #[serde(default)]
    pub packet_sizes: Vec<Option<PacketSize>>,
    /// `--trial-time`: seconds each UDP trial sends (`run --time` of a UDP run).
    #[serde(default = "default_trial_seconds")]
    pub trial_seconds: f64,
    /// `--find-ndr [LOSS%,...]`: the UDP cells search their zero-loss rate per tolerance
    /// instead of sending `--repeat` unpaced trials.
    #[serde(default)]
    pub find_ndr: Option<Vec<f64>>,
    /// `--latency`: every cell measures round trips idle and under its load.
    #[serde(default)]
    pub latency: bool,
    /// `--rekey-every`: the TCP cells of every backend that can rekey replace their keys on
    /// this schedule, for at least 3.5 periods (the matrix's rekey table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rekey: Option<model::rekey::RekeySchedule>,
    pub seed: u64,
    /// `--setup-rate N`: each backend that has a setup rate (xfrm, strongswan, wireguard-go)
    /// measures it at N once, after the host's rows (`setup-rate --sizes N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_rate: Option<model::setup_rate::TableSize>,
    /// Time each tunnel cell's crypto ceiling after its transfers (`--no-ceiling`: off).
    pub ceiling: bool,
    /// When the sweep started, in seconds since the epoch (for the report).
    pub started_unix_s: u64,
}

/// Seconds each TCP transfer of a cell sends when neither `--time` nor `--bytes` is given:
/// twice the shortest transfer taken as a stable figure, so `compare` can judge every cell
/// whatever its speed (a payload is over in 0.1 s on a fast row and takes 20 s on a slow one).
pub const DEFAULT_CELL_SECONDS: f64 = 2.0 * model::MIN_STABLE_SECONDS;

/// Seconds of a UDP trial when `--trial-time` is not given: `run --udp`'s.
pub const DEFAULT_TRIAL_SECONDS: f64 = 2.0;
/// The longest `--trial-time`: a sweep's cells are many, each trial is one of them.
pub const MAX_TRIAL_SECONDS: f64 = 600.0;

fn default_trial_seconds() -> f64 {
    DEFAULT_TRIAL_SECONDS
}

impl SweepPlan {
    /// Checks the suites and every cell's plan before anything is created.
    /// The swept backends that have a setup rate, in sweep order.
    pub fn setup_rate_backends(&self) -> Vec<model::setup_rate::SetupBackend> {
        self.backends
            .iter()
            .filter_map(|b| model::setup_rate::SetupBackend::of(*b))
            .collect()
    }

    pub fn validate(mut self) -> LabResult<SweepPlan> {
        if self.suites.contains(&CipherSuite::None) {
            return Err(LabError::usage(anyhow::anyhow!(
                "--ciphers lists encrypting suites; the unencrypted baseline is the plain row, always measured"
            )));
        }
        if self.suites.is_empty() {
            self.suites = CipherSuite::classic_six();
        }
        let mut unique: Vec<CipherSuite> = Vec::new();
        for s in &self.suites {
            if !unique.contains(s) {
                unique.push(*s);
            }
        }
        self.suites = unique;
        // WireGuard rows get their one cipher as a column of its own.
        let chacha = CipherSuite::ChaCha20Poly1305;
        if self.backends.iter().any(|b| b.is_wireguard()) && !self.suites.contains(&chacha) {
            self.suites.push(chacha);
        }
        if self.threads.is_empty() {
            self.threads = vec![1];
        }
        if self.parallel.is_empty() {
            self.parallel = vec![self.threads.iter().copied().max().unwrap_or(1)];
        }
        self.parallel.sort_unstable();
        self.parallel.dedup();
        if self.netem.is_empty() {
            self.netem = vec![None];
        }
        self.validate_packets()?;
        if let Some(size) = self.setup_rate {
            if self.setup_rate_backends().is_empty() {
                return Err(LabError::usage(anyhow::anyhow!(
                    "--setup-rate: none of the swept backends has a setup rate (xfrm, strongswan, wireguard-go do)"
                )));
            }
            for backend in self.setup_rate_backends() {
                model::setup_rate::SetupRatePlan::validate(model::setup_rate::SetupRateRequest {
                    backend,
                    sizes: Some(vec![size]),
                    ..Default::default()
                })
                .map_err(|e| LabError::usage(anyhow::anyhow!("--setup-rate {size}: {e}")))?;
            }
        }
        self.threads.sort_unstable();
        self.threads.dedup();
        for b in &self.backends {
            for s in &self.suites {
                if b.suite_refusal(*s).is_some() || self.family.refusal(*b).is_some() {
                    continue;
                }
                for t in &self.threads {
                    for size in &self.packet_sizes {
                        for streams in self.stream_counts(*size) {
                            // An xfrm count above the streams is a row that says why it
                            // cannot run.
                            if b.describe().threads == Threads::SaPairs && *t > streams {
                                continue;
                            }
                            self.cell_request(*b, *s, CryptoChoice::Auto, *t, *size, streams)
                                .validate()?;
                        }
                    }
                }
            }
        }
        if self.pcrypt && !self.has_xfrm_options() {
            return Err(LabError::usage(anyhow::anyhow!(
                "--pcrypt adds an xfrm row: include xfrm in --backends"
            )));
        }
        if self.per_cpu_sa && self.per_cpu_backends() == 0 {
            return Err(LabError::usage(anyhow::anyhow!(
                "--per-cpu-sa adds a per-CPU SA row to xfrm and to strongswan: include xfrm or strongswan in --backends"
            )));
        }
        if self.encap.is_some() && !self.has_xfrm_options() {
            return Err(LabError::usage(anyhow::anyhow!(
                "--encap udp adds an xfrm row: include xfrm in --backends"
            )));
        }
        model::check_payload("--vm-bytes", self.vm_bytes)?;
        if self.vm.is_some() {
            for kernel in vm::kernel_list(self.vm.as_deref()) {
                vm::check_vm_paths(kernel.as_deref())?;
                if let Some(release) = vm::uml_kernel(kernel.as_deref()) {
                    crate::uml::UmlKernel::require(release.as_deref())?;
                }
            }
        }
        Ok(self)
    }

    /// The packet-size dimension and the options that go with it, each given where it means
    /// something.
    fn validate_packets(&mut self) -> LabResult<()> {
        let usage = |s: String| Err(LabError::usage(anyhow::anyhow!(s)));
        if self.packet_sizes.is_empty() {
            self.packet_sizes = vec![None];
        }
        let mut unique = Vec::new();
        for size in &self.packet_sizes {
            if !unique.contains(size) {
                unique.push(*size);
            }
        }
        self.packet_sizes = unique;
        let udp = self.packet_sizes.iter().any(Option::is_some);
        if !udp && self.find_ndr.is_some() {
            return usage(
                "--find-ndr searches the packet rate of UDP rows: give --packet-sizes (e.g. --packet-sizes 64,1400)"
                    .into(),
            );
        }
        if !udp && self.trial_seconds != DEFAULT_TRIAL_SECONDS {
            return usage(
                "--trial-time times the UDP rows' trials: give --packet-sizes (e.g. --packet-sizes 64,1400)"
                    .into(),
            );
        }
        if !(self.trial_seconds.is_finite() && (0.1..=MAX_TRIAL_SECONDS).contains(&self.trial_seconds)) {
            return usage(format!(
                "--trial-time {}: give seconds from 0.1 to {MAX_TRIAL_SECONDS}, e.g. --trial-time 2",
                self.trial_seconds
            ));
        }
        Ok(())
    }

    /// The stream counts a row runs at under a workload: each `-P` count for the TCP
    /// transfer, one flow for UDP datagrams.
    pub(super) fn stream_counts(&self, packet_size: Option<PacketSize>) -> Vec<u16> {
        match packet_size {
            None => self.parallel.clone(),
            Some(_) => vec![1],
        }
    }

    /// How many times each row runs: once per link condition and workload, a TCP
    /// workload once per stream count.
    pub fn runs_per_row(&self) -> u64 {
        let workloads: usize = self
            .packet_sizes
            .iter()
            .map(|size| self.stream_counts(*size).len())
            .sum();
        (self.netem.len().max(1) * workloads.max(1)) as u64
    }

    /// The stream count a row's key names at `streams`: the count where the sweep has
    /// several TCP counts, else none (the sweep's notes give its one count).
    pub(super) fn streams_key(&self, packet_size: Option<PacketSize>, streams: u16) -> Option<u16> {
        (packet_size.is_none() && self.parallel.len() > 1).then_some(streams)
    }

    /// A cell's run: the TCP transfer at `streams` streams, or UDP trials of `packet_size`
    /// (one flow, timed by `--trial-time`), with `--find-ndr` and `--latency` as the sweep
    /// says; the plain row's TCP transfers are timed by the caller.
    pub(super) fn cell_request(
        &self,
        backend: Backend,
        suite: CipherSuite,
        crypto: CryptoChoice,
        tunnel_threads: u16,
        packet_size: Option<PacketSize>,
        streams: u16,
    ) -> RunRequest {
        let request = RunRequest {
            parallel: streams,
            ..self.request(backend, suite, crypto, tunnel_threads, self.seed)
        };
        let packets = PacketsRequest {
            udp: packet_size.is_some(),
            packet_size,
            rate: None,
            find_ndr: packet_size.and(self.find_ndr.clone()),
            latency: self.latency,
        };
        match packet_size {
            None => {
                let plain = RunRequest {
                    packets,
                    modes: ModesRequest {
                        time_s: self.time_s,
                        ..Default::default()
                    },
                    ..request
                };
                let Some(schedule) = self.rekey else {
                    return plain;
                };
                // A rekey cell is timed, long enough for three rekeys and half a period.
                let rekeyed = RunRequest {
                    modes: ModesRequest {
                        time_s: Some(
                            self.time_s
                                .unwrap_or(DEFAULT_CELL_SECONDS)
                                .max(3.5 * schedule.every_s),
                        ),
                        ..Default::default()
                    },
                    rekey: model::plan::RekeyRequest {
                        every_s: Some(schedule.every_s),
                        // xfrm's own choice; the others rekey in their own order.
                        order: (backend.describe().options == OwnOptions::Xfrm).then_some(schedule.order),
                        // Only strongSwan has an IKE_SA; the others rekey what they have.
                        sa: (backend == Backend::Strongswan).then_some(schedule.sa),
                    },
                    ..plain.clone()
                };
                // Where this backend cannot rekey this cell (none at all, or not this suite:
                // OpenVPN's static-key mode), the cell runs as without --rekey-every and
                // its rekey column says so.
                match rekeyed.clone().validate() {
                    Err(model::PlanError::Rekey(_)) => plain,
                    _ => rekeyed,
                }
            }
            Some(_) => RunRequest {
                packets,
                parallel: 1,
                // One flow rides one SA pair.
                sas: 1,
                modes: ModesRequest {
                    time_s: Some(self.trial_seconds),
                    ..Default::default()
                },
                ..request
            },
        }
    }

    /// The plan in `path` (`matrix --plan-file`, written by the parent sweep), checked again
    /// like one from flags; bad input (exit 2) where it is unreadable or no sweep plan.
    pub fn read(path: &std::path::Path) -> LabResult<SweepPlan> {
        crate::child::read_plan::<SweepPlan>(path)?.validate()
    }

    /// A cell's run as a request, checked by [`RunRequest::validate`] like any other.
    pub(super) fn request(
        &self,
        backend: Backend,
        suite: CipherSuite,
        crypto: CryptoChoice,
        tunnel_threads: u16,
        seed: u64,
    ) -> RunRequest {
        let description = backend.describe();
        // The count goes to the backend's own knob (`--threads`): tunnel threads, or the
        // kernel's SA pairs, one per stream group.
        let (tunnel_threads, sas) = match description.threads {
            Threads::TunnelThreads => (tunnel_threads, 1),
            Threads::SaPairs => (1, tunnel_threads),
            Threads::None(_) => (1, 1),
        };
        RunRequest {
            backend,
            cipher: backend.encrypts().then_some(suite),
            crypto: description.chooses_crypto().then_some(crypto),
            tunnel_threads,
            sas,
            bytes: self.bytes,
            repeat: self.repeat,
            parallel: self.parallel.first().copied().unwrap_or(1),
            mtu: self.mtu,
            port: self.port,
            seed: Some(seed),
            family: self.family,
            ..Default::default()
        }
    }

    pub(super) fn has(&self, backend: Backend) -> bool {
        self.backends.contains(&backend)
    }

    /// The rows each suite's column has, the baseline aside: one per backend, xfrm's
    /// extra rows (`--encap`, `--pcrypt`, each SA count above 1) and with `--per-cpu-sa` one
    /// per backend that takes it.
    pub fn rows_per_suite(&self) -> u64 {
        self.backends.len() as u64
            + u64::from(self.encap.is_some())
            + u64::from(self.pcrypt)
            + u64::from(self.per_cpu_sa) * self.per_cpu_backends()
            + self.threads.iter().filter(|t| **t > 1).count() as u64
    }

    /// How many backends of the sweep take `--per-cpu-sa` (xfrm, strongswan).
    fn per_cpu_backends(&self) -> u64 {
        self.backends
            .iter()
            .filter(|b| b.describe().options.per_cpu_sa())
            .count() as u64
    }

    /// Whether a backend of the sweep takes xfrm's own options (`--encap`, `--pcrypt`).
    fn has_xfrm_options(&self) -> bool {
        self.backends
            .iter()
            .any(|b| b.describe().options == OwnOptions::Xfrm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timed sweep's TCP cells send for its time (what `compare` needs to judge them);
    /// its UDP cells keep their trial time, and a sized sweep's cells move the payload.
    #[test]
    fn a_timed_sweep_times_every_tcp_cell() {
        let timed = SweepPlan {
            time_s: Some(DEFAULT_CELL_SECONDS),
            packet_sizes: vec![None, Some(PacketSize::Fixed(512))],
            ..crate::sweep::tests::plan()
        }
        .validate()
        .unwrap();
        let gcm = CipherSuite::AesGcm {
            key: model::KeyBits::Aes256,
        };
        let cell = |plan: &SweepPlan, size| {
            plan.cell_request(Backend::Userspace, gcm, CryptoChoice::Auto, 1, size, 1)
                .validate()
                .unwrap()
                .workload()
                .modes
                .time_s
        };
        assert_eq!(cell(&timed, None), Some(DEFAULT_CELL_SECONDS));
        assert_eq!(
            cell(&timed, Some(PacketSize::Fixed(512))),
            Some(DEFAULT_TRIAL_SECONDS)
        );
        let sized = crate::sweep::tests::plan().validate().unwrap();
        assert_eq!(cell(&sized, None), None);
    }

    /// `matrix -P 4,1,2 --threads 4`: the counts in order, each TCP cell at its count, a UDP
    /// workload once (one flow); a row's key names the count only where there are several;
    /// no -P: the largest --threads count, as before.
    #[test]
    fn every_tcp_row_runs_once_per_stream_count() {
        let plan = SweepPlan {
            parallel: vec![4, 1, 2, 4],
            threads: vec![4],
            packet_sizes: vec![None, Some(PacketSize::Fixed(512))],
            netem: vec![None, Some("delay 5ms".parse().unwrap())],
            ..crate::sweep::tests::plan()
        }
        .validate()
        .unwrap();
        assert_eq!(plan.parallel, [1, 2, 4]);
        assert_eq!(plan.stream_counts(None), [1, 2, 4]);
        assert_eq!(plan.stream_counts(Some(PacketSize::Fixed(512))), [1]);
        assert_eq!(plan.runs_per_row(), 2 * (3 + 1));
        assert_eq!(plan.streams_key(None, 2), Some(2));
        assert_eq!(plan.streams_key(Some(PacketSize::Fixed(512)), 1), None);
        let gcm = CipherSuite::AesGcm {
            key: model::KeyBits::Aes256,
        };
        let xfrm = plan.cell_request(Backend::Xfrm, gcm, CryptoChoice::Auto, 4, None, 4);
        let xfrm = xfrm.validate().unwrap();
        assert_eq!(xfrm.workload().parallel, 4);
        let one = SweepPlan {
            threads: vec![1, 2],
            ..crate::sweep::tests::plan()
        };
        let one = SweepPlan {
            parallel: vec![],
            ..one
        }
        .validate()
        .unwrap();
        assert_eq!(one.parallel, [2]);
        assert_eq!(one.streams_key(None, 2), None);
    }

    /// `matrix --rekey-every`: the TCP cells of the backends that rekey get the schedule
    /// and a time of at least 3.5 periods (xfrm its order too); the others and the UDP
    /// cells run as without it.
    #[test]
    fn a_rekey_sweep_rekeys_the_tcp_cells_of_the_backends_that_can() {
        let schedule = model::rekey::RekeySchedule {
            every_s: 1.0,
            order: model::rekey::RekeyOrder::Naive,
            sa: Default::default(),
        };
        let plan = SweepPlan {
            rekey: Some(schedule),
            time_s: Some(DEFAULT_CELL_SECONDS),
            ..crate::sweep::tests::plan()
        }
        .validate()
        .unwrap();
        let gcm = CipherSuite::AesGcm {
            key: model::KeyBits::Aes256,
        };
        let cell = |backend: Backend, size| {
            plan.cell_request(backend, gcm, CryptoChoice::Auto, 1, size, 1)
                .validate()
                .unwrap()
        };
        let xfrm = cell(Backend::Xfrm, None);
        assert_eq!(xfrm.workload().rekey, Some(schedule));
        assert_eq!(xfrm.workload().modes.time_s, Some(3.5));
        for b in Backend::ALL.into_iter().filter(|b| !b.is_wireguard()) {
            let c = cell(b, None);
            assert_eq!(c.workload().rekey.is_some(), b.describe().rekey.is_some(), "{b}");
        }
        // OpenVPN's static-key (CBC) cells cannot renegotiate: they run without rekeys.
        let cbc = CipherSuite::cbc(model::KeyBits::Aes128, model::Hmac::None);
        let openvpn_cbc = plan.cell_request(Backend::Openvpn, cbc, CryptoChoice::Auto, 1, None, 1);
        assert_eq!(openvpn_cbc.validate().unwrap().workload().rekey, None);
        assert_eq!(
            cell(Backend::Xfrm, Some(PacketSize::Fixed(512))).workload().rekey,
            None
        );
    }
}
