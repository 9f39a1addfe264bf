//! The packet and latency sections of the chart, one panel per environment each (an
//! emulated VM's tinted and marked, as the MB/s panels are):
//!
//! * packets/s per packet size: a line per backend row and cipher, a column per packet
//!   size, a bar of the delivered packets/s (one linear scale from 0 per panel), its value
//!   and loss printed beside it, and a dark tick at the NDR where the cell searched one;
//! * a latency CDF per cell: x the round trip in ms on a log scale shared by the panel's
//!   plots, y the fraction of probes at or below it, a curve per phase.

use plotters::prelude::*;

use model::matrix::MatrixReport;
use model::packets::LatencyPhase;

use super::draw::{
    chart_error, line, section, text_width, titled_text, write, Layout, RenderError, Section, MARK_GAP,
};
use super::panel::Footnotes;
use super::scale::Scale;
use super::style::*;
use crate::packets::{
    fmt_pct, fmt_pps, latency_cells, packet_sizes, phase_has_echoes, phase_text, point, series, LatencyCell,
    Point, Series,
};
use crate::shared::{environment_title, Warnings};

/// The environments of `items`, in order of first appearance, each with whether it is emulated.
fn environments<'a>(report: &MatrixReport, names: impl Iterator<Item = &'a str>) -> Vec<(&'a str, bool)> {
    let mut out: Vec<(&str, bool)> = Vec::new();
    for name in names {
        if !out.iter().any(|(n, _)| *n == name) {
            let emulated = report.environments.get(name).is_some_and(|e| e.is_emulated());
            out.push((name, emulated));
        }
    }
    out
}

/// The tinted background and the banner of an emulated panel; returns the banner's height.
fn banner(area: &super::draw::Area, width: i32, emulated: bool) -> Result<i32, RenderError> {
    if !emulated {
        return Ok(0);
    }
    let height = 30;
    area.draw(&Rectangle::new([(0, 0), (width, height - 4)], WARNING.filled()))
        .map_err(chart_error)?;
    let mark = Type {
        colour: WHITE,
        ..HEADING
    };
    write(area, mark, EMULATED_MARK, (MARGIN, (height - 4) / 2))?;
    Ok(height)
}

