//! The matrix as one self-contained HTML page: the SVG chart inline, the MB/s table (each
//! cell with min–max, % of plain and CPU per side), why cells did not run, and the
//! conditions. No external scripts, styles or fonts. Written as well-formed XHTML, so an
//! XML parser reads it as well as a browser does.

use std::fmt::Write as _;

use model::matrix::{CellOutcome, MatrixReport};

use crate::escape::xml as escape;
use crate::packets::{
    fmt_ms, fmt_pct, fmt_pps, has_packets, latency_cells, packet_sizes, phase_has_echoes, point,
    rates_found_text, series, Point, LATENCY_EXPLAINED, PACKETS_EXPLAINED,
};
use crate::shared::{
    ceiling_text, cell_for, columns_explained, conditions, fmt_rate, has_ceilings, method,
    no_ceiling_reasons, not_run_reasons, row_and_report_notes, suite_explained, Warnings, CEILING_EXPLAINED,
    WARNING_MARK,
};
use crate::svg::{self, RenderError};

/// What the CPU figures of a cell mean; "tunnel a/b" is the lab's own term.
const CPU_EXPLAINED: &str = "cpu S/R: the sending and the receiving application, % of one core \
     (median over the repeats). tunnel a/b: where the tunnel runs in threads or processes of its own \
     (the userspace backend's tunnel threads, the openvpn processes), the CPU of those at end a (the \
     sender's side, which encrypts) and at end b (the receiver's side, which decrypts), % of one core \
     over their life, repeats included — beside the applications' figures, not part of them. A \
     single-threaded tunnel near 100 % is at the one-core limit. xfrm encrypts in the kernel, inside \
     the applications' own figures, so it has no tunnel figure.";

// The chart follows the window's width, but not below where its text stays legible: a
// narrower window scrolls it, as it does the table.
const STYLE: &str = "body{font-family:sans-serif;margin:1em 2vw;color:#222}\
h1{font-size:1.5em}\
figure{margin:1em 0;overflow-x:auto}\
figure svg{display:block;width:100%;min-width:900px;height:auto}\
div.table{overflow-x:auto}\
table{border-collapse:collapse;margin:1em 0}\
tr.emulated{background:#fff4e5}\
th,td{border:1px solid #bbb;padding:.3em .6em;white-space:nowrap}\
td.num{text-align:right;font-variant-numeric:tabular-nums}\
td.not-run{color:#a33;text-align:center}\
td.warned{background:#fff0e6}\
sup.warning{color:#b43c00;font-weight:bold}\
small{color:#666}";

