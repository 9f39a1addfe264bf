//! The typed records of a state file.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The name a record gives the namespace a process was in when it created the object, when
/// that namespace cannot be identified (objects in the lab's own namespaces go with their
/// namespace and need no record).
pub const CURRENT_NAMESPACE: &str = "(current)";

/// This process's network namespace as [`namespace_id`] names it, so `clean`, wherever it
/// runs, acts on the namespace the object is really in: a `serve` started with
/// `ip netns exec` records its SAs in that namespace, not in the host's.
pub fn current_network_namespace() -> String {
    namespace_id(std::path::Path::new("/proc/self/ns/net")).unwrap_or_else(|| CURRENT_NAMESPACE.into())
}

/// The name of the namespace at `path` (/proc/PID/ns/net or /run/netns/NAME):
/// `net:[INODE] cookie N`, or `net:[INODE]` where the kernel has no netns cookie (before
/// 5.14). The inode alone does not identify a namespace for long: the kernel gives a dead
/// namespace's inode to the next one. Its cookie (SO_NETNS_COOKIE) it never gives twice.
pub fn namespace_id(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(path).ok()?.ino();
    Some(match netns_cookie(path) {
        Some(cookie) => format!("net:[{inode}] cookie {cookie}"),
        None => format!("net:[{inode}]"),
    })
}

/// A namespace name [`namespace_id`] wrote, read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceId {
    pub inode: u64,
    pub cookie: Option<u64>,
}

/// The first inode the kernel hands out to namespaces it makes at run time
/// (PROC_DYNAMIC_FIRST); those of the initial namespaces lie below it, fixed.
const DYNAMIC_INODES: u64 = 0xF000_0000;

impl NamespaceId {
    /// `net:[INODE]` or `net:[INODE] cookie N`; None for anything else.
    pub fn parse(text: &str) -> Option<NamespaceId> {
        let digits = |t: &str| {
            (!t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<u64>().ok())
                .flatten()
        };
        let rest = text.strip_prefix("net:[")?;
        let (inode, rest) = rest.split_once(']')?;
        let cookie = match rest {
            "" => None,
            _ => Some(digits(rest.strip_prefix(" cookie ")?)?),
        };
        Some(NamespaceId {
            inode: digits(inode)?,
            cookie,
        })
    }

    /// Whether the name identifies one namespace for good: by its cookie, or by the fixed
    /// inode of the host's initial namespace (which never dies, so its inode is never
    /// another's). An inode of a namespace made at run time alone is reused once it dies.
    pub fn is_lasting(&self) -> bool {
        self.cookie.is_some() || self.inode < DYNAMIC_INODES
    }
}

/// The netns cookie of the namespace at `path`: a socket made in it says (SO_NETNS_COOKIE,
/// Linux 5.14). Entering another namespace needs CAP_SYS_ADMIN; done in a thread of its own.
fn netns_cookie(path: &std::path::Path) -> Option<u64> {
    if path == std::path::Path::new("/proc/self/ns/net") {
        return socket_netns_cookie();
    }
    let file = std::fs::File::open(path).ok()?;
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
            socket_netns_cookie()
        })
        .join()
        .ok()
        .flatten()
    })
}

/// The netns cookie of the calling thread's namespace.
fn socket_netns_cookie() -> Option<u64> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: plain socket(2); the fd is owned at once. A Unix socket needs no address, so
    // this works in a namespace whose loopback is down.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: a valid socket, and a buffer of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    (rc == 0 && len as usize == std::mem::size_of::<u64>()).then_some(cookie)
}

/// One object a process created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A named network namespace under /run/netns, with its [`namespace_id`] when it was
    /// made: `clean` removes only the namespace with that identity, not another one given
    /// the same name since.
    Namespace {
        name: String,
        /// None in records of versions before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// A process it started, with its identity: its start time (clock ticks since boot,
    /// /proc/PID/stat field 22) and its executable (/proc/PID/exe). `clean` stops only a
    /// process that matches both: a pid reused by another process never does.
    Process {
        pid: u32,
        start_time: u64,
        program: String,
        /// None in records of versions before it was recorded: such a process is not
        /// stopped, as nothing but its pid and start time says it is the lab's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exe: Option<PathBuf>,
    },
    /// An ESP SA in `namespace` (a /run/netns name, or [`CURRENT_NAMESPACE`]).
    XfrmSa {
        namespace: String,
        src: IpAddr,
        dst: IpAddr,
        spi: u32,
    },
    XfrmPolicy(PolicyRecord),
    /// A crypto template instance it built over NETLINK_CRYPTO (`pcrypt(...)`), removed
    /// with CRYPTO_MSG_DELALG.
    CryptoInstance {
        driver: String,
    },
    /// A crypto driver whose priority was changed, with the value it had before and the
    /// one it was given. `clean` puts it back only while it still holds the value given.
    DriverPriority {
        driver: String,
        original: u32,
        /// None in records of versions before it was recorded: such a priority is not
        /// put back, as nothing says the driver still holds what the lab set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        set: Option<u32>,
    },
    /// A temporary directory (or key file), removed whole.
    Path {
        path: PathBuf,
    },
}

