//! `ipsec-lab matrix`: every backend × every cipher configuration, on one lab topology,
//! into one [`MatrixReport`] (JSON), printed as the classic table.
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

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
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

use crate::backends;
use crate::error::{require_net_admin, ExitKind, LabError, LabResult};
use crate::vm;

#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// Backends to sweep, comma-separated. The plain baseline is always measured: it is
    /// what "% of plain" is relative to.
    #[arg(long, value_delimiter = ',', default_value = "plain,xfrm,userspace,openvpn")]
    pub backends: Vec<Backend>,
    /// Cipher suites (the columns), comma-separated, e.g. aes-256-gcm,aes-256-cbc-hmac-sha256
    /// [default: the six classic ones, AES-128/192/256-CBC without and with HMAC-SHA256].
    #[arg(long, value_delimiter = ',')]
    pub ciphers: Vec<CipherSuite>,
    /// Crypto implementations of the userspace backend, one row each.
    #[arg(long, value_delimiter = ',', default_value = "auto,soft")]
    pub crypto: Vec<CryptoChoice>,
    /// Payload of each transfer, e.g. 100MB, 4MB; at least 1MB.
    #[arg(long, default_value = "100MB")]
    pub bytes: ByteSize,
    /// Payload of each transfer in the VM rows [default: --bytes]: TCG moves a few MB/s.
    #[arg(long, value_name = "SIZE", requires = "vm")]
    pub vm_bytes: Option<ByteSize>,
    /// Transfers per cell (median, min–max).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// MTU of the veth link.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// TCP port of the receiver.
    #[arg(long, default_value_t = 5201)]
    pub port: u16,
    /// Run the kernel (xfrm) rows in a VM booting a stock kernel (optionally this image):
    /// one boot for all of them.
    #[arg(long, value_name = "KERNEL", num_args = 0..=1, default_missing_value = "")]
    pub vm: Option<String>,
    /// Where to write the JSON result, `-` for stdout (the table then goes to stderr)
    /// [default: DIR/matrix.json with --out, else ipsec-lab-matrix-<unix time>.json].
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write everything into DIR (created if missing): matrix.{json,md,csv,svg,html}.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bar even on a terminal.
    #[arg(long)]
    pub no_progress: bool,
    /// Leave out the plain baseline (for the child sweeps this command starts itself).
    #[arg(long, hide = true)]
    pub no_baseline: bool,
    /// Print a line on stdout per finished cell (for the child sweeps: the parent's progress
    /// bar counts them).
    #[arg(long, hide = true)]
    pub report_cells: bool,
}

/// The line a child sweep prints per finished cell with `--report-cells`.
const CELL_DONE: &str = "ipsec-lab-cell-done";

/// Longest a VM sweep may take: boot plus the cells at TCG speed.
const VM_TIMEOUT_BASE: Duration = Duration::from_secs(180);

impl MatrixArgs {
    fn suites(&self) -> LabResult<Vec<CipherSuite>> {
        if self.ciphers.contains(&CipherSuite::None) {
            return Err(LabError::usage(anyhow::anyhow!(
                "--ciphers lists encrypting suites; the unencrypted baseline is the plain row, always measured"
            )));
        }
        let mut out: Vec<CipherSuite> = Vec::new();
        let chosen = if self.ciphers.is_empty() {
            CipherSuite::classic_six()
        } else {
            self.ciphers.clone()
        };
        for s in chosen {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        Ok(out)
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

pub fn run(args: MatrixArgs) -> LabResult<()> {
    let suites = args.suites()?;
    // Every cell's plan is validated before anything is created.
    let seed = seed_from_clock();
    for b in &args.backends {
        for s in &suites {
            args.plan(*b, *s, CryptoChoice::Auto, seed)?;
        }
    }
    if let Some(vm_bytes) = args.vm_bytes {
        model::check_payload("--vm-bytes", vm_bytes)?;
    }
    if args.vm.is_some() {
        vm::check_vm_paths(args.vm.as_deref())?;
    }
    require_net_admin()?;
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Where the results go, checked before a sweep that can take an hour.
    let json_path = match (&args.json, &args.out) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(PathBuf::from(format!("ipsec-lab-matrix-{started_unix_s}.json"))),
    };
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| {
            LabError::usage(anyhow::anyhow!(
                "--out {}: cannot create the directory: {e}",
                dir.display()
            ))
        })?;
        crate::output::check_writable(&dir.join("matrix.json"), "--out")?;
    }
    if let Some(path) = &json_path {
        crate::output::check_writable(path, "--json")?;
    }
    require_net_admin()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(LabError::failed)?;
    let show_progress = !args.no_progress && std::io::stderr().is_terminal();
    let mut report = MatrixReport::new(suites, args.bytes, args.repeat, started_unix_s);
    report.notes.push(format!("payload seed {seed:#x}"));
    let outcome = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let interrupted = crate::commands::run::cancel_on_signal(cancel.clone())?;
        let result = sweep(&args, &mut report, seed, &cancel, show_progress).await;
        interrupted.abort();
        report.interrupted = cancel.is_cancelled();
        result
    });
    // Table order: host rows before VM rows, backends in their usual order (stable, so
    // userspace rows keep the --crypto order even when some ran in a child process).
    report.rows.sort_by_key(|r| {
        let backend = Backend::ALL.iter().position(|b| *b == r.key.backend);
        (r.key.environment != HOST, backend)
    });
    report.compute_percent_of_plain();
    // The JSON is written whatever happened: cells measured before an error or Ctrl-C count.
    if !args.no_baseline {
        crate::output::print_human(&report::markdown::render(&report), json_path.as_deref());
    }
    if let Some(path) = &json_path {
        crate::output::write_text(path, &to_json(&report)?)?;
        if !crate::output::is_std_stream(path) && !args.no_baseline {
            eprintln!("ipsec-lab: matrix written to {}", path.display());
        }
    }
    if let Some(dir) = &args.out {
        write_all_formats(&report, dir)?;
        eprintln!(
            "ipsec-lab: matrix.{{json,md,csv,svg,html}} written to {}",
            dir.display()
        );
    }
    outcome?;
    if report.interrupted {
        return Err(LabError::interrupted());
    }
    Ok(())
}

