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

use std::collections::BTreeSet;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use model::matrix::{CellOutcome, MatrixReport, Measurement, Row};
use model::CipherSuite;

use crate::{
    cell_for, columns_explained, environment_summary, environment_title, fmt_rate, not_run_reasons,
    RenderError,
};

/// The title of the standalone chart (the HTML page has its own heading instead).
pub const TITLE: &str = "ipsec-lab matrix: MB/s per backend and cipher configuration";
/// The marking of a panel whose rows ran on an emulated CPU.
pub const EMULATED_MARK: &str = "EMULATED (TCG) — correctness only, not speed";
/// The axis description, once per panel.
pub const AXIS_LABEL: &str = "MB/s, linear from 0";

const MARGIN: i32 = 12;
/// Length of the axis (the longest bar) in every column.
const BAR_AREA: i32 = 100;
const ROW_HEIGHT: i32 = 22;
const BAR_HEIGHT: i32 = 14;
const LINE: i32 = 16;

const INK: RGBColor = RGBColor(34, 34, 34);
const MUTED: RGBColor = RGBColor(100, 100, 100);
const RULE: RGBColor = RGBColor(200, 200, 200);
/// Bars of measured rows on real hardware.
pub const HOST_BAR: RGBColor = RGBColor(70, 120, 180);
/// Bars of the unencrypted baseline.
pub const BASELINE_BAR: RGBColor = RGBColor(160, 160, 160);
/// Bars of rows on an emulated CPU: another colour than any real measurement.
pub const EMULATED_BAR: RGBColor = RGBColor(215, 150, 80);
const EMULATED_BACKGROUND: RGBColor = RGBColor(255, 244, 229);
const WARNING: RGBColor = RGBColor(180, 60, 0);
const NOT_RUN: RGBColor = RGBColor(170, 51, 51);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A text style: size in px as it appears in the SVG, weight, colour, alignment.
#[derive(Clone, Copy)]
struct Type {
    px: f64,
    weight: FontStyle,
    colour: RGBColor,
    align: HPos,
}

const BODY: Type = Type {
    px: 12.0,
    weight: FontStyle::Normal,
    colour: INK,
    align: HPos::Left,
};
const SMALL: Type = Type {
    px: 11.0,
    colour: MUTED,
    ..BODY
};
const BOLD: Type = Type {
    weight: FontStyle::Bold,
    ..BODY
};
const HEADING: Type = Type { px: 14.0, ..BOLD };

fn chart_error<E: std::fmt::Debug>(e: E) -> RenderError {
    RenderError::Chart(format!("{e:?}"))
}

/// Width of `text` in DejaVu Sans-like fonts, generously: SVG cannot measure text.
fn text_width(text: &str, px: f64) -> i32 {
    (text.chars().count() as f64 * px * 0.58).ceil() as i32
}

/// `text` in lines no wider than `width` px, broken between its ` · `-separated items
/// where they fit whole, else between words.
fn wrap(text: &str, width: i32, px: f64) -> Vec<String> {
    let fits = |s: &str| text_width(s, px) <= width;
    let mut lines: Vec<String> = Vec::new();
    for (i, item) in text.split(" · ").enumerate() {
        if let Some(line) = lines
            .last_mut()
            .filter(|l| i > 0 && fits(&format!("{l} · {item}")))
        {
            line.push_str(" · ");
            line.push_str(item);
            continue;
        }
        let first = lines.len();
        for word in item.split(' ') {
            let own = lines.len() > first;
            match lines.last_mut() {
                Some(line) if own && fits(&format!("{line} {word}")) => {
                    line.push(' ');
                    line.push_str(word);
                }
                _ => lines.push(word.to_string()),
            }
        }
    }
    lines
}

/// Writes one line of text centred vertically on `y`.
fn write(area: &Area, t: Type, text: &str, (x, y): (i32, i32)) -> Result<(), RenderError> {
    // plotters divides the size by 1.24 when it writes the SVG; undo that so `px` is the
    // size in the file (the values used round-trip exactly).
    let style = FontDesc::new(FontFamily::SansSerif, t.px * 1.24, t.weight)
        .color(&t.colour)
        .pos(Pos::new(t.align, VPos::Center));
    area.draw(&Text::new(text, (x, y), style)).map_err(chart_error)
}

