//! `--vm` as a user drives it: bad kernel paths and temporary directories are refused
//! (exit 2) before anything is created or any VM boots, nothing in TMPDIR reaches vng as an
//! argument, the guest gets the host's validated plan as a file, and a real VM run keeps a
//! redirected log and takes `--no-progress`.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

#[test]
fn matrix_vm_with_a_missing_kernel_exits_2_before_anything_is_created() {
    let dir = private_dir("ipl-vm-cli-");
    let json = dir.path().join("m.json");
    let out = own::run_lab_leaving_nothing(&[
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
}

#[test]
fn tmpdir_with_a_space_or_a_quote_is_refused_and_never_reaches_vng() {
    let dir = private_dir("ipl-vm-cli-");
    let log = dir.path().join("vng-args");
    // Records its arguments, one per line: what the lab would have handed to the real one.
    let path = fake_vng(
        dir.path(),
        &format!(
            "for a in \"$@\"; do printf '%s\\n' \"$a\" >> '{}'; done",
            log.display()
        ),
    );
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

/// The guest gets the host's validated plan as a file in the directory they share, not the
/// host's arguments again: a fake `vng` runs the guest's command on this machine, and the
/// report is the host's plan (its seed and payload) run in the "guest's" own namespaces.
#[test]
fn a_vm_run_hands_the_guest_its_validated_plan_as_a_file() {
    let test = "a_vm_run_hands_the_guest_its_validated_plan_as_a_file";
    if !root_or_skip(test) {
        return;
    }
    let _lock = lab_lock();
    let dir = private_dir("ipl-vm-cli-");
    let script = dir.path().join("guest-script");
    let path = fake_vng(
        dir.path(),
        &format!(
            "{VNG_VERSION}\n\
             while [ $# -gt 0 ]; do [ \"$1\" = --exec ] && {{ script=\"$2\"; shift; }}; shift; done\n\
             printf '%s' \"$script\" > '{}'\nsh -c \"$script\"",
            script.display()
        ),
    );
    // The fake vng never boots it: any file passes for the kernel.
    let kernel = dir.path().join("vmlinuz-fake");
    std::fs::write(&kernel, "").unwrap();
    let json = dir.path().join("r.json");
    let out = lab()
        .args(["run", "--vm"])
        .arg(&kernel)
        .args([
            "--backend",
            "plain",
            "--bytes",
            "1MB",
            "--seed",
            "0x2a",
            "--no-progress",
            "--json",
        ])
        .arg(&json)
        .env("PATH", &path)
        .env("IPSEC_LAB_VM_ACCEL", "tcg")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let guest = std::fs::read_to_string(&script).unwrap();
    assert!(guest.contains(" 'run' '--plan-file' '"), "{guest}");
    for host_only in ["--seed", "--vm", "--backend", "--bytes"] {
        assert!(
            !guest.contains(host_only),
            "{host_only} reached the guest: {guest}"
        );
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let plan = &report["plan"];
    assert_eq!(
        (plan["seed"].as_u64(), plan["bytes"].as_u64()),
        (Some(42), Some(1_000_000)),
        "{plan}"
    );
    assert_eq!(plan["backend"], "plain", "{plan}");
    // Placed in the guest's own namespaces: no VM inside the VM.
    assert!(plan["vm"].is_null(), "{plan}");
    assert!(
        report["notes"].to_string().contains("ran in a VM"),
        "{}",
        report["notes"]
    );
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

/// A `vng` that starts a background `sleep` standing in for qemu (a background job of a
/// script ignores SIGINT, as qemu outlived vng's), writes its pid to `pidfile`, then runs
/// `rest`: `sleep 1000` for a guest that hangs, `exit 1` for one that gives nothing back.
fn fake_vng_with_qemu(dir: &Path, pidfile: &Path, rest: &str) -> String {
    // A copy of sleep under qemu's name: `clean` stops only executables the lab starts.
    let qemu = format!(
        "cp \"$(command -v sleep)\" '{d}/qemu-system-x86_64'\n'{d}/qemu-system-x86_64' 1000 &\necho $! > '{}'",
        pidfile.display(),
        d = dir.display()
    );
    fake_vng(dir, &format!("{VNG_VERSION}\n{qemu}\n{rest}"))
}

/// One test's fake VM: the lab's lock held, and a fake `vng` (see [`fake_vng_with_qemu`])
/// first in `path`, its "qemu" writing its pid to `pidfile`.
struct FakeVm {
    _lock: std::sync::MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    pidfile: std::path::PathBuf,
    path: String,
}

impl FakeVm {
    /// None (the test skips, saying why) where the VM path is missing.
    fn new(test: &str, rest: &str) -> Option<FakeVm> {
        if !vm_or_skip(test) {
            return None;
        }
        let lock = lab_lock();
        let dir = private_dir("ipl-vm-cli-");
        let pidfile = dir.path().join("qemu.pid");
        let path = fake_vng_with_qemu(dir.path(), &pidfile, rest);
        Some(FakeVm {
            _lock: lock,
            _dir: dir,
            pidfile,
            path,
        })
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn matrix_vm(path: &str) -> Command {
    let mut c = lab();
    c.args([
        "matrix",
        "--vm",
        "--backends",
        "xfrm",
        "--ciphers",
        "aes-128-gcm",
        "--bytes",
        "1MB",
        "--vm-bytes",
        "1MB",
        "--no-progress",
        "--no-ceiling",
    ])
    .env("PATH", path)
    .stdin(std::process::Stdio::null());
    c
}

fn grandchild(pidfile: &Path) -> u32 {
    let start = std::time::Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(start.elapsed().as_secs() < 60, "the fake vng never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Issue 25: a VM sweep stopped (SIGTERM, a timeout) killed vng alone; qemu and virtme-run
/// lived on, reparented to PID 1, and `clean` said "nothing to clean". Now the VM's whole
/// process group goes with the run, before it says that everything was removed.
#[test]
fn a_stopped_vm_sweep_takes_its_whole_process_tree_with_it() {
    let Some(vm) = FakeVm::new(
        "a_stopped_vm_sweep_takes_its_whole_process_tree_with_it",
        "sleep 1000",
    ) else {
        return;
    };
    let child = matrix_vm(&vm.path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let qemu = grandchild(&vm.pidfile);
    assert!(alive(qemu));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", text(&out));
    assert!(!alive(qemu), "the VM's qemu outlived its run:\n{}", text(&out));
    // Nothing of this run is left for `clean` (other runs on the machine may have records).
    let clean = run_lab(&["clean"]);
    assert!(clean.status.success(), "{}", text(&clean));
    assert!(!text(&clean).contains("vng"), "{}", text(&clean));
}

/// Issue 25: a VM sweep that gave nothing back printed every kernel cell as "not run" and
/// exited 0, its error said twice ("No such file or directory (os error 2): No such file
/// or directory (os error 2)"), what vng left running stayed, and nothing said what the
/// guest had printed.
#[test]
fn a_vm_sweep_that_gives_nothing_back_fails_and_leaves_nothing() {
    let Some(vm) = FakeVm::new(
        "a_vm_sweep_that_gives_nothing_back_fails_and_leaves_nothing",
        "echo 'Kernel panic - not syncing: a fake guest'\nexit 1",
    ) else {
        return;
    };
    let out = matrix_vm(&vm.path).output().unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("gave no kernel rows"), "{shown}");
    let cause = std::io::Error::from(std::io::ErrorKind::NotFound).to_string();
    for line in shown.lines() {
        assert!(line.matches(&cause).count() <= 1, "said twice: {line}");
    }
    assert!(!alive(grandchild(&vm.pidfile)), "vng's helper outlived the sweep");
    // What the guest printed last (its console is not shown during a sweep) is said once,
    // in the notes, and each kernel cell points there.
    let panic = "Kernel panic - not syncing: a fake guest";
    assert_eq!(shown.matches(panic).count(), 1, "{shown}");
    assert!(
        shown.contains("1. the VM sweep failed: the VM wrote no report"),
        "{shown}"
    );
    assert!(shown.contains("(its last lines are in the notes)"), "{shown}");
}

/// Issue 25: after a VM sweep was killed outright, `clean` found nothing to stop although
/// qemu ran on. Every process of the VM's group is recorded as it appears, so `clean` stops
/// them all.
#[test]
fn a_killed_vm_sweep_leaves_nothing_that_clean_does_not_stop() {
    let Some(vm) = FakeVm::new(
        "a_killed_vm_sweep_leaves_nothing_that_clean_does_not_stop",
        // Hangs on its "qemu", and ends with it.
        "wait",
    ) else {
        return;
    };
    let mut child = matrix_vm(&vm.path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let qemu = grandchild(&vm.pidfile);
    // The sweep looks for its VM's new processes once a second.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(alive(qemu), "SIGKILL gave the sweep no chance to stop its VM");
    let clean = run_lab(&["clean"]);
    assert!(clean.status.success(), "{}", text(&clean));
    assert!(
        !alive(qemu),
        "clean left the VM's qemu running:\n{}",
        text(&clean)
    );
}
