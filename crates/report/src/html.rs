//! The matrix as one self-contained HTML page: the SVG chart inline, the MB/s table (each
//! cell with min–max, % of plain and CPU per side), why cells did not run, and the
//! conditions. No external scripts, styles or fonts. Written as well-formed XHTML, so an
//! XML parser reads it as well as a browser does.

use std::fmt::Write as _;

use model::matrix::{CellOutcome, MatrixReport};

use crate::{cell_for, conditions, fmt_rate, method, svg, RenderError};

/// Escapes text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin:1em 0}\
th,td{border:1px solid #bbb;padding:.3em .6em}\
td.num{text-align:right;font-variant-numeric:tabular-nums}\
td.not-run{color:#a33;text-align:center}\
small{color:#666}";

pub fn render(report: &MatrixReport) -> Result<String, RenderError> {
    let chart = svg::render(report)?;
    // Inline the chart without any XML prolog, which is not allowed inside a document.
    let chart = match chart.find("<svg") {
        Some(i) => &chart[i..],
        None => chart.as_str(),
    };
    let title = format!("ipsec-lab matrix: MB/s ({})", method(report));
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n\
         <meta charset=\"utf-8\"/>\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    let _ = writeln!(out, "<figure>\n{}\n</figure>", chart.trim());

    let mut reasons: Vec<String> = Vec::new();
    let _ = writeln!(out, "<h2>MB/s per backend and cipher configuration</h2>\n<table>");
    let _ = write!(out, "<thead><tr><th>backend</th>");
    for s in &report.suites {
        let _ = write!(
            out,
            "<th title=\"{}\">{}</th>",
            escape(&s.name()),
            escape(&s.short_label())
        );
    }
    let _ = writeln!(out, "</tr></thead>\n<tbody>");
    for row in &report.rows {
        let _ = write!(out, "<tr><th>{}</th>", escape(&row.label()));
        for s in &report.suites {
            match cell_for(row, *s).map(|c| &c.outcome) {
                Some(CellOutcome::Measured(m)) => {
                    let pct = m
                        .percent_of_plain
                        .map(|p| format!("{p:.1} % of plain"))
                        .unwrap_or_else(|| "no baseline".into());
                    let tunnel = m
                        .tunnel_cpu
                        .map(|t| format!(" · tunnel {:.0}/{:.0} %", t.a_percent, t.b_percent))
                        .unwrap_or_default();
                    let _ = write!(
                        out,
                        "<td class=\"num\">{}<br/><small>{}–{} · {} · cpu {:.0}/{:.0} %{}</small></td>",
                        fmt_rate(m.mb_per_s.median),
                        fmt_rate(m.mb_per_s.min),
                        fmt_rate(m.mb_per_s.max),
                        escape(&pct),
                        m.cpu.sender_percent.median,
                        m.cpu.receiver_percent.median,
                        tunnel,
                    );
                }
                Some(CellOutcome::NotRun { reason }) => {
                    let n = match reasons.iter().position(|r| r == reason) {
                        Some(i) => i + 1,
                        None => {
                            reasons.push(reason.clone());
                            reasons.len()
                        }
                    };
                    let _ = write!(
                        out,
                        "<td class=\"not-run\" title=\"{}\">not run [{n}]</td>",
                        escape(reason)
                    );
                }
                None => {
                    let _ = write!(out, "<td>—</td>");
                }
            }
        }
        let _ = writeln!(out, "</tr>");
    }
    let _ = writeln!(
        out,
        "</tbody>\n</table>\n<p><small>Each cell: median MB/s; min–max over the repeats · % of the plain \
         baseline in the same environment · CPU of sender/receiver in % of one core. The plain row is one \
         suite-independent baseline per environment.</small></p>"
    );
    if !reasons.is_empty() {
        let _ = writeln!(out, "<h2>Not run</h2>\n<ol>");
        for r in &reasons {
            let _ = writeln!(out, "<li>{}</li>", escape(r));
        }
        let _ = writeln!(out, "</ol>");
    }
    let served: Vec<String> = report
        .rows
        .iter()
        .filter_map(|row| {
            let mut d: Vec<String> = row
                .cells
                .iter()
                .filter_map(|c| c.measurement()?.served_by.clone())
                .collect();
            d.sort();
            d.dedup();
            (!d.is_empty()).then(|| format!("{}: {}", row.label(), d.join(", ")))
        })
        .chain(
            report
                .rows
                .iter()
                .flat_map(|r| r.notes.iter().map(move |n| format!("{}: {n}", r.label()))),
        )
        .chain(report.notes.iter().cloned())
        .collect();
    if !served.is_empty() {
        let _ = writeln!(out, "<h2>Drivers and notes</h2>\n<ul>");
        for s in served {
            let _ = writeln!(out, "<li>{}</li>", escape(&s));
        }
        let _ = writeln!(out, "</ul>");
    }
    let _ = writeln!(out, "<h2>Conditions</h2>\n<ul>");
    for line in conditions(report) {
        let _ = writeln!(out, "<li>{}</li>", escape(&line));
    }
    let _ = writeln!(out, "</ul>\n</body>\n</html>");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn page_is_well_formed_and_self_contained() {
        let html = render(&fixture::report()).unwrap();
        let doc = roxmltree::Document::parse_with_options(
            &html,
            roxmltree::ParsingOptions {
                allow_dtd: true,
                ..Default::default()
            },
        )
        .expect("well-formed XHTML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "html");
        assert_eq!(
            doc.descendants().filter(|n| n.tag_name().name() == "svg").count(),
            1,
            "chart inline"
        );
        for external in ["script", "link", "img"] {
            assert!(
                !doc.descendants().any(|n| n.tag_name().name() == external),
                "{external}"
            );
        }
        let rows: Vec<String> = doc
            .descendants()
            .filter(|n| n.tag_name().name() == "tbody")
            .flat_map(|t| t.children().filter(|n| n.is_element()))
            .map(|tr| {
                tr.first_element_child()
                    .unwrap()
                    .text()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        assert_eq!(rows.len(), 7);
        assert!(rows.contains(&"xfrm [aes-generic] (vm)".to_string()));
        assert!(html.contains("6.1.0-test") && html.contains("tcg"));
        assert!(html.contains("not run [1]"));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
