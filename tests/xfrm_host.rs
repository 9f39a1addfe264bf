//! `--backend xfrm` on the host kernel, which must do what this kernel's ESP allows (asked
//! of iproute2 in a throwaway namespace, never of the lab's own probe): without ESP (the
//! lab's build machines) the run refuses before creating anything, with exit code 3 and a
//! message naming the ways out; with ESP it moves a verified payload through its two SAs
//! and leaves nothing. Needs root, and strace where there is no ESP; under CI=true a
//! missing one fails the test.

mod common;

use common::own::{kernel_takes_esp_sa, Sandbox};
use common::*;

#[test]
fn xfrm_on_the_host_kernel_runs_with_esp_and_exits_3_without() {
    let test = "xfrm_on_the_host_kernel_runs_with_esp_and_exits_3_without";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    if kernel_takes_esp_sa() {
        runs_verified_through_two_sas();
    } else {
        refuses_with_exit_3_before_creating_anything(test);
    }
}

/// A kernel with ESP: the run goes through, both SAs carried it, nothing is left.
fn runs_verified_through_two_sas() {
    let run = Sandbox::default().run(&[
        "run",
        "--backend",
        "xfrm",
        "--key-bits",
        "256",
        "--hmac",
        "sha256",
        "--bytes",
        "3MB",
        "--no-progress",
        "--json",
        "-",
    ]);
    let out = &run.out;
    assert_eq!(
        out.status.code(),
        Some(0),
        "this kernel takes ESP SAs: {}",
        text(out)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    assert_eq!(report["transfers"][0]["verified"], true, "{report}");
    assert_eq!(report["transfers"][0]["bytes"], 3_000_000, "{report}");
    let sas = report["backend_details"]["xfrm"]["sas"]
        .as_array()
        .unwrap_or_else(|| panic!("no SA counters: {report}"));
    assert_eq!(sas.len(), 2, "{report}");
    // a->b carried the payload, b->a the ACKs.
    assert!(sas[0]["bytes"].as_u64().unwrap() > 3_000_000, "{report}");
    assert!(sas[1]["packets"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(run.namespaces_left, Vec::<String>::new());
    assert_eq!(run.links_left, Vec::<String>::new());
    assert_eq!(run.xfrm_left.trim(), "", "SAs or policies left");
}

/// A kernel without ESP: exit 3 with the ways out, and no namespace was ever made (checked
/// on this run's own processes: a named namespace is a bind mount under /run/netns).
fn refuses_with_exit_3_before_creating_anything(test: &str) {
    if std::process::Command::new("strace").arg("-V").output().is_err() {
        testcap::skip(
            test,
            "needs strace to watch for namespace creation (apt-get install strace)",
        );
        return;
    }
    let dir = private_dir("ipl-xfrm-host-");
    let trace = dir.path().join("strace");
    let mut strace = vec![
        std::ffi::OsString::from("strace"),
        "-f".into(),
        "-qq".into(),
        "-e".into(),
        "trace=mount".into(),
        "-o".into(),
    ];
    strace.push(trace.clone().into());
    let run = Sandbox::default().wrapper(&strace).run(&[
        "run",
        "--backend",
        "xfrm",
        "--key-bits",
        "256",
        "--hmac",
        "sha256",
        "--bytes",
        "1MB",
    ]);
    let stderr = String::from_utf8_lossy(&run.out.stderr);
    assert_eq!(run.out.status.code(), Some(3), "stderr: {stderr}");
    assert!(
        stderr.contains(
            "this kernel has no ESP support (CONFIG_INET_ESP); add --vm auto to run the kernel backend \
             where one has it"
        ),
        "{stderr}"
    );
    let mounts = std::fs::read_to_string(&trace).expect("strace wrote its trace");
    assert!(
        !mounts.contains("/run/netns"),
        "a namespace was created: {mounts}"
    );
    assert_eq!(run.namespaces_left, Vec::<String>::new());
    assert_eq!(run.xfrm_left.trim(), "", "SAs or policies left");
}
