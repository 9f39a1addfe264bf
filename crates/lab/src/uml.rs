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

use crate::child::{sh_quote, Child, ExitCodeFrom, Output};
use crate::error::{LabError, LabResult};

/// Where Debian's package puts the kernel and its modules.
pub const LINUX_UML: &str = "/usr/bin/linux.uml";
pub const MODULES: &str = "/usr/lib/uml/modules";
/// Where `lab/second-uml.sh` puts further kernels: `RELEASE/linux.uml` (pointed at its own
/// C library beside it) and `RELEASE/modules/RELEASE`.
pub const MORE_UMLS: &str = "/var/lib/ipsec-lab/uml";

/// The environment's name in the report: not emulated, but not this host's kernel either.
pub const VIRT_UML: &str = "uml (user-mode Linux: native speed, 1 CPU, generic C crypto)";

/// Whether a kernel runs processes here: `lab/uml-probe.sh`, the one probe `lab/setup.sh`
/// runs too (a boot of `/bin/true`, about a second, at most 30).
const PROBE: &str = include_str!("../../../lab/uml-probe.sh");

/// Memory a guest gets unless it asks for more; a run's sockets and the payload buffers fit
/// in far less.
pub const MEMORY_MIB: u64 = 1024;

/// Modules a run may need; those built in or missing are skipped.
const MODULES_TO_LOAD: &str =
    "esp4 esp6 xfrm_user xfrm4_tunnel xfrm6_tunnel tunnel4 tunnel6 af_key veth tun \
                               sch_netem af_alg algif_skcipher algif_hash algif_aead authenc authencesn gcm \
                               ccm chacha20poly1305 crypto_user pcrypt";

const REPORT_FILE: &str = "report.json";
const RC_FILE: &str = "rc";
const INIT_FILE: &str = "init.sh";
/// Where the guest's command writes its stderr, in the shared directory, when its console
/// is not shown.
const STDERR_FILE: &str = "stderr";

/// An installed UML kernel: its binary, the release its modules are for, and the directory
/// holding `RELEASE/` with those modules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UmlKernel {
    pub binary: PathBuf,
    pub release: String,
    pub modules: PathBuf,
}

impl UmlKernel {
    /// The kernel `--vm uml` boots: the package's where it runs on this host, else the
    /// newest of the others that does (see [`UmlKernel::runs_here`]).
    pub fn installed() -> Option<UmlKernel> {
        UmlKernel::package()
            .into_iter()
            .chain(UmlKernel::more().into_iter().rev())
            .find(|k| k.runs_here().is_ok())
    }

