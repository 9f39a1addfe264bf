//! One named network namespace, iproute2-compatible (`/run/netns/NAME`).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};

use crate::{NetnsError, LAB_PREFIX};

const NETNS_DIR: &str = "/run/netns";
/// Name and path of [`Namespace::current`]; the parentheses keep it apart from lab names.
const CURRENT: &str = "(current)";
const CURRENT_PATH: &str = "/proc/self/ns/net";

/// A named network namespace. Holds an open handle, so code can enter it at any time; the
/// namespace itself lives until [`Namespace::delete`] (or [`clean`]) removes its name and the
/// last thread or process inside it exits.
#[derive(Debug)]
pub struct Namespace {
    name: String,
    handle: File,
}

impl Namespace {
    /// Creates a new, empty namespace (`ip netns add NAME`). Fails with
    /// [`NetnsError::Exists`] rather than reusing one: the lab never adopts what it did not make.
    pub fn create(name: &str) -> Result<Namespace, NetnsError> {
        check_lab_name(name)?;
        let sys = |action, source| NetnsError::Sys {
            action,
            name: name.to_string(),
            source,
        };
        prepare_netns_dir().map_err(|e| sys("prepare /run/netns", e))?;
        let path = path_of(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(NetnsError::Exists {
                    name: name.to_string(),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(NetnsError::NotPermitted),
            Err(e) => return Err(sys("create mount point", e)),
        }
        // unshare() moves only the calling thread, so a scratch thread makes the namespace
        // and pins it with a bind mount before it exits; this thread stays where it was.
        let target = path.clone();
        let made = std::thread::spawn(move || -> io::Result<()> {
            unshare(CloneFlags::CLONE_NEWNET)?;
            mount(
                Some("/proc/thread-self/ns/net"),
                &target,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )?;
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")));
        if let Err(e) = made {
            let _ = std::fs::remove_file(&path);
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) => NetnsError::NotPermitted,
                _ => sys("unshare and bind-mount", e),
            });
        }
        // Recorded before anything else can fail, so `clean` finds it after a SIGKILL.
        let recorded = owner::record(owner::Record::namespace(name));
        if let Err(e) = recorded {
            let _ = delete_by_name(name);
            return Err(NetnsError::Record(e));
        }
        Namespace::open(name)
    }

    /// Opens an existing namespace by name.
    pub fn open(name: &str) -> Result<Namespace, NetnsError> {
        let handle = File::open(path_of(name)).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => NetnsError::Missing {
                name: name.to_string(),
            },
            _ => NetnsError::Sys {
                action: "open",
                name: name.to_string(),
                source: e,
            },
        })?;
        Ok(Namespace {
            name: name.to_string(),
            handle,
        })
    }

    /// The namespace this process is in now (a real host's, for a two-machine run), for code
    /// that takes a `Namespace`. It has no name under /run/netns, and [`Namespace::delete`]
    /// leaves it alone.
    pub fn current() -> Result<Namespace, NetnsError> {
        let handle = File::open(CURRENT_PATH).map_err(|e| NetnsError::Sys {
            action: "open",
            name: CURRENT.to_string(),
            source: e,
        })?;
        Ok(Namespace {
            name: CURRENT.to_string(),
            handle,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The open namespace handle, for netlink attributes such as IFLA_NET_NS_FD. Valid as
    /// long as `self` is.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.handle.as_raw_fd()
    }

    pub fn path(&self) -> PathBuf {
        if self.name == CURRENT {
            return PathBuf::from(CURRENT_PATH);
        }
        path_of(&self.name)
    }

    /// Moves the calling thread into this namespace. Only for threads the caller owns and
    /// will not return to a pool: setns is per thread and sticks.
    /// A thread already there (the process's own namespace, for a server) stays put: setns
    /// would only ask for CAP_SYS_ADMIN, which a hardened service does not have.
    pub fn enter_current_thread(&self) -> Result<(), NetnsError> {
        if self.is_this_threads() {
            return Ok(());
        }
        setns(self.handle.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| NetnsError::Sys {
            action: "setns",
            name: self.name.clone(),
            source: e.into(),
        })
    }

    /// True when the calling thread is in this namespace already (same namespace inode).
    fn is_this_threads(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (
            self.handle.metadata(),
            std::fs::metadata("/proc/thread-self/ns/net"),
        ) {
            (Ok(ours), Ok(here)) => ours.dev() == here.dev() && ours.ino() == here.ino(),
            _ => false,
        }
    }

    /// Spawns a named OS thread that enters this namespace before running `f`. Sockets, TUN
    /// devices and netlink handles created by `f` belong to this namespace for good.
    pub fn spawn<T, F>(&self, thread_name: &str, f: F) -> Result<std::thread::JoinHandle<T>, NetnsError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let handle = self.handle.try_clone().map_err(|e| NetnsError::Sys {
            action: "duplicate handle",
            name: self.name.clone(),
            source: e,
        })?;
        let name = self.name.clone();
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let join = std::thread::Builder::new()
            .name(thread_name.to_string())
            .spawn(move || {
                let entered = Namespace { name, handle }.enter_current_thread();
                let failed = entered.is_err();
                let _ = entered_tx.send(entered);
                if failed {
                    // The caller gets the error from the channel; unwind quietly (no panic
                    // hook) so `f` never runs outside the namespace.
                    std::panic::resume_unwind(Box::new(()));
                }
                f()
            })
            .map_err(|e| NetnsError::Sys {
                action: "spawn thread",
                name: self.name.clone(),
                source: e,
            })?;
        entered_rx.recv().map_err(|_| NetnsError::ThreadPanicked {
            name: self.name.clone(),
        })??;
        Ok(join)
    }

    /// Runs `f` to completion on a thread inside this namespace.
    pub fn run<T, F>(&self, f: F) -> Result<T, NetnsError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.spawn("ipl-netns-run", f)?
            .join()
            .map_err(|_| NetnsError::ThreadPanicked {
                name: self.name.clone(),
            })
    }

    /// A command that runs `program` inside this namespace (`ip netns exec NAME program`).
    /// The child gets SIGTERM if the lab dies, so no helper process outlives a killed run.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        let fd = self.handle.as_raw_fd();
        // SAFETY: pre_exec runs between fork and exec; setns and prctl are async-signal-safe
        // system calls and touch no memory the parent owns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// An rtnetlink handle whose socket lives in this namespace. Must be called inside a tokio
    /// runtime; the connection task runs on it.
    pub async fn rtnetlink(&self) -> Result<rtnetlink::Handle, NetnsError> {
        let runtime = tokio::runtime::Handle::current();
        let (connection, handle, _) = self
            .run(move || {
                // The socket must be made inside the namespace; registering it with the
                // reactor needs the runtime's context.
                let _guard = runtime.enter();
                rtnetlink::new_connection()
            })?
            .map_err(|e| NetnsError::Sys {
                action: "open rtnetlink socket",
                name: self.name.clone(),
                source: e,
            })?;
        tokio::spawn(connection);
        Ok(handle)
    }

    /// Removes the namespace's name (`ip netns del NAME`).
    pub fn delete(self) -> Result<(), NetnsError> {
        let Namespace { name, handle } = self;
        drop(handle);
        if name == CURRENT {
            return Ok(());
        }
        delete_by_name(&name)
    }
}

