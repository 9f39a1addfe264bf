//! The rows a sweep cannot run in its own process, each run by [`crate::child`]: the
//! `--crypto soft` rows in a child `ipsec-lab matrix` started with hardware AES masked
//! (its finished cells counted as it prints them), and with `--vm` the kernel IPsec rows
//! (xfrm, strongswan) in ONE virtme-ng boot that runs `ipsec-lab matrix` over those
//! backends (its own plain baseline included), whose rows and environment come back keyed
//! [`VM`]. Each child gets its own sweep plan as JSON (`matrix --plan-file`, a copy of this
//! sweep's with what the child differs in: [`soft_plan`], [`vm_plan`]); only output flags
//! stay arguments.
//!
//! Leaves out: running a row in this process ([`super::rows`]); booting the guest and
//! reading its exit code ([`crate::vm`], [`crate::child`]).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use model::matrix::{MatrixReport, Row, RowKey, RowVariant, HOST, UML, VM};
use model::{Backend, CryptoChoice};
use traffic::CancellationToken;

use super::plan::SweepPlan;
use super::rows::{refused_row, PlannedRow};
use crate::child::{Child, ExitCodeFrom, Output, LAST_LINES_FOLLOW};
use crate::error::LabResult;
use crate::progress::{Marker, Progress};
use crate::vm;

/// Longest a VM sweep may take: boot plus the cells at TCG speed.
const VM_TIMEOUT_BASE: Duration = Duration::from_secs(180);
/// The child sweep's report, in its private directory.
const SOFT_REPORT: &str = "matrix.json";

/// The soft-AES child's sweep: this one's userspace rows with soft crypto only, at every
/// thread count and link condition, without a baseline (this sweep has it) or a VM.
fn soft_plan(plan: &SweepPlan) -> SweepPlan {
    SweepPlan {
        backends: vec![Backend::Userspace],
        crypto: vec![CryptoChoice::Soft],
        baseline: false,
        vm: None,
        // Rows of xfrm: the child has none.
        encap: None,
        pcrypt: false,
        per_cpu_sa: false,
        // This sweep measures them.
        setup_rate: None,
        ..plan.clone()
    }
}

/// The kernel a guest sweep boots: a stock kernel under virtme-ng (`None`: the one in
/// /boot), or user-mode Linux (`--vm uml`; `uml:RELEASE`: one lab/second-uml.sh installed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GuestKernel {
    Stock(Option<String>),
    Uml(Option<String>),
}

impl GuestKernel {
    /// The kernels `--vm` names, in order, each once. `--vm auto` alone: the stock kernel
    /// where KVM boots it; else user-mode Linux for the rows it carries (native speed) and
    /// the stock kernel, emulated, for what UML lacks (AES-NI drivers, WireGuard), as
    /// `--vm uml,auto` would. Where the sweep has rows the stock kernel may lack (OpenVPN's
    /// DCO, `--per-cpu-sa`), the VM boots the newest kernel here that has them, as `run
    /// --vm auto` does.
    pub(super) fn all(args: &SweepPlan) -> Vec<GuestKernel> {
        if args.vm.as_deref().map(str::trim) == Some(vm::AUTO) {
            let kvm = vm::resolve_kernel(None).is_ok_and(|k| vm::detect_accel(&k) == vm::Accel::Kvm);
            let ovpn = vm_backends(args)
                .iter()
                .any(|b| b.describe().kernel == Some(model::backend::KernelNeed::Ovpn));
            let stock = GuestKernel::Stock(vm::newest_release_for(ovpn, args.per_cpu_sa));
            return match !kvm && crate::uml::UmlKernel::installed().is_some() {
                true => vec![GuestKernel::Uml(None), stock],
                false => vec![stock],
            };
        }
        vm::kernel_list(args.vm.as_deref())
            .into_iter()
            .map(|k| match vm::uml_kernel(k.as_deref()) {
                Some(release) => GuestKernel::Uml(release),
                None => GuestKernel::Stock(k),
            })
            .collect()
    }

