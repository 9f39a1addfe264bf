//! The matrix as Markdown: the classic table of median MB/s, then % of plain, CPU per side,
//! the kernel drivers that served, why cells did not run, and the conditions.

use std::fmt::Write as _;

use model::matrix::{CellOutcome, MatrixReport, Measurement, Row};

use crate::packets::{
    fmt_ms, fmt_pct, fmt_pps, has_packets, has_rates_found, latency_cells, packet_sizes, phase_has_echoes,
    point, rates_found_text, series, Point, LATENCY_EXPLAINED, PACKETS_EXPLAINED,
};
use crate::shared::{
    ceiling_text, cell_for, conditions, fmt_rate, has_ceilings, method, no_ceiling_reasons,
    row_and_report_notes, Warnings, CEILING_EXPLAINED, WARNING_MARK,
};

/// Numbered reasons for "not run" cells, so the table stays narrow.
struct Reasons(Vec<String>);

impl Reasons {
    fn mark(&mut self, reason: &str) -> usize {
        match self.0.iter().position(|r| r == reason) {
            Some(i) => i + 1,
            None => {
                self.0.push(reason.to_string());
                self.0.len()
            }
        }
    }
}

use crate::escape::markdown as escape;

/// One table: a column per suite, a row per matrix row, `show` deciding a measured cell's text.
fn table(
    out: &mut String,
    report: &MatrixReport,
    reasons: &mut Reasons,
    show: &dyn Fn(&Row, &Measurement) -> String,
) {
    marked_table(out, report, reasons, None, show)
}

/// [`table`], where with `warnings` a cell that has some carries their mark after its text.
fn marked_table(
    out: &mut String,
    report: &MatrixReport,
    reasons: &mut Reasons,
    warnings: Option<&Warnings>,
    show: &dyn Fn(&Row, &Measurement) -> String,
) {
    let mut header = vec!["backend".to_string()];
    header.extend(report.suites.iter().map(|s| s.short_label()));
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let mut rule = vec!["---".to_string()];
    rule.extend(report.suites.iter().map(|_| "---:".to_string()));
    let _ = writeln!(out, "| {} |", rule.join(" | "));
    for (i, row) in report.rows.iter().enumerate() {
        let mut line = vec![escape(&row.label())];
        for suite in &report.suites {
            let cell = cell_for(row, *suite);
            line.push(match cell.map(|c| &c.outcome) {
                Some(CellOutcome::Measured(m)) => match warnings.zip(cell).and_then(|(w, c)| w.mark(i, c)) {
                    Some(mark) => format!("{} {mark}", show(row, m)),
                    None => show(row, m),
                },
                Some(CellOutcome::NotRun { reason }) => format!("not run [{}]", reasons.mark(reason)),
                None => "—".to_string(),
            });
        }
        let _ = writeln!(out, "| {} |", line.join(" | "));
    }
}

