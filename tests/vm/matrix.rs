//! The driver rows of `matrix` raise a `cbc(aes)` driver's priority through crypto_user: a
//! matrix killed in the middle of one must not leave it raised for good. Checked in the
//! guest, where crypto_user and ESP exist. (The rows themselves: `matrix --vm uml` in
//! tests/uml.rs, the stock kernel's AES-NI rows in tests/kernels_vm.rs.)

use crate::common;

use std::path::Path;
use std::time::Instant;

use common::*;

/// `cbc(aes)` drivers and their priorities in /proc/crypto, sorted.
fn cbc_aes_priorities() -> Vec<(String, i64)> {
    let text = std::fs::read_to_string("/proc/crypto").unwrap();
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let field = |k: &str| {
            block.lines().find_map(|l| {
                l.split_once(':')
                    .filter(|(a, _)| a.trim() == k)
                    .map(|(_, v)| v.trim())
            })
        };
        if field("name") == Some("cbc(aes)") && field("type") == Some("skcipher") {
            out.push((
                field("driver").unwrap().to_string(),
                field("priority").unwrap().parse().unwrap(),
            ));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `matrix` over the driver rows only (one suite, no baseline), writing `json`.
fn driver_matrix(bytes: &str, json: &Path) -> std::process::Command {
    let mut cmd = lab();
    cmd.args([
        "matrix",
        "--backends",
        "xfrm",
        "--ciphers",
        "aes-128-cbc",
        "--bytes",
        bytes,
    ])
    // What is checked is the priorities, not speed: no ceiling (tcrypt, a minute per driver
    // in user-mode Linux).
    .args([
        "--repeat",
        "1",
        "--no-baseline",
        "--no-ceiling",
        "--no-progress",
        "--json",
    ])
    .arg(json);
    cmd
}

/// Starts a driver-row matrix, waits until it has raised a priority (its state file says
/// so and /proc/crypto shows it), then SIGKILLs it. Its payload is far beyond what any
/// machine moves before the kill, so the watcher never races the row's end.
fn kill_matrix_mid_driver_row(dir: &Path, before: &[(String, i64)]) {
    let mut child = driver_matrix("100GB", &dir.join("killed.json")).spawn().unwrap();
    let raised = wait_for_records(child.id(), std::time::Duration::from_secs(300), |r| {
        !records_of(r, "driver_priority").is_empty()
    });
    // The record is written just before the change: wait for the kernel to show it.
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while cbc_aes_priorities() == before && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let during = cbc_aes_priorities();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(raised.is_some(), "the matrix never recorded a driver priority");
    assert_ne!(during, before, "no priority was raised while the driver row ran");
    assert_eq!(cbc_aes_priorities(), during, "SIGKILL leaves the priority raised");
}

#[test]
/// A matrix killed with SIGKILL in the middle of a driver row leaves a driver's priority
/// raised; its state file recorded the originals, so `clean` puts every one back, and a
/// later matrix restores a killed one's raise before reading any priority (never taking a
/// raised value for the original). In the guest, where crypto_user and ESP exist.
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn killed_matrix_priorities_restored_in_guest() {
    if std::env::var_os(IN_VM).is_none() {
        eprintln!("skipped: runs only inside the VM started by its host-side test");
        return;
    }
    let _ = std::process::Command::new("modprobe")
        // aes_ti: a second cbc(aes) driver where the kernel has only the generic one
        // (user-mode Linux), for the driver rows to switch between.
        .args(["-q", "-a", "crypto_user", "esp4", "xfrm_user", "aes_ti"])
        .status();
    let dir = private_dir("ipl-killed-matrix-");
    let ns_before = lab_namespaces();
    // The generic driver exists only once something asked for it; the first matrix does.
    let warmup = driver_matrix("1MB", &dir.path().join("warmup.json"))
        .output()
        .unwrap();
    assert!(warmup.status.success(), "{}", text(&warmup));
    let before = cbc_aes_priorities();
    assert!(
        before.len() >= 2,
        "driver rows need two cbc(aes) drivers: {before:?}"
    );

    // 1. SIGKILL mid-row, then clean.
    kill_matrix_mid_driver_row(dir.path(), &before);
    let out = run_lab(&["clean"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("restored"), "{}", text(&out));
    assert_eq!(
        cbc_aes_priorities(),
        before,
        "clean put every priority back:\n{}",
        text(&out)
    );

    // 2. SIGKILL mid-row, then the next matrix (no clean in between).
    kill_matrix_mid_driver_row(dir.path(), &before);
    let json = dir.path().join("next.json");
    let out = driver_matrix("1MB", &json).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let notes = report["notes"].to_string();
    assert!(notes.contains("left raised by a killed run"), "{notes}");
    assert_eq!(
        cbc_aes_priorities(),
        before,
        "the next matrix started from the originals"
    );

    let out = run_lab(&["clean"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(new_lab_namespaces(&ns_before), Vec::<String>::new());
    let left: Vec<_> = std::fs::read_dir("/run/ipsec-lab")
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "state files left: {left:?}");
}
