//! Renders a [`MatrixReport`](model::matrix::MatrixReport) for people and spreadsheets, and
//! compares two of them.
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
//! * [`compare`]: two reports → per-cell delta and ratio, flagged only beyond the repeats'
//!   spread and a threshold.
//!
//! Pure: every function takes a report and returns text or values. Leaves out running the
//! sweep and reading/writing files (crate `lab` and the `ipsec-lab` binary's `matrix`, `report`, `compare`).

pub mod compare;
pub mod csv;
pub mod html;
pub mod markdown;
pub mod svg;

use model::matrix::{Cell, CellOutcome, MatrixReport, Row};
use model::{CipherSuite, Environment, Hmac};

pub use compare::{compare, CompareOptions, Comparison, Verdict};

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

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("drawing the chart failed: {0}")]
    Chart(String),
}

/// Renders `report` in `format`.
pub fn render(report: &MatrixReport, format: Format) -> Result<String, RenderError> {
    Ok(match format {
        Format::Markdown => markdown::render(report),
        Format::Csv => csv::render(report),
        Format::Svg => svg::render(report)?,
        Format::Html => html::render(report)?,
    })
}

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
    let mut out = vec![format!(
        "payload {} per transfer, {} repeat(s) per cell, every transfer verified; MB/s = 10^6 bytes/s",
        report.payload, report.repeat
    )];
    for (env, size) in &report.payload_by_environment {
        out.push(format!("rows of {env}: payload {size} per transfer"));
    }
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
        "kernel {}, {} ({} CPUs), crypto flags [{}], kernel drivers [{}], ipsec-lab {}",
        env.kernel_release,
        env.cpu_model,
        env.cpus,
        env.crypto_flags.join(" "),
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
    }
}

/// Short description for titles: `median of 3 × 100.0 MB` (`, vm: 10.0 MB` where a
/// VM's rows used another payload).
pub fn method(report: &MatrixReport) -> String {
    let mut s = format!("median of {} × {}", report.repeat, report.payload);
    for (env, size) in &report.payload_by_environment {
        s.push_str(&format!(", {env}: {size}"));
    }
    s
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A small hand-made report for the renderers' tests.
    use model::matrix::*;
    use model::{Backend, ByteSize, CipherSuite, CryptoChoice, Environment, KeyBits, Summary};

    pub fn measured(samples: &[f64]) -> CellOutcome {
        CellOutcome::Measured(Measurement {
            mb_per_s: Summary::of(samples).unwrap(),
            samples: samples.to_vec(),
            cpu: SideCpu {
                sender_percent: Summary::of(&[80.0, 90.0]).unwrap(),
                receiver_percent: Summary::of(&[60.0, 70.0]).unwrap(),
            },
            tunnel_cpu: None,
            percent_of_plain: None,
            served_by: None,
            notes: vec![],
        })
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
            cells: vec![Cell {
                suite: CipherSuite::None,
                outcome: measured(&[1000.0, 1100.0, 1200.0]),
            }],
            notes: vec![],
        });
        r.rows.push(row(
            RowKey::new(Backend::Xfrm, RowVariant::Default, HOST),
            &|_, s| Cell::not_run(s, "no ESP in this kernel (CONFIG_INET_ESP); use --vm"),
        ));
        r.rows.push(row(
            RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST),
            &|i, s| Cell {
                suite: s,
                outcome: measured(&[300.0 + i as f64, 310.0 + i as f64, 320.0 + i as f64]),
            },
        ));
        r.rows.push(row(
            RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Soft), HOST),
            &|i, s| Cell {
                suite: s,
                outcome: measured(&[100.0 - i as f64, 105.0, 110.0]),
            },
        ));
        r.rows.push(row(
            RowKey::new(Backend::Openvpn, RowVariant::Default, HOST),
            &|i, s| {
                if i == 6 {
                    Cell::not_run(s, "openvpn failed: exit 1")
                } else {
                    Cell {
                        suite: s,
                        outcome: measured(&[40.0, 45.0, 50.0]),
                    }
                }
            },
        ));
        r.rows.push(Row {
            key: RowKey::new(Backend::Plain, RowVariant::Default, VM),
            cells: vec![Cell {
                suite: CipherSuite::None,
                outcome: measured(&[90.0, 100.0, 110.0]),
            }],
            notes: vec![],
        });
        r.rows.push(row(
            RowKey::new(Backend::Xfrm, RowVariant::KernelDriver("aes-generic".into()), VM),
            &|_, s| {
                let mut c = Cell {
                    suite: s,
                    outcome: measured(&[1.5, 2.0, 2.5]),
                };
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
        }
        r.payload_by_environment.insert(VM.into(), ByteSize(1_000_000));
        r.compute_percent_of_plain();
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
}
