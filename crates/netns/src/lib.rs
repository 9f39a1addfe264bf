//! Lab topologies: network namespaces, veth pairs, addresses and routes, created over
//! rtnetlink (never by shelling out to `ip`), and removed again by guards on drop.
//!
//! Namespaces are made the way iproute2 makes them (a bind mount under `/run/netns`), so
//! `ip netns exec`, `ip -n` and `ipsec-lab clean` all see them. Every namespace made here
//! is recorded in this process's state file (crate `owner`) until it is deleted, so
//! `clean` removes only what a dead run recorded, never a namespace by its name alone.
//!
//! Leaves out: what runs over the topology (`traffic`, the backends) and IPsec state
//! (`xfrm`).

mod namespace;
pub mod netem;
mod topology;

pub use namespace::{delete_by_name, is_lab_name, lab_namespaces, Namespace};
pub use topology::{Topology, TopologySpec};

/// Prefix of every namespace the lab creates.
pub const LAB_PREFIX: &str = "ipl-";

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("this command needs CAP_NET_ADMIN to create network namespaces: run it as root")]
    NotPermitted,
    #[error(
        "network namespace {name} already exists: another run or a leftover owns it (run `ipsec-lab clean`)"
    )]
    Exists { name: String },
    #[error(
        "{name:?} is not a namespace name the lab gives ({prefix} then letters, digits, '-' or '_'): \
         the lab makes and removes no other namespace",
        prefix = LAB_PREFIX
    )]
    NotLabName { name: String },
    #[error("/run/netns/{name} is not a network namespace's mount (a {what}): left alone")]
    NotNamespace { name: String, what: String },
    #[error("network namespace {name} does not exist")]
    Missing { name: String },
    #[error("{action} for namespace {name}: {source}")]
    Sys {
        action: &'static str,
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{action} in namespace {namespace}: {source}")]
    Netlink {
        action: String,
        namespace: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("{what} not found in namespace {namespace}")]
    NotFound { what: String, namespace: String },
    #[error("link {device} in namespace {namespace} did not come up within {waited:?}")]
    NotUp {
        device: String,
        namespace: String,
        waited: std::time::Duration,
    },
    #[error("a thread running in namespace {name} panicked")]
    ThreadPanicked { name: String },
    #[error("recording a namespace in the state file: {0}")]
    Record(#[source] owner::OwnerError),
    #[error("--netem needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM): run with --vm (the stock kernel has it as module sch_netem) or `modprobe sch_netem`")]
    NoNetem,
}

impl NetnsError {
    /// True when the cause is a missing privilege or kernel feature, not a failed run.
    pub fn is_capability(&self) -> bool {
        match self {
            NetnsError::NotPermitted | NetnsError::NoNetem => true,
            NetnsError::Record(e) => e.is_permission(),
            NetnsError::Sys { source, .. } => {
                matches!(
                    source.raw_os_error(),
                    Some(libc::EPERM | libc::EACCES | libc::EINVAL | libc::ENOSYS)
                )
            }
            _ => false,
        }
    }
}

/// A run id short enough to fit interface names (IFNAMSIZ is 16) and unlikely to repeat:
/// two runs at once never share names.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mixed = (u64::from(std::process::id()) << 20) ^ u64::from(nanos).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("{:06x}", (mixed ^ (mixed >> 29)) & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 22): `delete_by_name("../../tmp/x")` unmounted and deleted /tmp/x.
    /// A name that is not the lab's is refused before any system call.
    #[test]
    fn only_lab_names_are_taken_as_namespace_names() {
        assert!(is_lab_name("ipl-1a2b3c-a") && is_lab_name("ipl-dead_1"));
        let long = format!("ipl-{}", "a".repeat(61));
        for bad in [
            "",
            "ipl-",
            "other-ns",
            "../../tmp/x",
            "ipl-../../x",
            "ipl-a/b",
            "ipl-a b",
            "ipl-\u{e4}",
            "ipl-x\n",
            &long,
        ] {
            assert!(!is_lab_name(bad), "{bad:?}");
            assert!(
                matches!(delete_by_name(bad), Err(NetnsError::NotLabName { .. })),
                "{bad:?}"
            );
            assert!(
                matches!(Namespace::create(bad), Err(NetnsError::NotLabName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn run_ids_fit_interface_names() {
        let id = super::new_run_id();
        assert_eq!(id.len(), 6);
        assert!(format!("{}{id}-a", super::LAB_PREFIX).len() < 16);
    }
}
