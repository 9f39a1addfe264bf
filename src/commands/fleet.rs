//! `ipsec-lab fleet plan HOST...`: every pair of the hosts in rounds (no host in two pairs of
//! one round), with what each pair runs, as the JSON the Ansible playbook (`ansible/`) walks.
//! `ipsec-lab fleet report DIR`: the reports the playbook fetched into DIR → the N×N matrix
//! per backend and suite, as Markdown, CSV, JSON or an HTML heatmap. The schedule and the
//! matrix are the `fleet` crate's; this file reads and writes files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use fleet::plan::{FleetPlan, FLEET_PLAN_SCHEMA_VERSION, PLAN_FILE};
use fleet::{Directions, Outcome};
use model::{Backend, ByteSize, CipherSuite, RunReport};
use report::CompareOptions;

use lab::{LabError, LabResult};

#[derive(Debug, Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Rounds of host pairs in which no host is in two pairs, and what each pair runs.
    Plan(PlanArgs),
    /// The N×N matrix of a fleet's fetched reports: MB/s, % of plain, pairs that stand out.
    Report(FleetReportArgs),
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The hosts, as the orchestrator names them (an inventory's names): letters, digits,
    /// '.', '_', ':', '-'.
    #[arg(required = true, num_args = 1..)]
    pub hosts: Vec<String>,
    /// Measure each pair both ways (a → b and b → a, in different rounds), not only one.
    #[arg(long)]
    pub both_directions: bool,
    /// Backends each pair runs, comma-separated; plain runs first (the line rate every
    /// other cell is read against).
    #[arg(long, value_delimiter = ',', default_value = "plain,xfrm",
          value_parser = crate::values::backend(), hide_possible_values = true)]
    pub backend: Vec<Backend>,
    /// Cipher suites of the encrypting backends, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "aes-256-cbc-hmac-sha256",
          value_parser = crate::values::cipher(), hide_possible_values = true)]
    pub cipher: Vec<CipherSuite>,
    /// Payload of each transfer, e.g. 100MB; at least 1MB.
    #[arg(long, default_value = "100MB")]
    pub bytes: ByteSize,
    /// Transfers per run (three or more let a pair be judged against the others; a
    /// server allows at most its --max-repeat, 10 by default).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true,
          value_parser = crate::values::count(model::plan::MAX_REPEAT))]
    pub repeat: u32,
    /// Print the plan as JSON (what the playbook reads) instead of the rounds as text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FleetReportArgs {
    /// The directory the playbook fetched into: fleet-plan.json and each run's report (or
    /// its `.failed` reason).
    pub dir: PathBuf,
    /// Output format: markdown, csv, json or html.
    #[arg(long, short = 'f', default_value = "markdown", value_parser = ["markdown", "md", "csv", "json", "html"])]
    pub format: String,
    /// Write to FILE instead of stdout (`-`: stdout).
    #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "out")]
    pub output: Option<PathBuf>,
    /// Write every format into DIR: fleet.md, fleet.csv, fleet.json, fleet.html.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Smallest difference from the other pairs' median, in percent, that is flagged (it
    /// must also lie beyond the noise: see --confidence).
    #[arg(long, allow_negative_numbers = true, default_value_t = 5.0)]
    pub threshold: f64,
    /// Confidence, in percent, of the interval of a pair's ratio to the other pairs.
    #[arg(long, allow_negative_numbers = true, default_value_t = 90.0)]
    pub confidence: f64,
    /// Put reports of different ipsec-lab builds or conditions in one matrix anyway: the
    /// differences are listed and no pair is flagged.
    #[arg(long)]
    pub allow_different_conditions: bool,
}

pub fn run(args: FleetArgs) -> LabResult<()> {
    match args.command {
        FleetCommand::Plan(args) => plan(args),
        FleetCommand::Report(args) => report(args),
    }
}

fn usage(e: impl std::fmt::Display) -> LabError {
    LabError::usage(anyhow::anyhow!("{e}"))
}

fn plan(args: PlanArgs) -> LabResult<()> {
    if args.bytes < model::MIN_PAYLOAD {
        return Err(usage(format!(
            "--bytes {} is below the lab's smallest payload, {}",
            args.bytes,
            model::MIN_PAYLOAD
        )));
    }
    let directions = match args.both_directions {
        true => Directions::Both,
        false => Directions::One,
    };
    let plan = FleetPlan::new(
        &args.hosts,
        directions,
        &args.backend,
        &args.cipher,
        args.bytes,
        args.repeat,
    )
    .map_err(usage)?;
    let text = match args.json {
        true => serde_json::to_string_pretty(&plan).map_err(LabError::failed)? + "\n",
        false => plan.describe(),
    };
    crate::output::write_text(Path::new("-"), &text)
}

