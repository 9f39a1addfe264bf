//! `ipsec-lab speed`'s rows that are timed elsewhere, through the one child runner: the
//! soft-AES rows in a child of this binary started with hardware AES masked, the kernel
//! rows in a VM guest booting a stock kernel. Measuring itself is crate `speed`'s.

use speed::{SpeedImpl, SpeedPlan, SpeedProgress, SpeedReport};

use crate::child::{Child, ExitCodeFrom, Output};
use crate::error::{LabError, LabResult};
use crate::vm;

/// The soft child's report file in its private directory.
const SOFT_REPORT: &str = "speed.json";

/// Measures what `plan` asks for; with `--vm` the kernel rows come from one VM boot.
pub fn measure(plan: &SpeedPlan, progress: &mut dyn SpeedProgress) -> LabResult<SpeedReport> {
    let guest = match &plan.vm {
        Some(kernel_arg) if !plan.child => Some(kernel_rows_in_vm(plan, kernel_arg.as_deref())?),
        _ => None,
    };
    speed::measure_with(plan, guest, &mut soft_rows, progress)
}

/// The soft rows, timed in a child started with hardware AES masked.
fn soft_rows(plan: &SpeedPlan) -> LabResult<SpeedReport> {
    let dir = owner::PrivateDir::new("ipsec-lab-soft-")?;
    let mut command = crypto::soft::command().map_err(LabError::capability)?;
    command
        .args(plan.child_args(SpeedImpl::Crypto(crypto::CryptoChoice::Soft)))
        .arg("--json")
        .arg(dir.join(SOFT_REPORT));
    let child = Child {
        name: "the soft-AES child",
        command,
        exit_code: ExitCodeFrom::Status,
        report: SOFT_REPORT,
        // Its progress lines are on its stderr, which is ours; its stdout carries nothing.
        output: Output::Lines(&|_| {}),
        timeout: None,
    };
    let finished = crate::child::run_blocking::<SpeedReport>(child, &dir)?;
    finished.succeeded()
}

/// One boot: the guest runs `ipsec-lab speed --crypto kernel` for the plan's suites and
/// sizes and writes its report, which carries the guest's environment and VM label.
fn kernel_rows_in_vm(plan: &SpeedPlan, kernel_arg: Option<&str>) -> LabResult<SpeedReport> {
    let kernel = vm::resolve_kernel(kernel_arg)?;
    let accel = vm::detect_accel(&kernel);
    let child_args = plan.child_args(SpeedImpl::Kernel);
    let run = vm::exec_in_guest::<SpeedReport>(&kernel, accel, speed::kernel::MODULES, &child_args)?;
    eprintln!(
        "ipsec-lab: kernel rows timed in a VM booting {} ({}); boot, run and shutdown took {:.1} s",
        kernel.display(),
        accel.label(),
        run.elapsed.as_secs_f64()
    );
    Ok(run.report)
}
