//! The fleet matrix for people (Markdown, an HTML heatmap) and spreadsheets (CSV). Rows are
//! the sending host (the client of `run --peer`), columns the receiving one (the server).
//! JSON is [`FleetReport`]'s serde form.

use std::fmt::Write as _;

use report::escape::{csv as csv_field, markdown as md, xml};
use report::fmt_rate;

use crate::matrix::{Cell, CellState, FleetReport, Standout, Table};

/// Marks a cell that stands out in a table; the list under the table says which way.
const STANDOUT_MARK: &str = "⚑";
/// Marks a failed cell; the list under the table gives its reason.
const FAILED_MARK: &str = "✗";

/// What a cell shows: the median (and % of the pair's plain), or its failure mark.
fn cell_text(cell: Option<&Cell>, failures: &mut Vec<String>) -> String {
    let Some(cell) = cell else {
        return "not planned".into();
    };
    match &cell.state {
        CellState::Measured {
            mb_per_s,
            percent_of_plain,
            standout,
            ..
        } => {
            let mut text = fmt_rate(mb_per_s.median);
            if let Some(p) = percent_of_plain {
                let _ = write!(text, " ({p:.0} %)");
            }
            if standout.is_flagged() {
                text.push_str(STANDOUT_MARK);
            }
            text
        }
        CellState::Failed { reason } => {
            failures.push(format!("{} → {}: {reason}", cell.client, cell.server));
            format!("{FAILED_MARK}{}", failures.len())
        }
    }
}

fn title(table: &Table) -> String {
    match table.backend.encrypts() {
        true => format!("{}: MB/s (% of the pair's plain line rate)", table.label()),
        false => format!("{}: MB/s (the line rate)", table.label()),
    }
}

/// Flagged pairs of a table, as lines.
fn standout_lines(table: &Table) -> Vec<String> {
    table
        .cells
        .iter()
        .filter_map(|c| match &c.state {
            CellState::Measured {
                standout,
                ratio_to_rest,
                ..
            } if standout.is_flagged() => Some(format!(
                "{} → {}: {}{}",
                c.client,
                c.server,
                standout.label(),
                ratio_to_rest
                    .map(|r| format!(" ({r:.2}× their median)"))
                    .unwrap_or_default()
            )),
            _ => None,
        })
        .collect()
}

/// Why no pair of a table could be judged, when that is the same for all of them.
fn inconclusive_reason(table: &Table) -> Option<String> {
    let mut reasons = table.cells.iter().filter_map(|c| match &c.state {
        CellState::Measured { standout, .. } => Some(standout),
        CellState::Failed { .. } => None,
    });
    let first = reasons.next()?;
    match first {
        Standout::Inconclusive(why) if reasons.all(|r| r == first) => Some(why.clone()),
        _ => None,
    }
}

/// The hosts table's columns, the same in every format.
const HOST_COLUMNS: [&str; 9] = [
    "host",
    "hostname",
    "kernel",
    "CPU",
    "CPUs",
    "crypto flags",
    "kernel drivers",
    "where",
    "ipsec-lab",
];

const NO_HOST_REPORT: &str = "no report came back from or about this host";

/// Each host and its row of the hosts table (unescaped, one text per [`HOST_COLUMNS`]);
/// None where no report came back.
fn host_rows(fleet: &FleetReport) -> impl Iterator<Item = (&str, Option<[String; 9]>)> {
    fleet.environments.iter().map(|h| {
        let row = h.environment.as_ref().map(|e| {
            let drivers: Vec<String> = e
                .kernel_drivers
                .iter()
                .map(|(a, d)| format!("{a}: {d}"))
                .collect();
            [
                h.host.clone(),
                e.hostname.clone(),
                e.kernel_release.clone(),
                e.cpu_model.clone(),
                e.cpus.to_string(),
                e.crypto_flags.join(" "),
                drivers.join(", "),
                e.virtualization.clone(),
                format!("{} {} {}", e.tool_version, e.build.commit, e.build.profile),
            ]
        });
        (h.host.as_str(), row)
    })
}

