//! How a run's modes read: a line per interval (`--interval`, and one per stream under it
//! with `-P N`), the table's rows of a reversed or two-way run, and the lines under the
//! table that say each way's median and what `--omit` left out. The binary prints the
//! lines live for a local run and from the report afterwards for a VM's.

use model::modes::IntervalRecord;
use model::report::TransferRecord;
use model::RunReport;

/// An interval's line, then with `-P N` one line per stream under it (as iperf3 shows
/// each stream beside the sum). An interval much shorter than the period (the last of a
/// transfer of a size, the rest of one cut by `--omit`) is marked: its rate is a burst.
pub fn interval_lines(r: &IntervalRecord, period_s: f64) -> String {
    let seconds = r.end_s - r.start_s;
    let mut lines = vec![interval_line(r)];
    if seconds < period_s / 10.0 {
        lines[0].push_str(&format!("  ({seconds:.3} s: too short for a steady rate)"));
    }
    let way = r.direction.map(|d| format!(" {d}")).unwrap_or_default();
    for (stream, &bytes) in r.streams.iter().enumerate() {
        let rate = if seconds > 0.0 {
            bytes as f64 / seconds / 1e6
        } else {
            0.0
        };
        lines.push(format!(
            "  stream {stream}{way}  {:6.2}-{:<6.2} s  {:>10}  {rate:8.1} MB/s",
            r.start_s,
            r.end_s,
            model::ByteSize(bytes).to_string(),
        ));
    }
    lines.join("\n")
}

/// `transfer 1 a->b  0.00-1.00 s  117.2 MB  117.2 MB/s (omitted)`.
pub fn interval_line(r: &IntervalRecord) -> String {
    let way = r.direction.map(|d| format!(" {d}")).unwrap_or_default();
    let cpu: Vec<String> = r
        .tunnel_cpu
        .iter()
        .map(|(name, percent)| format!("{name} {percent:.0} %"))
        .collect();
    let mut cpu = if cpu.is_empty() {
        String::new()
    } else {
        format!("  tunnel cpu {}", cpu.join(", "))
    };
    let esp: Vec<String> = r
        .esp_bytes
        .iter()
        .map(|(way, n)| format!("{way} {}", model::ByteSize(*n)))
        .collect();
    if !esp.is_empty() {
        cpu.push_str(&format!("  esp {}", esp.join(", ")));
    }
    format!(
        "transfer {}{way}  {:6.2}-{:<6.2} s  {:>10}  {:8.1} MB/s{cpu}{}",
        r.transfer,
        r.start_s,
        r.end_s,
        model::ByteSize(r.bytes).to_string(),
        r.mb_per_s,
        if r.omitted { "  (omitted)" } else { "" }
    )
}

/// The table's rows: one per transfer, named by the way it went; in a two-way run each
/// way's and then their sum.
pub fn rows(report: &RunReport) -> Vec<(String, &TransferRecord)> {
    let backend = report.plan.backend().to_string();
    let Some(modes) = &report.modes else {
        return report.transfers.iter().map(|t| (backend.clone(), t)).collect();
    };
    match &modes.bidir {
        Some(b) => report
            .transfers
            .iter()
            .enumerate()
            .flat_map(|(i, sum)| {
                let mut out = Vec::new();
                if let Some(t) = b.a_to_b.get(i) {
                    out.push((format!("{backend} a->b"), t));
                }
                if let Some(t) = b.b_to_a.get(i) {
                    out.push((format!("{backend} b->a"), t));
                }
                out.push((format!("{backend} sum"), sum));
                out
            })
            .collect(),
        None => {
            let label = match modes.direction {
                Some(d) => format!("{backend} {d}"),
                None => backend,
            };
            report.transfers.iter().map(|t| (label.clone(), t)).collect()
        }
    }
}

/// Lines under the table: each way's median in a two-way run, the warm-up left out.
pub fn summary_lines(report: &RunReport) -> Vec<String> {
    let Some(modes) = &report.modes else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(b) = &modes.bidir {
        out.push(format!(
            "both ways at once: a->b median {:.1} MB/s, b->a median {:.1} MB/s, sum median {:.1} MB/s",
            b.a_to_b_mb_per_s.median, b.b_to_a_mb_per_s.median, report.mb_per_s.median
        ));
    }
    if let Some(first) = modes.omitted.first() {
        let bytes: u64 = modes.omitted.iter().map(|o| o.bytes).sum();
        out.push(format!(
            "the first {:.2} s of each transfer left out of its figure (--omit): {} verified but not counted",
            first.seconds,
            model::ByteSize(bytes)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::Direction;

    #[test]
    fn an_interval_line_says_when_how_much_and_how_fast() {
        let r = IntervalRecord {
            transfer: 1,
            direction: Some(Direction::BToA),
            index: 2,
            start_s: 2.0,
            end_s: 3.0,
            bytes: 117_200_000,
            mb_per_s: 117.2,
            omitted: true,
            timestamp: 1.0,
            tunnel_cpu: [("ipl-tun-a".to_string(), 52.4)].into(),
            esp_bytes: Default::default(),
            streams: Vec::new(),
        };
        let line = interval_line(&r);
        assert!(line.starts_with("transfer 1 b->a    2.00-3.00   s"), "{line}");
        assert!(
            line.contains("117.2 MB/s  tunnel cpu ipl-tun-a 52 %  (omitted)"),
            "{line}"
        );
    }

    fn record(start_s: f64, end_s: f64, streams: Vec<u64>) -> IntervalRecord {
        let bytes = streams.iter().sum::<u64>().max(1_000_000);
        IntervalRecord {
            transfer: 1,
            direction: None,
            index: 1,
            start_s,
            end_s,
            bytes,
            mb_per_s: bytes as f64 / (end_s - start_s) / 1e6,
            omitted: false,
            timestamp: 1.0,
            tunnel_cpu: Default::default(),
            esp_bytes: Default::default(),
            streams,
        }
    }

    /// Regression: `-P 4 --interval 1` showed only the sum; iperf3 shows each stream too.
    #[test]
    fn with_several_streams_each_has_a_line_under_the_sum() {
        let text = interval_lines(&record(1.0, 2.0, vec![300_000_000, 100_000_000]), 1.0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("transfer 1 ") && lines[0].contains("400.0 MB"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("  stream 0 ") && lines[1].contains("300.0 MB/s"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("  stream 1 ") && lines[2].contains("100.0 MB/s"),
            "{text}"
        );
        // One stream: the one line.
        assert_eq!(interval_lines(&record(1.0, 2.0, vec![]), 1.0).lines().count(), 1);
    }

    /// Regression: "2.00-2.01 s 24.1 MB 3615.1 MB/s" read as a rate above the link; a
    /// sliver that still ends a transfer (one of a size) says it is one.
    #[test]
    fn an_interval_much_shorter_than_the_period_is_marked() {
        let short = interval_lines(&record(2.0, 2.007, vec![]), 1.0);
        assert!(
            short.contains("(0.007 s: too short for a steady rate)"),
            "{short}"
        );
        let full = interval_lines(&record(1.0, 2.0, vec![]), 1.0);
        assert!(!full.contains("too short"), "{full}");
        let last = interval_lines(&record(2.0, 2.5, vec![]), 1.0);
        assert!(!last.contains("too short"), "{last}");
    }
}