fn report(args: FleetReportArgs) -> LabResult<()> {
    if !(args.threshold.is_finite() && (0.0..1000.0).contains(&args.threshold)) {
        return Err(usage(format!(
            "--threshold {} is out of range: give a percentage such as 5",
            args.threshold
        )));
    }
    if !(args.confidence.is_finite() && 50.0 <= args.confidence && args.confidence < 100.0) {
        return Err(usage(format!(
            "--confidence {} is out of range: give a percentage from 50 to below 100, such as 90",
            args.confidence
        )));
    }
    let output = args.output.clone().unwrap_or_else(|| PathBuf::from("-"));
    match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| usage(format!("--out {}: {e}", dir.display())))?;
            crate::output::check_writable(&dir.join("fleet.md"), "--out")?;
        }
        None => crate::output::check_writable(&output, "-o")?,
    }
    let plan = load_plan(&args.dir)?;
    let outcomes = load_outcomes(&args.dir, &plan)?;
    let options = CompareOptions {
        threshold: args.threshold / 100.0,
        confidence: args.confidence / 100.0,
        allow_different_conditions: args.allow_different_conditions,
    };
    let matrix = fleet::build(&plan, &outcomes, options).map_err(usage)?;
    let render = |format: &str| -> LabResult<String> {
        Ok(match format {
            "csv" => fleet::render::csv(&matrix),
            "json" => serde_json::to_string_pretty(&matrix).map_err(LabError::failed)? + "\n",
            "html" => fleet::render::html(&matrix),
            _ => fleet::render::markdown(&matrix),
        })
    };
    match &args.out {
        Some(dir) => {
            for (format, name) in [
                ("markdown", "fleet.md"),
                ("csv", "fleet.csv"),
                ("json", "fleet.json"),
                ("html", "fleet.html"),
            ] {
                let path = dir.join(name);
                crate::output::write_text(&path, &render(format)?)?;
                eprintln!("wrote {}", path.display());
            }
            Ok(())
        }
        None => crate::output::write_text(&output, &render(&args.format)?),
    }
}

fn load_plan(dir: &Path) -> LabResult<FleetPlan> {
    let path = dir.join(PLAN_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        usage(format!(
            "{}: {e}; DIR is where the fleet playbook fetched the reports, with the plan it walked beside them",
            path.display()
        ))
    })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| usage(format!("{} is not JSON: {e}", path.display())))?;
    let version = value.get("schema_version").and_then(|v| v.as_u64());
    if version != Some(u64::from(FLEET_PLAN_SCHEMA_VERSION)) {
        return Err(usage(format!(
            "{} is not a fleet plan of schema version {FLEET_PLAN_SCHEMA_VERSION} (it says {version:?}): \
             make the plan and the report with the same ipsec-lab",
            path.display()
        )));
    }
    let plan: FleetPlan = serde_json::from_value(value)
        .map_err(|e| usage(format!("{}: not a valid fleet plan: {e}", path.display())))?;
    if let Some((_, bad)) = plan
        .runs()
        .find(|(_, r)| !is_plain_file_name(&r.report) || !is_plain_file_name(&r.failure))
    {
        return Err(usage(format!(
            "{}: report name {:?} is not a file name in DIR",
            path.display(),
            bad.report
        )));
    }
    Ok(plan)
}

fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// Each planned run's report, or its recorded failure; a run with neither has no outcome.
/// A report that cannot be read is a failure of that run, not of the whole matrix.
fn load_outcomes(dir: &Path, plan: &FleetPlan) -> LabResult<BTreeMap<String, Outcome>> {
    let mut outcomes = BTreeMap::new();
    for (_, run) in plan.runs() {
        let report_path = dir.join(&run.report);
        let failure_path = dir.join(&run.failure);
        let outcome = if report_path.exists() {
            match std::fs::read_to_string(&report_path)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str::<RunReport>(&t).map_err(|e| e.to_string()))
            {
                Ok(r) => Outcome::Measured(Box::new(r)),
                Err(e) => Outcome::Failed(format!("its report could not be read: {e}")),
            }
        } else if failure_path.exists() {
            let text = std::fs::read(&failure_path)
                .map_err(|e| LabError::failed(anyhow::anyhow!("read {}: {e}", failure_path.display())))?;
            Outcome::Failed(failure_reason(&String::from_utf8_lossy(&text)))
        } else {
            continue;
        };
        outcomes.insert(run.report.clone(), outcome);
    }
    Ok(outcomes)
}

/// The last lines of what a host said about its failure, with control characters escaped:
/// it comes from the remote host and ends up on a terminal and in a web page.
fn failure_reason(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
    let escaped: String = tail
        .chars()
        .flat_map(|c| match c.is_control() {
            true => c.escape_debug().collect::<Vec<_>>(),
            false => vec![c],
        })
        .collect();
    match escaped.char_indices().nth(500) {
        Some((i, _)) => format!("{}…", &escaped[..i]),
        None if escaped.is_empty() => "failed, and said nothing".into(),
        None => escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reason_is_its_last_lines_escaped_and_bounded() {
        assert_eq!(
            failure_reason("starting\n\nipsec-lab: connect 198.18.99.12:5299: refused\n"),
            "starting / ipsec-lab: connect 198.18.99.12:5299: refused"
        );
        assert_eq!(failure_reason("a\nb\nc\nd"), "b / c / d");
        assert_eq!(failure_reason("\x1b[31mred"), "\\u{1b}[31mred");
        assert_eq!(failure_reason("  \n"), "failed, and said nothing");
        assert_eq!(failure_reason(&"x".repeat(900)).chars().count(), 501);
    }

    #[test]
    fn report_names_must_stay_in_the_directory() {
        assert!(is_plain_file_name("r01-h1-h2-plain.json"));
        for bad in ["", ".", "..", "../etc/passwd", "a/b"] {
            assert!(!is_plain_file_name(bad), "{bad}");
        }
    }
}
