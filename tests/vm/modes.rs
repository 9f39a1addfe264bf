//! The run modes through kernel IPsec on a stock kernel, in the shared
//! VM boot of tests/vm/main.rs, whose guest runs `guest_modes_checks`. There an xfrm run
//! with `--bidir` carries a verified payload both ways at once (each SA's counters show
//! its way's payload went through ESP), and an xfrm run with `--reverse --time` carries a
//! timed, verified payload b→a through ESP, its intervals adding up to the total and
//! each saying what the SAs carried meanwhile.
//! Payloads are kept to about 1 MB: TCG moves ESP at well under 1 MB/s.

use crate::common;

use std::path::PathBuf;

use common::*;
use serde_json::Value;

fn run_to(json: &PathBuf, args: &[&str]) -> Value {
    let out = lab()
        .args(args)
        .args(["--no-progress", "--json"])
        .arg(json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

/// Bytes the ESP SA of `way` ("a->b" or "b->a") carried, from end a's counters.
fn sa_bytes(report: &Value, way: &str) -> u64 {
    report["backend_details"]["xfrm"]["sas"]
        .as_array()
        .expect("SA counters")
        .iter()
        .find(|sa| sa["direction"].as_str().unwrap().starts_with(way))
        .unwrap_or_else(|| panic!("no {way} SA in {report}"))["bytes"]
        .as_u64()
        .unwrap()
}

#[test]
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn guest_modes_checks() {
    if std::env::var_os(common::IN_VM).is_none() {
        eprintln!(
            "skipped: guest_modes_checks only runs inside the VM started by the in_vm_ tests of main.rs"
        );
        return;
    }
    let out = PathBuf::from(std::env::var("IPSEC_LAB_VM_OUT").unwrap());
    let before = lab_namespaces();

    let bidir = run_to(
        &out.join("bidir.json"),
        &["run", "--backend", "xfrm", "--bidir", "--bytes", "1MB"],
    );
    let b = &bidir["modes"]["bidir"];
    for (way, key) in [("a->b", "a_to_b"), ("b->a", "b_to_a")] {
        assert_eq!(b[key][0]["bytes"], 1_000_000, "{way}");
        assert_eq!(b[key][0]["verified"], true, "{way}");
        // Each way's payload went through its own SA (ESP adds its overhead on top).
        assert!(sa_bytes(&bidir, way) > 1_000_000, "{way}: {bidir}");
    }
    assert_eq!(bidir["transfers"][0]["bytes"], 2_000_000);

    let reverse = run_to(
        &out.join("reverse.json"),
        &[
            "run",
            "--backend",
            "xfrm",
            "--reverse",
            "--time",
            "3",
            "--interval",
            "1",
        ],
    );
    let t = &reverse["transfers"][0];
    assert_eq!(t["verified"], true);
    assert_eq!(reverse["modes"]["direction"], "b->a");
    let bytes = t["bytes"].as_u64().unwrap();
    assert!(bytes > 0);
    let seconds = t["seconds"].as_f64().unwrap();
    // Emulated ESP moves well under 1 MB/s: what sat in the socket buffers at the deadline
    // arrives seconds later (the receiver's clock counts it), so only a loose bound here;
    // the host test holds --time to a few percent.
    assert!((2.0..30.0).contains(&seconds), "{seconds} s");
    let intervals = reverse["modes"]["intervals"].as_array().unwrap();
    let sum: u64 = intervals.iter().map(|i| i["bytes"].as_u64().unwrap()).sum();
    assert_eq!(sum, bytes);
    // Each interval says what the SAs carried meanwhile: b->a's add up to the payload and
    // its ESP overhead.
    let esp: u64 = intervals
        .iter()
        .map(|i| i["esp_bytes"]["b->a"].as_u64().unwrap_or(0))
        .sum();
    assert!(esp > bytes, "{esp} ESP bytes b->a for {bytes} payload bytes");
    // b sent: the b->a SA carried the payload, the a->b one only the ACKs.
    assert!(sa_bytes(&reverse, "b->a") > bytes, "{reverse}");
    assert!(sa_bytes(&reverse, "a->b") < bytes, "{reverse}");
    eprintln!(
        "guest: bidir {} + {} MB/s, reverse {} bytes in {seconds:.2} s over {} intervals",
        b["a_to_b"][0]["rates"]["mb_per_s"],
        b["b_to_a"][0]["rates"]["mb_per_s"],
        bytes,
        intervals.len()
    );
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
}
