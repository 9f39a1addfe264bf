//! Kernel WireGuard (`--backend wireguard`) on a stock kernel, checked in the guest
//! (tests/vm/main.rs boots it). In the guest: a verified 4 MB run whose report shows the handshake
//! and each end's peer counters read back over generic netlink, with no namespace or link
//! left; a wrong peer key on one end failing the start (exit 1) with both links gone; and
//! the same over IPv6 (user-mode Linux, where the IPv6 group runs, has no WireGuard).
//! Needs root, vng and a kernel image in /boot; skips with the reason otherwise.

use crate::common;

use common::*;

/// TCG boots in about 30 s; the run takes a few seconds, the wrong-key check 20 s.

#[test]
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn guest_checks() {
    assert!(
        std::env::var_os(IN_VM).is_some(),
        "guest_checks runs inside the VM (its in_vm_ test in main.rs boots it)"
    );
    let before = lab_namespaces();
    let began = std::time::Instant::now();
    let out = run_lab(&[
        "run",
        "--backend",
        "wireguard",
        "--bytes",
        "4MB",
        "--json",
        "-",
        "--no-progress",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(report["plan"]["suite"], "chacha20-poly1305");
    assert_eq!(report["transfers"][0]["verified"], true);
    assert_first_packet(&report, began.elapsed());
    let d = &report["backend_details"]["wireguard"];
    assert!(
        d["implementation"]
            .as_str()
            .unwrap()
            .starts_with("kernel WireGuard"),
        "{d}"
    );
    assert!(d["handshake_s"].as_f64().unwrap() > 0.0, "{d}");
    let (a, b) = (&d["ends"]["a"], &d["ends"]["b"]);
    assert!(a["tx_bytes"].as_u64().unwrap() >= 4_000_000, "{d}");
    assert!(b["rx_bytes"].as_u64().unwrap() >= 4_000_000, "{d}");
    // What one end sent, the other received (the link drops nothing inside one kernel).
    assert_eq!(a["tx_bytes"], b["rx_bytes"], "{d}");
    assert_eq!(a["rx_bytes"], b["tx_bytes"], "{d}");
    assert!(a["last_handshake_age_s"].as_f64().is_some(), "{d}");
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
    assert_eq!(host_lab_links(), Vec::<String>::new());

    common::wireguard::wrong_peer_key_fails(model::Backend::Wireguard);
    let out = private_dir("ipl-vm-wg6-");
    crate::ipv6::other_kernel_backend_over_ipv6(out.path(), "wireguard");
}
