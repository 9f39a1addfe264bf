//! Drawing with plotters: text (measured and wrapped, since SVG cannot measure it), lines,
//! the grid every section shares ([`Layout`]) and sections, each drawn on its own and
//! stacked by the chart, and the one error drawing can end in ([`RenderError`]). Knows
//! nothing of bars or panels.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{Pos, VPos};

use model::matrix::MatrixReport;

use super::style::{Type, AXIS_LABEL, BAR_AREA, BODY, BOLD, LINE, MARGIN, SMALL, WARNING_TEXT};

/// Between a value and its warning mark, px.
pub(super) const MARK_GAP: i32 = 3;
use crate::shared::{cell_for, fmt_rate, Warnings};

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("drawing the chart failed: {0}")]
    Chart(String),
}

pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

pub(super) fn chart_error<E: std::fmt::Debug>(e: E) -> RenderError {
    RenderError::Chart(format!("{e:?}"))
}

/// Width of `text` in DejaVu Sans-like fonts, generously: SVG cannot measure text.
pub(super) fn text_width(text: &str, px: f64) -> i32 {
    (text.chars().count() as f64 * px * 0.58).ceil() as i32
}

/// `text` in lines no wider than `width` px, broken between its ` · `-separated items
/// where they fit whole, else between words.
pub(super) fn wrap(text: &str, width: i32, px: f64) -> Vec<String> {
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
pub(super) fn write(area: &Area, t: Type, text: &str, (x, y): (i32, i32)) -> Result<(), RenderError> {
    // plotters divides the size by 1.24 when it writes the SVG; undo that so `px` is the
    // size in the file (the values used round-trip exactly).
    let style = FontDesc::new(FontFamily::SansSerif, t.px * 1.24, t.weight)
        .color(&t.colour)
        .pos(Pos::new(t.align, VPos::Center));
    area.draw(&Text::new(crate::escape::xml_chars(text), (x, y), style))
        .map_err(chart_error)
}

/// One line of text as [`write`] draws it, in a group whose `<title>` is its tooltip:
/// `<g class="warning"><title>…</title><text …>⚠1</text></g>`.
pub(super) fn titled_text(t: Type, text: &str, tooltip: &str, (x, y): (i32, i32)) -> String {
    let RGBColor(r, g, b) = t.colour;
    let weight = match t.weight {
        FontStyle::Bold => " font-weight=\"bold\"",
        _ => "",
    };
    format!(
        "<g class=\"warning\"><title>{}</title><text x=\"{x}\" y=\"{y}\" dy=\"0.5ex\" text-anchor=\"start\" \
         font-family=\"sans-serif\" font-size=\"{}\" fill=\"#{r:02X}{g:02X}{b:02X}\"{weight}>{}</text></g>\n",
        crate::escape::xml(tooltip),
        t.px,
        crate::escape::xml(text)
    )
}

pub(super) fn line(
    area: &Area,
    from: (i32, i32),
    to: (i32, i32),
    colour: RGBColor,
) -> Result<(), RenderError> {
    area.draw(&PathElement::new(vec![from, to], colour.stroke_width(1)))
        .map_err(chart_error)
}

/// Where the chart goes: a file of its own (fixed size, with its title), or inside the
/// HTML page (as wide as the page, under the page's heading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Standalone,
    Inline,
}

/// Measures shared by every section.
pub(super) struct Layout {
    pub(super) width: i32,
    pub(super) label_width: i32,
    pub(super) column_width: i32,
    pub(super) columns: Vec<String>,
}

impl Layout {
    pub(super) fn of(report: &MatrixReport, warnings: &Warnings) -> Layout {
        let label_width = report
            .rows
            .iter()
            .map(|r| text_width(&r.label(), BODY.px))
            .chain([text_width(AXIS_LABEL, SMALL.px)])
            .max()
            .unwrap_or(0)
            .max(120)
            + 16;
        // A value and, where the cell has warnings, their mark after it.
        let value_width = report
            .rows
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                report
                    .suites
                    .iter()
                    .filter_map(move |s| Some((i, cell_for(r, *s)?)))
            })
            .filter_map(|(i, c)| {
                let value = text_width(&fmt_rate(c.measurement()?.mb_per_s.median), BODY.px);
                let mark = warnings
                    .mark(i, c)
                    .map_or(0, |m| MARK_GAP + text_width(&m, WARNING_TEXT.px));
                Some(value + mark)
            })
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

    pub(super) fn column_x(&self, i: usize) -> i32 {
        MARGIN + self.label_width + i as i32 * self.column_width
    }

    pub(super) fn text_room(&self) -> i32 {
        self.width - 2 * MARGIN
    }
}

/// One drawn section: the `<g>` it goes in and its height.
pub(super) struct Section {
    pub(super) id: String,
    pub(super) class: &'static str,
    pub(super) height: i32,
    pub(super) svg: String,
}

pub(super) fn section(
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

/// The sections one under the other in one `<svg>` with a `viewBox`, each in a `<g>` whose
/// id names it; standalone at its size, inline as wide as the page.
pub(super) fn stack(sections: Vec<Section>, width: i32, placement: Placement) -> String {
    let height: i32 = sections.iter().map(|s| s.height).sum();
    let size = match placement {
        Placement::Standalone => format!("width=\"{width}\" height=\"{height}\""),
        Placement::Inline => "width=\"100%\"".to_string(),
    };
    let mut out =
        format!("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" {size}>\n");
    let mut y = 0;
    for s in sections {
        out.push_str(&format!(
            "<g id=\"{}\" class=\"{}\" transform=\"translate(0,{y})\">\n{}</g>\n",
            s.id, s.class, s.svg
        ));
        y += s.height;
    }
    out.push_str("</svg>\n");
    out
}

/// Lines of text, each in its style, wrapped to the chart's width, as a section.
pub(super) fn text_section(
    id: &str,
    layout: &Layout,
    lines: &[(Type, String)],
) -> Result<Section, RenderError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn wrap_keeps_items_whole_where_they_fit() {
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
}
