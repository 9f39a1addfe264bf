//! Private temporary directories: fresh, random name, mode 0700, removed on drop, recorded
//! so `clean` removes them after a SIGKILL.

use std::path::{Path, PathBuf};

use crate::{forget, record, OwnerError, Record};

/// A temporary directory only this user can enter, never reused.
#[derive(Debug)]
pub struct PrivateDir {
    dir: tempfile::TempDir,
    recorded: bool,
}

impl PrivateDir {
    /// Creates `$TMPDIR/<prefix>XXXXXX` and records it. Without the right to write the
    /// state directory (not root) the directory is still private and removed on drop; only
    /// a SIGKILL would leave it.
    pub fn new(prefix: &str) -> Result<PrivateDir, OwnerError> {
        let parent = std::env::temp_dir();
        // tempfile makes the directory with mode 0700 under a random name, failing rather
        // than reusing one that exists.
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&parent)
            .map_err(|source| OwnerError::TempDir { parent, source })?;
        let recorded = match record(Record::Path {
            path: dir.path().to_path_buf(),
        }) {
            Ok(()) => true,
            Err(e) if e.is_permission() => false,
            Err(e) => return Err(e),
        };
        Ok(PrivateDir { dir, recorded })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let path = self.dir.path().to_path_buf();
        let removed = std::fs::remove_dir_all(&path);
        if self.recorded && (removed.is_ok() || !path.exists()) {
            forget(&Record::Path { path });
        }
    }
}
