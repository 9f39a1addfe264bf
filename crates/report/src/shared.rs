//! What every format shows the same way: the cell under a column, the reasons cells did not
//! run (numbered once for all formats), rates as printed, the conditions and environment
//! lines, and what a column label stands for. Below every format; imports none of them.

use model::matrix::{Cell, CellOutcome, MatrixReport, Measurement, Row};
use model::{ByteSize, CipherSuite, Environment, Hmac};

/// The cell a row shows under `suite`: the plain baseline's single cell stands under every
/// column (one suite-independent measurement per environment).
pub fn cell_for(row: &Row, suite: CipherSuite) -> Option<&Cell> {
    if row.is_baseline() {
        row.cells.first()
    } else {
        row.cell(suite)
    }
}

/// Why cells did not run, each reason once, in the order of the rows and columns: the
/// numbers the HTML table and the chart both cite (`not run [n]`).
pub fn not_run_reasons(report: &MatrixReport) -> Vec<&str> {
    let mut reasons: Vec<&str> = Vec::new();
    for row in &report.rows {
        for suite in &report.suites {
            if let Some(CellOutcome::NotRun { reason }) = cell_for(row, *suite).map(|c| &c.outcome) {
                if !reasons.contains(&reason.as_str()) {
                    reasons.push(reason);
                }
            }
        }
    }
    reasons
}

/// A measured cell against its crypto ceiling: `31 % of 1000.0` (the share and the
/// ceiling's MB/s), `— no ceiling` where the row has none (the reason is listed apart), or
/// None where no ceiling was timed (`--no-ceiling`, the plain row).
pub fn ceiling_text(m: &Measurement) -> Option<String> {
    let c = m.ceiling.as_ref()?;
    Some(match (c.mb_per_s(), m.percent_of_ceiling) {
        (Some(ceiling), Some(p)) if p.is_finite() => format!("{p:.0} % of {}", fmt_rate(ceiling)),
        _ => "— no ceiling".to_string(),
    })
}

/// Why rows have no ceiling: `row label (suite, suite): reason`, each row and reason once.
pub fn no_ceiling_reasons(report: &MatrixReport) -> Vec<String> {
    let mut out: Vec<(String, String, Vec<String>)> = Vec::new();
    for row in &report.rows {
        for cell in &row.cells {
            let Some(reason) = cell
                .measurement()
                .and_then(|m| m.ceiling.as_ref())
                .and_then(|c| c.reason())
            else {
                continue;
            };
            let label = row.label();
            match out.iter_mut().find(|(l, r, _)| *l == label && r == reason) {
                Some((_, _, suites)) => suites.push(cell.suite.short_label()),
                None => out.push((label, reason.to_string(), vec![cell.suite.short_label()])),
            }
        }
    }
    out.into_iter()
        .map(|(label, reason, suites)| format!("{label} ({}): {reason}", suites.join(", ")))
        .collect()
}

/// Whether any cell has a ceiling timed (measured or not): the ceiling sections show then.
pub fn has_ceilings(report: &MatrixReport) -> bool {
    report
        .rows
        .iter()
        .flat_map(|r| r.cells.iter())
        .any(|c| c.measurement().is_some_and(|m| m.ceiling.is_some()))
}

/// A row's label and its cells' text, a column each.
pub type LabelledCells = (String, Vec<String>);

