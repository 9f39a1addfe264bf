//! WireGuard on this host: wireguard-go (root, TUN, the wireguard-go binary; skipped with
//! the reason otherwise) and boringtun (root, TUN) end to end, a wrong peer key failing
//! the run, the kernel backend refused with exit 3 naming --vm
//! where this kernel has no WireGuard, bad suites refused with exit 2 before anything is
//! made, and the lab's own tunnel carrying the same cipher (chacha20-poly1305). The kernel
//! backend's run is in tests/vm/wireguard.rs.

mod common;

use common::wireguard::wireguard_go_or_skip;
use common::*;

/// UAPI sockets of this test process's own lab devices (`ipl-wg{PID}-*`, as the lab names
/// them) in wireguard-go's socket directory: never another run's on the machine.
fn own_sockets() -> Vec<String> {
    let prefix = format!("ipl-wg{}-", std::process::id() % 10_000_000);
    std::fs::read_dir("/var/run/wireguard")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// A run's own socket directory: a tmpfs on /run/wireguard (where /var/run/wireguard
/// leads) that only its sandbox sees, and what is in it after the run.
const OWN_SOCKET_DIR: &str =
    "mkdir -p /run/wireguard && mount -t tmpfs -o mode=0700 ipl-own-wg /run/wireguard";
const SOCKETS_LEFT: &str = "ls -A /var/run/wireguard";

#[test]
fn wireguard_go_verified_with_handshake_counters_and_nothing_left() {
    let test = "wireguard_go_verified_with_handshake_counters_and_nothing_left";
    if !wireguard_go_or_skip(test) {
        return;
    }
    let d = userspace_wireguard_run("wireguard-go", "wireguard-go");
    // Which binary ran, and what it says it is (issue 25 item 9): the lab's Debian 13
    // build where lab/wireguard-go.sh installed it, else the PATH's with a note.
    let program = &d["program"];
    assert!(
        program["version"]
            .as_str()
            .unwrap()
            .starts_with("wireguard-go v0.0."),
        "{d}"
    );
    let lab_build = "/var/lib/ipsec-lab/wireguard-go/wireguard-go";
    if std::path::Path::new(lab_build).is_file() {
        assert_eq!(program["path"], lab_build, "{d}");
        let package = program["package"].as_str().unwrap();
        assert_eq!(d["implementation"], format!("wireguard-go {package}"), "{d}");
        assert!(program.get("note").is_none(), "{d}");
    } else {
        let note = program["note"].as_str().unwrap();
        assert!(note.contains("lab/wireguard-go.sh"), "{d}");
    }
}

#[test]
fn boringtun_verified_with_handshake_counters_thread_cpu_and_nothing_left() {
    let test = "boringtun_verified_with_handshake_counters_thread_cpu_and_nothing_left";
    if !root_or_skip(test) {
        return;
    }
    let d = userspace_wireguard_run("boringtun", "boringtun 0.7");
    assert!(d.get("program").is_none(), "{d}");
}

/// boringtun's device threads are this process's, named after their end: each interval
/// carries their CPU, as it does the userspace tunnel's threads'.
#[test]
fn boringtun_intervals_carry_its_threads_cpu() {
    let test = "boringtun_intervals_carry_its_threads_cpu";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let run = own::Sandbox::default().setup(OWN_SOCKET_DIR).run(&[
        "run",
        "--backend",
        "boringtun",
        "--bytes",
        "20MB",
        "--interval",
        "0.1",
        "--json",
        "-",
        "--no-progress",
    ]);
    let out = &run.out;
    assert!(out.status.success(), "{}", text(out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    let last = report["modes"]["intervals"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    for end in ["ipl-boringtun-a", "ipl-boringtun-b"] {
        assert!(last["tunnel_cpu"][end].as_f64().is_some(), "{end}: {last}");
    }
}

/// A verified 20 MB run of `backend` with its handshake, counters and tunnel CPU reported,
/// and no namespace, link or UAPI socket left. Returns the backend's evidence.
fn userspace_wireguard_run(backend: &str, implementation: &str) -> serde_json::Value {
    let _lock = lab_lock();
    // In namespaces and a socket directory of its own: what is counted afterwards is this
    // run's alone.
    let began = std::time::Instant::now();
    let run = own::Sandbox::default()
        .setup(OWN_SOCKET_DIR)
        .after(SOCKETS_LEFT)
        .run(&[
            "run",
            "--backend",
            backend,
            "--bytes",
            "20MB",
            "--json",
            "-",
            "--no-progress",
        ]);
    let out = &run.out;
    assert!(out.status.success(), "{}", text(out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(report["plan"]["backend"], backend);
    assert_eq!(report["plan"]["suite"], "chacha20-poly1305");
    assert_eq!(report["transfers"][0]["verified"], true);
    assert_first_packet(&report, began.elapsed());
    let d = &report["backend_details"][backend];
    assert!(
        d["implementation"].as_str().unwrap().starts_with(implementation),
        "{d}"
    );
    assert!(d["handshake_s"].as_f64().unwrap() > 0.0, "{d}");
    // The payload crossed a -> b: a's peer saw at least that much sent, b's received.
    let (a, b) = (&d["ends"]["a"], &d["ends"]["b"]);
    assert!(a["tx_bytes"].as_u64().unwrap() >= 20_000_000, "{d}");
    assert!(b["rx_bytes"].as_u64().unwrap() >= 20_000_000, "{d}");
    // Clock ticks (10 ms): over both ends a 20 MB transfer costs some.
    let cpu_s: f64 = [a, b]
        .iter()
        .map(|e| e["cpu"]["user_s"].as_f64().unwrap() + e["cpu"]["system_s"].as_f64().unwrap())
        .sum();
    assert!(cpu_s > 0.0, "{d}");
    let age = a["last_handshake_age_s"].as_f64().unwrap();
    assert!((0.0..60.0).contains(&age), "handshake age {age} s: {d}");
    assert!(report["notes"].to_string().contains("handshake in"));
    assert_eq!(run.namespaces_left, Vec::<String>::new());
    assert_eq!(run.links_left, Vec::<String>::new());
    assert_eq!(run.after, "", "a UAPI socket was left");
    d.clone()
}

#[test]
fn userspace_tunnel_carries_chacha20_poly1305() {
    let test = "userspace_tunnel_carries_chacha20_poly1305";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let out = own::run_lab_leaving_nothing(&[
        "run",
        "--backend",
        "userspace",
        "--cipher",
        "chacha20-poly1305",
        "--bytes",
        "3MB",
        "--json",
        "-",
        "--no-progress",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(report["plan"]["suite"], "chacha20-poly1305");
    assert_eq!(report["transfers"][0]["verified"], true);
    let d = &report["backend_details"]["userspace"];
    assert_eq!(d["b"]["drops"]["bad_mac"], 0, "{d}");
    assert!(d["b"]["delivered"]["bytes"].as_u64().unwrap() >= 3_000_000, "{d}");
}

#[test]
fn kernel_wireguard_without_the_module_is_refused_naming_vm() {
    let test = "kernel_wireguard_without_the_module_is_refused_naming_vm";
    if !root_or_skip(test) {
        return;
    }
    if std::path::Path::new("/sys/module/wireguard").exists() {
        testcap::skip(
            test,
            "this kernel has WireGuard; tests/vm/wireguard.rs runs the backend",
        );
        return;
    }
    let _lock = lab_lock();
    let out =
        own::run_lab_leaving_nothing(&["run", "--backend", "wireguard", "--bytes", "2MB", "--no-progress"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("--vm"), "{}", text(&out));
}

#[test]
fn suites_wireguard_cannot_carry_are_usage_errors() {
    for args in [
        &["run", "--backend", "wireguard", "--cipher", "aes-256-gcm"][..],
        &["run", "--backend", "wireguard-go", "--key-bits", "128"],
        &["run", "--backend", "wireguard-go", "--hmac", "sha256"],
    ] {
        let out = run_lab(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            text(&out).contains("chacha20-poly1305"),
            "{args:?}: {}",
            text(&out)
        );
    }
    for backend in ["xfrm", "openvpn"] {
        let out = run_lab(&["run", "--backend", backend, "--cipher", "chacha20-poly1305"]);
        assert_eq!(out.status.code(), Some(2), "{backend}: {}", text(&out));
    }
    let out = run_lab(&["run", "--backend", "wireguard-go", "--peer", "198.18.0.2"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("between two hosts"), "{}", text(&out));
}

/// End b given a peer key that is not a's: the run fails (exit 1) and leaves nothing.
#[test]
fn a_wrong_peer_key_fails_the_run_and_leaves_nothing() {
    let test = "a_wrong_peer_key_fails_the_run_and_leaves_nothing";
    if !wireguard_go_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let sockets_before = own_sockets();
    common::wireguard::wrong_peer_key_fails(model::Backend::WireguardGo);
    common::wireguard::wrong_peer_key_fails(model::Backend::Boringtun);
    assert_eq!(own_sockets(), sockets_before, "a UAPI socket was left");
}

/// In `matrix`, a WireGuard row's AES cells say why they did not run (never a zero), its
/// chacha20-poly1305 column is added and measured, and ESP rows get that column "not run".
#[test]
fn matrix_gives_wireguard_its_cipher_and_says_why_not_aes() {
    let test = "matrix_gives_wireguard_its_cipher_and_says_why_not_aes";
    if !wireguard_go_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let out = own::run_lab_leaving_nothing(&[
        "matrix",
        "--backends",
        "plain,xfrm,wireguard-go,boringtun",
        "--ciphers",
        "aes-128-cbc",
        "--bytes",
        "2MB",
        "--repeat",
        "1",
        "--json",
        "-",
        "--no-progress",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    let rows = report["rows"].as_array().unwrap();
    let row = |backend: &str| {
        rows.iter()
            .find(|r| r["key"]["backend"] == backend)
            .unwrap_or_else(|| panic!("no {backend} row: {report}"))
    };
    let wg = &row("wireguard-go")["cells"];
    assert_eq!(wg.as_array().unwrap().len(), 2, "{wg}");
    assert_eq!(wg[0]["suite"], "aes-128-cbc");
    assert_eq!(wg[0]["status"], "not_run", "{wg}");
    assert!(wg[0]["reason"].as_str().unwrap().contains("one cipher"), "{wg}");
    assert_eq!(wg[1]["suite"], "chacha20-poly1305");
    assert_eq!(wg[1]["status"], "measured", "{wg}");
    assert!(wg[1]["mb_per_s"]["median"].as_f64().unwrap() > 0.0, "{wg}");
    assert_eq!(row("boringtun")["cells"][1]["status"], "measured");
    let xfrm = &row("xfrm")["cells"];
    assert_eq!(xfrm[1]["status"], "not_run", "{xfrm}");
}

/// SIGKILL a run mid-transfer, then `clean`: the UAPI sockets (which a killed boringtun
/// leaves behind), any wireguard-go process and the namespaces the run recorded all go.
#[test]
fn sigkill_then_clean_removes_sockets_processes_and_namespaces() {
    let test = "sigkill_then_clean_removes_sockets_processes_and_namespaces";
    if !wireguard_go_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    for (backend, processes) in [("boringtun", 0), ("wireguard-go", 2)] {
        let mut child = lab()
            .args(["run", "--backend", backend, "--bytes", "50GB", "--no-progress"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let records = wait_for_records(child.id(), std::time::Duration::from_secs(30), |r| {
            records_of(r, "namespace").len() == 2
                && records_of(r, "path").len() == 2
                && records_of(r, "process").len() == processes
        })
        .unwrap_or_else(|| panic!("{backend}: the run recorded its namespaces, sockets and processes"));
        let field = |kind: &str, name: &str| -> Vec<String> {
            records_of(&records, kind)
                .iter()
                .map(|r| {
                    r[name]
                        .as_str()
                        .map_or_else(|| r[name].to_string(), str::to_string)
                })
                .collect()
        };
        let (namespaces, sockets, pids) = (
            field("namespace", "name"),
            field("path", "path"),
            field("process", "pid"),
        );
        assert!(
            sockets.iter().all(|s| s.starts_with("/var/run/wireguard/ipl-wg")),
            "{sockets:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        child.kill().unwrap();
        child.wait().unwrap();
        let out = run_lab(&["clean"]);
        assert!(out.status.success(), "{}", text(&out));
        for s in &sockets {
            assert!(
                !std::path::Path::new(s).exists(),
                "{backend}: {s} left after clean"
            );
        }
        for p in &pids {
            assert!(!running(p.parse().unwrap()), "{backend}: process {p} left");
        }
        let left: Vec<String> = lab_namespaces()
            .into_iter()
            .filter(|n| namespaces.contains(n))
            .collect();
        assert_eq!(left, Vec::<String>::new(), "{backend}");
    }
}
