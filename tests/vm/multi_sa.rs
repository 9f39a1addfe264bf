//! The kernel rows beyond one core (`--sas N`, `--pcrypt`) on a stock kernel, in ONE
//! virtme-ng boot (the shared one of tests/vm/main.rs), whose guest runs
//! `guest_multi_sa_checks`, which
//! 1. runs `-P 2 --sas 2 --cipher aes-128-gcm --pcrypt`: a verified payload, four SAs (two
//!    pairs) each with its own SPI and counters, each pair's sending SA carrying its
//!    stream's share, the SAs served by the run's `pcrypt(...)` instance (in /proc/crypto
//!    with one reference per SA while they existed), and afterwards no SA, policy,
//!    namespace or pcrypt instance left;
//! 2. runs `--mode transport -P 3 --sas 2` (AES-CBC + HMAC-SHA256): pair 0 carries streams 0
//!    and 2, pair 1 stream 1, by their ports;
//! 3. kills a `--pcrypt` run mid-transfer: `ipsec-lab clean` removes the instance it
//!    recorded (and its namespaces).
//!
//! TCG emulation: these prove correctness, not speed. Bad input is checked on the host.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn sas_pcrypt_and_per_cpu_sa_bad_input_exits_2_and_creates_nothing() {
    assert_usage_errors(&[
        (&["run", "--sas", "0"][..], "--sas 0 is out of range"),
        (&["run", "--sas", "65", "-P", "100"][..], "1 to 64"),
        (&["run", "--sas", "3", "-P", "2"][..], "add -P 3"),
        (
            &["run", "--sas", "2", "-P", "2", "--peer", "192.0.2.1"][..],
            "two hosts",
        ),
        (&["run", "--pcrypt"][..], "aes-128-gcm or aes-256-gcm"),
        (
            &[
                "run",
                "--pcrypt",
                "--backend",
                "userspace",
                "--cipher",
                "aes-128-gcm",
            ][..],
            "needs the xfrm backend",
        ),
        (
            &[
                "run",
                "--pcrypt",
                "--cipher",
                "aes-128-gcm",
                "--peer",
                "192.0.2.1",
            ][..],
            "--pcrypt with --peer",
        ),
        (
            &["matrix", "--backends", "userspace", "--pcrypt"][..],
            "include xfrm",
        ),
        (
            &["run", "--per-cpu-sa", "--backend", "userspace"][..],
            "--per-cpu-sa needs the xfrm or strongswan backend",
        ),
        (
            &[
                "run",
                "--per-cpu-sa",
                "--backend",
                "strongswan",
                "--rekey-every",
                "2",
                "--time",
                "8",
            ][..],
            "leave out --sas, --pcrypt and --per-cpu-sa",
        ),
        (
            &["run", "--per-cpu-sa", "--sas", "2", "-P", "2"][..],
            "give one of the two",
        ),
        (
            &["run", "--per-cpu-sa", "--peer", "192.0.2.1"][..],
            "--per-cpu-sa does not run between two hosts",
        ),
        (
            &["run", "--per-cpu-sa", "--rekey-every", "2", "--time", "8"][..],
            "leave out --sas, --pcrypt and --per-cpu-sa",
        ),
        (
            &["matrix", "--backends", "userspace", "--per-cpu-sa"][..],
            "--per-cpu-sa adds a per-CPU SA row to xfrm and to strongswan: include xfrm or strongswan",
        ),
    ]);
}

/// A kernel without pcrypt (this host's, unless it has the module) is a missing
/// capability: exit 3 naming CONFIG_CRYPTO_PCRYPT, before anything is created.
#[test]
fn pcrypt_missing_exits_3_and_creates_nothing() {
    if !root_or_skip("pcrypt_missing_exits_3_and_creates_nothing") {
        return;
    }
    if xfrm::pcrypt::available().is_ok() {
        // A fact of the kernel, not a missing capability: skipped everywhere (testcap).
        eprintln!("skipped pcrypt_missing_exits_3_and_creates_nothing: this kernel has pcrypt (the VM test covers it)");
        return;
    }
    let _lock = lab_lock();
    let run = own::run_lab_own(&["run", "--pcrypt", "--cipher", "aes-128-gcm", "--bytes", "1MB"]);
    let out = &run.out;
    assert_eq!(out.status.code(), Some(3), "{}", text(out));
    assert!(text(out).contains("CONFIG_CRYPTO_PCRYPT"), "{}", text(out));
    assert_eq!(run.namespaces_left, Vec::<String>::new());
}

fn report(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// pcrypt instances in /proc/crypto now.
fn pcrypt_drivers() -> Vec<String> {
    std::fs::read_to_string("/proc/crypto")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, v)| k.trim() == "driver" && v.trim().starts_with("pcrypt("))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

/// Nothing of a run left: no lab namespace, no SA or policy in this namespace, no pcrypt
/// instance, no state file recording one.
fn assert_nothing_left(after: &str) {
    assert!(
        lab_namespaces().is_empty(),
        "{after}: namespaces {:?}",
        lab_namespaces()
    );
    let states = sh(Command::new("ip").args(["xfrm", "state", "list"]));
    let policies = sh(Command::new("ip").args(["xfrm", "policy", "list"]));
    assert!(states.trim().is_empty(), "{after}: SAs left");
    assert!(policies.trim().is_empty(), "{after}: policies left: {policies}");
    assert_eq!(pcrypt_drivers(), Vec::<String>::new(), "{after}: pcrypt left");
    for entry in std::fs::read_dir("/run/ipsec-lab")
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        assert!(!text.contains("crypto_instance"), "{after}: {text}");
    }
}