fn line(area: &Area, from: (i32, i32), to: (i32, i32), colour: RGBColor) -> Result<(), RenderError> {
    area.draw(&PathElement::new(vec![from, to], colour.stroke_width(1)))
        .map_err(chart_error)
}

/// Linear axis from 0 to `max` in `step`s: 2–4 round ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scale {
    max: f64,
    step: f64,
}

impl Scale {
    fn covering(top: f64) -> Scale {
        let top = if top.is_finite() && top > 0.0 { top } else { 1.0 };
        let raw = top / 3.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .into_iter()
            .map(|f| f * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * magnitude);
        Scale {
            max: step * (top / step).ceil(),
            step,
        }
    }

    fn px(&self, v: f64) -> i32 {
        (v.clamp(0.0, self.max) / self.max * BAR_AREA as f64).round() as i32
    }

    fn ticks(&self) -> Vec<(f64, String)> {
        let decimals = (0..4)
            .find(|d| {
                let scaled = self.step * 10f64.powi(*d);
                (scaled - scaled.round()).abs() < 1e-9
            })
            .unwrap_or(3) as usize;
        let n = (self.max / self.step).round() as usize;
        (0..=n)
            .map(|i| {
                let v = i as f64 * self.step;
                (v, format!("{v:.decimals$}"))
            })
            .collect()
    }
}

/// The figures a bar is drawn from, when they can be drawn (a report written before
/// untimed transfers were refused may hold inf or NaN).
struct Figures {
    median: f64,
    range: Option<(f64, f64)>,
}

fn figures(m: &Measurement) -> Option<Figures> {
    let s = m.mb_per_s;
    let ok = |v: f64| v.is_finite() && v >= 0.0;
    ok(s.median).then_some(Figures {
        median: s.median,
        range: (ok(s.min) && ok(s.max)).then_some((s.min, s.max)),
    })
}

/// The rows of one environment, drawn on their own axis.
struct Panel<'a> {
    environment: &'a str,
    title: String,
    emulated: bool,
    rows: Vec<&'a Row>,
    /// None when nothing in the panel was measured.
    scale: Option<Scale>,
}

fn panels<'a>(report: &'a MatrixReport) -> Vec<Panel<'a>> {
    let mut panels: Vec<Panel> = Vec::new();
    for row in &report.rows {
        let environment = row.key.environment.as_str();
        match panels.iter_mut().find(|p| p.environment == environment) {
            Some(p) => p.rows.push(row),
            None => {
                let env = report.environments.get(environment);
                panels.push(Panel {
                    environment,
                    title: format!(
                        "{}: MB/s, median of {} × {}",
                        environment_title(environment, env),
                        report.repeat,
                        report.payload_of(environment)
                    ),
                    emulated: env.is_some_and(|e| e.is_emulated()),
                    rows: vec![row],
                    scale: None,
                })
            }
        }
    }
    for p in &mut panels {
        let top = p
            .rows
            .iter()
            .flat_map(|r| {
                report
                    .suites
                    .iter()
                    .filter_map(|s| cell_for(r, *s)?.measurement())
            })
            .filter_map(figures)
            .map(|f| f.range.map_or(f.median, |(_, max)| max.max(f.median)))
            .reduce(f64::max);
        p.scale = top.map(Scale::covering);
    }
    panels
}

/// What a line of the chart shows: bars per cell, or one sentence when the whole row did
/// not run for one reason.
enum Line<'a> {
    Cells,
    NotRun(&'a str),
}

fn line_of<'a>(row: &'a Row, suites: &[CipherSuite]) -> Line<'a> {
    let reasons: Vec<&str> = suites
        .iter()
        .filter_map(|s| match &cell_for(row, *s)?.outcome {
            CellOutcome::NotRun { reason } => Some(reason.as_str()),
            CellOutcome::Measured(_) => None,
        })
        .collect();
    match reasons.first() {
        Some(first) if reasons.len() == suites.len() && reasons.iter().all(|r| r == first) => {
            Line::NotRun(first)
        }
        _ => Line::Cells,
    }
}

