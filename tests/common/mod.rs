//! Helpers shared by the end-to-end tests: the binary, capability checks that skip with a
//! printed reason, and a view of what the lab left in the kernel.
#![allow(dead_code)]

pub mod hold;
pub mod own;
pub mod wireguard;

use std::process::{Command, Output};

pub fn lab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ipsec-lab"))
}

pub fn run_lab(args: &[&str]) -> Output {
    lab().args(args).output().expect("ipsec-lab runs")
}

/// True when the test may create namespaces; otherwise prints why it is skipped.
pub fn root_or_skip(test: &str) -> bool {
    testcap::root(test)
}

/// Lab namespaces present now (name prefix `ipl-`).
pub fn lab_namespaces() -> Vec<String> {
    netns::lab_namespaces()
}

/// Lab namespaces that did not exist in `before`.
pub fn new_lab_namespaces(before: &[String]) -> Vec<String> {
    lab_namespaces()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect()
}

/// Links in the host namespace whose names carry the lab prefix (the VM's tests, where
/// the guest is the test's alone).
pub fn host_lab_links() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    own::lab_links(&String::from_utf8_lossy(&out.stdout))
}

/// The records in the state file of process `pid` (/run/ipsec-lab/PID-START.json), if it
/// has one now.
pub fn state_records(pid: u32) -> Option<Vec<serde_json::Value>> {
    let dir = std::fs::read_dir("/run/ipsec-lab").ok()?;
    let prefix = format!("{pid}-");
    let path = dir.flatten().map(|e| e.path()).find(|p| {
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        name.starts_with(&prefix) && name.ends_with(".json")
    })?;
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    doc["records"].as_array().cloned()
}

/// Waits (up to `timeout`) until the state file of `pid` holds records that satisfy `ready`;
/// returns them.
pub fn wait_for_records(
    pid: u32,
    timeout: std::time::Duration,
    ready: impl Fn(&[serde_json::Value]) -> bool,
) -> Option<Vec<serde_json::Value>> {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if let Some(r) = state_records(pid).filter(|r| ready(r)) {
            return Some(r);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// Records of one kind ("namespace", "process", "path", ...).
pub fn records_of<'a>(records: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

/// True when a test may use openvpn; otherwise prints why it is skipped (under CI=true a
/// missing openvpn fails instead).
pub fn openvpn_or_skip(test: &str) -> bool {
    let found = Command::new("openvpn").arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: openvpn is not installed (apt-get install openvpn)"
        );
        eprintln!("skipped {test}: openvpn is not installed (apt-get install openvpn)");
    }
    found
}

/// True when a test may run charon (strongSwan's daemon and swanctl); otherwise says why it
/// is skipped (under CI=true a missing one fails instead).
pub fn strongswan_or_skip(test: &str) -> bool {
    let found = ["/usr/sbin/charon-systemd", "/usr/sbin/swanctl"]
        .iter()
        .all(|p| std::path::Path::new(p).is_file());
    if !found {
        testcap::skip(
            test,
            "strongSwan is not installed (apt-get install charon-systemd strongswan-swanctl)",
        );
    }
    found
}

