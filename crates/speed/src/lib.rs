//! `ipsec-lab speed`: crypto microbenchmarks across implementations — the lab's
//! `openssl speed -evp`, with the implementations the userspace tunnel uses (from the
//! `crypto` crate), with and without hardware AES, beside openssl itself.
//!
//! Owns the timing method ([`measure`]), the per-packet operations ([`ops`]), the table and
//! JSON records ([`report`]), the `openssl speed` runner ([`openssl`]), the kernel probe
//! ([`kernel`]) and the subcommand's arguments ([`cli`]). Leaves the ciphers themselves to
//! `crypto` and the process entry point to the `ipsec-lab` binary.

pub mod af_alg;
pub mod cli;
pub mod kernel;
pub mod measure;
pub mod openssl;
pub mod ops;
pub mod report;
pub mod suite;

pub use cli::{run, run_plan, SpeedArgs, SpeedPlan, UsageError};
pub use measure::single_core_mb_per_s;
pub use report::{Record, SpeedReport, Units};
pub use suite::{CryptoOp, SpeedSuite};

/// Block sizes of the full table: openssl's, plus 1400 (a tunnel packet).
pub const BLOCK_SIZES: [usize; 7] = [16, 64, 256, 1024, 1400, 8192, 16384];

/// The subcommand name the binary registers; soft rows re-run it in a child process.
pub const SUBCOMMAND: &str = "speed";

#[derive(Debug, thiserror::Error)]
pub enum SpeedError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error("refusing to time a cipher that fails its known-answer tests: {0}")]
    SelfTest(#[from] crypto::SelfTestError),
    #[error("{implementation}: {source}")]
    Implementation {
        implementation: String,
        #[source]
        source: crypto::CryptoError,
    },
    #[error("{implementation} {suite}: {source}")]
    Crypto {
        implementation: String,
        suite: String,
        #[source]
        source: ops::OpError,
    },
    #[error("cannot start the software-AES child process: {0}")]
    Soft(#[from] crypto::soft::SoftError),
    #[error("cannot run the software-AES child process: {0}")]
    ChildSpawn(#[source] std::io::Error),
    #[error("the software-AES child process failed ({status})")]
    ChildFailed { status: std::process::ExitStatus },
    #[error("cannot read the software-AES child's results: {0}")]
    ChildOutput(#[source] serde_json::Error),
    #[error("cannot write {path}: {source}")]
    WriteJson {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl SpeedError {
    /// 2 for bad input (nothing was measured), 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            SpeedError::Usage(_) => 2,
            _ => 1,
        }
    }
}
