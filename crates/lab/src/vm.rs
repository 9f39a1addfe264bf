//! `--vm [KERNEL]`: runs the same validated plan (or, for `ipsec-lab speed`, its kernel
//! rows) inside a virtme-ng guest booting a stock kernel (default: the newest
//! `/boot/vmlinuz-*`), with the host's root filesystem shared read-only, so the binary built
//! on the host runs unchanged inside. The host writes the plan, placed in the guest's own
//! namespaces, as JSON into a private host directory shared read-write (`--rwdir`); the
//! guest runs `ipsec-lab run --plan-file` and writes its JSON report and exit code there;
//! the host reads that report back ([`exec_in_guest`], through [`crate::child`]) and prints
//! it as if the run had happened here.
//!
//! vng hands `--rwdir` and `-r` on to virtme-run inside a command string it splits on
//! spaces, so those paths are checked ([`vng_safe_path`]): a `TMPDIR` or kernel path with a
//! space, quote or other shell character is refused (exit 2) rather than split into extra
//! vng arguments. The guest's console comes back through a pipe and goes to stderr
//! ([`Output::ToStderr`]): qemu never gets the user's stdout or stderr (it would truncate a
//! redirected log).
//!
//! KVM is used when a KVM guest actually boots (checked once with a short boot and cached),
//! else TCG emulation; the report's environment says which (`IPSEC_LAB_VIRT`), because TCG
//! numbers show correctness, not speed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use model::{Placement, RunPlan, RunReport};
use serde::de::DeserializeOwned;

use crate::child::{sh_quote, Child, ExitCodeFrom, Output};
use crate::error::{LabError, LabResult};

pub const VIRT_KVM: &str = "vm (kvm)";
pub const VIRT_TCG: &str = "vm (tcg: emulated, speeds not representative)";
/// Modules the xfrm backend needs in the stock kernel (autoloading would find most, but a
/// probe that fails before a module loads would report a missing capability).
pub const GUEST_MODULES: &str = "esp4 xfrm_user xfrm4_tunnel aesni_intel sha256_ssse3 gcm wireguard crypto_user pcrypt sch_netem af_alg algif_skcipher algif_hash algif_aead authenc chacha20poly1305 chacha_x86_64 poly1305_x86_64 ovpn";
/// How long a KVM guest may take to print a token before KVM is declared unusable here.
const KVM_BOOT_TIMEOUT: Duration = Duration::from_secs(40);
/// In the directory shared with the guest: the report the guest's run writes (`--json`),
/// and its exit code, written by the guest's script.
const REPORT_FILE: &str = "report.json";
const RC_FILE: &str = "rc";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn label(self) -> &'static str {
        match self {
            Accel::Kvm => VIRT_KVM,
            Accel::Tcg => VIRT_TCG,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// The stock kernel image in /boot: the one Debian's `linux-image-amd64` points at where
/// it is installed (so a second kernel installed beside it, `lab/setup.sh
/// --second-kernel`, does not change the default), else the newest.
pub fn default_kernel() -> Option<PathBuf> {
    if let Some(stock) = debian_stock_release()
        .map(|r| image_of(&r))
        .filter(|p| p.is_file())
    {
        return Some(stock);
    }
    let mut images: Vec<PathBuf> = std::fs::read_dir("/boot")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    images.sort_by_key(|p| version_key(p));
    images.pop()
}

/// The release `linux-image-amd64` depends on (`linux-image-6.1.0-57-amd64 (= …)`).
fn debian_stock_release() -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Depends}", "linux-image-amd64"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let depends = String::from_utf8_lossy(&out.stdout);
    let first = depends
        .split([',', '|', ' '])
        .find(|w| w.starts_with("linux-image-"))?;
    Some(first.trim_start_matches("linux-image-").to_string())
}

/// Where `lab/second-kernel.sh` puts kernels the VM lab boots but the host does not.
pub const LAB_KERNELS: &str = "/var/lib/ipsec-lab/kernels";

/// `/boot/vmlinuz-RELEASE`.
fn image_of(release: &str) -> PathBuf {
    PathBuf::from(format!("/boot/vmlinuz-{release}"))
}

