//! Renders a [`MatrixReport`](model::matrix::MatrixReport) for people and spreadsheets, and
//! compares two of them; renders a single run's report for the terminal.
//!
//! * [`markdown`]: the classic table (rows = backends, columns = cipher configurations), a
//!   "% of plain" table, CPU per side, which kernel driver served, why cells did not run,
//!   and the conditions (kernel, CPU, crypto flags, drivers, VM/TCG, payload, repeats).
//! * [`csv`]: one line per cell with every number (median, min, max, CPU, % of plain).
//! * [`svg`]: the table's shape as bars (one line per row, one column per cipher
//!   configuration), linear from zero with every value printed, one panel and axis per
//!   environment (an emulated VM's marked as such), drawn with plotters' SVG backend.
//! * [`html`]: one self-contained page (the chart inline as wide as the window, the
//!   tables, the conditions), well-formed XHTML so it parses as XML too.
//! * [`compare`]: two reports → per-cell delta, ratio and its confidence interval
//!   ([`significance`]), flagged only beyond the noise and a threshold.
//! * [`run`]: a single run's [`RunReport`](model::RunReport) as `ipsec-lab run` prints it:
//!   its table, the lines under it, the interval lines ([`packets`] has its UDP and latency
//!   text).
//! * [`setup_rate`]: `ipsec-lab setup-rate`'s table.
//!
//! What every format shows the same way (the cell under a column, rates as printed, the
//! conditions, what a column stands for) is in `shared`, below all of them.
//!
//! Pure: every function takes a report and returns text or values. Leaves out running the
//! sweep and reading/writing files (crate `lab` and the `ipsec-lab` binary's `run`, `matrix`, `report`, `compare`).

pub mod compare;
pub mod csv;
pub mod escape;
pub mod html;
pub mod markdown;
pub mod packets;
pub mod rekey;
pub mod run;
pub mod setup_rate;
mod shared;
pub mod significance;
pub mod svg;

use model::matrix::MatrixReport;

pub use compare::{compare, CompareOptions, Comparison, Verdict};
pub use shared::{
    cell_for, columns_explained, conditions, environment_summary, environment_title, fmt_field, fmt_rate,
    is_warning, method, not_run_reasons, rekey_table, suite_explained, Warnings, REKEY_EXPLAINED,
    WARNING_MARK,
};
pub use svg::RenderError;

