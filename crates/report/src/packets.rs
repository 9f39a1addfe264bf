//! The packet and latency parts of a report as every format shows them: the UDP rows
//! grouped into series (one per backend row and cipher, a point per packet size), the cells
//! that measured latency, and how packets/s and milliseconds are printed. Below the
//! formats; imports none of them.

use model::matrix::{Cell, CellOutcome, MatrixReport, PacketRates};
use model::packets::{LatencyPhase, LatencyReport, PacketSize};
use model::CipherSuite;

use crate::shared::cell_for;

/// The UDP packet sizes of the report's rows, smallest first (IMIX last).
pub fn packet_sizes(report: &MatrixReport) -> Vec<PacketSize> {
    let mut sizes: Vec<PacketSize> = report.rows.iter().filter_map(|r| r.key.packet_size).collect();
    sizes.sort();
    sizes.dedup();
    sizes
}

/// One line of a packets/s chart: a backend row under one cipher (the plain row once), a
/// point per packet size.
pub struct Series<'a> {
    /// `userspace [auto] GCM-256`, `plain (line rate)`.
    pub label: String,
    pub environment: &'a str,
    pub baseline: bool,
    /// Per size of [`packet_sizes`]: the row's index in the report and its cell, where the
    /// report has that row.
    pub points: Vec<(PacketSize, Option<(usize, &'a Cell)>)>,
}

/// The UDP rows as series, in the order their first row comes in the report.
pub fn series(report: &MatrixReport) -> Vec<Series<'_>> {
    let sizes = packet_sizes(report);
    let mut out: Vec<Series> = Vec::new();
    let mut keys: Vec<(String, Option<CipherSuite>)> = Vec::new();
    for (i, row) in report.rows.iter().enumerate() {
        let Some(size) = row.key.packet_size else { continue };
        let base = row.key.series_label();
        let suites: Vec<Option<CipherSuite>> = match row.is_baseline() {
            true => vec![None],
            false => report.suites.iter().copied().map(Some).collect(),
        };
        for suite in suites {
            let cell = match suite {
                Some(s) => cell_for(row, s),
                None => row.cells.first(),
            };
            let Some(cell) = cell else { continue };
            let at = match keys.iter().position(|k| *k == (base.clone(), suite)) {
                Some(at) => at,
                None => {
                    keys.push((base.clone(), suite));
                    out.push(Series {
                        label: match suite {
                            Some(s) => format!("{base} {}", s.short_label()),
                            None => base.clone(),
                        },
                        environment: row.key.environment.as_str(),
                        baseline: row.is_baseline(),
                        points: sizes.iter().map(|s| (*s, None)).collect(),
                    });
                    out.len() - 1
                }
            };
            if let Some(point) = out[at].points.iter_mut().find(|(s, _)| *s == size) {
                point.1 = Some((i, cell));
            }
        }
    }
    out
}

/// A point of a series as the formats show it.
pub enum Point<'a> {
    Measured(&'a PacketRates),
    NotRun(&'a str),
    /// Measured, but the cell holds no packet figures (a report edited by hand).
    NoFigures,
    /// The report has no such row.
    Missing,
}

pub fn point<'a>(cell: Option<&'a Cell>) -> Point<'a> {
    match cell {
        None => Point::Missing,
        Some(c) => match (&c.outcome, &c.packets) {
            (CellOutcome::NotRun { reason }, _) => Point::NotRun(reason),
            (CellOutcome::Measured(_), Some(p)) => Point::Measured(p),
            (CellOutcome::Measured(_), None) => Point::NoFigures,
        },
    }
}

/// Whether any UDP row is in the report.
pub fn has_packets(report: &MatrixReport) -> bool {
    report.rows.iter().any(|r| r.key.packet_size.is_some())
}

/// Whether any UDP cell searched its zero-loss rates.
pub fn has_rates_found(report: &MatrixReport) -> bool {
    all_cells(report).any(|(_, c)| c.packets.as_ref().is_some_and(|p| !p.rates_found.is_empty()))
}

fn all_cells(report: &MatrixReport) -> impl Iterator<Item = (usize, &Cell)> {
    report
        .rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.cells.iter().map(move |c| (i, c)))
}

/// A cell that measured round trips.
pub struct LatencyCell<'a> {
    /// `userspace [auto] UDP 64 B GCM-256`.
    pub label: String,
    pub environment: &'a str,
    pub row: usize,
    pub cell: &'a Cell,
    pub latency: &'a LatencyReport,
}

