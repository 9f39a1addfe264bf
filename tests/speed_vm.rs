//! `ipsec-lab speed --vm`: ONE virtme-ng boot of the stock kernel times a few kernel cells
//! through AF_ALG (after their known-answer tests) and the host merges them into its table
//! and JSON, named by driver and labelled as emulated (TCG). Skips, saying why, only where
//! vng or a kernel image is missing.

use std::path::Path;
use std::process::Command;

fn vng_available() -> bool {
    Command::new("vng")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn kernel_image() -> Option<String> {
    let mut images: Vec<String> = std::fs::read_dir("/boot")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("vmlinuz-"))
        .collect();
    images.sort();
    images.pop().map(|n| format!("/boot/{n}"))
}

#[test]
fn kernel_rows_come_back_from_one_vm_boot_with_drivers_and_the_tcg_label() {
    if !vng_available() {
        testcap::skip("speed_vm", "virtme-ng (`vng`) is not installed; run lab/setup.sh");
        return;
    }
    let Some(kernel) = kernel_image() else {
        testcap::skip(
            "speed_vm",
            "no /boot/vmlinuz-* kernel image to boot (apt-get install linux-image-amd64)",
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("ipl-speed-vm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("speed.json");
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ipsec-lab"))
        .args([
            "speed",
            "aes-128-cbc",
            "hmac-sha256",
            "aes-128-cbc-hmac-sha256",
            "aes-128-gcm",
        ])
        .args(["--crypto", "auto,kernel", "--vm", &kernel])
        .args(["--seconds", "0.05", "--repeats", "1", "--sizes", "64,1400"])
        .arg("--json")
        .arg(&json)
        // TCG, decided here: no KVM probe boot, and a known label to check.
        .env("IPSEC_LAB_VM_ACCEL", "tcg")
        .env_remove("OPENSSL_ia32cap")
        .output()
        .expect("ipsec-lab runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = stdout.clone() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{all}\n(took {:.1} s)", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "{all}");

    // The table: host rows, emulated kernel rows named by driver, no ratio against them.
    for needle in [
        "aes-128-cbc              encrypt  auto",
        "kernel [vm, tcg] = linux ",
        "via AF_ALG, in a vm (tcg: emulated, speeds not representative): CORRECTNESS ONLY",
        "driver cbc",
        "driver hmac(sha256",
        "driver authenc(hmac(sha256",
        "driver ",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?}:\n{all}");
    }
    assert!(!stdout.contains("auto/kernel"), "{all}");
    assert!(!stdout.contains("skipped kernel"), "{all}");

    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let records = v["records"].as_array().unwrap();
    let kernel_rows: Vec<_> = records
        .iter()
        .filter(|r| r["implementation"] == "kernel")
        .collect();
    // cbc: 2 directions; hmac, cbc+hmac, gcm: 1 each; 2 sizes.
    assert_eq!(kernel_rows.len(), (2 + 1 + 1 + 1) * 2, "{v:#}");
    for r in &kernel_rows {
        assert!(r["mb_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(!r["driver"].as_str().unwrap().is_empty(), "{r}");
        assert_eq!(r["emulated"], true, "{r}");
        assert!(r["virtualization"].as_str().unwrap().contains("tcg"), "{r}");
    }
    // Host rows are not labelled as the guest's.
    assert!(records
        .iter()
        .filter(|r| r["implementation"] == "auto")
        .all(|r| r["emulated"] == false && r.get("virtualization").is_none()));
    let guest = &v["guest_environment"];
    assert!(guest["virtualization"].as_str().unwrap().contains("tcg"), "{v:#}");
    assert!(Path::new(&kernel).ends_with(format!("vmlinuz-{}", guest["kernel_release"].as_str().unwrap())));
}
