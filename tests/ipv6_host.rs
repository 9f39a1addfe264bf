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
    // In a namespace of its own: what is counted afterwards is this run's, never another
    // lab run's on the same machine.
    let run = own::run_lab_own(&args);
    let out = &run.out;
    assert!(out.status.success(), "{backend} -6: {}", text(out));
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
    assert_eq!(run.namespaces_left, Vec::<String>::new(), "{backend}");
    assert_eq!(run.links_left, Vec::<String>::new(), "{backend}");
    assert_eq!(run.files_left, Vec::<String>::new(), "{backend}");
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
    assert_usage_errors(&[
        (&["run", "-6", "--mtu", "1280"][..], "IPv6 needs 1280 bytes"),
        (&["run", "-6", "--encap", "udp"][..], "ESP in UDP runs over IPv4"),
        (&["run", "--family", "5"][..], "use 4 or 6"),
        (&["run", "-4", "-6"][..], "cannot be used with"),
        (&["run", "-6", "--family", "4"][..], "cannot be used with"),
    ]);
}

/// `matrix -6`: the rows run over IPv6 and the report's conditions name the family.
#[test]
fn matrix_over_ipv6_labels_the_family() {
    if !root_or_skip("matrix_over_ipv6_labels_the_family") {
        return;
    }
    let _lock = lab_lock();
    let run = own::run_lab_own(&[
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
    let out = &run.out;
    assert!(out.status.success(), "{}", text(out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(report["family"], "ipv6");
    let rows = report["rows"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|r| r["key"]["backend"] == "userspace")
        .unwrap_or_else(|| panic!("no userspace row: {report}"));
    // A figure, not just the key: `"mb_per_s": null` is no measurement.
    let cell = &row["cells"][0];
    assert_eq!(cell["status"], "measured", "{row}");
    let median = cell["mb_per_s"]["median"].as_f64();
    assert!(median.is_some_and(|m| m.is_finite() && m > 0.0), "{row}");
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(
        table.contains("links and tunnels over IPv6 (2001:2::/48, RFC 5180)"),
        "{table}"
    );
    assert_eq!(run.namespaces_left, Vec::<String>::new());
    assert_eq!(run.links_left, Vec::<String>::new());
}

/// Bug: the tests counted every new `ipl-*` namespace on the machine, so a lab run
/// elsewhere failed them. A namespace made elsewhere while a run is in flight (here by
/// the run's sandbox setup, in the machine's /run/netns) is not the run's.
#[test]
fn a_lab_namespace_made_elsewhere_during_a_run_is_not_counted_as_the_runs() {
    if !root_or_skip("a_lab_namespace_made_elsewhere_during_a_run_is_not_counted_as_the_runs") {
        return;
    }
    let _lock = lab_lock();
    let elsewhere = format!("ipl-elsewhere-{}", std::process::id());
    let setup = format!(
        "nsenter --mount=/proc/{}/ns/mnt ip netns add {elsewhere}",
        std::process::id()
    );
    let run = own::Sandbox::default().setup(&setup).run(&[
        "run",
        "--backend",
        "plain",
        "-6",
        "--bytes",
        "1MB",
        "--no-progress",
    ]);
    let made = lab_namespaces().contains(&elsewhere);
    let _ = std::process::Command::new("ip")
        .args(["netns", "delete", &elsewhere])
        .status();
    assert!(made, "the other namespace was not made: {}", text(&run.out));
    assert!(run.out.status.success(), "{}", text(&run.out));
    assert_eq!(run.namespaces_left, Vec::<String>::new());
}

/// Bug: a watcher polled a live run for what it set up, and a short run ended first. Held
/// at its iperf3 run (tests/common/hold.rs), a 1 MB run, which ends in milliseconds here,
/// shows its own namespace whole: the veth with the lab's IPv6 address and no IPv4 one.
#[test]
fn a_held_ipv6_run_shows_its_namespace_with_ipv6_addresses_only() {
    let test = "a_held_ipv6_run_shows_its_namespace_with_ipv6_addresses_only";
    if !root_or_skip(test) || !hold::iperf3_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let hold = hold::Hold::new();
    let mut run = hold
        .lab()
        .args(["run", "--backend", "plain", "-6", "--bytes", "1MB"])
        .args(["--with-iperf3", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ns = hold.wait(&mut run, std::time::Duration::from_secs(60));
    let records = state_records(run.id()).expect("the held run's state file");
    let addresses = |family: &str| {
        let out = std::process::Command::new("ip")
            .args([
                "-n",
                &ns,
                family,
                "-o",
                "addr",
                "show",
                "dev",
                "ipl-veth-a",
                "scope",
                "global",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (v6, v4) = (addresses("-6"), addresses("-4"));
    hold.release();
    let status = run.wait().unwrap();
    assert!(
        records_of(&records, "namespace")
            .iter()
            .any(|r| r["name"] == ns.as_str()),
        "{ns} is not the run's own: {records:?}"
    );
    assert!(v6.contains("2001:2::1/"), "{v6}");
    assert_eq!(v4, "", "an IPv4 address in an IPv6 run's namespace");
    assert!(status.success(), "{status}");
}
