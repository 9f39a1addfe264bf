//! `ipsec-lab speed`: the crypto microbenchmark of the `speed` crate, behind the binary's
//! exit codes (2 for bad input, 1 for a failed run): the command line ([`args`]) becomes
//! the crate's validated plan, [`lab::speed`] measures (the soft rows in a child with
//! hardware AES masked; with `--vm [KERNEL]` the kernel rows in one virtme-ng guest,
//! labelled with its condition), and [`print`] shows the progress and the report.

mod args;
mod print;

pub use args::SpeedArgs;

use lab::LabResult;

pub fn run(args: SpeedArgs) -> LabResult<()> {
    let plan = args.request().validate().map_err(speed::SpeedError::from)?;
    let json = args.json.as_deref();
    if let Some(json) = json {
        crate::output::check_writable(json, "--json")?;
    }
    let report = lab::speed::measure(&plan, print::progress(&plan).as_mut())?;
    print::emit(&report, args.units(), json, plan.child)
}
