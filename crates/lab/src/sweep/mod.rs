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
//!
//! # Layout
//! * here: the plan, and the sweep's order (rows on this kernel on one shared topology,
//!   then the soft-AES child, then the VM);
//! * `rows`: which rows a sweep has, running a row and a cell, a run's report as a cell;
//! * `drivers`: choosing the `cbc(aes)` driver of an xfrm row and putting it back;
//! * `children`: the soft-AES child sweep and the VM sweep, through [`crate::child`].

mod children;
mod drivers;
mod rows;

use model::matrix::{MatrixReport, HOST};
use model::{Backend, ByteSize, CipherSuite, CryptoChoice, Environment, RunPlan, RunRequest};
use netns::{Topology, TopologySpec};
use traffic::CancellationToken;

use crate::error::{LabError, LabResult};
use crate::progress::Progress;
use crate::vm;
use rows::PlannedRow;

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
    let cells_total: usize = local
        .iter()
        .chain(&soft_child)
        .map(|r| r.cells(&args.suites))
        .sum();
    progress.sweep_started(cells_total as u64);
    let spec = TopologySpec {
        run_id: netns::new_run_id(),
        mtu: args.mtu,
        addressing: model::Addressing::default(),
    };
    // One topology for the sweep; its guard removes it on every way out of this function.
    let topology = Topology::create(&spec).await?;
    let pins_drivers = local.iter().any(PlannedRow::pins_driver);
    let priorities_before = drivers::priorities();
    for row in &local {
        report
            .rows
            .push(rows::run_row(args, row, &topology, cancel, progress).await);
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
    progress.sweep_finished();
    if args.vm.is_some() && args.has(Backend::Xfrm) {
        children::vm_rows(args, report, cancel).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExitKind;

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
}
