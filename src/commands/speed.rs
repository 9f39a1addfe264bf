//! `ipsec-lab speed`: the crypto microbenchmark of the `speed` crate, behind the binary's
//! exit codes (2 for bad input, 1 for a failed run). With `--vm [KERNEL]` the kernel rows
//! are timed in a virtme-ng guest booting a stock kernel (one boot, [`crate::vm`]) and
//! merged into this host's table and JSON, labelled with the guest's condition.

use lab::vm;
use lab::{LabError, LabResult};

pub fn run(args: speed::SpeedArgs) -> LabResult<()> {
    let plan = args
        .validate()
        .map_err(|e| LabError::from(speed::SpeedError::from(e)))?;
    if let Some(json) = &plan.json {
        crate::output::check_writable(std::path::Path::new(json), "--json")?;
    }
    let guest = match &plan.vm {
        Some(kernel_arg) if !plan.child => Some(kernel_rows_in_vm(&plan, kernel_arg.as_deref())?),
        _ => None,
    };
    speed::run_plan(&plan, guest)
        .map(|_report| ())
        .map_err(LabError::from)
}

/// One boot: the guest runs `ipsec-lab speed --crypto kernel` for the plan's suites and
/// sizes and writes its report, which carries the guest's environment and VM label.
fn kernel_rows_in_vm(plan: &speed::SpeedPlan, kernel_arg: Option<&str>) -> LabResult<speed::SpeedReport> {
    let kernel = vm::resolve_kernel(kernel_arg)?;
    let accel = vm::detect_accel(&kernel);
    let run = vm::exec_in_guest::<speed::SpeedReport>(
        &kernel,
        accel,
        speed::kernel::MODULES,
        &plan.kernel_child_args(),
    )?;
    eprintln!(
        "ipsec-lab: kernel rows timed in a VM booting {} ({}); boot, run and shutdown took {:.1} s",
        kernel.display(),
        accel.label(),
        run.elapsed.as_secs_f64()
    );
    Ok(run.report)
}