pub fn markdown(fleet: &FleetReport) -> String {
    let mut out = String::new();
    let pairs = fleet.tables.first().map(|t| t.cells.len()).unwrap_or(0);
    let _ = writeln!(
        out,
        "# ipsec-lab fleet: {} hosts, {pairs} pairs\n\nEach cell: the row's host sent to the column's host \
         (`run --peer`), {} × {} bytes, median MB/s.\n",
        fleet.hosts.len(),
        fleet.repeat,
        fleet.bytes
    );
    for table in &fleet.tables {
        let _ = writeln!(out, "## {}\n", md(&title(table)));
        let hosts: Vec<String> = fleet.hosts.iter().map(|h| md(h)).collect();
        let _ = writeln!(out, "| from \\ to | {} |", hosts.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(fleet.hosts.len()));
        let mut failures = Vec::new();
        for client in &fleet.hosts {
            let cells: Vec<String> = fleet
                .hosts
                .iter()
                .map(|server| match client == server {
                    true => "—".to_string(),
                    false => cell_text(table.cell(client, server), &mut failures),
                })
                .collect();
            let _ = writeln!(out, "| **{}** | {} |", md(client), cells.join(" | "));
        }
        out.push('\n');
        for (i, f) in failures.iter().enumerate() {
            let _ = writeln!(out, "* {FAILED_MARK}{} {}", i + 1, md(f));
        }
        for s in standout_lines(table) {
            let _ = writeln!(out, "* {STANDOUT_MARK} {}", md(&s));
        }
        if let Some(why) = inconclusive_reason(table) {
            let _ = writeln!(out, "* no pair judged: {}", md(&why));
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "A pair is flagged {STANDOUT_MARK} where the {:.0} % confidence interval of its repeats over the other \
         pairs' leaves out 1 and the medians differ by more than {:.1} % (as `ipsec-lab compare` judges).\n",
        fleet.confidence * 100.0,
        fleet.threshold * 100.0
    );
    let _ = writeln!(out, "## Hosts\n");
    let _ = writeln!(out, "| {} |", HOST_COLUMNS.join(" | "));
    let _ = writeln!(out, "|---|---|---|---|---:|---|---|---|---|");
    for (host, cells) in host_rows(fleet) {
        let _ = match cells {
            Some(cells) => {
                let cells: Vec<String> = cells.iter().map(|c| md(c)).collect();
                writeln!(out, "| {} |", cells.join(" | "))
            }
            None => writeln!(out, "| {} | {NO_HOST_REPORT} |||||||| ", md(host)),
        };
    }
    if !fleet.different_conditions.is_empty() {
        let _ = writeln!(
            out,
            "\n## Measured under different conditions (allowed; nothing flagged)\n"
        );
        for c in &fleet.different_conditions {
            let _ = writeln!(out, "* {}", md(&c.to_string()));
        }
    }
    out
}

/// One line per planned pair and measure.
pub fn csv(fleet: &FleetReport) -> String {
    let mut out = String::from(
        "backend,suite,client,server,status,mb_per_s_median,mb_per_s_min,mb_per_s_max,repeats,percent_of_plain,ratio_to_rest,standout,reason\n",
    );
    let num = |v: Option<f64>, decimals: usize| v.map(|v| report::fmt_field(v, decimals)).unwrap_or_default();
    for t in &fleet.tables {
        for c in &t.cells {
            let fields: Vec<String> = match &c.state {
                CellState::Measured {
                    mb_per_s,
                    percent_of_plain,
                    ratio_to_rest,
                    standout,
                    ..
                } => vec![
                    "measured".into(),
                    num(Some(mb_per_s.median), 3),
                    num(Some(mb_per_s.min), 3),
                    num(Some(mb_per_s.max), 3),
                    mb_per_s.n.to_string(),
                    num(*percent_of_plain, 2),
                    num(*ratio_to_rest, 4),
                    standout.label(),
                    String::new(),
                ],
                CellState::Failed { reason } => {
                    let mut f = vec!["failed".to_string()];
                    f.extend(std::iter::repeat_n(String::new(), 7));
                    f.push(reason.clone());
                    f
                }
            };
            let mut line = vec![
                t.backend.name().to_string(),
                t.suite.name(),
                c.client.clone(),
                c.server.clone(),
            ];
            line.extend(fields);
            let line: Vec<String> = line.iter().map(|f| csv_field(f)).collect();
            let _ = writeln!(out, "{}", line.join(","));
        }
    }
    out
}

/// A colour from red (the table's slowest cell) through yellow to green (its fastest).
fn heat(value: f64, min: f64, max: f64) -> String {
    let t = if max > min {
        (value - min) / (max - min)
    } else {
        1.0
    };
    format!("hsl({:.0}, 70%, 78%)", 120.0 * t.clamp(0.0, 1.0))
}

/// One self-contained page: a heatmap table per measure, the failures and flagged pairs
/// under it, the hosts' environments. Well-formed XHTML, so it parses as XML too.
pub fn html(fleet: &FleetReport) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <title>ipsec-lab fleet</title>\n<style>\nbody{font-family:sans-serif;margin:1.5em}\n\
         table{border-collapse:collapse;margin-bottom:0.5em}\ntd,th{border:1px solid #999;padding:0.35em 0.6em;text-align:right}\n\
         th{background:#eee}\ntd.self{background:#ddd;text-align:center}\n\
         td.failed{background:repeating-linear-gradient(45deg,#ccc,#ccc 4px,#eee 4px,#eee 8px);text-align:center}\n\
         td.flagged{outline:3px solid #b00;outline-offset:-3px}\n.small{font-size:85%;color:#444}\n</style>\n</head>\n<body>\n",
    );
    let _ = writeln!(
        out,
        "<h1>ipsec-lab fleet: {} hosts</h1>\n<p>Each cell: the row's host sent to the column's host \
         (<code>run --peer</code>), {} × {} bytes, median MB/s; colour from the table's slowest (red) to its \
         fastest (green) pair.</p>",
        fleet.hosts.len(),
        fleet.repeat,
        fleet.bytes
    );
    for table in &fleet.tables {
        let medians: Vec<f64> = table.cells.iter().filter_map(Cell::median).collect();
        let min = medians.iter().copied().fold(f64::INFINITY, f64::min);
        let max = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let _ = writeln!(
            out,
            "<h2>{}</h2>\n<table>\n<tr><th>from \\ to</th>",
            xml(&title(table))
        );
        for h in &fleet.hosts {
            let _ = write!(out, "<th>{}</th>", xml(h));
        }
        out.push_str("</tr>\n");
        let mut failures = Vec::new();
        for client in &fleet.hosts {
            let _ = write!(out, "<tr><th>{}</th>", xml(client));
            for server in &fleet.hosts {
                if client == server {
                    out.push_str("<td class=\"self\">—</td>");
                    continue;
                }
                let cell = table.cell(client, server);
                let text = cell_text(cell, &mut failures);
                match cell.map(|c| &c.state) {
                    Some(CellState::Measured {
                        mb_per_s, standout, ..
                    }) => {
                        let class = if standout.is_flagged() {
                            " class=\"flagged\""
                        } else {
                            ""
                        };
                        let _ = write!(
                            out,
                            "<td{class} style=\"background:{}\" title=\"{}\">{}</td>",
                            heat(mb_per_s.median, min, max),
                            xml(&format!(
                                "{client} → {server}: {} – {} MB/s over {} repeats; {}",
                                fmt_rate(mb_per_s.min),
                                fmt_rate(mb_per_s.max),
                                mb_per_s.n,
                                standout.label()
                            )),
                            xml(&text)
                        );
                    }
                    Some(CellState::Failed { reason }) => {
                        let _ = write!(
                            out,
                            "<td class=\"failed\" title=\"{}\">{}</td>",
                            xml(reason),
                            xml(&text)
                        );
                    }
                    None => {
                        let _ = write!(out, "<td class=\"self\">{}</td>", xml(&text));
                    }
                }
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
        let mut notes: Vec<String> = failures
            .iter()
            .enumerate()
            .map(|(i, f)| format!("{FAILED_MARK}{} {f}", i + 1))
            .collect();
        notes.extend(
            standout_lines(table)
                .into_iter()
                .map(|s| format!("{STANDOUT_MARK} {s}")),
        );
        if let Some(why) = inconclusive_reason(table) {
            notes.push(format!("no pair judged: {why}"));
        }
        if !notes.is_empty() {
            out.push_str("<ul class=\"small\">\n");
            for n in notes {
                let _ = writeln!(out, "<li>{}</li>", xml(&n));
            }
            out.push_str("</ul>\n");
        }
    }
    out.push_str("<h2>Hosts</h2>\n<table>\n<tr>");
    for c in HOST_COLUMNS {
        let _ = write!(out, "<th>{c}</th>");
    }
    out.push_str("</tr>\n");
    for (host, cells) in host_rows(fleet) {
        match cells {
            Some(cells) => {
                out.push_str("<tr>");
                for c in cells {
                    let _ = write!(out, "<td style=\"text-align:left\">{}</td>", xml(&c));
                }
                out.push_str("</tr>\n");
            }
            None => {
                let _ = writeln!(
                    out,
                    "<tr><td style=\"text-align:left\">{}</td><td colspan=\"8\" style=\"text-align:left\">{NO_HOST_REPORT}</td></tr>",
                    xml(host)
                );
            }
        }
    }
    out.push_str("</table>\n");
    if !fleet.different_conditions.is_empty() {
        out.push_str("<h2>Measured under different conditions (allowed; nothing flagged)</h2>\n<ul>\n");
        for c in &fleet.different_conditions {
            let _ = writeln!(out, "<li>{}</li>", xml(&c.to_string()));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::tests::{four_host_plan, outcomes};
    use crate::matrix::{build, Outcome};
    use report::CompareOptions;

    fn fleet_with_a_failure() -> FleetReport {
        let plan = four_host_plan();
        let mut outcomes = outcomes(&plan, ("h2", "h3"), 2.0);
        let (_, run) = plan
            .runs()
            .find(|(p, r)| p.client == "h4" && p.server == "h1" && r.backend.encrypts())
            .unwrap();
        outcomes.insert(
            run.report.clone(),
            Outcome::Failed("ipsec-lab: h1:5299 <refused> & gone".into()),
        );
        build(&plan, &outcomes, CompareOptions::default()).unwrap()
    }

    #[test]
    fn markdown_shows_the_matrix_the_failure_and_the_standout() {
        let text = markdown(&fleet_with_a_failure());
        assert!(text.contains("| from \\ to | h1 | h2 | h3 | h4 |"), "{text}");
        // h2's row of the userspace table: h2 → h3 is half the others and flagged.
        let userspace = text.split("## userspace").nth(1).unwrap();
        let h2 = userspace.lines().find(|l| l.starts_with("| **h2**")).unwrap();
        let cells: Vec<&str> = h2.split('|').map(str::trim).collect();
        assert_eq!(cells[3], "—");
        assert!(cells[4].ends_with("(10 %)⚑"), "{h2}");
        let h4 = userspace.lines().find(|l| l.starts_with("| **h4**")).unwrap();
        assert!(h4.contains("| ✗1 |"), "{h4}");
        assert!(
            // The host's words as Markdown text, its `<` and `>` not a tag.
            userspace.contains("* ✗1 h4 → h1: ipsec-lab: h1:5299 \\<refused\\> & gone"),
            "{userspace}"
        );
        assert!(
            userspace.contains("* ⚑ h2 → h3: slower than the rest (0.5"),
            "{userspace}"
        );
        assert!(
            text.contains("| h3 | h3 | 6.1.0-test | Test CPU | 2 | aes |"),
            "{text}"
        );
    }

    #[test]
    fn csv_has_a_line_per_cell_and_the_reason_quoted() {
        let text = csv(&fleet_with_a_failure());
        assert_eq!(text.lines().count(), 1 + 24);
        assert!(
            text.contains(
                "userspace,aes-256-cbc-hmac-sha256,h4,h1,failed,,,,,,,,ipsec-lab: h1:5299 <refused> & gone"
            ),
            "{text}"
        );
        let slow = text
            .lines()
            .find(|l| l.contains(",h2,h3,measured") && l.starts_with("userspace"))
            .unwrap();
        assert!(slow.contains(",slower than the rest,"), "{slow}");
    }

    #[test]
    fn html_is_a_heatmap_that_parses_and_escapes_the_reason() {
        let page = html(&fleet_with_a_failure());
        let options = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        };
        let doc = roxmltree::Document::parse_with_options(&page, options)
            .unwrap_or_else(|e| panic!("not well-formed XML: {e}"));
        let failed = doc
            .descendants()
            .find(|n| n.attribute("class") == Some("failed"))
            .unwrap();
        assert_eq!(
            failed.attribute("title"),
            Some("ipsec-lab: h1:5299 <refused> & gone")
        );
        assert_eq!(
            doc.descendants()
                .filter(|n| n.attribute("class") == Some("flagged"))
                .count(),
            1
        );
        assert!(page.contains("hsl(0, 70%, 78%)"), "the slowest cell is red");
        assert!(page.contains("hsl(120, 70%, 78%)"), "the fastest is green");
    }
}
