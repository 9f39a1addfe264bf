//! `ipsec-lab compare BEFORE AFTER`: what got faster or slower between two matrix results,
//! beyond the spread of the repeats and a threshold. `--fail-on-regression` turns a flagged
//! regression into exit code 1, for CI pipelines. Results measured under different
//! conditions are refused (exit 2) unless `--allow-different-conditions`.

use std::path::PathBuf;

use clap::Args;
use report::CompareOptions;

use lab::{LabError, LabResult};

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The earlier `ipsec-lab matrix` JSON result (`-`: stdin).
    pub before: PathBuf,
    /// The later one.
    pub after: PathBuf,
    /// Smallest change of a median, in percent, that is flagged (it must also lie outside
    /// the repeats' min–max spread).
    #[arg(long, default_value_t = 5.0)]
    pub threshold: f64,
    /// Exit with code 1 when a regression is flagged.
    #[arg(long)]
    pub fail_on_regression: bool,
    /// Compare results measured under different conditions (payload, repeats, kernel, CPU,
    /// VM or host) anyway: the affected cells are marked not comparable and never flagged.
    #[arg(long)]
    pub allow_different_conditions: bool,
}

pub fn run(args: CompareArgs) -> LabResult<()> {
    if !(args.threshold.is_finite() && (0.0..1000.0).contains(&args.threshold)) {
        return Err(LabError::usage(anyhow::anyhow!(
            "--threshold {} is out of range: give a percentage such as 5",
            args.threshold
        )));
    }
    if crate::output::is_std_stream(&args.before) && crate::output::is_std_stream(&args.after) {
        return Err(LabError::usage(anyhow::anyhow!(
            "only one of BEFORE and AFTER can be `-` (stdin)"
        )));
    }
    let before = super::report::load(&args.before)?;
    let after = super::report::load(&args.after)?;
    let comparison = report::compare(
        &before,
        &after,
        CompareOptions {
            threshold: args.threshold / 100.0,
            allow_different_conditions: args.allow_different_conditions,
        },
    )
    .map_err(LabError::usage)?;
    print!("{}", comparison.render());
    let regressions: Vec<String> = comparison
        .regressions()
        .map(|d| format!("{} {}", d.row.label(), d.suite.short_label()))
        .collect();
    if args.fail_on_regression && !regressions.is_empty() {
        return Err(LabError::failed(anyhow::anyhow!(
            "{} regression(s) beyond the spread and {} %: {}",
            regressions.len(),
            args.threshold,
            regressions.join(", ")
        )));
    }
    Ok(())
}
