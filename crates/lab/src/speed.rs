//! `ipsec-lab speed`'s rows that are timed elsewhere, through the one child runner: the
//! soft-AES rows in a child of this binary started with hardware AES masked, the kernel
//! rows in a VM guest booting a stock kernel. Measuring itself is crate `speed`'s.

use speed::{SpeedImpl, SpeedPlan, SpeedProgress, SpeedReport};

use crate::child::{Child, ExitCodeFrom, Output};
use crate::error::{LabError, LabResult};
use crate::{uml, vm};

/// The soft child's report file in its private directory.
const SOFT_REPORT: &str = "speed.json";

/// Measures what `plan` asks for; with `--vm` the kernel rows come from one VM boot per
/// kernel.
pub fn measure(plan: &SpeedPlan, progress: &mut dyn SpeedProgress) -> LabResult<SpeedReport> {
    let guest = match &plan.vm {
        Some(kernel_arg) if !plan.child => Some(kernel_rows_in_vms(plan, kernel_arg.as_deref())?),
        _ => None,
    };
    speed::measure_with(plan, guest, &mut soft_rows, progress)
}

/// A kernel `speed --vm` boots for its kernel rows.
enum SpeedGuest {
    /// A stock kernel image under virtme-ng: the rows through AF_ALG.
    Vm(std::path::PathBuf),
    /// User-mode Linux: the rows from tcrypt (AF_ALG's system calls would be what is timed).
    Uml(uml::UmlKernel),
}

/// `--vm KERNEL[,KERNEL…]`: every kernel's rows, one boot each. With several kernels each
/// row is named after its guest's kernel (`kernel 6.12.95+deb12-amd64`), so one table puts
/// two kernels' drivers side by side; the first guest's environment describes the VM,
/// with every kernel's release.
fn kernel_rows_in_vms(plan: &SpeedPlan, kernel_arg: Option<&str>) -> LabResult<SpeedReport> {
    // Every kernel is found before the first boot: a misspelt second one changes nothing.
    let guests = vm::kernel_list(kernel_arg)
        .into_iter()
        .map(|k| match vm::uml_kernel(k.as_deref()) {
            Some(release) => uml::UmlKernel::require(release.as_deref()).map(SpeedGuest::Uml),
            None => vm::resolve_kernel(k.as_deref()).map(SpeedGuest::Vm),
        })
        .collect::<LabResult<Vec<_>>>()?;
    let several = guests.len() > 1;
    let mut merged: Option<SpeedReport> = None;
    let mut releases = Vec::new();
    for guest in &guests {
        let mut guest = match guest {
            SpeedGuest::Vm(image) => kernel_rows_in_vm(plan, image)?,
            SpeedGuest::Uml(kernel) => kernel_rows_in_uml(plan, kernel)?,
        };
        releases.push(guest.environment.kernel_release.clone());
        if several {
            let name = format!("kernel {}", guest.environment.kernel_release);
            guest
                .records
                .iter_mut()
                .for_each(|r| r.implementation = name.clone());
            guest
                .skipped
                .iter_mut()
                .for_each(|s| s.implementation = name.clone());
        }
        match &mut merged {
            Some(all) => {
                all.records.append(&mut guest.records);
                all.skipped.append(&mut guest.skipped);
            }
            None => merged = Some(guest),
        }
    }
    let mut merged = merged.expect("kernel_list gives at least one kernel");
    // The VM line then names every kernel its rows came from.
    merged.environment.kernel_release = releases.join(", ");
    Ok(merged)
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
fn kernel_rows_in_vm(plan: &SpeedPlan, kernel: &std::path::Path) -> LabResult<SpeedReport> {
    let accel = vm::detect_accel(kernel);
    let child_args = plan.child_args(SpeedImpl::Kernel);
    let run = vm::exec_in_guest::<SpeedReport>(kernel, accel, speed::kernel::MODULES, &child_args)?;
    eprintln!(
        "ipsec-lab: kernel rows timed in a VM booting {} ({}); boot, run and shutdown took {:.1} s",
        kernel.display(),
        accel.label(),
        run.elapsed.as_secs_f64()
    );
    Ok(run.report)
}

/// One user-mode Linux boot: the guest runs `ipsec-lab speed --crypto kernel`, whose kernel
/// rows there come from tcrypt (about a minute per suite, every size from one load).
fn kernel_rows_in_uml(plan: &SpeedPlan, kernel: &uml::UmlKernel) -> LabResult<SpeedReport> {
    let outdir = owner::PrivateDir::new("ipsec-lab-uml-")?;
    let tcrypt: std::time::Duration = plan
        .suites
        .iter()
        .map(|s| speed::tcrypt::expected_duration(*s))
        .sum();
    eprintln!(
        "ipsec-lab: kernel rows in user-mode Linux {} from tcrypt (about {} s)",
        kernel.release,
        tcrypt.as_secs()
    );
    // Boot and halt take seconds; tcrypt's loads twice their usual length, for a busy host.
    let timeout = std::time::Duration::from_secs(60) + tcrypt * 2;
    let (report, elapsed) = uml::run_this_binary::<SpeedReport>(
        kernel.clone(),
        &outdir,
        &plan.child_args(SpeedImpl::Kernel),
        "the kernel rows in user-mode Linux",
        timeout,
    )?;
    eprintln!(
        "ipsec-lab: user-mode Linux {}: boot, tcrypt and halt took {:.1} s",
        kernel.release,
        elapsed.as_secs_f64()
    );
    Ok(report)
}
