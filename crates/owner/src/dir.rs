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
        use std::os::unix::fs::PermissionsExt;
        let parent = std::env::temp_dir();
        let private = || std::fs::Permissions::from_mode(0o700);
        // tempfile makes the directory under a random name, failing rather than reusing one
        // that exists; with no mode given it would be 0777 less the umask (0755 under 022).
        // Asked for 0700 it is never wider, and the chmod undoes a umask that masks the
        // owner's bits too.
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .permissions(private())
            .tempdir_in(&parent)
            .map_err(|source| OwnerError::TempDir {
                parent: parent.clone(),
                source,
            })?;
        std::fs::set_permissions(dir.path(), private())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 22): the directory was 0755 under umask 022.
    #[test]
    fn a_private_dir_is_0700_under_umask_022() {
        use nix::sys::stat::{umask, Mode};
        use std::os::unix::fs::MetadataExt;
        // 022 is the usual umask, so other tests of this binary are not disturbed by it.
        let before = umask(Mode::from_bits_truncate(0o022));
        let dir = PrivateDir::new("ipl-owner-test-");
        umask(before);
        let dir = dir.unwrap();
        assert_eq!(std::fs::metadata(dir.path()).unwrap().mode() & 0o7777, 0o700);
    }
}