/// A `--vm` kernel argument as an image path: a path as given, or a release
/// (`6.1.0-57-amd64`) whose `vmlinuz-RELEASE` is in /boot or [`LAB_KERNELS`].
pub fn kernel_image(arg: &str) -> PathBuf {
    if !arg.contains('/') {
        let lab = Path::new(LAB_KERNELS).join(format!("vmlinuz-{arg}"));
        for image in [image_of(arg), lab] {
            if image.is_file() {
                return image;
            }
        }
    }
    PathBuf::from(arg)
}

/// `--vm KERNEL[,KERNEL…]` split into its kernels (empty or `auto`: the default one).
pub fn kernel_list(arg: Option<&str>) -> Vec<Option<String>> {
    let mut out: Vec<Option<String>> = Vec::new();
    for k in arg.unwrap_or_default().split(',').map(str::trim) {
        let k = Some(k.to_string()).filter(|k| !k.is_empty() && k != AUTO);
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// `vmlinuz-6.1.0-57-amd64` → [6, 1, 0, 57] for a numeric sort.
fn version_key(p: &Path) -> Vec<u64> {
    p.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect()
}

pub fn vng_available() -> bool {
    Command::new("vng")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn cache_file() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("ipsec-lab").join("vm-accel")
}

/// KVM if a KVM guest boots and runs a command within [`KVM_BOOT_TIMEOUT`], else TCG.
/// The answer is cached per host kernel and guest kernel (`~/.cache/ipsec-lab/vm-accel`);
/// `IPSEC_LAB_VM_ACCEL=kvm|tcg` overrides it.
pub fn detect_accel(kernel: &Path) -> Accel {
    match std::env::var("IPSEC_LAB_VM_ACCEL").as_deref() {
        Ok("kvm") => return Accel::Kvm,
        Ok("tcg") => return Accel::Tcg,
        _ => {}
    }
    if !Path::new("/dev/kvm").exists() {
        return Accel::Tcg;
    }
    let key = format!("{}\t{}\t", model::env::kernel_release(), kernel.display());
    let cache = cache_file();
    if let Ok(text) = std::fs::read_to_string(&cache) {
        for line in text.lines() {
            if let Some(v) = line.strip_prefix(&key) {
                return if v == "kvm" { Accel::Kvm } else { Accel::Tcg };
            }
        }
    }
    let accel = if kvm_boots(kernel) { Accel::Kvm } else { Accel::Tcg };
    let _ = std::fs::create_dir_all(cache.parent().unwrap_or(Path::new("/tmp")));
    let mut text = std::fs::read_to_string(&cache).unwrap_or_default();
    text.push_str(&format!("{key}{}\n", accel.name()));
    let _ = std::fs::write(&cache, text);
    accel
}

fn kvm_boots(kernel: &Path) -> bool {
    const TOKEN: &str = "ipl-kvm-boot-ok";
    let child = Command::new("timeout")
        .arg("--kill-after=5")
        .arg(KVM_BOOT_TIMEOUT.as_secs().to_string())
        .args(["vng", "--memory", "512M", "--cpus", "1", "-r"])
        .arg(kernel)
        .args(["--exec", &format!("echo {TOKEN}")])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    child.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(TOKEN))
}

/// The plan the guest runs: the host's, in the guest's own namespaces (a `--vm` plan
/// there would boot a VM again).
pub fn guest_plan(plan: &RunPlan) -> RunPlan {
    plan.with_placement(Placement::Local)
}

/// Builds the guest's shell command: load `modules`, run `exe` with `args` (the caller
/// puts the output file among them), record the exit code in `rc`. Every path and
/// argument is single-quoted for the guest's shell.
pub fn guest_script(exe: &Path, args: &[String], rc: &Path, accel: Accel, modules: &str) -> String {
    let mut cmd = vec![sh_quote(&exe.display().to_string())];
    cmd.extend(args.iter().map(|a| sh_quote(a)));
    format!(
        // The guest's table goes nowhere: the host prints the report it reads back.
        "modprobe -q -a {modules} 2>/dev/null; IPSEC_LAB_VIRT={} {} >/dev/null; echo $? > {}",
        sh_quote(accel.label()),
        cmd.join(" "),
        sh_quote(&rc.display().to_string()),
    )
}

/// True when `path` passes through vng's command string as one argument: only letters,
/// digits and `/._+-` (vng splits on spaces and `shlex` would act on quotes).
pub fn vng_safe_path(path: &Path) -> bool {
    path.to_str().is_some_and(|p| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._+-".contains(&b))
    })
}

