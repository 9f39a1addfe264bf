//! The sweep's rows: which rows a sweep has and what each needs (or why it cannot run),
//! running a row cell by cell on this kernel, and turning a run's report into a cell's
//! measurement.
//!
//! Leaves out: the order of the sweep and the topology it shares ([`super`]), choosing the
//! kernel driver ([`super::drivers`]), rows that run in a child process or a VM
//! ([`super::children`]).

use model::backend::Threads;
use model::evidence::Evidence;
use model::matrix::{
    Cell, CellOutcome, Measurement, PacketRates, Row, RowKey, RowVariant, SideCpu, TunnelCpu, HOST,
};
use model::packets::PacketSize;
use model::{Backend, CipherSuite, CryptoChoice, RunReport, RunRequest, Summary};
use netns::{Topology, TopologySpec};
use traffic::CancellationToken;

use super::plan::SweepPlan;
use crate::backend;
use crate::backend::xfrm::ShowKeys;
use crate::error::ExitKind;
use crate::progress::Progress;
use procstat::MachineTimes;
use xfrm::driver::{cbc_aes_drivers, esp_served_by, pin_cbc_aes_driver};

#[derive(Debug, Clone)]
pub(super) enum RowKind {
    /// Runs in this process, on this kernel.
    Local {
        crypto: CryptoChoice,
        /// The `cbc(aes)` driver raised to the top for this row.
        driver: Option<String>,
    },
    /// Cannot run here: every cell says why.
    Refused(String),
}

#[derive(Debug, Clone)]
pub(super) struct PlannedRow {
    pub key: RowKey,
    pub backend: Backend,
    pub kind: RowKind,
    pub notes: Vec<String>,
}

impl PlannedRow {
    /// A `--crypto soft` row: needs hardware AES masked from process start.
    pub(super) fn is_soft(&self) -> bool {
        matches!(
            self.kind,
            RowKind::Local {
                crypto: CryptoChoice::Soft,
                ..
            }
        )
    }

    /// Whether the row raises a `cbc(aes)` driver.
    pub(super) fn pins_driver(&self) -> bool {
        matches!(self.kind, RowKind::Local { driver: Some(_), .. })
    }

    /// The cells the row measures, out of `suites`.
    pub(super) fn cells(&self, suites: &[CipherSuite]) -> usize {
        match (&self.kind, self.backend) {
            (RowKind::Refused(_), _) => 0,
            (_, Backend::Plain) => 1,
            _ => suites.len(),
        }
    }
}

/// A row whose every cell says why it did not run.
pub(super) fn refused_row(key: RowKey, suites: &[CipherSuite], reason: &str) -> Row {
    let cells = if key.backend == Backend::Plain {
        vec![Cell::not_run(CipherSuite::None, reason)]
    } else {
        suites.iter().map(|s| Cell::not_run(*s, reason)).collect()
    };
    Row {
        key,
        cells,
        notes: vec![],
    }
}

/// The rows of this sweep, in table order, each with what it needs or why it cannot run.
pub(super) async fn plan_rows(args: &SweepPlan) -> Vec<PlannedRow> {
    let mut rows = Vec::new();
    let local = |backend, variant, crypto, driver| PlannedRow {
        key: RowKey::new(backend, variant, HOST),
        backend,
        kind: RowKind::Local { crypto, driver },
        notes: vec![],
    };
    if args.baseline {
        rows.push(local(
            Backend::Plain,
            RowVariant::Default,
            CryptoChoice::Auto,
            None,
        ));
    }
    for backend in Backend::ALL
        .into_iter()
        .filter(|b| *b != Backend::Plain && args.has(*b))
    {
        // With --vm the rows of what needs the kernel come from the VM.
        if backend.describe().kernel.is_some() && args.vm.is_some() {
            continue;
        }
        match backend {
            Backend::Xfrm => rows.extend(xfrm_rows(args).await),
            Backend::Userspace => {
                for c in &args.crypto {
                    for t in &args.threads {
                        let mut row = local(Backend::Userspace, RowVariant::Crypto(*c), *c, None);
                        row.key = row.key.with_threads(*t);
                        rows.push(row);
                    }
                }
            }
            Backend::Strongswan => rows.extend(strongswan_rows(args).await),
            // Every other backend: one row, its suites' cells.
            other => rows.push(local(other, RowVariant::Default, CryptoChoice::Auto, None)),
        }
    }
    rows.extend(threadless_rows(args));
    // A backend without IPv6 says so in its row (`-6`), never runs over IPv4 instead.
    for row in &mut rows {
        if let Some(why) = args.family.refusal(row.backend) {
            row.kind = RowKind::Refused(format!("not over {}: {why}", args.family));
        }
    }
    rows
}

