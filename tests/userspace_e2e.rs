//! End to end through `ipsec-lab run --backend userspace` in real namespaces (root, TUN):
//! every suite verified, evidence in the report, nothing left behind; and bad input refused
//! before anything is created.

mod common;

use common::*;

fn tun_available(test: &str) -> bool {
    testcap::tun(test)
}

fn run_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec![
        "run",
        "--backend",
        "userspace",
        "--bytes",
        "3MB",
        "--json",
        "-",
        "--no-progress",
    ];
    all.extend_from_slice(args);
    // In a namespace of its own: what is counted afterwards is this run's alone.
    let began = std::time::Instant::now();
    let out = own::run_lab_leaving_nothing(&all);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    let report = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_first_packet(&report, began.elapsed());
    report
}

/// The run against its crypto ceiling (the implementation the tunnel ran, at the packet
/// size it sent, both ways, the slower kept) and the line rate of its own topology, the
/// shares computed from them; for `none` an explicit "no ceiling" with its reason.
fn check_ceiling(report: &serde_json::Value, cipher: &str) {
    let c = &report["ceiling"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{cipher}: {v} in {c}"));
    let median = f(&report["mb_per_s"]["median"]);
    assert_eq!(c["line_rate"]["status"], "measured", "{cipher}: {c}");
    let line = f(&c["line_rate"]["mb_per_s"]);
    assert!(line > 0.0, "{c}");
    let share = median / line * 100.0;
    if share <= 100.0 {
        assert!((f(&c["percent_of_line_rate"]) - share).abs() < 1e-6, "{c}");
    } else {
        // A 3 MB line-rate transfer on a busy machine can come out below the tunnel (CI saw
        // 113 MB/s under a 217 MB/s run): then it is no bound, and no share above 100 % is
        // shown.
        assert!(c["percent_of_line_rate"].is_null(), "{cipher}: {c}");
    }
    let crypto = &c["crypto"];
    let packet = crypto["packet_bytes"].as_u64().unwrap();
    assert!((1300..=1500).contains(&packet), "{cipher}: {crypto}");
    if cipher == "none" {
        assert_eq!(crypto["status"], "none", "{crypto}");
        assert!(
            crypto["reason"].as_str().unwrap().contains("does not encrypt"),
            "{crypto}"
        );
        assert!(c["percent_of_ceiling"].is_null(), "{c}");
        return;
    }
    assert_eq!(crypto["status"], "measured", "{cipher}: {crypto}");
    assert_eq!(crypto["suite"], cipher);
    assert!(
        crypto["implementation"].as_str().unwrap().contains("aws-lc-rs"),
        "{crypto}"
    );
    assert!(
        crypto["packet_source"]
            .as_str()
            .unwrap()
            .contains("encrypting thread"),
        "{crypto}"
    );
    let (enc, dec, ceiling) = (
        f(&crypto["encrypt_mb_per_s"]),
        f(&crypto["decrypt_mb_per_s"]),
        f(&crypto["mb_per_s"]),
    );
    assert!(enc > 0.0 && dec > 0.0 && ceiling == enc.min(dec), "{crypto}");
    assert_eq!(crypto["limiting"], if dec < enc { "decrypt" } else { "encrypt" });
    assert!(
        (f(&c["percent_of_ceiling"]) - median / ceiling * 100.0).abs() < 1e-6,
        "{c}"
    );
}

#[test]
fn every_suite_verified_through_the_userspace_tunnel_and_nothing_left() {
    let test = "every_suite_verified_through_the_userspace_tunnel_and_nothing_left";
    if !root_or_skip(test) || !tun_available(test) {
        return;
    }
    let _lock = lab_lock();
    for cipher in [
        "none",
        "aes-128-cbc",
        "aes-192-cbc",
        "aes-256-cbc",
        "aes-128-cbc-hmac-sha256",
        "aes-192-cbc-hmac-sha256",
        "aes-256-cbc-hmac-sha256",
        "aes-128-gcm",
        "aes-256-gcm",
    ] {
        // The ceiling and line rate on a few suites (each costs half a second), and
        // --no-ceiling, which leaves both out, on the others.
        let timed = ["none", "aes-256-cbc", "aes-256-cbc-hmac-sha256", "aes-256-gcm"].contains(&cipher);
        let report = if timed {
            run_json(&["--cipher", cipher])
        } else {
            run_json(&["--cipher", cipher, "--no-ceiling"])
        };
        assert_eq!(report["plan"]["suite"], cipher);
        if timed {
            check_ceiling(&report, cipher);
        } else {
            assert!(report.get("ceiling").is_none(), "{cipher}: {}", report["ceiling"]);
        }
        assert_eq!(report["transfers"][0]["verified"], true, "{cipher}");
        assert_eq!(report["transfers"][0]["bytes"], 3_000_000, "{cipher}");
        let d = &report["backend_details"]["userspace"];
        assert_eq!(d["suite"], cipher);
        assert_eq!(d["implementation"]["choice"], "auto");
        for end in ["a", "b"] {
            let drops = d[end]["drops"].as_object().unwrap();
            assert!(drops.values().all(|n| n == 0), "{cipher} {end}: {drops:?}");
            assert!(d[end]["packets_per_s"].as_f64().unwrap() > 0.0, "{cipher}");
            let cpu = &d[end]["cpu"];
            assert!(
                cpu["user_s"].as_f64().unwrap() + cpu["system_s"].as_f64().unwrap() > 0.0,
                "{cipher}"
            );
            // Where the thread's time went: phases that add up to its life.
            let time = d[end]["time"].as_object().unwrap();
            let phases: f64 = time
                .iter()
                .filter(|(k, _)| *k != "run_queue_s")
                .map(|(_, v)| v.as_f64().unwrap())
                .sum();
            let wall = d[end]["wall_s"].as_f64().unwrap();
            assert!(
                (phases - wall).abs() <= 0.01 * wall + 0.001,
                "{cipher} {end}: {time:?} of {wall} s"
            );
        }
        assert!(d["a"]["time"]["crypto_s"].as_f64().unwrap() > 0.0, "{cipher}");
        assert!(d["b"]["recv_buffers"].as_u64().unwrap() > 0, "{cipher}");
        // Every payload byte went through the encrypting end.
        assert!(d["a"]["sent"]["bytes"].as_u64().unwrap() >= 3_000_000, "{cipher}");
        // TUN offload in use: several segments per read at a, per write at b.
        assert_eq!(d["batching"], "offload", "{cipher}");
        let num = |v: &serde_json::Value| v.as_u64().unwrap();
        assert!(
            num(&d["a"]["tun_reads"]) < num(&d["a"]["sent"]["packets"])
                && num(&d["b"]["tun_writes"]) < num(&d["b"]["delivered"]["packets"]),
            "{cipher}: a {} reads / {} packets, b {} writes / {} packets",
            d["a"]["tun_reads"],
            d["a"]["sent"]["packets"],
            d["b"]["tun_writes"],
            d["b"]["delivered"]["packets"]
        );
        if cipher != "none" {
            assert!(d["efficiency"]["crypto_single_core_mb_per_s"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn each_crypto_implementation_is_used_and_named() {
    let test = "each_crypto_implementation_is_used_and_named";
    if !root_or_skip(test) || !tun_available(test) {
        return;
    }
    let _lock = lab_lock();
    for (choice, library) in [
        ("rustcrypto", "rust-crypto"),
        ("aws-lc", "aws-lc"),
        ("soft", "aws-lc"),
        ("libcrypto", "libcrypto"),
    ] {
        let report = run_json(&["--key-bits", "128", "--hmac", "sha256", "--crypto", choice]);
        let imp = &report["backend_details"]["userspace"]["implementation"];
        assert_eq!(imp["choice"], choice);
        assert_eq!(imp["library"], library);
        if choice == "soft" {
            // Never claims software AES for a run that used AES-NI.
            assert_eq!(imp["hardware_aes"], false, "{imp}");
        }
        if choice == "libcrypto" {
            // OpenSSL's own library, named by its release.
            assert!(imp["label"].as_str().unwrap().contains("OpenSSL "), "{imp}");
        }
    }
}

#[test]
fn bad_cipher_and_crypto_exit_2_and_create_nothing() {
    for args in [
        &["run", "--backend", "userspace", "--cipher", "aes-512-gcm"][..],
        &["run", "--backend", "userspace", "--crypto", "nonsense"][..],
        &["run", "--backend", "openvpn", "--cipher", "aes-512-gcm"][..],
    ] {
        let out = own::run_lab_leaving_nothing(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
    }
}
