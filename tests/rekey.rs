//! `run --rekey-every`: the xfrm SA pair replaced while data flows, in user-mode Linux (the
//! kernel's ESP at native speed where this host has none). Each rekey is in the report with
//! its time and what it cost; the timeline it is read from adds up to the verified payload;
//! the SA counters span every generation; make-before-break loses no datagram, and the
//! naive order's report agrees with the trial's own count, whatever it lost. Needs root and
//! user-mode Linux (`make setup`); under CI=true a missing one fails the test.
//!
//! And real OpenVPN 2.6 renegotiating its TLS-mode data channel key under load, on this host
//! (root and openvpn; likewise under CI=true); charon's CHILD_SA and IKE_SA rekeys in
//! user-mode Linux; and the lab's own userspace tunnel rekeyed in namespaces (root and TUN):
//! nothing lost, TCP or UDP, one thread per end or two.

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
    let began = std::time::Instant::now();
    let run = Sandbox::default().run(&all);
    let out = &run.out;
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)));
    // A TCP run's start, the key exchange included (charon's IKE for strongswan).
    if !args.contains(&"--udp") {
        assert_first_packet(&r, began.elapsed());
    }
    r
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

/// `matrix --rekey-every`: the xfrm cells rekey and the report has their table in every
/// format; `compare` shows the rekeys of two results side by side.
#[test]
fn a_matrix_rekey_sweep_has_a_rekey_table_in_every_format() {
    let test = "a_matrix_rekey_sweep_has_a_rekey_table_in_every_format";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = private_dir("ipl-rekey-matrix-");
    let out = dir.path().join("out");
    let out_s = out.to_str().unwrap();
    let run = Sandbox::default().run(&[
        "matrix",
        "--vm",
        "uml",
        "--backends",
        "xfrm",
        "--ciphers",
        "aes-256-gcm",
        "--repeat",
        "1",
        "--no-ceiling",
        "--no-progress",
        "--rekey-every",
        "0.5",
        "--out",
        out_s,
    ]);
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out));
    let md = std::fs::read_to_string(out.join("matrix.md")).unwrap();
    let table: Vec<&str> = md
        .split("#### Rekey under load (every 0.5 s, xfrm make-before-break)")
        .nth(1)
        .unwrap_or_else(|| panic!("{md}"))
        .split("\n#")
        .next()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("| xfrm"))
        .collect();
    assert!(!table.is_empty(), "{md}");
    for line in &table {
        assert!(line.contains(", 3 rekeys |"), "{line}");
    }
    let csv = std::fs::read_to_string(out.join("matrix.csv")).unwrap();
    // The rekey fields are the last seven, numbers only: counted from the end, past the
    // quoted text fields before them.
    let header: Vec<&str> = csv.lines().next().unwrap().rsplit(',').collect();
    let rekeys = header.iter().position(|h| *h == "rekeys").unwrap();
    assert!(
        csv.lines().any(|l| l.rsplit(',').nth(rekeys) == Some("3")),
        "{csv}"
    );
    for file in ["matrix.svg", "matrix.html"] {
        let text = std::fs::read_to_string(out.join(file)).unwrap();
        assert!(text.contains("Rekey under load"), "{file}");
    }
    let json = out.join("matrix.json");
    let json = json.to_str().unwrap();
    let compared = run_lab(&["compare", json, json]);
    let said = text(&compared);
    assert!(said.contains("Rekeys, side by side and not judged"), "{said}");
}

