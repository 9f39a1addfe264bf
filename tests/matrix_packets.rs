//! `ipsec-lab matrix --packet-sizes 64,1400 --latency` on the host at short trials: plain
//! and the userspace tunnel over AES-256-GCM, a UDP row per size, every cell measured with
//! packets/s above 0 and round trips in order (p50 <= p99 <= max) per phase; `report`
//! draws the packets/s and latency panels from the JSON; options that need UDP rows exit 2
//! without them. Needs root and TUN; skips with the reason otherwise (fails under CI=true).

mod common;

use common::*;

#[test]
fn udp_rows_per_packet_size_measure_packets_and_latency_and_report_draws_them() {
    let test = "udp_rows_per_packet_size_measure_packets_and_latency_and_report_draws_them";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = private_dir("ipl-matrix-packets");
    let started = std::time::Instant::now();
    let out = lab()
        .args([
            "matrix",
            "--backends",
            "plain,userspace",
            "--crypto",
            "auto",
            "--ciphers",
            "aes-256-gcm",
            "--packet-sizes",
            "64,1400",
            "--latency",
            "--trial-time",
            "0.5",
            "--repeat",
            "1",
            "--no-progress",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    eprintln!("the sweep took {:.1} s", started.elapsed().as_secs_f64());
    let json = std::fs::read_to_string(dir.path().join("matrix.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = report["rows"].as_array().unwrap();
    // plain and userspace at each size: UDP rows only, no TCP row.
    assert_eq!(rows.len(), 4, "{rows:?}");
    for backend in ["plain", "userspace"] {
        for size in [64, 1400] {
            let row = rows
                .iter()
                .find(|r| r["key"]["backend"] == backend && r["key"]["packet_size"]["fixed"] == size)
                .unwrap_or_else(|| panic!("no {backend} row at {size} B"));
            let cell = &row["cells"][0];
            assert_eq!(cell["status"], "measured", "{backend} {size} B: {cell}");
            let packets = &cell["packets"];
            let pps = packets["received_pps"]["median"].as_f64().unwrap();
            assert!(pps > 0.0, "{backend} {size} B: {packets}");
            assert_eq!(packets["packet_size"]["fixed"], size);
            let loss = packets["loss_pct"]["median"].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&loss), "{loss}");
            let phases = cell["latency"]["phases"].as_array().unwrap();
            let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
            assert_eq!(names, ["idle", "under UDP load"], "{backend} {size} B");
            for phase in phases {
                assert!(phase["probes_received"].as_u64().unwrap() > 0, "{phase}");
                let ms = |k: &str| phase[k].as_f64().unwrap();
                assert!(
                    0.0 < ms("p50_ms") && ms("p50_ms") <= ms("p99_ms") && ms("p99_ms") <= ms("max_ms"),
                    "{backend} {size} B: {phase}"
                );
                assert!(!phase["cdf"].as_array().unwrap().is_empty());
            }
        }
    }
    // `report` renders the same JSON with both charts and both tables.
    let json_path = dir.path().join("matrix.json");
    for (format, needles) in [
        (
            "svg",
            &[
                "id=\"packets-host\"",
                "id=\"latency-host\"",
                "userspace [auto] GCM-256",
            ][..],
        ),
        (
            "markdown",
            &[
                "#### Packets/s per packet size",
                "| backend | 64 B | 1400 B |",
                "under UDP load",
            ][..],
        ),
        (
            "html",
            &["class=\"packets\"", "class=\"latency\"", "id=\"latency-host\""][..],
        ),
        ("csv", &["received_pps_median", "latency_loaded_p99_ms"][..]),
    ] {
        let out = lab()
            .args(["report", "--format", format])
            .arg(&json_path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{format}: {}", text(&out));
        let body = String::from_utf8(out.stdout).unwrap();
        for needle in needles {
            assert!(body.contains(needle), "{format}: no {needle}");
        }
        let lower = body.to_lowercase();
        let words: Vec<&str> = lower.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        assert!(!words.contains(&"nan") && !words.contains(&"inf"), "{format}");
    }
    let svg = std::fs::read_to_string(dir.path().join("matrix.svg")).unwrap();
    roxmltree::Document::parse(&svg).expect("well-formed SVG");
}

#[test]
fn packet_options_without_udp_rows_or_bad_sizes_exit_2_before_anything_runs() {
    for (args, says) in [
        (&["--find-ndr"][..], "give --packet-sizes"),
        (&["--trial-time", "1"][..], "give --packet-sizes"),
        (
            &["--packet-sizes", "64,jumbo"][..],
            "tcp for the bulk TCP transfer",
        ),
        (&["--packet-sizes", "2000"][..], "larger than the link's MTU"),
    ] {
        let out = lab()
            .args(["matrix", "--backends", "plain", "--json", "-"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(out.stdout.is_empty(), "{args:?}: nothing measured");
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
}
