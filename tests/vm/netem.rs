//! WAN conditions (`--netem`) on the lab's link. The host kernel of the lab's build
//! machines has no netem qdisc, so the checks that need one run in the shared virtme-ng
//! boot of the stock kernel (tests/vm/main.rs), in `guest_netem_checks`:
//!
//! * `run --netem "delay 20ms loss 0.1% rate 1gbit"`: held at its iperf3 run (with the
//!   link still shaped), tc (as an outside observer) sees the netem qdisc on both veth ends; the report's conditions
//!   hold the qdiscs the lab read back over netlink, equal to the request in the kernel's
//!   units; the measured link RTT shows the delay (at least 2 × 20 ms: both directions are
//!   shaped); nothing is left afterwards.
//! * `matrix --backends plain,xfrm --netem "none;delay 10ms"`: every row once per
//!   condition, labelled with it, all cells measured (kernel ESP across the shaped link),
//!   "% of plain" taken from the plain row of the same condition.
//!
//! On the host: bad specs exit 2 and create nothing; a kernel without netem (tc says which
//! kind this one is) exits 3 and says to use --vm, and a matrix's shaped rows there are
//! "not run" with that reason; a kernel with netem runs them.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::hold::{iperf3_or_skip, Hold};
use common::*;

#[test]
fn netem_bad_specs_exit_2_and_create_nothing() {
    assert_usage_errors(&[
        (&["run", "--backend", "plain", "--netem", ""][..], "empty"),
        (
            &["run", "--backend", "plain", "--netem", "delay 20"][..],
            "with a unit",
        ),
        (&["run", "--backend", "plain", "--netem", "loss 0.1"][..], "0.1%"),
        (
            &["run", "--backend", "plain", "--netem", "reorder 5%"][..],
            "needs a delay",
        ),
        (
            &["run", "--backend", "plain", "--netem", "rate fast"][..],
            "1gbit",
        ),
        (
            &["run", "--backend", "plain", "--netem", "delay 5ms corrupt 1%"][..],
            "unknown word",
        ),
        (
            &[
                "run",
                "--backend",
                "plain",
                "--netem",
                "delay 5ms",
                "--peer",
                "192.0.2.1",
            ][..],
            "between two hosts",
        ),
        (
            &["matrix", "--backends", "plain", "--netem", "none;delay 5"][..],
            "with a unit",
        ),
    ]);
}

