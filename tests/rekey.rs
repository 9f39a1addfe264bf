//! `run --rekey-every`: the xfrm SA pair replaced while data flows, in user-mode Linux (the
//! kernel's ESP at native speed where this host has none). Each rekey is in the report with
//! its time and what it cost; the timeline it is read from adds up to the verified payload;
//! the SA counters span every generation; make-before-break loses no datagram, and the
//! naive order's report agrees with the trial's own count, whatever it lost. Needs root and
//! user-mode Linux (`make setup`); under CI=true a missing one fails the test. And the lab's
//! own userspace tunnel rekeyed in namespaces (root and TUN): nothing lost, TCP or UDP, one
//! thread per end or two.

mod common;

use common::own::Sandbox;
use common::*;
use serde_json::Value;

fn report_of(args: &[&str]) -> Value {
    let mut all = vec![
        "run",
        "--vm",
        "uml",
        "--no-progress",
        "--no-ceiling",
        "--json",
        "-",
        "--cipher",
        "aes-256-gcm",
        "--rekey-every",
        "1",
        "--time",
        "3.5",
    ];
    all.extend_from_slice(args);
    let run = Sandbox::default().run(&all);
    let out = &run.out;
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// The three rekeys of a 3.5 s run, each after its period, and the SAs replaced three times.
fn rekeys_of(r: &Value) -> &Vec<Value> {
    let run = &r["rekey"]["runs"][0];
    let rekeys = run["rekeys"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(rekeys.len(), 3, "{r}");
    for (k, m) in rekeys.iter().enumerate() {
        let at = m["at_s"].as_f64().unwrap();
        assert!(at >= (k + 1) as f64 && at < (k + 1) as f64 + 0.5, "{m}");
        assert!(m["took_ms"].as_f64().unwrap() > 0.0, "{m}");
    }
    for sa in r["backend_details"]["xfrm"]["sas"].as_array().unwrap() {
        assert!(sa["direction"].as_str().unwrap().contains("rekeyed 3"), "{sa}");
    }
    rekeys
}

#[test]
fn xfrm_sas_are_replaced_under_load_and_each_rekey_is_reported() {
    let test = "xfrm_sas_are_replaced_under_load_and_each_rekey_is_reported";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let r = report_of(&[]);
    let t = &r["transfers"][0];
    assert_eq!(t["verified"].as_bool(), Some(true), "{r}");
    rekeys_of(&r);
    // The 10 ms timeline holds every verified byte, and the SAs' counters all of them too,
    // across the four generations.
    let run = &r["rekey"]["runs"][0];
    assert_eq!(run["bucket_ms"], 10);
    let delivered: u64 = run["delivered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .sum();
    assert_eq!(delivered, t["bytes"].as_u64().unwrap(), "{run}");
    let sas = r["backend_details"]["xfrm"]["sas"].as_array().unwrap();
    assert!(sas[0]["bytes"].as_u64().unwrap() > delivered, "{r}");
    assert_eq!(r["plan"]["rekey"]["order"], "make-before-break");
    // `report` draws the timeline with the three rekeys marked, and tabulates them.
    let dir = private_dir("ipl-rekey-");
    let file = dir.path().join("rekey.json");
    std::fs::write(&file, r.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let svg = run_lab(&["report", file, "-f", "svg"]);
    assert_eq!(svg.status.code(), Some(0), "{}", text(&svg));
    let svg = String::from_utf8(svg.stdout).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{e}: {svg}"));
    let labels: Vec<&str> = doc
        .descendants()
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for n in ["1", "2", "3"] {
        assert!(labels.contains(&n), "rekey {n} marked: {labels:?}");
    }
    let csv = run_lab(&["report", file, "-f", "csv"]);
    assert_eq!(
        String::from_utf8_lossy(&csv.stdout).lines().count(),
        4,
        "{}",
        text(&csv)
    );
    let table = Sandbox::default().run(&[
        "run",
        "--vm",
        "uml",
        "--no-progress",
        "--no-ceiling",
        "--rekey-every",
        "0.5",
        "--time",
        "1.2",
    ]);
    assert_eq!(table.out.status.code(), Some(0), "{}", text(&table.out));
    let printed = text(&table.out);
    assert!(
        printed.contains("rekeys (make-before-break, every 0.5 s): 2"),
        "{printed}"
    );
    assert!(printed.contains("away from the rekeys: longest gap"), "{printed}");
}

#[test]
fn a_make_before_break_rekey_loses_no_datagram_and_the_naive_order_is_reported_as_it_went() {
    let test = "a_make_before_break_rekey_loses_no_datagram_and_the_naive_order_is_reported_as_it_went";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    for order in ["make-before-break", "naive"] {
        let r = report_of(&["--udp", "--rate", "5000", "--rekey-order", order]);
        let trial = &r["udp"]["trials"][0];
        let mut lost_around = 0;
        for m in rekeys_of(&r) {
            let d = &m["datagrams"];
            let (sent, lost) = (d["sent"].as_u64().unwrap(), d["lost"].as_u64().unwrap());
            // About a second of datagrams at 5,000 per second.
            assert!(sent > 1_000 && lost <= sent, "{order}: {m}");
            if order == "make-before-break" {
                assert_eq!((lost, d["duplicates"].as_u64()), (0, Some(0)), "{order}: {m}");
            }
            lost_around += lost;
        }
        // What the rekeys lost is part of what the trial lost: never more.
        assert!(lost_around <= trial["lost"].as_u64().unwrap(), "{order}: {r}");
        assert_eq!(r["plan"]["rekey"]["order"], order);
    }
}

/// The lab's own tunnel rekeyed under load (root and /dev/net/tun; skipped otherwise, a
/// failure under CI=true): `extra` added to a 3.5 s AES-256-GCM run rekeying every second.
/// Three rekeys on the schedule, both ends (every queue) through three new key epochs, and
/// not one packet dropped for an epoch it no longer knew or as a replay.
fn userspace_rekey_run(extra: &[&str]) -> Value {
    let mut args = vec![
        "run",
        "--backend",
        "userspace",
        "--cipher",
        "aes-256-gcm",
        "--rekey-every",
        "1",
        "--time",
        "3.5",
        "--no-ceiling",
        "--no-progress",
        "--json",
        "-",
    ];
    args.extend_from_slice(extra);
    let out = own::run_lab_leaving_nothing(&args);
    assert_eq!(out.status.code(), Some(0), "{extra:?}: {}", text(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    let rekeys = r["rekey"]["runs"][0]["rekeys"]
        .as_array()
        .unwrap_or_else(|| panic!("{extra:?}: {r}"));
    assert_eq!(rekeys.len(), 3, "{extra:?}: {r}");
    for (k, m) in rekeys.iter().enumerate() {
        let at = m["at_s"].as_f64().unwrap();
        assert!(
            at >= (k + 1) as f64 && at < (k + 1) as f64 + 0.5,
            "{extra:?}: {m}"
        );
    }
    let us = &r["backend_details"]["userspace"];
    for end in ["a", "b"] {
        let e = &us[end];
        assert_eq!(e["key_switches"].as_u64(), Some(3), "{extra:?} end {end}: {e}");
        for reason in ["unknown_epoch", "replay"] {
            assert_eq!(e["drops"][reason].as_u64(), Some(0), "{extra:?} end {end}: {e}");
        }
        for q in e["queues"].as_array().into_iter().flatten() {
            assert_eq!(q["key_switches"].as_u64(), Some(3), "{extra:?} end {end}: {q}");
        }
    }
    assert_eq!(r["plan"]["rekey"]["order"], "make-before-break");
    r
}

#[test]
fn the_userspace_tunnel_is_rekeyed_under_load_losing_nothing() {
    let test = "the_userspace_tunnel_is_rekeyed_under_load_losing_nothing";
    if !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    let tcp = userspace_rekey_run(&[]);
    assert_eq!(tcp["transfers"][0]["verified"].as_bool(), Some(true), "{tcp}");
    let udp = userspace_rekey_run(&["--udp", "--rate", "20000"]);
    // Nothing dropped inside the tunnel, for any reason.
    for end in ["a", "b"] {
        let drops = udp["backend_details"]["userspace"][end]["drops"]
            .as_object()
            .unwrap();
        assert!(drops.values().all(|n| n == 0), "end {end}: {drops:?}");
    }
    // What the kernel dropped before the tunnel read it (a TUN queue full while the thread
    // waited for one of 2 shared cores: measured 50 of 70,000 here) is the machine's, not
    // the rekey's: each rekey's window loses nothing beyond it.
    let trial = &udp["udp"]["trials"][0];
    let outside: u64 = trial["outside_drops"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(trial["lost"].as_u64(), Some(outside), "{trial}");
    for m in udp["rekey"]["runs"][0]["rekeys"].as_array().unwrap() {
        let d = &m["datagrams"];
        assert!(d["sent"].as_u64().unwrap() > 1_000, "{m}");
        assert!(d["lost"].as_u64().unwrap() <= outside, "{m}");
        assert_eq!(d["duplicates"].as_u64(), Some(0), "{m}");
    }
    if outside == 0 {
        for m in udp["rekey"]["runs"][0]["rekeys"].as_array().unwrap() {
            assert_eq!(m["datagrams"]["lost"].as_u64(), Some(0), "{m}");
        }
    }
    let queues = userspace_rekey_run(&["--tunnel-threads", "2"]);
    assert_eq!(
        queues["transfers"][0]["verified"].as_bool(),
        Some(true),
        "{queues}"
    );
    assert_eq!(
        queues["backend_details"]["userspace"]["a"]["queues"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{queues}"
    );
}
