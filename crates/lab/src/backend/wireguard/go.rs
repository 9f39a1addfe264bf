//! wireguard-go (`--backend wireguard-go`): the Go userspace WireGuard, one process per end
//! started in the end's namespace in the foreground (`-f`), configured over its UAPI socket
//! (/var/run/wireguard/IFNAME.sock, text written here, crate `wgnl::uapi`), its TUN device
//! addressed and brought up over rtnetlink. The process is recorded for `clean` (and gets
//! SIGTERM if the lab dies); so is its socket, which a killed wireguard-go leaves behind.
//! Stopping it (SIGTERM) removes its TUN device and socket.
//!
//! Which binary: Debian 13's build, which `lab/wireguard-go.sh` installs in [`LAB_DIR`],
//! where present, else the one in PATH ([`GoProgram`]). Debian 12's (0.0.20220316)
//! predates the TUN and UDP offloads (GSO/GRO) and moves about a fifth as much here: a
//! comparison against it would flatter every other row.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use model::evidence::GoProgram;
use model::RunPlan;
use procstat::CpuTime;
use wgnl::PeerStats;

use super::{ifname, uapi, Keys, WireguardEnd};
use crate::backend::site::{Side, Site};
use crate::error::{LabError, LabResult};

const INSTALL: &str = "wireguard-go is not installed: `bash lab/setup.sh` (or lab/wireguard-go.sh) \
     installs Debian 13's build, the one with offloads; `apt-get install wireguard-go` installs \
     the distribution's";
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Where `lab/wireguard-go.sh` installs Debian 13's wireguard-go, with the Debian package
/// version beside it in [`PACKAGE_FILE`].
pub const LAB_DIR: &str = "/var/lib/ipsec-lab/wireguard-go";
const BINARY: &str = "wireguard-go";
/// One line: the package version and suite the lab's build came from. Its `--version`
/// cannot say: 0.0.20231211 (an upstream snapshot) prints "v0.0.20230223".
const PACKAGE_FILE: &str = "wireguard-go.deb-version";
/// The version string of upstream's snapshot of 2023-02-23. The offloads came after it
/// (TUN TCP GSO/GRO in March 2023, UDP GSO/GRO in October) and later builds, Debian's
/// 0.0.20231211 among them, still print it: an older string predates the offloads for
/// sure, this one cannot tell.
const PRE_OFFLOAD_VERSION: u32 = 20230223;

/// Where the wireguard-go binary a run starts is: the lab's build first.
pub struct GoBinary;

impl GoBinary {
    /// The lab's build in `lab_dir` where it is there, else the first in `search`.
    fn path_in(lab_dir: &Path, search: impl IntoIterator<Item = PathBuf>) -> Option<(PathBuf, bool)> {
        let lab = lab_dir.join(BINARY);
        if lab.is_file() {
            return Some((lab, true));
        }
        search
            .into_iter()
            .map(|d| d.join(BINARY))
            .find(|p| p.is_file())
            .map(|p| (p, false))
    }

    /// The binary a run would start, found without running it: the lab's build first.
    pub fn path() -> Option<PathBuf> {
        Self::path_in(Path::new(LAB_DIR), search_path()).map(|(p, _)| p)
    }

    /// The binary a run would start, with its `--version` (run here) and, for the PATH's,
    /// a note where it predates the offloads.
    pub fn find() -> Option<GoProgram> {
        Self::find_in(Path::new(LAB_DIR), search_path())
    }

    fn find_in(lab_dir: &Path, search: impl IntoIterator<Item = PathBuf>) -> Option<GoProgram> {
        let (path, lab) = Self::path_in(lab_dir, search)?;
        let version = crate::backend::daemon::version_line(&path.to_string_lossy())
            .unwrap_or_else(|| "wireguard-go (version unknown)".into());
        if lab {
            let package = std::fs::read_to_string(lab_dir.join(PACKAGE_FILE))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            return Some(GoProgram {
                path,
                version,
                package,
                note: None,
            });
        }
        let note = match release(&version) {
            Some(r) if r < PRE_OFFLOAD_VERSION => format!(
                "{} ({version}, from PATH) predates wireguard-go's TUN and UDP offloads \
                 (0.0.20231211): it is not wireguard-go at its best; lab/wireguard-go.sh \
                 installs Debian 13's build in {LAB_DIR}, which the lab then prefers",
                path.display()
            ),
            _ => format!(
                "{} ({version}, from PATH): lab/wireguard-go.sh installs Debian 13's build \
                 (0.0.20231211, TUN and UDP offloads) in {LAB_DIR}, which the lab then prefers",
                path.display()
            ),
        };
        Some(GoProgram {
            path,
            version,
            package: None,
            note: Some(note),
        })
    }
}