/// A rekey sweep's (`matrix --rekey-every`) table: its schedule, and per row with a rekey
/// cell (rows whose backend the lab cannot rekey, the baseline and UDP rows have none) its
/// label and each column's text. None where no cell rekeyed.
pub fn rekey_table(report: &MatrixReport) -> Option<(model::rekey::RekeySchedule, Vec<LabelledCells>)> {
    let schedule = report
        .rows
        .iter()
        .flat_map(|r| r.cells.iter())
        .find_map(|c| c.rekey)?
        .schedule;
    let rows = report
        .rows
        .iter()
        .filter(|r| r.key.packet_size.is_none() && r.key.backend.describe().rekey.is_some())
        .map(|row| {
            let cells = report
                .suites
                .iter()
                .map(|s| match cell_for(row, *s) {
                    Some(c) => match (&c.outcome, c.rekey) {
                        (_, Some(r)) => r.text(),
                        (model::matrix::CellOutcome::Measured(_), None) => "no rekey".into(),
                        (model::matrix::CellOutcome::NotRun { .. }, None) => "not run".into(),
                    },
                    None => "—".into(),
                })
                .collect();
            (row.label(), cells)
        })
        .collect();
    Some((schedule, rows))
}

/// A table beside the matrix's (rekeys, time to first packet, setup rates): a row per
/// backend, its columns (a cipher each, for the first two), its heading and what its cells
/// mean, rendered alike by every format.
pub struct SideTable {
    /// The class HTML gives it and the name SVG gives its section.
    pub id: &'static str,
    pub title: String,
    pub explained: &'static str,
    /// The headings of the columns after the backend's.
    pub columns: Vec<String>,
    pub rows: Vec<LabelledCells>,
}

/// The matrix's side tables, where it has them.
pub fn side_tables(report: &MatrixReport) -> Vec<SideTable> {
    let rekey = rekey_table(report).map(|(schedule, rows)| SideTable {
        id: "rekey",
        title: format!(
            "Rekey under load (every {} s, xfrm {})",
            schedule.every_s, schedule.order
        ),
        explained: REKEY_EXPLAINED,
        columns: suite_columns(report),
        rows,
    });
    rekey
        .into_iter()
        .chain(scaling_table(report))
        .chain(first_packet_table(report))
        .chain(setup_rate_table(report))
        .collect()
}

/// `matrix -P 1,2,4`: each row's median MB/s at every stream count in order and the ratio
/// of its largest measured count to its smallest; None where the sweep had one count.
pub fn scaling_table(report: &MatrixReport) -> Option<SideTable> {
    let mut counts: Vec<u16> = report.rows.iter().filter_map(|r| r.key.streams).collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.len() < 2 {
        return None;
    }
    // A row's curve: its rows at each count, in the table's order of first appearance.
    let mut curves: Vec<(model::matrix::RowKey, Vec<&Row>)> = Vec::new();
    for row in report.rows.iter().filter(|r| r.key.streams.is_some()) {
        let key = row.key.clone().with_streams(None);
        match curves.iter_mut().find(|(k, _)| *k == key) {
            Some((_, rows)) => rows.push(row),
            None => curves.push((key, vec![row])),
        }
    }
    let rows = curves
        .into_iter()
        .map(|(key, rows)| {
            let cells = report
                .suites
                .iter()
                .map(|suite| {
                    let at = |n: u16| {
                        rows.iter()
                            .find(|r| r.key.streams == Some(n))
                            .and_then(|r| cell_for(r, *suite))
                            .and_then(Cell::measurement)
                            .map(|m| m.mb_per_s.median)
                            .filter(|v| v.is_finite())
                    };
                    let points: Vec<(u16, Option<f64>)> = counts.iter().map(|n| (*n, at(*n))).collect();
                    let measured: Vec<(u16, f64)> =
                        points.iter().filter_map(|(n, v)| v.map(|v| (*n, v))).collect();
                    if measured.is_empty() {
                        return "—".to_string();
                    }
                    let curve: Vec<String> = points
                        .iter()
                        .map(|(_, v)| v.map_or("—".into(), fmt_rate))
                        .collect();
                    match (measured.first(), measured.last()) {
                        (Some((lo, from)), Some((hi, to))) if hi > lo && *from > 0.0 => {
                            format!(
                                "{} (×{:.2} at -P {hi} over -P {lo})",
                                curve.join(" → "),
                                to / from
                            )
                        }
                        _ => curve.join(" → "),
                    }
                })
                .collect();
            (key.label(), cells)
        })
        .collect();
    Some(SideTable {
        id: "scaling",
        title: format!(
            "Scaling with TCP streams (-P {})",
            counts.iter().map(u16::to_string).collect::<Vec<_>>().join(" → ")
        ),
        explained: SCALING_EXPLAINED,
        columns: suite_columns(report),
        rows,
    })
}

