//! User-mode Linux: a Linux kernel built as an ordinary program (Debian's `user-mode-linux`,
//! `/usr/bin/linux.uml`, its modules under `/usr/lib/uml/modules/RELEASE`). Its own code runs
//! at native instruction speed with no KVM and no emulation, so a kernel ESP figure from it
//! is a real one where this host's kernel has no ESP and KVM cannot boot a stock kernel. It
//! has one CPU and only the generic C crypto drivers (no AES-NI), and no WireGuard.
//!
//! The guest's root is this host's `/` through hostfs, read-only; it writes only to tmpfs
//! mounts of its own and to the run's private directory, mounted read-write. It loads its
//! modules from the package (a tmpfs over `/lib/modules` inside the guest: the host's layout
//! is untouched), runs this binary on the validated plan it is handed as a file, and halts;
//! its exit code and report come back through that directory.
//!
//! Leaves out: the run itself (it is `ipsec-lab run` again, inside) and what a stock kernel
//! in a VM does ([`crate::vm`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use model::{RunPlan, RunReport};

use crate::child::{Child, ExitCodeFrom, Output};
use crate::error::{LabError, LabResult};

/// Where Debian's package puts the kernel and its modules.
pub const LINUX_UML: &str = "/usr/bin/linux.uml";
pub const MODULES: &str = "/usr/lib/uml/modules";

/// The environment's name in the report: not emulated, but not this host's kernel either.
pub const VIRT_UML: &str = "uml (user-mode Linux: native speed, 1 CPU, generic C crypto)";

/// Memory the guest gets; a run's sockets and the payload buffers fit in far less.
const MEMORY: &str = "mem=1G";

/// Modules a run may need; those built in or missing are skipped.
const MODULES_TO_LOAD: &str =
    "esp4 esp6 xfrm_user xfrm4_tunnel xfrm6_tunnel tunnel4 tunnel6 af_key veth tun \
                               sch_netem af_alg algif_skcipher algif_hash algif_aead authenc authencesn gcm \
                               ccm chacha20poly1305 crypto_user pcrypt";

const REPORT_FILE: &str = "report.json";
const RC_FILE: &str = "rc";
const INIT_FILE: &str = "init.sh";
/// Where the guest mounts the run's private directory.
const GUEST_DIR: &str = "/run/ipsec-lab-uml";
/// Where the guest mounts this binary's directory, read-only: its own path may lie under
/// /tmp (a checkout there), which the guest's tmpfs hides.
const GUEST_BIN: &str = "/run/ipsec-lab-uml-bin";

/// The installed UML kernel: its binary and the release its modules are for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UmlKernel {
    pub binary: PathBuf,
    pub release: String,
}