/// At every `--threads` count above 1, a row for each backend in the sweep without tunnel
/// threads, saying why it has no such row.
fn threadless_rows(args: &SweepPlan) -> Vec<PlannedRow> {
    // xfrm's rows at a count are its SA pairs (`xfrm_extra_rows`); the plain row is the
    // sweep's baseline, not a tunnel that could have threads.
    let why = |backend: Backend| match backend.describe().threads {
        Threads::None(why) if backend != Backend::Plain => Some(why),
        _ => None,
    };
    let mut rows = Vec::new();
    for t in args.threads.iter().filter(|t| **t > 1) {
        for backend in Backend::ALL {
            if let (true, Some(reason)) = (args.has(backend), why(backend)) {
                rows.push(PlannedRow {
                    key: RowKey::new(backend, RowVariant::Default, HOST).with_threads(*t),
                    backend,
                    kind: RowKind::Refused(reason.to_string()),
                    notes: vec![],
                });
            }
        }
    }
    rows
}

/// The strongswan row on this kernel, or why it cannot run (strongSwan missing, no ESP);
/// with `--per-cpu-sa` beside it the row of per-CPU CHILD_SAs, or why that cannot run
/// (strongSwan before 6.0, a kernel before 6.13).
async fn strongswan_rows(args: &SweepPlan) -> Vec<PlannedRow> {
    let backend = Backend::Strongswan;
    let row = |variant, per_cpu_sa| async move {
        let probe = args.suites.first().and_then(|s| {
            RunRequest {
                per_cpu_sa,
                ..args.request(backend, *s, CryptoChoice::Auto, 1, 0)
            }
            .validate()
            .ok()
        });
        let refused = match probe {
            Some(plan) => backend::preflight(&plan).await.err().map(|e| format!("{e:#}")),
            None => None,
        };
        PlannedRow {
            key: RowKey::new(backend, variant, HOST),
            backend,
            kind: match refused {
                Some(reason) => RowKind::Refused(reason),
                None => RowKind::Local {
                    crypto: CryptoChoice::Auto,
                    driver: None,
                },
            },
            notes: vec![],
        }
    };
    let mut rows = vec![row(RowVariant::Default, false).await];
    if args.per_cpu_sa {
        rows.push(row(RowVariant::PerCpuSa, true).await);
    }
    rows
}

/// The xfrm rows on this kernel: one per `cbc(aes)` driver where crypto_user allows choosing,
/// else one with the default drivers (and why), or one that says why none can run.
async fn xfrm_rows(args: &SweepPlan) -> Vec<PlannedRow> {
    let key = |variant| RowKey::new(Backend::Xfrm, variant, HOST);
    let probe_suite = args.suites.first().copied();
    let probe_plan = probe_suite.and_then(|s| {
        args.request(Backend::Xfrm, s, CryptoChoice::Auto, 1, 0)
            .validate()
            .ok()
    });
    if let Some(plan) = probe_plan {
        if let Err(e) = backend::preflight(&plan).await {
            let reason = format!("{e:#}");
            let refused = PlannedRow {
                key: key(RowVariant::Default),
                backend: Backend::Xfrm,
                kind: RowKind::Refused(reason.clone()),
                notes: vec![],
            };
            return std::iter::once(refused)
                .chain(xfrm_extra_rows(args, &RowKind::Refused(reason)))
                .collect();
        }
    }
    let local = RowKind::Local {
        crypto: CryptoChoice::Auto,
        driver: None,
    };
    let mut rows = xfrm_driver_rows();
    rows.extend(xfrm_extra_rows(args, &local));
    rows
}

