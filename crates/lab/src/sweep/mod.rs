//! The sweep behind `ipsec-lab matrix`: every backend × every cipher configuration, on one
//! lab topology, into one [`MatrixReport`].
//!
//! Rows and where they run:
//! * `plain (line rate)`: one baseline per environment, measured first; every other cell
//!   is also given as % of it, and (unless `--no-ceiling`) as % of its own crypto ceiling,
//!   timed right after the cell where the cell ran ([`crate::ceiling`]).
//! * `xfrm`: on this kernel when it has ESP, once per `cbc(aes)` driver when crypto_user
//!   (NETLINK_CRYPTO) lets the sweep raise one driver above the others for the row
//!   (restored afterwards by a guard, also when the row fails); with `--vm`, in ONE
//!   virtme-ng boot that runs `ipsec-lab matrix --backends xfrm` in the guest, whose rows
//!   come back labelled `(vm)`. Without ESP and without `--vm` the row says why it did not run.
//! * `userspace [CHOICE]`: per `--crypto` choice; `soft` needs hardware AES masked from
//!   process start, so those rows run in a child `ipsec-lab matrix` started with the mask.
//! * `openvpn`: real OpenVPN, where the binary is installed.
//! * `strongswan`: kernel IPsec negotiated by charon, where the kernel has ESP; with `--vm`
//!   in the same VM boot as the xfrm rows.
//!
//! xfrm cells get a fresh topology each (the backend adds inner addresses to the veths);
//! the others share one. A cell that cannot run, fails, or is not reached before Ctrl-C is
//! recorded as "not run" with the reason, never as zero; Ctrl-C still writes the JSON.
//!
//! # Layout
//! * `plan`: the validated sweep and each cell's run plan;
//! * here: the sweep's order (rows on this kernel on one shared topology,
//!   then the soft-AES child, then the VM);
//! * `rows`: which rows a sweep has, running a row and a cell, a run's report as a cell;
//! * `drivers`: choosing the `cbc(aes)` driver of an xfrm row and putting it back;
//! * `children`: the soft-AES child sweep and the VM sweep, through [`crate::child`].

mod children;
mod drivers;
mod plan;
mod rows;

pub use plan::{SweepPlan, DEFAULT_CELL_SECONDS, DEFAULT_TRIAL_SECONDS, MAX_TRIAL_SECONDS};

use model::matrix::{MatrixReport, HOST};
use model::setup_rate::{SetupBackend, SetupRateCell, SetupRatePlan, SetupRateRequest, TableSize};
use model::{Backend, Environment};
use netns::{Topology, TopologySpec};
use traffic::CancellationToken;

use crate::error::LabResult;
use crate::progress::{Progress, SweepCells};
use rows::PlannedRow;

