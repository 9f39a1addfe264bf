//! Renders a single run's report ([`RunReport`], `ipsec-lab run`) as the binary prints it on
//! a terminal: the suite, the table (a row per transfer), the lines under it (the median of
//! the repeats, each way's, the UDP trials and rates found, the reference tools, the
//! conditions, the ceilings, the notes), wrapped where the terminal's width is known, and
//! the latency table. Pure: the binary chooses the stream and the width, and prints.
//!
//! * [`modes`]: the interval lines of `--interval`, and the table's rows and summary lines
//!   of a reversed, two-way or `--omit` run.

pub mod modes;
pub mod rekey;

use std::fmt::Write as _;
use std::path::Path;

use model::report::TransferRecord;
use model::RunReport;

use crate::escape::terminal;

/// The human-readable result: the suite, one row per transfer, a summary row when
/// repeated, then the conditions the numbers were measured under. The suite is one per
/// run, so it is said once above the table rather than in a column: the rows fit 80
/// columns (issue 25: they were 97-105).
pub fn table(report: &RunReport) -> String {
    table_for(report, None)
}

/// [`table`], with the lines under the table wrapped to `width` where it is a terminal's.
pub fn table_for(report: &RunReport, width: Option<usize>) -> String {
    let plan = &report.plan;
    let mut rows: Vec<[String; 6]> = vec![[
        "backend".into(),
        "payload".into(),
        "time".into(),
        "throughput".into(),
        "send cpu".into(),
        "recv cpu".into(),
    ]];
    let udp_labels = crate::packets::row_labels(report);
    for (i, (label, record)) in modes::rows(report).into_iter().enumerate() {
        let label = udp_labels
            .as_ref()
            .and_then(|l| l.get(i).cloned())
            .unwrap_or(label);
        rows.push(row(label, record));
    }
    let mut out = format!("cipher: {}\n", plan.suite());
    let widths: Vec<usize> = (0..6)
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
    // Everything under the table is prose: wrapped on a terminal, one line per item elsewhere.
    let rows_text = out;
    let mut out = String::new();
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
    for line in modes::summary_lines(report) {
        let _ = writeln!(out, "{line}");
    }
    for line in report.udp.iter().flat_map(crate::packets::udp_lines) {
        let _ = writeln!(out, "{line}");
    }
    for line in report.rekey.iter().flat_map(rekey::lines) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(f) = &report.first_packet {
        let _ = writeln!(out, "{}", f.line());
    }
    if let Some(cost) = &report.machine_cost {
        let _ = writeln!(out, "{}", cost.line());
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
    let encap = plan.encap().map(|e| format!(", {e}")).unwrap_or_default();
    let _ = writeln!(
        out,
        "\nmeasured on {}, seed {:#x}, mtu {}, {} stream(s), {}{encap}",
        terminal(&env.describe()),
        plan.workload().seed,
        plan.link().mtu,
        plan.workload().parallel,
        plan.link().family,
    );
    if let Some(c) = &report.ceiling {
        let _ = writeln!(out, "{}", ceiling_lines(c));
    }
    // A warning puts the figure above in doubt (a transfer too short to time): said as such.
    for note in &report.notes {
        let kind = if crate::is_warning(note) {
            "warning"
        } else {
            "note"
        };
        let _ = writeln!(out, "{kind}: {}", terminal(note));
    }
    let under = out;
    let mut out = rows_text;
    for line in under.lines() {
        // What a peer or a report file said reaches the terminal inert, whatever it holds.
        let line = terminal(line);
        let lines = match width {
            Some(w) => wrap(&line, w),
            None => vec![line],
        };
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
    // Columns, not prose: never wrapped (they fit 80).
    if let Some(latency) = &report.latency {
        out.push('\n');
        for line in crate::packets::latency_table(latency) {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// The table, and where no JSON report is written, a pointer to the evidence only it holds.
pub fn human(report: &RunReport, json: Option<&Path>, width: Option<usize>) -> String {
    let mut out = table_for(report, width);
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
        lines.extend(s.notes.iter().map(|n| format!("ceiling note: {}", terminal(n))));
    }
    lines.join("\n")
}

fn row(label: String, record: &TransferRecord) -> [String; 6] {
    let t = &record.transfer;
    [
        label,
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

/// `line` broken at spaces into lines of at most `width` characters, the continuation
/// lines indented by two; a word longer than that stays whole on a line of its own.
pub fn wrap(line: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    // Nothing on `current` yet but the continuation indent.
    let mut fresh = true;
    for word in line.split(' ') {
        if !fresh && current.chars().count() + 1 + word.chars().count() > width {
            out.push(std::mem::replace(&mut current, "  ".into()));
            fresh = true;
        }
        if !fresh {
            current.push(' ');
        }
        current.push_str(word);
        fresh = false;
    }
    out.push(current);
    out
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
        assert!(text.starts_with("cipher: none\n"), "{text}");
        let header = text.lines().nth(1).unwrap();
        for col in ["backend", "payload", "time", "throughput", "send cpu", "recv cpu"] {
            assert!(header.contains(col), "{header}");
        }
        assert!(
            text.contains("\nplain    100.0 MB  0.125 s  800.0 MB/s (6.40 Gbit/s)"),
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
            .evidence
            .insert(model::Backend::Openvpn, model::evidence::Evidence::None);
        let pointer = "full evidence is in the JSON report";
        assert!(human(&report, None, None).contains(pointer));
        for json in ["report.json", "-"] {
            let text = human(&report, Some(Path::new(json)), None);
            assert!(!text.contains(pointer), "--json {json}: {text}");
        }
        report.backend_details = Default::default();
        assert!(!human(&report, None, None).contains(pointer));
    }

    fn transfer(bytes: u64, seconds: f64) -> Transfer {
        Transfer {
            bytes,
            seconds,
            streams: 1,
            verified: true,
            sender_cpu: CpuUsage::new(0.1, 0.0, seconds),
            receiver_cpu: CpuUsage::new(0.05, 0.0, seconds),
            sender_threads: 1,
            receiver_threads: 1,
        }
    }

    /// Issue 25 item 9: the table was 97-105 columns (the suite repeated in every row,
    /// "receiver cpu"), the conditions line up to 259 characters. Now the rows of the
    /// README's runs fit 80 columns, and on an 80-column terminal so does every line.
    #[test]
    fn the_table_fits_80_columns_and_the_lines_under_it_wrap_on_a_terminal() {
        for (backend, bytes, seconds) in [
            (model::Backend::Userspace, 100_000_000, 0.7),
            (model::Backend::Openvpn, 100_000_000, 8.133),
            (model::Backend::Plain, 1_000_000_000, 0.94),
        ] {
            let plan = RunRequest {
                backend,
                key_bits: (backend != model::Backend::Plain).then_some(model::KeyBits::Aes256),
                hmac: (backend != model::Backend::Plain).then_some(model::Hmac::Sha256),
                repeat: 3,
                ..Default::default()
            }
            .validate()
            .unwrap();
            let t = transfer(bytes, seconds);
            let mut report =
                RunReport::new(plan, Environment::detect(), vec![t.clone(), t.clone(), t]).unwrap();
            report.notes.push(
                "ESP SA spi 0x1a522c01 a->b (sent by a): 2972 packets, 4254368 bytes, 0 replay drops, \
                 0 integrity failures, and some more words to pass any width"
                    .into(),
            );
            let piped = table(&report);
            let rows: Vec<&str> = piped.lines().take_while(|l| !l.is_empty()).collect();
            assert!(rows.len() >= 5, "{piped}");
            for row in &rows {
                assert!(
                    row.chars().count() <= 80,
                    "{} columns: {row}",
                    row.chars().count()
                );
            }
            // In a pipe a note stays one line (grep finds it whole).
            assert!(piped.contains("note: ESP SA spi 0x1a522c01 a->b (sent by a): 2972 packets, 4254368"));
            let terminal = table_for(&report, Some(80));
            for line in terminal.lines() {
                assert!(
                    line.chars().count() <= 80,
                    "{} columns: {line}",
                    line.chars().count()
                );
            }
            // Wrapping moves words, never loses one.
            let words = |t: &str| t.split_whitespace().map(String::from).collect::<Vec<_>>();
            assert_eq!(words(&terminal), words(&piped));
        }
    }

    /// Issue 42 item 3: the run's own text printed a report's environment and notes raw (a
    /// server's environment is stored in the client's report). The hostile fixture's run
    /// report (tests/hostile_report.rs) prints inert, piped and on a terminal.
    #[test]
    fn a_hostile_run_report_prints_no_control_character() {
        let text = include_str!("../../../../tests/fixtures/hostile/run.json");
        let report: RunReport = serde_json::from_str(text).unwrap();
        for width in [None, Some(80)] {
            let out = human(&report, None, width);
            assert!(out.contains("PWNED"), "{out}");
            for line in out.lines() {
                assert!(
                    !line.chars().any(|c| c.is_control() || c == '\u{202e}'),
                    "{width:?}: {line:?}"
                );
                assert!(!line.starts_with("# PWNED"), "{line:?}");
            }
        }
    }

    #[test]
    fn wrap_breaks_at_spaces_and_indents_the_continuation() {
        assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "  ccc", "  dddd"]);
        assert_eq!(wrap("short", 80), ["short"]);
        assert_eq!(wrap("", 80), [""]);
        // A word wider than the line stays whole.
        assert_eq!(
            wrap("see /a/very/long/path/indeed now", 10),
            ["see", "  /a/very/long/path/indeed", "  now"]
        );
    }
}
