//! One charon instance (Debian's `charon-systemd`, which writes no pid file) in one end's
//! namespace, configured only through the files of that end's directory
//! (`STRONGSWAN_CONF`, `SWANCTL_DIR`), and `swanctl` talking to it over its own VICI
//! socket. Recorded in the state file while it runs; stopped (SIGTERM, which makes charon
//! delete its SAs and policies, then SIGKILL) on drop.
//!
//! Which charon and swanctl ([`Programs`]): the PATH's, or for per-CPU SAs a strongSwan of
//! 6.0 or later: the one `lab/strongswan6.sh` unpacked (Debian sid's, beside the host's), else
//! the PATH's where it is 6.x.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns::Namespace;

use super::config::Paths;
use crate::error::{LabError, LabResult};

pub const DAEMON: &str = "charon-systemd";
pub const SWANCTL: &str = "swanctl";
/// Where lab/strongswan6.sh unpacks strongSwan 6: DIR/VERSION/{charon-systemd,swanctl},
/// DIR/.from-sid naming the version.
pub const LAB_STRONGSWAN: &str = "/var/lib/ipsec-lab/strongswan";
/// The first strongSwan with per-CPU CHILD_SAs (`per_cpu_sas`, RFC 9611).
pub const PER_CPU_SINCE: (u32, u32) = (6, 0);
/// How long charon may take to open its VICI socket (TCG guests start it slowly).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// `name` on PATH or in /usr/sbin, /sbin.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The charon and swanctl a run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programs {
    pub daemon: PathBuf,
    pub swanctl: PathBuf,
}

impl Programs {
    /// The PATH's charon-systemd and swanctl.
    pub fn path() -> Option<Programs> {
        Some(Programs {
            daemon: find_program(DAEMON)?,
            swanctl: find_program(SWANCTL)?,
        })
    }

    /// A strongSwan with per-CPU SAs: the lab's unpacked one first, else the PATH's where
    /// its swanctl says 6.0 or later. `Err` says which strongSwan there is instead.
    pub fn per_cpu() -> Result<Programs, String> {
        if let Some(lab) = Programs::lab() {
            return Ok(lab);
        }
        let p = Programs::path().ok_or("none is installed")?;
        match swanctl_version(&p.swanctl, None) {
            Some(v) if per_cpu_version(&v) => Ok(p),
            Some(v) => Err(format!("{} is {v}", p.swanctl.display())),
            None => Err(format!("{} says no version", p.swanctl.display())),
        }
    }

    /// The one lab/strongswan6.sh unpacked, where its swanctl runs and says 6.0 or later.
    fn lab() -> Option<Programs> {
        let version = std::fs::read_to_string(Path::new(LAB_STRONGSWAN).join(".from-sid")).ok()?;
        let dir = Path::new(LAB_STRONGSWAN).join(version.trim());
        let (daemon, swanctl) = (dir.join(DAEMON), dir.join(SWANCTL));
        // The script's strongswan.conf loads its own plugins only: the host's
        // /etc/strongswan.conf names the host's (5.9) ones, or is not there.
        let said = swanctl_version(&swanctl, Some(&dir.join("strongswan.conf")))?;
        (daemon.is_file() && per_cpu_version(&said)).then_some(Programs { daemon, swanctl })
    }
}

/// swanctl's version as its usage says it (`strongSwan 6.1.0 swanctl`): `swanctl --version`
/// asks the daemon, which is not running yet. `conf`: the strongswan.conf it reads.
fn swanctl_version(swanctl: &Path, conf: Option<&Path>) -> Option<String> {
    let mut command = Command::new(swanctl);
    command.arg("--help").stdin(Stdio::null());
    if let Some(conf) = conf {
        command.env("STRONGSWAN_CONF", conf);
    }
    let out = command.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| l.starts_with("strongSwan ") && l.ends_with(" swanctl"))
        .map(str::to_string)
}

/// Whether a version line (`strongSwan 6.1.0 swanctl`, `strongSwan 6.1.0 charon-systemd
/// (Linux, ...)`) is of [`PER_CPU_SINCE`] or later.
pub fn per_cpu_version(line: &str) -> bool {
    let version = line.split_whitespace().nth(1).unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= PER_CPU_SINCE
}

pub fn failed(what: impl std::fmt::Display) -> LabError {
    LabError::failed(anyhow::anyhow!("strongswan backend: {what}"))
}

/// The last `n` lines of `log`, for an error message (the log goes with the run's directory).
pub fn log_tail(log: &Path, n: usize) -> String {
    last_lines(&std::fs::read_to_string(log).unwrap_or_default(), n)
}

/// A running charon. Dropping it stops it.
pub struct Charon {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    ctl: Swanctl,
    /// Its record in the state file, forgotten once it has exited.
    record: owner::Record,
}

