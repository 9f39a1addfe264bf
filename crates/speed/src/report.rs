//! Results: one record per cell (stable JSON, scripts parse it) and the openssl-style table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use model::{Environment, Summary};
use serde::{Deserialize, Serialize};

use crate::plan::{Clock, Mode};
use crate::suite::{CryptoOp, SpeedSuite};

/// Bumped whenever a field is renamed or re-typed; fields are only ever added otherwise.
pub const SPEED_SCHEMA_VERSION: u32 = 1;

/// Repeats further apart than this are flagged in the table.
pub const SPREAD_FLAG: f64 = 0.05;

/// One cell: an implementation timing one suite in one direction at one block size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `auto`, `soft`, `rustcrypto`, `aws-lc`, `kernel` or `openssl`.
    pub implementation: String,
    /// The code that computed: `aws-lc-rs`, `rustcrypto`, `OpenSSL 3.0.19 ...`.
    pub library: String,
    /// Whether hardware AES was in use; None where the lab cannot tell (openssl).
    pub hardware_aes: Option<bool>,
    pub suite: String,
    pub direction: CryptoOp,
    pub block_bytes: usize,
    pub threads: usize,
    /// Median over the repeats, in MB/s (10^6 bytes per second), summed over threads.
    pub mb_per_s: f64,
    /// Every repeat's MB/s, in the order measured.
    pub repeats_mb_per_s: Vec<f64>,
    /// (max - min) / median over the repeats.
    pub spread: f64,
    /// Timed seconds of one repeat.
    pub seconds_per_repeat: f64,
    /// The kernel driver that served a `kernel` row (from /proc/crypto), e.g.
    /// `cbc-aes-aesni`; absent for userspace rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Where the row was measured when not on this host's CPU directly, e.g.
    /// `vm (tcg: emulated, speeds not representative)`; absent on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualization: Option<String>,
    /// True when the CPU was emulated (TCG): the row proves the code works, its speed
    /// means nothing and it is left out of ratios.
    #[serde(default)]
    pub emulated: bool,
    /// `packet` (a new message per block) or `stream` (one context updated per block, as
    /// openssl's rows always are).
    #[serde(default)]
    pub mode: Mode,
}

impl Record {
    pub fn from_repeats(
        head: RecordHead,
        repeats_mb_per_s: Vec<f64>,
        seconds_per_repeat: f64,
    ) -> Option<Record> {
        let s = Summary::of(&repeats_mb_per_s)?;
        Some(Record {
            implementation: head.implementation,
            library: head.library,
            hardware_aes: head.hardware_aes,
            suite: head.suite,
            direction: head.direction,
            block_bytes: head.block_bytes,
            threads: head.threads,
            mb_per_s: s.median,
            spread: s.relative_spread(),
            repeats_mb_per_s,
            seconds_per_repeat,
            driver: head.driver,
            virtualization: head.virtualization,
            emulated: head.emulated,
            mode: head.mode,
        })
    }
}

impl Record {
    /// The row's name in the table: the implementation, marked when it ran in a VM (or in
    /// user-mode Linux) and again when that VM's CPU was emulated, and `[stream]` when timed
    /// in stream mode.
    pub fn row_label(&self) -> String {
        let place = match (&self.virtualization, self.emulated) {
            (Some(v), _) if v.starts_with("uml") => format!("{} [uml]", self.implementation),
            (Some(_), true) => format!("{} [vm, tcg]", self.implementation),
            (Some(_), false) => format!("{} [vm]", self.implementation),
            (None, _) => self.implementation.clone(),
        };
        match self.mode {
            Mode::Packet => place,
            Mode::Stream => format!("{place} [stream]"),
        }
    }
}

/// The identifying part of a [`Record`], before it is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordHead {
    pub implementation: String,
    pub library: String,
    pub hardware_aes: Option<bool>,
    pub suite: String,
    pub direction: CryptoOp,
    pub block_bytes: usize,
    pub threads: usize,
    pub driver: Option<String>,
    pub virtualization: Option<String>,
    pub emulated: bool,
    pub mode: Mode,
}

