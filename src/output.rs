//! Where results go, one rule for every command: `-` is stdout (stdin for an input), the
//! human table goes to stderr when stdout carries JSON, and every output path is checked
//! before any work starts. Also prints a run report: the table and/or the JSON schema.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use model::report::TransferRecord;
use model::RunReport;

use lab::{LabError, LabResult};

/// Whether `path` is the `-` that means stdout (or stdin for an input).
pub fn is_std_stream(path: &Path) -> bool {
    path == Path::new("-")
}

/// Refuses, with exit code 2, an output file that could not be written, before the work
/// that fills it: a transfer, a sweep or a VM boot is not lost to a typo. The file is opened
/// for writing without truncating it (an existing file keeps its contents until the result
/// replaces it), and removed again when this check created it.
pub fn check_writable(path: &Path, flag: &str) -> LabResult<()> {
    if is_std_stream(path) {
        return Ok(());
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| {
            LabError::usage(anyhow::anyhow!(
                "{flag} {}: cannot write there: {e}",
                path.display()
            ))
        })?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Writes `text` to `path` (`-`: stdout).
pub fn write_text(path: &Path, text: &str) -> LabResult<()> {
    if is_std_stream(path) {
        let mut out = std::io::stdout().lock();
        return out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| LabError::failed(anyhow::anyhow!("write to stdout: {e}")));
    }
    std::fs::write(path, text).map_err(|e| LabError::failed(anyhow::anyhow!("write {}: {e}", path.display())))
}

