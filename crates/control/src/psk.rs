//! The pre-shared key: 32 random bytes, stored as 64 hexadecimal characters and a newline
//! (what `ipsec-lab psk generate` prints). The file must be readable by its owner only: a
//! key anyone on the machine can read authenticates no one. And its owner must be root or
//! the user running ipsec-lab (as ssh requires of its keys): another user could change the
//! key under a root `serve` and so choose who it lets in.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

pub const PSK_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum PskError {
    /// The OS error is the source, not part of this text: `{:#}` prints the chain once.
    #[error("cannot read the pre-shared key file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the pre-shared key file {path} has mode {mode:04o}: it must not be readable by group or others; \
         run `chmod 600 {path}`"
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error(
        "the pre-shared key file {path} belongs to uid {uid}: only root or the user running ipsec-lab \
         (uid {euid}) may own it, or another user could change the key; run `chown {euid} {path}`"
    )]
    Owner { path: PathBuf, uid: u32, euid: u32 },
    #[error(
        "the pre-shared key file {path} does not exist: make one with `ipsec-lab psk generate > {path}` \
         and copy it to both hosts"
    )]
    Missing { path: PathBuf },
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("the pre-shared key {origin}must be {want} hexadecimal characters (from `ipsec-lab psk generate`), found {found}")]
    Format {
        origin: String,
        want: usize,
        found: String,
    },
    #[error("reading random bytes from the operating system: {0}")]
    Random(getrandom::Error),
}

/// 32 key bytes, wiped on drop, never shown by `Debug`.
#[derive(Clone)]
pub struct Psk(Zeroizing<[u8; PSK_LEN]>);

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Psk(<redacted>)")
    }
}

impl Psk {
    pub fn generate() -> Result<Psk, PskError> {
        let mut bytes = Zeroizing::new([0u8; PSK_LEN]);
        getrandom::fill(bytes.as_mut()).map_err(PskError::Random)?;
        Ok(Psk(bytes))
    }

    pub fn from_bytes(bytes: [u8; PSK_LEN]) -> Psk {
        Psk(Zeroizing::new(bytes))
    }

    pub fn as_bytes(&self) -> &[u8; PSK_LEN] {
        &self.0
    }

    /// The file format: 64 lowercase hex characters and a newline.
    pub fn to_file_text(&self) -> Zeroizing<String> {
        let mut s = Zeroizing::new(String::with_capacity(2 * PSK_LEN + 1));
        for b in self.0.iter() {
            s.push(hex_digit(b >> 4));
            s.push(hex_digit(b & 0xf));
        }
        s.push('\n');
        s
    }

    /// Parses the file format; surrounding whitespace is allowed.
    pub fn parse(text: &str, origin: &str) -> Result<Psk, PskError> {
        let t = text.trim();
        let describe = || {
            if t.len() == 2 * PSK_LEN {
                "a character that is not hexadecimal".to_string()
            } else {
                format!("{} characters", t.len())
            }
        };
        let bad = || PskError::Format {
            origin: origin.to_string(),
            want: 2 * PSK_LEN,
            found: describe(),
        };
        if t.len() != 2 * PSK_LEN {
            return Err(bad());
        }
        let mut bytes = Zeroizing::new([0u8; PSK_LEN]);
        for (i, pair) in t.as_bytes().chunks(2).enumerate() {
            let hi = hex_value(pair[0]).ok_or_else(bad)?;
            let lo = hex_value(pair[1]).ok_or_else(bad)?;
            bytes[i] = hi << 4 | lo;
        }
        Ok(Psk(bytes))
    }