    /// Whether this kernel's processes run on this host. Kernels before 7.x hand ptrace a
    /// register area of the size they know; on a CPU with a larger XSAVE area (AVX-512)
    /// the host refuses it, and every process in the guest dies at its first system call
    /// ("ptrace set fp regs failed, errno = 14"). One boot of `/bin/true` ([`PROBE`])
    /// tells, once per kernel and process.
    pub fn runs_here(&self) -> Result<(), String> {
        static PROBED: std::sync::Mutex<Vec<(PathBuf, Result<(), String>)>> =
            std::sync::Mutex::new(Vec::new());
        let mut probed = PROBED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, known)) = probed.iter().find(|(b, _)| *b == self.binary) {
            return known.clone();
        }
        let outcome = self.probe();
        probed.push((self.binary.clone(), outcome.clone()));
        outcome
    }

    fn probe(&self) -> Result<(), String> {
        let out = Command::new("sh")
            .args(["-c", PROBE, "uml-probe.sh"])
            .arg(&self.binary)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("sh (probing {}): {e}", self.binary.display()))?;
        match out.status.success() {
            true => Ok(()),
            false => Err(format!(
                "user-mode Linux {} {}",
                self.release,
                String::from_utf8_lossy(&out.stdout).trim()
            )),
        }
    }

    /// The package's kernel, where it is installed with its modules.
    pub fn package() -> Option<UmlKernel> {
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
            modules: MODULES.into(),
        })
    }

    /// Whether the kernel ships module `name` (its modules.dep lists `.../name.ko`).
    pub fn has_module(&self, name: &str) -> bool {
        let dep = self.modules.join(&self.release).join("modules.dep");
        let wanted = format!("/{name}.ko");
        std::fs::read_to_string(dep).is_ok_and(|text| {
            text.lines()
                .filter_map(|l| l.split(':').next())
                .any(|m| m.ends_with(&wanted) || m.contains(&format!("{wanted}.")))
        })
    }

    /// Every UML kernel here, the package's first, whether or not it runs on this host.
    pub fn all() -> Vec<UmlKernel> {
        UmlKernel::package()
            .into_iter()
            .chain(UmlKernel::more())
            .collect()
    }

    /// The kernels `lab/second-uml.sh` installed, by release.
    fn more() -> Vec<UmlKernel> {
        let mut out: Vec<UmlKernel> = std::fs::read_dir(MORE_UMLS)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let release = e.file_name().into_string().ok()?;
                let dir = e.path();
                let kernel = UmlKernel {
                    binary: dir.join("linux.uml"),
                    modules: dir.join("modules"),
                    release,
                };
                let complete = kernel.binary.is_file()
                    && kernel.modules.join(&kernel.release).join("modules.dep").is_file();
                complete.then_some(kernel)
            })
            .collect();
        out.sort_by(|a, b| a.release.cmp(&b.release));
        out
    }

    /// The kernel `--vm uml` (None: the package's) or `--vm uml:RELEASE` names, or what to
    /// do to have it.
    pub fn require(release: Option<&str>) -> LabResult<UmlKernel> {
        let all = UmlKernel::all();
        let Some(release) = release else {
            return UmlKernel::installed().ok_or_else(|| match all.first() {
                None => LabError::capability(anyhow::anyhow!(
                    "--vm uml needs Debian's user-mode-linux ({LINUX_UML} and its modules in {MODULES}): \
                     apt-get install user-mode-linux (make setup installs it)"
                )),
                Some(k) => LabError::capability(anyhow::anyhow!(
                    "{}; no other user-mode Linux here runs either: lab/second-uml.sh installs Debian sid's \
                     (7.x), which does (make setup-test runs it)",
                    k.runs_here().err().unwrap_or_default()
                )),
            });
        };
        let found = all.iter().find(|k| k.release == release).cloned();
        if let Some(kernel) = &found {
            if let Err(why) = kernel.runs_here() {
                let runs: Vec<String> = all
                    .iter()
                    .filter(|k| k.runs_here().is_ok())
                    .map(|k| format!("uml:{}", k.release))
                    .collect();
                return Err(LabError::capability(anyhow::anyhow!(
                    "--vm uml:{release}: {why}; use one that runs here ({})",
                    match runs.is_empty() {
                        true => "none: lab/second-uml.sh installs Debian sid's".to_string(),
                        false => runs.join(", "),
                    }
                )));
            }
        }
        found.ok_or_else(|| {
            let have: Vec<String> = all.iter().map(|k| format!("uml:{}", k.release)).collect();
            LabError::usage(anyhow::anyhow!(
                "--vm uml:{release}: no such user-mode Linux kernel (here: {}); lab/second-uml.sh installs \
                 Debian trixie's into {MORE_UMLS}",
                match have.is_empty() {
                    true => "none".to_string(),
                    false => have.join(", "),
                }
            ))
        })
    }
}