fn id_safe(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Width of the packets panels: the series' labels and a column per size.
pub(super) fn packets_width(report: &MatrixReport) -> i32 {
    let label = series(report)
        .iter()
        .map(|s| text_width(&s.label, BODY.px))
        .max()
        .unwrap_or(0)
        .max(120)
        + 16;
    2 * MARGIN + label + packet_sizes(report).len() as i32 * PACKETS_COLUMN
}

/// A column of the packets panels: the bar and its value with the loss.
const PACKETS_COLUMN: i32 = BAR_AREA + 150;

/// The packets/s panels, one per environment.
pub(super) fn packets_sections(
    report: &MatrixReport,
    layout: &Layout,
    footnotes: &mut Footnotes<'_>,
    warnings: &Warnings,
) -> Result<Vec<Section>, RenderError> {
    let all = series(report);
    let sizes = packet_sizes(report);
    let label_width = all
        .iter()
        .map(|s| text_width(&s.label, BODY.px))
        .max()
        .unwrap_or(0)
        .max(120)
        + 16;
    let mut sections = Vec::new();
    for (environment, emulated) in environments(report, all.iter().map(|s| s.environment)) {
        let lines: Vec<&Series> = all.iter().filter(|s| s.environment == environment).collect();
        let top = lines
            .iter()
            .flat_map(|s| &s.points)
            .filter_map(|(_, at)| match point(at.map(|(_, c)| c)) {
                Point::Measured(p) => Some(p.received_pps.max.max(p.received_pps.median)),
                _ => None,
            })
            .filter(|v| v.is_finite() && *v >= 0.0)
            .reduce(f64::max);
        let scale = top.map(Scale::covering);
        let title = format!(
            "{}: packets/s delivered per UDP packet size (median of the trials; loss beside it)",
            environment_title(environment, report.environments.get(environment))
        );
        let column_x = |i: usize| MARGIN + label_width + i as i32 * PACKETS_COLUMN;
        let mut marks = String::new();
        let heading_room = if emulated { 30 } else { 0 } + 6 + LINE + 6;
        let rows_top = heading_room + ROW_HEIGHT;
        let axis_y = rows_top + lines.len() as i32 * ROW_HEIGHT + 2;
        let height = axis_y + if scale.is_some() { 28 } else { 8 };
        let background = if emulated { EMULATED_BACKGROUND } else { WHITE };
        let class = if emulated { "packets emulated" } else { "packets" };
        let id = format!("packets-{}", id_safe(environment));
        let mut drawn = section(id, class, layout.width, height, background, |area| {
            let top = banner(area, layout.width, emulated)?;
            write(area, HEADING, &title, (MARGIN, top + 6 + LINE / 2))?;
            for (i, size) in sizes.iter().enumerate() {
                write(
                    area,
                    BOLD,
                    &size.to_string(),
                    (column_x(i), heading_room + ROW_HEIGHT / 2),
                )?;
            }
            let not_run = Type {
                colour: NOT_RUN,
                weight: FontStyle::Italic,
                ..BODY
            };
            for (r, s) in lines.iter().enumerate() {
                let middle = rows_top + r as i32 * ROW_HEIGHT + ROW_HEIGHT / 2;
                write(area, BODY, &s.label, (MARGIN, middle))?;
                let colour = match (s.baseline, emulated) {
                    (true, _) => BASELINE_BAR,
                    (false, true) => EMULATED_BAR,
                    (false, false) => HOST_BAR,
                };
                for (i, (_, at)) in s.points.iter().enumerate() {
                    let x = column_x(i);
                    let p = match point(at.map(|(_, c)| c)) {
                        Point::Measured(p) => p,
                        Point::NotRun(reason) => {
                            let text = format!("not run [{}]", footnotes.cite(reason));
                            write(area, not_run, &text, (x + 2, middle))?;
                            continue;
                        }
                        Point::NoFigures => {
                            write(area, not_run, "no packet figures", (x + 2, middle))?;
                            continue;
                        }
                        Point::Missing => {
                            write(area, SMALL, "—", (x + 2, middle))?;
                            continue;
                        }
                    };
                    let median = p.received_pps.median;
                    let Some(scale) = scale.filter(|_| median.is_finite() && median >= 0.0) else {
                        write(area, not_run, "untimed", (x + 2, middle))?;
                        continue;
                    };
                    let end = x + scale.px(median);
                    let bar_top = middle - BAR_HEIGHT / 2;
                    area.draw(&Rectangle::new(
                        [(x, bar_top), (end, bar_top + BAR_HEIGHT)],
                        colour.filled(),
                    ))
                    .map_err(chart_error)?;
                    if let Some(ndr) = p.rate_at(0.0).filter(|r| r.pps > 0.0) {
                        let at = x + scale.px(ndr.pps);
                        area.draw(&Rectangle::new(
                            [(at - 1, bar_top - 3), (at + 1, bar_top + BAR_HEIGHT + 3)],
                            INK.filled(),
                        ))
                        .map_err(chart_error)?;
                    }
                    let value = format!("{} · {}", fmt_pps(median), fmt_pct(p.loss_pct.median));
                    let reach = end.max(x + scale.px(p.rate_at(0.0).map_or(0.0, |r| r.pps)));
                    write(area, BODY, &value, (reach + 4, middle))?;
                    if let Some((row, cell)) = *at {
                        if let Some(mark) = warnings.mark(row, cell) {
                            let mx = reach + 4 + text_width(&value, BODY.px) + MARK_GAP;
                            let tooltip = warnings.texts_of(row, cell).join("\n");
                            marks.push_str(&titled_text(WARNING_TEXT, &mark, &tooltip, (mx, middle)));
                        }
                    }
                }
            }
            if let Some(scale) = scale {
                write(area, SMALL, PACKETS_AXIS_LABEL, (MARGIN, axis_y + 12))?;
                let tick = Type {
                    px: 10.0,
                    align: plotters::style::text_anchor::HPos::Center,
                    ..SMALL
                };
                for i in 0..sizes.len() {
                    let x = column_x(i);
                    line(area, (x, axis_y), (x + BAR_AREA, axis_y), MUTED)?;
                    for (v, _) in scale.ticks() {
                        let tx = x + scale.px(v);
                        line(area, (tx, axis_y), (tx, axis_y + 3), MUTED)?;
                        write(area, tick, &fmt_pps(v), (tx, axis_y + 12))?;
                    }
                }
            }
            Ok(())
        })?;
        drawn.svg.push_str(&marks);
        sections.push(drawn);
    }
    Ok(sections)
}

/// One CDF plot: its plot area and the room for its title and legend.
const PLOT_WIDTH: i32 = 300;
const PLOT_HEIGHT: i32 = 130;
/// Room left of a plot for the y ticks, and between plots.
const PLOT_LEFT: i32 = 36;
const PLOT_GAP: i32 = 24;
/// The colours of the phases, in the order a cell measured them.
const PHASE_COLOURS: [RGBColor; 5] = [
    RGBColor(70, 120, 180),
    RGBColor(200, 80, 40),
    RGBColor(60, 150, 80),
    RGBColor(150, 90, 170),
    RGBColor(120, 120, 120),
];

/// Width one CDF plot needs, the least the chart must be.
pub(super) fn latency_width() -> i32 {
    2 * MARGIN + PLOT_LEFT + PLOT_WIDTH + PLOT_GAP
}

/// A log axis over whole decades of milliseconds covering `values`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LogAxis {
    low_decade: i32,
    high_decade: i32,
}