    /// Reads a key file, refusing one that group or others may read or write, or that
    /// someone other than root or this user owns.
    pub fn load(path: &Path) -> Result<Psk, PskError> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let read = |source| PskError::Read {
            path: path.to_path_buf(),
            source,
        };
        // Looked at before opening, so a FIFO or device is refused, not opened.
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => PskError::Missing {
                path: path.to_path_buf(),
            },
            _ => read(e),
        })?;
        if !meta.is_file() {
            return Err(PskError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        // The checks below are on the file opened, whatever the path names by now.
        let mut file = std::fs::File::open(path).map_err(read)?;
        let meta = file.metadata().map_err(read)?;
        if !meta.is_file() {
            return Err(PskError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if meta.uid() != 0 && meta.uid() != euid {
            return Err(PskError::Owner {
                path: path.to_path_buf(),
                uid: meta.uid(),
                euid,
            });
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(PskError::Permissions {
                path: path.to_path_buf(),
                mode,
            });
        }
        let mut text = Zeroizing::new(String::new());
        file.read_to_string(&mut text).map_err(read)?;
        Psk::parse(&text, &format!("in {} ", path.display()))
    }
}

fn hex_digit(v: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(v)])
}

pub(crate) fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(name: &str, text: &str, mode: u32) -> PathBuf {
        let path = std::env::temp_dir().join(format!("ipl-psk-test-{}-{name}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn generated_key_round_trips_through_its_file_format() {
        let k = Psk::generate().unwrap();
        let text = k.to_file_text();
        assert_eq!(text.len(), 65);
        assert_eq!(Psk::parse(&text, "").unwrap().as_bytes(), k.as_bytes());
        assert_ne!(Psk::generate().unwrap().as_bytes(), k.as_bytes());
    }

    #[test]
    fn bad_text_is_refused_naming_the_format() {
        for text in ["", "abcd", &"zz".repeat(32), &"ab".repeat(33)] {
            let e = Psk::parse(text, "").unwrap_err().to_string();
            assert!(e.contains("64 hexadecimal"), "{e}");
        }
        assert!(Psk::parse(&format!("  {}\n", "AB".repeat(32)), "").is_ok());
    }

    #[test]
    fn group_or_world_readable_files_are_refused() {
        let text = Psk::generate().unwrap().to_file_text();
        let ok = temp_file("ok", &text, 0o600);
        assert!(Psk::load(&ok).is_ok());
        for (name, mode) in [("g", 0o640), ("o", 0o604), ("w", 0o620)] {
            let p = temp_file(name, &text, mode);
            let e = Psk::load(&p).unwrap_err();
            assert!(matches!(e, PskError::Permissions { .. }), "{e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
            std::fs::remove_file(p).unwrap();
        }
        std::fs::remove_file(ok).unwrap();
    }

    /// Regression: the missing-file error said the OS error twice ("...: No such file or
    /// directory (os error 2): No such file or directory (os error 2)").
    #[test]
    fn a_missing_file_is_named_once_with_the_fix() {
        let path = std::env::temp_dir().join(format!("ipl-psk-none-{}", std::process::id()));
        let e = Psk::load(&path).unwrap_err();
        let chain = anyhow_like(&e);
        assert!(chain.contains("psk generate >"), "{chain}");
        assert!(!chain.contains("os error"), "{chain}");
        let unreadable = Psk::load(Path::new("/proc/self/mem")).unwrap_err();
        let chain = anyhow_like(&unreadable);
        assert_eq!(chain.matches("os error").count(), 1, "{chain}");
    }

    /// The error and its sources joined by ": ", as the binary prints them.
    fn anyhow_like(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            out = format!("{out}: {s}");
            source = s.source();
        }
        out
    }

    /// Regression (issue 22): a 0600 key file owned by another user was accepted, so that
    /// user could change the key a root `serve` trusts.
    #[test]
    fn a_key_file_owned_by_another_user_is_refused() {
        if !testcap::root("a_key_file_owned_by_another_user_is_refused") {
            return;
        }
        let text = Psk::generate().unwrap().to_file_text();
        let path = temp_file("owner", &text, 0o600);
        assert!(Psk::load(&path).is_ok(), "root's own file");
        // nobody (65534) stands for any other user.
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let e = Psk::load(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(
                e,
                PskError::Owner {
                    uid: 65534,
                    euid: 0,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("belongs to uid 65534"), "{e}");
        assert!(e.to_string().contains("chown 0 "), "{e}");
    }

    #[test]
    fn debug_does_not_show_the_key() {
        let k = Psk::from_bytes([0xab; PSK_LEN]);
        assert!(!format!("{k:?}").contains("ab"));
    }
}