/// A `vng` first in PATH (in `dir/bin`) that runs `body`, a shell script: shows what the
/// lab hands to the real one, or plays a VM. Returns the PATH to run the lab with.
pub fn fake_vng(dir: &std::path::Path, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let vng = bin.join("vng");
    std::fs::write(&vng, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&vng, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

/// The part of a fake `vng` that answers `vng --version` as an installed one does.
pub const VNG_VERSION: &str = "[ \"$1\" = --version ] && { echo 'virtme-ng 1.0'; exit 0; }";

/// A fresh private directory for a test's files (random name, mode 0700, never reused),
/// removed when dropped.
pub fn private_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a private temporary directory")
}

/// Runs each `(args, hint)` and asserts a usage error: exit 2 with `hint` in the output,
/// and, as root, nothing made: each runs in a namespace of its own (own.rs), where no lab
/// namespace or link may be left, whatever other runs on the machine do meanwhile.
pub fn assert_usage_errors(cases: &[(&[&str], &str)]) {
    for (args, hint) in cases {
        let out = own::run_lab_leaving_nothing(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(hint), "{args:?}: {}", text(&out));
    }
}

/// Whether `pid` still runs: a zombie has ended. After `clean` stops the orphans of a killed
/// run, init reaps them when it gets to it; here that is every few seconds.
pub fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `speed`'s quickest cells, for tests of where rows come from: 50 ms, one repeat, a small
/// and a full-sized block; the JSON path follows.
pub const QUICK_SPEED: [&str; 7] = [
    "--seconds",
    "0.05",
    "--repeats",
    "1",
    "--sizes",
    "64,1400",
    "--json",
];

/// Serialises tests that create lab objects, so "nothing new remains" checks in one test
/// are not confused by another test's run in flight.
pub fn lab_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// True when the stock-kernel VM can be booted here (root, vng, a kernel image in /boot);
/// otherwise prints which is missing and how to get it.
pub fn vm_or_skip(test: &str) -> bool {
    if !root_or_skip(test) {
        return false;
    }
    if Command::new("vng").arg("--version").output().is_err() {
        testcap::skip(test, "vng (virtme-ng) is not installed; run lab/setup.sh");
        return false;
    }
    let has_kernel = std::fs::read_dir("/boot")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"))
        })
        .unwrap_or(false);
    if !has_kernel {
        testcap::skip(
            test,
            "no kernel image in /boot (apt-get install linux-image-amd64)",
        );
    }
    has_kernel
}

/// Set in the guest, so the host-side test that booted the VM does nothing there.
pub const IN_VM: &str = "IPSEC_LAB_IN_VM";

/// Boots the stock kernel ONCE (lab/vm/run.sh: KVM where a KVM guest boots, else TCG) and
/// runs the ignored test `guest_test` of this same test binary inside it, so one boot
/// serves a whole group of checks; panics if the guest's test fails. Skips, saying why,
/// when this is already the guest or when root, vng or a kernel image is missing.
pub fn run_guest_test(guest_test: &str, timeout: std::time::Duration) {
    run_guest_tests(&[guest_test], timeout)
}