fn path_of(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Makes /run/netns a shared mount point, as iproute2 does, so namespace mounts made here are
/// seen by other mount namespaces (and `ip netns` in them).
fn prepare_netns_dir() -> io::Result<()> {
    std::fs::create_dir_all(NETNS_DIR)?;
    let shared = || {
        mount(
            None::<&str>,
            NETNS_DIR,
            Some("none"),
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    match shared() {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EINVAL) => {
            mount(
                Some(NETNS_DIR),
                NETNS_DIR,
                Some("none"),
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )?;
            shared().map_err(io::Error::from)
        }
        Err(e) => Err(e.into()),
    }
}

/// True for a name the lab gives its namespaces: [`LAB_PREFIX`], then ASCII letters, digits,
/// '-' and '_', at most 64 characters in all. Such a name is one file in /run/netns, never a
/// path elsewhere (no '/', no "..").
pub fn is_lab_name(name: &str) -> bool {
    name.len() <= 64
        && name.strip_prefix(LAB_PREFIX).is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn check_lab_name(name: &str) -> Result<(), NetnsError> {
    if is_lab_name(name) {
        Ok(())
    } else {
        Err(NetnsError::NotLabName {
            name: name.to_string(),
        })
    }
}

/// Removes the name of a namespace (`ip netns del NAME`). Processes inside are not
/// touched: those the lab started are stopped by their owners (or by `clean`, by recorded
/// pid), and the namespace itself goes once the last of them exits.
///
/// Only a lab name ([`is_lab_name`]) is taken, and only a namespace's mount (or the empty
/// file a failed create left) is removed: the name comes from state files, which `clean`
/// does not trust to name a path or a mount.
pub fn delete_by_name(name: &str) -> Result<(), NetnsError> {
    check_lab_name(name)?;
    let path = path_of(name);
    let sys = |action, source| NetnsError::Sys {
        action,
        name: name.to_string(),
        source,
    };
    match what_is_there(&path) {
        Ok(There::Namespace) => match umount2(&path, MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(sys("unmount", e.into())),
        },
        Ok(There::EmptyFile) => {}
        Ok(There::Other(what)) => {
            return Err(NetnsError::NotNamespace {
                name: name.to_string(),
                what,
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(sys("inspect", e)),
    }
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(sys("remove", e)),
    }
    owner::forget(&owner::Record::namespace(name));
    Ok(())
}

/// What a /run/netns entry is.
enum There {
    /// A network namespace bound there (nsfs).
    Namespace,
    /// The empty regular file that is the mount point, with nothing mounted on it.
    EmptyFile,
    /// Anything else (a directory, a symlink, another file system mounted there).
    Other(String),
}

fn what_is_there(path: &Path) -> io::Result<There> {
    // nsfs's magic number (linux/magic.h NSFS_MAGIC).
    const NSFS_MAGIC: i64 = 0x6e73_6673;
    let meta = std::fs::symlink_metadata(path)?;
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Ok(There::Other("symlink".into()));
    }
    let magic = nix::sys::statfs::statfs(path)
        .map_err(io::Error::from)?
        .filesystem_type()
        .0 as i64;
    if magic == NSFS_MAGIC {
        return Ok(There::Namespace);
    }
    if is_mount_point(path) {
        return Ok(There::Other("mount of another file system".into()));
    }
    if kind.is_file() && meta.len() == 0 {
        return Ok(There::EmptyFile);
    }
    let what = if kind.is_dir() {
        "directory"
    } else if kind.is_file() {
        "file with content"
    } else {
        "special file"
    };
    Ok(There::Other(what.into()))
}

/// True when something is mounted on `path` (or mountinfo cannot be read: then nothing is
/// removed).
fn is_mount_point(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    let wanted = path.to_string_lossy();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mount_point| unescape_mountinfo(mount_point) == wanted)
}

/// mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape_mountinfo(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Names of the namespaces on this machine that carry the lab prefix, whoever made them.
pub fn lab_namespaces() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(LAB_PREFIX))
        .collect();
    names.sort();
    names
}