/// The xfrm rows beside the driver rows, with the default drivers: ESP in UDP
/// (`--encap udp`), pcrypt (`--pcrypt`), and one per `--threads` count above 1 with that
/// many SA pairs (`run --sas`), refused where the sweep has fewer streams than pairs.
fn xfrm_extra_rows(args: &SweepPlan, kind: &RowKind) -> Vec<PlannedRow> {
    let row = |key: RowKey, kind: RowKind| PlannedRow {
        key,
        backend: Backend::Xfrm,
        kind,
        notes: vec![],
    };
    let key = |variant| RowKey::new(Backend::Xfrm, variant, HOST);
    let mut rows = Vec::new();
    if let Some(e) = args.encap {
        rows.push(row(key(RowVariant::Encap(e)), kind.clone()));
    }
    if args.pcrypt {
        rows.push(row(key(RowVariant::Pcrypt), kind.clone()));
    }
    if args.per_cpu_sa {
        let kind = match (kind, crate::backend::xfrm::per_cpu_preflight()) {
            (RowKind::Local { .. }, Err(e)) => RowKind::Refused(format!("{e:#}")),
            (k, _) => k.clone(),
        };
        rows.push(row(key(RowVariant::PerCpuSa), kind));
    }
    // Each count's row runs at every -P count; one with fewer streams than pairs says why
    // it has no cell there (`run_row`).
    for t in args.threads.iter().copied().filter(|t| *t > 1) {
        rows.push(row(key(RowVariant::Default).with_threads(t), kind.clone()));
    }
    rows
}

/// The xfrm rows of the drivers (or the default one, and why).
fn xfrm_driver_rows() -> Vec<PlannedRow> {
    let key = |variant| RowKey::new(Backend::Xfrm, variant, HOST);
    match cbc_aes_drivers() {
        Ok(drivers) => drivers
            .into_iter()
            .map(|d| PlannedRow {
                key: key(RowVariant::KernelDriver(d.clone())),
                backend: Backend::Xfrm,
                kind: RowKind::Local {
                    crypto: CryptoChoice::Auto,
                    driver: Some(d),
                },
                notes: vec![],
            })
            .collect(),
        Err(why) => vec![PlannedRow {
            key: key(RowVariant::Default),
            backend: Backend::Xfrm,
            kind: RowKind::Local {
                crypto: CryptoChoice::Auto,
                driver: None,
            },
            notes: vec![format!("default kernel drivers only: {why}")],
        }],
    }
}

/// What a row runs besides its own settings: the link's conditions and the workload (the
/// TCP transfer at a stream count, or UDP datagrams of a size: one flow).
#[derive(Debug, Clone, Copy)]
pub(super) struct Dimensions<'a> {
    pub netem: Option<&'a model::NetemSpec>,
    pub packet_size: Option<PacketSize>,
    pub streams: u16,
}

