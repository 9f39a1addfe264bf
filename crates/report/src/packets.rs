//! The packet and latency parts of a report as every format shows them: the UDP rows
//! grouped into series (one per backend row and cipher, a point per packet size), the cells
//! that measured latency, and how packets/s and milliseconds are printed. Below the
//! formats; imports none of them.
//!
//! And how a single run's packets and latency read on a terminal ([`crate::run`]'s table):
//! the UDP trials, the rates the zero-loss search found and the trials that bound them, and
//! a latency table per phase.

use model::matrix::{Cell, CellOutcome, MatrixReport, PacketRates};
use model::packets::{si, LatencyPhase, LatencyReport, NdrBound, NdrReport, PacketSize, UdpReport, UdpTrial};
use model::{CipherSuite, RunReport};

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

/// The label of each transfer row of a UDP run: the bound a search's final trial is for.
pub fn row_labels(report: &RunReport) -> Option<Vec<String>> {
    let ndr = report.udp.as_ref()?.ndr.as_ref()?;
    let backend = report.plan.backend();
    let found: Vec<String> = ndr
        .bounds
        .iter()
        .filter(|b| b.lower.is_some())
        .map(|b| format!("{backend} {}", bound_name(b)))
        .collect();
    Some(match found.len() {
        n if n == report.transfers.len() => found,
        _ => vec![format!("{backend} max rate"); report.transfers.len()],
    })
}

fn bound_name(b: &NdrBound) -> String {
    if b.tolerance_pct == 0.0 {
        b.name.clone()
    } else {
        format!("{} {}%", b.name, b.tolerance_pct)
    }
}

/// One trial, sender's and receiver's side.
fn trial_line(label: &str, t: &UdpTrial) -> String {
    let offered = t
        .offered_pps
        .map_or("unlimited".to_string(), |p| format!("{} pps", si(p)));
    let kept = match t.kept_rate {
        Some(false) => " (the sender fell short of it)",
        _ => "",
    };
    let link = t
        .link_bytes
        .map(|b| format!(", {:.1} MB on the link", b as f64 / 1e6))
        .unwrap_or_default();
    format!(
        "{label}: offered {offered}{kept}, sent {} pps; delivered {} pps = {:.1} Mbit/s of inner packets ({:.1} MB/s of UDP payload{link}); lost {} of {} ({:.3} %), reordered {}, duplicates {}, corrupted {}; jitter {:.3} ms",
        si(t.sent_pps),
        si(t.received_pps()),
        t.packet_mbit_per_s(),
        t.payload_mb_per_s(),
        t.lost,
        t.sent,
        t.loss_pct(),
        t.reordered,
        t.duplicates,
        t.corrupted,
        t.jitter_ms,
    )
}

/// A bound as one line: the rate, and the trials on either side of it.
fn bound_line(prefix: &str, b: &NdrBound) -> String {
    let head = format!("{prefix}{} (loss <= {} %): ", b.name, b.tolerance_pct);
    let Some(lower) = &b.lower else {
        let upper = b
            .upper
            .as_ref()
            .map(|u| {
                format!(
                    "; the lowest rate tried, {} pps, lost {:.3} %",
                    si(u.sent_pps),
                    u.loss_pct()
                )
            })
            .unwrap_or_default();
        return format!("{head}no rate kept its loss within the tolerance{upper}");
    };
    let bound = match &b.upper {
        Some(u) => format!(
            "; {} pps lost {} of {} ({:.3} %)",
            si(u.offered_pps.unwrap_or(u.sent_pps)),
            u.lost,
            u.sent,
            u.loss_pct()
        ),
        None => "; the sender's highest rate passed: the generator, not the path, set this bound".into(),
    };
    format!(
        "{head}{} pps = {:.1} Mbit/s; its {:.1} s trial lost {} of {}{bound}",
        si(b.pps),
        b.mbit_per_s,
        lower.send_seconds,
        lower.lost,
        lower.sent,
    )
}

fn search_lines(prefix: &str, ndr: &NdrReport) -> Vec<String> {
    let mut out: Vec<String> = ndr.bounds.iter().map(|b| bound_line(prefix, b)).collect();
    out.push(format!(
        "{prefix}search: {}; the sender's highest rate {} pps, of which {} pps came through",
        model::plural(ndr.trials.len(), "trial"),
        si(ndr.max_rate.sent_pps),
        si(ndr.max_rate.received_pps()),
    ));
    out
}