/// OpenVPN renegotiates on its own timer (`--reneg-sec 1 1` on end a): each renegotiation in
/// the transfer is in the report with its true time off end a's log, and both ends' logs
/// show it in the evidence, with the one done as the tunnel came up (before the transfer)
/// and any between the transfer's end and the tunnel's.
#[test]
fn openvpn_renegotiates_under_load_and_each_renegotiation_is_reported() {
    let test = "openvpn_renegotiates_under_load_and_each_renegotiation_is_reported";
    if !root_or_skip(test) || !openvpn_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let out = own::run_lab_leaving_nothing(&[
        "run",
        "--backend",
        "openvpn",
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
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    let t = &r["transfers"][0];
    assert_eq!(t["verified"].as_bool(), Some(true), "{r}");
    let seconds = t["seconds"].as_f64().unwrap_or(3.5).max(3.5);
    let rekeys = r["rekey"]["runs"][0]["rekeys"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    // Every second from wherever OpenVPN's timer stood: three or four in 3.5 s when the
    // control channel loses nothing, but one lost control packet waits for OpenVPN's 2 s
    // retransmit (a loaded machine's CI saw one renegotiation take 2,004 ms), so only one
    // is certain.
    assert!(!rekeys.is_empty(), "{r}");
    let mut last = -1.0;
    for m in rekeys {
        let (at, took) = (m["at_s"].as_f64().unwrap(), m["took_ms"].as_f64().unwrap());
        assert!(at >= 0.0 && at < seconds && at > last, "{m}");
        assert!((0.0..5_000.0).contains(&took), "{m}");
        last = at;
    }
    assert!(r["rekey"]["how"].as_str().unwrap().contains("--reneg-sec"), "{r}");
    let ends = &r["backend_details"]["openvpn"]["ends"];
    let (a, b) = (
        ends["a"]["renegotiations"].as_u64().unwrap(),
        ends["b"]["renegotiations"].as_u64().unwrap(),
    );
    // Each renegotiation is a handshake in both ends' logs.
    assert_eq!(a, b, "{r}");
    // Plus the ones outside the transfer: at most one a second while the tunnel came up and
    // went down, and the transfer is most of the tunnel's life.
    let n = rekeys.len() as u64;
    let setup_s = r["first_packet"]["setup_ms"].as_f64().unwrap() / 1e3;
    let outside = setup_s.ceil() as u64 + 3;
    assert!(
        a > n && a <= n + outside,
        "{n} in the transfer, {a} in the logs: {r}"
    );
}

/// strongswan: charon rekeys the CHILD_SA on the lab's command, three times in 3.5 s while
/// the payload flows; each switch lasts until the new SAs are in the kernel, and the
/// evidence shows the current CHILD_SA's SAs and the three rekeys. Then the IKE_SA once a
/// second: the CHILD_SA moves to the new one. Skips without strongSwan.
#[test]
fn charon_rekeys_the_child_sa_and_the_ike_sa_under_load() {
    let test = "charon_rekeys_the_child_sa_and_the_ike_sa_under_load";
    if !uml_or_skip(test) || !strongswan_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    for (sa, child, ike) in [("child", 3, 0), ("ike", 0, 3)] {
        let r = report_of(&["--backend", "strongswan", "--rekey-sa", sa]);
        assert_eq!(r["transfers"][0]["verified"].as_bool(), Some(true), "{r}");
        let run = &r["rekey"]["runs"][0];
        let rekeys = run["rekeys"].as_array().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(rekeys.len(), 3, "{r}");
        for (k, m) in rekeys.iter().enumerate() {
            let at = m["at_s"].as_f64().unwrap();
            assert!(at >= (k + 1) as f64 && at < (k + 1) as f64 + 0.5, "{sa}: {m}");
            assert!(m["took_ms"].as_f64().unwrap() > 0.0, "{sa}: {m}");
        }
        assert_eq!(r["plan"]["rekey"]["sa"], sa);
        let swan = &r["backend_details"]["strongswan"];
        assert_eq!(swan["rekeys"]["child_sa"], child, "{swan}");
        assert_eq!(swan["rekeys"]["ike_sa"], ike, "{swan}");
        // The current CHILD_SA's two SAs, as charon negotiated them.
        assert_eq!(swan["sas"].as_array().unwrap().len(), 2, "{swan}");
        assert_eq!(swan["differences"].as_array().unwrap().len(), 0, "{swan}");
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