/// One boot: what the guest sees of this host and the one command it runs. Host paths keep
/// their names inside, so a command's arguments need no translating.
#[derive(Debug, Clone)]
pub struct Guest {
    pub kernel: UmlKernel,
    /// Shared read-write: the command's input and output, its exit code (`rc`).
    pub shared: PathBuf,
    /// Host directories the guest must see although its own tmpfs covers /tmp and /run
    /// (a checkout under /tmp, the directory of the binary), read-only.
    pub read_only: Vec<PathBuf>,
    /// `NAME=value` pairs the command runs with, besides `IPSEC_LAB_VIRT` and `TMPDIR`.
    pub env: Vec<String>,
    /// The guest's memory (`mem=`), in MiB: [`MEMORY_MIB`], or what `setup-rate`'s largest
    /// table needs.
    pub memory_mib: u64,
    /// Modules loaded besides those a run may need (a sweep's second `cbc(aes)` driver,
    /// `aes_ti`, which a run leaves out: loaded, it may serve the SAs in place of
    /// aes-generic, the driver a stock kernel uses).
    pub extra_modules: Vec<&'static str>,
    pub command: Vec<String>,
    /// Where the command starts (default: `/`).
    pub cwd: Option<PathBuf>,
    /// The command's output on the console (the guest's stdout); else stdout is dropped
    /// and stderr kept in the shared directory for the error message.
    pub console: bool,
}

impl Guest {
    /// The guest's init: its own /proc, /sys, /dev, /run and /tmp; the package's modules at
    /// /lib/modules/RELEASE (the host's layout is untouched); the host directories at
    /// their own paths; then the command, its exit code, halt.
    pub fn init_script(&self) -> String {
        let q = |p: &Path| sh_quote(&p.display().to_string());
        // Parents before what lies inside them, so no mount hides another.
        let mut mounts: Vec<(&Path, bool)> = self.read_only.iter().map(|p| (p.as_path(), false)).collect();
        mounts.push((&self.shared, true));
        mounts.sort_by_key(|(p, _)| p.components().count());
        let mounts: String = mounts
            .iter()
            .map(|(p, rw)| {
                let ro = if *rw { "" } else { "-r " };
                format!("mkdir -p {p} && mount {ro}-t hostfs host {p} -o {p}\n", p = q(p))
            })
            .collect();
        let shared = |file: &str| q(&self.shared.join(file));
        let output = match self.console {
            true => "2>&1".to_string(),
            false => format!(">/dev/null 2>{}", shared(STDERR_FILE)),
        };
        let command: Vec<String> = self.command.iter().map(|a| sh_quote(a)).collect();
        let env: Vec<String> = self.env.iter().map(|e| sh_quote(e)).collect();
        format!(
            "#!/bin/sh\n\
             # Made by ipsec-lab for one boot of user-mode Linux; removed with its directory.\n\
             # The kernel starts init with no PATH; the run and its tests call modprobe, ip, charon.\n\
             export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
             mount -t proc proc /proc\n\
             mount -t sysfs sys /sys\n\
             mountpoint -q /dev || mount -t devtmpfs dev /dev\n\
             mount -t tmpfs run /run\n\
             mount -t tmpfs tmp /tmp\n\
             mkdir -p /run/netns\n\
             # Reports name the host they ran on; the kernel's own name is \"(none)\".\n\
             hostname uml-{release}\n\
             {mounts}\
             mount -t tmpfs modules /lib/modules\n\
             mkdir -p /lib/modules/{release}\n\
             mount --bind {modules} /lib/modules/{release}\n\
             modprobe -q -a {load}{extra} 2>/dev/null\n\
             cd {cwd} && env IPSEC_LAB_VIRT={virt} TMPDIR=/tmp {env}{command} {output}\n\
             echo $? > {rc}\n\
             halt -f\n",
            release = self.kernel.release,
            modules = q(&self.kernel.modules.join(&self.kernel.release)),
            load = MODULES_TO_LOAD,
            extra = self
                .extra_modules
                .iter()
                .map(|m| format!(" {m}"))
                .collect::<String>(),
            virt = sh_quote(VIRT_UML),
            env = env.iter().map(|e| format!("{e} ")).collect::<String>(),
            command = command.join(" "),
            cwd = q(self.cwd.as_deref().unwrap_or(Path::new("/"))),
            rc = shared(RC_FILE),
        )
    }