/// An XFRM policy by selector and direction, as `ip xfrm policy delete` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRecord {
    pub namespace: String,
    pub src: IpAddr,
    pub src_len: u8,
    pub dst: IpAddr,
    pub dst_len: u8,
    /// IP protocol number, if the selector has one.
    pub proto: Option<u8>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    /// "in", "out" or "fwd".
    pub direction: String,
}

impl Record {
    /// A record of the namespace mounted at /run/netns/`name`, with its identity read now
    /// (none once it is gone: [`Record::same_object`] still finds the record by name).
    pub fn namespace(name: &str) -> Record {
        Record::Namespace {
            name: name.to_string(),
            id: namespace_id(&std::path::Path::new("/run/netns").join(name)),
        }
    }

    /// Whether both records are of the same object: equal, or namespaces of the same name
    /// (a namespace is forgotten by name once its identity can no longer be read).
    pub fn same_object(&self, other: &Record) -> bool {
        match (self, other) {
            (Record::Namespace { name: a, .. }, Record::Namespace { name: b, .. }) => a == b,
            _ => self == other,
        }
    }

    /// A process record for `pid`, with its start time and executable read now (after its
    /// exec: `Command::spawn` returns once the exec succeeded).
    pub fn process(pid: u32, program: &str) -> Record {
        Record::Process {
            pid,
            start_time: process_start_time(pid).unwrap_or(0),
            program: program.to_string(),
            exe: process_exe(pid).ok(),
        }
    }
}

/// The executable `pid` runs (the target of /proc/PID/exe; " (deleted)" appended when the
/// file was removed or replaced since).
pub fn process_exe(pid: u32) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
}

/// When `pid` started, in clock ticks since boot (/proc/PID/stat field 22); None when no
/// such process exists.
pub fn process_start_time(pid: u32) -> Option<u64> {
    procstat::Stat::of_process(pid).map(|s| s.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_record_carries_its_executable_and_old_records_still_read() {
        let Record::Process { exe, .. } = Record::process(std::process::id(), "self") else {
            unreachable!()
        };
        assert_eq!(exe, Some(std::env::current_exe().unwrap()));
        let old = r#"{"kind":"process","pid":7,"start_time":9,"program":"openvpn"}"#;
        assert_eq!(
            serde_json::from_str::<Record>(old).unwrap(),
            Record::Process {
                pid: 7,
                start_time: 9,
                program: "openvpn".into(),
                exe: None
            }
        );
    }

    #[test]
    fn namespace_names_read_back_and_only_lasting_ones_say_so() {
        let id = NamespaceId::parse;
        assert_eq!(
            id("net:[4026532290] cookie 17"),
            Some(NamespaceId {
                inode: 4026532290,
                cookie: Some(17)
            })
        );
        // An inode the kernel hands out again once its namespace dies...
        assert!(!id("net:[4026532290]").unwrap().is_lasting());
        // ...unlike the fixed one of the initial namespace, or one with its cookie.
        assert!(id("net:[4026531833]").unwrap().is_lasting());
        assert!(id("net:[4026532290] cookie 17").unwrap().is_lasting());
        for bad in [
            "net:[]",
            "net:[1x]",
            "net:[1] cookie",
            "net:[1] cookie x",
            "net:[1]x",
            "ipl-a",
            "(current)",
        ] {
            assert_eq!(id(bad), None, "{bad}");
        }
    }

    #[test]
    fn this_namespace_is_named_by_its_cookie() {
        let me = current_network_namespace();
        let parsed = NamespaceId::parse(&me).unwrap();
        // Every kernel this lab runs on has netns cookies (5.14+); an older one records the
        // inode alone, which `clean` then trusts only for the initial namespace.
        assert!(parsed.cookie.is_some(), "{me}");
        assert_eq!(current_network_namespace(), me, "the same name every time");
    }

    #[test]
    fn this_process_has_a_start_time() {
        assert!(process_start_time(std::process::id()).is_some_and(|t| t > 0));
        assert_eq!(process_start_time(u32::MAX), None);
    }

    #[test]
    fn records_are_tagged_json() {
        let r = Record::Namespace {
            name: "ipl-1-a".into(),
            id: None,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"kind":"namespace","name":"ipl-1-a"}"#
        );
        let p = Record::DriverPriority {
            driver: "cbc-aes-aesni".into(),
            original: 400,
            set: Some(500),
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"driver_priority","driver":"cbc-aes-aesni","original":400,"set":500}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), p);
    }
}
