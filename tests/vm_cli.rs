//! `--vm` as a user drives it: bad kernel paths and temporary directories are refused
//! (exit 2) before anything is created or any VM boots, nothing in TMPDIR reaches vng as an
//! argument, and a real VM run keeps a redirected log and takes `--no-progress`.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// A `vng` that records its arguments (one per line) in `log` and does nothing else, first
/// in PATH: shows what the lab would have handed to the real one.
fn fake_vng(dir: &Path, log: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{}'; done\n",
        log.display()
    );
    let vng = bin.join("vng");
    std::fs::write(&vng, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&vng, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

#[test]
fn matrix_vm_with_a_missing_kernel_exits_2_before_anything_is_created() {
    let dir = private_dir("ipl-vm-cli-");
    let json = dir.path().join("m.json");
    let before = lab_namespaces();
    let out = run_lab(&[
        "matrix",
        "--vm",
        "/nonexistent/vmlinuz",
        "--bytes",
        "1MB",
        "--no-progress",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no such kernel image"), "{}", text(&out));
    assert!(!json.exists(), "nothing is written for a refused matrix");
    assert_eq!(new_lab_namespaces(&before), Vec::<String>::new());
}

#[test]
fn tmpdir_with_a_space_or_a_quote_is_refused_and_never_reaches_vng() {
    let dir = private_dir("ipl-vm-cli-");
    let log = dir.path().join("vng-args");
    let path = fake_vng(dir.path(), &log);
    for name in ["a b", "x' --rw 'y"] {
        let tmp = dir.path().join(name);
        std::fs::create_dir(&tmp).unwrap();
        for args in [
            &[
                "run",
                "--vm",
                "--backend",
                "xfrm",
                "--bytes",
                "1MB",
                "--no-progress",
            ][..],
            &[
                "matrix",
                "--vm",
                "--backends",
                "xfrm",
                "--bytes",
                "1MB",
                "--no-progress",
            ][..],
        ] {
            let out = lab()
                .args(args)
                .env("TMPDIR", &tmp)
                .env("PATH", &path)
                .output()
                .unwrap();
            // Refused as bad input (exit 2) and naming the fix; never 0 with a mangled VM.
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?} TMPDIR={tmp:?}: {}",
                text(&out)
            );
            assert!(text(&out).contains("TMPDIR"), "{}", text(&out));
        }
    }
    let handed = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !handed.lines().any(|a| a == "--rw" || a.contains(" --rw")),
        "vng was handed --rw:\n{handed}"
    );
}

#[test]
fn vm_run_keeps_a_redirected_log_and_takes_no_progress() {
    let test = "vm_run_keeps_a_redirected_log_and_takes_no_progress";
    if !vm_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = private_dir("ipl-vm-cli-");
    let log = dir.path().join("run.log");
    // What a user's `(echo BEFORE; ipsec-lab run --vm …) > run.log 2>&1` does.
    let status = Command::new("sh")
        .arg("-c")
        .arg(r#"(echo BEFORE; "$0" run --vm --backend xfrm --bytes 1MB --no-progress) > "$1" 2>&1"#)
        .arg(env!("CARGO_BIN_EXE_ipsec-lab"))
        .arg(&log)
        .status()
        .unwrap();
    let written = std::fs::read(&log).unwrap();
    let shown = String::from_utf8_lossy(&written);
    assert!(status.success(), "the --vm run failed:\n{shown}");
    assert!(
        written.starts_with(b"BEFORE\n"),
        "the log lost what came before the VM:\n{shown}"
    );
    assert!(!written.contains(&0), "NUL bytes in the log:\n{shown}");
    assert!(shown.contains("MB/s"), "the report is in the log:\n{shown}");
    assert!(!shown.contains("cannot be used multiple times"), "{shown}");
}

#[test]
fn lab_vm_script_refuses_an_outdir_vng_would_split() {
    let test = "lab_vm_script_refuses_an_outdir_vng_would_split";
    if !vm_or_skip(test) {
        return;
    }
    let dir = private_dir("ipl-vm-cli-");
    for name in ["a b", "x' --rw 'y"] {
        let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/vm/run.sh"))
            .arg("-o")
            .arg(dir.path().join(name))
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
        assert!(text(&out).contains("cannot pass on"), "{}", text(&out));
    }
}
