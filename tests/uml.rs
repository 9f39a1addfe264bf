//! `run --vm uml`: the kernel's ESP in user-mode Linux (Debian's `user-mode-linux`), a real
//! kernel running as a process at native speed, where this host's kernel has no ESP and KVM
//! cannot boot a stock kernel. The payload is verified end to end inside, the SAs' counters
//! show it crossed ESP, the report says where it ran (not emulated), a ceiling the run
//! exceeds gives no share above 100 %, and what UML cannot carry is refused before anything
//! starts. Needs root and the package (`make setup` installs it); under CI=true a missing
//! one fails the test.

mod common;

use common::own::Sandbox;
use common::*;

fn report_of(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["run", "--vm", "uml", "--no-progress", "--json", "-"];
    all.extend_from_slice(args);
    let run = Sandbox::default().run(&all);
    let out = &run.out;
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

#[test]
fn kernel_esp_runs_verified_in_user_mode_linux_and_says_so() {
    let test = "kernel_esp_runs_verified_in_user_mode_linux_and_says_so";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    // The ceiling (tcrypt, a minute) is the xfrm guest group's (tests/vm/xfrm.rs).
    let r = report_of(&[
        "--key-bits",
        "256",
        "--hmac",
        "sha256",
        "--bytes",
        "20MB",
        "--no-ceiling",
    ]);
    let t = &r["transfers"][0];
    assert_eq!(
        (t["verified"].as_bool(), t["bytes"].as_u64()),
        (Some(true), Some(20_000_000)),
        "{r}"
    );
    let sas = r["backend_details"]["xfrm"]["sas"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        sas[0]["bytes"].as_u64().unwrap() > 20_000_000,
        "the payload crossed ESP: {r}"
    );
    assert_eq!(sas[0]["integrity_failures"], 0, "{r}");
    // The generic C driver: UML's arch has no AES-NI.
    let drivers = r["backend_details"]["xfrm"]["kernel_drivers"].to_string();
    assert!(
        drivers.contains("aes-generic") || drivers.contains("aes-fixed-time"),
        "{drivers}"
    );
    let virt = r["environment"]["virtualization"].as_str().unwrap();
    assert!(virt.starts_with("uml") && !virt.contains("tcg"), "{virt}");
    assert!(r["plan"]["vm"].is_null(), "the guest ran its plan locally: {r}");
    let notes = r["notes"].to_string();
    assert!(notes.contains("ran in user-mode Linux"), "{notes}");
}

#[test]
fn the_userspace_tunnel_runs_in_user_mode_linux_too() {
    let test = "the_userspace_tunnel_runs_in_user_mode_linux_too";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let r = report_of(&[
        "--backend",
        "userspace",
        "--cipher",
        "aes-256-gcm",
        "--bytes",
        "10MB",
    ]);
    assert_eq!(r["transfers"][0]["verified"], true, "{r}");
    let sent = r["backend_details"]["userspace"]["a"]["sent"]["bytes"]
        .as_u64()
        .unwrap();
    assert!(sent >= 10_000_000, "{r}");
}

#[test]
fn what_user_mode_linux_cannot_carry_is_refused_before_it_boots() {
    let test = "what_user_mode_linux_cannot_carry_is_refused_before_it_boots";
    if !root_or_skip(test) {
        return;
    }
    let run = Sandbox::default().run(&["run", "--vm", "uml", "--backend", "wireguard", "--no-progress"]);
    let out = &run.out;
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    assert!(text(out).contains("has no WireGuard module"), "{}", text(out));
    // `speed` times the kernel through AF_ALG, whose system calls are what UML is slow at.
    let run = Sandbox::default().run(&["speed", "--vm", "uml"]);
    assert_eq!(run.out.status.code(), Some(2), "{}", text(&run.out));
    assert!(
        text(&run.out).contains("speed --vm uml is not offered"),
        "{}",
        text(&run.out)
    );
}

/// `matrix --vm uml`: the kernel rows in one UML boot, one xfrm row per generic `cbc(aes)`
/// driver, keyed `uml` and not set apart as emulated; what UML lacks (WireGuard) has its
/// row saying so; nothing is left behind.
#[test]
fn matrix_in_user_mode_linux_has_a_row_per_generic_driver() {
    let test = "matrix_in_user_mode_linux_has_a_row_per_generic_driver";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let run = Sandbox::default().run(&[
        "matrix",
        "--vm",
        "uml",
        "--backends",
        "plain,xfrm,wireguard",
        "--ciphers",
        "aes-128-cbc,aes-256-cbc-hmac-sha256",
        "--bytes",
        "2MB",
        "--repeat",
        "1",
        // The tcrypt ceilings (a minute per driver) are the xfrm guest group's (tests/vm/xfrm.rs).
        "--no-ceiling",
        "--no-progress",
        "--json",
        "-",
    ]);
    let out = &run.out;
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    let r: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)));
    let rows = r["rows"].as_array().unwrap();
    let uml_rows: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|row| row["key"]["environment"] == "uml")
        .collect();
    let drivers: Vec<String> = uml_rows
        .iter()
        .filter(|row| row["key"]["backend"] == "xfrm")
        .map(|row| row["key"]["variant"].to_string())
        .collect();
    for driver in ["aes-generic", "aes-fixed-time"] {
        assert!(
            drivers.iter().any(|d| d.contains(driver)),
            "{driver} not in {drivers:?}"
        );
    }
    for row in uml_rows.iter().filter(|row| row["key"]["backend"] == "xfrm") {
        // Its chacha20-poly1305 cell is WireGuard's column, not xfrm's.
        for cell in row["cells"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["suite"] != "chacha20-poly1305")
        {
            let median = cell["mb_per_s"]["median"].as_f64();
            assert!(median.is_some_and(|v| v > 0.0), "{row}");
        }
    }
    let wireguard = uml_rows
        .iter()
        .find(|row| row["key"]["backend"] == "wireguard")
        .expect("a wireguard row");
    assert!(
        wireguard.to_string().contains("no WireGuard module"),
        "{wireguard}"
    );
    let env = &r["environments"]["uml"];
    let virt = env["virtualization"].as_str().unwrap();
    assert!(virt.starts_with("uml") && !virt.contains("tcg"), "{env}");
    assert!(!text(out).contains("TCG emulation"), "{}", text(out));
}