/// What the scaling table's cells mean, in one sentence for every format.
pub const SCALING_EXPLAINED: &str = "each row's median MB/s at each -P count of the sweep, in order (— where its cell did not run), and how many times faster its largest measured count was than its smallest, both measured in this sweep (docs/xfrm.md: what one SA, SA pairs and per-CPU SAs do with a tunnel's flows)";

fn suite_columns(report: &MatrixReport) -> Vec<String> {
    report.suites.iter().map(|s| s.short_label()).collect()
}

/// `--setup-rate`: each backend's setup rates; None where the sweep measured none.
pub fn setup_rate_table(report: &MatrixReport) -> Option<SideTable> {
    if report.setup_rates.is_empty() {
        return None;
    }
    let rows = report
        .setup_rates
        .iter()
        .map(|c| {
            let place = match c.measured_in.as_str() {
                "" => "—".to_string(),
                place => place.to_string(),
            };
            (
                c.backend.to_string(),
                vec![format!("{} {}", c.size, c.backend.unit()), place, c.text()],
            )
        })
        .collect();
    Some(SideTable {
        id: "setup-rate",
        title: "Setup rate".into(),
        explained: SETUP_RATE_EXPLAINED,
        columns: vec!["size".into(), "measured in".into(), "per second".into()],
        rows,
    })
}

/// What the setup-rate table's cells mean, in one sentence for every format.
pub const SETUP_RATE_EXPLAINED: &str = "how fast each backend sets up what its tunnels need at that size (docs/lifecycle.md, `setup-rate`): xfrm SAs and policies over netlink, batched and one by one, in user-mode Linux; strongswan IKE_SAs between two charons, windowed and one at a time; wireguard-go peers added in one UAPI set and one by one, and handshakes completed; initiators and responders share the host's CPUs";

/// Each TCP cell's time to first packet, and its setup; None where no cell has one.
pub fn first_packet_table(report: &MatrixReport) -> Option<SideTable> {
    let has = |row: &Row| row.cells.iter().any(|c| c.first_packet.is_some());
    if !report.rows.iter().any(has) {
        return None;
    }
    let rows = report
        .rows
        .iter()
        .filter(|r| has(r))
        .map(|row| {
            let cells = report
                .suites
                .iter()
                .map(|s| {
                    cell_for(row, *s)
                        .and_then(|c| c.first_packet)
                        .map_or("—".into(), |f| f.cell_text())
                })
                .collect();
            (row.label(), cells)
        })
        .collect();
    Some(SideTable {
        id: "first-packet",
        title: "Time to first packet".into(),
        explained: FIRST_PACKET_EXPLAINED,
        columns: suite_columns(report),
        rows,
    })
}

/// What the time-to-first-packet table's cells mean, in one sentence for every format.
pub const FIRST_PACKET_EXPLAINED: &str = "from the tunnel's first setup step to the first verified byte through it (docs/lifecycle.md): the setup (both ends up, the key exchange included), then the first transfer's connection and first data; one start per cell, not a distribution";

/// What the rekey table's cells mean, in one sentence for every format.
pub const REKEY_EXPLAINED: &str = "each TCP cell's keys were replaced on the schedule while the data flowed (docs/lifecycle.md): gap = the longest stretch with no byte delivered around a rekey, (away) = the longest away from every rekey, the flow's own; the datagrams lost around the rekeys where the cell sent UDP";

