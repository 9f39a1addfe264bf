//! `ipsec-lab speed`: the crypto microbenchmark of the `speed` crate, behind the binary's
//! exit codes (2 for bad input, 1 for a failed run): the command line ([`args`]) becomes
//! the crate's validated plan, the crate measures, and [`print`] shows the progress and the
//! report. With `--vm [KERNEL]` the kernel rows are timed in a virtme-ng guest booting a
//! stock kernel (one boot, [`lab::vm`]) and merged into this host's table and JSON,
//! labelled with the guest's condition.

mod args;
mod print;

pub use args::SpeedArgs;

use lab::vm;
use lab::LabResult;

pub fn run(args: SpeedArgs) -> LabResult<()> {
    let plan = args.request().validate().map_err(speed::SpeedError::from)?;
    let json = args.json.as_deref();
    if let Some(json) = json {
        crate::output::check_writable(json, "--json")?;
    }
    let guest = match &plan.vm {
        Some(kernel_arg) if !plan.child => Some(kernel_rows_in_vm(&plan, kernel_arg.as_deref())?),
        _ => None,
    };
    let report = speed::measure_with(&plan, guest, print::progress(&plan).as_mut())?;
    print::emit(&report, args.units(), json, plan.child)
}

/// One boot: the guest runs `ipsec-lab speed --crypto kernel` for the plan's suites and
/// sizes and writes its report, which carries the guest's environment and VM label.
fn kernel_rows_in_vm(plan: &speed::SpeedPlan, kernel_arg: Option<&str>) -> LabResult<speed::SpeedReport> {
    let kernel = vm::resolve_kernel(kernel_arg)?;
    let accel = vm::detect_accel(&kernel);
    let child_args = plan.child_args(speed::SpeedImpl::Kernel);
    let run = vm::exec_in_guest::<speed::SpeedReport>(&kernel, accel, speed::kernel::MODULES, &child_args)?;
    eprintln!(
        "ipsec-lab: kernel rows timed in a VM booting {} ({}); boot, run and shutdown took {:.1} s",
        kernel.display(),
        accel.label(),
        run.elapsed.as_secs_f64()
    );
    Ok(run.report)
}
