//! `ipsec-lab report FILE --format markdown|csv|svg|html`: renders a matrix JSON result, or
//! a rekey run's rekeys and timeline.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::Args;
use model::matrix::{MatrixReport, MATRIX_SCHEMA_VERSION};
use model::RunReport;

use lab::{LabError, LabResult};

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A JSON result of `ipsec-lab matrix` or of a `run --rekey-every` (its rekeys and
    /// timeline), or `-` to read it from stdin.
    pub file: PathBuf,
    /// Output format: markdown, csv, svg or html.
    #[arg(long, short = 'f', default_value = "markdown", value_parser = crate::values::report_format(), hide_possible_values = true)]
    pub format: report::Format,
    /// Write to FILE instead of stdout (`-`: stdout).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Reads a matrix result (`-`: from stdin), refusing other files with a message that says
/// what they are.
pub fn load(path: &Path) -> LabResult<MatrixReport> {
    let (name, value) = read_json(path)?;
    matrix(&name, value)
}

/// What `compare` reads: a matrix result, or a single run's report (`run --json`) as a
/// matrix of one cell whose repeats are the run's transfers.
pub fn load_comparable(path: &Path) -> LabResult<MatrixReport> {
    let (name, value) = read_json(path)?;
    if value.get("rows").is_none() && value.get("transfers").is_some() {
        let run: RunReport = serde_json::from_value(value).map_err(|e| {
            LabError::usage(anyhow::anyhow!(
                "{name}: not a valid `ipsec-lab run --json` report: {e}"
            ))
        })?;
        return Ok(report::compare::run_as_matrix(&run));
    }
    matrix(&name, value)
}

/// The JSON document at `path` (`-`: stdin) and the name to call it by.
fn read_json(path: &Path) -> LabResult<(String, serde_json::Value)> {
    let text = if crate::output::is_std_stream(path) {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| LabError::usage(anyhow::anyhow!("read stdin: {e}")))?;
        text
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| LabError::usage(anyhow::anyhow!("read {}: {e}", path.display())))?
    };
    let name = if crate::output::is_std_stream(path) {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| LabError::usage(anyhow::anyhow!("{name} is not JSON: {e}")))?;
    Ok((name, value))
}

fn matrix(name: &str, value: serde_json::Value) -> LabResult<MatrixReport> {
    if let Some(what) = not_a_matrix(&value) {
        return Err(LabError::usage(anyhow::anyhow!(
            "{name} is {what}; `report` reads `ipsec-lab matrix` results and `run --rekey-every` reports, `compare` matrix results or two `run --json` reports"
        )));
    }
    serde_json::from_value(value)
        .map_err(|e| LabError::usage(anyhow::anyhow!("{}: not a valid matrix result: {e}", name)))
}

/// What a JSON document is when it is not a matrix result this version reads; None for one.
fn not_a_matrix(value: &serde_json::Value) -> Option<String> {
    let has = |field: &str| value.get(field).is_some();
    let version = value.get("schema_version").and_then(|v| v.as_u64());
    let Some(version) = version else {
        return Some("JSON but not an ipsec-lab result (it has no schema_version)".into());
    };
    if has("rows") {
        return (version != u64::from(MATRIX_SCHEMA_VERSION)).then(|| {
            format!(
                "an `ipsec-lab matrix` result of schema version {version}, which this ipsec-lab (schema version {MATRIX_SCHEMA_VERSION}) does not read"
            )
        });
    }
    Some(
        if has("transfers") {
            "an `ipsec-lab run --json` result (a single run)"
        } else if has("records") && has("block_sizes") {
            "an `ipsec-lab speed --json` result (cipher timings)"
        } else {
            "not an ipsec-lab result this version knows"
        }
        .into(),
    )
}

pub fn run(args: ReportArgs) -> LabResult<()> {
    let output = args.output.unwrap_or_else(|| PathBuf::from("-"));
    crate::output::check_writable(&output, "-o")?;
    let (name, value) = read_json(&args.file)?;
    // A rekey run (`run --rekey-every … --json`) renders as its rekeys and timeline.
    if value.get("transfers").is_some() && value.get("rekey").is_some_and(|r| !r.is_null()) {
        let run: RunReport = serde_json::from_value(value).map_err(|e| {
            LabError::usage(anyhow::anyhow!(
                "{name}: not a valid `ipsec-lab run --json` report: {e}"
            ))
        })?;
        let text = report::rekey::render(&run, args.format)
            .expect("a run with rekeys")
            .map_err(LabError::failed)?;
        return crate::output::write_text(&output, &text);
    }
    let matrix = matrix(&name, value)?;
    let text = report::render(&matrix, args.format).map_err(LabError::failed)?;
    crate::output::write_text(&output, &text)
}