fn unsafe_path(what: &str, path: &Path, fix: &str) -> LabError {
    LabError::usage(anyhow::anyhow!(
        "{what} {:?} has characters virtme-ng cannot pass to the VM (only letters, digits and /._+- work): {fix}",
        path.display().to_string()
    ))
}

/// A private directory shared read-write with the guest: fresh, 0700, recorded for
/// `clean`, removed on drop. Refused (exit 2) where `TMPDIR` would not survive vng.
pub fn guest_dir(prefix: &str) -> LabResult<owner::PrivateDir> {
    check_vm_paths(None)?;
    Ok(owner::PrivateDir::new(prefix)?)
}

/// The vng command line booting `kernel` and running `script`, with `outdir` shared rw.
/// Run from `/` (vng passes its working directory on too); [`crate::child`] sets where its
/// output goes.
pub fn vng_command(kernel: &Path, accel: Accel, outdir: &Path, script: &str) -> Command {
    let mut c = Command::new("vng");
    if accel == Accel::Tcg {
        c.arg("--disable-kvm");
    }
    c.arg("-r").arg(kernel);
    c.args(["--memory", "2G", "--cpus", "2"]);
    c.arg("--rwdir").arg(outdir);
    c.args(["--exec", script]);
    c.current_dir("/");
    c
}

/// `--vm auto`: the VM only where this kernel has no ESP.
pub const AUTO: &str = "auto";

/// The release a `--vm` kernel names where it is user-mode Linux: `uml` is `Some(None)`
/// (the package's kernel), `uml:RELEASE` `Some(Some(RELEASE))`; any other kernel None.
pub fn uml_kernel(kernel: Option<&str>) -> Option<Option<String>> {
    match model::VmKernel::from_arg(Some(kernel?.to_string())) {
        model::VmKernel::Uml(release) => Some(release),
        _ => None,
    }
}

/// The kernel image `--vm [KERNEL]` names (`auto` or none: the newest in /boot), once
/// virtme-ng is known to be installed.
pub fn resolve_kernel(kernel_arg: Option<&str>) -> LabResult<PathBuf> {
    check_vm_paths(kernel_arg)?;
    let named = kernel_arg
        .filter(|k| !k.is_empty() && *k != AUTO)
        .map(kernel_image);
    if !vng_available() {
        return Err(LabError::capability(anyhow::anyhow!(
            "--vm needs virtme-ng (`pip install virtme-ng`, command `vng`) and qemu-system-x86; run lab/setup.sh"
        )));
    }
    match named {
        Some(kernel) => Ok(kernel),
        None => default_kernel().ok_or_else(|| {
            LabError::capability(anyhow::anyhow!(
                "--vm found no kernel image in /boot; install linux-image-amd64 or pass --vm /path/to/vmlinuz"
            ))
        }),
    }
}

/// Refuses (exit 2) a `--vm KERNEL` that is not a file, and a kernel path or `TMPDIR` that
/// vng would split into extra arguments. Bad input whatever is installed, so checked before
/// anything else.
pub fn check_vm_paths(kernel_arg: Option<&str>) -> LabResult<()> {
    if let Some(kernel) = kernel_arg
        .filter(|k| !k.is_empty() && *k != AUTO && uml_kernel(Some(k)).is_none())
        .map(kernel_image)
    {
        let kernel = kernel.as_path();
        if !kernel.is_file() {
            return Err(LabError::usage(anyhow::anyhow!(
                "--vm {}: no such kernel image (pass a vmlinuz file, e.g. /boot/vmlinuz-VERSION, or a release with an image in /boot)",
                kernel.display()
            )));
        }
        if !vng_safe_path(kernel) {
            return Err(unsafe_path(
                "--vm",
                kernel,
                "copy or link the image to such a path",
            ));
        }
    }
    let tmp = std::env::temp_dir();
    if !vng_safe_path(&tmp) {
        return Err(unsafe_path(
            "the temporary directory",
            &tmp,
            "set TMPDIR to such a path (e.g. TMPDIR=/tmp)",
        ));
    }
    Ok(())
}

