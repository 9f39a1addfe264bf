//! What `ipsec-lab clean` does: removes what killed runs recorded and left behind, and nothing else.
//!
//! Every run records what it creates in a state file under /run/ipsec-lab and holds a lock
//! on it while it lives (crate `owner`). A state file whose lock is free belongs to a dead
//! run: its processes (only if the pid still has the recorded start time), SAs, policies,
//! namespaces and temporary directories are removed and its crypto driver priorities put
//! back to their recorded originals. A locked one belongs to a live run and is left alone.
//! A namespace nobody recorded is never removed, whatever its name.
//!
//! A state file is not trusted to name what it likes (issue 22): a record is acted on only
//! where it is the lab's ([`lab_owns`]): namespaces by a lab name, paths inside the lab's
//! own directories under its own names, processes whose start time and executable are the
//! recorded ones. Any other record is left alone, said so, and no longer kept.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use owner::{DeadOwner, Record, ScannedOwner, CURRENT_NAMESPACE};
use xfrm::{SaId, Spi, XfrmError, XfrmHandle};

use crate::error::{LabError, LabResult};

/// What [`clean_dead_owners`] did.
#[derive(Debug, Default)]
pub struct CleanSummary {
    /// One line per object removed and per live run left alone.
    pub lines: Vec<String>,
    /// Objects of dead runs that could not be removed (still recorded).
    pub failures: Vec<String>,
    /// Namespaces live runs recorded.
    pub live_namespaces: Vec<String>,
}

/// Cleans up after every dead owner and leaves live ones alone. Also what `serve` runs
/// when it starts and stops.
pub async fn clean_dead_owners() -> LabResult<CleanSummary> {
    clean_dead_owners_in(Path::new(owner::STATE_DIR)).await
}

async fn clean_dead_owners_in(state_dir: &Path) -> LabResult<CleanSummary> {
    let scanned = owner::scan(state_dir).map_err(LabError::failed)?;
    let mut summary = CleanSummary::default();
    let mut live_records = Vec::new();
    let mut dead = Vec::new();
    for s in scanned {
        match s {
            ScannedOwner::Live { owner, records } => {
                if owner.pid != std::process::id() {
                    summary.lines.push(format!(
                        "left alone: live run pid {} ({}), {} object(s) recorded",
                        owner.pid,
                        owner.command,
                        records.len()
                    ));
                }
                for r in &records {
                    if let Record::Namespace { name } = r {
                        summary.live_namespaces.push(name.clone());
                    }
                }
                live_records.extend(records);
            }
            ScannedOwner::Dead(d) => dead.push(d),
        }
    }
    for d in dead {
        clean_one(d, &live_records, &mut summary).await;
    }
    Ok(summary)
}

/// Puts back every crypto driver priority a dead owner recorded, leaving its other records
/// for `clean`. For the matrix, before it reads any priority: a raised one left by a killed
/// sweep must not be taken for the original. Returns notes for the report.
pub fn restore_dead_priorities() -> Vec<String> {
    let Ok(scanned) = owner::scan(Path::new(owner::STATE_DIR)) else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    for s in scanned {
        let ScannedOwner::Dead(d) = s else { continue };
        if !d
            .records()
            .iter()
            .any(|r| matches!(r, Record::DriverPriority { .. }))
        {
            continue;
        }
        let pid = d.owner().pid;
        let mut left = Vec::new();
        for r in d.records().to_vec() {
            match &r {
                Record::DriverPriority { driver, original } => match restore_priority(driver, *original) {
                    Ok(()) => notes.push(format!(
                        "restored {driver} to priority {original}, left raised by a killed run (pid {pid})"
                    )),
                    Err(e) => {
                        notes.push(format!("could not restore {driver} to {original}: {e}"));
                        left.push(r);
                    }
                },
                _ => left.push(r),
            }
        }
        if let Err(e) = d.settle(left) {
            notes.push(format!("state file of pid {pid}: {e}"));
        }
    }
    notes
}