impl LogAxis {
    pub(super) fn covering(values: impl Iterator<Item = f64>) -> Option<LogAxis> {
        // A round trip under a microsecond is below the histogram's resolution.
        let (lo, hi) = values
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(|v| v.max(0.001))
            .fold(None, |acc: Option<(f64, f64)>, v| match acc {
                Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
                None => Some((v, v)),
            })?;
        let low_decade = lo.log10().floor() as i32;
        let high_decade = (hi.log10().ceil() as i32).max(low_decade + 1);
        Some(LogAxis {
            low_decade,
            high_decade,
        })
    }

    /// Where `ms` falls on a plot `width` px wide.
    pub(super) fn px(&self, ms: f64, width: i32) -> i32 {
        let v = ms
            .max(0.001)
            .log10()
            .clamp(f64::from(self.low_decade), f64::from(self.high_decade));
        let span = f64::from(self.high_decade - self.low_decade);
        ((v - f64::from(self.low_decade)) / span * f64::from(width)).round() as i32
    }

    /// A tick per decade: (ms, label).
    pub(super) fn ticks(&self) -> Vec<(f64, String)> {
        (self.low_decade..=self.high_decade)
            .map(|d| {
                let v = 10f64.powi(d);
                let label = match d {
                    d if d < 0 => format!("{v:.*}", (-d) as usize),
                    _ => format!("{v:.0}"),
                };
                (v, label)
            })
            .collect()
    }
}

/// The latency CDF panels, one per environment, a plot per cell with round trips.
pub(super) fn latency_sections(report: &MatrixReport, layout: &Layout) -> Result<Vec<Section>, RenderError> {
    let cells = latency_cells(report);
    let mut sections = Vec::new();
    let per_line = ((layout.width - 2 * MARGIN) / (PLOT_LEFT + PLOT_WIDTH + PLOT_GAP)).max(1) as usize;
    for (environment, emulated) in environments(report, cells.iter().map(|c| c.environment)) {
        let plots: Vec<&LatencyCell> = cells.iter().filter(|c| c.environment == environment).collect();
        let axis = LogAxis::covering(
            plots
                .iter()
                .flat_map(|c| &c.latency.phases)
                .filter(|p| phase_has_echoes(p))
                .flat_map(|p| p.cdf.iter().map(|(_, ms)| *ms)),
        );
        let legend_lines = plots.iter().map(|c| c.latency.phases.len()).max().unwrap_or(0) as i32;
        // Title, plot, x ticks and label, a legend line per phase.
        let plot_block = LINE + 6 + PLOT_HEIGHT + 30 + legend_lines * LINE + 10;
        let heading = if emulated { 30 } else { 0 } + 6 + LINE + 6;
        let blocks = plots.len().div_ceil(per_line) as i32;
        let height = heading + blocks * plot_block + 4;
        let background = if emulated { EMULATED_BACKGROUND } else { WHITE };
        let class = if emulated { "latency emulated" } else { "latency" };
        let id = format!("latency-{}", id_safe(environment));
        let title = format!(
            "{}: latency CDF per cell (round trip in ms, log scale; fraction of probes at or below)",
            environment_title(environment, report.environments.get(environment))
        );
        let drawn = section(id, class, layout.width, height, background, |area| {
            let top = banner(area, layout.width, emulated)?;
            write(area, HEADING, &title, (MARGIN, top + 6 + LINE / 2))?;
            for (k, plot) in plots.iter().enumerate() {
                let x = MARGIN + (k % per_line) as i32 * (PLOT_LEFT + PLOT_WIDTH + PLOT_GAP) + PLOT_LEFT;
                let y = heading + (k / per_line) as i32 * plot_block;
                cdf_plot(area, plot, axis, (x, y))?;
            }
            Ok(())
        })?;
        sections.push(drawn);
    }
    Ok(sections)
}

