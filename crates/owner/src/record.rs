//! The typed records of a state file.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The name a record gives the namespace a process was in when it created the object, when
/// that namespace cannot be identified (objects in the lab's own namespaces go with their
/// namespace and need no record).
pub const CURRENT_NAMESPACE: &str = "(current)";

/// This process's network namespace as the kernel names it (`net:[INODE]`), so `clean`,
/// wherever it runs, acts on the namespace the object is really in: a `serve` started with
/// `ip netns exec` records its SAs in that namespace, not in the host's.
pub fn current_network_namespace() -> String {
    namespace_id(std::path::Path::new("/proc/self/ns/net")).unwrap_or_else(|| CURRENT_NAMESPACE.into())
}

/// The `net:[INODE]` name of the namespace at `path` (/proc/PID/ns/net or /run/netns/NAME).
pub fn namespace_id(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(path).ok()?.ino();
    Some(format!("net:[{inode}]"))
}

/// One object a process created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A named network namespace under /run/netns.
    Namespace {
        name: String,
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
    /// A crypto driver whose priority was changed, with the value it had before.
    DriverPriority {
        driver: String,
        original: u32,
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
    fn this_process_has_a_start_time() {
        assert!(process_start_time(std::process::id()).is_some_and(|t| t > 0));
        assert_eq!(process_start_time(u32::MAX), None);
    }

    #[test]
    fn records_are_tagged_json() {
        let r = Record::Namespace {
            name: "ipl-1-a".into(),
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"kind":"namespace","name":"ipl-1-a"}"#
        );
        let p = Record::DriverPriority {
            driver: "cbc-aes-aesni".into(),
            original: 400,
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"driver_priority","driver":"cbc-aes-aesni","original":400}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), p);
    }
}