/// Removes what one dead owner recorded, processes first (they may hold the rest).
async fn clean_one(dead: DeadOwner, live: &[Record], summary: &mut CleanSummary) {
    let pid = dead.owner().pid;
    let mut records = dead.records().to_vec();
    records.sort_by_key(|r| match r {
        Record::Process { .. } => 0,
        Record::XfrmPolicy(_) => 1,
        Record::XfrmSa { .. } => 2,
        Record::Namespace { .. } => 3,
        // After the SAs and namespaces: an instance an SA still uses cannot be removed.
        Record::CryptoInstance { .. } => 4,
        Record::DriverPriority { .. } => 5,
        Record::Path { .. } => 6,
    });
    let mut left = Vec::new();
    for r in records {
        if live.contains(&r) {
            summary.lines.push(format!(
                "left alone: {} (a live run recorded it too)",
                describe(&r)
            ));
            continue;
        }
        if let Err(why) = lab_owns(&r) {
            summary.lines.push(ignored(&r, pid, &why));
            continue;
        }
        match remove(&r).await {
            Ok(Removed::Done(done)) => summary
                .lines
                .push(format!("{done} (left by killed run pid {pid})")),
            Ok(Removed::Gone) => {}
            Ok(Removed::NotTheRecorded(why)) => summary.lines.push(ignored(&r, pid, &why)),
            Err(e) => {
                summary.failures.push(format!("{}: {e}", describe(&r)));
                left.push(r);
            }
        }
    }
    if let Err(e) = dead.settle(left) {
        summary.failures.push(format!("state file of pid {pid}: {e}"));
    }
}

/// The line for a record not acted on (and dropped from its state file).
fn ignored(r: &Record, pid: u32, why: &str) -> String {
    format!(
        "ignored the record of {} in the state file of pid {pid}, not the lab's: {why}",
        describe(r)
    )
}

fn describe(r: &Record) -> String {
    match r {
        Record::Namespace { name } => format!("namespace {name:?}"),
        Record::Process { pid, program, .. } => format!("process {pid} ({program})"),
        Record::XfrmSa { src, dst, spi, .. } => format!("SA spi={spi:#x} {src}->{dst}"),
        Record::XfrmPolicy(p) => format!(
            "policy {}/{} -> {}/{} dir {}",
            p.src, p.src_len, p.dst, p.dst_len, p.direction
        ),
        Record::DriverPriority { driver, original } => {
            format!("priority of {driver} (originally {original})")
        }
        Record::CryptoInstance { driver } => format!("crypto instance {driver}"),
        Record::Path { path } => format!("{path:?}"),
    }
}

/// Why a record is not the lab's to act on, if it is not: whatever a state file says, only
/// objects the lab could have made are touched.
fn lab_owns(r: &Record) -> Result<(), String> {
    match r {
        Record::Namespace { name } => lab_namespace(name),
        Record::XfrmSa { namespace, .. } => recorded_namespace(namespace),
        Record::XfrmPolicy(p) => recorded_namespace(&p.namespace),
        Record::Process { start_time, exe, .. } => match exe {
            _ if *start_time == 0 => Err("its record has no start time".into()),
            None => Err(
                "its record has no executable (written by an older ipsec-lab), so nothing shows it \
                 is the lab's process: stop it by hand if it is"
                    .into(),
            ),
            Some(_) => Ok(()),
        },
        Record::CryptoInstance { driver } => {
            if driver.starts_with("pcrypt(") && driver.ends_with(')') {
                Ok(())
            } else {
                Err("the lab builds only pcrypt(...) instances".into())
            }
        }
        Record::DriverPriority { .. } => Ok(()),
        Record::Path { path } => lab_path(path),
    }
}

fn lab_namespace(name: &str) -> Result<(), String> {
    if netns::is_lab_name(name) {
        Ok(())
    } else {
        Err(format!(
            "not a name the lab gives its namespaces ({}...)",
            netns::LAB_PREFIX
        ))
    }
}

