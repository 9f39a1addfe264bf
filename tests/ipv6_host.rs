//! `-6` on the host: plain, the lab's userspace tunnel, OpenVPN, wireguard-go and boringtun
//! between the lab's IPv6 addresses (2001:2::/48, RFC 5180), each a verified few-MB transfer
//! with nothing left; `matrix -6`; and what `-6` refuses (exit 2, nothing created). The
//! lab's namespaces then hold IPv6 addresses only, so a run cannot quietly fall back to
//! IPv4: it works over IPv6 or fails. (xfrm, the kernel's WireGuard and strongSwan over
//! IPv6 run in the VM: tests/vm/ipv6.rs.)

mod common;

use common::*;

/// One `-6` run of `backend` with the report on stdout; checks what every such run shares.
fn run_v6(backend: &str, extra: &[&str]) -> serde_json::Value {
    let before = lab_namespaces();
    let mut args = vec![
        "run",
        "--backend",
        backend,
        "-6",
        "--bytes",
        "3MB",
        "--json",
        "-",
        "--no-progress",
    ];
    args.extend(extra);
    let out = run_lab(&args);
    assert!(out.status.success(), "{backend} -6: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    let plan = &report["plan"];
    assert_eq!(plan["family"], "ipv6", "{plan}");
    let ad = &plan["addressing"];
    assert_eq!(ad["outer_a"], "2001:2::1", "{ad}");
    assert_eq!(ad["outer_b"], "2001:2::2", "{ad}");
    assert_eq!(ad["inner_a"], "2001:2:0:1::1", "{ad}");
    assert_eq!(ad["prefix_len"], 64, "{ad}");
    assert_eq!(report["transfers"][0]["verified"], true, "{report}");
    assert_eq!(report["transfers"][0]["bytes"], 3_000_000);
    // The conditions printed with the table name the family.
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(table.contains("stream(s), IPv6"), "{table}");
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
    assert_eq!(host_lab_links(), Vec::<String>::new());
    report
}

#[test]
fn plain_over_ipv6_verified_and_nothing_left() {
    if !root_or_skip("plain_over_ipv6_verified_and_nothing_left") {
        return;
    }
    let _lock = lab_lock();
    run_v6("plain", &[]);
}

#[test]
fn userspace_tunnel_over_ipv6_verified_and_nothing_left() {
    if !root_or_skip("userspace_tunnel_over_ipv6_verified_and_nothing_left") {
        return;
    }
    let _lock = lab_lock();
    let report = run_v6("userspace", &["--cipher", "aes-256-gcm"]);
    let d = &report["backend_details"]["userspace"];
    // 1500 less IPv6 (40) and UDP (8) less GCM's 24 bytes (over IPv4 it is 1448).
    assert_eq!(d["inner_mtu"], 1428, "{d}");
    assert!(d["a"]["sent"]["packets"].as_u64().unwrap() > 1000, "{d}");
    let drops: u64 = d["a"]["drops"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(drops, 0, "{d}");
}

#[test]
fn openvpn_over_ipv6_verified_and_nothing_left() {
    let test = "openvpn_over_ipv6_verified_and_nothing_left";
    if !root_or_skip(test) || !openvpn_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let report = run_v6("openvpn", &[]);
    let d = &report["backend_details"]["openvpn"];
    assert_eq!(d["cipher"], "AES-256-CBC", "{d}");
    // The tunnel MTU leaves room for the 40-byte IPv6 header (1500 - 48 - overhead).
    assert!(d["tun_mtu"].as_u64().unwrap() < 1430, "{d}");
    let pid = d["ends"]["a"]["pid"].as_u64().unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "openvpn {pid} still running"
    );
}

#[test]
fn wireguard_go_and_boringtun_over_ipv6_verified_and_nothing_left() {
    let test = "wireguard_go_and_boringtun_over_ipv6_verified_and_nothing_left";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    for backend in ["wireguard-go", "boringtun"] {
        if backend == "wireguard-go"
            && std::process::Command::new("wireguard-go")
                .arg("--version")
                .output()
                .is_err()
        {
            testcap::skip(
                test,
                "wireguard-go is not installed (apt-get install wireguard-go)",
            );
            continue;
        }
        let report = run_v6(backend, &[]);
        let d = &report["backend_details"][backend];
        // 1500 less IPv6 (40), UDP (8) and WireGuard's 32 bytes.
        assert_eq!(d["mtu"], 1420, "{backend}: {d}");
    }
}

#[test]
fn ipv6_bad_input_exits_2_and_creates_nothing() {
    let _lock = lab_lock();
    let before = lab_namespaces();
    assert_usage_errors(&[
        (&["run", "-6", "--mtu", "1280"][..], "IPv6 needs 1280 bytes"),
        (&["run", "-6", "--encap", "udp"][..], "ESP in UDP runs over IPv4"),
        (&["run", "--family", "5"][..], "use 4 or 6"),
        (&["run", "-4", "-6"][..], "cannot be used with"),
        (&["run", "-6", "--family", "4"][..], "cannot be used with"),
    ]);
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
}

/// `matrix -6`: the rows run over IPv6 and the report's conditions name the family.
#[test]
fn matrix_over_ipv6_labels_the_family() {
    if !root_or_skip("matrix_over_ipv6_labels_the_family") {
        return;
    }
    let _lock = lab_lock();
    let before = lab_namespaces();
    let out = run_lab(&[
        "matrix",
        "-6",
        "--backends",
        "userspace",
        "--crypto",
        "auto",
        "--ciphers",
        "aes-128-gcm",
        "--bytes",
        "1MB",
        "--repeat",
        "1",
        "--json",
        "-",
        "--no-progress",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(report["family"], "ipv6");
    let rows = report["rows"].as_array().unwrap();
    let row = |backend: &str| {
        rows.iter()
            .find(|r| r["key"]["backend"] == backend)
            .unwrap()
            .to_string()
    };
    assert!(row("userspace").contains("mb_per_s"), "{}", row("userspace"));
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(
        table.contains("links and tunnels over IPv6 (2001:2::/48, RFC 5180)"),
        "{table}"
    );
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
}
