//! Packets and latency (issue 26) on this host's own namespaces: UDP trials over plain and
//! the userspace tunnel, the zero-loss search, round trips idle and under load; in user-mode
//! Linux, kernel ESP and netem's delay and reordering. Each run in a sandbox of its own,
//! which it must leave empty.

mod common;

use common::own::run_lab_leaving_nothing;
use common::*;

/// `ipsec-lab run ARGS --json -`, which must succeed and leave nothing behind.
fn report_of(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend(["--json", "-"]);
    let out = run_lab_leaving_nothing(&all);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

/// `ipsec-lab run ARGS --json-stream`: the objects before the last, and the report the last
/// one carries.
fn stream_of(args: &[&str]) -> (Vec<serde_json::Value>, serde_json::Value) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json-stream");
    let out = run_lab_leaving_nothing(&all);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out));
    let mut objects: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let end = objects.pop().expect("the report");
    assert_eq!(end["event"], "end");
    (objects, end["data"].clone())
}

fn trial(r: &serde_json::Value, i: usize) -> &serde_json::Value {
    &r["udp"]["trials"][i]
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// A rate well under what the tunnel carries loses nothing the kernel did not drop; unlimited,
/// the sender (about 1 Mpps of 64-byte datagrams here) outruns the tunnel (a few hundred
/// thousand) and the loss is counted, not hidden. Every delivered datagram verified.
#[test]
fn udp_64_byte_trials_count_packets_and_loss_over_plain_and_the_userspace_tunnel() {
    let test = "udp_64_byte_trials_count_packets_and_loss_over_plain_and_the_userspace_tunnel";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    for backend in ["plain", "userspace"] {
        let r = report_of(&[
            "--backend",
            backend,
            "--udp",
            "--packet-size",
            "64",
            "--rate",
            "20kpps",
            "--time",
            "1",
        ]);
        let t = trial(&r, 0);
        assert!(n(&t["sent"]) >= 19_000, "{backend}: {t}");
        assert_eq!(t["kept_rate"], true, "{backend}: {t}");
        assert_eq!(
            (n(&t["corrupted"]), n(&t["duplicates"])),
            (0, 0),
            "{backend}: {t}"
        );
        // An idle machine loses none at this rate; a busy one can keep the receiving end off
        // a CPU until a kernel queue overflows (seen: 841 of 20000 at the TUN device, with
        // another test binary beside it). Such loss is counted, and by the kernel's counters
        // it was all outside the tunnel.
        let d = &t["outside_drops"];
        let outside = n(&d["receiver_socket"]) + n(&d["link"]) + n(&d["tunnel_devices"]);
        assert_eq!(n(&t["lost"]), outside, "{backend}: {t}");
        assert_eq!(n(&t["received"]) + n(&t["lost"]), n(&t["sent"]), "{backend}: {t}");
        // 64-byte IPv4 packets: 36 bytes of UDP payload each.
        assert_eq!(n(&t["payload_bytes"]), n(&t["received"]) * 36, "{t}");
        assert_eq!(n(&t["packet_bytes"]), n(&t["received"]) * 64, "{t}");
        // The link carried at least the inner packets (more, through the tunnel).
        assert!(
            t["link_bytes"]
                .as_u64()
                .is_some_and(|b| b >= n(&t["packet_bytes"])),
            "{t}"
        );
        assert!(r["transfers"][0]["verified"].as_bool().unwrap(), "{r}");
    }
    let r = report_of(&[
        "--backend",
        "userspace",
        "--cipher",
        "aes-256-gcm",
        "--udp",
        "--packet-size",
        "64",
        "--time",
        "1",
    ]);
    let t = trial(&r, 0);
    assert!(t["offered_pps"].is_null(), "{t}");
    assert!(n(&t["lost"]) > 0, "an unlimited sender outruns the tunnel: {t}");
    assert_eq!(n(&t["lost"]), n(&t["sent"]) - n(&t["received"]), "{t}");
    assert_eq!(n(&t["corrupted"]), 0, "{t}");
}

/// `--find-ndr`: the NDR's final trial lost nothing and the next rate up did lose; the PDR
/// is at or above it; the bare link was searched first.
#[test]
fn find_ndr_lands_where_the_final_trial_passes_and_the_next_step_up_loses() {
    let test = "find_ndr_lands_where_the_final_trial_passes_and_the_next_step_up_loses";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    let (streamed, r) = stream_of(&[
        "--backend",
        "userspace",
        "--cipher",
        "aes-256-gcm",
        "--find-ndr",
        "--packet-size",
        "64",
        "--time",
        "1",
    ]);
    // Every trial streamed as it ended: the bare link's search first, then the tunnel's.
    let stages: Vec<&str> = streamed
        .iter()
        .map(|o| o["data"]["stage"].as_str().unwrap())
        .collect();
    let count = |key: &str| r["udp"][key]["trials"].as_array().unwrap().len();
    let (bare, tunnel) = (count("baseline"), count("ndr"));
    assert_eq!(stages.len(), bare + tunnel, "{stages:?}");
    assert!(
        stages[..bare].iter().all(|s| *s == "bare link NDR search"),
        "{stages:?}"
    );
    assert!(stages[bare..].iter().all(|s| *s == "NDR search"), "{stages:?}");
    assert!(streamed.iter().all(|o| o["event"] == "trial"));
    assert_eq!(streamed[bare]["data"]["trial"], r["udp"]["ndr"]["trials"][0]);
    let ndr = &r["udp"]["ndr"];
    let bounds = ndr["bounds"].as_array().unwrap();
    assert_eq!(bounds.len(), 2, "{ndr}");
    for b in bounds {
        let tolerance = b["tolerance_pct"].as_f64().unwrap();
        let lower = &b["lower"];
        assert!(!lower.is_null(), "a rate passed: {b}");
        let loss = n(&lower["lost"]) as f64 * 100.0 / n(&lower["sent"]) as f64;
        assert!(loss <= tolerance, "{b}");
        assert!(
            lower["send_seconds"].as_f64().unwrap() >= 0.9,
            "the final trial is full length: {b}"
        );
        let upper = &b["upper"];
        assert!(!upper.is_null(), "the tunnel, not the sender, is the limit: {b}");
        let up_loss = n(&upper["lost"]) as f64 * 100.0 / n(&upper["sent"]) as f64;
        assert!(up_loss > tolerance, "{b}");
        assert!(upper["sent_pps"].as_f64() > lower["sent_pps"].as_f64(), "{b}");
        let pps = b["pps"].as_f64().unwrap();
        assert!(
            (b["mbit_per_s"].as_f64().unwrap() - pps * 64.0 * 8.0 / 1e6).abs() < 1e-6,
            "{b}"
        );
    }
    assert!(
        bounds[0]["pps"].as_f64() <= bounds[1]["pps"].as_f64(),
        "NDR <= PDR: {ndr}"
    );
    let baseline = &r["udp"]["baseline"];
    assert_eq!(baseline["bounds"].as_array().map(Vec::len), Some(2), "{baseline}");
}

/// `--latency`: percentiles in order, idle and under the TCP transfer; a CPU-bound tunnel
/// queues, so its loaded p99 is above its idle one.
#[test]
fn latency_percentiles_are_ordered_and_rise_under_load_through_the_userspace_tunnel() {
    let test = "latency_percentiles_are_ordered_and_rise_under_load_through_the_userspace_tunnel";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    let r = report_of(&[
        "--backend",
        "userspace",
        "--cipher",
        "aes-256-gcm",
        "--latency",
        "--no-ceiling",
    ]);
    let phases = r["latency"]["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["idle", "under TCP load"], "{phases:?}");
    for p in phases {
        assert!(n(&p["probes_received"]) > 500, "{p}");
        let q = |k: &str| p[k].as_f64().unwrap();
        assert!(q("min_ms") <= q("p50_ms") && q("p50_ms") <= q("p90_ms"), "{p}");
        assert!(q("p90_ms") <= q("p99_ms") && q("p99_ms") <= q("p999_ms"), "{p}");
        assert!(q("p999_ms") <= q("max_ms"), "{p}");
    }
    let p99 = |i: usize| phases[i]["p99_ms"].as_f64().unwrap();
    assert!(p99(1) > p99(0), "loaded p99 {} over idle {}", p99(1), p99(0));
}

/// In user-mode Linux (kernel ESP, and netem, which this host's kernel lacks): a 10 ms
/// netem delay each way puts the idle round trip at 20 ms; reordering shows as reordered
/// datagrams; UDP crosses kernel ESP verified.
#[test]
fn in_user_mode_linux_netem_delay_sets_the_round_trip_and_reordering_is_counted() {
    let test = "in_user_mode_linux_netem_delay_sets_the_round_trip_and_reordering_is_counted";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    // UML's one CPU is a host process, and its timers fire when the host wakes it: late
    // when the host is busy, and at times on a quiet host too (medians of 20.3 to 28.8 ms
    // were seen, a CI run's best of five 21.6). The fastest round trip of the second's
    // probes is what netem sets, whatever the host does: never under its 20 ms (a floor no
    // host can lower) and within 2 ms of it (one delay each way, not two).
    let r = report_of(&[
        "--vm",
        "uml",
        "--backend",
        "plain",
        "--netem",
        "delay 10ms",
        "--latency",
        "--time",
        "1",
    ]);
    let idle = r["latency"]["phases"][0].clone();
    assert_eq!(idle["name"], "idle", "{idle}");
    let ms = |k: &str| idle[k].as_f64().unwrap();
    assert!(ms("min_ms") >= 20.0, "a round trip under netem's 20 ms: {idle}");
    assert!(
        ms("min_ms") < 22.0,
        "the fastest round trip is not netem's 20 ms: {idle}"
    );
    assert!(ms("p50_ms") >= 20.0, "{idle}");
    let r = report_of(&[
        "--vm",
        "uml",
        "--backend",
        "plain",
        "--netem",
        "delay 5ms reorder 25%",
        "--udp",
        "--packet-size",
        "512",
        "--rate",
        "5k",
        "--time",
        "1",
    ]);
    let t = trial(&r, 0);
    assert!(n(&t["reordered"]) > 0, "{t}");
    assert_eq!((n(&t["lost"]), n(&t["corrupted"])), (0, 0), "{t}");
    let r = report_of(&[
        "--vm",
        "uml",
        "--udp",
        "--packet-size",
        "1400",
        "--rate",
        "2k",
        "--time",
        "1",
    ]);
    let t = trial(&r, 0);
    assert_eq!((n(&t["lost"]), n(&t["corrupted"])), (0, 0), "{t}");
    let sas = r["backend_details"]["xfrm"]["sas"].as_array().unwrap();
    assert!(
        n(&sas[0]["packets"]) >= n(&t["received"]),
        "the datagrams crossed ESP: {r}"
    );
}

#[test]
fn packet_options_that_do_not_fit_exit_2_and_create_nothing() {
    assert_usage_errors(&[
        (&["run", "--udp", "--packet-size", "20"][..], "give 44 or more"),
        (
            &["run", "--udp", "-6", "--packet-size", "60"][..],
            "give 64 or more",
        ),
        (
            &["run", "--udp", "--packet-size", "2000"][..],
            "larger than the link's MTU",
        ),
        (&["run", "--udp", "--packet-size", "big"][..], "or imix"),
        (&["run", "--packet-size", "64"][..], "add --udp"),
        (&["run", "--rate", "10k"][..], "add --udp"),
        (&["run", "--udp", "--rate", "fast"][..], "1Mpps"),
        (&["run", "--find-ndr", "--rate", "10k"][..], "leave out --rate"),
        (&["run", "--find-ndr", "60"][..], "0 to 50"),
        (&["run", "--udp", "-P", "2"][..], "leave out -P"),
        (&["run", "--udp", "--bytes", "10MB"][..], "--time SECONDS"),
        (&["run", "--udp", "--bidir"][..], "leave out --bidir"),
        (
            &["run", "--udp", "--peer", "192.0.2.1", "--interval", "1"][..],
            "leave it out with --peer",
        ),
        (
            &["run", "--udp", "--interval", "1"][..],
            "leave out --bidir, --interval",
        ),
    ]);
}

/// Issue 43: a 64 B run at 100 kpps through the userspace tunnel lost 10 % while its
/// threads said "drops: none": the loss was before the tunnel. Each trial now says what the
/// kernel dropped outside the tunnel's own counters (the receiving socket, the link, the
/// tunnel devices' queues), never more than was lost; where the tunnel dropped nothing,
/// every lost datagram is found there. 150 kpps is over what the tunnel takes here (about
/// 100 kpps): the TUN device's queue overflows, a third is lost.
#[test]
fn udp_loss_outside_the_tunnel_is_attributed() {
    let test = "udp_loss_outside_the_tunnel_is_attributed";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    let args = [
        "run",
        "--backend",
        "userspace",
        "--udp",
        "--packet-size",
        "64",
        "--rate",
        "150kpps",
    ];
    let mut all = args.to_vec();
    all.extend(["--time", "2", "--json", "-"]);
    let out = run_lab_leaving_nothing(&all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = trial(&r, 0);
    let d = &t["outside_drops"];
    assert!(d.is_object(), "no outside drops: {t}");
    let lost = n(&t["lost"]);
    let outside = n(&d["receiver_socket"]) + n(&d["link"]) + n(&d["tunnel_devices"]);
    eprintln!(
        "64 B at 150 kpps through userspace: {} sent, {lost} lost, outside the tunnel {d}",
        n(&t["sent"])
    );
    assert!(outside <= lost, "{t}");
    let notes = r["notes"].to_string();
    let tunnel_dropped_none = notes.matches("drops: none").count() == 2;
    if lost > 0 && tunnel_dropped_none {
        assert_eq!(
            outside, lost,
            "the tunnel dropped none, so all the loss was outside it: {t}\n{notes}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("(outside the tunnel: "), "{stderr}");
    }
}
