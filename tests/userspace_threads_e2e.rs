//! `ipsec-lab run --backend userspace --tunnel-threads N` end to end in real namespaces (root,
//! TUN): the payload verified over several streams, one thread per queue at each end with
//! its own counts and CPU in the report, nothing left behind; and bad thread counts refused
//! with exit 2 before anything is created.

mod common;

use common::*;

fn run_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec![
        "run",
        "--backend",
        "userspace",
        "--bytes",
        "4MB",
        "--json",
        "-",
        "--no-progress",
    ];
    all.extend_from_slice(args);
    // In a namespace of its own: what is counted afterwards is this run's alone.
    let out = own::run_lab_leaving_nothing(&all);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON only")
}

fn num(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn two_and_three_tunnel_threads_verified_with_per_thread_counts_and_nothing_left() {
    let test = "two_and_three_tunnel_threads_verified_with_per_thread_counts_and_nothing_left";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    for (cipher, threads) in [
        ("aes-256-cbc-hmac-sha256", 2u64),
        ("aes-256-gcm", 2),
        ("aes-128-cbc", 3),
    ] {
        let n = threads.to_string();
        let report = run_json(&["--cipher", cipher, "--tunnel-threads", &n, "-P", "8"]);
        let what = format!("{cipher} x{threads}");
        assert_eq!(report["plan"]["tunnel_threads"], threads, "{what}");
        assert_eq!(report["transfers"][0]["verified"], true, "{what}");
        assert_eq!(report["transfers"][0]["bytes"], 4_000_000, "{what}");
        // One application thread per stream on each side.
        assert_eq!(report["transfers"][0]["sender_threads"], 8, "{what}");
        assert_eq!(report["transfers"][0]["receiver_threads"], 8, "{what}");
        let d = &report["backend_details"]["userspace"];
        for end in ["a", "b"] {
            let total = &d[end];
            let queues = total["queues"]
                .as_array()
                .unwrap_or_else(|| panic!("{what} {end}: {total}"));
            assert_eq!(queues.len() as u64, threads, "{what} {end}");
            let mut cpu_s = 0.0;
            for (i, q) in queues.iter().enumerate() {
                assert_eq!(q["queue"], i as u64, "{what} {end}");
                assert_eq!(q["tun"], total["tun"], "{what} {end}: one device");
                let drops = q["drops"].as_object().unwrap();
                assert!(
                    drops.values().all(|n| n == 0),
                    "{what} {end} queue {i}: {drops:?}"
                );
                cpu_s += q["cpu"]["user_s"].as_f64().unwrap() + q["cpu"]["system_s"].as_f64().unwrap();
            }
            // The end's figures are its threads' sums.
            for field in ["sent", "delivered"] {
                let sum: u64 = queues.iter().map(|q| num(&q[field]["packets"])).sum();
                assert_eq!(sum, num(&total[field]["packets"]), "{what} {end} {field}");
            }
            let total_cpu =
                total["cpu"]["user_s"].as_f64().unwrap() + total["cpu"]["system_s"].as_f64().unwrap();
            assert!((total_cpu - cpu_s).abs() < 1e-6 && cpu_s > 0.0, "{what} {end}");
        }
        // Every payload byte went through a's threads, the 8 streams (ports 5201..5208)
        // steered by port: none of the queues left idle.
        assert!(num(&d["a"]["sent"]["bytes"]) >= 4_000_000, "{what}");
        assert_eq!(d["a"]["steering"], "ports", "{what}");
        assert_eq!(d["b"]["steering"], "ports", "{what}");
        for q in d["a"]["queues"].as_array().unwrap() {
            assert!(
                num(&q["sent"]["bytes"]) >= 1_000_000,
                "{what}: a queue left idle: {}",
                d["a"]
            );
        }
        // The notes name every thread.
        let notes = report["notes"].to_string();
        for i in 0..threads {
            assert!(
                notes.contains(&format!("encrypting thread ipl-tun-a/{i}")),
                "{what}: {notes}"
            );
            assert!(
                notes.contains(&format!("decrypting thread ipl-tun-b/{i}")),
                "{what}: {notes}"
            );
        }
    }
}

#[test]
fn one_tunnel_thread_is_the_single_queue_tunnel_as_before() {
    let test = "one_tunnel_thread_is_the_single_queue_tunnel_as_before";
    if !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    let report = run_json(&["--cipher", "aes-128-gcm"]);
    assert_eq!(report["plan"]["tunnel_threads"], 1);
    let d = &report["backend_details"]["userspace"];
    assert!(
        d["a"].get("queues").is_none() && d["a"].get("queue").is_none(),
        "{}",
        d["a"]
    );
    assert_eq!(report["transfers"][0]["verified"], true);
}

#[test]
fn bad_tunnel_thread_counts_exit_2_and_create_nothing() {
    for (args, hint) in [
        (&["--tunnel-threads", "0"][..], "1 to 256"),
        (&["--tunnel-threads", "257"][..], "at most 256 queues"),
        (&["--tunnel-threads", "65536"][..], "65536"),
        (&["--tunnel-threads", "two"][..], "two"),
    ] {
        let mut all = vec!["run", "--backend", "userspace", "--bytes", "4MB"];
        all.extend_from_slice(args);
        let out = own::run_lab_leaving_nothing(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(hint), "{args:?}: {}", text(&out));
    }
}

#[test]
fn four_streams_run_on_four_threads_per_side_verified() {
    if !root_or_skip("four_streams_run_on_four_threads_per_side_verified") {
        return;
    }
    let _lock = lab_lock();
    let out = run_lab(&[
        "run",
        "--backend",
        "plain",
        "--bytes",
        "8MB",
        "-P",
        "4",
        "--json",
        "-",
        "--no-progress",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &report["transfers"][0];
    assert_eq!(t["verified"], true);
    assert_eq!(t["bytes"], 8_000_000);
    assert_eq!(
        (t["streams"].as_u64(), t["sender_threads"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(t["receiver_threads"], 4);
}
