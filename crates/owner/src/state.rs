//! The state file of one process, and the scan `clean` makes of everyone's.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::{process_start_time, OwnerError, Record};

/// Where every process keeps its state file.
pub const STATE_DIR: &str = "/run/ipsec-lab";
const FORMAT_VERSION: u32 = 1;
const STATE_EXT: &str = "json";
const LOCK_EXT: &str = "lock";

/// Who wrote a state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerInfo {
    pub pid: u32,
    pub start_time: u64,
    /// The owner's command line, for telling the user which run was left alone.
    pub command: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Document {
    version: u32,
    owner: OwnerInfo,
    records: Vec<Record>,
}

/// This process's state file, locked while it exists.
#[derive(Debug)]
pub struct StateFile {
    state_path: PathBuf,
    lock_path: PathBuf,
    lock: Flock<File>,
    doc: Document,
}

impl StateFile {
    /// Creates (or takes over) the state file of this process in `dir`, creating `dir` with
    /// mode 0700 if needed, and takes the lock.
    pub fn create_in(dir: &Path) -> Result<StateFile, OwnerError> {
        prepare_dir(dir)?;
        let pid = std::process::id();
        let owner = OwnerInfo {
            pid,
            start_time: process_start_time(pid).unwrap_or(0),
            command: command_line(),
        };
        let stem = format!("{}-{}", owner.pid, owner.start_time);
        let lock_path = dir.join(format!("{stem}.{LOCK_EXT}"));
        let lock = lock_own(&lock_path)?;
        let file = StateFile {
            state_path: dir.join(format!("{stem}.{STATE_EXT}")),
            lock_path,
            lock,
            doc: Document {
                version: FORMAT_VERSION,
                owner,
                records: Vec::new(),
            },
        };
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.state_path
    }

    pub fn records(&self) -> &[Record] {
        &self.doc.records
    }

    /// Adds `record` and writes the file before returning: once this returns, a crash
    /// leaves the object to `clean`.
    pub fn add(&mut self, record: Record) -> Result<(), OwnerError> {
        self.doc.records.push(record);
        write_atomically(&self.state_path, &self.doc)
    }

    /// Removes the first record of the same object as `record`; true when none is left.
    pub fn remove(&mut self, record: &Record) -> Result<bool, OwnerError> {
        if let Some(i) = self.doc.records.iter().position(|r| r.same_object(record)) {
            self.doc.records.remove(i);
        }
        if self.doc.records.is_empty() {
            return Ok(true);
        }
        write_atomically(&self.state_path, &self.doc).map(|()| false)
    }

    /// Deletes both files (state first, so no reader ever sees a state file without its
    /// lock file while its owner lives), then lets go of the lock.
    pub fn delete(self) {
        let _ = std::fs::remove_file(&self.state_path);
        let _ = std::fs::remove_file(tmp_path(&self.state_path));
        let _ = std::fs::remove_file(&self.lock_path);
        drop(self.lock);
    }
}

/// The state file of this process, created on the first record.
static THIS_PROCESS: Mutex<Option<StateFile>> = Mutex::new(None);

/// Records an object this process just created, in [`STATE_DIR`].
pub fn record(record: Record) -> Result<(), OwnerError> {
    let mut state = THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    if state.is_none() {
        *state = Some(StateFile::create_in(Path::new(STATE_DIR))?);
    }
    let file = state.as_mut().expect("created above");
    file.add(record)
}

/// Forgets an object this process removed; with nothing left, the state file goes away.
/// Failing to write only leaves a record too many, which `clean` finds already gone.
pub fn forget(record: &Record) {
    let mut state = THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(file) = state.as_mut() else { return };
    match file.remove(record) {
        Ok(false) => {}
        Ok(true) => {
            if let Some(file) = state.take() {
                file.delete();
            }
        }
        Err(e) => tracing::warn!("state file: {e}"),
    }
}

/// One state file found by [`scan`].
#[derive(Debug)]
pub enum ScannedOwner {
    /// Its owner holds the lock: a live run, to be left alone.
    Live { owner: OwnerInfo, records: Vec<Record> },
    /// Nobody holds the lock: its owner died; what it recorded is left over. The lock is
    /// now held by the scanner until the [`DeadOwner`] is dropped.
    Dead(DeadOwner),
}

/// The state of a dead owner, locked by the scanner.
#[derive(Debug)]
pub struct DeadOwner {
    file: StateFile,
}

impl DeadOwner {
    pub fn owner(&self) -> &OwnerInfo {
        &self.file.doc.owner
    }

