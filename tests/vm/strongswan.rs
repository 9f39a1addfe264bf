//! The strongswan backend: refusals on this host, and in the guest for the rest
//! (tests/vm/main.rs boots it).
//!
//! Inside the guest: a CBC without HMAC, a CBC+HMAC and a GCM suite each carry a verified
//! 2 MB payload through the SAs charon negotiated, whose algorithms and key sizes (read
//! back over netlink) are the requested suite's and the same as the lab's xfrm backend
//! installs; a wrong PSK on one end fails with a clear error (exit 1) and leaves nothing;
//! a run killed with SIGKILL leaves its charons and directory to `ipsec-lab clean`, which
//! removes them; `matrix` measures a strongswan row. After each: no lab namespace, no
//! charon process, no run directory.
//! On the host: `--cipher none` and `--peer` (exit 2), no ESP (exit 3 naming `--vm`),
//! strongSwan missing (exit 3 with the install command) and `--per-cpu-sa` without a
//! strongSwan 6 (exit 3 naming lab/strongswan6.sh; with `--vm`, before the guest boots) are
//! refused with no directory made. (A kernel before 6.13 refusing it: tests/uml.rs.)
//! Needs root, strongSwan, vng and a kernel image in /boot; skips with the reason otherwise.

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::{lab, text};
use serde_json::Value;

const PAYLOAD: &str = "2MB";

/// charon processes now (by the kernel's name for them; only looked at, never signalled).
fn charon_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "charon-systemd")
        })
        .collect()
}

/// The strongswan backend's directories in the temporary directory.
fn run_dirs() -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("ipl-strongswan-"))
        })
        .collect()
}

fn assert_nothing_left(after: &str) {
    assert!(
        common::lab_namespaces().is_empty(),
        "{after}: namespaces left: {:?}",
        common::lab_namespaces()
    );
    assert!(
        charon_pids().is_empty(),
        "{after}: charon left: {:?}",
        charon_pids()
    );
    assert!(
        run_dirs().is_empty(),
        "{after}: directories left: {:?}",
        run_dirs()
    );
}

#[test]
fn bad_input_no_esp_and_no_strongswan_are_refused_before_anything_is_made() {
    let test = "bad_input_no_esp_and_no_strongswan_are_refused_before_anything_is_made";
    if !common::root_or_skip(test) || !common::strongswan_or_skip(test) {
        return;
    }
    let _lock = common::lab_lock();
    // Each in a sandbox of its own (namespaces, temporary directory): what is counted
    // after it is its own, whatever other runs on the machine make meanwhile.
    let refused = |setup: &str, args: &[&str], code: i32, says: &str| {
        let run = common::own::Sandbox::default().setup(setup).run(args);
        assert_eq!(run.out.status.code(), Some(code), "{args:?}: {}", text(&run.out));
        assert!(text(&run.out).contains(says), "{args:?}: {}", text(&run.out));
        assert_eq!(run.files_left, Vec::<String>::new(), "{args:?}");
        assert_eq!(run.namespaces_left, Vec::<String>::new(), "{args:?}");
    };
    let payload_run = ["run", "--backend", "strongswan", "--bytes", PAYLOAD];
    refused(
        "",
        &["run", "--backend", "strongswan", "--cipher", "none"],
        2,
        "cannot carry cipher none",
    );
    refused(
        "",
        &["run", "--backend", "strongswan", "--peer", "192.0.2.1"],
        2,
        "between two hosts",
    );
    // The no-ESP refusal on a kernel without ESP (asked of iproute2, not the lab); a
    // kernel with ESP runs strongSwan in the guest instead.
    if common::own::kernel_takes_esp_sa() {
        eprintln!("{test}: this kernel has ESP, so the no-ESP refusal cannot be shown here");
    } else {
        refused("", &payload_run, 3, "--vm");
    }
    // strongSwan missing: its daemon hidden behind /dev/null in the sandbox.
    refused(
        "mount --bind /dev/null /usr/sbin/charon-systemd",
        &payload_run,
        3,
        "apt-get install charon-systemd strongswan-swanctl",
    );
    // --per-cpu-sa with only the host's strongSwan 5.9: lab/strongswan6.sh's 6.x hidden by
    // an empty directory in the sandbox (where it was unpacked). With --vm the guest would
    // see the same files: refused before it boots.
    let hide_6 =
        "! [ -d /var/lib/ipsec-lab/strongswan ] || mount -t tmpfs ipl-hide /var/lib/ipsec-lab/strongswan";
    let per_cpu_run = [&payload_run[..], &["--per-cpu-sa", "-P", "2"]].concat();
    let needs_6 = "--per-cpu-sa with --backend strongswan needs strongSwan 6.0 or later";
    refused(hide_6, &per_cpu_run, 3, needs_6);
    refused(hide_6, &per_cpu_run, 3, "lab/strongswan6.sh");
    let started = std::time::Instant::now();
    refused(hide_6, &[&per_cpu_run[..], &["--vm", "uml"]].concat(), 3, needs_6);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a guest was booted before the refusal"
    );
}

