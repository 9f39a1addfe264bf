//! The matrix as CSV: one line per cell (the plain baseline once per environment), every
//! number the JSON has, for spreadsheets. Fields are quoted as RFC 4180 says.

use model::ceiling::CeilingOutcome;
use model::matrix::{CellOutcome, MatrixReport, RowVariant};

use crate::packets::{idle_phase, loaded_phase, phase_has_echoes, phase_text, rates_found_text};
use crate::shared::{fmt_field, split_notes};

/// Between the notes of one field: notes hold `;` and `,` themselves.
const NOTE_SEPARATOR: &str = " | ";

pub const HEADER: [&str; 64] = [
    "environment",
    "virtualization",
    "backend",
    "variant",
    "row",
    "suite",
    "column",
    "status",
    "median_mb_s",
    "min_mb_s",
    "max_mb_s",
    "repeats",
    "percent_of_plain",
    "sender_cpu_percent",
    "receiver_cpu_percent",
    "tunnel_a_cpu_percent",
    "tunnel_b_cpu_percent",
    "served_by",
    // Bytes per transfer: the payload, or what a timed transfer moved (the median over
    // the repeats; empty for a timed cell of a result that did not record it).
    "payload_bytes",
    "reason",
    // The cell's crypto ceiling (empty where none was timed; no_ceiling_reason where the
    // row has none).
    "ceiling_mb_s",
    "percent_of_ceiling",
    "ceiling_limiting",
    "ceiling_packet_bytes",
    "ceiling_implementation",
    "no_ceiling_reason",
    // The cell's notes and then its row's, the warnings (a transfer too short to time, a
    // driver that did not serve) apart from the evidence; each list joined by " | ".
    "warnings",
    "notes",
    // UDP rows (`matrix --packet-sizes`): the inner packet size, delivered packets/s over
    // the trials, loss, and with --find-ndr the rates found; empty for TCP rows.
    "packet_size",
    "received_pps_median",
    "received_pps_min",
    "received_pps_max",
    "sent_pps_median",
    "loss_percent_median",
    "sent",
    "lost",
    "reordered",
    "duplicates",
    "corrupted",
    "ndr_pps",
    "pdr_pps",
    "rates_found",
    // `matrix --latency`: the idle phase's and the most loaded phase's round trips, then
    // every phase in a line each, joined by " | ".
    "latency_idle_p50_ms",
    "latency_idle_p99_ms",
    "latency_idle_max_ms",
    "latency_loaded_phase",
    "latency_loaded_p50_ms",
    "latency_loaded_p99_ms",
    "latency_loaded_max_ms",
    "latency_phases",
    // `matrix --rekey-every`: the schedule, the rekeys made, the longest gap around one and
    // away from all of them, the slowest switch, the lowest 10 ms bucket around one (% of
    // the median) and the datagrams lost around them (UDP); empty where the cell did not rekey.
    "rekey_every_s",
    "rekeys",
    "rekey_gap_ms",
    "rekey_baseline_gap_ms",
    "rekey_switch_ms",
    "rekey_dip_percent",
    "rekey_lost",
    // A TCP cell's time to first packet, its setup and its first byte.
    "ttfp_ms",
    "setup_ms",
    "first_byte_ms",
    // `matrix --setup-rate`: the row's backend's size and rates (name=per_s;...), the same
    // on each of its cells; empty where it has none.
    "setup_rate_size",
    "setup_rates",
    // The row's tunnel threads per end (xfrm: SA pairs, `matrix --threads`), and its TCP
    // streams per transfer where the sweep has several counts (`matrix -P 1,2,4`; empty
    // where it has one, given in its notes, and for UDP rows: one flow).
    "tunnel_threads",
    "streams",
];

