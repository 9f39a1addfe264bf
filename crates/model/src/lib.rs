//! The lab's vocabulary: validated run plans, cipher suites, byte sizes, the versioned result
//! schema, the measurement environment and statistics.
//!
//! Pure data and validation. Leaves out everything that acts: kernel objects (`netns`,
//! `xfrm`), traffic (`traffic`) and printing (the `ipsec-lab` binary).

pub mod backend;
pub mod ceiling;
pub mod encap;
pub mod env;
pub mod evidence;
pub mod family;
pub mod kernels;
pub mod matrix;
pub mod modes;
pub mod netem;
pub mod packets;
pub mod plan;
pub mod rekey;
pub mod report;
pub mod setup_rate;
pub mod size;
pub mod startup;
pub mod stats;
pub mod suite;
pub mod transfer;

/// `1 CPU`, `2 CPUs`: a count and its noun, plural unless the count is one. Every count the
/// lab prints with a noun goes through here ("1 CPUs", "1 rounds" were printed).
pub fn plural<N: Copy + std::fmt::Display + PartialEq + From<u8>>(count: N, noun: &str) -> String {
    if count == N::from(1) {
        format!("{count} {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

pub use backend::{Backend, Description};
pub use encap::{Encap, EncapError, EncapKind, NATT_PORT};
pub use env::Environment;
pub use family::{Addressing, Family, MIN_IPV6_MTU};
pub use modes::{Direction, Modes, ModesReport, ModesRequest};
pub use netem::{LinkConditions, NetemError, NetemSpec};
pub use plan::{
    check_payload, parse_seed, BackendPlan, CryptoChoice, IpsecMode, Link, PacketsRequest, Peer, Placement,
    PlanError, RunPlan, RunRequest, StrongswanPlan, UserspacePlan, VmKernel, Workload, XfrmPlan,
    DEFAULT_PEER_PORT, MIN_PAYLOAD,
};
pub use report::{ReportError, RunReport, SCHEMA_VERSION};
pub use size::ByteSize;
pub use stats::Summary;
pub use suite::{CipherSuite, Hmac, KeyBits, SuiteError};
pub use transfer::{CpuUsage, MachineCost, Transfer, TransferSide, LINE_RATE_SECONDS, MIN_STABLE_SECONDS};

#[cfg(test)]
mod plural_tests {
    #[test]
    fn one_is_singular_the_rest_plural() {
        assert_eq!(super::plural(1usize, "CPU"), "1 CPU");
        assert_eq!(super::plural(0u64, "round"), "0 rounds");
        assert_eq!(super::plural(2u32, "CPU"), "2 CPUs");
    }
}
