//! Run ownership: what this process created, recorded on disk while it lives.
//!
//! Every process that creates lab objects (namespaces, processes, SAs and policies, raised
//! crypto driver priorities, temporary directories) records each one here as it
//! creates it and forgets it once it is removed. The records live in a state file under
//! [`STATE_DIR`] named after the process (pid and start time), next to a lock file the
//! process holds an exclusive `flock` on for its whole life. So `ipsec-lab clean` can tell
//! a live owner (lock taken: leave it alone) from a dead one (lock free: what it recorded is
//! left over), and never has to guess from a name.
//!
//! The state file is rewritten whole on every change (temporary file, fsync, rename), so a
//! reader never sees half a file, even after a SIGKILL. Once nothing is recorded any more,
//! both files go away.
//!
//! Not recorded: objects inside a recorded namespace (its veth, TUN devices, SAs go with it)
//! and TUN devices anywhere (the kernel removes a non-persistent TUN device when its
//! process dies). Leaves out: how each kind of object is removed (that is `clean`'s job).

mod dir;
mod record;
mod state;

pub use dir::PrivateDir;
pub use record::{
    current_network_namespace, namespace_id, process_exe, process_start_time, NamespaceId, PolicyRecord,
    Record, CURRENT_NAMESPACE,
};
pub use state::{forget, record, scan, DeadOwner, OwnerInfo, ScannedOwner, StateFile, STATE_DIR};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error("create the state directory {path}: {source}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing the state directory {path}: {why}")]
    UnsafeStateDir { path: PathBuf, why: String },
    #[error("lock {path}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an ipsec-lab state file: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("create a private temporary directory in {parent}: {source}")]
    TempDir {
        parent: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl OwnerError {
    /// True when the cause is a missing privilege (the state directory is root's).
    pub fn is_permission(&self) -> bool {
        let source = match self {
            OwnerError::StateDir { source, .. }
            | OwnerError::Lock { source, .. }
            | OwnerError::Write { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        )
    }
}