/// An implementation (or one of its suites) that produced no number, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub implementation: String,
    pub suite: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedReport {
    pub schema_version: u32,
    pub environment: Environment,
    pub block_sizes: Vec<usize>,
    pub records: Vec<Record>,
    pub skipped: Vec<Skipped>,
    /// The environment of rows measured elsewhere (`--vm`: the guest's kernel, CPU and
    /// virtualization); absent when everything ran here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_environment: Option<Environment>,
    /// Present when a signal stopped the run: the records are the cells done before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interruption>,
    /// What the records' bytes were divided by: `wall` or `cpu`.
    #[serde(default)]
    pub clock: Clock,
}

/// A run stopped by a signal before its last cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interruption {
    /// `SIGINT` or `SIGTERM`.
    pub signal: String,
    /// The signal's number: the exit code is 128 plus it.
    pub signal_number: i32,
    pub cells_done: usize,
    pub cells: usize,
}

impl Interruption {
    /// The table's first line.
    pub fn line(&self) -> String {
        format!(
            "PARTIAL: interrupted by {} after {} of {} cells; the rows below hold only the cells done",
            self.signal, self.cells_done, self.cells
        )
    }
}

/// How table cells are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units {
    /// MB/s, 10^6 bytes per second.
    MegabytesPerSecond,
    /// openssl's "1000s of bytes per second", written `123456.78k`.
    OpensslKilobytes,
}

impl Units {
    fn cell(self, mb_per_s: f64) -> String {
        match self {
            Units::MegabytesPerSecond => format!("{mb_per_s:.2}"),
            Units::OpensslKilobytes => format!("{:.2}k", mb_per_s * 1000.0),
        }
    }

    fn caption(self) -> &'static str {
        match self {
            Units::MegabytesPerSecond => "MB/s (10^6 bytes/s)",
            Units::OpensslKilobytes => "1000s of bytes per second, as openssl speed prints",
        }
    }
}

/// Key of one table row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RowKey {
    suite_pos: usize,
    suite: String,
    direction: CryptoOp,
    impl_pos: usize,
    implementation: String,
}

