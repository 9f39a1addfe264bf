//! The matrix as an SVG chart a reader takes in at a glance: the table's shape (one line
//! per row, one column per cipher configuration) with a bar in every measured cell.
//!
//! * One panel per environment, each with its own axis: a TCG-emulated VM's rows (a few
//!   MB/s, a fact about the emulator) never share a scale with the host's, and their panel
//!   is marked "EMULATED (TCG) — correctness only, not speed".
//! * Bars are linear from zero, one scale for the whole panel, so a bar half as long is
//!   half as fast. A log scale was tried: its bars start at an arbitrary decade and their
//!   lengths mean nothing; with the emulated rows in a panel of their own, a panel's rows
//!   differ by ~20×, which a linear scale shows truthfully.
//! * Every value is printed beside its bar (median; a thin line spans min–max); a cell that
//!   did not run says so in text, never as a zero bar.
//! * A caption says what each column name stands for, each panel its conditions (kernel,
//!   CPU, AES flags, drivers, host/VM, payload, repeats).
//!
//! Drawn with plotters' SVG backend, one drawing per section; the sections are stacked in
//! one `<svg>` with a `viewBox`, each in a `<g>` whose id names it (`panel-host`,
//! `panel-vm`, …), so the chart scales to any width and its parts can be found by tools.
//!
//! Parts: `style` (labels, sizes, colours, type), `draw` (text, lines, the shared grid,
//! sections), `scale` (a panel's axis), `panel` (rows grouped by environment, drawn as
//! bars); this file stacks the sections into the chart.

mod draw;
mod packets;
mod panel;
pub mod rekey;
mod scale;
mod style;

use std::collections::BTreeSet;

use model::matrix::MatrixReport;

use crate::shared::{columns_explained, not_run_reasons, row_and_report_notes, Warnings};
use draw::{text_section, Layout};
pub use draw::{Placement, RenderError};
use panel::{panel_section, panels, Footnotes};
use style::{Type, BODY, HEADING, SMALL, WARNING_TEXT};
pub use style::{
    AXIS_LABEL, BASELINE_BAR, EMULATED_BAR, EMULATED_MARK, HOST_BAR, LATENCY_AXIS_LABEL, PACKETS_AXIS_LABEL,
    TITLE,
};

pub fn render(report: &MatrixReport) -> Result<String, RenderError> {
    chart(report, Placement::Standalone)
}