pub fn render(report: &MatrixReport) -> String {
    let mut out = String::new();
    let mut reasons = Reasons(Vec::new());
    let warnings = Warnings::of(report);
    let _ = writeln!(
        out,
        "### ipsec-lab matrix: MB/s ({}, verified)\n",
        escape(&method(report))
    );
    marked_table(&mut out, report, &mut reasons, Some(&warnings), &|_, m| {
        fmt_rate(m.mb_per_s.median)
    });
    let _ = writeln!(
        out,
        "\nThe plain row is one suite-independent baseline per environment, shown under every column."
    );
    if !warnings.is_empty() {
        let _ = writeln!(
            out,
            "A figure followed by {WARNING_MARK}n has warning n (listed under Warnings): read it with that caveat."
        );
    }
    let _ = writeln!(out);

    let _ = writeln!(out, "#### Spread (min–max MB/s over the repeats)\n");
    table(&mut out, report, &mut reasons, &|_, m| {
        format!("{}–{}", fmt_rate(m.mb_per_s.min), fmt_rate(m.mb_per_s.max))
    });

    let _ = writeln!(out, "\n#### % of plain (line rate in the same environment)\n");
    table(&mut out, report, &mut reasons, &|_, m| match m.percent_of_plain {
        Some(p) if p.is_finite() => format!("{p:.1} %"),
        Some(_) => "—".to_string(),
        None => "no baseline".to_string(),
    });

    if has_ceilings(report) {
        let _ = writeln!(
            out,
            "\n#### % of the crypto ceiling (and the ceiling's MB/s)\n\n{}.\n",
            CEILING_EXPLAINED
        );
        table(&mut out, report, &mut reasons, &|row, m| match ceiling_text(m) {
            Some(text) => text,
            None if row.is_baseline() => "line rate".to_string(),
            None => "not timed".to_string(),
        });
    }

    let _ = writeln!(
        out,
        "\n#### CPU per side (median % of one core: sender / receiver application; tunnel a / b where the \
         tunnel runs in its own threads or processes, over their life)\n"
    );
    table(&mut out, report, &mut reasons, &|_, m| {
        let app = format!(
            "{:.0} / {:.0}",
            m.cpu.sender_percent.median, m.cpu.receiver_percent.median
        );
        match m.tunnel_cpu {
            Some(t) => format!("{app}; tunnel {:.0} / {:.0}", t.a_percent, t.b_percent),
            None => app,
        }
    });

    packet_tables(&mut out, report, &mut reasons);
    latency_table(&mut out, report);
    for table in crate::shared::side_tables(report) {
        let _ = writeln!(out, "\n#### {}\n\n{}.\n", table.title, table.explained);
        let mut header = vec!["backend".to_string()];
        header.extend(table.columns.iter().map(|c| escape(c)));
        let _ = writeln!(
            out,
            "| {} |\n|{}",
            header.join(" | "),
            " --- |".repeat(header.len())
        );
        for (label, cells) in table.rows {
            let cells: Vec<String> = cells.iter().map(|c| escape(c)).collect();
            let _ = writeln!(out, "| {} | {} |", escape(&label), cells.join(" | "));
        }
    }

    let served: Vec<(String, Vec<String>)> = report
        .rows
        .iter()
        .filter_map(|row| {
            let mut drivers: Vec<String> = row
                .cells
                .iter()
                .filter_map(|c| c.measurement()?.served_by.clone())
                .collect();
            drivers.sort();
            drivers.dedup();
            (!drivers.is_empty()).then(|| (row.label(), drivers))
        })
        .collect();
    if !served.is_empty() {
        let _ = writeln!(
            out,
            "\n#### Kernel drivers that served the SAs (from /proc/crypto)\n"
        );
        for (label, drivers) in served {
            let _ = writeln!(out, "* {}: {}", escape(&label), escape(&drivers.join(", ")));
        }
    }

    if !warnings.is_empty() {
        let _ = writeln!(out, "\n#### Warnings\n");
        for line in warnings.lines() {
            let _ = writeln!(out, "* {}", escape(&line));
        }
    }
    let notes = row_and_report_notes(report);
    let no_ceiling = no_ceiling_reasons(report);
    if !no_ceiling.is_empty() {
        let _ = writeln!(out, "\n#### No ceiling\n");
        for line in no_ceiling {
            let _ = writeln!(out, "* {}", escape(&line));
        }
    }
    if !reasons.0.is_empty() {
        let _ = writeln!(out, "\n#### Not run\n");
        for (i, reason) in reasons.0.iter().enumerate() {
            let _ = writeln!(out, "{}. {}", i + 1, escape(reason));
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\n#### Notes\n");
        for n in notes {
            let _ = writeln!(out, "* {}", escape(&n));
        }
    }
    let _ = writeln!(out, "\n#### Conditions\n");
    for line in conditions(report) {
        let _ = writeln!(out, "* {}", escape(&line));
    }
    out
}

/// Packets/s per packet size (a line per backend row and cipher, a column per size), and
/// with `--find-ndr` the rates found, in the same shape.
fn packet_tables(out: &mut String, report: &MatrixReport, reasons: &mut Reasons) {
    if !has_packets(report) {
        return;
    }
    let sizes = packet_sizes(report);
    let all = series(report);
    let mut table = |out: &mut String, show: &dyn Fn(&model::matrix::PacketRates) -> String| {
        let mut header = vec!["backend".to_string()];
        header.extend(sizes.iter().map(ToString::to_string));
        let _ = writeln!(out, "| {} |", header.join(" | "));
        let rule: Vec<&str> = std::iter::once("---")
            .chain(sizes.iter().map(|_| "---:"))
            .collect();
        let _ = writeln!(out, "| {} |", rule.join(" | "));
        for s in &all {
            let mut line = vec![escape(&s.label)];
            for (_, at) in &s.points {
                line.push(match point(at.map(|(_, c)| c)) {
                    Point::Measured(p) => show(p),
                    Point::NotRun(reason) => format!("not run [{}]", reasons.mark(reason)),
                    Point::NoFigures => "no packet figures".into(),
                    Point::Missing => "—".into(),
                });
            }
            let _ = writeln!(out, "| {} |", line.join(" | "));
        }
    };
    let _ = writeln!(
        out,
        "\n#### Packets/s per packet size (UDP, delivered; loss)\n\n{PACKETS_EXPLAINED}.\n"
    );
    table(out, &|p| {
        format!(
            "{} pps, {} loss",
            fmt_pps(p.received_pps.median),
            fmt_pct(p.loss_pct.median)
        )
    });
    if has_rates_found(report) {
        let _ = writeln!(out, "\n#### Zero-loss rates (--find-ndr, packets/s)\n");
        table(out, &|p| match p.rates_found.is_empty() {
            true => "not searched".into(),
            false => escape(&rates_found_text(p)),
        });
    }
}

/// Round trips per cell and phase: probes, then the percentiles in ms.
fn latency_table(out: &mut String, report: &MatrixReport) {
    let cells = latency_cells(report);
    if cells.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n#### Latency (round trips, ms)\n\n{LATENCY_EXPLAINED}.\n\n\
         | cell | phase | probes | min | p50 | p90 | p99 | p99.9 | max |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for c in &cells {
        for p in &c.latency.phases {
            let probes = format!("{}/{}", p.probes_received, p.probes_sent);
            let figures = match phase_has_echoes(p) {
                true => [p.min_ms, p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms].map(fmt_ms),
                false => std::array::from_fn(|_| "no echo".to_string()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {probes} | {} |",
                escape(&c.label),
                escape(&p.name),
                figures.join(" | ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn classic_shape_with_every_row_and_column() {
        let text = render(&fixture::report());
        let header = text.lines().find(|l| l.starts_with("| backend")).unwrap();
        assert_eq!(
            header,
            "| backend | 128 | 192 | 256 | 128+HMAC | 192+HMAC | 256+HMAC | GCM-256 |"
        );
        let first_table: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("| backend"))
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(first_table.len(), 2 + 7, "{text}");
        assert_eq!(
            first_table[2],
            "| plain (line rate) | 1100.0 | 1100.0 | 1100.0 | 1100.0 | 1100.0 | 1100.0 | 1100.0 |"
        );
        assert!(
            first_table[3].starts_with("| xfrm | not run [1] |"),
            "{}",
            first_table[3]
        );
        assert!(first_table[4].starts_with("| userspace [auto] | 310.0 | 311.0 |"));
        assert!(
            first_table[6].ends_with("| 45.0 | not run [2] |"),
            "{}",
            first_table[6]
        );
        assert!(first_table[8].starts_with("| xfrm [aes-generic] (vm) | 2.00 |"));
    }

    #[test]
    fn percent_spread_cpu_drivers_reasons_and_conditions_follow() {
        let text = render(&fixture::report());
        // userspace [auto] 310 of 1100 on the host; the VM row against the VM's baseline.
        assert!(text.contains("| userspace [auto] | 28.2 % |"), "{text}");
        assert!(text.contains("| xfrm [aes-generic] (vm) | 2.0 % |"), "{text}");
        assert!(text.contains("| userspace [auto] | 300.0–320.0 |"), "{text}");
        assert!(
            text.contains("| openvpn | 85 / 65; tunnel 97 / 88 | 85 / 65 |"),
            "{text}"
        );
        assert!(text.contains("* xfrm [aes-generic] (vm): authenc(hmac(sha256-generic),cbc(aes-generic))"));
        assert!(
            text.contains("1. no ESP in this kernel (CONFIG_INET_ESP); use --vm\n2. openvpn failed: exit 1")
        );
        assert!(text.contains("kernel 6.1.0-test"), "{text}");
        assert!(text.contains("median of 3 × 4.0 MB, vm: 1.0 MB"));
    }

    #[test]
    fn a_too_short_transfer_warning_reaches_the_markdown_table() {
        let text = render(&fixture::warned());
        let first_table: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("| backend"))
            .take_while(|l| l.starts_with('|'))
            .collect();
        // The baseline's mark stands under every column, as its figure does.
        assert_eq!(
            first_table[2],
            "| plain (line rate) | 1100.0 ⚠1 | 1100.0 ⚠1 | 1100.0 ⚠1 | 1100.0 ⚠1 | 1100.0 ⚠1 | 1100.0 ⚠1 | 1100.0 ⚠1 |"
        );
        assert!(
            first_table[4]
                .starts_with("| userspace [auto] | 310.0 ⚠1 | 311.0 | 312.0 | 313.0 | 314.0 | 315.0 ⚠2 |"),
            "{text}"
        );
        let warnings = text.split("#### Warnings\n\n").nth(1).unwrap();
        assert!(
            warnings.starts_with(&format!(
                "* ⚠1 plain (line rate), userspace [auto] (128): {}\n* ⚠2 userspace [auto] (256+HMAC): aes-generic was raised",
                fixture::TOO_SHORT
            )),
            "{text}"
        );
        // Evidence stays in the JSON; the row note keeps its place under Notes.
        assert!(!text.contains(fixture::EVIDENCE), "{text}");
        assert!(
            text.contains("* openvpn: default kernel drivers only: a test"),
            "{text}"
        );
        // Only the headline table is marked.
        assert!(!text.contains("300.0–320.0 ⚠"), "{text}");
        assert!(!render(&fixture::report()).contains("⚠"));
    }

    #[test]
    fn ceilings_have_a_table_and_missing_ones_their_reason() {
        let text = render(&fixture::report());
        let section = text.split("#### % of the crypto ceiling").nth(1).unwrap();
        // userspace [auto]: 310 of a 1000 MB/s ceiling.
        assert!(
            section.contains("| userspace [auto] | 31 % of 1000.0 |"),
            "{text}"
        );
        assert!(section.contains("| openvpn | — no ceiling |"), "{text}");
        assert!(section.contains("| plain (line rate) | line rate |"), "{text}");
        assert!(section.contains("| userspace [soft] | not timed |"), "{text}");
        assert!(
            text.contains("* openvpn (128): openssl is not installed (apt-get install openssl)"),
            "{text}"
        );
        let mut bare = fixture::report();
        for row in &mut bare.rows {
            for cell in &mut row.cells {
                if let CellOutcome::Measured(m) = &mut cell.outcome {
                    m.ceiling = None;
                }
            }
        }
        bare.compute_percent_of_plain();
        assert!(!render(&bare).contains("crypto ceiling"));
    }

    #[test]
    fn udp_rows_get_a_packets_per_size_table_ndr_rates_and_latency_per_phase() {
        let text = render(&fixture::packets());
        let section = text.split("#### Packets/s per packet size").nth(1).unwrap();
        let table: Vec<&str> = section
            .lines()
            .skip_while(|l| !l.starts_with("| backend"))
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(table[0], "| backend | 64 B | 1400 B |", "{text}");
        assert_eq!(
            table[2],
            "| plain (line rate) | 510.0k pps, 0.00 % loss | 205.0k pps, 0.00 % loss |"
        );
        assert_eq!(
            table[3],
            "| userspace [auto] GCM-256 | 81.0k pps, 2.00 % loss | 41.0k pps, 0.50 % loss |"
        );
        assert!(table[4].starts_with("| plain (line rate) (vm) | 9."), "{text}");
        assert!(table[4].ends_with("| — |"), "no VM plain row at 1400 B: {text}");
        assert!(table[5].starts_with("| xfrm (vm) GCM-256 | 3."), "{text}");
        assert!(table[5].ends_with("| not run [1] |"), "{text}");
        assert_eq!(table.len(), 6);
        let ndr = text.split("#### Zero-loss rates").nth(1).unwrap();
        assert!(
            ndr.contains("| userspace [auto] GCM-256 | NDR 60.0k · PDR 0.5 % 70.0k (the generator's bound) | not searched |"),
            "{text}"
        );
        let latency = text.split("#### Latency (round trips, ms)").nth(1).unwrap();
        assert!(
            latency.contains("| plain (line rate) UDP 64 B | idle | 1000/1000 | 0.010 | 0.020 | 0.030 | 0.040 | 0.060 | 0.080 |"),
            "{text}"
        );
        // Every measured cell's two phases, and the reason of the one not run.
        assert_eq!(
            latency
                .lines()
                .filter(|l| l.starts_with("| ") && l.contains("/1000 |"))
                .count(),
            12
        );
        assert!(text.contains("1. failed: a test"), "{text}");
        assert!(
            text.contains("* UDP rows: datagrams of the row's inner packet size for 2 s a trial"),
            "{text}"
        );
        // A TCP-only report has none of it.
        let tcp = render(&fixture::report());
        assert!(!tcp.contains("Packets/s") && !tcp.contains("Latency"), "{tcp}");
    }

    #[test]
    fn a_phase_without_echoes_says_so_instead_of_zeros() {
        let mut r = fixture::packets();
        let phase = &mut r.rows[1].cells[0].latency.as_mut().unwrap().phases[1];
        phase.probes_received = 0;
        phase.p50_ms = f64::NAN;
        let text = render(&r);
        assert!(
            text.contains(
                "| userspace [auto] UDP 64 B GCM-256 | under UDP load | 0/1000 | no echo | no echo |"
            ),
            "{text}"
        );
        assert!(!text.to_lowercase().contains("nan"), "{text}");
    }
}