    /// Why a backend's rows are not run in this guest, where they are not.
    fn refusal(&self, backend: Backend) -> Option<&'static str> {
        if !matches!(self, GuestKernel::Uml(_)) {
            return None;
        }
        match backend.describe().kernel {
            Some(model::backend::KernelNeed::Wireguard) => Some(
                "user-mode Linux has no WireGuard module: add a stock kernel to --vm (e.g. --vm uml,auto)",
            ),
            Some(model::backend::KernelNeed::Ovpn) => Some(
                "user-mode Linux has no ovpn module: add a kernel of 6.16 or later to --vm (Debian sid's, from \
                 lab/setup.sh --second-kernel)",
            ),
            _ => None,
        }
    }
}

/// A guest's sweep: the kernel rows it carries (with `--encap`, `--pcrypt` and SA counts) at
/// the VM rows' payload, with the guest's own baseline, and no VM inside the VM.
/// User-mode Linux has one CPU: no pcrypt row and no SA counts above one there.
fn vm_plan(plan: &SweepPlan, kernel: &GuestKernel) -> SweepPlan {
    let backends = vm_backends(plan)
        .into_iter()
        .filter(|b| kernel.refusal(*b).is_none())
        .collect();
    let one_cpu = matches!(kernel, GuestKernel::Uml(_));
    SweepPlan {
        backends,
        bytes: plan.vm_bytes,
        vm: None,
        setup_rate: None,
        pcrypt: plan.pcrypt && !one_cpu,
        threads: match one_cpu {
            true => vec![1],
            false => plan.threads.clone(),
        },
        ..plan.clone()
    }
}

/// `command` (this binary with hardware AES masked) made the soft-AES child sweep, reading
/// its plan from `plan_file`, writing its report to `json` and a line per finished cell to
/// stdout.
fn soft_sweep(mut command: Command, plan_file: &Path, json: &Path) -> Command {
    command
        .arg("matrix")
        .arg("--plan-file")
        .arg(plan_file)
        .args(["--no-progress", "--report-cells", "--json"])
        .arg(json);
    command
}

