//! Bad input is refused with exit code 2, a message that says what to do, and nothing created.

mod common;

use common::*;

#[test]
fn bad_values_exit_2_and_create_nothing() {
    let _lock = lab_lock();
    let before = lab_namespaces();
    for (args, hint) in [
        (&["run", "--key-bits", "100"][..], "128, 192 or 256"),
        (&["run", "--bytes", "abc"][..], "100MB"),
        (&["run", "--hmac", "md5"][..], "none or sha256"),
        (
            &[
                "run",
                "--backend",
                "userspace",
                "--cipher",
                "aes-256-gcm",
                "--key-bits",
                "128",
            ][..],
            "not both",
        ),
        (&["run", "--repeat", "0"][..], "1 to 1000"),
        (&["run", "--parallel", "0"][..], "1 to 128"),
    ] {
        let out = run_lab(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(hint), "{args:?}: {}", text(&out));
    }
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
}

#[test]
fn without_net_admin_nothing_is_created_and_exit_is_3() {
    if !nix::unistd::geteuid().is_root() {
        // Already unprivileged: the real situation under test.
        let out = run_lab(&["run", "--backend", "plain", "--bytes", "1MB"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        return;
    }
    // As root, drop every capability for the child with setpriv (util-linux).
    if std::process::Command::new("setpriv")
        .arg("--help")
        .output()
        .is_err()
    {
        eprintln!("skipped without_net_admin_nothing_is_created_and_exit_is_3: setpriv not installed");
        return;
    }
    let _lock = lab_lock();
    let before = lab_namespaces();
    let out = std::process::Command::new("setpriv")
        .args([
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(env!("CARGO_BIN_EXE_ipsec-lab"))
        .args(["run", "--backend", "plain", "--bytes", "1MB"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("needs CAP_NET_ADMIN"), "{}", text(&out));
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
}