/// One run: verified payload, SAs with `want` (name, key bits, ICV bits) in both directions,
/// the same as the lab's, counters that saw the payload.
fn run_suite(suite: &str, json: &std::path::Path, want: &[(&str, u64, Option<u64>)]) {
    let out = lab()
        .args([
            "run",
            "--backend",
            "strongswan",
            "--cipher",
            suite,
            "--bytes",
            PAYLOAD,
        ])
        .args(["--no-progress", "--json"])
        .arg(json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{suite}: exit {:?}: {}",
        out.status.code(),
        text(&out)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let d = &report["backend_details"]["strongswan"];
    // The daemon that negotiated answered on its own VICI socket.
    assert!(d["version"].as_str().unwrap().starts_with("strongSwan 5."), "{d}");
    let sas = d["sas"].as_array().unwrap();
    assert_eq!(sas.len(), 2, "{suite}: {d}");
    for sa in sas {
        let algorithms = sa["algorithms"].as_array().unwrap();
        assert_eq!(algorithms.len(), want.len(), "{suite}: {sa}");
        for (got, (name, key_bits, icv_bits)) in algorithms.iter().zip(want) {
            assert_eq!(got["name"], *name, "{suite}: {sa}");
            assert_eq!(got["key_bits"], *key_bits, "{suite}: {sa}");
            assert_eq!(got["icv_bits"].as_u64(), *icv_bits, "{suite}: {sa}");
        }
        assert_eq!(sa["mode"], "tunnel");
    }
    assert_eq!(d["differences"].as_array().unwrap().len(), 0, "{suite}: {d}");
    assert_eq!(d["lab_xfrm_installs"], sas[0]["algorithms"], "{suite}: {d}");
    assert!(sas[0]["direction"].as_str().unwrap().starts_with("a->b"));
    assert!(
        sas[0]["bytes"].as_u64().unwrap() >= 2_000_000 && sas[1]["packets"].as_u64().unwrap() > 0,
        "{suite}: counters {d}"
    );
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("the same as the lab's xfrm backend installs"),
        "{notes}"
    );
    eprintln!(
        "guest: {suite:<24} {:6.2} MB/s  {} ESP packets out  {}",
        report["mb_per_s"]["median"].as_f64().unwrap(),
        sas[0]["packets"],
        d["esp_proposal"]
    );
}

/// A wrong PSK on end b: its start (where it initiates) fails with a run failure that says
/// authentication failed; dropping what was made leaves nothing.
async fn wrong_psk() {
    use lab::backend::{strongswan, End, Hosts, RunSecrets, Side, Site};
    let plan = model::RunRequest {
        backend: model::Backend::Strongswan,
        cipher: Some("aes-128-gcm".parse().unwrap()),
        bytes: PAYLOAD.parse().unwrap(),
        ..Default::default()
    }
    .validate()
    .unwrap();
    let spec = netns::TopologySpec {
        run_id: netns::new_run_id(),
        mtu: plan.link().mtu,
        addressing: plan.link().addressing,
    };
    let topology = netns::Topology::create(&spec).await.unwrap();
    let ad = topology.addressing;
    let hosts = Hosts {
        a: ad.outer_a,
        b: ad.outer_b,
    };
    let secrets = RunSecrets::Strongswan(
        strongswan::Material::with_psks(&plan, &"11".repeat(32), &"22".repeat(32)).unwrap(),
    );
    let site = |side, namespace, link| Site {
        side,
        namespace,
        hosts,
        lab_link: Some(link),
    };
    let show = lab::backend::xfrm::ShowKeys(false);
    let a = End::start(
        &plan,
        &secrets,
        &site(Side::A, &topology.a, &topology.veth_a),
        show,
    )
    .await
    .unwrap();
    let b = End::start(
        &plan,
        &secrets,
        &site(Side::B, &topology.b, &topology.veth_b),
        show,
    )
    .await;
    let Err(e) = b else {
        panic!("a run with different PSKs came up")
    };
    let message = format!("{e:#}");
    assert_eq!(e.exit_code(), 1, "{message}");
    assert!(message.contains("AUTHENTICATION_FAILED"), "{message}");
    assert!(message.contains("charon.log"), "{message}");
    eprintln!("guest: wrong PSK: {}", message.lines().next().unwrap_or_default());
    drop(a);
    drop(secrets);
    topology.destroy().unwrap();
}

