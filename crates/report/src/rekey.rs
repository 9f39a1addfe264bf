//! A rekey run (`run --rekey-every … --json FILE`) as `ipsec-lab report FILE` renders it: a
//! row per rekey (when, the switch, the longest gap, the dip, the datagrams around it) and
//! the flow away from the rekeys to judge them by, in Markdown, CSV, the SVG timeline
//! ([`crate::svg::rekey`]) or one HTML page with both. Text from the report is escaped for
//! the sink it goes to.

use std::fmt::Write as _;

use model::rekey::{RekeyMark, RekeyReport};
use model::RunReport;

use crate::escape;
use crate::svg::RenderError;
use crate::Format;

const COLUMNS: [&str; 9] = [
    "transfer",
    "rekey",
    "at (s)",
    "switch (ms)",
    "longest gap (ms)",
    "lowest 10 ms (% of median)",
    "datagrams sent",
    "lost",
    "reordered / duplicated",
];

fn cells(transfer: u32, number: usize, m: &RekeyMark) -> [String; 9] {
    let d = m.datagrams;
    [
        transfer.to_string(),
        number.to_string(),
        format!("{:.2}", m.at_s),
        m.took_ms.map_or(String::new(), |t| format!("{t:.1}")),
        format!("{:.0}", m.gap_ms),
        m.dip.map_or(String::new(), |d| format!("{:.0}", d * 100.0)),
        d.map_or(String::new(), |d| d.sent.to_string()),
        d.map_or(String::new(), |d| d.lost.to_string()),
        d.map_or(String::new(), |d| format!("{} / {}", d.reordered, d.duplicates)),
    ]
}

/// Every rekey's cells, numbered across the transfers as the chart numbers them.
fn rows(r: &RekeyReport) -> Vec<[String; 9]> {
    let mut n = 0;
    r.runs
        .iter()
        .flat_map(|run| run.rekeys.iter().map(move |m| (run.transfer, m)))
        .map(|(t, m)| {
            n += 1;
            cells(t, n, m)
        })
        .collect()
}

/// The run rendered as `format`; None where the run has no rekeys to show.
pub fn render(run: &RunReport, format: Format) -> Option<Result<String, RenderError>> {
    let r = run.rekey.as_ref()?;
    Some(Ok(match format {
        Format::Markdown => markdown(run, r),
        Format::Csv => csv(r),
        Format::Svg => return crate::svg::rekey::render(run),
        Format::Html => match crate::svg::rekey::render(run)? {
            Ok(svg) => html(run, r, &svg),
            Err(e) => return Some(Err(e)),
        },
    }))
}

fn markdown(run: &RunReport, r: &RekeyReport) -> String {
    let mut out = format!(
        "# Rekey under load: {}\n\n",
        escape::markdown(&crate::run::rekey::title(run, r))
    );
    let _ = writeln!(out, "| {} |", COLUMNS.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(COLUMNS.len()));
    for row in rows(r) {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
    for run in &r.runs {
        let _ = writeln!(
            out,
            "Transfer {} away from the rekeys: longest gap {:.0} ms, lowest 10 ms {}.  ",
            run.transfer,
            run.baseline_gap_ms,
            run.baseline_dip.map_or("not measured".into(), |d| format!(
                "at {:.0} % of the median",
                d * 100.0
            ))
        );
    }
    let _ = writeln!(out, "\nWhat a rekey does: {}\n", escape::markdown(&r.how));
    let _ = writeln!(
        out,
        "Measured on {}.",
        escape::markdown(&run.environment.describe())
    );
    for note in &run.notes {
        let kind = if crate::is_warning(note) {
            "warning"
        } else {
            "note"
        };
        let _ = writeln!(out, "\n- {kind}: {}", escape::markdown(note));
    }
    out
}

fn csv(r: &RekeyReport) -> String {
    let mut out =
        "transfer,rekey,at_s,switch_ms,gap_ms,dip_percent,datagrams_sent,lost,reordered,duplicates\n"
            .to_string();
    let mut n = 0;
    for run in &r.runs {
        for m in &run.rekeys {
            n += 1;
            let d = m.datagrams;
            let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
            let _ = writeln!(
                out,
                "{},{n},{:.3},{},{:.1},{},{},{},{},{}",
                run.transfer,
                m.at_s,
                m.took_ms.map_or(String::new(), |t| format!("{t:.3}")),
                m.gap_ms,
                m.dip.map_or(String::new(), |d| format!("{:.1}", d * 100.0)),
                opt(d.map(|d| d.sent)),
                opt(d.map(|d| d.lost)),
                opt(d.map(|d| d.reordered)),
                opt(d.map(|d| d.duplicates)),
            );
        }
    }
    out
}

fn html(run: &RunReport, r: &RekeyReport, svg: &str) -> String {
    let title = escape::xml(&crate::run::rekey::title(run, r));
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\">\
         <head><meta charset=\"utf-8\"/><title>ipsec-lab rekey: {title}</title>\
         <style>body{{font-family:sans-serif;margin:1em 2vw}}table{{border-collapse:collapse}}\
         th,td{{border:1px solid #bbb;padding:.3em .6em}}figure svg{{width:100%;height:auto}}</style></head><body>\
         <h1>Rekey under load: {title}</h1><figure>{svg}</figure><table><tr>"
    );
    for c in COLUMNS {
        let _ = write!(out, "<th>{}</th>", escape::xml(c));
    }
    out.push_str("</tr>");
    for row in rows(r) {
        out.push_str("<tr>");
        for c in row {
            let _ = write!(out, "<td>{}</td>", escape::xml(&c));
        }
        out.push_str("</tr>");
    }
    let _ = write!(
        out,
        "</table><p>What a rekey does: {}</p><ul>",
        escape::xml(&r.how)
    );
    for note in &run.notes {
        let _ = write!(out, "<li>{}</li>", escape::xml(note));
    }
    out.push_str("</ul></body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Markdown and CSV rows match the marks; the HTML page parses as XML with the chart in it.
    #[test]
    fn every_format_has_a_row_per_rekey() {
        let run = crate::svg::rekey::tests_support::run_with_rekeys("host", "h|x<y>");
        let md = render(&run, Format::Markdown).unwrap().unwrap();
        assert_eq!(md.lines().filter(|l| l.starts_with("| 1 |")).count(), 2, "{md}");
        assert!(md.contains("h\\|x"), "{md}");
        let csv = render(&run, Format::Csv).unwrap().unwrap();
        assert_eq!(csv.lines().nth(1), Some("1,1,1.000,2.000,12.0,50.0,,,,"));
        let html = render(&run, Format::Html).unwrap().unwrap();
        let options = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        };
        let doc = roxmltree::Document::parse_with_options(&html, options).expect("well-formed XHTML");
        assert_eq!(doc.descendants().filter(|n| n.has_tag_name("tr")).count(), 3);
        assert!(doc.descendants().any(|n| n.has_tag_name("svg")));
    }
}