/// Output formats of `ipsec-lab report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Csv,
    Svg,
    Html,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Markdown, Format::Csv, Format::Svg, Format::Html];

    pub fn name(self) -> &'static str {
        match self {
            Format::Markdown => "markdown",
            Format::Csv => "csv",
            Format::Svg => "svg",
            Format::Html => "html",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Markdown => "md",
            Format::Csv => "csv",
            Format::Svg => "svg",
            Format::Html => "html",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Format, FormatError> {
        let t = s.trim().to_ascii_lowercase();
        Format::ALL
            .into_iter()
            .find(|f| f.name() == t || (t == "md" && *f == Format::Markdown))
            .ok_or_else(|| FormatError(s.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown report format {0:?}: use markdown, csv, svg or html")]
pub struct FormatError(pub String);

/// Renders `report` in `format`.
pub fn render(report: &MatrixReport, format: Format) -> Result<String, RenderError> {
    Ok(match format {
        Format::Markdown => markdown::render(report),
        Format::Csv => csv::render(report),
        Format::Svg => svg::render(report)?,
        Format::Html => html::render(report)?,
    })
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A small hand-made report for the renderers' tests.
    use model::ceiling::{Ceiling, CeilingOutcome, CryptoSpeed};
    use model::matrix::*;
    use model::{Backend, ByteSize, CipherSuite, CryptoChoice, Environment, KeyBits, Summary};

    pub fn measured(samples: &[f64]) -> CellOutcome {
        CellOutcome::Measured(Measurement {
            mb_per_s: Summary::of(samples).unwrap(),
            samples: samples.to_vec(),
            timed_s: None,
            bytes: vec![],
            cpu: SideCpu {
                sender_percent: Summary::of(&[80.0, 90.0]).unwrap(),
                receiver_percent: Summary::of(&[60.0, 70.0]).unwrap(),
            },
            tunnel_cpu: None,
            percent_of_plain: None,
            served_by: None,
            cpu_steal_percent: None,
            ceiling: None,
            percent_of_ceiling: None,
            notes: vec![],
        })
    }

    /// A cell of `outcome` without packets or latency.
    pub fn cell(suite: CipherSuite, outcome: CellOutcome) -> Cell {
        Cell {
            suite,
            outcome,
            packets: None,
            latency: None,
            rekey: None,
            first_packet: None,
        }
    }

    pub fn env(virt: &str) -> Environment {
        Environment {
            hostname: "lab".into(),
            kernel_release: "6.1.0-test".into(),
            cpu_model: "Test CPU".into(),
            cpus: 2,
            crypto_flags: vec!["aes".into(), "avx2".into()],
            kernel_drivers: [("cbc(aes)".to_string(), "cbc-aes-aesni".to_string())].into(),
            virtualization: virt.into(),
            tool_version: "0.1.0".into(),
            build: Default::default(),
        }
    }

    /// plain, userspace [auto] and [soft] measured; openvpn partly; xfrm not run on the
    /// host; xfrm [aes-generic] measured in a TCG VM.
    pub fn report() -> MatrixReport {
        let mut suites = CipherSuite::classic_six();
        suites.push(CipherSuite::AesGcm { key: KeyBits::Aes256 });
        let mut r = MatrixReport::new(suites.clone(), ByteSize(4_000_000), 3, 1_700_000_000);
        r.environments.insert(HOST.into(), env("host"));
        r.environments
            .insert(VM.into(), env("vm (tcg: emulated, speeds not representative)"));
        let row = |key: RowKey, f: &dyn Fn(usize, CipherSuite) -> Cell| Row {
            cells: suites.iter().enumerate().map(|(i, s)| f(i, *s)).collect(),
            key,
            notes: vec![],
        };
        r.rows.push(Row {
            key: RowKey::new(Backend::Plain, RowVariant::Default, HOST),
            cells: vec![cell(CipherSuite::None, measured(&[1000.0, 1100.0, 1200.0]))],
            notes: vec![],
        });
        r.rows.push(row(
            RowKey::new(Backend::Xfrm, RowVariant::Default, HOST),
            &|_, s| Cell::not_run(s, "no ESP in this kernel (CONFIG_INET_ESP); use --vm"),
        ));
        r.rows.push(row(
            RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST),
            &|i, s| {
                cell(
                    s,
                    measured(&[300.0 + i as f64, 310.0 + i as f64, 320.0 + i as f64]),
                )
            },
        ));
        r.rows.push(row(
            RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Soft), HOST),
            &|i, s| cell(s, measured(&[100.0 - i as f64, 105.0, 110.0])),
        ));
        r.rows.push(row(
            RowKey::new(Backend::Openvpn, RowVariant::Default, HOST),
            &|i, s| {
                if i == 6 {
                    Cell::not_run(s, "openvpn failed: exit 1")
                } else {
                    cell(s, measured(&[40.0, 45.0, 50.0]))
                }
            },
        ));
        r.rows.push(Row {
            key: RowKey::new(Backend::Plain, RowVariant::Default, VM),
            cells: vec![cell(CipherSuite::None, measured(&[90.0, 100.0, 110.0]))],
            notes: vec![],
        });
        r.rows.push(row(
            RowKey::new(Backend::Xfrm, RowVariant::KernelDriver("aes-generic".into()), VM),
            &|_, s| {
                let mut c = cell(s, measured(&[1.5, 2.0, 2.5]));
                if let CellOutcome::Measured(m) = &mut c.outcome {
                    m.served_by = Some("authenc(hmac(sha256-generic),cbc(aes-generic))".into());
                }
                c
            },
        ));
        if let Some(CellOutcome::Measured(m)) = r.rows[4].cells.first_mut().map(|c| &mut c.outcome) {
            m.tunnel_cpu = Some(TunnelCpu {
                a_percent: 97.0,
                b_percent: 88.0,
            });
            m.ceiling = Some(Box::new(Ceiling::none(
                1407,
                "openvpn's tun-mtu",
                "openssl is not installed (apt-get install openssl)",
            )));
        }
        // userspace [auto]: a ceiling of 1000 MB/s under every column (decrypt faster).
        for cell in &mut r.rows[2].cells {
            if let CellOutcome::Measured(m) = &mut cell.outcome {
                m.ceiling = Some(Box::new(Ceiling {
                    packet_bytes: 1407,
                    packet_source: "the inner MTU".into(),
                    outcome: CeilingOutcome::Measured(
                        CryptoSpeed::new("auto (aws-lc-rs)".into(), cell.suite.name(), 1000.0, 1240.0)
                            .unwrap(),
                    ),
                }));
            }
        }
        r.payload_by_environment.insert(VM.into(), ByteSize(1_000_000));
        r.compute_percent_of_plain();
        r
    }

    /// A 2 s trial at `pps` delivered with `loss_pct` lost, of `size`-byte packets.
    pub fn trial(pps: f64, loss_pct: f64, size: u32) -> model::packets::UdpTrial {
        let sent = (pps * 2.0 / (1.0 - loss_pct / 100.0)).round() as u64;
        let received = (pps * 2.0).round() as u64;
        model::packets::UdpTrial {
            offered_pps: None,
            send_seconds: 2.0,
            sent,
            sent_pps: sent as f64 / 2.0,
            kept_rate: None,
            received,
            lost: sent - received,
            reordered: 0,
            duplicates: 0,
            corrupted: 0,
            jitter_ms: 0.01,
            receive_seconds: 2.0,
            payload_bytes: received * u64::from(size - 28),
            packet_bytes: received * u64::from(size),
            link_bytes: None,
            outside_drops: None,
        }
    }

    /// Round trips of a phase whose p50 is `p50` ms and p99 `p99` ms.
    pub fn phase(name: &str, p50: f64, p99: f64) -> model::packets::LatencyPhase {
        let max = p99 * 2.0;
        model::packets::LatencyPhase {
            name: name.into(),
            load_pps: None,
            probes_sent: 1000,
            probes_received: 1000,
            min_ms: p50 / 2.0,
            p50_ms: p50,
            p90_ms: (p50 + p99) / 2.0,
            p99_ms: p99,
            p999_ms: p99 * 1.5,
            max_ms: max,
            mean_ms: p50,
            cdf: vec![
                (0.0, p50 / 2.0),
                (0.5, p50),
                (0.9, (p50 + p99) / 2.0),
                (0.99, p99),
                (1.0, max),
            ],
        }
    }

    /// UDP rows at 64 and 1400 bytes over AES-256-GCM: plain and userspace [auto] on the
    /// host (the 64 B userspace cell with its NDR search), xfrm in a TCG VM (1400 B not
    /// run); every measured cell with idle and loaded round trips.
    pub fn packets() -> MatrixReport {
        use model::packets::{LatencyReport, NdrBound, NdrReport, PacketSize, UdpReport};
        let gcm = CipherSuite::AesGcm { key: KeyBits::Aes256 };
        let mut r = MatrixReport::new(vec![gcm], ByteSize(4_000_000), 2, 1_700_000_000);
        r.environments.insert(HOST.into(), env("host"));
        r.environments
            .insert(VM.into(), env("vm (tcg: emulated, speeds not representative)"));
        let udp_cell = |suite, size: u32, pps: &[f64], loss: f64, idle: f64, loaded: f64| {
            let udp = UdpReport {
                packet_size: PacketSize::Fixed(size),
                trials: pps.iter().map(|p| trial(*p, loss, size)).collect(),
                ndr: None,
                baseline: None,
            };
            let mb: Vec<f64> = udp.trials.iter().map(|t| t.payload_mb_per_s()).collect();
            let mut c = cell(suite, measured(&mb));
            if let CellOutcome::Measured(m) = &mut c.outcome {
                m.timed_s = Some(2.0);
            }
            c.packets = PacketRates::of(&udp);
            c.latency = Some(LatencyReport {
                probe_interval_ms: 1.0,
                phases: vec![
                    phase("idle", idle, idle * 2.0),
                    phase("under UDP load", loaded / 4.0, loaded),
                ],
            });
            c
        };
        let row = |backend, variant, environment, size, cell: Cell| Row {
            key: RowKey::new(backend, variant, environment).with_packet_size(Some(PacketSize::Fixed(size))),
            cells: vec![cell],
            notes: vec![],
        };
        let auto = RowVariant::Crypto(CryptoChoice::Auto);
        let none = CipherSuite::None;
        r.rows.push(row(
            Backend::Plain,
            RowVariant::Default,
            HOST,
            64,
            udp_cell(none, 64, &[500_000.0, 520_000.0], 0.0, 0.02, 0.1),
        ));
        let mut searched = udp_cell(gcm, 64, &[80_000.0, 82_000.0], 2.0, 0.05, 15.0);
        if let Some(p) = &mut searched.packets {
            let bound = |name: &str, tolerance_pct, pps: f64, upper| NdrBound {
                name: name.into(),
                tolerance_pct,
                pps,
                mbit_per_s: pps * 64.0 * 8.0 / 1e6,
                lower: Some(trial(pps, 0.0, 64)),
                upper,
            };
            p.udp.ndr = Some(NdrReport {
                packet_size: PacketSize::Fixed(64),
                max_rate: trial(81_000.0, 2.0, 64),
                bounds: vec![
                    bound("NDR", 0.0, 60_000.0, Some(trial(61_000.0, 0.1, 64))),
                    bound("PDR", 0.5, 70_000.0, None),
                ],
                trials: vec![],
            });
            *p = PacketRates::of(&p.udp).unwrap();
        }
        r.rows
            .push(row(Backend::Userspace, auto.clone(), HOST, 64, searched));
        r.rows.push(row(
            Backend::Plain,
            RowVariant::Default,
            HOST,
            1400,
            udp_cell(none, 1400, &[200_000.0, 210_000.0], 0.0, 0.02, 0.2),
        ));
        r.rows.push(row(
            Backend::Userspace,
            auto,
            HOST,
            1400,
            udp_cell(gcm, 1400, &[40_000.0, 42_000.0], 0.5, 0.05, 9.0),
        ));
        r.rows.push(row(
            Backend::Plain,
            RowVariant::Default,
            VM,
            64,
            udp_cell(none, 64, &[9_000.0, 9_500.0], 0.0, 0.5, 3.0),
        ));
        r.rows.push(row(
            Backend::Xfrm,
            RowVariant::Default,
            VM,
            64,
            udp_cell(gcm, 64, &[3_000.0, 3_100.0], 1.0, 0.6, 40.0),
        ));
        r.rows.push(row(
            Backend::Xfrm,
            RowVariant::Default,
            VM,
            1400,
            Cell::not_run(gcm, "failed: a test"),
        ));
        r.compute_percent_of_plain();
        r
    }

    /// The warning a 4 MB transfer at 1100 MB/s gets, as `RunReport::new` writes it.
    pub const TOO_SHORT: &str =
        "a transfer lasted 0.004 s: too short to be a stable figure; use --bytes 5GB or more";
    /// Evidence, not a warning.
    pub const EVIDENCE: &str = "encrypting thread ipl-tun-a: 0.41 s user + 0.10 s system (93 % of a core)";

    /// [`report`] with the notes of a short sweep: the baseline and userspace [auto] 128
    /// warned (the same text), userspace [auto] 256+HMAC warned otherwise and carrying
    /// evidence, and a row note on openvpn.
    pub fn warned() -> MatrixReport {
        let mut r = report();
        let mut note = |row: usize, cell: usize, notes: &[&str]| {
            if let CellOutcome::Measured(m) = &mut r.rows[row].cells[cell].outcome {
                m.notes = notes.iter().map(|n| n.to_string()).collect();
            }
        };
        note(0, 0, &[TOO_SHORT]);
        note(2, 0, &[TOO_SHORT, EVIDENCE]);
        note(
            2,
            5,
            &[
                EVIDENCE,
                "aes-generic was raised for this row but cbc-aes-aesni served",
            ],
        );
        r.rows[4].notes.push("default kernel drivers only: a test".into());
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::matrix::CellOutcome;

    #[test]
    fn inf_and_nan_rates_never_reach_markdown_or_csv() {
        let mut r = fixture::report();
        for row in &mut r.rows {
            for cell in &mut row.cells {
                if let CellOutcome::Measured(m) = &mut cell.outcome {
                    m.mb_per_s.median = f64::INFINITY;
                    m.mb_per_s.max = f64::NAN;
                }
            }
        }
        r.compute_percent_of_plain();
        for text in [markdown::render(&r), csv::render(&r)] {
            let lower = text.to_lowercase();
            let words: Vec<&str> = lower.split(|c: char| !c.is_ascii_alphanumeric()).collect();
            assert!(!words.contains(&"inf") && !words.contains(&"nan"), "{text}");
        }
    }

    #[test]
    fn the_short_transfer_note_is_a_warning_and_evidence_is_not() {
        // What model writes for a 100 MB transfer in 0.05 s, word for word.
        let t = model::Transfer {
            bytes: 100_000_000,
            seconds: 0.05,
            streams: 1,
            verified: true,
            sender_cpu: Default::default(),
            receiver_cpu: Default::default(),
            sender_threads: 1,
            receiver_threads: 1,
        };
        let note = model::report::short_transfer_note(&[t]).unwrap();
        assert!(is_warning(&note), "{note}");
        assert!(is_warning(fixture::TOO_SHORT));
        assert!(!is_warning(fixture::EVIDENCE));
        assert!(!is_warning("payload seed 0x18ecd9107f28b6c7"));
    }

    #[test]
    fn warnings_are_numbered_once_per_text_with_the_cells_that_carry_them() {
        let r = fixture::warned();
        let w = Warnings::of(&r);
        assert_eq!(w.texts.len(), 2, "{:?}", w.texts);
        assert_eq!(
            w.lines(),
            [
                format!("⚠1 plain (line rate), userspace [auto] (128): {}", fixture::TOO_SHORT),
                "⚠2 userspace [auto] (256+HMAC): aes-generic was raised for this row but cbc-aes-aesni served"
                    .to_string(),
            ]
        );
        assert_eq!(w.mark(2, &r.rows[2].cells[0]).as_deref(), Some("⚠1"));
        assert_eq!(w.mark(2, &r.rows[2].cells[1]), None);
        assert_eq!(w.mark(0, &r.rows[0].cells[0]).as_deref(), Some("⚠1"));
        assert!(Warnings::of(&fixture::report()).is_empty());
    }

    #[test]
    fn formats_parse_by_name() {
        assert_eq!("MD".parse::<Format>().unwrap(), Format::Markdown);
        assert_eq!("html".parse::<Format>().unwrap(), Format::Html);
        assert!("pdf"
            .parse::<Format>()
            .unwrap_err()
            .to_string()
            .contains("markdown, csv"));
    }

    #[test]
    fn conditions_do_not_say_host_host() {
        let text = conditions(&fixture::report());
        assert!(
            text.iter().any(|l| l.starts_with("host — kernel 6.1.0-test")),
            "{text:?}"
        );
        assert!(text
            .iter()
            .any(|l| l.starts_with("vm (tcg: emulated, speeds not representative) — kernel")));
        assert!(!text.iter().any(|l| l.contains("host: host")), "{text:?}");
    }

    #[test]
    fn conditions_name_kernel_cpu_flags_drivers_vm_payload_repeats() {
        let text = conditions(&fixture::report()).join("\n");
        for needle in [
            "6.1.0-test",
            "Test CPU",
            "aes avx2",
            "cbc(aes)=cbc-aes-aesni",
            "tcg",
            "4.0 MB",
            "rows of vm: payload 1.0 MB",
            "3 repeat",
        ] {
            assert!(text.contains(needle), "{needle} missing in {text}");
        }
    }

    /// `matrix --rekey-every`: every format has the rekey table, the rows the lab can rekey
    /// with each cell's figures, and a report without rekeys has none.
    #[test]
    fn a_rekey_sweep_has_its_table_in_every_format() {
        let mut r = fixture::report();
        assert!(rekey_table(&r).is_none());
        let schedule = model::rekey::RekeySchedule {
            every_s: 1.0,
            order: model::rekey::RekeyOrder::MakeBeforeBreak,
            sa: Default::default(),
        };
        let xfrm = r
            .rows
            .iter_mut()
            .find(|row| row.key.backend == model::Backend::Xfrm)
            .unwrap();
        let first = xfrm.cells[0].suite;
        xfrm.cells[0] = model::matrix::Cell {
            rekey: Some(model::rekey::RekeyCell {
                schedule,
                rekeys: 3,
                gap_ms: 36.0,
                baseline_gap_ms: 22.0,
                took_ms: Some(17.5),
                dip: Some(0.0),
                lost: None,
            }),
            ..fixture::cell(first, fixture::measured(&[100.0, 110.0]))
        };
        let (_, rows) = rekey_table(&r).unwrap();
        let xfrm_row = rows.iter().find(|(l, _)| l == "xfrm").unwrap();
        assert_eq!(xfrm_row.1[0], "gap 36 ms (22 away), 3 rekeys");
        assert_eq!(xfrm_row.1[1], "not run");
        assert!(rows.iter().all(|(l, _)| !l.starts_with("plain")));
        let md = markdown::render(&r);
        assert!(
            md.contains("#### Rekey under load (every 1 s, xfrm make-before-break)"),
            "{md}"
        );
        assert!(
            md.contains("| xfrm | gap 36 ms (22 away), 3 rekeys | not run |"),
            "{md}"
        );
        let csv = csv::render(&r);
        let column = csv::HEADER.iter().position(|h| *h == "rekey_gap_ms").unwrap();
        assert!(
            csv.lines().any(|l| l.split(',').nth(column) == Some("36.0")),
            "{csv}"
        );
        let html = html::render(&r).unwrap();
        assert!(html.contains("<table class=\"rekey\">"));
        let svg = svg::render(&r).unwrap();
        assert!(svg.contains("id=\"rekey\""));
        assert!(svg.contains("gap 36 ms (22 away)"));
    }

    /// Cells with a time to first packet get its table in every format and its columns in
    /// CSV; a report without any has none.
    #[test]
    fn the_time_to_first_packet_has_its_table_in_every_format() {
        let mut r = fixture::report();
        assert!(shared::first_packet_table(&r).is_none());
        assert!(!markdown::render(&r).contains("Time to first packet"));
        let xfrm = r
            .rows
            .iter_mut()
            .find(|row| row.key.backend == model::Backend::Xfrm)
            .unwrap();
        xfrm.cells[0].first_packet = Some(model::startup::FirstPacket::new(
            std::time::Duration::from_micros(23_900),
            std::time::Duration::from_micros(1_200),
        ));
        let md = markdown::render(&r);
        assert!(md.contains("#### Time to first packet"), "{md}");
        assert!(md.contains("| xfrm | 25.1 ms (setup 23.9 ms) | — |"), "{md}");
        let csv = csv::render(&r);
        let column = csv::HEADER.iter().position(|h| *h == "ttfp_ms").unwrap();
        assert!(
            csv.lines().any(|l| l.split(',').nth(column) == Some("25.100")),
            "{csv}"
        );
        assert!(html::render(&r)
            .unwrap()
            .contains("<table class=\"first-packet\">"));
        let svg = svg::render(&r).unwrap();
        assert!(svg.contains("id=\"first-packet\""), "{svg}");
        assert!(svg.contains("25.1 ms (setup 23.9 ms)"));
    }

    /// `matrix -P 1,2,4`: each row's MB/s per stream count and its ratio in a table of every
    /// format; a count whose cell did not run is a dash, and a report with one count has none.
    #[test]
    fn stream_counts_have_a_scaling_table_in_every_format() {
        use model::matrix::{Cell, Row, RowKey, RowVariant, VM};
        let mut r = fixture::report();
        assert!(shared::scaling_table(&r).is_none());
        let suites = r.suites.clone();
        let mut push = |variant: RowVariant, threads, streams, mb: Option<f64>| {
            let key = RowKey::new(model::Backend::Xfrm, variant, VM)
                .with_threads(threads)
                .with_streams(Some(streams));
            let cells = suites
                .iter()
                .map(|s| match mb {
                    Some(mb) => fixture::cell(*s, fixture::measured(&[mb, mb, mb])),
                    None => Cell::not_run(*s, "2 SA pairs need at least 2 streams"),
                })
                .collect();
            r.rows.push(Row {
                key,
                cells,
                notes: vec![],
            });
        };
        push(RowVariant::PerCpuSa, 1, 1, Some(2.0));
        push(RowVariant::PerCpuSa, 1, 2, Some(3.9));
        push(RowVariant::PerCpuSa, 1, 4, Some(7.0));
        push(RowVariant::Default, 2, 1, None);
        push(RowVariant::Default, 2, 2, Some(4.0));
        push(RowVariant::Default, 2, 4, Some(5.0));
        let table = shared::scaling_table(&r).unwrap();
        assert_eq!(table.title, "Scaling with TCP streams (-P 1 → 2 → 4)");
        assert_eq!(
            table.rows[0],
            (
                "xfrm [per-CPU SAs] (vm)".to_string(),
                vec!["2.00 → 3.90 → 7.00 (×3.50 at -P 4 over -P 1)".to_string(); suites.len()]
            )
        );
        assert_eq!(table.rows[1].1[0], "— → 4.00 → 5.00 (×1.25 at -P 4 over -P 2)");
        let md = markdown::render(&r);
        assert!(
            md.contains("#### Scaling with TCP streams (-P 1 → 2 → 4)"),
            "{md}"
        );
        assert!(
            md.contains("| xfrm x2 SAs (vm) | — → 4.00 → 5.00 (×1.25 at -P 4 over -P 2) |"),
            "{md}"
        );
        assert!(html::render(&r).unwrap().contains("<table class=\"scaling\">"));
        let svg = svg::render(&r).unwrap();
        assert!(svg.contains("id=\"scaling\""), "{svg}");
        assert!(svg.contains("2.00 → 3.90 → 7.00 (×3.50 at -P 4 over -P 1)"));
    }

    /// `matrix --setup-rate`: a table in every format, a field in CSV, a side-by-side list
    /// in `compare`; what came from a guest (where it was measured) escaped for each sink.
    #[test]
    fn setup_rates_have_their_table_in_every_format_and_in_compare() {
        use model::setup_rate::{RateFigure, SetupBackend, SetupRateCell, TableSize};
        let mut r = fixture::report();
        assert!(shared::setup_rate_table(&r).is_none());
        r.setup_rates = vec![
            SetupRateCell {
                backend: SetupBackend::Xfrm,
                size: TableSize(1000),
                measured_in: "uml <b>|x</b>\x1b[31m".into(),
                figures: vec![
                    RateFigure {
                        name: "sas_batched".into(),
                        per_s: 12_345.6,
                    },
                    RateFigure {
                        name: "sas_one_by_one".into(),
                        per_s: f64::NAN,
                    },
                ],
                not_run: None,
            },
            SetupRateCell::not_run(
                SetupBackend::Strongswan,
                TableSize(1000),
                "strongSwan is not installed",
            ),
        ];
        let md = markdown::render(&r);
        assert!(md.contains("#### Setup rate"), "{md}");
        assert!(
            md.contains("| backend | size | measured in | per second |"),
            "{md}"
        );
        assert!(md.contains("12,346 SAs/s batched · — SAs/s 1-by-1"), "{md}");
        assert!(
            md.contains("| strongswan | 1k IKE_SAs | — | not run: strongSwan is not installed |"),
            "{md}"
        );
        assert!(!md.contains("<b>|x") && !md.contains('\x1b'), "{md}");
        let csv = csv::render(&r);
        let column = csv::HEADER.iter().position(|h| *h == "setup_rates").unwrap();
        let xfrm_line = csv.lines().find(|l| l.contains(",xfrm,")).unwrap();
        assert_eq!(
            xfrm_line.split(',').nth(column),
            Some("sas_batched=12345.6"),
            "{csv}"
        );
        let html = html::render(&r).unwrap();
        assert!(html.contains("<table class=\"setup-rate\">"), "{html}");
        assert!(!html.contains("<b>|x"), "{html}");
        let svg = svg::render(&r).unwrap();
        assert!(svg.contains("id=\"setup-rate\""), "{svg}");
        assert!(!svg.contains("<b>|x") && !svg.contains("NaN"), "{svg}");
        let mut after = r.clone();
        after.setup_rates.truncate(1);
        after.setup_rates[0].figures[0].per_s = 20_000.0;
        let options = compare::CompareOptions::default();
        let text = compare::compare(&r, &after, options).unwrap().render();
        assert!(text.contains("Setup rate, side by side and not judged"), "{text}");
        assert!(text.contains("* xfrm: 12,346 SAs/s batched"), "{text}");
        assert!(text.contains("→ 20,000 SAs/s batched"), "{text}");
        assert!(
            text.contains("* strongswan: not run: strongSwan is not installed → —"),
            "{text}"
        );
    }
}