    /// Writes the init into the shared directory and returns the `linux.uml` command line
    /// booting it with the host's `/` read-only.
    pub fn command(&self) -> LabResult<Command> {
        // hostfs takes the host path as a mount option, and options end at a comma.
        if let Some(p) = self
            .read_only
            .iter()
            .chain([&self.shared])
            .find(|p| p.to_string_lossy().contains(','))
        {
            return Err(LabError::usage(anyhow::anyhow!(
                "{} has a comma, which user-mode Linux's hostfs cannot mount; set TMPDIR (or move the \
                 checkout) to a path without one",
                p.display()
            )));
        }
        let init = self.shared.join(INIT_FILE);
        write_init(&init, &self.init_script())?;
        let mut c = Command::new(&self.kernel.binary);
        c.arg(format!("mem={}M", self.memory_mib));
        c.args([
            "root=/dev/root",
            "rootfstype=hostfs",
            "rootflags=/",
            "ro",
            // The kernel's own messages (tcrypt's hundreds of lines and its errors for the
            // templates it skips) stay in its log; only alerts reach the console.
            "loglevel=2",
            // Its console goes to its stdout; nothing reads a terminal.
            "con=null",
            "con0=null,fd:1",
        ]);
        c.arg(format!("init={}", init.display()));
        Ok(c)
    }

    /// This binary re-run inside with `args` and `--json` into the shared directory, the
    /// exit code and report read back through [`crate::child`]; no timeout unless the
    /// caller sets one.
    pub fn of_this_binary(kernel: UmlKernel, shared: &Path, args: &[String]) -> LabResult<Guest> {
        let exe = std::env::current_exe().map_err(LabError::failed)?;
        let mut command = vec![exe.display().to_string()];
        command.extend_from_slice(args);
        command.extend(["--json".into(), shared.join(REPORT_FILE).display().to_string()]);
        Ok(Guest {
            kernel,
            shared: shared.to_path_buf(),
            read_only: exe.parent().map(Path::to_path_buf).into_iter().collect(),
            memory_mib: MEMORY_MIB,
            env: Vec::new(),
            extra_modules: Vec::new(),
            command,
            cwd: None,
            console: false,
        })
    }

    /// The [`Child`] that boots this guest, named `name` in messages.
    pub fn child<'a>(&self, name: &'a str) -> LabResult<Child<'a>> {
        Ok(Child {
            name,
            command: self.command()?,
            exit_code: ExitCodeFrom::File(RC_FILE),
            report: REPORT_FILE,
            output: Output::Hidden,
            timeout: None,
        })
    }
}

/// Runs `plan` in user-mode Linux and returns the report the guest wrote.
pub fn run_in_uml(plan: &RunPlan) -> LabResult<RunReport> {
    let release = match plan.vm() {
        Some(model::VmKernel::Uml(release)) => release.as_deref(),
        _ => None,
    };
    let kernel = UmlKernel::require(release)?;
    let outdir = owner::PrivateDir::new("ipsec-lab-uml-")?;
    // The same run, placed in the guest's own namespaces.
    let plan_file = crate::child::write_plan(&outdir, &plan.with_placement(model::Placement::Local))?;
    let args = crate::child::guest_run_args(&plan_file);
    eprintln!(
        "ipsec-lab: running in user-mode Linux {} ({}; native speed, 1 CPU)",
        kernel.release,
        kernel.binary.display()
    );
    let release = kernel.release.clone();
    // The package's kernel passed over because it cannot run here: said, not hidden.
    let passed_over = UmlKernel::package()
        .filter(|p| p.binary != kernel.binary)
        .and_then(|p| p.runs_here().err());
    // Boot is about 2 s; the run's own length is the payload at UML's speed, with room.
    let timeout = BOOT_AND_HALT + run_budget(plan);
    let (mut report, elapsed): (RunReport, Duration) =
        run_this_binary(kernel, &outdir, &args, "the run inside user-mode Linux", timeout)?;
    report.notes.push(format!(
        "ran in user-mode Linux {release} (a kernel running as a process at native speed, one CPU, generic C \
         crypto drivers); boot, run and halt took {:.1} s",
        elapsed.as_secs_f64()
    ));
    if let Some(why) = passed_over {
        report.notes.push(format!("{why}: ran {release} instead"));
    }
    Ok(report)
}