/// PATH, then the system directories a root shell may not have in it.
fn search_path() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .collect()
}

/// 20220316 from "wireguard-go v0.0.20220316".
fn release(version: &str) -> Option<u32> {
    let v = version.split_whitespace().find_map(|w| w.strip_prefix("v0.0."))?;
    v.parse().ok()
}

/// Refuses, before anything is created, without wireguard-go or a TUN device.
pub async fn preflight(_plan: &RunPlan) -> LabResult<()> {
    preflight_device()
}

/// wireguard-go and the TUN device it needs, or a capability error saying how to get them.
pub fn preflight_device() -> LabResult<()> {
    if GoBinary::path().is_none() {
        return Err(LabError::capability(anyhow::anyhow!(INSTALL)));
    }
    if !Path::new("/dev/net/tun").exists() {
        return Err(LabError::capability(anyhow::anyhow!(
            "no /dev/net/tun: load the tun module (`modprobe tun`) to use --backend wireguard-go"
        )));
    }
    Ok(())
}

/// A wireguard-go process serving device `ifname` in a namespace, until dropped.
pub struct GoProcess {
    child: Child,
    socket: PathBuf,
    records: [owner::Record; 2],
}

impl GoProcess {
    /// Starts wireguard-go for a new device `name` in `ns` and waits for its UAPI socket;
    /// `what` names it in errors.
    pub fn spawn(ns: &netns::Namespace, name: &str, what: &str) -> LabResult<GoProcess> {
        let socket = uapi::fresh_socket(name, what)?;
        let program = GoBinary::path().ok_or_else(|| LabError::capability(anyhow::anyhow!(INSTALL)))?;
        let child = ns
            .command(&program)
            .args(["-f", name])
            .env("LOG_LEVEL", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| LabError::failed(anyhow::anyhow!("{what}: start {}: {e}", program.display())))?;
        let records = [
            owner::Record::process(child.id(), "wireguard-go"),
            owner::Record::Path { path: socket.clone() },
        ];
        let recorded = records.iter().try_for_each(|r| owner::record(r.clone()));
        // Built either way, so a failure to record still stops it (on drop).
        let mut process = GoProcess {
            child,
            socket,
            records,
        };
        recorded?;
        process.wait_for_socket(what)?;
        Ok(process)
    }

