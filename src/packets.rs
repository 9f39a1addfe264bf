//! How a run's packets and latency read on a terminal: the UDP trials, the rates the
//! zero-loss search found and the trials that bound them, and a latency table per phase.

use model::packets::{si, LatencyReport, NdrBound, NdrReport, UdpReport, UdpTrial};
use model::RunReport;

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