/// Measures shared by every section.
struct Layout {
    width: i32,
    label_width: i32,
    column_width: i32,
    columns: Vec<String>,
}

impl Layout {
    fn of(report: &MatrixReport) -> Layout {
        let label_width = report
            .rows
            .iter()
            .map(|r| text_width(&r.label(), BODY.px))
            .chain([text_width(AXIS_LABEL, SMALL.px)])
            .max()
            .unwrap_or(0)
            .max(120)
            + 16;
        let value_width = report
            .rows
            .iter()
            .flat_map(|r| r.cells.iter().filter_map(|c| c.measurement()))
            .map(|m| text_width(&fmt_rate(m.mb_per_s.median), BODY.px))
            .max()
            .unwrap_or(0)
            .max(40);
        let columns: Vec<String> = report.suites.iter().map(|s| s.short_label()).collect();
        let column_width = (BAR_AREA + value_width + 12).max(
            columns
                .iter()
                .map(|c| text_width(c, BOLD.px) + 12)
                .max()
                .unwrap_or(0),
        );
        Layout {
            width: 2 * MARGIN + label_width + columns.len().max(1) as i32 * column_width,
            label_width,
            column_width,
            columns,
        }
    }

    fn column_x(&self, i: usize) -> i32 {
        MARGIN + self.label_width + i as i32 * self.column_width
    }

    fn text_room(&self) -> i32 {
        self.width - 2 * MARGIN
    }
}

/// Why cells did not run, numbered as in the HTML page's table; `cited` are the numbers a
/// cell shows without its reason (listed under the chart).
struct Footnotes<'a> {
    reasons: Vec<&'a str>,
    cited: BTreeSet<usize>,
}

impl Footnotes<'_> {
    fn number(&self, reason: &str) -> usize {
        self.reasons
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| i + 1)
    }

    fn cite(&mut self, reason: &str) -> usize {
        let n = self.number(reason);
        self.cited.insert(n);
        n
    }
}

/// One drawn section: the `<g>` it goes in and its height.
struct Section {
    id: String,
    class: &'static str,
    height: i32,
    svg: String,
}

fn section(
    id: impl Into<String>,
    class: &'static str,
    width: i32,
    height: i32,
    background: RGBColor,
    draw: impl FnOnce(&Area) -> Result<(), RenderError>,
) -> Result<Section, RenderError> {
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (width as u32, height as u32)).into_drawing_area();
        area.fill(&background).map_err(chart_error)?;
        draw(&area)?;
        area.present().map_err(chart_error)?;
    }
    // Keep what plotters drew, not its `<svg>` element: the sections share one.
    let body = svg
        .split_once('>')
        .and_then(|(_, rest)| rest.rsplit_once("</svg>"))
        .map_or(String::new(), |(body, _)| body.trim_start().to_string());
    Ok(Section {
        id: id.into(),
        class,
        height,
        svg: body,
    })
}

/// Lines of text, each in its style, wrapped to the chart's width, as a section.
fn text_section(id: &str, layout: &Layout, lines: &[(Type, String)]) -> Result<Section, RenderError> {
    let wrapped: Vec<(Type, String)> = lines
        .iter()
        .flat_map(|(t, text)| wrap(text, layout.text_room(), t.px).into_iter().map(|l| (*t, l)))
        .collect();
    let height = wrapped.len() as i32 * LINE + 8;
    section(id, "text", layout.width, height, WHITE, |area| {
        for (i, (t, text)) in wrapped.iter().enumerate() {
            write(area, *t, text, (MARGIN, 4 + i as i32 * LINE + LINE / 2))?;
        }
        Ok(())
    })
}