fn to_json(report: &MatrixReport) -> LabResult<String> {
    serde_json::to_string_pretty(report)
        .map(|s| s + "\n")
        .map_err(LabError::failed)
}

/// matrix.json, .md, .csv, .svg and .html in `dir`.
pub fn write_all_formats(report: &MatrixReport, dir: &Path) -> LabResult<()> {
    crate::output::write_text(&dir.join("matrix.json"), &to_json(report)?)?;
    for format in report::Format::ALL {
        let text = report::render(report, format).map_err(LabError::failed)?;
        crate::output::write_text(&dir.join(format!("matrix.{}", format.extension())), &text)?;
    }
    Ok(())
}

/// Runs every row; fills `report` as it goes, so an error or Ctrl-C keeps what was measured.
async fn sweep(
    args: &MatrixArgs,
    report: &mut MatrixReport,
    seed: u64,
    cancel: &CancellationToken,
    show_progress: bool,
) -> LabResult<()> {
    report.environments.insert(HOST.into(), Environment::detect());
    if args.has(Backend::Xfrm) {
        // Before any priority is read: a killed matrix may have left one raised, and it
        // must not be taken for the original.
        report
            .notes
            .extend(crate::commands::clean::restore_dead_priorities());
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
    let bar = show_progress.then(|| overall_bar(cells_total as u64));
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
        let cells = run_row(args, row, &suites, seed, &topology, cancel, bar.as_ref()).await;
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
        let rows = child_sweep(args, &soft_child, cancel, bar.as_ref()).await;
        report.rows.extend(rows);
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
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
async fn plan_rows(args: &MatrixArgs) -> Vec<PlannedRow> {
    let mut rows = Vec::new();
    let local = |backend, variant, crypto, driver| PlannedRow {
        key: RowKey::new(backend, variant, HOST),
        backend,
        kind: RowKind::Local { crypto, driver },
        notes: vec![],
    };
    if !args.no_baseline {
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
async fn xfrm_rows(args: &MatrixArgs) -> Vec<PlannedRow> {
    let key = |variant| RowKey::new(Backend::Xfrm, variant, HOST);
    let probe_suite = args.suites().ok().and_then(|s| s.first().copied());
    let probe_plan = probe_suite.and_then(|s| args.plan(Backend::Xfrm, s, CryptoChoice::Auto, 0).ok());
    if let Some(plan) = probe_plan {
        if let Err(e) = backends::preflight(&plan).await {
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
    args: &MatrixArgs,
    row: &PlannedRow,
    suites: &[CipherSuite],
    seed: u64,
    topology: &Topology,
    cancel: &CancellationToken,
    bar: Option<&ProgressBar>,
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
        if let Some(bar) = bar {
            bar.set_message(format!("{} {}", row.key.label(), suite.short_label()));
        }
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
        if let Some(bar) = bar {
            bar.inc(1);
        }
        if args.report_cells {
            println!("{CELL_DONE}");
        }
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
    args: &MatrixArgs,
    backend: Backend,
    suite: CipherSuite,
    crypto: CryptoChoice,
    seed: u64,
    topology: &Topology,
    cancel: &CancellationToken,
) -> Cell {
    let result = async {
        let plan = args.plan(backend, suite, crypto, seed)?;
        backends::preflight(&plan).await?;
        if backend == Backend::Xfrm {
            // The xfrm backend adds addresses and routes to the veths: a fresh topology per
            // cell keeps cells independent.
            let spec = TopologySpec {
                run_id: netns::new_run_id(),
                mtu: plan.mtu,
                addressing: plan.addressing,
            };
            let fresh = Topology::create(&spec).await?;
            let report = crate::commands::run::run_on(&plan, &fresh, cancel, false).await;
            fresh.destroy()?;
            report
        } else {
            crate::commands::run::run_on(&plan, topology, cancel, false).await
        }
    }
    .await;
    match result {
        Ok(report) => Cell {
            suite,
            outcome: CellOutcome::Measured(measurement(&report)),
        },
        Err(e) if e.kind == ExitKind::Interrupted => Cell::not_run(suite, "interrupted"),
        Err(e) if e.kind == ExitKind::Capability => Cell::not_run(suite, format!("{e:#}")),
        Err(e) => Cell::not_run(suite, format!("failed: {e:#}")),
    }
}

fn measurement(report: &RunReport) -> Measurement {
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
        tunnel_cpu: tunnel_cpu(report),
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

/// The tunnel's own CPU at each end, where the backend reports it: the userspace backend's
/// tunnel threads (`a`/`b`), the openvpn processes (`ends.a`/`ends.b`).
fn tunnel_cpu(report: &RunReport) -> Option<TunnelCpu> {
    let details = report.backend_details.get(report.plan.backend.name())?;
    let ends = details.get("ends").unwrap_or(details);
    let percent = |end: &str| ends.get(end)?.get("cpu")?.get("percent_of_core")?.as_f64();
    Some(TunnelCpu {
        a_percent: percent("a")?,
        b_percent: percent("b")?,
    })
}

fn overall_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("cell {pos}/{len} [{bar:30}] {msg} (elapsed {elapsed}, ETA {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

/// The sweep arguments a child sweep shares with this one.
fn child_args(args: &MatrixArgs, suites: &[CipherSuite], bytes: ByteSize) -> Vec<String> {
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
    args: &MatrixArgs,
    rows: &[PlannedRow],
    cancel: &CancellationToken,
    bar: Option<&ProgressBar>,
) -> Vec<Row> {
    let suites = args.suites().unwrap_or_default();
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
    let note = "userspace [soft] rows in a child process with hardware AES masked";
    match bar {
        Some(bar) => bar.println(format!("ipsec-lab: {note}")),
        None => eprintln!("ipsec-lab: {note}"),
    }
    let status = match cmd.spawn() {
        Ok(mut child) => {
            let counter = child.stdout.take().map(|out| count_cells(out, bar.cloned()));
            let status = wait_recorded(child, "ipsec-lab matrix (soft AES)", cancel, None).await;
            if let Some(counter) = counter {
                let _ = counter.join();
            }
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

/// Advances `bar` by one per [`CELL_DONE`] line a child sweep prints, until it closes stdout.
fn count_cells(out: std::process::ChildStdout, bar: Option<ProgressBar>) -> std::thread::JoinHandle<()> {
    use std::io::BufRead;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if let (Some(bar), true) = (&bar, line.trim() == CELL_DONE) {
                bar.inc(1);
            }
        }
    })
}

/// The xfrm rows in ONE VM boot: the guest runs `ipsec-lab matrix --backends xfrm` (its
/// own plain baseline included) and writes its JSON into a shared directory; its rows and
/// environment come back keyed [`VM`].
async fn vm_sweep(
    args: &MatrixArgs,
    suites: &[CipherSuite],
    cancel: &CancellationToken,
) -> LabResult<MatrixReport> {
    let kernel = vm::resolve_kernel(args.vm.as_deref())?;
    let accel = vm::detect_accel(&kernel);
    let outdir = vm::guest_dir("ipsec-lab-matrix-vm-")?;
    let exe = std::env::current_exe().map_err(LabError::failed)?;
    let json = outdir.join("matrix.json");
    let bytes = args.vm_bytes.unwrap_or(args.bytes);
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

fn seed_from_clock() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MatrixArgs,
    }

    fn parse(a: &[&str]) -> Result<MatrixArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("matrix").chain(a.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn defaults_are_every_backend_and_the_classic_six() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.backends, Backend::ALL);
        assert_eq!(a.suites().unwrap(), CipherSuite::classic_six());
        assert_eq!(a.crypto, [CryptoChoice::Auto, CryptoChoice::Soft]);
        assert_eq!(a.repeat, 3);
    }

    #[test]
    fn lists_parse_and_bad_values_are_usage_errors() {
        let a = parse(&[
            "--backends",
            "xfrm,userspace",
            "--ciphers",
            "aes-256-gcm,aes-256-cbc-hmac-sha256",
        ])
        .unwrap();
        assert_eq!(a.backends, [Backend::Xfrm, Backend::Userspace]);
        assert_eq!(a.suites().unwrap().len(), 2);
        assert_eq!(parse(&["--backends", "ipsec"]).err().unwrap().exit_code(), 2);
        assert_eq!(parse(&["--ciphers", "aes-512-gcm"]).err().unwrap().exit_code(), 2);
        let none = parse(&["--ciphers", "none"]).unwrap();
        assert_eq!(none.suites().unwrap_err().kind, ExitKind::Usage);
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
        let a = parse(&["--bytes", "4MB", "--repeat", "2"]).unwrap();
        let c = child_args(&a, &a.suites().unwrap(), a.bytes);
        let joined = c.join(" ");
        assert!(joined.contains("--bytes 4000000 --repeat 2"), "{joined}");
        assert!(joined.contains("aes-128-cbc,aes-192-cbc"), "{joined}");
    }
}
