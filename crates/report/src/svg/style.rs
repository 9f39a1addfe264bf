//! The chart's look: the labels a reader looks for, sizes, colours and text styles. Every
//! other part of the chart takes its measures from here.

use plotters::prelude::*;
use plotters::style::text_anchor::HPos;

/// The title of the standalone chart (the HTML page has its own heading instead).
pub const TITLE: &str = "ipsec-lab matrix: MB/s per backend and cipher configuration";
/// The marking of a panel whose rows ran on an emulated CPU.
pub const EMULATED_MARK: &str = "EMULATED (TCG) — correctness only, not speed";
/// The axis description, once per panel.
pub const AXIS_LABEL: &str = "MB/s, linear from 0";
/// The axis of a packets/s panel.
pub const PACKETS_AXIS_LABEL: &str = "packets/s delivered, linear from 0; a dark tick marks the NDR";
/// The x axis of a latency CDF.
pub const LATENCY_AXIS_LABEL: &str = "round trip, ms (log scale)";

pub(super) const MARGIN: i32 = 12;
/// Length of the axis (the longest bar) in every column.
pub(super) const BAR_AREA: i32 = 100;
pub(super) const ROW_HEIGHT: i32 = 22;
pub(super) const BAR_HEIGHT: i32 = 14;
pub(super) const LINE: i32 = 16;

pub(super) const INK: RGBColor = RGBColor(34, 34, 34);
pub(super) const MUTED: RGBColor = RGBColor(100, 100, 100);
pub(super) const RULE: RGBColor = RGBColor(200, 200, 200);
/// Bars of measured rows on real hardware.
pub const HOST_BAR: RGBColor = RGBColor(70, 120, 180);
/// Bars of the unencrypted baseline.
pub const BASELINE_BAR: RGBColor = RGBColor(160, 160, 160);
/// Bars of rows on an emulated CPU: another colour than any real measurement.
pub const EMULATED_BAR: RGBColor = RGBColor(215, 150, 80);
pub(super) const EMULATED_BACKGROUND: RGBColor = RGBColor(255, 244, 229);
pub(super) const WARNING: RGBColor = RGBColor(180, 60, 0);
pub(super) const NOT_RUN: RGBColor = RGBColor(170, 51, 51);

/// A text style: size in px as it appears in the SVG, weight, colour, alignment.
#[derive(Clone, Copy)]
pub(super) struct Type {
    pub(super) px: f64,
    pub(super) weight: FontStyle,
    pub(super) colour: RGBColor,
    pub(super) align: HPos,
}

pub(super) const BODY: Type = Type {
    px: 12.0,
    weight: FontStyle::Normal,
    colour: INK,
    align: HPos::Left,
};
pub(super) const SMALL: Type = Type {
    px: 11.0,
    colour: MUTED,
    ..BODY
};
pub(super) const BOLD: Type = Type {
    weight: FontStyle::Bold,
    ..BODY
};
pub(super) const HEADING: Type = Type { px: 14.0, ..BOLD };
/// A warning's mark beside a value, and its line under the chart.
pub(super) const WARNING_TEXT: Type = Type {
    px: 11.0,
    colour: WARNING,
    ..BOLD
};
