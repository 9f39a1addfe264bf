//! `ipsec-lab speed`: the crypto microbenchmark of the `speed` crate, behind the binary's
//! exit codes (2 for bad input, 3 for a library this machine lacks, 1 for a failed run,
//! 130/143 after SIGINT/SIGTERM): the
//! command line ([`args`]) becomes the crate's validated plan, [`lab::speed`] measures (the
//! soft rows in a child with hardware AES masked; with `--vm [KERNEL]` the kernel rows in
//! one virtme-ng guest, labelled with its condition), and [`print`] shows the progress and
//! the report. Ctrl-C or SIGTERM stops the run within a fraction of a second and prints the
//! cells done as a table marked partial.

mod args;
mod print;

pub use args::SpeedArgs;

use lab::{LabError, LabResult};

pub fn run(args: SpeedArgs) -> LabResult<()> {
    let plan = args.request().validate().map_err(speed::SpeedError::from)?;
    speed::check_available(&plan)?;
    let json = args.json.as_deref();
    if let Some(json) = json {
        crate::output::check_writable(json, "--json")?;
    }
    speed::stop::on_signals().map_err(LabError::failed)?;
    let report = {
        // The progress line is cleared before the table is printed.
        let mut progress = print::progress(&plan);
        lab::speed::measure(&plan, progress.as_mut())?
    };
    print::emit(&report, args.units(), json, plan.child)?;
    if let Some(stopped) = &report.interrupted {
        if !plan.child {
            eprintln!(
                "ipsec-lab: interrupted by {}; the table holds the cells done",
                stopped.signal
            );
        }
        std::process::exit(128 + stopped.signal_number);
    }
    Ok(())
}