impl Charon {
    /// Starts `programs`' charon in `ns` with the configuration in `paths` and waits until
    /// its VICI socket answers.
    pub fn start(ns: &Namespace, paths: &Paths<'_>, programs: &Programs) -> LabResult<Charon> {
        let daemon = &programs.daemon;
        let out = File::create(paths.dir.join("charon.out")).map_err(failed)?;
        let err = out.try_clone().map_err(failed)?;
        let child = ns
            .command(daemon)
            .env("STRONGSWAN_CONF", paths.strongswan_conf())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| failed(format!("start {} in {}: {e}", daemon.display(), ns.name())))?;
        let record = owner::Record::process(child.id(), DAEMON);
        let recorded = owner::record(record.clone());
        // Built either way, so a failure to record still stops it (on drop).
        let mut charon = Charon {
            child,
            dir: paths.dir.to_path_buf(),
            log: paths.log(),
            ctl: Swanctl {
                program: programs.swanctl.clone(),
                dir: paths.dir.to_path_buf(),
                uri: paths.vici_uri(),
            },
            record,
        };
        recorded?;
        charon.wait_for_vici(&paths.vici())?;
        Ok(charon)
    }

    fn wait_for_vici(&mut self, socket: &Path) -> LabResult<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(failed(format!(
                    "{DAEMON} exited ({status}) while starting; its log {}:\n{}\n{}",
                    self.log.display(),
                    log_tail(&self.log, 12),
                    log_tail(&self.dir.join("charon.out"), 6)
                )));
            }
            if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "{DAEMON} opened no VICI socket within {START_TIMEOUT:?}; its log {}:\n{}",
                    self.log.display(),
                    log_tail(&self.log, 12)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `swanctl ARGS --uri THIS-CHARON` (at most `timeout`), its configuration from this
    /// end's directory only. Returns its output; a failure carries the end of it.
    pub fn swanctl(&self, args: &[&str], timeout: Duration) -> LabResult<String> {
        self.ctl.run(args, timeout).map_err(failed)
    }

    /// [`Charon::swanctl`], its failure as a sentence for the caller to put in context.
    pub fn try_swanctl(&self, args: &[&str], timeout: Duration) -> Result<String, String> {
        self.ctl.run(args, timeout)
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How to reach this charon's VICI socket from another thread (the rekey's).
    pub fn control(&self) -> Swanctl {
        self.ctl.clone()
    }

    /// The daemon's own version line (`swanctl --version --daemon`), e.g. `strongSwan 5.9.8
    /// charon-systemd (Linux, 6.1.0-57-amd64, x86_64)`.
    pub fn daemon_version(&self) -> String {
        self.try_swanctl(&["--version", "--daemon"], Duration::from_secs(10))
            .ok()
            .and_then(|out| {
                out.lines()
                    .find(|l| l.starts_with("strongSwan"))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| format!("{DAEMON} (version unknown)"))
    }
}

/// `swanctl` against one charon's VICI socket, with that end's configuration only.
#[derive(Debug, Clone)]
pub struct Swanctl {
    program: PathBuf,
    dir: PathBuf,
    uri: String,
}

/// Tells apart the output files of calls that overlap (the rekey thread's and the run's).
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Swanctl {
    /// The charon's VICI socket, for a session of its own ([`super::vici::Vici`]).
    pub fn socket(&self) -> PathBuf {
        Paths { dir: &self.dir }.vici()
    }

    /// Runs `swanctl ARGS --uri THIS-CHARON` (at most `timeout`). Returns its output; a
    /// failure as a sentence with the end of it.
    pub fn run(&self, args: &[&str], timeout: Duration) -> Result<String, String> {
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out_path = self.dir.join(format!("swanctl-{call}.out"));
        let io = |e: std::io::Error| format!("{SWANCTL} output file {}: {e}", out_path.display());
        let out = File::create(&out_path).map_err(io)?;
        let err = out.try_clone().map_err(io)?;
        let mut child = Command::new(&self.program)
            .args(args)
            .args(["--uri", &self.uri])
            .env("STRONGSWAN_CONF", self.dir.join("strongswan.conf"))
            .env("SWANCTL_DIR", &self.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("run {SWANCTL}: {e}"))?;
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| format!("wait for {SWANCTL}: {e}"))? {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let output = std::fs::read_to_string(&out_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        match status {
            Some(s) if s.success() => Ok(output),
            _ => {
                let how = status.map_or(format!("timed out after {timeout:?}"), |s| s.to_string());
                Err(format!(
                    "`swanctl {}` failed ({how}):\n{}",
                    args.join(" "),
                    last_lines(&output, 10)
                ))
            }
        }
    }
}

impl Drop for Charon {
    fn drop(&mut self) {
        // charon deletes its SAs and policies on SIGTERM.
        crate::backend::daemon::stop(&mut self.child, Duration::from_secs(5));
        owner::forget(&self.record);
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// swanctl's usage line and the daemon's version line, as 5.9 and 6.x print them: only
    /// 6.0 and later negotiate per-CPU SAs.
    #[test]
    fn only_strongswan_6_negotiates_per_cpu_sas() {
        assert!(per_cpu_version("strongSwan 6.1.0 swanctl"));
        assert!(per_cpu_version(
            "strongSwan 6.0.1 charon-systemd (Linux, 7.2.13+deb14-amd64, x86_64)"
        ));
        assert!(per_cpu_version("strongSwan 7.0.0dr1 swanctl"));
        assert!(!per_cpu_version("strongSwan 5.9.8 swanctl"));
        assert!(!per_cpu_version("charon-systemd (version unknown)"));
        assert!(!per_cpu_version(""));
    }
}
