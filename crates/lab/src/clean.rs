//! What `ipsec-lab clean` does: removes what killed runs recorded and left behind, and nothing else.
//!
//! Every run records what it creates in a state file under /run/ipsec-lab and holds a lock
//! on it while it lives (crate `owner`). A state file whose lock is free belongs to a dead
//! run: its processes (only if the pid still has the recorded start time), SAs, policies,
//! namespaces and temporary directories are removed and its crypto driver priorities put
//! back to their recorded originals. A locked one belongs to a live run and is left alone.
//! A namespace nobody recorded is never removed, whatever its name.
//!
//! A state file is not trusted to name what it likes (issues 22, 42): a record is acted on
//! only where the object itself shows it is the lab's ([`lab_owns`], then [`remove`]):
//! namespaces by a lab name; SAs and policies in a namespace named by its netns cookie (an
//! inode alone is reused), carrying the lab's SPI and reqid, or priority and template reqids;
//! processes running one of the lab's programs with the recorded start time and executable;
//! driver priorities only of `cbc(aes)` drivers still holding the lab's pin priority;
//! crypto instances only of the lab's `pcrypt(...)` kind; paths inside the lab's own
//! directories under its own names. Any other record is left alone, said so, and no
//! longer kept; so is one whose object is gone or is another's now (a stale record).

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use owner::{DeadOwner, NamespaceId, Record, ScannedOwner, CURRENT_NAMESPACE};
use xfrm::range::{is_lab_policy_priority, LAB_DRIVER_PRIORITY, SPI_FIRST, SPI_LAST};
use xfrm::{PolicyId, SaId, Spi, XfrmError, XfrmHandle};

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
                    if let Record::Namespace { name, .. } = r {
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

/// Puts back every crypto driver priority a dead owner recorded (where [`clean`](self) would),
/// leaving its other records for `clean`. For the matrix, before it reads any priority: a
/// raised one left by a killed sweep must not be taken for the original. Returns notes for
/// the report.
pub fn restore_dead_priorities() -> Vec<String> {
    let Ok(scanned) = owner::scan(Path::new(owner::STATE_DIR)) else {
        return Vec::new();
    };
    let (live, dead) = split_live(scanned);
    let mut notes = Vec::new();
    for d in dead {
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
            let Record::DriverPriority {
                driver,
                original,
                set,
            } = &r
            else {
                left.push(r);
                continue;
            };
            if held_by_live(&r, &live) {
                notes.push(format!("left {driver} alone: a live run changed it too"));
                left.push(r);
                continue;
            }
            let outcome = match lab_owns(&r) {
                Err(why) => Ok(Removed::NotTheRecorded(why)),
                Ok(()) => restore_priority(driver, *original, set.unwrap_or(*original)),
            };
            match outcome {
                Ok(Removed::Done(_)) => notes.push(format!(
                    "restored {driver} to priority {original}, left raised by a killed run (pid {pid})"
                )),
                Ok(Removed::NotTheRecorded(why)) => notes.push(ignored(&r, pid, &why)),
                Ok(Removed::Gone) => {}
                Err(e) => {
                    notes.push(format!("could not restore {driver} to {original}: {e}"));
                    left.push(r);
                }
            }
        }
        if let Err(e) = d.settle(left) {
            notes.push(format!("state file of pid {pid}: {e}"));
        }
    }
    notes
}

/// The records of live owners, and the dead owners.
fn split_live(scanned: Vec<ScannedOwner>) -> (Vec<Record>, Vec<DeadOwner>) {
    let mut live = Vec::new();
    let mut dead = Vec::new();
    for s in scanned {
        match s {
            ScannedOwner::Live { records, .. } => live.extend(records),
            ScannedOwner::Dead(d) => dead.push(d),
        }
    }
    (live, dead)
}