/// [`run_guest_test`] for several ignored tests (full paths) in the one boot; all run, and
/// the guest fails if any does.
pub fn run_guest_tests(guest_tests: &[&str], timeout: std::time::Duration) {
    if std::env::var_os(IN_VM).is_some() {
        return;
    }
    if !vm_or_skip(&guest_tests.join(", ")) {
        return;
    }
    let out_dir = private_dir("ipl-vm-test-");
    let out = out_dir.path();
    let started = std::time::Instant::now();
    let status = Command::new("timeout")
        .arg(timeout.as_secs().to_string())
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/vm/run.sh"))
        .arg("-o")
        .arg(out)
        .args(["--", "env", &format!("{IN_VM}=1")])
        .arg(std::env::current_exe().unwrap())
        .args(guest_tests)
        .args(["--exact", "--include-ignored", "--nocapture", "--test-threads=1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    eprintln!(
        "VM group took {:.1} s (boot included)",
        started.elapsed().as_secs_f64()
    );
    let rc = std::fs::read_to_string(out.join("rc")).unwrap_or_default();
    drop(out_dir);
    assert!(
        status.success(),
        "the VM group failed (guest exit code {rc:?}); see the guest output above"
    );
    assert_eq!(rc.trim(), "0");
}

/// The shell the guest runs for [`boot_guest_groups`] (from a file in OUTDIR: the kernel's
/// command line, which carries the guest's command, holds 2 kB): each group in its own
/// process of this test binary, so a group that fails or hangs (each has `$2` seconds)
/// never stops the next; group i's exit code and output go to OUTDIR/i.rc and OUTDIR/i.log.
const GUEST_GROUPS_SCRIPT: &str = r#"bin=$1; limit=$2; shift 2; i=0
for group in "$@"; do
    timeout --kill-after=10 "$limit" "$bin" "$group" --exact --include-ignored --nocapture --test-threads=1 >"$IPSEC_LAB_VM_OUT/$i.log" 2>&1
    rc=$?
    echo "$rc" >"$IPSEC_LAB_VM_OUT/$i.rc"
    echo "guest: $group exited $rc"
    i=$((i + 1))
done
"#;

/// What one VM boot said of each guest group it ran.
pub struct GuestGroups {
    /// How the boot went (exit status, time), for a group that has no result.
    boot: String,
    /// Group → (exit code, output); a group the guest never finished has no exit code.
    results: std::collections::BTreeMap<String, (Option<i32>, String)>,
}

/// Boots the stock kernel ONCE (lab/vm/run.sh) and runs each of `groups` (ignored tests of
/// this binary, full paths) inside it as its own process, in order, each within
/// `group_limit`; the whole boot within `limit`. Never panics: a boot that failed is
/// reported by every group's [`GuestGroups::assert_passed`].
pub fn boot_guest_groups(
    groups: &[&str],
    group_limit: std::time::Duration,
    limit: std::time::Duration,
) -> GuestGroups {
    let out_dir = private_dir("ipl-vm-test-");
    let out = out_dir.path();
    let script = out.join("groups.sh");
    if let Err(e) = std::fs::write(&script, GUEST_GROUPS_SCRIPT) {
        return GuestGroups {
            boot: format!("{}: {e}", script.display()),
            results: Default::default(),
        };
    }
    // The guest starts with a fresh environment: under CI a group's missing capability
    // must fail there too, not skip.
    let ci = format!("CI={}", testcap::required());
    let started = std::time::Instant::now();
    let status = Command::new("timeout")
        .arg(limit.as_secs().to_string())
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/vm/run.sh"))
        .arg("-o")
        .arg(out)
        .args(["--", "env", &format!("{IN_VM}=1"), &ci, "sh"])
        .arg(&script)
        .arg(std::env::current_exe().unwrap())
        .arg(group_limit.as_secs().to_string())
        .args(groups)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status();
    let boot = format!(
        "the VM boot ended with {status:?} after {:.1} s (its console output is above)",
        started.elapsed().as_secs_f64()
    );
    eprintln!("{boot}");
    GuestGroups::read(groups, out, boot)
}

/// Whether user-mode Linux (Debian's user-mode-linux) is here to boot; prints why not.
pub fn uml_or_skip(test: &str) -> bool {
    if !root_or_skip(test) {
        return false;
    }
    let present = lab::uml::UmlKernel::installed().is_some();
    if !present {
        testcap::skip(
            test,
            "no /usr/bin/linux.uml with its modules (apt-get install user-mode-linux; make setup does)",
        );
    }
    present
}

/// [`boot_guest_groups`] in ONE boot of user-mode Linux: its kernel's ESP at native speed,
/// booted in about 2 s; one CPU, no WireGuard, generic C crypto only. The checkout and the
/// test binaries keep their paths inside (read-only), the output directory is shared.
pub fn boot_guest_groups_uml(
    groups: &[&str],
    group_limit: std::time::Duration,
    limit: std::time::Duration,
) -> GuestGroups {
    let out_dir = private_dir("ipl-uml-test-");
    let out = out_dir.path();
    let script = out.join("groups.sh");
    let failed = |why: String| GuestGroups {
        boot: why,
        results: Default::default(),
    };
    if let Err(e) = std::fs::write(&script, GUEST_GROUPS_SCRIPT) {
        return failed(format!("{}: {e}", script.display()));
    }
    let Some(kernel) = lab::uml::UmlKernel::installed() else {
        return failed("user-mode Linux is not installed".into());
    };
    let test_binary = std::env::current_exe().unwrap();
    let binaries = [
        &test_binary,
        std::path::Path::new(env!("CARGO_BIN_EXE_ipsec-lab")),
    ];
    let mut read_only: Vec<std::path::PathBuf> = binaries
        .iter()
        .filter_map(|b| b.parent().map(std::path::Path::to_path_buf))
        .collect();
    read_only.push(env!("CARGO_MANIFEST_DIR").into());
    read_only.sort();
    read_only.dedup();
    let mut command: Vec<String> = vec!["sh".into(), script.display().to_string()];
    command.push(test_binary.display().to_string());
    command.push(group_limit.as_secs().to_string());
    command.extend(groups.iter().map(|g| g.to_string()));
    let guest = lab::uml::Guest {
        kernel,
        shared: out.to_path_buf(),
        read_only,
        memory_mib: lab::uml::MEMORY_MIB,
        // Under CI a group's missing capability fails in the guest too, not skips.
        env: vec![
            format!("{IN_VM}=1"),
            format!("CI={}", testcap::required()),
            format!("IPSEC_LAB_VM_OUT={}", out.display()),
        ],
        extra_modules: Vec::new(),
        command,
        cwd: Some(env!("CARGO_MANIFEST_DIR").into()),
        console: true,
    };
    let uml = match guest.command() {
        Ok(c) => c,
        Err(e) => return failed(format!("{e:#}")),
    };
    let started = std::time::Instant::now();
    let status = Command::new("timeout")
        .args(["--kill-after=10", &limit.as_secs().to_string()])
        .arg(uml.get_program())
        .args(uml.get_args())
        .stdin(std::process::Stdio::null())
        .status();
    let boot = format!(
        "the user-mode Linux boot ended with {status:?} after {:.1} s (its console output is above)",
        started.elapsed().as_secs_f64()
    );
    eprintln!("{boot}");
    GuestGroups::read(groups, out, boot)
}

impl GuestGroups {
    /// What each of `groups` left in `out` (`i.rc`, `i.log`).
    fn read(groups: &[&str], out: &std::path::Path, boot: String) -> GuestGroups {
        let results = groups
            .iter()
            .enumerate()
            .map(|(i, group)| {
                let read = |ext| std::fs::read_to_string(out.join(format!("{i}.{ext}")));
                let rc = read("rc").ok().and_then(|rc| rc.trim().parse().ok());
                let log = read("log").unwrap_or_default();
                (group.to_string(), (rc, log))
            })
            .collect();
        GuestGroups { boot, results }
    }
}

impl GuestGroups {
    /// Prints `group`'s guest output; panics unless it ran and its one test passed.
    pub fn assert_passed(&self, group: &str) {
        let Some((rc, log)) = self.results.get(group) else {
            panic!("{group} was not among the groups the VM ran");
        };
        eprintln!("{log}");
        let Some(rc) = rc else {
            panic!("{group} did not finish in the VM: {}", self.boot);
        };
        assert_eq!(
            *rc, 0,
            "{group} failed in the VM (exit code {rc}); its output is above"
        );
        // A name that matches no test runs nothing and exits 0: that is no pass.
        assert!(
            log.contains("test result: ok. 1 passed"),
            "{group} ran no test in the VM; its output is above"
        );
    }
}

/// A local TCP run's time to first packet (issue 46): there, above zero, below the run's
/// own wall time `wall` (measured around it by the test), and its two parts adding up.
/// The JSON report a command that must succeed printed on stdout (`--json -`).
pub fn report_json(out: &Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

pub fn assert_first_packet(report: &serde_json::Value, wall: std::time::Duration) {
    let f = &report["first_packet"];
    let part = |k: &str| {
        f[k].as_f64()
            .unwrap_or_else(|| panic!("first_packet.{k} missing: {report}"))
    };
    let (ttfp, setup, first_byte) = (part("ttfp_ms"), part("setup_ms"), part("first_byte_ms"));
    assert!(
        ttfp > 0.0 && ttfp < wall.as_secs_f64() * 1e3,
        "ttfp {ttfp} ms, wall {wall:?}: {f}"
    );
    assert!(setup >= 0.0 && first_byte > 0.0, "{f}");
    assert!((setup + first_byte - ttfp).abs() < 1e-6, "{f}");
}
