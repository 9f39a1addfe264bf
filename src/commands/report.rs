//! `ipsec-lab report FILE --format markdown|csv|svg|html`: renders a matrix JSON result.

use std::path::{Path, PathBuf};

use clap::Args;
use model::matrix::{MatrixReport, MATRIX_SCHEMA_VERSION};

use crate::error::{LabError, LabResult};

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A JSON result of `ipsec-lab matrix`.
    pub file: PathBuf,
    /// Output format: markdown, csv, svg or html.
    #[arg(long, short = 'f', default_value = "markdown")]
    pub format: report::Format,
    /// Write to FILE instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Reads a matrix result, refusing other files with a message that says what they are.
pub fn load(path: &Path) -> LabResult<MatrixReport> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LabError::usage(anyhow::anyhow!("read {}: {e}", path.display())))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| LabError::usage(anyhow::anyhow!("{} is not JSON: {e}", path.display())))?;
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(MATRIX_SCHEMA_VERSION) && value.get("rows").is_some() => {}
        Some(_) if value.get("transfers").is_some() => {
            return Err(LabError::usage(anyhow::anyhow!(
                "{} is a single-run report (`ipsec-lab run --json`); report and compare read `ipsec-lab matrix` results",
                path.display()
            )))
        }
        other => {
            return Err(LabError::usage(anyhow::anyhow!(
                "{} is not an ipsec-lab matrix result of schema version {MATRIX_SCHEMA_VERSION} (found {other:?})",
                path.display()
            )))
        }
    }
    serde_json::from_value(value).map_err(|e| {
        LabError::usage(anyhow::anyhow!(
            "{}: not a valid matrix result: {e}",
            path.display()
        ))
    })
}

pub fn run(args: ReportArgs) -> LabResult<()> {
    let matrix = load(&args.file)?;
    let text = report::render(&matrix, args.format).map_err(LabError::failed)?;
    match &args.output {
        Some(p) => std::fs::write(p, text)
            .map_err(|e| LabError::failed(anyhow::anyhow!("write {}: {e}", p.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}
