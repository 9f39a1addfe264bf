//! `ipsec-lab compare BEFORE AFTER`: what got faster or slower between two matrix results
//! (or two `run --json` reports, each a matrix of one cell),
//! beyond the noise of the repeats (a confidence interval of the ratio) and a threshold;
//! cells whose numbers cannot say (too few repeats, too short transfers, CPU stolen) are
//! inconclusive. `--fail-on-regression` turns a flagged regression into exit code 1, for CI
//! pipelines. Results measured under different
//! conditions are refused (exit 2) unless `--allow-different-conditions`.

use std::path::PathBuf;

use clap::Args;
use report::CompareOptions;

use lab::{LabError, LabResult};

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The earlier `ipsec-lab matrix` JSON result, or `run --json` report (`-`: stdin).
    pub before: PathBuf,
    /// The later one (not with --kernels).
    #[arg(required_unless_present = "kernels")]
    pub after: Option<PathBuf>,
    /// Compare two kernels' VM rows within ONE report (from `matrix --vm A,B`): the rows of
    /// kernel A (its uname -r, as in the row labels) are "before", those of B "after".
    #[arg(
        long,
        value_name = "A,B",
        value_delimiter = ',',
        num_args = 1,
        conflicts_with = "after"
    )]
    pub kernels: Vec<String>,
    /// Smallest change of a median, in percent, that is flagged (it must also lie beyond
    /// the noise: see --confidence).
    #[arg(long, allow_negative_numbers = true, default_value_t = 5.0)]
    pub threshold: f64,
    /// Confidence, in percent, of the interval of each cell's ratio after/before; a change
    /// is beyond the noise where the interval leaves out 1. Three repeats a side reach 90 %;
    /// 95 % needs four or more.
    #[arg(long, allow_negative_numbers = true, default_value_t = 90.0)]
    pub confidence: f64,
    /// Exit with code 1 when a regression is flagged (an inconclusive cell never is: too few
    /// repeats for --confidence, transfers under 0.5 s, CPU steal above 5 %).
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
    if !(args.confidence.is_finite() && 50.0 <= args.confidence && args.confidence < 100.0) {
        return Err(LabError::usage(anyhow::anyhow!(
            "--confidence {} is out of range: give a percentage from 50 to below 100, such as 90 or 95",
            args.confidence
        )));
    }
    let (before, after) = match (&args.after, args.kernels.as_slice()) {
        (Some(after_path), _) => {
            if crate::output::is_std_stream(&args.before) && crate::output::is_std_stream(after_path) {
                return Err(LabError::usage(anyhow::anyhow!(
                    "only one of BEFORE and AFTER can be `-` (stdin)"
                )));
            }
            (
                super::report::load_comparable(&args.before)?,
                super::report::load_comparable(after_path)?,
            )
        }
        (None, [a, b]) => {
            let both = super::report::load(&args.before)?;
            model::kernels::kernel_views(&both, a, b).map_err(|e| LabError::usage(anyhow::anyhow!(e)))?
        }
        (None, _) => {
            return Err(LabError::usage(anyhow::anyhow!(
                "--kernels takes two kernels, A,B (their uname -r as in the row labels)"
            )))
        }
    };
    let comparison = report::compare(
        &before,
        &after,
        CompareOptions {
            threshold: args.threshold / 100.0,
            confidence: args.confidence / 100.0,
            allow_different_conditions: args.allow_different_conditions,
        },
    )
    .map_err(LabError::usage)?;
    print!("{}", comparison.render());
    let regressions: Vec<String> = comparison
        .regressions()
        .map(|d| {
            format!(
                "{} {}",
                report::escape::terminal(&d.row.label()),
                d.suite.short_label()
            )
        })
        .collect();
    if args.fail_on_regression && !regressions.is_empty() {
        return Err(LabError::failed(anyhow::anyhow!(
            "{} regression(s) beyond the noise and {} %: {}",
            regressions.len(),
            args.threshold,
            regressions.join(", ")
        )));
    }
    Ok(())
}