/// The `--crypto soft` rows, in a child `ipsec-lab matrix` started with hardware AES masked;
/// `progress` counts the cells the child reports as finished. Rows that could not run say
/// why.
pub(super) async fn soft_child_rows(
    args: &SweepPlan,
    rows: &[PlannedRow],
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> Vec<Row> {
    // A row per link condition, workload and stream count, as the child would have
    // measured them.
    let fail = |reason: String| -> Vec<Row> {
        let mut refused = Vec::new();
        for r in rows {
            for netem in &args.netem {
                for size in &args.packet_sizes {
                    for streams in args.stream_counts(*size) {
                        let key = r
                            .key
                            .clone()
                            .with_netem(netem.as_ref())
                            .with_packet_size(*size)
                            .with_streams(args.streams_key(*size, streams));
                        refused.push(refused_row(key, &args.suites, &reason));
                    }
                }
            }
        }
        refused
    };
    if cancel.is_cancelled() {
        return fail("interrupted".into());
    }
    let dir = match owner::PrivateDir::new("ipsec-lab-soft-") {
        Ok(d) => d,
        Err(e) => return fail(e.to_string()),
    };
    let plan_file = match crate::child::write_plan(&dir, &soft_plan(args)) {
        Ok(p) => p,
        Err(e) => return fail(format!("{:#}", e.error)),
    };
    let command = match crypto::soft::command() {
        Ok(c) => soft_sweep(c, &plan_file, &dir.join(SOFT_REPORT)),
        Err(e) => return fail(e.to_string()),
    };
    progress.note("userspace [soft] rows in a child process with hardware AES masked");
    // This sweep counted the child's cells already: only its finished ones matter.
    let count = |line: &str| {
        if let Some(Marker::Done(cell)) = Marker::parse(line) {
            progress.cell_finished(&cell);
        }
    };
    let child = Child {
        name: "the soft-AES child sweep",
        command,
        exit_code: ExitCodeFrom::Status,
        report: SOFT_REPORT,
        output: Output::Lines(&count),
        timeout: None,
    };
    // The child writes what it measured also when a cell failed or it was interrupted.
    match child.run::<MatrixReport>(&dir, cancel).await.report() {
        Ok(child) => child.rows,
        Err(e) => fail(e.to_string()),
    }
}

/// With `--vm`, the kernel rows from ONE VM boot per kernel into `report`; a refused row
/// per backend where the sweep was interrupted or a VM gave nothing back. With several
/// kernels each kernel's rows are keyed `vm RELEASE` (the guest's uname -r), so their
/// labels name it and `compare --kernels` can pair them. Returns how many kernels' VMs
/// gave nothing back (their rows say why): the environment the user asked for is missing.
pub(super) async fn vm_rows(
    args: &SweepPlan,
    report: &mut MatrixReport,
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> usize {
    let mut failed = 0;
    let kernels = GuestKernel::all(args);
    let stock_kernels = kernels
        .iter()
        .filter(|k| matches!(k, GuestKernel::Stock(_)))
        .count();
    let uml_kernels = kernels.len() - stock_kernels;
    for kernel in kernels {
        // Several kernels of one kind: each one's rows are keyed with its release.
        let several = match kernel {
            GuestKernel::Stock(_) => stock_kernels > 1,
            GuestKernel::Uml(_) => uml_kernels > 1,
        };
        let environment = match (&kernel, several) {
            (GuestKernel::Stock(Some(k)), true) => model::matrix::vm_environment(k),
            (GuestKernel::Stock(_), _) => VM.to_string(),
            (GuestKernel::Uml(release), true) => {
                let release = release
                    .clone()
                    .or_else(|| crate::uml::UmlKernel::installed().map(|k| k.release));
                model::matrix::uml_environment(&release.unwrap_or_default())
            }
            (GuestKernel::Uml(_), false) => UML.to_string(),
        };
        let refused = |reason: &str| -> Vec<Row> {
            vm_backends(args)
                .into_iter()
                .map(|b| {
                    let reason = kernel.refusal(b).unwrap_or(reason);
                    refused_row(
                        RowKey::new(b, RowVariant::Default, &environment),
                        &args.suites,
                        reason,
                    )
                })
                .collect()
        };
        if cancel.is_cancelled() {
            report.rows.extend(refused("interrupted"));
            continue;
        }
        progress.vm_started();
        match vm_sweep(args, &kernel, several, cancel, progress).await {
            Ok(guest) => {
                report.merge(guest);
                // What this guest cannot carry still has its row, saying why.
                let missing = vm_backends(args).into_iter().filter_map(|b| {
                    let key = RowKey::new(b, RowVariant::Default, &environment);
                    kernel.refusal(b).map(|why| refused_row(key, &args.suites, why))
                });
                report.rows.extend(missing);
            }
            Err(e) => {
                failed += 1;
                let said = format!("the VM sweep failed: {e:#}");
                match said.split_once('\n') {
                    // The guest's last lines (all a hung guest leaves) are said once, in the
                    // notes; each cell says the first line.
                    Some((first, _)) => {
                        let first = first.replace(LAST_LINES_FOLLOW, " (its last lines are in the notes)");
                        report.rows.extend(refused(&first));
                        report.notes.push(said);
                    }
                    None => report.rows.extend(refused(&said)),
                }
            }
        }
    }
    failed
}

/// The rows that need the stock kernel (ESP, WireGuard's module): what the VM runs.
pub(super) fn vm_backends(args: &SweepPlan) -> Vec<Backend> {
    Backend::ALL
        .into_iter()
        .filter(|b| b.describe().kernel.is_some() && args.has(*b))
        .collect()
}

/// The cells each guest sweep is expected to hold, in boot order, before it counts its own
/// (it may have more xfrm rows: one per `cbc(aes)` driver it finds): its plain baseline and
/// each kernel row's suites, per link condition, workload and stream count.
pub(super) fn vm_cells(args: &SweepPlan) -> Vec<u64> {
    GuestKernel::all(args)
        .iter()
        .map(|kernel| {
            let guest = vm_plan(args, kernel);
            (guest.suites.len() as u64 * guest.rows_per_suite() + 1) * guest.runs_per_row()
        })
        .collect()
}

/// The file a guest sweep appends its markers to, in the directory shared with the host.
const CELLS_FILE: &str = "cells";

/// What the guest appended to its markers file since the last look: each marker goes to
/// `progress` (a cell's label then names the VM), a partial line waits for its end.
struct CellsTail {
    path: std::path::PathBuf,
    /// `vm` or `uml`, as the rows' labels will say.
    environment: &'static str,
    read: u64,
    partial: String,
}

impl CellsTail {
    fn relay(&mut self, progress: &dyn Progress) {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return; // The guest has not started its sweep yet.
        };
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(self.read)).is_err() || file.read_to_end(&mut bytes).is_err() {
            return;
        }
        self.read += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            match Marker::parse(&line) {
                Some(Marker::Cells(n)) => progress.phase_cells(n),
                Some(Marker::Done(mut cell)) => {
                    cell.label = vm_label(self.environment, &cell.label);
                    progress.cell_finished(&cell);
                }
                None => {}
            }
        }
    }
}

