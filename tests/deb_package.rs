//! The Debian package end to end (issue 16): built with cargo-deb from the debug binary (so CI
//! compiles once), checked by lintian, installed with dpkg into a fresh root, and the
//! installed `ipsec-lab-serve.service` serving a `run --peer` between two namespaces.
//!
//! The fresh root is a copy-on-write overlay of this machine's root (its dpkg database
//! included, so Depends resolve as on a real host) in a private mount namespace: dpkg writes
//! only into the overlay's upper directory, which this test reads and then deletes. The host's
//! own files and dpkg database are never touched.
//!
//! systemd is not PID 1 here, so the unit is not started by systemd: its ExecStart runs under
//! lab/deb/sandbox.sh, which applies the unit's capability bounding set, no_new_privs and
//! file-system protections; what it cannot apply (seccomp filter, socket families, namespace
//! restriction, W^X) is checked against what the server really did, from strace.
//!
//! The fresh root lives under `CARGO_TARGET_TMPDIR`, which is wherever the checkout is: under
//! /tmp or /home the unit's PrivateTmp or ProtectHome would hide it from the service, so
//! sandbox.sh is told to keep it reachable (`--keep`), as /usr and /etc are on a real host.

mod common;
mod remote_common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use remote_common::{report, Lab, SERVER};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const UNIT: &str = "ipsec-lab-serve.service";

/// Tools the test runs, each with the package that has it.
const TOOLS: [(&str, &str); 7] = [
    ("dpkg", "dpkg"),
    ("lintian", "lintian"),
    ("man", "man-db"),
    ("systemd-analyze", "systemd"),
    ("unshare", "util-linux"),
    ("setpriv", "util-linux"),
    ("strace", "strace"),
];

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// True when root and every tool is here; otherwise skips (fails under CI) naming the fix.
fn ready(test: &str) -> bool {
    if !common::root_or_skip(test) {
        return false;
    }
    for (tool, package) in TOOLS {
        if !have(tool) {
            testcap::skip(
                test,
                &format!("no {tool}: apt-get install {package} (make setup)"),
            );
            return false;
        }
    }
    let cargo_deb = Command::new("cargo").args(["deb", "--version"]).output();
    if !cargo_deb.is_ok_and(|o| o.status.success()) {
        testcap::skip(test, "no cargo-deb: bash lab/deb/cargo-deb.sh (make setup)");
        return false;
    }
    true
}

fn text(out: &Output) -> String {
    common::text(out)
}

fn ok(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {:?}\n{}", out.status, text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The .deb, built once per test process from the binary cargo test built.
fn package() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| {
        // One place, rebuilt by every run, so the staged binary (~160 MB) never piles up.
        let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ipl-deb-build");
        let out = Command::new("bash")
            .arg(Path::new(REPO).join("lab/deb/build.sh"))
            .arg(env!("CARGO_BIN_EXE_ipsec-lab"))
            .arg(&out_dir)
            .env("DEB_FAST", "1")
            .output()
            .unwrap();
        let stdout = ok(out, "lab/deb/build.sh");
        let deb = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        assert!(
            deb.extension().is_some_and(|e| e == "deb"),
            "no .deb in {stdout:?}"
        );
        deb
    })
}

/// A fresh root: an overlay of `/` whose changes land in `upper`, mounted only inside the
/// private mount namespaces that [`Root::sh`] makes.
struct Root {
    dir: PathBuf,
}