/// The packet fields, in [`HEADER`]'s order.
fn packet_fields(row: &model::matrix::Row, cell: &model::matrix::Cell) -> Vec<String> {
    let size = match row.key.packet_size {
        Some(model::packets::PacketSize::Fixed(n)) => n.to_string(),
        Some(model::packets::PacketSize::Imix) => "imix".into(),
        None => String::new(),
    };
    let mut f = vec![size];
    match &cell.packets {
        Some(p) => {
            let rate = |tolerance: Option<f64>| {
                let found = match tolerance {
                    Some(t) => p.rate_at(t),
                    None => p.rates_found.iter().find(|r| r.tolerance_pct > 0.0),
                };
                found.map(|r| fmt_field(r.pps, 1)).unwrap_or_default()
            };
            f.extend([
                fmt_field(p.received_pps.median, 1),
                fmt_field(p.received_pps.min, 1),
                fmt_field(p.received_pps.max, 1),
                fmt_field(p.sent_pps.median, 1),
                fmt_field(p.loss_pct.median, 4),
                p.sent.to_string(),
                p.lost.to_string(),
                p.reordered.to_string(),
                p.duplicates.to_string(),
                p.corrupted.to_string(),
                rate(Some(0.0)),
                rate(None),
                rates_found_text(p),
            ]);
        }
        None => f.extend(std::iter::repeat_n(String::new(), 13)),
    }
    let figures = |phase: Option<&model::packets::LatencyPhase>| match phase.filter(|p| phase_has_echoes(p)) {
        Some(p) => [p.p50_ms, p.p99_ms, p.max_ms].map(|v| fmt_field(v, 4)),
        None => Default::default(),
    };
    match &cell.latency {
        Some(l) => {
            f.extend(figures(idle_phase(l)));
            let loaded = loaded_phase(l);
            f.push(loaded.map(|p| p.name.clone()).unwrap_or_default());
            f.extend(figures(loaded));
            let phases: Vec<String> = l.phases.iter().map(phase_text).collect();
            f.push(phases.join(NOTE_SEPARATOR));
        }
        None => f.extend(std::iter::repeat_n(String::new(), 8)),
    }
    f
}

/// The rekey fields, in [`HEADER`]'s order.
fn rekey_fields(r: Option<&model::rekey::RekeyCell>) -> [String; 7] {
    let Some(r) = r else {
        return Default::default();
    };
    [
        fmt_field(r.schedule.every_s, 3),
        r.rekeys.to_string(),
        fmt_field(r.gap_ms, 1),
        fmt_field(r.baseline_gap_ms, 1),
        r.took_ms.map(|t| fmt_field(t, 2)).unwrap_or_default(),
        r.dip.map(|d| fmt_field(d * 100.0, 1)).unwrap_or_default(),
        r.lost.map(|l| l.to_string()).unwrap_or_default(),
    ]
}

/// The ceiling's fields, in [`HEADER`]'s order.
fn ceiling_fields(m: Option<&model::matrix::Measurement>) -> [String; 6] {
    let Some((m, c)) = m.and_then(|m| Some((m, m.ceiling.as_ref()?))) else {
        return Default::default();
    };
    match &c.outcome {
        CeilingOutcome::Measured(s) => [
            fmt_field(s.mb_per_s, 3),
            m.percent_of_ceiling.map(|p| fmt_field(p, 2)).unwrap_or_default(),
            s.limiting.name().to_string(),
            c.packet_bytes.to_string(),
            s.implementation.clone(),
            String::new(),
        ],
        CeilingOutcome::None { reason } => [
            String::new(),
            String::new(),
            String::new(),
            c.packet_bytes.to_string(),
            String::new(),
            reason.clone(),
        ],
    }
}

use crate::escape::csv as field;

/// A measured cell's bytes per transfer: the median of what its repeats moved, else the
/// payload each moved whole (empty for a timed cell that did not record it).
fn moved_bytes(m: &model::matrix::Measurement, payload: model::ByteSize) -> String {
    let mut bytes = m.bytes.clone();
    bytes.sort_unstable();
    match bytes.get(bytes.len() / 2) {
        Some(median) => median.to_string(),
        None if m.timed_s.is_some() => String::new(),
        None => payload.0.to_string(),
    }
}