/// The namespace of an SA or policy: this process's own, one by inode, or a lab name.
fn recorded_namespace(namespace: &str) -> Result<(), String> {
    let by_inode = namespace
        .strip_prefix("net:[")
        .and_then(|n| n.strip_suffix(']'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if namespace == CURRENT_NAMESPACE || by_inode {
        Ok(())
    } else {
        lab_namespace(namespace)
    }
}

/// Name prefixes of the lab's private temporary directories (`owner::PrivateDir`).
const TEMP_PREFIXES: [&str; 2] = ["ipl-", "ipsec-lab-"];
/// Where wireguard-go and boringtun serve the UAPI sockets of the lab's devices (ipl-wg*).
const WIREGUARD_SOCKETS: &str = "/var/run/wireguard";

/// A recorded path is the lab's when it is one of its own kinds in one of its own
/// directories: a private temporary directory (a real directory of this user, named ipl-*
/// or ipsec-lab-*, directly in /tmp, /var/tmp or $TMPDIR), or the UAPI socket of one of
/// its WireGuard devices. Nothing on the way may be "..", and a symlink is never followed.
fn lab_path(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let plain = path.is_absolute()
        && path
            .components()
            .skip(1)
            .all(|c| matches!(c, Component::Normal(_)))
        && path.components().collect::<PathBuf>().as_os_str() == path.as_os_str();
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err("not a path the lab makes".into());
    };
    if !plain {
        return Err("not a plain absolute path (the lab records no \"..\", \".\" or \"//\")".into());
    }
    // The directory it is in, with symlinks resolved, against the lab's own.
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    let Some(parent) = canonical(parent) else {
        // Nothing there to remove: `remove` finds it gone.
        return Ok(());
    };
    let in_temp = [std::env::temp_dir(), "/tmp".into(), "/var/tmp".into()]
        .iter()
        .any(|root| canonical(root).as_deref() == Some(parent.as_path()));
    let in_wireguard = canonical(Path::new(WIREGUARD_SOCKETS)).as_deref() == Some(parent.as_path());
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => Some(m),
        // Already gone: nothing will be removed.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot inspect it: {e}")),
    };
    if in_temp && TEMP_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return match meta {
            None => Ok(()),
            Some(m) if !m.file_type().is_dir() => {
                Err("the lab's temporary paths are directories; this is not one".into())
            }
            Some(m) if m.uid() != nix::unistd::geteuid().as_raw() => {
                Err(format!("it belongs to uid {}, not to this user", m.uid()))
            }
            Some(_) => Ok(()),
        };
    }
    if in_wireguard && name.starts_with("ipl-wg") && name.ends_with(".sock") {
        return match meta {
            Some(m) if !m.file_type().is_socket() => Err("not a socket".into()),
            _ => Ok(()),
        };
    }
    Err(format!(
        "outside the lab's directories and names ({} or {} directly in the temporary directory, \
         ipl-wg*.sock in {WIREGUARD_SOCKETS})",
        TEMP_PREFIXES[0], TEMP_PREFIXES[1]
    ))
}

/// What [`remove`] found.
enum Removed {
    /// Removed; what was done.
    Done(String),
    /// Already gone.
    Gone,
    /// Something else is there now, not what was recorded (why): left alone.
    NotTheRecorded(String),
}