/// A checkout under /tmp (as CI's fresh clone may be) must still reach the guest: the guest
/// mounts its own tmpfs over /tmp, so it takes the binary from its own directory.
#[test]
fn a_binary_under_tmp_runs_in_user_mode_linux() {
    let test = "a_binary_under_tmp_runs_in_user_mode_linux";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let exe = dir.path().join("ipsec-lab");
    std::fs::copy(env!("CARGO_BIN_EXE_ipsec-lab"), &exe).unwrap();
    let out = std::process::Command::new(&exe)
        .args([
            "run",
            "--vm",
            "uml",
            "--backend",
            "plain",
            "--bytes",
            "5MB",
            "--no-progress",
            "--json",
            "-",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["transfers"][0]["verified"], true, "{r}");
}

/// SIGKILL a run in user-mode Linux: its kernel (a host process) outlives it, recorded;
/// `clean` stops it and removes the run's directory.
#[test]
fn a_killed_uml_run_leaves_nothing_after_clean() {
    let test = "a_killed_uml_run_leaves_nothing_after_clean";
    if !uml_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let mut child = lab()
        .args([
            "run",
            "--vm",
            "uml",
            "--backend",
            "plain",
            "--bytes",
            "50GB",
            "--no-progress",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let records = wait_for_records(child.id(), std::time::Duration::from_secs(30), |r| {
        records_of(r, "process")
            .iter()
            .any(|p| p["program"].as_str().is_some_and(|n| n.contains("linux.uml")))
    });
    let _ = child.kill();
    let _ = child.wait();
    let records = records.expect("the run recorded user-mode Linux");
    let alive = |pid: u64| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let pids: Vec<u64> = records_of(&records, "process")
        .iter()
        .filter_map(|p| p["pid"].as_u64())
        .collect();
    let dirs: Vec<String> = records_of(&records, "path")
        .iter()
        .filter_map(|p| p["path"].as_str().map(str::to_string))
        .collect();
    assert!(
        pids.iter().any(|p| alive(*p)),
        "SIGKILL leaves the guest running: {records:?}"
    );
    let out = run_lab(&["clean"]);
    assert!(out.status.success(), "{}", text(&out));
    // The kernel's own helper processes end with it.
    std::thread::sleep(std::time::Duration::from_secs(1));
    for pid in pids {
        assert!(!alive(pid), "{pid} still runs after clean: {}", text(&out));
    }
    assert!(!dirs.is_empty(), "{records:?}");
    for dir in dirs {
        assert!(!std::path::Path::new(&dir).exists(), "{dir} left: {}", text(&out));
    }
}
