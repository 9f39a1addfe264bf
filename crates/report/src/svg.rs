//! The matrix as an SVG grouped bar chart: one group per cipher configuration, one bar per
//! row (its median MB/s), error bars from the repeats' min to max. The y axis is
//! logarithmic because rows differ by orders of magnitude (line rate, AES-NI, software
//! AES, an emulated VM). Drawn with plotters' SVG backend; cells that did not run have no
//! bar and are listed under the chart.

use plotters::prelude::*;

use model::matrix::{CellOutcome, MatrixReport, Row};

use crate::{cell_for, method, RenderError};

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 620;
/// Share of a group's width the bars take; the rest separates groups.
const GROUP_FILL: f64 = 0.8;
/// Width of the legend column right of the plot.
const LEGEND_WIDTH: u32 = 230;

/// One bar: where, how tall, and its repeats' range.
struct Bar {
    x0: f64,
    x1: f64,
    median: f64,
    min: f64,
    max: f64,
}

fn chart_error<E: std::fmt::Debug>(e: E) -> RenderError {
    RenderError::Chart(format!("{e:?}"))
}

/// Rows with at least one measured cell, in report order: the bars of every group.
fn charted_rows(report: &MatrixReport) -> Vec<&Row> {
    report
        .rows
        .iter()
        .filter(|r| {
            report
                .suites
                .iter()
                .any(|s| cell_for(r, *s).is_some_and(|c| c.measurement().is_some()))
        })
        .collect()
}

pub fn render(report: &MatrixReport) -> Result<String, RenderError> {
    let rows = charted_rows(report);
    let groups = report.suites.len().max(1);
    let values = rows
        .iter()
        .flat_map(|r| {
            report
                .suites
                .iter()
                .filter_map(|s| cell_for(r, *s)?.measurement())
        })
        .flat_map(|m| [m.mb_per_s.min, m.mb_per_s.max]);
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    // Whole decades around the data, so the log axis has readable ticks.
    let (lo, hi) = if lo.is_finite() && lo > 0.0 {
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)),
        )
    } else {
        (1.0, 10.0)
    };
    let labels: Vec<String> = report.suites.iter().map(|s| s.short_label()).collect();
    let not_run: Vec<String> = report
        .rows
        .iter()
        .filter(|r| !rows.iter().any(|c| std::ptr::eq(*c, *r)))
        .map(|r| r.label())
        .collect();

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let (plot, footer) = root.split_vertically(HEIGHT - 40);
        // The legend gets its own column so it never hides a bar.
        let (plot, legend) = plot.split_horizontally(WIDTH - LEGEND_WIDTH);
        let title = format!("ipsec-lab matrix: MB/s, {} (error bars: min–max)", method(report));
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..groups as f64, (lo..hi).log_scale())
            .map_err(chart_error)?;
        // Ticks every half unit: group boundaries stay unlabelled, group centres (x.5) get
        // the configuration's name.
        let label_of = |x: &f64| {
            let halves = (x * 2.0).round() as i64;
            if halves % 2 == 1 {
                labels.get((halves / 2) as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(2 * groups + 1)
            .x_label_formatter(&label_of)
            .x_desc("cipher configuration")
            .y_desc("MB/s (log scale)")
            .y_label_formatter(&|v| format!("{v}"))
            .draw()
            .map_err(chart_error)?;

        let width = GROUP_FILL / rows.len().max(1) as f64;
        for (i, row) in rows.iter().enumerate() {
            let colour = Palette99::pick(i).to_rgba();
            let bars: Vec<Bar> = report
                .suites
                .iter()
                .enumerate()
                .filter_map(|(g, s)| match &cell_for(row, *s)?.outcome {
                    CellOutcome::Measured(m) => {
                        let x0 = g as f64 + (1.0 - GROUP_FILL) / 2.0 + i as f64 * width;
                        Some(Bar {
                            x0,
                            x1: x0 + width,
                            median: m.mb_per_s.median,
                            min: m.mb_per_s.min,
                            max: m.mb_per_s.max,
                        })
                    }
                    CellOutcome::NotRun { .. } => None,
                })
                .collect();
            chart
                .draw_series(
                    bars.iter()
                        .map(|b| Rectangle::new([(b.x0, lo), (b.x1, b.median)], colour.filled())),
                )
                .map_err(chart_error)?;
            let y = 60 + 22 * i as i32;
            legend
                .draw(&Rectangle::new([(8, y - 6), (22, y + 6)], colour.filled()))
                .map_err(chart_error)?;
            legend
                .draw(&Text::new(row.label(), (28, y - 7), ("sans-serif", 13)))
                .map_err(chart_error)?;
            chart
                .draw_series(bars.iter().map(|b| {
                    ErrorBar::new_vertical(
                        (b.x0 + b.x1) / 2.0,
                        b.min,
                        b.median,
                        b.max,
                        BLACK.stroke_width(1),
                        6,
                    )
                }))
                .map_err(chart_error)?;
        }
        let environments = report
            .environments
            .iter()
            .map(|(name, e)| {
                format!(
                    "{name}: {}, kernel {}, {}",
                    e.virtualization, e.kernel_release, e.cpu_model
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        footer
            .draw(&Text::new(environments, (12, 2), ("sans-serif", 12)))
            .map_err(chart_error)?;
        if !not_run.is_empty() {
            footer
                .draw(&Text::new(
                    format!("not run here (see the table for why): {}", not_run.join(", ")),
                    (12, 20),
                    ("sans-serif", 12),
                ))
                .map_err(chart_error)?;
        }
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn chart_is_well_formed_svg_with_a_bar_per_measured_cell() {
        let r = fixture::report();
        let svg = render(&r).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let text: String = doc
            .descendants()
            .filter(|n| n.is_text())
            .map(|n| n.text().unwrap_or_default().to_string() + "\n")
            .collect();
        for label in [
            "128",
            "192+HMAC",
            "GCM-256",
            "userspace [soft]",
            "xfrm [aes-generic] (vm)",
            "plain (line rate)",
        ] {
            assert!(text.contains(label), "{label} missing:\n{text}");
        }
        assert!(
            text.contains("not run here (see the table for why): xfrm"),
            "{text}"
        );
        // Bars: every measured cell (the plain baseline once per column and environment)
        // plus one legend swatch per charted row, plus the background.
        let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
        let measured: usize = r
            .rows
            .iter()
            .map(|row| {
                r.suites
                    .iter()
                    .filter(|s| cell_for(row, **s).is_some_and(|c| c.measurement().is_some()))
                    .count()
            })
            .sum();
        let charted = charted_rows(&r).len();
        assert!(rects >= measured + charted, "{rects} rects for {measured} bars");
    }

    #[test]
    fn an_empty_report_still_draws() {
        let mut r = fixture::report();
        r.rows.clear();
        let svg = render(&r).unwrap();
        roxmltree::Document::parse(&svg).expect("well-formed XML");
    }
}