/// One cell's CDF: the frame and ticks, a curve per phase that got echoes, its legend.
fn cdf_plot(
    area: &super::draw::Area,
    plot: &LatencyCell,
    axis: Option<LogAxis>,
    (x, y): (i32, i32),
) -> Result<(), RenderError> {
    write(area, BOLD, &plot.label, (x - PLOT_LEFT, y + LINE / 2))?;
    let top = y + LINE + 6;
    let bottom = top + PLOT_HEIGHT;
    let fraction_y = |q: f64| bottom - (q.clamp(0.0, 1.0) * f64::from(PLOT_HEIGHT)).round() as i32;
    let tick = Type { px: 10.0, ..SMALL };
    let right_tick = Type {
        align: plotters::style::text_anchor::HPos::Right,
        ..tick
    };
    let centre_tick = Type {
        align: plotters::style::text_anchor::HPos::Center,
        ..tick
    };
    for q in [0.0, 0.5, 0.9, 1.0] {
        let ty = fraction_y(q);
        line(area, (x, ty), (x + PLOT_WIDTH, ty), RULE)?;
        write(area, right_tick, &format!("{q}"), (x - 4, ty))?;
    }
    line(area, (x, top), (x, bottom), MUTED)?;
    line(area, (x, bottom), (x + PLOT_WIDTH, bottom), MUTED)?;
    if let Some(axis) = axis {
        for (v, label) in axis.ticks() {
            let tx = x + axis.px(v, PLOT_WIDTH);
            line(area, (tx, bottom), (tx, bottom + 3), MUTED)?;
            write(area, centre_tick, &label, (tx, bottom + 12))?;
        }
        write(area, tick, LATENCY_AXIS_LABEL, (x, bottom + 25))?;
    }
    let legend_top = bottom + 30;
    for (i, phase) in plot.latency.phases.iter().enumerate() {
        let colour = PHASE_COLOURS[i % PHASE_COLOURS.len()];
        let ly = legend_top + i as i32 * LINE + LINE / 2;
        if let (Some(axis), true) = (axis, phase_has_echoes(phase)) {
            let points = curve(phase, |ms| x + axis.px(ms, PLOT_WIDTH), fraction_y);
            area.draw(&PathElement::new(points, colour.stroke_width(2)))
                .map_err(chart_error)?;
            area.draw(&Rectangle::new(
                [(x - PLOT_LEFT, ly - 1), (x - PLOT_LEFT + 14, ly + 1)],
                colour.filled(),
            ))
            .map_err(chart_error)?;
        }
        let text = Type { px: 10.0, ..BODY };
        write(area, text, &phase_text(phase), (x - PLOT_LEFT + 18, ly))?;
    }
    Ok(())
}

/// A phase's CDF points in px, skipping any that are not numbers.
fn curve(phase: &LatencyPhase, x: impl Fn(f64) -> i32, y: impl Fn(f64) -> i32) -> Vec<(i32, i32)> {
    phase
        .cdf
        .iter()
        .filter(|(q, ms)| q.is_finite() && ms.is_finite())
        .map(|(q, ms)| (x(*ms), y(*q)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_axis_spans_whole_decades_of_milliseconds() {
        let axis = LogAxis::covering([0.02, 0.5, 15.0, f64::NAN, 0.0].into_iter()).unwrap();
        assert_eq!(
            axis.ticks().iter().map(|t| t.1.as_str()).collect::<Vec<_>>(),
            ["0.01", "0.1", "1", "10", "100"]
        );
        assert_eq!(axis.px(0.01, 400), 0);
        assert_eq!(axis.px(1.0, 400), 200);
        assert_eq!(axis.px(100.0, 400), 400);
        // Outside the axis stays on it.
        assert_eq!(axis.px(1e6, 400), 400);
        // One value still spans a decade; nothing to draw, no axis.
        let one = LogAxis::covering([20.0].into_iter()).unwrap();
        assert_eq!(one.ticks().len(), 2);
        assert_eq!(LogAxis::covering([f64::INFINITY, -1.0].into_iter()), None);
    }
}
