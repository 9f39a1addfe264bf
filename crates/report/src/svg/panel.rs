//! The panels: a report's rows grouped by environment, each on its own [`Scale`], and each
//! drawn as a section of bars (median, min–max line, value printed beside it), with cells
//! that did not run as text numbered by [`Footnotes`].

use std::collections::BTreeSet;

use plotters::prelude::*;
use plotters::style::text_anchor::HPos;

use model::matrix::{CellOutcome, MatrixReport, Measurement, Row};
use model::CipherSuite;

use super::draw::{
    chart_error, line, section, text_width, titled_text, wrap, write, Layout, RenderError, Section, MARK_GAP,
};
use super::scale::Scale;
use super::style::*;
use crate::shared::{cell_for, environment_summary, environment_title, fmt_rate, Warnings};

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
pub(super) struct Panel<'a> {
    environment: &'a str,
    title: String,
    emulated: bool,
    /// Each row with its index in the report (what warnings are numbered by).
    rows: Vec<(usize, &'a Row)>,
    /// None when nothing in the panel was measured.
    scale: Option<Scale>,
}

pub(super) fn panels<'a>(report: &'a MatrixReport) -> Vec<Panel<'a>> {
    let mut panels: Vec<Panel> = Vec::new();
    for (i, row) in report.rows.iter().enumerate() {
        let environment = row.key.environment.as_str();
        match panels.iter_mut().find(|p| p.environment == environment) {
            Some(p) => p.rows.push((i, row)),
            None => {
                let env = report.environments.get(environment);
                panels.push(Panel {
                    environment,
                    title: format!(
                        "{}: MB/s, median of {} × {}, over {}",
                        environment_title(environment, env),
                        report.repeat,
                        report.payload_of(environment),
                        report.family
                    ),
                    emulated: env.is_some_and(|e| e.is_emulated()),
                    rows: vec![(i, row)],
                    scale: None,
                })
            }
        }
    }
    for p in &mut panels {
        let top = p
            .rows
            .iter()
            .flat_map(|(_, r)| {
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

/// Why cells did not run, numbered as in the HTML page's table; `cited` are the numbers a
/// cell shows without its reason (listed under the chart).
pub(super) struct Footnotes<'a> {
    pub(super) reasons: Vec<&'a str>,
    pub(super) cited: BTreeSet<usize>,
}

impl Footnotes<'_> {
    fn number(&self, reason: &str) -> usize {
        self.reasons
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| i + 1)
    }

    pub(super) fn cite(&mut self, reason: &str) -> usize {
        let n = self.number(reason);
        self.cited.insert(n);
        n
    }
}

pub(super) fn panel_section(
    report: &MatrixReport,
    layout: &Layout,
    panel: &Panel,
    footnotes: &mut Footnotes<'_>,
    warnings: &Warnings,
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
    // Warning marks carry their warnings as a tooltip, which plotters cannot write: they
    // are added to its drawing afterwards.
    let mut marks = String::new();
    let mut drawn = section(id, class, layout.width, height, background, |area| {
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
        for (r, (index, row)) in panel.rows.iter().enumerate() {
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
                let cell = cell_for(row, *suite);
                let outcome = cell.map(|c| &c.outcome);
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
                let value = fmt_rate(f.median);
                write(area, BODY, &value, (reach + 4, middle))?;
                if let Some((mark, c)) = cell.and_then(|c| Some((warnings.mark(*index, c)?, c))) {
                    let x = reach + 4 + text_width(&value, BODY.px) + MARK_GAP;
                    let tooltip = warnings.texts_of(*index, c).join("\n");
                    marks.push_str(&titled_text(WARNING_TEXT, &mark, &tooltip, (x, middle)));
                }
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
    })?;
    drawn.svg.push_str(&marks);
    Ok(drawn)
}

/// An environment name as an XML id: letters, digits and `-` only.
fn id_safe(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}
