//! `run --peer` on a client whose kernel has no ESP: refused before any peer is contacted,
//! with a way out that works between two hosts (not `--vm`, which `--peer` refuses).
//! Needs root; on a kernel with ESP the refusal cannot happen, and the test says so (the
//! choice of message is unit-tested in the lab crate either way).

mod common;

use common::*;

/// Regression (issue 25, item 6): the README's two-host line on a client without ESP
/// exited 3 with "use --vm ... or --backend userspace", and `--vm` then got "--peer and
/// --vm do not go together".
#[test]
fn peer_without_esp_points_at_what_works_between_hosts() {
    let test = "peer_without_esp_points_at_what_works_between_hosts";
    if !root_or_skip(test) {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if rt.block_on(xfrm::probe()).unwrap().esp {
        eprintln!("skipped {test}: this kernel has ESP, so the no-ESP refusal cannot be observed here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let psk = dir.path().join("psk");
    let key = run_lab(&["psk", "generate"]);
    assert!(key.status.success(), "{}", text(&key));
    std::fs::write(&psk, &key.stdout).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&psk, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Loopback, port 1: should the refusal not come first, nothing leaves this machine.
    let out = lab()
        .args([
            "run",
            "--peer",
            "127.0.0.1:1",
            "--key-bits",
            "256",
            "--hmac",
            "sha256",
        ])
        .arg("--psk-file")
        .arg(&psk)
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("no ESP support"), "{said}");
    assert!(said.contains("use --backend userspace"), "{said}");
    assert!(!said.contains("add --vm"), "{said}");
}