/// Each SA's (pair, direction, packets, bytes) from a report's xfrm evidence.
fn sas(x: &serde_json::Value) -> Vec<(u64, String, u64, u64)> {
    x["sas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sa| {
            (
                sa["pair"].as_u64().unwrap(),
                sa["direction"].as_str().unwrap()[..4].to_string(),
                sa["packets"].as_u64().unwrap(),
                sa["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn guest_multi_sa_checks() {
    if std::env::var_os(common::IN_VM).is_none() {
        eprintln!(
            "skipped: guest_multi_sa_checks only runs inside the VM started by the in_vm_ tests of main.rs"
        );
        return;
    }
    let out = PathBuf::from(std::env::var("IPSEC_LAB_VM_OUT").unwrap());
    assert_eq!(
        pcrypt_drivers(),
        Vec::<String>::new(),
        "a pcrypt instance before the runs"
    );

    // 1. Two SA pairs, one per stream, on the run's pcrypt instance.
    let json = out.join("sas-pcrypt.json");
    let run = lab()
        .args([
            "run",
            "--backend",
            "xfrm",
            "-P",
            "2",
            "--sas",
            "2",
            "--cipher",
            "aes-128-gcm",
        ])
        .args(["--pcrypt", "--bytes", "2MB", "--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(run.status.success(), "run --sas 2 --pcrypt: {}", text(&run));
    let r = report(&json);
    assert_eq!(r["transfers"][0]["bytes"], 2_000_000);
    assert_eq!(r["plan"]["sas"], 2);
    let x = &r["backend_details"]["xfrm"];
    eprintln!("guest: --sas 2 --pcrypt evidence {x}");
    let spis: std::collections::BTreeSet<&str> = x["sas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["spi"].as_str().unwrap())
        .collect();
    assert_eq!(spis.len(), 4, "{x}");
    let got = sas(x);
    let pairs: Vec<(u64, &str)> = got.iter().map(|(p, d, ..)| (*p, d.as_str())).collect();
    assert_eq!(pairs, [(0, "a->b"), (0, "b->a"), (1, "a->b"), (1, "b->a")]);
    for (pair, direction, packets, bytes) in &got {
        assert!(*packets > 0, "pair {pair} {direction} carried nothing: {x}");
        if direction == "a->b" {
            // Each stream's 1 MB share of the payload went through its own pair.
            assert!(*bytes > 1_000_000, "pair {pair} a->b carried {bytes} bytes: {x}");
        }
    }
    let p = &x["pcrypt"];
    let driver = p["driver"].as_str().unwrap();
    assert!(driver.starts_with("pcrypt(") && driver.ends_with(')'), "{p}");
    assert_eq!(p["instantiated_by_run"], true, "{p}");
    assert_eq!(x["kernel_drivers"]["rfc4106(gcm(aes))"], driver, "{x}");
    // The instance itself plus one transform per SA of both ends (8 SAs: 2 pairs × 2 × 2).
    assert!(p["refcnt_with_sas"].as_u64().unwrap() >= 9, "{p}");
    assert_nothing_left("after --sas 2 --pcrypt");

    // 2. Transport mode, three streams on two pairs: pair 0 carries two of them.
    let json = out.join("sas-transport.json");
    let run = lab()
        .args([
            "run",
            "--backend",
            "xfrm",
            "--mode",
            "transport",
            "-P",
            "3",
            "--sas",
            "2",
        ])
        .args(["--bytes", "2MB", "--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "run --mode transport --sas 2: {}",
        text(&run)
    );
    let r = report(&json);
    let x = &r["backend_details"]["xfrm"];
    eprintln!("guest: transport --sas 2 -P 3 evidence {x}");
    assert!(x.get("pcrypt").is_none(), "{x}");
    let sent: Vec<u64> = sas(x)
        .iter()
        .filter(|(_, d, ..)| d == "a->b")
        .map(|(.., bytes)| *bytes)
        .collect();
    assert_eq!(sent.len(), 2, "{x}");
    assert!(sent[0] > 1_333_000 && sent[1] > 666_000, "{sent:?}");
    assert!(
        sent[0] > sent[1] * 3 / 2,
        "pair 0 has two streams, pair 1 one: {sent:?}"
    );
    assert!(
        x["sas"][1]["direction"]
            .as_str()
            .unwrap()
            .contains("port 5201, 5203"),
        "{x}"
    );
    assert_nothing_left("after transport --sas 2");

    // 3. A --pcrypt run killed mid-transfer: clean removes the instance it recorded. Timed
    // (an hour), it lasts until killed however fast the machine is: no race with its end.
    let mut run = lab()
        .args(["run", "--backend", "xfrm", "--cipher", "aes-256-gcm", "--pcrypt"])
        .args(["--time", "3600", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let recorded = wait_for_records(run.id(), Duration::from_secs(60), |r| {
        !records_of(r, "crypto_instance").is_empty() && !records_of(r, "namespace").is_empty()
    })
    .expect("the run recorded its pcrypt instance");
    // Until the SAs use the instance: refcnt above 1.
    let driver = records_of(&recorded, "crypto_instance")[0]["driver"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while xfrm::pcrypt::entry(&driver).and_then(|e| e.refcnt).unwrap_or(0) <= 1 {
        assert!(std::time::Instant::now() < deadline, "no SA used {driver}");
        std::thread::sleep(Duration::from_millis(50));
    }
    run.kill().unwrap();
    run.wait().unwrap();
    assert_eq!(
        pcrypt_drivers(),
        std::slice::from_ref(&driver),
        "the killed run's instance"
    );
    let cleaned = sh(lab().arg("clean"));
    assert!(
        cleaned.contains(&format!("removed crypto instance {driver}")),
        "{cleaned}"
    );
    assert_nothing_left("after clean");
    eprintln!("guest: multi-SA and pcrypt checks passed");
}