/// `run --netem` on this kernel: where it has netem (asked of tc, not of the lab) the run
/// goes through and records the conditions; where it lacks it (the lab's build hosts) it is
/// a missing capability (exit 3) naming the way out, before anything is created.
#[test]
fn netem_on_this_kernel_runs_where_tc_has_netem_else_exits_3_naming_vm() {
    let test = "netem_on_this_kernel_runs_where_tc_has_netem_else_exits_3_naming_vm";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let run = own::run_lab_own(&[
        "run",
        "--backend",
        "plain",
        "--bytes",
        "1MB",
        "--no-progress",
        "--netem",
        "delay 1ms",
        "--json",
        "-",
    ]);
    let out = &run.out;
    if own::kernel_has_netem() {
        assert_eq!(out.status.code(), Some(0), "tc has netem: {}", text(out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["conditions"]["netem"], "delay 1ms", "{report}");
    } else {
        assert_eq!(out.status.code(), Some(3), "tc has no netem: {}", text(out));
        assert!(text(out).contains("--vm"), "{}", text(out));
    }
    assert_eq!(run.namespaces_left, Vec::<String>::new());
}

/// A matrix on this kernel: the bare link's row is measured; the shaped row is measured
/// where the kernel has netem (asked of tc) and otherwise not run, saying why (never a zero).
#[test]
fn matrix_netem_rows_are_measured_where_tc_has_netem_else_say_why() {
    if !root_or_skip("matrix_netem_rows_are_measured_where_tc_has_netem_else_say_why") {
        return;
    }
    let _lock = lab_lock();
    let run = own::run_lab_own(&[
        "matrix",
        "--backends",
        "plain",
        "--bytes",
        "1MB",
        "--repeat",
        "1",
        "--no-progress",
        "--netem",
        "none;delay 5ms",
        "--json",
        "-",
    ]);
    let out = &run.out;
    assert!(out.status.success(), "{}", text(out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    assert!(rows[0]["key"]["netem"].is_null());
    assert_eq!(rows[0]["cells"][0]["status"], "measured");
    assert_eq!(rows[1]["key"]["netem"], "delay 5ms");
    let shaped = &rows[1]["cells"][0];
    if own::kernel_has_netem() {
        assert_eq!(shaped["status"], "measured", "tc has netem: {shaped}");
    } else {
        assert_eq!(shaped["status"], "not_run", "tc has no netem: {shaped}");
        assert!(
            shaped["reason"]
                .as_str()
                .unwrap()
                .contains("CONFIG_NET_SCH_NETEM"),
            "{shaped}"
        );
    }
    assert_eq!(run.namespaces_left, Vec::<String>::new());
}

/// The root qdisc of `link` in namespace `ns` as tc prints it (an outside observer).
fn tc_qdisc(ns: &str, link: &str) -> String {
    let out = Command::new("tc")
        .args(["-n", ns, "qdisc", "show", "dev", link])
        .output()
        .expect("tc");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn guest_netem_checks() {
    if std::env::var_os(common::IN_VM).is_none() {
        eprintln!(
            "skipped: guest_netem_checks only runs inside the VM started by the in_vm_ tests of main.rs"
        );
        return;
    }
    if !iperf3_or_skip("netem::guest_netem_checks") {
        return;
    }
    let out = PathBuf::from(std::env::var("IPSEC_LAB_VM_OUT").unwrap());

    // One shaped run: the qdiscs seen from outside, read back, the delay in the RTT.
    let json = out.join("netem-run.json");
    let spec = "delay 20ms loss 0.1% rate 1gbit";
    let before = lab_namespaces();
    // Held at its iperf3 run, with the link still shaped, the run waits while tc looks: a
    // watcher polling a 2 MB run could miss the qdiscs.
    let hold = Hold::new();
    let mut run = hold
        .lab()
        .args(["run", "--backend", "plain", "--bytes", "2MB", "--no-progress"])
        .args(["--with-iperf3", "--netem", spec, "--json"])
        .arg(&json)
        .spawn()
        .unwrap();
    let held = hold.wait(&mut run, Duration::from_secs(120));
    let own = state_records(run.id()).expect("the held run's state file");
    let mut namespaces: Vec<String> = records_of(&own, "namespace")
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    namespaces.sort();
    assert!(namespaces.contains(&held), "{held} is not the run's own: {own:?}");
    assert_eq!(namespaces.len(), 2, "{own:?}");
    let seen: Vec<String> = namespaces
        .iter()
        .zip(["ipl-veth-a", "ipl-veth-b"])
        .map(|(ns, link)| tc_qdisc(ns, link))
        .collect();
    hold.release();
    let status = run.wait().unwrap();
    assert!(status.success(), "run --netem: {status}");
    eprintln!("guest: tc saw {seen:?}");
    for s in &seen {
        assert!(s.contains("qdisc netem") && s.contains("root"), "{s}");
        assert!(
            s.contains("delay 20ms") && s.contains("loss 0.1%") && s.contains("rate 1Gbit"),
            "{s}"
        );
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let conditions = &report["conditions"];
    assert_eq!(conditions["netem"], spec, "{conditions}");
    let installed = conditions["installed"].as_array().unwrap();
    assert_eq!(installed.len(), 2, "{conditions}");
    for end in installed {
        assert_eq!(end["matches_request"], true, "{end}");
        assert_eq!(end["netem"], spec, "{end}");
    }
    let rtt_min = conditions["rtt_ms"]["min"].as_f64().unwrap();
    eprintln!("guest: link RTT {}", conditions["rtt_ms"]);
    // 20 ms each way: a handshake cannot come back sooner than 40 ms.
    assert!(
        rtt_min >= 40.0,
        "RTT {rtt_min} ms does not show 2 x 20 ms of delay"
    );
    assert!(
        rtt_min < 1000.0,
        "RTT {rtt_min} ms: far beyond the delay asked for"
    );
    assert_eq!(report["transfers"][0]["verified"], true);
    assert!(
        report["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with("netem delay 20ms")),
        "{}",
        report["notes"]
    );
    assert_eq!(
        new_lab_namespaces(&before),
        Vec::<String>::new(),
        "the run left namespaces"
    );

    // The matrix with the link condition as a dimension.
    let json = out.join("netem-matrix.json");
    let m = lab()
        .args(["matrix", "--backends", "plain,xfrm"])
        .args([
            "--ciphers",
            "aes-128-gcm",
            "--bytes",
            "1MB",
            "--repeat",
            "1",
            "--no-progress",
        ])
        .args(["--netem", "none;delay 10ms", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(m.status.success(), "matrix --netem: {}", text(&m));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let key = |r: &serde_json::Value| format!("{} {}", r["key"]["backend"], r["key"]["variant"]);
    let bare: Vec<String> = rows
        .iter()
        .filter(|r| r["key"]["netem"].is_null())
        .map(key)
        .collect();
    let shaped: Vec<String> = rows
        .iter()
        .filter(|r| r["key"]["netem"] == "delay 10ms")
        .map(key)
        .collect();
    eprintln!("guest: matrix rows {bare:?} and shaped {shaped:?}\n{}", text(&m));
    assert_eq!(
        bare.len() + shaped.len(),
        rows.len(),
        "a row of another condition"
    );
    assert_eq!(bare, shaped, "every row once per condition");
    assert!(bare[0].starts_with("\"plain\"") && bare.len() >= 2, "{bare:?}");
    // Grouped by condition: the bare link's rows first.
    let first_shaped = rows.iter().position(|r| r["key"]["netem"].is_string()).unwrap();
    assert_eq!(first_shaped, bare.len(), "rows grouped by condition");
    for row in rows {
        for cell in row["cells"].as_array().unwrap() {
            assert_eq!(cell["status"], "measured", "{row}");
            let notes = cell["notes"].as_array().map(|n| n.to_vec()).unwrap_or_default();
            let shaped = notes
                .iter()
                .any(|n| n.as_str().unwrap().starts_with("netem delay 10ms"));
            assert_eq!(shaped, row["key"]["netem"].is_string(), "{row}");
            assert!(cell["percent_of_plain"].is_number(), "{row}");
        }
    }
    assert!(
        text(&m).contains("@ delay 10ms"),
        "the table labels the condition: {}",
        text(&m)
    );
    assert_eq!(
        new_lab_namespaces(&before),
        Vec::<String>::new(),
        "the matrix left namespaces"
    );
}