fn panel_section(
    report: &MatrixReport,
    layout: &Layout,
    panel: &Panel,
    footnotes: &mut Footnotes<'_>,
) -> Result<Section, RenderError> {
    let conditions = report
        .environments
        .get(panel.environment)
        .map(|e| wrap(&environment_summary(e), layout.text_room(), SMALL.px))
        .unwrap_or_default();
    let banner = if panel.emulated { 30 } else { 0 };
    let heading = banner + 6 + LINE + conditions.len() as i32 * LINE + 6;
    let rows_top = heading + ROW_HEIGHT;
    let axis_y = rows_top + panel.rows.len() as i32 * ROW_HEIGHT + 2;
    let height = axis_y + if panel.scale.is_some() { 28 } else { 8 };
    let background = if panel.emulated {
        EMULATED_BACKGROUND
    } else {
        WHITE
    };
    let class = if panel.emulated { "panel emulated" } else { "panel" };
    let id = format!("panel-{}", id_safe(panel.environment));
    section(id, class, layout.width, height, background, |area| {
        if panel.emulated {
            area.draw(&Rectangle::new(
                [(0, 0), (layout.width, banner - 4)],
                WARNING.filled(),
            ))
            .map_err(chart_error)?;
            let mark = Type {
                colour: WHITE,
                ..HEADING
            };
            write(area, mark, EMULATED_MARK, (MARGIN, (banner - 4) / 2))?;
        }
        write(area, HEADING, &panel.title, (MARGIN, banner + 6 + LINE / 2))?;
        for (i, text) in conditions.iter().enumerate() {
            write(
                area,
                SMALL,
                text,
                (MARGIN, banner + 6 + LINE * (i as i32 + 1) + LINE / 2),
            )?;
        }
        for (i, name) in layout.columns.iter().enumerate() {
            write(area, BOLD, name, (layout.column_x(i), heading + ROW_HEIGHT / 2))?;
        }
        if panel.scale.is_some() {
            for i in 0..layout.columns.len() {
                let x = layout.column_x(i);
                line(area, (x, rows_top), (x, axis_y), RULE)?;
            }
        }
        for (r, row) in panel.rows.iter().enumerate() {
            let y = rows_top + r as i32 * ROW_HEIGHT;
            let middle = y + ROW_HEIGHT / 2;
            write(area, BODY, &row.label(), (MARGIN, middle))?;
            let not_run = Type {
                colour: NOT_RUN,
                weight: FontStyle::Italic,
                ..BODY
            };
            if let Line::NotRun(reason) = line_of(row, &report.suites) {
                let room = layout.columns.len() as i32 * layout.column_width;
                let inline = format!("not run [{}]: {reason}", footnotes.number(reason));
                let text = if text_width(&inline, BODY.px) <= room {
                    inline
                } else {
                    format!("not run in any column [{}]", footnotes.cite(reason))
                };
                write(area, not_run, &text, (layout.column_x(0), middle))?;
                continue;
            }
            let colour = if row.is_baseline() {
                BASELINE_BAR
            } else if panel.emulated {
                EMULATED_BAR
            } else {
                HOST_BAR
            };
            for (i, suite) in report.suites.iter().enumerate() {
                let x = layout.column_x(i);
                let outcome = cell_for(row, *suite).map(|c| &c.outcome);
                let measured = match outcome {
                    Some(CellOutcome::Measured(m)) => m,
                    Some(CellOutcome::NotRun { reason }) => {
                        let text = format!("not run [{}]", footnotes.cite(reason));
                        write(area, not_run, &text, (x + 2, middle))?;
                        continue;
                    }
                    None => {
                        write(area, SMALL, "—", (x + 2, middle))?;
                        continue;
                    }
                };
                let (Some(f), Some(scale)) = (figures(measured), panel.scale) else {
                    write(area, not_run, "untimed", (x + 2, middle))?;
                    continue;
                };
                let end = x + scale.px(f.median);
                let top = middle - BAR_HEIGHT / 2;
                area.draw(&Rectangle::new(
                    [(x, top), (end, top + BAR_HEIGHT)],
                    colour.filled(),
                ))
                .map_err(chart_error)?;
                let mut reach = end;
                if let Some((min, max)) = f.range {
                    let (lo, hi) = (x + scale.px(min), x + scale.px(max));
                    line(area, (lo, middle), (hi, middle), INK)?;
                    for cap in [lo, hi] {
                        line(area, (cap, middle - 4), (cap, middle + 4), INK)?;
                    }
                    reach = reach.max(hi);
                }
                write(area, BODY, &fmt_rate(f.median), (reach + 4, middle))?;
            }
        }
        if let Some(scale) = panel.scale {
            write(area, SMALL, AXIS_LABEL, (MARGIN, axis_y + 12))?;
            let tick = Type {
                px: 10.0,
                align: HPos::Center,
                ..SMALL
            };
            for i in 0..layout.columns.len() {
                let x = layout.column_x(i);
                line(area, (x, axis_y), (x + BAR_AREA, axis_y), MUTED)?;
                for (v, label) in scale.ticks() {
                    let tx = x + scale.px(v);
                    line(area, (tx, axis_y), (tx, axis_y + 3), MUTED)?;
                    write(area, tick, &label, (tx, axis_y + 12))?;
                }
            }
        }
        Ok(())
    })
}