/// The UDP lines under the run's table.
pub fn udp_lines(udp: &UdpReport) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in udp.trials.iter().enumerate() {
        out.push(trial_line(&format!("UDP {} trial {}", udp.packet_size, i + 1), t));
    }
    if let Some(baseline) = &udp.baseline {
        out.extend(search_lines("bare link (plain), searched first: ", baseline));
    }
    if let Some(ndr) = &udp.ndr {
        out.extend(search_lines(&format!("{} packets: ", udp.packet_size), ndr));
    }
    out
}

/// Round trips per phase, in columns that fit 80.
pub fn latency_table(latency: &LatencyReport) -> Vec<String> {
    let mut out = vec![format!(
        "latency, round trip in ms (a probe every {} ms):",
        latency.probe_interval_ms
    )];
    out.push(format!(
        "{:<17}  {:>11}  {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "phase", "received", "min", "p50", "p90", "p99", "p99.9", "max"
    ));
    for p in &latency.phases {
        let received = format!("{}/{}", p.probes_received, p.probes_sent);
        if p.probes_received == 0 {
            out.push(format!("{:<17}  {received:>11}  no probe came back", p.name));
            continue;
        }
        out.push(format!(
            "{:<17}  {received:>11}  {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3}",
            p.name, p.min_ms, p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::packets::{LatencyPhase, PacketSize};

    fn trial(offered: Option<f64>, sent: u64, lost: u64) -> UdpTrial {
        UdpTrial {
            offered_pps: offered,
            send_seconds: 2.0,
            sent,
            sent_pps: sent as f64 / 2.0,
            kept_rate: offered.map(|_| true),
            received: sent - lost,
            lost,
            reordered: 0,
            duplicates: 0,
            corrupted: 0,
            jitter_ms: 0.01,
            receive_seconds: 2.0,
            payload_bytes: (sent - lost) * 36,
            packet_bytes: (sent - lost) * 64,
            link_bytes: None,
            outside_drops: None,
        }
    }

    #[test]
    fn a_bound_says_its_rate_and_the_trials_either_side() {
        let b = NdrBound {
            name: "NDR".into(),
            tolerance_pct: 0.0,
            pps: 100_000.0,
            mbit_per_s: 51.2,
            lower: Some(trial(Some(100_000.0), 200_000, 0)),
            upper: Some(trial(Some(102_000.0), 51_000, 40)),
        };
        let line = bound_line("", &b);
        assert!(
            line.starts_with("NDR (loss <= 0 %): 100.0k pps = 51.2 Mbit/s"),
            "{line}"
        );
        assert!(line.contains("lost 0 of 200000"), "{line}");
        assert!(line.contains("102.0k pps lost 40 of 51000"), "{line}");
        let generator_bound = NdrBound {
            upper: None,
            ..b.clone()
        };
        assert!(bound_line("", &generator_bound).contains("the generator, not the path"));
        let none = NdrBound {
            pps: 0.0,
            lower: None,
            ..b
        };
        assert!(bound_line("", &none).contains("no rate kept its loss within the tolerance"));
    }

    #[test]
    fn the_latency_table_fits_80_columns_and_says_when_nothing_came_back() {
        let phase = |name: &str, received| LatencyPhase {
            name: name.into(),
            load_pps: None,
            probes_sent: 22_846,
            probes_received: received,
            min_ms: 0.05,
            p50_ms: 0.1,
            p90_ms: 1.0,
            p99_ms: 22.036,
            p999_ms: 40.0,
            max_ms: 146.1,
            mean_ms: 1.0,
            cdf: Vec::new(),
        };
        let lines = latency_table(&LatencyReport {
            probe_interval_ms: 1.0,
            phases: vec![phase("during the search", 22_536), phase("idle", 0)],
        });
        for l in &lines {
            assert!(l.chars().count() <= 80, "{} columns: {l}", l.chars().count());
        }
        assert!(lines[2].contains("22536/22846") && lines[2].contains("22.036"));
        assert!(lines[3].contains("no probe came back"));
    }

    #[test]
    fn trials_say_loss_reordering_and_jitter() {
        let lines = udp_lines(&UdpReport {
            packet_size: PacketSize::Fixed(64),
            trials: vec![trial(None, 1000, 10)],
            ndr: None,
            baseline: None,
        });
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("offered unlimited"), "{}", lines[0]);
        assert!(lines[0].contains("lost 10 of 1000 (1.000 %)"), "{}", lines[0]);
        assert!(lines[0].contains("jitter 0.010 ms"), "{}", lines[0]);
    }
}
