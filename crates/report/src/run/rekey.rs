//! The lines of a rekey run (`--rekey-every`) under the table: one per rekey, with what it
//! cost the flow, and the flow's own longest gap away from the rekeys to judge them by.

use model::rekey::{RekeyMark, RekeyReport};
use model::RunReport;

/// What the run rekeyed and how: `xfrm aes-256-gcm: make-before-break rekey every 1 s`.
pub fn title(run: &RunReport, r: &RekeyReport) -> String {
    format!(
        "{} {}: {} every {} s",
        run.plan.backend(),
        run.plan.suite(),
        r.label,
        r.schedule.every_s
    )
}

/// A rekey's figures in a line.
fn mark_line(m: &RekeyMark) -> String {
    let dip = match m.dip {
        Some(d) => format!(", lowest 10 ms at {:.0} % of the median", d * 100.0),
        None => String::new(),
    };
    let datagrams = match m.datagrams {
        Some(d) => format!(
            "; datagrams sent around it: {} lost of {}, {} reordered, {} duplicated",
            d.lost, d.sent, d.reordered, d.duplicates
        ),
        None => String::new(),
    };
    // A backend that does not say how long its switch took (WireGuard) says when only.
    let switch = m.took_ms.map_or(String::new(), |t| format!("switch {t:.1} ms, "));
    format!(
        "  {:>7.2} s  {switch}longest gap {:.0} ms{dip}{datagrams}",
        m.at_s, m.gap_ms
    )
}

pub fn lines(r: &RekeyReport) -> Vec<String> {
    let mut out = vec![format!(
        "rekeys ({}, every {} s): {}",
        r.label,
        r.schedule.every_s,
        r.marks().count()
    )];
    for run in &r.runs {
        if r.runs.len() > 1 {
            out.push(format!(" transfer {}:", run.transfer));
        }
        out.extend(run.rekeys.iter().map(mark_line));
        let dip = match run.baseline_dip {
            Some(d) => format!(", lowest 10 ms at {:.0} %", d * 100.0),
            None => String::new(),
        };
        out.push(format!(
            "  away from the rekeys: longest gap {:.0} ms{dip} (median 10 ms bucket {:.2} MB)",
            run.baseline_gap_ms,
            run.median_bucket_bytes / 1e6
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::rekey::{RekeyDatagrams, RekeyOrder, RekeyRun, RekeySchedule};

    #[test]
    fn each_rekey_is_a_line_with_its_gap_dip_and_datagrams() {
        let r = RekeyReport {
            schedule: RekeySchedule {
                every_s: 1.0,
                order: RekeyOrder::Naive,
                sa: model::rekey::RekeyTarget::Child,
            },
            label: "naive".into(),
            how: String::new(),
            runs: vec![RekeyRun {
                transfer: 1,
                bucket_ms: 10,
                delivered: vec![],
                median_bucket_bytes: 250_000.0,
                baseline_gap_ms: 4.0,
                baseline_dip: Some(0.5),
                rekeys: vec![RekeyMark {
                    at_s: 1.0,
                    took_ms: Some(2.25),
                    gap_ms: 30.0,
                    dip: Some(0.0),
                    datagrams: Some(RekeyDatagrams {
                        sent: 900,
                        lost: 12,
                        reordered: 1,
                        duplicates: 0,
                    }),
                }],
            }],
        };
        assert_eq!(
            lines(&r),
            [
                "rekeys (naive, every 1 s): 1",
                "     1.00 s  switch 2.2 ms, longest gap 30 ms, lowest 10 ms at 0 % of the median; \
                 datagrams sent around it: 12 lost of 900, 1 reordered, 0 duplicated",
                "  away from the rekeys: longest gap 4 ms, lowest 10 ms at 50 % (median 10 ms bucket 0.25 MB)",
            ]
        );
    }
}