    pub fn records(&self) -> &[Record] {
        self.file.records()
    }

    /// Keeps only `left` (what could not be removed); deletes the files when it is empty.
    pub fn settle(mut self, left: Vec<Record>) -> Result<(), OwnerError> {
        if left.is_empty() {
            self.file.delete();
            return Ok(());
        }
        self.file.doc.records = left;
        write_atomically(&self.file.state_path, &self.file.doc)
    }
}

/// Every state file in `dir`, each found live or dead. Files that are not state files are
/// skipped; a missing directory means nobody recorded anything.
pub fn scan(dir: &Path) -> Result<Vec<ScannedOwner>, OwnerError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(OwnerError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    // Plain files only: a symlink is never a state file (and is not followed). A temporary
    // file stands for its state file, which a kill before the rename may have left unmade.
    let states: std::collections::BTreeSet<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter_map(|p| match p.extension() {
            Some(x) if x == STATE_EXT => Some(p),
            Some(x) if x == "tmp" && p.with_extension("").extension().is_some_and(|x| x == STATE_EXT) => {
                Some(p.with_extension(""))
            }
            _ => None,
        })
        .collect();
    let mut found = Vec::new();
    for state_path in states {
        if let Some(owner) = scan_one(&state_path)? {
            found.push(owner);
        }
    }
    Ok(found)
}

fn scan_one(state_path: &Path) -> Result<Option<ScannedOwner>, OwnerError> {
    let lock_path = state_path.with_extension(LOCK_EXT);
    let read = || -> Result<Option<Document>, OwnerError> {
        match read_no_follow(state_path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| OwnerError::Parse {
                    path: state_path.to_path_buf(),
                    source,
                }),
            // Its owner finished between the listing and now.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(OwnerError::Read {
                path: state_path.to_path_buf(),
                source,
            }),
        }
    };
    let Some(lock) = try_lock_existing(&lock_path)? else {
        return Ok(read()?.map(|doc| ScannedOwner::Live {
            owner: doc.owner,
            records: doc.records,
        }));
    };
    // A dead owner killed between writing its next state and renaming it over the last:
    // the whole temporary file holds what it had recorded by then (an object is recorded
    // once made), so its records count too. A half-written one records nothing whole.
    let tmp = tmp_path(state_path);
    let newer = read_no_follow(&tmp)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Document>(&bytes).ok());
    let doc = match (read()?, newer) {
        (Some(mut doc), Some(newer)) if newer.owner == doc.owner => {
            for r in newer.records {
                if !doc.records.iter().any(|d| d.same_object(&r)) {
                    doc.records.push(r);
                }
            }
            doc
        }
        (Some(doc), _) => doc,
        (None, Some(newer)) => newer,
        (None, None) => {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&lock_path);
            return Ok(None);
        }
    };
    Ok(Some(ScannedOwner::Dead(DeadOwner {
        file: StateFile {
            state_path: state_path.to_path_buf(),
            lock_path,
            lock,
            doc,
        },
    })))
}

/// The bytes of `path`, refusing a symlink there (ELOOP): a state file is always a plain file.
fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(o_nofollow())
        .open(path)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Takes the lock of a state file without waiting: None when its owner holds it.
fn try_lock_existing(lock_path: &Path) -> Result<Option<Flock<File>>, OwnerError> {
    let lock_error = |source| OwnerError::Lock {
        path: lock_path.to_path_buf(),
        source,
    };
    // A state file without a lock file lost its owner mid-exit: recreate the lock to hold.
    let file = open_lock_file(lock_path).map_err(lock_error)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) if same_file(&lock, lock_path) => Ok(Some(lock)),
        // The owner replaced its files meanwhile: it is alive.
        Ok(_) => Ok(None),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(lock_error(e.into())),
    }
}

/// Creates and locks this process's lock file, waiting out a scanner that holds it.
fn lock_own(lock_path: &Path) -> Result<Flock<File>, OwnerError> {
    let lock_error = |source| OwnerError::Lock {
        path: lock_path.to_path_buf(),
        source,
    };
    loop {
        let file = open_lock_file(lock_path).map_err(lock_error)?;
        let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| lock_error(e.into()))?;
        // A scanner may have deleted the file while we waited: lock the one on disk.
        if same_file(&lock, lock_path) {
            return Ok(lock);
        }
    }
}

/// Opens (creating if needed) a lock file; its content is never used.
fn open_lock_file(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(o_nofollow())
        .mode(0o600)
        .open(path)
}

fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Creates `dir` with mode 0700, or checks that the existing one is a real directory of
/// this user that nobody else can write into.
fn prepare_dir(dir: &Path) -> Result<(), OwnerError> {
    match std::fs::DirBuilder::new()
        .recursive(false)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(OwnerError::StateDir {
                path: dir.to_path_buf(),
                source,
            })
        }
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|source| OwnerError::StateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let unsafe_dir = |why: String| OwnerError::UnsafeStateDir {
        path: dir.to_path_buf(),
        why,
    };
    if !meta.is_dir() {
        return Err(unsafe_dir("it is not a directory".into()));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(unsafe_dir(format!("it belongs to uid {}", meta.uid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "others may write into it (mode {:o})",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Where [`write_atomically`] writes `state_path`'s next version before renaming it over.
fn tmp_path(state_path: &Path) -> PathBuf {
    state_path.with_extension(format!("{STATE_EXT}.tmp"))
}

/// Writes `doc` to a temporary file, syncs it and renames it over `path`. The temporary
/// file is created fresh (O_EXCL, O_NOFOLLOW): a file or symlink planted at its name is
/// removed (unlink never follows a symlink), never written through.
fn write_atomically(path: &Path, doc: &Document) -> Result<(), OwnerError> {
    let write_error = |source| OwnerError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tmp_path(path);
    let text = serde_json::to_vec_pretty(doc).expect("records serialise");
    let mut f = create_fresh(&tmp).map_err(write_error)?;
    f.write_all(&text).map_err(write_error)?;
    f.sync_all().map_err(write_error)?;
    std::fs::rename(&tmp, path).map_err(write_error)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(write_error)
}

/// Creates `path` as a new file of mode 0600. Whatever is already there (a temporary file a
/// crash left, or a planted symlink) is unlinked first; a few tries, in case something keeps
/// planting one.
fn create_fresh(path: &Path) -> std::io::Result<File> {
    let mut tries = 0;
    loop {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(o_nofollow())
            .mode(0o600)
            .open(path);
        match opened {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 3 => {
                tries += 1;
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            other => return other,
        }
    }
}

fn o_nofollow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

fn command_line() -> String {
    // The program by its name (`ipsec-lab`), not the path it was started by.
    let mut args = std::env::args();
    let program = args.next().unwrap_or_default();
    let program = Path::new(&program)
        .file_name()
        .map_or(program.clone(), |n| n.to_string_lossy().into_owned());
    let mut line = std::iter::once(program).chain(args).collect::<Vec<_>>().join(" ");
    if line.len() > 200 {
        let mut end = 200;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str) -> Record {
        Record::Namespace {
            name: name.into(),
            id: None,
        }
    }

    #[test]
    fn a_locked_state_file_is_live_and_an_unlocked_one_is_dead() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = StateFile::create_in(dir.path()).unwrap();
        mine.add(ns("ipl-x-a")).unwrap();
        // Our own lock is held on another open file description: the scan sees it live.
        let found = scan(dir.path()).unwrap();
        assert_eq!(found.len(), 1);
        match &found[0] {
            ScannedOwner::Live { owner, records } => {
                assert_eq!(owner.pid, std::process::id());
                assert_eq!(records, &vec![ns("ipl-x-a")]);
            }
            other => panic!("expected live, got {other:?}"),
        }
        drop(found);
        // The owner "dies": its lock goes, its files stay.
        drop(mine.lock);
        let mut found = scan(dir.path()).unwrap();
        let Some(ScannedOwner::Dead(dead)) = found.pop() else {
            panic!("expected dead")
        };
        assert_eq!(dead.records(), &[ns("ipl-x-a")]);
        // While the scanner holds a dead owner, another scan sees it taken.
        assert!(matches!(
            scan(dir.path()).unwrap()[..],
            [ScannedOwner::Live { .. }]
        ));
        dead.settle(Vec::new()).unwrap();
        assert!(scan(dir.path()).unwrap().is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// An owner killed between writing its next state and renaming it over the last (seen:
    /// a SIGKILLed user-mode Linux run's state left as `PID-START.json.tmp` after `clean`):
    /// the whole temporary file's records are its owner's too, with or without a state file
    /// beside it, and go with the rest; a half-written one, alone, just goes.
    #[test]
    fn a_dead_owners_temporary_state_is_its_latest() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = StateFile::create_in(dir.path()).unwrap();
        mine.add(ns("a")).unwrap();
        let mut newer = mine.doc.clone();
        newer.records.push(ns("b"));
        let tmp = tmp_path(mine.path());
        std::fs::write(&tmp, serde_json::to_vec(&newer).unwrap()).unwrap();
        let state = mine.path().to_path_buf();
        drop(mine.lock);
        let dead = |dir: &Path| match scan(dir).unwrap().pop() {
            Some(ScannedOwner::Dead(dead)) => dead,
            other => panic!("expected dead, got {other:?}"),
        };
        assert_eq!(dead(dir.path()).records(), &[ns("a"), ns("b")]);
        // Killed while writing its first record: no state file, the temporary one only.
        std::fs::remove_file(&state).unwrap();
        let found = dead(dir.path());
        assert_eq!(found.records(), &[ns("a"), ns("b")]);
        found.settle(Vec::new()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Half a file and a lock file, nothing whole recorded: both removed, nothing found.
        std::fs::write(&tmp, "{\"version\": 1, \"own").unwrap();
        std::fs::write(state.with_extension(LOCK_EXT), "").unwrap();
        assert!(scan(dir.path()).unwrap().is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn what_could_not_be_removed_stays_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = StateFile::create_in(dir.path()).unwrap();
        mine.add(ns("a")).unwrap();
        mine.add(ns("b")).unwrap();
        drop(mine.lock);
        let Some(ScannedOwner::Dead(dead)) = scan(dir.path()).unwrap().pop() else {
            panic!("expected dead")
        };
        dead.settle(vec![ns("b")]).unwrap();
        let Some(ScannedOwner::Dead(again)) = scan(dir.path()).unwrap().pop() else {
            panic!("expected dead")
        };
        assert_eq!(again.records(), &[ns("b")]);
    }

    #[test]
    fn the_file_is_whole_json_after_every_change_and_gone_when_empty() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = StateFile::create_in(dir.path()).unwrap();
        let pid = std::process::id();
        mine.add(Record::process(pid, "self")).unwrap();
        mine.add(ns("ipl-1-a")).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(mine.path()).unwrap()).unwrap();
        assert_eq!(doc["version"], 1);
        assert_eq!(doc["owner"]["pid"], pid);
        assert_eq!(doc["records"][0]["kind"], "process");
        assert_eq!(doc["records"][0]["start_time"], process_start_time(pid).unwrap());
        assert_eq!(doc["records"][1]["name"], "ipl-1-a");
        let name = mine.path().file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name, format!("{pid}-{}.json", process_start_time(pid).unwrap()));
        assert!(!mine.remove(&ns("ipl-1-a")).unwrap());
        assert!(mine.remove(&Record::process(pid, "self")).unwrap());
        mine.delete();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// A namespace is recorded with its identity and forgotten by name: once deleted, its
    /// identity can no longer be read.
    #[test]
    fn a_namespace_is_forgotten_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = StateFile::create_in(dir.path()).unwrap();
        mine.add(Record::Namespace {
            name: "ipl-1-a".into(),
            id: Some("net:[4026532290] cookie 17".into()),
        })
        .unwrap();
        assert!(mine.remove(&ns("ipl-1-a")).unwrap(), "{:?}", mine.records());
        mine.delete();
    }

    #[test]
    fn a_state_directory_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        StateFile::create_in(&state).unwrap().delete();
        assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            StateFile::create_in(&state),
            Err(OwnerError::UnsafeStateDir { .. })
        ));
    }

    #[test]
    fn files_that_are_not_state_files_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.json.tmp"), "half").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "hi").unwrap();
        assert!(scan(dir.path()).unwrap().is_empty());
        assert!(scan(&dir.path().join("missing")).unwrap().is_empty());
    }

    /// Regression (issue 22): a symlink planted at the temporary name made the next write
    /// overwrite its target.
    #[test]
    fn write_atomically_does_not_follow_a_planted_symlink_at_its_temporary_name() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let mut mine = StateFile::create_in(&dir.path().join("state")).unwrap();
        let tmp = mine.path().with_extension("json.tmp");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        mine.add(ns("ipl-1-a")).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&tmp).is_err(), "renamed into place");
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(mine.path()).unwrap()).unwrap();
        assert_eq!(doc["records"][0]["name"], "ipl-1-a");
        // A leftover temporary file (a crash between create and rename) is replaced too.
        std::fs::write(&tmp, "half a file").unwrap();
        mine.add(ns("ipl-1-b")).unwrap();
        assert!(std::fs::symlink_metadata(&tmp).is_err());
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(mine.path()).unwrap()).unwrap();
        assert_eq!(doc["records"][1]["name"], "ipl-1-b");
        // A symlink among the state files is skipped, not read.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::os::unix::fs::symlink(&victim, other.join("1-1.json")).unwrap();
        assert!(scan(&other).unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        mine.delete();
    }
}