/// SIGKILL a run once both charons are recorded; `ipsec-lab clean` then leaves nothing.
/// The run is timed (`--time`, an hour): it lasts until killed however fast the machine
/// moves data, so the watcher never races its end.
fn killed_run_is_cleaned() {
    let mut child = lab()
        .args([
            "run",
            "--backend",
            "strongswan",
            "--cipher",
            "aes-256-gcm",
            "--time",
            "3600",
        ])
        .arg("--no-progress")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let records = common::wait_for_records(child.id(), Duration::from_secs(60), |r| {
        common::records_of(r, "process").len() == 2
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let records = records.expect("the run recorded its two charons");
    assert!(!common::records_of(&records, "path").is_empty(), "{records:?}");
    let cleaned = lab().arg("clean").output().unwrap();
    assert!(cleaned.status.success(), "{}", text(&cleaned));
    eprintln!("guest: clean after SIGKILL:\n{}", text(&cleaned));
    assert_nothing_left("clean after SIGKILL");
}

/// The sweep's strongswan row on a kernel with ESP: measured, served by a kernel driver.
fn matrix_row(json: &std::path::Path) {
    let out = lab()
        .args(["matrix", "--backends", "strongswan", "--ciphers", "aes-128-gcm"])
        .args(["--bytes", "1MB", "--repeat", "1", "--no-progress", "--json"])
        .arg(json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let row = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"]["backend"] == "strongswan")
        .unwrap_or_else(|| panic!("no strongswan row: {report}"))
        .clone();
    let cell = &row["cells"][0];
    assert_eq!(cell["status"], "measured", "{row}");
    // A figure: `"mb_per_s": null` (or a missing median) is no measurement.
    let median = cell["mb_per_s"]["median"].as_f64();
    assert!(median.is_some_and(|m| m.is_finite() && m > 0.0), "{row}");
    let served_by = cell["served_by"].as_str().unwrap_or_default();
    assert!(served_by.contains("rfc4106"), "served_by: {row}");
    eprintln!("guest: matrix strongswan row {}", cell);
}

#[test]
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn guest_checks() {
    if std::env::var_os(common::IN_VM).is_none() {
        eprintln!("skipped: guest_checks only runs inside the VM started by the in_vm_ tests of main.rs");
        return;
    }
    if !common::strongswan_or_skip("strongswan::guest_checks") {
        return;
    }
    let out = PathBuf::from(std::env::var("IPSEC_LAB_VM_OUT").unwrap());
    let hmac = ("hmac(sha256)", 256, Some(128));
    run_suite("aes-128-cbc", &out.join("cbc.json"), &[("cbc(aes)", 128, None)]);
    assert_nothing_left("aes-128-cbc");
    run_suite(
        "aes-256-cbc-hmac-sha256",
        &out.join("cbc-hmac.json"),
        &[("cbc(aes)", 256, None), hmac],
    );
    assert_nothing_left("aes-256-cbc-hmac-sha256");
    // The kernel counts GCM's 4-byte salt into the key.
    run_suite(
        "aes-128-gcm",
        &out.join("gcm.json"),
        &[("rfc4106(gcm(aes))", 160, Some(128))],
    );
    assert_nothing_left("aes-128-gcm");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(wrong_psk());
    assert_nothing_left("wrong PSK");

    matrix_row(&out.join("matrix.json"));
    assert_nothing_left("matrix");

    killed_run_is_cleaned();
}
