//! The arm64 build under emulation (`make test-arm64`, issue 48): the cross-built binary
//! (lab/arm64-cargo.sh) run by qemu-user through binfmt_misc, and its .deb installed in a
//! Debian 12 arm64 root (lab/arm64-toolchain.sh). Every test is `#[ignore]`d: the cross
//! build takes twenty minutes, so `make test` only type-checks the aarch64 target
//! (lab/arm64-check.sh) and `make test-arm64` runs these after building.
//!
//! Emulated figures say so: the environment is "qemu-user (aarch64 emulated on an x86_64
//! kernel ...)" and `speed` prints an EMULATED line.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const TRIPLE: &str = "aarch64-unknown-linux-gnu";
/// Debian 12's C library: what the binary may need at most, to run on a Pi with Debian 12
/// or Raspberry Pi OS.
const BOOKWORM_GLIBC: (u32, u32) = (2, 36);

fn binary() -> PathBuf {
    Path::new(REPO)
        .join("target/arm64")
        .join(TRIPLE)
        .join("release/ipsec-lab")
}

/// The Debian 12 arm64 root of lab/arm64-toolchain.sh.
fn arm64_root() -> PathBuf {
    Path::new("/var/lib/ipsec-lab/cross/bookworm-arm64").to_owned()
}

/// True when the arm64 binary is built and binfmt_misc hands aarch64 binaries to qemu.
fn ready(test: &str) -> bool {
    if !binary().exists() {
        testcap::skip(
            test,
            &format!("no {} (make test-arm64 builds it)", binary().display()),
        );
        return false;
    }
    let binfmt = std::fs::read_to_string("/proc/sys/fs/binfmt_misc/qemu-aarch64").unwrap_or_default();
    if !binfmt.starts_with("enabled") {
        testcap::skip(
            test,
            "binfmt_misc runs no aarch64 binaries (lab/arm64-toolchain.sh installs qemu-user-static)",
        );
        return false;
    }
    true
}

fn arm64(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env("QEMU_LD_PREFIX", arm64_root())
        .output()
        .expect("the arm64 binary runs")
}

fn ok(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: Output, what: &str) -> serde_json::Value {
    serde_json::from_str(&ok(out, what)).expect("stdout is JSON")
}

fn assert_emulated(report: &serde_json::Value) {
    let virt = report["environment"]["virtualization"].as_str().unwrap();
    assert!(
        virt.starts_with("qemu-user (aarch64 emulated on an x86_64 kernel"),
        "{virt}"
    );
}

#[test]
#[ignore = "needs the arm64 build: make test-arm64"]
fn arm64_binary_is_aarch64_for_debian_12_and_says_its_version() {
    if !ready("arm64_binary_is_aarch64_for_debian_12_and_says_its_version") {
        return;
    }
    let readelf = |flag: &str| {
        ok(
            Command::new("readelf").arg(flag).arg(binary()).output().unwrap(),
            "readelf",
        )
    };
    let header = readelf("-h");
    assert!(header.contains("AArch64"), "{header}");
    // The newest GLIBC_x.y symbol version it needs.
    let newest = readelf("-V")
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| v.split_once('.'))
        .filter_map(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .max()
        .expect("GLIBC_ versions");
    assert!(newest <= BOOKWORM_GLIBC, "needs GLIBC_{}.{}", newest.0, newest.1);
    eprintln!("newest glibc symbol version: GLIBC_{}.{}", newest.0, newest.1);
    let version = ok(arm64(&["--version"]), "--version");
    assert!(
        version.starts_with(&format!("ipsec-lab {}\n", env!("CARGO_PKG_VERSION")))
            && version.contains("profile: release")
            && !version.contains("commit: unknown"),
        "{version}"
    );
}

#[test]
#[ignore = "needs the arm64 build: make test-arm64"]
fn arm64_speed_is_labelled_emulated_and_armcap_turns_hardware_aes_off() {
    if !ready("arm64_speed_is_labelled_emulated_and_armcap_turns_hardware_aes_off") {
        return;
    }
    let args = [
        "speed",
        "aes-128-cbc",
        "aes-256-gcm",
        "chacha20-poly1305",
        "--crypto",
        "auto,soft",
        "--seconds",
        "0.1",
        "--repeats",
        "1",
        "--sizes",
        "64,1400",
    ];
    let table = ok(arm64(&args), "speed");
    eprintln!("{table}");
    assert!(table.contains("EMULATED: qemu-user (aarch64 emulated"), "{table}");
    assert!(
        table.contains("soft = aws-lc-rs, software AES (hardware AES masked)"),
        "{table}"
    );
    let report = json(arm64(&[&args[..], &["--json", "-"]].concat()), "speed --json");
    assert_emulated(&report);
    let flags = report["environment"]["crypto_flags"].as_array().unwrap();
    assert!(
        flags.iter().any(|f| f == "aes") && flags.iter().any(|f| f == "pmull"),
        "{flags:?}"
    );
    // OPENSSL_armcap=~0x24 (the soft child) turns AWS-LC's AES and PMULL code off: it says
    // so itself, and the figures change.
    let rate = |crypto: &str, hardware: bool| {
        let records = report["records"].as_array().unwrap();
        let r = records
            .iter()
            .find(|r| {
                r["implementation"] == crypto
                    && r["suite"] == "aes-256-gcm"
                    && r["direction"] == "encrypt"
                    && r["block_bytes"] == 1400
            })
            .unwrap_or_else(|| panic!("no {crypto} aes-256-gcm row: {report}"));
        assert_eq!(r["hardware_aes"], hardware, "{r}");
        let mb = r["mb_per_s"].as_f64().unwrap();
        assert!(mb.is_finite() && mb > 0.0, "{r}");
        mb
    };
    let (auto, soft) = (rate("auto", true), rate("soft", false));
    assert!(auto > soft * 1.2, "auto {auto} MB/s against soft {soft} MB/s");
}

