//! Kernel rows per kernel: `matrix --vm STOCK,SECOND` boots each kernel once (two boots:
//! a guest runs one kernel), and one report holds both kernels' rows, each labelled with
//! its guest's uname -r; `compare --kernels A,B` pairs them cell by cell.
//!
//! Needs a second kernel beside the stock one: `lab/setup.sh --second-kernel` (Debian's
//! bookworm-backports 6.12, into /var/lib/ipsec-lab/kernels; `make test` asks for it).
//! Without one the test says so and skips (under CI=true it fails: setup should have
//! installed it).

mod common;

use std::path::PathBuf;

use common::*;

/// The stock kernel's release and a second one from the lab's kernel directory.
fn two_kernels() -> Option<(String, String)> {
    let stock = std::fs::read_dir("/boot")
        .ok()?
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("vmlinuz-")
                .map(str::to_string)
        })
        .max()?;
    let second = std::fs::read_dir("/var/lib/ipsec-lab/kernels")
        .ok()?
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("vmlinuz-")
                .map(str::to_string)
        })
        .find(|k| *k != stock)?;
    Some((stock, second))
}

/// The stock and the second kernel, where the VM can boot both; otherwise skips saying why.
fn two_kernels_or_skip(test: &str) -> Option<(String, String)> {
    if !vm_or_skip(test) {
        return None;
    }
    let kernels = two_kernels();
    if kernels.is_none() {
        testcap::skip(
            test,
            "no second kernel in /var/lib/ipsec-lab/kernels: run lab/setup.sh --second-kernel",
        );
    }
    kernels
}

#[test]
fn a_two_kernel_vm_matrix_has_both_kernels_rows() {
    let test = "a_two_kernel_vm_matrix_has_both_kernels_rows";
    let Some((stock, second)) = two_kernels_or_skip(test) else {
        return;
    };
    let _lock = lab_lock();
    let dir = private_dir("ipl-kernels-test-");
    let json: PathBuf = dir.path().join("kernels.json");
    let started = std::time::Instant::now();
    // With a /run/netns of its own (the VMs need the host's network): the namespaces
    // counted after it are its own, whatever other runs on the machine make.
    let run = own::Sandbox::default().host_network().run(&[
        "matrix",
        "--vm",
        &format!("{stock},{second}"),
        "--backends",
        "plain,xfrm",
        "--ciphers",
        "aes-128-gcm",
        "--bytes",
        "1MB",
        "--vm-bytes",
        "1MB",
        "--repeat",
        "1",
        "--no-progress",
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = run.out;
    eprintln!(
        "two-kernel matrix took {:.0} s\n{}",
        started.elapsed().as_secs_f64(),
        text(&out)
    );
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for release in [&stock, &second] {
        let environment = format!("vm {release}");
        assert_eq!(
            report["environments"][&environment]["kernel_release"], **release,
            "the guest of {release} ran {release}"
        );
        let rows: Vec<&serde_json::Value> = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["key"]["environment"] == environment)
            .collect();
        let xfrm = rows
            .iter()
            .find(|r| r["key"]["backend"] == "xfrm")
            .unwrap_or_else(|| panic!("{release}: {rows:?}"));
        assert_eq!(xfrm["cells"][0]["status"], "measured", "{xfrm}");
        assert!(
            text(&out).contains(&format!("(vm {release})")),
            "the table labels {release}"
        );
    }
    let compared = run_lab(&[
        "compare",
        json.to_str().unwrap(),
        "--kernels",
        &format!("{stock},{second}"),
    ]);
    assert!(compared.status.success(), "{}", text(&compared));
    let shown = text(&compared);
    eprintln!("{shown}");
    // The kernels' xfrm rows pair: one line with a rate on both sides.
    let paired = shown.lines().any(|l| {
        let cols: Vec<&str> = l.split('|').map(str::trim).collect();
        cols.get(1) == Some(&"xfrm (vm)")
            && cols.get(3).is_some_and(|c| *c != "—")
            && cols.get(4).is_some_and(|c| *c != "—")
    });
    assert!(paired, "no xfrm row with both kernels' rates: {shown}");
    // A kernel the report does not hold is bad input, naming the kernels it has.
    let wrong = run_lab(&[
        "compare",
        json.to_str().unwrap(),
        "--kernels",
        &format!("{stock},0.0.1"),
    ]);
    assert_eq!(wrong.status.code(), Some(2), "{}", text(&wrong));
    assert!(text(&wrong).contains(&second), "{}", text(&wrong));
    assert_eq!(run.namespaces_left, Vec::<String>::new());
}

#[test]
fn vm_kernels_that_do_not_exist_exit_2() {
    let out = run_lab(&[
        "matrix",
        "--backends",
        "xfrm",
        "--vm",
        "/boot/vmlinuz-0.0.1-nope,auto",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no such kernel image"), "{}", text(&out));
    // speed too, and every kernel is found before the first boots: the good one first.
    let started = std::time::Instant::now();
    let out = run_lab(&[
        "speed",
        "aes-128-cbc",
        "--crypto",
        "kernel",
        "--vm",
        "auto,/boot/vmlinuz-0.0.1-nope",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no such kernel image"), "{}", text(&out));
    assert!(
        started.elapsed().as_secs() < 20,
        "a VM was booted before the refusal"
    );
}

/// `speed --vm A,B`: one boot per kernel, the kernel rows named after each guest's kernel
/// in one table and one JSON report.
#[test]
fn speed_with_two_kernels_names_each_kernels_rows() {
    let test = "speed_with_two_kernels_names_each_kernels_rows";
    let Some((stock, second)) = two_kernels_or_skip(test) else {
        return;
    };
    let dir = private_dir("ipl-kernels-speed-");
    let json = dir.path().join("speed.json");
    let kernels = format!("{stock},{second}");
    let started = std::time::Instant::now();
    let out = lab()
        .args(["speed", "aes-128-gcm", "--crypto", "kernel", "--vm", &kernels])
        .args(["--seconds", "0.05", "--repeats", "1", "--sizes", "1400", "--json"])
        .arg(&json)
        .env("IPSEC_LAB_VM_ACCEL", "tcg")
        .output()
        .expect("ipsec-lab runs");
    eprintln!(
        "{}
(took {:.1} s)",
        text(&out),
        started.elapsed().as_secs_f64()
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for kernel in [&stock, &second] {
        assert!(
            stdout.contains(&format!("kernel {kernel} [vm, tcg]")),
            "{}",
            text(&out)
        );
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the report")).unwrap();
    let mut names: Vec<String> = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["implementation"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names, vec![format!("kernel {stock}"), format!("kernel {second}")]);
}
