//! `make test`, the command CI runs (.ci/run), with a stand-in cargo that records what it
//! was asked and fails where told: lint and the tests run even where one fails, and the
//! target fails if either did. (Bug: a failing lint stopped the tests from running, and
//! without --no-fail-fast one failing test binary hid every one after it.) `setup-test` is
//! left out (`make -o`): it installs packages.

use std::path::Path;
use std::process::Command;

/// Runs `make -o setup-test test` with a cargo that fails the subcommands in `failing`;
/// returns make's exit code and the cargo command lines it saw.
fn make_test(failing: &[&str]) -> (Option<i32>, Vec<String>) {
    let dir = tempfile::Builder::new()
        .prefix("ipl-make-test-")
        .tempdir()
        .unwrap();
    let log = dir.path().join("cargo.log");
    let cargo = dir.path().join("cargo");
    let script = format!(
        "#!/bin/sh\necho \"$*\" >>'{}'\ncase \" {} \" in *\" $1 \"*) exit 101 ;; esac\n",
        log.display(),
        failing.join(" ")
    );
    std::fs::write(&cargo, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = Command::new("make")
        .args(["--no-print-directory", "-o", "setup-test", "test"])
        .arg(format!("CARGO={}", cargo.display()))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        // Not the jobserver of a make this test may itself run under.
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .output()
        .expect("make runs (apt-get install make)");
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    (out.status.code(), calls)
}

/// lab/run-tests.py builds every test binary (then runs each it was told of, none from this
/// cargo) and runs the doc tests; that every binary runs whatever another's result is
/// lab/test_run_tests.py's to check.
fn ran_every_test_binary(calls: &[String]) -> bool {
    calls.iter().any(|c| c.starts_with("test --workspace --no-run "))
}

#[test]
fn make_test_runs_the_tests_when_lint_fails_and_still_fails() {
    assert!(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/Makefile")).is_file());
    let (code, calls) = make_test(&["clippy"]);
    assert!(
        ran_every_test_binary(&calls),
        "a failing lint kept the tests from running: {calls:?}"
    );
    assert_ne!(code, Some(0), "lint failed, yet make test passed: {calls:?}");
}

#[test]
fn make_test_fails_when_a_test_fails_and_passes_when_all_pass() {
    let (code, calls) = make_test(&["test"]);
    assert!(calls.iter().any(|c| c.starts_with("clippy ")), "{calls:?}");
    assert!(ran_every_test_binary(&calls), "{calls:?}");
    assert_ne!(code, Some(0), "a test failed, yet make test passed: {calls:?}");

    let (code, calls) = make_test(&[]);
    assert!(ran_every_test_binary(&calls), "{calls:?}");
    assert_eq!(code, Some(0), "{calls:?}");
}

/// The aarch64 target is type-checked (lab/arm64-check.sh), and a failure there fails
/// `make test` without keeping the tests from running.
#[test]
fn make_test_type_checks_the_aarch64_target() {
    let (code, calls) = make_test(&["check"]);
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("check --locked --target aarch64-unknown-linux-gnu")),
        "{calls:?}"
    );
    assert!(ran_every_test_binary(&calls), "{calls:?}");
    assert_ne!(
        code,
        Some(0),
        "the aarch64 check failed, yet make test passed: {calls:?}"
    );
}