/// An environment name as an XML id: letters, digits and `-` only.
fn id_safe(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Where the chart goes: a file of its own (fixed size, with its title), or inside the
/// HTML page (as wide as the page, under the page's heading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Standalone,
    Inline,
}

pub fn render(report: &MatrixReport) -> Result<String, RenderError> {
    chart(report, Placement::Standalone)
}

pub fn chart(report: &MatrixReport, placement: Placement) -> Result<String, RenderError> {
    let layout = Layout::of(report);
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
    let mut footnotes = Footnotes {
        reasons: not_run_reasons(report),
        cited: BTreeSet::new(),
    };
    let panels = panels(report);
    for panel in &panels {
        sections.push(panel_section(report, &layout, panel, &mut footnotes)?);
    }
    let mut notes: Vec<(Type, String)> = footnotes
        .cited
        .iter()
        .map(|n| (SMALL, format!("not run [{n}]: {}", footnotes.reasons[n - 1])))
        .collect();
    if panels.is_empty() {
        notes.push((BODY, "no rows in this report".into()));
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

    let height: i32 = sections.iter().map(|s| s.height).sum();
    let size = match placement {
        Placement::Standalone => format!("width=\"{}\" height=\"{height}\"", layout.width),
        Placement::Inline => "width=\"100%\"".to_string(),
    };
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {height}\" {size}>\n",
        layout.width
    );
    let mut y = 0;
    for s in sections {
        out.push_str(&format!(
            "<g id=\"{}\" class=\"{}\" transform=\"translate(0,{y})\">\n{}</g>\n",
            s.id, s.class, s.svg
        ));
        y += s.height;
    }
    out.push_str("</svg>\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;
    use model::matrix::{RowKey, RowVariant, HOST};
    use model::Backend;

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

    #[test]
    fn wrap_keeps_items_whole_where_they_fit() {
        let width = text_width("aaaa bbbb · cccc", 10.0);
        assert_eq!(
            wrap("aaaa bbbb · cccc · dddd eeee", width, 10.0),
            ["aaaa bbbb · cccc", "dddd eeee"]
        );
        assert_eq!(
            wrap("aaaa bbbb cccc dddd", width, 10.0),
            ["aaaa bbbb cccc", "dddd"]
        );
    }

    #[test]
    fn scales_have_round_ticks_from_zero() {
        assert_eq!(
            Scale::covering(1200.0),
            Scale {
                max: 1500.0,
                step: 500.0
            }
        );
        assert_eq!(
            Scale::covering(505.6),
            Scale {
                max: 600.0,
                step: 200.0
            }
        );
        assert_eq!(
            Scale::covering(3.39)
                .ticks()
                .iter()
                .map(|t| t.1.as_str())
                .collect::<Vec<_>>(),
            ["0", "2", "4"]
        );
        let s = Scale::covering(0.7);
        assert_eq!(s.ticks().first().unwrap().1, "0.00");
        assert_eq!(s.px(s.max), BAR_AREA);
        assert_eq!(s.px(0.0), 0);
    }
}