pub fn render(report: &MatrixReport) -> Result<String, RenderError> {
    // The page's heading is the chart's title; the chart is as wide as the page.
    let chart = svg::chart(report, svg::Placement::Inline)?;
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

    let reasons = not_run_reasons(report);
    let warnings = Warnings::of(report);
    let _ = writeln!(
        out,
        "<h2>MB/s per backend and cipher configuration</h2>\n<div class=\"table\">\n<table>"
    );
    let _ = write!(out, "<thead><tr><th>backend</th>");
    for s in &report.suites {
        let _ = write!(
            out,
            "<th title=\"{}\">{}</th>",
            escape(&suite_explained(*s)),
            escape(&s.short_label())
        );
    }
    let _ = writeln!(out, "</tr></thead>\n<tbody>");
    for (i, row) in report.rows.iter().enumerate() {
        let emulated = report
            .environments
            .get(&row.key.environment)
            .is_some_and(|e| e.is_emulated());
        if emulated {
            let _ = write!(
                out,
                "<tr class=\"emulated\"><th>{}<br/><small>TCG-emulated: correctness, not speed</small></th>",
                escape(&row.label())
            );
        } else {
            let _ = write!(out, "<tr><th>{}</th>", escape(&row.label()));
        }
        for s in &report.suites {
            let cell = cell_for(row, *s);
            match cell.map(|c| &c.outcome) {
                Some(CellOutcome::Measured(m)) => {
                    // The mark shows, the warnings themselves are the cell's tooltip.
                    let (attributes, mark) = match cell.and_then(|c| Some((warnings.mark(i, c)?, c))) {
                        Some((mark, c)) => (
                            format!(
                                "class=\"num warned\" title=\"{}\"",
                                // A character reference: XML parsers fold a raw newline in an attribute.
                                warnings
                                    .texts_of(i, c)
                                    .into_iter()
                                    .map(escape)
                                    .collect::<Vec<_>>()
                                    .join("&#10;")
                            ),
                            format!(" <sup class=\"warning\">{}</sup>", escape(&mark)),
                        ),
                        None => ("class=\"num\"".to_string(), String::new()),
                    };
                    let pct = m
                        .percent_of_plain
                        .map(|p| format!("{p:.1} % of plain"))
                        .unwrap_or_else(|| "no baseline".into());
                    let tunnel = m
                        .tunnel_cpu
                        .map(|t| format!("<br/>tunnel a/b {:.0}/{:.0} %", t.a_percent, t.b_percent))
                        .unwrap_or_default();
                    let ceiling = match ceiling_text(m) {
                        Some(t) if m.percent_of_ceiling.is_some() => format!("<br/>{} ceiling", escape(&t)),
                        Some(t) => format!("<br/>{}", escape(&t)),
                        None => String::new(),
                    };
                    let _ = write!(
                        out,
                        "<td {attributes}>{}{mark}<br/><small>{}–{}<br/>{}{}<br/>cpu S/R {:.0}/{:.0} %{}</small></td>",
                        fmt_rate(m.mb_per_s.median),
                        fmt_rate(m.mb_per_s.min),
                        fmt_rate(m.mb_per_s.max),
                        escape(&pct),
                        ceiling,
                        m.cpu.sender_percent.median,
                        m.cpu.receiver_percent.median,
                        tunnel,
                    );
                }
                Some(CellOutcome::NotRun { reason }) => {
                    let n = reasons.iter().position(|r| r == reason).map_or(0, |i| i + 1);
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
        "</tbody>\n</table>\n</div>\n<p>Each cell: median MB/s; min–max over the repeats · % of the plain \
         baseline in the same environment · CPU. The plain row is one suite-independent baseline per \
         environment. Columns: {}.</p>\n<p>{}</p>",
        escape(&columns_explained(report)),
        escape(CPU_EXPLAINED)
    );
    if has_ceilings(report) {
        let _ = writeln!(
            out,
            "<p>“x % of y ceiling”: the cell's median as a share of its {} (y MB/s).</p>",
            escape(CEILING_EXPLAINED)
        );
    }
    packet_tables(&mut out, report, &reasons);
    for table in crate::shared::side_tables(report) {
        side_table(&mut out, table);
    }
    if !warnings.is_empty() {
        let _ = writeln!(
            out,
            "<h2>Warnings</h2>\n<p>A figure marked {WARNING_MARK}n has warning n (its cell's tooltip says it too): \
             read it with that caveat.</p>\n<ul class=\"warnings\">"
        );
        for line in warnings.lines() {
            let _ = writeln!(out, "<li>{}</li>", escape(&line));
        }
        let _ = writeln!(out, "</ul>");
    }
    let no_ceiling = no_ceiling_reasons(report);
    if !no_ceiling.is_empty() {
        let _ = writeln!(out, "<h2>No ceiling</h2>\n<ul>");
        for line in &no_ceiling {
            let _ = writeln!(out, "<li>{}</li>", escape(line));
        }
        let _ = writeln!(out, "</ul>");
    }
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
        .chain(row_and_report_notes(report))
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

/// Packets/s per size (a line per backend row and cipher, with the rates found) and the
/// round trips per cell and phase, as tables under the chart's panels.
fn packet_tables(out: &mut String, report: &MatrixReport, reasons: &[&str]) {
    if has_packets(report) {
        let sizes = packet_sizes(report);
        let _ = write!(
            out,
            "<h2>Packets/s per packet size</h2>\n<div class=\"table\">\n<table class=\"packets\">\n<thead><tr><th>backend</th>"
        );
        for size in &sizes {
            let _ = write!(out, "<th>{}</th>", escape(&size.to_string()));
        }
        let _ = writeln!(out, "</tr></thead>\n<tbody>");
        for s in series(report) {
            let emulated = report
                .environments
                .get(s.environment)
                .is_some_and(|e| e.is_emulated());
            let _ = match emulated {
                true => write!(
                    out,
                    "<tr class=\"emulated\"><th>{}<br/><small>TCG-emulated: correctness, not speed</small></th>",
                    escape(&s.label)
                ),
                false => write!(out, "<tr><th>{}</th>", escape(&s.label)),
            };
            for (_, at) in &s.points {
                let _ = match point(at.map(|(_, c)| c)) {
                    Point::Measured(p) => {
                        let found = match p.rates_found.is_empty() {
                            true => String::new(),
                            false => format!("<br/>{}", escape(&rates_found_text(p))),
                        };
                        write!(
                            out,
                            "<td class=\"num\">{} pps<br/><small>{} loss · {}–{} pps{found}</small></td>",
                            fmt_pps(p.received_pps.median),
                            fmt_pct(p.loss_pct.median),
                            fmt_pps(p.received_pps.min),
                            fmt_pps(p.received_pps.max),
                        )
                    }
                    Point::NotRun(reason) => {
                        let n = reasons.iter().position(|r| *r == reason).map_or(0, |i| i + 1);
                        write!(
                            out,
                            "<td class=\"not-run\" title=\"{}\">not run [{n}]</td>",
                            escape(reason)
                        )
                    }
                    Point::NoFigures => write!(out, "<td>no packet figures</td>"),
                    Point::Missing => write!(out, "<td>—</td>"),
                };
            }
            let _ = writeln!(out, "</tr>");
        }
        let _ = writeln!(
            out,
            "</tbody>\n</table>\n</div>\n<p>{}.</p>",
            escape(PACKETS_EXPLAINED)
        );
    }
    let cells = latency_cells(report);
    if cells.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h2>Latency (round trips, ms)</h2>\n<div class=\"table\">\n<table class=\"latency\">\n<thead><tr>\
         <th>cell</th><th>phase</th><th>probes</th><th>min</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th>\
         <th>max</th></tr></thead>\n<tbody>"
    );
    for c in &cells {
        let emulated = report
            .environments
            .get(c.environment)
            .is_some_and(|e| e.is_emulated());
        for p in &c.latency.phases {
            let class = if emulated { " class=\"emulated\"" } else { "" };
            let _ = write!(
                out,
                "<tr{class}><th>{}</th><td>{}</td><td class=\"num\">{}/{}</td>",
                escape(&c.label),
                escape(&p.name),
                p.probes_received,
                p.probes_sent
            );
            for v in [p.min_ms, p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms] {
                let _ = match phase_has_echoes(p) {
                    true => write!(out, "<td class=\"num\">{}</td>", fmt_ms(v)),
                    false => write!(out, "<td>no echo</td>"),
                };
            }
            let _ = writeln!(out, "</tr>");
        }
    }
    let _ = writeln!(
        out,
        "</tbody>\n</table>\n</div>\n<p>{}.</p>",
        escape(LATENCY_EXPLAINED)
    );
}

/// A side table (rekeys, time to first packet): a row per backend, a column per cipher.
fn side_table(out: &mut String, table: crate::shared::SideTable) {
    let _ = write!(
        out,
        "<h2>{}</h2>\n<div class=\"table\">\n<table class=\"{}\">\n<thead><tr><th>backend</th>",
        escape(&table.title),
        table.id
    );
    for c in &table.columns {
        let _ = write!(out, "<th>{}</th>", escape(c));
    }
    let _ = writeln!(out, "</tr></thead>\n<tbody>");
    for (label, cells) in table.rows {
        let _ = write!(out, "<tr><th>{}</th>", escape(&label));
        for c in cells {
            let _ = write!(out, "<td>{}</td>", escape(&c));
        }
        let _ = writeln!(out, "</tr>");
    }
    let _ = writeln!(
        out,
        "</tbody>\n</table>\n</div>\n<p>{}.</p>",
        escape(table.explained)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;
    use crate::shared::Warnings;

    /// The page parsed as XHTML (its doctype allowed), or the test fails.
    fn well_formed(html: &str) -> roxmltree::Document<'_> {
        roxmltree::Document::parse_with_options(
            html,
            roxmltree::ParsingOptions {
                allow_dtd: true,
                ..Default::default()
            },
        )
        .expect("well-formed XHTML")
    }

    #[test]
    fn page_is_well_formed_and_self_contained() {
        let html = render(&fixture::report()).unwrap();
        let doc = well_formed(&html);
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

    fn parse(html: &str) -> roxmltree::Document<'_> {
        let options = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        };
        roxmltree::Document::parse_with_options(html, options).expect("well-formed XHTML")
    }

    fn elements<'a, 'i>(doc: &'a roxmltree::Document<'i>, name: &str) -> Vec<roxmltree::Node<'a, 'i>> {
        doc.descendants()
            .filter(|n| n.tag_name().name() == name)
            .collect()
    }

    #[test]
    fn page_has_one_title_and_heading_and_a_chart_as_wide_as_the_window() {
        let html = render(&fixture::report()).unwrap();
        let doc = parse(&html);
        let (titles, headings) = (elements(&doc, "title"), elements(&doc, "h1"));
        assert_eq!((titles.len(), headings.len()), (1, 1));
        assert_eq!(titles[0].text(), headings[0].text());
        let svg = elements(&doc, "svg")[0];
        assert_eq!(svg.attribute("width"), Some("100%"));
        assert!(svg.attribute("viewBox").is_some());
        assert!(svg.attribute("height").is_none());
        let chart_text: Vec<&str> = svg
            .descendants()
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        assert!(!chart_text.contains(&svg::TITLE), "a second title in the chart");
    }

    #[test]
    fn chart_and_table_number_a_reason_alike() {
        let html = render(&fixture::report()).unwrap();
        let doc = parse(&html);
        let cell = elements(&doc, "td")
            .into_iter()
            .find(|td| td.attribute("title") == Some("openvpn failed: exit 1"))
            .unwrap();
        assert_eq!(cell.text(), Some("not run [2]"));
        let chart = elements(&doc, "svg")[0];
        assert!(chart
            .descendants()
            .filter_map(|n| n.text())
            .any(|t| t.trim() == "not run [2]: openvpn failed: exit 1"));
    }

    #[test]
    fn page_explains_tunnel_a_b_and_the_column_names() {
        let html = render(&fixture::report()).unwrap();
        let doc = parse(&html);
        let text: String = doc
            .descendants()
            .filter(|n| n.tag_name().name() == "p")
            .flat_map(|p| p.descendants().filter_map(|n| n.text()))
            .collect();
        for needle in [
            "tunnel a/b: ",
            "end a (the sender's side, which encrypts)",
            "end b (the receiver's side, which decrypts)",
            "256+HMAC = AES-256-CBC with HMAC-SHA256",
        ] {
            assert!(text.contains(needle), "{needle} missing in {text}");
        }
        // The openvpn row has a tunnel figure, and it is called what the sentence explains.
        assert!(html.contains("tunnel a/b 97/88 %"), "{html}");
    }

    #[test]
    fn cells_show_their_share_of_the_ceiling_and_missing_ones_why() {
        let html = render(&fixture::report()).unwrap();
        let doc = parse(&html);
        let cells: Vec<String> = elements(&doc, "td")
            .iter()
            .map(|td| td.descendants().filter_map(|n| n.text()).collect::<String>())
            .collect();
        assert!(
            cells.iter().any(|c| c.contains("31 % of 1000.0 ceiling")),
            "{cells:?}"
        );
        assert!(
            cells.iter().any(|c| c.contains("4.1 % of plain— no ceiling")),
            "{cells:?}"
        );
        assert!(html.contains("<h2>No ceiling</h2>"), "{html}");
        assert!(html.contains("openssl is not installed"), "{html}");
    }

    #[test]
    fn a_too_short_transfer_warning_reaches_the_html_table() {
        let html = render(&fixture::warned()).unwrap();
        let doc = parse(&html);
        let warned: Vec<roxmltree::Node> = elements(&doc, "td")
            .into_iter()
            .filter(|td| td.attribute("class") == Some("num warned"))
            .collect();
        // The baseline under each of the seven columns, and two userspace [auto] cells.
        assert_eq!(warned.len(), 7 + 2, "{html}");
        for td in &warned {
            let mark = td
                .children()
                .find(|n| n.has_tag_name("sup"))
                .and_then(|s| s.text())
                .unwrap();
            assert!(mark.starts_with('⚠'), "{mark}");
            let title = td.attribute("title").unwrap();
            match mark {
                "⚠1" => assert_eq!(title, fixture::TOO_SHORT),
                _ => assert!(title.contains("was raised for this row"), "{title}"),
            }
        }
        let list: Vec<String> = elements(&doc, "ul")
            .into_iter()
            .filter(|u| u.attribute("class") == Some("warnings"))
            .flat_map(|u| u.children().filter(|n| n.has_tag_name("li")))
            .map(|li| li.text().unwrap_or_default().to_string())
            .collect();
        assert_eq!(list, Warnings::of(&fixture::warned()).lines());
        // The chart inline carries the same marks, its list is the page's.
        let chart = elements(&doc, "svg")[0];
        assert!(chart
            .descendants()
            .any(|n| n.has_tag_name("text") && n.text() == Some("⚠1")));
        assert!(!html.contains(fixture::EVIDENCE));
        assert!(!render(&fixture::report()).unwrap().contains("⚠"));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn udp_rows_and_latency_get_tables_and_the_page_stays_well_formed() {
        let html = render(&fixture::packets()).unwrap();
        let doc = well_formed(&html);
        let table = |class: &str| {
            doc.descendants()
                .find(|n| n.tag_name().name() == "table" && n.attribute("class") == Some(class))
                .unwrap_or_else(|| panic!("no {class} table"))
        };
        let rows = |t: roxmltree::Node| -> Vec<String> {
            t.descendants()
                .filter(|n| n.tag_name().name() == "tr")
                .map(|tr| {
                    tr.descendants()
                        .filter(|n| n.is_text())
                        .filter_map(|n| n.text())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect()
        };
        let packets = rows(table("packets"));
        assert_eq!(packets[0], "backend 64 B 1400 B");
        assert!(
            packets[2]
                .starts_with("userspace [auto] GCM-256 81.0k pps 2.00 % loss · 80.0k–82.0k pps NDR 60.0k"),
            "{packets:?}"
        );
        assert!(
            packets[4].contains("TCG-emulated") && packets[4].ends_with("not run [1]"),
            "{packets:?}"
        );
        let latency = rows(table("latency"));
        assert_eq!(latency.len(), 1 + 12);
        assert!(
            latency.contains(
                &"plain (line rate) UDP 64 B idle 1000/1000 0.010 0.020 0.030 0.040 0.060 0.080".to_string()
            ),
            "{latency:?}"
        );
        // The chart's panels are inline too.
        for id in ["packets-host", "packets-vm", "latency-host", "latency-vm"] {
            assert!(doc.descendants().any(|n| n.attribute("id") == Some(id)), "{id}");
        }
    }
}