    /// Its UAPI socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_for_socket(&mut self, what: &str) -> LabResult<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.socket.exists() {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(LabError::failed(anyhow::anyhow!(
                    "{what}: wireguard-go exited ({status}) while starting: {}",
                    err.trim()
                )));
            }
            if Instant::now() > deadline {
                return Err(LabError::failed(anyhow::anyhow!(
                    "{what}: no UAPI socket {} after {START_TIMEOUT:?}",
                    self.socket.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

/// wireguard-go closes its TUN (which removes it) and its socket on SIGTERM; the socket
/// goes here if it is still there after a SIGKILL.
impl Drop for GoProcess {
    fn drop(&mut self) {
        crate::backend::daemon::stop(&mut self.child, Duration::from_secs(3));
        let _ = std::fs::remove_file(&self.socket);
        for r in &self.records {
            owner::forget(r);
        }
    }
}

/// One end: its wireguard-go process, until dropped.
pub struct GoEnd {
    process: GoProcess,
    ifname: String,
    side: Side,
    started: Instant,
    handshake: Option<Duration>,
}

impl GoEnd {
    pub async fn start(plan: &RunPlan, keys: &Keys, site: &Site<'_>) -> LabResult<GoEnd> {
        let name = ifname(site.side);
        let what = format!("wireguard-go end {} ({name})", site.side.name());
        let process = GoProcess::spawn(site.namespace, &name, &what)?;
        let mut end = GoEnd {
            process,
            ifname: name,
            side: site.side,
            started: Instant::now(),
            handshake: None,
        };
        end.handshake = uapi::configure(plan, keys, site, &end.ifname, end.process.socket(), &what).await?;
        end.started = Instant::now();
        Ok(end)
    }

    /// Its peer's last handshake, asked anew at each call (`--rekey-every`).
    pub fn last_handshake(&self) -> super::rekey::Ask {
        let what = format!("wireguard-go end {}", self.side.name());
        uapi::last_handshake(self.process.socket(), what, |peers| peers)
    }

    fn peers(&self, what: &str) -> LabResult<Vec<PeerStats>> {
        uapi::peers(self.process.socket(), what)
    }

    /// User and system CPU of the whole process so far (/proc/PID/stat); none once it is gone.
    fn cpu(&self) -> CpuTime {
        procstat::Stat::of_process(self.process.pid()).map_or_else(CpuTime::default, |s| s.cpu())
    }

    /// The peer's counters and the process's CPU since the handshake.
    pub fn evidence(&mut self) -> LabResult<WireguardEnd> {
        let what = format!("wireguard-go end {}", self.side.name());
        let mut end = super::end_from_stats(self.side, &self.ifname, &self.peers(&what)?)?;
        let cpu = self.cpu();
        end.cpu = Some(model::CpuUsage::new(
            cpu.user_s,
            cpu.system_s,
            self.started.elapsed().as_secs_f64(),
        ));
        end.handshake_s = self.handshake.map(|d| d.as_secs_f64());
        Ok(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the system's temp dir, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("ipl-go-test-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        /// A fake wireguard-go in `sub` that prints `version` as real ones do.
        fn fake(&self, sub: &str, version: &str) -> PathBuf {
            use std::os::unix::fs::PermissionsExt;
            let dir = self.0.join(sub);
            std::fs::create_dir_all(&dir).unwrap();
            let bin = dir.join(BINARY);
            std::fs::write(
                &bin,
                format!("#!/bin/sh\necho '{version}'\necho\necho 'Userspace WireGuard daemon'\n"),
            )
            .unwrap();
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
            // A fork elsewhere in this test process may hold the file open for writing a
            // moment longer (ETXTBSY): wait until it runs.
            for _ in 0..100 {
                match std::process::Command::new(&bin).output() {
                    Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => break,
                }
            }
            dir
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Issue 25 item 9: the lab's Debian 13 build wins over the PATH's, and the evidence
    /// carries its path, `--version` and package version, with no note.
    #[test]
    fn wireguard_go_prefers_the_labs_offload_build_and_reports_its_version() {
        let s = Scratch::new("prefer");
        let lab = s.fake("lab", "wireguard-go v0.0.20230223");
        std::fs::write(lab.join(PACKAGE_FILE), "0.0.20231211-1+b9 (Debian trixie)\n").unwrap();
        let path_dir = s.fake("path", "wireguard-go v0.0.20220316");
        let p = GoBinary::find_in(&lab, [path_dir]).unwrap();
        assert_eq!(p.path, lab.join(BINARY));
        assert_eq!(p.version, "wireguard-go v0.0.20230223");
        assert_eq!(p.package.as_deref(), Some("0.0.20231211-1+b9 (Debian trixie)"));
        assert_eq!(p.note, None);
        assert_eq!(
            p.implementation(),
            "wireguard-go 0.0.20231211-1+b9 (Debian trixie)"
        );
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["path"], lab.join(BINARY).to_str().unwrap());
        assert_eq!(json["version"], "wireguard-go v0.0.20230223");
    }

    /// Without the lab's build, Debian 12's from PATH runs, and the evidence says it
    /// predates the offloads and how to get the build that has them.
    #[test]
    fn wireguard_go_from_path_is_noted_as_predating_the_offloads() {
        let s = Scratch::new("fallback");
        let empty = s.0.join("no-lab-build");
        let path_dir = s.fake("path", "wireguard-go v0.0.20220316");
        let p = GoBinary::find_in(&empty, [s.0.join("nothing-here"), path_dir.clone()]).unwrap();
        assert_eq!(p.path, path_dir.join(BINARY));
        assert_eq!(p.version, "wireguard-go v0.0.20220316");
        assert_eq!(p.package, None);
        assert_eq!(p.implementation(), "wireguard-go v0.0.20220316");
        let note = p.note.unwrap();
        assert!(
            note.contains("predates wireguard-go's TUN and UDP offloads"),
            "{note}"
        );
        assert!(note.contains("lab/wireguard-go.sh"), "{note}");
        // A PATH build from the offload era is still named as not the lab's, without the
        // claim that it predates anything.
        let newer = s.fake("newer", "wireguard-go v0.0.20230223");
        let note = GoBinary::find_in(&empty, [newer]).unwrap().note.unwrap();
        assert!(!note.contains("predates"), "{note}");
        assert!(note.contains("from PATH"), "{note}");
        assert!(GoBinary::find_in(&empty, [s.0.join("nothing-here")]).is_none());
    }

    #[test]
    fn release_is_read_from_the_version_line() {
        assert_eq!(release("wireguard-go v0.0.20220316"), Some(20220316));
        assert_eq!(release("wireguard-go (version unknown)"), None);
    }
}