/// The human table on stdout, or on stderr when stdout carries the JSON (`--json -`).
pub fn print_human(text: &str, json: Option<&Path>) {
    if json.is_some_and(is_std_stream) {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

pub fn emit(report: &RunReport, json: Option<&Path>) -> LabResult<()> {
    print_human(&human(report, json), json);
    if let Some(path) = json {
        write_text(path, &(to_json(report)? + "\n"))?;
    }
    Ok(())
}

pub fn to_json(report: &RunReport) -> LabResult<String> {
    serde_json::to_string_pretty(report).map_err(LabError::failed)
}

/// The human-readable result: one row per transfer, a summary row when repeated, then the
/// conditions the numbers were measured under.
pub fn table(report: &RunReport) -> String {
    let plan = &report.plan;
    let mut rows: Vec<[String; 7]> = vec![[
        "backend".into(),
        "cipher".into(),
        "payload".into(),
        "time".into(),
        "throughput".into(),
        "sender cpu".into(),
        "receiver cpu".into(),
    ]];
    for (label, record) in crate::modes::rows(report) {
        rows.push(row(report, label, record));
    }
    let mut out = String::new();
    let widths: Vec<usize> = (0..7)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    let s = &report.mb_per_s;
    // The report refuses untimed transfers, so every rate here is finite.
    if s.n > 1 {
        let _ = writeln!(
            out,
            "median {:.1} MB/s over {} runs (min {:.1}, max {:.1}, spread {:.0} %)",
            s.median,
            s.n,
            s.min,
            s.max,
            s.relative_spread() * 100.0
        );
    }
    for line in crate::modes::summary_lines(report) {
        let _ = writeln!(out, "{line}");
    }
    for (tool, reference) in &report.references {
        let ratio = s.median / reference.median;
        let ratio = if ratio.is_finite() {
            format!("{ratio:.2}")
        } else {
            "not computed (no rate)".into()
        };
        let _ = writeln!(
            out,
            "{tool} over the same path: median {:.1} MB/s (min {:.1}, max {:.1}); ipsec-lab/{tool} = {ratio}",
            reference.median, reference.min, reference.max,
        );
    }
    let env = &report.environment;
    // The family and the encapsulation are conditions of the figure, as the MTU is.
    let encap = plan.encap.map(|e| format!(", {e}")).unwrap_or_default();
    let _ = writeln!(
        out,
        "\nmeasured on {}, seed {:#x}, mtu {}, {} stream(s), {}{encap}",
        env.describe(),
        plan.seed,
        plan.mtu,
        plan.parallel,
        plan.family,
    );
    if let Some(c) = &report.ceiling {
        let _ = writeln!(out, "{}", ceiling_lines(c));
    }
    // A warning puts the figure above in doubt (a transfer too short to time): said as such.
    for note in &report.notes {
        let kind = if report::is_warning(note) {
            "warning"
        } else {
            "note"
        };
        let _ = writeln!(out, "{kind}: {note}");
    }
    out
}

/// The table, and where no JSON report is written, a pointer to the evidence only it holds.
pub fn human(report: &RunReport, json: Option<&Path>) -> String {
    let mut out = table(report);
    if json.is_none() && !report.backend_details.is_empty() {
        out.push_str("(the backend's full evidence is in the JSON report: --json FILE)\n");
    }
    out
}

/// The run against its crypto ceiling and its line rate: what each was, then the shares.
fn ceiling_lines(c: &model::ceiling::RunCeiling) -> String {
    let line_rate = match &c.line_rate {
        model::ceiling::LineRate::Measured { mb_per_s, transfers } => format!(
            "{mb_per_s:.1} MB/s (plain TCP between the same namespaces after the tunnel came down, median of {transfers})"
        ),
        model::ceiling::LineRate::None { reason } => format!("— ({reason})"),
    };
    let mut lines = vec![
        format!("crypto ceiling: {}", c.crypto.describe()),
        format!("line rate: {line_rate}"),
        c.sentence(),
    ];
    if let model::ceiling::CeilingOutcome::Measured(s) = &c.crypto.outcome {
        lines.extend(s.notes.iter().map(|n| format!("ceiling note: {n}")));
    }
    lines.join("\n")
}

fn row(report: &RunReport, label: String, record: &TransferRecord) -> [String; 7] {
    let t = &record.transfer;
    [
        label,
        report.plan.suite.to_string(),
        model::ByteSize(t.bytes).to_string(),
        format!("{:.3} s", t.seconds),
        format!(
            "{:.1} MB/s ({:.2} Gbit/s)",
            record.rates.mb_per_s,
            record.rates.mbit_per_s / 1000.0
        ),
        format!("{:.0} %", t.sender_cpu.percent_of_core),
        format!("{:.0} %", t.receiver_cpu.percent_of_core),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{CpuUsage, Environment, RunRequest, Transfer};

    #[test]
    fn table_has_the_documented_columns_and_a_median_row() {
        let plan = RunRequest {
            backend: model::Backend::Plain,
            repeat: 2,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let t = |s| Transfer {
            bytes: 100_000_000,
            seconds: s,
            streams: 1,
            verified: true,
            sender_cpu: CpuUsage::new(0.1, 0.0, s),
            receiver_cpu: CpuUsage::new(0.05, 0.0, s),
            sender_threads: 1,
            receiver_threads: 1,
        };
        let report = RunReport::new(plan, Environment::detect(), vec![t(0.125), t(0.1)]).unwrap();
        let text = table(&report);
        let first = text.lines().next().unwrap();
        for col in [
            "backend",
            "cipher",
            "payload",
            "time",
            "throughput",
            "sender cpu",
            "receiver cpu",
        ] {
            assert!(first.contains(col), "{first}");
        }
        assert!(
            text.contains("plain    none    100.0 MB  0.125 s  800.0 MB/s (6.40 Gbit/s)"),
            "{text}"
        );
        assert!(text.contains("median 900.0 MB/s over 2 runs"), "{text}");
        // 0.1 s transfers: the figure's caveat is a warning, not a note among the evidence.
        assert!(
            text.contains("\nwarning: a transfer lasted 0.100 s: too short to be a stable figure"),
            "{text}"
        );
    }

    /// Regression: "(the backend's full evidence is in the JSON report: --json FILE)" was
    /// printed also when --json was given.
    #[test]
    fn the_evidence_pointer_only_where_no_json_is_written() {
        let plan = RunRequest {
            backend: model::Backend::Userspace,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let t = Transfer {
            bytes: 100_000_000,
            seconds: 0.5,
            streams: 1,
            verified: true,
            sender_cpu: CpuUsage::new(0.1, 0.0, 0.5),
            receiver_cpu: CpuUsage::new(0.05, 0.0, 0.5),
            sender_threads: 1,
            receiver_threads: 1,
        };
        let mut report = RunReport::new(plan, Environment::detect(), vec![t]).unwrap();
        report
            .backend_details
            .insert("tunnel".into(), serde_json::json!({"packets": 1}));
        let pointer = "full evidence is in the JSON report";
        assert!(human(&report, None).contains(pointer));
        for json in ["report.json", "-"] {
            let text = human(&report, Some(Path::new(json)));
            assert!(!text.contains(pointer), "--json {json}: {text}");
        }
        report.backend_details.clear();
        assert!(!human(&report, None).contains(pointer));
    }
}