/// A guest cell's label as the host's table will show it: its row marked `(vm)` or `(uml)`.
fn vm_label(environment: &str, guest: &str) -> String {
    format!("({environment}) {guest}")
}

/// How often the host looks at the guest's markers file.
const CELLS_POLL: Duration = Duration::from_millis(500);

/// The guest's sweep, its rows and environment keyed [`VM`] or [`UML`], with the guest's
/// kernel release (`vm RELEASE`) where the sweep boots `several` kernels of that kind;
/// `progress` gets the guest's cells as it finishes them.
async fn vm_sweep(
    args: &SweepPlan,
    kernel: &GuestKernel,
    several: bool,
    cancel: &CancellationToken,
    progress: &dyn Progress,
) -> LabResult<MatrixReport> {
    let outdir = vm::guest_dir("ipsec-lab-matrix-vm-")?;
    let guest_plan = vm_plan(args, kernel);
    let plan_file = crate::child::write_plan(&outdir, &guest_plan)?;
    let backends: Vec<&str> = guest_plan.backends.iter().map(|b| b.name()).collect();
    // Its stdout goes nowhere: it reports its cells in a shared file.
    let cells_file = outdir.join(CELLS_FILE);
    let guest_args = vm_sweep_args(&plan_file, &cells_file);
    let (mut child, booted, environment) = match kernel {
        GuestKernel::Stock(kernel_arg) => {
            let image = vm::resolve_kernel(kernel_arg.as_deref())?;
            let accel = vm::detect_accel(&image);
            let modules = format!("{} crypto_user", vm::GUEST_MODULES);
            let mut child = vm::guest_child("the VM", &image, accel, &outdir, &modules, &guest_args)?;
            // The kernel's console joins the hidden output, so a guest that dies before its
            // report (vng's 255 with nothing printed, once in a CI sweep) says why.
            child.command.arg("--verbose");
            let booted = format!("{} ({})", image.display(), accel.label());
            progress.note(&format!(
                "kernel rows ({}) in a VM booting {booted}; TCG boots take about half a minute",
                backends.join(", "),
            ));
            (child, booted, VM)
        }
        GuestKernel::Uml(release) => {
            let uml = crate::uml::UmlKernel::require(release.as_deref())?;
            let booted = format!(
                "user-mode Linux {} (native speed, one CPU, generic C crypto)",
                uml.release
            );
            let mut guest = crate::uml::Guest::of_this_binary(uml, outdir.path(), &guest_args)?;
            // A second cbc(aes) driver, so the driver rows compare the two UML has.
            guest.extra_modules.push("aes_ti");
            let child = guest.child("user-mode Linux")?;
            progress.note(&format!("kernel rows ({}) in {booted}", backends.join(", ")));
            (child, booted, UML)
        }
    };
    // The guest's console stays quiet here (the sweep's own progress goes on meanwhile).
    child.output = Output::Hidden;
    // Boot, plus each cell's transfers at a few MB/s under TCG, with a wide margin.
    let rows_per_suite = guest_plan.rows_per_suite();
    let conditions = guest_plan.netem.len().max(1) as u64;
    let row_cells = guest_plan.suites.len() as u64 * (rows_per_suite + 1) + 1;
    let tcp_runs = conditions * guest_plan.parallel.len() as u64;
    let cells = row_cells * u64::from(args.repeat) * tcp_runs;
    let bytes = args.vm_bytes;
    let udp_cells = row_cells * conditions * guest_plan.packet_sizes.iter().flatten().count() as u64;
    child.timeout = Some(
        VM_TIMEOUT_BASE
            + Duration::from_secs(cells * (10 + bytes.0 / 500_000))
            + udp_cell_time(&guest_plan) * udp_cells as u32,
    );
    let mut tail = CellsTail {
        path: cells_file,
        environment,
        read: 0,
        partial: String::new(),
    };
    let run = child.run::<MatrixReport>(&outdir, cancel);
    tokio::pin!(run);
    let finished = loop {
        // The guest's markers as it writes them, while waiting for it to end.
        tokio::select! {
            finished = &mut run => break finished,
            () = tokio::time::sleep(CELLS_POLL) => tail.relay(progress),
        }
    };
    tail.relay(progress);
    let elapsed = finished.elapsed;
    let mut guest = finished.report()?;
    let environment = match guest.environments.get(HOST) {
        Some(env) if several && environment == VM => model::matrix::vm_environment(&env.kernel_release),
        Some(env) if several => model::matrix::uml_environment(&env.kernel_release),
        _ => environment.to_string(),
    };
    for row in &mut guest.rows {
        row.key.environment = environment.clone();
    }
    if let Some(env) = guest.environments.remove(HOST) {
        guest.environments.insert(environment.clone(), env);
    }
    guest.notes.retain(|n| !n.starts_with("payload seed"));
    guest.notes.push(format!(
        "({environment}) rows: one boot of {booted}; boot, sweep and shutdown took {:.0} s",
        elapsed.as_secs_f64()
    ));
    Ok(guest)
}