impl UmlKernel {
    /// The package's kernel, where it is installed with its modules.
    pub fn installed() -> Option<UmlKernel> {
        let binary = PathBuf::from(LINUX_UML);
        if !binary.is_file() {
            return None;
        }
        // One release per package version; the newest where an upgrade left two.
        let mut releases: Vec<String> = std::fs::read_dir(MODULES)
            .ok()?
            .flatten()
            .filter(|e| e.path().join("kernel").is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        releases.sort();
        Some(UmlKernel {
            binary,
            release: releases.pop()?,
        })
    }

    /// The kernel, or what to do to have it.
    pub fn require() -> LabResult<UmlKernel> {
        UmlKernel::installed().ok_or_else(|| {
            LabError::capability(anyhow::anyhow!(
                "--vm uml needs Debian's user-mode-linux ({LINUX_UML} and its modules in {MODULES}): \
                 apt-get install user-mode-linux (make setup installs it)"
            ))
        })
    }
}

/// The guest's init: its own /proc, /sys, /dev, /run and /tmp; the package's modules at
/// /lib/modules/RELEASE; the run's directory read-write and this binary's read-only; then
/// the run, its exit code, halt.
pub fn init_script(kernel: &UmlKernel, outdir: &Path, exe: &Path, args: &[String]) -> String {
    let q = |s: &str| sh_quote(s);
    let exe_dir = exe.parent().unwrap_or(Path::new("/"));
    let exe_name = exe
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut run = vec![format!("{GUEST_BIN}/{}", q(&exe_name))];
    run.extend(args.iter().map(|a| q(a)));
    format!(
        "#!/bin/sh\n\
         # Made by ipsec-lab for one run in user-mode Linux; removed with its directory.\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n\
         mount -t devtmpfs dev /dev\n\
         mount -t tmpfs run /run\n\
         mount -t tmpfs tmp /tmp\n\
         mkdir -p {guest} {bin} /run/netns\n\
         mount -t hostfs host {guest} -o {outdir}\n\
         mount -r -t hostfs host {bin} -o {exe_dir}\n\
         mount -t tmpfs modules /lib/modules\n\
         mkdir -p /lib/modules/{release}\n\
         mount --bind {modules}/{release} /lib/modules/{release}\n\
         modprobe -q -a {load} 2>/dev/null\n\
         IPSEC_LAB_VIRT={virt} TMPDIR=/tmp {run} >/dev/null 2>{guest}/stderr\n\
         echo $? > {guest}/{rc}\n\
         halt -f\n",
        guest = GUEST_DIR,
        bin = GUEST_BIN,
        exe_dir = q(&exe_dir.display().to_string()),
        release = kernel.release,
        outdir = q(&outdir.display().to_string()),
        modules = MODULES,
        load = MODULES_TO_LOAD,
        virt = q(VIRT_UML),
        run = run.join(" "),
        rc = RC_FILE,
    )
}

/// The `linux.uml` command line booting `init` with the host's `/` read-only.
pub fn command(kernel: &UmlKernel, init: &Path) -> Command {
    let mut c = Command::new(&kernel.binary);
    c.args([
        MEMORY,
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "ro",
        // Its console goes to its stdout, which the lab discards; nothing reads a terminal.
        "con=null",
        "con0=null,fd:1",
    ]);
    c.arg(format!("init={}", init.display()));
    c
}

/// Runs `plan` in user-mode Linux and returns the report the guest wrote.
pub fn run_in_uml(plan: &RunPlan) -> LabResult<RunReport> {
    let kernel = UmlKernel::require()?;
    let outdir = owner::PrivateDir::new("ipsec-lab-uml-")?;
    // The same run, placed in the guest's own namespaces.
    crate::child::write_plan(&outdir, &plan.with_placement(model::Placement::Local))?;
    let exe = std::env::current_exe().map_err(LabError::failed)?;
    let args: Vec<String> = [
        "run",
        "--plan-file",
        &format!("{GUEST_DIR}/{}", crate::child::PLAN_FILE),
        "--no-progress",
        "--json",
        &format!("{GUEST_DIR}/{REPORT_FILE}"),
    ]
    .map(String::from)
    .to_vec();
    let init = outdir.join(INIT_FILE);
    write_init(&init, &init_script(&kernel, outdir.path(), &exe, &args))?;
    let child = Child {
        name: "the run inside user-mode Linux",
        command: command(&kernel, &init),
        exit_code: ExitCodeFrom::File(RC_FILE),
        report: REPORT_FILE,
        output: Output::Discard,
        // Boot is about 2 s; the run's own length is the payload at UML's speed, with room.
        timeout: Some(BOOT_AND_HALT + run_budget(plan)),
    };
    eprintln!(
        "ipsec-lab: running in user-mode Linux {} ({}; native speed, 1 CPU)",
        kernel.release,
        kernel.binary.display()
    );
    let finished = crate::child::run_blocking(child, &outdir)?;
    let elapsed = finished.elapsed;
    let mut report: RunReport = finished.succeeded().map_err(|e| with_guest_stderr(e, &outdir))?;
    report.notes.push(format!(
        "ran in user-mode Linux {} (a kernel running as a process at native speed, one CPU, generic C \
         crypto drivers); boot, run and halt took {:.1} s",
        kernel.release,
        elapsed.as_secs_f64()
    ));
    Ok(report)
}

/// Boot, module loading and halt take about 2 s; the rest is room on a loaded machine.
const BOOT_AND_HALT: Duration = Duration::from_secs(60);

/// How long the run itself may take inside: every transfer at 1 MB/s (UML's ESP moves
/// 40-100 MB/s here), the line rate and the ceiling after them, with room to spare.
fn run_budget(plan: &RunPlan) -> Duration {
    let w = plan.workload();
    let per_transfer_s = match w.modes.time_s {
        Some(t) => t + w.modes.omit_s,
        None => w.bytes.0 as f64 / 1e6,
    };
    let transfers = f64::from(w.repeat) * if plan.times_ceiling() { 2.0 } else { 1.0 };
    Duration::from_secs_f64(per_transfer_s * transfers + 30.0)
}

/// The guest's init, executable by root only (its directory is private already).
fn write_init(path: &Path, script: &str) -> LabResult<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(path)
        .map_err(LabError::failed)?;
    f.write_all(script.as_bytes()).map_err(LabError::failed)
}

/// A failed guest's own words, where it left any.
fn with_guest_stderr(e: LabError, outdir: &owner::PrivateDir) -> LabError {
    let said = std::fs::read_to_string(outdir.join("stderr")).unwrap_or_default();
    let said = said.trim();
    if said.is_empty() {
        return e;
    }
    let kind = e.kind;
    LabError::new(kind, anyhow::anyhow!("{e:#}; the run inside said: {said}"))
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_mounts_its_own_dirs_and_the_package_modules_and_runs_the_plan() {
        let kernel = UmlKernel {
            binary: LINUX_UML.into(),
            release: "6.1.176".into(),
        };
        let s = init_script(
            &kernel,
            Path::new("/tmp/ipsec-lab-uml-x"),
            Path::new("/tmp/checkout/target/debug/ipsec-lab"),
            &[
                "run".into(),
                "--plan-file".into(),
                "/run/ipsec-lab-uml/plan.json".into(),
            ],
        );
        for line in [
            "mount -t devtmpfs dev /dev",
            "mount -t hostfs host /run/ipsec-lab-uml -o '/tmp/ipsec-lab-uml-x'",
            "mount --bind /usr/lib/uml/modules/6.1.176 /lib/modules/6.1.176",
            // The binary from its own directory, which may be under the guest's /tmp.
            "mount -r -t hostfs host /run/ipsec-lab-uml-bin -o '/tmp/checkout/target/debug'",
            "/run/ipsec-lab-uml-bin/'ipsec-lab' 'run' '--plan-file' '/run/ipsec-lab-uml/plan.json'",
            "echo $? > /run/ipsec-lab-uml/rc",
            "halt -f",
        ] {
            assert!(s.contains(line), "{line:?} not in\n{s}");
        }
        // The host's / stays read-only; only the run's directory is mounted read-write.
        let c = command(&kernel, Path::new("/tmp/ipsec-lab-uml-x/init.sh"));
        let args: Vec<_> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(args.contains(&"ro".to_string()), "{args:?}");
        assert!(args.contains(&"init=/tmp/ipsec-lab-uml-x/init.sh".to_string()));
    }

    #[test]
    fn quotes_survive_the_guest_shell() {
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
    }
}
