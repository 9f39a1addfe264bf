//! `ipsec-lab setup-rate`'s table for the terminal: one line per table size, then what each
//! column means and where it was measured.

use model::setup_rate::{SetupRateReport, TableRates};

use crate::escape::terminal;
use crate::shared::environment_summary;

const HEADER: [&str; 8] = [
    "SAs",
    "SAs/s batched",
    "policies/s batched",
    "SAs/s 1-by-1",
    "policies/s 1-by-1",
    "flush SAs/policies",
    "kernel/SA",
    "lookup with N",
];

pub fn render(report: &SetupRateReport) -> String {
    let rows: Vec<[String; 8]> = report.tables.iter().map(row).collect();
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([HEADER[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| match c {
                0 => format!("{cell:<w$}"),
                _ => format!("{cell:>w$}"),
            })
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let plan = &report.plan;
    let mut out = format!(
        "xfrm setup rate, {} SAs (tunnel) and as many out policies, {} requests per write when batched\n\n",
        plan.suite, plan.window
    );
    out += &line(&HEADER);
    for r in &rows {
        out += &line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out += "\nlookup with N: how many times slower a 64-byte UDP flow through one SA runs with the N \
            installed than alone (median of its trials), against the alone trials' own spread; \
            kernel/SA: the drop in MemFree per SA installed.\n";
    let env = &report.environment;
    out += &format!(
        "measured in {}: {}\n",
        terminal(&env.virtualization),
        terminal(&environment_summary(env))
    );
    for note in &report.notes {
        out += &format!("note: {}\n", terminal(note));
    }
    out
}

fn row(t: &TableRates) -> [String; 8] {
    let lookup = match t.lookup.slowdown {
        None => "no packet alone".to_string(),
        Some(s) => format!(
            "{s:.2}× ({} ±{:.0} %)",
            if t.lookup.within_noise() {
                "noise"
            } else {
                "beyond noise"
            },
            t.lookup.noise * 100.0
        ),
    };
    [
        t.size.to_string(),
        count(t.batched.sas_per_s),
        count(t.batched.policies_per_s),
        count(t.one_by_one.sas_per_s),
        count(t.one_by_one.policies_per_s),
        format!("{} / {}", seconds(t.flush_sas_s), seconds(t.flush_policies_s)),
        t.kernel_bytes_per_sa
            .map_or("—".into(), |b| format!("{:.1} KiB", b / 1024.0)),
        lookup,
    ]
}

/// A rate as a whole number with thousands separators ("—" if not finite).
fn count(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let digits = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn seconds(v: f64) -> String {
    match v.is_finite() {
        true => format!("{v:.3} s"),
        false => "—".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::setup_rate::{InstallRate, LookupCost, SetupRatePlan, TableSize};

    fn report() -> SetupRateReport {
        let mut environment = model::Environment::detect();
        environment.virtualization = "uml (user-mode Linux)\x1b[31m".into();
        SetupRateReport {
            environment,
            plan: SetupRatePlan::validate(vec![TableSize(1000)], "aes-128-gcm".parse().unwrap(), 64, 0.5)
                .unwrap(),
            tables: vec![TableRates {
                size: TableSize(100_000),
                batched: InstallRate {
                    sas_per_s: 102_856.4,
                    policies_per_s: 258_000.0,
                },
                one_by_one: InstallRate {
                    sas_per_s: 12_440.0,
                    policies_per_s: f64::NAN,
                },
                flush_sas_s: 0.383,
                flush_policies_s: 0.05,
                kernel_bytes_per_sa: Some(7168.0),
                lookup: LookupCost::new(vec![100.0, 110.0, 90.0], vec![95.0; 3]),
            }],
            notes: vec!["ran in user-mode Linux".into()],
        }
    }

    #[test]
    fn a_table_line_has_every_figure_and_no_raw_escape() {
        let text = render(&report());
        for want in [
            "100k",
            "102,856",
            "258,000",
            "12,440",
            "0.383 s / 0.050 s",
            "7.0 KiB",
            "1.05× (noise ±20 %)",
            "note: ran in user-mode Linux",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert!(
            !text.contains('\x1b') && !text.contains("NaN") && !text.contains("inf"),
            "{text}"
        );
    }
}