/// A guest booting `kernel` that loads `modules` and runs this binary with `args` plus
/// `--json` into `outdir` (shared read-write); its exit code comes back through a file.
/// The console goes to stderr and there is no timeout unless the caller sets them.
pub fn guest_child<'a>(
    name: &'a str,
    kernel: &Path,
    accel: Accel,
    outdir: &owner::PrivateDir,
    modules: &str,
    args: &[String],
) -> LabResult<Child<'a>> {
    let exe = std::env::current_exe().map_err(LabError::failed)?;
    let mut args = args.to_vec();
    args.extend(["--json".into(), outdir.join(REPORT_FILE).display().to_string()]);
    let script = guest_script(&exe, &args, &outdir.join(RC_FILE), accel, modules);
    Ok(Child {
        name,
        command: vng_command(kernel, accel, outdir.path(), &script),
        exit_code: ExitCodeFrom::File(RC_FILE),
        report: REPORT_FILE,
        output: Output::ToStderr,
        timeout: None,
    })
}

/// What a command re-executed in the guest left behind.
#[derive(Debug)]
pub struct GuestRun<T> {
    /// The JSON report the guest wrote with `--json`.
    pub report: T,
    /// Boot, run and shutdown.
    pub elapsed: Duration,
}

/// Re-executes this binary with `args` in a guest booting `kernel`, after loading
/// `modules`, and reads back the report it wrote. A non-zero exit code in the guest comes
/// back as the same kind of error here; Ctrl-C is passed on to vng.
pub fn exec_in_guest<T: DeserializeOwned>(
    kernel: &Path,
    accel: Accel,
    modules: &str,
    args: &[String],
) -> LabResult<GuestRun<T>> {
    exec_in_guest_dir(kernel, accel, modules, &guest_dir("ipsec-lab-vm-")?, args)
}

/// [`exec_in_guest`] sharing `outdir`, where the caller put what the guest reads.
fn exec_in_guest_dir<T: DeserializeOwned>(
    kernel: &Path,
    accel: Accel,
    modules: &str,
    outdir: &owner::PrivateDir,
    args: &[String],
) -> LabResult<GuestRun<T>> {
    let child = guest_child("the run inside the VM", kernel, accel, outdir, modules, args)?;
    // Two lines: one was over 140 columns (issue 25 item 9).
    eprintln!(
        "ipsec-lab: booting {} under virtme-ng\n  ({}; a TCG boot takes ~30 s)",
        kernel.display(),
        accel.label()
    );
    let finished = crate::child::run_blocking(child, outdir)?;
    let elapsed = finished.elapsed;
    Ok(GuestRun {
        report: finished.succeeded()?,
        elapsed,
    })
}

/// The kernel a VM boots where the command names none (`--vm`, `--vm auto`): the newest
/// image with what the run needs that the stock one may lack ([`newest_release_for`]),
/// else the stock kernel.
fn unnamed_kernel(plan: &RunPlan) -> LabResult<PathBuf> {
    let ovpn = plan.backend().describe().kernel == Some(model::backend::KernelNeed::Ovpn);
    match newest_release_for(ovpn, plan.per_cpu_sa()) {
        Some(release) => Ok(kernel_image(&release)),
        None => resolve_kernel(None),
    }
}

/// The release of the newest image here (in /boot or [`LAB_KERNELS`]) that has what is
/// asked and the stock kernel may lack: `ovpn` for OpenVPN's DCO, Linux 6.13 for per-CPU
/// SAs. None when nothing is asked or no image has it (the stock kernel then, whose guest
/// refuses what it cannot run, saying why).
pub fn newest_release_for(ovpn: bool, per_cpu_sa: bool) -> Option<String> {
    let image = newest_image_for(&[Path::new("/boot"), Path::new(LAB_KERNELS)], ovpn, per_cpu_sa)?;
    let name = image.file_name()?.to_str()?;
    name.strip_prefix("vmlinuz-").map(str::to_string)
}

fn newest_image_for(dirs: &[&Path], ovpn: bool, per_cpu_sa: bool) -> Option<PathBuf> {
    if !ovpn && !per_cpu_sa {
        return None;
    }
    newest_image(dirs, |r| {
        (!ovpn || crate::backend::openvpn::kernel_has_ovpn(Some(r)))
            && (!per_cpu_sa || crate::backend::xfrm::has_per_cpu_sas(r))
    })
}

