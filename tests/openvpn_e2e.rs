//! End to end through real OpenVPN 2.6 (`--backend openvpn`) in the lab namespaces (root,
//! TUN, the openvpn binary; skipped with the reason otherwise).

mod common;

use common::*;

fn openvpn_available(test: &str) -> bool {
    let found = std::process::Command::new("openvpn")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        testcap::skip(test, "openvpn is not installed (apt-get install openvpn)");
    }
    found
}

#[test]
fn openvpn_aes_256_cbc_sha256_verified_and_nothing_left() {
    let test = "openvpn_aes_256_cbc_sha256_verified_and_nothing_left";
    if !root_or_skip(test) || !openvpn_available(test) {
        return;
    }
    let _lock = lab_lock();
    let before = lab_namespaces();
    let out = run_lab(&[
        "run",
        "--backend",
        "openvpn",
        "--key-bits",
        "256",
        "--hmac",
        "sha256",
        "--bytes",
        "3MB",
        "--json",
        "-",
        "--no-progress",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(report["plan"]["suite"], "aes-256-cbc-hmac-sha256");
    assert_eq!(report["transfers"][0]["verified"], true);
    let d = &report["backend_details"]["openvpn"];
    assert_eq!(d["mode"], "static-key");
    assert_eq!(d["cipher"], "AES-256-CBC");
    assert_eq!(d["auth"], "SHA256");
    assert_eq!(d["dco"], false);
    let pid = d["ends"]["a"]["pid"].as_u64().unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "openvpn {pid} still running"
    );
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
    assert_eq!(host_lab_links(), Vec::<String>::new());
}