#[test]
#[ignore = "needs the arm64 build: make test-arm64"]
fn arm64_runs_plain_and_userspace_between_two_namespaces_and_leaves_nothing() {
    let test = "arm64_runs_plain_and_userspace_between_two_namespaces_and_leaves_nothing";
    if !ready(test) || !root_or_skip(test) || !testcap::tun(test) {
        return;
    }
    let _lock = lab_lock();
    // The sandbox starts the host's binary; this shim starts the arm64 one in its place,
    // with the arm64 root's loader for qemu-user.
    let shim = format!(
        "shift; QEMU_LD_PREFIX='{}' exec '{}' \"$@\"",
        arm64_root().display(),
        binary().display()
    );
    for backend in ["plain", "userspace"] {
        let run = own::Sandbox::default().wrapper(&["sh", "-c", &shim, "sh"]).run(&[
            "run",
            "--backend",
            backend,
            "--bytes",
            "2MB",
            "--json",
            "-",
        ]);
        assert!(run.out.status.success(), "{backend}: {}", text(&run.out));
        assert_eq!(run.namespaces_left, Vec::<String>::new(), "{backend}");
        assert_eq!(run.links_left, Vec::<String>::new(), "{backend}");
        let report: serde_json::Value = serde_json::from_slice(&run.out.stdout).expect("JSON");
        assert_eq!(report["plan"]["backend"], backend);
        assert_emulated(&report);
        for t in report["transfers"].as_array().unwrap() {
            assert_eq!(t["bytes"], 2_000_000, "{backend}");
            assert_eq!(t["verified"], true, "{backend}");
        }
        eprintln!("{backend}: {} MB/s (emulated)", report["mb_per_s"]["median"]);
    }
}

#[test]
#[ignore = "needs the arm64 build: make test-arm64"]
fn arm64_deb_lints_installs_in_an_arm64_root_and_runs() {
    let test = "arm64_deb_lints_installs_in_an_arm64_root_and_runs";
    if !ready(test) || !root_or_skip(test) {
        return;
    }
    if !arm64_root().join(".ready").exists() {
        testcap::skip(test, "no Debian 12 arm64 root (lab/arm64-toolchain.sh makes it)");
        return;
    }
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ipl-deb-arm64");
    let built = ok(
        Command::new("bash")
            .arg(Path::new(REPO).join("lab/deb/build.sh"))
            .arg(binary())
            .arg(&out_dir)
            .arg(TRIPLE)
            .env("DEB_FAST", "1")
            .output()
            .unwrap(),
        "lab/deb/build.sh",
    );
    let deb = PathBuf::from(built.lines().last().unwrap_or_default().trim());
    assert!(
        deb.file_name().unwrap().to_string_lossy().ends_with("_arm64.deb"),
        "{built}"
    );
    let files = ok(
        Command::new("dpkg-deb").arg("-c").arg(&deb).output().unwrap(),
        "dpkg-deb -c",
    );
    for shipped in [
        "./usr/bin/ipsec-lab",
        "./usr/share/man/man1/ipsec-lab-run.1.gz",
        "./usr/share/bash-completion/completions/ipsec-lab",
        "./usr/share/zsh/vendor-completions/_ipsec-lab",
        "./usr/share/fish/vendor_completions.d/ipsec-lab.fish",
    ] {
        assert!(files.contains(shipped), "{shipped} missing:\n{files}");
    }
    // Under /lib or /usr/lib: Debian 12 merged them.
    assert!(
        files.contains("/lib/systemd/system/ipsec-lab-serve.service"),
        "{files}"
    );
    let lint = Command::new("lintian")
        .args(["--no-tag-display-limit", "--suppress-tags-from-file"])
        .arg(Path::new(REPO).join("debian/lintian-explained"))
        .arg(&deb)
        .output()
        .unwrap();
    let lint_text = text(&lint);
    assert!(
        lint.status.success()
            && !lint_text
                .lines()
                .any(|l| l.starts_with("E:") || l.starts_with("W:")),
        "lintian: {lint_text}"
    );

    // Installed with the root's own (arm64) dpkg into an overlay of the root, in a mount
    // namespace that takes the overlay with it.
    let dir = tempfile::Builder::new()
        .prefix("ipl-arm64-root-")
        .tempdir()
        .unwrap();
    let script = format!(
        "set -e; R={d}/mnt; mkdir -p {d}/upper {d}/work $R {d}/upper/tmp; cp {deb} {d}/upper/tmp/p.deb; \
         mount -t overlay overlay -o lowerdir={lower},upperdir={d}/upper,workdir={d}/work $R; \
         mount -t proc proc $R/proc; mount --rbind /dev $R/dev; \
         chroot $R dpkg -i /tmp/p.deb >/dev/null; \
         chroot $R dpkg --print-architecture; chroot $R ipsec-lab --version; \
         test -s $R/etc/ipsec-lab/psk && echo psk made; \
         chroot $R dpkg --purge ipsec-lab >/dev/null; test ! -e $R/usr/bin/ipsec-lab && echo purged",
        d = dir.path().display(),
        deb = deb.display(),
        lower = arm64_root().display(),
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap();
    let said = ok(out, "dpkg -i in the arm64 root");
    assert!(said.starts_with("arm64\nipsec-lab "), "{said}");
    assert!(said.contains("\npsk made\npurged\n"), "{said}");
}