/// The newest `vmlinuz-RELEASE` in `dirs` whose release `has` what is asked.
fn newest_image(dirs: &[&Path], has: impl Fn(&str) -> bool) -> Option<PathBuf> {
    let mut images: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|d| d.flatten().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("vmlinuz-"))
                .is_some_and(&has)
        })
        .collect();
    images.sort_by_key(|p| version_key(p));
    images.pop()
}

/// Whether `plan` runs in user-mode Linux: `--vm uml`, or `--vm auto` where KVM cannot boot
/// the stock kernel (so it would be emulated) and UML carries the backend (ESP, not
/// WireGuard) and is installed.
fn uml_chosen(plan: &RunPlan) -> bool {
    match plan.vm() {
        Some(model::VmKernel::Uml(_)) => true,
        Some(model::VmKernel::Auto) => {
            // Per-CPU SAs want several CPUs: UML has one.
            let uml_carries = !matches!(
                plan.backend().describe().kernel,
                Some(model::backend::KernelNeed::Wireguard | model::backend::KernelNeed::Ovpn)
            ) && !plan.per_cpu_sa();
            let kvm = resolve_kernel(None).is_ok_and(|k| detect_accel(&k) == Accel::Kvm);
            uml_carries && !kvm && crate::uml::UmlKernel::installed().is_some()
        }
        _ => false,
    }
}

/// Whether `plan` runs in the VM: `--vm KERNEL` always, `--vm auto` where this kernel
/// cannot run what the backend needs of it (ESP for xfrm and strongswan, WireGuard).
pub fn wanted(plan: &RunPlan) -> bool {
    let host_can = || match plan.backend().describe().kernel {
        Some(model::backend::KernelNeed::Esp) => crate::local::host_has_esp(),
        Some(model::backend::KernelNeed::Wireguard) => {
            crate::backend::wireguard::kernel::host_has_wireguard()
        }
        Some(model::backend::KernelNeed::Ovpn) => crate::backend::openvpn::kernel_has_ovpn(None),
        None => true,
    };
    let host_can = || {
        host_can()
            && (plan.link().netem.is_none() || netns::netem::kernel_has_netem())
            && (!plan.per_cpu_sa() || crate::backend::xfrm::has_per_cpu_sas(&model::env::kernel_release()))
    };
    match plan.vm() {
        None => false,
        Some(model::VmKernel::Auto) => !host_can(),
        Some(_) => true,
    }
}