pub fn chart(report: &MatrixReport, placement: Placement) -> Result<String, RenderError> {
    let warnings = Warnings::of(report);
    let mut layout = Layout::of(report, &warnings);
    let has_packets = crate::packets::has_packets(report);
    let latency = !crate::packets::latency_cells(report).is_empty();
    // The packet and latency panels are as wide as their columns and one CDF plot need.
    if has_packets {
        layout.width = layout.width.max(packets::packets_width(report));
    }
    if latency {
        layout.width = layout.width.max(packets::latency_width());
    }
    let mut sections = Vec::new();
    if placement == Placement::Standalone {
        sections.push(text_section("title", &layout, &[(HEADING, TITLE.to_string())])?);
    }
    sections.push(text_section(
        "caption",
        &layout,
        &[
            (BODY, format!("Columns: {}.", columns_explained(report))),
            (
                SMALL,
                "Bars: median MB/s of the repeats (10^6 bytes/s, every transfer verified), from 0 on one \
                 linear scale per panel; the thin line spans min–max. plain (line rate) = the same transfer \
                 without encryption, one baseline per environment, repeated under every column."
                    .to_string(),
            ),
        ],
    )?);
    let mut caption = Vec::new();
    if has_packets {
        caption.push((SMALL, format!("{}.", crate::packets::PACKETS_EXPLAINED)));
    }
    if latency {
        caption.push((SMALL, format!("{}.", crate::packets::LATENCY_EXPLAINED)));
    }
    if !caption.is_empty() {
        sections.push(text_section("caption-packets", &layout, &caption)?);
    }
    let mut footnotes = Footnotes {
        reasons: not_run_reasons(report),
        cited: BTreeSet::new(),
    };
    let panels = panels(report);
    for panel in &panels {
        sections.push(panel_section(report, &layout, panel, &mut footnotes, &warnings)?);
    }
    if has_packets {
        sections.extend(packets::packets_sections(
            report,
            &layout,
            &mut footnotes,
            &warnings,
        )?);
    }
    if latency {
        sections.extend(packets::latency_sections(report, &layout)?);
    }
    for table in crate::shared::side_tables(report) {
        let mut lines = vec![(HEADING, table.title), (SMALL, format!("{}.", table.explained))];
        for (label, cells) in table.rows {
            let each: Vec<String> = table
                .columns
                .iter()
                .zip(&cells)
                .map(|(c, t)| format!("{c}: {t}"))
                .collect();
            lines.push((BODY, format!("{label} — {}", each.join(" · "))));
        }
        sections.push(text_section(table.id, &layout, &lines)?);
    }
    let mut notes: Vec<(Type, String)> = footnotes
        .cited
        .iter()
        .map(|n| (SMALL, format!("not run [{n}]: {}", footnotes.reasons[n - 1])))
        .collect();
    if panels.is_empty() {
        notes.push((BODY, "no rows in this report".into()));
    }
    // Inline, the page lists them under the chart's marks.
    if placement == Placement::Standalone {
        notes.extend(warnings.lines().into_iter().map(|l| (WARNING_TEXT, l)));
        notes.extend(row_and_report_notes(report).into_iter().map(|l| (SMALL, l)));
    }
    if report.interrupted {
        notes.push((
            SMALL,
            "the sweep was interrupted (Ctrl-C): cells not reached are marked not run".into(),
        ));
    }
    if !notes.is_empty() {
        sections.push(text_section("notes", &layout, &notes)?);
    }

    Ok(draw::stack(sections, layout.width, placement))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;
    use crate::shared::{cell_for, fmt_rate};
    use model::matrix::{CellOutcome, RowKey, RowVariant, HOST};
    use model::Backend;
    use plotters::style::RGBColor;

    fn texts(node: roxmltree::Node) -> Vec<String> {
        node.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or_default().trim().to_string())
            .collect()
    }

    fn group<'a, 'i>(doc: &'a roxmltree::Document<'i>, id: &str) -> roxmltree::Node<'a, 'i> {
        doc.descendants()
            .find(|n| n.has_tag_name("g") && n.attribute("id") == Some(id))
            .unwrap_or_else(|| panic!("no group {id}"))
    }

    /// Filled rectangles of a bar colour: the bars.
    fn bars(node: roxmltree::Node) -> usize {
        let fills =
            [HOST_BAR, BASELINE_BAR, EMULATED_BAR].map(|RGBColor(r, g, b)| format!("#{r:02X}{g:02X}{b:02X}"));
        node.descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter(|n| {
                n.attribute("fill")
                    .is_some_and(|f| fills.iter().any(|c| c.eq_ignore_ascii_case(f)))
            })
            .count()
    }

    fn measured_cells(r: &MatrixReport, environment: &str) -> Vec<String> {
        r.rows
            .iter()
            .filter(|row| row.key.environment == environment)
            .flat_map(|row| r.suites.iter().filter_map(|s| cell_for(row, *s)?.measurement()))
            .map(|m| fmt_rate(m.mb_per_s.median))
            .collect()
    }

    #[test]
    fn emulated_rows_get_a_marked_panel_and_axis_of_their_own() {
        let r = fixture::report();
        let svg = render(&r).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        let (host, vm) = (group(&doc, "panel-host"), group(&doc, "panel-vm"));
        let (host_text, vm_text) = (texts(host), texts(vm));
        assert_eq!(vm.attribute("class"), Some("panel emulated"));
        assert!(vm_text.contains(&EMULATED_MARK.to_string()), "{vm_text:?}");
        assert!(!host_text
            .iter()
            .any(|t| t.contains("EMULATED") || t.ends_with("(vm)")));
        assert!(vm_text.contains(&"xfrm [aes-generic] (vm)".to_string()));
        // Each panel has its own axis: the host's reaches its 1200 MB/s, the VM's its 110.
        for (text, end) in [(&host_text, "1500"), (&vm_text, "150")] {
            assert_eq!(text.iter().filter(|t| *t == AXIS_LABEL).count(), 1, "{text:?}");
            assert!(text.contains(&end.to_string()), "{end} missing in {text:?}");
        }
        assert!(!vm_text.contains(&"1500".to_string()));
        // The bars of each panel are its own cells only.
        assert_eq!(bars(host), measured_cells(&r, HOST).len());
        assert_eq!(bars(vm), measured_cells(&r, "vm").len());
        assert_eq!(bars(doc.root_element()), bars(host) + bars(vm));
    }

    #[test]
    fn every_measured_value_is_printed_and_not_run_cells_are_text() {
        let r = fixture::report();
        let svg = render(&r).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        for environment in [HOST, "vm"] {
            let text = texts(group(&doc, &format!("panel-{environment}")));
            for value in measured_cells(&r, environment) {
                assert!(text.contains(&value), "{value} missing in {text:?}");
            }
        }
        let host = texts(group(&doc, "panel-host"));
        // xfrm on the host: one sentence for the whole row; openvpn GCM: a numbered cell.
        assert!(host.contains(&"not run [1]: no ESP in this kernel (CONFIG_INET_ESP); use --vm".to_string()));
        assert!(host.contains(&"not run [2]".to_string()), "{host:?}");
        // Numbered as in the HTML table; only the reason not said in its cell is listed.
        let notes = texts(group(&doc, "notes"));
        assert_eq!(notes, ["not run [2]: openvpn failed: exit 1"]);
        assert!(!svg.contains("inf") && !svg.contains("NaN"));
    }

    #[test]
    fn an_untimed_cell_is_text_not_a_bar() {
        let mut r = fixture::report();
        if let CellOutcome::Measured(m) = &mut r.rows[2].cells[0].outcome {
            m.mb_per_s.median = f64::INFINITY;
            m.mb_per_s.max = f64::INFINITY;
        }
        let svg = render(&r).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let host = group(&doc, "panel-host");
        assert!(texts(host).contains(&"untimed".to_string()));
        assert_eq!(bars(host), measured_cells(&r, HOST).len() - 1);
        assert!(!svg.contains("inf"));
    }

    #[test]
    fn a_too_short_transfer_warning_reaches_the_svg_chart() {
        let r = fixture::warned();
        let svg = render(&r).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        let host = group(&doc, "panel-host");
        let marks: Vec<(String, String)> = host
            .descendants()
            .filter(|n| n.has_tag_name("g") && n.attribute("class") == Some("warning"))
            .map(|g| {
                let title = g.children().find(|n| n.has_tag_name("title")).unwrap();
                let text = g.children().find(|n| n.has_tag_name("text")).unwrap();
                (
                    text.text().unwrap().to_string(),
                    title.text().unwrap().to_string(),
                )
            })
            .collect();
        // Seven baseline bars, userspace [auto] 128 and 256+HMAC: a visible mark each, the
        // warning its tooltip.
        assert_eq!(marks.len(), 9, "{marks:?}");
        assert_eq!(
            marks
                .iter()
                .filter(|(m, t)| m == "⚠1" && t == fixture::TOO_SHORT)
                .count(),
            8
        );
        assert!(marks.iter().any(|(m, t)| m == "⚠2" && t.contains("was raised")));
        // Under the chart: each warning with its cells, then the rows' and report's notes.
        let notes = texts(group(&doc, "notes")).join(" ");
        assert!(
            notes.contains("⚠1 plain (line rate), userspace [auto] (128): a transfer lasted"),
            "{notes}"
        );
        assert!(
            notes.contains("openvpn: default kernel drivers only: a test"),
            "{notes}"
        );
        assert!(!svg.contains(fixture::EVIDENCE));
    }

    #[test]
    fn caption_explains_every_column_name() {
        let svg = render(&fixture::report()).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let caption = texts(group(&doc, "caption")).join(" ");
        for explained in [
            "128 = AES-128-CBC",
            "192+HMAC = AES-192-CBC with HMAC-SHA256",
            "256+HMAC = AES-256-CBC with HMAC-SHA256",
            "GCM-256 = AES-256-GCM",
        ] {
            assert!(caption.contains(explained), "{explained} missing in {caption}");
        }
    }

    #[test]
    fn conditions_are_readable_without_host_host() {
        let svg = render(&fixture::report()).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let all = texts(doc.root_element()).join("\n");
        assert!(!all.contains("host: host"), "{all}");
        let host = texts(group(&doc, "panel-host")).join(" ");
        for needle in [
            "host: MB/s, median of 3 × 4.0 MB",
            "kernel 6.1.0-test",
            "Test CPU (2 CPUs)",
            "crypto flags [aes avx2]",
            "cbc(aes)=cbc-aes-aesni",
        ] {
            assert!(host.contains(needle), "{needle} missing in {host}");
        }
        let vm = texts(group(&doc, "panel-vm")).join(" ");
        assert!(vm.contains("vm (tcg: emulated, speeds not representative): MB/s, median of 3 × 1.0 MB"));
    }

    #[test]
    fn the_chart_and_the_conditions_name_the_address_family() {
        let mut r = fixture::report();
        let svg = render(&r).unwrap();
        assert!(svg.contains("median of 3 × 4.0 MB, over IPv4"), "{svg}");
        r.family = model::Family::Ipv6;
        let svg = render(&r).unwrap();
        assert!(svg.contains("median of 3 × 4.0 MB, over IPv6"), "{svg}");
        let conditions = crate::conditions(&r).join("\n");
        assert!(
            conditions.contains("over IPv6 (2001:2::/48, RFC 5180)"),
            "{conditions}"
        );
    }

    #[test]
    fn a_single_row_chart_has_one_axis_label_and_one_row_label() {
        let mut r = fixture::report();
        r.rows
            .retain(|row| row.key == RowKey::new(Backend::Plain, RowVariant::Default, HOST));
        let svg = render(&r).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let text = texts(doc.root_element());
        assert_eq!(text.iter().filter(|t| *t == AXIS_LABEL).count(), 1, "{text:?}");
        assert_eq!(text.iter().filter(|t| *t == "plain (line rate)").count(), 1);
        assert_eq!(text.iter().filter(|t| *t == TITLE).count(), 1);
        assert_eq!(bars(doc.root_element()), r.suites.len());
    }

    #[test]
    fn inline_chart_follows_the_page_width() {
        let r = fixture::report();
        let svg = chart(&r, Placement::Inline).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let root = doc.root_element();
        assert_eq!(root.attribute("width"), Some("100%"));
        assert!(root.attribute("height").is_none());
        assert!(root.attribute("viewBox").is_some_and(|v| v.starts_with("0 0 ")));
        assert!(
            !texts(root).contains(&TITLE.to_string()),
            "the page has its own heading"
        );
    }

    #[test]
    fn chart_is_one_svg_element() {
        let svg = render(&fixture::report()).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(doc.descendants().filter(|n| n.has_tag_name("svg")).count(), 1);
    }

    #[test]
    fn an_empty_report_still_draws() {
        let mut r = fixture::report();
        r.rows.clear();
        let svg = render(&r).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        assert!(texts(doc.root_element()).contains(&"no rows in this report".to_string()));
    }

    /// Paths drawn with a phase colour's 2 px stroke: the CDF curves.
    fn curves(node: roxmltree::Node) -> usize {
        node.descendants()
            .filter(|n| n.has_tag_name("polyline") || n.has_tag_name("path"))
            .filter(|n| n.attribute("stroke-width") == Some("2"))
            .count()
    }

    #[test]
    fn packets_per_size_and_latency_cdfs_get_panels_per_environment() {
        let r = fixture::packets();
        let svg = render(&r).unwrap();
        if let Ok(path) = std::env::var("IPSEC_LAB_WRITE_SVG") {
            std::fs::write(path, &svg).unwrap();
        }
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        let host = group(&doc, "packets-host");
        let text = texts(host);
        assert_eq!(host.attribute("class"), Some("packets"));
        for needle in [
            "64 B",
            "1400 B",
            "plain (line rate)",
            "userspace [auto] GCM-256",
            PACKETS_AXIS_LABEL,
        ] {
            assert!(text.contains(&needle.to_string()), "{needle} missing in {text:?}");
        }
        assert!(text.contains(&"81.0k · 2.00 %".to_string()), "{text:?}");
        assert!(text.contains(&"205.0k · 0.00 %".to_string()), "{text:?}");
        // Two series × two sizes, a bar each.
        assert_eq!(bars(host), 4);
        // The emulated VM's panel is set apart, with its not-run cell as text.
        let vm = group(&doc, "packets-vm");
        assert_eq!(vm.attribute("class"), Some("packets emulated"));
        let vm_text = texts(vm);
        assert!(vm_text.contains(&EMULATED_MARK.to_string()), "{vm_text:?}");
        assert!(vm_text.contains(&"not run [1]".to_string()), "{vm_text:?}");
        assert_eq!(bars(vm), 2);
        // A CDF per measured cell with a curve per phase, each plot titled by its cell.
        let latency = group(&doc, "latency-host");
        let text = texts(latency);
        assert!(
            text.contains(&"userspace [auto] UDP 64 B GCM-256".to_string()),
            "{text:?}"
        );
        assert!(text.contains(&LATENCY_AXIS_LABEL.to_string()));
        assert!(
            text.iter()
                .any(|t| t.starts_with("under UDP load: p50 3.75 · p99 15.0 · max 30.0 ms")),
            "{text:?}"
        );
        assert_eq!(curves(latency), 4 * 2);
        let vm_latency = group(&doc, "latency-vm");
        assert_eq!(vm_latency.attribute("class"), Some("latency emulated"));
        assert_eq!(curves(vm_latency), 2 * 2);
        // The log axis reaches the slowest round trip (the VM's 80 ms max): ticks to 100.
        assert!(texts(vm_latency).contains(&"100".to_string()));
        let caption = texts(group(&doc, "caption-packets")).join(" ");
        assert!(
            caption.contains("NDR/PDR") && caption.contains("CDF"),
            "{caption}"
        );
        let lower = svg.to_lowercase();
        assert!(!lower.contains("nan") && !lower.contains("inf"), "no inf/NaN");
        // A TCP-only chart has none of these panels.
        let tcp = render(&fixture::report()).unwrap();
        assert!(!tcp.contains("packets-host") && !tcp.contains("latency-host"));
    }

    #[test]
    fn a_phase_without_echoes_draws_no_curve_and_nan_never_reaches_the_chart() {
        let mut r = fixture::packets();
        let cell = &mut r.rows[1].cells[0];
        let phases = &mut cell.latency.as_mut().unwrap().phases;
        phases[1].probes_received = 0;
        phases[0].cdf[2].1 = f64::NAN;
        cell.packets.as_mut().unwrap().received_pps.median = f64::INFINITY;
        let svg = render(&r).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let latency = group(&doc, "latency-host");
        assert_eq!(curves(latency), 4 * 2 - 1);
        assert!(texts(latency)
            .iter()
            .any(|t| t == "under UDP load: no echo (1000 probes sent)"));
        assert!(texts(group(&doc, "packets-host")).contains(&"untimed".to_string()));
        let lower = svg.to_lowercase();
        assert!(!lower.contains("nan") && !lower.contains("inf"), "no inf/NaN");
    }
}
