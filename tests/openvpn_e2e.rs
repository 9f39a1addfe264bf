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
    let began = std::time::Instant::now();
    let out = own::run_lab_leaving_nothing(&[
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
    assert_first_packet(&report, began.elapsed());
    let d = &report["backend_details"]["openvpn"];
    assert_eq!(d["mode"], "static-key");
    assert_eq!(d["cipher"], "AES-256-CBC");
    assert_eq!(d["auth"], "SHA256");
    assert_eq!(d["dco"], false);
    // Its ceiling: OpenSSL's (openvpn links it), CBC+HMAC from its CBC and HMAC figures,
    // at openvpn's tun-mtu.
    let c = &report["ceiling"]["crypto"];
    assert_eq!(c["packet_bytes"], d["tun_mtu"], "{c}");
    let openssl = std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if openssl {
        assert_eq!(c["status"], "measured", "{c}");
        assert!(
            c["implementation"].as_str().unwrap().starts_with("OpenSSL"),
            "{c}"
        );
        assert!(c["notes"].to_string().contains("hmac sha256"), "{c}");
        assert!(report["ceiling"]["percent_of_ceiling"].as_f64().unwrap() > 0.0);
    } else {
        assert_eq!(c["status"], "none", "{c}");
        assert!(c["reason"].as_str().unwrap().contains("openssl"), "{c}");
    }
    assert!(report["ceiling"]["percent_of_line_rate"].as_f64().unwrap() > 0.0);
    let pid = d["ends"]["a"]["pid"].as_u64().unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "openvpn {pid} still running"
    );
}

/// Issue 43: the OpenVPN row's summary showed the transfer's ends' CPU and nothing of the
/// openvpn processes (45–50 % of a core each), where the userspace and WireGuard rows
/// print their tunnel's. Its summary now says the openvpn processes' share at both ends.
#[test]
fn openvpn_summary_prints_the_tunnels_cpu() {
    let test = "openvpn_summary_prints_the_tunnels_cpu";
    if !root_or_skip(test) || !openvpn_available(test) {
        return;
    }
    let _lock = lab_lock();
    let out =
        own::run_lab_leaving_nothing(&["run", "--backend", "openvpn", "--bytes", "30MB", "--no-progress"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let line = t
        .lines()
        .find(|l| l.contains("tunnel CPU: end a "))
        .unwrap_or_else(|| panic!("no tunnel CPU line:\n{t}"));
    assert!(line.contains("the openvpn processes"), "{line}");
    let percent = |end: &str| -> f64 {
        line.split(&format!("end {end} "))
            .nth(1)
            .and_then(|rest| rest.split(" %").next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no figure for end {end}: {line}"))
    };
    eprintln!("{line}");
    assert!(percent("a") > 0.0 && percent("b") > 0.0, "{line}");
    // And each process's own line, user and system time apart.
    assert!(t.contains("openvpn end a (pid "), "{t}");
}