/// Runs `plan` in a guest ([`guest_plan`], handed over as a plan file) and returns the
/// report it wrote.
pub fn run_in_vm(plan: &RunPlan) -> LabResult<RunReport> {
    crate::backend::guest_preflight(plan)?;
    if uml_chosen(plan) {
        return crate::uml::run_in_uml(plan);
    }
    let kernel = match plan.vm().and_then(model::VmKernel::image) {
        Some(named) => resolve_kernel(Some(named))?,
        None => unnamed_kernel(plan)?,
    };
    let accel = detect_accel(&kernel);
    let outdir = guest_dir("ipsec-lab-vm-")?;
    let plan_file = crate::child::write_plan(&outdir, &guest_plan(plan))?;
    let args = crate::child::guest_run_args(&plan_file);
    let run = exec_in_guest_dir::<RunReport>(&kernel, accel, GUEST_MODULES, &outdir, &args)?;
    let mut report = run.report;
    report.notes.push(format!(
        "ran in a VM booting {} ({}); boot, run and shutdown took {:.1} s",
        kernel.display(),
        accel.label(),
        run.elapsed.as_secs_f64()
    ));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--vm auto --per-cpu-sa` boots the newest kernel with per-CPU SAs (6.13+) of those
    /// in /boot and the lab's directory, not the stock 6.1, whose guest would refuse it.
    #[test]
    fn an_unnamed_kernel_for_per_cpu_sas_is_the_newest_from_6_13() {
        let (boot, lab) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for (dir, release) in [
            (&boot, "6.1.0-57-amd64"),
            (&lab, "6.12.95+deb12-amd64"),
            (&lab, "7.2.13+deb14-amd64"),
            (&lab, "6.13.2-amd64"),
        ] {
            std::fs::write(dir.path().join(format!("vmlinuz-{release}")), "").unwrap();
        }
        std::fs::write(lab.path().join("config-7.3.0"), "").unwrap();
        let dirs = [boot.path(), lab.path()];
        let chosen = newest_image_for(&dirs, false, true);
        assert_eq!(chosen, Some(lab.path().join("vmlinuz-7.2.13+deb14-amd64")));
        assert_eq!(newest_image_for(&dirs[..1], false, true), None);
        // Nothing asked: the stock kernel, however new the others.
        assert_eq!(newest_image_for(&dirs, false, false), None);
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_guest_gets_the_validated_plan_placed_in_its_own_namespaces() {
        let plan = model::RunRequest {
            backend: model::Backend::Xfrm,
            bytes: model::ByteSize(4_000_000),
            seed: Some(7),
            vm: Some(Some("/boot/k".into())),
            ..Default::default()
        }
        .validate()
        .unwrap();
        let dir = owner::PrivateDir::new("ipl-vm-plan-test-").unwrap();
        let path = crate::child::write_plan(&dir, &guest_plan(&plan)).unwrap();
        let back: RunPlan = crate::child::read_plan(&path).unwrap();
        // The same run, seed included, but no VM again inside the VM.
        assert_eq!(back.placement(), &Placement::Local);
        assert!(back.vm().is_none());
        assert_eq!(back.workload(), plan.workload());
        assert_eq!((back.backend(), back.suite()), (plan.backend(), plan.suite()));
        assert_eq!(back.with_placement(plan.placement().clone()), plan);
    }

    #[test]
    fn the_guest_reads_the_plan_file_with_no_progress_once_and_no_vm() {
        let args = crate::child::guest_run_args(Path::new("/tmp/ipsec-lab-vm-Ab3/plan.json"));
        assert_eq!(
            args,
            strings(&[
                "run",
                "--plan-file",
                "/tmp/ipsec-lab-vm-Ab3/plan.json",
                "--no-progress"
            ])
        );
        // The report's --json is the guest's last argument, where the host reads it back.
        assert!(!args
            .iter()
            .any(|a| a.starts_with("--vm") || a.starts_with("--json")));
        // That the guest's command line parses is checked beside the clap structs, in the
        // binary.
    }

    #[test]
    fn only_plain_paths_go_through_vng() {
        assert!(vng_safe_path(Path::new("/tmp/ipsec-lab-vm-Ab3xYz")));
        assert!(vng_safe_path(Path::new("/boot/vmlinuz-6.1.0-57-amd64")));
        for bad in [
            "/tmp/a b",
            "/tmp/x' --rw '",
            "/tmp/a,b",
            "/tmp/$(id)",
            "/tmp/a=b",
            "",
        ] {
            assert!(!vng_safe_path(Path::new(bad)), "{bad}");
        }
    }

    #[test]
    fn guest_script_quotes_arguments_and_records_the_exit_code() {
        let s = guest_script(
            Path::new("/w/ipsec-lab"),
            &strings(&["run", "it's", "--json", "/tmp/o/report.json"]),
            Path::new("/tmp/o/rc"),
            Accel::Tcg,
            "esp4 af_alg",
        );
        assert!(s.starts_with("modprobe -q -a esp4 af_alg "), "{s}");
        assert!(s.contains(" '--json' '/tmp/o/report.json'"), "{s}");
        assert!(s.contains(r"'it'\''s'"), "{s}");
        assert!(
            s.contains("IPSEC_LAB_VIRT='vm (tcg: emulated, speeds not representative)'"),
            "{s}"
        );
        assert!(s.ends_with("echo $? > '/tmp/o/rc'"), "{s}");
    }

    #[test]
    fn vm_takes_a_list_of_kernels_once_each() {
        assert_eq!(kernel_list(None), vec![None]);
        assert_eq!(kernel_list(Some("auto")), vec![None]);
        assert_eq!(
            kernel_list(Some("/boot/a, /boot/b,/boot/a")),
            vec![Some("/boot/a".to_string()), Some("/boot/b".to_string())]
        );
    }

    #[test]
    fn kernels_sort_by_version_numbers() {
        let mut v = [
            PathBuf::from("/boot/vmlinuz-6.1.0-9-amd64"),
            PathBuf::from("/boot/vmlinuz-6.1.0-57-amd64"),
        ];
        v.sort_by_key(|p| version_key(p));
        assert_eq!(v[1], PathBuf::from("/boot/vmlinuz-6.1.0-57-amd64"));
    }
}
