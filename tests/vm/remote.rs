//! The xfrm backend between two "hosts" (namespaces, each with its own ipsec-lab process)
//! on a stock kernel with ESP, checked in the guest (tests/vm/main.rs boots it).
//!
//! In the guest: verified 2 MB transfers both ways through ESP with the SA counters of
//! both ends showing the packets; while a run is on, the policies select only TCP on the
//! data port and a TCP connection on another port keeps working; kill -9 of the client
//! makes the server remove its SAs and policies; kill -9 of the server leaves them, and
//! its next start removes them; a rogue key holder's hello with port 65000 and 1000 streams
//! (which wrapped to ports 0..463 in release) is refused and installs no policy at all; UDP
//! trials and latency probes cross ESP too.
//! Needs root, vng and a kernel in /boot; skips otherwise.

use crate::{common, remote_common};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use remote_common::{good_request, hello, hostile, report, Lab, SideConnection};

fn wait_until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sa_packets(side: &serde_json::Value) -> Vec<u64> {
    side["sas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["packets"].as_u64().unwrap())
        .collect()
}

#[test]
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn guest_remote_xfrm() {
    let Some(lab) = Lab::new("remote-xfrm-vm") else {
        return;
    };
    let mut server = lab.serve();
    let mut side = SideConnection::open(&lab);
    assert!(side.works());

    for reverse in [false, true] {
        let mut args = vec!["--backend", "xfrm", "--bytes", "2MB", "--json", "-"];
        if reverse {
            args.push("--reverse");
        }
        let r = report(&lab.run(&args));
        assert_eq!(r["transfers"][0]["verified"], true);
        assert_eq!(r["plan"]["mode"], "transport");
        assert!(r["peer_environment"]["kernel_release"].is_string());
        let d = &r["backend_details"]["xfrm"];
        for end in ["client", "server"] {
            let packets = sa_packets(&d[end]);
            // Both SAs carried packets at both ends: data one way (1400 packets for 2 MB),
            // ACKs the other, as many as the kernel sends (7.x: about one in sixteen).
            assert!(
                packets.iter().all(|p| *p > 10) && packets.iter().any(|p| *p > 1000),
                "{end} {reverse}: {d}"
            );
        }
        lab.nothing_installed().unwrap();
    }

    // Issue 26: UDP datagrams and latency probes between the hosts go through ESP too (the
    // transport-mode policies select them): both SAs count them, the echoes included.
    let r = report(&lab.run(&[
        "--backend",
        "xfrm",
        "--udp",
        "--packet-size",
        "512",
        "--rate",
        "2kpps",
        "--time",
        "1",
        "--latency",
        "--json",
        "-",
    ]));
    let t = &r["udp"]["trials"][0];
    let (sent, received) = (t["sent"].as_u64().unwrap(), t["received"].as_u64().unwrap());
    assert!(
        sent > 1500 && received >= sent * 9 / 10 && t["corrupted"] == 0,
        "{t}"
    );
    let idle = &r["latency"]["phases"][0];
    assert!(idle["probes_received"].as_u64().unwrap() > 100, "{idle}");
    let d = &r["backend_details"]["xfrm"];
    for end in ["client", "server"] {
        let packets = sa_packets(&d[end]);
        assert!(
            packets.iter().all(|p| *p > 500) && packets.iter().any(|p| *p > received),
            "{end}: {d}"
        );
    }
    lab.nothing_installed().unwrap();

    // Issue 10: a port-wrapping hello from a rogue key holder, xfrm with real keys in the
    // lab's ranges. Refused as usage; no policy (certainly none below port 1024) appears.
    for (port, streams) in [(65000, 1000), (65535, 2), (65000, 16)] {
        let mut request = good_request();
        request["backend"] = "xfrm".into();
        request["suite"] = "aes-256-cbc-hmac-sha256".into();
        request["data_port"] = port.into();
        request["streams"] = streams.into();
        // The server takes one run at a time: the previous hello's handler may still be
        // letting go of it (Busy is its word for that), so ask again until it has.
        let answer = (0..50)
            .map(|_| hostile(&lab, &hello(request.clone())).unwrap())
            .find(|m| {
                let busy = matches!(m, control::Message::Busy);
                if busy {
                    std::thread::sleep(Duration::from_millis(100));
                }
                !busy
            });
        match answer.expect("the server stays busy") {
            control::Message::Refused {
                kind: control::RefusalKind::Usage,
                reason,
            } => assert!(
                ["--max-streams", "--data-ports", "runs past port 65535"]
                    .iter()
                    .any(|says| reason.contains(says)),
                "{reason}"
            ),
            other => panic!("port {port} x{streams}: {other:?}"),
        }
        let policies = lab.ip('b', &["xfrm", "policy"]);
        assert!(policies.trim().is_empty(), "port {port} x{streams}: {policies}");
    }
    lab.nothing_installed().unwrap();

    // A data port some service of the receiving host listens on is refused before any SA
    // or policy exists: the policies would capture that service's traffic.
    let busy_port = lab
        .topo()
        .b
        .run(|| std::net::TcpListener::bind("198.18.0.2:5250").unwrap())
        .unwrap();
    let out = lab.run(&["--backend", "xfrm", "--bytes", "1MB", "--port", "5250"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out));
    assert!(
        common::text(&out).contains("in use on the receiving host"),
        "{}",
        common::text(&out)
    );
    lab.nothing_installed().unwrap();
    drop(busy_port);

    // A long run, killed -9 at the client while its SAs and policies are in place: 10 GB
    // (the server's limit) outlasts the checks below at any machine's speed.
    let mut client = lab
        .client(&lab.psk, &["--backend", "xfrm", "--bytes", "10GB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "the client's SAs", || {
        lab.ip('a', &["xfrm", "state"]).contains("proto esp")
    });
    std::thread::sleep(Duration::from_secs(1));
    let policies = lab.ip('b', &["xfrm", "policy"]);
    assert!(
        policies.contains("proto tcp") && policies.contains("dport 5201"),
        "{policies}"
    );
    assert!(
        side.works(),
        "a TCP connection on another port stopped during the run"
    );
    client.kill().unwrap();
    client.wait().unwrap();
    server.wait_for("run failed", Duration::from_secs(40));
    wait_until(Duration::from_secs(10), "the server's end to go", || {
        lab.ip('b', &["xfrm", "state"]).trim().is_empty()
            && lab.ip('b', &["xfrm", "policy"]).trim().is_empty()
    });
    // The killed client could not clean up its own side; a TCP connection on another port
    // still works with its policies in place, then they are flushed.
    assert!(
        side.works(),
        "a TCP connection on another port stopped after the failed run"
    );
    for what in ["state", "policy"] {
        Command::new("ip")
            .args(["-n", lab.topo().a.name(), "xfrm", what, "flush"])
            .status()
            .unwrap();
    }

    // kill -9 of the server mid-run leaves its SAs; its next start removes them.
    let mut client = lab
        .client(&lab.psk, &["--backend", "xfrm", "--bytes", "10GB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "the server's SAs", || {
        lab.ip('b', &["xfrm", "state"]).contains("proto esp")
            && lab.ip('a', &["xfrm", "state"]).contains("proto esp")
    });
    server.kill9();
    let status = client.wait().unwrap();
    assert!(!status.success());
    // The client removed its own end when the run failed.
    lab.ip('a', &["xfrm", "state"])
        .trim()
        .is_empty()
        .then_some(())
        .expect("client left SAs");
    assert!(lab.ip('b', &["xfrm", "state"]).contains("proto esp"));
    let server = lab.serve();
    // Only what the killed server recorded: its two SAs and two policies.
    let log = server.log();
    assert!(
        log.matches("removed SA ").count() == 2 && log.matches("removed policy ").count() == 2,
        "{log}"
    );
    lab.nothing_installed().unwrap();
    report(&lab.run(&["--backend", "xfrm", "--bytes", "1MB", "--json", "-"]));
    assert!(side.works());
}
