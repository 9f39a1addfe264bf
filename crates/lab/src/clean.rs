//! What `ipsec-lab clean` does: removes what killed runs recorded and left behind, and nothing else.
//!
//! Every run records what it creates in a state file under /run/ipsec-lab and holds a lock
//! on it while it lives (crate `owner`). A state file whose lock is free belongs to a dead
//! run: its processes (only if the pid still has the recorded start time), SAs, policies,
//! namespaces and temporary directories are removed and its crypto driver priorities put
//! back to their recorded originals. A locked one belongs to a live run and is left alone.
//! A namespace nobody recorded is never removed, whatever its name.

use std::path::Path;
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
    let scanned = owner::scan(Path::new(owner::STATE_DIR)).map_err(LabError::failed)?;
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
        match remove(&r).await {
            Ok(Some(done)) => summary
                .lines
                .push(format!("{done} (left by killed run pid {pid})")),
            Ok(None) => {}
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

fn describe(r: &Record) -> String {
    match r {
        Record::Namespace { name } => format!("namespace {name}"),
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
        Record::Path { path } => format!("{}", path.display()),
    }
}

/// Removes one object: Some(what was done), None when it was already gone.
async fn remove(r: &Record) -> anyhow::Result<Option<String>> {
    match r {
        Record::Process {
            pid,
            start_time,
            program,
        } => Ok(stop_process(*pid, *start_time).then(|| format!("stopped process {pid} ({program})"))),
        Record::Namespace { name } => {
            if !Path::new("/run/netns").join(name).exists() {
                return Ok(None);
            }
            netns::delete_by_name(name)?;
            Ok(Some(format!("removed namespace {name}")))
        }
        Record::XfrmSa {
            namespace,
            src,
            dst,
            spi,
        } => {
            let Some(handle) = xfrm_handle(namespace)? else {
                return Ok(None);
            };
            let id = SaId {
                src: *src,
                dst: *dst,
                spi: Spi(*spi),
            };
            match handle.delete_sa(&id).await {
                Ok(()) => Ok(Some(format!("removed SA {id}"))),
                Err(XfrmError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        Record::XfrmPolicy(p) => {
            let Some(handle) = xfrm_handle(&p.namespace)? else {
                return Ok(None);
            };
            let id = crate::backend::xfrm::policy_id(p)
                .ok_or_else(|| anyhow::anyhow!("a policy record this version cannot read"))?;
            match handle.delete_policy(&id).await {
                Ok(()) => Ok(Some(format!("removed policy {id}"))),
                Err(XfrmError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        Record::DriverPriority { driver, original } => {
            restore_priority(driver, *original)?;
            Ok(Some(format!("restored {driver} to priority {original}")))
        }
        Record::CryptoInstance { driver } => {
            if !driver_present(driver) {
                return Ok(None);
            }
            let mut cu = xfrm::crypto_user::CryptoUser::open()?;
            // Namespaces removed just before free their SAs in a work queue: wait for it.
            xfrm::pcrypt::remove(&mut cu, driver, Duration::from_secs(15))?;
            Ok(Some(format!("removed crypto instance {driver}")))
        }
        Record::Path { path } => {
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
            match removed {
                Ok(()) => Ok(Some(format!("removed {}", path.display()))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
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

/// Stops `pid` (SIGTERM, then SIGKILL after 3 s) if it is still the process that was
/// recorded: same pid AND same start time. True when it was stopped.
fn stop_process(pid: u32, start_time: u64) -> bool {
    use nix::sys::signal::{kill, Signal};
    let same = || start_time != 0 && owner::process_start_time(pid) == Some(start_time);
    if !same() {
        return false;
    }
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
    true
}