pub fn render(report: &MatrixReport) -> String {
    let mut out = HEADER.join(",") + "\n";
    for row in &report.rows {
        let virt = report
            .environments
            .get(&row.key.environment)
            .map(|e| e.virtualization.clone())
            .unwrap_or_default();
        let variant = match &row.key.variant {
            RowVariant::Default => String::new(),
            RowVariant::Crypto(c) => c.to_string(),
            RowVariant::KernelDriver(d) => d.clone(),
            RowVariant::Encap(e) => e.short_label(),
            RowVariant::Pcrypt => "pcrypt".into(),
            RowVariant::PerCpuSa => "per-cpu-sa".into(),
        };
        let payload = report.payload_of(&row.key.environment);
        for cell in &row.cells {
            let mut f: Vec<String> = vec![
                row.key.environment.clone(),
                virt.clone(),
                row.key.backend.to_string(),
                variant.clone(),
                row.label(),
                cell.suite.name(),
                cell.suite.short_label(),
            ];
            match &cell.outcome {
                CellOutcome::Measured(m) => f.extend([
                    "measured".to_string(),
                    fmt_field(m.mb_per_s.median, 3),
                    fmt_field(m.mb_per_s.min, 3),
                    fmt_field(m.mb_per_s.max, 3),
                    m.mb_per_s.n.to_string(),
                    m.percent_of_plain.map(|p| fmt_field(p, 2)).unwrap_or_default(),
                    fmt_field(m.cpu.sender_percent.median, 1),
                    fmt_field(m.cpu.receiver_percent.median, 1),
                    m.tunnel_cpu
                        .map(|t| fmt_field(t.a_percent, 1))
                        .unwrap_or_default(),
                    m.tunnel_cpu
                        .map(|t| fmt_field(t.b_percent, 1))
                        .unwrap_or_default(),
                    m.served_by.clone().unwrap_or_default(),
                    moved_bytes(m, payload),
                    String::new(),
                ]),
                CellOutcome::NotRun { reason } => {
                    f.push("not_run".into());
                    f.extend(std::iter::repeat_n(String::new(), 10));
                    f.push(payload.0.to_string());
                    f.push(reason.clone());
                }
            }
            f.extend(ceiling_fields(cell.measurement()));
            let (warnings, notes) = split_notes(row, cell);
            f.push(warnings.join(NOTE_SEPARATOR));
            f.push(notes.join(NOTE_SEPARATOR));
            f.extend(packet_fields(row, cell));
            f.extend(rekey_fields(cell.rekey.as_ref()));
            f.extend(match cell.first_packet {
                Some(p) => [p.ttfp_ms, p.setup_ms, p.first_byte_ms].map(|v| fmt_field(v, 3)),
                None => Default::default(),
            });
            let setup = model::setup_rate::SetupBackend::of(row.key.backend)
                .and_then(|b| report.setup_rates.iter().find(|c| c.backend == b));
            f.extend(match setup {
                Some(c) => [c.size.0.to_string(), c.field()],
                None => Default::default(),
            });
            f.push(row.key.tunnel_threads.to_string());
            f.push(row.key.streams.map(|n| n.to_string()).unwrap_or_default());
            out.push_str(&f.iter().map(|s| field(s)).collect::<Vec<_>>().join(","));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;
    use model::matrix::RowKey;

    /// Splits one CSV line, honouring quotes (enough for this module's own output).
    fn split(line: &str) -> Vec<String> {
        let mut out = vec![String::new()];
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    chars.next();
                    out.last_mut().unwrap().push('"');
                }
                ('"', _) => quoted = !quoted,
                (',', false) => out.push(String::new()),
                (c, _) => out.last_mut().unwrap().push(c),
            }
        }
        out
    }

    #[test]
    fn one_line_per_cell_with_every_field() {
        let r = fixture::report();
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        let cells: usize = r.rows.iter().map(|row| row.cells.len()).sum();
        assert_eq!(lines.len(), 1 + cells);
        for l in &lines {
            assert_eq!(split(l).len(), HEADER.len(), "{l}");
        }
        let soft = lines
            .iter()
            .map(|l| split(l))
            .find(|f| f[4] == "userspace [soft]" && f[5] == "aes-128-cbc")
            .unwrap();
        assert_eq!(&soft[7..12], ["measured", "105.000", "100.000", "110.000", "3"]);
        let generic = lines
            .iter()
            .map(|l| split(l))
            .find(|f| f[3] == "aes-generic")
            .unwrap();
        assert_eq!(generic[17], "authenc(hmac(sha256-generic),cbc(aes-generic))");
        assert_eq!(generic[18], "1000000", "the VM rows' own payload");
        let ovpn = lines
            .iter()
            .map(|l| split(l))
            .find(|f| f[4] == "openvpn")
            .unwrap();
        assert_eq!(&ovpn[15..17], ["97.0", "88.0"]);
        assert_eq!(generic[1], "vm (tcg: emulated, speeds not representative)");
        let not_run = lines
            .iter()
            .map(|l| split(l))
            .find(|f| f[7] == "not_run")
            .unwrap();
        assert_eq!(not_run[19], "no ESP in this kernel (CONFIG_INET_ESP); use --vm");
        assert_eq!(not_run[8], "");
        let auto = lines
            .iter()
            .map(|l| split(l))
            .find(|f| f[4] == "userspace [auto]" && f[5] == "aes-128-cbc")
            .unwrap();
        assert_eq!(
            &auto[20..25],
            ["1000.000", "31.00", "encrypt", "1407", "auto (aws-lc-rs)"]
        );
        assert_eq!(ovpn[25], "openssl is not installed (apt-get install openssl)");
        assert_eq!(ovpn[20], "");
        let (empty, row_shape) = soft[20..].split_at(soft.len() - 22);
        assert!(empty.iter().all(String::is_empty), "{soft:?}");
        assert_eq!(row_shape, ["1", ""], "one thread, the sweep's one stream count");
    }

    #[test]
    fn a_too_short_transfer_warning_reaches_the_csv() {
        let text = render(&fixture::warned());
        let lines: Vec<Vec<String>> = text.lines().map(split).collect();
        assert_eq!(&lines[0][26..28], ["warnings", "notes"]);
        let find = |row: &str, suite: &str| {
            lines
                .iter()
                .find(|f| f[4] == row && f[5] == suite)
                .unwrap_or_else(|| panic!("{row} {suite}"))
                .clone()
        };
        assert_eq!(find("plain (line rate)", "none")[26], fixture::TOO_SHORT);
        let auto_128 = find("userspace [auto]", "aes-128-cbc");
        assert_eq!(auto_128[26], fixture::TOO_SHORT);
        assert_eq!(auto_128[27], fixture::EVIDENCE);
        let auto_256 = find("userspace [auto]", "aes-256-cbc-hmac-sha256");
        assert_eq!(
            auto_256[26],
            "aes-generic was raised for this row but cbc-aes-aesni served"
        );
        // A row's note is every one of its cells' note, measured or not.
        for suite in ["aes-128-cbc", "aes-256-gcm"] {
            assert_eq!(find("openvpn", suite)[27], "default kernel drivers only: a test");
        }
        assert_eq!(find("userspace [soft]", "aes-128-cbc")[26..28], ["", ""]);
    }

    /// Issue 43 item 8: a timed cell's payload_bytes was the sweep's --bytes (20000000 for a
    /// plain row that moved gigabytes); it is what its transfers moved.
    #[test]
    fn a_timed_cell_gives_the_bytes_it_moved_not_the_payload() {
        let mut r = fixture::report();
        let column = HEADER.iter().position(|h| *h == "payload_bytes").unwrap();
        if let CellOutcome::Measured(m) = &mut r.rows[0].cells[0].outcome {
            m.timed_s = Some(1.0);
            m.bytes = vec![1_100_000_000, 1_000_000_000, 1_200_000_000];
        }
        if let CellOutcome::Measured(m) = &mut r.rows[5].cells[0].outcome {
            // A timed cell of a result that did not record what it moved.
            m.timed_s = Some(1.0);
        }
        let lines: Vec<Vec<String>> = render(&r).lines().map(split).collect();
        let plain = |env: &str| {
            lines
                .iter()
                .find(|f| f[4].starts_with("plain") && f[0] == env)
                .unwrap()[column]
                .clone()
        };
        assert_eq!(plain(model::matrix::HOST), "1100000000");
        assert_eq!(plain(model::matrix::VM), "");
        let soft = lines.iter().find(|f| f[4] == "userspace [soft]").unwrap();
        assert_eq!(soft[column], "4000000", "a sized cell moved the payload");
    }

    #[test]
    fn quotes_fields_with_commas_and_quotes() {
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(field("plain"), "plain");
    }

    #[test]
    fn udp_cells_carry_packets_per_second_loss_rates_found_and_latency() {
        let r = fixture::packets();
        let text = render(&r);
        let lines: Vec<Vec<String>> = text.lines().map(split).collect();
        let column = |name: &str| HEADER.iter().position(|h| *h == name).unwrap();
        for l in &lines {
            assert_eq!(l.len(), HEADER.len(), "{l:?}");
        }
        let find = |row: &str| {
            lines
                .iter()
                .find(|f| f[4] == row)
                .unwrap_or_else(|| panic!("{row}"))
        };
        let searched = find("userspace [auto] UDP 64 B");
        assert_eq!(searched[column("packet_size")], "64");
        assert_eq!(searched[column("received_pps_median")], "81000.0");
        let loss: f64 = searched[column("loss_percent_median")].parse().unwrap();
        assert!((loss - 2.0).abs() < 0.001, "{loss}");
        assert_eq!(searched[column("ndr_pps")], "60000.0");
        assert_eq!(searched[column("pdr_pps")], "70000.0");
        assert_eq!(searched[column("latency_idle_p99_ms")], "0.1000");
        assert_eq!(searched[column("latency_loaded_phase")], "under UDP load");
        assert_eq!(searched[column("latency_loaded_p99_ms")], "15.0000");
        assert!(searched[column("latency_phases")].starts_with(
            "idle: p50 0.050 · p99 0.100 · max 0.200 ms (1000/1000 probes) | under UDP load: p50 3.75"
        ));
        let plain = find("plain (line rate) UDP 1400 B");
        assert_eq!(
            (plain[column("ndr_pps")].as_str(), plain[column("lost")].as_str()),
            ("", "0")
        );
        let not_run = find("xfrm UDP 1400 B (vm)");
        assert_eq!(not_run[7], "not_run");
        assert_eq!(not_run[column("packet_size")], "1400");
        let row_shape = column("tunnel_threads");
        assert!(
            not_run[column("packet_size") + 1..row_shape]
                .iter()
                .all(String::is_empty),
            "{not_run:?}"
        );
        assert_eq!(not_run[row_shape..], ["1", ""], "one flow: no stream count");
        // TCP rows leave every packet and latency field empty.
        let tcp = render(&fixture::report());
        for l in tcp.lines().skip(1).map(split) {
            assert!(l[28..row_shape].iter().all(String::is_empty), "{l:?}");
        }
    }

    /// `matrix --threads 2 -P 1,2`: each row's SA pairs and stream count in columns of
    /// their own, for a spreadsheet's scaling curve.
    #[test]
    fn a_rows_threads_and_stream_count_have_columns() {
        let mut r = fixture::report();
        let key = |threads, streams| {
            RowKey::new(model::Backend::Xfrm, RowVariant::Default, model::matrix::VM)
                .with_threads(threads)
                .with_streams(Some(streams))
        };
        r.rows.push(model::matrix::Row {
            key: key(2, 4),
            cells: vec![model::matrix::Cell::not_run(r.suites[0], "interrupted")],
            notes: vec![],
        });
        let text = render(&r);
        let last = split(text.lines().last().unwrap());
        let column = |name: &str| HEADER.iter().position(|h| *h == name).unwrap();
        assert_eq!(last[4], "xfrm x2 SAs -P 4 (vm)");
        assert_eq!(
            (
                last[column("tunnel_threads")].as_str(),
                last[column("streams")].as_str()
            ),
            ("2", "4")
        );
        let first = split(text.lines().nth(1).unwrap());
        assert_eq!(
            (
                first[column("tunnel_threads")].as_str(),
                first[column("streams")].as_str()
            ),
            ("1", "")
        );
    }
}