/// Runs the sweep; SIGINT and SIGTERM end it early. The report holds every cell measured
/// before an error or an interruption (then `interrupted`), in table order, with "% of
/// plain" computed; the result says whether the sweep itself failed.
pub async fn run(plan: &SweepPlan, progress: &dyn Progress) -> (MatrixReport, LabResult<()>) {
    let mut report = MatrixReport::new(plan.suites.clone(), plan.bytes, plan.repeat, plan.started_unix_s);
    report.family = plan.family;
    report.notes.push(format!("payload seed {:#x}", plan.seed));
    match plan.parallel.as_slice() {
        [1] => {}
        [n] => report.notes.push(format!("{n} TCP streams per transfer")),
        counts => report.notes.push(format!(
            "TCP rows at {} streams per transfer, a row each (-P in the label)",
            counts.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
        )),
    }
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
    // Then each link condition's rows together, in --netem order, and within a condition
    // each workload's (TCP, then each packet size), so a plain row heads its tunnels'.
    report.rows.sort_by_key(|r| {
        let backend = Backend::ALL.iter().position(|b| *b == r.key.backend);
        let condition = plan
            .netem
            .iter()
            .position(|c| c.as_ref().map(|n| n.to_string()) == r.key.netem);
        let workload = plan.packet_sizes.iter().position(|s| *s == r.key.packet_size);
        (r.key.environment != HOST, condition, workload, backend)
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
    report.environments.insert(HOST.into(), Environment::detect());
    if args.has(Backend::Xfrm) {
        // Before any priority is read: a killed matrix may have left one raised, and it
        // must not be taken for the original.
        report.notes.extend(crate::clean::restore_dead_priorities());
    }
    let rows = rows::plan_rows(args).await;
    let soft_here = crypto::soft::active();
    let (local, soft_child): (Vec<PlannedRow>, Vec<PlannedRow>) =
        rows.into_iter().partition(|r| !r.is_soft() || soft_here);
    let host_cells: u64 = local
        .iter()
        .chain(&soft_child)
        .map(|r| r.cells(&args.suites))
        .sum::<usize>() as u64
        * args.runs_per_row();
    let runs_vm = args.vm.is_some() && !children::vm_backends(args).is_empty();
    let vms = match runs_vm {
        true => children::vm_cells(args),
        false => vec![],
    };
    progress.sweep_started(&SweepCells {
        host: host_cells,
        vms,
    });
    let spec = TopologySpec {
        run_id: netns::new_run_id(),
        mtu: args.mtu,
        addressing: args.family.addressing(),
    };
    // One topology for the sweep; its guard removes it on every way out of this function.
    let topology = Topology::create(&spec).await?;
    let pins_drivers = local.iter().any(PlannedRow::pins_driver);
    let priorities_before = drivers::priorities();
    for condition in &args.netem {
        for packet_size in &args.packet_sizes {
            for row in &local {
                // A row's stream counts one after the other: the table sorts rows stably, so
                // each row's scaling curve stays together.
                for streams in args.stream_counts(*packet_size) {
                    let dimensions = rows::Dimensions {
                        netem: condition.as_ref(),
                        packet_size: *packet_size,
                        streams,
                    };
                    let ran = rows::run_row(args, row, dimensions, &topology, cancel, progress).await;
                    report.rows.push(ran);
                }
            }
        }
    }
    topology.destroy()?;
    if pins_drivers {
        // Evidence that the driver rows left the kernel as they found it.
        let after = drivers::priorities();
        report
            .notes
            .push(drivers::priorities_note(&priorities_before, &after));
    }
    if !soft_child.is_empty() {
        let rows = children::soft_child_rows(args, &soft_child, cancel, progress).await;
        report.rows.extend(rows);
    }
    if let Some(size) = args.setup_rate {
        report.setup_rates = setup_rates(args, size, cancel).await;
    }
    if runs_vm {
        let failed = children::vm_rows(args, report, cancel, progress).await;
        progress.sweep_finished();
        if failed > 0 && !cancel.is_cancelled() {
            // The rows say why; the exit code says that the kernel rows asked for are missing.
            return Err(crate::error::LabError::failed(anyhow::anyhow!(
                "{failed} VM sweep(s) gave no kernel rows (the table says why)"
            )));
        }
    } else {
        progress.sweep_finished();
    }
    Ok(())
}

/// `--setup-rate`: each backend's rates at `size`, one after the other on a thread of their
/// own (xfrm boots user-mode Linux; the others start their daemons in namespaces of their
/// own), while this runtime still hears Ctrl-C. A backend that cannot measure says why.
async fn setup_rates(args: &SweepPlan, size: TableSize, cancel: &CancellationToken) -> Vec<SetupRateCell> {
    let mut cells = Vec::new();
    for backend in args.setup_rate_backends() {
        if cancel.is_cancelled() {
            cells.push(SetupRateCell::not_run(backend, size, "interrupted"));
            continue;
        }
        crate::say!("ipsec-lab: setup rate of {backend} at {size}");
        let plan = SetupRatePlan::validate(SetupRateRequest {
            backend,
            sizes: Some(vec![size]),
            ..Default::default()
        });
        let thread = std::thread::spawn(move || {
            let plan = plan.map_err(|e| crate::error::LabError::usage(anyhow::anyhow!(e)))?;
            match backend {
                SetupBackend::Xfrm => crate::setup_rate::measure(&plan, None),
                _ => crate::setup_rate::measure_on_host(&plan),
            }
        });
        while !thread.is_finished() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let measured = thread.join().unwrap_or_else(|_| {
            Err(crate::error::LabError::failed(anyhow::anyhow!(
                "the measuring thread panicked"
            )))
        });
        cells.push(match measured {
            Ok(report) => SetupRateCell::from_report(&report)
                .unwrap_or_else(|| SetupRateCell::not_run(backend, size, "it measured nothing")),
            Err(e) if e.is_interrupted() || cancel.is_cancelled() => {
                SetupRateCell::not_run(backend, size, "interrupted")
            }
            Err(e) => SetupRateCell::not_run(backend, size, format!("{e:#}")),
        });
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExitKind;
    use model::{ByteSize, CipherSuite, CryptoChoice};

    pub fn plan() -> SweepPlan {
        SweepPlan {
            backends: Backend::ALL.to_vec(),
            suites: vec![],
            crypto: vec![CryptoChoice::Auto],
            threads: vec![1],
            parallel: vec![1],
            bytes: ByteSize(4_000_000),
            vm_bytes: ByteSize(4_000_000),
            time_s: None,
            repeat: 2,
            mtu: 1500,
            port: 5201,
            vm: None,
            baseline: true,
            encap: None,
            pcrypt: false,
            per_cpu_sa: false,
            family: model::Family::Ipv4,
            netem: vec![],
            packet_sizes: vec![],
            trial_seconds: plan::DEFAULT_TRIAL_SECONDS,
            find_ndr: None,
            latency: false,
            rekey: None,
            seed: 1,
            setup_rate: None,
            ceiling: true,
            started_unix_s: 0,
        }
    }

    #[test]
    fn suites_default_to_the_classic_six_and_none_is_refused() {
        let mut expected = CipherSuite::classic_six();
        // The WireGuard rows' one cipher.
        expected.push(CipherSuite::ChaCha20Poly1305);
        assert_eq!(plan().validate().unwrap().suites, expected);
        let no_wireguard = SweepPlan {
            backends: vec![Backend::Xfrm, Backend::Userspace],
            ..plan()
        };
        assert_eq!(
            no_wireguard.validate().unwrap().suites,
            CipherSuite::classic_six()
        );
        let none = SweepPlan {
            suites: vec![CipherSuite::None],
            ..plan()
        };
        assert_eq!(none.validate().unwrap_err().kind, ExitKind::Usage);
    }

    #[test]
    fn an_encap_row_needs_the_xfrm_backend() {
        let encap = Some(model::Encap::EspInUdp { port: 4500 });
        assert!(SweepPlan { encap, ..plan() }.validate().is_ok());
        let without_xfrm = SweepPlan {
            encap,
            backends: vec![Backend::Userspace],
            ..plan()
        };
        assert_eq!(without_xfrm.validate().unwrap_err().kind, ExitKind::Usage);
    }
}