/// Renders the table, the ratio lines, the spread notes and the skipped implementations.
pub fn render(report: &SpeedReport, units: Units) -> String {
    let mut suite_order: Vec<&str> = Vec::new();
    let mut impl_order: Vec<String> = Vec::new();
    for r in &report.records {
        if !suite_order.contains(&r.suite.as_str()) {
            suite_order.push(&r.suite);
        }
        if !impl_order.contains(&r.row_label()) {
            impl_order.push(r.row_label());
        }
    }
    let mut rows: BTreeMap<RowKey, BTreeMap<usize, &Record>> = BTreeMap::new();
    for r in &report.records {
        let key = RowKey {
            suite_pos: suite_order.iter().position(|s| *s == r.suite).unwrap_or(0),
            suite: r.suite.clone(),
            direction: r.direction,
            impl_pos: impl_order.iter().position(|s| *s == r.row_label()).unwrap_or(0),
            implementation: r.row_label(),
        };
        rows.entry(key).or_default().insert(r.block_bytes, r);
    }
    let sizes = &report.block_sizes;
    let width = match units {
        Units::MegabytesPerSecond => 9,
        Units::OpensslKilobytes => 13,
    };
    // Wide enough for the longest implementation and the longest `first/other` ratio label.
    let longest = impl_order.iter().map(|s| s.len()).max().unwrap_or(4);
    let first = impl_order.first().map_or(0, |s| s.len());
    let impl_width = (first + 1 + longest).max(14);

    let env = &report.environment;
    let threads = report.records.first().map_or(1, |r| r.threads);
    let mut out = String::new();
    if let Some(interrupted) = &report.interrupted {
        let _ = writeln!(out, "{}", interrupted.line());
    }
    let _ = writeln!(
        out,
        "{} ({}; {}), {}{}, {}",
        env.cpu_model,
        model::plural(env.cpus, "CPU"),
        env.crypto_flags.join(" "),
        model::plural(threads, "thread"),
        if threads == 1 { "" } else { " together" },
        units.caption()
    );
    if env.is_emulated() {
        let _ = writeln!(
            out,
            "EMULATED: {}: these figures are of an emulated CPU, not of any real one",
            env.virtualization
        );
    }
    let mut libs: Vec<String> = Vec::new();
    for name in &impl_order {
        if let Some(r) = report.records.iter().find(|r| r.row_label() == *name) {
            let aes = match r.hardware_aes {
                Some(true) => ", hardware AES",
                Some(false) => ", software AES (hardware AES masked)",
                None => "",
            };
            let place = match (&r.virtualization, r.emulated) {
                (Some(v), true) => format!(
                    ", in a {v}: CORRECTNESS ONLY, speeds are of an emulated CPU and left out of ratios"
                ),
                (Some(v), false) => format!(", in a {v}"),
                (None, _) => String::new(),
            };
            libs.push(format!("  {name} = {}{aes}{place}", r.library));
            let mut drivers: Vec<(&str, &str)> = Vec::new();
            for d in report.records.iter().filter(|d| d.row_label() == *name) {
                if let Some(driver) = &d.driver {
                    if !drivers.iter().any(|(s, _)| *s == d.suite) {
                        drivers.push((&d.suite, driver));
                    }
                }
            }
            for (suite, driver) in drivers {
                libs.push(format!("    {suite:<24} driver {driver}"));
            }
        }
    }
    if let Some(g) = &report.guest_environment {
        libs.push(format!(
            "  [{}] rows: {} ({}; {}), kernel {}",
            if g.is_uml() { "uml" } else { "vm" },
            g.cpu_model,
            model::plural(g.cpus, "CPU"),
            g.crypto_flags_text(),
            g.kernel_release
        ));
    }
    for l in libs {
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(out, "{}", timing_line(report));
    let _ = write!(
        out,
        "{:<24} {:<8} {:<impl_width$}",
        "suite", "dir", "implementation"
    );
    for s in sizes {
        let _ = write!(out, " {:>width$}", format!("{s} B"));
    }
    out.push('\n');
    let mut last_group: Option<(String, CryptoOp)> = None;
    let mut spread_notes: Vec<&Record> = Vec::new();
    for (key, cells) in &rows {
        let group = (key.suite.clone(), key.direction);
        let first_of_group = last_group.as_ref() != Some(&group);
        let (suite, dir) = if first_of_group {
            (key.suite.as_str(), key.direction.name())
        } else {
            ("", "")
        };
        last_group = Some(group);
        let _ = write!(out, "{suite:<24} {dir:<8} {:<impl_width$}", key.implementation);
        for s in sizes {
            let cell = match cells.get(s) {
                Some(r) => {
                    let flag = if r.spread > SPREAD_FLAG {
                        spread_notes.push(*r);
                        "~"
                    } else {
                        ""
                    };
                    format!("{}{flag}", units.cell(r.mb_per_s))
                }
                None => "-".into(),
            };
            let _ = write!(out, " {cell:>width$}");
        }
        out.push('\n');
    }

    // An emulated CPU's speed compared with a real one's means nothing.
    let comparable: Vec<&str> = impl_order
        .iter()
        .filter(|name| {
            !report
                .records
                .iter()
                .any(|r| r.row_label() == **name && r.emulated)
        })
        .map(String::as_str)
        .collect();
    let ratios = ratio_lines(&rows, &comparable, sizes, width, impl_width);
    if !ratios.is_empty() {
        let _ = writeln!(out, "\nratios (same suite, direction and size):");
        out.push_str(&ratios);
    }
    if let Some(worst) = spread_notes.iter().max_by(|a, b| a.spread.total_cmp(&b.spread)) {
        let _ = writeln!(
            out,
            "\n~ repeats more than {:.0}% apart in {} of {} cells (busy machine? try more --seconds); widest: {} {} {} {} B, {:.0}%",
            SPREAD_FLAG * 100.0,
            spread_notes.len(),
            report.records.len(),
            worst.implementation,
            worst.suite,
            worst.direction,
            worst.block_bytes,
            worst.spread * 100.0
        );
    }
    for s in &report.skipped {
        let what = match &s.suite {
            Some(suite) => format!("{} {suite}", s.implementation),
            None => s.implementation.clone(),
        };
        let _ = writeln!(out, "skipped {what}: {}", s.reason);
    }
    out
}

/// What a cell is: the modes of its rows and the clock.
fn timing_line(report: &SpeedReport) -> String {
    let mut modes = Vec::new();
    for mode in Mode::ALL {
        if report.records.iter().any(|r| r.mode == mode) {
            modes.push(match mode {
                Mode::Packet => "rows = a new message per block (fresh IV or nonce, the AEAD's tag), as a tunnel pays per packet",
                Mode::Stream => "[stream] rows = one cipher context, one update per block, as openssl speed -evp times",
            });
        }
    }
    let clock = match report.clock {
        Clock::Wall => "bytes per wall-clock second",
        Clock::Cpu => "bytes per CPU-second of the timing thread (openssl: its user CPU time)",
    };
    format!("timed: {}; {clock}", modes.join("; "))
}

/// `first/other` for each implementation after the first, per suite and direction; and
/// `libcrypto [stream]/openssl [stream]` where both are there: the lab and `openssl speed`
/// timing the same library the same way (CBC), which should agree.
fn ratio_lines(
    rows: &BTreeMap<RowKey, BTreeMap<usize, &Record>>,
    impl_order: &[&str],
    sizes: &[usize],
    width: usize,
    impl_width: usize,
) -> String {
    let Some(base) = impl_order.first() else {
        return String::new();
    };
    let mut pairs: Vec<(&str, &str)> = impl_order[1..].iter().map(|other| (*base, *other)).collect();
    // openssl speed's CBC loop is libcrypto's stream rows' loop. Its AEAD loop sets the key
    // again for every block (3.0.16 on) and its HMAC goes through EVP_MAC, which no lab row
    // does, so only CBC groups get this line.
    let stream_row = |imp: &str| {
        impl_order
            .iter()
            .copied()
            .find(|label| *label == format!("{imp} [stream]"))
    };
    let same_library = match (stream_row("libcrypto"), stream_row("openssl")) {
        (Some(lib), Some(cli)) => Some((lib, cli)),
        _ => None,
    };
    // Already among the pairs when libcrypto's row is the first one.
    pairs.extend(same_library.filter(|(lib, _)| lib != base));
    let mut out = String::new();
    let mut groups: Vec<(usize, String, CryptoOp)> = rows
        .keys()
        .map(|k| (k.suite_pos, k.suite.clone(), k.direction))
        .collect();
    groups.dedup();
    for (_, suite, direction) in groups {
        let find = |name: &str| {
            rows.iter()
                .find(|(k, _)| k.suite == suite && k.direction == direction && k.implementation == name)
                .map(|(_, cells)| cells)
        };
        let cbc = matches!(suite.parse(), Ok(SpeedSuite::AesCbc(_)));
        for pair @ (first, other) in &pairs {
            if !cbc && Some(*pair) == same_library {
                continue;
            }
            let (Some(first_cells), Some(other_cells)) = (find(first), find(other)) else {
                continue;
            };
            let label = format!("{first}/{other}");
            let label_width = impl_width.max(label.len());
            let _ = write!(out, "{suite:<24} {:<8} {label:<label_width$}", direction.name());
            for s in sizes {
                let cell = match (first_cells.get(s), other_cells.get(s)) {
                    (Some(b), Some(o)) if o.mb_per_s > 0.0 => format!("{:.2}x", b.mb_per_s / o.mb_per_s),
                    _ => "-".into(),
                };
                let _ = write!(out, " {cell:>width$}");
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment {
        Environment {
            hostname: "h".into(),
            kernel_release: "6.1".into(),
            cpu_model: "Test CPU".into(),
            cpus: 2,
            crypto_flags: vec!["aes".into(), "avx2".into()],
            kernel_drivers: Default::default(),
            virtualization: "host".into(),
            tool_version: "0.1.0".into(),
            build: Default::default(),
        }
    }

    fn record(imp: &str, hw: Option<bool>, size: usize, repeats: Vec<f64>) -> Record {
        Record::from_repeats(
            RecordHead {
                implementation: imp.into(),
                library: if imp == "openssl" {
                    "OpenSSL 3".into()
                } else {
                    "aws-lc-rs".into()
                },
                hardware_aes: hw,
                suite: "aes-128-cbc".into(),
                direction: CryptoOp::Encrypt,
                block_bytes: size,
                threads: 1,
                driver: None,
                virtualization: None,
                emulated: false,
                mode: Mode::Packet,
            },
            repeats,
            0.33,
        )
        .unwrap()
    }

    fn sample() -> SpeedReport {
        SpeedReport {
            schema_version: SPEED_SCHEMA_VERSION,
            environment: env(),
            block_sizes: vec![16, 1400],
            records: vec![
                record("auto", Some(true), 16, vec![360.0, 360.0, 360.0]),
                record("auto", Some(true), 1400, vec![1000.0, 1100.0, 1200.0]),
                record("soft", Some(false), 16, vec![100.0, 100.0, 100.0]),
                record("soft", Some(false), 1400, vec![250.0, 250.0, 250.0]),
            ],
            skipped: vec![Skipped {
                implementation: "kernel".into(),
                suite: None,
                reason: "no AF_ALG".into(),
            }],
            guest_environment: None,
            interrupted: None,
            clock: Clock::Wall,
        }
    }

    /// Issue 43: Ctrl-C printed nothing; the rows done are printed, marked partial first.
    #[test]
    fn an_interrupted_report_says_so_above_its_rows() {
        let mut report = sample();
        report.interrupted = Some(Interruption {
            signal: "SIGINT".into(),
            signal_number: 2,
            cells_done: 4,
            cells: 12,
        });
        let t = render(&report, Units::MegabytesPerSecond);
        assert!(
            t.starts_with("PARTIAL: interrupted by SIGINT after 4 of 12 cells"),
            "{t}"
        );
        assert!(t.contains("auto/soft"), "{t}");
        assert!(!render(&sample(), Units::MegabytesPerSecond).contains("PARTIAL"));
    }

    /// A kernel row measured in a TCG guest, as `--vm` merges it.
    fn emulated_kernel_row(size: usize) -> Record {
        let mut r = record("kernel", None, size, vec![5.0, 5.0, 5.0]);
        r.library = "linux 6.1.0 via AF_ALG".into();
        r.driver = Some("cbc-aes-aesni".into());
        r.virtualization = Some("vm (tcg: emulated, speeds not representative)".into());
        r.emulated = true;
        r
    }

    /// User-mode Linux rows are real speed: marked `[uml]`, and in the ratios.
    #[test]
    fn user_mode_linux_kernel_rows_are_labelled_uml_and_compared() {
        let mut report = sample();
        report.skipped.clear();
        for size in [16, 1400] {
            let mut r = emulated_kernel_row(size);
            r.library = "linux 6.1.176 via tcrypt".into();
            r.driver = Some("cbc(aes-generic)".into());
            r.virtualization = Some("uml (user-mode Linux: native speed, 1 CPU, generic C crypto)".into());
            r.emulated = false;
            report.records.push(r);
        }
        let mut guest = env();
        guest.cpu_model = "UML".into();
        guest.virtualization = "uml (user-mode Linux: native speed, 1 CPU, generic C crypto)".into();
        report.guest_environment = Some(guest);
        let t = render(&report, Units::MegabytesPerSecond);
        assert!(
            t.contains("kernel [uml] = linux 6.1.176 via tcrypt, in a uml (user-mode Linux"),
            "{t}"
        );
        assert!(
            t.contains("[uml] rows: UML (2 CPUs; aes avx2; userspace only, the UML kernel uses none)"),
            "{t}"
        );
        assert!(
            t.contains("auto/kernel [uml]") && !t.contains("CORRECTNESS ONLY"),
            "{t}"
        );
    }

    #[test]
    fn emulated_kernel_rows_are_labelled_named_by_driver_and_not_compared() {
        let mut report = sample();
        report.skipped.clear();
        report.records.push(emulated_kernel_row(16));
        report.records.push(emulated_kernel_row(1400));
        let mut guest = env();
        guest.cpu_model = "QEMU TCG CPU version 2.5+".into();
        guest.kernel_release = "6.1.0-57-amd64".into();
        report.guest_environment = Some(guest);
        let t = render(&report, Units::MegabytesPerSecond);
        assert!(
            t.contains("[vm] rows: QEMU TCG CPU version 2.5+ (2 CPUs; aes avx2), kernel 6.1.0-57-amd64"),
            "{t}"
        );
        let row = t
            .lines()
            .find(|l| l.contains("kernel [vm, tcg]") && l.contains("5.00"))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(!row.contains('~'), "{row}");
        assert!(
            t.contains("kernel [vm, tcg] = linux 6.1.0 via AF_ALG, in a vm (tcg"),
            "{t}"
        );
        assert!(t.contains("CORRECTNESS ONLY"), "{t}");
        assert!(
            t.contains("aes-128-cbc") && t.contains("driver cbc-aes-aesni"),
            "{t}"
        );
        assert!(t.contains("auto/soft") && !t.contains("/kernel"), "{t}");
        let v: serde_json::Value = serde_json::to_value(&report).unwrap();
        let k = &v["records"][4];
        assert_eq!(k["implementation"], "kernel");
        assert_eq!(k["driver"], "cbc-aes-aesni");
        assert_eq!(k["emulated"], true);
        assert!(k["virtualization"].as_str().unwrap().contains("tcg"));
        // Host rows carry no driver or VM fields, and still say they are not emulated.
        assert!(v["records"][0].get("driver").is_none());
        assert_eq!(v["records"][0]["emulated"], false);
    }

    #[test]
    fn table_has_cells_ratios_spread_and_skips() {
        let t = render(&sample(), Units::MegabytesPerSecond);
        assert!(t.contains("Test CPU (2 CPUs; aes avx2), 1 thread, MB/s"), "{t}");
        assert!(
            t.contains("soft = aws-lc-rs, software AES (hardware AES masked)"),
            "{t}"
        );
        let auto = t
            .lines()
            .find(|l| l.starts_with("aes-128-cbc") && l.contains("auto "))
            .unwrap();
        assert!(auto.contains("360.00") && auto.contains("1100.00~"), "{auto}");
        let ratio = t.lines().find(|l| l.contains("auto/soft")).unwrap();
        assert!(ratio.contains("3.60x") && ratio.contains("4.40x"), "{ratio}");
        assert!(
            t.contains("in 1 of 4 cells") && t.contains("widest: auto aes-128-cbc encrypt 1400 B, 18%"),
            "{t}"
        );
        assert!(t.contains("skipped kernel: no AF_ALG"), "{t}");
    }

    #[test]
    fn stream_rows_and_the_clock_are_named() {
        let mut report = sample();
        assert!(
            render(&report, Units::MegabytesPerSecond)
                .contains("timed: rows = a new message per block (fresh IV or nonce, the AEAD's tag), as a tunnel pays per packet; bytes per wall-clock second"),
        );
        let mut openssl = record("openssl", None, 16, vec![900.0]);
        openssl.mode = Mode::Stream;
        report.records.push(openssl);
        report.clock = Clock::Cpu;
        let t = render(&report, Units::MegabytesPerSecond);
        assert!(t.contains("[stream] rows = one cipher context"), "{t}");
        assert!(t.contains("per CPU-second of the timing thread"), "{t}");
        assert!(t.contains("openssl [stream] = OpenSSL 3"), "{t}");
        assert!(t.contains("auto/openssl [stream]"), "{t}");
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(
            (v["records"][0]["mode"].as_str(), v["records"][4]["mode"].as_str()),
            (Some("packet"), Some("stream"))
        );
        assert_eq!(v["clock"], "cpu");
    }

    #[test]
    fn libcrypto_is_set_against_openssl_speed_only_where_both_stream() {
        let mut report = sample();
        let mut cli = record("openssl", None, 16, vec![900.0]);
        cli.mode = Mode::Stream;
        report.records.push(cli);
        report
            .records
            .push(record("libcrypto", Some(true), 16, vec![450.0]));
        let t = render(&report, Units::MegabytesPerSecond);
        assert!(
            !t.contains("libcrypto/openssl"),
            "a packet row against a stream row:\n{t}"
        );
        let mut stream = record("libcrypto", Some(true), 16, vec![855.0]);
        stream.mode = Mode::Stream;
        report.records.push(stream);
        let t = render(&report, Units::MegabytesPerSecond);
        let line = t
            .lines()
            .find(|l| l.contains("libcrypto [stream]/openssl [stream]"))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(line.contains("0.95x"), "{line}");
        for r in &mut report.records {
            r.suite = "aes-128-gcm".into();
        }
        let t = render(&report, Units::MegabytesPerSecond);
        assert!(
            !t.contains("libcrypto [stream]/openssl"),
            "openssl speed re-keys AEADs per block:\n{t}"
        );
        // Nor when libcrypto's row is the first, whose ratios to the others are the base
        // lines (rows are in the order their records come).
        report.records.retain(|r| r.mode == Mode::Stream);
        report.records.reverse();
        let t = render(&report, Units::MegabytesPerSecond);
        assert!(t.contains("libcrypto [stream]  "), "{t}");
        assert!(!t.contains("libcrypto [stream]/openssl"), "libcrypto first:\n{t}");
    }

    #[test]
    fn a_run_under_qemu_user_says_its_figures_are_emulated() {
        let mut report = sample();
        assert!(!render(&report, Units::MegabytesPerSecond).contains("EMULATED"));
        report.environment.virtualization =
            "qemu-user (aarch64 emulated on an x86_64 kernel: speeds not representative)".into();
        let t = render(&report, Units::MegabytesPerSecond);
        assert_eq!(
            t.lines().nth(1),
            Some("EMULATED: qemu-user (aarch64 emulated on an x86_64 kernel: speeds not representative): these figures are of an emulated CPU, not of any real one"),
            "{t}"
        );
    }

    #[test]
    fn openssl_units_are_thousands_of_bytes() {
        let t = render(&sample(), Units::OpensslKilobytes);
        assert!(t.contains("360000.00k"), "{t}");
        assert!(t.contains("1000s of bytes per second"), "{t}");
    }

    #[test]
    fn json_round_trips_and_has_the_documented_fields() {
        let r = sample();
        let text = serde_json::to_string_pretty(&r).unwrap();
        let back: SpeedReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cell = &v["records"][0];
        for field in [
            "implementation",
            "suite",
            "direction",
            "block_bytes",
            "threads",
            "mb_per_s",
        ] {
            assert!(!cell[field].is_null(), "missing {field}");
        }
        assert_eq!(cell["direction"], "encrypt");
        assert_eq!(v["environment"]["cpu_model"], "Test CPU");
    }
}