/// One boot of `kernel` running this binary with `args` (which may name files in `outdir`,
/// the directory shared with the guest), for at most `timeout`: the report it wrote and
/// how long boot, command and halt took. A failure carries the guest's own words.
pub fn run_this_binary<T: serde::de::DeserializeOwned>(
    kernel: UmlKernel,
    outdir: &owner::PrivateDir,
    args: &[String],
    name: &str,
    timeout: Duration,
) -> LabResult<(T, Duration)> {
    run_guest(
        Guest::of_this_binary(kernel, outdir.path(), args)?,
        outdir,
        name,
        timeout,
    )
}

/// [`run_this_binary`] for a guest made by [`Guest::of_this_binary`] and then changed.
pub fn run_guest<T: serde::de::DeserializeOwned>(
    guest: Guest,
    outdir: &owner::PrivateDir,
    name: &str,
    timeout: Duration,
) -> LabResult<(T, Duration)> {
    let mut child = guest.child(name)?;
    child.timeout = Some(timeout);
    let finished = crate::child::run_blocking(child, outdir)?;
    let elapsed = finished.elapsed;
    let report = finished.succeeded().map_err(|e| with_guest_stderr(e, outdir))?;
    Ok((report, elapsed))
}

/// Boot, module loading and halt take about 2 s; the rest is room on a loaded machine.
const BOOT_AND_HALT: Duration = Duration::from_secs(60);