/// Removes one object [`lab_owns`] accepted.
async fn remove(r: &Record) -> anyhow::Result<Removed> {
    match r {
        Record::Process {
            pid,
            start_time,
            program,
            exe: Some(exe),
        } => Ok(match identity(*pid, *start_time, exe)? {
            Identity::Same => {
                stop_process(*pid, *start_time);
                Removed::Done(format!("stopped process {pid} ({program})"))
            }
            Identity::Gone => Removed::Gone,
            Identity::Other(now) => {
                Removed::NotTheRecorded(format!("pid {pid} runs {now:?} now, not the recorded {exe:?}"))
            }
        }),
        Record::Process { exe: None, .. } => Ok(Removed::NotTheRecorded("no executable recorded".into())),
        Record::Namespace { name } => {
            if std::fs::symlink_metadata(Path::new("/run/netns").join(name)).is_err() {
                return Ok(Removed::Gone);
            }
            match netns::delete_by_name(name) {
                Ok(()) => Ok(Removed::Done(format!("removed namespace {name}"))),
                Err(netns::NetnsError::NotNamespace { what, .. }) => Ok(Removed::NotTheRecorded(format!(
                    "/run/netns/{name} is a {what}, not a namespace"
                ))),
                Err(e) => Err(e.into()),
            }
        }
        Record::XfrmSa {
            namespace,
            src,
            dst,
            spi,
        } => {
            let Some(handle) = xfrm_handle(namespace)? else {
                return Ok(Removed::Gone);
            };
            let id = SaId {
                src: *src,
                dst: *dst,
                spi: Spi(*spi),
            };
            match handle.delete_sa(&id).await {
                Ok(()) => Ok(Removed::Done(format!("removed SA {id}"))),
                Err(XfrmError::NotFound { .. }) => Ok(Removed::Gone),
                Err(e) => Err(e.into()),
            }
        }
        Record::XfrmPolicy(p) => {
            let Some(handle) = xfrm_handle(&p.namespace)? else {
                return Ok(Removed::Gone);
            };
            let id = crate::backend::xfrm::policy_id(p)
                .ok_or_else(|| anyhow::anyhow!("a policy record this version cannot read"))?;
            match handle.delete_policy(&id).await {
                Ok(()) => Ok(Removed::Done(format!("removed policy {id}"))),
                Err(XfrmError::NotFound { .. }) => Ok(Removed::Gone),
                Err(e) => Err(e.into()),
            }
        }
        Record::DriverPriority { driver, original } => {
            restore_priority(driver, *original)?;
            Ok(Removed::Done(format!("restored {driver} to priority {original}")))
        }
        Record::CryptoInstance { driver } => {
            if !driver_present(driver) {
                return Ok(Removed::Gone);
            }
            let mut cu = xfrm::crypto_user::CryptoUser::open()?;
            // Namespaces removed just before free their SAs in a work queue: wait for it.
            xfrm::pcrypt::remove(&mut cu, driver, Duration::from_secs(15))?;
            Ok(Removed::Done(format!("removed crypto instance {driver}")))
        }
        Record::Path { path } => {
            // lab_path checked what is there: a real directory (not a symlink to one) or a
            // socket; remove_dir_all follows no symlink inside.
            let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
            let removed = if is_dir {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
            match removed {
                Ok(()) => Ok(Removed::Done(format!("removed {}", path.display()))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Removed::Gone),
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// An XFRM handle in the recorded namespace (`net:[INODE]`: this clean's own, or one named
/// under /run/netns; a plain name: /run/netns/NAME); None when that namespace is gone, and
/// its SAs with it.
fn xfrm_handle(namespace: &str) -> anyhow::Result<Option<XfrmHandle>> {
    if namespace == CURRENT_NAMESPACE || namespace == owner::current_network_namespace() {
        return Ok(Some(XfrmHandle::open()?));
    }
    let named = if namespace.starts_with("net:[") {
        std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| owner::namespace_id(p).as_deref() == Some(namespace))
    } else {
        Some(Path::new("/run/netns").join(namespace)).filter(|p| p.exists())
    };
    match named {
        Some(path) => Ok(Some(XfrmHandle::open_in(&path)?)),
        None => Ok(None),
    }
}

fn restore_priority(driver: &str, original: u32) -> anyhow::Result<()> {
    let mut cu = xfrm::crypto_user::CryptoUser::open()?;
    match cu.update(driver, Some(original)) {
        Ok(()) => Ok(()),
        // The driver's module is gone, and with it the raised priority.
        Err(_) if !driver_present(driver) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn driver_present(driver: &str) -> bool {
    std::fs::read_to_string("/proc/crypto").is_ok_and(|t| {
        t.lines().any(|l| {
            l.strip_prefix("driver")
                .is_some_and(|v| v.trim_start_matches([' ', ':']) == driver)
        })
    })
}

/// Whether `pid` is still the recorded process.
enum Identity {
    Same,
    /// It ended (the pid is free, or another process started since took it).
    Gone,
    /// A process started at the recorded time runs another executable (the one named).
    Other(PathBuf),
}

/// Compares `pid` with its record: start time first (a reused pid differs there), then the
/// executable. One replaced on disk since (a package upgrade) reads "PATH (deleted)" and
/// still counts as the recorded one. An executable this process may not read (another
/// user's, or one with more capabilities than a hardened `serve`) is an error, so the record
/// stays for a `clean` that can check it.
fn identity(pid: u32, start_time: u64, exe: &Path) -> anyhow::Result<Identity> {
    if owner::process_start_time(pid) != Some(start_time) {
        return Ok(Identity::Gone);
    }
    let now = match owner::process_exe(pid) {
        Ok(now) => now,
        // Exited meanwhile, or a zombie (its executable is gone with its memory).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Identity::Gone),
        Err(e) => {
            return Err(anyhow::anyhow!(
                "cannot read the executable of pid {pid} to check it: {e}"
            ))
        }
    };
    let mut deleted = exe.as_os_str().to_owned();
    deleted.push(" (deleted)");
    if now == exe || now.as_os_str() == deleted {
        Ok(Identity::Same)
    } else {
        Ok(Identity::Other(now))
    }
}

/// Stops `pid`, checked by [`identity`] to be the recorded process: SIGTERM, then SIGKILL
/// after 3 s, while it still has the recorded start time.
fn stop_process(pid: u32, start_time: u64) {
    use nix::sys::signal::{kill, Signal};
    let same = || owner::process_start_time(pid) == Some(start_time);
    let target = nix::unistd::Pid::from_raw(pid as i32);
    let _ = kill(target, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(3);
    while same() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if same() {
        let _ = kill(target, Signal::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(2);
        while same() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A state directory of its own holding one dead owner's state file with `records`,
    /// written by hand as a forger would; removed on drop.
    struct Forged {
        dir: PathBuf,
    }

    impl Forged {
        fn new(test: &str, records: &[Record]) -> Forged {
            let dir = std::env::temp_dir().join(format!("ipl-clean-test-{}-{test}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir(&dir).unwrap();
            let doc = serde_json::json!({
                "version": 1,
                "owner": { "pid": 999_999, "start_time": 1, "command": "forged" },
                "records": records,
            });
            std::fs::write(dir.join("999999-1.json"), doc.to_string()).unwrap();
            Forged { dir }
        }

        fn clean(&self) -> CleanSummary {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(clean_dead_owners_in(&self.dir)).unwrap()
        }

        /// Records still in the state file (none once it is gone).
        fn left(&self) -> Vec<Record> {
            match owner::scan(&self.dir).unwrap().pop() {
                Some(ScannedOwner::Dead(d)) => d.records().to_vec(),
                None => Vec::new(),
                Some(other) => panic!("{other:?}"),
            }
        }
    }

    impl Drop for Forged {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn ignored_lines(summary: &CleanSummary) -> usize {
        summary
            .lines
            .iter()
            .filter(|l| l.starts_with("ignored the record of"))
            .count()
    }

    /// Regression (issue 22): a forged process record (a real pid with its real start time)
    /// made `clean` kill an unrelated process.
    #[test]
    fn a_forged_process_record_does_not_stop_an_unrelated_process() {
        let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = victim.id();
        let start_time = owner::process_start_time(pid).unwrap();
        // Reaped at once when it ends, so "still running" below means running.
        let (ended_tx, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || ended_tx.send(victim.wait().unwrap()));
        let forged = Forged::new(
            "process",
            &[
                Record::Process {
                    pid,
                    start_time,
                    program: "openvpn".into(),
                    exe: Some("/usr/sbin/openvpn".into()),
                },
                // As older versions wrote them: no executable to check.
                Record::Process {
                    pid,
                    start_time,
                    program: "sleep".into(),
                    exe: None,
                },
            ],
        );
        let summary = forged.clean();
        assert!(ended.try_recv().is_err(), "the unrelated process was stopped");
        assert_eq!(owner::process_start_time(pid), Some(start_time));
        assert_eq!(ignored_lines(&summary), 2, "{:?}", summary.lines);
        let text = summary.lines.join("\n");
        assert!(text.contains("not the recorded \"/usr/sbin/openvpn\""), "{text}");
        assert!(text.contains("no executable"), "{text}");
        assert!(summary.failures.is_empty(), "{:?}", summary.failures);
        assert_eq!(forged.left(), Vec::new(), "ignored records are not kept");

        // The same process recorded as the lab records its own (start time and executable)
        // is stopped: the check does not refuse everything.
        let genuine = Forged::new("process-genuine", &[Record::process(pid, "sleep")]);
        let summary = genuine.clean();
        let status = ended.recv_timeout(Duration::from_secs(10)).expect("stopped");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGTERM)
        );
        assert!(
            summary.lines[0].starts_with(&format!("stopped process {pid} (sleep)")),
            "{:?}",
            summary.lines
        );
    }

    /// Regression (issue 22): a forged path record made `clean` remove any directory.
    #[test]
    fn a_forged_path_record_removes_nothing_outside_the_labs_directories() {
        let id = std::process::id();
        let tmp = std::env::temp_dir();
        let forged_dir = Forged::new("path-victims", &[]);
        let victim = |path: PathBuf| {
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("precious"), "keep").unwrap();
            path
        };
        // Lab names, but not directly in a temporary directory.
        let nested = victim(forged_dir.dir.join("ipl-victim"));
        // In a temporary directory, but not a lab name.
        let unnamed = victim(tmp.join(format!("victim-{id}")));
        let dotdot = tmp.join(format!("ipl-x/../victim-{id}"));
        let link = tmp.join(format!("ipl-clean-link-{id}"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&nested, &link).unwrap();
        let file = tmp.join(format!("ipl-clean-file-{id}"));
        std::fs::write(&file, "keep").unwrap();
        let genuine = victim(tmp.join(format!("ipl-clean-genuine-{id}")));
        let forged = Forged::new(
            "path",
            // Only paths this test made: should the check ever regress, nothing else goes.
            &[&nested, &unnamed, &dotdot, &link, &file, &genuine].map(|p| Record::Path {
                path: p.to_path_buf(),
            }),
        );
        let summary = forged.clean();
        for kept in [&nested, &unnamed] {
            assert!(
                kept.join("precious").exists(),
                "{kept:?} removed: {:?}",
                summary.lines
            );
        }
        assert!(std::fs::symlink_metadata(&link).is_ok(), "the link was removed");
        assert!(file.exists(), "the file was removed");
        assert!(!genuine.exists(), "the lab's own directory stayed: {:?}", summary);
        assert_eq!(ignored_lines(&summary), 5, "{:?}", summary.lines);
        assert!(summary.failures.is_empty(), "{:?}", summary.failures);
        assert_eq!(forged.left(), Vec::new());
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_dir_all(&unnamed).unwrap();
    }

    /// Records naming a namespace (or an SA's namespace, or a crypto instance) outside the
    /// lab's pattern are refused before anything is looked up: no root needed to show it.
    #[test]
    fn forged_namespace_names_are_refused_before_anything_is_touched() {
        let sa = |namespace: &str| Record::XfrmSa {
            namespace: namespace.into(),
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.0.2".parse().unwrap(),
            spi: 0x101,
        };
        let ns = |name: &str| Record::Namespace { name: name.into() };
        let forged = Forged::new(
            "names",
            &[
                ns("../../tmp/ipl-x"),
                ns("ipl-a/../../../tmp/ipl-clean-none"),
                ns("foreign"),
                ns("ipl-"),
                ns("ipl-x\nremoved namespace y"),
                sa("../../proc/1/ns/net"),
                sa("net:[1x]"),
                Record::CryptoInstance {
                    driver: "aes-generic".into(),
                },
            ],
        );
        let summary = forged.clean();
        assert_eq!(ignored_lines(&summary), 8, "{:?}", summary.lines);
        assert!(
            summary.lines.iter().all(|l| !l.contains('\n')),
            "{:?}",
            summary.lines
        );
        assert!(summary.failures.is_empty(), "{:?}", summary.failures);
        assert_eq!(forged.left(), Vec::new());
    }

    fn mounted(path: &Path) -> bool {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        info.lines()
            .any(|l| l.split(' ').nth(4) == Some(&*path.to_string_lossy()))
    }

    fn sh(script: &str) {
        let out = Command::new("sh").args(["-c", script]).output().unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
    }

    /// Regression (issue 22): a namespace record named `../../tmp/...` made `clean` unmount a
    /// tmpfs and delete a file outside /run/netns, and one naming a namespace the lab never
    /// made deleted it.
    #[test]
    fn a_forged_namespace_record_touches_nothing_outside_the_labs_namespaces() {
        if !testcap::root("a_forged_namespace_record_touches_nothing_outside_the_labs_namespaces") {
            return;
        }
        let id = std::process::id();
        let file = PathBuf::from(format!("/tmp/ipl-clean-victim-{id}"));
        std::fs::write(&file, "keep").unwrap();
        let mnt = PathBuf::from(format!("/tmp/ipl-clean-mnt-{id}"));
        std::fs::create_dir_all(&mnt).unwrap();
        sh(&format!("mount -t tmpfs ipl-clean-test {}", mnt.display()));
        let foreign = format!("foreign-clean-test-{id}");
        sh(&format!("ip netns add {foreign}"));
        // A lab name, but a directory with a tmpfs on it, not a namespace.
        let lab_named_mount = format!("ipl-cleantest-dir-{id}");
        let lab_named_path = Path::new("/run/netns").join(&lab_named_mount);
        std::fs::create_dir_all(&lab_named_path).unwrap();
        sh(&format!(
            "mount -t tmpfs ipl-clean-test {}",
            lab_named_path.display()
        ));
        let genuine = format!("ipl-cleantest-{id}");
        sh(&format!("ip netns add {genuine}"));

        let ns = |name: &str| Record::Namespace { name: name.into() };
        let forged = Forged::new(
            "namespaces",
            &[
                ns(&format!("../../tmp/ipl-clean-victim-{id}")),
                ns(&format!("../../tmp/ipl-clean-mnt-{id}")),
                ns(&foreign),
                ns(&lab_named_mount),
                ns(&genuine),
            ],
        );
        let summary = forged.clean();
        let survived = (
            file.exists(),
            mounted(&mnt),
            Path::new("/run/netns").join(&foreign).exists(),
            mounted(&lab_named_path),
            Path::new("/run/netns").join(&genuine).exists(),
        );
        sh(&format!(
            "umount {mnt}; rmdir {mnt}; rm -f {file}; ip netns del {foreign}; umount {lab}; rmdir {lab}; \
             ip netns del {genuine} 2>/dev/null || true",
            mnt = mnt.display(),
            file = file.display(),
            lab = lab_named_path.display(),
        ));
        assert_eq!(survived, (true, true, true, true, false), "{summary:?}");
        assert_eq!(ignored_lines(&summary), 4, "{:?}", summary.lines);
        assert!(
            summary.lines.contains(&format!(
                "removed namespace {genuine} (left by killed run pid 999999)"
            )),
            "{:?}",
            summary.lines
        );
        assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    }
}