/// Whether a live run recorded the same object: the same record, or a priority of the
/// same driver (whatever it recorded as the original, the driver is that run's now).
fn held_by_live(r: &Record, live: &[Record]) -> bool {
    live.iter().any(|l| match (r, l) {
        (Record::DriverPriority { driver: a, .. }, Record::DriverPriority { driver: b, .. }) => a == b,
        _ => l.same_object(r),
    })
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
        if held_by_live(&r, live) {
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
        Record::Namespace { name, .. } => format!("namespace {name:?}"),
        Record::Process { pid, program, .. } => format!("process {pid} ({program})"),
        Record::XfrmSa { src, dst, spi, .. } => format!("SA spi={spi:#x} {src}->{dst}"),
        Record::XfrmPolicy(p) => format!(
            "policy {}/{} -> {}/{} dir {}",
            p.src, p.src_len, p.dst, p.dst_len, p.direction
        ),
        Record::DriverPriority { driver, original, .. } => {
            format!("priority of {driver} (originally {original})")
        }
        Record::CryptoInstance { driver } => format!("crypto instance {driver}"),
        Record::Path { path } => format!("{path:?}"),
    }
}

/// Why a record is not the lab's to act on, if it is not: whatever a state file says, only
/// objects the lab could have made are touched. What the record alone can show; [`remove`]
/// then checks the object itself.
fn lab_owns(r: &Record) -> Result<(), String> {
    match r {
        Record::Namespace { name, .. } => lab_namespace(name),
        Record::XfrmSa { namespace, spi, .. } => {
            if !Spi(*spi).is_lab() {
                return Err(format!(
                    "SPI {spi:#x} is outside the lab's range ({SPI_FIRST:#x}..={SPI_LAST:#x})"
                ));
            }
            recorded_namespace(namespace)
        }
        Record::XfrmPolicy(p) => recorded_namespace(&p.namespace),
        Record::Process {
            start_time,
            exe,
            program,
            ..
        } => match exe {
            _ if *start_time == 0 => Err("its record has no start time".into()),
            None => Err(
                "its record has no executable (written by an older ipsec-lab), so nothing shows it \
                 is the lab's process: stop it by hand if it is"
                    .into(),
            ),
            Some(exe) => lab_executable(program, exe),
        },
        Record::CryptoInstance { driver } => {
            if driver.starts_with("pcrypt(") && driver.ends_with(')') {
                Ok(())
            } else {
                Err("the lab builds only pcrypt(...) instances".into())
            }
        }
        Record::DriverPriority { original, set, .. } => match set {
            None => Err(
                "its record has no priority the lab set (written by an older ipsec-lab), so nothing \
                 shows the driver still holds the lab's: put it back by hand if it does"
                    .into(),
            ),
            Some(set) if set == original => Ok(()),
            Some(set) if *set != LAB_DRIVER_PRIORITY => Err(format!(
                "{set} is not the priority the lab pins drivers at ({LAB_DRIVER_PRIORITY})"
            )),
            Some(_) if *original >= LAB_DRIVER_PRIORITY => {
                Err(format!("its original {original} is no priority the kernel gives"))
            }
            Some(_) => Ok(()),
        },
        Record::Path { path } => lab_path(path),
    }
}

/// The programs the lab starts and records, by file name: its own children (another
/// ipsec-lab, the UML kernel) and the daemons of its backends.
const LAB_PROGRAMS: [&str; 5] = [
    "ipsec-lab",
    "linux.uml",
    "charon-systemd",
    "openvpn",
    "wireguard-go",
];
/// The program `--vm` starts (a script: its own process runs an interpreter, not the lab's
/// program, and is not stopped by `clean`), and the programs it starts in turn.
const VM_PROGRAM: &str = "vng";
const VM_HELPERS: [&str; 2] = ["qemu-system-", "virtiofsd"];