impl Root {
    fn new(name: &str) -> Root {
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ipl-deb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["upper", "work", "mnt"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        Root { dir }
    }

    fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// Runs `script` with the root mounted at `$ROOT` (with /dev and /proc), in a mount
    /// namespace that ends with it.
    fn sh(&self, script: &str) -> Output {
        let setup = format!(
            "set -e; ROOT={mnt}; mount -t overlay overlay -o lowerdir=/,upperdir={upper},workdir={work} $ROOT; \
             mount --rbind /dev $ROOT/dev; mount -t proc proc $ROOT/proc; export ROOT; {script}",
            mnt = self.dir.join("mnt").display(),
            upper = self.upper().display(),
            work = self.dir.join("work").display(),
        );
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "bash", "-c", &setup])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap()
    }

    fn run(&self, script: &str) -> String {
        ok(self.sh(script), script)
    }

    fn dpkg(&self, args: &str) -> String {
        self.run(&format!("dpkg --root=$ROOT {args}"))
    }

    /// Those of `paths` (absolute in the root) that exist there.
    fn existing(&self, paths: &[String]) -> Vec<String> {
        let quoted: Vec<String> = paths.iter().map(|p| format!("'{p}'")).collect();
        self.run(&format!(
            "for f in {}; do if test -e \"$ROOT$f\"; then echo \"$f\"; fi; done",
            quoted.join(" ")
        ))
        .lines()
        .map(str::to_string)
        .collect()
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Files (not directories) the package ships, absolute.
fn package_files(deb: &Path) -> Vec<String> {
    let listing = ok(
        Command::new("dpkg-deb").arg("-c").arg(deb).output().unwrap(),
        "dpkg-deb -c",
    );
    listing
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').to_string())
        .collect()
}

fn psk(root: &Root) -> (u32, String) {
    let path = root.upper().join("etc/ipsec-lab/psk");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    (mode, std::fs::read_to_string(&path).unwrap())
}

#[test]
fn the_package_lints_installs_works_and_removes_cleanly() {
    if !ready("deb-package") {
        return;
    }
    let deb = package();

    // lintian: clean but for the tags explained in debian/lintian-explained.
    let lint = Command::new("lintian")
        .args(["--no-tag-display-limit", "--suppress-tags-from-file"])
        .arg(Path::new(REPO).join("debian/lintian-explained"))
        .arg(deb)
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

    let root = Root::new("install");
    root.dpkg(&format!("-i {}", deb.display()));

    // What the user gets.
    let version = root.run("chroot $ROOT ipsec-lab --version");
    assert!(
        version.starts_with(&format!("ipsec-lab {}\n", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert!(
        version.contains("\ncommit: ") && !version.contains("commit: unknown"),
        "{version}"
    );
    assert!(
        version.contains("\nprofile: debug"),
        "built from the debug binary: {version}"
    );
    assert!(
        version.contains("aws-lc-rs 1.") && version.contains("snow 0."),
        "{version}"
    );
    let man = root.run(
        "chroot $ROOT env MANPAGER=cat MANWIDTH=100 man -l /usr/share/man/man1/ipsec-lab.1.gz; \
         chroot $ROOT env MANPAGER=cat MANWIDTH=100 man -l /usr/share/man/man1/ipsec-lab-serve.1.gz",
    );
    for says in [
        "ipsec-lab-completions(1)",
        "ipsec-lab-serve(1)",
        "--psk-file",
        "--max-bytes",
    ] {
        assert!(man.contains(says), "man pages lack {says:?}:\n{man}");
    }
    assert!(
        !man.contains("ipsec-lab-man"),
        "the hidden man command has no page:\n{man}"
    );
    let completion = "/usr/share/bash-completion/completions/ipsec-lab";
    root.run(&format!("chroot $ROOT bash -n {completion}"));
    // The completion really completes: `ipsec-lab se<TAB>` and `ipsec-lab run --ps<TAB>`.
    // The function is whatever `complete -F` registered for the command.
    let complete = r#"source COMPLETION; f=$(complete -p ipsec-lab | sed -n "s/.* -F \([^ ]*\) .*/\1/p");
        COMP_WORDS=(ipsec-lab se); COMP_CWORD=1; $f ipsec-lab se ipsec-lab; echo "${COMPREPLY[*]}";
        COMP_WORDS=(ipsec-lab run --ps); COMP_CWORD=2; $f ipsec-lab --ps run; echo "${COMPREPLY[*]}""#;
    let script = std::env::temp_dir().join(format!("ipl-deb-complete-{}.sh", std::process::id()));
    std::fs::write(&script, complete.replace("COMPLETION", completion)).unwrap();
    let completed = root.run(&format!("chroot $ROOT bash -s < {}", script.display()));
    std::fs::remove_file(&script).unwrap();
    let lines: Vec<&str> = completed.lines().collect();
    assert!(
        lines.first().is_some_and(|l| l.split(' ').any(|w| w == "serve")),
        "{completed}"
    );
    assert!(
        lines.get(1).is_some_and(|l| l.contains("--psk-file")),
        "{completed}"
    );
    let unit = root.run(&format!(
        "for d in /lib/systemd/system /usr/lib/systemd/system; do \
         test -e $ROOT$d/{UNIT} && echo $d/{UNIT}; done"
    ));
    let unit = unit.lines().next().expect("the unit is installed").to_string();
    root.run(&format!("chroot $ROOT systemd-analyze verify {unit}"));
    let security = root.run(&format!(
        "chroot $ROOT systemd-analyze security --offline=yes {unit} 2>&1"
    ));
    let exposure = security
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_default();
    eprintln!("{exposure}");
    assert!(
        exposure.contains(" OK") || exposure.contains("SAFE"),
        "{security}"
    );
    // Not enabled by the install: the key has to reach the client first.
    let wants = format!("/etc/systemd/system/multi-user.target.wants/{UNIT}");
    assert!(root.existing(&[wants]).is_empty(), "enabled on install");

    // The key: made by postinst, 0600, 64 hex digits; kept on reinstall and on remove.
    let (mode, key) = psk(&root);
    assert_eq!(mode, 0o600);
    assert!(
        key.trim().len() == 64 && key.trim().chars().all(|c| c.is_ascii_hexdigit()),
        "{key:?}"
    );
    root.dpkg(&format!("-i {}", deb.display()));
    assert_eq!(psk(&root), (0o600, key.clone()), "a reinstall changed the key");

    let files = package_files(deb);
    assert!(files.contains(&"/usr/bin/ipsec-lab".to_string()), "{files:?}");
    root.dpkg("-r ipsec-lab");
    let programs: Vec<String> = files
        .iter()
        .filter(|f| !f.starts_with("/etc/"))
        .cloned()
        .collect();
    assert_eq!(
        root.existing(&programs),
        Vec::<String>::new(),
        "left after dpkg -r"
    );
    assert_eq!(psk(&root), (0o600, key), "dpkg -r must keep the key");
    let conffile = "/etc/default/ipsec-lab-serve".to_string();
    assert_eq!(
        root.existing(std::slice::from_ref(&conffile)),
        [conffile],
        "conffiles stay until purge"
    );

    root.dpkg("--purge ipsec-lab");
    let mut everything = files.clone();
    everything.extend(["/etc/ipsec-lab/psk".to_string(), "/etc/ipsec-lab".to_string()]);
    assert_eq!(
        root.existing(&everything),
        Vec::<String>::new(),
        "left after dpkg --purge"
    );
    let status = root
        .run("dpkg-query --admindir=$ROOT/var/lib/dpkg -W -f='${db:Status-Abbrev}' ipsec-lab 2>&1 || true");
    assert!(!status.starts_with("ii"), "{status}");
}

/// `make install` and `make uninstall` with DESTDIR and PREFIX leave nothing behind.
#[test]
fn make_install_and_uninstall_under_destdir() {
    let dest = tempfile::tempdir().unwrap();
    let make = |target: &str| {
        Command::new("make")
            .current_dir(REPO)
            .args([target, "INSTALL_BUILD=", "PREFIX=/opt/ipl"])
            .arg(format!("BIN={}", env!("CARGO_BIN_EXE_ipsec-lab")))
            .arg(format!("DESTDIR={}", dest.path().display()))
            .output()
            .unwrap()
    };
    ok(make("install"), "make install");
    let prefix = dest.path().join("opt/ipl");
    for f in [
        "bin/ipsec-lab",
        "share/man/man1/ipsec-lab.1",
        "share/man/man1/ipsec-lab-run.1",
        "share/bash-completion/completions/ipsec-lab",
        "share/zsh/site-functions/_ipsec-lab",
        "share/fish/vendor_completions.d/ipsec-lab.fish",
    ] {
        assert!(prefix.join(f).is_file(), "{f} not installed");
    }
    let unit = std::fs::read_to_string(prefix.join("lib/systemd/system").join(UNIT)).unwrap();
    assert!(unit.contains("ExecStart=/opt/ipl/bin/ipsec-lab serve"), "{unit}");
    ok(make("uninstall"), "make uninstall");
    let left: Vec<_> = walk(dest.path()).into_iter().filter(|p| p.is_file()).collect();
    assert!(left.is_empty(), "left after make uninstall: {left:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// The installed unit's ExecStart, run the way the unit says (sandbox.sh applies its
/// restrictions), serves verified runs from the installed client, records the build on both
/// sides, stays within what the unit forbids, and stops cleanly on SIGTERM.
#[test]
fn the_installed_service_serves_a_peer_under_its_hardening() {
    if !ready("deb-service") || !testcap::tun("deb-service") {
        return;
    }
    let Some(lab) = Lab::new("deb-service") else {
        return;
    };
    let root = Root::new("service");
    root.dpkg(&format!("-i {}", package().display()));
    let trace = root.dir.join("serve.strace");
    serve_installed(&lab, &root.upper(), Some(&trace), &["plain", "userspace"]);
}

/// The xfrm backend (ESP SAs and policies) through the installed service, in a VM booting a
/// stock kernel with ESP: the host installs the package, the guest serves from its files.
#[test]
fn the_installed_service_carries_xfrm_in_a_vm() {
    if std::env::var_os(common::IN_VM).is_some() || !ready("deb-service-vm") {
        return;
    }
    let root = Root::new("vm");
    root.dpkg(&format!("-i {}", package().display()));
    // The guest sees this machine's files read-only: it finds the root through this file.
    std::fs::write(vm_root_pointer(), root.upper().display().to_string()).unwrap();
    common::run_guest_test("guest_installed_service_xfrm", Duration::from_secs(300));
}

fn vm_root_pointer() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("ipl-deb-vm-root")
}

#[test]
#[ignore = "runs inside the VM booted by the_installed_service_carries_xfrm_in_a_vm"]
fn guest_installed_service_xfrm() {
    let Some(lab) = Lab::new("deb-service-xfrm") else {
        return;
    };
    let upper = PathBuf::from(std::fs::read_to_string(vm_root_pointer()).unwrap());
    serve_installed(&lab, &upper, None, &["xfrm"]);
}

/// Serves `backends` (2 MB runs) from the installed unit's ExecStart under its hardening,
/// then checks the server's restrictions, its clean stop, and its trace against the unit.
/// With `trace`, under `strace -f` writing there, and checked against the unit's seccomp,
/// socket-family, namespace and W^X restrictions (too slow under TCG emulation).
fn serve_installed(lab: &Lab, upper: &Path, trace: Option<&Path>, backends: &[&str]) {
    let unit_path = ["lib/systemd/system", "usr/lib/systemd/system"]
        .iter()
        .map(|d| upper.join(d).join(UNIT))
        .find(|p| p.exists())
        .expect("the unit is installed");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    // ExecStart with the installed files' places in the upper layer and the flags the
    // environment file would give (this test's address).
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let installed = |p: &str| upper.join(p.trim_start_matches('/')).display().to_string();
    let mut argv: Vec<String> = Vec::new();
    for word in exec.split_whitespace() {
        match word {
            "$IPSEC_LAB_SERVE_ARGS" => argv.extend(["--listen".to_string(), SERVER.to_string()]),
            w if w.starts_with("/usr/") || w.starts_with("/etc/") => argv.push(installed(w)),
            w => argv.push(w.to_string()),
        }
    }
    let binary = argv[0].clone();
    // With the trace: a run killed before it removed its namespace, which serve's cleanup at
    // start must remove under the unit's restrictions (umount2, a writable /run/netns).
    let dead_run = trace.map(|_| DeadRun::plant());
    let mut command = match trace {
        Some(trace) => {
            let mut c = lab.topo().b.command("strace");
            c.args(["-f", "-q", "-o"]).arg(trace).arg("bash");
            c
        }
        None => lab.topo().b.command("bash"),
    };
    command
        .arg(format!("{REPO}/lab/deb/sandbox.sh"))
        .arg("--keep")
        .arg(upper)
        .arg(&unit_path)
        .arg("--")
        .args(&argv);
    // Under TCG emulation (the xfrm run's VM) the sandboxed start alone takes ~30 s.
    let server = lab.serve_command_within(command, Duration::from_secs(120));
    // Looked at now, asserted once the server is stopped: a failed assert with strace's
    // server still running would leave the test waiting on it.
    let dead_run_left = dead_run.as_ref().map(|dead| {
        (
            Path::new("/run/netns").join(&dead.namespace).exists(),
            server.log(),
        )
    });

    let key = upper.join("etc/ipsec-lab/psk");
    for &backend in backends {
        let mut client = lab.topo().a.command(&binary);
        client
            .args(["run", "--peer", SERVER, "--no-progress", "--psk-file"])
            .arg(&key)
            .args(["--backend", backend, "--bytes", "2MB", "--json", "-"]);
        let r = report(&client.output().unwrap());
        assert_eq!(r["transfers"][0]["verified"], true, "{backend}");
        for side in ["environment", "peer_environment"] {
            let build = &r[side]["build"];
            assert_eq!(build["profile"], "debug", "{side}: {build}");
            assert!(
                build["crypto_libraries"].as_str().unwrap().contains("aws-lc-rs"),
                "{build}"
            );
            assert_eq!(build["commit"], r["environment"]["build"]["commit"]);
        }
        lab.nothing_installed().unwrap();
    }

    // The server really ran restricted: capabilities as the unit bounds them, / read-only.
    let serve_pid = match trace {
        Some(trace) => traced_pid(trace, &binary),
        None => server.pid() as i32,
    };
    let status = std::fs::read_to_string(format!("/proc/{serve_pid}/status")).unwrap();
    let cap = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap()
    };
    let bounded: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("CapabilityBoundingSet")
        .split_whitespace()
        .map(|c| match c {
            "CAP_NET_ADMIN" => 1 << 12,
            "CAP_SYS_ADMIN" => 1 << 21,
            other => panic!("teach the test {other}'s bit"),
        })
        .sum();
    assert_eq!((cap("CapEff:"), cap("CapBnd:")), (bounded, bounded), "{status}");
    let mounts = std::fs::read_to_string(format!("/proc/{serve_pid}/mountinfo")).unwrap();
    let root_mount = mounts.lines().find(|l| l.split(' ').nth(4) == Some("/")).unwrap();
    assert!(
        root_mount
            .split(' ')
            .nth(5)
            .unwrap()
            .split(',')
            .any(|o| o == "ro"),
        "{root_mount}"
    );

    // SIGTERM to the server (strace's child): it ends cleanly.
    let Some(trace) = trace else {
        let mut server = server;
        let status = server.stop();
        assert!(status.success(), "{status:?}: {}", server.log());
        assert!(server.log().contains("stopping"), "{}", server.log());
        lab.nothing_installed().unwrap();
        return;
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(serve_pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let start = Instant::now();
    let exit_of = |t: &str| {
        t.lines().find_map(|l| {
            let (pid, rest) = l.split_once(' ')?;
            (pid == serve_pid.to_string()).then_some(())?;
            rest.trim_start()
                .strip_prefix("+++ exited with ")
                .map(str::to_string)
        })
    };
    let trace_text = loop {
        let t = std::fs::read_to_string(trace).unwrap_or_default();
        if exit_of(&t).is_some() {
            break t;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            panic!(
                "serve ({serve_pid}) did not stop:\n{}\ntrace ends:\n{tail:#?}",
                server.log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(exit_of(&trace_text).as_deref(), Some("0 +++"), "{}", server.log());
    drop(server);
    lab.nothing_installed().unwrap();

    // What the sandbox could not apply, checked against what the server did.
    let calls = service_syscalls(&trace_text, serve_pid, &binary);
    if let (Some(dead), Some((left, start_log))) = (&dead_run, &dead_run_left) {
        assert!(
            !left,
            "serve left the dead run's namespace {}: {start_log}",
            dead.namespace
        );
        // make test runs another test binary beside this one, and any lab process that
        // cleans up dead runs may take the planted one first (seen once in CI): its
        // namespace is gone then, but not by serve's hand, and there is nothing to check.
        if start_log.contains(&format!("removed namespace {}", dead.namespace)) {
            let unmount = format!("\"/run/netns/{}\"", dead.namespace);
            assert!(
                calls
                    .iter()
                    .any(|c| c.name == "umount2" && c.args.starts_with(&unmount)),
                "serve's cleanup did not unmount {unmount} itself"
            );
        } else {
            eprintln!(
                "another lab process removed the planted dead run before serve started: \
                 serve's cleanup under the unit's restrictions is not checked this time"
            );
        }
    }
    // The trace saw the work: netlink and inet sockets, the TUN device's ioctl.
    assert!(calls
        .iter()
        .any(|c| c.name == "socket" && c.args.starts_with("AF_NETLINK")));
    if backends.contains(&"userspace") {
        assert!(calls
            .iter()
            .any(|c| c.name == "ioctl" && c.args.contains("TUNSETIFF")));
    }
    if backends.contains(&"xfrm") {
        assert!(calls
            .iter()
            .any(|c| c.name == "socket" && c.args.contains("NETLINK_XFRM")));
    }
    let filters: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("SystemCallFilter="))
        .collect();
    let allowed = allowed_syscalls(&filters);
    let outside: BTreeSet<&str> = calls
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| !allowed.contains(*n))
        .collect();
    assert!(
        outside.is_empty(),
        "syscalls outside SystemCallFilter={filters:?}: {outside:?}"
    );
    let families: Vec<&str> = unit
        .lines()
        .find_map(|l| l.strip_prefix("RestrictAddressFamilies="))
        .expect("RestrictAddressFamilies")
        .split_whitespace()
        .collect();
    for call in calls
        .iter()
        .filter(|c| c.name == "socket" || c.name == "socketpair")
    {
        let family = call.args.split(',').next().unwrap_or_default().trim();
        assert!(
            families.contains(&family),
            "{} outside RestrictAddressFamilies",
            call.line
        );
    }
    // RestrictNamespaces=yes: no namespace calls; =net: only network namespaces.
    let namespaces = unit
        .lines()
        .find_map(|l| l.strip_prefix("RestrictNamespaces="))
        .expect("RestrictNamespaces");
    let allowed_ns: Vec<String> = match namespaces {
        "yes" => vec![],
        list => list
            .split_whitespace()
            .map(|n| format!("CLONE_NEW{}", n.to_uppercase()))
            .collect(),
    };
    for call in &calls {
        let flags: Vec<&str> = call
            .args
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("CLONE_NEW"))
            .collect();
        let bare = matches!(call.name.as_str(), "setns" | "unshare") && flags.is_empty();
        assert!(
            !bare && flags.iter().all(|f| allowed_ns.iter().any(|a| a == f)),
            "RestrictNamespaces={namespaces} forbids {}",
            call.line
        );
    }
    if unit.contains("\nMemoryDenyWriteExecute=yes") {
        for call in calls.iter().filter(|c| c.name == "mmap" || c.name == "mprotect") {
            assert!(
                !(call.args.contains("PROT_WRITE") && call.args.contains("PROT_EXEC")),
                "MemoryDenyWriteExecute=yes forbids {}",
                call.line
            );
        }
    }
}

/// A run that died and left a namespace recorded in its state file, as `clean` finds one:
/// the namespace made with `ip netns add` (so no live process records it), the state file
/// written by hand under a pid that has exited (its lock free).
struct DeadRun {
    namespace: String,
    state: PathBuf,
}

impl DeadRun {
    fn plant() -> DeadRun {
        let namespace = format!("ipl-dead-{}", netns::new_run_id());
        ok(
            Command::new("ip")
                .args(["netns", "add", &namespace])
                .output()
                .unwrap(),
            "ip netns add",
        );
        let mut gone = Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        let state = Path::new("/run/ipsec-lab").join(format!("{pid}-1.json"));
        let doc = serde_json::json!({
            "version": 1,
            "owner": { "pid": pid, "start_time": 1, "command": "ipsec-lab run (killed, planted by deb_package.rs)" },
            "records": [{ "kind": "namespace", "name": namespace }],
        });
        std::fs::write(&state, doc.to_string()).unwrap();
        DeadRun { namespace, state }
    }
}

impl Drop for DeadRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.state);
        let _ = std::fs::remove_file(self.state.with_extension("lock"));
        if Path::new("/run/netns").join(&self.namespace).exists() {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.namespace])
                .output();
        }
    }
}

/// The pid that exec'd `binary` in a `strace -f` log.
fn traced_pid(trace: &Path, binary: &str) -> i32 {
    let needle = format!("execve(\"{binary}\"");
    let text = std::fs::read_to_string(trace).unwrap();
    text.lines()
        .filter(|l| l.contains(&needle) && l.ends_with("= 0"))
        .find_map(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exec of {binary} in the trace"))
}

struct Call {
    name: String,
    args: String,
    line: String,
}

/// Every system call made after `pid` exec'd `binary`: the sandbox's own processes ended
/// before that, so every later line is the service's (its threads and children).
fn service_syscalls(trace: &str, pid: i32, binary: &str) -> Vec<Call> {
    let exec = format!("execve(\"{binary}\"");
    let start = trace
        .lines()
        .position(|l| {
            l.split_once(' ')
                .is_some_and(|(who, rest)| who == pid.to_string() && rest.trim_start().starts_with(&exec))
                && l.ends_with("= 0")
        })
        .expect("the service's exec is in the trace");
    let mut calls = Vec::new();
    for line in trace.lines().skip(start + 1) {
        let Some((_, rest)) = line.split_once(' ') else {
            continue;
        };
        // "<... socket resumed>...": the second half of a call another thread interrupted;
        // its name and arguments are on the "<unfinished ...>" line before.
        let rest = rest.trim_start();
        if rest.starts_with("<... ") {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        calls.push(Call {
            args: rest[name.len()..].trim_start_matches('(').to_string(),
            name,
            line: line.to_string(),
        });
    }
    calls
}

/// System calls `SystemCallFilter=` lines allow, from systemd's own group lists.
fn allowed_syscalls(filters: &[&str]) -> BTreeSet<String> {
    let listing = ok(
        Command::new("systemd-analyze")
            .arg("syscall-filter")
            .output()
            .unwrap(),
        "systemd-analyze syscall-filter",
    );
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in listing.lines() {
        if let Some(group) = line.strip_prefix('@') {
            current = Some(format!("@{}", group.trim()));
            groups.entry(current.clone().unwrap()).or_default();
        } else if let (Some(g), Some(entry)) = (&current, line.strip_prefix("    ")) {
            if !entry.starts_with('#') && !entry.trim().is_empty() {
                groups.get_mut(g).unwrap().push(entry.trim().to_string());
            }
        }
    }
    fn expand(entry: &str, groups: &BTreeMap<String, Vec<String>>, out: &mut BTreeSet<String>) {
        match groups.get(entry) {
            Some(members) => members.iter().for_each(|m| expand(m, groups, out)),
            None => {
                out.insert(entry.to_string());
            }
        }
    }
    let mut allowed = BTreeSet::new();
    let mut denied = BTreeSet::new();
    for filter in filters {
        let (deny, list) = match filter.strip_prefix('~') {
            Some(list) => (true, list),
            None => (false, *filter),
        };
        for entry in list.split_whitespace() {
            expand(entry, &groups, if deny { &mut denied } else { &mut allowed });
        }
    }
    allowed.retain(|c| !denied.contains(c));
    assert!(
        allowed.contains("read") && allowed.contains("socket"),
        "{allowed:?}"
    );
    allowed
}
