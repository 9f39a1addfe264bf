//! Errors of the kernel handle: one variant per cause the user can act on, each with the
//! operation that failed (`install SA spi=0x101 198.18.0.1->198.18.0.2: …`).

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::config::{KernelAlgorithm, PolicyId, SaId, SpecError, TrafficSelector};

/// What the lab was doing when the kernel said no.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    InstallSa(SaId),
    DeleteSa(SaId),
    ReadSa(SaId),
    ListSas,
    InstallPolicy {
        selector: TrafficSelector,
        direction: &'static str,
    },
    DeletePolicy(PolicyId),
    ListPolicies,
    FlushSas,
    FlushPolicies,
    OpenSocket,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::InstallSa(id) => write!(f, "install SA {id}"),
            Operation::DeleteSa(id) => write!(f, "delete SA {id}"),
            Operation::ReadSa(id) => write!(f, "read SA {id}"),
            Operation::ListSas => f.write_str("list SAs"),
            Operation::InstallPolicy { selector, direction } => {
                write!(f, "install policy {selector} dir {direction}")
            }
            Operation::DeletePolicy(id) => write!(f, "delete policy {id}"),
            Operation::ListPolicies => f.write_str("list policies"),
            Operation::FlushSas => f.write_str("flush SAs"),
            Operation::FlushPolicies => f.write_str("flush policies"),
            Operation::OpenSocket => f.write_str("open netlink XFRM socket"),
        }
    }
}

/// The algorithms an SA needed, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Algorithms(pub Vec<KernelAlgorithm>);

impl fmt::Display for Algorithms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|a| a.name()).collect();
        f.write_str(&names.join(" + "))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum XfrmError {
    #[error("{op}: kernel has no ESP support (CONFIG_INET_ESP)")]
    NoEsp { op: Operation },
    #[error("{op}: kernel lacks the crypto algorithm {algorithms} (module not loaded or not built)")]
    MissingAlgorithm { op: Operation, algorithms: Algorithms },
    #[error("{op}: an SA with that SPI already exists; the lab never replaces it (if it is a lab leftover, run `ipsec-lab clean`)")]
    SaExists { op: Operation },
    #[error("{op}: a policy with that selector and direction already exists; the lab never replaces it")]
    PolicyExists { op: Operation },
    #[error("{op}: no such object in the kernel")]
    NotFound { op: Operation },
    #[error("{op}: permission denied (needs root / CAP_NET_ADMIN)")]
    NotPermitted { op: Operation },
    #[error("{op}: kernel has no netlink XFRM (CONFIG_XFRM_USER)")]
    NoXfrmNetlink { op: Operation },
    #[error("{op}: kernel refused: {source}")]
    Kernel {
        op: Operation,
        #[source]
        source: io::Error,
    },
    #[error("{op}: netlink socket: {source}")]
    Socket {
        op: Operation,
        #[source]
        source: io::Error,
    },
    #[error("{op}: cannot decode the kernel's reply: {detail}")]
    Decode { op: Operation, detail: String },
    #[error("enter network namespace {path}: {source}")]
    Namespace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("invalid spec: {0}")]
    Spec(#[from] SpecError),
}

impl XfrmError {
    /// Maps a kernel errno for `op` to its cause. `algorithms` names what an SA add needed.
    pub(crate) fn from_errno(op: Operation, errno: i32, algorithms: Option<&[KernelAlgorithm]>) -> XfrmError {
        let is_sa_add = matches!(op, Operation::InstallSa(_));
        let is_policy_add = matches!(op, Operation::InstallPolicy { .. });
        match errno {
            libc::EPROTONOSUPPORT if is_sa_add => XfrmError::NoEsp { op },
            libc::ENOENT | libc::ENOSYS if is_sa_add => XfrmError::MissingAlgorithm {
                op,
                algorithms: Algorithms(algorithms.unwrap_or_default().to_vec()),
            },
            libc::EEXIST if is_sa_add => XfrmError::SaExists { op },
            libc::EEXIST if is_policy_add => XfrmError::PolicyExists { op },
            libc::ENOENT | libc::ESRCH => XfrmError::NotFound { op },
            libc::EPERM | libc::EACCES => XfrmError::NotPermitted { op },
            _ => XfrmError::Kernel {
                op,
                source: io::Error::from_raw_os_error(errno),
            },
        }
    }

    /// True when the cause is the kernel lacking ESP.
    pub fn is_no_esp(&self) -> bool {
        matches!(self, XfrmError::NoEsp { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::Spi;

    fn install() -> Operation {
        Operation::InstallSa(SaId {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.0.2".parse().unwrap(),
            spi: Spi(0x101),
        })
    }

    #[test]
    fn no_esp_message_names_the_sa_and_the_kernel_option() {
        let e = XfrmError::from_errno(install(), libc::EPROTONOSUPPORT, None);
        assert_eq!(
            e.to_string(),
            "install SA spi=0x101 198.18.0.1->198.18.0.2: kernel has no ESP support (CONFIG_INET_ESP)"
        );
        assert!(e.is_no_esp());
    }

    #[test]
    fn missing_algorithm_names_it() {
        let algs = [KernelAlgorithm::CbcAes, KernelAlgorithm::HmacSha256];
        let e = XfrmError::from_errno(install(), libc::ENOSYS, Some(&algs));
        assert!(e.to_string().contains("cbc(aes) + hmac(sha256)"), "{e}");
    }

    #[test]
    fn eexist_on_sa_add_says_the_lab_will_not_replace_it() {
        let e = XfrmError::from_errno(install(), libc::EEXIST, None);
        assert!(matches!(e, XfrmError::SaExists { .. }));
        assert!(e.to_string().contains("never replaces"), "{e}");
    }
}
