//! The sweep behind `ipsec-lab matrix`: every backend × every cipher configuration, on one
//! lab topology, into one [`MatrixReport`].
//!
//! Rows and where they run:
//! * `plain (line rate)`: one baseline per environment, measured first; every other cell
//!   is also given as % of it.
//! * `xfrm`: on this kernel when it has ESP, once per `cbc(aes)` driver when crypto_user
//!   (NETLINK_CRYPTO) lets the sweep raise one driver above the others for the row
//!   (restored afterwards by a guard, also when the row fails); with `--vm`, in ONE
//!   virtme-ng boot that runs `ipsec-lab matrix --backends xfrm` in the guest, whose rows
//!   come back labelled `(vm)`. Without ESP and without `--vm` the row says why it did not run.
//! * `userspace [CHOICE]`: per `--crypto` choice; `soft` needs hardware AES masked from
//!   process start, so those rows run in a child `ipsec-lab matrix` started with the mask.
//! * `openvpn`: real OpenVPN, where the binary is installed.
//!
//! xfrm cells get a fresh topology each (the backend adds inner addresses to the veths);
//! the others share one. A cell that cannot run, fails, or is not reached before Ctrl-C is
//! recorded as "not run" with the reason, never as zero; Ctrl-C still writes the JSON.

use std::process::Stdio;
use std::time::{Duration, Instant};

use model::env::{parse_proc_crypto, CryptoEntry};
use model::matrix::{
    Cell, CellOutcome, MatrixReport, Measurement, Row, RowKey, RowVariant, SideCpu, TunnelCpu, HOST, VM,
};
use model::{
    Backend, ByteSize, CipherSuite, CryptoChoice, Environment, Hmac, RunPlan, RunReport, RunRequest, Summary,
};
use netns::{Topology, TopologySpec};
use traffic::CancellationToken;
use xfrm::crypto_user::{CryptoUser, PriorityGuard};

use crate::backend;
use crate::backend::xfrm::ShowKeys;
use crate::error::{ExitKind, LabError, LabResult};
use crate::evidence::Evidence;
use crate::progress::Progress;
use crate::vm;

/// A validated sweep: what `ipsec-lab matrix` measures.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    /// Backends to sweep; the plain baseline is measured whatever this says (unless
    /// `baseline` is off, for the child sweeps a sweep starts itself).
    pub backends: Vec<Backend>,
    /// The columns: encrypting suites, without repeats.
    pub suites: Vec<CipherSuite>,
    /// Crypto implementations of the userspace backend, one row each.
    pub crypto: Vec<CryptoChoice>,
    pub bytes: ByteSize,
    /// Payload of the VM rows (TCG moves a few MB/s).
    pub vm_bytes: ByteSize,
    pub repeat: u32,
    pub mtu: u32,
    pub port: u16,
    /// `--vm [KERNEL]`: the xfrm rows in one VM boot (`Some("")`: the newest kernel in /boot).
    pub vm: Option<String>,
    pub baseline: bool,
    pub seed: u64,
    /// When the sweep started, in seconds since the epoch (for the report).
    pub started_unix_s: u64,
}

/// The line a child sweep prints per finished cell with `--report-cells`.
pub const CELL_DONE: &str = "ipsec-lab-cell-done";

/// Longest a VM sweep may take: boot plus the cells at TCG speed.
const VM_TIMEOUT_BASE: Duration = Duration::from_secs(180);

impl SweepPlan {
    /// Checks the suites and every cell's plan before anything is created.
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
        for b in &self.backends {
            for s in &self.suites {
                self.plan(*b, *s, CryptoChoice::Auto, self.seed)?;
            }
        }
        model::check_payload("--vm-bytes", self.vm_bytes)?;
        if self.vm.is_some() {
            vm::check_vm_paths(self.vm.as_deref())?;
        }
        Ok(self)
    }

    fn plan(
        &self,
        backend: Backend,
        suite: CipherSuite,
        crypto: CryptoChoice,
        seed: u64,
    ) -> LabResult<RunPlan> {
        Ok(RunRequest {
            backend,
            cipher: backend.encrypts().then_some(suite),
            crypto: (backend == Backend::Userspace).then_some(crypto),
            bytes: self.bytes,
            repeat: self.repeat,
            mtu: self.mtu,
            port: self.port,
            seed: Some(seed),
            ..Default::default()
        }
        .validate()?)
    }

    fn has(&self, backend: Backend) -> bool {
        self.backends.contains(&backend)
    }
}

