//! Two hosts, played by two network namespaces on this machine, each running its own
//! ipsec-lab process: `serve` in namespace b, `run --peer` in namespace a (issue 7).
//!
//! On the host kernel (no ESP) this covers plain and userspace both ways, the control
//! channel's refusals, a killed client, leftovers of a killed server, and the xfrm
//! backend's refusal (exit 3, nothing installed on either side). Needs root.

mod common;
mod remote_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use remote_common::{key_file, report, Lab, SideConnection, SERVER};

#[test]
fn psk_generate_writes_a_private_key_file() {
    let path = std::env::temp_dir().join(format!("ipl-psk-gen-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let status = common::lab()
        .args(["psk", "generate"])
        .stdout(file)
        .status()
        .unwrap();
    assert!(status.success());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(mode, 0o600);
    assert_eq!(text.trim().len(), 64);
    assert!(text.trim().chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn plain_and_userspace_carry_verified_data_both_ways_with_both_environments() {
    let Some(lab) = Lab::new("remote-both-ways") else {
        return;
    };
    let server = lab.serve();
    for backend in ["plain", "userspace"] {
        for reverse in [false, true] {
            let mut args = vec!["--backend", backend, "--bytes", "8MB", "--json", "-"];
            if reverse {
                args.push("--reverse");
            }
            let r = report(&lab.run(&args));
            let t = &r["transfers"][0];
            assert_eq!(t["verified"], true);
            assert_eq!(t["bytes"], 8_000_000);
            assert!(r["peer_environment"]["kernel_release"].is_string(), "{r}");
            assert!(r["environment"]["kernel_release"].is_string());
            let (sender, receiver) = if reverse {
                ("198.18.0.2", "198.18.0.1")
            } else {
                ("198.18.0.1", "198.18.0.2")
            };
            assert_eq!(
                r["backend_details"]["remote"]["sender"], sender,
                "{backend} {reverse}"
            );
            assert_eq!(r["backend_details"]["remote"]["receiver"], receiver);
            assert_eq!(r["plan"]["reverse"], reverse);
            if backend == "userspace" {
                // The payload really went through both tunnel ends.
                let d = &r["backend_details"]["userspace"];
                let (tx, rx) = if reverse {
                    ("server", "client")
                } else {
                    ("client", "server")
                };
                assert!(
                    d[tx]["end"]["sent"]["bytes"].as_u64().unwrap() >= 8_000_000,
                    "{d}"
                );
                assert!(
                    d[rx]["end"]["delivered"]["bytes"].as_u64().unwrap() >= 8_000_000,
                    "{d}"
                );
            }
            lab.nothing_installed().unwrap();
        }
    }
    assert_eq!(
        server.log().matches("run finished").count(),
        4,
        "{}",
        server.log()
    );
}

#[test]
fn wrong_or_exposed_keys_are_refused_and_nothing_is_installed() {
    let Some(lab) = Lab::new("remote-wrong-key") else {
        return;
    };
    let server = lab.serve();
    let other = key_file(&format!("other-{}", std::process::id()), 0o600);
    let out = lab
        .client(&other, &["--backend", "userspace", "--bytes", "1MB"])
        .output()
        .unwrap();
    std::fs::remove_file(&other).unwrap();
    assert!(!out.status.success());
    assert!(
        common::text(&out).contains("pre-shared keys differ"),
        "{}",
        common::text(&out)
    );
    server.wait_for("handshake failed", Duration::from_secs(5));
    lab.nothing_installed().unwrap();

    let exposed = key_file(&format!("exposed-{}", std::process::id()), 0o640);
    let out = lab.client(&exposed, &["--backend", "plain"]).output().unwrap();
    std::fs::remove_file(&exposed).unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(common::text(&out).contains("chmod 600"), "{}", common::text(&out));

    // Data ports below 1024 (system services such as SSH) are refused with --peer.
    let out = lab.run(&["--backend", "plain", "--port", "22"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out));

    // The server is still there for a proper client; the table names both hosts' conditions.
    let out = lab.run(&["--backend", "plain", "--bytes", "1MB"]);
    assert!(out.status.success(), "{}", common::text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("\nmeasured on ") && table.contains("peer measured on "),
        "{table}"
    );
}

#[test]
fn garbage_silence_and_giants_do_not_stop_the_server() {
    let Some(lab) = Lab::new("remote-hostile") else {
        return;
    };
    let server = lab.serve();
    let control: SocketAddr = format!("{SERVER}:{}", model::DEFAULT_PEER_PORT).parse().unwrap();
    let connect = move || TcpStream::connect_timeout(&control, Duration::from_secs(5)).unwrap();
    // Sockets are made inside namespace a; they stay there whichever thread uses them.
    let mut garbage = lab.topo().a.run(connect).unwrap();
    let mut seed = 0x1a5u32;
    let junk: Vec<u8> = (0..4096)
        .map(|_| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as u8
        })
        .collect();
    let _ = garbage.write_all(&junk);
    let silent = lab.topo().a.run(connect).unwrap();
    let mut giant = lab.topo().a.run(connect).unwrap();
    giant.write_all(&(64u32 << 20).to_be_bytes()).unwrap();
    let mut half = lab.topo().a.run(connect).unwrap();
    half.write_all(&[0, 0, 0, 48, 1, 2, 3]).unwrap();

    // A proper run is served while the silent ones still hang on.
    let r = report(&lab.run(&["--backend", "plain", "--bytes", "2MB", "--json", "-"]));
    assert_eq!(r["transfers"][0]["verified"], true);
    server.wait_for("more than the limit", Duration::from_secs(5));
    // Silence ends in the handshake timeout (5 s), also for a half-sent handshake.
    server.wait_for("nothing came for 5 s", Duration::from_secs(10));
    let start = Instant::now();
    while server.log().matches("nothing came for 5 s").count() < 2 {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    // The garbage connection was closed by the server.
    let mut buf = [0u8; 16];
    garbage.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(matches!(garbage.read(&mut buf), Ok(0) | Err(_)));
    drop((silent, half));
    report(&lab.run(&["--backend", "plain", "--bytes", "2MB", "--json", "-"]));
    lab.nothing_installed().unwrap();
}

#[test]
fn a_killed_client_is_cleaned_up_and_a_second_client_hears_busy() {
    let Some(lab) = Lab::new("remote-kill-client") else {
        return;
    };
    let server = lab.serve();
    let mut side = SideConnection::open(&lab);
    assert!(side.works());
    let mut long = lab
        .client(&lab.psk, &["--backend", "userspace", "--bytes", "20GB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    server.wait_for("run: userspace", Duration::from_secs(10));
    let start = Instant::now();
    while !lab.ip('b', &["-o", "link"]).contains("ipl-tun-b") {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let busy = lab.run(&["--backend", "plain", "--bytes", "1MB"]);
    assert!(!busy.status.success());
    assert!(common::text(&busy).contains("busy"), "{}", common::text(&busy));
    assert!(side.works(), "the side connection stopped during the run");

    long.kill().unwrap();
    long.wait().unwrap();
    // The server notices the closed control connection and removes its tunnel end.
    server.wait_for("run failed", Duration::from_secs(15));
    let start = Instant::now();
    while lab.ip('b', &["-o", "link"]).contains("ipl-tun") {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "tunnel end left behind"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(side.works(), "the side connection stopped after the failed run");
    lab.nothing_installed().unwrap();
    report(&lab.run(&["--backend", "plain", "--bytes", "1MB", "--json", "-"]));
    let mut server = server;
    assert!(server.stop().success(), "{}", server.log());
    assert!(server.log().contains("stopping"), "{}", server.log());
}

#[test]
fn clients_outside_allow_are_turned_away() {
    let Some(lab) = Lab::new("remote-allow") else {
        return;
    };
    let server = lab.serve_with(&["--allow", "192.0.2.0/24", "--allow", "198.18.1.0/24"]);
    let out = lab.run(&["--backend", "plain", "--bytes", "1MB"]);
    assert!(!out.status.success());
    server.wait_for("not in --allow", Duration::from_secs(5));
    assert!(!server.log().contains("authenticated"), "{}", server.log());
    drop(server);
    let server = lab.serve_with(&["--allow", "198.18.0.1/32"]);
    report(&lab.run(&["--backend", "plain", "--bytes", "1MB", "--json", "-"]));
    assert!(server.log().contains("authenticated"), "{}", server.log());
}

#[test]
fn a_restarted_server_removes_the_labs_leftovers_only() {
    let Some(lab) = Lab::new("remote-leftovers") else {
        return;
    };
    let mut first = lab.serve();
    first.kill9();
    // What a server killed mid-run leaves: lab policies (reqid in the lab's range). Policies
    // install without ESP, so the host kernel can hold them; a foreign one must survive.
    let policy = |reqid: &str, port: &str| {
        let ok = Command::new("ip")
            .args(["-n", lab.topo().b.name(), "xfrm", "policy", "add"])
            .args([
                "src",
                "198.18.0.2",
                "dst",
                "198.18.0.1",
                "proto",
                "tcp",
                "dport",
                port,
            ])
            .args([
                "dir",
                "out",
                "tmpl",
                "src",
                "198.18.0.2",
                "dst",
                "198.18.0.1",
                "proto",
                "esp",
            ])
            .args(["reqid", reqid, "mode", "transport"])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    policy("0x1a5abc", "5201");
    policy("7", "6000");
    let second = lab.serve();
    assert!(
        second.log().contains("removed 0 SAs and 1 policies"),
        "{}",
        second.log()
    );
    let left = lab.ip('b', &["xfrm", "policy"]);
    assert!(
        left.contains("reqid 7 ") && !left.contains("0x001a5abc"),
        "{left}"
    );
    Command::new("ip")
        .args(["-n", lab.topo().b.name(), "xfrm", "policy", "flush"])
        .status()
        .unwrap();
    report(&lab.run(&["--backend", "plain", "--bytes", "1MB", "--json", "-"]));
}

#[test]
fn xfrm_between_hosts_without_esp_exits_3_and_installs_nothing() {
    let Some(lab) = Lab::new("remote-xfrm-no-esp") else {
        return;
    };
    let caps = lab.rt.block_on(xfrm::probe()).unwrap();
    if caps.esp {
        eprintln!(
            "skipped: this kernel has ESP; the refusal cannot be observed (tests/remote_vm.rs runs xfrm)"
        );
        return;
    }
    let server = lab.serve();
    let out = lab.run(&["--backend", "xfrm", "--bytes", "1MB"]);
    assert_eq!(out.status.code(), Some(3), "{}", common::text(&out));
    assert!(common::text(&out).contains("no ESP"), "{}", common::text(&out));
    lab.nothing_installed().unwrap();
    // Refused before the server was contacted.
    assert!(!server.log().contains("authenticated"), "{}", server.log());
}