/// Every cell with round trips, in the report's order.
pub fn latency_cells(report: &MatrixReport) -> Vec<LatencyCell<'_>> {
    all_cells(report)
        .filter_map(|(i, cell)| {
            let row = &report.rows[i];
            Some(LatencyCell {
                label: match row.is_baseline() {
                    true => row.label(),
                    false => format!("{} {}", row.label(), cell.suite.short_label()),
                },
                environment: row.key.environment.as_str(),
                row: i,
                cell,
                latency: cell.latency.as_ref()?,
            })
        })
        .collect()
}

/// Whether a phase's figures mean anything: it got echoes, and they are numbers.
pub fn phase_has_echoes(p: &LatencyPhase) -> bool {
    p.probes_received > 0 && [p.p50_ms, p.p99_ms, p.max_ms].iter().all(|v| v.is_finite())
}

/// The phase a cell's load put the most on: the last that is not idle (under the TCP
/// transfer or the UDP trials; after a search, at 90 % of its rate).
pub fn loaded_phase(latency: &LatencyReport) -> Option<&LatencyPhase> {
    latency.phases.iter().rev().find(|p| p.name != "idle")
}

pub fn idle_phase(latency: &LatencyReport) -> Option<&LatencyPhase> {
    latency.phases.iter().find(|p| p.name == "idle")
}

/// Packets/s as people write rates: `512.3k`, `1.234M`; "—" for what is not a number.
pub fn fmt_pps(v: f64) -> String {
    if v.is_finite() && v >= 0.0 {
        model::packets::si(v)
    } else {
        "—".into()
    }
}

/// Milliseconds with three significant digits where they matter: `0.045`, `1.23`, `20.4`.
pub fn fmt_ms(v: f64) -> String {
    match v {
        v if !v.is_finite() => "—".into(),
        v if v < 1.0 => format!("{v:.3}"),
        v if v < 10.0 => format!("{v:.2}"),
        v => format!("{v:.1}"),
    }
}

/// A share in percent with two decimals: loss is read at 0.01 %.
pub fn fmt_pct(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2} %")
    } else {
        "—".into()
    }
}

/// The rates a search found, in a line: `NDR 70.0k · PDR 0.5 % 75.0k (the generator's)`.
pub fn rates_found_text(p: &PacketRates) -> String {
    p.rates_found
        .iter()
        .map(|r| {
            let name = match r.tolerance_pct {
                0.0 => r.name.clone(),
                t => format!("{} {t} %", r.name),
            };
            let value = match r.pps {
                v if v > 0.0 => fmt_pps(v),
                _ => "none passed".into(),
            };
            match r.generator_bound {
                true => format!("{name} {value} (the generator's bound)"),
                false => format!("{name} {value}"),
            }
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// A phase in a line: `idle: p50 0.045 · p99 0.090 · max 0.300 ms (1000/1000 probes)`.
pub fn phase_text(p: &LatencyPhase) -> String {
    if !phase_has_echoes(p) {
        return format!("{}: no echo ({} probes sent)", p.name, p.probes_sent);
    }
    format!(
        "{}: p50 {} · p99 {} · max {} ms ({}/{} probes)",
        p.name,
        fmt_ms(p.p50_ms),
        fmt_ms(p.p99_ms),
        fmt_ms(p.max_ms),
        p.probes_received,
        p.probes_sent
    )
}

/// What the packets/s figures mean, once for every format.
pub const PACKETS_EXPLAINED: &str = "UDP rows: distinct verified datagrams delivered per second of sending (median over the trials), the packet size being the inner IP packet with its IP and UDP headers (IMIX: 64, 576 and 1500 bytes, 7:4:1); loss = datagrams sent and not delivered. With --find-ndr the delivered rate is the search's unlimited trial's, and NDR/PDR are the highest rates whose loss stayed within 0 % / the tolerance";

/// How to read the latency CDF, once for every format.
pub const LATENCY_EXPLAINED: &str = "Latency: round trips of a probe every millisecond through the row's own data path, per phase (idle before any load; under the cell's TCP transfer or UDP trials; with --find-ndr at shares of the rate found). A CDF curve rises from the fastest round trip to the slowest: where it crosses 0.5 is the p50, how far right its top reaches is what queueing adds";