/// Runs `row`'s cells on this kernel, on the sweep's `topology` (an xfrm cell makes its own).
pub(super) async fn run_row(
    args: &SweepPlan,
    row: &PlannedRow,
    dimensions: Dimensions<'_>,
    topology: &Topology,
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> Row {
    let Dimensions {
        netem,
        packet_size,
        streams,
    } = dimensions;
    let key = row
        .key
        .clone()
        .with_netem(netem)
        .with_packet_size(packet_size)
        .with_streams(args.streams_key(packet_size, streams));
    let not_run = |reason: &str| Row {
        notes: row.notes.clone(),
        ..refused_row(key.clone(), &args.suites, reason)
    };
    let (crypto, driver) = match &row.kind {
        RowKind::Refused(reason) => return not_run(reason),
        RowKind::Local { crypto, driver } => (*crypto, driver.clone()),
    };
    if let Some(why) = too_few_streams(row.backend, row.key.tunnel_threads, packet_size, streams) {
        return not_run(&why);
    }
    // Held for the whole row; dropping it (also on an early return) restores the priorities.
    let guard = match driver.as_deref().map(pin_cbc_aes_driver).transpose() {
        Ok(guard) => guard,
        Err(why) => return not_run(&format!("could not choose the kernel driver: {why}")),
    };
    let row_suites = if row.backend == Backend::Plain {
        vec![CipherSuite::None]
    } else {
        args.suites.clone()
    };
    let mut notes = row.notes.clone();
    if row.backend == Backend::Plain && packet_size.is_none() {
        notes.push(format!(
            "each transfer timed ({PLAIN_SECONDS} s), not --bytes: at line rate a payload that suits the \
             tunnels is over in milliseconds"
        ));
    }
    let mut cells = Vec::new();
    for suite in row_suites {
        // The baseline's one cell has no cipher to name.
        let label = match row.backend {
            Backend::Plain => key.label(),
            _ => format!("{} {}", key.label(), suite.short_label()),
        };
        progress.cell_started(&label);
        let started = std::time::Instant::now();
        let mut cell = if cancel.is_cancelled() {
            Cell::not_run(suite, "interrupted")
        } else if let Some(why) = row.backend.suite_refusal(suite) {
            Cell::not_run(suite, why)
        } else if row.key.variant == RowVariant::Pcrypt && !matches!(suite, CipherSuite::AesGcm { .. }) {
            Cell::not_run(
                suite,
                "the pcrypt row wraps rfc4106(gcm(aes)): AES-GCM columns only",
            )
        } else if packet_size.is_some() && row.backend == Backend::Xfrm && row.key.tunnel_threads > 1 {
            Cell::not_run(
                suite,
                "one UDP flow rides one SA pair: the SA-pair rows measure TCP streams only",
            )
        } else {
            run_cell(args, row, suite, crypto, dimensions, topology, cancel).await
        };
        if let CellOutcome::Measured(m) = &mut cell.outcome {
            if matches!(row.backend, Backend::Xfrm | Backend::Strongswan) {
                // A pcrypt cell names its instance (gone by now, so not in /proc/crypto).
                m.served_by = m.served_by.take().or_else(|| esp_served_by(suite));
            }
            if let Some(d) = &driver {
                if !m.served_by.as_deref().is_some_and(|s| s.contains(d.as_str())) {
                    m.notes.push(format!(
                        "{d} was raised for this row but {} served",
                        m.served_by.as_deref().unwrap_or("an unknown driver")
                    ));
                }
            }
        }
        progress.cell_finished(&crate::progress::CellDone {
            label,
            mb_per_s: cell.measurement().map(|m| m.mb_per_s.median),
            elapsed_s: started.elapsed().as_secs_f64(),
        });
        cells.push(cell);
    }
    if let Some(guard) = guard {
        if let Err(failures) = guard.restore() {
            notes.push(format!(
                "could not restore crypto priorities: {}",
                failures.join("; ")
            ));
        }
    }
    Row { key, cells, notes }
}

/// Why a row of `pairs` SA pairs has no TCP cell at `streams` streams: a pair per stream
/// group, so fewer streams than pairs leave a pair idle (a UDP row is one flow on one pair).
fn too_few_streams(
    backend: Backend,
    pairs: u16,
    packet_size: Option<PacketSize>,
    streams: u16,
) -> Option<String> {
    (backend.describe().threads == Threads::SaPairs && packet_size.is_none() && pairs > streams).then(|| {
        format!("{pairs} SA pairs need at least {pairs} streams (one pair per stream group): give -P {pairs}")
    })
}

/// How long each transfer of a plain row lasts: the line rate is many times a tunnel's, so
/// the payload of the tunnels' cells (100 MB: 0.05 s over veth) is too short to time it.
const PLAIN_SECONDS: f64 = model::LINE_RATE_SECONDS;

async fn run_cell(
    args: &SweepPlan,
    row: &PlannedRow,
    suite: CipherSuite,
    crypto: CryptoChoice,
    dimensions: Dimensions<'_>,
    topology: &Topology,
    cancel: &CancellationToken,
) -> Cell {
    let times_before = MachineTimes::now();
    let Dimensions {
        netem,
        packet_size,
        streams,
    } = dimensions;
    let result = async {
        let backend = row.backend;
        let encap = match row.key.variant {
            RowVariant::Encap(e) => Some(e),
            _ => None,
        };
        // The UDP cells run what `run --udp` runs; only the plain row's TCP transfer is timed
        // here rather than sized.
        let request = args.cell_request(
            backend,
            suite,
            crypto,
            row.key.tunnel_threads,
            packet_size,
            streams,
        );
        let plan = RunRequest {
            modes: match (backend, packet_size) {
                (Backend::Plain, None) => model::ModesRequest {
                    time_s: Some(PLAIN_SECONDS),
                    ..Default::default()
                },
                _ => request.modes,
            },
            encap: encap.map(|_| model::EncapKind::Udp),
            encap_port: encap.map(|model::Encap::EspInUdp { port }| port),
            pcrypt: row.key.variant == RowVariant::Pcrypt,
            per_cpu_sa: row.key.variant == RowVariant::PerCpuSa,
            netem: netem.cloned(),
            ..request
        }
        .validate()?;
        backend::preflight(&plan).await?;
        crate::netem::preflight(plan.link().netem.as_ref())?;
        // A cell's progress is the sweep's, counted per cell: the run inside says nothing,
        // and a UDP cell not a line per trial either (a search runs tens of them).
        let progress: &dyn crate::progress::Progress = match packet_size {
            Some(_) => &NoNotes,
            None => &crate::progress::Quiet,
        };
        let bench = |topology| crate::flow::Bench {
            topology,
            cancel,
            progress,
        };
        if matches!(backend, Backend::Xfrm | Backend::Strongswan) {
            // The kernel IPsec backends add addresses and routes to the veths: a fresh
            // topology per cell keeps cells independent.
            let spec = TopologySpec {
                run_id: netns::new_run_id(),
                mtu: plan.link().mtu,
                addressing: plan.link().addressing,
            };
            let fresh = Topology::create(&spec).await?;
            let report = crate::local::run_on(bench(&fresh), &plan, ShowKeys(false)).await;
            fresh.destroy()?;
            report
        } else {
            crate::local::run_on(bench(topology), &plan, ShowKeys(false)).await
        }
    }
    .await;
    match result {
        Ok((report, evidence)) => {
            let mut m = measurement(&report, &evidence);
            // A UDP cell's packets are of their own size, not the inner MTU a ceiling is
            // timed at: it has none (as `run --udp` has none).
            if args.ceiling && row.backend.encrypts() && packet_size.is_none() {
                // Right after the cell, in the same process and kernel as its transfers.
                m.ceiling = Some(Box::new(
                    crate::ceiling::measure_async(&report.plan, &evidence).await,
                ));
            }
            m.cpu_steal_percent = times_before
                .zip(MachineTimes::now())
                .and_then(|(before, after)| before.steal_percent_since(&after));
            Cell {
                packets: report.udp.as_ref().and_then(PacketRates::of),
                latency: report.latency.clone(),
                rekey: report.rekey.as_ref().and_then(model::rekey::RekeyReport::worst),
                first_packet: report.first_packet,
                ..Cell::measured(suite, m)
            }
        }
        Err(e) if e.kind == ExitKind::Interrupted => Cell::not_run(suite, "interrupted"),
        Err(e) if e.kind == ExitKind::Capability => Cell::not_run(suite, format!("{e:#}")),
        Err(e) => Cell::not_run(suite, format!("failed: {e:#}")),
    }
}

/// The progress of a UDP cell's run: no line per trial; its trials are in the report.
struct NoNotes;

impl crate::progress::Progress for NoNotes {
    fn note(&self, _line: &str) {}
}

fn measurement(report: &RunReport, evidence: &Evidence) -> Measurement {
    let samples: Vec<f64> = report.transfers.iter().map(|t| t.rates.mb_per_s).collect();
    let cpu = |f: &dyn Fn(&model::Transfer) -> f64| {
        let v: Vec<f64> = report.transfers.iter().map(|t| f(&t.transfer)).collect();
        Summary::of(&v).unwrap_or(report.mb_per_s)
    };
    Measurement {
        mb_per_s: report.mb_per_s,
        samples,
        timed_s: report.plan.workload().modes.time_s,
        bytes: report.transfers.iter().map(|t| t.transfer.bytes).collect(),
        cpu: SideCpu {
            sender_percent: cpu(&|t| t.sender_cpu.percent_of_core),
            receiver_percent: cpu(&|t| t.receiver_cpu.percent_of_core),
        },
        // The tunnel's own CPU at each end, where the backend has one: the userspace
        // tunnel's threads, the openvpn processes.
        tunnel_cpu: evidence
            .tunnel_cpu()
            .map(|(a_percent, b_percent)| TunnelCpu { a_percent, b_percent }),
        percent_of_plain: None,
        served_by: match evidence {
            Evidence::Xfrm(x) => x.pcrypt.as_ref().map(|p| p.driver.clone()),
            _ => None,
        },
        cpu_steal_percent: None,
        ceiling: None,
        percent_of_ceiling: None,
        notes: report
            .notes
            .iter()
            .chain(report.plan.ignored().iter())
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `matrix --threads 2 -P 1,2`: the two-pair xfrm row says why it has no cell at one
    /// stream and runs at two; tunnel threads and the UDP rows are not held to it.
    #[test]
    fn sa_pairs_need_a_stream_each() {
        let why = too_few_streams(Backend::Xfrm, 2, None, 1).unwrap();
        assert_eq!(
            why,
            "2 SA pairs need at least 2 streams (one pair per stream group): give -P 2"
        );
        assert_eq!(too_few_streams(Backend::Xfrm, 2, None, 2), None);
        assert_eq!(too_few_streams(Backend::Xfrm, 1, None, 1), None);
        assert_eq!(too_few_streams(Backend::Userspace, 4, None, 1), None);
        assert_eq!(
            too_few_streams(Backend::Xfrm, 2, Some(PacketSize::Fixed(64)), 1),
            None
        );
    }
}