/// The longest a UDP cell of `plan` takes, with a margin: its trials, or with `--find-ndr`
/// a whole search per tolerance (at most 40 trials each, the final ones full length) and
/// the bare link's before it, plus the latency phases at shares of the rate found.
fn udp_cell_time(plan: &SweepPlan) -> Duration {
    let trial = plan.trial_seconds + 1.0;
    let seconds = match &plan.find_ndr {
        None => trial * f64::from(plan.repeat) + 2.0,
        Some(tolerances) => {
            let search = tolerances.len().max(2) as f64 * (40.0 * 0.5 + 4.0 * trial);
            2.0 * search + 2.0 * trial
        }
    };
    Duration::from_secs_f64(seconds)
}

/// The guest sweep's command line: its plan file, its cells file; [`vm::guest_child`]
/// adds its `--json`.
fn vm_sweep_args(plan_file: &Path, cells_file: &Path) -> Vec<String> {
    vec![
        "matrix".into(),
        "--plan-file".into(),
        plan_file.display().to_string(),
        "--no-progress".into(),
        "--report-cells-file".into(),
        cells_file.display().to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::tests::plan;
    use super::*;
    use model::ByteSize;

    /// What a watcher was told, in order.
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<String>>);

    impl Progress for Recorder {
        fn phase_cells(&self, cells: u64) {
            self.0.lock().unwrap().push(format!("cells {cells}"));
        }
        fn cell_finished(&self, cell: &crate::progress::CellDone) {
            self.0.lock().unwrap().push(cell.line());
        }
    }

    #[test]
    fn the_guests_markers_reach_the_watcher_as_they_are_written() {
        let dir = owner::PrivateDir::new("ipl-cells-test-").unwrap();
        let path = dir.join(CELLS_FILE);
        let mut tail = CellsTail {
            path: path.clone(),
            environment: VM,
            read: 0,
            partial: String::new(),
        };
        let seen = Recorder::default();
        // Before the guest's sweep starts there is no file: nothing, and no error.
        tail.relay(&seen);
        let done = Marker::Done(crate::progress::CellDone {
            label: "xfrm AES-128-GCM".into(),
            mb_per_s: Some(9.5),
            elapsed_s: 2.0,
        })
        .line();
        let (head, rest) = done.split_at(20);
        std::fs::write(&path, format!("{}\n{head}", Marker::Cells(3).line())).unwrap();
        tail.relay(&seen);
        assert_eq!(*seen.0.lock().unwrap(), ["cells 3"]);
        // The rest of the line arrives later: the cell counts once, labelled as the VM's.
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, format!("{rest}\nnot a marker\n").as_bytes()).unwrap();
        tail.relay(&seen);
        tail.relay(&seen);
        assert_eq!(
            *seen.0.lock().unwrap(),
            ["cells 3", "(vm) xfrm AES-128-GCM: 9.5 MB/s (2.0 s)"]
        );
    }

    #[test]
    fn the_vm_phase_expects_its_baseline_and_each_kernel_rows_suites() {
        let one = SweepPlan {
            suites: vec![model::CipherSuite::ChaCha20Poly1305],
            backends: vec![Backend::Xfrm],
            ..plan()
        };
        assert_eq!(vm_cells(&one), [2]);
        let a = SweepPlan {
            threads: vec![1, 2],
            parallel: vec![2],
            pcrypt: true,
            ..plan()
        }
        .validate()
        .unwrap();
        // xfrm, strongswan, wireguard, openvpn-dco, pcrypt and xfrm x2 SAs rows, each over 7
        // suites.
        assert_eq!(vm_cells(&a), [7 * 6 + 1]);
        // User-mode Linux: one CPU, no WireGuard, no ovpn; the stock kernel after it has them.
        let both = SweepPlan {
            vm: Some("uml,auto".into()),
            ..a
        };
        assert_eq!(vm_cells(&both), [7 * 2 + 1, 7 * 6 + 1]);
    }

    #[test]
    fn the_vm_sweep_gets_the_counts_and_the_pcrypt_row() {
        let a = plan().validate().unwrap();
        let guest = vm_plan(&a, &GuestKernel::Stock(None));
        assert_eq!((guest.threads.as_slice(), guest.pcrypt), (&[1][..], false));
        let a = SweepPlan {
            threads: vec![2, 1],
            parallel: vec![2],
            pcrypt: true,
            per_cpu_sa: true,
            encap: Some(model::Encap::EspInUdp { port: 4600 }),
            ..plan()
        }
        .validate()
        .unwrap();
        let guest = vm_plan(&a, &GuestKernel::Stock(None));
        assert_eq!(guest.threads, [1, 2]);
        assert!(guest.pcrypt && guest.per_cpu_sa);
        assert_eq!(guest.encap, Some(model::Encap::EspInUdp { port: 4600 }));
        // Backends, ESP in UDP, pcrypt, per-CPU SAs of xfrm and of strongswan, x2 SAs.
        assert!(guest.backends.contains(&Backend::Strongswan));
        assert_eq!(guest.rows_per_suite(), guest.backends.len() as u64 + 5);
        // User-mode Linux (one CPU) keeps the per-CPU row: 7.x runs it, 6.x says why not.
        assert!(vm_plan(&a, &GuestKernel::Uml(None)).per_cpu_sa);
    }

    /// `--vm auto` without KVM: UML for what it carries, the emulated stock kernel for the
    /// rest; with KVM (or without UML) the stock kernel alone. `--vm` names its kernels.
    #[test]
    fn vm_auto_takes_user_mode_linux_and_the_stock_kernel_where_kvm_cannot_boot() {
        // matrix's default backends: none needs more of the kernel than the stock one has.
        let sweep = |vm: &str| SweepPlan {
            vm: Some(vm.into()),
            backends: vec![
                Backend::Plain,
                Backend::Xfrm,
                Backend::Userspace,
                Backend::Openvpn,
                Backend::Strongswan,
            ],
            ..plan()
        };
        // What detect_accel decides, without a probe boot.
        std::env::set_var("IPSEC_LAB_VM_ACCEL", "tcg");
        let uml_here = crate::uml::UmlKernel::installed().is_some() && vm::resolve_kernel(None).is_ok();
        let want = match uml_here {
            true => vec![GuestKernel::Uml(None), GuestKernel::Stock(None)],
            false => vec![GuestKernel::Stock(None)],
        };
        assert_eq!(GuestKernel::all(&sweep("auto")), want);
        std::env::set_var("IPSEC_LAB_VM_ACCEL", "kvm");
        assert_eq!(GuestKernel::all(&sweep("auto")), [GuestKernel::Stock(None)]);
        // Rows the stock kernel may lack: the VM boots the newest kernel here that has them
        // (sid's 7.2 after lab/setup.sh --second-kernel), as `run --vm auto` does.
        let per_cpu = SweepPlan {
            per_cpu_sa: true,
            ..sweep("auto")
        };
        let newest = vm::newest_release_for(false, true);
        assert!(newest
            .as_deref()
            .is_none_or(crate::backend::xfrm::has_per_cpu_sas));
        assert_eq!(GuestKernel::all(&per_cpu), [GuestKernel::Stock(newest)]);
        let dco = SweepPlan {
            backends: vec![Backend::Plain, Backend::OpenvpnDco],
            ..sweep("auto")
        };
        assert_eq!(
            GuestKernel::all(&dco),
            [GuestKernel::Stock(vm::newest_release_for(true, false))]
        );
        std::env::remove_var("IPSEC_LAB_VM_ACCEL");
        assert_eq!(GuestKernel::all(&sweep("")), [GuestKernel::Stock(None)]);
        assert_eq!(
            GuestKernel::all(&sweep("uml:6.12.113,auto")),
            [
                GuestKernel::Uml(Some("6.12.113".into())),
                GuestKernel::Stock(None)
            ]
        );
    }

    #[test]
    fn user_mode_linux_sweeps_what_one_cpu_without_wireguard_can() {
        let a = SweepPlan {
            threads: vec![1, 2],
            parallel: vec![2],
            pcrypt: true,
            vm: Some("uml".into()),
            ..plan()
        }
        .validate()
        .unwrap();
        assert_eq!(GuestKernel::all(&a), [GuestKernel::Uml(None)]);
        let guest = vm_plan(&a, &GuestKernel::Uml(None));
        assert_eq!(guest.backends, [Backend::Xfrm, Backend::Strongswan]);
        assert_eq!((guest.threads.as_slice(), guest.pcrypt), (&[1][..], false));
        let why = GuestKernel::Uml(None).refusal(Backend::Wireguard).unwrap();
        assert!(
            why.contains("no WireGuard") && why.contains("--vm uml,auto"),
            "{why}"
        );
        assert_eq!(GuestKernel::Stock(None).refusal(Backend::Wireguard), None);
    }

    #[test]
    fn the_vm_sweep_differs_in_its_backends_payload_and_vm_only() {
        let a = SweepPlan {
            vm: Some(String::new()),
            vm_bytes: ByteSize(2_000_000),
            netem: vec![None, Some("delay 20ms".parse().unwrap())],
            ..plan()
        }
        .validate()
        .unwrap();
        let guest = vm_plan(&a, &GuestKernel::Stock(None));
        assert_eq!(guest.backends, vm_backends(&a));
        assert!(guest.backends.contains(&Backend::Xfrm) && guest.backends.contains(&Backend::Strongswan));
        assert!(!guest.backends.contains(&Backend::Plain) && !guest.backends.contains(&Backend::Userspace));
        assert_eq!(guest.bytes, ByteSize(2_000_000));
        assert_eq!(guest.vm, None);
        // Its own baseline: the (vm) rows' "% of plain" is the guest's.
        assert!(guest.baseline);
        assert_eq!(
            SweepPlan {
                backends: a.backends.clone(),
                bytes: a.bytes,
                vm: a.vm.clone(),
                ..guest.clone()
            },
            a,
            "everything else is the parent's"
        );
        // It validates as the guest will validate it.
        assert_eq!(guest.clone().validate().unwrap(), guest);
    }

    #[test]
    fn the_soft_child_gets_the_thread_counts() {
        let a = SweepPlan {
            threads: vec![3, 1, 2, 3],
            ..plan()
        }
        .validate()
        .unwrap();
        assert_eq!(soft_plan(&a).threads, [1, 2, 3]);
    }

    #[test]
    fn child_sweeps_get_the_same_sizes() {
        let a = plan().validate().unwrap();
        for c in [
            soft_plan(&a),
            vm_plan(&a, &GuestKernel::Stock(None)),
            vm_plan(&a, &GuestKernel::Uml(None)),
        ] {
            assert_eq!((c.bytes, c.repeat), (ByteSize(4_000_000), 2));
            assert_eq!(c.suites, a.suites);
            // AES-128-CBC, AES-192-CBC, ... as the parent's columns.
            assert!(c.suites.starts_with(&model::CipherSuite::classic_six()[..2]));
            assert!(c.ceiling);
        }
        let off = SweepPlan {
            ceiling: false,
            ..plan()
        };
        assert!(!soft_plan(&off).ceiling && !vm_plan(&off, &GuestKernel::Uml(None)).ceiling);
    }

    #[test]
    fn the_soft_child_sweeps_only_soft_rows_and_reports_its_cells() {
        let a = SweepPlan {
            vm: Some(String::new()),
            crypto: vec![CryptoChoice::Auto, CryptoChoice::Soft],
            encap: Some(model::Encap::EspInUdp { port: 4500 }),
            pcrypt: true,
            ..plan()
        }
        .validate()
        .unwrap();
        let child = soft_plan(&a);
        assert_eq!(child.backends, [Backend::Userspace]);
        assert_eq!(child.crypto, [CryptoChoice::Soft]);
        assert!(!child.baseline);
        assert_eq!(child.vm, None);
        assert_eq!((child.encap, child.pcrypt), (None, false));
        assert_eq!(
            SweepPlan {
                backends: a.backends.clone(),
                crypto: a.crypto.clone(),
                baseline: a.baseline,
                vm: a.vm.clone(),
                encap: a.encap,
                pcrypt: a.pcrypt,
                ..child.clone()
            },
            a,
            "everything else is the parent's"
        );
        assert_eq!(child.clone().validate().unwrap(), child);
        let c = soft_sweep(
            Command::new("ipsec-lab"),
            Path::new("/tmp/d/plan.json"),
            Path::new("/tmp/d/matrix.json"),
        );
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let joined = args.join(" ");
        assert!(args.starts_with(&["matrix".to_string()]), "{joined}");
        assert_eq!(
            joined,
            "matrix --plan-file /tmp/d/plan.json --no-progress --report-cells --json /tmp/d/matrix.json"
        );
        assert_eq!(
            args.iter().filter(|a| *a == "--no-progress").count(),
            1,
            "{joined}"
        );
    }

    #[test]
    fn the_guest_sweep_reads_its_plan_and_reports_cells_in_the_shared_directory() {
        let args = vm_sweep_args(Path::new("/tmp/o/plan.json"), Path::new("/tmp/o/cells"));
        assert_eq!(
            args.join(" "),
            "matrix --plan-file /tmp/o/plan.json --no-progress --report-cells-file /tmp/o/cells"
        );
    }

    #[test]
    fn a_childs_plan_file_reads_back_as_the_plan_the_parent_wrote() {
        let a = SweepPlan {
            threads: vec![1, 2],
            parallel: vec![2],
            pcrypt: true,
            encap: Some(model::Encap::EspInUdp { port: 4600 }),
            family: model::Family::Ipv4,
            netem: vec![None, Some("delay 20ms loss 0.1%".parse().unwrap())],
            vm: Some("/boot/vmlinuz-x".into()),
            seed: 0x18ec_d910_7f28_b6c7,
            started_unix_s: 1_700_000_000,
            ..plan()
        };
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<SweepPlan>(&json).unwrap(), a);
        let dir = owner::PrivateDir::new("ipl-sweep-plan-test-").unwrap();
        for child in [
            soft_plan(&a),
            vm_plan(&a, &GuestKernel::Stock(None)),
            vm_plan(&a, &GuestKernel::Uml(None)),
        ] {
            let path = crate::child::write_plan(&dir, &child).unwrap();
            assert_eq!(crate::child::read_plan::<SweepPlan>(&path).unwrap(), child);
        }
        // What `matrix --plan-file` reads: checked again; a run's plan is no sweep's.
        let child = vm_plan(&a, &GuestKernel::Stock(None));
        let path = crate::child::write_plan(&dir, &child).unwrap();
        assert_eq!(SweepPlan::read(&path).unwrap(), child.validate().unwrap());
        let run = model::RunRequest::default().validate().unwrap();
        let path = crate::child::write_plan(&dir, &run).unwrap();
        assert_eq!(
            SweepPlan::read(&path).unwrap_err().kind,
            crate::error::ExitKind::Usage
        );
    }
}