/// What the ceiling columns mean, in one sentence for every format.
pub const CEILING_EXPLAINED: &str = "crypto ceiling: the suite's speed at the packet size the row sent, timed right after the cell in the same environment with what the row used (userspace: its implementation; kernel rows: a per-byte bound through AF_ALG in the same kernel, in user-mode Linux its own tcrypt where it has one; openvpn: openssl speed; boringtun: ring), per CPU-second of the timing thread, the slower of encrypt and decrypt";

/// MB/s as the tables print it: one decimal, or two below 10 (TCG rows are that slow). A
/// rate that is not a number (a report made by hand, or by a future bug) prints as "—",
/// never as inf or NaN.
pub fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        "—".into()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// `v` with `decimals` decimals for a machine-read field; empty when not finite.
pub fn fmt_field(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        String::new()
    }
}

/// The lines every report carries: a number without its conditions is not a result.
pub fn conditions(report: &MatrixReport) -> Vec<String> {
    let mut out = Vec::new();
    match timed_transfer_s(report) {
        Some(seconds) => out.push(format!(
            "each transfer timed {seconds} s (its size is what got through), {} repeat(s) per cell, every \
             transfer verified; MB/s = 10^6 bytes/s",
            report.repeat
        )),
        None => {
            out.push(format!(
                "payload {} per transfer, {} repeat(s) per cell, every transfer verified; MB/s = 10^6 bytes/s",
                report.payload, report.repeat
            ));
            for (env, size) in &report.payload_by_environment {
                out.push(format!("rows of {env}: payload {size} per transfer"));
            }
        }
    }
    let trial_s = report
        .rows
        .iter()
        .filter(|r| r.key.packet_size.is_some())
        .flat_map(|r| &r.cells)
        .find_map(|c| c.measurement()?.timed_s);
    if let Some(seconds) = trial_s {
        out.push(format!(
            "UDP rows: datagrams of the row's inner packet size for {seconds} s a trial, every datagram verified, no payload size"
        ));
    }
    out.push(match report.family {
        model::Family::Ipv4 => "links and tunnels over IPv4 (198.18.0.0/15, RFC 2544)".to_string(),
        model::Family::Ipv6 => "links and tunnels over IPv6 (2001:2::/48, RFC 5180)".to_string(),
    });
    for (name, env) in &report.environments {
        out.push(format!(
            "{} — {}",
            environment_title(name, Some(env)),
            environment_summary(env)
        ));
    }
    if report.environments.values().any(|e| e.is_emulated()) {
        out.push("rows marked (vm) ran under TCG emulation: they show correctness, not speed".to_string());
    }
    if report.interrupted {
        out.push("the sweep was interrupted (Ctrl-C): cells not reached are marked not run".into());
    }
    out
}

/// An environment's name as a reader wants it: `host`, `vm (tcg: emulated, …)` — the
/// key and where it ran, said once (the key `host` ran on the "host": not "host: host").
pub fn environment_title(name: &str, env: Option<&Environment>) -> String {
    match env {
        Some(e) if e.virtualization.starts_with(name) => e.virtualization.clone(),
        Some(e) => format!("{name} ({})", e.virtualization),
        None => format!("{name} (conditions not recorded)"),
    }
}

/// Kernel, CPU, its crypto flags, the kernel's preferred drivers and the tool's version.
pub fn environment_summary(env: &Environment) -> String {
    let drivers: Vec<String> = env
        .kernel_drivers
        .iter()
        .map(|(alg, d)| format!("{alg}={d}"))
        .collect();
    format!(
        "kernel {}, {} ({}), crypto flags [{}], kernel drivers [{}], ipsec-lab {}",
        env.kernel_release,
        env.cpu_model,
        model::plural(env.cpus, "CPU"),
        env.crypto_flags_text(),
        if drivers.is_empty() {
            "none instantiated".to_string()
        } else {
            drivers.join(", ")
        },
        env.tool_version,
    )
}