/// Whether a process record's executable is one the lab starts for the program recorded:
/// the program's own (`charon-systemd` runs a file named charon-systemd), or for the
/// members of a child's group ("started by ..."), another of the lab's programs or a helper
/// of `--vm`. The executable is checked again against the process in [`identity`].
fn lab_executable(program: &str, exe: &Path) -> Result<(), String> {
    let (member, program) = match program.strip_prefix("started by ") {
        Some(parent) => (true, parent),
        None => (false, program),
    };
    let name = program.split(" (").next().unwrap_or(program);
    let file = exe
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = file.strip_suffix(" (deleted)").unwrap_or(&file);
    if !(LAB_PROGRAMS.contains(&name) || name == VM_PROGRAM) {
        return Err(format!("{name:?} is no program the lab starts"));
    }
    let ok = if member {
        LAB_PROGRAMS.contains(&file) || VM_HELPERS.iter().any(|h| file.starts_with(h))
    } else {
        file == name
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{exe:?} is not an executable the lab starts as {}{name}",
            if member { "part of " } else { "" }
        ))
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

/// The namespace of an SA or policy: one named for good (its netns cookie, or the fixed
/// inode of the initial namespace), or a lab name. An inode alone is refused: the kernel
/// gives a dead namespace's inode to the next one made, which may be anyone's.
fn recorded_namespace(namespace: &str) -> Result<(), String> {
    if namespace == CURRENT_NAMESPACE {
        return Err("its record does not say which namespace it is in".into());
    }
    match NamespaceId::parse(namespace) {
        Some(id) if id.is_lasting() => Ok(()),
        Some(_) => Err(
            "its namespace is named by an inode alone (an older ipsec-lab), which the kernel reuses: \
             nothing shows a namespace with it now is the recorded one"
                .into(),
        ),
        None => lab_namespace(namespace),
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
        Record::Namespace { name, id } => {
            let path = Path::new("/run/netns").join(name);
            if std::fs::symlink_metadata(&path).is_err() {
                return Ok(Removed::Gone);
            }
            // Recorded with its identity (netns cookie): another namespace given the same
            // name since is not the recorded one. (Records of older versions have the lab's
            // name and the nsfs mount under it to go by.)
            if let (Some(id), Some(now)) = (id, owner::namespace_id(&path)) {
                if *id != now {
                    return Ok(Removed::NotTheRecorded(format!(
                        "/run/netns/{name} is another namespace now ({now}, not the recorded {id})"
                    )));
                }
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
            match handle.get_sa(&id).await {
                Ok(sa) if !sa.is_lab() => {
                    return Ok(Removed::NotTheRecorded(format!(
                        "SA {id} has reqid {}, not one of the lab's",
                        sa.reqid
                    )))
                }
                Ok(_) => {}
                Err(XfrmError::NotFound { .. }) => return Ok(Removed::Gone),
                Err(e) => return Err(e.into()),
            }
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
            let Some(PolicyId::Selector { selector, direction }) = crate::backend::xfrm::policy_id(p) else {
                return Ok(Removed::NotTheRecorded(
                    "a policy record this version cannot read".into(),
                ));
            };
            let found = handle
                .list_policies()
                .await?
                .into_iter()
                .find(|f| f.direction == Some(direction) && f.selector == Some(selector));
            let Some(found) = found else {
                return Ok(Removed::Gone);
            };
            let what = format!("policy {selector} dir {}", direction.name());
            if !(found.is_lab() && is_lab_policy_priority(found.priority)) {
                let reqids: Vec<String> = found.template_reqids.iter().map(|r| r.to_string()).collect();
                return Ok(Removed::NotTheRecorded(format!(
                    "{what} has priority {} and template reqids [{}], not the lab's",
                    found.priority,
                    reqids.join(", ")
                )));
            }
            // By the index of the one checked, not by selector: another with the same
            // selector (another mark) is never the one removed.
            let id = PolicyId::Index {
                index: found.index,
                direction,
            };
            match handle.delete_policy(&id).await {
                Ok(()) => Ok(Removed::Done(format!("removed {what}"))),
                Err(XfrmError::NotFound { .. }) => Ok(Removed::Gone),
                Err(e) => Err(e.into()),
            }
        }
        Record::DriverPriority {
            driver,
            original,
            set,
        } => restore_priority(driver, *original, set.unwrap_or(*original)),
        Record::CryptoInstance { driver } => {
            let text = std::fs::read_to_string("/proc/crypto").unwrap_or_default();
            match xfrm::pcrypt::is_lab_instance(&text, driver) {
                Ok(false) => return Ok(Removed::Gone),
                Err(why) => return Ok(Removed::NotTheRecorded(why)),
                Ok(true) => {}
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

/// An XFRM handle in the recorded namespace (one [`recorded_namespace`] accepted: named by
/// [`owner::namespace_id`], this clean's own or one mounted under /run/netns, matched by
/// inode and cookie; or a lab name, /run/netns/NAME); None when that namespace is gone, and
/// its SAs with it.
fn xfrm_handle(namespace: &str) -> anyhow::Result<Option<XfrmHandle>> {
    let Some(recorded) = NamespaceId::parse(namespace) else {
        let path = Path::new("/run/netns").join(namespace);
        return Ok(match path.exists() {
            true => Some(XfrmHandle::open_in(&path)?),
            false => None,
        });
    };
    let is_recorded = |path: &Path| {
        owner::namespace_id(path)
            .and_then(|n| NamespaceId::parse(&n))
            .is_some_and(|n| {
                n.inode == recorded.inode && (recorded.cookie.is_none() || n.cookie == recorded.cookie)
            })
    };
    if is_recorded(Path::new("/proc/self/ns/net")) {
        return Ok(Some(XfrmHandle::open()?));
    }
    let named = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| is_recorded(p));
    match named {
        Some(path) => Ok(Some(XfrmHandle::open_in(&path)?)),
        None => Ok(None),
    }
}

/// Puts `driver` back to `original` where it still holds `set`, the priority the lab gave
/// it ([`lab_owns`] checked that is the lab's pin priority), and is a driver the lab
/// changes (`cbc(aes)`).
fn restore_priority(driver: &str, original: u32, set: u32) -> anyhow::Result<Removed> {
    match priority_action(&xfrm::driver::read_proc_crypto(), driver, original, set) {
        Ok(true) => {}
        Ok(false) => return Ok(Removed::Gone),
        Err(why) => return Ok(Removed::NotTheRecorded(why)),
    }
    let mut cu = xfrm::crypto_user::CryptoUser::open()?;
    match cu.update(driver, Some(original)) {
        Ok(()) => Ok(Removed::Done(format!("restored {driver} to priority {original}"))),
        // The driver's module is gone, and with it the raised priority.
        Err(_) if !driver_present(driver) => Ok(Removed::Gone),
        Err(e) => Err(e.into()),
    }
}

/// Whether a recorded priority is to be put back, by /proc/crypto (`entries`): false when
/// there is nothing to do (the driver is gone, or was rewritten unchanged), an error
/// saying why where the driver is no longer as the lab left it.
fn priority_action(
    entries: &[model::env::CryptoEntry],
    driver: &str,
    original: u32,
    set: u32,
) -> Result<bool, String> {
    let Some(now) = xfrm::driver::priority_of(entries, driver) else {
        return Ok(false);
    };
    if set == original {
        return Ok(false);
    }
    if !xfrm::driver::is_pinnable(entries, driver) {
        return Err(format!(
            "{driver} is no {} driver; the lab changes only those",
            xfrm::driver::CBC_AES
        ));
    }
    if i64::from(now) != i64::from(set) {
        return Err(format!(
            "{driver} holds priority {now} now, not the {set} the lab set"
        ));
    }
    Ok(true)
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
/// after 3 s, while it still runs with the recorded start time. A zombie has stopped: an
/// orphan's (its run was killed) is reaped by init when init gets to it, under load seconds
/// later, and waiting for that only delayed `clean`.
fn stop_process(pid: u32, start_time: u64) {
    use nix::sys::signal::{kill, Signal};
    let same =
        || procstat::Stat::of_process(pid).is_some_and(|s| s.start_time == start_time && s.state != 'Z');
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
    use xfrm::LAB_POLICY_PRIORITY;

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

    /// A directory of the test's own, removed on drop.
    struct TestDir(PathBuf);

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A directory of the test's own with copies of `sleep` under the names given, so the
    /// processes a test records run executables the test made.
    fn sleepers(test: &str, names: &[&str]) -> (TestDir, Vec<PathBuf>) {
        let dir = TestDir(std::env::temp_dir().join(format!("ipl-clean-{test}-{}", std::process::id())));
        let _ = std::fs::remove_dir_all(&dir.0);
        std::fs::create_dir(&dir.0).unwrap();
        let sleep = ["/usr/bin/sleep", "/bin/sleep"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("sleep");
        let copies = names
            .iter()
            .map(|n| {
                let copy = dir.0.join(n);
                std::fs::copy(sleep, &copy).unwrap();
                copy
            })
            .collect();
        (dir, copies)
    }

    /// A process of the test's own, reaped at once when it ends, so "still running" means
    /// running; its exit status comes on `ended`. Killed on drop if it still runs.
    struct OwnProcess {
        pid: u32,
        ended: std::sync::mpsc::Receiver<std::process::ExitStatus>,
    }

    impl OwnProcess {
        fn spawn(exe: &Path) -> OwnProcess {
            let mut child = Command::new(exe).arg("30").spawn().unwrap();
            let pid = child.id();
            let (tx, ended) = std::sync::mpsc::channel();
            std::thread::spawn(move || tx.send(child.wait().unwrap()));
            OwnProcess { pid, ended }
        }

        fn running(&self) -> bool {
            matches!(self.ended.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty))
        }
    }

    impl Drop for OwnProcess {
        fn drop(&mut self) {
            if self.running() {
                let pid = nix::unistd::Pid::from_raw(self.pid as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = self.ended.recv_timeout(Duration::from_secs(10));
            }
        }
    }

    /// Regression (issues 22, 42): a process record naming a real pid with its real start
    /// time and executable made `clean` stop a process the lab never starts (`sleep`
    /// recorded as `charon-systemd`); one without an executable was trusted as well. A
    /// stale record (the pid taken by a process started later) is the common case.
    #[test]
    fn a_process_record_stops_only_a_program_the_lab_starts() {
        let (_dir, exes) = sleepers("process", &["sleep", "charon-systemd"]);
        let other_process = OwnProcess::spawn(&exes[0]);
        let daemon_process = OwnProcess::spawn(&exes[1]);
        let (other, daemon) = (other_process.pid, daemon_process.pid);
        let start = |pid| owner::process_start_time(pid).unwrap();
        let record = |pid, program: &str| Record::Process {
            pid,
            start_time: start(pid),
            program: program.into(),
            exe: owner::process_exe(pid).ok(),
        };
        let forged = Forged::new(
            "process",
            &[
                // The record: another program's process named as the lab's daemon.
                record(other, "charon-systemd"),
                // Its own name, but not a program the lab starts.
                record(other, "sleep"),
                // As older versions wrote them: no executable to check.
                Record::Process {
                    pid: other,
                    start_time: start(other),
                    program: "charon-systemd".into(),
                    exe: None,
                },
                // Stale: the lab's program, but its pid now another process's (started
                // at another time).
                Record::Process {
                    pid: daemon,
                    start_time: start(daemon) - 1,
                    program: "charon-systemd".into(),
                    exe: owner::process_exe(daemon).ok(),
                },
            ],
        );
        let summary = forged.clean();
        assert!(other_process.running(), "the other program was stopped");
        assert!(daemon_process.running(), "a stale record stopped a process");
        assert_eq!(ignored_lines(&summary), 3, "{:?}", summary.lines);
        let text = summary.lines.join("\n");
        assert!(
            text.contains("is not an executable the lab starts as charon-systemd"),
            "{text}"
        );
        assert!(text.contains("\"sleep\" is no program the lab starts"), "{text}");
        assert!(text.contains("no executable"), "{text}");
        assert!(summary.failures.is_empty(), "{:?}", summary.failures);
        assert_eq!(
            forged.left(),
            Vec::new(),
            "ignored and stale records are not kept"
        );

        // The lab's program, recorded as the lab records it: stopped, so the check does
        // not refuse everything.
        let genuine = Forged::new("process-genuine", &[Record::process(daemon, "charon-systemd")]);
        let summary = genuine.clean();
        let status = daemon_process
            .ended
            .recv_timeout(Duration::from_secs(10))
            .expect("stopped");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGTERM)
        );
        assert_eq!(
            summary.lines,
            [format!(
                "stopped process {daemon} (charon-systemd) (left by killed run pid 999999)"
            )]
        );
    }

    #[test]
    fn the_labs_executables_are_known_by_name() {
        let ok = |program: &str, exe: &str| lab_executable(program, Path::new(exe));
        assert_eq!(ok("charon-systemd", "/usr/sbin/charon-systemd"), Ok(()));
        assert_eq!(ok("linux.uml (end a)", "/opt/k/linux.uml (deleted)"), Ok(()));
        assert_eq!(ok("started by linux.uml (end a)", "/usr/bin/linux.uml"), Ok(()));
        assert_eq!(
            ok("started by vng (guest)", "/usr/bin/qemu-system-x86_64"),
            Ok(())
        );
        assert_eq!(ok("started by ipsec-lab (child)", "/usr/sbin/openvpn"), Ok(()));
        assert!(ok("charon-systemd", "/usr/bin/sleep").is_err());
        assert!(ok("openvpn", "/usr/sbin/charon-systemd").is_err());
        assert!(ok("vng (guest)", "/usr/bin/bash").is_err());
        assert!(ok("started by vng (guest)", "/usr/bin/bash").is_err());
        assert!(ok("started by sleep", "/usr/sbin/openvpn").is_err());
        assert!(ok("sh (x)", "/usr/bin/sh").is_err());
    }

    /// Regression (issue 42): a driver priority was put back for any driver to any value,
    /// so a stale record could make a table-based AES the default.
    #[test]
    fn a_driver_priority_is_put_back_only_where_the_lab_pinned_it() {
        let prio = |driver: &str, original, set| Record::DriverPriority {
            driver: driver.into(),
            original,
            set,
        };
        // The record alone: the lab's pin priority, set by a version that recorded it.
        assert_eq!(lab_owns(&prio("d", 400, Some(LAB_DRIVER_PRIORITY))), Ok(()));
        assert_eq!(lab_owns(&prio("d", 400, Some(400))), Ok(()));
        assert!(lab_owns(&prio("d", 400, None)).is_err());
        assert!(lab_owns(&prio("d", 0, Some(500))).is_err());
        assert!(lab_owns(&prio("d", LAB_DRIVER_PRIORITY, Some(LAB_DRIVER_PRIORITY))).is_ok());
        assert!(lab_owns(&prio("d", LAB_DRIVER_PRIORITY + 1, Some(LAB_DRIVER_PRIORITY))).is_err());

        // The driver itself, by /proc/crypto (text, no kernel touched).
        let entry = |name: &str, driver: &str, priority: u32| {
            format!("name         : {name}\ndriver       : {driver}\npriority     : {priority}\nselftest     : passed\ntype         : skcipher\n")
        };
        let text = [
            entry("cbc(aes)", "cbc-aes-aesni", LAB_DRIVER_PRIORITY),
            entry("cbc(aes)", "cbc(aes-generic)", 100),
            entry("ctr(aes)", "ctr-aes-aesni", LAB_DRIVER_PRIORITY),
        ]
        .join("\n");
        let entries = model::env::parse_proc_crypto(&text);
        let act = |driver, original| priority_action(&entries, driver, original, LAB_DRIVER_PRIORITY);
        assert_eq!(act("cbc-aes-aesni", 400), Ok(true));
        // Stale: the driver went back (or was set again by someone else) since.
        let e = act("cbc(aes-generic)", 100).unwrap_err();
        assert!(e.contains("holds priority 100 now"), "{e}");
        // Not a driver the lab changes, though at the lab's value.
        let e = act("ctr-aes-aesni", 300).unwrap_err();
        assert!(e.contains("no cbc(aes) driver"), "{e}");
        // Gone with its module, or rewritten unchanged: nothing to do.
        assert_eq!(act("cbc-aes-gone", 400), Ok(false));
        assert_eq!(priority_action(&entries, "cbc(aes-generic)", 100, 100), Ok(false));
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
    /// lab's pattern, an SA outside the lab's SPIs, or a driver priority the lab does not
    /// set, are refused before anything is looked up: no root needed to show it.
    #[test]
    fn forged_namespace_names_are_refused_before_anything_is_touched() {
        let sa_spi = |namespace: &str, spi| Record::XfrmSa {
            namespace: namespace.into(),
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.0.2".parse().unwrap(),
            spi,
        };
        let sa = |namespace: &str| sa_spi(namespace, SPI_FIRST | 0x101);
        let ns = |name: &str| Record::Namespace {
            name: name.into(),
            id: None,
        };
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
                // An inode of a namespace made at run time, without its cookie: reused.
                sa("net:[4026532999]"),
                sa(CURRENT_NAMESPACE),
                // Not the lab's SPI, in the namespace this test runs in.
                sa_spi(&owner::current_network_namespace(), 0x101),
                Record::CryptoInstance {
                    driver: "aes-generic".into(),
                },
                Record::DriverPriority {
                    driver: "cbc-aes-ipl-test-none".into(),
                    original: 0,
                    set: None,
                },
                Record::DriverPriority {
                    driver: "cbc-aes-ipl-test-none".into(),
                    original: 0,
                    set: Some(500),
                },
            ],
        );
        let summary = forged.clean();
        assert_eq!(ignored_lines(&summary), 13, "{:?}", summary.lines);
        let text = summary.lines.join("\n");
        assert!(text.contains("inode alone"), "{text}");
        assert!(text.contains("SPI 0x101 is outside the lab's range"), "{text}");
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
        // Stale (issue 42): the recorded namespace is gone and another has its name now.
        let reused = format!("ipl-cleantest-re-{id}");
        sh(&format!("ip netns add {reused}"));
        let reused_record = Record::namespace(&reused);
        sh(&format!("ip netns del {reused}; ip netns add {reused}"));

        let ns = |name: &str| Record::Namespace {
            name: name.into(),
            id: None,
        };
        let forged = Forged::new(
            "namespaces",
            &[
                ns(&format!("../../tmp/ipl-clean-victim-{id}")),
                ns(&format!("../../tmp/ipl-clean-mnt-{id}")),
                ns(&foreign),
                ns(&lab_named_mount),
                reused_record,
                Record::namespace(&genuine),
            ],
        );
        let summary = forged.clean();
        let survived = (
            file.exists(),
            mounted(&mnt),
            Path::new("/run/netns").join(&foreign).exists(),
            mounted(&lab_named_path),
            Path::new("/run/netns").join(&reused).exists(),
            Path::new("/run/netns").join(&genuine).exists(),
        );
        sh(&format!(
            "umount {mnt}; rmdir {mnt}; rm -f {file}; ip netns del {foreign}; umount {lab}; rmdir {lab}; \
             ip netns del {reused}; ip netns del {genuine} 2>/dev/null || true",
            mnt = mnt.display(),
            file = file.display(),
            lab = lab_named_path.display(),
        ));
        assert_eq!(survived, (true, true, true, true, true, false), "{summary:?}");
        assert_eq!(ignored_lines(&summary), 5, "{:?}", summary.lines);
        assert!(
            summary
                .lines
                .iter()
                .any(|l| l.contains("is another namespace now")),
            "{:?}",
            summary.lines
        );
        assert!(
            summary.lines.contains(&format!(
                "removed namespace {genuine} (left by killed run pid 999999)"
            )),
            "{:?}",
            summary.lines
        );
        assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    }
    /// A namespace of the test's own, deleted on drop.
    struct OwnNamespace(String);

    impl Drop for OwnNamespace {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }

    /// Regression (issue 42): a record naming a policy the lab never made (no reqid,
    /// priority 0) made `clean` delete it, and a namespace named by its inode alone was
    /// taken as the recorded one. Every policy here is made by the test, in a namespace it
    /// made; only the one with the lab's marks, in the namespace named by its cookie, goes.
    #[test]
    fn a_policy_record_removes_only_a_policy_with_the_labs_marks() {
        if !testcap::root("a_policy_record_removes_only_a_policy_with_the_labs_marks") {
            return;
        }
        let name = format!("ipl-cleanpol-{}", std::process::id());
        sh(&format!("ip netns add {name}"));
        let own = OwnNamespace(name.clone());
        let path = Path::new("/run/netns").join(&name);
        let namespace = owner::namespace_id(&path).unwrap();
        let inode_only = namespace.split(' ').next().unwrap().to_string();
        let parsed = NamespaceId::parse(&namespace).unwrap();
        let other_cookie = format!("{inode_only} cookie {}", parsed.cookie.unwrap() + 1_000_000);
        let lab_reqid = xfrm::range::REQID_FIRST | 0x7;
        // (last octet of the selector's source, priority, template reqid)
        let policies = [
            (1, 0, None),                              // the issue's: no template, priority 0
            (2, LAB_POLICY_PRIORITY, Some(5)),         // the lab's priority, another's reqid
            (3, 0, Some(lab_reqid)),                   // the lab's reqid, another's priority
            (4, LAB_POLICY_PRIORITY, Some(lab_reqid)), // the lab's
        ];
        for (host, priority, reqid) in policies {
            let tmpl = reqid.map_or(String::new(), |r| {
                format!(" tmpl src 198.18.0.{host} dst 198.18.1.1 proto esp reqid {r} mode tunnel")
            });
            sh(&format!(
                "ip -n {name} xfrm policy add src 198.18.0.{host}/32 dst 198.18.1.1/32 dir out priority {priority}{tmpl}"
            ));
        }
        let record = |namespace: &str, host: u8| {
            Record::XfrmPolicy(owner::PolicyRecord {
                namespace: namespace.into(),
                src: format!("198.18.0.{host}").parse().unwrap(),
                src_len: 32,
                dst: "198.18.1.1".parse().unwrap(),
                dst_len: 32,
                proto: None,
                src_port: None,
                dst_port: None,
                direction: "out".into(),
            })
        };
        let listed = || {
            let out = Command::new("ip")
                .args(["-n", &name, "xfrm", "policy", "list"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        // Names that do not prove the namespace: by inode alone (reused once it dies), and
        // by its inode with another namespace's cookie (the inode reused by another).
        let unproven = Forged::new(
            "policy-namespace",
            &[record(&inode_only, 4), record(&other_cookie, 4)],
        );
        let summary = unproven.clean();
        assert!(listed().contains("198.18.0.4/32"), "{summary:?}");
        assert_eq!(ignored_lines(&summary), 1, "{:?}", summary.lines);
        assert!(summary.failures.is_empty(), "{:?}", summary.failures);

        let forged = Forged::new(
            "policy",
            &[
                record(&namespace, 1),
                record(&namespace, 2),
                record(&namespace, 3),
                record(&namespace, 4),
                // Stale: a policy already gone.
                record(&namespace, 9),
            ],
        );
        let summary = forged.clean();
        let left = listed();
        drop(own);
        for host in 1..=3 {
            assert!(
                left.contains(&format!("198.18.0.{host}/32")),
                "{host} removed: {left}\n{summary:?}"
            );
        }
        assert!(!left.contains("198.18.0.4/32"), "the lab's policy stayed: {left}");
        assert_eq!(ignored_lines(&summary), 3, "{:?}", summary.lines);
        assert!(
            summary
                .lines
                .iter()
                .any(|l| l.starts_with("removed policy 198.18.0.4/32")),
            "{:?}",
            summary.lines
        );
        assert!(summary.failures.is_empty(), "{:?}", summary.failures);
        assert_eq!(forged.left(), Vec::new());

        // Stale: the namespace itself is gone, the record names it by its cookie.
        let gone = Forged::new("policy-gone", &[record(&namespace, 4)]);
        let summary = gone.clean();
        assert!(
            summary.lines.is_empty() && summary.failures.is_empty(),
            "{summary:?}"
        );
    }
}
