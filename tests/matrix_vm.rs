//! `ipsec-lab matrix --vm`: the kernel (xfrm) rows in ONE virtme-ng boot of a stock kernel,
//! merged into the host's report as `(vm)` rows with their own plain baseline; one row per
//! `cbc(aes)` driver, chosen through crypto_user priorities, each verified from /proc/crypto
//! to be the driver that served, and every priority back as it was afterwards. Small
//! payloads: TCG moves a few MB/s. Needs root, vng and a kernel image in /boot.

mod common;

use std::path::Path;
use std::time::Instant;

use common::*;

#[test]
fn xfrm_driver_rows_in_one_vm_boot() {
    let test = "xfrm_driver_rows_in_one_vm_boot";
    if !vm_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let before = lab_namespaces();
    let json = std::env::temp_dir().join(format!("ipl-matrix-vm-{}.json", std::process::id()));
    let started = Instant::now();
    let out = run_lab(&[
        "matrix",
        "--vm",
        "--backends",
        "xfrm",
        "--ciphers",
        "aes-128-cbc,aes-256-cbc-hmac-sha256",
        "--bytes",
        "1MB",
        "--repeat",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--no-progress",
    ]);
    eprintln!(
        "VM matrix took {:.1} s (boot included)",
        started.elapsed().as_secs_f64()
    );
    assert!(out.status.success(), "{}", text(&out));
    let md = String::from_utf8_lossy(&out.stdout).to_string();
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert!(!Path::new(&json).exists());

    let env = &report["environments"]["vm"];
    assert!(
        env["virtualization"].as_str().unwrap().starts_with("vm ("),
        "{env}"
    );
    let rows = report["rows"].as_array().unwrap();
    let vm_rows: Vec<&serde_json::Value> = rows.iter().filter(|r| r["key"]["environment"] == "vm").collect();
    assert_eq!(
        vm_rows[0]["key"]["backend"], "plain",
        "the VM has its own baseline"
    );
    let drivers: Vec<&str> = vm_rows[1..]
        .iter()
        .map(|r| {
            assert_eq!(r["key"]["backend"], "xfrm");
            assert_eq!(r["key"]["variant"]["kind"], "kernel_driver", "{r}");
            r["key"]["variant"]["value"].as_str().unwrap()
        })
        .collect();
    assert!(drivers.contains(&"cbc-aes-aesni"), "{drivers:?}");
    assert!(drivers.contains(&"cbc(aes-generic)"), "{drivers:?}");
    for row in &vm_rows[1..] {
        let driver = row["key"]["variant"]["value"].as_str().unwrap();
        for cell in row["cells"].as_array().unwrap() {
            assert_eq!(cell["status"], "measured", "{cell}");
            let served = cell["served_by"].as_str().unwrap();
            assert!(
                served.starts_with("authenc(") && served.contains(driver),
                "{driver}: {served}"
            );
            assert!(cell["percent_of_plain"].as_f64().unwrap() > 0.0);
        }
    }
    let label = |d: &str| format!("| xfrm [{d}] (vm) |");
    for d in &drivers {
        assert!(md.contains(&label(d)), "{d} row missing:\n{md}");
    }
    assert!(md.contains("| plain (line rate) (vm) |"), "{md}");
    assert!(md.contains("| backend | 128 | 256+HMAC |"), "{md}");
    assert!(md.contains("tcg") || md.contains("kvm"), "{md}");
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("cbc(aes) driver priorities restored after the driver rows")),
        "{notes:?}"
    );
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
}