/// What a row needs besides its backend.
#[derive(Debug, Clone)]
enum RowKind {
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
struct PlannedRow {
    key: RowKey,
    backend: Backend,
    kind: RowKind,
    notes: Vec<String>,
}

/// Runs the sweep; SIGINT and SIGTERM end it early. The report holds every cell measured
/// before an error or an interruption (then `interrupted`), in table order, with "% of
/// plain" computed; the result says whether the sweep itself failed.
pub async fn run(plan: &SweepPlan, progress: &dyn Progress) -> (MatrixReport, LabResult<()>) {
    let mut report = MatrixReport::new(plan.suites.clone(), plan.bytes, plan.repeat, plan.started_unix_s);
    report.notes.push(format!("payload seed {:#x}", plan.seed));
    let cancel = CancellationToken::new();
    let outcome = match crate::signal::cancel_on_signal(cancel.clone()) {
        Ok(interrupted) => {
            let result = sweep(plan, &mut report, &cancel, progress).await;
            interrupted.abort();
            result
        }
        Err(e) => Err(e),
    };
    report.interrupted = cancel.is_cancelled();
    // Table order: host rows before VM rows, backends in their usual order (stable, so
    // userspace rows keep the --crypto order even when some ran in a child process).
    report.rows.sort_by_key(|r| {
        let backend = Backend::ALL.iter().position(|b| *b == r.key.backend);
        (r.key.environment != HOST, backend)
    });
    report.compute_percent_of_plain();
    (report, outcome)
}

/// Runs every row; fills `report` as it goes, so an error or Ctrl-C keeps what was measured.
async fn sweep(
    args: &SweepPlan,
    report: &mut MatrixReport,
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> LabResult<()> {
    let seed = args.seed;
    report.environments.insert(HOST.into(), Environment::detect());
    if args.has(Backend::Xfrm) {
        // Before any priority is read: a killed matrix may have left one raised, and it
        // must not be taken for the original.
        report.notes.extend(crate::clean::restore_dead_priorities());
    }
    let rows = plan_rows(args).await;
    let soft_here = crypto::soft::active();
    let (local, soft_child): (Vec<PlannedRow>, Vec<PlannedRow>) = rows.into_iter().partition(|r| {
        !matches!(
            r.kind,
            RowKind::Local {
                crypto: CryptoChoice::Soft,
                ..
            }
        ) || soft_here
    });
    let suites = report.suites.clone();
    let cells_total: usize = local
        .iter()
        .chain(&soft_child)
        .map(|r| match (&r.kind, r.backend) {
            (RowKind::Refused(_), _) => 0,
            (_, Backend::Plain) => 1,
            _ => suites.len(),
        })
        .sum();
    progress.sweep_started(cells_total as u64);
    let spec = TopologySpec {
        run_id: netns::new_run_id(),
        mtu: args.mtu,
        addressing: model::Addressing::default(),
    };
    // One topology for the sweep; its guard removes it on every way out of this function.
    let topology = Topology::create(&spec).await?;
    let pins_drivers = local
        .iter()
        .any(|r| matches!(r.kind, RowKind::Local { driver: Some(_), .. }));
    let priorities_before = cbc_aes_priorities();
    for row in &local {
        let cells = run_row(args, row, &suites, seed, &topology, cancel, progress).await;
        report.rows.push(Row {
            key: row.key.clone(),
            cells: cells.cells,
            notes: row.notes.iter().cloned().chain(cells.notes).collect(),
        });
    }
    topology.destroy()?;
    if pins_drivers {
        // Evidence that the driver rows left the kernel as they found it.
        let after = cbc_aes_priorities();
        let list = |v: &[(String, i32)]| {
            v.iter()
                .map(|(d, p)| format!("{d}={p}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        report.notes.push(if after == priorities_before {
            format!(
                "cbc(aes) driver priorities restored after the driver rows: {}",
                list(&after)
            )
        } else {
            format!(
                "cbc(aes) driver priorities NOT restored: before {}, after {}",
                list(&priorities_before),
                list(&after)
            )
        });
    }
    if !soft_child.is_empty() {
        let rows = child_sweep(args, &soft_child, cancel, progress).await;
        report.rows.extend(rows);
    }
    progress.sweep_finished();
    if args.vm.is_some() && args.has(Backend::Xfrm) {
        if cancel.is_cancelled() {
            report.rows.push(refused_row(
                RowKey::new(Backend::Xfrm, RowVariant::Default, VM),
                &suites,
                "interrupted",
            ));
        } else {
            match vm_sweep(args, &suites, cancel).await {
                Ok(guest) => report.merge(guest),
                Err(e) => report.rows.push(refused_row(
                    RowKey::new(Backend::Xfrm, RowVariant::Default, VM),
                    &suites,
                    &format!("the VM sweep failed: {e:#}"),
                )),
            }
        }
    }
    Ok(())
}

fn refused_row(key: RowKey, suites: &[CipherSuite], reason: &str) -> Row {
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
async fn plan_rows(args: &SweepPlan) -> Vec<PlannedRow> {
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
    if args.has(Backend::Xfrm) && args.vm.is_none() {
        rows.extend(xfrm_rows(args).await);
    }
    if args.has(Backend::Userspace) {
        for c in &args.crypto {
            rows.push(local(Backend::Userspace, RowVariant::Crypto(*c), *c, None));
        }
    }
    if args.has(Backend::Openvpn) {
        rows.push(local(
            Backend::Openvpn,
            RowVariant::Default,
            CryptoChoice::Auto,
            None,
        ));
    }
    rows
}

/// The xfrm rows on this kernel: one per `cbc(aes)` driver where crypto_user allows choosing,
/// else one with the default drivers (and why), or one that says why none can run.
async fn xfrm_rows(args: &SweepPlan) -> Vec<PlannedRow> {
    let key = |variant| RowKey::new(Backend::Xfrm, variant, HOST);
    let probe_suite = args.suites.first().copied();
    let probe_plan = probe_suite.and_then(|s| args.plan(Backend::Xfrm, s, CryptoChoice::Auto, 0).ok());
    if let Some(plan) = probe_plan {
        if let Err(e) = backend::preflight(&plan).await {
            return vec![PlannedRow {
                key: key(RowVariant::Default),
                backend: Backend::Xfrm,
                kind: RowKind::Refused(format!("{e:#}")),
                notes: vec![],
            }];
        }
    }
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

fn proc_crypto() -> Vec<CryptoEntry> {
    parse_proc_crypto(&std::fs::read_to_string("/proc/crypto").unwrap_or_default())
}

/// Every `cbc(aes)` skcipher driver and its priority, sorted.
fn cbc_aes_priorities() -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = proc_crypto()
        .into_iter()
        .filter(|e| e.name == "cbc(aes)" && e.kind == "skcipher")
        .map(|e| (e.driver, e.priority))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The `cbc(aes)` skcipher drivers, after asking the kernel to instantiate the generic one
/// (which a lookup never builds while a faster driver exists). Err says why the sweep
/// cannot choose drivers here.
fn cbc_aes_drivers() -> Result<Vec<String>, String> {
    let mut cu = CryptoUser::open().map_err(|e| e.to_string())?;
    if let Err(e) = cu.instantiate("cbc(aes-generic)") {
        tracing::info!("cbc(aes-generic) not instantiated: {e}");
    }
    let mut drivers: Vec<(i32, String)> = proc_crypto()
        .into_iter()
        .filter(|e| e.name == "cbc(aes)" && e.selftest_passed && e.kind == "skcipher")
        .map(|e| (e.priority, e.driver))
        .collect();
    drivers.sort_by(|a, b| b.cmp(a));
    drivers.dedup_by(|a, b| a.1 == b.1);
    match drivers.len() {
        0 => Err("no cbc(aes) driver in /proc/crypto".into()),
        1 => Err(format!(
            "{} is the only cbc(aes) driver in this kernel",
            drivers[0].1
        )),
        _ => Ok(drivers.into_iter().map(|(_, d)| d).collect()),
    }
}

/// Driver priorities changed for one row: restored by the guard, and recorded with their
/// originals in the state file until then, so `clean` restores them after a SIGKILL.
struct PinnedDriver {
    guard: Option<PriorityGuard<CryptoUser>>,
    records: Vec<owner::Record>,
}

impl PinnedDriver {
    /// Restores now and says whether every priority went back; what did not stays
    /// recorded for `clean`.
    fn restore(mut self) -> Result<(), Vec<String>> {
        self.restore_now()
    }

    fn restore_now(&mut self) -> Result<(), Vec<String>> {
        let restored = self.guard.take().map_or(Ok(()), PriorityGuard::restore);
        if restored.is_ok() {
            for r in self.records.drain(..) {
                owner::forget(&r);
            }
        }
        restored
    }
}

impl Drop for PinnedDriver {
    fn drop(&mut self) {
        let _ = self.restore_now();
    }
}

/// Raises `driver` above every other `cbc(aes)` driver and flushes the algorithm instances
/// built on any of them (an UPDATEALG removes them), so the next SA is built from `driver`.
/// Everything goes back when the guard drops.
fn pin_driver(driver: &str) -> Result<PinnedDriver, String> {
    let entries: Vec<CryptoEntry> = proc_crypto()
        .into_iter()
        .filter(|e| e.name == "cbc(aes)" && e.kind == "skcipher")
        .collect();
    let top = entries.iter().map(|e| e.priority).max().unwrap_or(0).max(0) as u32 + 100;
    let mut pinned = PinnedDriver {
        guard: Some(PriorityGuard::new(CryptoUser::open().map_err(|e| e.to_string())?)),
        records: Vec::new(),
    };
    for e in &entries {
        let original = e.priority.max(0) as u32;
        let new = if e.driver == driver { top } else { original };
        // Recorded before the change, so a kill right after it still leaves the original.
        let record = owner::Record::DriverPriority {
            driver: e.driver.clone(),
            original,
        };
        owner::record(record.clone()).map_err(|e| e.to_string())?;
        pinned.records.push(record);
        let guard = pinned.guard.as_mut().expect("set above");
        guard.set(&e.driver, original, new).map_err(|e| e.to_string())?;
    }
    if !entries.iter().any(|e| e.driver == driver) {
        return Err(format!("{driver} is no longer in /proc/crypto"));
    }
    Ok(pinned)
}

/// The kernel algorithm instance an ESP SA of `suite` uses (without the IV generator).
fn instance_name(suite: CipherSuite) -> Option<&'static str> {
    match suite {
        CipherSuite::AesCbc { hmac: Hmac::None, .. } => Some("authenc(digest_null,cbc(aes))"),
        CipherSuite::AesCbc {
            hmac: Hmac::Sha256, ..
        } => Some("authenc(hmac(sha256),cbc(aes))"),
        CipherSuite::AesGcm { .. } => Some("rfc4106(gcm(aes))"),
        CipherSuite::None => None,
    }
}

/// The driver that served the last SA of `suite`, from /proc/crypto.
fn served_by(suite: CipherSuite) -> Option<String> {
    let name = instance_name(suite)?;
    model::env::preferred_drivers(&proc_crypto(), &[name]).remove(name)
}

struct RowResult {
    cells: Vec<Cell>,
    notes: Vec<String>,
}

#[allow(clippy::too_many_arguments)]
async fn run_row(
    args: &SweepPlan,
    row: &PlannedRow,
    suites: &[CipherSuite],
    seed: u64,
    topology: &Topology,
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> RowResult {
    let row_suites: Vec<CipherSuite> = if row.backend == Backend::Plain {
        vec![CipherSuite::None]
    } else {
        suites.to_vec()
    };
    let (crypto, driver) = match &row.kind {
        RowKind::Refused(reason) => {
            return RowResult {
                cells: row_suites
                    .iter()
                    .map(|s| Cell::not_run(*s, reason.clone()))
                    .collect(),
                notes: vec![],
            }
        }
        RowKind::Local { crypto, driver } => (*crypto, driver.clone()),
    };
    let mut notes = Vec::new();
    // Held for the whole row; dropping it (also on an early return) restores the priorities.
    let guard = match driver.as_deref().map(pin_driver) {
        Some(Err(why)) => {
            return RowResult {
                cells: row_suites
                    .iter()
                    .map(|s| Cell::not_run(*s, format!("could not choose the kernel driver: {why}")))
                    .collect(),
                notes,
            }
        }
        Some(Ok(g)) => Some(g),
        None => None,
    };
    let mut cells = Vec::new();
    for suite in &row_suites {
        progress.cell_started(&format!("{} {}", row.key.label(), suite.short_label()));
        let cell = if cancel.is_cancelled() {
            Cell::not_run(*suite, "interrupted")
        } else {
            run_cell(args, row.backend, *suite, crypto, seed, topology, cancel).await
        };
        let cell = match (&driver, cell) {
            (
                Some(d),
                Cell {
                    suite,
                    outcome: CellOutcome::Measured(mut m),
                },
            ) => {
                m.served_by = served_by(suite);
                if !m.served_by.as_deref().is_some_and(|s| s.contains(d.as_str())) {
                    m.notes.push(format!(
                        "{d} was raised for this row but {} served",
                        m.served_by.as_deref().unwrap_or("an unknown driver")
                    ));
                }
                Cell {
                    suite,
                    outcome: CellOutcome::Measured(m),
                }
            }
            (
                None,
                Cell {
                    suite,
                    outcome: CellOutcome::Measured(mut m),
                },
            ) if row.backend == Backend::Xfrm => {
                m.served_by = served_by(suite);
                Cell {
                    suite,
                    outcome: CellOutcome::Measured(m),
                }
            }
            (_, other) => other,
        };
        progress.cell_finished();
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
    RowResult { cells, notes }
}

async fn run_cell(
    args: &SweepPlan,
    backend: Backend,
    suite: CipherSuite,
    crypto: CryptoChoice,
    seed: u64,
    topology: &Topology,
    cancel: &CancellationToken,
) -> Cell {
    let result = async {
        let plan = args.plan(backend, suite, crypto, seed)?;
        backend::preflight(&plan).await?;
        if backend == Backend::Xfrm {
            // The xfrm backend adds addresses and routes to the veths: a fresh topology per
            // cell keeps cells independent.
            let spec = TopologySpec {
                run_id: netns::new_run_id(),
                mtu: plan.mtu,
                addressing: plan.addressing,
            };
            let fresh = Topology::create(&spec).await?;
            let report =
                crate::local::run_on(&plan, &fresh, cancel, ShowKeys(false), &crate::progress::Quiet).await;
            fresh.destroy()?;
            report
        } else {
            crate::local::run_on(&plan, topology, cancel, ShowKeys(false), &crate::progress::Quiet).await
        }
    }
    .await;
    match result {
        Ok((report, evidence)) => Cell {
            suite,
            outcome: CellOutcome::Measured(measurement(&report, &evidence)),
        },
        Err(e) if e.kind == ExitKind::Interrupted => Cell::not_run(suite, "interrupted"),
        Err(e) if e.kind == ExitKind::Capability => Cell::not_run(suite, format!("{e:#}")),
        Err(e) => Cell::not_run(suite, format!("failed: {e:#}")),
    }
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
        served_by: None,
        notes: report
            .notes
            .iter()
            .chain(report.plan.ignored.iter())
            .cloned()
            .collect(),
    }
}

/// The sweep arguments a child sweep shares with this one.
fn child_args(args: &SweepPlan, suites: &[CipherSuite], bytes: ByteSize) -> Vec<String> {
    let ciphers: Vec<String> = suites.iter().map(|s| s.name()).collect();
    vec![
        "matrix".into(),
        "--ciphers".into(),
        ciphers.join(","),
        "--bytes".into(),
        bytes.0.to_string(),
        "--repeat".into(),
        args.repeat.to_string(),
        "--mtu".into(),
        args.mtu.to_string(),
        "--port".into(),
        args.port.to_string(),
        "--no-progress".into(),
    ]
}

/// [`wait_child`], with the child recorded in the state file meanwhile, so `clean` stops
/// it if this process is killed.
async fn wait_recorded(
    child: std::process::Child,
    program: &str,
    cancel: &CancellationToken,
    timeout: Option<Duration>,
) -> std::io::Result<std::process::ExitStatus> {
    let record = owner::Record::process(child.id(), program);
    if let Err(e) = owner::record(record.clone()) {
        tracing::warn!("{program} not recorded: {e}");
    }
    let status = wait_child(child, cancel, timeout).await;
    owner::forget(&record);
    status
}

/// Waits for `child`, passing a Ctrl-C on to it (it then writes what it measured).
async fn wait_child(
    mut child: std::process::Child,
    cancel: &CancellationToken,
    timeout: Option<Duration>,
) -> std::io::Result<std::process::ExitStatus> {
    let started = Instant::now();
    let mut signalled = false;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        let overdue = timeout.is_some_and(|t| started.elapsed() > t);
        if (cancel.is_cancelled() || overdue) && !signalled {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            signalled = true;
        }
        if overdue && started.elapsed() > timeout.unwrap_or_default() + Duration::from_secs(30) {
            let _ = child.kill();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `--crypto soft` rows, in a child `ipsec-lab matrix` started with hardware AES masked;
/// `bar` counts the cells the child reports as finished.
async fn child_sweep(
    args: &SweepPlan,
    rows: &[PlannedRow],
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> Vec<Row> {
    let suites = args.suites.clone();
    let fail = |reason: String| -> Vec<Row> {
        rows.iter()
            .map(|r| refused_row(r.key.clone(), &suites, &reason))
            .collect()
    };
    if cancel.is_cancelled() {
        return fail("interrupted".into());
    }
    let dir = match owner::PrivateDir::new("ipsec-lab-soft-") {
        Ok(d) => d,
        Err(e) => return fail(e.to_string()),
    };
    let json = dir.join("matrix.json");
    let mut cmd = match crypto::soft::command() {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    cmd.args(child_args(args, &suites, args.bytes))
        .args([
            "--backends",
            "userspace",
            "--crypto",
            "soft",
            "--no-baseline",
            "--report-cells",
            "--json",
        ])
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    progress.note("userspace [soft] rows in a child process with hardware AES masked");
    let status = match cmd.spawn() {
        Ok(mut child) => {
            let stdout = child.stdout.take();
            // The child's stdout carries one line per finished cell: counted as they come.
            let (status, ()) = tokio::join!(
                wait_recorded(child, "ipsec-lab matrix (soft AES)", cancel, None),
                count_cells(stdout, progress)
            );
            status
        }
        Err(e) => Err(e),
    };
    let parsed = std::fs::read_to_string(&json)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<MatrixReport>(&t).map_err(|e| e.to_string()));
    drop(dir);
    match (status, parsed) {
        (_, Ok(child)) => child.rows,
        (Ok(s), Err(e)) => fail(format!("the soft-AES child sweep failed ({s}): {e}")),
        (Err(e), _) => fail(format!("the soft-AES child sweep did not start: {e}")),
    }
}

/// Reports a finished cell per [`CELL_DONE`] line a child sweep prints, until it closes
/// stdout.
async fn count_cells(out: Option<std::process::ChildStdout>, progress: &dyn Progress) {
    use tokio::io::AsyncBufReadExt;
    let Some(out) = out.and_then(|o| tokio::net::unix::pipe::Receiver::from_owned_fd(o.into()).ok()) else {
        return;
    };
    let mut lines = tokio::io::BufReader::new(out).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim() == CELL_DONE {
            progress.cell_finished();
        }
    }
}

/// The xfrm rows in ONE VM boot: the guest runs `ipsec-lab matrix --backends xfrm` (its
/// own plain baseline included) and writes its JSON into a shared directory; its rows and
/// environment come back keyed [`VM`].
async fn vm_sweep(
    args: &SweepPlan,
    suites: &[CipherSuite],
    cancel: &CancellationToken,
) -> LabResult<MatrixReport> {
    let kernel = vm::resolve_kernel(args.vm.as_deref())?;
    let accel = vm::detect_accel(&kernel);
    let outdir = vm::guest_dir("ipsec-lab-matrix-vm-")?;
    let exe = std::env::current_exe().map_err(LabError::failed)?;
    let json = outdir.join("matrix.json");
    let bytes = args.vm_bytes;
    let mut guest = child_args(args, suites, bytes);
    guest.extend([
        "--backends".into(),
        "xfrm".into(),
        "--json".into(),
        json.display().to_string(),
    ]);
    let modules = format!("{} crypto_user", vm::GUEST_MODULES);
    let script = vm::guest_script(&exe, &guest, &outdir.join("rc"), accel, &modules);
    eprintln!(
        "ipsec-lab: xfrm rows in a VM booting {} ({}); TCG boots take about half a minute",
        kernel.display(),
        accel.label()
    );
    // Boot, plus each cell's transfers at a few MB/s under TCG, with a wide margin.
    let cells = (suites.len() as u64 * 2 + 1) * u64::from(args.repeat);
    let timeout = VM_TIMEOUT_BASE + Duration::from_secs(cells * (10 + bytes.0 / 500_000));
    // The guest's console stays quiet here (the sweep's own progress goes on meanwhile);
    // qemu gets /dev/null, never the user's stdout or stderr.
    let mut cmd = vm::vng_command(&kernel, accel, outdir.path(), &script);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let started = Instant::now();
    let status = match cmd.spawn() {
        Ok(child) => wait_recorded(child, "vng (matrix --vm)", cancel, Some(timeout)).await,
        Err(e) => Err(e),
    };
    let rc = std::fs::read_to_string(outdir.join("rc")).unwrap_or_default();
    let parsed = std::fs::read_to_string(&json);
    drop(outdir);
    let text = parsed.map_err(|e| {
        LabError::failed(anyhow::anyhow!(
            "the VM wrote no matrix (vng: {}, guest exit code {:?}): {e}",
            status
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string()),
            rc.trim()
        ))
    })?;
    let mut guest: MatrixReport = serde_json::from_str(&text).map_err(LabError::failed)?;
    for row in &mut guest.rows {
        row.key.environment = VM.into();
    }
    if let Some(env) = guest.environments.remove(HOST) {
        guest.environments.insert(VM.into(), env);
    }
    guest.notes.retain(|n| !n.starts_with("payload seed"));
    guest.notes.push(format!(
        "(vm) rows: one boot of {} ({}), boot, sweep and shutdown took {:.0} s",
        kernel.display(),
        accel.label(),
        started.elapsed().as_secs_f64()
    ));
    Ok(guest)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn plan() -> SweepPlan {
        SweepPlan {
            backends: Backend::ALL.to_vec(),
            suites: vec![],
            crypto: vec![CryptoChoice::Auto],
            bytes: ByteSize(4_000_000),
            vm_bytes: ByteSize(4_000_000),
            repeat: 2,
            mtu: 1500,
            port: 5201,
            vm: None,
            baseline: true,
            seed: 1,
            started_unix_s: 0,
        }
    }

    #[test]
    fn suites_default_to_the_classic_six_and_none_is_refused() {
        assert_eq!(plan().validate().unwrap().suites, CipherSuite::classic_six());
        let none = SweepPlan {
            suites: vec![CipherSuite::None],
            ..plan()
        };
        assert_eq!(none.validate().unwrap_err().kind, ExitKind::Usage);
    }

    #[test]
    fn esp_instances_are_named_as_the_kernel_builds_them() {
        assert_eq!(
            instance_name(CipherSuite::classic_six()[0]),
            Some("authenc(digest_null,cbc(aes))")
        );
        assert_eq!(
            instance_name(CipherSuite::classic_six()[5]),
            Some("authenc(hmac(sha256),cbc(aes))")
        );
    }

    #[test]
    fn child_sweeps_get_the_same_sizes() {
        let a = plan().validate().unwrap();
        let c = child_args(&a, &a.suites, a.bytes);
        let joined = c.join(" ");
        assert!(joined.contains("--bytes 4000000 --repeat 2"), "{joined}");
        assert!(joined.contains("aes-128-cbc,aes-192-cbc"), "{joined}");
    }
}
