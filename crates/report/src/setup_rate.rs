//! `ipsec-lab setup-rate`'s table for the terminal: one line per size, then what each
//! column means and where it was measured.

use model::setup_rate::{thousands as count, IkeRates, PeerRates, SetupBackend, SetupRateReport, TableRates};

use crate::escape::terminal;
use crate::shared::environment_summary;

const XFRM_HEADER: [&str; 8] = [
    "SAs",
    "SAs/s batched",
    "policies/s batched",
    "SAs/s 1-by-1",
    "policies/s 1-by-1",
    "flush SAs/policies",
    "kernel/SA",
    "lookup with N",
];
const IKE_HEADER: [&str; 4] = [
    "IKE_SAs",
    "IKE_SAs/s windowed",
    "IKE_SAs/s 1-by-1",
    "responder/SA",
];
const PEER_HEADER: [&str; 6] = [
    "peers",
    "peers/s one set",
    "peers/s 1-by-1",
    "handshakes",
    "handshakes/s",
    "process/peer",
];

pub fn render(report: &SetupRateReport) -> String {
    let plan = &report.plan;
    let mut out = match plan.backend {
        SetupBackend::Xfrm => {
            let mut out = format!(
                "xfrm setup rate, {} SAs (tunnel) and as many out policies, {} requests per write when batched\n\n",
                plan.xfrm_suite(),
                plan.window
            );
            out += &table(&XFRM_HEADER, report.tables.iter().map(row).collect());
            out +=
                "\nlookup with N: how many times slower a 64-byte UDP flow through one SA runs with the N \
                    installed than alone (median of its trials), against the alone trials' own spread; \
                    kernel/SA: the drop in MemFree per SA installed.\n";
            out
        }
        SetupBackend::Strongswan => {
            let mut out = format!(
                "strongswan setup rate, IKEv2 SAs established, {} initiations in flight when windowed\n\n",
                plan.window
            );
            out += &table(&IKE_HEADER, report.ike.iter().map(ike_row).collect());
            out += "\nresponder/SA: the responding charon's resident memory grown per IKE_SA.\n";
            out
        }
        SetupBackend::WireguardGo => {
            let mut out = format!(
                "wireguard-go setup rate, peers added over UAPI and handshakes completed, {} in flight\n\n",
                plan.window
            );
            out += &table(&PEER_HEADER, report.peers.iter().map(peer_row).collect());
            out += "\nprocess/peer: the device process's resident memory grown per peer added.\n";
            out
        }
    };
    if let Some(implementation) = &report.implementation {
        out += &format!("implementation: {}\n", terminal(implementation));
    }
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

/// A header and rows, the first column left-aligned, the others right-aligned.
fn table<const N: usize>(header: &[&str; N], rows: Vec<[String; N]>) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].len()])
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
    let mut out = line(header);
    for r in &rows {
        out += &line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

fn ike_row(r: &IkeRates) -> [String; 4] {
    [
        r.size.to_string(),
        count(r.windowed_per_s),
        count(r.one_by_one_per_s),
        kib(r.responder_bytes_per_sa),
    ]
}

fn peer_row(r: &PeerRates) -> [String; 6] {
    [
        r.size.to_string(),
        count(r.added_per_s),
        count(r.added_one_by_one_per_s),
        count(f64::from(r.handshakes)),
        count(r.handshakes_per_s),
        kib(r.process_bytes_per_peer),
    ]
}

/// Bytes as KiB with one decimal, "—" where not measured.
fn kib(bytes: Option<f64>) -> String {
    bytes.map_or("—".into(), |b| format!("{:.1} KiB", b / 1024.0))
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
        kib(t.kernel_bytes_per_sa),
        lookup,
    ]
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
    use model::setup_rate::{InstallRate, LookupCost, SetupRatePlan, SetupRateRequest, TableSize};

    fn report() -> SetupRateReport {
        let mut environment = model::Environment::detect();
        environment.virtualization = "uml (user-mode Linux)\x1b[31m".into();
        SetupRateReport {
            environment,
            plan: SetupRatePlan::validate(SetupRateRequest::default()).unwrap(),
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
            ike: Vec::new(),
            peers: Vec::new(),
            implementation: None,
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

    #[test]
    fn ike_and_peer_tables_have_their_figures_and_escape_what_came_from_a_daemon() {
        let mut r = report();
        r.tables.clear();
        r.plan = SetupRatePlan::validate(SetupRateRequest {
            backend: SetupBackend::Strongswan,
            ..SetupRateRequest::default()
        })
        .unwrap();
        r.ike = vec![IkeRates {
            size: TableSize(1000),
            windowed_per_s: 412.6,
            one_by_one_per_s: 150.2,
            responder_bytes_per_sa: Some(4300.0),
        }];
        r.implementation = Some("strongSwan 5.9.8\x1b]0;x\x07".into());
        let text = render(&r);
        for want in [
            "IKE_SAs/s windowed",
            "1k",
            "413",
            "150",
            "4.2 KiB",
            "32 initiations in flight",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text}");
        r.plan.backend = SetupBackend::WireguardGo;
        r.peers = vec![PeerRates {
            size: TableSize(10_000),
            added_per_s: 25_000.0,
            added_one_by_one_per_s: 9_000.0,
            handshakes: 10_000,
            handshakes_per_s: 3_100.0,
            process_bytes_per_peer: None,
        }];
        let text = render(&r);
        for want in [
            "peers/s one set",
            "10k",
            "25,000",
            "9,000",
            "10,000",
            "3,100",
            "—",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }
}