/// The report's column names and what each stands for, as one sentence's list.
pub fn columns_explained(report: &MatrixReport) -> String {
    report
        .suites
        .iter()
        .map(|s| format!("{} = {}", s.short_label(), suite_explained(*s)))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// What a column label stands for: `256+HMAC` → `AES-256-CBC with HMAC-SHA256`.
pub fn suite_explained(suite: CipherSuite) -> String {
    match suite {
        CipherSuite::None => "no encryption".into(),
        CipherSuite::AesCbc {
            key,
            hmac: Hmac::None,
        } => format!("AES-{key}-CBC (no HMAC)"),
        CipherSuite::AesCbc {
            key,
            hmac: Hmac::Sha256,
        } => format!("AES-{key}-CBC with HMAC-SHA256"),
        CipherSuite::AesGcm { key } => format!("AES-{key}-GCM"),
        CipherSuite::ChaCha20Poly1305 => "ChaCha20-Poly1305".into(),
    }
}

/// Short description for titles: `median of 3 × 100.0 MB` (`, vm: 10.0 MB` where a
/// VM's rows used another payload).
pub fn method(report: &MatrixReport) -> String {
    if let Some(seconds) = timed_transfer_s(report) {
        return format!("median of {} × {seconds} s", report.repeat);
    }
    let mut s = format!("median of {} × {}", report.repeat, report.payload);
    for (env, size) in &report.payload_by_environment {
        s.push_str(&format!(", {env}: {size}"));
    }
    s
}

/// How long the tunnels' TCP transfers were timed for, where they ran for a time rather than
/// moving the payload (`matrix --time`, its default); None where they moved the payload.
/// The plain row is timed whatever the sweep's transfers (`--bytes` is over in
/// milliseconds at line rate): it does not count.
pub fn timed_transfer_s(report: &MatrixReport) -> Option<f64> {
    report
        .rows
        .iter()
        .filter(|r| r.key.packet_size.is_none() && !r.is_baseline())
        .flat_map(|r| &r.cells)
        .find_map(|c| c.measurement()?.timed_s)
}

/// The mark a cell with a warning carries, followed by the warning's number: `1964.0 ⚠1`.
pub const WARNING_MARK: &str = "⚠";

/// Phrases of the notes that put a figure in doubt; the other notes are evidence (SA
/// counters, tunnel threads' CPU, ignored options). Each is what its producer writes: a
/// transfer too short to time steadily (`model::report::short_transfer_note`, the iperf3
/// reference's), a kernel driver raised for a row that another served (the sweep), an
/// undo that could not be done, a step that failed.
const WARNING_PHRASES: [&str; 4] = ["too short", "was raised for this row but", "could not", "failed"];

/// Whether a note of the report is a warning about the figures (else it is evidence).
pub fn is_warning(note: &str) -> bool {
    WARNING_PHRASES.iter().any(|p| note.contains(p))
}

/// The shortest transfer of a measured cell in seconds: its timed length, else its payload
/// over its fastest repeat (such a transfer moves the whole payload). None without a
/// usable rate.
pub fn shortest_transfer_s(payload: ByteSize, m: &Measurement) -> Option<f64> {
    if let Some(timed) = m.timed_s {
        return Some(timed);
    }
    let fastest = m
        .samples
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .reduce(f64::max)?;
    Some(payload.0 as f64 / (fastest * 1e6))
}

/// The report's cell warnings, each distinct text numbered once in the order of the rows
/// and columns (the numbers every format shows beside [`WARNING_MARK`]), and which cells
/// carry which.
pub struct Warnings {
    /// The distinct warnings; number n is `texts[n - 1]`.
    pub texts: Vec<String>,
    /// (row index, the cell's suite) → the numbers of its warnings.
    cells: Vec<(usize, CipherSuite, Vec<usize>)>,
    /// Per warning: the rows that carry it, each with the columns it is under (none for
    /// the baseline, which stands under every column).
    carriers: Vec<Vec<(String, Vec<String>)>>,
}

impl Warnings {
    pub fn of(report: &MatrixReport) -> Warnings {
        let mut w = Warnings {
            texts: Vec::new(),
            cells: Vec::new(),
            carriers: Vec::new(),
        };
        for (i, row) in report.rows.iter().enumerate() {
            for cell in &row.cells {
                let Some(m) = cell.measurement() else { continue };
                let mut numbers = Vec::new();
                for note in m.notes.iter().filter(|n| is_warning(n)) {
                    let n = match w.texts.iter().position(|t| t == note) {
                        Some(k) => k + 1,
                        None => {
                            w.texts.push(note.clone());
                            w.carriers.push(Vec::new());
                            w.texts.len()
                        }
                    };
                    if numbers.contains(&n) {
                        continue;
                    }
                    numbers.push(n);
                    let label = row.label();
                    let carriers = &mut w.carriers[n - 1];
                    let at = match carriers.iter().position(|(l, _)| *l == label) {
                        Some(at) => at,
                        None => {
                            carriers.push((label, Vec::new()));
                            carriers.len() - 1
                        }
                    };
                    if !row.is_baseline() {
                        carriers[at].1.push(cell.suite.short_label());
                    }
                }
                if !numbers.is_empty() {
                    w.cells.push((i, cell.suite, numbers));
                }
            }
        }
        w
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// The numbers of the warnings of `cell`, the cell of row `row` (its index in the report).
    pub fn numbers(&self, row: usize, cell: &Cell) -> &[usize] {
        self.cells
            .iter()
            .find(|(r, s, _)| *r == row && *s == cell.suite)
            .map_or(&[], |(_, _, n)| n.as_slice())
    }

    /// `⚠1` or `⚠1,3` for a cell with warnings; None for one without.
    pub fn mark(&self, row: usize, cell: &Cell) -> Option<String> {
        let numbers = self.numbers(row, cell);
        (!numbers.is_empty()).then(|| {
            let list: Vec<String> = numbers.iter().map(ToString::to_string).collect();
            format!("{WARNING_MARK}{}", list.join(","))
        })
    }

    /// The texts of the warnings of `cell`, for a tooltip.
    pub fn texts_of(&self, row: usize, cell: &Cell) -> Vec<&str> {
        self.numbers(row, cell)
            .iter()
            .map(|n| self.texts[n - 1].as_str())
            .collect()
    }

    /// One line per warning: `⚠1 userspace [auto] (128, 256+HMAC): text`.
    pub fn lines(&self) -> Vec<String> {
        self.texts
            .iter()
            .zip(&self.carriers)
            .enumerate()
            .map(|(i, (text, carriers))| {
                let cells: Vec<String> = carriers
                    .iter()
                    .map(|(label, columns)| match columns.is_empty() {
                        true => label.clone(),
                        false => format!("{label} ({})", columns.join(", ")),
                    })
                    .collect();
                format!("{WARNING_MARK}{} {}: {text}", i + 1, cells.join(", "))
            })
            .collect()
    }
}

/// A cell's notes apart: (warnings, the rest), its row's notes after its own.
pub fn split_notes<'a>(row: &'a Row, cell: &'a Cell) -> (Vec<&'a str>, Vec<&'a str>) {
    cell.measurement()
        .map(|m| m.notes.as_slice())
        .unwrap_or_default()
        .iter()
        .chain(&row.notes)
        .map(String::as_str)
        .partition(|n| is_warning(n))
}

/// Row and report notes as the formats list them: `row label: note`, then the report's.
pub fn row_and_report_notes(report: &MatrixReport) -> Vec<String> {
    report
        .rows
        .iter()
        .flat_map(|r| r.notes.iter().map(move |n| format!("{}: {n}", r.label())))
        .chain(report.notes.iter().cloned())
        .collect()
}