/// How long the run itself may take inside: every transfer at 1 MB/s (UML's ESP moves
/// 40-100 MB/s here), the line rate after them, and a kernel row's tcrypt ceiling (a
/// minute or two: it times every key and block size), with room to spare.
fn run_budget(plan: &RunPlan) -> Duration {
    let w = plan.workload();
    let per_transfer_s = match w.modes.time_s {
        Some(t) => t + w.modes.omit_s,
        None => w.bytes.0 as f64 / 1e6,
    };
    let transfers = f64::from(w.repeat) * if plan.times_ceiling() { 2.0 } else { 1.0 };
    let kernel_ceiling = speed::SpeedSuite::from_cipher_suite(&plan.suite())
        .filter(|_| plan.times_ceiling() && plan.backend().describe().kernel.is_some())
        .map_or(Duration::ZERO, speed::tcrypt::expected_duration);
    Duration::from_secs_f64(per_transfer_s * transfers + 30.0) + kernel_ceiling
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
    let said = std::fs::read_to_string(outdir.join(STDERR_FILE)).unwrap_or_default();
    let said = said.trim();
    if said.is_empty() {
        return e;
    }
    let kind = e.kind;
    LabError::new(kind, anyhow::anyhow!("{e:#}; the run inside said: {said}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(shared: &str, read_only: &[&str]) -> Guest {
        Guest {
            kernel: UmlKernel {
                binary: LINUX_UML.into(),
                release: "6.1.176".into(),
                modules: MODULES.into(),
            },
            shared: shared.into(),
            read_only: read_only.iter().map(PathBuf::from).collect(),
            memory_mib: MEMORY_MIB,
            env: vec!["CI=true".into()],
            extra_modules: vec!["aes_ti"],
            command: [
                "/tmp/checkout/target/debug/ipsec-lab",
                "run",
                "--plan-file",
                "/tmp/ipsec-lab-uml-x/plan.json",
            ]
            .map(String::from)
            .to_vec(),
            cwd: None,
            console: false,
        }
    }

    #[test]
    fn the_guest_mounts_its_own_dirs_and_the_package_modules_and_runs_the_command() {
        let s = guest("/tmp/ipsec-lab-uml-x", &["/tmp/checkout/target/debug"]).init_script();
        let lines = [
            // The kernel may have mounted it already (DEVTMPFS_MOUNT).
            "mountpoint -q /dev || mount -t devtmpfs dev /dev",
            "mount -t tmpfs tmp /tmp",
            "hostname uml-6.1.176",
            "mkdir -p '/tmp/ipsec-lab-uml-x' && mount -t hostfs host '/tmp/ipsec-lab-uml-x' -o '/tmp/ipsec-lab-uml-x'",
            // The binary's directory, which may be under the guest's /tmp, at its own path.
            "mkdir -p '/tmp/checkout/target/debug' && mount -r -t hostfs host '/tmp/checkout/target/debug' -o '/tmp/checkout/target/debug'",
            "mount --bind '/usr/lib/uml/modules/6.1.176' /lib/modules/6.1.176",
            "crypto_user pcrypt aes_ti 2>/dev/null",
            "cd '/' && env IPSEC_LAB_VIRT='uml (user-mode Linux: native speed, 1 CPU, generic C crypto)' TMPDIR=/tmp 'CI=true' '/tmp/checkout/target/debug/ipsec-lab' 'run' '--plan-file' '/tmp/ipsec-lab-uml-x/plan.json' >/dev/null 2>'/tmp/ipsec-lab-uml-x/stderr'",
            "echo $? > '/tmp/ipsec-lab-uml-x/rc'",
            "halt -f",
        ];
        let mut at = 0;
        for line in lines {
            // In this order: the tmpfs first, then what it would otherwise hide.
            let found = s[at..]
                .find(line)
                .unwrap_or_else(|| panic!("{line:?} not (in order) in\n{s}"));
            at += found + line.len();
        }
    }

    #[test]
    fn a_parent_is_mounted_before_what_lies_inside_it() {
        let s = guest("/tmp/checkout/target/tmp/out", &["/tmp/checkout/target"]).init_script();
        let parent = s.find("host '/tmp/checkout/target' -o").unwrap();
        let child = s.find("host '/tmp/checkout/target/tmp/out' -o").unwrap();
        assert!(parent < child, "{s}");
    }

    #[test]
    fn the_hosts_root_stays_read_only() {
        let shared = owner::PrivateDir::new("ipl-uml-test-").unwrap();
        let mut g = guest("/unused", &[]);
        g.shared = shared.path().to_path_buf();
        let c = g.command().unwrap();
        let args: Vec<_> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(args.contains(&"ro".to_string()), "{args:?}");
        assert!(args.contains(&"mem=1024M".to_string()), "{args:?}");
        let init = shared.join(INIT_FILE);
        assert!(args.contains(&format!("init={}", init.display())), "{args:?}");
        assert!(std::fs::read_to_string(init).unwrap().ends_with("halt -f\n"));
    }

    #[test]
    fn a_path_hostfs_would_split_is_refused() {
        let g = guest("/tmp/a,b", &[]);
        let e = g.command().unwrap_err();
        assert!(format!("{e:#}").contains("comma"), "{e:#}");
    }

    /// The shared probe (lab/uml-probe.sh) run on stand-in kernels: scripts that print what
    /// a kernel prints when its init ran, when ptrace refused its registers, and neither.
    #[test]
    fn the_probe_tells_a_kernel_that_runs_from_one_that_cannot() {
        let dir = owner::PrivateDir::new("ipl-uml-probe-").unwrap();
        let fake = |name: &str, says: &str| {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.join(name);
            std::fs::write(
                &path,
                format!("#!/bin/sh\nprintf '%s\\n' '{says}'\nkill -ABRT $$\n"),
            )
            .unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
            UmlKernel {
                binary: path,
                release: name.into(),
                modules: MODULES.into(),
            }
        };
        let runs = fake(
            "7.2.7",
            "Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000000",
        );
        assert_eq!(runs.probe(), Ok(()));
        let refused = fake("6.1.176", "ptrace set fp regs failed, errno = 14");
        let why = refused.probe().unwrap_err();
        assert!(
            why.starts_with("user-mode Linux 6.1.176 cannot run processes on this CPU (ptrace set fp regs failed, errno = 14)"),
            "{why}"
        );
        let died = fake(
            "6.12.113",
            "Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b",
        );
        assert_eq!(
            died.probe().unwrap_err(),
            "user-mode Linux 6.12.113 did not run /bin/true to its end"
        );
        let missing = UmlKernel {
            binary: dir.join("absent"),
            ..runs.clone()
        };
        assert!(missing.probe().unwrap_err().contains("cannot be started"));
    }

    #[test]
    fn quotes_survive_the_guest_shell() {
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
    }
}
